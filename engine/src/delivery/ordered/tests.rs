use super::*;
use ed25519_dalek::SigningKey;
use proptest::prelude::*;

impl Outbox {
    /// Recomputes every counter from the records and cohorts and checks them.
    fn check(&self) {
        let mut positions = self.cohorts.iter().map(|c| c.first);
        if let Some(mut last) = positions.next() {
            for first in positions {
                assert!(first > last, "cohorts out of order");
                last = first;
            }
        }
        for (&p, record) in &self.records {
            assert!(p >= 1 && p <= self.published, "record {p} not published");
            let cohort = self.cohort(p).expect("a retained record has its cohort");
            assert!(!cohort.is_empty());
            match self.class {
                Class::Ordered => {
                    assert!(!self.complete(p), "complete record {p} retained");
                    assert_eq!(record.windows, 0);
                }
                Class::Latest => {
                    let windows = self
                        .destinations
                        .values()
                        .filter(|d| d.window.contains(&p))
                        .count() as u64;
                    assert_eq!(record.windows, windows, "windows of {p}");
                    assert!(windows > 0, "record {p} kept by no window");
                }
            }
        }
        for (name, d) in &self.destinations {
            match self.class {
                Class::Ordered => {
                    let owed = (d.receipted + 1..=self.published)
                        .filter(|&p| owes(&self.cohorts, self.published, p, name))
                        .count() as u64;
                    assert_eq!(d.owed, owed, "owed of {name}");
                    assert!(d.owed <= self.capacity.ordered_per_destination);
                    for p in d.receipted + 1..=self.published {
                        if owes(&self.cohorts, self.published, p, name) {
                            assert!(self.records.contains_key(&p), "{p} owed by {name}");
                        }
                    }
                }
                Class::Latest => {
                    assert!(d.window.windows(2).all(|w| w[0] < w[1]));
                    assert!(d.window.iter().all(|&p| p > d.receipted));
                    assert!(d.window.len() as u64 <= self.capacity.latest_per_destination);
                    for &p in &d.window {
                        assert!(owes(&self.cohorts, self.published, p, name));
                        assert!(self.records.contains_key(&p));
                    }
                    // Its newest owed value is always kept.
                    let newest = (d.receipted + 1..=self.published)
                        .rev()
                        .find(|&p| owes(&self.cohorts, self.published, p, name));
                    assert_eq!(d.window.last().copied(), newest, "newest of {name}");
                }
            }
        }
        if self.class == Class::Ordered {
            assert!(self.retained() <= self.capacity.ordered_per_publisher);
        }
    }
}

const ROUTE: &str = "temps";
const MEMBERSHIP: &str = "plant";

fn key(name: &str) -> SigningKey {
    let mut seed = [7u8; 32];
    seed[..name.len()].copy_from_slice(name.as_bytes());
    SigningKey::from_bytes(&seed)
}

fn outbox(class: Class, capacity: Capacity) -> Outbox {
    Outbox::new(ROUTE, MEMBERSHIP, class, capacity).unwrap()
}

fn inbox(name: &str, class: Class) -> Inbox {
    Inbox::new(ROUTE, MEMBERSHIP, name, class)
}

/// Sends everything owed to `inbox`, then applies its signed receipt.
fn deliver_all(outbox: &mut Outbox, inbox: &mut Inbox) -> Released {
    for d in outbox.next_for(inbox.recipient(), usize::MAX) {
        inbox.value(&d).unwrap();
        inbox.accept(&d);
    }
    let name = inbox.recipient().to_owned();
    let receipt = inbox.receipt().sign(&key(&name), 1);
    let released = outbox.apply(&receipt, &key(&name).verifying_key()).unwrap();
    outbox.check();
    released
}

fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap()
}

#[test]
fn ordered_values_arrive_once_in_order_and_receipts_release_them() {
    let mut out = outbox(Class::Ordered, Capacity::default());
    for (i, v) in [1.5, 2.5, 3.5].into_iter().enumerate() {
        assert_eq!(out.publish_value(v, &["a"]).unwrap(), i as u64 + 1);
    }
    let mut a = inbox("a", Class::Ordered);
    let sent = out.next_for("a", 2);
    assert_eq!(
        sent.iter()
            .map(|d| (d.position, d.previous))
            .collect::<Vec<_>>(),
        vec![(1, 0), (2, 1)]
    );
    // Out of order: a gap stores nothing.
    assert_eq!(a.accept(&sent[1]), Accepted::Gap { expected: 1 });
    assert_eq!(a.held(), 0);
    assert!(matches!(
        a.accept(&sent[0]),
        Accepted::Stored { position: 1, .. }
    ));
    assert!(matches!(
        a.accept(&sent[1]),
        Accepted::Stored { position: 2, .. }
    ));
    // A duplicate is not stored again.
    assert_eq!(a.accept(&sent[0]), Accepted::Duplicate { held: 2 });
    assert_eq!(a.value(&sent[1]).unwrap(), 2.5);
    let released = out
        .apply(&a.receipt().sign(&key("a"), 1), &key("a").verifying_key())
        .unwrap();
    assert_eq!(
        (released.outcome, released.released),
        (ReceiptOutcome::Advanced, 2)
    );
    assert!(out.complete(1) && out.complete(2) && !out.complete(3));
    assert!(!out.complete(0) && !out.complete(4));
    assert_eq!(out.outstanding(), BTreeMap::from([("a".to_owned(), 1)]));
    // Resumes after the last receipt.
    assert_eq!(
        out.next_for("a", 10)
            .iter()
            .map(|d| (d.position, d.previous))
            .collect::<Vec<_>>(),
        vec![(3, 2)]
    );
    deliver_all(&mut out, &mut a);
    assert!(out.complete(3));
    assert!(out.outstanding().is_empty());
    assert_eq!(out.retained(), 0);
    out.check();
}

