//! Decisions (issue 35, docs/decisions.md): plan a decision's policy at its host
//! (`+ decision NAME @ HOST`, `~` when the files change it — decisions already open
//! keep the policy they fixed), and the operator's calls: `gridctl decision
//! open|ballot|gate|apply` and `gridctl inspect decision`, which verifies every
//! signature offline and that each document names the one before it.

use std::collections::BTreeMap;
use std::path::Path;

use grid_engine::decisions::api::{
    Ask, DecisionCall, DecisionReply, DecisionView, Effect, Policy, Provenance, ballots_digest,
};
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply};
use grid_spec::{DecisionEffect, Topology};

use crate::diff;
use crate::observe::{self, HostStatus, World};
use crate::resolve::Template;
use crate::transition::{Action, Draft, Op, enrolled};

/// The policy the files give decision `d`, when its effect's owner is declared.
pub fn policy(topology: &Topology, d: &grid_spec::Decision) -> Option<Policy> {
    let owner = grid_spec::effect_owner(topology, d)?;
    Some(Policy {
        name: d.name.clone(),
        host: d.host.clone(),
        roster: d.roster.clone(),
        threshold: d.threshold,
        gate: d.gate.clone(),
        effect: match &d.effect {
            DecisionEffect::Input { model, input, .. } => Effect::Input {
                model: model.clone(),
                input: input.clone(),
            },
            DecisionEffect::LedgerTransfer {
                ledger,
                debit,
                credit,
                currency,
                ..
            } => Effect::LedgerTransfer {
                ledger: ledger.clone(),
                debit: debit.clone(),
                credit: credit.clone(),
                currency: currency.clone(),
            },
        },
        expires_after_hours: d.expires_after_hours,
        owner: owner.to_owned(),
    })
}

/// The transitions of every decision whose host runs with the profile, or one this
/// plan creates: `+` when it holds no such policy, `~` when the files changed it.
pub fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for d in &topology.decisions {
        let (Some(policy), Some(host)) = (policy(topology, d), world.host(&d.host)) else {
            continue;
        };
        let Some(address) = topology.host(&policy.owner).map(|h| h.listen.to_string()) else {
            continue;
        };
        let held = match &host.status {
            HostStatus::Running(observed) => {
                if !host
                    .config
                    .as_ref()
                    .is_some_and(|c| c.selects(grid_spec::Profile::Decisions))
                {
                    continue; // its `~ host` line comes first
                }
                observed.decisions.iter().find(|i| i.policy.name == d.name)
            }
            _ if world.missing(&d.host) => None,
            _ => continue, // its own line says it does not run
        };
        let op = match held {
            None => Op::Create,
            Some(i) if i.policy != policy || i.owner.address != address => Op::Change,
            Some(_) => continue,
        };
        let detail = match op {
            Op::Create => format!(
                "`{}` keeps decisions of {} by {} of {} ({}), gated by `{}`, expiring after {} h",
                d.host,
                policy.effect.text(),
                policy.threshold,
                policy.roster.len(),
                policy.roster.join(" "),
                policy.gate,
                policy.expires_after_hours
            ),
            _ => "the policy changes: decisions opened from now on fix it; open ones keep theirs"
                .to_owned(),
        };
        let mut after = Vec::new();
        for party in policy
            .roster
            .iter()
            .chain([&policy.gate, &policy.owner, &policy.host])
        {
            after.extend(diff::installed(party));
            if let Some(h) = topology.host(party) {
                after.extend(h.memberships.iter().map(|m| enrolled(party, m)));
            }
        }
        out.push(
            Draft::new(
                op,
                "decision",
                &d.name,
                &d.host,
                detail,
                Action::Resolve {
                    template: Template::Decision { policy, address },
                },
            )
            .key(format!("decision:{}:{}", d.host, d.name))
            .after(after),
        );
    }
    out
}

/// A call to `host`'s decisions room (refusals and unknowns as
/// [`crate::operation::room_call`] tells them apart).
pub fn call(state: &Path, host: &str, request: DecisionCall) -> Result<DecisionReply, String> {
    crate::operation::room_call(
        (state, host),
        Call::Decision { request },
        |reply| match reply {
            Reply::Decision(reply) => Ok(*reply),
            other => Err(Box::new(other)),
        },
        |reason| DecisionReply::Refused { reason },
    )
}

