//! `gridctl publish-matrix` and `gridctl inspect mapping`: whole GRDX matrices on
//! mappings (issue 34, docs/grdx.md), at their publishers and destinations.

use std::path::Path;
use std::process::ExitCode;

use grid_engine::grdx::Matrix;
use grid_reconciler::mappings::{self, Failure};

use crate::Output;
use crate::report::{NotDone, Rendered, emit};

/// `gridctl publish-matrix MAPPING --as HOST --file FILE [--op ID]`: exit 0 published
/// (or the id's earlier answer), 4 refused (nothing published), 3 unknown (the reply
/// was lost: the same command with the same --op asks again, publishing nothing twice).
pub fn publish(
    mapping: &str,
    host: &str,
    file: &Path,
    op: Option<&str>,
    output: &Output,
) -> anyhow::Result<ExitCode> {
    let json = output.json;
    let not_done = |outcome, detail: String| NotDone {
        id: serde_json::json!({ "mapping": mapping, "op": op }),
        outcome,
        detail,
    };
    // Read and checked whole before anything is sent.
    let matrix = match Matrix::read_file(file) {
        Ok(m) => m,
        Err(e) => {
            let detail = format!("{e}; nothing was sent");
            emit(&not_done("refused", detail.clone()), json);
            eprintln!("gridctl: {detail}");
            return Ok(ExitCode::from(4));
        }
    };
    match mappings::publish(&output.state, mapping, host, &matrix, op) {
        Ok(position) => {
            let text = format!(
                "published a {} × {} matrix on mapping {mapping} at position {position}\n",
                matrix.rows(),
                matrix.cols()
            );
            let value = serde_json::json!({
                "mapping": mapping,
                "op": op,
                "host": host,
                "position": position,
                "rows": matrix.rows(),
                "cols": matrix.cols(),
                "outcome": "succeeded",
            });
            emit(&Rendered::new(value, text), json);
            Ok(ExitCode::SUCCESS)
        }
        Err(Failure::Refused(reason)) => {
            emit(&not_done("refused", reason.clone()), json);
            eprintln!("gridctl: publish-matrix refused: {reason}");
            Ok(ExitCode::from(4))
        }
        Err(Failure::Unknown(e)) => {
            emit(&not_done("unknown", e.clone()), json);
            let again = match op {
                Some(op) => format!(
                    "the same command with --op {op} asks again and publishes nothing twice"
                ),
                None => format!(
                    "`gridctl inspect mapping {mapping} --host {host}` shows what the publisher holds (nothing is re-sent)"
                ),
            };
            eprintln!("gridctl: {e}\n  whether the matrix was published is unknown; {again}");
            Ok(ExitCode::from(3))
        }
    }
}

/// `gridctl inspect mapping MAPPING --host HOST`.
pub fn inspect(mapping: &str, host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    match mappings::held(&output.state, mapping, host) {
        Ok(held) => {
            let value = serde_json::to_value(&held)?;
            emit(&Rendered::new(value, held.render()), output.json);
            Ok(ExitCode::SUCCESS)
        }
        Err(reason) => {
            eprintln!("gridctl: {reason}");
            Ok(ExitCode::from(4))
        }
    }
}
