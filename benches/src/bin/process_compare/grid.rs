//! Grid's remote Processes on loopback, brought up the way the journeys do it: a
//! topology file, `gridctl reconcile` twice (installations and keys, then enrollments),
//! one `gridd` per host, then `gridctl reconcile` until `gridctl plan` has nothing left
//! to do (the grant is issued by the running receiver).
//!
//! Membership `ops`; hosts `receiver`, `caller` and `mailbox`, each with the profiles
//! `transport processes`; `grant bench issuer=receiver caller=caller units=100000000
//! mailbox=mailbox`. The benchmark drives the caller through its control socket:
//! `Call::Process { Run { .. } }` of `demo.count` at `receiver`, directly (HTTPS, mutual
//! TLS 1.3) or through the mailbox host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use grid_engine::host::control::{CONTROL_CONNECTIONS_MAX, Client};
use grid_engine::processes::api::{
    GrantView, Peer, ProcessCall, ProcessReply, RunCounts, RunOutcome, RunRequest,
};
use grid_engine::protocol::{Call, Reply};

use grid_benches::procs::{Procs, Result, free_ports, tail};

pub const MEMBERSHIP: &str = "ops";
pub const RECEIVER: &str = "receiver";
pub const CALLER: &str = "caller";
pub const MAILBOX: &str = "mailbox";
pub const HOSTS: [&str; 3] = [RECEIVER, CALLER, MAILBOX];
pub const GRANT: &str = "bench";
pub const GRANT_UNITS: u64 = 100_000_000;
/// The Process every run executes (the receiver's built-in counter).
pub const PROCESS: &str = "demo.count";
/// How long one `Run` call waits for the outcome before the host answers `unknown`.
pub const WAIT_MS: u64 = 30_000;

/// How long a started host may take until it accepts control connections, and the
/// first run may be refused while the grant is being installed.
const HOST_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `gridctl reconcile` may take to reach an empty plan once the hosts run.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(120);
const CONVERGE_ROUNDS_MAX: u32 = 20;
const CONVERGED: &str = "plan: 0 to create, 0 to change, 0 to retire, 0 needing attention";
/// How long a connection may be retried while the host refuses it for being over
/// `CONTROL_CONNECTIONS_MAX` (the previous measurement's connections are closing).
const CONNECT_RETRY: Duration = Duration::from_secs(10);

/// The three hosts, one `gridd` each.
pub struct GridProcesses {
    state: PathBuf,
    pub procs: Procs,
    pub ports: Vec<u16>,
    /// The `gridctl reconcile` rounds it took after the hosts started.
    pub rounds: u32,
    receiver: Peer,
    mailbox: Peer,
}

fn topology(ports: &[u16]) -> String {
    let mut text = format!(
        "grid version=1\n\n// Written by benches process_compare.\nmembership {MEMBERSHIP}\n"
    );
    for (host, port) in HOSTS.iter().zip(ports) {
        text.push_str(&format!(
            "host {host} listen=\"127.0.0.1:{port}\" {{\n    member {MEMBERSHIP}\n    profiles transport processes\n}}\n"
        ));
    }
    text.push_str(&format!(
        "grant {GRANT} issuer={RECEIVER} caller={CALLER} units={GRANT_UNITS} mailbox={MAILBOX}\n"
    ));
    text
}

