//! Grid's remote Processes on loopback, brought up the way the journeys do it
//! (`grid_benches::bringup`): a topology file, `gridctl reconcile` twice (installations
//! and keys, then enrollments), one `gridd` per host, then `gridctl reconcile` until
//! `gridctl plan` has nothing left to do (the grant is issued by the running receiver).
//!
//! Membership `ops`; hosts `receiver`, `caller` and `mailbox`, each with the profiles
//! `transport processes`; `grant bench issuer=receiver caller=caller units=100000000
//! mailbox=mailbox`. The benchmark drives the caller through its control socket:
//! `Call::Process { Run { .. } }` of `demo.count` at `receiver`, directly (HTTPS, mutual
//! TLS 1.3) or through the mailbox host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use grid_engine::host::control::Client;
use grid_engine::processes::api::{Peer, ProcessCall, ProcessReply, RunOutcome, RunRequest};

use grid_benches::bringup::{GridHosts, HOST_READY_TIMEOUT, host_node, one_gridd_per_host};
use grid_benches::processes::{self, ReceiverTotals, process, receiver_totals};
use grid_benches::procs::{Result, free_ports};

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

/// The three hosts, one `gridd` each.
pub struct GridProcesses {
    pub hosts: GridHosts,
    pub ports: Vec<u16>,
    receiver: Peer,
    mailbox: Peer,
}

fn topology(ports: &[u16]) -> String {
    let mut text = format!(
        "grid version=1\n\n// Written by benches process_compare.\nmembership {MEMBERSHIP}\n"
    );
    for (host, port) in HOSTS.iter().zip(ports) {
        text.push_str(&host_node(host, *port, MEMBERSHIP, "transport processes"));
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
        let ports = free_ports(HOSTS.len())?;
        let hosts = GridHosts::start(
            bin_dir,
            &work.join("grid"),
            "topology.kdl",
            &topology(&ports),
            &one_gridd_per_host(&HOSTS),
        )?;
        let peer = |host: &str, port: u16| -> Result<Peer> {
            Ok(Peer {
                name: host.to_owned(),
                address: format!("127.0.0.1:{port}"),
                keys: grid_engine::custody::manifest(&hosts.host_dir(host))
                    .map_err(|e| format!("the custody manifest of {host}: {e}"))?,
            })
        };
        let mut grid = GridProcesses {
            receiver: peer(RECEIVER, ports[0])?,
            mailbox: peer(MAILBOX, ports[2])?,
            hosts,
            ports,
        };
        grid.check_runs()?;
        Ok(grid)
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.hosts.host_dir(host)
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
            let mut attempt = 0;
            let outcome = self.hosts.retry(Duration::from_millis(200), || {
                attempt += 1;
                caller.run(format!("check-{path}-{attempt}"), via_mailbox)
            })?;
            if let Err(reason) = outcome {
                let names: Vec<String> = HOSTS.iter().map(|h| format!("gridd {h}")).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                return Err(format!(
                    "the first {path} run did not succeed within {HOST_READY_TIMEOUT:?}: {reason}\n{}",
                    self.hosts.log_tails(&names)
                )
                .into());
            }
        }
        Ok(())
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
        let client = processes::connect(&host_dir)?;
        Ok(Caller {
            client,
            receiver,
            mailbox,
        })
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
                mission: None,
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

impl GridProcesses {
    /// What the receiver holds at the end: its runs by outcome, the `demo.count`
    /// counter, and the grant's units.
    pub fn receiver_totals(&self) -> Result<ReceiverTotals> {
        receiver_totals(&self.host_dir(RECEIVER), RECEIVER, GRANT)
    }
}
