//! The `gridd` processes of one state directory on this machine: `gridctl inspect
//! hosts` lists every installation with its process, `gridctl down` stops them, and
//! `gridctl up` records itself so `down` can stop it first.
//!
//! Invariants: nothing here changes an installation — stopping a gridd never retires,
//! revokes or removes anything. A process is signalled only when it is verifiably the
//! one meant: a gridd whose pid file names it *and* whose command line serves that very
//! installation (`--dir` resolving to it), or the `gridctl up` that `STATE/up.pid`
//! names and whose command line says `up`. A stale pid file, its pid reused by another
//! process, is never signalled.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use grid_engine::host::pid::PID_FILE;
use serde::Serialize;

use crate::observe::{self, HostStatus};

/// The file in the state directory naming the `gridctl up` that runs its hosts.
pub const UP_PID_FILE: &str = "up.pid";
/// How long `down` waits for `gridctl up` to stop its children and exit.
pub const UP_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopped gridd may take to exit before it is killed.
pub const HOST_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// One installation under `STATE/hosts`, as `gridctl inspect hosts` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LocalHost {
    pub name: String,
    /// `STATE/hosts/NAME`.
    pub dir: PathBuf,
    /// Where that directory links to, for a host with `dir=`.
    pub link: Option<PathBuf>,
    /// A gridd answers on the control socket.
    pub running: bool,
    /// The serving gridd's process id (from its pid file, verified).
    pub pid: Option<u32>,
    /// The profiles `host.toml` selects.
    pub profiles: Vec<String>,
    /// The profiles the running gridd runs, when they differ from `profiles` (a
    /// profile selected since it started takes effect when it restarts).
    pub running_profiles: Option<Vec<String>>,
    /// The models the running gridd holds (retired ones marked `(retired)`).
    pub models: Vec<String>,
    /// The memberships each model it holds was admitted to (`serve M`); a model
    /// admitted to none is absent.
    pub serves: std::collections::BTreeMap<String, Vec<String>>,
    /// Why it is not running or could not be read.
    pub reason: Option<String>,
}

/// Every installation under `state`, sorted by name.
pub fn hosts(state: &Path) -> Vec<LocalHost> {
    observe::installed_hosts(state)
        .into_iter()
        .map(|name| {
            let dir = observe::host_dir(state, &name);
            let observation = observe::observe_host(&name, &dir);
            let profiles = observation
                .config
                .as_ref()
                .map(|c| c.profiles.clone())
                .unwrap_or_default();
            let link = std::fs::read_link(&dir).ok();
            let mut serves = std::collections::BTreeMap::new();
            let (running, models, running_profiles, reason) = match observation.status {
                HostStatus::Running(o) => {
                    serves = o
                        .models
                        .iter()
                        .filter(|m| !m.serves.is_empty())
                        .map(|m| (m.name.clone(), m.serves.clone()))
                        .collect();
                    let models = o
                        .models
                        .iter()
                        .map(|m| match m.retired {
                            true => format!("{} (retired)", m.name),
                            false => m.name.clone(),
                        })
                        .collect();
                    let differ = o
                        .profiles
                        .filter(|p| crate::diff::hosts::profiles_differ(&profiles, p));
                    (true, models, differ, None)
                }
                HostStatus::Locked(_) => (
                    true,
                    Vec::new(),
                    None,
                    Some("custody locked: serves reads only until `gridctl custody unlock`".into()),
                ),
                HostStatus::Missing => (false, Vec::new(), None, Some("not installed".into())),
                HostStatus::Unreachable { reason } => (false, Vec::new(), None, Some(reason)),
            };
            LocalHost {
                pid: running.then(|| gridd_pid(&dir)).flatten(),
                name,
                dir,
                link,
                running,
                profiles,
                running_profiles,
                models,
                serves,
                reason,
            }
        })
        .collect()
}

