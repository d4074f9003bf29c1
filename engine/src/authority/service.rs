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
    BATCH_COMMANDS_MAX, BATCHES_IN_FLIGHT_MAX, ELECTION_TIMEOUT_MS_MAX, ELECTION_TIMEOUT_MS_MIN,
    HEARTBEAT_MS,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError as CwError, InitializeError, RaftError as OrError};
use openraft::{ChangeMembers, Config, ServerState, SnapshotPolicy};
use serde::{Deserialize, Serialize};

use super::claims::{Claim, Command, Outcome};
use super::log::LogStore;
use super::machine::Machine;
use super::network::Peers;
use super::types::{Decision, NodeId, Proposal, Proposals, Raft, Voter, node_id};
use crate::transport::{PeerClient, PeerError};

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
/// A snapshot is built after this many entries since the last one (then the log
/// prefix it covers is purged).
pub const SNAPSHOT_LOGS_SINCE_LAST: u64 = 5_000;

/// A claim command as a caller states it; the caller is who sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum ClaimCommand {
    Acquire { claim: String },
    EnrollSuccessor { claim: String, successor: String },
    Handoff { claim: String },
    Release { claim: String },
}

impl ClaimCommand {
    pub fn by(self, caller: &str) -> Command {
        let caller = caller.to_owned();
        match self {
            ClaimCommand::Acquire { claim } => Command::Acquire { claim, caller },
            ClaimCommand::EnrollSuccessor { claim, successor } => Command::EnrollSuccessor {
                claim,
                caller,
                successor,
            },
            ClaimCommand::Handoff { claim } => Command::Handoff { claim, caller },
            ClaimCommand::Release { claim } => Command::Release { claim, caller },
        }
    }
}

/// A call to a membership's authority.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "authority", rename_all = "kebab-case")]
pub enum AuthorityCall {
    /// A claim command with its operation id, sent by this host.
    Claim { op: String, command: ClaimCommand },
    /// Claim commands forwarded together by a voter (their caller): one reply each,
    /// in order.
    ClaimBatch { claims: Vec<(String, ClaimCommand)> },
    /// A claim as it stands after a read barrier.
    Show { claim: String },
    /// This voter's view (no barrier: what it remembers).
    Status,
    /// An explicit linearizable read barrier.
    Barrier,
    /// Bootstrap the group with this voter alone (reconcile, once).
    Initialize,
    /// Add a voter: learner catch-up, then promotion (at the leader).
    AddVoter {
        participant: String,
        address: String,
    },
    /// Remove a voter (at the leader); it stays a learner (a non-voting replica that
    /// knows the leader) when `keep_as_learner`.
    RemoveVoter {
        participant: String,
        #[serde(default)]
        keep_as_learner: bool,
    },
    /// Add a learner: a non-voting replica through which its host sends claim
    /// commands (at the leader).
    AddLearner {
        participant: String,
        address: String,
    },
    /// Remove a learner (at the leader).
    RemoveLearner { participant: String },
    /// Build a snapshot now (then purge the log it covers).
    Snapshot,
}

/// How a claim command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimOutcome {
    Succeeded,
    Failed,
    /// Nothing changed and nothing will (a reused id, an expired id, a bad call).
    Refused,
    /// Not known whether it was applied: re-send the same op id.
    Unknown,
}

/// One voter's view of the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoterStatus {
    pub membership: String,
    pub participant: String,
    pub node_id: NodeId,
    pub initialized: bool,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: String,
    pub term: u64,
    /// The leader this voter believes in (not evidence of a live quorum).
    pub leader: Option<String>,
    pub voters: Vec<String>,
    pub learners: Vec<String>,
    pub last_log_index: Option<u64>,
    pub last_applied: Option<u64>,
    pub snapshot: Option<u64>,
    pub purged: Option<u64>,
    /// The vote this voter persisted: `(term, node voted for, committed)`.
    pub vote: Option<(u64, NodeId, bool)>,
    /// Snapshot files on disk now.
    pub snapshot_files: Vec<String>,
    /// Snapshots received from a leader and installed since this voter started.
    #[serde(default)]
    pub snapshots_installed: u64,
    pub claims: usize,
}

