//! The `delivery` profile: routes at their publisher and destinations, persisted in the
//! host's store (keyspaces `delivery-*`, same fjall database and journal as the host's
//! operations), values pushed over mutual TLS, signed receipts back.
//!
//! ```text
//! delivery-routes       NAME                     RouteInstall (JSON)
//! delivery-published    NAME \0 POSITION(be64)   epoch(be64) ++ 8 value bytes   (publisher)
//! delivery-cohorts      NAME \0 FIRST(be64)      recipients (JSON)              (publisher)
//! delivery-receipts     NAME \0 RECIPIENT        newest applied Receipt (JSON)  (publisher)
//! delivery-inbox        NAME \0 POSITION(be64)   8 value bytes, or Sealed JSON  (destination)
//! delivery-inbox-state  NAME                     Inbox (JSON)                   (destination)
//! ```
//!
//! Durability (the rules of `ordered.rs`): a publication, its cohort and epoch are
//! committed and fsynced (group commit: one fsync for every publish waiting at that
//! moment) **before** `publish` returns its position and before any push may carry it
//! (`durable` watermark). A recipient commits and fsyncs what it stored before it
//! signs the receipt that says so. Receipts at the publisher are recorded lazily:
//! losing one only resends values the recipient answers as duplicates.
//!
//! The publisher's outbox is recovered by replaying its published sequence with its
//! cohorts, then its recorded receipts. The publisher keeps the whole sequence it
//! published (the record of what it owes and what `inspect inbox` compares with);
//! values are plaintext in its own store, sealed on the wire and in every recipient's
//! inbox on encrypted routes.

use crate::limits::{HELD_REPLY_MAX, PUSH_BACKOFF_MAX, PUSH_DELIVERIES_MAX, PUSH_TIMEOUT};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch};
use tokio::sync::Notify;

use super::api::{
    DeliveryCall, DeliveryReply, HeldValue, Push, PushReply, RouteInstall, RouteView, WireDelivery,
    WirePayload,
};
use super::ordered::{Accepted, Capacity, Delivery as Value, Inbox, Outbox, ReceiptOutcome};
use super::receipts::{Class, Receipt};
use crate::authority::claims::ClaimState;
use crate::authority::service::{Authorities, AuthorityCall, AuthorityReply};
use crate::custody::seal::{Sealed, open_value, seal_value};
use crate::transport::{PeerClient, PeerError};

use crate::custody::Custody;
use crate::store::{Action, Failpoint, Failpoints, Syncer, fatal};

/// Default of the host-wide Ordered capacity: publications not yet receipted by their
/// whole cohort, over every Ordered route the host publishes.
pub const ORDERED_PER_HOST_DEFAULT: u64 = 262_144;

const ROUTES: &str = "delivery-routes";
const PUBLISHED: &str = "delivery-published";
const COHORTS: &str = "delivery-cohorts";
const RECEIPTS: &str = "delivery-receipts";
const INBOX: &str = "delivery-inbox";
const INBOX_STATE: &str = "delivery-inbox-state";

fn key(route: &str, position: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(route.len() + 9);
    k.extend_from_slice(route.as_bytes());
    k.push(0);
    k.extend_from_slice(&position.to_be_bytes());
    k
}

fn prefix(route: &str) -> Vec<u8> {
    let mut k = route.as_bytes().to_vec();
    k.push(0);
    k
}

fn named_key(route: &str, name: &str) -> Vec<u8> {
    let mut k = prefix(route);
    k.extend_from_slice(name.as_bytes());
    k
}

fn position_of(key: &[u8], route: &str) -> Option<u64> {
    key.get(route.len() + 1..)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_be_bytes)
}

struct Keyspaces {
    routes: Keyspace,
    published: Keyspace,
    cohorts: Keyspace,
    receipts: Keyspace,
    inbox: Keyspace,
    inbox_state: Keyspace,
}

/// The publishing right, checked against the authority: the newest check that began
/// after a publish arrived and found the claim held by this host covers it.
#[derive(Default)]
struct Gate {
    started: AtomicU64,
    /// (sequence number of the newest passing check, the epoch it saw)
    passed: tokio::sync::Mutex<(u64, u64)>,
}

struct Publishing {
    outbox: Outbox,
    /// Positions issued whose records are not fsynced yet; pushes carry nothing from
    /// the first of them on.
    pending: std::collections::BTreeSet<u64>,
    wake: Arc<Notify>,
    gate: Arc<Gate>,
}

enum Role {
    Publisher(Box<Publishing>),
    Destination(Inbox),
}

struct RouteState {
    install: RouteInstall,
    role: Role,
}

/// What installing a route does in memory once its record is durable.
pub type InstallEffect = Box<dyn FnOnce() + Send>;

/// The delivery profile of one host.
pub struct Delivery {
    host: String,
    dir: PathBuf,
    database: Database,
    ks: Keyspaces,
    custody: Custody,
    failpoints: Failpoints,
    routes: Mutex<BTreeMap<String, RouteState>>,
    syncer: Syncer,
    /// Set by [`Delivery::start`].
    runtime: Mutex<Option<(tokio::runtime::Handle, Authorities)>>,
    /// Counts pushes that stored values; signalled to the host's feeder.
    stored: (Mutex<u64>, std::sync::Condvar),
    /// Each route's capacity (host configuration over the defaults).
    capacity: Capacity,
    /// Ordered publications all this host's routes may retain together.
    ordered_per_host: u64,
}

