//! `gridctl up`: the local embedded default. Reconcile, run every host of the files as
//! a child `gridd` on this machine, reconcile until the plan is empty, then show the
//! models' values until Ctrl-C or `--seconds`; every child started is stopped.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply, ValueText};
use grid_spec::Topology;

use crate::apply::{self, Status};
use crate::observe::{self, HostStatus};
use crate::plan::{self, Action};

/// How long a started gridd may take to answer on its control socket.
pub const HOST_READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stopped gridd may take to exit before it is killed.
pub const HOST_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// The most plan/reconcile rounds `up` makes before it gives up on an empty plan.
pub const UP_RECONCILE_ROUNDS_MAX: usize = 8;
/// How often the live view refreshes.
pub const VIEW_REFRESH: Duration = Duration::from_millis(500);

/// `gridd`, installed beside `gridctl`.
pub fn gridd_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("gridd")))
        .unwrap_or_else(|| PathBuf::from("gridd"))
}

/// Child hosts this process started; stopped on drop.
#[derive(Default)]
pub struct Children {
    running: Vec<(String, Child)>,
}

impl Children {
    /// Starts `gridd --dir DIR` for `name` and waits until it answers.
    pub fn start(&mut self, name: &str, dir: &Path) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("gridd.log"))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut child = Command::new(gridd_path())
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", gridd_path().display()))?;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.join("gridd.log")).unwrap_or_default();
                let last = log.lines().last().unwrap_or("").to_owned();
                return Err(format!("host `{name}` exited ({status}): {last}"));
            }
            if Client::connect(dir).is_ok() {
                break;
            }
            if started.elapsed() > HOST_READY_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "host `{name}` did not answer within {HOST_READY_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.running.push((name.to_owned(), child));
        Ok(())
    }

    pub fn stop_all(&mut self) {
        for (_, child) in &mut self.running {
            // SAFETY: kill(2) on our own child's pid; the worst case is ESRCH.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + HOST_STOP_TIMEOUT;
        for (_, child) in &mut self.running {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.running.clear();
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Runs `up`; returns the exit code.
pub fn up(
    topology: &Topology,
    files: &[PathBuf],
    state: &Path,
    seconds: Option<u64>,
    out: &mut dyn Write,
) -> Result<u8, String> {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    }
    let mut children = Children::default();
    let mut settled = false;
    for round in 0..UP_RECONCILE_ROUNDS_MAX {
        let plan = plan::plan(topology, files, state);
        let actionable = plan
            .transitions
            .iter()
            .any(|t| !matches!(t.action, Action::None));
        if round == 0 || actionable {
            let _ = write!(out, "{}", plan.render());
        }
        if actionable {
            let report = apply::apply(&plan);
            let _ = write!(out, "{}", report.render());
            if report.outcome != Status::Succeeded {
                return Ok(report.outcome.exit_code());
            }
            // Installations and their certificates settle before any host starts.
            continue;
        }
        // Start every host of the files that is installed but not running.
        let mut started_any = false;
        for host in &topology.hosts {
            let dir = plan::host_dir(state, host);
            let observation = observe::observe_host(&host.name, &dir);
            if matches!(observation.status, HostStatus::Unreachable { .. })
                && observation.config.is_some()
            {
                children.start(&host.name, &dir)?;
                let _ = writeln!(out, "started host {} ({})", host.name, dir.display());
                started_any = true;
            }
        }
        if !actionable && !started_any {
            settled = true;
            break;
        }
    }
    if !settled {
        let _ = writeln!(
            out,
            "the plan did not become empty after {UP_RECONCILE_ROUNDS_MAX} rounds; see `gridctl plan`"
        );
        return Ok(1);
    }
    let _ = writeln!(
        out,
        "plan is empty; {} host(s) running. Ctrl-C stops them.",
        children.running.len()
    );
    let terminal = std::io::stdout().is_terminal();
    let started = Instant::now();
    let mut last = String::new();
    while !stop.load(Ordering::SeqCst)
        && seconds.is_none_or(|s| started.elapsed() < Duration::from_secs(s))
    {
        let view = view(topology, state);
        if terminal {
            let _ = write!(out, "\x1b[H\x1b[2J{view}");
        } else if view != last {
            let _ = write!(out, "{view}");
        }
        let _ = out.flush();
        last = view;
        std::thread::sleep(VIEW_REFRESH);
    }
    children.stop_all();
    let _ = writeln!(out, "stopped");
    Ok(0)
}

/// One screen of the live view: every model's values as its owner holds them.
pub fn view(topology: &Topology, state: &Path) -> String {
    let mut out = String::new();
    for model in &topology.models {
        let host = topology.host(&model.host).expect("validated");
        let dir = plan::host_dir(state, host);
        let line = match Client::connect(&dir).and_then(|mut c| {
            c.call(&Call::Values {
                model: model.name.clone(),
            })
        }) {
            Ok(Reply::Values { values, .. }) => values
                .iter()
                .map(|(n, v)| match v {
                    ValueText::Number(x) => format!("{n}={x}"),
                    ValueText::Error(e) => format!("{n}={e}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            Ok(Reply::Refused { reason }) => reason,
            Ok(other) => format!("{other:?}"),
            Err(e) => e.to_string(),
        };
        out.push_str(&format!("model {} @ {}: {line}\n", model.name, model.host));
    }
    out
}
