//! Decisions (issue 35, docs/decisions.md): what `check` refuses of a `decision` beyond
//! its own node — an effect on a model input that does not exist or that something
//! else feeds, a ledger no file declares, and a decision on a build without the
//! `decisions` profile.
//!
//! Invariants, stated as absences: no decision names an effect whose target `check`
//! cannot find; no decided input is also fed by a route, a tag or a mapping (the
//! decided value would be overwritten); no decision is accepted by a build that cannot
//! keep it.

use crate::diagnostic::Diagnostic;
use crate::parse::Parsed;
use crate::topology::{Decision, DecisionEffect, Item, Origin, Profile};

pub(crate) fn check(parsed: &Parsed, provided: Option<&[Profile]>, problems: &mut Vec<Diagnostic>) {
    let t = &parsed.topology;
    for decision in &t.decisions {
        if let Some(provided) = provided
            && !provided.contains(&Profile::Decisions)
        {
            problems.push(
                at(parsed, &decision.origin, format!(
                    "decision `{}` cannot run: this build does not provide the `decisions` profile",
                    decision.name
                ), "not provided by this build")
                .with_help("remove the decision, or use a build that provides `decisions`"),
            );
        }
        effect(parsed, decision, problems);
        owner(parsed, decision, problems);
        grants(parsed, decision, problems);
    }
}

/// The host that applies a decision's effect: the model's or the ledger's.
pub fn effect_owner<'a>(t: &'a crate::Topology, decision: &Decision) -> Option<&'a str> {
    match &decision.effect {
        DecisionEffect::Input { model, .. } => t.model(model).map(|m| m.host.as_str()),
        DecisionEffect::LedgerTransfer { ledger, .. } => t
            .ledgers
            .iter()
            .find(|l| l.name == *ledger)
            .map(|l| l.host.as_str()),
    }
}

/// The effect is applied as a Process charged to the decision host's grant at its
/// owner: another host, serving Processes, in a membership the decision's host shares.
fn owner(parsed: &Parsed, decision: &Decision, problems: &mut Vec<Diagnostic>) {
    let t = &parsed.topology;
    let (Some(owner), Some(host)) = (effect_owner(t, decision), t.host(&decision.host)) else {
        return;
    };
    let origin = match &decision.effect {
        DecisionEffect::Input { at, .. } | DecisionEffect::LedgerTransfer { at, .. } => at,
    };
    let problem = if owner == decision.host {
        Some((
            format!(
                "decision `{}` applies its effect at its own host `{owner}`: the effect runs as a Process charged to the decision host's grant at another host",
                decision.name
            ),
            "keep the decision at another host than the model's or ledger's".to_owned(),
        ))
    } else {
        t.host(owner).and_then(|o| {
            if let Some(missing) = [Profile::Decisions, Profile::Processes]
                .iter()
                .find(|p| !o.profiles.contains(p))
            {
                Some((
                    format!(
                        "decision `{}` applies its effect at `{owner}`, which does not select the `{}` profile (it runs the effect as a Process for the decision's host)",
                        decision.name,
                        missing.name()
                    ),
                    format!("add `{}` to the `profiles` line of host `{owner}`", missing.name()),
                ))
            } else if !o.memberships.iter().any(|m| host.memberships.contains(m)) {
                Some((
                    format!(
                        "decision `{}` applies its effect at `{owner}`, which shares no membership with `{}`",
                        decision.name, decision.host
                    ),
                    "the apply run reaches the owner over mutual TLS in one membership: add a common `member` line".to_owned(),
                ))
            } else {
                None
            }
        })
    };
    if let Some((message, help)) = problem {
        problems.push(at(parsed, origin, message, "effect's owner").with_help(help));
    }
}

