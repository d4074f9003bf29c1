//! `gridctl plan`, `reconcile` and `up`: desired state against what the owners hold.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use grid_reconciler::apply::{self, Status};
use grid_reconciler::planfile;
use grid_spec::Options;
use serde::Serialize;

use crate::Output;
use crate::common::{build_gridd_under_cargo, load};
use crate::report::{Rendered, Report, emit, emit_failure};

/// `gridctl plan FILES [--out PLAN]`.
pub fn plan(
    files: &[PathBuf],
    out: Option<&Path>,
    detailed_exitcode: bool,
    output: &Output,
) -> anyhow::Result<ExitCode> {
    let Some(topology) = load(files, Options::default()) else {
        return Ok(ExitCode::FAILURE);
    };
    let plan = grid_reconciler::plan::plan(&topology, files, &output.state);
    let mut text = plan.render_with(&grid_reconciler::changes::Paint::detect());
    if let Some(out) = out {
        std::fs::write(out, planfile::render(&plan))
            .with_context(|| format!("cannot write {}", out.display()))?;
        text += &format!("saved to {}\n", out.display());
    }
    emit(&Rendered::new(plan.to_json(), text), output.json);
    Ok(if detailed_exitcode && !plan.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// A saved plan refused before anything was sent.
#[derive(Serialize)]
struct Refused {
    outcome: &'static str,
    reason: String,
    transitions: [(); 0],
}

impl Report for Refused {
    fn text(&self) -> String {
        format!("refused: {}\n", self.reason)
    }
}

/// `gridctl reconcile FILES|PLAN`.
pub fn reconcile(files: &[PathBuf], output: &Output) -> anyhow::Result<ExitCode> {
    let plan = if let [only] = files
        && planfile::is_plan(only)
    {
        let plan = planfile::load(only).map_err(anyhow::Error::msg)?;
        let named = state_named().then(|| std::path::absolute(&output.state));
        if let Some(Ok(named)) = named
            && named != std::path::absolute(&plan.state).unwrap_or_else(|_| plan.state.clone())
        {
            let refused = Refused {
                outcome: "refused",
                reason: format!(
                    "the saved plan was made against the state {}, and --state (or GRID_STATE) names {}: a plan applies only to the state it observed; make a new plan with --state {}",
                    plan.state.display(),
                    named.display(),
                    named.display()
                ),
                transitions: [],
            };
            emit_failure(&refused, output.json);
            return Ok(ExitCode::from(Status::Refused.exit_code()));
        }
        if let Err(reason) = apply::check_fresh(&plan) {
            let refused = Refused {
                outcome: "refused",
                reason,
                transitions: [],
            };
            emit_failure(&refused, output.json);
            return Ok(ExitCode::from(Status::Refused.exit_code()));
        }
        plan
    } else {
        let Some(topology) = load(files, Options::default()) else {
            return Ok(ExitCode::FAILURE);
        };
        grid_reconciler::plan::plan(&topology, files, &output.state)
    };
    let report = apply::apply(&plan);
    emit(
        &Rendered::new(report.to_json(), report.render()),
        output.json,
    );
    Ok(ExitCode::from(report.outcome.exit_code()))
}

/// Whether the operator named a state (`--state` or `GRID_STATE`) rather than taking
/// the default.
fn state_named() -> bool {
    std::env::var_os("GRID_STATE").is_some()
        || std::env::args_os()
            .any(|a| a == "--state" || a.to_str().is_some_and(|a| a.starts_with("--state=")))
}

/// `gridctl up FILES`.
pub fn up(files: &[PathBuf], state: &Path, seconds: Option<u64>) -> anyhow::Result<ExitCode> {
    let Some(topology) = load(files, Options::default()) else {
        return Ok(ExitCode::FAILURE);
    };
    build_gridd_under_cargo()?;
    let code = grid_reconciler::up::up(&topology, files, state, seconds, &mut std::io::stdout())
        .map_err(anyhow::Error::msg)?;
    Ok(ExitCode::from(code))
}