#[test]
fn cohorts_are_frozen_per_publication() {
    let mut out = outbox(Class::Ordered, Capacity::default());
    out.publish_value(1.0, &["a"]).unwrap();
    // `b` joins: it owes only what is published from now on.
    out.publish_value(2.0, &["a", "b"]).unwrap();
    // `b` is retired: left out of later cohorts, it still owes position 2.
    out.publish_value(3.0, &["a"]).unwrap();
    // `b` is enrolled again.
    out.publish_value(4.0, &["a", "b"]).unwrap();
    out.check();
    assert_eq!(
        out.next_for("b", 10)
            .iter()
            .map(|d| (d.position, d.previous))
            .collect::<Vec<_>>(),
        vec![(2, 0), (4, 2)]
    );
    assert_eq!(out.next_for("c", 10), vec![]);
    let (mut a, mut b) = (inbox("a", Class::Ordered), inbox("b", Class::Ordered));
    // `b`'s receipt releases only its share.
    deliver_all(&mut out, &mut b);
    assert_eq!(b.held(), 4);
    assert!(
        !out.complete(2) && !out.complete(4),
        "`a` has not receipted"
    );
    // What `inspect receipted` answers: position 2's cohort is a and b, b covers it,
    // a does not; position 3's cohort is a alone; 5 is not published.
    assert_eq!(out.awaiting(2), Some((2, 0, vec!["a"])));
    assert_eq!(out.awaiting(3), Some((1, 0, vec!["a"])));
    assert_eq!(out.awaiting(5), None);
    assert_eq!(out.awaiting(0), None);
    assert_eq!(out.outstanding(), BTreeMap::from([("a".to_owned(), 4)]));
    deliver_all(&mut out, &mut a);
    assert!((1..=4).all(|p| out.complete(p)));
    // Every publication complete: nothing awaited, receipts cover all four (a cohort
    // fully receipted may be forgotten: then it counts no recipients).
    for p in 1..=4 {
        let (_, covered, awaited) = out.awaiting(p).expect("published");
        assert_eq!((covered, awaited.len()), (4, 0), "position {p}");
    }
    assert!(out.outstanding().is_empty());
    assert_eq!(out.retained(), 0);
}

#[test]
fn a_retired_destination_keeps_its_obligations_until_it_receipts() {
    let mut out = outbox(Class::Ordered, Capacity::default());
    out.publish_value(1.0, &["a", "b"]).unwrap();
    for v in 2..10 {
        out.publish_value(f64::from(v), &["a"]).unwrap();
    }
    let mut a = inbox("a", Class::Ordered);
    deliver_all(&mut out, &mut a);
    assert!(!out.complete(1), "`b` still owes position 1");
    assert!((2..10).all(|p| out.complete(p)));
    assert_eq!(out.outstanding(), BTreeMap::from([("b".to_owned(), 1)]));
    assert_eq!(out.retained(), 1);
    let mut b = inbox("b", Class::Ordered);
    deliver_all(&mut out, &mut b);
    assert!(out.complete(1));
    assert_eq!(out.retained(), 0);
}