/// The installed host keeping decision `name` (`host` when given) and its policy.
pub fn find(state: &Path, name: &str, host: Option<&str>) -> Result<(String, Policy), String> {
    let holds = |candidate: &str| -> Option<Policy> {
        let dir = observe::installed(state, candidate).ok()?;
        let mut client = Client::connect(&dir).ok()?;
        match client.call(&Call::Observe).ok()? {
            Reply::Observation(o) => o
                .decisions
                .into_iter()
                .find(|i| i.policy.name == name)
                .map(|i| i.policy),
            _ => None,
        }
    };
    if let Some(host) = host {
        return holds(host).map(|p| (host.to_owned(), p)).ok_or_else(|| {
            format!("host `{host}` keeps no decision `{name}` (or does not answer)")
        });
    }
    let mut found: Vec<(String, Policy)> = observe::each_installed(state, holds)
        .into_iter()
        .filter_map(|(h, p)| p.map(|p| (h, p)))
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "no running host keeps decision `{name}` (name it with --host)"
        )),
        _ => Err(format!(
            "hosts {} keep a decision `{name}`: name one with --host",
            found
                .iter()
                .map(|(h, _)| h.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The decision `id` of `name` as its host holds it now.
pub fn show(state: &Path, host: &str, name: &str, id: &str) -> Result<DecisionView, String> {
    match call(
        state,
        host,
        DecisionCall::Show {
            name: name.to_owned(),
            decision: Some(id.to_owned()),
        },
    )? {
        DecisionReply::Decisions { mut decisions, .. } if decisions.len() == 1 => {
            Ok(decisions.remove(0))
        }
        DecisionReply::Refused { reason } => Err(reason),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// What the opener saw of the effect's target at its owner, when its installation
/// answers here (none otherwise): the model's generation, batch and values; or the
/// ledger's journal position and the two accounts' posted and pending totals.
pub fn provenance(state: &Path, policy: &Policy) -> Vec<Provenance> {
    let Ok(dir) = observe::installed(state, &policy.owner) else {
        return Vec::new();
    };
    let Ok(mut client) = Client::connect(&dir) else {
        return Vec::new();
    };
    let model = match &policy.effect {
        Effect::Input { model, .. } => model,
        Effect::LedgerTransfer {
            ledger,
            debit,
            credit,
            ..
        } => {
            let request = grid_engine::ledger::api::LedgerCall::Inspect {
                ledger: ledger.clone(),
                account: None,
            };
            let Ok(Reply::Ledger(reply)) = client.call(&Call::Ledger { request }) else {
                return Vec::new();
            };
            let grid_engine::ledger::api::LedgerReply::Inspected(view) = *reply else {
                return Vec::new();
            };
            let mut values = BTreeMap::new();
            for a in view
                .accounts
                .iter()
                .filter(|a| [debit, credit].contains(&&a.definition.name))
            {
                let name = &a.definition.name;
                values.insert(format!("{name}:debits_posted"), a.debits_posted.to_string());
                values.insert(
                    format!("{name}:debits_pending"),
                    a.debits_pending.to_string(),
                );
                values.insert(
                    format!("{name}:credits_posted"),
                    a.credits_posted.to_string(),
                );
                values.insert(
                    format!("{name}:credits_pending"),
                    a.credits_pending.to_string(),
                );
            }
            return vec![Provenance {
                owner: policy.owner.clone(),
                object: format!("ledger:{ledger}"),
                generation: 0,
                batch: view.sequence,
                values,
            }];
        }
    };
    let Ok(Reply::Observation(o)) = client.call(&Call::Observe) else {
        return Vec::new();
    };
    let Some(m) = o.models.iter().find(|m| m.name == *model) else {
        return Vec::new();
    };
    let values = match client.call(&Call::Values {
        model: model.clone(),
    }) {
        Ok(Reply::Values { values, .. }) => values
            .into_iter()
            .map(|(name, v)| {
                let text = match v {
                    grid_engine::protocol::ValueText::Number(x) => x.to_string(),
                    grid_engine::protocol::ValueText::Error(e) => e,
                };
                (name, text)
            })
            .collect(),
        _ => BTreeMap::new(),
    };
    vec![Provenance {
        owner: policy.owner.clone(),
        object: format!("model:{model}"),
        generation: m.generation,
        batch: m.batches,
        values,
    }]
}

/// A ballot or gate as the caster's host is asked to sign it, on the decision as it
/// stands at its host now.
pub fn ask(view: &DecisionView, vote: Vote) -> Ask {
    let open = view.record.opened.digest();
    match vote {
        Vote::Ballot(yes) => Ask::Ballot {
            name: view.name.clone(),
            decision: view.id.clone(),
            open,
            yes,
        },
        Vote::Gate(approve) => Ask::Gate {
            name: view.name.clone(),
            decision: view.id.clone(),
            open,
            ballots: ballots_digest(&view.record.ballots),
            approve,
        },
    }
}

pub enum Vote {
    Ballot(bool),
    Gate(bool),
}

pub use grid_engine::decisions::verify::Verified;

/// Every signature of the decision verified offline with the signers' installed
/// manifests (public keys, current and retired), and whether each document names the
/// ones before it (`chain`): the engine's `decisions::verify`, with the keys read from
/// the state directory.
pub fn verify(state: &Path, view: &DecisionView) -> (Vec<Verified>, bool) {
    let keys = |host: &str| {
        observe::installed(state, host)
            .and_then(|d| grid_engine::custody::manifest(&d).map_err(|e| e.to_string()))
            .ok()
    };
    grid_engine::decisions::verify::verify(view, &keys)
}
