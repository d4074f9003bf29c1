//! Bounding a route's journals (docs/storage.md, "Delivery"), room `delivery` of
//! `store::checkpoint`.
//!
//! **Publisher**: its outbox (what each recipient receipted and its chain digest, the
//! frozen cohorts, Latest windows — not the payloads still owed, which stay in the
//! journal) at position N is the checkpoint; opening reads it, puts back the payloads
//! it retains from the journal after its floor, and replays only the publications
//! after N. The publications below the
//! oldest one still retained — complete (every recipient of its cohort receipted it) or
//! conflated away (Latest) — and below the newest are then purged.
//!
//! **Destination**: an Ordered inbox's values that every model fed by the route took
//! into a durable batch (the host passes the lowest fed position), below the newest, are
//! purged; the inbox record (held position and chain digest) is all a push needs.
//! A mapping's staged versions (issue 34) are taken by no model as inputs are: those
//! the newest `MAPPING_STAGED_KEPT_MAX` supersede are purged ([`Delivery::purge_staged`]).
//!
//! `delivery-purged` NAME → the lowest position the route's journal still holds (absent:
//! 1). Invariants, stated as absences: no publication is purged that a recipient of its
//! cohort has not receipted, or that no installed checkpoint covers; no inbox value is
//! purged that a model fed by the route has not taken; no staged matrix is purged that
//! fewer than `MAPPING_STAGED_KEPT_MAX` newer versions supersede; the newest value of a
//! route is never purged.

use serde::{Deserialize, Serialize};

use super::{Delivery, Role, RouteState, key};
use crate::delivery::ordered::Outbox;
use crate::delivery::receipts::Class;
use crate::limits::{CHECKPOINT_PURGE_ENTRIES_MAX, MAPPING_STAGED_KEPT_MAX};
use crate::store::checkpoint::Checkpoint;
use crate::store::{Failpoint, fatal};

/// The room's name in the checkpoints keyspace.
pub(super) const ROOM: &str = "delivery";

/// A publisher's state at a position, as its checkpoint holds it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PublisherState {
    /// Without the payloads it retains: they are in the journal after `floor`.
    pub outbox: Outbox,
    /// Every publication at or below it is complete or conflated away, and older than
    /// the newest: purged once this checkpoint is installed.
    pub floor: u64,
}

/// One route's journal bounded by [`Delivery::checkpoint_publishers`] or
/// [`Delivery::purge_inbox`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounded {
    pub route: String,
    /// The checkpoint's position, when one was taken (publishers only).
    pub checkpoint: Option<u64>,
    /// Entries purged.
    pub purged: u64,
    /// The lowest position the route's journal holds now.
    pub held_from: u64,
}

impl Bounded {
    /// One line for a checkpoint operation's detail.
    pub fn describe(&self) -> String {
        match self.checkpoint {
            Some(position) => format!(
                "route {} checkpointed at position {position} ({} publications purged, held from {})",
                self.route, self.purged, self.held_from
            ),
            None => format!(
                "route {}: {} entries purged (held from {})",
                self.route, self.purged, self.held_from
            ),
        }
    }
}

impl Delivery {
    /// The lowest position `route`'s journal here holds (1: nothing purged).
    pub(super) fn held_from(&self, route: &str) -> u64 {
        self.ks
            .purged
            .get(route)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a route's purge position", e))
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(1, u64::from_be_bytes)
    }

