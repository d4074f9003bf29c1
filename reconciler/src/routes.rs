//! Routes (SPEC C4): plan their transitions — the publisher's right to publish (the
//! claim `route:NAME` in the membership's authority), the route at each destination,
//! then at the publisher — and the operator's calls: `gridctl publish`, `gridctl
//! inspect routes|inbox|receipts`.

use std::path::Path;

use grid_engine::authority::claims::ClaimState;
use grid_engine::authority::service::{AuthorityCall, AuthorityReply, ClaimCommand};
use grid_engine::delivery::api::{
    DeliveryCall, DeliveryReply, HeldValue, RouteDestination, RouteInstall, publishing_claim,
};
use grid_engine::delivery::receipts::Receipt;
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply, Request};
use grid_spec::Topology;

use crate::observe::{self, HostObservation, HostStatus};
use crate::plan::{Action, Op, Transition};

/// The route as the files describe it, with each destination's public keys read from
/// its installation (`None` until every destination has its keys).
pub fn desired(
    route: &grid_spec::Route,
    topology: &Topology,
    state: &Path,
) -> Option<RouteInstall> {
    let mut destinations = Vec::with_capacity(route.destinations.len());
    for d in &route.destinations {
        let host = topology.host(&d.host)?;
        let keys = grid_engine::custody::manifest(&observe::host_dir(state, &d.host)).ok()?;
        destinations.push(RouteDestination {
            host: d.host.clone(),
            address: host.listen.to_string(),
            retired: d.retired,
            keys,
        });
    }
    Some(RouteInstall {
        name: route.name.clone(),
        membership: route.membership.clone(),
        class: route.class.into(),
        encrypted: route.encrypted,
        publisher: route.publisher.clone(),
        destinations,
    })
}

fn line(op: Op, kind: &str, name: &str, host: &str, detail: String, action: Action) -> Transition {
    Transition {
        op,
        kind: kind.to_owned(),
        name: name.to_owned(),
        host: host.to_owned(),
        detail,
        id: String::new(),
        action,
    }
}

/// What changed between two definitions of a route, for `~` lines.
fn difference(before: &RouteInstall, after: &RouteInstall) -> String {
    let mut out = Vec::new();
    for d in &after.destinations {
        match before.destination(&d.host) {
            None => out.push(format!("destination {} added", d.host)),
            Some(b) if b.retired != d.retired => out.push(format!(
                "destination {} {}",
                d.host,
                if d.retired {
                    "retired (it still owes what earlier cohorts name)"
                } else {
                    "enrolled again"
                }
            )),
            Some(b) if b.address != d.address => {
                out.push(format!("destination {} now at {}", d.host, d.address))
            }
            Some(b) if b.keys != d.keys => out.push(format!(
                "destination {} keys now generation {}",
                d.host, d.keys.generation
            )),
            Some(_) => {}
        }
    }
    if out.is_empty() {
        "definition changed".to_owned()
    } else {
        out.join("\n")
    }
}

