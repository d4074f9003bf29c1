//! A ledger of integer minor units (SPEC C6): the `ledger` profile (docs/ledger.md).
//!
//! - `machine`: one ledger's accounts, two-phase transfers, posted entries and the
//!   original answer of every id — pure, no IO, no clock;
//! - `codec`: the byte layout of a journal record (a batch, a definition change);
//! - `service`: the [`service::Ledgers`] of one host — the journal in the host's
//!   store, group-committed fsync before any answer, replay on open, the expiry
//!   sweeper, control calls, and the definition changes reconcile sends;
//! - `checkpoint`: a ledger's checkpoints and its id index — what keeps an open's
//!   replay and a ledger's memory independent of its history;
//! - `api`: its wire types (calls, operations, answers, views, definitions).

pub mod api;
pub mod checkpoint;
pub mod codec;
pub mod machine;
pub mod service;

#[cfg(test)]
mod tests;