#[test]
fn receipts_that_prove_nothing_are_refused_and_change_nothing() {
    let mut out = outbox(Class::Ordered, Capacity::default());
    out.publish_value(1.0, &["a"]).unwrap();
    out.publish_value(2.0, &["a", "b"]).unwrap();
    let before = out.clone();
    // Another sequence: right count, wrong values.
    let wrong = chain(
        &chain(&GENESIS, 1, &9f64.to_be_bytes()),
        2,
        &2f64.to_be_bytes(),
    );
    let err = out.receipt("a", 2, &wrong).unwrap_err();
    assert!(matches!(err, DeliveryError::DigestMismatch { .. }), "{err}");
    assert!(err.to_string().contains("`a`") && err.to_string().contains(ROUTE));
    // Right values, skipping one.
    let skipped = chain(&GENESIS, 2, &2f64.to_be_bytes());
    assert!(out.receipt("a", 2, &skipped).is_err());
    // Beyond what was published.
    let err = out.receipt("a", 3, &GENESIS).unwrap_err();
    assert!(matches!(
        err,
        DeliveryError::BeyondPublished { published: 2, .. }
    ));
    // A position its cohort does not include.
    let err = out.receipt("b", 1, &chain(&GENESIS, 1, &1f64.to_be_bytes()));
    assert!(matches!(
        err,
        Err(DeliveryError::NotOwed { position: 1, .. })
    ));
    // Someone never in a cohort.
    assert!(matches!(
        out.receipt("z", 0, &GENESIS),
        Err(DeliveryError::UnknownRecipient { .. })
    ));
    // The same position as before, another digest.
    assert!(out.receipt("a", 0, &wrong).is_err());
    // A receipt of another route, or with a bad signature.
    let mut a = inbox("a", Class::Ordered);
    for d in out.next_for("a", 10) {
        a.accept(&d);
    }
    let mut other = a.receipt();
    other.route = "other".into();
    let err = out
        .apply(&other.sign(&key("a"), 1), &key("a").verifying_key())
        .unwrap_err();
    assert!(matches!(err, DeliveryError::WrongRoute { .. }), "{err}");
    // The same route's name in another membership, validly signed by the same
    // recipient: a receipt of one membership never releases the other's obligation.
    let mut elsewhere = a.receipt();
    elsewhere.membership = "utility".into();
    assert_ne!(elsewhere.membership, MEMBERSHIP);
    let err = out
        .apply(&elsewhere.sign(&key("a"), 1), &key("a").verifying_key())
        .unwrap_err();
    assert!(matches!(err, DeliveryError::WrongRoute { .. }), "{err}");
    let err = out
        .apply(&a.receipt().sign(&key("b"), 1), &key("a").verifying_key())
        .unwrap_err();
    assert!(matches!(err, DeliveryError::Receipt(_)), "{err}");
    assert_eq!(out, before, "refused receipts changed the outbox");
    // The right one releases; an older one afterwards is a no-op.
    let good = a.receipt().sign(&key("a"), 1);
    out.apply(&good, &key("a").verifying_key()).unwrap();
    let after = out.clone();
    let old = out.receipt("a", 0, &GENESIS).unwrap();
    assert_eq!((old.outcome, old.receipted), (ReceiptOutcome::Stale, 2));
    let again = out.apply(&good, &key("a").verifying_key()).unwrap();
    assert_eq!(again.outcome, ReceiptOutcome::Stale);
    assert_eq!(out, after);
}

#[test]
fn an_inbox_answers_duplicates_and_gaps_with_its_current_receipt() {
    let mut b = inbox("b", Class::Ordered);
    let d = |position, previous| Delivery {
        position,
        previous,
        payload: vec![position as u8],
    };
    assert_eq!(b.accept(&d(2, 1)), Accepted::Gap { expected: 1 });
    assert_eq!(b.receipt().highest_position, 0);
    assert_eq!(b.receipt().digest, GENESIS);
    // A destination that joined at position 2 takes it first.
    assert!(matches!(
        b.accept(&d(2, 0)),
        Accepted::Stored { position: 2, .. }
    ));
    assert_eq!(b.accept(&d(4, 3)), Accepted::Gap { expected: 3 });
    assert!(matches!(
        b.accept(&d(5, 2)),
        Accepted::Stored { position: 5, .. }
    ));
    assert_eq!(b.accept(&d(2, 0)), Accepted::Duplicate { held: 5 });
    assert_eq!(b.accept(&d(5, 2)), Accepted::Duplicate { held: 5 });
    let receipt = b.receipt();
    assert_eq!(receipt.highest_position, 5);
    assert_eq!(receipt.digest, chain(&chain(&GENESIS, 2, &[2]), 5, &[5]));
    assert_eq!(receipt.class, Class::Ordered);
    let back: Inbox = serde_json::from_str(&json(&b)).unwrap();
    assert_eq!(back, b);
}

#[test]
fn latest_sends_only_the_newest_and_its_receipt_names_it() {
    let mut out = outbox(Class::Latest, Capacity::default());
    for v in 1..=3 {
        out.publish_value(f64::from(v), &["a", "b"]).unwrap();
    }
    out.check();
    let sent = out.next_for("a", 10);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].position, 3);
    let mut a = inbox("a", Class::Latest);
    assert!(matches!(
        a.accept(&sent[0]),
        Accepted::Stored { position: 3, .. }
    ));
    // Older values are duplicates for a Latest inbox.
    let older = Delivery {
        position: 2,
        previous: 0,
        payload: 2f64.to_be_bytes().to_vec(),
    };
    assert_eq!(a.accept(&older), Accepted::Duplicate { held: 3 });
    let receipt = a.receipt();
    assert_eq!(receipt.highest_position, 3);
    assert_eq!(receipt.digest, chain(&GENESIS, 3, &3f64.to_be_bytes()));
    let released = out
        .apply(&receipt.sign(&key("a"), 1), &key("a").verifying_key())
        .unwrap();
    assert_eq!(released.released, 3, "the newest and two superseded values");
    assert!(!out.complete(3), "`b` has not receipted");
    let mut b = inbox("b", Class::Latest);
    deliver_all(&mut out, &mut b);
    assert!((1..=3).all(|p| out.complete(p)));
    assert!(out.outstanding().is_empty());
    assert_eq!(out.retained(), 0);
}

