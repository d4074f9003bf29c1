//! Each oracle against hand-made observations: it passes what holds, fails what does
//! not, and treats an unknown answer as unknown.

use serde_json::json;

use super::answers_unchanged::{self, Answer};
use super::delivered_once::{self, Published, Route};
use super::one_owner::{self, Owned};
use super::receipts_verify;
use super::runs_once::{self, Runs};
use super::units_conserved::{self, Units};

#[derive(Debug, Clone, PartialEq)]
struct Said(&'static str, u64);

impl Answer for Said {
    fn definite(&self) -> bool {
        self.0 != "unknown"
    }
    fn same(&self, other: &Said) -> bool {
        self == other
    }
    fn show(&self) -> String {
        format!("{} {}", self.0, self.1)
    }
}

#[test]
fn answers_unchanged_keeps_the_first_definite_answer() {
    let mut original = None;
    answers_unchanged::check("op", &mut original, &Said("unknown", 0), "first").unwrap();
    assert_eq!(original, None, "an unknown answer is not an original");
    answers_unchanged::check("op", &mut original, &Said("succeeded", 7), "again").unwrap();
    answers_unchanged::check("op", &mut original, &Said("succeeded", 7), "again").unwrap();
    let changed = answers_unchanged::check("op", &mut original, &Said("succeeded", 8), "late");
    let failure = changed.unwrap_err();
    assert!(
        failure
            .expected
            .contains("op op to keep its original answer succeeded 7 (late)")
    );
    assert_eq!(failure.observed, "succeeded 8");
    let unknown_after = answers_unchanged::check("op", &mut original, &Said("unknown", 0), "x");
    assert!(
        unknown_after.is_err(),
        "unknown after a definite answer is a change"
    );
}

#[test]
fn runs_once_bounds_the_counter_by_runs_succeeded_and_unknown() {
    let runs = |after, succeeded, unknown| Runs {
        counter_before: 10,
        counter_after: after,
        succeeded,
        unknown,
    };
    assert_eq!(runs_once::check(&runs(15, 5, 0)).unwrap(), 0);
    assert_eq!(runs_once::check(&runs(17, 5, 3)).unwrap(), 2);
    assert!(runs_once::check(&runs(19, 5, 3)).is_err(), "executed twice");
    assert!(
        runs_once::check(&runs(14, 5, 3)).is_err(),
        "a succeeded run never ran"
    );
    assert!(
        runs_once::check(&runs(9, 0, 0)).is_err(),
        "the counter went down"
    );
}

#[test]
fn units_conserved_accounts_for_every_unit() {
    let before = Units::of(&json!({"allocated": 10, "reserved": 0, "consumed": 2}));
    assert_eq!(before.available, 8);
    let during = Units::of(&json!({"allocated": 10, "consumed": 4, "unknown": 1}));
    units_conserved::check_held("g", &before, &during, 1, "s").unwrap();
    assert!(units_conserved::check_held("g", &before, &during, 2, "s").is_err());
    let after = Units::of(&json!({"allocated": 10, "consumed": 5}));
    units_conserved::check_settled(&before, &after, 3, 3, "s").unwrap();
    let failure = units_conserved::check_settled(&before, &after, 4, 4, "s").unwrap_err();
    assert_eq!(
        failure.expected,
        "the grant to consume one unit per run succeeded"
    );
    assert!(units_conserved::check_settled(&before, &during, 2, 2, "s").is_err());
}

fn published(value: f64, outcome: &str, position: Option<u64>) -> Published {
    Published {
        route: "r".into(),
        value: Some(value),
        outcome: outcome.into(),
        position,
    }
}

#[test]
fn delivered_once_leaves_unknown_publishes_open() {
    let sequence = vec![(1, 1.5), (2, 2.5)];
    let sent = vec![
        published(1.5, "succeeded", Some(1)),
        published(2.5, "unknown", None),
        published(3.5, "no-answer", None),
    ];
    let inboxes = vec![("b".to_owned(), sequence.clone())];
    let route = Route {
        name: "r",
        class: "ordered",
        published: 2,
        sequence: &sequence,
        sent: &sent,
        inboxes: &inboxes,
    };
    assert_eq!(delivered_once::check(&route).unwrap(), 1);

    let short = vec![("b".to_owned(), vec![(1, 1.5)])];
    let failure = delivered_once::check(&Route {
        inboxes: &short,
        ..route.clone()
    })
    .unwrap_err();
    assert!(failure.expected.starts_with("b's inbox of r to equal"));

    let twice = vec![(1, 1.5), (2, 1.5)];
    assert!(
        delivered_once::check(&Route {
            sequence: &twice,
            inboxes: &[],
            ..route.clone()
        })
        .is_err()
    );
    let gap = vec![(1, 1.5), (3, 2.5)];
    assert!(
        delivered_once::check(&Route {
            sequence: &gap,
            inboxes: &[],
            ..route.clone()
        })
        .is_err()
    );
    let refused = vec![
        published(1.5, "succeeded", Some(1)),
        published(2.5, "refused", None),
    ];
    assert!(
        delivered_once::check(&Route {
            sent: &refused,
            ..route.clone()
        })
        .is_err()
    );
    let latest = vec![("b".to_owned(), vec![(2, 2.5)])];
    delivered_once::check(&Route {
        class: "latest",
        inboxes: &latest,
        ..route
    })
    .unwrap();
}

#[test]
fn receipts_verify_needs_a_verified_receipt_and_nothing_outstanding() {
    let good = json!({"verified": true, "receipts": [{}], "outstanding": {}});
    assert_eq!(receipts_verify::check("r", &good, Some(0)).unwrap(), 1);
    assert!(receipts_verify::check("r", &good, Some(1)).is_err());
    let none = json!({"verified": true, "receipts": []});
    assert!(receipts_verify::check("r", &none, Some(0)).is_err());
    let open = json!({"verified": true, "receipts": [{}], "outstanding": {"b": 2}});
    assert!(receipts_verify::check("r", &open, Some(0)).is_err());
}

#[test]
fn one_owner_per_claim_and_epoch() {
    let owned = |op, owner, epoch| Owned {
        op,
        claim: "c",
        owner,
        epoch,
    };
    one_owner::check([owned("1", "a", 1), owned("2", "a", 1), owned("3", "b", 2)]).unwrap();
    one_owner::check([owned("1", "a", 0), owned("2", "b", 0)]).unwrap();
    let failure = one_owner::check([owned("1", "a", 1), owned("2", "b", 1)]).unwrap_err();
    assert_eq!(failure.expected, "one owner of `c` at epoch 1");
}
