//! The route state machines of value delivery (SPEC C4): the publisher's [`Outbox`] and
//! a recipient's [`Inbox`] for one route of class Ordered or Latest. Pure and
//! deterministic — no IO, no clock, no randomness; the `delivery` profile (issue 6)
//! persists them, moves [`Delivery`]s and signed receipts between hosts, and drives
//! these functions. Every method either changes nothing and returns an error, or
//! applies its whole effect.
//!
//! ## The model
//! - **Positions** `1, 2, 3…` are assigned by [`Outbox::publish`], one per publication,
//!   with no gap, per route.
//! - **Frozen cohorts.** Each publication names its recipients when it is published
//!   (the route's destinations that are not retired, chosen by the caller); that set
//!   never changes afterwards. A destination owes exactly the publications whose
//!   cohort names it: one added later owes nothing published before, and one that is
//!   retired (left out of later cohorts) **still owes every publication whose cohort
//!   includes it** — retiring releases nothing (SPEC §1.8: nothing is inferred from
//!   absence), and only its receipt does. Its capacity stays in use until then.
//! - **Each destination's own sequence.** Because cohorts may differ, a destination's
//!   positions can skip (joined later, retired and enrolled again). Each [`Delivery`]
//!   therefore carries `previous`, the destination's preceding owed position (0 for
//!   its first), and an Ordered inbox takes a value only when `previous` is the
//!   position it holds. With an unchanged cohort this is the rule "exactly `held + 1`".
//! - **Cumulative receipts.** A recipient answers with what it holds: the highest
//!   position and the digest chain of its held values (`receipts::chain`). A receipt
//!   releases only its recipient's obligations, those at or below its position, and
//!   only when the digest equals the publisher's chain for that recipient — proof
//!   that it holds the same values in the same order. A publication is complete when
//!   every recipient of its cohort has a receipt covering it.
//! - **Latest** conflates: a new value supersedes every older unreceipted value of
//!   each recipient of its cohort, and only the newest is ever sent. The recipient
//!   holds one value; its receipt names that value's position, and a receipt covering
//!   position `p` completes every publication up to `p` for that recipient. The
//!   outbox keeps, per destination, the last `latest_per_destination` owed values so a
//!   receipt for a value that was already on its way when it was superseded still
//!   verifies; a receipt for a value conflated beyond that is a no-op
//!   ([`ReceiptOutcome::Conflated`]) — the newest value is still owed and sent.
//!
//! ## Capacity
//! [`Capacity`] is configuration, counted separately for the two classes, so a flood
//! on a Latest route never consumes Ordered capacity and a full Ordered route never
//! blocks a Latest one. "Per publisher" counts this outbox: the publications its
//! publisher retains for the route. (A host-wide budget over several routes is the
//! sum of [`Outbox::retained`]; the profile may enforce it on top.)
//! - Ordered: `ordered_per_destination` bounds the unreceipted values one destination
//!   owes; `ordered_per_publisher` the publications retained (not yet complete). A
//!   publish that would exceed either is refused with "capacity exhausted": nothing is
//!   published, nothing dropped. Receipts release capacity.
//! - Latest: `latest_per_destination` bounds the owed values kept per destination
//!   (the newest and superseded ones awaiting a late receipt), `latest_per_publisher`
//!   the publications retained. Beyond either, the oldest superseded value is
//!   conflated away; a Latest publish never fails for capacity, and the newest value
//!   of a destination is never dropped (so at most one per destination is retained
//!   beyond `latest_per_publisher`).
//!
//! ## Persistence (what the IO layer writes atomically with what)
//! Both types are plain serde data; recovering them from JSON gives the same state.
//! - [`Outbox::publish`]: the whole changed outbox (the new record, cohort and
//!   counters) in one synced batch **before publish returns** its position. If the
//!   batch fails, drop this outbox and recover from the store: the position was never
//!   issued and the next publish takes it — no gap.
//! - [`Outbox::receipt`] / [`Outbox::apply`]: may be persisted lazily. A crash that
//!   loses an applied receipt only makes the outbox resend values the recipient
//!   already holds; it answers them as duplicates with its current receipt.
//! - [`Outbox::next_for`] changes nothing; sending is not recorded.
//! - [`Inbox::accept`] returning [`Accepted::Stored`]: the value (appended at its
//!   position for Ordered; replacing the held one for Latest) **and** the inbox's new
//!   state in one synced batch, **before** the receipt is signed and sent. If that
//!   batch fails, drop this inbox and recover from the store: the value was not
//!   accepted and will be sent again. A receipt is never sent for an unpersisted
//!   state: that is what makes "no loss" hold across a recipient's crash.
//! - [`Accepted::Duplicate`] and [`Accepted::Gap`]: nothing to write; answer with the
//!   current receipt ([`Inbox::receipt`], signed).
//!
//! Invariants (checked by the tests of this file):
//! - no position is skipped or issued twice, also after a refused publish;
//! - no publication's cohort changes after it is published, and no destination owes
//!   (or is sent) a publication whose cohort does not name it;
//! - no obligation is released except by its own recipient's receipt covering it
//!   with the publisher's digest — or, on a Latest route, by a newer value
//!   superseding it; no receipt releases another recipient's share;
//! - no Ordered value is dropped: a full Ordered capacity refuses the publish
//!   ("capacity exhausted");
//! - no inbox stores a value twice, out of order or after a gap (Ordered), or older
//!   than the one it holds (Latest);
//! - no non-finite number is published: it is refused before capture;
//! - no Ordered accounting counts Latest values, and no Latest accounting counts
//!   Ordered values;
//! - no refused call changes anything.

