//! Cross-domain exports (SPEC C10, docs/exports.md): plan an export's transitions — the
//! disclosure signed by the original publisher of `from`, then the export at its
//! gateway once both routes and the publication right (`route:TO`, planned with the
//! route) are there; `retired=#true` retires the export, then withdraws the
//! disclosure; one a host holds that no file declares is `!` unmanaged — and
//! `gridctl inspect export`, which reads the export at its gateway, both sides'
//! receipts at their publishers, and verifies every signature offline.

use std::path::Path;

use grid_engine::authority::claims::ClaimState;
use grid_engine::authority::service::AuthorityReply;
use grid_engine::custody::{Manifest, Signed};
use grid_engine::delivery::api::{DeliveryCall, DeliveryReply};
use grid_engine::delivery::receipts::Receipt;
use grid_engine::exports::api::{
    DisclosureTerms, ExportCall, ExportReply, ExportState, ExportView, Mapping,
};
use grid_engine::protocol::Request;
use grid_spec::Topology;
use serde::Serialize;

use crate::observe::{self, HostStatus, World};
use crate::resolve::Template;
use crate::transition::{Action, Draft, Op, installed};

/// The terms the files give an export, when both routes are declared.
fn terms(export: &grid_spec::Export, topology: &Topology) -> Option<DisclosureTerms> {
    let from = topology.routes.iter().find(|r| r.name == export.from)?;
    let to = topology.routes.iter().find(|r| r.name == export.to)?;
    let cell = topology
        .models
        .iter()
        .filter(|m| m.host == from.publisher)
        .find_map(|m| {
            m.outputs
                .iter()
                .find(|o| o.route == from.name)
                .map(|o| format!("{}.{}", m.name, o.cell))
        });
    Some(DisclosureTerms {
        export: export.name.clone(),
        gateway: export.gateway.clone(),
        from: from.name.clone(),
        from_membership: from.membership.clone(),
        to: to.name.clone(),
        to_membership: to.membership.clone(),
        cell,
        expires: export.expires.clone(),
    })
}

/// What `host` holds of export `name` in `role` (`issuer` or `gateway`).
fn held<'w>(world: &'w World, host: &str, name: &str, role: &str) -> Option<&'w ExportState> {
    world
        .running(host)?
        .exports
        .iter()
        .find(|e| e.name == name && e.role == role)
}

