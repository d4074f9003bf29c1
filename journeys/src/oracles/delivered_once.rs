//! **Delivered once, in order**: once every destination's receipt covers the
//! publisher's last position, the publisher's sequence of the route is gap-free from
//! position 1 — or from the position its journal says it holds from, when a checkpoint
//! purged what every recipient receipted (docs/storage.md, "Delivery") — and holds
//! exactly the positions it published from there; each destination's inbox is
//! gap-free from its own purge position through the last published and equals the
//! publisher's sequence wherever both hold a position (a `latest` route: its newest
//! value). An acknowledged publish below the publisher's purge position was receipted
//! by every recipient before it went; it is counted, not looked up. When the journey's
//! own steps published on the route (distinct values by construction), no value is in
//! the sequence twice, every acknowledged publish is at its acknowledged position, no
//! refused publish is in it, and nothing is in it that no step sent (SPEC C4).
//!
//! Unknown: a publish whose reply was lost (`unknown`, or no answer: its publisher was
//! killed) may or may not be in the sequence — it is neither required nor taken as
//! absent; only acknowledged (`succeeded`) and `refused` publishes are pinned. A route
//! fed by a model has no record of what was sent: only order and equality are checked.
//!
//! On failure: expected the property that does not hold (e.g. "B's inbox of R to equal
//! the publisher's sequence (N values)"), observed the first position or value that
//! breaks it. Used by `expect-delivered`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::Failure;

/// A value at its position in a sequence or inbox.
pub type Held = (u64, f64);

/// One publish a step sent, and how it was answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Published {
    pub route: String,
    pub value: Option<f64>,
    /// `succeeded`, `failed`, `unknown`, `refused`, or `no-answer`.
    pub outcome: String,
    /// The acknowledged position (a `succeeded` publish).
    pub position: Option<u64>,
}

/// What was observed of a route once its receipts covered everything published.
#[derive(Debug, Clone)]
pub struct Route<'a> {
    pub name: &'a str,
    /// `ordered` or `latest`.
    pub class: &'a str,
    /// The publisher's last position.
    pub published: u64,
    /// The publisher's sequence.
    pub sequence: &'a [Held],
    /// Every publish the journey's steps sent on the route.
    pub sent: &'a [Published],
    /// Each destination's inbox.
    pub inboxes: &'a [(String, Vec<Held>)],
    /// The lowest position each host's journal of the route holds (`held_from` of
    /// `inspect routes`), by host; absent: 1 (nothing purged).
    pub held_from: &'a BTreeMap<String, u64>,
    /// The publisher's name (its entry in `held_from`).
    pub publisher: &'a str,
}

