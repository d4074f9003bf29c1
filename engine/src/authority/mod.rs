//! The coordination authority (SPEC C3): profile `authority`, one openraft group per
//! membership among the hosts that select the profile.
//!
//! - `claims`: the pure state machine logic (claims, epochs, original answers) and
//!   the fencing rule;
//! - `types`: the openraft type configuration;
//! - `log`: the log and hard state in fjall, fsynced (group commit);
//! - `machine`: the state machine and its snapshot files;
//! - `network`: Raft messages to other voters over the mutual-TLS transport;
//! - `service`: a running authority — writes, forwarding to the leader, the read
//!   barrier, voters, snapshots.

pub mod claims;
pub mod log;
pub mod machine;
pub mod network;
pub mod service;
pub mod types;
