//! **Units conserved**: an execution grant's units add up — available = allocated −
//! reserved − consumed − surrendered − unknown — and after a stretch of runs is settled
//! every unit is accounted for: one consumed per run succeeded (which the receiver's
//! counter shows too), none left reserved or held unknown, the allocation unchanged,
//! the units available fallen by the runs succeeded and no more (SPEC C6).
//!
//! Unknown: a unit held `unknown` (its run's outcome is not known) is counted apart —
//! never as available, never as consumed — until its run is resolved; while runs are
//! held unknown, the grant's units held unknown must have grown by exactly their number.
//! A number gridctl does not show reads as 0 (it shows every number of a grant).
//!
//! On failure: expected the number that does not hold (e.g. "the grant to consume one
//! unit per run succeeded"), observed the step's summary of the grant and the runs (or,
//! for `expect-grants`, the grant's numbers). Used by `expect-grants` (its numbers) and
//! `process-cycles`.

use serde_json::Value;

use crate::error::Failure;

/// The numbers of a grant (or of a host's grants in all), in the order gridctl and
/// journeys name them.
pub const GRANT_NUMBERS: [&str; 6] = [
    "allocated",
    "reserved",
    "consumed",
    "surrendered",
    "unknown",
    "available",
];

/// A grant's units, with `available` computed from the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Units {
    pub allocated: u64,
    pub reserved: u64,
    pub consumed: u64,
    pub surrendered: u64,
    pub unknown: u64,
    pub available: u64,
}

impl Units {
    /// Reads a grant's view (`gridctl inspect grants --json`: a grant or the totals).
    pub fn of(view: &Value) -> Units {
        let n = |key: &str| view[key].as_u64().unwrap_or(0);
        let (allocated, reserved, consumed, surrendered, unknown) = (
            n("allocated"),
            n("reserved"),
            n("consumed"),
            n("surrendered"),
            n("unknown"),
        );
        Units {
            allocated,
            reserved,
            consumed,
            surrendered,
            unknown,
            available: allocated.saturating_sub(reserved + consumed + surrendered + unknown),
        }
    }

    /// A number by its name in [`GRANT_NUMBERS`].
    pub fn number(&self, name: &str) -> u64 {
        match name {
            "allocated" => self.allocated,
            "reserved" => self.reserved,
            "consumed" => self.consumed,
            "surrendered" => self.surrendered,
            "unknown" => self.unknown,
            "available" => self.available,
            other => unreachable!("not a grant number: {other}"),
        }
    }

    /// `allocated N, reserved N, …` for the story.
    pub fn describe(&self) -> String {
        GRANT_NUMBERS
            .iter()
            .map(|k| format!("{k} {}", self.number(k)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// While `held` runs are held unknown: the grant's units held unknown grew by exactly
/// that many since `before`.
pub fn check_held(
    grant: &str,
    before: &Units,
    during: &Units,
    held: u64,
    summary: &str,
) -> Result<(), Failure> {
    if during.unknown != before.unknown + held {
        return Err(Failure::new(
            format!("grant {grant}'s units held unknown to grow by the {held} runs held unknown"),
            summary,
        ));
    }
    Ok(())
}

/// After every run is settled: `succeeded` runs succeeded since `before`, and the
/// receiver's counter grew by `counted`.
pub fn check_settled(
    before: &Units,
    after: &Units,
    counted: u64,
    succeeded: u64,
    summary: &str,
) -> Result<(), Failure> {
    let consumed = after.consumed.saturating_sub(before.consumed);
    let checks = [
        (
            counted == succeeded,
            "the counter to grow by the runs succeeded",
        ),
        (
            consumed == succeeded,
            "the grant to consume one unit per run succeeded",
        ),
        (after.reserved == before.reserved, "no unit left reserved"),
        (after.unknown == before.unknown, "no unit left held unknown"),
        (
            after.allocated == before.allocated && after.surrendered == before.surrendered,
            "the allocation unchanged",
        ),
        (
            after.available == before.available - succeeded.min(before.available),
            "the units available to fall by the runs succeeded, no more",
        ),
    ];
    for (holds, what) in checks {
        if !holds {
            return Err(Failure::new(what, summary));
        }
    }
    Ok(())
}
