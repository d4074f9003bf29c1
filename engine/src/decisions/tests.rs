//! The decision machine's rules and the signed documents.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::api::*;
use super::machine::*;
use crate::custody::Signed;

fn policy(roster: &[&str], threshold: u32) -> Policy {
    Policy {
        name: "raise".to_owned(),
        host: "hq".to_owned(),
        roster: roster.iter().map(|s| s.to_string()).collect(),
        threshold,
        gate: "hq".to_owned(),
        effect: Effect::Input {
            model: "boiler".to_owned(),
            input: "setpoint".to_owned(),
        },
        expires_after_hours: 1,
        owner: "site".to_owned(),
    }
}

fn record(roster: &[&str], threshold: u32) -> DecisionRecord {
    DecisionRecord {
        opened: Opened {
            decision: "d1".to_owned(),
            policy: policy(roster, threshold),
            value: "85".to_owned(),
            provenance: Vec::new(),
            opened_ms: 1_000,
            expires_ms: 1_000 + 3_600_000,
            generation: 1,
            signature: "00".to_owned(),
        },
        ballots: Vec::new(),
        gate: None,
        apply: None,
        applied: None,
    }
}

fn ballot(record: &DecisionRecord, member: &str, yes: bool) -> Ballot {
    Ballot {
        decision: "d1".to_owned(),
        name: "raise".to_owned(),
        host: "hq".to_owned(),
        member: member.to_owned(),
        open: record.opened.digest(),
        yes,
        cast_ms: 2_000,
        generation: 1,
        signature: "00".to_owned(),
    }
}

fn gate(record: &DecisionRecord, operator: &str) -> Gate {
    Gate {
        decision: "d1".to_owned(),
        name: "raise".to_owned(),
        host: "hq".to_owned(),
        operator: operator.to_owned(),
        open: record.opened.digest(),
        ballots: ballots_digest(&record.ballots),
        approve: true,
        gated_ms: 3_000,
        generation: 1,
        signature: "00".to_owned(),
    }
}

#[test]
fn the_lifecycle_admits_each_step_once_and_in_order() {
    let mut r = record(&["a", "b", "c"], 2);
    assert_eq!(state(&r, 1_500), DecisionState::Open);
    let early = gate(&r, "hq");
    assert!(
        admit_gate(&r, &early, 1_500)
            .unwrap_err()
            .contains("threshold")
    );
    let outsider = ballot(&r, "x", true);
    assert!(
        admit_ballot(&r, &outsider, 1_500)
            .unwrap_err()
            .contains("not on the roster")
    );
    let a = ballot(&r, "a", true);
    admit_ballot(&r, &a, 1_500).unwrap();
    r.ballots.push(a.clone());
    assert!(
        admit_ballot(&r, &ballot(&r, "a", false), 1_500)
            .unwrap_err()
            .contains("already cast")
    );
    r.ballots.push(ballot(&r, "b", true));
    assert_eq!(state(&r, 1_500), DecisionState::Passed);
    // Not the operator, other ballots, another Open: refused.
    assert!(
        admit_gate(&r, &gate(&r, "a"), 1_500)
            .unwrap_err()
            .contains("not the gate operator")
    );
    let mut stale = gate(&r, "hq");
    stale.ballots = ballots_digest(&r.ballots[..1]);
    assert!(
        admit_gate(&r, &stale, 1_500)
            .unwrap_err()
            .contains("other ballots")
    );
    let mut other_open = ballot(&r, "c", true);
    other_open.open = "ff".to_owned();
    assert!(
        admit_ballot(&r, &other_open, 1_500)
            .unwrap_err()
            .contains("another Open")
    );
    let g = gate(&r, "hq");
    admit_gate(&r, &g, 1_500).unwrap();
    r.gate = Some(g.clone());
    assert_eq!(state(&r, 1_500), DecisionState::Applying);
    assert!(may_apply(&r));
    assert!(
        admit_ballot(&r, &ballot(&r, "c", true), 1_500)
            .unwrap_err()
            .contains("closed")
    );
    assert!(admit_gate(&r, &g, 1_500).unwrap_err().contains("closed"));
}

