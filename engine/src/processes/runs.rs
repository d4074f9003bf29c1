//! The run state machine at a receiver (SPEC C5): where one request id stands and
//! which move of its grant's unit each step implies. Pure — no IO, no clock; the
//! service (`receiver.rs`, `service.rs`) journals each step with its grant in one
//! write, and `grants.rs` stays the only keeper of units: this file only says which
//! of its moves a step makes.
//!
//! ```text
//!            admit ──▶ Reserved ──finish(ok)──▶ Consumed (succeeded)
//!   (refused) │            │   ──finish(err)─▶ Released (failed)
//!             ▼            └──interrupted──▶ Unknown ──resolve──▶ Consumed | Released (resolved)
//!           None (failed)
//! ```
//!
//! Every method either returns an error and changes nothing, or makes its whole step.
//! A terminal run (`None`, `Consumed`, `Released`) never changes again, except that an
//! `Unknown` run resolved once answers the same resolve again and refuses the other.

use serde::{Deserialize, Serialize};

use super::api::RunOutcome;
use super::grants::Held;

/// What a run holds of its grant — the `units` field of a `RunView`, serialized as
/// the same strings as before it was typed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunUnits {
    /// Not the receiver's word: the caller's view of a run it has no outcome for.
    #[default]
    #[serde(rename = "")]
    Untold,
    /// Refused before dispatch: nothing charged.
    None,
    /// Dispatched, no outcome journaled yet.
    Reserved,
    /// Succeeded: its unit consumed.
    Consumed,
    /// Failed: its unit released.
    Released,
    /// The receiver stopped between dispatch and outcome: its unit held until resolved.
    Unknown,
}

impl RunUnits {
    pub fn name(self) -> &'static str {
        match self {
            RunUnits::Untold => "",
            RunUnits::None => "none",
            RunUnits::Reserved => "reserved",
            RunUnits::Consumed => "consumed",
            RunUnits::Released => "released",
            RunUnits::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for RunUnits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The move of a grant's unit that a step implies (applied by `grants.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitMove {
    /// The unit held (reserved or unknown) is consumed: `grants::consume`.
    Consume(Held),
    /// The unit held is released: `grants::release`.
    Release(Held),
    /// The reserved unit becomes unknown: `grants::to_unknown`.
    HoldUnknown,
}

/// What a resolve did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The unknown run is closed: apply the move, journal the run.
    Moved(UnitMove),
    /// It was already resolved to this outcome: the same answer, nothing moves.
    Already,
}

/// An illegal step: nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("a run resolves to succeeded or failed")]
    NotAnOutcome,
    #[error("the run was already resolved {}", .0.name())]
    AlreadyResolved(RunOutcome),
    #[error("the run is {} (units {}), not unknown", .outcome.name(), .units)]
    NotUnknown {
        outcome: RunOutcome,
        units: RunUnits,
    },
    #[error("the run is {} (units {}), not running", .outcome.name(), .units)]
    NotRunning {
        outcome: RunOutcome,
        units: RunUnits,
    },
}

/// One run as its receiver journals it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub outcome: RunOutcome,
    pub units: RunUnits,
    /// Closed by the operator (`resolve`).
    pub resolved: bool,
}

impl Run {
    /// Refused before dispatch (no such Process, no unit): failed, nothing charged.
    pub fn refused() -> Run {
        Run {
            outcome: RunOutcome::Failed,
            units: RunUnits::None,
            resolved: false,
        }
    }

    /// Admitted with its unit reserved: the dispatch point.
    pub fn dispatched() -> Run {
        Run {
            outcome: RunOutcome::Unknown,
            units: RunUnits::Reserved,
            resolved: false,
        }
    }

    /// Dispatched in some incarnation and no outcome journaled yet.
    pub fn is_running(&self) -> bool {
        self.units == RunUnits::Reserved
    }

    fn not_running(&self) -> RunError {
        RunError::NotRunning {
            outcome: self.outcome,
            units: self.units,
        }
    }

    /// The Process returned: succeeded consumes the reserved unit, failed releases it.
    pub fn finish(&mut self, succeeded: bool) -> Result<UnitMove, RunError> {
        if !self.is_running() {
            return Err(self.not_running());
        }
        let (outcome, units, moved) = if succeeded {
            (
                RunOutcome::Succeeded,
                RunUnits::Consumed,
                UnitMove::Consume(Held::Reserved),
            )
        } else {
            (
                RunOutcome::Failed,
                RunUnits::Released,
                UnitMove::Release(Held::Reserved),
            )
        };
        self.outcome = outcome;
        self.units = units;
        Ok(moved)
    }

    /// The receiver restarted with the run dispatched and no outcome: unknown, its unit
    /// held, never run again.
    pub fn interrupted(&mut self) -> Result<UnitMove, RunError> {
        if !self.is_running() {
            return Err(self.not_running());
        }
        self.outcome = RunOutcome::Unknown;
        self.units = RunUnits::Unknown;
        Ok(UnitMove::HoldUnknown)
    }

