//! Routes (SPEC C4) and mappings (issue 34: a route carrying whole matrices): plan
//! their transitions — the publisher's right to publish (the claim `route:NAME`, or
//! `mapping:NAME`, in the membership's authority), the route at each destination, then
//! at the publisher — the apply of that claim (`claim`, `claim_held`), and the
//! operator's calls: `gridctl publish`, `gridctl inspect routes|inbox|receipts`.

use std::path::Path;

use grid_engine::authority::claims::ClaimState;
use grid_engine::authority::service::{AuthorityCall, AuthorityReply, ClaimCommand};
use grid_engine::delivery::api::{
    DeliveryCall, DeliveryReply, Geometry, HeldValue, RouteDestination, RouteInstall,
};
use grid_engine::delivery::receipts::Receipt;
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply, Request};
use grid_spec::Topology;

use crate::diff::authority::{self, AuthorityState, joined};
use crate::observe::{self, HostStatus, World};
use crate::resolve::Template;
use crate::transition::{Action, Effect, Op, Status};
use crate::transition::{Draft, Index, enrolled, installed};

/// The route as the files describe it at the host `at`, from its definition at the
/// publisher ([`install`]).
fn install_at(whole: &Action, at: &str) -> Action {
    match whole {
        Action::Submit {
            request: Request::InstallRoute { route },
        } if route.publisher != at => Action::Submit {
            request: Request::InstallRoute {
                route: route.for_destination(at),
            },
        },
        Action::Resolve {
            template:
                Template::Route {
                    name,
                    membership,
                    class,
                    encrypted,
                    publisher,
                    destinations,
                    matrix,
                    ..
                },
        } => Action::Resolve {
            template: Template::Route {
                name: name.clone(),
                membership: membership.clone(),
                class: *class,
                encrypted: *encrypted,
                publisher: publisher.clone(),
                destinations: if publisher == at {
                    destinations.clone()
                } else {
                    destinations.iter().filter(|d| d.0 == at).cloned().collect()
                },
                at: at.to_owned(),
                matrix: *matrix,
            },
        },
        other => other.clone(),
    }
}

/// A route or a mapping, as the plan handles both: a mapping is an Ordered, encrypted
/// route whose values are whole matrices of one geometry.
pub(crate) struct Carrier<'t> {
    /// The files' route itself, or the route a mapping is delivered as.
    pub route: std::borrow::Cow<'t, grid_spec::Route>,
    pub matrix: Option<Geometry>,
}

impl Carrier<'_> {
    fn kind(&self) -> &'static str {
        match self.matrix {
            None => "route",
            Some(_) => "mapping",
        }
    }

    /// The claim that is its publisher's right to publish.
    fn claim(&self) -> String {
        match self.matrix {
            None => grid_engine::delivery::api::publishing_claim(&self.route.name),
            Some(_) => grid_engine::delivery::api::mapping_claim(&self.route.name),
        }
    }
}

/// Every route and mapping of the files.
pub(crate) fn carriers(topology: &Topology) -> Vec<Carrier<'_>> {
    let routes = topology.routes.iter().map(|r| Carrier {
        route: std::borrow::Cow::Borrowed(r),
        matrix: None,
    });
    let mappings = topology.mappings.iter().map(|m| Carrier {
        route: std::borrow::Cow::Owned(grid_spec::Route {
            name: m.name.clone(),
            membership: m.membership.clone(),
            class: grid_spec::RouteClass::Ordered,
            encrypted: true,
            publisher: m.publisher.clone(),
            destinations: m.destinations.clone(),
            retired: m.retired,
            origin: m.origin.clone(),
        }),
        matrix: Some(Geometry {
            rows: m.rows,
            cols: m.cols,
        }),
    });
    routes.chain(mappings).collect()
}

/// The route as the files describe it at its publisher: with each destination's
/// public keys when every destination's custody holds them, else a template
/// completed when it is sent (the keys of hosts this plan creates).
fn install(carrier: &Carrier, index: &Index<'_>, world: &World) -> Action {
    let route = &carrier.route;
    let at = route.publisher.as_str();
    let mut destinations = Vec::with_capacity(route.destinations.len());
    let mut known = true;
    for d in &route.destinations {
        let address = index
            .host(&d.host)
            .map(|h| h.listen.to_string())
            .unwrap_or_default();
        let keys = world.host(&d.host).and_then(|o| o.keys.manifest()).cloned();
        known &= keys.is_some();
        destinations.push((d.host.clone(), address, d.retired, keys));
    }
    if !known {
        return Action::Resolve {
            template: Template::Route {
                name: route.name.clone(),
                membership: route.membership.clone(),
                class: route.class.into(),
                encrypted: route.encrypted,
                publisher: route.publisher.clone(),
                destinations: destinations
                    .into_iter()
                    .map(|(h, a, r, _)| (h, a, r))
                    .collect(),
                at: at.to_owned(),
                matrix: carrier.matrix,
            },
        };
    }
    let install = RouteInstall {
        name: route.name.clone(),
        membership: route.membership.clone(),
        class: route.class.into(),
        encrypted: route.encrypted,
        publisher: route.publisher.clone(),
        destinations: destinations
            .into_iter()
            .map(|(host, address, retired, keys)| RouteDestination {
                host,
                address,
                retired,
                keys: keys.expect("every key is known"),
            })
            .collect(),
        matrix: carrier.matrix,
    };
    let route = if at == install.publisher {
        install
    } else {
        install.for_destination(at)
    };
    Action::Submit {
        request: Request::InstallRoute { route },
    }
}