use std::collections::{BTreeMap, BTreeSet};

use ed25519_dalek::VerifyingKey;
use grid_spec::limits::{NAME_LENGTH_MAX, ROUTE_DESTINATIONS_MAX};
use serde::{Deserialize, Serialize};

use super::receipts::{Class, GENESIS, Receipt, ReceiptError, Verified, chain};

mod completion;
mod inbox;

pub use inbox::{Accepted, Inbox};

/// Default of [`Capacity::ordered_per_destination`]: unreceipted Ordered values one
/// destination may owe.
pub const ORDERED_PER_DESTINATION_DEFAULT: u64 = 16_384;

/// Default of [`Capacity::ordered_per_publisher`]: Ordered publications an outbox may
/// retain before every recipient of their cohort has receipted them.
pub const ORDERED_PER_PUBLISHER_DEFAULT: u64 = 65_536;

/// Default of [`Capacity::latest_per_destination`]: owed Latest values kept per
/// destination (the newest plus superseded ones awaiting a late receipt).
pub const LATEST_PER_DESTINATION_DEFAULT: u64 = 16;

/// Default of [`Capacity::latest_per_publisher`]: Latest publications an outbox
/// retains.
pub const LATEST_PER_PUBLISHER_DEFAULT: u64 = 4_096;

const _: () = assert!(ORDERED_PER_DESTINATION_DEFAULT <= ORDERED_PER_PUBLISHER_DEFAULT);
const _: () = assert!(LATEST_PER_DESTINATION_DEFAULT <= LATEST_PER_PUBLISHER_DEFAULT);
// Every destination of a route can keep its newest Latest value within the default.
const _: () = assert!(LATEST_PER_PUBLISHER_DEFAULT >= ROUTE_DESTINATIONS_MAX as u64);

/// Delivery capacity, separate for the two classes (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    pub ordered_per_destination: u64,
    pub ordered_per_publisher: u64,
    pub latest_per_destination: u64,
    pub latest_per_publisher: u64,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity {
            ordered_per_destination: ORDERED_PER_DESTINATION_DEFAULT,
            ordered_per_publisher: ORDERED_PER_PUBLISHER_DEFAULT,
            latest_per_destination: LATEST_PER_DESTINATION_DEFAULT,
            latest_per_publisher: LATEST_PER_PUBLISHER_DEFAULT,
        }
    }
}

