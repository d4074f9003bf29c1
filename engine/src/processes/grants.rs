//! Execution grants at their owner, the receiving host (SPEC C5/C6): pure bookkeeping
//! of units, no IO. `service.rs` stores each grant's [`GrantView`] in the host's store
//! in the same write as the run or issue that changed it.
//!
//! Per grant, every unit is in exactly one place:
//! `allocated = available + reserved + consumed + surrendered + unknown`.
//! A run reserves one unit ([`UNITS_PER_RUN`]) before dispatch; its journaled outcome
//! consumes it (succeeded) or releases it (failed); a run left `unknown` by a crash
//! holds its unit in `unknown` until resolved. Units are never created by anything but
//! a signed issue (money never replenishes them), and a retired grant's released
//! units go to `surrendered`, never back to `available`.

use super::api::GrantView;
use super::runs::UnitMove;

/// Units one run reserves and, when it succeeds, consumes.
pub const UNITS_PER_RUN: u64 = 1;

/// Where a run's unit stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Reserved,
    Unknown,
}

/// A broken rule of the bookkeeping: the owner's state would be inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error(
        "caller `{caller}` holds no available execution units at this host ({detail}); refused before dispatch, nothing charged"
    )]
    NoUnits { caller: String, detail: String },
    #[error("grant `{0}`: {1}")]
    Inconsistent(String, String),
}

fn check(grant: &GrantView) {
    // Stays on in release builds: a grant whose units do not add up must never be
    // stored.
    assert!(
        grant.reserved + grant.consumed + grant.surrendered + grant.unknown <= grant.allocated,
        "grant `{}` holds more units than it was allocated: {grant:?}",
        grant.name
    );
}

/// What a grant serves, in words: `membership `M`` or `any membership`.
pub fn serves(membership: Option<&str>) -> String {
    match membership {
        Some(m) => format!("membership `{m}`"),
        None => "any membership".to_owned(),
    }
}

/// Picks the caller's grant a run that reached this host through `membership` is
/// charged to (the first by name serving that membership, with a unit available and
/// not retired) and reserves its unit.
pub fn reserve<'a>(
    grants: impl Iterator<Item = &'a mut GrantView>,
    caller: &str,
    membership: &str,
) -> Result<String, GrantError> {
    let mut seen = Vec::new();
    for grant in grants.filter(|g| g.caller == caller) {
        if let Some(serves) = grant.membership.as_deref()
            && serves != membership
        {
            seen.push(format!(
                "grant {} serves runs through membership `{serves}`, this one came through `{membership}`",
                grant.name
            ));
            continue;
        }
        if !grant.retired && grant.available() >= UNITS_PER_RUN {
            grant.reserved += UNITS_PER_RUN;
            check(grant);
            return Ok(grant.name.clone());
        }
        seen.push(format!(
            "grant {}: {} of {} available{}",
            grant.name,
            grant.available(),
            grant.allocated,
            if grant.retired { ", retired" } else { "" }
        ));
    }
    Err(GrantError::NoUnits {
        caller: caller.to_owned(),
        detail: if seen.is_empty() {
            "no grant names it".to_owned()
        } else {
            seen.join("; ")
        },
    })
}

fn take(grant: &mut GrantView, held: Held) -> Result<(), GrantError> {
    let from = match held {
        Held::Reserved => &mut grant.reserved,
        Held::Unknown => &mut grant.unknown,
    };
    *from = from.checked_sub(UNITS_PER_RUN).ok_or_else(|| {
        GrantError::Inconsistent(grant.name.clone(), format!("no {held:?} unit to take"))
    })?;
    Ok(())
}

/// The run succeeded: its unit is consumed.
pub fn consume(grant: &mut GrantView, held: Held) -> Result<(), GrantError> {
    take(grant, held)?;
    grant.consumed += UNITS_PER_RUN;
    check(grant);
    Ok(())
}

/// The run failed: its unit is released (to `surrendered` on a retired grant).
pub fn release(grant: &mut GrantView, held: Held) -> Result<(), GrantError> {
    take(grant, held)?;
    if grant.retired {
        grant.surrendered += UNITS_PER_RUN;
    }
    check(grant);
    Ok(())
}

/// The receiver restarted with the run dispatched and no outcome: its unit is held
/// as `unknown`.
pub fn to_unknown(grant: &mut GrantView) -> Result<(), GrantError> {
    take(grant, Held::Reserved)?;
    grant.unknown += UNITS_PER_RUN;
    check(grant);
    Ok(())
}

/// Makes the move of a run's unit that a step of the run machine implies.
pub fn apply(grant: &mut GrantView, moved: UnitMove) -> Result<(), GrantError> {
    match moved {
        UnitMove::Consume(held) => consume(grant, held),
        UnitMove::Release(held) => release(grant, held),
        UnitMove::HoldUnknown => to_unknown(grant),
    }
}

/// Surrenders every available unit and retires the grant: it reserves nothing more.
/// Returns the units surrendered now.
pub fn surrender(grant: &mut GrantView) -> u64 {
    let unused = grant.available();
    grant.surrendered += unused;
    grant.retired = true;
    check(grant);
    unused
}

/// Why a grant cannot be settled yet (or at all).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    #[error(
        "grant `{0}` is not surrendered: only a retired grant is settled (retired=#true first)"
    )]
    NotRetired(String),
    #[error(
        "grant `{grant}` still holds {reserved} reserved and {unknown} unknown unit(s): it is settled once their runs close (unknown ones by `gridctl process resolve`)"
    )]
    Held {
        grant: String,
        reserved: u64,
        unknown: u64,
    },
}

