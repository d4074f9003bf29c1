//! The authority's openraft type configuration: what a log entry carries, what
//! applying it answers, and how voters are named.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::claims::{Answer, Command};

openraft::declare_raft_types!(
    /// The authority of one membership.
    pub TypeConfig:
        D = Proposals,
        R = Decisions,
        NodeId = u64,
        Node = Voter,
        SnapshotData = super::snapshot::SnapshotData,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type NodeId = u64;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Voter>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
pub type StoredMembership = openraft::StoredMembership<NodeId, Voter>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<NodeId, E>;
pub type ClientWriteError = openraft::error::ClientWriteError<NodeId, Voter>;
pub type CheckIsLeaderError = openraft::error::CheckIsLeaderError<NodeId, Voter>;

/// A voter: the participant (host) it is, and the address its transport listens on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Voter {
    pub participant: String,
    pub address: String,
}

/// A claims operation with its caller-chosen id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub op: String,
    pub command: Command,
}

/// One log entry: the claim commands that reached the leader together, applied in
/// order (group commit: one append, one fsync, one replication for all of them). Each
/// keeps its own operation id and answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposals(pub Vec<Proposal>);

/// The decisions of one entry's proposals, in order (none for blank and membership
/// entries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decisions(pub Vec<Decision>);

/// What applying an entry answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum Decision {
    /// The operation's answer: new, or the original one of a re-sent id.
    Answer(Answer),
    /// Nothing changed (the id was used for another command, or has expired).
    Refused { reason: String },
}

/// A voter's Raft node id: the first 8 bytes of SHA-256 of its participant name, so
/// every voter names every other the same way without coordination. Never 0.
pub fn node_id(participant: &str) -> NodeId {
    let digest = Sha256::digest(participant.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(bytes).max(1)
}
