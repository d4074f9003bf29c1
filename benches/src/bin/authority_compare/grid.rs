//! A 3-voter Grid authority on loopback, brought up the way the journeys do it
//! (`journeys/topologies/authority-3.kdl`): a topology file, `gridctl reconcile` twice
//! (installations and keys, then enrollments), one `gridd` per host, then
//! `gridctl reconcile` until the plan is empty (bootstrap, learners, voters), as
//! `grid_benches::bringup` does for every side-by-side binary.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use grid_engine::authority::service::{
    AuthorityCall, AuthorityReply, ClaimCommand, ClaimOutcome, VoterStatus,
};
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply};

use grid_benches::bringup::{GridHosts, connect_served, host_node, one_gridd_per_host};
use grid_benches::procs::{Result, free_ports};

pub const MEMBERSHIP: &str = "ops";
pub const HOSTS: [&str; 3] = ["a", "b", "c"];

/// How long the group may take to show three voters and one leader.
const GROUP_READY_TIMEOUT: Duration = Duration::from_secs(60);

pub struct GridCluster {
    pub hosts: GridHosts,
    pub ports: Vec<u16>,
}

impl GridCluster {
    /// Brings the group up under `work/grid`, with `gridd` and `gridctl` from `bin_dir`.
    pub fn start(bin_dir: &Path, work: &Path) -> Result<GridCluster> {
        let ports = free_ports(HOSTS.len())?;
        let mut topology = String::from(
            "grid version=1\n\n// Written by benches authority_compare: three voters of one authority.\n\
             membership ops {\n    authority voters=3\n}\n",
        );
        for (host, port) in HOSTS.iter().zip(&ports) {
            topology.push_str(&host_node(host, *port, MEMBERSHIP, "transport authority"));
        }
        let hosts = GridHosts::start(
            bin_dir,
            &work.join("grid"),
            "authority-3.kdl",
            &topology,
            &one_gridd_per_host(&HOSTS),
        )?;
        let mut cluster = GridCluster { hosts, ports };
        cluster.wait_group()?;
        Ok(cluster)
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.hosts.host_dir(host)
    }

    /// Waits until every voter sees three voters and the same leader.
    fn wait_group(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            let statuses: Vec<Result<VoterStatus>> = HOSTS.iter().map(|h| self.status(h)).collect();
            let ready = statuses.iter().all(|s| {
                s.as_ref()
                    .is_ok_and(|s| s.voters.len() == 3 && s.leader.is_some())
            }) && {
                let leaders: Vec<_> = statuses
                    .iter()
                    .map(|s| s.as_ref().ok().and_then(|s| s.leader.clone()))
                    .collect();
                leaders.windows(2).all(|w| w[0] == w[1])
            };
            if ready {
                return Ok(());
            }
            self.hosts.procs.check_running()?;
            if started.elapsed() > GROUP_READY_TIMEOUT {
                return Err(format!(
                    "the Grid authority did not show 3 voters and one leader within {GROUP_READY_TIMEOUT:?}: {statuses:?}"
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One voter's view (no barrier).
    pub fn status(&self, host: &str) -> Result<VoterStatus> {
        let mut client = Client::connect(&self.host_dir(host))?;
        match client.call(&status_call())? {
            Reply::Authority(AuthorityReply::Status(status)) => {
                // (Boxed or not: a reference either way.)
                let status: &VoterStatus = &status;
                Ok(status.clone())
            }
            other => Err(format!("status of {host}: {other:?}").into()),
        }
    }

    /// The host that leads, as every voter sees it.
    pub fn leader(&self) -> Result<String> {
        let statuses = HOSTS
            .iter()
            .map(|h| self.status(h))
            .collect::<Result<Vec<_>>>()?;
        let leader = statuses[0].leader.clone();
        match leader {
            Some(leader) if statuses.iter().all(|s| s.leader.as_ref() == Some(&leader)) => {
                Ok(leader)
            }
            _ => Err(format!(
                "the voters disagree about the leader: {:?}",
                statuses.iter().map(|s| &s.leader).collect::<Vec<_>>()
            )
            .into()),
        }
    }
}

/// One caller's connection to one host's control socket.
pub struct Caller {
    host_dir: PathBuf,
    client: Option<Client>,
}

/// The call a caller's connection is checked with: one voter's status (no barrier).
fn status_call() -> Call {
    Call::Authority {
        membership: Some(MEMBERSHIP.to_owned()),
        request: AuthorityCall::Status,
    }
}

impl Caller {
    /// Connects and checks that the host serves this connection (a host over
    /// `CONTROL_CONNECTIONS_MAX` answers the first call with a refusal).
    pub fn connect(host_dir: PathBuf) -> Result<Caller> {
        let client = connect_served(&host_dir, &status_call(), |reply| {
            matches!(reply, Reply::Authority(AuthorityReply::Status(_)))
        })?;
        Ok(Caller {
            host_dir,
            client: Some(client),
        })
    }

    /// Acquires the fresh claim `name` with operation id `name`: `Ok` when it
    /// succeeded, otherwise what was answered instead.
    pub fn acquire(&mut self, name: &str) -> std::result::Result<(), String> {
        let call = Call::Authority {
            membership: Some(MEMBERSHIP.to_owned()),
            request: AuthorityCall::Claim {
                op: name.to_owned(),
                command: ClaimCommand::Acquire {
                    claim: name.to_owned(),
                },
            },
        };
        let client = match &mut self.client {
            Some(client) => client,
            None => self
                .client
                .insert(Client::connect(&self.host_dir).map_err(|e| format!("reconnect: {e}"))?),
        };
        match client.call(&call) {
            Ok(Reply::Authority(AuthorityReply::Claim {
                outcome: ClaimOutcome::Succeeded,
                ..
            })) => Ok(()),
            Ok(Reply::Authority(AuthorityReply::Claim {
                outcome, detail, ..
            })) => Err(format!("{outcome:?}: {}", strip_name(&detail, name))),
            Ok(other) => Err(strip_name(&format!("{other:?}"), name)),
            Err(e) => {
                // The connection is gone: the next call reconnects.
                self.client = None;
                Err(format!("call error: {e}"))
            }
        }
    }
}

/// A reason without the claim's own (unique) name, so equal reasons count together.
fn strip_name(text: &str, name: &str) -> String {
    text.replace(name, "NAME")
}