/// What a call to the authority answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum AuthorityReply {
    Claim {
        op: String,
        claim: String,
        outcome: ClaimOutcome,
        owner: Option<String>,
        epoch: u64,
        detail: String,
    },
    /// The replies of a `claim-batch`, in order.
    Claims {
        replies: Vec<AuthorityReply>,
    },
    Shown {
        claim: Option<Claim>,
        read_index: u64,
    },
    Status(Box<VoterStatus>),
    Barrier {
        /// `ok`, or `unknown` when no quorum confirmed this leader in time.
        barrier: String,
        read_index: Option<u64>,
        detail: String,
    },
    Done {
        detail: String,
    },
    Refused {
        reason: String,
    },
    Unknown {
        reason: String,
    },
}

/// A call forwarded by another voter; `caller` is filled in by the server from the
/// TLS peer, never trusted from the body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Forwarded {
    pub call: AuthorityCall,
}

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
    /// Opens (or creates, uninitialized) this host's voter of `membership`.
    pub fn start(
        host_dir: &Path,
        membership: &str,
        participant: &str,
        address: &str,
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
        .map_err(|e| storage(&snapshots, e.to_string()))?;
        let config = Config {
            cluster_name: membership.to_owned(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: ELECTION_TIMEOUT_MS_MIN,
            election_timeout_max: ELECTION_TIMEOUT_MS_MAX,
            install_snapshot_timeout: SNAPSHOT_TIMEOUT.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_LOGS_SINCE_LAST),
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
        });
        authority
            .runtime
            .spawn(batch_loop(Arc::downgrade(&authority), queue));
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
                Ok(read_index) => AuthorityReply::Shown {
                    claim: self.read(|s| s.claims.claim(&claim).cloned()),
                    read_index,
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

    fn read<T>(&self, f: impl FnOnce(&super::machine::MachineState) -> T) -> T {
        f(&self.machine.state.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn leader(&self) -> Option<Voter> {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = metrics.current_leader?;
        metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .cloned()
    }

    fn peer(&self, voter: &Voter) -> Result<PeerClient, PeerError> {
        let key = (voter.participant.clone(), voter.address.clone());
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = PeerClient::new(
            &self.dir,
            &self.membership,
            &voter.participant,
            &voter.address,
        )?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    async fn forward(
        &self,
        leader: &Voter,
        call: AuthorityCall,
        timeout: Duration,
    ) -> Result<AuthorityReply, PeerError> {
        let path = format!("/authority/{}/forward", self.membership);
        self.peer(leader)?
            .post(&path, &Forwarded { call }, timeout)
            .await
    }

    /// Queues one claim command for the next batch; the receiver gets its reply.
    fn enqueue(
        &self,
        op: String,
        command: Command,
        forwarded: bool,
    ) -> tokio::sync::oneshot::Receiver<AuthorityReply> {
        let (reply, receiver) = tokio::sync::oneshot::channel();
        let pending = Pending {
            proposal: Proposal { op, command },
            forwarded,
            reply,
        };
        if let Err(refused) = self.batcher.send(pending) {
            let p = refused.0;
            let _ = p.reply.send(unknown_claim(
                &p.proposal,
                "the authority is stopping".to_owned(),
            ));
        }
        receiver
    }

    async fn claim(&self, op: String, command: Command, forwarded: bool) -> AuthorityReply {
        let proposal = Proposal {
            op: op.clone(),
            command: command.clone(),
        };
        match self.enqueue(op, command, forwarded).await {
            Ok(reply) => reply,
            Err(_) => unknown_claim(&proposal, "the batch was dropped".to_owned()),
        }
    }

    /// Commits one batch of claim commands as one log entry here, or forwards the
    /// batch to the leader in one request. Within CLAIM_WRITE_TIMEOUT, attempts that
    /// certainly did not reach a leader (none known yet; the leader refused the
    /// connection) are made again — and the state machine applies an op id once
    /// anyway. Every command of the batch gets exactly one reply.
    async fn write_batch(&self, batch: Vec<Pending>) {
        let deadline = tokio::time::Instant::now() + CLAIM_WRITE_TIMEOUT;
        let mut batch = batch;
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                let reason = format!(
                    "no leader of `{}` answered within CLAIM_WRITE_TIMEOUT ({} s)",
                    self.membership,
                    CLAIM_WRITE_TIMEOUT.as_secs()
                );
                return answer_all(batch, |p| unknown_claim(p, reason.clone()));
            }
            let proposals = Proposals(batch.iter().map(|p| p.proposal.clone()).collect());
            let written = tokio::time::timeout(remaining, self.raft.client_write(proposals)).await;
            let to = match written {
                Err(_) => {
                    let reason = format!(
                        "not committed within CLAIM_WRITE_TIMEOUT ({} s): a quorum may be unreachable",
                        CLAIM_WRITE_TIMEOUT.as_secs()
                    );
                    return answer_all(batch, |p| unknown_claim(p, reason.clone()));
                }
                Ok(Ok(response)) => {
                    let decisions = response.data.0;
                    assert_eq!(
                        decisions.len(),
                        batch.len(),
                        "one decision per proposal of an entry"
                    );
                    for (pending, decision) in batch.into_iter().zip(decisions) {
                        let reply = decided(&pending.proposal, decision);
                        let _ = pending.reply.send(reply);
                    }
                    return;
                }
                Ok(Err(OrError::APIError(CwError::ForwardToLeader(to)))) => to,
                Ok(Err(e)) => {
                    let reason = e.to_string();
                    return answer_all(batch, |p| unknown_claim(p, reason.clone()));
                }
            };
            // Commands forwarded to this voter are never forwarded again.
            let (again, local): (Vec<Pending>, Vec<Pending>) =
                batch.into_iter().partition(|p| p.forwarded);
            let reason = format!(
                "`{}` is no longer the leader of `{}`",
                self.participant, self.membership
            );
            answer_all(again, |p| unknown_claim(p, reason.clone()));
            batch = local;
            if batch.is_empty() {
                return;
            }
            let Some(leader) = to.leader_node else {
                // An election is under way: wait for its outcome.
                let _ = self
                    .raft
                    .wait(Some(remaining.min(Duration::from_millis(500))))
                    .metrics(|m| m.current_leader.is_some(), "a leader known")
                    .await;
                continue;
            };
            let call = AuthorityCall::ClaimBatch {
                claims: batch
                    .iter()
                    .map(|p| (p.proposal.op.clone(), stated(&p.proposal.command)))
                    .collect(),
            };
            match self
                .forward(&leader, call, CLAIM_WRITE_TIMEOUT + Duration::from_secs(2))
                .await
            {
                Ok(AuthorityReply::Claims { replies }) if replies.len() == batch.len() => {
                    for (pending, reply) in batch.into_iter().zip(replies) {
                        let _ = pending.reply.send(reply);
                    }
                    return;
                }
                Ok(other) => {
                    let reason = format!("the leader `{}` answered {other:?}", leader.participant);
                    return answer_all(batch, |p| unknown_claim(p, reason.clone()));
                }
                Err(PeerError::NotSent(_)) => {
                    // The remembered leader is gone: wait for the voters to elect another.
                    tokio::time::sleep(remaining.min(Duration::from_millis(200))).await;
                }
                Err(PeerError::Lost(e)) => {
                    let reason = format!(
                        "forwarded to the leader `{}`, no answer: {e}",
                        leader.participant
                    );
                    return answer_all(batch, |p| unknown_claim(p, reason.clone()));
                }
            }
        }
    }

    /// The barrier at the leader: a quorum confirms the leadership, the state machine
    /// applies through the read index.
    async fn leader_barrier(&self) -> Result<u64, String> {
        match tokio::time::timeout(BARRIER_TIMEOUT, self.raft.ensure_linearizable()).await {
            Err(_) => Err(format!(
                "no quorum confirmed the leader within BARRIER_TIMEOUT ({} s)",
                BARRIER_TIMEOUT.as_secs()
            )),
            Ok(Ok(read)) => Ok(read.map_or(0, |l| l.index)),
            Ok(Err(e)) => Err(e.to_string()),
        }
    }

    /// A linearizable read barrier from any voter: the leader's barrier, then this
    /// voter applies through the leader's read index.
    pub async fn barrier(&self) -> Result<u64, String> {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.state == ServerState::Leader {
            return self.leader_barrier().await;
        }
        if self.leader().is_none() {
            // Just started or just added: a leader's first message names it.
            let _ = self
                .raft
                .wait(Some(BARRIER_TIMEOUT))
                .metrics(|m| m.current_leader.is_some(), "a leader known")
                .await;
        }
        let Some(leader) = self.leader() else {
            return Err(format!(
                "no leader of `{}` is known to `{}`",
                self.membership, self.participant
            ));
        };
        let index = match self
            .forward(
                &leader,
                AuthorityCall::Barrier,
                BARRIER_TIMEOUT + Duration::from_secs(1),
            )
            .await
        {
            Ok(AuthorityReply::Barrier {
                read_index: Some(index),
                ..
            }) => index,
            Ok(AuthorityReply::Barrier { detail, .. }) => return Err(detail),
            Ok(other) => return Err(format!("the leader answered {other:?}")),
            Err(e) => {
                return Err(format!(
                    "the leader `{}` did not answer: {e}",
                    leader.participant
                ));
            }
        };
        self.raft
            .wait(Some(BARRIER_TIMEOUT))
            .applied_index_at_least(Some(index), "read barrier")
            .await
            .map_err(|e| format!("this voter did not apply through {index}: {e}"))?;
        Ok(index)
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
            claims: self.read(|s| s.claims.len()),
        }
    }

    async fn initialize(&self) -> AuthorityReply {
        let mut members = BTreeMap::new();
        members.insert(
            self.id,
            Voter {
                participant: self.participant.clone(),
                address: self.address.clone(),
            },
        );
        match self.raft.initialize(members).await {
            Ok(()) => {
                // Later transitions (adding voters) go to the leader: wait for it.
                let elected = self
                    .raft
                    .wait(Some(Duration::from_secs(10)))
                    .metrics(|m| m.current_leader.is_some(), "a leader elected")
                    .await;
                if let Err(e) = elected {
                    return AuthorityReply::Unknown {
                        reason: format!("bootstrapped, but no leader yet: {e}"),
                    };
                }
                AuthorityReply::Done {
                    detail: format!(
                        "authority of `{}` bootstrapped with voter `{}`",
                        self.membership, self.participant
                    ),
                }
            }
            Err(OrError::APIError(InitializeError::NotAllowed(_))) => AuthorityReply::Done {
                detail: format!("authority of `{}` was already initialized", self.membership),
            },
            Err(e) => AuthorityReply::Refused {
                reason: e.to_string(),
            },
        }
    }

    /// Runs `here` at the leader, or forwards `call` to it (once).
    async fn at_leader(
        &self,
        call: AuthorityCall,
        forwarded_by: Option<&str>,
        here: impl std::future::Future<Output = AuthorityReply>,
    ) -> AuthorityReply {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.state == ServerState::Leader {
            return here.await;
        }
        if forwarded_by.is_some() {
            return AuthorityReply::Refused {
                reason: format!("`{}` is not the leader", self.participant),
            };
        }
        let Some(leader) = self.leader() else {
            return AuthorityReply::Refused {
                reason: format!("no leader of `{}` is known", self.membership),
            };
        };
        match self
            .forward(
                &leader,
                call,
                VOTER_CATCH_UP_TIMEOUT + Duration::from_secs(10),
            )
            .await
        {
            Ok(reply) => reply,
            Err(PeerError::NotSent(e)) => AuthorityReply::Refused {
                reason: format!("the leader `{}` is unreachable: {e}", leader.participant),
            },
            Err(PeerError::Lost(e)) => AuthorityReply::Unknown {
                reason: format!("the leader `{}` did not answer: {e}", leader.participant),
            },
        }
    }

    async fn add_voter(&self, participant: &str, address: &str) -> AuthorityReply {
        let id = node_id(participant);
        let node = Voter {
            participant: participant.to_owned(),
            address: address.to_owned(),
        };
        let metrics = self.raft.metrics().borrow().clone();
        if metrics
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id)
        {
            return AuthorityReply::Done {
                detail: format!("`{participant}` already votes"),
            };
        }
        match tokio::time::timeout(
            VOTER_CATCH_UP_TIMEOUT,
            self.raft.add_learner(id, node, true),
        )
        .await
        {
            Err(_) => {
                return AuthorityReply::Unknown {
                    reason: format!(
                        "`{participant}` did not catch up within VOTER_CATCH_UP_TIMEOUT ({} s); it stays a learner",
                        VOTER_CATCH_UP_TIMEOUT.as_secs()
                    ),
                };
            }
            Ok(Err(e)) => {
                return AuthorityReply::Refused {
                    reason: e.to_string(),
                };
            }
            Ok(Ok(_)) => {}
        }
        let ids: BTreeSet<NodeId> = [id].into();
        match tokio::time::timeout(
            CLAIM_WRITE_TIMEOUT,
            self.raft
                .change_membership(ChangeMembers::AddVoterIds(ids), false),
        )
        .await
        {
            Err(_) => AuthorityReply::Unknown {
                reason: format!("promoting `{participant}` did not commit in time"),
            },
            Ok(Err(e)) => AuthorityReply::Refused {
                reason: e.to_string(),
            },
            Ok(Ok(_)) => AuthorityReply::Done {
                detail: format!("`{participant}` caught up as a learner and now votes"),
            },
        }
    }

    async fn add_learner(&self, participant: &str, address: &str) -> AuthorityReply {
        let node = Voter {
            participant: participant.to_owned(),
            address: address.to_owned(),
        };
        match tokio::time::timeout(
            VOTER_CATCH_UP_TIMEOUT,
            self.raft.add_learner(node_id(participant), node, true),
        )
        .await
        {
            Err(_) => AuthorityReply::Unknown {
                reason: format!(
                    "`{participant}` did not catch up within VOTER_CATCH_UP_TIMEOUT ({} s)",
                    VOTER_CATCH_UP_TIMEOUT.as_secs()
                ),
            },
            Ok(Err(e)) => AuthorityReply::Refused {
                reason: e.to_string(),
            },
            Ok(Ok(_)) => AuthorityReply::Done {
                detail: format!("`{participant}` caught up and replicates as a learner"),
            },
        }
    }

    /// Removes a voter (`voter`; kept as a learner if `keep`) or a learner.
    async fn remove(&self, participant: &str, voter: bool, keep: bool) -> AuthorityReply {
        let ids: BTreeSet<NodeId> = [node_id(participant)].into();
        let change = if voter {
            ChangeMembers::RemoveVoters(ids)
        } else {
            ChangeMembers::RemoveNodes(ids)
        };
        match tokio::time::timeout(
            CLAIM_WRITE_TIMEOUT,
            self.raft.change_membership(change, keep),
        )
        .await
        {
            Err(_) => AuthorityReply::Unknown {
                reason: format!("removing `{participant}` did not commit in time"),
            },
            Ok(Err(e)) => AuthorityReply::Refused {
                reason: e.to_string(),
            },
            Ok(Ok(_)) => AuthorityReply::Done {
                detail: match (voter, keep) {
                    (true, true) => format!("`{participant}` no longer votes; it stays a learner"),
                    (true, false) => format!("`{participant}` no longer votes"),
                    _ => format!("`{participant}` no longer replicates"),
                },
            },
        }
    }

    async fn snapshot(&self) -> AuthorityReply {
        let applied = self.raft.metrics().borrow().last_applied;
        if let Err(e) = self.raft.trigger().snapshot().await {
            return AuthorityReply::Refused {
                reason: e.to_string(),
            };
        }
        let waited = self
            .raft
            .wait(Some(SNAPSHOT_TIMEOUT))
            .metrics(|m| m.snapshot >= applied, "snapshot built")
            .await;
        match waited {
            Ok(m) => AuthorityReply::Done {
                detail: format!(
                    "snapshot through {} written; older generations deleted",
                    m.snapshot.map_or(0, |l| l.index)
                ),
            },
            Err(e) => AuthorityReply::Unknown {
                reason: e.to_string(),
            },
        }
    }

    /// Serves a Raft message from another voter (`what` is the last path segment).
    pub async fn serve_raft(
        &self,
        what: &str,
        header: Option<&str>,
        body: &[u8],
    ) -> Result<Vec<u8>, String> {
        fn encode<T: Serialize>(t: &T) -> Result<Vec<u8>, String> {
            serde_json::to_vec(t).map_err(|e| e.to_string())
        }
        match what {
            "append" => {
                let rpc = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                encode(&self.raft.append_entries(rpc).await)
            }
            "vote" => {
                let rpc = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                encode(&self.raft.vote(rpc).await)
            }
            "snapshot" => {
                let header = header.ok_or("no snapshot meta header")?;
                let (vote, meta): (super::types::Vote, super::types::SnapshotMeta) =
                    serde_json::from_str(header).map_err(|e| e.to_string())?;
                let snapshot = super::types::Snapshot {
                    meta,
                    snapshot: Box::new(Cursor::new(body.to_vec())),
                };
                encode(&self.raft.install_full_snapshot(vote, snapshot).await)
            }
            other => Err(format!("no Raft message `{other}`")),
        }
    }
}