impl Capacity {
    /// Every capacity must be at least 1.
    pub fn validate(&self, route: &str) -> Result<(), DeliveryError> {
        for (field, value) in [
            ("ordered_per_destination", self.ordered_per_destination),
            ("ordered_per_publisher", self.ordered_per_publisher),
            ("latest_per_destination", self.latest_per_destination),
            ("latest_per_publisher", self.latest_per_publisher),
        ] {
            if value == 0 {
                return Err(DeliveryError::InvalidCapacity {
                    route: route.to_owned(),
                    field,
                });
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    #[error("route `{route}`: value {value} is not a finite number; refused before capture")]
    NotFinite { route: String, value: String },
    #[error(
        "route `{route}`: a scalar value is 8 bytes (a finite big-endian f64); got {detail}; refused"
    )]
    MalformedValue { route: String, detail: String },
    #[error(
        "route `{route}`: Ordered capacity exhausted for destination `{recipient}`: it owes {owed} unreceipted values (Capacity::ordered_per_destination = {capacity}; default ORDERED_PER_DESTINATION_DEFAULT = {ORDERED_PER_DESTINATION_DEFAULT}); nothing was published, nothing dropped"
    )]
    DestinationCapacityExhausted {
        route: String,
        recipient: String,
        owed: u64,
        capacity: u64,
    },
    #[error(
        "route `{route}`: Ordered capacity exhausted for the publisher: it retains {retained} publications not yet receipted by their whole cohort (Capacity::ordered_per_publisher = {capacity}; default ORDERED_PER_PUBLISHER_DEFAULT = {ORDERED_PER_PUBLISHER_DEFAULT}); nothing was published, nothing dropped"
    )]
    PublisherCapacityExhausted {
        route: String,
        retained: u64,
        capacity: u64,
    },
    #[error("route `{route}`: capacity `{field}` is 0; every delivery capacity must be at least 1")]
    InvalidCapacity { route: String, field: &'static str },
    #[error(
        "route `{route}`: a cohort of {count} destinations exceeds ROUTE_DESTINATIONS_MAX ({ROUTE_DESTINATIONS_MAX}); nothing was published"
    )]
    TooManyDestinations { route: String, count: usize },
    #[error(
        "route `{route}`: destination `{recipient}` is named twice in one cohort; nothing was published"
    )]
    DuplicateDestination { route: String, recipient: String },
    #[error(
        "route `{route}`: destination name `{recipient}` must be 1 to NAME_LENGTH_MAX ({NAME_LENGTH_MAX}) bytes; nothing was published"
    )]
    InvalidDestination { route: String, recipient: String },
    #[error("route `{route}`: every position up to u64::MAX is used; nothing was published")]
    PositionsExhausted { route: String },
    #[error(
        "route `{route}`: `{recipient}` is in no cohort of this route; its receipt releases nothing"
    )]
    UnknownRecipient { route: String, recipient: String },
    #[error(
        "route `{route}`: receipt of `{recipient}` names position {highest}, beyond the last published position {published}; nothing released"
    )]
    BeyondPublished {
        route: String,
        recipient: String,
        highest: u64,
        published: u64,
    },
    #[error(
        "route `{route}`: receipt of `{recipient}` names position {position}, whose cohort does not include it; nothing released"
    )]
    NotOwed {
        route: String,
        recipient: String,
        position: u64,
    },
    #[error(
        "route `{route}`: receipt of `{recipient}` at position {position} carries digest {got}, but the publisher's chain for it is {expected}: the recipient holds another sequence; nothing released"
    )]
    DigestMismatch {
        route: String,
        recipient: String,
        position: u64,
        expected: String,
        got: String,
    },
    #[error(
        "route `{route}` (membership `{membership}`, {class}): the receipt of `{recipient}` is for route `{other_route}` (membership `{other_membership}`, {other_class}); nothing released"
    )]
    WrongRoute {
        route: String,
        membership: String,
        class: Class,
        recipient: String,
        other_route: String,
        other_membership: String,
        other_class: Class,
    },
    #[error(transparent)]
    Receipt(#[from] ReceiptError),
}

/// The payload of a scalar value: its 8 big-endian IEEE-754 bytes. A non-finite value
/// is refused.
pub fn value_payload(route: &str, value: f64) -> Result<[u8; 8], DeliveryError> {
    if !value.is_finite() {
        return Err(DeliveryError::NotFinite {
            route: route.to_owned(),
            value: value.to_string(),
        });
    }
    Ok(value.to_be_bytes())
}

/// The scalar value of a payload: exactly 8 bytes of a finite `f64`, refused otherwise
/// (a recipient checks it before accepting, so nothing non-finite is captured).
pub fn payload_value(route: &str, payload: &[u8]) -> Result<f64, DeliveryError> {
    let bytes = <[u8; 8]>::try_from(payload).map_err(|_| DeliveryError::MalformedValue {
        route: route.to_owned(),
        detail: format!("{} bytes", payload.len()),
    })?;
    let value = f64::from_be_bytes(bytes);
    if !value.is_finite() {
        return Err(DeliveryError::NotFinite {
            route: route.to_owned(),
            value: value.to_string(),
        });
    }
    Ok(value)
}

