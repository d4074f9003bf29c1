//! The control plane's inspection of a host (`Call::Inspect`, issue 36,
//! docs/control-plane.md): its observation joined with what its rooms hold for an
//! operator to see — each authority voter's status as it reports itself (no barrier:
//! not a live quorum), its Processes' runs not finished and its own open waits, its
//! routes' positions and the newest receipt of each destination with its signature
//! checked, the records of the decisions it keeps with every signature checked. Read
//! only: asked by this host's own page in process, or by a peer's page over
//! `POST /control`, one call per explicit "Inspect now".

use std::sync::{Arc, Mutex};

use crate::authority::api::{AuthorityCall, AuthorityReply};
use crate::authority::service::Authorities;
use crate::decisions::api::{DecisionCall, DecisionReply};
use crate::delivery::api::{DeliveryCall, DeliveryReply};
use crate::host::{Handled, Host};
use crate::limits::CONTROL_PANEL_ROWS_MAX;
use crate::processes::api::{ProcessCall, ProcessReply};
use crate::protocol::Reply;

/// The rooms an inspection reads (cheap handles: cloned into each endpoint).
#[derive(Clone)]
pub struct Inspection {
    pub host: Arc<Mutex<Host>>,
    pub missions: Option<Arc<crate::missions::service::Missions>>,
    pub authorities: Authorities,
    pub delivery: Option<Arc<crate::delivery::service::Delivery>>,
    pub processes: Option<Arc<crate::processes::service::Processes>>,
    pub decisions: Option<Arc<crate::decisions::service::Decisions>>,
}

impl Inspection {
    pub fn of(started: &super::Started) -> Inspection {
        Inspection {
            host: started.host.clone(),
            missions: started.missions.clone(),
            authorities: started.authorities.clone(),
            delivery: started.delivery.clone(),
            processes: started.processes.clone(),
            decisions: started.decisions.clone(),
        }
    }

    /// Blocking (call it off the runtime's workers): the host's observation with its
    /// rooms' parts, as JSON fields beside the observation's own.
    pub fn inspect(&self) -> Handled {
        let observation = match super::observe(&self.host, self.missions.as_deref()) {
            Handled::Reply(Reply::Observation(o)) => o,
            other => return other,
        };
        let mut inspection = match serde_json::to_value(observation) {
            Ok(value) => value,
            Err(e) => {
                return Handled::Reply(Reply::Refused {
                    reason: format!("the observation did not serialize: {e}"),
                });
            }
        };
        if let Some(fields) = inspection.as_object_mut() {
            fields.insert("authorities".to_owned(), self.voters());
            if let Some(processes) = self.processes() {
                fields.insert("processes".to_owned(), processes);
            }
            if let Some((deliveries, receipts)) = self.deliveries() {
                fields.insert("deliveries".to_owned(), deliveries);
                fields.insert("receipts".to_owned(), receipts);
            }
            if let Some(records) = self.decisions(fields.get("decisions")) {
                fields.insert("decision_records".to_owned(), records);
            }
        }
        Handled::Reply(Reply::Inspection { inspection })
    }

    /// Each route at this host with its positions, receipts and values owed (profile
    /// `delivery`): what `gridctl inspect routes` reads.
    fn deliveries(&self) -> Option<(serde_json::Value, serde_json::Value)> {
        let delivery = self.delivery.as_ref()?;
        let routes = match delivery.handle_local(DeliveryCall::Routes) {
            DeliveryReply::Routes { routes, .. } => routes,
            other => {
                let status = serde_json::json!([{ "status": format!("{other:?}") }]);
                return Some((status.clone(), status));
            }
        };
        let receipts = self.receipts(delivery, &routes);
        let rows = routes
            .into_iter()
            .map(|r| {
                serde_json::json!({
                    "route": r.route.name,
                    "role": r.role,
                    "published": r.published,
                    "receipted": r.receipted,
                    "outstanding": r.outstanding,
                    "held": r.held,
                    "held_from": r.held_from,
                    "deferred": r.deferred,
                })
            })
            .collect();
        Some((serde_json::Value::Array(rows), receipts))
    }

    /// The newest receipt of every destination of each route this host publishes, its
    /// signature checked with the keys the route installed for that destination (as
    /// rotated since, from the key book): what `gridctl inspect receipts --verify`
    /// checks with the operator's copy of them.
    fn receipts(
        &self,
        delivery: &Arc<crate::delivery::service::Delivery>,
        routes: &[crate::delivery::api::RouteView],
    ) -> serde_json::Value {
        let custody = {
            let host = self.host.lock().unwrap_or_else(|p| p.into_inner());
            host.custody().clone()
        };
        let mut rows = Vec::new();
        for r in routes.iter().filter(|r| r.role == "publisher") {
            let DeliveryReply::Receipts { receipts, .. } =
                delivery.handle_local(DeliveryCall::Receipts {
                    route: r.route.name.clone(),
                })
            else {
                continue;
            };
            for receipt in receipts {
                let recipient = &receipt.body.recipient;
                let checked = match r.route.destinations.iter().find(|d| &d.host == recipient) {
                    None => Err(format!("{recipient} is no destination of the route here")),
                    Some(d) => {
                        let keys = custody.peer_keys(recipient, &d.keys);
                        match crate::custody::signing_key_of(&keys, receipt.generation) {
                            None => Err(format!(
                                "{recipient} has no signing key of generation {} here",
                                receipt.generation
                            )),
                            Some(key) => receipt
                                .verify(&key)
                                .map(|()| {
                                    format!(
                                        "verified with generation {} of {recipient}'s signing key",
                                        receipt.generation
                                    )
                                })
                                .map_err(|e| e.to_string()),
                        }
                    }
                };
                rows.push(serde_json::json!({
                    "route": r.route.name,
                    "destination": recipient,
                    "highest_position": receipt.body.highest_position,
                    "digest": hex::encode(receipt.body.digest),
                    "verified": checked.is_ok(),
                    "signature": checked.unwrap_or_else(|e| format!("NOT verified: {e}")),
                }));
            }
        }
        serde_json::Value::Array(rows)
    }