    /// Checkpoints every route this host publishes with at least `at_least` (≥ 1)
    /// publications past its checkpoint and none on its way to the disk, then purges
    /// what its newest checkpoint covers (also what a stop left unpurged). Each step is
    /// one synced write; a storage failure stops the host.
    pub fn checkpoint_publishers(&self, at_least: u64) -> Vec<Bounded> {
        let names: Vec<String> = self
            .routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, r)| matches!(r.role, Role::Publisher(_)))
            .map(|(name, _)| name.clone())
            .collect();
        let mut done = Vec::new();
        for route in names {
            let checkpoint = self.checkpoint_route(&route, at_least.max(1));
            let floor = self.floor(&route);
            let (purged, held_from) = self.purge_below(&route, floor, &self.ks.published);
            if checkpoint.is_some() || purged > 0 {
                done.push(Bounded {
                    route,
                    checkpoint,
                    purged,
                    held_from,
                });
            }
        }
        done
    }

    /// The floor of `route`'s newest checkpoint, installed by the time this is asked
    /// (0: none).
    fn floor(&self, route: &str) -> u64 {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        match routes.get(route) {
            Some(RouteState {
                role: Role::Publisher(p),
                ..
            }) => p.floor,
            _ => 0,
        }
    }

    /// Takes and installs `route`'s checkpoint; its position, or `None` when too few
    /// publications followed the last one or one is not durable yet (the next pass
    /// tries again).
    fn checkpoint_route(&self, route: &str, at_least: u64) -> Option<u64> {
        let (state, position) = {
            let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            let Some(RouteState {
                role: Role::Publisher(p),
                ..
            }) = routes.get_mut(route)
            else {
                return None;
            };
            let position = p.outbox.published();
            if !p.pending.is_empty() || position < p.checkpointed.saturating_add(at_least) {
                return None;
            }
            let floor = floor_of(&p.outbox);
            // From now on a late receipt of a conflated value at or below the floor
            // is not checked against the journal (it may be purged): the newest value
            // is sent again instead.
            p.floor = p.floor.max(floor);
            let state = PublisherState {
                outbox: p.outbox.without_payloads(),
                floor,
            };
            (
                serde_json::to_vec(&state).expect("an outbox encodes"),
                position,
            )
        };
        let checkpoint = Checkpoint {
            position,
            at_ms: crate::store::now_ms(),
            state,
        };
        self.failpoints
            .abort_if_armed(Failpoint::CheckpointBeforeWrite);
        let mut write = self.database.batch();
        self.checkpoints.stage(&mut write, ROOM, route, &checkpoint);
        self.database
            .commit_or_stop(write, &self.dir, "staging a route checkpoint");
        self.failpoints
            .abort_if_armed(Failpoint::CheckpointBeforeInstall);
        let mut write = self.database.batch();
        if let Err(reason) = self.checkpoints.install(&mut write, ROOM, route) {
            fatal(&self.dir, "installing a route checkpoint", reason);
        }
        self.database
            .commit_or_stop(write, &self.dir, "installing a route checkpoint");
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(RouteState {
            role: Role::Publisher(p),
            ..
        }) = routes.get_mut(route)
        {
            p.checkpointed = position;
        }
        drop(routes);
        self.failpoints
            .abort_if_armed(Failpoint::CheckpointBeforePurge);
        Some(position)
    }

    /// What each route's journal here holds and what a checkpoint now would purge:
    /// a publisher's publications below the oldest one still owed and below the
    /// newest; an Ordered inbox's values below `fed` (per route, the lowest position
    /// every model fed by it took; a route absent from it feeds no model) and below
    /// the newest.
    pub fn journal_views(
        &self,
        fed: &std::collections::BTreeMap<String, u64>,
    ) -> Vec<crate::store::usage::JournalView> {
        use crate::store::usage::JournalView;
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let mut views = Vec::new();
        for (route, state) in routes.iter() {
            let held_from = self.held_from(route);
            match &state.role {
                Role::Publisher(p) => {
                    let kept = match p.outbox.oldest_retained() {
                        Some(owed) => format!(
                            "publication {owed} and after: not yet receipted by every recipient of its cohort"
                        ),
                        None => "the newest publication (sent again to a recipient that asks)"
                            .to_owned(),
                    };
                    views.push(JournalView::held(
                        "delivery-published",
                        route,
                        (held_from, p.outbox.published()),
                        floor_of(&p.outbox),
                        Some(kept),
                    ));
                }
                Role::Destination(inbox) if state.install.matrix.is_some() => {
                    views.push(JournalView::held(
                        "delivery-inbox",
                        route,
                        (held_from, inbox.held()),
                        staged_bound(inbox.held()),
                        Some(format!(
                            "the newest MAPPING_STAGED_KEPT_MAX ({MAPPING_STAGED_KEPT_MAX}) staged versions of the mapping"
                        )),
                    ));
                }
                Role::Destination(inbox) if state.install.class == Class::Ordered => {
                    let newest = inbox.held();
                    let (bound, kept) = match fed.get(route) {
                        Some(&least) => (
                            inbox_bound(least, newest),
                            if least < newest.saturating_sub(1) {
                                format!(
                                    "not yet taken into a durable batch by every model fed by the route (the lowest fed position is {least})"
                                )
                            } else {
                                "the newest value".to_owned()
                            },
                        ),
                        None => (
                            0,
                            "no active model is fed by the route: nothing has taken its values"
                                .to_owned(),
                        ),
                    };
                    views.push(JournalView::held(
                        "delivery-inbox",
                        route,
                        (held_from, newest),
                        bound,
                        Some(kept),
                    ));
                }
                Role::Destination(_) => {}
            }
        }
        views
    }

    /// Purges the values of `route`'s Ordered inbox here up to `fed` — the lowest
    /// position every model fed by the route took into a durable batch — keeping the
    /// newest, when at least `at_least` (≥ 1) would go; at most
    /// `CHECKPOINT_PURGE_ENTRIES_MAX` per call. `None`: nothing purged.
    pub fn purge_inbox(&self, route: &str, fed: u64, at_least: u64) -> Option<Bounded> {
        let held = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            match routes.get(route) {
                Some(RouteState {
                    install,
                    role: Role::Destination(inbox),
                }) if install.class == Class::Ordered => inbox.held(),
                _ => return None,
            }
        };
        let bound = inbox_bound(fed, held);
        if bound < self.held_from(route).saturating_add(at_least.max(1) - 1) {
            return None;
        }
        let (purged, held_from) = self.purge_below(route, bound, &self.ks.inbox);
        (purged > 0).then(|| Bounded {
            route: route.to_owned(),
            checkpoint: None,
            purged,
            held_from,
        })
    }

    /// Purges, at every mapping this host is a destination of, the staged versions the
    /// newest `MAPPING_STAGED_KEPT_MAX` supersede — at most `CHECKPOINT_PURGE_ENTRIES_MAX`
    /// per mapping per call. A version applied to a model is not needed here: its value
    /// is in the model's batches and checkpoint.
    pub fn purge_staged(&self) -> Vec<Bounded> {
        let mut done = Vec::new();
        for (route, held) in self.staged_mappings() {
            let bound = staged_bound(held);
            if bound < self.held_from(&route) {
                continue;
            }
            let (purged, held_from) = self.purge_below(&route, bound, &self.ks.inbox);
            done.push(Bounded {
                route,
                checkpoint: None,
                purged,
                held_from,
            });
        }
        done
    }

    /// Removes `route`'s entries of `keyspace` from its purge position through `bound`
    /// (at most `CHECKPOINT_PURGE_ENTRIES_MAX`) with the new position, in one synced
    /// write: how many went and the lowest position held after.
    fn purge_below(&self, route: &str, bound: u64, keyspace: &fjall::Keyspace) -> (u64, u64) {
        let held_from = self.held_from(route);
        if bound < held_from {
            return (0, held_from);
        }
        let until = bound.min(held_from.saturating_add(CHECKPOINT_PURGE_ENTRIES_MAX as u64 - 1));
        let mut write = self.database.batch();
        let mut purged = 0;
        for guard in keyspace.range(key(route, held_from)..=key(route, until)) {
            let k = guard
                .key()
                .unwrap_or_else(|e| fatal(&self.dir, "reading a route's journal", e));
            write.remove(keyspace, k.to_vec());
            purged += 1;
        }
        let next = until + 1;
        write.insert(&self.ks.purged, route, next.to_be_bytes());
        self.database
            .commit_or_stop(write, &self.dir, "purging a route's journal");
        crate::metrics::checkpoint_purged(purged);
        (purged, next)
    }
}

/// The newest publication a checkpoint of `outbox` now would purge through: below the
/// oldest one still owed and below the newest.
fn floor_of(outbox: &Outbox) -> u64 {
    let position = outbox.published();
    outbox
        .oldest_retained()
        .map_or(position, |oldest| oldest - 1)
        .min(position.saturating_sub(1))
}

/// The newest staged version of a mapping a purge may remove, `held` the newest staged:
/// below the newest `MAPPING_STAGED_KEPT_MAX`.
fn staged_bound(held: u64) -> u64 {
    held.saturating_sub(MAPPING_STAGED_KEPT_MAX)
}

/// The newest inbox value a purge may remove: taken by every model fed by the route
/// (`fed`, the lowest of their fed positions) and below the newest held (`held`).
fn inbox_bound(fed: u64, held: u64) -> u64 {
    fed.min(held.saturating_sub(1))
}
