//! Bounded child processes: a command run to completion within a timeout, and waits
//! for a process to exit.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::POLL_INTERVAL;

/// What a finished command printed and how it ended.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// How a command run did not finish.
#[derive(Debug)]
pub enum RunError {
    Spawn(std::io::Error),
    /// Killed after the timeout; what it had printed so far.
    TimedOut {
        stdout: String,
        stderr: String,
    },
}

/// Runs `command` to completion within `timeout`, its output going to the two files
/// (files rather than pipes: no pipe can fill up, and the output stays for the report).
pub fn run_bounded(
    mut command: Command,
    stdout_path: &Path,
    stderr_path: &Path,
    timeout: Duration,
) -> Result<CommandOutput, RunError> {
    let stdout = File::create(stdout_path).map_err(RunError::Spawn)?;
    let stderr = File::create(stderr_path).map_err(RunError::Spawn)?;
    command.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    die_with_parent(&mut command);
    let mut child = command.spawn().map_err(RunError::Spawn)?;
    let status = wait_bounded(&mut child, timeout).map_err(RunError::Spawn)?;
    let read = |path: &Path| {
        String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
    };
    match status {
        Some(status) => Ok(CommandOutput {
            status,
            stdout: read(stdout_path),
            stderr: read(stderr_path),
        }),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(RunError::TimedOut {
                stdout: read(stdout_path),
                stderr: read(stderr_path),
            })
        }
    }
}

/// Waits up to `timeout` for the child to exit; `None` if it is still running.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// On Linux, the child gets SIGKILL when the thread that started it ends — so a harness
/// that is itself killed leaves no `gridd` behind. The harness kills its children
/// explicitly anyway; this only covers the harness dying without unwinding.
pub fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only calls
        // prctl(2), which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

/// "exit 3", "killed by signal 9 (SIGKILL)".
pub fn describe_status(status: &ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            let name = match signal {
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGINT => " (SIGINT)",
                _ => "",
            };
            let core = if status.core_dumped() {
                ", core dumped"
            } else {
                ""
            };
            return format!("killed by signal {signal}{name}{core}");
        }
    }
    status.to_string()
}

/// The last `lines` lines of a text, for reports.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    let start = all.len().saturating_sub(lines);
    let mut out = String::new();
    if start > 0 {
        out.push_str(&format!("… ({start} earlier lines)\n"));
    }
    out.push_str(&all[start..].join("\n"));
    out
}

/// Lines of each host's log (and of a command's output) shown with a failure.
pub const LOG_TAIL_LINES: usize = 12;

/// Output text for a one-line report: trimmed, or "(nothing)".
pub fn quote_output(text: &str) -> String {
    let text = text.trim();
    if text.is_empty() {
        "(nothing)".into()
    } else {
        tail(text, LOG_TAIL_LINES)
    }
}
