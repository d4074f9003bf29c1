//! Which memberships a model serves (issue 30, docs/memberships.md "Serving a model to a
//! membership"): a model is admitted to a membership explicitly, `serve M`, and only
//! routes of the memberships it serves may feed its inputs or carry its outputs. A
//! model that names none serves its host's one membership when the host has exactly
//! one — the only reading that is not a guess; on a host in several, it serves none
//! until it names them. Serving more than one needs the `shared-memberships` profile.
//!
//! Each `serve M` admits the model under M's models ceiling (`models ceiling=N` in
//! the membership, `MEMBERSHIP_MODELS_CEILING_DEFAULT` when it declares none): a model
//! counting more operations is refused on that `serve` line, and again by the host
//! that installs it (the install carries the ceilings, [`serve_ceilings`]). A model
//! that names no membership is admitted under its own `ceiling` only.
//!
//! Invariants, stated as absences: no route of a membership a model does not serve
//! feeds it or carries its outputs; no model serves a membership its host is not a
//! member of; no model serves two memberships on a host without `shared-memberships`;
//! no model serves a membership whose models ceiling its counted operations exceed.

use std::collections::BTreeMap;

use crate::diagnostic::Diagnostic;
use crate::limits::{MEMBERSHIP_MODELS_CEILING_DEFAULT, MODEL_OPERATIONS_CEILING_MAX};
use crate::parse::Parsed;
use crate::topology::{Model, Profile, Topology};

/// The memberships `model` serves, as [`self`] reads them (its `serve` lines, or its
/// host's one membership).
pub fn served<'a>(model: &'a Model, host_memberships: &'a [String]) -> &'a [String] {
    match (model.serves.is_empty(), host_memberships) {
        (false, _) => &model.serves,
        (true, [one]) => std::slice::from_ref(one),
        (true, _) => &[],
    }
}

/// The models ceiling of each membership `model` names in a `serve` line, as
/// `topology` declares it (a membership it does not declare is left out: the host
/// applies `MEMBERSHIP_MODELS_CEILING_DEFAULT` to it).
pub fn serve_ceilings(topology: &Topology, model: &Model) -> BTreeMap<String, u32> {
    model
        .serves
        .iter()
        .filter_map(|m| topology.memberships.iter().find(|d| &d.name == m))
        .map(|m| (m.name.clone(), m.models_ceiling()))
        .collect()
}

/// Why a model counting `operations` may not serve `membership` under `ceiling`
/// (`declared`: whether the membership declared it), or `None` when it may. The one
/// wording of `check` and of the host that installs the model.
pub fn over_models_ceiling(
    model: &str,
    operations: u64,
    membership: &str,
    ceiling: u32,
    declared: bool,
) -> Option<String> {
    (operations > u64::from(ceiling)).then(|| {
        let which = match declared {
            true => format!("its models ceiling {ceiling}"),
            false => format!(
                "its models ceiling {MEMBERSHIP_MODELS_CEILING_DEFAULT} (MEMBERSHIP_MODELS_CEILING_DEFAULT: it declares no `models ceiling=N`)"
            ),
        };
        format!(
            "model `{model}` counts {operations} operations: it may not serve membership `{membership}`, above {which}"
        )
    })
}