#[test]
fn next_through_sends_only_durable_positions_and_latest_its_newest_durable_one() {
    let mut ordered = outbox(Class::Ordered, Capacity::default());
    let mut latest = outbox(Class::Latest, Capacity::default());
    for v in 1..=5 {
        ordered.publish_value(f64::from(v), &["a"]).unwrap();
        latest.publish_value(f64::from(v), &["a"]).unwrap();
    }
    let positions = |d: Vec<Delivery>| d.iter().map(|d| d.position).collect::<Vec<_>>();
    assert_eq!(positions(ordered.next_through("a", 10, 3)), [1, 2, 3]);
    assert_eq!(
        positions(ordered.next_through("a", 10, 0)),
        Vec::<u64>::new()
    );
    assert_eq!(positions(ordered.next_through("a", 2, 5)), [1, 2]);
    // Latest: the newest value the store holds durably, not nothing.
    assert_eq!(positions(latest.next_through("a", 10, 3)), [3]);
    assert_eq!(positions(latest.next_through("a", 10, 5)), [5]);
    assert_eq!(positions(latest.next_for("a", 10)), [5]);
}

#[test]
fn a_receipt_for_a_conflated_value_releases_when_the_publisher_shows_its_payload() {
    let capacity = Capacity {
        latest_per_destination: 2,
        ..Capacity::default()
    };
    let mut out = outbox(Class::Latest, capacity);
    let mut a = inbox("a", Class::Latest);
    out.publish_value(1.0, &["a"]).unwrap();
    let sent = out.next_for("a", 1);
    a.accept(&sent[0]);
    for v in 2..=6 {
        out.publish_value(f64::from(v), &["a"]).unwrap();
    }
    let body = a.receipt();
    assert_eq!(body.highest_position, 1);
    // Position 1 left the window: the receipt alone cannot be checked.
    let r = out.receipt("a", 1, &body.digest).unwrap();
    assert_eq!(r.outcome, ReceiptOutcome::Conflated);
    assert_eq!(out.receipted("a"), Some(0));
    // Another value at that position does not match the digest: refused.
    let wrong = out.receipt_of_conflated("a", 1, &body.digest, &9f64.to_be_bytes());
    assert!(matches!(wrong, Err(DeliveryError::DigestMismatch { .. })));
    assert_eq!(out.receipted("a"), Some(0));
    // The publisher's own record of position 1 checks it; it releases nothing newer.
    let r = out
        .receipt_of_conflated("a", 1, &body.digest, &1f64.to_be_bytes())
        .unwrap();
    assert_eq!(r.outcome, ReceiptOutcome::Advanced);
    assert_eq!(out.receipted("a"), Some(1));
    assert_eq!(
        out.next_for("a", 1)[0].position,
        6,
        "the newest is still owed"
    );
    out.check();
}

#[test]
fn a_late_latest_receipt_verifies_within_the_window_and_is_a_no_op_beyond() {
    let capacity = Capacity {
        latest_per_destination: 2,
        ..Capacity::default()
    };
    let mut out = outbox(Class::Latest, capacity);
    out.publish_value(1.0, &["a"]).unwrap();
    let mut a = inbox("a", Class::Latest);
    a.accept(&out.next_for("a", 1)[0]);
    let late = a.receipt();
    // Superseded while its receipt was on the way: still verifies.
    out.publish_value(2.0, &["a"]).unwrap();
    let released = out.receipt("a", 1, &late.digest).unwrap();
    assert_eq!(
        (released.outcome, released.receipted),
        (ReceiptOutcome::Advanced, 1)
    );
    assert!(out.complete(1) && !out.complete(2));
    out.check();
    // Superseded beyond the window: a no-op; the newest is still owed.
    a.accept(&out.next_for("a", 1)[0]);
    let late = a.receipt();
    for v in 3..=5 {
        out.publish_value(f64::from(v), &["a"]).unwrap();
    }
    let before = out.clone();
    let released = out.receipt("a", 2, &late.digest).unwrap();
    assert_eq!(released.outcome, ReceiptOutcome::Conflated);
    assert_eq!(out, before);
    assert_eq!(out.next_for("a", 5)[0].position, 5);
    // A wrong digest in the window is refused.
    let wrong = chain(&GENESIS, 5, &4f64.to_be_bytes());
    assert!(matches!(
        out.receipt("a", 5, &wrong),
        Err(DeliveryError::DigestMismatch { .. })
    ));
    deliver_all(&mut out, &mut a);
    assert!((1..=5).all(|p| out.complete(p)));
    assert_eq!(out.retained(), 0);
}

