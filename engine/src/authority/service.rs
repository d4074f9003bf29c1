//! A running authority: one openraft node of one membership on this host.
//!
//! Callers reach it through the host's control socket (`Call::Authority`) or, from
//! another voter, through the transport (`POST /authority/M/forward`: a write or a
//! barrier forwarded to the leader, by a caller the TLS handshake authenticated).
//!
//! Nothing here retries an operation on its own account: a claim command that was not
//! answered within `CLAIM_WRITE_TIMEOUT` is reported `unknown`; re-sending the same
//! operation id — the caller's decision — returns the original answer if it was
//! applied, and applies it once if it was not.

use crate::limits::{
    BATCH_COMMANDS_MAX, ELECTION_TIMEOUT_MS_MAX, ELECTION_TIMEOUT_MS_MIN, HEARTBEAT_MS,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, ServerState, SnapshotPolicy};

use super::log::LogStore;
use super::machine::Machine;
use super::network::Peers;
use super::types::{NodeId, Proposal, Raft, Voter, node_id};
use crate::transport::PeerClient;

pub use super::api::{
    AuthorityCall, AuthorityReply, ClaimCommand, ClaimOutcome, Forwarded, VoterStatus,
};

mod barrier;
mod commit;
mod members;
mod peers;

use commit::{Pending, batch_loop, unknown_claim};

/// How long a claim command may wait for its entry to commit and apply before it is
/// reported `unknown` (it may still commit later: re-send the same op id).
pub const CLAIM_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the read barrier may wait for a quorum's confirmation before it reads
/// `unknown`.
pub const BARRIER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a new voter may take to catch up (as a learner) before its promotion.
pub const VOTER_CATCH_UP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long an explicit snapshot may take.
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(60);
/// A snapshot is built once this many entries were applied since the last one, and
/// as many log bytes appended as the last snapshot holds (`members::snapshot_policy`;
/// then the log prefix it covers is purged).
pub const SNAPSHOT_LOGS_SINCE_LAST: u64 = 5_000;
/// How often the snapshot policy looks at the log.
pub const SNAPSHOT_POLICY_INTERVAL: Duration = Duration::from_secs(1);

/// The authority of one membership on this host.
pub struct Authority {
    pub membership: String,
    pub participant: String,
    pub id: NodeId,
    pub address: String,
    pub raft: Raft,
    machine: Machine,
    log: LogStore,
    dir: PathBuf,
    runtime: tokio::runtime::Handle,
    /// Clients of the other voters, by participant and address (each keeps its
    /// connections: a forwarded call does not pay a TLS handshake).
    clients: std::sync::Mutex<BTreeMap<(String, String), PeerClient>>,
    /// Claim commands waiting for the next batch (see `batch_loop`).
    batcher: tokio::sync::mpsc::UnboundedSender<Pending>,
    /// `snapshots "s3://…"`: where this voter puts its snapshots and fetches a
    /// leader's.
    remote: Option<Arc<super::remote::RemoteSnapshots>>,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error("authority of `{membership}`: storage in {path}: {reason}")]
    Storage {
        membership: String,
        path: PathBuf,
        reason: String,
    },
    #[error("authority of `{membership}`: {reason}")]
    Start { membership: String, reason: String },
}

/// The authority's files for `membership` under a host directory.
pub fn authority_dir(host_dir: &Path, membership: &str) -> PathBuf {
    host_dir.join("authority").join(membership)
}

