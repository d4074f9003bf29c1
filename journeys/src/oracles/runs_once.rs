//! **Runs once**: no Process executed twice. Over a stretch of runs of `demo.count` at
//! a receiver, with S the runs the receiver holds `succeeded` and U those it holds
//! `unknown`, the counter's increase k' satisfies S ≤ k' ≤ S + U: every succeeded run
//! executed exactly once, and an unknown one at most once.
//!
//! Unknown: a run held `unknown` (its receiver died between dispatch and outcome) may
//! have executed or not, so it counts as either — never as absent, never as failed. The
//! oracle returns k = k' − S, the unknown runs that did execute; the step resolves that
//! many `succeeded` and the rest `failed`, and `units_conserved` then checks the counter
//! against the runs succeeded.
//!
//! On failure: expected "demo.count's counter never to go down" or "0 ≤ counter increase
//! − runs succeeded ≤ runs unknown (U): no run executed twice", observed the counter
//! and the runs. Used by `process-cycles`.

use crate::error::Failure;

/// A counter read before and after a stretch of runs, and the receiver's runs.
#[derive(Debug, Clone, Copy)]
pub struct Runs {
    pub counter_before: u64,
    pub counter_after: u64,
    pub succeeded: u64,
    pub unknown: u64,
}

impl Runs {
    /// The counter's increase (checked not to be negative).
    pub fn counted(&self) -> Result<u64, Failure> {
        self.counter_after
            .checked_sub(self.counter_before)
            .ok_or_else(|| {
                Failure::new(
                    "demo.count's counter never to go down",
                    format!(
                        "{} before the cycles, {} after",
                        self.counter_before, self.counter_after
                    ),
                )
            })
    }
}

/// Checks S ≤ k' ≤ S + U; returns k = k' − S, the unknown runs that executed.
pub fn check(runs: &Runs) -> Result<u64, Failure> {
    let counted = runs.counted()?;
    counted
        .checked_sub(runs.succeeded)
        .filter(|k| *k <= runs.unknown)
        .ok_or_else(|| {
            Failure::new(
                format!(
                    "0 ≤ counter increase − runs succeeded ≤ runs unknown ({}): no run executed twice",
                    runs.unknown
                ),
                format!(
                    "counter +{counted} ({} → {}), {} runs succeeded, {} held unknown",
                    runs.counter_before, runs.counter_after, runs.succeeded, runs.unknown
                ),
            )
        })
}
