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
//! delivery-purged       NAME                     lowest position held (be64)    (both; absent: 1)
//! delivery-deferred     NAME \0 SEQ(be64)        8 value bytes: waiting for capacity (publisher,
//!                                                 shared-memberships; deferred.rs)
//! delivery-matrix-ops   OP                       position(be64) ++ sha256 ++ NAME: a
//!                                                 publish-matrix's answer (publisher)
//! checkpoints           delivery \0 NAME \0 …     the outbox at a position      (publisher)
//! ```
//!
//! Durability (the rules of `ordered.rs`): a publication, its cohort and epoch are
//! committed and fsynced (group commit: one fsync for every publish waiting at that
//! moment) **before** `publish` returns its position and before any push may carry it
//! (`durable` watermark). A recipient commits and fsyncs what it stored before it
//! signs the receipt that says so. Receipts at the publisher are recorded lazily:
//! losing one only resends values the recipient answers as duplicates.
//!
//! The publisher's outbox is recovered from its latest checkpoint (`checkpoint.rs`),
//! then the published sequence after it with its cohorts, then its recorded receipts.
//! The publisher's journal keeps what a recipient has not receipted and its newest
//! value; what every recipient receipted is purged once a checkpoint covers it, and an
//! inbox keeps what the models fed by the route have not taken into a durable batch
//! (docs/storage.md, "Delivery"). Values are plaintext in the publisher's own store,
//! sealed on the wire and in every recipient's inbox on encrypted routes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use fjall::{Keyspace, OwnedWriteBatch};
use tokio::sync::Notify;

use super::api::{DeliveryCall, DeliveryReply, RouteInstall};
use super::ordered::{Capacity, Inbox, Outbox};
use crate::authority::service::Authorities;

use crate::custody::Custody;
use crate::store::keys::{Key, trailing_u64};
use crate::store::{Failpoints, Syncer, open_keyspaces};

/// Default of the host-wide Ordered capacity: publications not yet receipted by their
/// whole cohort, over every Ordered route the host publishes.
pub const ORDERED_PER_HOST_DEFAULT: u64 = 262_144;

const ROUTES: &str = "delivery-routes";
const PUBLISHED: &str = "delivery-published";
const COHORTS: &str = "delivery-cohorts";
const RECEIPTS: &str = "delivery-receipts";
const INBOX: &str = "delivery-inbox";
const INBOX_STATE: &str = "delivery-inbox-state";
const PURGED: &str = "delivery-purged";
const DEFERRED: &str = "delivery-deferred";
const MATRIX_OPS: &str = "delivery-matrix-ops";
const MATRIX_REFUSED: &str = "delivery-matrix-refused";
const MATRIX_OPS_BY_TIME: &str = "delivery-matrix-ops-by-time";

mod checkpoint;
pub use checkpoint::Bounded;
mod deferred;
pub use deferred::Staged;
mod leave;
mod matrices;
pub use leave::RouteObligations;
use matrices::matrix_of;
mod inbox;
mod publish;
mod push;
mod reads;
mod recover;

/// `NAME \0 POSITION(be64)`.
fn key(route: &str, position: u64) -> Vec<u8> {
    Key::text(route).sep().u64(position).bytes()
}

/// `NAME \0`: every key of `route`.
fn prefix(route: &str) -> Vec<u8> {
    Key::text(route).sep().bytes()
}

/// `NAME \0 RECIPIENT`.
fn named_key(route: &str, name: &str) -> Vec<u8> {
    Key::text(route).then(name).bytes()
}

/// The position of a `NAME \0 POSITION(be64)` key of `route`.
fn position_of(key: &[u8], route: &str) -> Option<u64> {
    (key.len() == route.len() + 9)
        .then(|| trailing_u64(key))
        .flatten()
}

