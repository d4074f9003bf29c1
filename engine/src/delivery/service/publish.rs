//! Publishing: the publishing right (a claim at the authority, confirmed by a
//! linearizable read), staging publications into the outbox and its records, the
//! host-wide Ordered capacity, and settling positions once durable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fjall::OwnedWriteBatch;

use super::{Delivery, Gate, ORDERED_PER_HOST_DEFAULT, Role, RouteState, key};
use crate::authority::claims::ClaimState;
use crate::authority::service::{AuthorityCall, AuthorityReply};
use crate::delivery::api::RouteInstall;
use crate::delivery::ordered::DeliveryError;
use crate::delivery::receipts::Class;
use crate::store::{Failpoint, fatal};

impl Delivery {
    /// The publishing right: claim `route:R` held by this host, confirmed by a
    /// linearizable read that began after this publish arrived.
    pub(super) async fn check_right(
        &self,
        install: &RouteInstall,
        gate: &Gate,
    ) -> Result<u64, String> {
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
    pub(super) fn publishing(&self, route: &str) -> Result<(RouteInstall, Arc<Gate>), String> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        match routes.get(route) {
            Some(RouteState {
                install,
                role: Role::Publisher(p),
            }) => Ok((install.clone(), p.gate.clone())),
            Some(r) => Err(format!(
                "host `{}` is a destination of {} `{route}`; its publisher is `{}`",
                self.host,
                r.install.kind(),
                r.install.publisher
            )),
            None => Err(format!("host `{}` holds no route `{route}`", self.host)),
        }
    }

    /// Publishes one value; returns its position once it is durable.
    pub async fn publish(self: &Arc<Self>, route: &str, value: f64) -> Result<u64, String> {
        crate::delivery::ordered::value_payload(route, value).map_err(|e| e.to_string())?;
        let (install, gate) = self.publishing(route)?;
        let epoch = self.check_right(&install, &gate).await?;
        // A full disk refuses the value before anything is written (docs/storage.md).
        if let Some(reason) = crate::store::usage::full(&self.dir) {
            return Err(reason);
        }
        let mut write = self.database.batch();
        let position = self.stage(route, value, epoch, &mut write)?;
        self.make_durable(route, position, write).await;
        Ok(position)
    }

    /// Publishes one whole matrix on mapping `route` (GRDX `bytes`, decoded and
    /// checked against the mapping's geometry before anything else); returns its
    /// position (the version) once it is durable.
    /// Under operation id `op` it publishes once: the same id answers its position
    /// again (a lost reply is asked again, never published twice).
    pub async fn publish_matrix(
        self: &Arc<Self>,
        route: &str,
        bytes: &[u8],
        op: Option<&str>,
    ) -> Result<u64, String> {
        let matrix = crate::grdx::Matrix::decode(bytes)
            .map_err(|e| format!("mapping `{route}`: {e}; nothing was published"))?;
        if let Some(op) = op
            && (op.is_empty() || op.len() > crate::limits::OPERATION_ID_LENGTH_MAX)
        {
            return Err(format!(
                "an operation id is 1 to OPERATION_ID_LENGTH_MAX ({}) bytes; nothing was published",
                crate::limits::OPERATION_ID_LENGTH_MAX
            ));
        }
        if let Some(op) = op
            && let Some(position) = self.matrix_published(op, route, bytes)?
        {
            return Ok(position);
        }
        let (install, gate) = self.publishing(route)?;
        let Some(geometry) = install.matrix else {
            return Err(format!(
                "`{route}` is a route: it carries scalar values (gridctl publish), not matrices"
            ));
        };
        if (matrix.rows(), matrix.cols()) != (geometry.rows, geometry.cols) {
            return Err(format!(
                "mapping `{route}` carries {} × {} matrices; this one is {} × {}; nothing was published",
                geometry.rows,
                geometry.cols,
                matrix.rows(),
                matrix.cols()
            ));
        }
        let epoch = self.check_right(&install, &gate).await?;
        if let Some(reason) = crate::store::usage::full(&self.dir) {
            return Err(reason);
        }
        let mut write = self.database.batch();
        let position = {
            let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            // Asked again while the first is on its way: only the first publishes.
            if let Some(op) = op {
                if let Some(position) = self.matrix_published(op, route, bytes)? {
                    return Ok(position);
                }
                self.matrix_op_begins(op)?;
            }
            // `bytes` decoded exactly to `matrix`: they are its encoding already.
            let staged = self.stage_payload(&mut routes, route, bytes.to_vec(), epoch, &mut write);
            match (staged, op) {
                (Ok(position), Some(op)) => {
                    self.record_matrix_op(op, route, position, bytes, &mut write);
                    position
                }
                (Ok(position), None) => position,
                (Err(reason), op) => {
                    op.inspect(|op| self.matrix_op_ends(op));
                    return Err(reason);
                }
            }
        };
        self.make_durable(route, position, write).await;
        if let Some(op) = op {
            self.matrix_op_ends(op);
        }
        Ok(position)
    }