/// The transitions of every export whose issuer and gateway run (a host that does
/// not run has its own line; one this plan creates holds nothing yet).
pub fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for export in &topology.exports {
        let Some(terms) = terms(export, topology) else {
            continue; // refused by the check
        };
        let issuer = export.issuer.as_str();
        let gateway = export.gateway.as_str();
        if [issuer, gateway]
            .iter()
            .any(|h| world.running(h).is_none() && !world.missing(h))
        {
            continue;
        }
        let disclosed = held(world, issuer, &export.name, "issuer");
        let running = held(world, gateway, &export.name, "gateway");
        let disclosure_key = format!("disclosure:{}", export.name);
        let export_key = format!("export:{}", export.name);
        if export.retired {
            if running.is_some_and(|r| !r.retired) {
                out.push(
                    Draft::new(
                        Op::Retire,
                        "export",
                        &export.name,
                        gateway,
                        "retired=#true: nothing crosses any more; the mappings made and their receipts are kept".to_owned(),
                        Action::Submit {
                            request: Request::RetireExport {
                                export: export.name.clone(),
                            },
                        },
                    )
                    .key(export_key.clone()),
                );
            }
            if disclosed.is_some_and(|d| !d.retired) {
                out.push(
                    Draft::new(
                        Op::Retire,
                        "disclosure",
                        &export.name,
                        issuer,
                        format!(
                            "`{issuer}` withdraws its disclosure of route {}",
                            export.from
                        ),
                        Action::Submit {
                            request: Request::WithdrawDisclosure {
                                export: export.name.clone(),
                            },
                        },
                    )
                    .after([export_key]),
                );
            }
            continue;
        }
        let routes = |route: &str, hosts: &[&str]| -> Vec<String> {
            hosts.iter().map(|h| format!("route:{route}:{h}")).collect()
        };
        match disclosed {
            None => out.push(
                Draft::new(
                    Op::Create,
                    "disclosure",
                    &export.name,
                    issuer,
                    format!(
                        "`{issuer}`, the publisher of route {}, signs that `{gateway}` may carry its values to route {} in {}{}",
                        export.from,
                        export.to,
                        terms.to_membership,
                        terms
                            .expires
                            .as_deref()
                            .map(|e| format!(" until {e}"))
                            .unwrap_or_default()
                    ),
                    Action::Submit {
                        request: Request::Disclose {
                            terms: terms.clone(),
                        },
                    },
                )
                .key(disclosure_key.clone())
                .after(installed(issuer))
                .after(routes(&export.from, &[gateway, issuer])),
            ),
            Some(d) if d.retired => {
                out.push(Draft::attention(
                    "disclosure",
                    &export.name,
                    issuer,
                    "withdrawn: a disclosure is never given again under its name; declare a new export".to_owned(),
                ));
                continue;
            }
            Some(d) if d.terms != terms => {
                out.push(Draft::attention(
                    "disclosure",
                    &export.name,
                    issuer,
                    "disclosed with other terms: a disclosure never changes; retire the export (`retired=#true`) and declare a new one".to_owned(),
                ));
                continue;
            }
            Some(_) => {}
        }
        // The publication right held by another: the route `to` is not installed at
        // the gateway (the claim's own line says so), and neither is the export.
        let claim = grid_engine::delivery::api::publishing_claim(&export.to);
        if running.is_none()
            && let Some(Ok(AuthorityReply::Shown { claim: Some(c), .. })) =
                world.host(gateway).and_then(|o| o.claims.get(&claim))
            && c.state == ClaimState::Held
            && c.owner != gateway
        {
            out.push(Draft::attention(
                "export",
                &export.name,
                gateway,
                format!(
                    "no publication right: `{claim}` is held by `{}` at epoch {} in {}, not by the gateway; the export is not installed",
                    c.owner, c.epoch, terms.to_membership
                ),
            ));
            continue;
        }
        match running {
            None => out.push(
                Draft::new(
                    Op::Create,
                    "export",
                    &export.name,
                    gateway,
                    format!(
                        "(disclosure by {issuer}, publication in {}): values of {} cross to {}",
                        terms.to_membership, export.from, export.to
                    ),
                    Action::Resolve {
                        template: Template::Export {
                            name: export.name.clone(),
                            issuer: issuer.to_owned(),
                        },
                    },
                )
                .key(export_key)
                .after([disclosure_key, format!("claim:route:{}", export.to)])
                .after(installed(gateway))
                .after(routes(&export.to, &[gateway]))
                .after(routes(&export.from, &[gateway])),
            ),
            Some(r) if r.retired => out.push(Draft::attention(
                "export",
                &export.name,
                gateway,
                "retired at the gateway: an export never runs again; declare a new one".to_owned(),
            )),
            Some(r) if r.terms != terms => out.push(Draft::attention(
                "export",
                &export.name,
                gateway,
                "installed with other terms: an export's disclosure never changes; retire it and declare a new one".to_owned(),
            )),
            Some(_) => {}
        }
    }
    // Exports and disclosures a host holds that no file declares: never removed.
    for o in &world.hosts {
        if let HostStatus::Running(observed) = &o.status {
            for e in &observed.exports {
                if !e.retired && !topology.exports.iter().any(|x| x.name == e.name) {
                    out.push(Draft::attention(
                        if e.role == "issuer" {
                            "disclosure"
                        } else {
                            "export"
                        },
                        &e.name,
                        &o.name,
                        "unmanaged: the host holds it but no file declares it; nothing is retired (declare it with `retired=#true` to retire it)".to_owned(),
                    ));
                }
            }
        }
    }
    out
}

/// One side's newest receipts, each checked offline.
#[derive(Debug, Serialize)]
pub struct SideReceipt {
    pub route: String,
    pub recipient: String,
    /// The highest position it covers.
    pub position: u64,
    /// The signature verifies with the recipient's public key of its generation.
    pub verified: bool,
    pub receipt: Receipt,
}

