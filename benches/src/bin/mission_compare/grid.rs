//! The two hosts of `mission_compare` on loopback, brought up the way the journeys do
//! it (`grid_benches::bringup`): a topology file, `gridctl reconcile`, one `gridd` per
//! host, then `gridctl reconcile` until `gridctl plan` has nothing left to do — which
//! issues the grant at `site` and reserves the mission at `edge` (quiesce, the claim
//! `mission:NAME` at the authority, the allocation signed by `site`).
//!
//! Membership `ops` (`authority voters=2`: both hosts vote, so without `site` the
//! authority has no majority); hosts `edge` and `site`, each with the profiles
//! `transport authority processes missions`; `grant edge-on-site issuer=site
//! caller=edge`; `mission bench host=edge … successor=site` (`site` its issuer). The
//! benchmark drives `edge` through its control socket, one connection, one call at a
//! time: `Call::Process { Run }` of `demo.count` at `site` under the grant (edge sends
//! it over HTTPS, mutual TLS 1.3; site journals it, charges the grant, executes,
//! journals the outcome, answers), or at `edge` itself with `mission: Some("bench")`
//! (edge journals it, charges its allocation, executes, journals the outcome: no peer).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use grid_engine::custody::Manifest;
use grid_engine::host::control::Client;
use grid_engine::missions::api::{MissionCall, MissionReply, MissionView};
use grid_engine::processes::api::{
    Peer, ProcessCall, ProcessReply, RunOutcome, RunRequest, RunView,
};
use grid_engine::processes::runs::RunUnits;
use grid_engine::protocol::{Call, Reply};

use grid_benches::bringup::{GridHosts, HOST_READY_TIMEOUT, host_node, one_gridd_per_host};
use grid_benches::limits::MISSION_COMPARE_RUN_MS_MAX;
use grid_benches::processes::{self, ReceiverTotals, receiver_totals};
use grid_benches::procs::{Result, free_ports};

pub const MEMBERSHIP: &str = "ops";
pub const EDGE: &str = "edge";
pub const SITE: &str = "site";
pub const HOSTS: [&str; 2] = [EDGE, SITE];
pub const GRANT: &str = "edge-on-site";
pub const MISSION: &str = "bench";
/// The mission's deadline: far enough that no run of the benchmark meets it.
pub const DEADLINE: &str = "2099-01-01T00:00:00Z";
/// The Process every run executes (each host's built-in counter).
pub const PROCESS: &str = "demo.count";
/// How long one `Run` call waits for its outcome before the host answers `unknown`:
/// longer than a valid run may take, so an over-long run still answers.
pub const WAIT_MS: u64 = 5 * MISSION_COMPARE_RUN_MS_MAX;

/// The two ways one sample runs the Process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `edge` → `site` under the grant, over mutual TLS.
    Online,
    /// `edge` on itself, charged to its mission allocation.
    Mission,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Online => "online grant",
            Mode::Mission => "mission allocation",
        }
    }

    /// The request ids' prefix.
    pub fn tag(self) -> &'static str {
        match self {
            Mode::Online => "on",
            Mode::Mission => "mi",
        }
    }
}

/// The hosts, one `gridd` each.
pub struct GridMission {
    pub hosts: GridHosts,
    pub ports: Vec<u16>,
    pub edge: Peer,
    pub site: Peer,
}

fn topology(ports: &[u16], grant_units: u64, mission_units: u64) -> String {
    let mut text = format!(
        "grid version=1\n\n// Written by benches mission_compare.\nmembership {MEMBERSHIP} {{\n    authority voters=2\n}}\n"
    );
    for (host, port) in HOSTS.iter().zip(ports) {
        text.push_str(&host_node(
            host,
            *port,
            MEMBERSHIP,
            "transport authority processes missions",
        ));
    }
    text.push_str(&format!(
        "grant {GRANT} issuer={SITE} caller={EDGE} units={grant_units}\n"
    ));
    text.push_str(&format!(
        "mission {MISSION} host={EDGE} units={mission_units} deadline=\"{DEADLINE}\" successor={SITE}\n"
    ));
    text
}