#[test]
fn expiry_closes_before_the_gate_never_after() {
    let mut r = record(&["a"], 1);
    let late = r.opened.expires_ms;
    assert!(
        admit_ballot(&r, &ballot(&r, "a", true), late)
            .unwrap_err()
            .contains("expired")
    );
    r.ballots.push(ballot(&r, "a", true));
    assert!(
        admit_gate(&r, &gate(&r, "hq"), late)
            .unwrap_err()
            .contains("expired")
    );
    r.gate = Some(gate(&r, "hq"));
    // Approved before expiry: applied whenever it is asked.
    assert_eq!(state(&r, late + 1), DecisionState::Applying);
    assert!(may_apply(&r));
}

proptest! {
    // Whatever ballots arrive, in any order: at most one counted per roster member,
    // none from outside it, and the state is Passed exactly when the yes count
    // reaches the threshold, Rejected exactly when it no longer can.
    #[test]
    fn ballots_count_once_per_member(
        votes in proptest::collection::vec((0usize..5, any::<bool>()), 0..20),
        threshold in 1u32..=4,
    ) {
        let roster = ["a", "b", "c", "d"];
        let names = ["a", "b", "c", "d", "x"];
        let mut r = record(&roster, threshold);
        for (who, yes) in votes {
            let b = ballot(&r, names[who], yes);
            if admit_ballot(&r, &b, 1_500).is_ok() {
                r.ballots.push(b);
            }
        }
        let mut members: Vec<&str> = r.ballots.iter().map(|b| b.member.as_str()).collect();
        members.sort();
        let before = members.len();
        members.dedup();
        prop_assert_eq!(before, members.len());
        prop_assert!(members.iter().all(|m| roster.contains(m)));
        let (yes, no) = tally(&r);
        let uncast = roster.len() as u32 - yes - no;
        let expected = if yes >= threshold {
            DecisionState::Passed
        } else if yes + uncast < threshold {
            DecisionState::Rejected
        } else {
            DecisionState::Open
        };
        prop_assert_eq!(state(&r, 1_500), expected);
    }
}

#[test]
fn signed_documents_verify_and_a_changed_field_does_not() {
    let dir = std::env::temp_dir().join(format!("grid-decisions-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    crate::custody::create(&dir).unwrap();
    let custody = crate::custody::verify(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let manifest = custody.manifest();
    let r = record(&["a"], 1);
    let mut b = ballot(&r, "a", true);
    (b.generation, b.signature) = custody.sign_hex(&b.signed_bytes());
    assert!(b.verify(&manifest));
    let mut forged = b.clone();
    forged.yes = false;
    assert!(!forged.verify(&manifest));
    assert_ne!(forged.digest(), b.digest());
    let effect = Effect::LedgerTransfer {
        ledger: "books".to_owned(),
        debit: "cash".to_owned(),
        credit: "supplier".to_owned(),
        currency: "EUR".to_owned(),
    };
    assert!(effect.check_value("1200").is_ok());
    assert!(effect.check_value("-3").is_err());
    assert!(
        Effect::Input {
            model: "m".into(),
            input: "i".into()
        }
        .check_value("NaN")
        .is_err()
    );
    assert_eq!(
        effect.arguments("1200"),
        BTreeMap::from([
            ("amount".to_owned(), "1200".to_owned()),
            ("credit".to_owned(), "supplier".to_owned()),
            ("currency".to_owned(), "EUR".to_owned()),
            ("debit".to_owned(), "cash".to_owned()),
            ("ledger".to_owned(), "books".to_owned()),
        ])
    );
}

#[test]
fn a_decision_is_listed_for_the_archive_once_closed_never_before() {
    use super::archive::closed_at;
    let mut r = record(&["a", "b"], 2);
    assert_eq!(closed_at(&r, 1_500), None);
    // Expired: at its expiry, whatever the time of the pass.
    assert_eq!(
        closed_at(&r, r.opened.expires_ms + 99),
        Some(r.opened.expires_ms)
    );
    r.ballots.push(ballot(&r, "a", false));
    assert_eq!(closed_at(&r, 1_500), Some(2_000)); // rejected: 2 yes can no longer come
    let mut passed = record(&["a"], 1);
    passed.ballots.push(ballot(&passed, "a", true));
    assert_eq!(closed_at(&passed, 1_500), None);
    let mut g = gate(&passed, "hq");
    g.approve = false;
    passed.gate = Some(g);
    assert_eq!(closed_at(&passed, 1_500), Some(3_000)); // declined at the gate
    passed.gate.as_mut().unwrap().approve = true;
    assert_eq!(closed_at(&passed, passed.opened.expires_ms + 1), None); // applying: never
}