/// The process id of the gridd serving the installation `dir`: its pid file names a
/// live process whose command line is `gridd … --dir D …` with D this installation.
pub fn gridd_pid(dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let arguments = command_line(pid)?;
    let program = arguments.first()?;
    if Path::new(program).file_name()? != "gridd" {
        return None;
    }
    let serving = std::fs::canonicalize(dir).ok()?;
    // A relative `--dir` is the process's own working directory's.
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let serves = arguments.windows(2).any(|pair| {
        pair[0] == "--dir"
            && std::fs::canonicalize(cwd.join(&pair[1])).is_ok_and(|served| served == serving)
    });
    serves.then_some(pid)
}

/// Stops the gridd serving the installation `dir` (SIGTERM; SIGKILL after `timeout`),
/// as a transfer's prepare does once the source is journaled: `Ok(None)` when none
/// answers on its control socket, `Ok(Some(how))` once it has exited, or why it
/// cannot be stopped ([`stoppable`]).
pub fn stop_serving(dir: &Path, timeout: Duration) -> Result<Option<String>, String> {
    if grid_engine::host::control::Client::connect(dir).is_err() {
        return Ok(None);
    }
    let pid = stoppable(dir)?;
    match stop(pid, libc::SIGTERM, timeout) {
        "still running" => Err(format!(
            "its gridd (pid {pid}) did not exit after SIGTERM and SIGKILL"
        )),
        how => Ok(Some(format!("its gridd (pid {pid}) {how}"))),
    }
}

/// The gridd serving `dir` and nothing else, or why stopping it for `dir` is refused:
/// its pid file names no gridd serving `dir`, or that gridd serves other
/// installations too (stopping it would stop them all).
pub fn stoppable(dir: &Path) -> Result<u32, String> {
    let pid = gridd_pid(dir).ok_or_else(|| {
        format!(
            "a gridd answers on the control socket of {}, but its pid file names no gridd serving it: stop that gridd first",
            dir.display()
        )
    })?;
    let served = command_line(pid).map_or(0, |a| a.iter().filter(|a| *a == "--dir").count());
    if served > 1 {
        return Err(format!(
            "its gridd (pid {pid}) serves {served} installations (`--dir` {served} times): stopping it would stop them all — run this host in a gridd of its own, or stop that gridd first"
        ));
    }
    Ok(pid)
}

/// The `gridctl up` running the hosts of `state`, when `STATE/up.pid` names a live
/// process whose command line says `gridctl up`.
pub fn up_pid(state: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(state.join(UP_PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let arguments = command_line(pid)?;
    let program = Path::new(arguments.first()?).file_name()?.to_owned();
    (program == "gridctl" && arguments.iter().any(|a| a == "up")).then_some(pid)
}

/// A live process's arguments (`/proc/PID/cmdline`); `None` when it is gone.
fn command_line(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let arguments: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!arguments.is_empty()).then_some(arguments)
}

/// `up` running for `state`: writes `STATE/up.pid` (0600) and removes it when dropped.
pub struct UpRecord {
    path: PathBuf,
}

impl UpRecord {
    pub fn write(state: &Path) -> Result<UpRecord, String> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state)
            .map_err(|e| format!("{}: {e}", state.display()))?;
        let path = state.join(UP_PID_FILE);
        grid_engine::custody::write_private(&path, format!("{}\n", std::process::id()).as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(UpRecord { path })
    }
}