    /// Commits and syncs a staged publication, then lets pushes carry it.
    async fn make_durable(&self, route: &str, position: u64, write: OwnedWriteBatch) {
        write
            .commit()
            .unwrap_or_else(|e| fatal(&self.dir, "committing a publication", e));
        if let Err(e) = self.syncer.sync().await {
            fatal(&self.dir, "syncing a publication", e);
        }
        self.failpoints
            .abort_if_armed(Failpoint::PublishAfterCommit);
        self.settle(route, position);
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

    /// What the Ordered routes of `membership` this host publishes retain together (its
    /// pool's use).
    pub(super) fn ordered_retained(
        &self,
        routes: &BTreeMap<String, RouteState>,
        membership: &str,
    ) -> u64 {
        routes
            .values()
            .filter_map(|r| match &r.role {
                Role::Publisher(p)
                    if r.install.class == Class::Ordered
                        && r.install.matrix.is_none()
                        && r.install.membership == membership =>
                {
                    Some(p.outbox.retained())
                }
                _ => None,
            })
            .sum()
    }

    /// The Ordered capacity of the route's membership on this host: `more`
    /// publications on `route` (if Ordered) fit beside what every Ordered route of the
    /// same membership retains — another membership's routes never count against it.
    pub(super) fn admit_host(
        &self,
        routes: &BTreeMap<String, RouteState>,
        route: &str,
        more: u64,
    ) -> Result<(), String> {
        let membership = match routes.get(route) {
            // A mapping's capacity is its own outbox's (MAPPING_RETAINED_MAX).
            Some(RouteState {
                install,
                role: Role::Publisher(_),
            }) if install.class == Class::Ordered && install.matrix.is_none() => {
                install.membership.as_str()
            }
            _ => return Ok(()),
        };
        let retained = self.ordered_retained(routes, membership);
        let capacity = self.capacities.ordered_per_host(membership);
        if retained + more > capacity {
            return Err(format!(
                "route `{route}`: Ordered capacity exhausted for host `{}` in membership `{membership}`: its Ordered routes there retain {retained} publications not yet receipted by their whole cohort (ordered-per-host = {capacity}; default ORDERED_PER_HOST_DEFAULT = {ORDERED_PER_HOST_DEFAULT}); nothing was published, nothing dropped",
                self.host
            ));
        }
        Ok(())
    }

    pub(super) fn stage_locked(
        &self,
        routes: &mut BTreeMap<String, RouteState>,
        route: &str,
        value: f64,
        epoch: u64,
        write: &mut OwnedWriteBatch,
    ) -> Result<u64, String> {
        let payload =
            crate::delivery::ordered::value_payload(route, value).map_err(|e| e.to_string())?;
        if routes
            .get(route)
            .is_some_and(|r| r.install.matrix.is_some())
        {
            return Err(format!(
                "`{route}` is a mapping: it carries whole matrices (gridctl publish-matrix), never a scalar"
            ));
        }
        self.stage_payload(routes, route, payload.to_vec(), epoch, write)
    }

    /// Stages one checked payload on `route` (see [`Delivery::stage`]).
    fn stage_payload(
        &self,
        routes: &mut BTreeMap<String, RouteState>,
        route: &str,
        payload: Vec<u8>,
        epoch: u64,
        write: &mut OwnedWriteBatch,
    ) -> Result<u64, String> {
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
            .publish(payload.clone(), &cohort)
            .map_err(|e| match (e, install.matrix) {
                // A mapping's capacity is its own, and says so in its own words.
                (
                    DeliveryError::PublisherCapacityExhausted { .. }
                    | DeliveryError::DestinationCapacityExhausted { .. },
                    Some(_),
                ) => format!(
                    "mapping `{route}`: capacity exhausted: {} matrices not yet receipted by every destination (MAPPING_RETAINED_MAX); nothing was published, nothing dropped",
                    crate::limits::MAPPING_RETAINED_MAX
                ),
                (e, _) => e.to_string(),
            })?;
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

    /// Stages several publications at once (a model batch publishing on several
    /// routes). A model serving one membership: all or none — every outbox and every
    /// membership's Ordered pool must admit its publications before any is published.
    /// A model serving several (`isolate`): each route on its own, deferred where it
    /// does not admit (`deferred.rs`), so one membership's capacity never refuses the
    /// other's publications.
    pub fn stage_all(
        &self,
        publications: &[(String, f64, u64)],
        isolate: bool,
        write: &mut OwnedWriteBatch,
    ) -> Result<Vec<super::Staged>, String> {
        if isolate {
            return self.stage_isolated(publications, write);
        }
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        {
            // Ordered publications per membership: each pool admits its own.
            let mut by_membership: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
            for (route, value, _) in publications {
                crate::delivery::ordered::value_payload(route, *value)
                    .map_err(|e| e.to_string())?;
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
                if install.class == Class::Ordered {
                    by_membership
                        .entry(install.membership.as_str())
                        .or_insert((route.as_str(), 0))
                        .1 += 1;
                }
            }
            for (route, more) in by_membership.values() {
                self.admit_host(&routes, route, *more)?;
            }
        }
        // Every outbox and pool admits its publications, and nothing else publishes
        // while this lock is held: none of these fails.
        publications
            .iter()
            .map(|(route, value, epoch)| {
                self.stage_locked(&mut routes, route, *value, *epoch, write)
                    .map(super::Staged::At)
            })
            .collect()
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
}
