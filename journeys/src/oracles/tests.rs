//! Each oracle against hand-made observations: it passes what holds, fails what does
//! not, and treats an unknown answer as unknown.

use std::collections::BTreeMap;

use serde_json::json;

use super::answers_unchanged::{self, Answer};
use super::delivered_once::{self, Published, Route};
use super::one_owner::{self, Owned};
use super::receipts_verify;
use super::runs_once::{self, Runs};
use super::tag_source::{self, TagExpect};
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
        held_from: &BTreeMap::new(),
        publisher: "a",
    };
    assert_eq!(delivered_once::check(&route).unwrap(), 1);

    let short = vec![("b".to_owned(), vec![(1, 1.5)])];
    let failure = delivered_once::check(&Route {
        inboxes: &short,
        ..route.clone()
    })
    .unwrap_err();
    assert!(
        failure
            .expected
            .starts_with("b's inbox of r to hold every position from 1"),
        "{failure:?}"
    );
    let different = vec![("b".to_owned(), vec![(1, 1.5), (2, 9.5)])];
    let failure = delivered_once::check(&Route {
        inboxes: &different,
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
        ..route.clone()
    })
    .unwrap();
}

#[test]
fn delivered_once_reads_past_what_checkpoints_purged_and_nothing_else() {
    let sent = vec![
        published(1.5, "succeeded", Some(1)),
        published(2.5, "succeeded", Some(2)),
        published(3.5, "succeeded", Some(3)),
    ];
    let tail = vec![(2, 2.5), (3, 3.5)];
    let purged: BTreeMap<String, u64> = [("a".to_owned(), 2), ("b".to_owned(), 3)].into();
    let inboxes = vec![("b".to_owned(), vec![(3, 3.5)])];
    let route = Route {
        name: "r",
        class: "ordered",
        published: 3,
        sequence: &tail,
        sent: &sent,
        inboxes: &inboxes,
        held_from: &purged,
        publisher: "a",
    };
    // Position 1 went after every recipient receipted it: counted, not looked up.
    assert_eq!(delivered_once::check(&route).unwrap(), 3);
    // Without the purge positions the same observations are a loss.
    assert!(
        delivered_once::check(&Route {
            held_from: &BTreeMap::new(),
            ..route.clone()
        })
        .is_err()
    );
    // The publisher says it holds from 1: its sequence must start there.
    let from_one: BTreeMap<String, u64> = [("b".to_owned(), 3)].into();
    assert!(
        delivered_once::check(&Route {
            held_from: &from_one,
            ..route.clone()
        })
        .is_err()
    );
    // The inbox holds less than its purge position says.
    let gap = vec![("b".to_owned(), vec![])];
    assert!(
        delivered_once::check(&Route {
            inboxes: &gap,
            ..route.clone()
        })
        .is_err()
    );
    // A purge past the newest publication is a loss.
    let all: BTreeMap<String, u64> = [("a".to_owned(), 4)].into();
    assert!(
        delivered_once::check(&Route {
            sequence: &[],
            inboxes: &[],
            held_from: &all,
            ..route
        })
        .is_err()
    );
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

/// `gridctl inspect tag --json` of a Modbus tag: 5 entries, the last two debt since the
/// last good one (#3), one refused earlier, feeding one stale model input.
fn modbus_tag() -> serde_json::Value {
    json!({
        "host": "edge-a", "name": "boiler-temp", "tag": "boiler-temp", "count": 5,
        "observations": [[1, 21.0], [3, 21.5]],
        "fed": [{"model": "boiler", "input": "temp", "position": 3, "batches": 2, "stale": true},
                {"model": "audit", "input": "t", "position": 3, "batches": 2, "stale": false}],
        "source": "modbus",
        "connection": {"state": "online", "detail": null},
        "last_index": 5,
        "last_good": {"index": 3, "value": 21.5},
        "counts": {"good": 2, "debt": 2, "refused": 1},
        "debt": [{"index": 4, "reason": "exception: illegal data address", "received_ms": 10},
                 {"index": 5, "reason": "timeout after 1000 ms", "received_ms": 20}],
        "entries": [
            {"index": 2, "quality": "refused", "reason": "type f32 not admitted", "raw": {}},
            {"index": 3, "quality": "good", "value": 21.5, "raw": {"words": [215]}},
            {"index": 4, "quality": "debt", "reason": "exception: illegal data address", "raw": {}},
            {"index": 5, "quality": "debt", "reason": "timeout after 1000 ms", "raw": {}}
        ],
        "consecutive": true
    })
}

#[test]
fn tag_source_holds_when_every_condition_does() {
    let json = modbus_tag();
    let all = TagExpect {
        connection: Some("online".into()),
        stale: Some(true),
        last_good: Some(json!(21.5)),
        good_at_least: Some(2),
        debt_at_least: Some(2),
        refused_at_least: Some(1),
        good: Some(2),
        debt: Some(2),
        // The Modbus report counts none (an absent count is not 0: unknown).
        completions: None,
        outstanding_debt: Some(2),
        reason: Some("illegal data address".into()),
        reason_seen: Some("illegal data address".into()),
        consecutive: Some(true),
        // Fed through #3 of 5: the two debt entries after it are not fed yet.
        fed_all: Some(false),
        retired: None,
    };
    // A report without `retired` is neither retired nor not (unknown meets nothing).
    for retired in [true, false] {
        let asked = TagExpect {
            retired: Some(retired),
            ..TagExpect::default()
        };
        assert!(tag_source::check("boiler-temp", "edge-a", &asked, &json).is_err());
    }
    let summary = tag_source::check("boiler-temp", "edge-a", &all, &json).unwrap();
    assert!(summary.contains("connection \"online\""), "{summary}");
    assert!(summary.contains("last good #3 = 21.5"), "{summary}");
    assert!(
        summary.contains("outstanding debt 2 (#4 \"exception: illegal data address\""),
        "{summary}"
    );
    // Exact counts: one good entry more (a frame journaled twice) is not 2.
    let exact = TagExpect {
        good: Some(3),
        debt: Some(2),
        ..TagExpect::default()
    };
    let failure = tag_source::check("boiler-temp", "edge-a", &exact, &json).unwrap_err();
    assert_eq!(
        failure.observed.lines().next(),
        Some("good count is 2, not 3")
    );
    let mut with_completion = json.clone();
    with_completion["counts"]["completions"] = json!(1);
    let completions = TagExpect {
        completions: Some(1),
        ..TagExpect::default()
    };
    tag_source::check("boiler-temp", "edge-a", &completions, &with_completion).unwrap();
    let failure = tag_source::check("boiler-temp", "edge-a", &completions, &json).unwrap_err();
    assert!(
        failure
            .observed
            .starts_with("completions count is null, not 1"),
        "{}",
        failure.observed
    );
    // A refused entry's reason matches too; integers equal their float.
    let refused = TagExpect {
        reason: Some("not admitted".into()),
        last_good: Some(json!(21.5f64)),
        ..TagExpect::default()
    };
    tag_source::check("boiler-temp", "edge-a", &refused, &json).unwrap();
    // Fed through the last index, with one batch per good entry: fed all.
    let mut fed = json.clone();
    for f in fed["fed"].as_array_mut().unwrap() {
        f["position"] = json!(5);
    }
    let fed_all = TagExpect {
        fed_all: Some(true),
        ..TagExpect::default()
    };
    tag_source::check("boiler-temp", "edge-a", &fed_all, &fed).unwrap();
    // One batch too many (a good entry fed twice) is not.
    fed["fed"][1]["batches"] = json!(3);
    let failure = tag_source::check("boiler-temp", "edge-a", &fed_all, &fed).unwrap_err();
    assert!(
        failure.observed.contains("fed-all is false"),
        "{}",
        failure.observed
    );
}

#[test]
fn tag_source_fails_naming_each_condition_not_met_and_what_it_saw() {
    let json = modbus_tag();
    let unseen = TagExpect {
        reason_seen: Some("sequence gap".into()),
        ..TagExpect::default()
    };
    let failure = tag_source::check("boiler-temp", "edge-a", &unseen, &json).unwrap_err();
    assert!(
        failure
            .observed
            .contains("no listed entry's reason contains \"sequence gap\""),
        "{failure:?}"
    );
    let wrong = TagExpect {
        connection: Some("lost".into()),
        stale: Some(false),
        last_good: Some(json!(22)),
        good_at_least: Some(3),
        outstanding_debt: Some(0),
        reason: Some("NDEATH".into()),
        consecutive: Some(false),
        ..TagExpect::default()
    };
    let failure = tag_source::check("boiler-temp", "edge-a", &wrong, &json).unwrap_err();
    assert_eq!(
        failure.expected,
        "tag `boiler-temp` at `edge-a`: connection=\"lost\" stale=#false last-good=22 \
         good-at-least=3 outstanding-debt=0 reason=\"NDEATH\" consecutive=#false"
    );
    let (unmet, observed) = failure.observed.split_once("\nall observed: ").unwrap();
    assert_eq!(
        unmet,
        "connection is \"online\", not \"lost\"; stale is true, not false; last good is \
         {\"index\":3,\"value\":21.5}, not 22; good count is 2, not at least 3; outstanding \
         debt is 2, not 0; no outstanding debt or refused entry's reason contains \"NDEATH\" \
         (reasons: [\"exception: illegal data address\", \"timeout after 1000 ms\", \"type f32 \
         not admitted\"]); consecutive is true, not false"
    );
    assert_eq!(observed, tag_source::summary(&json));
}

#[test]
fn tag_source_takes_absent_fields_as_unknown_not_as_met() {
    // A simulated tag: no connection, no last good value, no debt list.
    let json = json!({"source": "simulate", "connection": null, "last_good": null,
                      "fed": "n/a", "counts": {"good": 4}});
    let expect = |e: TagExpect| tag_source::check("t", "h", &e, &json);
    let failure = expect(TagExpect {
        connection: Some("online".into()),
        ..TagExpect::default()
    })
    .unwrap_err();
    assert!(
        failure
            .observed
            .starts_with("connection is null, not \"online\"")
    );
    for unknown in [
        TagExpect {
            stale: Some(false),
            ..TagExpect::default()
        },
        TagExpect {
            stale: Some(true),
            ..TagExpect::default()
        },
        TagExpect {
            debt_at_least: Some(0),
            ..TagExpect::default()
        },
        TagExpect {
            outstanding_debt: Some(0),
            ..TagExpect::default()
        },
        TagExpect {
            consecutive: Some(false),
            ..TagExpect::default()
        },
        TagExpect {
            last_good: Some(json!(0)),
            ..TagExpect::default()
        },
    ] {
        assert!(
            expect(unknown.clone()).is_err(),
            "{unknown:?} holds on nothing"
        );
    }
    expect(TagExpect {
        last_good: Some(serde_json::Value::Null),
        good_at_least: Some(4),
        ..TagExpect::default()
    })
    .expect("#null: no good value yet; counts present");
    let no_models = json!({"fed": [], "last_good": {"index": 1, "value": 0}});
    tag_source::check(
        "t",
        "h",
        &TagExpect {
            stale: Some(false),
            last_good: Some(json!(0)),
            ..TagExpect::default()
        },
        &no_models,
    )
    .expect("a tag feeding no model is not stale; a good 0 is a value, not null");
}

#[derive(Debug, Clone, PartialEq)]
struct Kept {
    op: &'static str,
    outcome: &'static str,
    detail: &'static str,
    replayed: bool,
}

impl Answer for Kept {
    fn definite(&self) -> bool {
        self.outcome == "succeeded"
    }
    fn same(&self, other: &Kept) -> bool {
        (self.op, self.outcome, self.detail) == (other.op, other.outcome, other.detail)
    }
    fn show(&self) -> String {
        format!("{}: {}", self.outcome, self.detail)
    }
}

impl super::refused_or_same::Retained for Kept {
    fn replayed(&self) -> bool {
        self.replayed
    }
    fn unknown(&self) -> Option<&str> {
        (self.outcome == "unknown").then_some(self.detail)
    }
}

#[test]
fn refused_or_same_takes_a_named_refusal_or_the_same_answers_and_nothing_else() {
    use super::refused_or_same::{Found, Verdict, check};
    let names = ["/srv/solo".to_owned()];
    fn op(k: &Kept) -> &str {
        k.op
    }
    let first = Kept {
        op: "d1",
        outcome: "succeeded",
        detail: "batch 1",
        replayed: false,
    };
    let again = |outcome, detail, replayed| Kept {
        outcome,
        detail,
        replayed,
        ..first.clone()
    };
    let values = json!({"n": 1.0});
    let refused = |output: &str| check(op, "0.jnl", &names, Found::Refused::<Kept> { output });
    assert_eq!(
        refused("gridd: /srv/solo/store: store rolled back").unwrap(),
        Verdict::Refused
    );
    assert!(refused("gridd: the store failed").is_err(), "names nothing");
    assert!(
        refused("thread 'main' panicked at /srv/solo").is_err(),
        "a panic"
    );
    let started = |answer: Kept, now: serde_json::Value| {
        check(
            op,
            "1.seg",
            &names,
            Found::Started {
                answers: vec![(&first, answer)],
                values: vec![("counter", &values, now)],
            },
        )
    };
    assert_eq!(
        started(again("succeeded", "batch 1", true), values.clone()).unwrap(),
        Verdict::Same { unknown: 0 }
    );
    assert!(
        started(again("succeeded", "batch 1", false), values.clone()).is_err(),
        "run again"
    );
    assert!(
        started(again("succeeded", "batch 2", true), values.clone()).is_err(),
        "another answer"
    );
    assert_eq!(
        started(
            again(
                "unknown",
                "archive segment segments/1.seg is damaged",
                false
            ),
            values.clone()
        )
        .unwrap(),
        Verdict::Same { unknown: 1 }
    );
    assert!(
        started(again("unknown", "cannot read", false), values.clone()).is_err(),
        "an unknown naming nothing damaged"
    );
    assert!(
        started(again("succeeded", "batch 1", true), json!({"n": 2.0})).is_err(),
        "values changed"
    );
}

#[test]
fn ledger_balances_take_a_later_answer_after_a_refusal_that_journaled_nothing() {
    use super::ledger_balances::{Recorded, expected};
    let transfer = |op: &str, outcome: &str, amount: Option<&str>, reason: Option<&str>| Recorded {
        ledger: "books".into(),
        host: None,
        op: op.into(),
        kind: "transfer".into(),
        debit: Some("a".into()),
        credit: Some("b".into()),
        pending: false,
        pending_id: None,
        outcome: outcome.into(),
        amount: amount.map(Into::into),
        reason: reason.map(Into::into),
    };
    let records = [
        transfer("t1", "succeeded", Some("5"), None),
        // storage full: refused before the ledger's journal, then taken.
        transfer("t2", "refused", None, None),
        transfer("t2", "succeeded", Some("7"), None),
        // refused by the ledger: its answer for ever.
        transfer("t3", "refused", None, Some("exceeds credits")),
        transfer("t3", "succeeded", Some("9"), None),
    ];
    let balances = expected(&records, "books").unwrap();
    assert_eq!(balances["a"], [0, 12, 0, 0]);
    assert_eq!(balances["b"], [0, 0, 0, 12]);
}
