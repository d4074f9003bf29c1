//! `POST /control` on the transport: the host's control API for remote use, one JSON
//! call in the body and one JSON reply, handled by the host like a call on its Unix
//! socket. Ledger calls are the keeper's control socket's, with one exception: an
//! account's `owner` (the certified participant) may inspect that account
//! (`Call::Ledger {Inspect {ledger, account}}`) — what a wallet observes of its money.
//! A peer's control plane inspects this host with `Call::Inspect` (read only: the
//! observation with its rooms' parts, `super::inspection`), taken only from the
//! participants host.toml names as its `control-viewers`.

use std::sync::{Arc, Mutex};

use crate::host::{Handled, Host};
use crate::ledger::api::{LedgerCall, LedgerReply};
use crate::ledger::service::Ledgers;
use crate::limits::CONTROL_LINE_BYTES_MAX;
use crate::protocol::{Call, Reply};
use crate::transport::endpoint::{Endpoint, Inbound, Outbound, Serving};

pub struct ControlEndpoint {
    pub host: Arc<Mutex<Host>>,
    /// This host's count of `transport` calls (`grid_owner_requests`).
    pub requests: prometheus_client::metrics::counter::Counter,
    /// The host's ledgers (profile `ledger`), for an owner's read of its account.
    pub ledgers: Option<Ledgers>,
    /// The missions the host holds (profile `missions`), joined to its observation.
    pub missions: Option<Arc<crate::missions::service::Missions>>,
    /// `observe-reply` armed `slow` holds an observation's reply SLOW_DELAY.
    pub failpoints: crate::store::Failpoints,
    /// The rooms a control plane's inspection (`Call::Inspect`) reads.
    pub inspection: super::inspection::Inspection,
    /// The participants whose control plane may ask `Call::Inspect` (host.toml's
    /// `control-viewers`).
    pub viewers: Vec<String>,
}

impl ControlEndpoint {
    /// `peer` reads its own account `account` of `ledger`: refused unless the account's
    /// owner is `peer`.
    async fn owned_account(&self, peer: &str, ledger: String, account: Option<String>) -> Reply {
        let refused = |reason: String| Reply::Refused { reason };
        let Some(ledgers) = self.ledgers.clone() else {
            return refused("this host does not run the `ledger` profile".to_owned());
        };
        let Some(account) = account else {
            return refused(
                "ledger calls are taken on the host's control socket only; remotely, an account's owner inspects that account".to_owned(),
            );
        };
        let not_yours = format!(
            "account `{account}` of ledger `{ledger}` is not `{peer}`'s: only its owner reads it remotely"
        );
        if peer.is_empty() {
            return refused(not_yours);
        }
        // The account's own definition names its owner: read it once, answer it only
        // to that owner.
        let read = tokio::task::spawn_blocking(move || ledgers.inspect(&ledger, Some(&account)));
        match read.await {
            Ok(Ok(view))
                if !view.accounts.is_empty()
                    && view
                        .accounts
                        .iter()
                        .all(|a| a.definition.owner.as_deref() == Some(peer)) =>
            {
                Reply::Ledger(Box::new(LedgerReply::Inspected(Box::new(view))))
            }
            Ok(_) => refused(not_yours),
            Err(e) => refused(format!("the read did not finish: {e}")),
        }
    }
}