/// Checks the route; returns the acknowledged publishes it found in place.
pub fn check(route: &Route<'_>) -> Result<usize, Failure> {
    let name = route.name;
    let sequence = route.sequence;
    let from = |host: &str| route.held_from.get(host).copied().unwrap_or(1).max(1);
    let start = from(route.publisher);
    if route.published > 0 && start > route.published {
        return Err(Failure::new(
            format!("the publisher of {name} to keep its newest publication"),
            format!("held from {start}, published through {}", route.published),
        ));
    }
    // Gap-free from where its journal holds, each position once.
    for (i, (position, _)) in sequence.iter().enumerate() {
        if *position != start + i as u64 {
            return Err(Failure::new(
                format!("the publisher's sequence of {name} to be gap-free from {start}"),
                format!("position {position} at index {i}"),
            ));
        }
    }
    let expected_len = (route.published + 1).saturating_sub(start);
    if sequence.len() as u64 != expected_len {
        return Err(Failure::new(
            format!(
                "{expected_len} publications held by the publisher (positions {start} to {})",
                route.published
            ),
            format!("{}", sequence.len()),
        ));
    }
    let sent = route.sent;
    // Values published by this journey's steps (distinct by construction): none twice,
    // none that no step sent. (A route fed by a model has no such record.)
    let mut seen = BTreeSet::new();
    for (position, value) in sequence.iter().filter(|_| !sent.is_empty()) {
        if !seen.insert(value.to_bits()) {
            return Err(Failure::new(
                format!("no value published twice on {name}"),
                format!("{value} again at position {position}"),
            ));
        }
    }
    // Every acknowledged publish at its position; nothing no step sent.
    let by_position: BTreeMap<u64, f64> = sequence.iter().copied().collect();
    let mut acknowledged = 0;
    for entry in sent.iter().filter(|e| e.outcome == "succeeded") {
        acknowledged += 1;
        let position = entry.position.unwrap_or(0);
        if position > 0 && position < start && position <= route.published {
            continue; // purged after every recipient receipted it
        }
        if by_position.get(&position).copied() != entry.value {
            return Err(Failure::new(
                format!(
                    "acknowledged publish {} in the publisher's sequence",
                    serde_json::to_string(entry).expect("records serialize")
                ),
                format!("position {position} holds {:?}", by_position.get(&position)),
            ));
        }
    }
    let refused: BTreeSet<u64> = sent
        .iter()
        .filter(|e| e.outcome == "refused")
        .filter_map(|e| e.value.map(f64::to_bits))
        .collect();
    if let Some((position, value)) = sequence
        .iter()
        .find(|(_, v)| refused.contains(&v.to_bits()))
    {
        return Err(Failure::new(
            format!("no refused publish on {name} to be published"),
            format!("{value} at position {position}"),
        ));
    }
    let sent_values: BTreeSet<u64> = sent
        .iter()
        .filter_map(|e| e.value.map(f64::to_bits))
        .collect();
    if let Some((position, value)) = sequence
        .iter()
        .filter(|_| !sent.is_empty())
        .find(|(_, v)| !sent_values.contains(&v.to_bits()))
    {
        return Err(Failure::new(
            format!("only values the journey sent on {name}"),
            format!("{value} at position {position}, which no step published"),
        ));
    }
    for (destination, inbox) in route.inboxes {
        let expected: Vec<Held> = if route.class == "latest" {
            sequence.last().copied().into_iter().collect()
        } else {
            let own = from(destination);
            let positions: Vec<u64> = inbox.iter().map(|(p, _)| *p).collect();
            if !positions.iter().copied().eq(own..=route.published) {
                return Err(Failure::new(
                    format!(
                        "{destination}'s inbox of {name} to hold every position from {own} (its purge position) to {}",
                        route.published
                    ),
                    format!(
                        "{} values, positions {:?}…",
                        positions.len(),
                        &positions[..positions.len().min(8)]
                    ),
                ));
            }
            let overlap = own.max(start);
            let inbox: Vec<Held> = inbox
                .iter()
                .copied()
                .filter(|(p, _)| *p >= overlap)
                .collect();
            let expected: Vec<Held> = sequence
                .iter()
                .copied()
                .filter(|(p, _)| *p >= overlap)
                .collect();
            if inbox != expected {
                return Err(Failure::new(
                    format!(
                        "{destination}'s inbox of {name} to equal the publisher's sequence from position {overlap}"
                    ),
                    format!(
                        "{} values vs {}; first difference: {:?}",
                        inbox.len(),
                        expected.len(),
                        inbox.iter().zip(&expected).find(|(a, b)| a != b)
                    ),
                ));
            }
            continue;
        };
        if *inbox != expected {
            let first = inbox
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(inbox.len().min(expected.len()));
            return Err(Failure::new(
                format!(
                    "{destination}'s inbox of {name} to equal the publisher's sequence ({} values)",
                    expected.len()
                ),
                format!(
                    "{} values; first difference at index {first}: {:?} vs {:?}",
                    inbox.len(),
                    inbox.get(first),
                    expected.get(first)
                ),
            ));
        }
    }
    Ok(acknowledged)
}
