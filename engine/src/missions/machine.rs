//! The mission's rules, pure — no IO, no clock: what the issuer answers an issue, a
//! return or a never-issued closure given what it holds, and what the host may do in
//! each state. `service.rs` holds the locks, signs, journals and calls.
//!
//! Invariants (the property test of `tests.rs`):
//! - an issuer holds at most one allocation per mission, and never both an allocation
//!   and a never-issued closure: whichever is journaled first excludes the other;
//! - re-asking returns the same document (allocation, settlement, closure), identical;
//! - a settlement exists only for an issued allocation, from a consumption record of
//!   that allocation with no unknown run, and never states more consumed than
//!   allocated;
//! - a return is refused while any run holds a unit reserved or unknown.

use serde::{Deserialize, Serialize};

use super::api::{
    Allocation, CloseQuery, Closure, Consumption, IssueQuery, MissionState, MissionUnits,
    Settlement,
};

/// What an issuer keeps per mission.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IssuerRecord {
    pub allocation: Option<Allocation>,
    pub settlement: Option<Settlement>,
    pub closure: Option<Closure>,
}

/// What the issuer does with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision<T> {
    /// Nothing held decides it: sign a new document.
    Sign,
    /// Already answered: the same document again.
    Same(T),
    Refuse(String),
}

/// Whether a host's mission in `state` still counts against `MISSIONS_MAX`: reserved
/// and not yet settled, closed or refused. A finished mission's record is kept (its
/// reservation re-sent gets its answer) but holds nothing.
pub fn held(state: MissionState) -> bool {
    match state {
        MissionState::Reserving
        | MissionState::Active
        | MissionState::Exhausted
        | MissionState::Returning => true,
        MissionState::Settled | MissionState::ClosedNeverIssued | MissionState::Refused => false,
    }
}

/// Whether an issuer's mission still counts against `MISSIONS_MAX`: neither settled
/// nor closed as never issued.
pub fn issuer_holds(record: &IssuerRecord) -> bool {
    record.settlement.is_none() && record.closure.is_none()
}

/// An issue of the reservation `query` describes.
pub fn issue(record: &IssuerRecord, query: &IssueQuery) -> Decision<Allocation> {
    let name = &query.terms.name;
    if let Some(closure) = &record.closure {
        return Decision::Refuse(format!(
            "mission `{name}` was closed as never issued (reservation `{}` at epoch {}); it issues nothing, ever",
            closure.reservation, closure.epoch
        ));
    }
    match &record.allocation {
        Some(a) if a.terms == query.terms && a.epoch == query.epoch => Decision::Same(a.clone()),
        Some(a) => Decision::Refuse(format!(
            "mission `{name}` was issued once already (reservation `{}` at epoch {}) with other terms or another epoch; a mission has one allocation",
            a.reservation, a.epoch
        )),
        None if query.terms.units == 0 => {
            Decision::Refuse(format!("mission `{name}` allocates at least 1 unit"))
        }
        None => Decision::Sign,
    }
}

/// A never-issued closure of the reservation `query` names, at the issuer `issuer`.
pub fn close(record: &IssuerRecord, query: &CloseQuery, issuer: &str) -> Decision<Closure> {
    if query.issuer != issuer {
        return Decision::Refuse(format!(
            "mission `{}` names `{}` as its issuer, not `{issuer}`: only its issuer can prove it never issued it",
            query.mission, query.issuer
        ));
    }
    if let Some(a) = &record.allocation {
        return Decision::Refuse(format!(
            "mission `{}` was issued (allocation of reservation `{}` at epoch {}, signed): an issued reservation cannot use never-issued recovery; return it instead",
            query.mission, a.reservation, a.epoch
        ));
    }
    match &record.closure {
        Some(c) if c.epoch == query.epoch && c.reservation == query.reservation => {
            Decision::Same(c.clone())
        }
        Some(c) => Decision::Refuse(format!(
            "mission `{}` was closed already for reservation `{}` at epoch {}",
            query.mission, c.reservation, c.epoch
        )),
        None => Decision::Sign,
    }
}