fn effect(parsed: &Parsed, decision: &Decision, problems: &mut Vec<Diagnostic>) {
    let t = &parsed.topology;
    match &decision.effect {
        DecisionEffect::Input {
            model,
            input,
            at: origin,
        } => {
            let Some(m) = t.model(model) else {
                problems.push(
                    at(parsed, origin, format!(
                        "decision `{}` sets an input of model `{model}`, which no file declares",
                        decision.name
                    ), "no such model")
                    .with_help("name a declared model: effect \"input\" model=M input=I"),
                );
                return;
            };
            let declared = m.items.iter().find_map(|item| match item {
                Item::Input(i) if i.name == *input => Some(i),
                _ => None,
            });
            match declared {
                None => problems.push(
                    at(parsed, origin, format!(
                        "decision `{}` sets input `{input}` of model `{model}`, which declares no such input",
                        decision.name
                    ), "no such input")
                    .with_help("a decision sets an `input` of its model, never a cell"),
                ),
                Some(i) if i.from.is_some() => problems.push(
                    at(parsed, origin, format!(
                        "decision `{}` sets input `{input}` of model `{model}`, which its `from=` feeds: the decided value would be overwritten",
                        decision.name
                    ), "fed by something else")
                    .with_help("decide an input nothing else feeds (no `from=`)"),
                ),
                Some(_) => {}
            }
        }
        DecisionEffect::LedgerTransfer {
            ledger, at: origin, ..
        } => {
            if !t.ledgers.iter().any(|l| l.name == *ledger) {
                problems.push(
                    at(
                        parsed,
                        origin,
                        format!(
                            "decision `{}` transfers on ledger `{ledger}`, which no file declares",
                            decision.name
                        ),
                        "no such ledger",
                    )
                    .with_help("name a declared ledger: effect \"ledger.transfer\" ledger=L …"),
                );
            }
        }
    }
}

/// A diagnostic at `origin` in its file.
fn at(parsed: &Parsed, origin: &Origin, message: String, label: &str) -> Diagnostic {
    let source = &parsed.topology.sources[origin.source];
    let file = std::sync::Arc::new(
        miette::NamedSource::new(source.path.display().to_string(), source.text.clone())
            .with_language("kdl"),
    );
    Diagnostic::at(
        &file,
        miette::SourceSpan::new(origin.offset.into(), origin.length),
        message,
        label,
    )
}

/// Each party's Processes run under a grant: a roster member and a gate operator other
/// than the decision's host under one the host issued them, the host under one the
/// effect's owner issued it. A missing one is refused here rather than at the first
/// ballot or apply.
fn grants(parsed: &Parsed, decision: &Decision, problems: &mut Vec<Diagnostic>) {
    let t = &parsed.topology;
    let granted = |issuer: &str, caller: &str| {
        t.grants
            .iter()
            .any(|g| g.issuer == issuer && g.caller == caller && !g.retired)
    };
    let mut parties: Vec<&String> = decision.roster.iter().collect();
    parties.push(&decision.gate);
    parties.dedup();
    let mut missing: Vec<String> = Vec::new();
    for party in parties {
        if *party != decision.host
            && t.host(party).is_some()
            && !granted(&decision.host, party)
            && !missing.contains(party)
        {
            missing.push(party.clone());
        }
    }
    if !missing.is_empty() {
        problems.push(
            at(parsed, &decision.origin, format!(
                "decision `{}`: {} {} no grant from `{}`, under which a ballot or approval runs there",
                decision.name,
                missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "),
                if missing.len() == 1 { "holds" } else { "hold" },
                decision.host
            ), "no grant")
            .with_help(format!(
                "declare one each: grant NAME issuer={} caller={} units=N",
                decision.host, missing[0]
            )),
        );
    }
    if let Some(owner) = effect_owner(t, decision)
        && owner != decision.host
        && t.host(owner).is_some()
        && !granted(owner, &decision.host)
    {
        problems.push(
            at(parsed, &decision.origin, format!(
                "decision `{}`: `{}` holds no grant from `{owner}`, under which its effect runs there",
                decision.name, decision.host
            ), "no grant")
            .with_help(format!(
                "declare one: grant NAME issuer={owner} caller={} units=N",
                decision.host
            )),
        );
    }
}
