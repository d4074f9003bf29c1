//! The invariant checkers ("oracles"), one per file, each used by every step that checks
//! its invariant.
//!
//! An oracle is a pure function of what steps observed through `gridctl` (answers,
//! inboxes, a grant's numbers, a counter): it runs no command and tells no story. It
//! returns what it found (for the story) or a [`Failure`](crate::Failure) naming the
//! expectation and what was observed; the runner adds the failing step (its number, line
//! and KDL text). Each file's header states its invariant, what it treats as *unknown* —
//! an operation whose answer was lost or is `unknown` is never taken as absent (nor as
//! done) — and what it reports on failure.
//!
//! Adding an oracle: docs/journeys.md, "Adding an oracle".

pub mod answers_unchanged;
pub mod delivered_once;
pub mod ledger_balances;
pub mod one_owner;
pub mod receipts_verify;
pub mod refused_or_same;
pub mod runs_once;
pub mod tag_source;
pub mod units_conserved;

/// Two observed JSON values are the same: numbers by value (`215` is `215.0`), anything
/// else exactly.
pub fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;