/// A claim command waiting for its batch.
struct Pending {
    proposal: Proposal,
    /// Forwarded by another voter: never forwarded again.
    forwarded: bool,
    reply: tokio::sync::oneshot::Sender<AuthorityReply>,
}

/// Gathers the commands that arrive while earlier batches are in flight into one
/// batch each (group commit).
async fn batch_loop(
    authority: std::sync::Weak<Authority>,
    mut queue: tokio::sync::mpsc::UnboundedReceiver<Pending>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT_MAX));
    while let Some(first) = queue.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < BATCH_COMMANDS_MAX {
            match queue.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let Some(authority) = authority.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            authority.write_batch(batch).await;
            drop(permit);
        });
    }
}

fn answer_all(batch: Vec<Pending>, reply: impl Fn(&Proposal) -> AuthorityReply) {
    for pending in batch {
        let r = reply(&pending.proposal);
        let _ = pending.reply.send(r);
    }
}

fn unknown_claim(proposal: &Proposal, reason: String) -> AuthorityReply {
    AuthorityReply::Claim {
        op: proposal.op.clone(),
        claim: proposal.command.claim().to_owned(),
        outcome: ClaimOutcome::Unknown,
        owner: None,
        epoch: 0,
        detail: format!("{reason}; re-send the same op id to learn its outcome"),
    }
}

fn decided(proposal: &Proposal, decision: Decision) -> AuthorityReply {
    match decision {
        Decision::Answer(answer) => AuthorityReply::Claim {
            op: answer.op,
            claim: answer.claim,
            outcome: match answer.outcome {
                Outcome::Succeeded => ClaimOutcome::Succeeded,
                Outcome::Failed => ClaimOutcome::Failed,
            },
            owner: answer.owner,
            epoch: answer.epoch,
            detail: answer.detail,
        },
        Decision::Refused { reason } => AuthorityReply::Claim {
            op: proposal.op.clone(),
            claim: proposal.command.claim().to_owned(),
            outcome: ClaimOutcome::Refused,
            owner: None,
            epoch: 0,
            detail: reason,
        },
    }
}

/// A command as its caller states it (the caller is who sends it).
fn stated(command: &Command) -> ClaimCommand {
    match command.clone() {
        Command::Acquire { claim, .. } => ClaimCommand::Acquire { claim },
        Command::EnrollSuccessor {
            claim, successor, ..
        } => ClaimCommand::EnrollSuccessor { claim, successor },
        Command::Handoff { claim, .. } => ClaimCommand::Handoff { claim },
        Command::Release { claim, .. } => ClaimCommand::Release { claim },
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
