//! The `delivery` profile's wire types (an API boundary: fields are only ever added):
//! a route's definition as reconcile installs it, the control calls of `gridctl
//! publish` and `gridctl inspect routes|inbox|receipts`, and the push between hosts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::receipts::{Class, Receipt};
use crate::custody::Manifest;
use crate::custody::seal::Sealed;

/// A route as installed at its publisher (every destination) and at each destination
/// (itself alone); `Request::InstallRoute`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteInstall {
    pub name: String,
    pub membership: String,
    pub class: Class,
    #[serde(default)]
    pub encrypted: bool,
    pub publisher: String,
    pub destinations: Vec<RouteDestination>,
    /// A mapping (issue 34, docs/grdx.md): the route carries whole GRDX matrices of
    /// this geometry, never a scalar; absent on a scalar route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<Geometry>,
}

/// The geometry of the matrices a mapping carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub rows: u32,
    pub cols: u32,
}

/// One destination of a route, with the public keys its receipts and sealed values
/// use (from its custody manifest: public halves only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteDestination {
    pub host: String,
    /// Its transport listen address, `IP:PORT`.
    pub address: String,
    /// Retired: in no new cohort; it still owes (and is sent) what earlier cohorts
    /// name, until its receipts cover them.
    #[serde(default)]
    pub retired: bool,
    pub keys: Manifest,
}

impl RouteInstall {
    pub fn destination(&self, host: &str) -> Option<&RouteDestination> {
        self.destinations.iter().find(|d| d.host == host)
    }

    /// The cohort of a new publication: every destination not retired.
    pub fn cohort(&self) -> Vec<&str> {
        self.destinations
            .iter()
            .filter(|d| !d.retired)
            .map(|d| d.host.as_str())
            .collect()
    }

    /// The definition a destination holds: the route with that destination alone
    /// (it needs no other destination's keys).
    pub fn for_destination(&self, host: &str) -> RouteInstall {
        RouteInstall {
            name: self.name.clone(),
            membership: self.membership.clone(),
            class: self.class,
            encrypted: self.encrypted,
            publisher: self.publisher.clone(),
            destinations: self
                .destinations
                .iter()
                .filter(|d| d.host == host)
                .cloned()
                .collect(),
            matrix: self.matrix,
        }
    }

    /// The claim in the membership's authority that is the publisher's right to
    /// publish: `route:NAME`, or `mapping:NAME` on a mapping.
    pub fn claim(&self) -> String {
        match self.matrix {
            None => publishing_claim(&self.name),
            Some(_) => mapping_claim(&self.name),
        }
    }

    /// `route` or `mapping`, as messages name it.
    pub fn kind(&self) -> &'static str {
        match self.matrix {
            None => "route",
            Some(_) => "mapping",
        }
    }
}

/// The claim that is the right to publish on route `route`.
pub fn publishing_claim(route: &str) -> String {
    format!("route:{route}")
}

/// The claim that is the right to publish on mapping `mapping`.
pub fn mapping_claim(mapping: &str) -> String {
    format!("mapping:{mapping}")
}

/// A control call of the `delivery` profile (`Call::Delivery`), handled outside the
/// host's lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "delivery", rename_all = "kebab-case")]
pub enum DeliveryCall {
    /// Publish one value at this host, the route's publisher.
    Publish { route: String, value: f64 },
    /// Publish one whole matrix (GRDX bytes, hex) at this host, the mapping's
    /// publisher.
    /// Under operation id `op` (when given) it is published once: the same id answers
    /// the same position again, and refuses another matrix.
    PublishMatrix {
        route: String,
        grdx: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        op: Option<String>,
    },
    /// The matrices this host holds of mapping `route`: staged at a destination,
    /// published at the publisher (position, geometry, digest). Changes nothing.
    Staged { route: String },
    /// The routes this host takes part in. Changes nothing.
    Routes,
    /// What this host holds durably of `route` from position `from`: a destination its
    /// inbox, the publisher its published sequence. Changes nothing.
    Held {
        route: String,
        #[serde(default)]
        from: u64,
    },
    /// The newest receipt of every destination of `route`, at its publisher. Changes
    /// nothing.
    Receipts { route: String },
    /// At the publisher of `route`: waits until every destination of `position`'s
    /// cohort has a receipt covering it, or `wait_ms` passes (at most
    /// `RECEIPTED_WAIT_MS_MAX`; 0 answers at once), then answers how far receipts
    /// cover. Changes nothing.
    Receipted {
        route: String,
        position: u64,
        #[serde(default)]
        wait_ms: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "delivery", rename_all = "kebab-case")]
