//! Locked custody (docs/custody.md, "Locked custody"):
//!
//! - `lock HOST passphrase="TEXT" [expect=OUTCOME]` — the operator writes TEXT to a
//!   private file (`$WORK/passphrase-N`, 0600) and runs `gridctl custody lock HOST
//!   --passphrase-file FILE --json`, whose outcome must be `expect` (default
//!   `succeeded`): HOST's signing and mail keys are then encrypted at rest, and its next
//!   start waits for the passphrase.
//! - `unlock HOST passphrase="TEXT" [expect=OUTCOME]` — the same with `gridctl custody
//!   unlock`; when it succeeds, the step waits (at most UNLOCK_WAIT) until HOST's gridd
//!   serves its whole control socket again (`gridctl status`: running, custody no
//!   longer `locked`).

use std::ffi::OsString;
use std::time::{Duration, Instant};

use super::gridctl::Quiet;
use super::{Outcome, Step, check_outcome};
use crate::context::Context;
use crate::error::Failure;
use crate::limits::UNLOCK_WAIT;
use crate::step::{Node, ParseError};

struct Custody {
    host: String,
    /// `lock` or `unlock`.
    verb: &'static str,
    passphrase: String,
    expect: Outcome,
}

pub fn parse_lock(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    parse(node, "lock")
}

pub fn parse_unlock(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    parse(node, "unlock")
}

fn parse(node: &mut Node<'_>, verb: &'static str) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the host whose custody it is")?;
    let passphrase = node.required("passphrase", "TEXT")?;
    let expect = Outcome::expected(node)?;
    Ok(Box::new(Custody {
        host,
        verb,
        passphrase,
        expect,
    }))
}

impl Step for Custody {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let file = write_passphrase(cx, &self.passphrase)?;
        let args: Vec<OsString> = vec![
            "custody".into(),
            self.verb.into(),
            self.host.clone().into(),
            "--passphrase-file".into(),
            file.into(),
            "--json".into(),
        ];
        let output = cx.gridctl(&args)?;
        check_outcome(cx, &output, self.expect)?;
        if self.verb == "unlock" && self.expect == Outcome::Succeeded {
            wait_unlocked(cx, &self.host)?;
        }
        Ok(())
    }
}

/// Writes `text` and a newline to the next free `$WORK/passphrase-N` (0600), as an
/// operator keeps a passphrase file: its path.
pub(super) fn write_passphrase(
    cx: &Context<'_>,
    text: &str,
) -> Result<std::path::PathBuf, Failure> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let failed = |e: std::io::Error| Failure::new("the passphrase file written", e.to_string());
    let mut n = 1;
    let file = loop {
        let file = cx.work_dir().join(format!("passphrase-{n}"));
        if !file.exists() {
            break file;
        }
        n += 1;
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
        .map_err(failed)?;
    writeln!(f, "{text}").map_err(failed)?;
    Ok(file)
}

/// Waits until `host` runs with its custody unlocked.
fn wait_unlocked(cx: &mut Context<'_>, host: &str) -> Result<(), Failure> {
    let quiet = Quiet::new(cx);
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < UNLOCK_WAIT {
        match quiet.json(&["status", "--host", host, "--json"], "unlock-status") {
            Ok(status) => {
                let running = status["running"].as_bool() == Some(true);
                let custody = status["custody"].as_str().unwrap_or("").to_owned();
                if running && custody != "locked" {
                    cx.say(format_args!("{host} serves again (custody {custody})"));
                    return Ok(());
                }
                last = format!("running {running}, custody {custody}");
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(Failure::new(
        format!(
            "{host} to serve again within {}s of its unlock",
            UNLOCK_WAIT.as_secs()
        ),
        last,
    ))
}