/// `here` with each destination's keys as `held` installed them where they only
/// rotated (the new manifest extends the installed one): a rotation reaches the
/// route's hosts through the membership (`custody::book`, the plan's `~ peer-keys`),
/// not by reinstalling every route.
fn ignoring_rotations(held: &RouteInstall, here: &RouteInstall) -> RouteInstall {
    let mut here = here.clone();
    for d in &mut here.destinations {
        if let Some(b) = held.destination(&d.host)
            && d.keys.extends(&b.keys)
        {
            d.keys = b.keys.clone();
        }
    }
    here
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

fn claim_draft(carrier: &Carrier, claim: &str) -> Draft {
    let route = &carrier.route;
    Draft::new(
        Op::Create,
        "claim",
        claim,
        &route.publisher,
        format!(
            "`{}` acquires the right to publish on {} {} in the authority of {}",
            route.publisher,
            carrier.kind(),
            route.name,
            route.membership
        ),
        Action::Claim {
            membership: route.membership.clone(),
            command: ClaimCommand::Acquire {
                claim: claim.to_owned(),
            },
        },
    )
    .key(format!("claim:{claim}"))
    .after(joined(&route.membership, &route.publisher))
}

/// The transitions of every route: the publishing right, then the route at each
/// destination, then at the publisher. A route one of whose hosts is installed but
/// does not answer waits (that host's own line says so); hosts this plan creates
/// certainly hold nothing.
pub fn transitions(topology: &Topology, index: &Index<'_>, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    // One look at each membership's authority, whatever the number of its routes.
    let mut authorities: std::collections::HashMap<&str, AuthorityState<'_>> =
        std::collections::HashMap::new();
    let carriers = carriers(topology);
    for carrier in &carriers {
        let route = &carrier.route;
        let kind = carrier.kind();
        if route.retired {
            out.push(Draft::attention(
                kind,
                &route.name,
                &route.publisher,
                format!("retired=#true: retiring a whole {kind} is not supported by this version; retire its destinations one by one"),
            ));
            continue;
        }
        let hosts: Vec<&str> = std::iter::once(route.publisher.as_str())
            .chain(route.destinations.iter().map(|d| d.host.as_str()))
            .collect();
        if hosts
            .iter()
            .any(|h| world.running(h).is_none() && !world.missing(h))
        {
            continue; // each host's own line says it does not run
        }
        if let Some(h) = route
            .destinations
            .iter()
            .filter_map(|d| index.host(&d.host))
            .find(|h| !h.profiles.contains(&grid_spec::Profile::Delivery))
        {
            out.push(Draft::attention(
                kind,
                &route.name,
                &h.name,
                format!(
                    "destination `{}` does not select the `delivery` profile: it cannot receive; add `delivery` to its `profiles` line",
                    h.name
                ),
            ));
            continue;
        }
        // The publishing right, read after a barrier through the publisher.
        let claim = carrier.claim();
        let attention =
            |detail: String| Draft::attention("claim", &claim, &route.publisher, detail);
        let mut claim_key = None;
        let state = authorities
            .entry(route.membership.as_str())
            .or_insert_with(|| authority::state(topology, world, &route.membership));
        match state {
            AuthorityState::Unknown(_) => continue, // the authority's own line says so
            AuthorityState::Undeclared => {
                out.push(attention(format!(
                    "membership {} declares no authority (`authority voters=N`) to hold the right to publish on {kind} {}",
                    route.membership, route.name
                )));
                continue;
            }
            AuthorityState::Empty => {
                out.push(
                    claim_draft(carrier, &claim)
                        .after([authority::bootstrapped(&route.membership)]),
                );
                claim_key = Some(format!("claim:{claim}"));
            }
            AuthorityState::Known(_) => match world
                .host(&route.publisher)
                .and_then(|o| o.claims.get(&claim))
            {
                None => {
                    // The publisher does not take part yet: this plan adds it.
                    out.push(claim_draft(carrier, &claim));
                    claim_key = Some(format!("claim:{claim}"));
                }
                Some(Ok(AuthorityReply::Shown { claim: Some(c), .. }))
                    if c.owner == route.publisher && c.state == ClaimState::Held => {}
                Some(Ok(AuthorityReply::Shown { claim: Some(c), .. }))
                    if c.state == ClaimState::Held =>
                {
                    out.push(attention(format!(
                        "the right to publish on {kind} {} is held by `{}` at epoch {}, not by its publisher `{}`; nothing is taken from its owner automatically",
                        route.name, c.owner, c.epoch, route.publisher
                    )));
                    continue;
                }
                Some(Ok(AuthorityReply::Shown { .. })) => {
                    out.push(claim_draft(carrier, &claim));
                    claim_key = Some(format!("claim:{claim}"));
                }
                Some(Ok(other)) => {
                    out.push(attention(format!(
                        "the authority of {} cannot be read: {other:?}",
                        route.membership
                    )));
                    continue;
                }
                Some(Err(e)) => {
                    out.push(attention(format!(
                        "the authority of {} cannot be read: {e}",
                        route.membership
                    )));
                    continue;
                }
            },
        }
        // Destinations first: they must know the route before values arrive.
        let mut destination_keys = Vec::new();
        let whole = install(carrier, index, world);
        for host in hosts.iter().skip(1).chain(hosts.first()) {
            let publisher = *host == route.publisher;
            let action = install_at(&whole, host);
            let held = world
                .running(host)
                .and_then(|o| o.routes.iter().find(|r| r.name == route.name));
            let role = if let (true, Some(g)) = (publisher, carrier.matrix) {
                format!(
                    "publisher of an encrypted mapping of {} × {} matrices to {} destination(s)",
                    g.rows,
                    g.cols,
                    route.destinations.len()
                )
            } else if publisher {
                format!(
                    "publisher of {} {} route to {} destination(s)",
                    if route.encrypted {
                        "an encrypted"
                    } else {
                        "a plain"
                    },
                    route.class.name(),
                    route.destinations.len()
                )
            } else {
                format!("destination (from `{}`)", route.publisher)
            };
            let draft = match (held, &action) {
                (None, _) => Draft::new(Op::Create, kind, &route.name, host, role, action),
                (
                    Some(held),
                    Action::Submit {
                        request: Request::InstallRoute { route: here },
                    },
                ) if *held != ignoring_rotations(held, here) => {
                    let changes = crate::changes::route(held, here);
                    let detail = difference(held, here);
                    Draft::new(Op::Change, kind, &route.name, host, detail, action.clone())
                        .changes(changes)
                }
                (Some(_), Action::Submit { .. }) => continue,
                (Some(_), _) => Draft::new(
                    Op::Change,
                    kind,
                    &route.name,
                    host,
                    "definition changed".to_owned(),
                    action,
                ),
            };
            let key = format!("{kind}:{}:{host}", route.name);
            let mut draft = draft
                .key(key.clone())
                .after(claim_key.clone())
                .after(installed(host))
                .after([enrolled(host, &route.membership)]);
            if publisher {
                // The publisher's definition names every destination's keys.
                draft = draft
                    .after(route.destinations.iter().flat_map(|d| installed(&d.host)))
                    .after(destination_keys.clone());
            } else {
                destination_keys.push(key);
            }
            out.push(draft);
        }
    }
    // Routes a host holds that no file declares: unmanaged, never removed — except
    // those of a membership their publisher or this host leaves (the leave line waits
    // for what they owe; once it left, they are history there).
    let leaves = |host: &str, membership: &str| {
        topology
            .host(host)
            .is_some_and(|h| h.leaving.iter().any(|m| m == membership))
    };
    for o in &world.hosts {
        if let HostStatus::Running(observed) = &o.status {
            for held in &observed.routes {
                if !carriers.iter().any(|c| c.route.name == held.name)
                    && !leaves(&o.name, &held.membership)
                    && !leaves(&held.publisher, &held.membership)
                {
                    out.push(Draft::attention(
                        held.kind(),
                        &held.name,
                        &o.name,
                        "unmanaged: the host holds it but no file declares it; nothing is removed"
                            .to_owned(),
                    ));
                }
            }
        }
    }
    out
}

/// One delivery call to the host `host` (its control socket).
pub fn call(state: &Path, host: &str, request: DeliveryCall) -> Result<DeliveryReply, String> {
    let dir = observe::installed(state, host)?;
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

// Applying: a route's publishing right, claimed at its membership's authority.

/// Sends a claim command as `host` with operation id `op` (the publishing right of a
/// route).
pub fn claim(
    state: &Path,
    membership: &str,
    host: &str,
    op: &str,
    command: &ClaimCommand,
) -> Effect {
    use grid_engine::authority::service::ClaimOutcome;
    match crate::authority::claim(state, Some(membership), host, op, command.clone()) {
        Ok(r) => match r.outcome {
            ClaimOutcome::Succeeded => Effect::new(
                Status::Succeeded,
                format!("held at epoch {}", r.epoch.unwrap_or_default()),
            ),
            ClaimOutcome::Failed => Effect::new(Status::Failed, r.detail),
            ClaimOutcome::Refused => Effect::new(Status::Refused, r.detail),
            ClaimOutcome::Unknown => Effect::new(Status::Unknown, r.detail),
        },
        Err(e) => Effect::new(Status::Refused, e),
    }
}

/// Whether `host` (its installation at `dir`) holds the claim `command` names.
pub fn claim_held(dir: &Path, membership: &str, host: &str, command: &ClaimCommand) -> bool {
    let claim = command.claim().to_owned();
    matches!(
        observe::authority_call(dir, membership, AuthorityCall::Show { claim }),
        Ok(AuthorityReply::Shown { claim: Some(c), .. })
            if c.owner == host && c.state == ClaimState::Held
    )
}