pub(crate) fn check(parsed: &Parsed, admission: bool, problems: &mut Vec<Diagnostic>) {
    let topology = &parsed.topology;
    for (index, model) in topology.models.iter().enumerate() {
        let Some(host) = topology.host(&model.host) else {
            continue; // an undeclared host is reported as a reference
        };
        for (i, membership) in model.serves.iter().enumerate() {
            let Some((file, span)) = parsed.serve_spans.get(&(index, i)) else {
                continue;
            };
            let declared = topology.memberships.iter().find(|m| &m.name == membership);
            if admission
                && !parsed.incomplete_models.contains(&index)
                && let Some(declared) = declared
                && let Some(refusal) = over_models_ceiling(
                    &model.name,
                    model.operations,
                    membership,
                    declared.models_ceiling(),
                    declared.declared_models_ceiling.is_some(),
                )
            {
                problems.push(
                    Diagnostic::at(file, *span, refusal, "above the membership's models ceiling")
                        .with_help(format!(
                            "declare `models ceiling=N` in membership `{membership}` (at most MODEL_OPERATIONS_CEILING_MAX, {MODEL_OPERATIONS_CEILING_MAX}), or serve it a smaller model"
                        )),
                );
            }
            if !host.memberships.contains(membership) {
                problems.push(
                    Diagnostic::at(
                        file,
                        *span,
                        format!(
                            "model `{}` serves `{membership}`, but its host `{}` is not a member of it",
                            model.name, host.name
                        ),
                        "not a membership of the host",
                    )
                    .with_help(host.not_member_help(membership, "this `serve`")),
                );
            }
            if i == 1 && !host.profiles.contains(&Profile::SharedMemberships) {
                problems.push(
                    Diagnostic::at(
                        file,
                        *span,
                        format!(
                            "model `{}` serves `{}` and `{membership}`: one model serving several memberships needs the `shared-memberships` profile on host `{}`",
                            model.name, model.serves[0], host.name
                        ),
                        "a second membership",
                    )
                    .with_help(format!(
                        "add `shared-memberships` to the `profiles` line of host `{}`, or serve one membership",
                        host.name
                    )),
                );
            }
        }
        let served = served(model, &host.memberships);
        for (_, route_name, file, span) in parsed.model_routes.iter().filter(|r| r.0 == index) {
            let Some(route) = topology.routes.iter().find(|r| &r.name == route_name) else {
                continue; // an undeclared route is reported as a reference
            };
            // A host not a member of the route's membership is reported with the route.
            if served.contains(&route.membership) || !host.memberships.contains(&route.membership) {
                continue;
            }
            let help = if model.serves.is_empty() && host.memberships.len() > 1 {
                format!(
                    "host `{}` is a member of several memberships, so model `{}` serves only those it names: add `serve {}` to it",
                    host.name, model.name, route.membership
                )
            } else {
                format!(
                    "add `serve {}` to model `{}` (its host a member of `{0}`), or use a route of a membership it serves",
                    route.membership, model.name
                )
            };
            problems.push(
                Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "route `{route_name}` is of membership `{}`, which model `{}` does not serve",
                        route.membership, model.name
                    ),
                    "another membership's route",
                )
                .with_help(help),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Options;
    use crate::topology::Profile;

    /// A host `edge` in `ops` and `util`, its model `boiler` fed by a `util` route and
    /// publishing on an `ops` route, with `serve` lines `serves` and `profiles` on edge.
    fn topology(serves: &str, profiles: &str) -> String {
        format!(
            r#"grid version=1
membership ops {{
    authority voters=1
}}
membership util {{
    authority voters=1
}}
membership other
host edge listen="127.0.0.1:7401" {{
    member ops
    member util
    profiles {profiles}
}}
host site listen="127.0.0.1:7402" {{
    member ops
    profiles transport authority delivery
}}
host gw listen="127.0.0.1:7403" {{
    member util
    profiles transport authority delivery
}}
route to-site membership=ops class=ordered {{
    publisher edge
    destination site
}}
route util-limit membership=util class=ordered {{
    publisher gw
    destination edge
}}
model boiler host=edge {{
{serves}
    input setpoint default=80 from="route:util-limit"
    cell out "setpoint * 1.5"
    output out route=to-site
}}
model gauge host=site {{
    input n default=0 from="route:to-site"
}}
"#
        )
    }

    const PROFILES: &str = "transport authority delivery";

    /// The diagnostics of loading `text`: (message, offset).
    fn refused(text: &str, options: Options) -> Vec<(String, Option<usize>, Option<String>)> {
        match crate::load_str_with("t.kdl", text, options) {
            Ok(_) => Vec::new(),
            Err(e) => e
                .items
                .iter()
                .map(|d| (d.message.clone(), d.offset(), d.help.clone()))
                .collect(),
        }
    }

    #[test]
    fn a_model_serves_only_the_memberships_it_names_on_a_host_in_several() {
        // None named on a host in two memberships: neither route may touch it, each
        // refused where it is named; `gauge`, on a host in one, serves that one.
        let text = topology("", PROFILES);
        let problems = refused(&text, Options::default());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(
            problems[0].0,
            "route `util-limit` is of membership `util`, which model `boiler` does not serve"
        );
        assert_eq!(problems[0].1, text.find("from=\"route:util-limit\""));
        assert!(
            problems[0]
                .2
                .as_deref()
                .is_some_and(|h| h.contains("serves only those it names: add `serve util`"))
        );
        assert_eq!(
            problems[1].0,
            "route `to-site` is of membership `ops`, which model `boiler` does not serve"
        );
        assert_eq!(problems[1].1, text.find("route=to-site"));
        // One named: the other membership's route is refused.
        let text = topology("    serve ops", PROFILES);
        let problems = refused(&text, Options::default());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .0
                .starts_with("route `util-limit` is of membership `util`")
        );
        // A membership the host is not in, or one named twice: refused on its span.
        let text = topology("    serve ops\n    serve other", PROFILES);
        let problems = refused(&text, Options::default());
        assert!(
            problems.iter().any(|p| p.0
                == "model `boiler` serves `other`, but its host `edge` is not a member of it"
                && p.1 == text.find("serve other").map(|o| o + 6)),
            "{problems:?}"
        );
        let text = topology("    serve ops\n    serve ops", PROFILES);
        assert!(
            refused(&text, Options::default())[0]
                .0
                .contains("given twice")
        );
    }

    /// A model counting 199 operations (ceiling 256) serving `ops`, whose membership
    /// says `ops_models` and `util`'s nothing.
    fn big_model(ops_models: &str, serves: &str) -> String {
        let formula = vec!["n"; 100].join(" + ");
        format!(
            r#"grid version=1
membership ops {{
{ops_models}
}}
membership util
host edge listen="127.0.0.1:7401" {{
    member ops
    member util
    profiles transport delivery shared-memberships
}}
model big host=edge ceiling=256 {{
{serves}
    input n default=1
    cell total "{formula}"
}}
"#
        )
    }

    #[test]
    fn each_serve_admits_the_model_under_its_memberships_models_ceiling() {
        // No `models ceiling` declared: the default (128) refuses 199 operations, on
        // the `serve` line, naming the limit.
        let text = big_model("", "    serve ops");
        let problems = refused(&text, Options::default());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            problems[0].0,
            "model `big` counts 199 operations: it may not serve membership `ops`, above its models ceiling 128 (MEMBERSHIP_MODELS_CEILING_DEFAULT: it declares no `models ceiling=N`)"
        );
        assert_eq!(
            problems[0].1,
            text.find(
                "ops
    input"
            )
        );
        assert!(
            problems[0]
                .2
                .as_deref()
                .is_some_and(|h| h.contains("`models ceiling=N` in membership `ops`"))
        );
        // Declared below the count: refused naming it; at or above: admitted.
        let text = big_model("    models ceiling=198", "    serve ops");
        assert_eq!(
            refused(&text, Options::default())[0].0,
            "model `big` counts 199 operations: it may not serve membership `ops`, above its models ceiling 198"
        );
        let text = big_model("    models ceiling=199", "    serve ops");
        assert!(refused(&text, Options::default()).is_empty());
        // Each `serve` on its own: `util` declares none.
        let text = big_model(
            "    models ceiling=4096",
            "    serve ops
    serve util",
        );
        let problems = refused(&text, Options::default());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].0.contains("serve membership `util`"),
            "{problems:?}"
        );
        assert_eq!(
            problems[0].1,
            text.find(
                "util
    input"
            )
        );
        // `gridctl model check` (admission off) leaves it to the owner.
        let options = Options {
            admission: false,
            ..Options::default()
        };
        assert!(refused(&text, options).is_empty());
        // The ceilings an install carries: the declared one, none for the other.
        let topology = crate::load_str(
            "t.kdl",
            &big_model("    models ceiling=4096", "    serve ops"),
        )
        .unwrap();
        let ceilings = super::serve_ceilings(&topology, &topology.models[0]);
        assert_eq!(
            ceilings.into_iter().collect::<Vec<_>>(),
            [("ops".to_owned(), 4096)]
        );
        // Out of range or given twice: refused at parse, naming the limit.
        let text = big_model("    models ceiling=65537", "    serve ops");
        assert!(
            refused(&text, Options::default())
                .iter()
                .any(|p| p.0.contains("MODEL_OPERATIONS_CEILING_MAX")),
            "{:?}",
            refused(&text, Options::default())
        );
        let text = big_model(
            "    models ceiling=300
    models ceiling=300",
            "    serve ops",
        );
        assert!(
            refused(&text, Options::default())
                .iter()
                .any(|p| p.0 == "`models` is given twice")
        );
    }

    #[test]
    fn serving_two_memberships_needs_the_shared_memberships_profile_a_build_without_it_refuses() {
        let both = "    serve ops\n    serve util";
        let text = topology(both, PROFILES);
        let problems = refused(&text, Options::default());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            problems[0].0,
            "model `boiler` serves `ops` and `util`: one model serving several memberships needs the `shared-memberships` profile on host `edge`"
        );
        assert_eq!(problems[0].1, text.find("util\n    input"));
        // Selected, the language takes it; a build that does not provide it refuses it
        // by name (as gridd would), never serving one membership silently.
        let text = topology(both, "transport authority delivery shared-memberships");
        assert!(crate::load_str("t.kdl", &text).is_ok());
        let options = Options {
            provided_profiles: Some(&[Profile::Transport, Profile::Authority, Profile::Delivery]),
            ..Options::default()
        };
        let problems = refused(&text, options);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .0
                .starts_with("profile `shared-memberships` cannot run"),
            "{problems:?}"
        );
    }
}