pub enum DeliveryReply {
    Published {
        route: String,
        position: u64,
    },
    Routes {
        host: String,
        routes: Vec<RouteView>,
    },
    Held {
        route: String,
        /// `publisher` or `destination`.
        role: String,
        values: Vec<HeldValue>,
        /// The position to ask `from` next when the reply was cut at
        /// `HELD_REPLY_MAX` values.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<u64>,
        /// The lowest position the journal still holds; below it, purged.
        #[serde(default = "first_position")]
        held_from: u64,
    },
    Receipts {
        route: String,
        /// The last position published.
        published: u64,
        receipts: Vec<Receipt>,
        /// Values still owed per destination (no receipt covers them yet).
        outstanding: BTreeMap<String, u64>,
    },
    Receipted {
        route: String,
        position: u64,
        /// The last position published (durable) at the publisher.
        published: u64,
        /// Whether every destination of the position's cohort has a receipt covering
        /// it (false for a position not yet published).
        complete: bool,
        /// The highest position every destination of that cohort has a receipt
        /// covering (cumulative receipts: every position up to it is complete for
        /// them).
        covered: u64,
        /// The destinations of the cohort (0: a cohort forgotten, all complete).
        cohort: u64,
        /// How many of them have no receipt covering the position yet.
        awaiting: u64,
        /// The first of those by name (at most `RECEIPTED_MISSING_MAX`).
        missing: Vec<String>,
    },
    Staged {
        route: String,
        /// `publisher` or `destination`.
        role: String,
        versions: Vec<StagedMatrix>,
        /// The lowest position this host's journal of the mapping still holds.
        held_from: u64,
        /// A destination: the newest matrix it refused (nothing of it staged).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<RefusedMatrix>,
    },
    /// Nothing was published or read: the reason says why (capacity exhausted, fenced,
    /// not finite, unknown route, …).
    Refused {
        reason: String,
    },
}

/// A matrix a destination refused: its position and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedMatrix {
    pub position: u64,
    pub reason: String,
}

/// One matrix held of a mapping: its position (the version), geometry and the SHA-256
/// of its GRDX bytes (hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedMatrix {
    pub position: u64,
    pub rows: u32,
    pub cols: u32,
    pub sha256: String,
}

/// One route as a host sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteView {
    pub route: RouteInstall,
    /// `publisher` or `destination`.
    pub role: String,
    /// Publisher: the last position published (durably).
    #[serde(default)]
    pub published: u64,
    /// Publisher: the highest position each destination's receipts cover.
    #[serde(default)]
    pub receipted: BTreeMap<String, u64>,
    /// Publisher: values owed per destination.
    #[serde(default)]
    pub outstanding: BTreeMap<String, u64>,
    /// Destination: the highest position held.
    #[serde(default)]
    pub held: u64,
    /// The lowest position this host's journal of the route still holds (publisher:
    /// its published sequence; destination: its inbox); below it, purged
    /// (docs/storage.md, "Delivery"). 1: nothing purged.
    #[serde(default = "first_position")]
    pub held_from: u64,
    /// Publisher of an Ordered route: the Ordered pool of the route's membership on this
    /// host (`capacity membership=M`, else the host's `capacity`): what its routes
    /// retain together, and its `ordered-per-host`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordered_pool: Option<OrderedPool>,
    /// Publisher: publications of a model serving several memberships journaled to
    /// wait for this route's capacity, not yet given a position (docs/memberships.md).
    #[serde(default)]
    pub deferred: u64,
    /// Publisher: the key generations each destination's values are sealed to and its
    /// receipts verified with now — the installed keys, or the rotated ones its
    /// membership published since (docs/custody.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub destination_keys: BTreeMap<String, KeyGenerations>,
}

/// The generations of a host's signing and mail keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGenerations {
    pub signing: u32,
    pub mail: u32,
}

/// A membership's Ordered pool on a publishing host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderedPool {
    pub membership: String,
    /// Ordered publications its routes retain, not yet receipted by their whole cohort.
    pub retained: u64,
    /// Its `ordered-per-host`.
    pub capacity: u64,
}

fn first_position() -> u64 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldValue {
    pub position: u64,
    pub value: f64,
}

/// `POST /delivery/M/push`: values for the recipient, in position order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Push {
    pub route: String,
    pub deliveries: Vec<WireDelivery>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireDelivery {
    pub position: u64,
    /// The recipient's preceding owed position (0: none).
    pub previous: u64,
    pub payload: WirePayload,
}

/// A value as it travels: 8 bytes of a finite `f64` (hex), or sealed to the
/// recipient's mail key on an encrypted route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WirePayload {
    Plain(String),
    Sealed(Sealed),
}

/// The recipient's answer to a push: its current signed cumulative receipt, made only
/// for a durable state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum PushReply {
    Receipt { receipt: Receipt },
    Refused { reason: String },
}
