//! The coordination authority (SPEC C3): profile `authority`, one openraft group per
//! membership among the hosts that select the profile.
//!
//! - `claims`: the pure state machine logic (claims, epochs, original answers) and
//!   the fencing rule;
//! - `answers`: where original answers are retained (in memory, or in the database);
//! - `types`: the openraft type configuration;
//! - `log`: the log and hard state in fjall, fsynced (group commit);
//! - `machine`: the state machine and its snapshot files;
//! - `snapshot`: a snapshot file's format, written and read a line at a time;
//! - `network`: Raft messages to other voters over the mutual-TLS transport;
//! - `api`: its wire types (calls, replies, claim commands, a voter's status);
//! - `service`: a running authority — opening and dispatching calls in `service.rs`,
//!   and beside it `commit` (batched claim commands, group commit), `peers`
//!   (forwarding to the leader, Raft messages from other voters), `barrier` (the
//!   linearizable read) and `members` (bootstrap, voters, learners, snapshots).

pub mod answers;
pub mod api;
pub mod claims;
pub mod endpoint;
pub mod log;
pub mod machine;
pub mod network;
pub mod remote;
pub mod service;
pub mod snapshot;
pub mod types;

#[cfg(test)]
mod tests;
