//! The authority's wire types: control calls and their replies (JSON over the
//! control socket and `POST /authority/M/forward`), claim commands as a caller states
//! them, a voter's status. Field names and tags are the wire format.

use serde::{Deserialize, Serialize};

use super::claims::{Claim, Command};
use super::types::NodeId;

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
    /// The claim the command is about.
    pub fn claim(&self) -> &str {
        match self {
            ClaimCommand::Acquire { claim }
            | ClaimCommand::EnrollSuccessor { claim, .. }
            | ClaimCommand::Handoff { claim }
            | ClaimCommand::Release { claim } => claim,
        }
    }

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
    /// `snapshots "s3://…"`: what this voter put there and fetched from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_store: Option<crate::authority::remote::RemoteStatus>,
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
