//! `gridctl up`: the local embedded default. Reconcile, run every host of the files as
//! a child `gridd` on this machine, reconcile until the plan is empty, then show the
//! live view — the hosts with their pids and addresses, model values, route positions
//! with each destination's receipt verified offline, grant units, each authority's
//! leader and read barrier — until Ctrl-C or `--seconds`; every child started is
//! stopped. A child that exits while `up` runs is reported at once (how it ended, its
//! log) and makes `up` exit 1 at the end.
//!
//! The view ([`view`]) is drawn by a [`Screen`]: on a terminal it is redrawn in place
//! (the previous frame's lines erased, never the whole screen) when it changed; not on a
//! terminal, a frame is appended only when something in it other than the elapsed time
//! changed.

mod view;

pub use view::*;

use grid_spec::limits::UP_RECONCILE_ROUNDS_MAX;
use std::io::{IsTerminal, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use grid_engine::host::control::Client;
use grid_spec::Topology;

use crate::apply::{self, Status};
use crate::observe::{self, HostStatus};
use crate::plan::{self, Action, Op};

/// How long a started gridd may take to answer on its control socket.
pub const HOST_READY_TIMEOUT: Duration = Duration::from_secs(20);
pub use crate::local::HOST_STOP_TIMEOUT;
/// How often the live view refreshes.
pub const VIEW_REFRESH: Duration = Duration::from_millis(500);
/// The log of a gridd started by `up`, inside its installation.
pub const HOST_LOG_FILE: &str = "gridd.log";

/// `gridd`, installed beside `gridctl`.
pub fn gridd_path() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("gridd")))
        .unwrap_or_else(|| PathBuf::from("gridd"))
}

/// How a process ended, for people: `exited with status 2`, `exited (signal 9)`.
pub fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("exited (signal {signal})"),
        _ => format!("exited ({status})"),
    }
}

/// Makes the child get SIGTERM when this process dies, however it dies (`kill -9` of
/// `up` included): a gridd never outlives the `up` that started it, keeping its port.
/// The signal is tied to the thread that spawns the child: `up` spawns from its main
/// thread, which lives as long as `up`.
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: between fork and exec the closure calls only async-signal-safe functions
    // (prctl, getppid) and allocates nothing on success.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before prctl took effect: no signal would ever come.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// One gridd this process started.
struct ChildHost {
    name: String,
    child: Child,
    log: PathBuf,
    /// How it ended, once seen.
    exited: Option<ExitStatus>,
}

/// A child gridd that exited while `up` ran.
#[derive(Debug, Clone)]
pub struct Exited {
    pub host: String,
    pub status: ExitStatus,
    pub log: PathBuf,
}

impl Exited {
    /// `edge-a exited (signal 9); its log: DIR/gridd.log`.
    pub fn line(&self) -> String {
        format!(
            "{} {}; its log: {}",
            self.host,
            describe_exit(self.status),
            self.log.display()
        )
    }
}

/// Child hosts this process started; stopped on drop.
#[derive(Default)]
pub struct Children {
    running: Vec<ChildHost>,
}

impl Children {
    /// Starts `gridd --dir DIR` for `name` and waits until it answers.
    pub fn start(&mut self, name: &str, dir: &Path) -> Result<(), String> {
        let log_path = dir.join(HOST_LOG_FILE);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut command = Command::new(gridd_path());
        command
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", gridd_path().display()))?;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
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
        self.running.push(ChildHost {
            name: name.to_owned(),
            child,
            log: log_path,
            exited: None,
        });
        Ok(())
    }

    /// The children that exited since the last call, each reported once.
    pub fn reap(&mut self) -> Vec<Exited> {
        let mut exited = Vec::new();
        for host in &mut self.running {
            if host.exited.is_some() {
                continue;
            }
            if let Ok(Some(status)) = host.child.try_wait() {
                host.exited = Some(status);
                exited.push(Exited {
                    host: host.name.clone(),
                    status,
                    log: host.log.clone(),
                });
            }
        }
        exited
    }

    /// How many children are still running (as last reaped).
    pub fn running(&self) -> usize {
        self.running.iter().filter(|h| h.exited.is_none()).count()
    }