/// One value on its way to one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub position: u64,
    /// The recipient's preceding owed position (0: none). Ordered inboxes take the
    /// value only when this is the position they hold.
    pub previous: u64,
    #[serde(with = "hex::serde")]
    pub payload: Vec<u8>,
}

/// What a receipt did at the publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReceiptOutcome {
    /// Obligations were released.
    Advanced,
    /// The receipt covers nothing newer than an earlier one: nothing changed.
    Stale,
    /// Latest only: it names a superseded value whose digest is no longer kept;
    /// nothing changed, and the newest value is still owed.
    Conflated,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    pub recipient: String,
    pub outcome: ReceiptOutcome,
    /// The recipient's receipted position after the receipt.
    pub receipted: u64,
    /// How many values retained for the recipient it released (Latest: the kept
    /// values it covers; those conflated away earlier are not counted).
    pub released: u64,
}

/// The recipients of the publications from `first` up to the next cohort's `first`
/// (or the last published position).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cohort {
    first: u64,
    recipients: BTreeSet<String>,
}

/// A retained publication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    #[serde(with = "hex::serde")]
    payload: Vec<u8>,
    /// Latest: how many destinations keep it in their window (0 for Ordered).
    windows: u64,
}

/// The publisher's view of one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Destination {
    /// The highest position its receipts cover (0: none).
    receipted: u64,
    /// Its digest at `receipted`, as its receipt stated and the publisher's chain
    /// confirmed.
    #[serde(with = "hex::serde")]
    digest: [u8; 32],
    /// Ordered: the unreceipted values it owes.
    owed: u64,
    /// Latest: owed positions kept, oldest first; only the last is sent.
    window: Vec<u64>,
}

impl Destination {
    fn new() -> Self {
        Destination {
            receipted: 0,
            digest: GENESIS,
            owed: 0,
            window: Vec::new(),
        }
    }
}

fn span(cohorts: &[Cohort], published: u64, position: u64) -> Option<&Cohort> {
    if position == 0 || position > published {
        return None;
    }
    let after = cohorts.partition_point(|c| c.first <= position);
    after.checked_sub(1).map(|i| &cohorts[i])
}

fn owes(cohorts: &[Cohort], published: u64, position: u64, recipient: &str) -> bool {
    span(cohorts, published, position).is_some_and(|c| c.recipients.contains(recipient))
}

/// The publisher side of one route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbox {
    route: String,
    membership: String,
    class: Class,
    capacity: Capacity,
    /// The last position issued (0: none).
    published: u64,
    /// Frozen cohorts by the first position they apply to, ascending. Leading cohorts
    /// whose publications are all complete are forgotten; the last is always kept.
    cohorts: Vec<Cohort>,
    /// Retained publications: Ordered until complete, Latest while a window keeps it.
    records: BTreeMap<u64, Record>,
    destinations: BTreeMap<String, Destination>,
}

impl Outbox {
    pub fn new(
        route: &str,
        membership: &str,
        class: Class,
        capacity: Capacity,
    ) -> Result<Self, DeliveryError> {
        capacity.validate(route)?;
        Ok(Outbox {
            route: route.to_owned(),
            membership: membership.to_owned(),
            class,
            capacity,
            published: 0,
            cohorts: Vec::new(),
            records: BTreeMap::new(),
            destinations: BTreeMap::new(),
        })
    }

    pub fn route(&self) -> &str {
        &self.route
    }

    pub fn membership(&self) -> &str {
        &self.membership
    }

    pub fn class(&self) -> Class {
        self.class
    }

    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// Changes the configured capacity. Lowering it below what is in use refuses
    /// further Ordered publishes until receipts free enough; Latest conflates at its
    /// next publish.
    pub fn set_capacity(&mut self, capacity: Capacity) -> Result<(), DeliveryError> {
        capacity.validate(&self.route)?;
        self.capacity = capacity;
        Ok(())
    }

    /// The last position issued (0: none).
    pub fn published(&self) -> u64 {
        self.published
    }

    /// Publications retained (the per-publisher capacity in use for the route's class).
    pub fn retained(&self) -> u64 {
        self.records.len() as u64
    }

