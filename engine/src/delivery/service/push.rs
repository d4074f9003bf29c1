//! The publisher's pushers: one task per destination of a route, carrying durable
//! positions (sealed on encrypted routes, many values under one encapsulation:
//! `custody/seal_context.rs`) and applying the signed receipts that come back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::{Delivery, Role, RouteState, key, named_key, publisher};
use crate::custody::seal_context::SealContext;
use crate::delivery::api::{Push, PushReply, RouteInstall, WireDelivery, WirePayload};
use crate::delivery::ordered::{Delivery as Value, ReceiptOutcome};
use crate::delivery::receipts::Receipt;
use crate::limits::{
    MAPPING_PUSH_MATRICES_MAX, PUSH_BACKOFF_MAX, PUSH_DELIVERIES_MAX, PUSH_TIMEOUT,
};
use crate::store::{Failpoint, fatal};
use crate::transport::{PeerClient, PeerError};

impl Delivery {
    /// Pushers for every destination of `route` not in `running`.
    pub(super) fn spawn_pushers(self: &Arc<Self>, route: &str, running: &[String]) {
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

    /// What to push to `destination` next (durable positions only), sealed on
    /// encrypted routes under `context` (made afresh when there is none, or it no
    /// longer serves the destination's mail key: full, old or rotated); with the
    /// route's wake signal.
    pub(super) fn next_push(
        &self,
        route: &str,
        destination: &str,
        context: &mut Option<SealContext>,
    ) -> Option<(RouteInstall, Vec<WireDelivery>, Arc<Notify>)> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let (install, p) = publisher(&routes, route)?;
        let most = match install.matrix {
            Some(_) => MAPPING_PUSH_MATRICES_MAX,
            None => PUSH_DELIVERIES_MAX,
        };
        let next: Vec<Value> = p.outbox.next_through(destination, most, p.durable());
        let install = install.clone();
        let wake = p.wake.clone();
        drop(routes);
        // The destination's keys as its membership last published them: a rotated
        // mail key is sealed to at once.
        let mail = install
            .destination(destination)
            .and_then(|d| crate::custody::mail_key_of(&self.custody.peer_keys(&d.host, &d.keys)));
        let mut deliveries = Vec::with_capacity(next.len());
        for d in next {
            let payload = if install.encrypted {
                let mail = mail.as_ref()?;
                if !context
                    .as_ref()
                    .is_some_and(|c| c.serves(mail, Instant::now()))
                {
                    *context = Some(SealContext::new(mail).ok()?);
                }
                let sealing = context.as_mut()?;
                // The outbox holds checked payloads only: a scalar's 8 bytes of a
                // finite f64, a mapping's GRDX.
                let sealed = sealing
                    .seal_payload(route, &install.membership, d.position, &d.payload)
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

    pub(super) async fn push_loop(self: Arc<Self>, route: String, destination: String) {
        let mut client: Option<PeerClient> = None;
        let mut backoff = Duration::from_millis(50);
        let mut sealing: Option<SealContext> = None;
        loop {
            let Some((install, deliveries, wake)) =
                self.next_push(&route, &destination, &mut sealing)
            else {
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
                        retry_later(
                            &route,
                            &destination,
                            &e.to_string(),
                            "push: cannot reach the destination",
                            &mut backoff,
                        )
                        .await;
                        continue;
                    }
                }
            }
            let push = Push {
                route: route.clone(),
                deliveries,
            };
            let path = format!("/delivery/{}/push", install.membership);
            tracing::debug!(route, destination, values = push.deliveries.len(), "push");
            let reply: Result<PushReply, PeerError> = client
                .as_ref()
                .expect("just built")
                .post(&path, &push, PUSH_TIMEOUT)
                .await;
            match reply {
                Ok(PushReply::Receipt { receipt }) => {
                    self.failpoints
                        .abort_if_armed(Failpoint::ReceiptBeforeRecord);
                    match self.record_receipt(&route, &destination, &receipt) {
                        Ok(()) => {
                            backoff = Duration::from_millis(50);
                            self.wake_if_deferred();
                        }
                        Err(reason) => {
                            retry_later(
                                &route,
                                &destination,
                                &reason,
                                "push: receipt not applied",
                                &mut backoff,
                            )
                            .await;
                        }
                    }
                }
                Ok(PushReply::Refused { reason }) => {
                    retry_later(
                        &route,
                        &destination,
                        &reason,
                        "push refused by the destination",
                        &mut backoff,
                    )
                    .await;
                }
                Err(e) => {
                    if matches!(e, PeerError::NotSent(_)) {
                        client = None;
                    }
                    retry_later(
                        &route,
                        &destination,
                        &e.to_string(),
                        "push failed",
                        &mut backoff,
                    )
                    .await;
                }
            }
        }
    }

    /// Applies a destination's signed receipt (verified with its public key of the
    /// receipt's generation) and records it when it released something.
    pub(super) fn record_receipt(
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
        // The destination's key read (the key book reads files) and the signature
        // verified before the routes' lock is taken: publishes wait for neither.
        let recorded = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            let Some((install, _)) = publisher(&routes, route) else {
                return Err("the route is no longer published here".to_owned());
            };
            install.destination(destination).cloned()
        };
        let key_of = recorded
            .and_then(|d| {
                crate::custody::signing_key_of(
                    &self.custody.peer_keys(&d.host, &d.keys),
                    receipt.generation,
                )
            })
            .ok_or_else(|| {
                format!(
                    "no public signing key of generation {} is known for `{destination}`",
                    receipt.generation
                )
            })?;
        let verified = receipt.verified(&key_of).map_err(|e| e.to_string())?;
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let Some(RouteState {
            role: Role::Publisher(p),
            ..
        }) = routes.get_mut(route)
        else {
            return Err("the route is no longer published here".to_owned());
        };
        let mut released = p
            .outbox
            .apply_verified(verified)
            .map_err(|e| e.to_string())?;
        // At or below the newest checkpoint's floor the journal may be purged: the
        // newest value is sent again instead (docs/storage.md, "Delivery").
        if released.outcome == ReceiptOutcome::Conflated && receipt.body.highest_position > p.floor
        {
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
            p.receipted.notify_waiters();
            // Lazily durable: a lost receipt only resends values answered as duplicates.
            self.ks
                .receipts
                .insert(
                    named_key(route, destination),
                    serde_json::to_vec(receipt).expect("receipts serialize"),
                )
                .unwrap_or_else(|e| fatal(&self.dir, "recording a receipt", e));
        }
        crate::metrics::receipt_recorded();
        tracing::debug!(
            route,
            destination,
            position = receipt.body.highest_position,
            "receipt recorded"
        );
        Ok(())
    }
}

/// One retry of a push loop: counted, logged with why and when, then waited out with
/// the backoff doubled (at most `PUSH_BACKOFF_MAX`).
async fn retry_later(
    route: &str,
    destination: &str,
    reason: &str,
    what: &str,
    backoff: &mut Duration,
) {
    crate::metrics::push_retried();
    tracing::warn!(
        route,
        destination,
        reason,
        retry_in_ms = backoff.as_millis() as u64,
        "{what}"
    );
    tokio::time::sleep(*backoff).await;
    *backoff = (*backoff * 2).min(PUSH_BACKOFF_MAX);
}