impl GridProcesses {
    /// Brings the hosts up under `work/grid` with `gridd` and `gridctl` from `bin_dir`,
    /// and checks one run directly and one through the mailbox.
    pub fn start(bin_dir: &Path, work: &Path) -> Result<GridProcesses> {
        let dir = work.join("grid");
        let gridd = bin_dir.join("gridd");
        let gridctl = bin_dir.join("gridctl");
        let state = dir.join("state");
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let ports = free_ports(HOSTS.len())?;
        let file = dir.join("topology.kdl");
        std::fs::write(&file, topology(&ports))?;
        let gridctl_run = |what: &str, round: u32| -> Result<(bool, String)> {
            let log = logs.join(format!("{what}-{round}.log"));
            let out = std::fs::File::create(&log)?;
            let status = Command::new(&gridctl)
                .arg(what)
                .arg(&file)
                .arg("--state")
                .arg(&state)
                .current_dir(&dir)
                .stdin(std::process::Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                .status()
                .map_err(|e| format!("running {}: {e}", gridctl.display()))?;
            Ok((status.success(), tail(&log, 30)))
        };
        for round in [1, 2] {
            // installations and keys, then enrollments
            let (ok, output) = gridctl_run("reconcile", round)?;
            if !ok {
                return Err(format!(
                    "`gridctl reconcile {} --state {}` (round {round}) failed:\n{output}",
                    file.display(),
                    state.display()
                )
                .into());
            }
        }
        let host_dir = |host: &str| state.join("hosts").join(host);
        let mut procs = Procs::default();
        for host in HOSTS {
            let mut command = Command::new(&gridd);
            command
                .arg("--dir")
                .arg(host_dir(host))
                .current_dir(&dir)
                .env_remove("GRID_FAILPOINTS");
            procs.spawn(
                &format!("gridd {host}"),
                command,
                &logs.join(format!("gridd-{host}.log")),
            )?;
        }
        for host in HOSTS {
            let started = Instant::now();
            let socket = grid_engine::host::control::socket_path(&host_dir(host));
            while std::os::unix::net::UnixStream::connect(&socket).is_err() {
                procs.check_running()?;
                if started.elapsed() > HOST_READY_TIMEOUT {
                    return Err(format!(
                        "host {host} did not accept control connections within {HOST_READY_TIMEOUT:?}:\n{}",
                        procs.log_tail(&format!("gridd {host}"))
                    )
                    .into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Issue the grant (and whatever else needs the running hosts): reconcile until
        // the plan is empty (bounded in rounds and time).
        let started = Instant::now();
        let mut last = String::new();
        let mut rounds = 0;
        let mut converged = false;
        for round in 3..3 + CONVERGE_ROUNDS_MAX {
            procs.check_running()?;
            let (ok, output) = gridctl_run("reconcile", round)?;
            rounds = round - 2;
            let (_, plan) = gridctl_run("plan", round)?;
            if ok && plan.lines().any(|l| l.trim() == CONVERGED) {
                converged = true;
                break;
            }
            last = format!("gridctl reconcile:\n{output}\ngridctl plan:\n{plan}");
            if started.elapsed() > CONVERGE_TIMEOUT {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        if !converged {
            let logs: Vec<String> = HOSTS
                .iter()
                .map(|h| format!("gridd {h}:\n{}", procs.log_tail(&format!("gridd {h}"))))
                .collect();
            return Err(format!(
                "Grid did not converge (`{CONVERGED}`) within {CONVERGE_TIMEOUT:?} or {CONVERGE_ROUNDS_MAX} rounds; \
                 the last round:\n{last}\n{}",
                logs.join("\n")
            )
            .into());
        }
        let peer = |host: &str, port: u16| -> Result<Peer> {
            Ok(Peer {
                name: host.to_owned(),
                address: format!("127.0.0.1:{port}"),
                keys: grid_engine::custody::manifest(&host_dir(host))
                    .map_err(|e| format!("the custody manifest of {host}: {e}"))?,
            })
        };
        let mut grid = GridProcesses {
            receiver: peer(RECEIVER, ports[0])?,
            mailbox: peer(MAILBOX, ports[2])?,
            state: state.clone(),
            procs,
            ports,
            rounds,
        };
        grid.check_runs()?;
        Ok(grid)
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.state.join("hosts").join(host)
    }

    /// A new control connection to the caller host.
    pub fn caller(&self) -> Result<Caller> {
        Caller::connect(
            self.host_dir(CALLER),
            self.receiver.clone(),
            self.mailbox.clone(),
        )
    }

    /// One run directly and one through the mailbox, retried while they are refused
    /// (a check of both paths before anything is measured).
    fn check_runs(&mut self) -> Result<()> {
        let mut caller = self.caller()?;
        for (via_mailbox, path) in [(false, "direct"), (true, "mailbox")] {
            let started = Instant::now();
            let mut attempt = 0;
            loop {
                attempt += 1;
                match caller.run(format!("check-{path}-{attempt}"), via_mailbox) {
                    Ok(()) => break,
                    Err(reason) if started.elapsed() < HOST_READY_TIMEOUT => {
                        let _ = reason;
                        self.procs.check_running()?;
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(reason) => {
                        let logs: Vec<String> = HOSTS
                            .iter()
                            .map(|h| {
                                format!(
                                    "gridd {h}:\n{}",
                                    self.procs.log_tail(&format!("gridd {h}"))
                                )
                            })
                            .collect();
                        return Err(format!(
                            "the first {path} run did not succeed within {HOST_READY_TIMEOUT:?}: {reason}\n{}",
                            logs.join("\n")
                        )
                        .into());
                    }
                }
            }
        }
        Ok(())
    }
}

fn process(client: &mut Client, request: ProcessCall) -> std::result::Result<ProcessReply, String> {
    match client.call(&Call::Process { request }) {
        Ok(Reply::Process(reply)) => Ok(*reply),
        Ok(other) => Err(format!("{other:?}")),
        Err(e) => Err(format!("call error: {e}")),
    }
}

/// One control-socket connection to a host (the caller, or any host for inspection).
pub struct Caller {
    client: Client,
    receiver: Peer,
    mailbox: Peer,
}

impl Caller {
    /// Connects and checks that the host serves this connection (a host over
    /// `CONTROL_CONNECTIONS_MAX` answers the first call with a refusal).
    fn connect(host_dir: PathBuf, receiver: Peer, mailbox: Peer) -> Result<Caller> {
        let started = Instant::now();
        loop {
            let mut client = Client::connect(&host_dir)?;
            // A cheap call that changes nothing.
            match client.call(&Call::Process {
                request: ProcessCall::Processes,
            })? {
                Reply::Process(_) => {
                    return Ok(Caller {
                        client,
                        receiver,
                        mailbox,
                    });
                }
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

    /// Runs [`PROCESS`] at the receiver once under request id `id`, directly or
    /// through the mailbox: `Ok` once the caller reports it `succeeded`, else why not.
    pub fn run(&mut self, id: String, via_mailbox: bool) -> std::result::Result<(), String> {
        let reply = process(
            &mut self.client,
            ProcessCall::Run {
                request: RunRequest {
                    request: id.clone(),
                    process: PROCESS.to_owned(),
                    arguments: BTreeMap::new(),
                },
                receiver: self.receiver.clone(),
                via: via_mailbox.then(|| self.mailbox.clone()),
                membership: MEMBERSHIP.to_owned(),
                wait_ms: Some(WAIT_MS),
            },
        )?;
        match reply {
            ProcessReply::Ran { run } if run.outcome == RunOutcome::Succeeded => {
                if run.request == id {
                    Ok(())
                } else {
                    Err(format!("succeeded, but for request {}", run.request))
                }
            }
            ProcessReply::Ran { run } => Err(format!(
                "{} (grant {:?}, units {}): {}",
                run.outcome.name(),
                run.grant,
                run.units,
                run.detail
            )),
            ProcessReply::Refused { reason } => Err(format!("refused: {reason}")),
            other => Err(format!("{other:?}")),
        }
    }
}

/// What the receiver holds at the end: its runs by outcome, the `demo.count` counter,
/// and the grant's units.
pub struct ReceiverTotals {
    pub runs: RunCounts,
    pub demo_count: u64,
    pub grant: Option<GrantView>,
}

impl GridProcesses {
    pub fn receiver_totals(&self) -> Result<ReceiverTotals> {
        let mut client = Client::connect(&self.host_dir(RECEIVER))?;
        let (runs, demo_count) = match process(&mut client, ProcessCall::Processes)? {
            ProcessReply::Processes {
                runs, demo_count, ..
            } => (runs, demo_count),
            other => return Err(format!("processes: {other:?}").into()),
        };
        let grant = match process(&mut client, ProcessCall::Grants)? {
            ProcessReply::Grants { grants, .. } => grants.into_iter().find(|g| g.name == GRANT),
            other => return Err(format!("grants: {other:?}").into()),
        };
        Ok(ReceiverTotals {
            runs,
            demo_count,
            grant,
        })
    }
}