impl GridMission {
    /// Brings the hosts up under `work/grid` with `gridd` and `gridctl` from `bin_dir`,
    /// checks that the mission is active with `mission_units`, and checks one run on
    /// each way.
    pub fn start(
        bin_dir: &Path,
        work: &Path,
        grant_units: u64,
        mission_units: u64,
    ) -> Result<GridMission> {
        let ports = free_ports(HOSTS.len())?;
        let hosts = GridHosts::start(
            bin_dir,
            &work.join("grid"),
            "topology.kdl",
            &topology(&ports, grant_units, mission_units),
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
        let grid = GridMission {
            edge: peer(EDGE, ports[0])?,
            site: peer(SITE, ports[1])?,
            hosts,
            ports,
        };
        let mission = grid.mission()?;
        if mission.state.name() != "active" || mission.units.available != mission_units {
            return Err(format!(
                "after reconcile the mission {MISSION} is {} with {} of {mission_units} units available (expected active, all): {}",
                mission.state.name(),
                mission.units.available,
                mission.detail
            )
            .into());
        }
        Ok(grid)
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.hosts.host_dir(host)
    }

    /// The control connection the benchmark runs through (to `edge`).
    pub fn runner(&self) -> Result<Runner> {
        Runner::connect(self.host_dir(EDGE), self.edge.clone(), self.site.clone())
    }

    /// One run on `mode`, retried while it does not succeed (the first run after
    /// bring-up may be refused while the grant reaches its receiver); an error after
    /// [`HOST_READY_TIMEOUT`].
    pub fn first_run(&mut self, runner: &mut Runner, mode: Mode) -> Result<RunView> {
        let mut attempt = 0;
        let outcome = self.hosts.retry(Duration::from_millis(200), || {
            attempt += 1;
            runner
                .run(format!("check-{}-{attempt}", mode.tag()), mode)
                .outcome
        })?;
        outcome.map_err(|reason| {
            let names: Vec<String> = HOSTS.iter().map(|h| format!("gridd {h}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            format!(
                "the first {} run did not succeed within {HOST_READY_TIMEOUT:?}: {reason}\n{}",
                mode.name(),
                self.hosts.log_tails(&names)
            )
            .into()
        })
    }

    /// The mission as `edge` holds it.
    pub fn mission(&self) -> Result<MissionView> {
        let mut client = Client::connect(&self.host_dir(EDGE))?;
        let request = MissionCall::Inspect {
            mission: MISSION.to_owned(),
        };
        match client.call(&Call::Mission { request })? {
            Reply::Mission(reply) => match *reply {
                MissionReply::Mission { mission } => Ok(*mission),
                other => Err(format!("inspect mission {MISSION}: {other:?}").into()),
            },
            other => Err(format!("inspect mission {MISSION}: {other:?}").into()),
        }
    }

    /// What `host` holds as a receiver: its runs by outcome, its `demo.count` counter,
    /// and the grant (at `site`).
    pub fn totals(&self, host: &str) -> Result<ReceiverTotals> {
        receiver_totals(&self.host_dir(host), host, GRANT)
    }
}

/// One run as the benchmark saw it: its wall time, and the run's view when it
/// succeeded (else why not).
pub struct Timed {
    pub wall: Duration,
    pub outcome: std::result::Result<RunView, String>,
}

/// The control-socket connection to `edge` every run goes through.
pub struct Runner {
    client: Client,
    edge: Peer,
    site: Peer,
}

impl Runner {
    fn connect(host_dir: PathBuf, edge: Peer, site: Peer) -> Result<Runner> {
        let client = processes::connect(&host_dir)?;
        Ok(Runner { client, edge, site })
    }

    /// The call that runs [`PROCESS`] once under request `id` on `mode`.
    fn call(&self, id: &str, mode: Mode) -> Call {
        let (receiver, mission) = match mode {
            Mode::Online => (self.site.clone(), None),
            Mode::Mission => (self.edge.clone(), Some(MISSION.to_owned())),
        };
        Call::Process {
            request: ProcessCall::Run {
                request: RunRequest {
                    request: id.to_owned(),
                    process: PROCESS.to_owned(),
                    arguments: BTreeMap::new(),
                },
                receiver,
                via: None,
                membership: MEMBERSHIP.to_owned(),
                wait_ms: Some(WAIT_MS),
                mission,
            },
        }
    }

    /// Runs [`PROCESS`] once under request id `id` on `mode`, timing only the control
    /// call (building it before, reading the answer after).
    pub fn run(&mut self, id: String, mode: Mode) -> Timed {
        let call = self.call(&id, mode);
        let started = Instant::now();
        let reply = self.client.call(&call);
        let wall = started.elapsed();
        let outcome = match reply {
            Ok(Reply::Process(reply)) => match *reply {
                ProcessReply::Ran { run } if run.outcome == RunOutcome::Succeeded => {
                    if run.request == id {
                        Ok(run)
                    } else {
                        Err(format!("succeeded, but for request {}", run.request))
                    }
                }
                ProcessReply::Ran { run } => Err(format!(
                    "{} (grant {:?}, units {:?}): {}",
                    run.outcome.name(),
                    run.grant,
                    run.units,
                    run.detail
                )),
                ProcessReply::Refused { reason } => Err(format!("refused: {reason}")),
                other => Err(format!("{other:?}")),
            },
            Ok(Reply::Refused { reason }) => Err(format!("refused: {reason}")),
            Ok(other) => Err(format!("{other:?}")),
            Err(e) => Err(format!("call error: {e}")),
        };
        Timed { wall, outcome }
    }

    /// What a succeeded run on `mode` must show: its receiver and what it was charged to.
    pub fn expected(&self, mode: Mode) -> (&str, String) {
        match mode {
            Mode::Online => (SITE, GRANT.to_owned()),
            Mode::Mission => (EDGE, format!("mission:{MISSION}")),
        }
    }

    /// Checks a succeeded run: its receiver and charge are `mode`'s, its units are
    /// consumed, and its receipt verifies with the receiver's public keys.
    pub fn check(&self, mode: Mode, run: &RunView) -> std::result::Result<(), String> {
        let (receiver, charged) = self.expected(mode);
        if run.receiver != receiver || run.grant.as_deref() != Some(charged.as_str()) {
            return Err(format!(
                "{} run {} ran at {} charged to {:?} (expected {receiver}, {charged})",
                mode.name(),
                run.request,
                run.receiver,
                run.grant
            ));
        }
        if run.units != RunUnits::Consumed {
            return Err(format!(
                "{} run {} succeeded with its units {:?} (expected consumed)",
                mode.name(),
                run.request,
                run.units
            ));
        }
        if !run.verify(self.receiver_keys(mode)) {
            return Err(format!(
                "{} run {} succeeded, but its receipt does not verify with {receiver}'s public keys: {run:?}",
                mode.name(),
                run.request
            ));
        }
        Ok(())
    }

    /// The keys a run's receipt verifies with on `mode` (its receiver's).
    fn receiver_keys(&self, mode: Mode) -> &Manifest {
        match mode {
            Mode::Online => &self.site.keys,
            Mode::Mission => &self.edge.keys,
        }
    }
}
