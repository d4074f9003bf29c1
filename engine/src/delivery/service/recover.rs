//! Opening a route's state from the store: the publisher's outbox from its installed
//! checkpoint (if any), then the published sequence after it with its cohorts, then
//! the recorded receipts newer than the checkpoint's; a destination's inbox from its
//! record.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Notify;

use super::checkpoint::{PublisherState, ROOM};
use super::{Delivery, Gate, Publishing, Role, RouteState, key, position_of, prefix};
use crate::delivery::api::RouteInstall;
use crate::delivery::ordered::{Capacity, Inbox, Outbox};
use crate::delivery::receipts::Receipt;

fn capacity_for_replay(configured: Capacity) -> Capacity {
    // Replaying the whole sequence before its receipts would exceed the Ordered
    // capacity the publications were admitted under; it is restored after.
    Capacity {
        ordered_per_destination: u64::MAX,
        ordered_per_publisher: u64::MAX,
        ..configured
    }
}

impl Delivery {
    pub(super) fn recover(&self) -> Result<(), String> {
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

    /// Each publication of route `name` from `from` through `to` in the journal, in
    /// order: its position and payload (what follows the epoch).
    fn publications(
        &self,
        name: &str,
        from: u64,
        to: u64,
        mut each: impl FnMut(u64, &[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        for guard in self.ks.published.range(key(name, from)..=key(name, to)) {
            let (k, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let position = position_of(&k, name)
                .ok_or_else(|| format!("route `{name}`: a publication key is malformed"))?;
            let payload = v
                .get(8..)
                .ok_or_else(|| format!("route `{name}`: publication {position} is truncated"))?;
            each(position, payload)?;
        }
        Ok(())
    }

    pub(super) fn recover_outbox(&self, install: &RouteInstall) -> Result<Publishing, String> {
        let name = &install.name;
        let damaged = |detail: String| format!("route `{name}`: {detail}");
        let configured = self.capacities.of(install);
        let (mut outbox, checkpointed, floor) = match self.checkpoints.installed(ROOM, name)? {
            Some(checkpoint) => {
                let state: PublisherState =
                    serde_json::from_slice(&checkpoint.state).map_err(|e| {
                        damaged(format!(
                            "its checkpoint at position {} does not decode ({e}); the publications it covered may be purged, so it is never read past",
                            checkpoint.position
                        ))
                    })?;
                let mut outbox = state.outbox;
                if outbox.published() != checkpoint.position
                    || outbox.route() != name.as_str()
                    || outbox.class() != install.class
                {
                    return Err(damaged(format!(
                        "its checkpoint at position {} holds an outbox of `{}` at position {}",
                        checkpoint.position,
                        outbox.route(),
                        outbox.published()
                    )));
                }
                outbox
                    .set_capacity(capacity_for_replay(configured))
                    .map_err(|e| e.to_string())?;
                // The payloads it retains: in the journal after its floor (never purged).
                self.publications(
                    name,
                    state.floor.saturating_add(1),
                    checkpoint.position,
                    |position, payload| {
                        outbox.reinstate(position, payload.to_vec());
                        Ok(())
                    },
                )?;
                if let Some(position) =
                    outbox.first_missing(state.floor.saturating_add(1), checkpoint.position)
                {
                    return Err(damaged(format!(
                        "publication {position} is still owed to a recipient and missing from the journal"
                    )));
                }
                (outbox, checkpoint.position, state.floor)
            }
            None => (
                Outbox::new(
                    name,
                    &install.membership,
                    install.class,
                    capacity_for_replay(configured),
                )
                .map_err(|e| e.to_string())?,
                0,
                0,
            ),
        };
        let mut cohorts: Vec<(u64, Vec<String>)> = Vec::new();
        for guard in self.ks.cohorts.prefix(prefix(name)) {
            let (k, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let first =
                position_of(&k, name).ok_or_else(|| damaged("a cohort key is malformed".into()))?;
            let recipients: Vec<String> = serde_json::from_slice(&v)
                .map_err(|e| damaged(format!("cohort {first} does not decode: {e}")))?;
            cohorts.push((first, recipients));
        }
        // Publications the checkpoint covers (a stop before their purge left them) are
        // in its outbox already.
        self.publications(
            name,
            checkpointed.saturating_add(1),
            u64::MAX,
            |position, payload| {
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
                Ok(())
            },
        )?;
        for guard in self.ks.receipts.prefix(prefix(name)) {
            let (_, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let receipt: Receipt = serde_json::from_slice(&v)
                .map_err(|e| damaged(format!("a receipt does not decode: {e}")))?;
            let position = receipt.body.highest_position;
            if outbox
                .receipted(&receipt.body.recipient)
                .is_some_and(|held| position <= held)
            {
                continue; // the checkpoint holds it (or a newer one)
            }
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
            receipted: Arc::new(Notify::new()),
            gate: Arc::new(Gate::default()),
            checkpointed,
            floor,
            deferred: {
                let deferred = self.recover_deferred(name)?;
                self.deferred_waiting
                    .fetch_add(deferred.len() as u64, std::sync::atomic::Ordering::Relaxed);
                deferred
            },
        })
    }
}