    /// The oldest publication still retained (Ordered: not yet receipted by its whole
    /// cohort; Latest: kept in a destination's window), if any. Every position below it
    /// is complete or conflated away: the publisher's journal of it is no longer owed.
    pub fn oldest_retained(&self) -> Option<u64> {
        self.records.keys().next().copied()
    }

    /// This outbox without the payloads it retains, for a checkpoint: they stay in the
    /// publisher's journal (no retained publication is purged) and
    /// [`Outbox::reinstate`] puts them back at open. What is left is bounded by the
    /// destinations and cohorts, not by how far a recipient lags.
    pub fn without_payloads(&self) -> Outbox {
        Outbox {
            route: self.route.clone(),
            membership: self.membership.clone(),
            class: self.class,
            capacity: self.capacity,
            published: self.published,
            cohorts: self.cohorts.clone(),
            records: BTreeMap::new(),
            destinations: self.destinations.clone(),
        }
    }

    /// Puts back the payload of `position` (at or below the last published) if this
    /// outbox retains it — Ordered: a recipient of its cohort has not receipted it;
    /// Latest: a destination's window keeps it — and says whether it did.
    pub fn reinstate(&mut self, position: u64, payload: Vec<u8>) -> bool {
        let Some(cohort) = span(&self.cohorts, self.published, position) else {
            return false;
        };
        let windows = match self.class {
            Class::Ordered => {
                if cohort.recipients.is_empty() || self.complete(position) {
                    return false;
                }
                0
            }
            Class::Latest => {
                let windows = self
                    .destinations
                    .values()
                    .filter(|d| d.window.contains(&position))
                    .count() as u64;
                if windows == 0 {
                    return false;
                }
                windows
            }
        };
        self.records.insert(position, Record { payload, windows });
        true
    }

    /// The first position in `from..=to` this outbox retains by its state (Ordered:
    /// owed and not complete; Latest: in a window) whose payload it does not hold —
    /// after [`Outbox::reinstate`], a publication missing from the journal.
    pub fn first_missing(&self, from: u64, to: u64) -> Option<u64> {
        let to = to.min(self.published);
        match self.class {
            Class::Ordered => (from.max(1)..=to).find(|&p| {
                !self.records.contains_key(&p)
                    && span(&self.cohorts, self.published, p)
                        .is_some_and(|c| !c.recipients.is_empty())
                    && !self.complete(p)
            }),
            Class::Latest => self
                .destinations
                .values()
                .flat_map(|d| d.window.iter().copied())
                .filter(|p| (from..=to).contains(p) && !self.records.contains_key(p))
                .min(),
        }
    }

    /// The frozen cohort of `position`, while it is not forgotten (every publication
    /// of a forgotten cohort is complete).
    pub fn cohort(&self, position: u64) -> Option<&BTreeSet<String>> {
        span(&self.cohorts, self.published, position).map(|c| &c.recipients)
    }

    /// The highest position `recipient`'s receipts cover, if it was ever in a cohort.
    pub fn receipted(&self, recipient: &str) -> Option<u64> {
        self.destinations.get(recipient).map(|d| d.receipted)
    }

