//! Remote Processes under execution grants (SPEC C5, C6): runs, their outcomes at the
//! receiver, the grant's units, crash cycles, and what must hold afterwards. One file
//! per concern: `run.rs` (run-process, expect-process, resolve-process), `grants.rs`
//! (expect-grants, expect-processes), `cycles.rs` (process-cycles); what they share —
//! the recorded runs and one answer's shape — is here.
//!
//! - `run-process HOST PROCESS as="CALLER" op="ID" [via="mailbox:BOX"|"mission:NAME"]
//!   [args="NAME=VALUE …"] [expect=OUTCOME] [same-as="OP"] [result="NAME=VALUE …"]
//!   [wait-ms=N]` —
//!   `gridctl process run HOST PROCESS --as CALLER --op ID [--via …] [--arg NAME=VALUE]…
//!   [--wait-ms N] --json`: CALLER's host runs PROCESS at HOST once under ID. The outcome must be
//!   `expect` (default `succeeded`); every answer is recorded in
//!   `$WORK/process-runs.jsonl`. `same-as` requires the answer's outcome and result to
//!   be identical to the first terminal answer recorded for OP; `result` requires each
//!   named value of the result (a number, or text) to be as given; a dotted name
//!   (`transfer.outcome`) reaches into a nested result.
//! - `expect-process OP host="H" [outcome=…] [units=…] [caller="C"]` — `gridctl inspect
//!   process OP --host H --json`: H holds a run of OP (`outcome="absent"`: it holds
//!   none) with that outcome and units (`reserved`, `consumed`, `released`, `unknown`,
//!   `none`).
//! - `resolve-process OP host="H" outcome=succeeded|failed` — `gridctl process resolve`:
//!   the receiver's operator closes an `unknown` run. Inside `expect-refused` it must be
//!   refused (exit 4), e.g. for a run that is not `unknown`.
//! - `expect-grants HOST [grant="NAME"] [allocated=N] [reserved=N] [consumed=N]
//!   [surrendered=N] [unknown=N] [available=N] [issued=N] [retired=#true|#false]
//!   [settled=#true|#false]` —
//!   `gridctl inspect grants --host HOST --json`: the totals over HOST's grants, or one
//!   grant's numbers. `available` is allocated − reserved − consumed − surrendered −
//!   unknown; `issued` the number of signed issues.
//! - `expect-processes HOST [demo-count=N] [succeeded=N] [failed=N] [unknown=N]
//!   [running=N]` — `gridctl inspect processes --host HOST --json`.
//! - `cancel-process OP host="CALLER" [expect=cancelled|finalized|unknown] [outcome=…]`
//!   — `gridctl process cancel`: see `cancel.rs`.
//! - `process-cycles receiver="R" caller="C" mailbox="M" cycles=N seed=S
//!   [marker="TEXT"]` — see `cycles.rs`.
//!
//! (`expect-stored-text` is in `stored.rs`, `edit-topology` in `topology.rs`.)

mod cancel;
mod cycles;
mod grants;
mod run;

use std::ffi::OsString;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::gridctl::{Quiet, gridctl_json};
use super::{Outcome, journal, shorten};
use crate::context::Context;
use crate::error::Failure;
use crate::oracles::answers_unchanged;
use crate::process::{CommandOutput, RunError, describe_status};
use crate::step::{Node, ParseError};
use crate::steps::gridctl::QUIET_COMMAND_TIMEOUT;

pub use cancel::parse_cancel;
pub use cycles::parse_cycles;
pub use grants::{parse_expect_grants, parse_expect_processes};
pub use run::{parse_expect_process, parse_resolve, parse_run};

/// The file in the work directory where `run-process` answers are recorded.
const RUNS_FILE: &str = "process-runs.jsonl";

/// One recorded answer of `run-process`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunRecord {
    op: String,
    answer: Value,
}

fn record(work: &Path, op: &str, answer: &Value) -> Result<(), Failure> {
    journal::append(
        work,
        RUNS_FILE,
        &RunRecord {
            op: op.to_owned(),
            answer: answer.clone(),
        },
    )
}

/// The first terminal answer recorded for `op`.
fn first_terminal(work: &Path, op: &str) -> Result<Option<RunAnswer>, Failure> {
    let records: Vec<RunRecord> = journal::read(work, RUNS_FILE)?;
    Ok(records
        .into_iter()
        .filter(|r| r.op == op)
        .map(|r| RunAnswer::recorded(r.answer))
        .find(|a| is_terminal(&a.outcome)))
}

fn is_terminal(outcome: &str) -> bool {
    outcome == "succeeded" || outcome == "failed"
}

/// One answer of `gridctl process run`.
#[derive(Debug, Clone)]
struct RunAnswer {
    /// `succeeded`, `failed`, `unknown`, `refused`, or `no-answer` (no JSON).
    outcome: String,
    result: Value,
    json: Value,
    status: String,
    /// The exit status does not match the outcome.
    mismatch: bool,
}

