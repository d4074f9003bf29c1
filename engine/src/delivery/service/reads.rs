//! The control reads: route views, held values, receipts at the publisher, and values
//! delivered to a destination for the models it feeds.

use std::collections::BTreeMap;

use super::{Delivery, Role, RouteState, key, named_key, position_of, publisher};
use crate::custody::seal::{Sealed, open_value};
use crate::delivery::api::{
    DeliveryReply, HeldValue, KeyGenerations, OrderedPool, RouteInstall, RouteView,
};
use crate::delivery::receipts::Receipt;
use crate::limits::{HELD_REPLY_MAX, RECEIPTED_MISSING_MAX, RECEIPTED_WAIT_MS_MAX};
use crate::store::fatal;
use std::time::Duration;

impl Delivery {
    /// The membership of `route`, when this host holds it.
    pub fn membership_of(&self, route: &str) -> Option<String> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        routes.get(route).map(|r| r.install.membership.clone())
    }

    /// The class of `route`, when this host holds it.
    pub fn class_of(&self, route: &str) -> Option<crate::delivery::receipts::Class> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        routes.get(route).map(|r| r.install.class)
    }

    /// The highest position this destination of `route` holds (0: none, or not a
    /// destination of it): what the feeder compares, without a whole view.
    pub fn held_position(&self, route: &str) -> u64 {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        match routes.get(route) {
            Some(RouteState {
                role: Role::Destination(inbox),
                ..
            }) => inbox.held(),
            _ => 0,
        }
    }

    /// `route` as this host sees it (`inspect routes`), when it holds it.
    pub fn view(&self, route: &str) -> Option<RouteView> {
        let view = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            routes.get(route).map(|r| self.view_of(&routes, r))
        };
        view.map(|v| self.read_in(v))
    }

    pub(super) fn views(&self) -> Vec<RouteView> {
        let views: Vec<RouteView> = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            routes.values().map(|r| self.view_of(&routes, r)).collect()
        };
        views.into_iter().map(|v| self.read_in(v)).collect()
    }

    /// The parts of a view read from the store and the key book, after the routes'
    /// lock is released: a publish, a push or a receipt never waits for an
    /// inspection's reads (the key book reads files).
    fn read_in(&self, mut view: RouteView) -> RouteView {
        view.held_from = self.held_from(&view.route.name);
        if view.role == "publisher" {
            view.destination_keys = view
                .route
                .destinations
                .iter()
                .map(|d| {
                    let keys = self.custody.peer_keys(&d.host, &d.keys);
                    let generations = KeyGenerations {
                        signing: keys.generation,
                        mail: keys.mail_generation,
                    };
                    (d.host.clone(), generations)
                })
                .collect();
        }
        view
    }

    /// One route's view (`routes` held: the Ordered pool sums the membership's routes),
    /// without what [`Delivery::read_in`] adds.
    fn view_of(&self, routes: &BTreeMap<String, RouteState>, r: &RouteState) -> RouteView {
        match &r.role {
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
                held_from: 0,
                ordered_pool: (r.install.class == crate::delivery::receipts::Class::Ordered
                    && r.install.matrix.is_none())
                .then(|| OrderedPool {
                    membership: r.install.membership.clone(),
                    retained: self.ordered_retained(routes, &r.install.membership),
                    capacity: self.capacities.ordered_per_host(&r.install.membership),
                }),
                deferred: p.deferred.len() as u64,
                destination_keys: BTreeMap::new(),
            },
            Role::Destination(inbox) => RouteView {
                route: r.install.clone(),
                role: "destination".to_owned(),
                published: 0,
                receipted: BTreeMap::new(),
                outstanding: BTreeMap::new(),
                held: inbox.held(),
                held_from: 0,
                ordered_pool: None,
                deferred: 0,
                destination_keys: BTreeMap::new(),
            },
        }
    }

    /// What this host's journal of `route` holds, as a read of it sees it: the route's
    /// definition, whether this host publishes it, the newest position durable here
    /// (published, or held), and the keyspace of its entries. `None`: no such route.
    pub(super) fn journal_of(
        &self,
        route: &str,
    ) -> Option<(RouteInstall, bool, u64, &fjall::Keyspace)> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let r = routes.get(route)?;
        Some(match &r.role {
            Role::Publisher(p) => (r.install.clone(), true, p.durable(), &self.ks.published),
            Role::Destination(i) => (r.install.clone(), false, i.held(), &self.ks.inbox),
        })
    }

    pub(super) fn held(&self, route: &str, from: u64) -> DeliveryReply {
        let refuse = |reason: String| DeliveryReply::Refused { reason };
        let Some((install, publishes, durable, keyspace)) = self.journal_of(route) else {
            return refuse(format!("host `{}` holds no route `{route}`", self.host));
        };
        if install.matrix.is_some() {
            return refuse(format!(
                "`{route}` is a mapping: it holds matrices, not values (gridctl inspect mapping)"
            ));
        }
        let held_from = self.held_from(route);
        let mut values = Vec::new();
        let mut next = None;
        for guard in keyspace.range(key(route, from.max(held_from))..=key(route, durable)) {
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
            held_from,
        }
    }

    /// A value as a recipient stored it: plain bytes, or sealed (opened here with this
    /// host's mail key).
    pub(super) fn stored_value(
        &self,
        install: &RouteInstall,
        position: u64,
        stored: &[u8],
    ) -> Result<f64, String> {
        if install.encrypted {
            let sealed: Sealed = serde_json::from_slice(stored)
                .map_err(|e| format!("sealed value {position} does not decode: {e}"))?;
            self.custody
                .open_sealed(|secret| {
                    open_value(
                        secret,
                        &install.name,
                        &install.membership,
                        position,
                        &sealed,
                    )
                })
                .map_err(|e| format!("value {position}: {e}"))
        } else {
            crate::delivery::ordered::payload_value(&install.name, stored)
                .map_err(|e| e.to_string())
        }
    }

    /// Why a receipts call is refused at a host that does not publish `route`.
    fn not_publisher(&self, route: &str) -> DeliveryReply {
        DeliveryReply::Refused {
            reason: format!(
                "host `{}` does not publish route `{route}`; its publisher holds the receipts",
                self.host
            ),
        }
    }

    pub(super) fn receipts(&self, route: &str) -> DeliveryReply {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let Some((install, p)) = publisher(&routes, route) else {
            return self.not_publisher(route);
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

    /// At the publisher of `route`: waits until every destination of `position`'s
    /// cohort has a receipt covering it, or `wait_ms` passes, then answers how far
    /// receipts cover ([`DeliveryReply::Receipted`]). A publication completed by a
    /// cohort change rather than a receipt is seen at the end of the wait.
    pub(super) async fn receipted(
        &self,
        route: &str,
        position: u64,
        wait_ms: u64,
    ) -> DeliveryReply {
        if wait_ms > RECEIPTED_WAIT_MS_MAX {
            return DeliveryReply::Refused {
                reason: format!(
                    "wait_ms {wait_ms} is above RECEIPTED_WAIT_MS_MAX ({RECEIPTED_WAIT_MS_MAX})"
                ),
            };
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        loop {
            let (reply, receipted) = {
                let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
                let Some((install, p)) = publisher(&routes, route) else {
                    return self.not_publisher(route);
                };
                // Armed before the lock is released: a receipt recorded from now on
                // wakes it.
                let mut receipted = Box::pin(p.receipted.clone().notified_owned());
                receipted.as_mut().enable();
                let published = p.durable();
                // Not yet durable (or 0): every destination still awaited, none named.
                let (cohort, covered, awaiting, missing) = match p
                    .outbox
                    .awaiting(position)
                    .filter(|_| position <= published)
                {
                    Some((cohort, covered, awaited)) => (cohort, covered, awaited.len(), awaited),
                    None => {
                        let all = install.destinations.len();
                        (all, 0, all, Vec::new())
                    }
                };
                let reply = DeliveryReply::Receipted {
                    route: route.to_owned(),
                    position,
                    published,
                    complete: position >= 1 && position <= published && awaiting == 0,
                    covered,
                    cohort: cohort as u64,
                    awaiting: awaiting as u64,
                    missing: missing
                        .into_iter()
                        .take(RECEIPTED_MISSING_MAX)
                        .map(str::to_owned)
                        .collect(),
                };
                (reply, receipted)
            };
            let done = matches!(reply, DeliveryReply::Receipted { complete: true, .. });
            if done || tokio::time::Instant::now() >= deadline {
                return reply;
            }
            // Woken by a receipt, or at the deadline: either way answered afresh.
            let _ = tokio::time::timeout_at(deadline, receipted).await;
        }
    }

    /// Values held at this destination of `route` after position `after` (Latest: the
    /// one value held, if newer), for the models it feeds.
    pub fn delivered_after(
        &self,
        route: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, f64)>, String> {
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
            .take(limit)
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
}
