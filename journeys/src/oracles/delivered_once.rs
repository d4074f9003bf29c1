//! **Delivered once, in order**: once every destination's receipt covers the
//! publisher's last position, the publisher's sequence of the route is gap-free from
//! position 1 and holds exactly the positions it published; each destination's inbox
//! equals that sequence exactly (a `latest` route: its newest value). When the journey's
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
}

/// Checks the route; returns the acknowledged publishes it found in place.
pub fn check(route: &Route<'_>) -> Result<usize, Failure> {
    let name = route.name;
    let sequence = route.sequence;
    // Gap-free from 1, each position once.
    for (i, (position, _)) in sequence.iter().enumerate() {
        if *position != i as u64 + 1 {
            return Err(Failure::new(
                format!("the publisher's sequence of {name} to be gap-free from 1"),
                format!("position {position} at index {i}"),
            ));
        }
    }
    if sequence.len() as u64 != route.published {
        return Err(Failure::new(
            format!("{} publications held by the publisher", route.published),
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
    let expected: Vec<Held> = if route.class == "latest" {
        sequence.last().copied().into_iter().collect()
    } else {
        sequence.to_vec()
    };
    for (destination, inbox) in route.inboxes {
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