/// The account a settlement states for `consumption`, or why it cannot settle it.
/// `verified`: the record's and every run's signatures verify with the host's keys.
pub fn settle(
    record: &IssuerRecord,
    consumption: &Consumption,
    verified: bool,
) -> Decision<Settlement> {
    let name = &consumption.mission;
    let Some(allocation) = &record.allocation else {
        return Decision::Refuse(format!(
            "mission `{name}` was never issued here: there is nothing to return"
        ));
    };
    if let Some(s) = &record.settlement {
        return if s.consumption == consumption.signature {
            Decision::Same(s.clone())
        } else {
            Decision::Refuse(format!(
                "mission `{name}` was settled already from another consumption record; that settlement stands"
            ))
        };
    }
    if !verified {
        return Decision::Refuse(format!(
            "the consumption record of mission `{name}` or a run in it does not verify with `{}`'s keys",
            allocation.terms.host
        ));
    }
    if consumption.host != allocation.terms.host
        || consumption.epoch != allocation.epoch
        || consumption.allocation != allocation.signature
    {
        return Decision::Refuse(format!(
            "the consumption record of mission `{name}` is not of its allocation (host, epoch or allocation signature differ)"
        ));
    }
    let consumed = consumption
        .runs
        .iter()
        .filter(|r| r.outcome == "succeeded")
        .count() as u64;
    let released = consumption
        .runs
        .iter()
        .filter(|r| r.outcome == "failed")
        .count() as u64;
    if consumed + released != consumption.runs.len() as u64 {
        return Decision::Refuse(format!(
            "the consumption record of mission `{name}` holds a run that is neither succeeded nor failed: unknown outcomes are reconciled by their owner first"
        ));
    }
    if consumed != consumption.consumed || released != consumption.released {
        return Decision::Refuse(format!(
            "the consumption record of mission `{name}` counts {} consumed and {} released, its runs {consumed} and {released}",
            consumption.consumed, consumption.released
        ));
    }
    if consumed > allocation.terms.units {
        return Decision::Refuse(format!(
            "the consumption record of mission `{name}` consumes {consumed} units of {} signed",
            allocation.terms.units
        ));
    }
    Decision::Sign
}

/// Whether the host may return a mission in `state` with `units`.
pub fn returnable(state: MissionState, units: &MissionUnits) -> Result<(), String> {
    match state {
        MissionState::Active | MissionState::Exhausted | MissionState::Returning => {}
        MissionState::Reserving => {
            return Err(
                "its allocation was never received: there is nothing to return (never-issued recovery is `gridctl mission recover`)"
                    .to_owned(),
            );
        }
        MissionState::Settled => return Ok(()),
        MissionState::ClosedNeverIssued => {
            return Err("it was closed as never issued".to_owned());
        }
        MissionState::Refused => {
            return Err("its reservation was refused: nothing was allocated".to_owned());
        }
    }
    if units.unknown > 0 || units.reserved > 0 {
        return Err(format!(
            "{} run(s) hold a unit unknown and {} reserved: unknown outcomes are reconciled by their owner first (`gridctl process resolve`), then return",
            units.unknown, units.reserved
        ));
    }
    Ok(())
}

/// Whether the host may ask for never-issued recovery.
pub fn recoverable(state: MissionState, epoch: Option<u64>) -> Result<u64, String> {
    match (state, epoch) {
        (MissionState::Reserving, Some(epoch)) => Ok(epoch),
        (MissionState::ClosedNeverIssued, Some(epoch)) => Ok(epoch),
        (MissionState::Reserving, None) => Err(
            "no reservation reached the authority (no claim epoch): a missing reservation cannot use never-issued recovery"
                .to_owned(),
        ),
        (MissionState::Refused, _) => Err(
            "its reservation was refused by the authority: nothing was reserved, nothing to recover"
                .to_owned(),
        ),
        (state, _) => Err(format!(
            "it is {} — its allocation was issued and received: an issued reservation cannot use never-issued recovery; return it instead",
            state.name()
        )),
    }
}

/// The state shown: an active mission whose signed limits stop new work is
/// `exhausted`.
pub fn shown(state: MissionState, units: &MissionUnits, deadline_passed: bool) -> MissionState {
    match state {
        MissionState::Active if units.available == 0 || deadline_passed => MissionState::Exhausted,
        state => state,
    }
}
