//! The mission machine's invariants under random interleavings of issues, closures
//! and returns at one issuer (pure: no IO).

use super::api::{
    Allocation, CloseQuery, Closure, ConsumedRun, Consumption, IssueQuery, MissionState,
    MissionTerms, MissionUnits, Settlement,
};
use super::machine::{self, Decision, IssuerRecord};
use crate::processes::api::{RunOutcome, RunView};

fn terms(units: u64) -> MissionTerms {
    let keys = crate::custody::Manifest {
        generation: 1,
        signing: String::new(),
        mail: String::new(),
        tls: String::new(),
        retired: Vec::new(),
        mail_generation: 1,
        retired_mail: Vec::new(),
        tls_generation: 1,
        retired_tls: Vec::new(),
    };
    MissionTerms {
        name: "night".into(),
        host: "edge".into(),
        units,
        deadline: "2099-01-01T00:00:00Z".into(),
        successor: "site".into(),
        issuer: "site".into(),
        issuer_address: "127.0.0.1:1".into(),
        membership: "ops".into(),
        issuer_keys: keys.clone(),
        host_keys: keys,
    }
}

fn run(i: usize, outcome: RunOutcome) -> ConsumedRun {
    ConsumedRun {
        request: format!("r{i}"),
        process: "demo.count".into(),
        outcome: outcome.name().into(),
        run: RunView {
            request: format!("r{i}"),
            process: "demo.count".into(),
            arguments: Default::default(),
            caller: "edge".into(),
            receiver: "edge".into(),
            via: "mission:night".into(),
            role: "receiver".into(),
            outcome,
            result: None,
            detail: String::new(),
            grant: Some("mission:night".into()),
            units: Default::default(),
            signature: None,
            archived: false,
        },
    }
}

proptest::proptest! {
    /// Random requests at one issuer: never both an allocation and a closure, one
    /// allocation, the same documents answered again, settlements only of the
    /// allocation and never above it.
    #[test]
    fn an_issuer_issues_once_or_closes_once(
        steps in proptest::collection::vec((0u8..4, 0u64..3, 0usize..6, 0usize..3), 1..40)
    ) {
        let units = 4;
        let mut record = IssuerRecord::default();
        let mut first_allocation: Option<Allocation> = None;
        let mut first_closure: Option<Closure> = None;
        let mut first_settlement: Option<Settlement> = None;
        for (kind, epoch, runs, failed) in steps {
            match kind {
                0 => {
                    let q = IssueQuery { terms: terms(units), epoch, reservation: "p".into() };
                    match machine::issue(&record, &q) {
                        Decision::Sign => {
                            proptest::prop_assert!(record.allocation.is_none() && record.closure.is_none());
                            let a = Allocation { terms: q.terms, claim: "mission:night".into(), epoch, reservation: "p".into(), generation: 1, signature: format!("a{epoch}") };
                            record.allocation = Some(a.clone());
                            first_allocation = Some(a);
                        }
                        Decision::Same(a) => proptest::prop_assert_eq!(Some(a), first_allocation.clone()),
                        Decision::Refuse(_) => {}
                    }
                }
                1 => {
                    let q = CloseQuery { mission: "night".into(), epoch, reservation: "p".into(), issuer: "site".into() };
                    match machine::close(&record, &q, "site") {
                        Decision::Sign => {
                            proptest::prop_assert!(record.allocation.is_none() && record.closure.is_none());
                            let c = Closure { mission: "night".into(), host: "edge".into(), issuer: "site".into(), successor: "site".into(), epoch, reservation: "p".into(), generation: 1, signature: format!("c{epoch}") };
                            record.closure = Some(c.clone());
                            first_closure = Some(c);
                        }
                        Decision::Same(c) => proptest::prop_assert_eq!(Some(c), first_closure.clone()),
                        Decision::Refuse(_) => {}
                    }
                }
                _ => {
                    let allocation = record.allocation.clone();
                    let signature = allocation.as_ref().map_or(String::new(), |a| a.signature.clone());
                    let failed = failed.min(runs);
                    let list: Vec<ConsumedRun> = (0..runs)
                        .map(|i| run(i, if i < failed { RunOutcome::Failed } else if kind == 3 && i == runs - 1 { RunOutcome::Unknown } else { RunOutcome::Succeeded }))
                        .collect();
                    let consumption = Consumption {
                        mission: "night".into(), host: "edge".into(),
                        epoch: allocation.as_ref().map_or(epoch, |a| a.epoch),
                        allocation: signature,
                        consumed: list.iter().filter(|r| r.outcome == "succeeded").count() as u64,
                        released: list.iter().filter(|r| r.outcome == "failed").count() as u64,
                        runs: list.clone(), generation: 1, signature: format!("k{runs}-{failed}-{kind}"),
                    };
                    match machine::settle(&record, &consumption, true) {
                        Decision::Sign => {
                            let a = record.allocation.clone();
                            proptest::prop_assert!(a.is_some(), "a settlement without an allocation");
                            proptest::prop_assert!(consumption.consumed <= units, "settled above the allocation");
                            proptest::prop_assert!(list.iter().all(|r| r.outcome != "unknown"), "settled an unknown run");
                            let s = Settlement { mission: "night".into(), host: "edge".into(), issuer: "site".into(), epoch, allocated: units, consumed: consumption.consumed, released: consumption.released, unused: units - consumption.consumed, consumption: consumption.signature.clone(), generation: 1, signature: "s".into() };
                            record.settlement = Some(s.clone());
                            first_settlement = Some(s);
                        }
                        Decision::Same(s) => proptest::prop_assert_eq!(Some(s), first_settlement.clone()),
                        Decision::Refuse(_) => {}
                    }
                }
            }
            proptest::prop_assert!(!(record.allocation.is_some() && record.closure.is_some()), "issued and closed");
        }
    }
}

