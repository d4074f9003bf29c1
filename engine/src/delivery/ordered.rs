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

use super::receipts::{Class, GENESIS, Receipt, ReceiptBody, ReceiptError, chain};

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

    /// Whether every recipient of `position`'s cohort has a receipt covering it.
    /// False for a position not yet published.
    pub fn complete(&self, position: u64) -> bool {
        if position == 0 || position > self.published {
            return false;
        }
        match span(&self.cohorts, self.published, position) {
            // Forgotten: all of its publications were complete.
            None => true,
            Some(c) => c.recipients.iter().all(|r| {
                self.destinations
                    .get(r)
                    .is_some_and(|d| d.receipted >= position)
            }),
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
        receipt.verify(key)?;
        self.receipt(
            &receipt.body.recipient,
            receipt.body.highest_position,
            &receipt.body.digest,
        )
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

/// What [`Inbox::accept`] did with a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "accepted", rename_all = "kebab-case")]
pub enum Accepted {
    /// Taken: persist the value and the inbox in one batch, then send the receipt.
    Stored {
        position: u64,
        #[serde(with = "hex::serde")]
        digest: [u8; 32],
    },
    /// Already held (or older than what is held): nothing stored; answer with the
    /// current receipt.
    Duplicate { held: u64 },
    /// Ordered: it does not follow what is held; nothing stored. `expected` is the
    /// earliest position it can take next (`held + 1`); answer with the current
    /// receipt so the publisher resumes after `held`.
    Gap { expected: u64 },
}

/// The recipient side of one route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbox {
    route: String,
    membership: String,
    recipient: String,
    class: Class,
    /// The highest position held (0: none).
    held: u64,
    /// The chain digest of what is held (Latest: of the one value held).
    #[serde(with = "hex::serde")]
    digest: [u8; 32],
}

impl Inbox {
    pub fn new(route: &str, membership: &str, recipient: &str, class: Class) -> Self {
        Inbox {
            route: route.to_owned(),
            membership: membership.to_owned(),
            recipient: recipient.to_owned(),
            class,
            held: 0,
            digest: GENESIS,
        }
    }

    pub fn route(&self) -> &str {
        &self.route
    }

    pub fn recipient(&self) -> &str {
        &self.recipient
    }

    pub fn class(&self) -> Class {
        self.class
    }

    pub fn held(&self) -> u64 {
        self.held
    }

    pub fn digest(&self) -> [u8; 32] {
        self.digest
    }

    /// The scalar value a delivery carries, refused unless it is 8 bytes of a finite
    /// `f64` — checked before [`Inbox::accept`] on scalar routes, so nothing
    /// non-finite is captured.
    pub fn value(&self, delivery: &Delivery) -> Result<f64, DeliveryError> {
        payload_value(&self.route, &delivery.payload)
    }

    /// Takes a delivery. Ordered: exactly the value following the held one (its
    /// `previous` is `held`); Latest: any value newer than the held one.
    pub fn accept(&mut self, delivery: &Delivery) -> Accepted {
        if delivery.position <= self.held {
            return Accepted::Duplicate { held: self.held };
        }
        let digest = match self.class {
            Class::Ordered => {
                if delivery.previous != self.held {
                    return Accepted::Gap {
                        expected: self.held + 1,
                    };
                }
                chain(&self.digest, delivery.position, &delivery.payload)
            }
            Class::Latest => chain(&GENESIS, delivery.position, &delivery.payload),
        };
        self.held = delivery.position;
        self.digest = digest;
        Accepted::Stored {
            position: delivery.position,
            digest,
        }
    }

    /// The current cumulative receipt, to sign with the recipient's key. Only ever
    /// sent for a persisted state.
    pub fn receipt(&self) -> ReceiptBody {
        ReceiptBody {
            route: self.route.clone(),
            membership: self.membership.clone(),
            recipient: self.recipient.clone(),
            class: self.class,
            highest_position: self.held,
            digest: self.digest,
        }
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(out.outstanding(), BTreeMap::from([("a".to_owned(), 4)]));
        deliver_all(&mut out, &mut a);
        assert!((1..=4).all(|p| out.complete(p)));
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
}
