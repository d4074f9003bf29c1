//! A 3-voter Grid authority on loopback, brought up the way the journeys do it
//! (`journeys/topologies/authority-3.kdl`): a topology file, `gridctl reconcile` twice
//! (installations and keys, then enrollments), one `gridd` per host, a third
//! `gridctl reconcile` (bootstrap, learners, voters).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use grid_engine::authority::service::{
    AuthorityCall, AuthorityReply, ClaimCommand, ClaimOutcome, VoterStatus,
};
use grid_engine::host::control::{CONTROL_CONNECTIONS_MAX, Client};
use grid_engine::protocol::{Call, Reply};

use grid_benches::procs::{Procs, Result, free_ports, tail};

pub const MEMBERSHIP: &str = "ops";
pub const HOSTS: [&str; 3] = ["a", "b", "c"];

/// How long the group may take to show three voters and one leader.
const GROUP_READY_TIMEOUT: Duration = Duration::from_secs(60);
const HOST_READY_TIMEOUT: Duration = Duration::from_secs(30);

pub struct GridCluster {
    state: PathBuf,
    pub ports: Vec<u16>,
    pub procs: Procs,
}

impl GridCluster {
    /// Brings the group up under `work/grid`, with `gridd` and `gridctl` from `bin_dir`.
    pub fn start(bin_dir: &Path, work: &Path) -> Result<GridCluster> {
        let gridd = bin_dir.join("gridd");
        let gridctl = bin_dir.join("gridctl");
        let dir = work.join("grid");
        let state = dir.join("state");
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let ports = free_ports(HOSTS.len())?;
        let mut topology = String::from(
            "grid version=1\n\n// Written by benches authority_compare: three voters of one authority.\n\
             membership ops {\n    authority voters=3\n}\n",
        );
        for (host, port) in HOSTS.iter().zip(&ports) {
            topology.push_str(&format!(
                "host {host} listen=\"127.0.0.1:{port}\" {{\n    member ops\n    profiles transport authority\n}}\n"
            ));
        }
        let file = dir.join("authority-3.kdl");
        std::fs::write(&file, topology)?;
        let state_arg = state.clone();
        let mut cluster = GridCluster {
            state,
            ports,
            procs: Procs::default(),
        };
        let reconcile = |round: u32| -> Result<()> {
            let log = logs.join(format!("reconcile-{round}.log"));
            let out = std::fs::File::create(&log)?;
            let status = Command::new(&gridctl)
                .arg("reconcile")
                .arg(&file)
                .arg("--state")
                .arg(&state_arg)
                .current_dir(&dir)
                .stdin(std::process::Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                .status()
                .map_err(|e| format!("running {}: {e}", gridctl.display()))?;
            if !status.success() {
                return Err(format!(
                    "gridctl reconcile (round {round}) failed ({status}):\n{}",
                    tail(&log, 30)
                )
                .into());
            }
            Ok(())
        };
        reconcile(1)?; // installations and keys
        reconcile(2)?; // enrollments
        for host in HOSTS {
            let host_dir = cluster.host_dir(host);
            let mut command = Command::new(&gridd);
            command.arg("--dir").arg(&host_dir).current_dir(&dir);
            command.env_remove("GRID_FAILPOINTS");
            cluster.procs.spawn(
                &format!("gridd {host}"),
                command,
                &logs.join(format!("gridd-{host}.log")),
            )?;
        }
        let started = Instant::now();
        for host in HOSTS {
            let socket = grid_engine::host::control::socket_path(&cluster.host_dir(host));
            while std::os::unix::net::UnixStream::connect(&socket).is_err() {
                cluster.procs.check_running()?;
                if started.elapsed() > HOST_READY_TIMEOUT {
                    return Err(format!(
                        "gridd {host} did not accept control connections within {HOST_READY_TIMEOUT:?}:\n{}",
                        cluster.procs.log_tail(&format!("gridd {host}"))
                    )
                    .into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        reconcile(3)?; // bootstrap the Raft group, then learners, then voters
        cluster.wait_group()?;
        Ok(cluster)
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.state.join("hosts").join(host)
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
            self.procs.check_running()?;
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
        match client.call(&Call::Authority {
            membership: Some(MEMBERSHIP.to_owned()),
            request: AuthorityCall::Status,
        })? {
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

/// How long a caller may retry a connection the host refused for being over
/// `CONTROL_CONNECTIONS_MAX` (the previous measurement's connections are still closing).
const CONNECT_RETRY: Duration = Duration::from_secs(10);

impl Caller {
    /// Connects and checks that the host serves this connection (a host over
    /// `CONTROL_CONNECTIONS_MAX` answers the first call with a refusal).
    pub fn connect(host_dir: PathBuf) -> Result<Caller> {
        let started = Instant::now();
        loop {
            let mut client = Client::connect(&host_dir)?;
            let reply = client.call(&Call::Authority {
                membership: Some(MEMBERSHIP.to_owned()),
                request: AuthorityCall::Status,
            })?;
            match reply {
                Reply::Authority(AuthorityReply::Status(_)) => {
                    return Ok(Caller {
                        host_dir,
                        client: Some(client),
                    });
                }
                Reply::Refused { reason } if started.elapsed() < CONNECT_RETRY => {
                    let _ = reason;
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