impl Endpoint for ControlEndpoint {
    fn families(&self) -> &'static [&'static str] {
        &["control"]
    }

    fn serves(&self, _family: &str, _what: &str) -> bool {
        true
    }

    fn body_limit(&self, _family: &str, _what: &str) -> usize {
        CONTROL_LINE_BYTES_MAX as usize
    }

    fn too_long(&self, _limit: usize) -> String {
        format!("call longer than CONTROL_LINE_BYTES_MAX ({CONTROL_LINE_BYTES_MAX} bytes)")
    }

    fn serve(&self, inbound: Inbound) -> Serving<'_> {
        let host = self.host.clone();
        let missions = self.missions.clone();
        let inspection = self.inspection.clone();
        self.requests.inc();
        Box::pin(async move {
            let call: Call = match serde_json::from_slice(&inbound.body) {
                Ok(call) => call,
                Err(e) => {
                    return Outbound::json(
                        400,
                        &Reply::Refused {
                            reason: format!("malformed call: {e}"),
                        },
                    );
                }
            };
            if let Call::Ledger {
                request: LedgerCall::Inspect { ledger, account },
            } = call
            {
                let reply = self.owned_account(&inbound.peer, ledger, account).await;
                return Outbound::json(200, &reply);
            }
            if matches!(call, Call::Inspect | Call::Storage)
                && !self.viewers.contains(&inbound.peer)
            {
                return Outbound::json(
                    200,
                    &Reply::Refused {
                        reason: format!(
                            "`{}` is no control plane of this host's files (host.toml control-viewers): its inspection is refused",
                            inbound.peer
                        ),
                    },
                );
            }
            if let Some(reason) = not_remote(&call) {
                return Outbound::json(200, &Reply::Refused { reason });
            }
            let observe = matches!(call, Call::Observe | Call::Inspect);
            // A control plane of this host's files sees the whole observation; any
            // other participant what is its own or its membership's.
            let whole = self.viewers.contains(&inbound.peer);
            let (membership, peer) = (inbound.membership.clone(), inbound.peer.clone());
            let handled = tokio::task::spawn_blocking(move || match call {
                Call::Observe if !whole => {
                    let memberships = {
                        let host = host.lock().unwrap_or_else(|p| p.into_inner());
                        crate::custody::membership::enrolled_memberships(host.dir()).len()
                    };
                    match super::observe(&host, missions.as_deref()) {
                        Handled::Reply(Reply::Observation(o)) => Handled::Reply(
                            Reply::Observation(for_peer(o, &membership, &peer, memberships)),
                        ),
                        other => other,
                    }
                }
                Call::Observe => super::observe(&host, missions.as_deref()),
                Call::Inspect => inspection.inspect(),
                call => host.lock().unwrap_or_else(|p| p.into_inner()).handle(call),
            })
            .await;
            if observe
                && self.failpoints.armed(crate::store::Failpoint::ObserveReply)
                    == Some(crate::store::failpoints::Action::Slow)
            {
                tokio::time::sleep(crate::store::failpoints::SLOW_DELAY).await;
            }
            match handled {
                Ok(Handled::Reply(reply)) => Outbound::json(200, &reply),
                // A failpoint: the operation is durable, its reply is lost.
                Ok(Handled::DropReply) | Err(_) => Outbound::Reply {
                    status: 503,
                    body: Vec::new(),
                },
            }
        })
    }
}

/// What a participant `peer` of `membership` that is no control plane of this host
/// sees of its observation (`host_memberships`: how many the host is enrolled in): the
/// host, its public keys and profiles; the models serving `membership` (named by a
/// `serve` line, or any model of a host in that one membership only) and its routes;
/// the grants issued to `peer` and the ledger accounts it owns. Not the operations
/// its operator has not acknowledged, nor tags, missions, exports, decisions or
/// staged matrices: those are the host's operator's, or another membership's.
fn for_peer(
    mut observed: crate::protocol::Observation,
    membership: &str,
    peer: &str,
    host_memberships: usize,
) -> crate::protocol::Observation {
    observed.models.retain(|m| {
        m.serves.iter().any(|s| s == membership) || (m.serves.is_empty() && host_memberships == 1)
    });
    observed.routes.retain(|r| r.membership == membership);
    observed.grants.retain(|g| g.caller == peer);
    for ledger in &mut observed.ledgers {
        ledger.accounts.retain(|a| a.owner.as_deref() == Some(peer));
    }
    observed.ledgers.retain(|l| !l.accounts.is_empty());
    observed.unacknowledged.clear();
    observed.tags.clear();
    observed.missions.clear();
    observed.exports.clear();
    observed.decisions.clear();
    observed.staged.clear();
    observed
}

/// Why `call` is not taken over `POST /control`: a peer gets the reads its tools need —
/// `observe` (`gridctl remote observe`, a wallet's owners), `storage` and `inspect` (a
/// control plane's: only from `control-viewers`, checked before) — and an
/// account's owner its ledger account (handled before). Everything else acts as this
/// host (`submit`, `acknowledge`) or reads what only its operator reads (answers,
/// values, tags, obligations, wire counters): the control socket's only, so that a
/// participant of any membership the host shares cannot change or read a model
/// another membership is served.
fn not_remote(call: &Call) -> Option<String> {
    if matches!(call, Call::Observe | Call::Inspect | Call::Storage) {
        return None;
    }
    let name = serde_json::to_value(call)
        .ok()
        .and_then(|v| v.get("call").and_then(|c| c.as_str()).map(str::to_owned))
        .unwrap_or_default();
    Some(format!(
        "`{name}` is taken on the host's control socket only: over POST /control this host answers `observe`, a control plane's `inspect` and `storage`, and an account owner's ledger `inspect`; nothing was done"
    ))
}

#[cfg(test)]
mod tests {
    use crate::protocol::{Call, Request};
    use crate::transport::endpoint::Outbound;