impl Authority {
    /// Opens (or creates, uninitialized) this host's voter of `membership`, keeping its
    /// snapshots in `remote` as well as its own files when one is given.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        host_dir: &Path,
        membership: &str,
        participant: &str,
        address: &str,
        remote: Option<&crate::config::S3ArchiveConfig>,
        runtime: tokio::runtime::Handle,
        failpoints: &crate::store::failpoints::Failpoints,
    ) -> Result<Arc<Authority>, AuthorityError> {
        let dir = authority_dir(host_dir, membership);
        let storage = |path: &Path, reason: String| AuthorityError::Storage {
            membership: membership.to_owned(),
            path: path.to_owned(),
            reason,
        };
        crate::store::ensure_private_dir(&dir).map_err(|e| storage(&dir, e.to_string()))?;
        let log_dir = dir.join("log");
        let log = LogStore::open(&log_dir).map_err(|e| storage(&log_dir, e.to_string()))?;
        let snapshots = dir.join("snapshots");
        let machine = Machine::open(
            &snapshots,
            Some(log.database()),
            failpoints.armed(crate::store::Failpoint::SnapshotInstall),
        )
        .map_err(|e| storage(&snapshots, e.to_string()))?
        .with_part_failpoint(failpoints.armed(crate::store::Failpoint::SnapshotInstallPart));
        let remote = remote
            .map(|config| {
                super::remote::RemoteSnapshots::open(host_dir, &dir, participant, config)
                    .map(Arc::new)
                    .map_err(|reason| AuthorityError::Start {
                        membership: membership.to_owned(),
                        reason,
                    })
            })
            .transpose()?;
        let machine = match &remote {
            Some(remote) => machine.with_remote(remote.clone()),
            None => machine,
        };
        let config = Config {
            cluster_name: membership.to_owned(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: ELECTION_TIMEOUT_MS_MIN,
            election_timeout_max: ELECTION_TIMEOUT_MS_MAX,
            install_snapshot_timeout: SNAPSHOT_TIMEOUT.as_millis() as u64,
            // Taken by `members::snapshot_policy`, which also weighs the bytes.
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: 0,
            purge_batch_size: 1,
            ..Default::default()
        }
        .validate()
        .map_err(|e| AuthorityError::Start {
            membership: membership.to_owned(),
            reason: e.to_string(),
        })?;
        let peers = Peers {
            dir: host_dir.to_owned(),
            membership: membership.to_owned(),
            remote: remote.clone(),
        };
        let id = node_id(participant);
        let raft = runtime
            .block_on(Raft::new(
                id,
                Arc::new(config),
                peers,
                log.clone(),
                machine.clone(),
            ))
            .map_err(|e| AuthorityError::Start {
                membership: membership.to_owned(),
                reason: e.to_string(),
            })?;
        let (batcher, queue) = tokio::sync::mpsc::unbounded_channel();
        let authority = Arc::new(Authority {
            membership: membership.to_owned(),
            participant: participant.to_owned(),
            id,
            address: address.to_owned(),
            raft,
            machine,
            log,
            dir: host_dir.to_owned(),
            runtime,
            clients: Default::default(),
            batcher,
            remote,
        });
        authority
            .runtime
            .spawn(batch_loop(Arc::downgrade(&authority), queue));
        authority
            .runtime
            .spawn(members::snapshot_policy(Arc::downgrade(&authority)));
        Ok(authority)
    }

    /// Handles a call from this host's operator (blocking; not on a runtime thread).
    pub fn handle_local(&self, call: AuthorityCall) -> AuthorityReply {
        self.runtime.block_on(self.handle(call, None))
    }

    /// Handles a call. `forwarded_by` is the authenticated voter that forwarded it:
    /// then it is executed here or refused, never forwarded again.
    pub async fn handle(&self, call: AuthorityCall, forwarded_by: Option<&str>) -> AuthorityReply {
        match call {
            AuthorityCall::Claim { op, command } => {
                let caller = forwarded_by.unwrap_or(&self.participant).to_owned();
                self.claim(op, command.by(&caller), forwarded_by.is_some())
                    .await
            }
            AuthorityCall::ClaimBatch { claims } => {
                if claims.len() > BATCH_COMMANDS_MAX {
                    return AuthorityReply::Refused {
                        reason: format!(
                            "more than BATCH_COMMANDS_MAX ({BATCH_COMMANDS_MAX}) commands in one batch"
                        ),
                    };
                }
                let caller = forwarded_by.unwrap_or(&self.participant).to_owned();
                // Queued together, so they join one batch here.
                let waiting: Vec<_> = claims
                    .into_iter()
                    .map(|(op, command)| {
                        let proposal = Proposal {
                            op: op.clone(),
                            command: command.clone().by(&caller),
                        };
                        let receiver =
                            self.enqueue(op, command.by(&caller), forwarded_by.is_some());
                        (proposal, receiver)
                    })
                    .collect();
                let mut replies = Vec::with_capacity(waiting.len());
                for (proposal, receiver) in waiting {
                    replies.push(match receiver.await {
                        Ok(reply) => reply,
                        Err(_) => unknown_claim(&proposal, "the batch was dropped".to_owned()),
                    });
                }
                AuthorityReply::Claims { replies }
            }
            AuthorityCall::Show { claim } => match self.barrier().await {
                Ok(read_index) => match self.machine.claim(&claim) {
                    Ok(claim) => AuthorityReply::Shown { claim, read_index },
                    Err(detail) => AuthorityReply::Unknown {
                        reason: format!("the claim could not be read: {detail}"),
                    },
                },
                Err(detail) => AuthorityReply::Unknown {
                    reason: format!("read barrier failed: {detail}"),
                },
            },
            AuthorityCall::Status => AuthorityReply::Status(Box::new(self.status())),
            AuthorityCall::Barrier => {
                let result = if forwarded_by.is_some() {
                    self.leader_barrier().await
                } else {
                    self.barrier().await
                };
                match result {
                    Ok(index) => AuthorityReply::Barrier {
                        barrier: "ok".to_owned(),
                        read_index: Some(index),
                        detail: format!("a quorum confirmed the leader; applied through {index}"),
                    },
                    Err(detail) => AuthorityReply::Barrier {
                        barrier: "unknown".to_owned(),
                        read_index: None,
                        detail,
                    },
                }
            }
            AuthorityCall::Initialize => self.initialize().await,
            AuthorityCall::AddVoter {
                participant,
                address,
            } => {
                self.at_leader(
                    AuthorityCall::AddVoter {
                        participant: participant.clone(),
                        address: address.clone(),
                    },
                    forwarded_by,
                    self.add_voter(&participant, &address),
                )
                .await
            }
            AuthorityCall::RemoveVoter {
                participant,
                keep_as_learner,
            } => {
                self.at_leader(
                    AuthorityCall::RemoveVoter {
                        participant: participant.clone(),
                        keep_as_learner,
                    },
                    forwarded_by,
                    self.remove(&participant, true, keep_as_learner),
                )
                .await
            }
            AuthorityCall::AddLearner {
                participant,
                address,
            } => {
                self.at_leader(
                    AuthorityCall::AddLearner {
                        participant: participant.clone(),
                        address: address.clone(),
                    },
                    forwarded_by,
                    self.add_learner(&participant, &address),
                )
                .await
            }
            AuthorityCall::RemoveLearner { participant } => {
                self.at_leader(
                    AuthorityCall::RemoveLearner {
                        participant: participant.clone(),
                    },
                    forwarded_by,
                    self.remove(&participant, false, false),
                )
                .await
            }
            AuthorityCall::Snapshot => self.snapshot().await,
        }
    }

    fn read<T>(&self, f: impl FnOnce(&crate::authority::machine::MachineState) -> T) -> T {
        f(&self.machine.state.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The leader this voter knows of.
    fn leader(&self) -> Option<Voter> {
        self.leader_if(|_| true)
    }

    /// The leader this voter knows of, when it is another voter.
    fn other_leader(&self) -> Option<Voter> {
        self.leader_if(|leader| leader != self.id)
    }

    fn leader_if(&self, keep: impl Fn(NodeId) -> bool) -> Option<Voter> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = metrics.current_leader.filter(|l| keep(*l))?;
        metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .cloned()
    }

    pub fn status(&self) -> VoterStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let name = |id: &NodeId| {
            membership
                .get_node(id)
                .map(|n| n.participant.clone())
                .unwrap_or_else(|| format!("node {id}"))
        };
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let learners: BTreeSet<NodeId> = membership.learner_ids().collect();
        VoterStatus {
            membership: self.membership.clone(),
            participant: self.participant.clone(),
            node_id: self.id,
            initialized: metrics.membership_config.log_id().is_some() || !voters.is_empty(),
            state: match metrics.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            }
            .to_owned(),
            term: metrics.current_term,
            leader: metrics.current_leader.as_ref().map(name),
            voters: sorted(voters.iter().map(name).collect()),
            learners: sorted(learners.iter().map(name).collect()),
            last_log_index: metrics.last_log_index,
            last_applied: metrics.last_applied.map(|l| l.index),
            snapshot: metrics.snapshot.map(|l| l.index),
            purged: self.log.purged().map(|l| l.index),
            vote: Some((
                metrics.vote.leader_id().get_term(),
                metrics.vote.leader_id().voted_for().unwrap_or(0),
                metrics.vote.is_committed(),
            )),
            snapshot_files: self.machine.snapshot_files(),
            snapshots_installed: self
                .machine
                .installed
                .load(std::sync::atomic::Ordering::SeqCst),
            snapshot_store: self.remote.as_ref().map(|r| r.status()),
            claims: self.read(|s| s.claims.len()),
        }
    }
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// The authorities this host runs, by membership.
#[derive(Clone, Default)]
pub struct Authorities {
    pub by_membership: BTreeMap<String, Arc<Authority>>,
}

impl Authorities {
    /// The authority a call names, or the only one.
    pub fn pick(&self, membership: Option<&str>) -> Result<&Arc<Authority>, String> {
        match membership {
            Some(m) => self
                .by_membership
                .get(m)
                .ok_or_else(|| format!("this host runs no authority of membership `{m}`")),
            None => match self.by_membership.len() {
                0 => {
                    Err("this host runs no authority (profile `authority` not selected)".to_owned())
                }
                1 => Ok(self.by_membership.values().next().expect("one")),
                _ => Err(format!(
                    "this host runs the authorities of {}; name one with --membership",
                    self.by_membership
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            },
        }
    }
}