/// Whether the grant's account is final: retired, nothing reserved or unknown, so
/// `allocated = consumed + surrendered`.
pub fn settleable(grant: &GrantView) -> Result<(), SettleError> {
    if !grant.retired {
        return Err(SettleError::NotRetired(grant.name.clone()));
    }
    if grant.reserved > 0 || grant.unknown > 0 {
        return Err(SettleError::Held {
            grant: grant.name.clone(),
            reserved: grant.reserved,
            unknown: grant.unknown,
        });
    }
    // Stays on in release builds: a settlement states a whole account.
    assert_eq!(
        grant.consumed + grant.surrendered,
        grant.allocated,
        "retired grant `{}` with nothing held must account for every unit: {grant:?}",
        grant.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(name: &str, caller: &str, allocated: u64) -> GrantView {
        GrantView {
            name: name.to_owned(),
            caller: caller.to_owned(),
            allocated,
            ..GrantView::default()
        }
    }

    #[test]
    fn a_run_reserves_then_consumes_or_releases_one_unit() {
        let mut grants = [grant("g", "hq", 2)];
        assert_eq!(reserve(grants.iter_mut(), "hq", "ops").unwrap(), "g");
        assert_eq!(grants[0].reserved, 1);
        consume(&mut grants[0], Held::Reserved).unwrap();
        assert_eq!((grants[0].reserved, grants[0].consumed), (0, 1));
        reserve(grants.iter_mut(), "hq", "ops").unwrap();
        release(&mut grants[0], Held::Reserved).unwrap();
        assert_eq!(grants[0].available(), 1);
    }

    #[test]
    fn without_units_a_run_is_refused_and_nothing_moves() {
        let mut grants = [grant("g", "hq", 1), grant("other", "x", 5)];
        reserve(grants.iter_mut(), "hq", "ops").unwrap();
        let before = grants.clone();
        let refused = reserve(grants.iter_mut(), "hq", "ops").unwrap_err();
        assert!(
            refused.to_string().contains("0 of 1 available"),
            "{refused}"
        );
        assert_eq!(grants, before);
        assert!(matches!(
            reserve(grants.iter_mut(), "nobody", "ops"),
            Err(GrantError::NoUnits { .. })
        ));
    }

    #[test]
    fn unknown_units_stay_held_until_resolved_and_surrender_leaves_them() {
        let mut grants = [grant("g", "hq", 3)];
        reserve(grants.iter_mut(), "hq", "ops").unwrap();
        to_unknown(&mut grants[0]).unwrap();
        assert_eq!((grants[0].reserved, grants[0].unknown), (0, 1));
        assert_eq!(surrender(&mut grants[0]), 2);
        assert!(reserve(grants.iter_mut(), "hq", "ops").is_err(), "retired");
        // Resolved failed on a retired grant: released to surrendered, not available.
        release(&mut grants[0], Held::Unknown).unwrap();
        assert_eq!(grants[0].surrendered, 3);
        assert_eq!(grants[0].available(), 0);
        assert!(
            consume(&mut grants[0], Held::Unknown).is_err(),
            "nothing held"
        );
    }

    #[test]
    fn only_a_retired_grant_with_nothing_held_is_settleable() {
        let mut grants = [grant("g", "hq", 3)];
        assert!(matches!(
            settleable(&grants[0]),
            Err(SettleError::NotRetired(_))
        ));
        reserve(grants.iter_mut(), "hq", "ops").unwrap();
        to_unknown(&mut grants[0]).unwrap();
        surrender(&mut grants[0]);
        assert!(matches!(
            settleable(&grants[0]),
            Err(SettleError::Held { unknown: 1, .. })
        ));
        consume(&mut grants[0], Held::Unknown).unwrap();
        settleable(&grants[0]).unwrap();
        assert_eq!((grants[0].consumed, grants[0].surrendered), (1, 2));
    }

    #[test]
    fn runs_fall_through_to_the_next_grant_of_the_caller() {
        let mut grants = [grant("a", "hq", 1), grant("b", "hq", 1)];
        assert_eq!(reserve(grants.iter_mut(), "hq", "ops").unwrap(), "a");
        assert_eq!(reserve(grants.iter_mut(), "hq", "ops").unwrap(), "b");
        assert!(reserve(grants.iter_mut(), "hq", "ops").is_err());
    }

    #[test]
    fn a_grant_serving_one_membership_charges_only_runs_through_it() {
        let mut util = grant("u", "hq", 2);
        util.membership = Some("utility".to_owned());
        let mut grants = [util, grant("z-any", "hq", 0)];
        let before = grants.clone();
        let refused = reserve(grants.iter_mut(), "hq", "plant-ops").unwrap_err();
        assert!(
            refused.to_string().contains(
                "grant u serves runs through membership `utility`, this one came through `plant-ops`"
            ),
            "{refused}"
        );
        assert_eq!(grants, before, "a refused run reserves nothing");
        assert_eq!(reserve(grants.iter_mut(), "hq", "utility").unwrap(), "u");
        assert_eq!(grants[0].reserved, 1);
        // A grant serving any membership takes a run through either.
        grants[1].allocated = 1;
        assert_eq!(
            reserve(grants.iter_mut(), "hq", "plant-ops").unwrap(),
            "z-any"
        );
    }
}
