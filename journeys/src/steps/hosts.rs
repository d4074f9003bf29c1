//! Host processes: `start`, `kill`, `kill … at=`, `lose-reply`, `restart`.
//!
//! - `start HOST [failpoints="POINT=ACTION,…"] [passphrase="TEXT"]` — runs `gridd --dir
//!   <state>/hosts/HOST` (with `passphrase`: TEXT written to a private file given as
//!   `--custody-passphrase-file`, docs/custody.md) and waits until its control socket
//!   accepts a connection. Inside `expect-refused`,
//!   gridd must instead exit non-zero with a message.
//!   A host whose listen address is a non-loopback IPv4 address (e.g. `10.77.1.1:7521`)
//!   runs as `ip netns exec NS gridd …` in a network namespace of its own, made the
//!   first time it starts (see `network.rs`); `kill`/`restart` are the same for it.
//! - `kill HOST` — SIGKILL, then wait for the exit.
//! - `kill HOST at="POINT"` — restarts the host with `GRID_FAILPOINTS=POINT=abort`: it
//!   aborts itself when a later step's operation reaches POINT. The next `restart`
//!   waits for that exit, and a journey whose armed host never aborts fails.
//! - `lose-reply HOST [at="POINT"]` — restarts the host with `POINT=drop-reply`
//!   (default `submit-after-commit`): the next operation reaching POINT gets no reply.
//! - `fail-fsync HOST` — restarts the host with `store-fsync=eio`: its next fsync fails
//!   (EIO) and it stops by itself, never retrying; the next `restart` waits for that.
//! - `restart HOST` — starts the host again without failpoints: after `kill`, after an
//!   armed crash (which it waits for), or (SIGKILL first) while it runs.
//! - `advance-clock HOST days=N | seconds=N` — time passes for the host's retention
//!   windows (`retain hot-days`, `archive-days`): its gridd reads a clock moved that much
//!   further (`GRID_RETENTION_CLOCK_OFFSET_S`) from its next start on.

use super::Step;
use crate::context::{Context, FAILPOINTS_ENV};
use crate::error::Failure;
use crate::limits::{PACKED_HOSTS_MAX, PACKED_PROCESSES_MAX};
use crate::process::describe_status;
use crate::process::quote_output;
use crate::step::{Node, ParseError};

/// The crash point `lose-reply` drops the reply at when none is named.
pub const DEFAULT_LOSE_REPLY_POINT: &str = "submit-after-commit";

enum HostStep {
    Start {
        host: String,
        failpoints: Option<String>,
        /// `passphrase=`: given to gridd as `--custody-passphrase-file`.
        passphrase: Option<String>,
        refused: bool,
    },
    Kill {
        host: String,
    },
    /// Restart with failpoints (`kill … at=`, `lose-reply`).
    Arm {
        host: String,
        point: String,
        action: &'static str,
    },
    Restart {
        host: String,
    },
}

pub fn parse_start(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let failpoints = node.string("failpoints")?;
    let passphrase = node.string("passphrase")?;
    let refused = node.expects_refusal();
    Ok(Box::new(HostStep::Start {
        host,
        failpoints,
        passphrase,
        refused,
    }))
}

pub fn parse_kill(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    Ok(Box::new(match node.string("at")? {
        Some(point) => HostStep::Arm {
            host,
            point: check_point(node, point)?,
            action: "abort",
        },
        None => HostStep::Kill { host },
    }))
}

/// `fail-fsync HOST`: restarts the host with `store-fsync=eio`.
pub fn parse_fail_fsync(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    Ok(Box::new(HostStep::Arm {
        host,
        point: "store-fsync".to_owned(),
        action: "eio",
    }))
}

pub fn parse_lose_reply(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let point = node
        .string("at")?
        .unwrap_or_else(|| DEFAULT_LOSE_REPLY_POINT.to_string());
    Ok(Box::new(HostStep::Arm {
        host,
        point: check_point(node, point)?,
        action: "drop-reply",
    }))
}

/// `advance-clock HOST days=N | seconds=N`.
struct AdvanceClock {
    host: String,
    seconds: u64,
}

pub fn parse_advance_clock(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let seconds = match (node.count("days")?, node.count("seconds")?) {
        (Some(days), None) => days.saturating_mul(86_400),
        (None, Some(seconds)) => seconds,
        _ => {
            return Err(node
                .error("`advance-clock` needs one of days=N or seconds=N")
                .with_help("write e.g. `advance-clock edge days=3`, then restart the host"));
        }
    };
    Ok(Box::new(AdvanceClock { host, seconds }))
}

impl Step for AdvanceClock {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let total = cx.advance_clock(&self.host, self.seconds);
        cx.say(format_args!(
            "host {}: its retention clock runs {total} s ahead from its next start",
            self.host
        ));
        Ok(())
    }
}

pub fn parse_restart(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    Ok(Box::new(HostStep::Restart { host }))
}

