//! The destination side: accepting a push (opened, checked, stored durably) and the
//! signed receipt of the durable state; the signal that feeds the host's models.

use std::time::Duration;

use super::{Delivery, Role, RouteState, key, matrix_of};
use crate::custody::seal::{open_payload, open_value};
use crate::delivery::api::{Push, PushReply, WirePayload};
use crate::delivery::ordered::{Accepted, Delivery as Value};
use crate::delivery::receipts::{Class, Receipt};
use crate::limits::{MAPPING_PUSH_MATRICES_MAX, PUSH_DELIVERIES_MAX};
use crate::store::{Failpoint, fatal};

impl Delivery {
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
            if let Some(geometry) = install.matrix {
                if push.deliveries.len() > MAPPING_PUSH_MATRICES_MAX {
                    return refused(format!(
                        "a push of a mapping carries at most MAPPING_PUSH_MATRICES_MAX ({MAPPING_PUSH_MATRICES_MAX}) matrices"
                    ));
                }
                for d in &push.deliveries {
                    let WirePayload::Sealed(sealed) = &d.payload else {
                        return refused(format!(
                            "mapping `{}` is encrypted: matrix {} arrived unsealed",
                            install.name, d.position
                        ));
                    };
                    // Opened and decoded whole before any typed value exists; a
                    // refusal stores nothing, so the publisher keeps its obligation.
                    let opened = self.custody.open_sealed(|secret| {
                        open_payload(
                            secret,
                            &install.name,
                            &install.membership,
                            d.position,
                            sealed,
                        )
                    });
                    let checked = opened
                        .map_err(|e| e.to_string())
                        .and_then(|payload| matrix_of(geometry, &payload).map(|_| payload));
                    let payload = match checked {
                        Ok(payload) => payload,
                        Err(reason) => {
                            // Recorded (synced) without holding the routes.
                            let route = install.name.clone();
                            drop(routes);
                            return refused(self.matrix_refused(&route, d.position, &reason));
                        }
                    };
                    let stored = serde_json::to_vec(sealed).expect("sealed values serialize");
                    values.push((d, payload, stored));
                }
            }
            for d in push.deliveries.iter().filter(|_| install.matrix.is_none()) {
                let (value, stored) = match (&d.payload, install.encrypted) {
                    (WirePayload::Sealed(sealed), true) => {
                        match self.custody.open_sealed(|secret| {
                            open_value(
                                secret,
                                &install.name,
                                &install.membership,
                                d.position,
                                sealed,
                            )
                        }) {
                            Ok(v) => (
                                v,
                                serde_json::to_vec(sealed).expect("sealed values serialize"),
                            ),
                            Err(e) => return refused(format!("value {}: {e}", d.position)),
                        }
                    }
                    (WirePayload::Plain(hex), false) => {
                        let bytes = match hex::decode(hex).map_err(|e| e.to_string()) {
                            Ok(b) => b,
                            Err(e) => return refused(format!("value {}: {e}", d.position)),
                        };
                        match crate::delivery::ordered::payload_value(&install.name, &bytes) {
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
                values.push((d, value.to_be_bytes().to_vec(), stored));
            }
            // A full disk refuses values it would store, before any is taken (the
            // publisher pushes them again later); values already held are receipted.
            if push.deliveries.iter().any(|d| d.position > inbox.held())
                && let Some(reason) = crate::store::usage::full(&self.dir)
            {
                return refused(reason);
            }
            let mut write = self.database.batch();
            let mut stored_any = false;
            for (d, payload, stored) in values {
                let before = inbox.held();
                let taken = inbox.accept(&Value {
                    position: d.position,
                    previous: d.previous,
                    payload,
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
        if stored {
            self.failpoints.abort_if_armed(Failpoint::InboxAfterCommit);
        }
        if stored {
            *self.stored.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            self.stored.1.notify_all();
        }
        PushReply::Receipt {
            receipt: self
                .custody
                .with_signing_key(|key, generation| Receipt::sign(&body, key, generation)),
        }
    }

    /// Waits until a push stored values (or `timeout`): the host then feeds its models.
    /// Wakes the host's feeder now (an export installed has values to carry).
    pub fn wake(&self) {
        *self.stored.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.stored.1.notify_all();
    }

    pub fn wait_stored(&self, seen: u64, timeout: Duration) -> u64 {
        let guard = self.stored.0.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = self
            .stored
            .1
            .wait_timeout_while(guard, timeout, |n| *n == seen)
            .unwrap_or_else(|p| p.into_inner());
        *guard
    }
}