/// The transitions of every route: waits (prints nothing) until every host of the
/// route runs and has its keys, and until the membership's authority exists.
pub fn transitions(
    topology: &Topology,
    state: &Path,
    observations: &[HostObservation],
    authority_pending: &std::collections::BTreeSet<String>,
) -> Vec<Transition> {
    let mut out = Vec::new();
    let running = |name: &str| {
        observations.iter().find_map(|o| match &o.status {
            HostStatus::Running(observed) if o.name == name => Some(observed),
            _ => None,
        })
    };
    for route in &topology.routes {
        if route.retired {
            out.push(line(
                Op::Attention,
                "route",
                &route.name,
                &route.publisher,
                "retired=#true: retiring a whole route is not supported by this version; retire its destinations one by one".to_owned(),
                Action::None,
            ));
            continue;
        }
        let Some(desired) = desired(route, topology, state) else {
            continue; // installations and keys come first
        };
        if authority_pending.contains(&route.membership) {
            continue; // the authority's own lines come first
        }
        let hosts: Vec<&str> = std::iter::once(route.publisher.as_str())
            .chain(route.destinations.iter().map(|d| d.host.as_str()))
            .collect();
        if hosts.iter().any(|h| running(h).is_none()) {
            continue; // each host's own line says it does not run
        }
        if let Some(h) = route
            .destinations
            .iter()
            .filter_map(|d| topology.host(&d.host))
            .find(|h| !h.profiles.contains(&grid_spec::Profile::Delivery))
        {
            out.push(line(
                Op::Attention,
                "route",
                &route.name,
                &h.name,
                format!(
                    "destination `{}` does not select the `delivery` profile: it cannot receive; add `delivery` to its `profiles` line",
                    h.name
                ),
                Action::None,
            ));
            continue;
        }
        // The publishing right, read after a barrier through the publisher.
        let claim = publishing_claim(&route.name);
        let publisher_dir = observe::host_dir(state, &route.publisher);
        match observe::authority_call(
            &publisher_dir,
            &route.membership,
            AuthorityCall::Show {
                claim: claim.clone(),
            },
        ) {
            Ok(AuthorityReply::Shown { claim: Some(c), .. })
                if c.owner == route.publisher && c.state == ClaimState::Held => {}
            Ok(AuthorityReply::Shown { claim: Some(c), .. }) if c.state == ClaimState::Held => {
                out.push(line(
                    Op::Attention,
                    "claim",
                    &claim,
                    &route.publisher,
                    format!(
                        "the right to publish on route {} is held by `{}` at epoch {}, not by its publisher `{}`; nothing is taken from its owner automatically",
                        route.name, c.owner, c.epoch, route.publisher
                    ),
                    Action::None,
                ));
                continue;
            }
            Ok(AuthorityReply::Shown { .. }) => out.push(line(
                Op::Create,
                "claim",
                &claim,
                &route.publisher,
                format!(
                    "`{}` acquires the right to publish on route {} in the authority of {}",
                    route.publisher, route.name, route.membership
                ),
                Action::Claim {
                    membership: route.membership.clone(),
                    command: ClaimCommand::Acquire {
                        claim: claim.clone(),
                    },
                },
            )),
            Ok(other) => {
                out.push(line(
                    Op::Attention,
                    "claim",
                    &claim,
                    &route.publisher,
                    format!(
                        "the authority of {} cannot be read: {other:?}",
                        route.membership
                    ),
                    Action::None,
                ));
                continue;
            }
            Err(e) => {
                out.push(line(
                    Op::Attention,
                    "claim",
                    &claim,
                    &route.publisher,
                    format!("the authority of {} cannot be read: {e}", route.membership),
                    Action::None,
                ));
                continue;
            }
        }
        // Destinations first: they must know the route before values arrive.
        for host in hosts.iter().skip(1).chain(hosts.first()) {
            let observed = running(host).expect("checked above");
            let held = observed.routes.iter().find(|r| r.name == route.name);
            let here = if *host == route.publisher {
                desired.clone()
            } else {
                desired.for_destination(host)
            };
            let request = Request::InstallRoute {
                route: here.clone(),
            };
            let role = if *host == route.publisher {
                format!(
                    "publisher of {} {} route to {} destination(s)",
                    if route.encrypted {
                        "an encrypted"
                    } else {
                        "a plain"
                    },
                    route.class.name(),
                    desired.destinations.len()
                )
            } else {
                format!("destination (from `{}`)", route.publisher)
            };
            match held {
                None => out.push(line(
                    Op::Create,
                    "route",
                    &route.name,
                    host,
                    role,
                    Action::Submit { request },
                )),
                Some(held) if *held != here => out.push(line(
                    Op::Change,
                    "route",
                    &route.name,
                    host,
                    difference(held, &here),
                    Action::Submit { request },
                )),
                Some(_) => {}
            }
        }
    }
    // Routes a host holds that no file declares: unmanaged, never removed.
    for o in observations {
        if let HostStatus::Running(observed) = &o.status {
            for held in &observed.routes {
                if !topology.routes.iter().any(|r| r.name == held.name) {
                    out.push(line(
                        Op::Attention,
                        "route",
                        &held.name,
                        &o.name,
                        "unmanaged: the host holds it but no file declares it; nothing is removed"
                            .to_owned(),
                        Action::None,
                    ));
                }
            }
        }
    }
    out
}