#[test]
fn a_full_ordered_capacity_refuses_and_drops_nothing() {
    let capacity = Capacity {
        ordered_per_destination: 3,
        ordered_per_publisher: 4,
        ..Capacity::default()
    };
    let mut out = outbox(Class::Ordered, capacity);
    for v in 1..=3 {
        out.publish_value(f64::from(v), &["a", "b"]).unwrap();
    }
    let before = json(&out);
    let err = out.publish_value(4.0, &["a", "b"]).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("capacity exhausted"), "{message}");
    assert!(
        message.contains("`a`") && message.contains(ROUTE),
        "{message}"
    );
    assert!(
        message.contains("ORDERED_PER_DESTINATION_DEFAULT"),
        "{message}"
    );
    assert_eq!(json(&out), before, "a refused publish changed the outbox");
    // `c` is not full, but the publisher is, after one more.
    out.publish_value(4.0, &["c"]).unwrap();
    let err = out.publish_value(5.0, &["c"]).unwrap_err();
    assert!(matches!(
        err,
        DeliveryError::PublisherCapacityExhausted { retained: 4, .. }
    ));
    assert!(err.to_string().contains("capacity exhausted"));
    // Receipts free capacity; positions stay gap-free.
    let mut a = inbox("a", Class::Ordered);
    deliver_all(&mut out, &mut a);
    assert!(
        out.publish_value(5.0, &["a", "b"]).is_err(),
        "`b` still owes 3"
    );
    let mut b = inbox("b", Class::Ordered);
    deliver_all(&mut out, &mut b);
    assert_eq!(out.publish_value(5.0, &["a", "b"]).unwrap(), 5);
    deliver_all(&mut out, &mut a);
    deliver_all(&mut out, &mut b);
    let mut c = inbox("c", Class::Ordered);
    deliver_all(&mut out, &mut c);
    assert_eq!(a.held(), 5);
    assert_eq!(c.held(), 4);
    assert!((1..=5).all(|p| out.complete(p)));
    assert_eq!(out.retained(), 0);
}

#[test]
fn latest_and_ordered_never_share_capacity() {
    let capacity = Capacity {
        ordered_per_destination: 2,
        ordered_per_publisher: 2,
        latest_per_destination: 1,
        latest_per_publisher: 1,
    };
    let mut ordered = outbox(Class::Ordered, capacity);
    let mut latest = Outbox::new("levels", MEMBERSHIP, Class::Latest, capacity).unwrap();
    // A flood of Latest: never refused, never more than the newest kept.
    for v in 0..1_000 {
        latest.publish_value(f64::from(v), &["a", "b"]).unwrap();
    }
    latest.check();
    assert_eq!(latest.retained(), 1);
    assert_eq!(
        latest.outstanding(),
        BTreeMap::from([("a".to_owned(), 1), ("b".to_owned(), 1)])
    );
    // Ordered capacity is untouched by it.
    ordered.publish_value(1.0, &["a", "b"]).unwrap();
    ordered.publish_value(2.0, &["a", "b"]).unwrap();
    assert!(ordered.publish_value(3.0, &["a", "b"]).is_err());
    // A full Ordered capacity does not block Latest.
    assert_eq!(latest.publish_value(7.0, &["a", "b"]).unwrap(), 1_001);
    let mut a = Inbox::new("levels", MEMBERSHIP, "a", Class::Latest);
    deliver_all(&mut latest, &mut a);
    assert_eq!(a.held(), 1_001);
    // Several cohorts: every destination keeps its newest value even beyond
    // `latest_per_publisher`.
    latest.publish_value(8.0, &["c"]).unwrap();
    latest.check();
    assert_eq!(latest.retained(), 2);
    assert_eq!(latest.next_for("b", 1)[0].position, 1_001);
    assert_eq!(latest.next_for("c", 1)[0].position, 1_002);
}

#[test]
fn non_finite_values_and_bad_cohorts_are_refused_before_capture() {
    let mut out = outbox(Class::Ordered, Capacity::default());
    let before = out.clone();
    for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = out.publish_value(v, &["a"]).unwrap_err();
        assert!(err.to_string().contains("not a finite number"), "{err}");
    }
    let too_many: Vec<String> = (0..=ROUTE_DESTINATIONS_MAX)
        .map(|i| format!("h{i}"))
        .collect();
    let err = out.publish_value(1.0, &too_many).unwrap_err();
    assert!(
        err.to_string().contains("ROUTE_DESTINATIONS_MAX (1024)"),
        "{err}"
    );
    assert!(out.publish_value(1.0, &["a", "a"]).is_err());
    assert!(out.publish_value(1.0, &[""]).is_err());
    assert!(
        out.publish_value(1.0, &["x".repeat(NAME_LENGTH_MAX + 1)])
            .is_err()
    );
    assert_eq!(out, before);
    assert_eq!(out.publish_value(1.0, &too_many[1..]).unwrap(), 1);
    // An empty cohort: a position, owed by nobody, complete at once.
    assert_eq!(out.publish_value(2.0, &[] as &[&str]).unwrap(), 2);
    assert!(out.complete(2));
    out.check();
    // A recipient refuses a non-finite or malformed payload.
    let a = inbox("a", Class::Ordered);
    let nan = Delivery {
        position: 1,
        previous: 0,
        payload: f64::NAN.to_be_bytes().to_vec(),
    };
    assert!(a.value(&nan).is_err());
    let short = Delivery {
        payload: vec![1, 2],
        ..nan
    };
    assert!(matches!(
        a.value(&short),
        Err(DeliveryError::MalformedValue { .. })
    ));
    let zero = Capacity {
        latest_per_publisher: 0,
        ..Capacity::default()
    };
    let err = Outbox::new(ROUTE, MEMBERSHIP, Class::Latest, zero).unwrap_err();
    assert!(err.to_string().contains("latest_per_publisher"), "{err}");
}