impl RunAnswer {
    /// The answer gridctl printed (and how it exited).
    fn of(output: &CommandOutput) -> RunAnswer {
        let status = describe_status(&output.status);
        match serde_json::from_str::<Value>(output.stdout.trim()) {
            Ok(json) if json["outcome"].is_string() => {
                let outcome = json["outcome"].as_str().unwrap_or_default().to_owned();
                let mismatch = Outcome::from_name(&outcome)
                    .is_none_or(|o| output.status.code() != Some(o.exit_code()));
                RunAnswer {
                    outcome,
                    result: json["result"].clone(),
                    json,
                    status,
                    mismatch,
                }
            }
            _ => RunAnswer {
                outcome: "no-answer".into(),
                result: Value::Null,
                json: json!({"stdout": shorten(output.stdout.trim(), 300),
                             "stderr": shorten(output.stderr.trim(), 300)}),
                status,
                mismatch: false,
            },
        }
    }

    /// A quiet command that did not finish: no answer.
    fn not_finished(error: &RunError) -> RunAnswer {
        RunAnswer {
            outcome: "no-answer".into(),
            result: Value::Null,
            json: json!({"error": format!("{error:?}")}),
            status: format!("not finished within {} s", QUIET_COMMAND_TIMEOUT.as_secs()),
            mismatch: false,
        }
    }

    /// An answer recorded by `run-process`.
    fn recorded(json: Value) -> RunAnswer {
        RunAnswer {
            outcome: json["outcome"].as_str().unwrap_or_default().to_owned(),
            result: json["result"].clone(),
            json,
            status: "recorded".into(),
            mismatch: false,
        }
    }

    fn show(&self) -> String {
        format!(
            "{} ({}) {}",
            self.outcome,
            self.status,
            shorten(&self.json.to_string(), 300)
        )
    }
}

impl answers_unchanged::Answer for RunAnswer {
    fn definite(&self) -> bool {
        is_terminal(&self.outcome)
    }

    /// The outcome and the result: what the receiver's retained answer fixes.
    fn same(&self, other: &RunAnswer) -> bool {
        self.outcome == other.outcome && self.result == other.result
    }

    fn show(&self) -> String {
        RunAnswer::show(self)
    }
}

/// Runs `gridctl process run …` quietly: its answer, or no answer.
fn ask(quiet: &Quiet, args: &[OsString], tag: &str) -> RunAnswer {
    match quiet.output(args, tag) {
        Ok(output) => RunAnswer::of(&output),
        Err(error) => RunAnswer::not_finished(&error),
    }
}

/// `NAME=VALUE NAME=VALUE …` → pairs.
fn pairs(node: &Node<'_>, key: &str, text: &str) -> Result<Vec<(String, String)>, ParseError> {
    text.split_whitespace()
        .map(|item| match item.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
            _ => Err(node.error(format!(
                "`{key}` is a list of NAME=VALUE separated by spaces; `{item}` is not"
            ))),
        })
        .collect()
}

/// gridctl's arguments for one run (without `--state`).
fn run_args(
    host: &str,
    process: &str,
    caller: &str,
    op: &str,
    via: Option<&str>,
    args: &[(String, String)],
    wait_ms: Option<u64>,
) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![
        "process".into(),
        "run".into(),
        host.into(),
        process.into(),
        "--as".into(),
        caller.into(),
        "--op".into(),
        op.into(),
    ];
    if let Some(via) = via {
        out.push("--via".into());
        out.push(via.into());
    }
    for (name, value) in args {
        out.push("--arg".into());
        out.push(format!("{name}={value}").into());
    }
    if let Some(ms) = wait_ms {
        out.push("--wait-ms".into());
        out.push(ms.to_string().into());
    }
    out.push("--json".into());
    out
}

/// A named value of a run's result: `result.NAME`, or `result.values.NAME`.
fn result_value<'v>(result: &'v Value, name: &str) -> Option<&'v Value> {
    result
        .get(name)
        .or_else(|| result.get("values").and_then(|v| v.get(name)))
        // A dotted path into a nested result (`transfer.outcome`).
        .or_else(|| {
            name.contains('.')
                .then(|| name.split('.').try_fold(result, |v, key| v.get(key)))
                .flatten()
        })
}

fn value_matches(value: &Value, expected: &str) -> bool {
    match expected.parse::<f64>() {
        // A decimal string (an amount in minor units) matches as text.
        Ok(x) => value.as_f64() == Some(x) || value.as_str() == Some(expected),
        Err(_) => {
            value.as_str() == Some(expected)
                || value.as_bool().is_some_and(|b| b.to_string() == expected)
        }
    }
}

/// The run a host holds of `op` (null: none).
fn inspect_run(cx: &mut Context<'_>, op: &str, host: &str) -> Result<Value, Failure> {
    let json = gridctl_json(cx, &["inspect", "process", op, "--host", host, "--json"])?;
    Ok(json["run"].clone())
}