fn capacity_for_replay(configured: Capacity) -> Capacity {
    // Replaying the whole sequence before its receipts would exceed the Ordered
    // capacity the publications were admitted under; it is restored after.
    Capacity {
        ordered_per_destination: u64::MAX,
        ordered_per_publisher: u64::MAX,
        ..configured
    }
}

/// The publisher side of `route` among `routes`, if this host publishes it.
fn publisher<'a>(
    routes: &'a BTreeMap<String, RouteState>,
    route: &str,
) -> Option<(&'a RouteInstall, &'a Publishing)> {
    match routes.get(route) {
        Some(RouteState {
            install,
            role: Role::Publisher(p),
        }) => Some((install, p)),
        _ => None,
    }
}

impl Publishing {
    /// The highest position below which every publication is durable (fsynced).
    fn durable(&self) -> u64 {
        self.pending
            .first()
            .map_or(self.outbox.published(), |first| first - 1)
    }
}

impl Delivery {
    /// Opens the delivery keyspaces of the host's database and recovers every route.
    pub fn open(
        database: &Database,
        dir: &Path,
        host: &str,
        custody: Custody,
        failpoints: Failpoints,
        capacity: crate::host::config::CapacityConfig,
    ) -> Result<Arc<Delivery>, String> {
        let keyspace = |name: &str| {
            database
                .keyspace(name, KeyspaceCreateOptions::default)
                .map_err(|e| format!("delivery keyspace {name}: {e}"))
        };
        let ks = Keyspaces {
            routes: keyspace(ROUTES)?,
            published: keyspace(PUBLISHED)?,
            cohorts: keyspace(COHORTS)?,
            receipts: keyspace(RECEIPTS)?,
            inbox: keyspace(INBOX)?,
            inbox_state: keyspace(INBOX_STATE)?,
        };
        let syncer = Syncer::start(database.clone(), "delivery-fsync")
            .map_err(|e| format!("cannot start the delivery fsync thread: {e}"))?;
        let delivery = Delivery {
            host: host.to_owned(),
            dir: dir.to_owned(),
            database: database.clone(),
            ks,
            custody,
            failpoints,
            routes: Mutex::new(BTreeMap::new()),
            syncer,
            runtime: Mutex::new(None),
            stored: (Mutex::new(0), std::sync::Condvar::new()),
            capacity: Capacity {
                ordered_per_destination: capacity
                    .ordered_per_destination
                    .unwrap_or(super::ordered::ORDERED_PER_DESTINATION_DEFAULT),
                ordered_per_publisher: super::ordered::ORDERED_PER_PUBLISHER_DEFAULT,
                latest_per_destination: capacity
                    .latest_per_destination
                    .unwrap_or(super::ordered::LATEST_PER_DESTINATION_DEFAULT),
                latest_per_publisher: capacity
                    .latest_per_host
                    .unwrap_or(super::ordered::LATEST_PER_PUBLISHER_DEFAULT),
            },
            ordered_per_host: capacity
                .ordered_per_host
                .unwrap_or(ORDERED_PER_HOST_DEFAULT),
        };
        delivery.recover()?;
        Ok(Arc::new(delivery))
    }