struct Keyspaces {
    routes: Keyspace,
    published: Keyspace,
    cohorts: Keyspace,
    receipts: Keyspace,
    inbox: Keyspace,
    inbox_state: Keyspace,
    purged: Keyspace,
    deferred: Keyspace,
    /// `OP` → route, position and SHA-256 of the matrix `publish-matrix --op OP`
    /// published (`matrices.rs`).
    matrix_ops: Keyspace,
    /// Mapping → the newest matrix this destination refused of it (JSON
    /// `RefusedMatrix`, `matrices.rs`).
    matrix_refused: Keyspace,
    /// The `publish-matrix` answers by time (answer time `u64` BE + op → empty): what
    /// the host's archive pass moves to the shelf past `retain hot-days`.
    matrix_ops_by_time: Keyspace,
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
    /// Notified whenever a receipt advances (`receipted` calls wait on it).
    receipted: Arc<Notify>,
    gate: Arc<Gate>,
    /// The position of the installed checkpoint (0: none).
    checkpointed: u64,
    /// The floor of the newest checkpoint taken: publications at or below it are
    /// complete (or conflated away). A late receipt of a conflated value at or below it
    /// is no longer checked against the journal; they are purged once that checkpoint
    /// is installed (in the same pass that took it: a failed install stops the host).
    floor: u64,
    /// Publications journaled to wait for capacity (`deferred.rs`), oldest first:
    /// (sequence, frozen value).
    deferred: std::collections::VecDeque<(u64, f64)>,
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
    database: crate::store::Durable,
    ks: Keyspaces,
    /// The room `delivery` of the store's checkpoints: one per published route.
    checkpoints: crate::store::checkpoint::Checkpoints,
    custody: Custody,
    failpoints: Failpoints,
    /// The host's `retain` and the installation's shelf: where `publish-matrix` answers
    /// past the hot window live (`matrices.rs`).
    retention: crate::store::shelf::Retention,
    routes: Mutex<BTreeMap<String, RouteState>>,
    syncer: Syncer,
    /// Set by [`Delivery::start`].
    runtime: Mutex<Option<(tokio::runtime::Handle, Authorities)>>,
    /// Counts pushes that stored values (and receipts that may free capacity for
    /// deferred publications); signalled to the host's feeder.
    stored: (Mutex<u64>, std::sync::Condvar),
    /// Publications deferred and not staged yet, over every route (`deferred.rs`).
    deferred_waiting: std::sync::atomic::AtomicU64,
    /// `publish-matrix` operation ids on their way to the disk.
    matrix_ops_flying: Mutex<std::collections::BTreeSet<String>>,
    /// Each route's capacity, and the Ordered publications the routes of one membership
    /// may retain together: its `capacity membership=M` line over the host's
    /// `capacity`, over the defaults.
    capacities: Capacities,
}

/// The capacity of each membership's routes this host publishes: the host's, and each
/// membership's own line over it. Each membership is its own Ordered pool.
struct Capacities {
    host: crate::config::CapacityConfig,
    by_membership: BTreeMap<String, crate::config::CapacityConfig>,
}

impl Capacities {
    fn config(&self, membership: &str) -> crate::config::CapacityConfig {
        match self.by_membership.get(membership) {
            Some(own) => own.over(&self.host),
            None => self.host,
        }
    }

    /// The capacity of `install`: a mapping's own (`MAPPING_RETAINED_MAX`), a route's
    /// of its membership.
    fn of(&self, install: &RouteInstall) -> Capacity {
        use crate::limits::MAPPING_RETAINED_MAX;
        match install.matrix {
            Some(_) => Capacity {
                ordered_per_destination: MAPPING_RETAINED_MAX,
                ordered_per_publisher: MAPPING_RETAINED_MAX,
                ..self.route(&install.membership)
            },
            None => self.route(&install.membership),
        }
    }

    /// The capacity of one route of `membership`.
    fn route(&self, membership: &str) -> Capacity {
        let c = self.config(membership);
        Capacity {
            ordered_per_destination: c
                .ordered_per_destination
                .unwrap_or(super::ordered::ORDERED_PER_DESTINATION_DEFAULT),
            ordered_per_publisher: super::ordered::ORDERED_PER_PUBLISHER_DEFAULT,
            latest_per_destination: c
                .latest_per_destination
                .unwrap_or(super::ordered::LATEST_PER_DESTINATION_DEFAULT),
            latest_per_publisher: c
                .latest_per_host
                .unwrap_or(super::ordered::LATEST_PER_PUBLISHER_DEFAULT),
        }
    }