    /// The child started for `host`, as last reaped: its pid and how it ended.
    fn get(&self, host: &str) -> Option<&ChildHost> {
        self.running.iter().rev().find(|h| h.name == host)
    }

    /// Stops the child started for `host` (SIGTERM, then SIGKILL after
    /// `HOST_STOP_TIMEOUT`) and forgets it: `up` restarts its own children only.
    fn stop(&mut self, host: &str) {
        let (stopping, kept): (Vec<ChildHost>, Vec<ChildHost>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|h| h.name == host);
        self.running = kept;
        let mut stopping = Children { running: stopping };
        stopping.stop_all();
    }

    pub fn stop_all(&mut self) {
        for host in &mut self.running {
            if host.exited.is_some() {
                continue;
            }
            // SAFETY: kill(2) on our own child's pid, not yet waited for; the worst case
            // is ESRCH.
            unsafe {
                libc::kill(host.child.id() as libc::pid_t, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + HOST_STOP_TIMEOUT;
        for host in &mut self.running {
            while host.exited.is_none() && Instant::now() < deadline {
                if let Ok(Some(_)) = host.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = host.child.kill();
            let _ = host.child.wait();
        }
        self.running.clear();
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Runs `up`; returns the exit code: 0, 1 when a host it started exited while it ran
/// (or the plan did not become empty), or reconcile's code when applying stopped.
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
        signal_hook::flag::register(signal_hook::consts::SIGINT, stop)
            .map_err(|e| format!("cannot handle Ctrl-C: {e}"))?;
    }
    // Strays: a gridd serving one of these installations that this `up` did not start
    // (a previous `up` killed before its children learned to die with it, or one
    // started by hand). `up` never adopts a process it cannot stop cleanly.
    let strays: Vec<String> = topology
        .hosts
        .iter()
        .filter(|h| !h.retired)
        .filter(|h| Client::connect(&plan::host_dir(state, h)).is_ok())
        .map(
            |h| match crate::local::gridd_pid(&plan::host_dir(state, h)) {
                Some(pid) => format!("{} (pid {pid})", h.name),
                None => h.name.clone(),
            },
        )
        .collect();
    if !strays.is_empty() {
        return Err(format!(
            "already running, not started by this `up`: {}; `gridctl down --state {}` stops them (it retires nothing), then run `up` again",
            strays.join(", "),
            state.display()
        ));
    }
    let _record = crate::local::UpRecord::write(state)?;
    let mut children = Children::default();
    let mut settled = false;
    for round in 0..UP_RECONCILE_ROUNDS_MAX {
        let exited = children.reap();
        if !exited.is_empty() {
            for host in &exited {
                let _ = writeln!(out, "{}", host.line());
            }
            let _ = writeln!(out, "a host exited before the plan became empty; stopping");
            children.stop_all();
            return Ok(1);
        }
        let plan = plan::plan(topology, files, state);
        let actionable = plan
            .transitions
            .iter()
            .any(|t| !matches!(t.action, Action::None));
        if round == 0 || actionable {
            let _ = write!(out, "{}", plan.render());
            if let Some(note) = starting_note(&plan, topology, state) {
                let _ = writeln!(out, "{note}");
            }
        }
        if actionable {
            let report = apply::apply(&plan);
            let _ = write!(out, "{}", report.render());
            // Waiting transitions wait for the hosts this loop starts next.
            if !matches!(
                report.outcome,
                Status::Succeeded | Status::Waiting | Status::Attention
            ) {
                return Ok(report.outcome.exit_code());
            }
            // Installations and their certificates settle before any host starts.
            continue;
        }
        // Start every host of the files that is installed but not running. A host
        // whose store is fenced at an authority (`storage authority=`) asks it before
        // it serves: it starts once every other host runs and a round reconciled
        // since (which bootstraps the authority).
        let mut started_any = false;
        let fenced =
            |config: &grid_engine::host::config::HostConfig| config.storage_claim.is_some();
        let observed: Vec<_> = topology
            .hosts
            .iter()
            .map(|host| {
                let dir = plan::host_dir(state, host);
                let observation = observe::observe_host(&host.name, &dir);
                (host, dir, observation)
            })
            .collect();
        let others_down = observed.iter().any(|(_, _, observation)| {
            matches!(
                (&observation.status, &observation.config),
                (HostStatus::Unreachable { .. }, Some(config)) if !fenced(config)
            )
        });
        for (host, dir, observation) in &observed {
            let dir = dir.as_path();
            match (&observation.status, &observation.config) {
                (HostStatus::Unreachable { .. }, Some(config))
                    if !(others_down && fenced(config)) =>
                {
                    children.start(&host.name, dir)?;
                    let _ = writeln!(out, "started host {} ({})", host.name, dir.display());
                    started_any = true;
                }
                // Profiles are read at start: a child of this `up` whose host.toml
                // selects others since is restarted (a gridd `up` did not start
                // refused to be adopted above).
                (HostStatus::Running(running), Some(config))
                    if children.get(&host.name).is_some()
                        && running.profiles.as_ref().is_some_and(|p| {
                            crate::diff::hosts::profiles_differ(&config.profiles, p)
                        }) =>
                {
                    children.stop(&host.name);
                    children.start(&host.name, dir)?;
                    let _ = writeln!(
                        out,
                        "restarted host {} to run profiles {}",
                        host.name,
                        config.profiles.join(" ")
                    );
                    started_any = true;
                }
                _ => {}
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
        children.running()
    );
    let mut screen = Screen::new(std::io::stdout().is_terminal());
    let started = Instant::now();
    let mut exits: Vec<Exited> = Vec::new();
    while !stop.load(Ordering::SeqCst)
        && seconds.is_none_or(|s| started.elapsed() < Duration::from_secs(s))
    {
        let refresh = Instant::now();
        let elapsed = started.elapsed();
        for exited in children.reap() {
            screen.note(out, &exited.line());
            exits.push(exited);
        }
        let hosts = host_rows(topology, state, &children);
        let body = format!("{}{}", render_hosts(&hosts), view(topology, state));
        let header = format!(
            "up {} s; {} of {} host(s) running; Ctrl-C stops them",
            elapsed.as_secs(),
            hosts
                .iter()
                .filter(|h| matches!(h.state, HostState::Running { .. }))
                .count(),
            hosts.len()
        );
        screen.show(out, &header, &body);
        let _ = out.flush();
        std::thread::sleep(VIEW_REFRESH.saturating_sub(refresh.elapsed()));
    }
    children.stop_all();
    for exited in &exits {
        let _ = writeln!(out, "exited while up ran: {}", exited.line());
    }
    let _ = writeln!(out, "stopped");
    Ok(if exits.is_empty() { 0 } else { 1 })
}

/// The hosts among the plan's `!` lines that are installed but not running yet: `up`
/// starts them, so "unreachable" there means "starting".
fn starting_note(plan: &plan::Plan, topology: &Topology, state: &Path) -> Option<String> {
    let starting: Vec<&str> = plan
        .transitions
        .iter()
        .filter(|t| t.op == Op::Attention && t.kind == "host")
        .filter_map(|t| topology.hosts.iter().find(|h| h.name == t.name))
        .filter(|host| {
            let observation = observe::observe_host(&host.name, &plan::host_dir(state, host));
            matches!(observation.status, HostStatus::Unreachable { .. })
                && observation.config.is_some()
        })
        .map(|host| host.name.as_str())
        .collect();
    (!starting.is_empty()).then(|| {
        format!(
            "starting: {} (installed, not running yet, hence unreachable above; up starts \
             them once nothing else is left to apply)",
            starting.join(", ")
        )
    })
}

/// One host of the files in the live view.
#[derive(Debug, Clone, PartialEq)]
pub struct HostRow {
    pub host: String,
    pub listen: String,
    pub state: HostState,
    /// The address of the host's control plane (its first `control listen=`, `https://`
    /// with operator mutual TLS), shown while it runs.
    pub control: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HostState {
    /// A gridd answers on its control socket; `pid` when `up` started it.
    Running { pid: Option<u32> },
    /// The gridd `up` started exited.
    Exited { pid: u32, how: String, log: PathBuf },
    /// Nothing answers (and `up` did not start it).
    NotRunning,
}

/// Every host of the files: the children `up` started (pid, or how they ended), others
/// as their control socket answers.
pub fn host_rows(topology: &Topology, state: &Path, children: &Children) -> Vec<HostRow> {
    topology
        .hosts
        .iter()
        .filter(|h| !h.retired)
        .map(|host| {
            let state = match children.get(&host.name) {
                Some(child) => match child.exited {
                    Some(status) => HostState::Exited {
                        pid: child.child.id(),
                        how: describe_exit(status),
                        log: child.log.clone(),
                    },
                    None => HostState::Running {
                        pid: Some(child.child.id()),
                    },
                },
                None if Client::connect(&plan::host_dir(state, host)).is_ok() => {
                    HostState::Running { pid: None }
                }
                None => HostState::NotRunning,
            };
            HostRow {
                host: host.name.clone(),
                listen: host.listen.to_string(),
                state,
                control: host.control.first().map(|c| match c.operators {
                    Some(_) => format!("https://{}/", c.listen),
                    None => format!("http://{}/", c.listen),
                }),
            }
        })
        .collect()
}

/// The `hosts` section: name, pid, listen address, state.
pub fn render_hosts(hosts: &[HostRow]) -> String {
    let rows: Vec<Vec<String>> = hosts
        .iter()
        .map(|h| {
            let (pid, state) = match &h.state {
                HostState::Running { pid: Some(pid) } => (
                    format!("pid {pid}"),
                    match &h.control {
                        Some(control) => format!("running; control plane {control}"),
                        None => "running".into(),
                    },
                ),
                HostState::Running { pid: None } => {
                    ("pid ?".to_owned(), "running (not started by up)".into())
                }
                HostState::Exited { pid, how, log } => (
                    format!("pid {pid}"),
                    format!("{how}; its log: {}", log.display()),
                ),
                HostState::NotRunning => ("-".to_owned(), "not running".to_owned()),
            };
            vec![h.host.clone(), pid, h.listen.clone(), state]
        })
        .collect();
    let mut out = String::new();
    view::section(&mut out, "hosts", &rows);
    out
}

/// Where frames of the live view go. On a terminal a changed frame replaces the one
/// before in place: the cursor goes up over the previous frame's lines and erases them
/// to the end of the screen (never the whole screen, so the scrollback keeps only what
/// came before `up`'s view). Not on a terminal, a frame is appended only when its body
/// changed: the header (the elapsed time) alone changing prints nothing.
pub struct Screen {
    terminal: bool,
    /// Lines of the frame on the screen now (terminal only).
    drawn: usize,
    shown: Option<(String, String)>,
}

impl Screen {
    pub fn new(terminal: bool) -> Screen {
        Screen {
            terminal,
            drawn: 0,
            shown: None,
        }
    }

    /// Shows a frame: `header` (one line) over `body`, if it differs from the one shown.
    pub fn show(&mut self, out: &mut dyn Write, header: &str, body: &str) {
        let changed = match &self.shown {
            None => true,
            Some((h, b)) => b != body || (self.terminal && h != header),
        };
        if !changed {
            return;
        }
        self.erase(out);
        let frame = format!("{header}\n{body}");
        let _ = write!(out, "{frame}");
        if self.terminal {
            self.drawn = frame.lines().count();
        }
        self.shown = Some((header.to_owned(), body.to_owned()));
    }

    /// A line that stays: written above the frame (which is drawn again after it).
    pub fn note(&mut self, out: &mut dyn Write, line: &str) {
        self.erase(out);
        let _ = writeln!(out, "{line}");
        self.shown = None;
    }

    fn erase(&mut self, out: &mut dyn Write) {
        if self.terminal && self.drawn > 0 {
            // CSI n F: to the start of the line n lines up; CSI J: erase to the end.
            let _ = write!(out, "\x1b[{}F\x1b[J", self.drawn);
        }
        self.drawn = 0;
    }
}
