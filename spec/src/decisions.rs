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
                .with_help("decisions are not built yet (issue 35): remove the decision, or use a build that provides `decisions`"),
            );
        }
        effect(parsed, decision, problems);
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