    #[test]
    fn a_peer_observes_only_its_own_and_its_memberships_parts() {
        let observed: crate::protocol::Observation = serde_json::from_value(serde_json::json!({
            "host": "edge",
            "models": [
                {"name": "plant", "model": "m", "retired": false, "generation": 1, "batches": 1, "serves": ["plant-ops"]},
                {"name": "boiler", "model": "m", "retired": false, "generation": 1, "batches": 1, "serves": ["plant-ops", "utility"]},
                {"name": "meter", "model": "m", "retired": false, "generation": 1, "batches": 1}
            ],
            "unacknowledged": [],
            "routes": [
                {"name": "ops-in", "membership": "plant-ops", "class": "ordered", "publisher": "site", "destinations": []},
                {"name": "util-in", "membership": "utility", "class": "ordered", "publisher": "gw", "destinations": []}
            ],
            "grants": [
                {"name": "g-gw", "caller": "gw", "allocated": 1, "reserved": 0, "consumed": 0, "surrendered": 0, "unknown": 0, "retired": false},
                {"name": "g-site", "caller": "site", "allocated": 1, "reserved": 0, "consumed": 0, "surrendered": 0, "unknown": 0, "retired": false}
            ],
            "ledgers": [
                {"name": "books", "accounts": [
                    {"name": "gw-eur", "currency": "EUR", "owner": "gw"},
                    {"name": "site-eur", "currency": "EUR", "owner": "site"}
                ]},
                {"name": "other", "accounts": [{"name": "x", "currency": "EUR"}]}
            ],
            "staged": {"map": [1, 2]}
        }))
        .unwrap();
        let seen = super::for_peer(observed.clone(), "utility", "gw", 2);
        let names = |v: Vec<&String>| v.into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(
            names(seen.models.iter().map(|m| &m.name).collect()),
            ["boiler"]
        );
        assert_eq!(
            names(seen.routes.iter().map(|r| &r.name).collect()),
            ["util-in"]
        );
        assert_eq!(
            names(seen.grants.iter().map(|g| &g.name).collect()),
            ["g-gw"]
        );
        assert_eq!(seen.ledgers.len(), 1);
        assert_eq!(
            names(seen.ledgers[0].accounts.iter().map(|a| &a.name).collect()),
            ["gw-eur"]
        );
        assert!(seen.staged.is_empty());
        assert_eq!(
            (seen.host.as_str(), seen.keys.clone()),
            ("edge", observed.keys.clone())
        );
        // On a host of one membership, a model naming none serves it.
        let alone = super::for_peer(observed, "plant-ops", "site", 1);
        assert_eq!(
            names(alone.models.iter().map(|m| &m.name).collect()),
            ["plant", "boiler", "meter"]
        );
    }

    #[test]
    fn over_the_transport_only_reads_a_peer_needs_are_taken() {
        for read in [Call::Observe, Call::Inspect, Call::Storage] {
            assert_eq!(super::not_remote(&read), None, "{read:?}");
        }
        let submit = Call::Submit {
            op: "gw-1".to_owned(),
            request: Request::Input {
                model: "plant".to_owned(),
                values: vec![("level".to_owned(), 99.0)],
                fence: None,
            },
        };
        let refused = super::not_remote(&submit).expect("a submit is refused");
        assert!(
            refused.starts_with("`submit` is taken on the host's control socket only"),
            "{refused}"
        );
        for call in [
            Call::Acknowledge { op: "x".to_owned() },
            Call::Answer { op: "x".to_owned() },
            Call::Values {
                model: "plant".to_owned(),
            },
            Call::Tag {
                name: "t".to_owned(),
            },
            Call::Wire,
            Call::VerifyArchive,
        ] {
            assert!(super::not_remote(&call).is_some(), "{call:?}");
        }
    }

    /// The transport writes every family's refusal itself; it must read exactly as each
    /// room's own `Refused` reply does.
    #[test]
    fn the_shared_refusal_is_every_reply_types_refusal() {
        let Outbound::Reply { body, .. } = Outbound::refused(404, "no") else {
            panic!("a refusal is a reply");
        };
        let reason = "no".to_owned();
        let expected = [
            serde_json::to_vec(&crate::protocol::Reply::Refused {
                reason: reason.clone(),
            }),
            serde_json::to_vec(&crate::delivery::api::PushReply::Refused {
                reason: reason.clone(),
            }),
            serde_json::to_vec(&crate::processes::api::ServiceReply::Refused {
                reason: reason.clone(),
            }),
            serde_json::to_vec(&crate::processes::api::MailboxReply::Refused { reason }),
        ];
        for each in expected {
            assert_eq!(each.unwrap(), body);
        }
    }
}