#[test]
fn both_sides_recover_exactly_from_json() {
    for class in [Class::Ordered, Class::Latest] {
        let mut out = outbox(class, Capacity::default());
        let mut a = inbox("a", class);
        out.publish_value(1.0, &["a", "b"]).unwrap();
        out.publish_value(2.0, &["a"]).unwrap();
        a.accept(&out.next_for("a", 1)[0]);
        let receipt = a.receipt().sign(&key("a"), 1);
        out.apply(&receipt, &key("a").verifying_key()).unwrap();
        out.publish_value(3.0, &["b"]).unwrap();
        let out_back: Outbox = serde_json::from_str(&json(&out)).unwrap();
        let a_back: Inbox = serde_json::from_str(&json(&a)).unwrap();
        assert_eq!(out_back, out);
        assert_eq!(a_back, a);
        out_back.check();
    }
}

// ---- property: random interleavings with loss, duplication, reordering, crashes

const NAMES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Step {
    /// Publish to the destinations in the mask's bits.
    Publish {
        value: i16,
        mask: u8,
    },
    /// Hand the next values of one recipient to the network.
    Send {
        to: usize,
        max: u8,
    },
    /// One message arrives; a recipient may crash before persisting what it took.
    Arrive {
        which: usize,
        crash_before_persist: bool,
    },
    Lose {
        which: usize,
    },
    Duplicate {
        which: usize,
    },
    /// The publisher restarts, losing the receipts it applied since it last
    /// persisted (or not).
    CrashPublisher {
        lose_unpersisted: bool,
    },
    PersistPublisher,
    CrashRecipient {
        who: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (any::<i16>(), 0u8..8).prop_map(|(value, mask)| Step::Publish { value, mask }),
        3 => (any::<usize>(), 1u8..5).prop_map(|(to, max)| Step::Send { to, max }),
        6 => (any::<usize>(), prop::bool::weighted(0.1)).prop_map(|(which, crash_before_persist)| Step::Arrive { which, crash_before_persist }),
        1 => any::<usize>().prop_map(|which| Step::Lose { which }),
        1 => any::<usize>().prop_map(|which| Step::Duplicate { which }),
        1 => any::<bool>().prop_map(|lose_unpersisted| Step::CrashPublisher { lose_unpersisted }),
        1 => Just(Step::PersistPublisher),
        1 => any::<usize>().prop_map(|who| Step::CrashRecipient { who }),
    ]
}

#[derive(Debug, Clone)]
enum Message {
    Value(usize, Delivery),
    Receipt(Receipt),
}

/// A recipient host: its inbox and journal as persisted, and live.
struct Recipient {
    inbox: Inbox,
    journal: Vec<(u64, Vec<u8>)>,
    persisted: (String, Vec<(u64, Vec<u8>)>),
}

impl Recipient {
    fn persist(&mut self) {
        self.persisted = (json(&self.inbox), self.journal.clone());
    }

    fn recover(&mut self) {
        self.inbox = serde_json::from_str(&self.persisted.0).unwrap();
        self.journal = self.persisted.1.clone();
    }

    /// Takes a delivery; answers with a signed receipt unless it crashed first.
    fn take(
        &mut self,
        d: &Delivery,
        crash_before_persist: bool,
        seen: &mut BTreeMap<&'static str, usize>,
    ) -> Option<Receipt> {
        self.inbox.value(d).unwrap();
        let accepted = self.inbox.accept(d);
        *seen
            .entry(match accepted {
                Accepted::Stored { .. } => "stored",
                Accepted::Duplicate { .. } => "duplicate",
                Accepted::Gap { .. } => "gap",
            })
            .or_default() += 1;
        if let Accepted::Stored { position, .. } = accepted {
            if crash_before_persist {
                *seen.entry("crash before persist").or_default() += 1;
                self.recover();
                return None;
            }
            self.journal.push((position, d.payload.clone()));
            self.persist();
        }
        let name = self.inbox.recipient().to_owned();
        Some(self.inbox.receipt().sign(&key(&name), 1))
    }
}

struct World {
    class: Class,
    outbox: Outbox,
    persisted_outbox: String,
    recipients: Vec<Recipient>,
    net: Vec<Message>,
    /// Every issued position with its payload and cohort, as the test saw it.
    log: Vec<(u64, Vec<u8>, BTreeSet<String>)>,
    receipts_verified: usize,
    /// What happened, by kind: shows which paths a run exercised.
    seen: BTreeMap<&'static str, usize>,
}

impl World {
    fn new(class: Class) -> Self {
        let capacity = Capacity {
            ordered_per_destination: 4,
            ordered_per_publisher: 6,
            latest_per_destination: 2,
            latest_per_publisher: 2,
        };
        let outbox = outbox(class, capacity);
        World {
            class,
            persisted_outbox: json(&outbox),
            outbox,
            recipients: NAMES
                .iter()
                .map(|n| {
                    let inbox = inbox(n, class);
                    Recipient {
                        persisted: (json(&inbox), Vec::new()),
                        inbox,
                        journal: Vec::new(),
                    }
                })
                .collect(),
            net: Vec::new(),
            log: Vec::new(),
            receipts_verified: 0,
            seen: BTreeMap::new(),
        }
    }

