//! Bringing the two sides up on loopback.
//!
//! Grid the way the journeys do it ([`GridHosts::start`]): a topology file, `gridctl
//! reconcile` once (installations, keys and enrollments; the rest waits), the `gridd` processes,
//! then `gridctl reconcile` until `gridctl plan` has nothing left to do (what needs the
//! running hosts: the authority's bootstrap, learners and voters, routes, claims,
//! grants). Control connections that a host actually serves ([`connect_served`]).
//!
//! The alternatives' executables ([`locate`]): an environment variable, else the one a
//! PyPI package installs, else the one on PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use grid_engine::host::control::Client;
use grid_engine::limits::CONTROL_CONNECTIONS_MAX;
use grid_engine::protocol::{Call, Reply};

use crate::cli::Measurement;
use crate::limits::CONVERGE_ROUNDS_MAX;
use crate::procs::{Procs, Result, WorkDir, grid_bin_dir, tail};
use crate::report::print_header;

/// How long a started process may take until each of its hosts accepts control
/// connections (per host, since the last one that did), and the first call through a
/// new topology may be refused.
pub const HOST_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `gridctl reconcile` may take to reach an empty plan once the hosts run.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(300);
const CONVERGED: &str = "plan: 0 to create, 0 to change, 0 to retire, 0 needing attention";
/// How long a connection may be retried while the host refuses it for being over
/// `CONTROL_CONNECTIONS_MAX` (the previous measurement's connections are closing).
const CONNECT_RETRY: Duration = Duration::from_secs(10);

/// A `gridd` process to start: its name (and log file) and the hosts it runs.
pub struct Gridd {
    pub name: String,
    pub hosts: Vec<String>,
}

/// Waits until a restarted host at `host` answers `values` for `model` (every model
/// recovered, the control socket served), asking every `poll`: the time since
/// `spawned`; an error past `timeout`.
pub fn values_answered(
    host: &Path,
    model: &str,
    spawned: Instant,
    (poll, timeout): (Duration, Duration),
) -> Result<Duration> {
    loop {
        if let Ok(mut client) = Client::connect(host)
            && let Ok(Reply::Values { .. }) = client.call(&Call::Values {
                model: model.to_owned(),
            })
        {
            return Ok(spawned.elapsed());
        }
        if spawned.elapsed() > timeout {
            return Err(format!("{} did not answer within {timeout:?}", host.display()).into());
        }
        std::thread::sleep(poll);
    }
}

/// One `gridd` per host, each named `gridd HOST`.
pub fn one_gridd_per_host(hosts: &[&str]) -> Vec<Gridd> {
    hosts
        .iter()
        .map(|host| Gridd {
            name: format!("gridd {host}"),
            hosts: vec![(*host).to_owned()],
        })
        .collect()
}

/// A `host` node of a topology: listening on loopback, a member of `membership`.
pub fn host_node(host: &str, port: u16, membership: &str, profiles: &str) -> String {
    format!(
        "host {host} listen=\"127.0.0.1:{port}\" {{\n    member {membership}\n    profiles {profiles}\n}}\n"
    )
}

/// Hosts brought up from one topology file.
pub struct GridHosts {
    state: PathBuf,
    pub procs: Procs,
    /// The `gridctl reconcile` rounds it took after the hosts started.
    pub rounds: u32,
}

/// The usual start of a benchmark of Grid alone: its header (with the gridd it runs), a
/// work directory `work` (kept with `keep`), free ports for `hosts`, and one gridd per
/// host started from `topology(ports)` and reconciled.
pub fn start_bench(
    title: &str,
    work: &str,
    keep: bool,
    hosts: &[&str],
    topology: impl Fn(&[u16]) -> String,
) -> Result<(WorkDir, GridHosts)> {
    let bin_dir = grid_bin_dir()?;
    print_header(title, Some(&bin_dir))?;
    let work = WorkDir::new(work, keep)?;
    let ports = crate::procs::free_ports(hosts.len())?;
    let started = GridHosts::start(
        &bin_dir,
        &work.path,
        "topology.kdl",
        &topology(&ports),
        &one_gridd_per_host(hosts),
    )?;
    Ok((work, started))
}