    /// At a restart, the Process's own durable record proves the outcome of an unknown
    /// run never resolved (`Process::recover`): succeeded consumes its held unit,
    /// failed releases it. Not a resolve: the operator has nothing left to close.
    pub fn recovered(&mut self, succeeded: bool) -> Result<UnitMove, RunError> {
        if self.resolved || self.units != RunUnits::Unknown {
            return Err(RunError::NotUnknown {
                outcome: self.outcome,
                units: self.units,
            });
        }
        let (outcome, units, moved) = if succeeded {
            (
                RunOutcome::Succeeded,
                RunUnits::Consumed,
                UnitMove::Consume(Held::Unknown),
            )
        } else {
            (
                RunOutcome::Failed,
                RunUnits::Released,
                UnitMove::Release(Held::Unknown),
            )
        };
        self.outcome = outcome;
        self.units = units;
        Ok(moved)
    }

    /// The operator closes an unknown run: succeeded consumes its held unit, failed
    /// releases it. Idempotent for the same outcome, refused for the other.
    pub fn resolve(&mut self, outcome: RunOutcome) -> Result<Resolution, RunError> {
        if outcome == RunOutcome::Unknown {
            return Err(RunError::NotAnOutcome);
        }
        if self.resolved {
            return if self.outcome == outcome {
                Ok(Resolution::Already)
            } else {
                Err(RunError::AlreadyResolved(self.outcome))
            };
        }
        if self.units != RunUnits::Unknown {
            return Err(RunError::NotUnknown {
                outcome: self.outcome,
                units: self.units,
            });
        }
        let (units, moved) = if outcome == RunOutcome::Succeeded {
            (RunUnits::Consumed, UnitMove::Consume(Held::Unknown))
        } else {
            (RunUnits::Released, UnitMove::Release(Held::Unknown))
        };
        self.outcome = outcome;
        self.units = units;
        self.resolved = true;
        Ok(Resolution::Moved(moved))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_serialize_as_the_strings_they_were() {
        for (units, text) in [
            (RunUnits::Untold, "\"\""),
            (RunUnits::None, "\"none\""),
            (RunUnits::Reserved, "\"reserved\""),
            (RunUnits::Consumed, "\"consumed\""),
            (RunUnits::Released, "\"released\""),
            (RunUnits::Unknown, "\"unknown\""),
        ] {
            assert_eq!(serde_json::to_string(&units).unwrap(), text);
            assert_eq!(serde_json::from_str::<RunUnits>(text).unwrap(), units);
            assert_eq!(format!("\"{units}\""), text);
        }
    }

    #[test]
    fn a_dispatched_run_finishes_once() {
        let mut run = Run::dispatched();
        assert_eq!(run.finish(true), Ok(UnitMove::Consume(Held::Reserved)));
        assert_eq!(
            (run.outcome, run.units),
            (RunOutcome::Succeeded, RunUnits::Consumed)
        );
        let before = run;
        assert!(run.finish(false).is_err());
        assert!(run.interrupted().is_err());
        assert!(run.resolve(RunOutcome::Failed).is_err());
        assert_eq!(run, before);
        let mut failed = Run::dispatched();
        assert_eq!(failed.finish(false), Ok(UnitMove::Release(Held::Reserved)));
        assert_eq!(failed.units, RunUnits::Released);
        assert!(Run::refused().finish(true).is_err());
    }

    #[test]
    fn an_interrupted_run_resolves_once_to_one_outcome() {
        let mut run = Run::dispatched();
        assert_eq!(run.interrupted(), Ok(UnitMove::HoldUnknown));
        assert_eq!(
            (run.outcome, run.units),
            (RunOutcome::Unknown, RunUnits::Unknown)
        );
        assert!(run.finish(true).is_err(), "an unknown run never runs again");
        assert_eq!(
            run.resolve(RunOutcome::Unknown),
            Err(RunError::NotAnOutcome)
        );
        assert_eq!(
            run.resolve(RunOutcome::Failed),
            Ok(Resolution::Moved(UnitMove::Release(Held::Unknown)))
        );
        assert!(run.resolved);
        assert_eq!(run.resolve(RunOutcome::Failed), Ok(Resolution::Already));
        assert_eq!(
            run.resolve(RunOutcome::Succeeded),
            Err(RunError::AlreadyResolved(RunOutcome::Failed))
        );
        assert_eq!(run.units, RunUnits::Released);
    }

    #[test]
    fn an_unknown_run_recovers_once_and_never_after_a_resolve() {
        for succeeded in [true, false] {
            let mut run = Run::dispatched();
            assert!(
                run.recovered(succeeded).is_err(),
                "a running run is not unknown"
            );
            run.interrupted().unwrap();
            let moved = run.recovered(succeeded).unwrap();
            if succeeded {
                assert_eq!(moved, UnitMove::Consume(Held::Unknown));
                assert_eq!(run.units, RunUnits::Consumed);
            } else {
                assert_eq!(moved, UnitMove::Release(Held::Unknown));
                assert_eq!(run.units, RunUnits::Released);
            }
            assert!(!run.resolved);
            let before = run;
            assert!(run.recovered(succeeded).is_err(), "recovered once");
            assert!(
                run.resolve(RunOutcome::Succeeded).is_err(),
                "nothing to resolve"
            );
            assert_eq!(run, before);
            let mut resolved = Run::dispatched();
            resolved.interrupted().unwrap();
            resolved.resolve(RunOutcome::Failed).unwrap();
            assert!(resolved.recovered(true).is_err(), "a resolve stands");
        }
    }
}
