//! A ledger of integer minor units (SPEC C6): the `ledger` profile (docs/ledger.md).
//!
//! - `machine`: one ledger's accounts, two-phase transfers, posted entries and the
//!   original answer of every id — pure, no IO, no clock;
//! - `codec`: the byte layout of a journal record (a batch, a definition change);
//! - `service`: the [`service::Ledgers`] of one host — the journal in the host's
//!   store, group-committed fsync before any answer, replay on open, the expiry
//!   sweeper, control calls, and the definition changes reconcile sends;
//! - `api`: its wire types (calls, operations, answers, views, definitions).

pub mod api;
pub mod codec;
pub mod machine;
pub mod service;

#[cfg(test)]
mod tests;