impl GridHosts {
    /// Writes `topology` to `dir/file_name`, reconciles, starts `gridds` (with `gridd`
    /// and `gridctl` from `bin_dir`) and reconciles until the plan is empty.
    pub fn start(
        bin_dir: &Path,
        dir: &Path,
        file_name: &str,
        topology: &str,
        gridds: &[Gridd],
    ) -> Result<GridHosts> {
        let gridd = bin_dir.join("gridd");
        let gridctl = bin_dir.join("gridctl");
        let state = dir.join("state");
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let file = dir.join(file_name);
        std::fs::write(&file, topology)?;
        let mut hosts = GridHosts {
            state: state.clone(),
            procs: Procs::default(),
            rounds: 0,
        };
        let gridctl_run = |what: &str, round: u32| -> Result<(Option<i32>, String)> {
            let log = logs.join(format!("{what}-{round}.log"));
            let out = std::fs::File::create(&log)?;
            let status = Command::new(&gridctl)
                .arg(what)
                .arg(&file)
                .arg("--state")
                .arg(&state)
                .current_dir(dir)
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                .status()
                .map_err(|e| format!("running {}: {e}", gridctl.display()))?;
            Ok((status.code(), tail(&log, 30)))
        };
        {
            // Installations, keys and enrollments; the rest waits for the hosts to run
            // (exit 5, `waiting`), or nothing waits (exit 0).
            let round = 1;
            let (code, output) = gridctl_run("reconcile", round)?;
            if !matches!(code, Some(0 | 5)) {
                return Err(format!(
                    "`gridctl reconcile {} --state {}` (round {round}) failed:\n{output}",
                    file.display(),
                    state.display()
                )
                .into());
            }
        }
        for process in gridds {
            let mut command = Command::new(&gridd);
            for host in &process.hosts {
                command.arg("--dir").arg(hosts.host_dir(host));
            }
            command.current_dir(dir).env_remove("GRID_FAILPOINTS");
            let log = logs.join(format!("{}.log", process.name.replace(' ', "-")));
            hosts.procs.spawn(&process.name, command, &log)?;
        }
        for process in gridds {
            hosts.wait_accepting(process)?;
        }
        // What needs the running hosts: reconcile until the plan is empty (bounded in
        // rounds and time).
        let started = Instant::now();
        let mut last = String::new();
        for round in 3..3 + CONVERGE_ROUNDS_MAX {
            hosts.procs.check_running()?;
            let (code, output) = gridctl_run("reconcile", round)?;
            let ok = code == Some(0);
            hosts.rounds = round - 2;
            let (_, plan) = gridctl_run("plan", round)?;
            if ok && plan.lines().any(|l| l.trim() == CONVERGED) {
                return Ok(hosts);
            }
            last = format!("gridctl reconcile:\n{output}\ngridctl plan:\n{plan}");
            if started.elapsed() > CONVERGE_TIMEOUT {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let names: Vec<&str> = gridds.iter().take(3).map(|g| g.name.as_str()).collect();
        Err(format!(
            "Grid did not converge (`{CONVERGED}`) within {CONVERGE_TIMEOUT:?} or {CONVERGE_ROUNDS_MAX} rounds; \
             the last round:\n{last}\n{}",
            hosts.log_tails(&names)
        )
        .into())
    }

    /// Waits until every host of `process` accepts control connections.
    fn wait_accepting(&mut self, process: &Gridd) -> Result<()> {
        let mut progress = Instant::now();
        for host in &process.hosts {
            let socket = grid_engine::host::control::socket_path(&self.host_dir(host));
            while std::os::unix::net::UnixStream::connect(&socket).is_err() {
                self.procs.check_running()?;
                if progress.elapsed() > HOST_READY_TIMEOUT {
                    return Err(format!(
                        "host {host} of {} did not accept control connections within {HOST_READY_TIMEOUT:?}:\n{}",
                        process.name,
                        self.procs.log_tail(&process.name)
                    )
                    .into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            progress = Instant::now();
        }
        Ok(())
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.state.join("hosts").join(host)
    }

    /// The end of the logs of the processes `names`, one after the other.
    pub fn log_tails(&self, names: &[&str]) -> String {
        names
            .iter()
            .map(|name| format!("{name}:\n{}", self.procs.log_tail(name)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Calls `attempt` until it succeeds, every `pause`, while the processes run and
    /// for at most [`HOST_READY_TIMEOUT`]: the last refusal after that.
    pub fn retry<T>(
        &mut self,
        pause: Duration,
        mut attempt: impl FnMut() -> std::result::Result<T, String>,
    ) -> Result<std::result::Result<T, String>> {
        let started = Instant::now();
        loop {
            match attempt() {
                Ok(value) => return Ok(Ok(value)),
                Err(reason) if started.elapsed() >= HOST_READY_TIMEOUT => return Ok(Err(reason)),
                Err(_) => {
                    self.procs.check_running()?;
                    std::thread::sleep(pause);
                }
            }
        }
    }
}

/// A control connection to the host at `host_dir` that the host serves: `probe` (a
/// call that changes nothing) is answered as `served` says, not refused for being over
/// `CONTROL_CONNECTIONS_MAX` (retried a while: the previous measurement's connections
/// may still be closing).
pub fn connect_served(
    host_dir: &Path,
    probe: &Call,
    served: impl Fn(&Reply) -> bool,
) -> Result<Client> {
    let started = Instant::now();
    loop {
        let mut client = Client::connect(host_dir)?;
        match client.call(probe)? {
            reply if served(&reply) => return Ok(client),
            Reply::Refused { .. } if started.elapsed() < CONNECT_RETRY => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => {
                return Err(format!(
                    "{}: {other:?} (at most {CONTROL_CONNECTIONS_MAX} control connections per host)",
                    host_dir.display()
                )
                .into());
            }
        }
    }
}

/// Where the executable `name` is: `$env_var`, else the path the Python snippet
/// `python` prints (where a PyPI package put it), else `name` on PATH; else an error
/// that says how to install it (`hint`).
pub fn locate(env_var: &str, python: &str, name: &str, hint: &str) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(env_var) {
        return Ok(PathBuf::from(path));
    }
    if let Ok(out) = Command::new("python3").args(["-c", python]).output()
        && out.status.success()
    {
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if path.is_file() {
            return Ok(path);
        }
    }
    if let Ok(out) = Command::new(name).arg("--version").output()
        && out.status.success()
    {
        return Ok(PathBuf::from(name));
    }
    Err(format!("no {name}: {hint} (or set {env_var} to the {name} executable)").into())
}

/// `BIN --version`, its lines joined by `, `.
pub fn version(bin: &Path) -> Result<String> {
    let out = Command::new(bin).arg("--version").output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(", "))
}

/// What every side-by-side run starts with: Grid's binaries when its side runs, the
/// alternative's executable when that side runs and has one, the run's header printed,
/// a work directory and a tokio runtime. Drop the servers first, then this.
pub struct Sides {
    pub grid_bins: Option<PathBuf>,
    pub other_bin: Option<PathBuf>,
    pub runtime: tokio::runtime::Runtime,
    pub work: WorkDir,
}

/// The alternative's executable: its name in the header, and how to find it.
pub struct OtherBin {
    pub label: &'static str,
    pub locate: fn() -> Result<PathBuf>,
}

impl Sides {
    /// Finds the executables, prints `title`, the machine, the `gridd` and the
    /// alternative's version, then makes `$TMPDIR/WORK_PREFIX-PID` and the runtime.
    pub fn start(
        title: &str,
        measurement: &Measurement,
        work_prefix: &str,
        other: Option<OtherBin>,
    ) -> Result<Sides> {
        let grid_bins = if measurement.runs_grid() {
            Some(grid_bin_dir()?)
        } else {
            None
        };
        let other = match other {
            Some(other) if measurement.runs_other() => Some((other.label, (other.locate)()?)),
            _ => None,
        };
        print_header(title, grid_bins.as_deref())?;
        if let Some((label, bin)) = &other {
            println!("{label}: {} ({})", bin.display(), version(bin)?);
        }
        Ok(Sides {
            grid_bins,
            other_bin: other.map(|(_, bin)| bin),
            runtime: tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?,
            work: WorkDir::new(work_prefix, measurement.keep)?,
        })
    }
}

/// Runs a binary's `run`, printing its error (prefixed with its name) and exiting 1.
pub fn exit_on_error(name: &str, result: Result<()>) {
    if let Err(e) = result {
        eprintln!("{name}: {e}");
        std::process::exit(1);
    }
}