    fn recover(&self) -> Result<(), String> {
        let mut routes = BTreeMap::new();
        for guard in self.ks.routes.iter() {
            let (_, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
            let install: RouteInstall = serde_json::from_slice(&bytes)
                .map_err(|e| format!("a delivery route record does not decode: {e}"))?;
            let role = if install.publisher == self.host {
                Role::Publisher(Box::new(self.recover_outbox(&install)?))
            } else {
                let inbox = match self
                    .ks
                    .inbox_state
                    .get(&install.name)
                    .map_err(|e| e.to_string())?
                {
                    Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                        format!(
                            "route `{}`: the inbox record does not decode: {e}",
                            install.name
                        )
                    })?,
                    None => Inbox::new(
                        &install.name,
                        &install.membership,
                        &self.host,
                        install.class,
                    ),
                };
                Role::Destination(inbox)
            };
            routes.insert(install.name.clone(), RouteState { install, role });
        }
        *self.routes.lock().unwrap_or_else(|p| p.into_inner()) = routes;
        Ok(())
    }

    fn recover_outbox(&self, install: &RouteInstall) -> Result<Publishing, String> {
        let name = &install.name;
        let damaged = |detail: String| format!("route `{name}`: {detail}");
        let configured = self.capacity;
        let mut outbox = Outbox::new(
            name,
            &install.membership,
            install.class,
            capacity_for_replay(configured),
        )
        .map_err(|e| e.to_string())?;
        let mut cohorts: Vec<(u64, Vec<String>)> = Vec::new();
        for guard in self.ks.cohorts.prefix(prefix(name)) {
            let (k, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let first =
                position_of(&k, name).ok_or_else(|| damaged("a cohort key is malformed".into()))?;
            let recipients: Vec<String> = serde_json::from_slice(&v)
                .map_err(|e| damaged(format!("cohort {first} does not decode: {e}")))?;
            cohorts.push((first, recipients));
        }
        for guard in self.ks.published.prefix(prefix(name)) {
            let (k, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let position = position_of(&k, name)
                .ok_or_else(|| damaged("a publication key is malformed".into()))?;
            let payload = v
                .get(8..)
                .ok_or_else(|| damaged(format!("publication {position} is truncated")))?;
            let cohort = cohorts
                .iter()
                .rev()
                .find(|(first, _)| *first <= position)
                .map(|(_, r)| r.as_slice())
                .ok_or_else(|| damaged(format!("publication {position} has no cohort")))?;
            let issued = outbox
                .publish(payload.to_vec(), cohort)
                .map_err(|e| damaged(format!("replaying publication {position}: {e}")))?;
            if issued != position {
                return Err(damaged(format!(
                    "publication {position} follows {}: the sequence has a gap",
                    issued - 1
                )));
            }
        }
        for guard in self.ks.receipts.prefix(prefix(name)) {
            let (_, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let receipt: Receipt = serde_json::from_slice(&v)
                .map_err(|e| damaged(format!("a receipt does not decode: {e}")))?;
            let position = receipt.body.highest_position;
            let payload = self
                .ks
                .published
                .get(key(name, position))
                .map_err(|e| e.to_string())?
                .and_then(|b| b.get(8..).map(<[u8]>::to_vec))
                .ok_or_else(|| {
                    damaged(format!(
                        "a receipt names position {position}, never published"
                    ))
                })?;
            outbox
                .receipt_of_conflated(
                    &receipt.body.recipient,
                    position,
                    &receipt.body.digest,
                    &payload,
                )
                .map_err(|e| damaged(format!("replaying a receipt: {e}")))?;
        }
        outbox.set_capacity(configured).map_err(|e| e.to_string())?;
        Ok(Publishing {
            pending: Default::default(),
            outbox,
            wake: Arc::new(Notify::new()),
            gate: Arc::new(Gate::default()),
        })
    }

    /// Starts pushing: one task per destination of every route this host publishes.
    pub fn start(self: &Arc<Self>, runtime: tokio::runtime::Handle, authorities: Authorities) {
        *self.runtime.lock().unwrap_or_else(|p| p.into_inner()) = Some((runtime, authorities));
        let names: Vec<String> = self
            .routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        for name in names {
            self.spawn_pushers(&name, &[]);
        }
    }

    /// Pushers for every destination of `route` not in `running`.
    fn spawn_pushers(self: &Arc<Self>, route: &str, running: &[String]) {
        let Some((runtime, _)) = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return;
        };
        let destinations: Vec<String> = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            match routes.get(route) {
                Some(RouteState {
                    install,
                    role: Role::Publisher(_),
                }) => install
                    .destinations
                    .iter()
                    .map(|d| d.host.clone())
                    .filter(|d| !running.contains(d))
                    .collect(),
                _ => return,
            }
        };
        for destination in destinations {
            let me = self.clone();
            let route = route.to_owned();
            runtime.spawn(async move { me.push_loop(route, destination).await });
        }
    }

    /// Validates a route definition for this host and adds its record to `write`;
    /// the returned closure applies it in memory once `write` is durable.
    pub fn prepare_install(
        self: &Arc<Self>,
        install: &RouteInstall,
        write: &mut OwnedWriteBatch,
    ) -> Result<(String, InstallEffect), String> {
        let publishes = install.publisher == self.host;
        if !publishes && install.destination(&self.host).is_none() {
            return Err(format!(
                "route `{}` names neither this host `{}` as publisher nor as destination",
                install.name, self.host
            ));
        }
        if install.destinations.len() > grid_spec::limits::ROUTE_DESTINATIONS_MAX {
            return Err(format!(
                "route `{}` has {} destinations, above ROUTE_DESTINATIONS_MAX ({})",
                install.name,
                install.destinations.len(),
                grid_spec::limits::ROUTE_DESTINATIONS_MAX
            ));
        }
        for d in &install.destinations {
            if d.host == install.publisher {
                return Err(format!(
                    "`{}` publishes route `{}` and cannot also be its destination",
                    d.host, install.name
                ));
            }
            if crate::custody::signing_key_of(&d.keys, d.keys.generation).is_none()
                || crate::custody::mail_key_of(&d.keys).is_none()
            {
                return Err(format!(
                    "route `{}`: destination `{}` has no usable public keys",
                    install.name, d.host
                ));
            }
        }
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let existing = routes.get(&install.name);
        if let Some(current) = existing {
            let old = &current.install;
            if old.class != install.class
                || old.membership != install.membership
                || old.publisher != install.publisher
                || old.encrypted != install.encrypted
            {
                return Err(format!(
                    "route `{}` is installed as {} {} in `{}` published by `{}`: its class, membership, encryption and publisher never change; declare a new route",
                    install.name,
                    if old.encrypted { "encrypted" } else { "plain" },
                    old.class.name(),
                    old.membership,
                    old.publisher
                ));
            }
            if let Some(dropped) = old
                .destinations
                .iter()
                .find(|d| install.destination(&d.host).is_none())
            {
                return Err(format!(
                    "route `{}`: destination `{}` is missing from the new definition; a destination leaves only with `retired=#true` (it still owes what earlier cohorts name)",
                    install.name, dropped.host
                ));
            }
            if *old == *install {
                return Ok((
                    format!("route {} already installed", install.name),
                    Box::new(|| {}),
                ));
            }
        }
        let running: Vec<String> = existing
            .map(|c| {
                c.install
                    .destinations
                    .iter()
                    .map(|d| d.host.clone())
                    .collect()
            })
            .unwrap_or_default();
        let fresh = existing.is_none();
        drop(routes);
        write.insert(
            &self.ks.routes,
            install.name.as_str(),
            serde_json::to_vec(install).expect("routes serialize"),
        );
        let detail = match (fresh, publishes) {
            (true, true) => format!(
                "route {} installed: publisher of {} destination(s)",
                install.name,
                install.destinations.len()
            ),
            (true, false) => format!("route {} installed: destination", install.name),
            (false, _) => format!("route {} updated", install.name),
        };
        let me = self.clone();
        let install = install.clone();
        Ok((
            detail,
            Box::new(move || {
                let name = install.name.clone();
                {
                    let mut routes = me.routes.lock().unwrap_or_else(|p| p.into_inner());
                    match routes.get_mut(&name) {
                        Some(state) => state.install = install,
                        None => {
                            let role = if publishes {
                                let outbox = Outbox::new(
                                    &install.name,
                                    &install.membership,
                                    install.class,
                                    me.capacity,
                                )
                                .expect("capacities are at least 1 (validated)");
                                Role::Publisher(Box::new(Publishing {
                                    outbox,
                                    pending: Default::default(),
                                    wake: Arc::new(Notify::new()),
                                    gate: Arc::new(Gate::default()),
                                }))
                            } else {
                                Role::Destination(Inbox::new(
                                    &install.name,
                                    &install.membership,
                                    &me.host,
                                    install.class,
                                ))
                            };
                            routes.insert(name.clone(), RouteState { install, role });
                        }
                    }
                }
                me.spawn_pushers(&name, &running);
            }),
        ))
    }

    /// The routes this host holds, for `observe`.
    pub fn installed(&self) -> Vec<RouteInstall> {
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|r| r.install.clone())
            .collect()
    }

    /// Handles a control call from this host's operator (blocking; never on a runtime
    /// thread).
    pub fn handle_local(self: &Arc<Self>, call: DeliveryCall) -> DeliveryReply {
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(r, _)| r.clone());
        match runtime {
            Some(runtime) => runtime.block_on(self.handle(call)),
            None => DeliveryReply::Refused {
                reason: "delivery has not started (it needs the `transport` profile)".to_owned(),
            },
        }
    }

    /// Handles a control call (outside the host's lock).
    pub async fn handle(self: &Arc<Self>, call: DeliveryCall) -> DeliveryReply {
        match call {
            DeliveryCall::Publish { route, value } => match self.publish(&route, value).await {
                Ok(position) => DeliveryReply::Published { route, position },
                Err(reason) => DeliveryReply::Refused { reason },
            },
            DeliveryCall::Routes => DeliveryReply::Routes {
                host: self.host.clone(),
                routes: self.views(),
            },
            DeliveryCall::Held { route, from } => self.held(&route, from),
            DeliveryCall::Receipts { route } => self.receipts(&route),
        }
    }

    fn views(&self) -> Vec<RouteView> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        routes
            .values()
            .map(|r| match &r.role {
                Role::Publisher(p) => RouteView {
                    route: r.install.clone(),
                    role: "publisher".to_owned(),
                    published: p.durable(),
                    receipted: r
                        .install
                        .destinations
                        .iter()
                        .filter_map(|d| p.outbox.receipted(&d.host).map(|n| (d.host.clone(), n)))
                        .collect(),
                    outstanding: p.outbox.outstanding(),
                    held: 0,
                },
                Role::Destination(inbox) => RouteView {
                    route: r.install.clone(),
                    role: "destination".to_owned(),
                    published: 0,
                    receipted: BTreeMap::new(),
                    outstanding: BTreeMap::new(),
                    held: inbox.held(),
                },
            })
            .collect()
    }

    fn held(&self, route: &str, from: u64) -> DeliveryReply {
        let (install, publishes, durable) = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            match routes.get(route) {
                None => {
                    return DeliveryReply::Refused {
                        reason: format!("host `{}` holds no route `{route}`", self.host),
                    };
                }
                Some(r) => (
                    r.install.clone(),
                    matches!(r.role, Role::Publisher(_)),
                    match &r.role {
                        Role::Publisher(p) => p.durable(),
                        Role::Destination(i) => i.held(),
                    },
                ),
            }
        };
        let keyspace = if publishes {
            &self.ks.published
        } else {
            &self.ks.inbox
        };
        let mut values = Vec::new();
        let mut next = None;
        for guard in keyspace.range(key(route, from)..=key(route, durable)) {
            let (k, v) = guard
                .into_inner()
                .unwrap_or_else(|e| fatal(&self.dir, "reading held values", e));
            let Some(position) = position_of(&k, route) else {
                continue;
            };
            if values.len() == HELD_REPLY_MAX {
                next = Some(position);
                break;
            }
            let value = if publishes {
                v.get(8..)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(f64::from_be_bytes)
                    .ok_or_else(|| format!("publication {position} is malformed"))
            } else {
                self.stored_value(&install, position, &v)
            };
            match value {
                Ok(value) => values.push(HeldValue { position, value }),
                Err(reason) => {
                    return DeliveryReply::Refused {
                        reason: format!("route `{route}`: {reason}"),
                    };
                }
            }
        }
        DeliveryReply::Held {
            route: route.to_owned(),
            role: if publishes {
                "publisher"
            } else {
                "destination"
            }
            .to_owned(),
            values,
            next,
        }
    }

    /// A value as a recipient stored it: plain bytes, or sealed (opened here with this
    /// host's mail key).
    fn stored_value(
        &self,
        install: &RouteInstall,
        position: u64,
        stored: &[u8],
    ) -> Result<f64, String> {
        if install.encrypted {
            let sealed: Sealed = serde_json::from_slice(stored)
                .map_err(|e| format!("sealed value {position} does not decode: {e}"))?;
            open_value(
                self.custody.mail_secret(),
                &install.name,
                &install.membership,
                position,
                &sealed,
            )
            .map_err(|e| format!("value {position}: {e}"))
        } else {
            super::ordered::payload_value(&install.name, stored).map_err(|e| e.to_string())
        }
    }

    fn receipts(&self, route: &str) -> DeliveryReply {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let Some((install, p)) = publisher(&routes, route) else {
            return DeliveryReply::Refused {
                reason: format!(
                    "host `{}` does not publish route `{route}`; its publisher holds the receipts",
                    self.host
                ),
            };
        };
        let mut receipts = Vec::new();
        for d in &install.destinations {
            if let Some(bytes) = self
                .ks
                .receipts
                .get(named_key(route, &d.host))
                .unwrap_or_else(|e| fatal(&self.dir, "reading receipts", e))
            {
                match serde_json::from_slice::<Receipt>(&bytes) {
                    Ok(r) => receipts.push(r),
                    Err(e) => fatal(&self.dir, "decoding a receipt", e),
                }
            }
        }
        DeliveryReply::Receipts {
            route: route.to_owned(),
            published: p.durable(),
            receipts,
            outstanding: p.outbox.outstanding(),
        }
    }

    /// The publishing right: claim `route:R` held by this host, confirmed by a
    /// linearizable read that began after this publish arrived.
    async fn check_right(&self, install: &RouteInstall, gate: &Gate) -> Result<u64, String> {
        let arrival = gate.started.load(Ordering::SeqCst);
        let mut passed = gate.passed.lock().await;
        if passed.0 > arrival {
            return Ok(passed.1);
        }
        let me = gate.started.fetch_add(1, Ordering::SeqCst) + 1;
        let authority = {
            let runtime = self.runtime.lock().unwrap_or_else(|p| p.into_inner());
            let Some((_, authorities)) = runtime.as_ref() else {
                return Err("delivery has not started".to_owned());
            };
            authorities
                .by_membership
                .get(&install.membership)
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "host `{}` runs no authority of `{}`: a publisher's right to publish is a claim there (profile `authority`)",
                        self.host, install.membership
                    )
                })?
        };
        let claim = install.claim();
        match authority
            .handle(
                AuthorityCall::Show {
                    claim: claim.clone(),
                },
                None,
            )
            .await
        {
            AuthorityReply::Shown { claim: Some(c), .. }
                if c.owner == self.host && c.state == ClaimState::Held =>
            {
                *passed = (me, c.epoch);
                Ok(c.epoch)
            }
            AuthorityReply::Shown { claim: Some(c), .. } => Err(format!(
                "fenced: claim `{claim}` is {} by `{}` at epoch {}, not held by `{}`; nothing was published",
                match c.state {
                    ClaimState::Held => "held",
                    ClaimState::Released => "released",
                },
                c.owner,
                c.epoch,
                self.host
            )),
            AuthorityReply::Shown { claim: None, .. } => Err(format!(
                "claim `{claim}` is held by nobody: `{}` has no right to publish on route `{}` (reconcile acquires it); nothing was published",
                self.host, install.name
            )),
            AuthorityReply::Unknown { reason } => Err(format!(
                "the publishing right could not be confirmed ({reason}); nothing was published"
            )),
            other => Err(format!(
                "the authority answered {other:?}; nothing was published"
            )),
        }
    }

    /// The publisher side of `route` here: its definition and its publishing gate.
    fn publishing(&self, route: &str) -> Result<(RouteInstall, Arc<Gate>), String> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        match routes.get(route) {
            Some(RouteState {
                install,
                role: Role::Publisher(p),
            }) => Ok((install.clone(), p.gate.clone())),
            Some(r) => Err(format!(
                "host `{}` is a destination of route `{route}`; its publisher is `{}`",
                self.host, r.install.publisher
            )),
            None => Err(format!("host `{}` holds no route `{route}`", self.host)),
        }
    }

    /// Publishes one value; returns its position once it is durable.
    pub async fn publish(self: &Arc<Self>, route: &str, value: f64) -> Result<u64, String> {
        super::ordered::value_payload(route, value).map_err(|e| e.to_string())?;
        let (install, gate) = self.publishing(route)?;
        let epoch = self.check_right(&install, &gate).await?;
        let mut write = self.database.batch();
        let position = self.stage(route, value, epoch, &mut write)?;
        write
            .commit()
            .unwrap_or_else(|e| fatal(&self.dir, "committing a publication", e));
        if let Err(e) = self.syncer.sync().await {
            fatal(&self.dir, "syncing a publication", e);
        }
        if self.failpoints.armed(Failpoint::PublishAfterCommit) == Some(Action::Abort) {
            eprintln!("gridd: failpoint publish-after-commit: aborting");
            std::process::abort();
        }
        self.settle(route, position);
        Ok(position)
    }

    /// The publishing right of `route`, confirmed now (blocking: for the host's own
    /// thread, never a runtime thread): the epoch it is held at.
    pub fn check_right_blocking(self: &Arc<Self>, route: &str) -> Result<u64, String> {
        let (install, gate) = self.publishing(route)?;
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(r, _)| r.clone())
            .ok_or_else(|| "delivery has not started".to_owned())?;
        runtime.block_on(self.check_right(&install, &gate))
    }

    /// Assigns `value` the next position of `route` (capacity permitting) and adds
    /// its records to `write`; the position is pushed only once [`Delivery::settle`]
    /// says `write` is durable. Refused, changing nothing, when the outbox refuses.
    pub fn stage(
        &self,
        route: &str,
        value: f64,
        epoch: u64,
        write: &mut OwnedWriteBatch,
    ) -> Result<u64, String> {
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        self.stage_locked(&mut routes, route, value, epoch, write)
    }

    /// The host-wide Ordered capacity: `more` publications on `route` (if Ordered)
    /// fit beside what every Ordered route of this host retains.
    fn admit_host(
        &self,
        routes: &BTreeMap<String, RouteState>,
        route: &str,
        more: u64,
    ) -> Result<(), String> {
        let ordered = matches!(
            routes.get(route),
            Some(RouteState { install, role: Role::Publisher(_) }) if install.class == Class::Ordered
        );
        if !ordered {
            return Ok(());
        }
        let retained: u64 = routes
            .values()
            .filter_map(|r| match &r.role {
                Role::Publisher(p) if r.install.class == Class::Ordered => {
                    Some(p.outbox.retained())
                }
                _ => None,
            })
            .sum();
        if retained + more > self.ordered_per_host {
            return Err(format!(
                "route `{route}`: Ordered capacity exhausted for host `{}`: its Ordered routes retain {retained} publications not yet receipted by their whole cohort (ordered-per-host = {}; default ORDERED_PER_HOST_DEFAULT = {ORDERED_PER_HOST_DEFAULT}); nothing was published, nothing dropped",
                self.host, self.ordered_per_host
            ));
        }
        Ok(())
    }

    fn stage_locked(
        &self,
        routes: &mut BTreeMap<String, RouteState>,
        route: &str,
        value: f64,
        epoch: u64,
        write: &mut OwnedWriteBatch,
    ) -> Result<u64, String> {
        let payload = super::ordered::value_payload(route, value).map_err(|e| e.to_string())?;
        self.admit_host(routes, route, 1)?;
        let Some(RouteState {
            install,
            role: Role::Publisher(p),
        }) = routes.get_mut(route)
        else {
            return Err(format!("route `{route}` is not published here"));
        };
        let cohort = install.cohort();
        let last = p.outbox.cohort(p.outbox.published()).cloned();
        let position = p
            .outbox
            .publish(payload.to_vec(), &cohort)
            .map_err(|e| e.to_string())?;
        p.pending.insert(position);
        let mut record = epoch.to_be_bytes().to_vec();
        record.extend_from_slice(&payload);
        write.insert(&self.ks.published, key(route, position), record);
        let same = last.is_some_and(|l| l.iter().map(String::as_str).eq(cohort.iter().copied()))
            && position > 1;
        if !same {
            write.insert(
                &self.ks.cohorts,
                key(route, position),
                serde_json::to_vec(&cohort).expect("cohorts serialize"),
            );
        }
        Ok(position)
    }

    /// Stages several publications at once — all or none: every outbox must admit
    /// its publication before any is published (a model batch publishing on several
    /// routes).
    pub fn stage_all(
        &self,
        publications: &[(String, f64, u64)],
        write: &mut OwnedWriteBatch,
    ) -> Result<Vec<u64>, String> {
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        {
            for (route, value, _) in publications {
                super::ordered::value_payload(route, *value).map_err(|e| e.to_string())?;
                let Some(RouteState {
                    install,
                    role: Role::Publisher(p),
                }) = routes.get(route)
                else {
                    return Err(format!("route `{route}` is not published here"));
                };
                p.outbox
                    .admit(&install.cohort())
                    .map_err(|e| e.to_string())?;
            }
            let ordered = publications
                .iter()
                .filter(|(route, _, _)| {
                    routes
                        .get(route)
                        .is_some_and(|r| r.install.class == Class::Ordered)
                })
                .count() as u64;
            if let Some((route, _, _)) = publications.iter().find(|(route, _, _)| {
                routes
                    .get(route)
                    .is_some_and(|r| r.install.class == Class::Ordered)
            }) {
                self.admit_host(&routes, route, ordered)?;
            }
        }
        // Every outbox admits its publication, and nothing else publishes while this
        // lock is held: none of these fails.
        publications
            .iter()
            .map(|(route, value, epoch)| {
                self.stage_locked(&mut routes, route, *value, *epoch, write)
            })
            .collect()
    }

    /// Values held at this destination of `route` after position `after` (Latest: the
    /// one value held, if newer), for the models it feeds.
    pub fn delivered_after(&self, route: &str, after: u64) -> Result<Vec<(u64, f64)>, String> {
        let (install, held) = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            match routes.get(route) {
                Some(RouteState {
                    install,
                    role: Role::Destination(inbox),
                }) => (install.clone(), inbox.held()),
                _ => return Ok(Vec::new()),
            }
        };
        if held <= after {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for guard in self
            .ks
            .inbox
            .range(key(route, after + 1)..=key(route, held))
        {
            let (k, v) = guard
                .into_inner()
                .unwrap_or_else(|e| fatal(&self.dir, "reading delivered values", e));
            let Some(position) = position_of(&k, route) else {
                continue;
            };
            out.push((position, self.stored_value(&install, position, &v)?));
        }
        Ok(out)
    }

    /// Waits until a push stored values (or `timeout`): the host then feeds its models.
    pub fn wait_stored(&self, seen: u64, timeout: Duration) -> u64 {
        let guard = self.stored.0.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = self
            .stored
            .1
            .wait_timeout_while(guard, timeout, |n| *n == seen)
            .unwrap_or_else(|p| p.into_inner());
        *guard
    }

    /// `position` of `route` is durable: pushes may carry it (and every earlier one
    /// that is durable too).
    pub fn settle(&self, route: &str, position: u64) {
        let wake = {
            let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            match routes.get_mut(route) {
                Some(RouteState {
                    role: Role::Publisher(p),
                    ..
                }) => {
                    p.pending.remove(&position);
                    Some(p.wake.clone())
                }
                _ => None,
            }
        };
        if let Some(wake) = wake {
            wake.notify_waiters();
        }
    }

    /// What to push to `destination` next (durable positions only), sealed on
    /// encrypted routes; with the route's wake signal.
    fn next_push(
        &self,
        route: &str,
        destination: &str,
    ) -> Option<(RouteInstall, Vec<WireDelivery>, Arc<Notify>)> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let (install, p) = publisher(&routes, route)?;
        let next: Vec<Value> = p
            .outbox
            .next_through(destination, PUSH_DELIVERIES_MAX, p.durable());
        let install = install.clone();
        let wake = p.wake.clone();
        drop(routes);
        let mail = install
            .destination(destination)
            .and_then(|d| crate::custody::mail_key_of(&d.keys));
        let mut deliveries = Vec::with_capacity(next.len());
        for d in next {
            let payload = if install.encrypted {
                let value = super::ordered::payload_value(route, &d.payload).ok()?;
                let sealed = seal_value(
                    mail.as_ref()?,
                    route,
                    &install.membership,
                    d.position,
                    value,
                )
                .ok()?;
                WirePayload::Sealed(sealed)
            } else {
                WirePayload::Plain(hex::encode(&d.payload))
            };
            deliveries.push(WireDelivery {
                position: d.position,
                previous: d.previous,
                payload,
            });
        }
        Some((install, deliveries, wake))
    }

    async fn push_loop(self: Arc<Self>, route: String, destination: String) {
        let mut client: Option<PeerClient> = None;
        let mut backoff = Duration::from_millis(50);
        loop {
            let Some((install, deliveries, wake)) = self.next_push(&route, &destination) else {
                return;
            };
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if deliveries.is_empty() {
                // Re-checked now and then: a wake-up lost to a race costs a second.
                let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
                continue;
            }
            let Some(target) = install.destination(&destination) else {
                return;
            };
            if client.is_none() {
                match PeerClient::new(
                    &self.dir,
                    &install.membership,
                    &destination,
                    &target.address,
                ) {
                    Ok(c) => client = Some(c),
                    Err(e) => {
                        eprintln!("gridd: route {route}: cannot reach `{destination}`: {e}");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(PUSH_BACKOFF_MAX);
                        continue;
                    }
                }
            }
            let push = Push {
                route: route.clone(),
                deliveries,
            };
            let path = format!("/delivery/{}/push", install.membership);
            let reply: Result<PushReply, PeerError> = client
                .as_ref()
                .expect("just built")
                .post(&path, &push, PUSH_TIMEOUT)
                .await;
            match reply {
                Ok(PushReply::Receipt { receipt }) => {
                    if self.failpoints.armed(Failpoint::ReceiptBeforeRecord) == Some(Action::Abort)
                    {
                        eprintln!("gridd: failpoint receipt-before-record: aborting");
                        std::process::abort();
                    }
                    match self.record_receipt(&route, &destination, &receipt) {
                        Ok(()) => backoff = Duration::from_millis(50),
                        Err(reason) => {
                            eprintln!(
                                "gridd: route {route}: receipt of `{destination}` not applied: {reason}"
                            );
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(PUSH_BACKOFF_MAX);
                        }
                    }
                }
                Ok(PushReply::Refused { reason }) => {
                    eprintln!("gridd: route {route}: `{destination}` refused a push: {reason}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(PUSH_BACKOFF_MAX);
                }
                Err(e) => {
                    if matches!(e, PeerError::NotSent(_)) {
                        client = None;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(PUSH_BACKOFF_MAX);
                }
            }
        }
    }

    /// Applies a destination's signed receipt (verified with its public key of the
    /// receipt's generation) and records it when it released something.
    fn record_receipt(
        &self,
        route: &str,
        destination: &str,
        receipt: &Receipt,
    ) -> Result<(), String> {
        if receipt.body.recipient != destination {
            return Err(format!(
                "the receipt names `{}`, not `{destination}`",
                receipt.body.recipient
            ));
        }
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let Some(RouteState {
            install,
            role: Role::Publisher(p),
        }) = routes.get_mut(route)
        else {
            return Err("the route is no longer published here".to_owned());
        };
        let key_of = install
            .destination(destination)
            .and_then(|d| crate::custody::signing_key_of(&d.keys, receipt.generation))
            .ok_or_else(|| {
                format!(
                    "no public signing key of generation {} is known for `{destination}`",
                    receipt.generation
                )
            })?;
        let mut released = p
            .outbox
            .apply(receipt, &key_of)
            .map_err(|e| e.to_string())?;
        if released.outcome == ReceiptOutcome::Conflated {
            // Superseded beyond the window while the receipt was on its way: checked
            // against this publisher's journal of the value instead (signature verified
            // above).
            let position = receipt.body.highest_position;
            let stored = self
                .ks
                .published
                .get(key(route, position))
                .unwrap_or_else(|e| fatal(&self.dir, "reading a publication", e));
            if let Some(payload) = stored.as_deref().and_then(|b| b.get(8..)) {
                released = p
                    .outbox
                    .receipt_of_conflated(destination, position, &receipt.body.digest, payload)
                    .map_err(|e| e.to_string())?;
            }
        }
        if released.outcome == ReceiptOutcome::Advanced {
            // Lazily durable: a lost receipt only resends values answered as duplicates.
            self.ks
                .receipts
                .insert(
                    named_key(route, destination),
                    serde_json::to_vec(receipt).expect("receipts serialize"),
                )
                .unwrap_or_else(|e| fatal(&self.dir, "recording a receipt", e));
        }
        Ok(())
    }

    /// A push from `peer` (certified in `membership`): stores what follows what is
    /// held, durably, then answers with the signed receipt of the durable state.
    pub async fn accept_push(&self, peer: &str, membership: &str, push: Push) -> PushReply {
        let refused = |reason: String| PushReply::Refused { reason };
        let (body, stored) = {
            let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            let Some(RouteState {
                install,
                role: Role::Destination(inbox),
            }) = routes.get_mut(&push.route)
            else {
                return refused(format!(
                    "host `{}` is no destination of route `{}`",
                    self.host, push.route
                ));
            };
            if install.membership != membership || install.publisher != peer {
                return refused(format!(
                    "route `{}` is published by `{}` in `{}`; `{peer}` in `{membership}` cannot push on it",
                    push.route, install.publisher, install.membership
                ));
            }
            if push.deliveries.len() > PUSH_DELIVERIES_MAX {
                return refused(format!(
                    "a push carries at most PUSH_DELIVERIES_MAX ({PUSH_DELIVERIES_MAX}) values"
                ));
            }
            // Every value is opened and checked before any is taken.
            let mut values = Vec::with_capacity(push.deliveries.len());
            for d in &push.deliveries {
                let (value, stored) = match (&d.payload, install.encrypted) {
                    (WirePayload::Sealed(sealed), true) => match open_value(
                        self.custody.mail_secret(),
                        &install.name,
                        &install.membership,
                        d.position,
                        sealed,
                    ) {
                        Ok(v) => (
                            v,
                            serde_json::to_vec(sealed).expect("sealed values serialize"),
                        ),
                        Err(e) => return refused(format!("value {}: {e}", d.position)),
                    },
                    (WirePayload::Plain(hex), false) => {
                        let bytes = match hex::decode(hex).map_err(|e| e.to_string()) {
                            Ok(b) => b,
                            Err(e) => return refused(format!("value {}: {e}", d.position)),
                        };
                        match super::ordered::payload_value(&install.name, &bytes) {
                            Ok(v) => (v, bytes),
                            Err(e) => return refused(e.to_string()),
                        }
                    }
                    (_, true) => {
                        return refused(format!(
                            "route `{}` is encrypted: value {} arrived unsealed",
                            install.name, d.position
                        ));
                    }
                    (_, false) => {
                        return refused(format!(
                            "route `{}` is not encrypted: value {} arrived sealed",
                            install.name, d.position
                        ));
                    }
                };
                values.push((d, value, stored));
            }
            let mut write = self.database.batch();
            let mut stored_any = false;
            for (d, value, stored) in values {
                let before = inbox.held();
                let taken = inbox.accept(&Value {
                    position: d.position,
                    previous: d.previous,
                    payload: value.to_be_bytes().to_vec(),
                });
                if let Accepted::Stored { .. } = taken {
                    write.insert(&self.ks.inbox, key(&install.name, d.position), stored);
                    if install.class == Class::Latest && before > 0 {
                        write.remove(&self.ks.inbox, key(&install.name, before));
                    }
                    stored_any = true;
                }
            }
            if stored_any {
                write.insert(
                    &self.ks.inbox_state,
                    install.name.as_str(),
                    serde_json::to_vec(&*inbox).expect("inboxes serialize"),
                );
                write
                    .commit()
                    .unwrap_or_else(|e| fatal(&self.dir, "storing delivered values", e));
            }
            (inbox.receipt(), stored_any)
        };
        // Also when nothing new was stored: an earlier push's values may still be on
        // their way to the disk; a receipt only ever speaks of a durable state.
        if let Err(e) = self.syncer.sync().await {
            fatal(&self.dir, "syncing delivered values", e);
        }
        if stored && self.failpoints.armed(Failpoint::InboxAfterCommit) == Some(Action::Abort) {
            eprintln!("gridd: failpoint inbox-after-commit: aborting");
            std::process::abort();
        }
        if stored {
            *self.stored.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            self.stored.1.notify_all();
        }
        PushReply::Receipt {
            receipt: Receipt::sign(
                &body,
                self.custody.signing_key(),
                self.custody.manifest.generation,
            ),
        }
    }
}