    /// Values retained for each destination that has any, awaiting its receipt (the
    /// per-destination capacity in use): Ordered, the values it owes; Latest, its
    /// newest value plus superseded ones kept for a late receipt.
    pub fn outstanding(&self) -> BTreeMap<String, u64> {
        self.destinations
            .iter()
            .map(|(name, d)| (name.clone(), self.in_use(d)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    fn in_use(&self, d: &Destination) -> u64 {
        match self.class {
            Class::Ordered => d.owed,
            Class::Latest => d.window.len() as u64,
        }
    }

    /// Publishes a scalar value: refused if it is not finite, before anything is
    /// captured.
    pub fn publish_value<S: AsRef<str>>(
        &mut self,
        value: f64,
        cohort: &[S],
    ) -> Result<u64, DeliveryError> {
        let payload = value_payload(&self.route, value)?;
        self.publish(payload.to_vec(), cohort)
    }

    /// Publishes `payload` to `cohort`, frozen for this publication, and returns its
    /// position. Refused, changing nothing, when the cohort is invalid or (Ordered) a
    /// capacity is exhausted.
    pub fn publish<S: AsRef<str>>(
        &mut self,
        payload: Vec<u8>,
        cohort: &[S],
    ) -> Result<u64, DeliveryError> {
        let (position, recipients) = self.admit(cohort)?;
        self.accept(position, payload, recipients);
        Ok(position)
    }

    /// Whether a publication to `cohort` would be accepted now (its position and
    /// recipients), changing nothing: the checks of [`Outbox::publish`].
    pub fn admit<S: AsRef<str>>(
        &self,
        cohort: &[S],
    ) -> Result<(u64, BTreeSet<String>), DeliveryError> {
        let route = || self.route.clone();
        if cohort.len() > ROUTE_DESTINATIONS_MAX {
            return Err(DeliveryError::TooManyDestinations {
                route: route(),
                count: cohort.len(),
            });
        }
        let mut recipients = BTreeSet::new();
        for name in cohort {
            let name = name.as_ref();
            if name.is_empty() || name.len() > NAME_LENGTH_MAX {
                return Err(DeliveryError::InvalidDestination {
                    route: route(),
                    recipient: name.to_owned(),
                });
            }
            if !recipients.insert(name.to_owned()) {
                return Err(DeliveryError::DuplicateDestination {
                    route: route(),
                    recipient: name.to_owned(),
                });
            }
        }
        let Some(position) = self.published.checked_add(1) else {
            return Err(DeliveryError::PositionsExhausted { route: route() });
        };
        if self.class == Class::Ordered && !recipients.is_empty() {
            let retained = self.retained();
            if retained >= self.capacity.ordered_per_publisher {
                return Err(DeliveryError::PublisherCapacityExhausted {
                    route: route(),
                    retained,
                    capacity: self.capacity.ordered_per_publisher,
                });
            }
            for name in &recipients {
                let owed = self.destinations.get(name).map_or(0, |d| d.owed);
                if owed >= self.capacity.ordered_per_destination {
                    return Err(DeliveryError::DestinationCapacityExhausted {
                        route: route(),
                        recipient: name.clone(),
                        owed,
                        capacity: self.capacity.ordered_per_destination,
                    });
                }
            }
        }

        Ok((position, recipients))
    }

    fn accept(&mut self, position: u64, payload: Vec<u8>, recipients: BTreeSet<String>) {
        self.published = position;
        if self
            .cohorts
            .last()
            .is_none_or(|c| c.recipients != recipients)
        {
            self.cohorts.push(Cohort {
                first: position,
                recipients: recipients.clone(),
            });
        }
        if !recipients.is_empty() {
            self.records.insert(
                position,
                Record {
                    payload,
                    windows: 0,
                },
            );
        }
        for name in &recipients {
            let d = self
                .destinations
                .entry(name.clone())
                .or_insert_with(Destination::new);
            match self.class {
                Class::Ordered => d.owed += 1,
                Class::Latest => {
                    d.window.push(position);
                    let mut dropped = Vec::new();
                    while d.window.len() as u64 > self.capacity.latest_per_destination {
                        dropped.push(d.window.remove(0));
                    }
                    if let Some(r) = self.records.get_mut(&position) {
                        r.windows += 1;
                    }
                    for old in dropped {
                        self.unref(old);
                    }
                }
            }
        }
        if self.class == Class::Latest {
            self.trim_latest();
        }
        self.forget_cohorts();
    }

    /// Latest: one window fewer keeps `position`; the record goes with the last.
    fn unref(&mut self, position: u64) {
        if let Some(r) = self.records.get_mut(&position) {
            r.windows = r.windows.saturating_sub(1);
            if r.windows == 0 {
                self.records.remove(&position);
            }
        }
    }

    /// Latest: conflates the oldest superseded publications until the retained ones
    /// fit `latest_per_publisher`; a destination's newest value is never dropped.
    fn trim_latest(&mut self) {
        while self.retained() > self.capacity.latest_per_publisher {
            let victim = self.records.keys().copied().find(|&p| {
                span(&self.cohorts, self.published, p).is_some_and(|c| {
                    c.recipients.iter().all(|r| {
                        self.destinations
                            .get(r)
                            .is_none_or(|d| d.window.last() != Some(&p))
                    })
                })
            });
            let Some(p) = victim else { break };
            if let Some(c) = span(&self.cohorts, self.published, p) {
                for r in &c.recipients {
                    if let Some(d) = self.destinations.get_mut(r) {
                        d.window.retain(|&q| q != p);
                    }
                }
            }
            self.records.remove(&p);
        }
    }

    /// Forgets leading cohorts whose publications are all complete (the last cohort
    /// is kept: the next publication compares with it).
    fn forget_cohorts(&mut self) {
        while self.cohorts.len() > 1 {
            let last_position = self.cohorts[1].first - 1;
            let done = self.cohorts[0].recipients.iter().all(|r| {
                self.destinations
                    .get(r)
                    .is_some_and(|d| d.receipted >= last_position)
            });
            if !done {
                break;
            }
            self.cohorts.remove(0);
        }
    }

    /// What to send `recipient` next, at most `max` values, in order: Ordered, every
    /// value after its receipted position that it owes; Latest, only its newest owed
    /// value. Changes nothing.
    pub fn next_for(&self, recipient: &str, max: usize) -> Vec<Delivery> {
        self.next_through(recipient, max, u64::MAX)
    }

    /// [`Outbox::next_for`] among positions up to `through` only (those the
    /// publisher's store holds durably): Ordered, the owed values up to it; Latest,
    /// the newest owed value up to it — newer ones may still be on their way to the
    /// disk, and waiting for them would starve a busy Latest route.
    pub fn next_through(&self, recipient: &str, max: usize, through: u64) -> Vec<Delivery> {
        let Some(d) = self.destinations.get(recipient) else {
            return Vec::new();
        };
        if max == 0 {
            return Vec::new();
        }
        match self.class {
            Class::Ordered => {
                let mut previous = d.receipted;
                let mut out = Vec::new();
                if through <= d.receipted {
                    return out;
                }
                for (&position, record) in self.records.range(d.receipted + 1..=through) {
                    if out.len() == max {
                        break;
                    }
                    if owes(&self.cohorts, self.published, position, recipient) {
                        out.push(Delivery {
                            position,
                            previous,
                            payload: record.payload.clone(),
                        });
                        previous = position;
                    }
                }
                out
            }
            Class::Latest => d
                .window
                .iter()
                .rev()
                .find(|&&p| p <= through)
                .and_then(|p| self.records.get(p).map(|r| (*p, r)))
                .map(|(position, record)| Delivery {
                    position,
                    previous: d.receipted,
                    payload: record.payload.clone(),
                })
                .into_iter()
                .collect(),
        }
    }

    /// Applies a signed receipt: it must be for this route, membership and class and
    /// verify with `key` (the recipient's public key of `receipt.generation`), then it
    /// acts as [`Outbox::receipt`].
    pub fn apply(
        &mut self,
        receipt: &Receipt,
        key: &VerifyingKey,
    ) -> Result<Released, DeliveryError> {
        // The route first: a receipt of another route is refused before its
        // signature is verified.
        self.check_route(receipt)?;
        self.record(receipt.verified(key)?.receipt())
    }

    /// As [`Outbox::apply`], for a receipt verified beforehand (e.g. before a lock
    /// around this outbox was taken).
    pub fn apply_verified(&mut self, verified: Verified<'_>) -> Result<Released, DeliveryError> {
        let receipt = verified.receipt();
        self.check_route(receipt)?;
        self.record(receipt)
    }

    /// Records a receipt whose route and signature were checked.
    fn record(&mut self, receipt: &Receipt) -> Result<Released, DeliveryError> {
        self.receipt(
            &receipt.body.recipient,
            receipt.body.highest_position,
            &receipt.body.digest,
        )
    }

    /// Refuses a receipt of another route, membership or class.
    fn check_route(&self, receipt: &Receipt) -> Result<(), DeliveryError> {
        if receipt.body.route != self.route
            || receipt.body.membership != self.membership
            || receipt.body.class != self.class
        {
            return Err(DeliveryError::WrongRoute {
                route: self.route.clone(),
                membership: self.membership.clone(),
                class: self.class,
                recipient: receipt.body.recipient.clone(),
                other_route: receipt.body.route.clone(),
                other_membership: receipt.body.membership.clone(),
                other_class: receipt.body.class,
            });
        }
        Ok(())
    }

    /// A cumulative receipt of `recipient`: it holds what it owes up to `highest`,
    /// with chain digest `digest`. Releases only that recipient's obligations at or
    /// below `highest`, when the digest is the publisher's chain at that position. An
    /// older receipt changes nothing.
    pub fn receipt(
        &mut self,
        recipient: &str,
        highest: u64,
        digest: &[u8; 32],
    ) -> Result<Released, DeliveryError> {
        self.receipt_with(recipient, highest, digest, None)
    }

    /// Latest: a receipt for a value conflated out of the recipient's window, checked
    /// against `payload` — the value the publisher published at `highest`, from its
    /// own journal. With it, the receipt releases (as for a kept value) every owed
    /// position up to `highest` instead of being [`ReceiptOutcome::Conflated`]. The
    /// same as [`Outbox::receipt`] otherwise.
    pub fn receipt_of_conflated(
        &mut self,
        recipient: &str,
        highest: u64,
        digest: &[u8; 32],
        payload: &[u8],
    ) -> Result<Released, DeliveryError> {
        self.receipt_with(recipient, highest, digest, Some(payload))
    }

    fn receipt_with(
        &mut self,
        recipient: &str,
        highest: u64,
        digest: &[u8; 32],
        published: Option<&[u8]>,
    ) -> Result<Released, DeliveryError> {
        let Some(d) = self.destinations.get(recipient) else {
            return Err(DeliveryError::UnknownRecipient {
                route: self.route.clone(),
                recipient: recipient.to_owned(),
            });
        };
        if highest > self.published {
            return Err(DeliveryError::BeyondPublished {
                route: self.route.clone(),
                recipient: recipient.to_owned(),
                highest,
                published: self.published,
            });
        }
        let mismatch = |expected: &[u8; 32]| DeliveryError::DigestMismatch {
            route: self.route.clone(),
            recipient: recipient.to_owned(),
            position: highest,
            expected: hex::encode(expected),
            got: hex::encode(digest),
        };
        let unchanged = |outcome| Released {
            recipient: recipient.to_owned(),
            outcome,
            receipted: d.receipted,
            released: 0,
        };
        if highest < d.receipted {
            return Ok(unchanged(ReceiptOutcome::Stale));
        }
        if highest == d.receipted {
            return if *digest == d.digest {
                Ok(unchanged(ReceiptOutcome::Stale))
            } else {
                Err(mismatch(&d.digest))
            };
        }
        if !owes(&self.cohorts, self.published, highest, recipient) {
            return Err(DeliveryError::NotOwed {
                route: self.route.clone(),
                recipient: recipient.to_owned(),
                position: highest,
            });
        }
        match self.class {
            Class::Ordered => {
                // Every owed position in (receipted, highest] is retained: its
                // recipient has not receipted it, so it is not complete.
                let mut expected = d.digest;
                let mut released = Vec::new();
                for (&position, record) in self.records.range(d.receipted + 1..=highest) {
                    if owes(&self.cohorts, self.published, position, recipient) {
                        expected = chain(&expected, position, &record.payload);
                        released.push(position);
                    }
                }
                if expected != *digest {
                    return Err(mismatch(&expected));
                }
                let d = self.destinations.get_mut(recipient).expect("checked above");
                d.receipted = highest;
                d.digest = expected;
                d.owed = d.owed.saturating_sub(released.len() as u64);
                for &position in &released {
                    if self.complete(position) {
                        self.records.remove(&position);
                    }
                }
                self.forget_cohorts();
                Ok(Released {
                    recipient: recipient.to_owned(),
                    outcome: ReceiptOutcome::Advanced,
                    receipted: highest,
                    released: released.len() as u64,
                })
            }
            Class::Latest => {
                let kept = if d.window.contains(&highest) {
                    self.records.get(&highest).map(|r| r.payload.as_slice())
                } else {
                    None
                };
                // Conflated away: only the publisher's own record of the value can
                // check the receipt's digest.
                let Some(payload) = kept.or(published) else {
                    return Ok(unchanged(ReceiptOutcome::Conflated));
                };
                let expected = chain(&GENESIS, highest, payload);
                if expected != *digest {
                    return Err(mismatch(&expected));
                }
                let d = self.destinations.get_mut(recipient).expect("checked above");
                let covered: Vec<u64> =
                    d.window.iter().copied().filter(|&p| p <= highest).collect();
                d.window.retain(|&p| p > highest);
                d.receipted = highest;
                d.digest = expected;
                for &p in &covered {
                    self.unref(p);
                }
                self.forget_cohorts();
                Ok(Released {
                    recipient: recipient.to_owned(),
                    outcome: ReceiptOutcome::Advanced,
                    receipted: highest,
                    released: covered.len() as u64,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests;
