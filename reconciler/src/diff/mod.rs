//! The diff of the installations themselves — hosts, memberships and their
//! authorities — against one observation (`crate::observe::World`), as transitions.
//! Pure — no IO — so each kind's transitions are tested as data (`tests.rs`: an
//! observation and files in, plan lines out, for every capability). The other
//! capabilities draft theirs in their own modules; `crate::plan` calls them all.
//!
//! Each transition carries a `key` (`host:edge-a`, `enroll:edge-a:plant-ops`, …) and
//! the keys it comes `after`; [`crate::plan::from_world`] turns them into operation
//! ids, keeping only keys this plan holds (what the owners hold already needs no
//! transition). The order of the list is an order in which they can apply.

pub use crate::transition::{Draft, Index, enrolled, installed};

pub mod archive;
pub mod authority;
pub mod hosts;
pub mod memberships;
pub mod peer_keys;
pub mod snapshots;
#[cfg(test)]
mod tests;