    /// The Ordered publications the routes of `membership` may retain together.
    fn ordered_per_host(&self, membership: &str) -> u64 {
        self.config(membership)
            .ordered_per_host
            .unwrap_or(ORDERED_PER_HOST_DEFAULT)
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
        database: &crate::store::Durable,
        dir: &Path,
        host: &str,
        custody: Custody,
        failpoints: Failpoints,
        retention: crate::store::shelf::Retention,
        (capacity, by_membership): (
            crate::config::CapacityConfig,
            BTreeMap<String, crate::config::CapacityConfig>,
        ),
    ) -> Result<Arc<Delivery>, String> {
        let opened = open_keyspaces(
            database,
            [
                ROUTES,
                PUBLISHED,
                COHORTS,
                RECEIPTS,
                INBOX,
                INBOX_STATE,
                PURGED,
                DEFERRED,
                MATRIX_OPS,
                MATRIX_REFUSED,
                MATRIX_OPS_BY_TIME,
                crate::store::checkpoint::CHECKPOINTS_KEYSPACE,
            ],
        )
        .map_err(|e| format!("delivery keyspaces: {e}"))?;
        let [
            routes,
            published,
            cohorts,
            receipts,
            inbox,
            inbox_state,
            purged,
            deferred,
            matrix_ops,
            matrix_refused,
            matrix_ops_by_time,
            checkpoints,
        ] = opened;
        let ks = Keyspaces {
            routes,
            published,
            cohorts,
            receipts,
            inbox,
            inbox_state,
            purged,
            deferred,
            matrix_ops,
            matrix_refused,
            matrix_ops_by_time,
        };
        let syncer = Syncer::start(
            {
                let d = database.clone();
                move || d.persist()
            },
            "delivery-fsync",
        )
        .map_err(|e| format!("cannot start the delivery fsync thread: {e}"))?;
        let delivery = Delivery {
            host: host.to_owned(),
            dir: dir.to_owned(),
            database: database.clone(),
            ks,
            checkpoints: crate::store::checkpoint::Checkpoints::new(checkpoints),
            custody,
            failpoints,
            retention,
            routes: Mutex::new(BTreeMap::new()),
            syncer,
            runtime: Mutex::new(None),
            stored: (Mutex::new(0), std::sync::Condvar::new()),
            deferred_waiting: Default::default(),
            matrix_ops_flying: Default::default(),
            capacities: Capacities {
                host: capacity,
                by_membership,
            },
        };
        delivery.recover()?;
        delivery.date_matrix_ops();
        Ok(Arc::new(delivery))
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
        if let Some(geometry) = install.matrix {
            let cells = u64::from(geometry.rows) * u64::from(geometry.cols);
            if !install.encrypted
                || install.class != super::receipts::Class::Ordered
                || geometry.rows == 0
                || geometry.cols == 0
                || cells > crate::limits::GRDX_CELLS_MAX as u64
            {
                return Err(format!(
                    "mapping `{}`: a mapping is Ordered and encrypted and carries matrices of 1 ≤ rows, cols and at most GRDX_CELLS_MAX cells; refused",
                    install.name
                ));
            }
        }
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let existing = routes.get(&install.name);
        if let Some(current) = existing {
            let old = &current.install;
            if old.matrix != install.matrix {
                return Err(format!(
                    "`{}` is installed as a {}{}: what it carries never changes; declare a new one",
                    install.name,
                    old.kind(),
                    match old.matrix {
                        Some(g) => format!(" of {} × {} matrices", g.rows, g.cols),
                        None => String::new(),
                    }
                ));
            }
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
                                    me.capacities.of(&install),
                                )
                                .expect("capacities are at least 1 (validated)");
                                Role::Publisher(Box::new(Publishing {
                                    outbox,
                                    pending: Default::default(),
                                    wake: Arc::new(Notify::new()),
                                    receipted: Arc::new(Notify::new()),
                                    gate: Arc::new(Gate::default()),
                                    checkpointed: 0,
                                    floor: 0,
                                    deferred: Default::default(),
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
    /// thread). The call's fsync, if any, is led on this thread (`on_own_thread`).
    pub fn handle_local(self: &Arc<Self>, call: DeliveryCall) -> DeliveryReply {
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(r, _)| r.clone());
        match runtime {
            Some(runtime) => {
                crate::store::commit::on_own_thread(|| runtime.block_on(self.handle(call)))
            }
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
            DeliveryCall::PublishMatrix { route, grdx, op } => {
                let published = match hex::decode(&grdx) {
                    Ok(bytes) => self.publish_matrix(&route, &bytes, op.as_deref()).await,
                    Err(e) => Err(format!(
                        "mapping `{route}`: the matrix is not hex-encoded GRDX ({e}); nothing was published"
                    )),
                };
                match published {
                    Ok(position) => DeliveryReply::Published { route, position },
                    Err(reason) => DeliveryReply::Refused { reason },
                }
            }
            DeliveryCall::Staged { route } => self.staged(&route),
            DeliveryCall::Held { route, from } => self.held(&route, from),
            DeliveryCall::Receipts { route } => self.receipts(&route),
            DeliveryCall::Receipted {
                route,
                position,
                wait_ms,
            } => self.receipted(&route, position, wait_ms).await,
        }
    }
}