/// `gridctl inspect export NAME`.
#[derive(Debug, Serialize)]
pub struct Inspected {
    pub export: ExportView,
    /// The disclosure verifies with its issuer's public keys (read from the issuer's
    /// installation, not from what the gateway holds).
    pub disclosure_verified: bool,
    /// Every mapping listed verifies with the gateway's public keys.
    pub mappings_verified: bool,
    /// A-side: the gateway's receipt for `from`, as its publisher holds it.
    pub from_receipt: Option<SideReceipt>,
    /// B-side: every destination's receipt for `to`, as the gateway holds them.
    pub to_receipts: Vec<SideReceipt>,
    /// Mappings whose `from` position the A-side receipt covers and whose `to`
    /// position every B-side receipt covers.
    pub receipted_both_sides: u64,
}

fn receipts_at(state: &Path, publisher: &str, route: &str) -> Result<Vec<SideReceipt>, String> {
    let reply = crate::routes::call(
        state,
        publisher,
        DeliveryCall::Receipts {
            route: route.to_owned(),
        },
    )?;
    let DeliveryReply::Receipts { receipts, .. } = reply else {
        return Err(format!("`{publisher}` answered {reply:?}"));
    };
    Ok(receipts
        .into_iter()
        .map(|receipt| {
            let verified =
                grid_engine::custody::manifest(&observe::host_dir(state, &receipt.body.recipient))
                    .ok()
                    .and_then(|m| grid_engine::custody::signing_key_of(&m, receipt.generation))
                    .is_some_and(|key| receipt.verify(&key).is_ok());
            SideReceipt {
                route: route.to_owned(),
                recipient: receipt.body.recipient.clone(),
                position: receipt.body.highest_position,
                verified,
                receipt,
            }
        })
        .collect())
}

/// Reads export `name` at `gateway` (every page of its mappings) and both sides'
/// receipts, and verifies them with the public keys in the operator's state.
pub fn inspect(state: &Path, name: &str, gateway: &str) -> Result<Inspected, String> {
    let mut view: Option<ExportView> = None;
    let mut after = 0;
    loop {
        let reply = observe::export_call(
            state,
            gateway,
            ExportCall::Show {
                export: name.to_owned(),
                after,
            },
        )?;
        let page = match reply {
            ExportReply::Export { view } => *view,
            ExportReply::Refused { reason } => return Err(reason),
            other => return Err(format!("unexpected reply {other:?}")),
        };
        let next = page.next;
        match &mut view {
            None => view = Some(page),
            Some(v) => v.mappings.extend(page.mappings),
        }
        match next {
            Some(n) if n > after => after = n,
            _ => break,
        }
    }
    let mut export = view.expect("one page at least");
    export.next = None;
    let keys = |host: &str| -> Result<Manifest, String> {
        grid_engine::custody::manifest(&observe::host_dir(state, host))
            .map_err(|e| format!("the public keys of `{host}` cannot be read: {e}"))
    };
    let disclosure_verified = export.disclosure.verify(&keys(&export.disclosure.issuer)?);
    let gateway_keys = keys(gateway)?;
    let mappings_verified = export
        .mappings
        .iter()
        .all(|m: &Mapping| m.verify(&gateway_keys) && m.gateway == gateway);
    let t = &export.disclosure.terms;
    let from_receipt = receipts_at(state, &export.disclosure.issuer, &t.from)?
        .into_iter()
        .find(|r| r.recipient == gateway);
    let to_receipts = receipts_at(state, gateway, &t.to)?;
    let a = from_receipt
        .as_ref()
        .filter(|r| r.verified)
        .map_or(0, |r| r.position);
    let b = if to_receipts.is_empty() || to_receipts.iter().any(|r| !r.verified) {
        0
    } else {
        to_receipts.iter().map(|r| r.position).min().unwrap_or(0)
    };
    let receipted_both_sides = export
        .mappings
        .iter()
        .filter(|m| m.from_position <= a && m.to_position <= b)
        .count() as u64;
    Ok(Inspected {
        export,
        disclosure_verified,
        mappings_verified,
        from_receipt,
        to_receipts,
        receipted_both_sides,
    })
}
