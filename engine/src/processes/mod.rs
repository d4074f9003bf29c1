//! Remote Processes under execution grants (SPEC C5, C6's grants): the `processes`
//! profile (docs/processes.md).
//!
//! - `service`: the [`service::Processes`] of one host — its store, open, start,
//!   control calls;
//! - `open`: what a restart reads — the runs not finished (a run admitted and
//!   unfinished before a stop becomes `unknown`), the open waits, the counts — from
//!   indexes kept with each record;
//! - `receiver`: grants issued and surrendered, admit / execute / resolve / status
//!   over the run journal;
//! - `caller`: the caller's wait journal, asking again, resuming open waits;
//! - `mailbox`: the mailbox a host keeps for others (deposit, fetch, collect);
//! - `outbox`: the receiver's mailbox fetcher and the outcomes it owes callers;
//! - `cancel`: `process cancel` — a stopped wait closed by the receiver's signed
//!   proof of no dispatch (the request barred), or its finalized outcome learned;
//! - `surrender`: a recipient's surrender of its grant through the issuer, with the
//!   issuer's signed receipt;
//! - `archive`: finished runs past the hot window, moved to the installation's
//!   archive and found there again;
//! - `allocations`: units a host holds for its own runs (a mission's allocation),
//!   with their deadline;
//! - `builtins`: the built-in Process `demo.count`;
//! - `api`: its wire types (control calls, grant issues, the direct service, the
//!   mailbox);
//! - `runs`: the run state machine — reserved, consumed, released, unknown, resolved —
//!   and the unit move each step implies, pure, no IO;
//! - `grants`: the units of a grant — available, reserved, consumed, surrendered,
//!   unknown — pure, no IO.

pub mod allocations;
pub mod api;
pub mod archive;
mod builtins;
mod caller;
pub mod cancel;
pub mod endpoint;
mod grant_records;
pub mod grants;
mod leave;
mod mailbox;
mod open;
mod outbox;
mod receiver;
mod recover;
pub mod runs;
pub mod service;
pub mod surrender;
mod unfinished;

#[cfg(test)]
mod tests;
mod wallet_hooks;