    fn receive_receipt(&mut self, receipt: &Receipt) {
        let i = NAMES
            .iter()
            .position(|n| *n == receipt.body.recipient)
            .unwrap();
        let public = key(NAMES[i]).verifying_key();
        receipt.verify(&public).expect("every receipt verifies");
        assert!(receipt.verify(&key("z").verifying_key()).is_err());
        self.receipts_verified += 1;
        match self.outbox.apply(receipt, &public) {
            Ok(released) => {
                *self
                    .seen
                    .entry(match released.outcome {
                        ReceiptOutcome::Advanced => "advanced",
                        ReceiptOutcome::Stale => "stale",
                        ReceiptOutcome::Conflated => "conflated",
                    })
                    .or_default() += 1;
            }
            Err(e) => panic!("{e} for {receipt:?}"),
        }
    }

    fn run(&mut self, step: &Step) {
        match step {
            Step::Publish { value, mask } => {
                let cohort: Vec<&str> = NAMES
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, n)| *n)
                    .collect();
                let before = json(&self.outbox);
                match self.outbox.publish_value(f64::from(*value), &cohort) {
                    Ok(position) => {
                        assert_eq!(position, self.log.len() as u64 + 1, "a gap");
                        self.log.push((
                            position,
                            f64::from(*value).to_be_bytes().to_vec(),
                            cohort.iter().map(|n| n.to_string()).collect(),
                        ));
                        // Persisted before publish returns.
                        self.persisted_outbox = json(&self.outbox);
                    }
                    Err(e) => {
                        assert_eq!(self.class, Class::Ordered);
                        *self.seen.entry("capacity exhausted").or_default() += 1;
                        assert!(e.to_string().contains("capacity exhausted"), "{e}");
                        assert_eq!(json(&self.outbox), before);
                    }
                }
            }
            Step::Send { to, max } => {
                let i = to % NAMES.len();
                for d in self.outbox.next_for(NAMES[i], usize::from(*max)) {
                    self.net.push(Message::Value(i, d));
                }
            }
            Step::Arrive {
                which,
                crash_before_persist,
            } => {
                if self.net.is_empty() {
                    return;
                }
                match self.net.remove(which % self.net.len()) {
                    Message::Value(i, d) => {
                        if let Some(r) =
                            self.recipients[i].take(&d, *crash_before_persist, &mut self.seen)
                        {
                            self.net.push(Message::Receipt(r));
                        }
                    }
                    Message::Receipt(r) => self.receive_receipt(&r),
                }
            }
            Step::Lose { which } => {
                if !self.net.is_empty() {
                    self.net.remove(which % self.net.len());
                }
            }
            Step::Duplicate { which } => {
                if !self.net.is_empty() {
                    let m = self.net[which % self.net.len()].clone();
                    self.net.push(m);
                }
            }
            Step::CrashPublisher { lose_unpersisted } => {
                if *lose_unpersisted && self.persisted_outbox != json(&self.outbox) {
                    *self.seen.entry("publisher lost receipts").or_default() += 1;
                }
                let text = if *lose_unpersisted {
                    self.persisted_outbox.clone()
                } else {
                    json(&self.outbox)
                };
                self.outbox = serde_json::from_str(&text).unwrap();
            }
            Step::PersistPublisher => self.persisted_outbox = json(&self.outbox),
            Step::CrashRecipient { who } => self.recipients[who % NAMES.len()].recover(),
        }
        self.outbox.check();
    }

    /// Delivers everything over a reliable network until nothing is owed.
    fn drain(&mut self) {
        self.net.clear();
        for _ in 0..4 {
            for (i, name) in NAMES.iter().enumerate() {
                let mut last = None;
                for d in self.outbox.next_for(name, usize::MAX) {
                    last = self.recipients[i].take(&d, false, &mut self.seen);
                }
                if let Some(r) = last {
                    self.receive_receipt(&r);
                }
            }
            self.outbox.check();
            if self.outbox.outstanding().is_empty() {
                return;
            }
        }
        panic!("not drained: {:?}", self.outbox.outstanding());
    }

    fn check_end(&self) {
        let published = self.outbox.published();
        assert_eq!(published, self.log.len() as u64);
        assert!(
            (1..=published).all(|p| self.outbox.complete(p)),
            "incomplete"
        );
        assert!(self.outbox.outstanding().is_empty());
        assert_eq!(self.outbox.retained(), 0, "capacity not back to zero");
        for (i, name) in NAMES.iter().enumerate() {
            let owed: Vec<(u64, Vec<u8>)> = self
                .log
                .iter()
                .filter(|(_, _, cohort)| cohort.contains(*name))
                .map(|(p, v, _)| (*p, v.clone()))
                .collect();
            let journal = &self.recipients[i].journal;
            assert!(
                journal.windows(2).all(|w| w[0].0 < w[1].0),
                "`{name}` stored a duplicate or out of order: {journal:?}"
            );
            match self.class {
                Class::Ordered => assert_eq!(journal, &owed, "`{name}`"),
                Class::Latest => {
                    assert_eq!(journal.last(), owed.last(), "`{name}` newest");
                    assert!(journal.iter().all(|e| owed.contains(e)), "`{name}`");
                }
            }
            assert_eq!(
                self.recipients[i].inbox.held(),
                owed.last().map_or(0, |e| e.0)
            );
            assert_eq!(
                self.outbox.receipted(name).unwrap_or(0),
                self.recipients[i].inbox.held()
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 192,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_interleavings_deliver_exactly_once(
        ordered in any::<bool>(),
        steps in prop::collection::vec(step(), 1..120),
    ) {
        let class = if ordered { Class::Ordered } else { Class::Latest };
        let mut world = World::new(class);
        for s in &steps {
            world.run(s);
        }
        world.drain();
        world.check_end();
    }
}

/// A long deterministic run of the same harness: many publications, frequent
/// crashes on both sides, a lossy network, then everything still arrives once.
#[test]
fn interruptions_and_restarts_resume_after_the_last_receipt() {
    for class in [Class::Ordered, Class::Latest] {
        let mut world = World::new(class);
        let mut seed = 0x5eed_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..3_000 {
            let step = match next() % 10 {
                0 | 1 => Step::Publish {
                    value: (next() % 1000) as i16,
                    mask: (next() % 8) as u8,
                },
                2 | 3 => Step::Send {
                    to: next() as usize,
                    max: (next() % 4 + 1) as u8,
                },
                4..=6 => Step::Arrive {
                    which: next() as usize,
                    crash_before_persist: next() % 10 == 0,
                },
                7 => Step::Lose {
                    which: next() as usize,
                },
                8 => Step::CrashPublisher {
                    lose_unpersisted: next() % 2 == 0,
                },
                _ => Step::CrashRecipient {
                    who: next() as usize,
                },
            };
            world.run(&step);
        }
        world.drain();
        world.check_end();
        // Every path was taken.
        let mut expected = vec![
            "stored",
            "duplicate",
            "crash before persist",
            "advanced",
            "stale",
            "publisher lost receipts",
        ];
        expected.extend(match class {
            Class::Ordered => ["gap", "capacity exhausted"],
            Class::Latest => ["conflated", "conflated"],
        });
        for kind in expected {
            assert!(
                world.seen.contains_key(kind),
                "{class}: no {kind}: {:?}",
                world.seen
            );
        }
        assert!(world.receipts_verified > 100);
    }
}

/// What a publisher checkpoint relies on (delivery/service/checkpoint.rs): everything
/// below the oldest retained publication is complete, and an outbox read back from its
/// encoding continues exactly as the original would.
#[test]
fn below_the_oldest_retained_everything_is_complete_and_an_encoded_outbox_continues() {
    let mut out = outbox(Class::Ordered, Capacity::default());
    let mut a = inbox("a", Class::Ordered);
    let mut b = inbox("b", Class::Ordered);
    assert_eq!(out.oldest_retained(), None);
    for v in [1.5, 2.5, 3.5] {
        out.publish_value(v, &["a", "b"]).unwrap();
    }
    deliver_all(&mut out, &mut a);
    assert_eq!(out.oldest_retained(), Some(1), "b owes all three");
    deliver_all(&mut out, &mut b);
    assert_eq!(out.oldest_retained(), None);
    out.publish_value(4.5, &["a", "b"]).unwrap();
    deliver_all(&mut out, &mut a);
    assert_eq!(out.oldest_retained(), Some(4));
    assert!((1..4).all(|p| out.complete(p)) && !out.complete(4));

    let mut read_back: Outbox = serde_json::from_str(&json(&out)).unwrap();
    assert_eq!(read_back, out);
    // A checkpoint keeps no payload; the ones still owed come back from the journal.
    let mut bare = out.without_payloads();
    assert_eq!(bare.retained(), 0);
    assert_eq!(bare.first_missing(1, 4), Some(4), "owed to b, not held");
    for (p, v) in [(1, 1.5), (2, 2.5), (3, 3.5), (4, 4.5)] {
        let kept = bare.reinstate(p, f64::to_be_bytes(v).to_vec());
        assert_eq!(kept, p == 4, "only what is owed comes back: {p}");
    }
    assert_eq!(bare.first_missing(1, 4), None);
    assert_eq!(bare, out);
    for o in [&mut out, &mut read_back] {
        o.publish_value(5.5, &["a", "b"]).unwrap();
    }
    let mut b2 = b.clone();
    let original = deliver_all(&mut out, &mut b);
    let continued = deliver_all(&mut read_back, &mut b2);
    assert_eq!(original, continued);
    assert_eq!(read_back, out);
    // A receipt older than the encoded state changes nothing.
    let stale = a.receipt().sign(&key("a"), 1);
    let again = read_back.apply(&stale, &key("a").verifying_key()).unwrap();
    assert_eq!(again.outcome, ReceiptOutcome::Stale);

    let mut latest = outbox(Class::Latest, Capacity::default());
    let mut l = inbox("a", Class::Latest);
    for v in [1.0, 2.0, 3.0] {
        latest.publish_value(v, &["a"]).unwrap();
    }
    assert_eq!(latest.oldest_retained(), Some(1));
    let mut bare = latest.without_payloads();
    assert!(bare.first_missing(1, 3).is_some());
    for p in 1..=3 {
        bare.reinstate(p, f64::to_be_bytes(p as f64).to_vec());
    }
    assert_eq!(bare.first_missing(1, 3), None);
    assert_eq!(bare, latest, "windows counted back");
    deliver_all(&mut latest, &mut l);
    assert_eq!(
        latest.oldest_retained(),
        None,
        "the newest receipted: nothing kept"
    );
}
