//! `gridctl` commands whose answer is JSON, for steps: told in the story (through
//! [`Context::gridctl`]) or quiet — many at once from helper threads, each command's
//! output in `$WORK/quiet/TAG.{out,err}` instead of the story.

use std::ffi::OsString;
use std::path::PathBuf;

use serde_json::Value;

use super::shorten;
use crate::context::{Context, gridctl_command};
use crate::error::Failure;
use crate::process::quote_output;
use crate::process::{CommandOutput, RunError, describe_status, run_bounded};

pub use crate::limits::QUIET_COMMAND_TIMEOUT;

/// A command's stdout as JSON.
pub fn json_of(output: &CommandOutput, what: &str) -> Result<Value, Failure> {
    serde_json::from_str(output.stdout.trim()).map_err(|_| {
        Failure::new(
            format!("JSON from {what}"),
            format!(
                "{}; stdout: {}; stderr: {}",
                describe_status(&output.status),
                quote_output(&output.stdout),
                quote_output(&output.stderr)
            ),
        )
    })
}

/// `what`'s JSON, which must come with exit status 0.
fn json_exit_zero(output: &CommandOutput, what: &str) -> Result<Value, Failure> {
    let json = json_of(output, what)?;
    if !output.status.success() {
        return Err(Failure::new(
            format!("{what} to exit 0"),
            format!(
                "{}: {}; stderr: {}",
                describe_status(&output.status),
                shorten(&json.to_string(), 600),
                quote_output(&output.stderr)
            ),
        ));
    }
    Ok(json)
}

fn shown(args: &[OsString]) -> String {
    format!("gridctl {}", args.join(" ".as_ref()).to_string_lossy())
}

/// `gridctl ARGS…` told in the story: its JSON, exit status 0.
pub fn gridctl_json(cx: &mut Context<'_>, args: &[&str]) -> Result<Value, Failure> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let output = cx.gridctl(&args)?;
    json_exit_zero(&output, &shown(&args))
}

/// What quiet commands need to reach gridctl from helper threads.
#[derive(Debug, Clone)]
pub struct Quiet {
    gridctl: PathBuf,
    work: PathBuf,
    state: PathBuf,
}

impl Quiet {
    pub fn new(cx: &Context<'_>) -> Quiet {
        Quiet {
            gridctl: cx.gridctl_path().to_owned(),
            work: cx.work_dir().to_owned(),
            state: cx.state_dir().to_owned(),
        }
    }

    /// Runs `gridctl ARGS… --state STATE` within [`QUIET_COMMAND_TIMEOUT`], in the work
    /// directory, without failpoints in its environment (as [`Context::gridctl`]).
    pub fn output(&self, args: &[OsString], tag: &str) -> Result<CommandOutput, RunError> {
        let logs = self.work.join("quiet");
        let _ = std::fs::create_dir_all(&logs);
        run_bounded(
            gridctl_command(&self.gridctl, args, &self.state, &self.work),
            &logs.join(format!("{tag}.out")),
            &logs.join(format!("{tag}.err")),
            QUIET_COMMAND_TIMEOUT,
        )
    }

    /// A quiet command's JSON, exit status 0.
    pub fn json(&self, args: &[&str], tag: &str) -> Result<Value, Failure> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let what = shown(&args);
        let output = self
            .output(&args, tag)
            .map_err(|e| Failure::new(format!("{what} to finish"), format!("{e:?}")))?;
        json_exit_zero(&output, &what)
    }
}
