//! Grid's engine: hosts and their capabilities (SPEC §4). Today: the model runtime
//! (C1), its durable journal, and the host that owns installed models and the
//! operations it was sent. Every later capability joins as its own module.

pub mod authority;
pub mod config;
pub mod control;
pub mod custody;
pub mod decisions;
pub mod delivery;
pub mod exports;
pub mod grdx;
pub mod host;
pub mod journal;
pub mod ledger;
pub mod limits;
pub mod metrics;
pub mod missions;
pub mod model;
pub mod processes;
pub mod protocol;
pub mod root;
pub mod sources;
pub mod store;
pub mod transport;
pub mod wallet;
