//! Publications waiting for their membership's capacity (profile
//! `shared-memberships`, docs/memberships.md): one writer serving several memberships
//! never stalls one membership on another's capacity.
//!
//! A model batch of a model serving several memberships stages each publication as
//! usual when its route admits it. When the route's outbox or its membership's Ordered
//! pool is full — or the route already has publications waiting — the value is
//! journaled instead in `delivery-deferred` (`NAME \0 SEQ(be64)` → 8 value bytes), in
//! the batch's own write: the frozen value, never recomputed, so a model the other
//! membership updated meanwhile publishes what this batch computed. The host's feeder
//! stages them in order as capacity frees ([`Delivery::release_deferred`]; a receipt
//! applied wakes it while any wait), each taking
//! the route's next position under the publishing right confirmed then; the key is
//! removed in the write that stages it, so each is published exactly once.
//! At most `DEFERRED_PER_ROUTE_MAX` wait per route: beyond it the batch is refused.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fjall::OwnedWriteBatch;

use super::{Delivery, Role, RouteState, key, position_of, prefix, publisher};
use crate::delivery::ordered::DeliveryError;
use crate::delivery::receipts::Class;
use crate::limits::DEFERRED_PER_ROUTE_MAX;

/// What became of one publication of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staged {
    /// Staged at this position (pushed once the write is durable).
    At(u64),
    /// Journaled to wait for capacity; staged later by the feeder.
    Deferred,
}

/// Whether an outbox refusal is a full capacity (worth waiting for), not a fault.
fn is_capacity(e: &DeliveryError) -> bool {
    matches!(
        e,
        DeliveryError::DestinationCapacityExhausted { .. }
            | DeliveryError::PublisherCapacityExhausted { .. }
    )
}

impl Delivery {
    /// Stages every publication of one batch of a model serving several memberships:
    /// each route independently — staged when it admits it, else deferred. Refused,
    /// changing nothing, on a malformed value, a route not published here, or a route
    /// already holding `DEFERRED_PER_ROUTE_MAX` deferred publications.
    pub(super) fn stage_isolated(
        &self,
        publications: &[(String, f64, u64)],
        write: &mut OwnedWriteBatch,
    ) -> Result<Vec<Staged>, String> {
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        // Decide first (nothing changes), then act: all or none.
        let mut taken: BTreeMap<String, u64> = BTreeMap::new();
        let mut plan = Vec::with_capacity(publications.len());
        for (route, value, _) in publications {
            crate::delivery::ordered::value_payload(route, *value).map_err(|e| e.to_string())?;
            let Some((install, p)) = publisher(&routes, route) else {
                return Err(format!("route `{route}` is not published here"));
            };
            let waiting = !p.deferred.is_empty();
            let outbox_full = match p.outbox.admit(&install.cohort()) {
                Ok(_) => false,
                Err(e) if is_capacity(&e) => true,
                Err(e) => return Err(e.to_string()),
            };
            let pool_full = install.class == Class::Ordered && {
                let membership = &install.membership;
                let more = taken.get(membership).copied().unwrap_or(0) + 1;
                self.admit_host(&routes, route, more).is_err()
            };
            let defer = waiting || outbox_full || pool_full;
            if defer && p.deferred.len() >= DEFERRED_PER_ROUTE_MAX {
                return Err(format!(
                    "route `{route}`: {} publications already wait for capacity in membership `{}` (DEFERRED_PER_ROUTE_MAX = {DEFERRED_PER_ROUTE_MAX}); its destinations must receipt before this model takes more",
                    p.deferred.len(),
                    install.membership
                ));
            }
            if !defer && install.class == Class::Ordered {
                *taken.entry(install.membership.clone()).or_default() += 1;
            }
            plan.push(defer);
        }
        // Every staged publication was admitted above, and nothing else publishes
        // while this lock is held: none of these fails.
        let mut staged = Vec::with_capacity(publications.len());
        for ((route, value, epoch), defer) in publications.iter().zip(plan) {
            if !defer {
                let position = self.stage_locked(&mut routes, route, *value, *epoch, write)?;
                staged.push(Staged::At(position));
                continue;
            }
            let Some(RouteState {
                role: Role::Publisher(p),
                ..
            }) = routes.get_mut(route)
            else {
                unreachable!("checked above");
            };
            let seq = p.deferred.back().map_or(1, |(s, _)| s + 1);
            p.deferred.push_back((seq, *value));
            self.deferred_waiting.fetch_add(1, Ordering::Relaxed);
            write.insert(&self.ks.deferred, key(route, seq), value.to_be_bytes());
            tracing::info!(%route, seq, "publication deferred: its membership's capacity is full");
            staged.push(Staged::Deferred);
        }
        Ok(staged)
    }

    /// Stages, in order, the deferred publications each route now admits, under the
    /// publishing right confirmed now (blocking: the host's feeder thread, which holds
    /// the host's lock, so every deferred value in memory is durable). Adds them to
    /// `write` and returns the (route, position)s to settle once it is durable.
    pub fn release_deferred(self: &Arc<Self>, write: &mut OwnedWriteBatch) -> Vec<(String, u64)> {
        // Nothing waits (the common case, every feeder round): no scan of the routes.
        if self.deferred_waiting.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let waiting: Vec<String> = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            routes
                .iter()
                .filter(|(_, r)| matches!(&r.role, Role::Publisher(p) if !p.deferred.is_empty()))
                .map(|(name, _)| name.clone())
                .collect()
        };
        let mut released = Vec::new();
        for route in waiting {
            let epoch = match self.check_right_blocking(&route) {
                Ok(epoch) => epoch,
                Err(reason) => {
                    tracing::warn!(%route, %reason, "deferred publications wait: no publishing right");
                    continue;
                }
            };
            let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                let front = match routes.get(&route) {
                    Some(RouteState {
                        role: Role::Publisher(p),
                        ..
                    }) => p.deferred.front().copied(),
                    _ => None,
                };
                let Some((seq, value)) = front else { break };
                // Refused (nothing changed) while the route or its pool is still full.
                let Ok(position) = self.stage_locked(&mut routes, &route, value, epoch, write)
                else {
                    break;
                };
                if let Some(RouteState {
                    role: Role::Publisher(p),
                    ..
                }) = routes.get_mut(&route)
                {
                    p.deferred.pop_front();
                    self.deferred_waiting.fetch_sub(1, Ordering::Relaxed);
                }
                write.remove(&self.ks.deferred, key(&route, seq));
                released.push((route.clone(), position));
            }
        }
        released
    }

    /// A receipt was applied: when publications wait for capacity, the host's feeder is
    /// woken to stage what now fits (instead of at its next round, up to a second).
    pub(super) fn wake_if_deferred(&self) {
        if self.deferred_waiting.load(Ordering::Relaxed) > 0 {
            self.wake();
        }
    }

    /// The deferred publications of `route` in the store, in order (recovery).
    pub(super) fn recover_deferred(
        &self,
        route: &str,
    ) -> Result<std::collections::VecDeque<(u64, f64)>, String> {
        let mut deferred = std::collections::VecDeque::new();
        for guard in self.ks.deferred.prefix(prefix(route)) {
            let (k, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let seq = position_of(&k, route).ok_or_else(|| {
                format!("route `{route}`: a deferred publication's key does not decode")
            })?;
            let value = <[u8; 8]>::try_from(v.as_ref())
                .map(f64::from_be_bytes)
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| {
                    format!("route `{route}`: deferred publication {seq} does not decode")
                })?;
            deferred.push_back((seq, value));
        }
        Ok(deferred)
    }
}