    /// What this host's processes room serves and holds (profile `processes`).
    fn processes(&self) -> Option<serde_json::Value> {
        let processes = self.processes.as_ref()?;
        match processes.handle_local(ProcessCall::Processes) {
            ProcessReply::Processes {
                processes: served,
                runs,
                mailbox_deposits,
                ..
            } => {
                let row = |r: &crate::processes::api::RunView| {
                    serde_json::json!({
                        "request": r.request,
                        "process": r.process,
                        "caller": r.caller,
                        "receiver": r.receiver,
                        "via": r.via,
                        "outcome": r.outcome.name(),
                        "detail": r.detail,
                    })
                };
                let (unfinished, count) = match processes.unfinished_runs(CONTROL_PANEL_ROWS_MAX) {
                    Ok((runs, count)) => (runs.iter().map(row).collect(), count),
                    Err(reason) => (vec![serde_json::json!({ "status": reason })], 0),
                };
                let waits: Vec<serde_json::Value> = processes
                    .open_wait_views()
                    .iter()
                    .take(CONTROL_PANEL_ROWS_MAX)
                    .map(row)
                    .collect();
                Some(serde_json::json!({
                    "served": served,
                    "runs": runs,
                    "mailbox_deposits": mailbox_deposits,
                    "unfinished": unfinished,
                    "unfinished_count": count,
                    "open_waits": waits,
                }))
            }
            other => Some(serde_json::json!({ "status": format!("{other:?}") })),
        }
    }

    /// The decisions kept at this host (profile `decisions`), one row each for every
    /// policy `installed` names: where it stands and every signature of its record
    /// checked with the keys the host holds of its signers — history, never a fresh
    /// permission.
    fn decisions(&self, installed: Option<&serde_json::Value>) -> Option<serde_json::Value> {
        let decisions = self.decisions.as_ref()?;
        let names = installed?
            .as_array()?
            .iter()
            .filter_map(|d| d.get("policy")?.get("name")?.as_str());
        let mut rows = Vec::new();
        for name in names {
            let views = match decisions.handle_local(DecisionCall::Show {
                name: name.to_owned(),
                decision: None,
            }) {
                DecisionReply::Decisions { decisions, .. } => decisions,
                other => {
                    rows.push(serde_json::json!({ "name": name, "state": format!("{other:?}") }));
                    continue;
                }
            };
            for view in views {
                let (verified, chain) = decisions.verified(&view);
                let failed: Vec<&str> = verified
                    .iter()
                    .filter(|v| !v.verified)
                    .map(|v| v.document.as_str())
                    .collect();
                let r = &view.record;
                rows.push(serde_json::json!({
                    "decision": view.id,
                    "name": view.name,
                    "state": view.state.name(),
                    "value": r.opened.value,
                    "yes": view.yes,
                    "no": view.no,
                    "ballots": r.ballots.iter().map(|b| format!("{} {}", b.member, if b.yes { "yes" } else { "no" })).collect::<Vec<_>>().join(", "),
                    "gate": r.gate.as_ref().map(|g| format!("{} {}", g.operator, if g.approve { "approved" } else { "declined" })),
                    "applied": r.applied.as_ref().map(|a| a.outcome.clone()),
                    "signatures": format!(
                        "{} of {} verified{}",
                        verified.len() - failed.len(),
                        verified.len(),
                        if failed.is_empty() { String::new() } else { format!(" (not: {})", failed.join(", ")) }
                    ),
                    "documents": verified.iter().map(|v| v.document.as_str()).collect::<Vec<_>>().join(" → "),
                    "chain": chain,
                    "expired": view.expired,
                }));
            }
        }
        Some(serde_json::Value::Array(rows))
    }

    /// What each authority voter of this host reports of itself (no barrier).
    fn voters(&self) -> serde_json::Value {
        let statuses: Vec<serde_json::Value> = self
            .authorities
            .by_membership
            .values()
            .map(|a| match a.handle_local(AuthorityCall::Status) {
                AuthorityReply::Status(status) => {
                    serde_json::to_value(status).unwrap_or(serde_json::Value::Null)
                }
                other => serde_json::json!({ "status": format!("{other:?}") }),
            })
            .collect();
        serde_json::Value::Array(statuses)
    }
}