/// One delivery call to the host `host` (its control socket).
pub fn call(state: &Path, host: &str, request: DeliveryCall) -> Result<DeliveryReply, String> {
    let dir = observe::host_dir(state, host);
    if !dir
        .join(grid_engine::host::config::HOST_CONFIG_FILE)
        .exists()
    {
        return Err(format!(
            "no host `{host}` is installed under {}",
            state.display()
        ));
    }
    let mut client = Client::connect(&dir).map_err(|e| e.to_string())?;
    match client.call(&Call::Delivery { request }) {
        Ok(Reply::Delivery(reply)) => Ok(*reply),
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Every value `host` holds durably of `route` from `from` (all pages).
pub fn held(state: &Path, route: &str, host: &str, from: u64) -> Result<Vec<HeldValue>, String> {
    let mut values = Vec::new();
    let mut from = from;
    loop {
        match call(
            state,
            host,
            DeliveryCall::Held {
                route: route.to_owned(),
                from,
            },
        )? {
            DeliveryReply::Held {
                values: page, next, ..
            } => {
                values.extend(page);
                match next {
                    Some(n) if n > from => from = n,
                    _ => return Ok(values),
                }
            }
            DeliveryReply::Refused { reason } => return Err(reason),
            other => return Err(format!("unexpected reply {other:?}")),
        }
    }
}

/// The publisher of `route` among the installed hosts (the one whose route record
/// names itself).
pub fn publisher_of(state: &Path, route: &str) -> Result<String, String> {
    for name in observe::installed_hosts(state) {
        if let Ok(DeliveryReply::Routes { routes, .. }) = call(state, &name, DeliveryCall::Routes)
            && routes
                .iter()
                .any(|r| r.route.name == route && r.role == "publisher")
        {
            return Ok(name);
        }
    }
    Err(format!(
        "no running host under {} publishes route `{route}`",
        state.display()
    ))
}

/// The receipts of a route at its publisher, each checked offline (with `verify`)
/// against its recipient's public keys read from the recipient's installation.
pub struct Receipts {
    pub route: String,
    pub publisher: String,
    pub published: u64,
    pub receipts: Vec<(Receipt, Option<Result<(), String>>)>,
    pub outstanding: std::collections::BTreeMap<String, u64>,
}

impl Receipts {
    pub fn verified(&self) -> Option<bool> {
        if self.receipts.iter().any(|(_, v)| v.is_none()) {
            return None;
        }
        Some(self.receipts.iter().all(|(_, v)| matches!(v, Some(Ok(())))))
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "route": self.route,
            "publisher": self.publisher,
            "published": self.published,
            "receipts": self.receipts.iter().map(|(r, v)| {
                let mut j = serde_json::to_value(r).expect("receipts serialize");
                if let Some(v) = v {
                    j["verified"] = serde_json::Value::Bool(v.is_ok());
                    if let Err(e) = v {
                        j["error"] = serde_json::Value::String(e.clone());
                    }
                }
                j
            }).collect::<Vec<_>>(),
            "verified": self.verified(),
            "outstanding": self.outstanding,
        })
    }

    pub fn render(&self) -> String {
        let mut out = format!(
            "route {} at publisher {}: published through {}\n",
            self.route, self.publisher, self.published
        );
        for (r, v) in &self.receipts {
            out.push_str(&format!(
                "  {}: holds through {} (digest {}, key generation {}){}\n",
                r.body.recipient,
                r.body.highest_position,
                hex::encode(r.body.digest),
                r.generation,
                match v {
                    None => String::new(),
                    Some(Ok(())) => ", signature verified".to_owned(),
                    Some(Err(e)) => format!(", NOT VERIFIED: {e}"),
                }
            ));
        }
        for (d, n) in &self.outstanding {
            out.push_str(&format!("  {d}: {n} value(s) outstanding\n"));
        }
        out
    }
}

pub fn receipts(state: &Path, route: &str, verify: bool) -> Result<Receipts, String> {
    let publisher = publisher_of(state, route)?;
    let DeliveryReply::Receipts {
        published,
        receipts,
        outstanding,
        ..
    } = call(
        state,
        &publisher,
        DeliveryCall::Receipts {
            route: route.to_owned(),
        },
    )?
    else {
        return Err("unexpected reply to receipts".to_owned());
    };
    let receipts = receipts
        .into_iter()
        .map(|r| {
            let check = verify.then(|| {
                let dir = observe::host_dir(state, &r.body.recipient);
                let manifest = grid_engine::custody::manifest(&dir).map_err(|e| {
                    format!(
                        "the public keys of `{}` cannot be read: {e}",
                        r.body.recipient
                    )
                })?;
                let key = grid_engine::custody::signing_key_of(&manifest, r.generation)
                    .ok_or_else(|| {
                        format!(
                            "`{}` has no signing key of generation {}",
                            r.body.recipient, r.generation
                        )
                    })?;
                r.verify(&key).map_err(|e| e.to_string())
            });
            (r, check)
        })
        .collect();
    Ok(Receipts {
        route: route.to_owned(),
        publisher,
        published,
        receipts,
        outstanding,
    })
}