impl Drop for UpRecord {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What `down` did to one process.
#[derive(Debug, Clone, Serialize)]
pub struct Stopped {
    /// `up` or the host's name.
    pub what: String,
    pub pid: u32,
    /// `stopped` (it exited after SIGTERM or SIGINT), `killed` (SIGKILL after the
    /// timeout) or `still running` (even SIGKILL did not end it in time).
    pub outcome: &'static str,
}

/// Stops the `gridctl up` of `state` (SIGINT: it stops its children as on Ctrl-C),
/// then every gridd still serving an installation under `state` (SIGTERM, SIGKILL
/// after `host_timeout`). Changes no installation.
pub fn down(state: &Path, host_timeout: Duration) -> Vec<Stopped> {
    let mut stopped = Vec::new();
    if let Some(pid) = up_pid(state) {
        stopped.push(Stopped {
            what: "up".to_owned(),
            pid,
            outcome: stop(pid, libc::SIGINT, UP_STOP_TIMEOUT),
        });
    }
    for name in observe::installed_hosts(state) {
        let dir = observe::host_dir(state, &name);
        if let Some(pid) = gridd_pid(&dir) {
            stopped.push(Stopped {
                what: name,
                pid,
                outcome: stop(pid, libc::SIGTERM, host_timeout),
            });
        }
    }
    stopped
}

/// Sends `signal` to `pid`, waits until it is gone (at most `timeout`), then SIGKILL.
fn stop(pid: u32, signal: libc::c_int, timeout: Duration) -> &'static str {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return "still running";
    };
    let gone = |wait: Duration| {
        let deadline = Instant::now() + wait;
        loop {
            if command_line(pid).is_none() || is_zombie(pid) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // SAFETY: kill(2) on a pid verified just before to be the process meant; the worst
    // case is ESRCH when it exited in between.
    unsafe { libc::kill(raw, signal) };
    if gone(timeout) {
        return "stopped";
    }
    // SAFETY: as above.
    unsafe { libc::kill(raw, libc::SIGKILL) };
    if gone(Duration::from_secs(5)) {
        "killed"
    } else {
        "still running"
    }
}

/// An exited process its parent has not reaped yet (state `Z`).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(after == 'Z')
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_file_naming_another_process_is_not_a_gridd() {
        let dir = std::env::temp_dir().join(format!("grid-local-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // This test process is alive, but it is no gridd serving `dir`.
        std::fs::write(dir.join(PID_FILE), format!("{}\n", std::process::id())).unwrap();
        assert_eq!(gridd_pid(&dir), None);
        std::fs::write(dir.join(UP_PID_FILE), format!("{}\n", std::process::id())).unwrap();
        assert_eq!(up_pid(&dir), None);
        // Nor is a pid that does not exist, or a damaged file.
        std::fs::write(dir.join(PID_FILE), "4194305\n").unwrap();
        assert_eq!(gridd_pid(&dir), None);
        std::fs::write(dir.join(PID_FILE), "not a pid").unwrap();
        assert_eq!(gridd_pid(&dir), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A process whose command line reads `gridd -c … --dir D…` (python3 with its
    /// argv[0] set), its pid in D's pid file.
    fn pretend_gridd(dirs: &[&Path]) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        // The interpreter itself (a `python3` on PATH may be a launcher that execs
        // it, which would not keep argv[0]).
        let found = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 runs");
        let python = String::from_utf8(found.stdout).unwrap().trim().to_owned();
        let mut command = std::process::Command::new(python);
        command
            .arg0("gridd")
            .args(["-c", "import time; time.sleep(30)"]);
        for dir in dirs {
            command.arg("--dir").arg(dir);
        }
        let child = command.spawn().expect("python runs");
        std::fs::write(dirs[0].join(PID_FILE), format!("{}\n", child.id())).unwrap();
        child
    }

    #[test]
    fn a_gridd_serving_other_installations_too_is_not_stopped_for_one() {
        let base = std::env::temp_dir().join(format!("grid-stoppable-{}", std::process::id()));
        let (a, b) = (base.join("a"), base.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let mut alone = pretend_gridd(&[&a]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while gridd_pid(&a).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(stoppable(&a), Ok(alone.id()));
        alone.kill().unwrap();
        alone.wait().unwrap();
        let mut packed = pretend_gridd(&[&a, &b]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while gridd_pid(&a).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let refused = stoppable(&a).unwrap_err();
        assert!(refused.contains("serves 2 installations"), "{refused}");
        packed.kill().unwrap();
        packed.wait().unwrap();
        // Gone: no gridd serves it.
        assert!(
            stoppable(&a)
                .unwrap_err()
                .contains("names no gridd serving it")
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