#[test]
fn a_return_waits_for_unknown_outcomes_and_recovery_needs_a_reservation() {
    let held = MissionUnits {
        allocated: 3,
        consumed: 1,
        unknown: 1,
        ..MissionUnits::default()
    };
    assert!(machine::returnable(MissionState::Active, &held).is_err());
    let quiet = MissionUnits {
        allocated: 3,
        consumed: 2,
        available: 1,
        ..MissionUnits::default()
    };
    assert!(machine::returnable(MissionState::Active, &quiet).is_ok());
    assert!(machine::returnable(MissionState::Reserving, &quiet).is_err());
    assert!(machine::recoverable(MissionState::Reserving, None).is_err());
    assert_eq!(
        machine::recoverable(MissionState::Reserving, Some(3)),
        Ok(3)
    );
    assert!(machine::recoverable(MissionState::Active, Some(3)).is_err());
    assert_eq!(
        machine::shown(MissionState::Active, &quiet, true),
        MissionState::Exhausted
    );
}

#[test]
fn only_the_named_issuer_closes_a_reservation() {
    let query = CloseQuery {
        mission: "night".into(),
        epoch: 1,
        reservation: "p".into(),
        issuer: "site".into(),
    };
    let record = IssuerRecord::default();
    match machine::close(&record, &query, "hq") {
        Decision::Refuse(reason) => assert!(reason.contains("`site` as its issuer"), "{reason}"),
        other => panic!("another host closed a mission it does not issue: {other:?}"),
    }
    assert_eq!(machine::close(&record, &query, "site"), Decision::Sign);
}

/// `MISSIONS_MAX` bounds the missions held at once, never the missions a host or an
/// issuer ever had: a finished one counts for nothing.
#[test]
fn only_missions_not_yet_finished_count_against_the_limit() {
    use MissionState::*;
    for state in [Reserving, Active, Exhausted, Returning] {
        assert!(machine::held(state), "{state:?}");
    }
    for state in [Settled, ClosedNeverIssued, Refused] {
        assert!(!machine::held(state), "{state:?}");
    }
    let closure = Closure {
        mission: "night".into(),
        host: "edge".into(),
        issuer: "site".into(),
        successor: "site".into(),
        epoch: 1,
        reservation: "p".into(),
        generation: 1,
        signature: "c".into(),
    };
    let settlement = Settlement {
        mission: "night".into(),
        host: "edge".into(),
        issuer: "site".into(),
        epoch: 1,
        allocated: 3,
        consumed: 1,
        released: 0,
        unused: 2,
        consumption: "k".into(),
        generation: 1,
        signature: "s".into(),
    };
    assert!(machine::issuer_holds(&IssuerRecord::default()));
    assert!(!machine::issuer_holds(&IssuerRecord {
        closure: Some(closure),
        ..IssuerRecord::default()
    }));
    assert!(!machine::issuer_holds(&IssuerRecord {
        settlement: Some(settlement),
        ..IssuerRecord::default()
    }));
}