/// The engine decides which points exist (gridd refuses an unknown one); the harness
/// only keeps the environment variable well-formed.
fn check_point(node: &Node<'_>, point: String) -> Result<String, ParseError> {
    if point.is_empty() || point.contains([',', '=']) || point.contains(char::is_whitespace) {
        return Err(node.error(format!("`{point}` is not a crash point name")));
    }
    Ok(point)
}

impl Step for HostStep {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        match self {
            HostStep::Start {
                host,
                failpoints,
                passphrase,
                refused,
            } => {
                if let Some(text) = passphrase {
                    let file = super::locks::write_passphrase(cx, text)?;
                    cx.set_start_passphrase(file);
                }
                match refused {
                    false => cx.start_host(host, failpoints.as_deref()),
                    true => start_refused(cx, host, failpoints.as_deref()),
                }
            }
            HostStep::Kill { host } => {
                let (status, killed) = cx.kill_host(host)?;
                if killed {
                    cx.say(format_args!("host {host}: {}", describe_status(&status)));
                } else {
                    cx.say(format_args!(
                        "host {host} had already exited ({})",
                        describe_status(&status)
                    ));
                }
                Ok(())
            }
            HostStep::Arm {
                host,
                point,
                action,
            } => {
                stop_if_running(cx, host)?;
                cx.start_host(host, Some(&format!("{point}={action}")))?;
                let what = match *action {
                    "abort" => "aborts itself",
                    "eio" => "fails the fsync with EIO and stops",
                    _ => "drops the reply (once)",
                };
                cx.say(format_args!(
                    "host {host} {what} when an operation reaches {point}"
                ));
                Ok(())
            }
            HostStep::Restart { host } => {
                if !cx.host_abort_points(host).is_empty() {
                    cx.wait_for_armed_crash(host)?;
                } else {
                    stop_if_running(cx, host)?;
                }
                cx.start_host(host, None)
            }
        }
    }
}

/// SIGKILLs the host's process first if it is still running.
fn stop_if_running(cx: &mut Context<'_>, host: &str) -> Result<(), Failure> {
    if cx.host_running(host) {
        let (status, _) = cx.kill_host(host)?;
        cx.say(format_args!(
            "stopped the running gridd of {host} first ({})",
            describe_status(&status)
        ));
    }
    Ok(())
}

fn start_refused(
    cx: &mut Context<'_>,
    host: &str,
    failpoints: Option<&str>,
) -> Result<(), Failure> {
    let expected = format!("gridd for `{host}` to refuse to start (non-zero exit, with a message)");
    cx.start_host_process(host, failpoints)?;
    if let Some(failpoints) = failpoints {
        cx.say(format_args!("{FAILPOINTS_ENV}={failpoints}"));
    }
    let (status, log) = match cx.wait_host_exit(host) {
        Ok(exit) => exit,
        Err(failure) => {
            let _ = cx.kill_host(host);
            return Err(Failure::new(expected, failure.observed));
        }
    };
    if status.success() || log.trim().is_empty() {
        return Err(Failure::new(
            expected,
            format!(
                "{}; it printed: {}",
                describe_status(&status),
                quote_output(&log)
            ),
        ));
    }
    cx.say(format_args!(
        "→ refused ({}): {}",
        describe_status(&status),
        super::shorten(log.trim(), 600)
    ));
    Ok(())
}

/// `start-packed prefix="d" count=N processes=P` — the hosts `{prefix}0001` …
/// `{prefix}{N:04}` of the topology, packed into P `gridd` processes (named
/// `{prefix}-pack-1` …; `kill` takes those names), each ready when every one of its
/// hosts accepts control connections.
struct StartPacked {
    prefix: String,
    count: u64,
    processes: u64,
}

pub fn parse_start_packed(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let prefix = node.required("prefix", "NAME")?;
    let count = node
        .count("count")?
        .ok_or_else(|| node.error("`start-packed` needs count=N"))?;
    let processes = node.count("processes")?.unwrap_or(1);
    if count == 0 || count > PACKED_HOSTS_MAX {
        return Err(node.error("count is 1 to 9,999 (names carry 4 digits)"));
    }
    if processes == 0 || processes > PACKED_PROCESSES_MAX || processes > count {
        return Err(node.error(format!(
            "processes is 1 to PACKED_PROCESSES_MAX ({PACKED_PROCESSES_MAX}) and at most count"
        )));
    }
    Ok(Box::new(StartPacked {
        prefix,
        count,
        processes,
    }))
}

impl Step for StartPacked {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let names: Vec<String> = (1..=self.count)
            .map(|i| format!("{}{i:04}", self.prefix))
            .collect();
        let per = names.len().div_ceil(self.processes as usize);
        for (index, chunk) in names.chunks(per).enumerate() {
            cx.start_packed(&format!("{}-pack-{}", self.prefix, index + 1), chunk)?;
        }
        Ok(())
    }
}
