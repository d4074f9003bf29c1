//! The operator side of Grid: observe original owners, diff against the topology
//! files, plan, and apply each transition once (SPEC §3).
//!
//! The reconciler holds no state of its own that an owner does not retain, besides
//! saved plans: every plan is made from fresh observations, and the outcome of an
//! uncertain transition is learned from its owner, never remembered here.

pub mod apply;
pub mod authority;
pub mod changes;
pub mod decisions;
pub mod diff;
pub mod exports;
pub mod ledger;
pub mod local;
pub mod mappings;
pub mod missions;
pub mod observe;
pub mod operation;
pub mod plan;
pub mod planfile;
pub mod processes;
pub mod replace;
pub mod resolve;
pub mod routes;
pub mod sources;
pub mod transfer;
pub mod transition;
pub mod up;
pub mod wallet;
