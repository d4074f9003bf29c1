//! Whole-topology checks: references between objects, formula names, ranges, cycles,
//! admission (operation ceilings, scalar models) and uniqueness of addresses.

use std::collections::{HashMap, HashSet};

use miette::SourceSpan;

use crate::diagnostic::{Diagnostic, quoted};
use crate::formula::{Expr, ExprKind};
use crate::limits::{MODEL_OPERATIONS_CEILING_DEFAULT, MODEL_OPERATIONS_CEILING_MAX};
use crate::parse::{Parsed, RefKind, Requirement};
use crate::topology::{Item, Model, Profile, Topology};

pub(crate) fn topology(parsed: &Parsed, options: crate::Options, problems: &mut Vec<Diagnostic>) {
    if options.references {
        references(parsed, problems);
        crate::decisions::check(parsed, options.provided_profiles, problems);
    }
    hosts(parsed, problems);
    if let Some(provided) = options.provided_profiles {
        profiles_provided(parsed, provided, problems);
        exports_provided(&parsed.topology, provided, problems);
    }
    profiles_required(parsed, problems);
    if let Some(now) = options.now {
        deadlines(parsed, now, problems);
    }
    authorities(parsed, problems);
    exports(&parsed.topology, problems);
    crate::serving::check(parsed, options.admission, problems);
    crate::matrices::check(parsed, problems);
    ledgers(parsed, problems);
    for (index, model) in parsed.topology.models.iter().enumerate() {
        if !parsed.incomplete_models.contains(&index) {
            self::model(parsed, index, model, options, problems);
        }
    }
}

/// Every selected profile must be one this build runs: gridd would refuse to start the
/// host, so `check` and `plan` refuse it first (SPEC §1.1: never silently weaker).
fn profiles_provided(parsed: &Parsed, provided: &[Profile], problems: &mut Vec<Diagnostic>) {
    let names = provided
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(", ");
    for (file, span, profile, host) in &parsed.profile_spans {
        if provided.contains(profile) {
            continue;
        }
        problems.push(
            Diagnostic::at(
                file,
                *span,
                format!(
                    "profile `{}` cannot run: this build does not provide it (host `{host}`)",
                    profile.name()
                ),
                "not provided by this build",
            )
            .with_help(format!("this build provides: {names}")),
        );
    }
}

/// What each profile needs beside it on the same host, as gridd checks when it starts
/// (`grid_engine::root::start`): a selection gridd would refuse is refused here first.
const PROFILE_NEEDS: [(Profile, Profile, &str); 7] = [
    (
        Profile::Authority,
        Profile::Transport,
        "speaks Raft over it",
    ),
    (
        Profile::Delivery,
        Profile::Transport,
        "pushes values over it",
    ),
    (
        Profile::Processes,
        Profile::Transport,
        "serves and calls Processes over it",
    ),
    (
        Profile::WireObservation,
        Profile::Transport,
        "counts its TLS bytes",
    ),
    (
        Profile::ArchiveWallet,
        Profile::Processes,
        "serves its wallet's Processes with it",
    ),
    (
        Profile::Missions,
        Profile::Processes,
        "consumes its allocation through it",
    ),
    (Profile::Missions, Profile::Authority, "reserves through it"),
];

/// A host whose profiles gridd would refuse to start: `transport` without a membership
/// to be certified in, or a profile without the one it runs over.
fn profiles_required(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    for (file, span, profile, host_name) in &parsed.profile_spans {
        let Some(host) = parsed.topology.host(host_name) else {
            continue;
        };
        if *profile == Profile::Transport && host.memberships.is_empty() {
            problems.push(
                Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "host `{host_name}` selects `transport`, which serves mutual TLS with a membership's certificate, but is a member of no membership"
                    ),
                    "no membership to be certified in",
                )
                .with_help(format!(
                    "add `member M` to host `{host_name}`, or remove `transport` from its profiles"
                )),
            );
        }
        for (needing, needed, why) in PROFILE_NEEDS {
            if *profile == needing
                && !host.profiles.contains(&needed)
                // archive-wallet without processes is reported where it is read.
                && needing != Profile::ArchiveWallet
            {
                problems.push(
                    Diagnostic::at(
                        file,
                        *span,
                        format!(
                            "host `{host_name}` selects `{}`, which needs the `{}` profile: it {why}",
                            needing.name(),
                            needed.name()
                        ),
                        format!("needs `{}`", needed.name()),
                    )
                    .with_help(format!(
                        "add `{}` to the `profiles` line of host `{host_name}`",
                        needed.name()
                    )),
                );
            }
        }
    }
}

/// An `export` runs only on a build that provides the `exports` profile; parsed and
/// then ignored would be weaker than the file says (SPEC §1.1).
fn exports_provided(t: &Topology, provided: &[Profile], problems: &mut Vec<Diagnostic>) {
    if provided.contains(&Profile::Exports) {
        return;
    }
    for export in &t.exports {
        let (file, span) = export_origin(t, export);
        problems.push(
            Diagnostic::at(
                &file,
                span,
                format!(
                    "export `{}` cannot run: this build does not provide the `exports` profile",
                    export.name
                ),
                "not provided by this build",
            )
            .with_help(
                "use a gridctl and gridd built with the `exports` profile, or remove the export",
            ),
        );
    }
}

/// A mission not yet returned whose deadline has passed could never be reserved: the
/// issuer refuses an allocation past its deadline.
fn deadlines(parsed: &Parsed, now: std::time::SystemTime, problems: &mut Vec<Diagnostic>) {
    use time::format_description::well_known::Rfc3339;
    let now = time::OffsetDateTime::from(now);
    for (index, mission) in parsed.topology.missions.iter().enumerate() {
        let Some((file, span)) = parsed.mission_deadlines.get(index) else {
            continue;
        };
        let Ok(deadline) = time::OffsetDateTime::parse(&mission.deadline, &Rfc3339) else {
            continue; // its shape was checked where it was read
        };
        if mission.returned || deadline > now {
            continue;
        }
        problems.push(
            Diagnostic::at(
                file,
                *span,
                format!(
                    "mission `{}`: its deadline {} has passed",
                    mission.name, mission.deadline
                ),
                "in the past",
            )
            .with_help(
                "a new mission needs a later deadline; a mission reserved before its deadline passed is returned or recovered, and then says `returned=#true`",
            ),
        );
    }
}

fn names<'a>(list: impl Iterator<Item = &'a str>) -> HashSet<&'a str> {
    list.collect()
}

fn suggestion(name: &str, known: &HashSet<&str>) -> Option<String> {
    // The closest known name by edit distance, when it is close.
    let mut best: Option<(usize, &str)> = None;
    for candidate in known {
        let d = distance(name, candidate);
        if d <= 2.max(name.len() / 3) && best.is_none_or(|(bd, bn)| (d, *candidate) < (bd, bn)) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, n)| n.to_owned())
}

fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

fn references(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    let t = &parsed.topology;
    let empty = HashSet::new();
    let declared = |kind: &str| {
        names(
            parsed
                .declared
                .get(kind)
                .unwrap_or(&empty)
                .iter()
                .map(String::as_str),
        )
    };
    let hosts = declared("host");
    let memberships = declared("membership");
    let routes = declared("route");
    let tags = declared("tag");
    let mappings = declared("mapping");
    for reference in &parsed.references {
        let known = match reference.kind {
            RefKind::Host => &hosts,
            RefKind::Membership => &memberships,
            RefKind::Route => &routes,
            RefKind::Tag => &tags,
            RefKind::Mapping => &mappings,
        };
        let noun = reference.kind.noun();
        if !known.contains(reference.name.as_str()) {
            let help = match suggestion(&reference.name, known) {
                _ if reference.kind == RefKind::Route
                    && mappings.contains(reference.name.as_str()) =>
                {
                    crate::matrices::NOT_A_ROUTE_HELP.to_owned()
                }
                Some(near) => format!("did you mean `{near}`?"),
                None => format!(
                    "declare `{noun} {} …` or fix the name",
                    quoted(&reference.name)
                ),
            };
            problems.push(
                Diagnostic::at(
                    &reference.file,
                    reference.span,
                    format!(
                        "{} names {noun} `{}`, which is not declared",
                        reference.context,
                        quoted(&reference.name)
                    ),
                    format!("unknown {noun}"),
                )
                .with_help(help),
            );
            continue;
        }
        let failure = match &reference.require {
            None => None,
            // A declared object that failed to read has its own diagnostic already.
            Some(Requirement::MemberOf(membership)) => t.host(&reference.name).and_then(|host| {
                (!host.memberships.contains(membership)).then(|| {
                    (
                        format!(
                            "{} `{}` is not a member of membership `{membership}`",
                            reference.context, reference.name
                        ),
                        host.not_member_help(membership, "what names it here"),
                    )
                })
            }),
            Some(Requirement::Publishes(membership)) => t.host(&reference.name).and_then(|host| {
                let needs = |profile: Profile, why: &str| {
                    (!host.profiles.contains(&profile)).then(|| {
                        (
                            format!(
                                "{} `{}` does not select the `{}` profile, which {why}",
                                reference.context,
                                reference.name,
                                profile.name()
                            ),
                            format!("add `{}` to the `profiles` line of host `{}`", profile.name(), reference.name),
                        )
                    })
                };
                if !host.memberships.contains(membership) {
                    Some((
                        format!(
                            "{} `{}` is not a member of membership `{membership}`",
                            reference.context, reference.name
                        ),
                        host.not_member_help(membership, "what names it here"),
                    ))
                } else if t
                    .memberships
                    .iter()
                    .any(|m| m.name == *membership && m.authority_voters.is_none())
                {
                    Some((
                        format!(
                            "{} `{}` publishes in membership `{membership}`, which has no authority: the right to publish is a claim there",
                            reference.context, reference.name
                        ),
                        format!("add `authority voters=1` (or more) to membership `{membership}`"),
                    ))
                } else {
                    needs(Profile::Delivery, "publishing values needs")
                        .or_else(|| needs(Profile::Authority, "holds its right to publish (a claim) needs"))
                }
            }),
            Some(Requirement::HasMember(host)) => t.host(host).and_then(|h| {
                (!h.memberships.contains(&reference.name)).then(|| {
                    let own = match h.memberships.as_slice() {
                        [] => String::new(),
                        list => format!(", or name one it is a member of: {}", list.join(", ")),
                    };
                    (
                        format!(
                            "{} names membership `{}`, of which host `{host}` is not a member",
                            reference.context, reference.name
                        ),
                        format!(
                            "the host presents its certificate of that membership to the broker: add `member {}` to host `{host}`{own}",
                            reference.name
                        ),
                    )
                })
            }),
            Some(Requirement::TagAt(host)) => t.tags.iter().find(|g| g.name == reference.name).and_then(|tag| {
                (tag.host != *host).then(|| {
                    (
                        format!(
                            "{} reads tag `{}`, which is read at host `{}`, not the model's host `{host}`",
                            reference.context, reference.name, tag.host
                        ),
                        format!("a model reads only its own host's tags: set host={host} on tag `{}`, or route the value", reference.name),
                    )
                })
            }),
            Some(Requirement::PublishedBy(host)) => t.routes.iter().find(|r| r.name == reference.name).and_then(|route| {
                (route.publisher != *host).then(|| {
                    (
                        format!(
                            "{} goes to route `{}`, whose publisher is `{}`, not the model's host `{host}`",
                            reference.context, reference.name, route.publisher
                        ),
                        "a model publishes only on routes its own host publishes".to_owned(),
                    )
                })
            }),
            Some(Requirement::Processes { others, membership }) => t.host(&reference.name).and_then(|host| {
                if !host.profiles.contains(&Profile::Processes) {
                    return Some((
                        format!(
                            "{} `{}` does not select the `processes` profile, which serving, calling and relaying Processes needs",
                            reference.context, reference.name
                        ),
                        format!("add `processes` to the `profiles` line of host `{}`", reference.name),
                    ));
                }
                // A membership a party leaves still counts: the grant keeps its
                // history there, and the leave waits for its units in flight.
                let within = |h: &crate::topology::Host, m: &String| {
                    h.memberships.contains(m) || h.leaving.contains(m)
                };
                if let Some(membership) = membership {
                    // An undeclared membership has its own diagnostic.
                    let declared = t.memberships.iter().any(|m| m.name == *membership);
                    return (declared && !within(host, membership)).then(|| {
                        (
                            format!(
                                "{} `{}` is not a member of membership `{membership}`, which the grant serves",
                                reference.context, reference.name
                            ),
                            host.not_member_help(membership, "the grant's `membership=`"),
                        )
                    });
                }
                let shared = host.memberships.iter().chain(&host.leaving).any(|m| {
                    others
                        .iter()
                        .filter_map(|o| t.host(o))
                        .all(|o| within(o, m))
                });
                (!shared).then(|| {
                    (
                        format!(
                            "{} `{}` shares no membership with {}",
                            reference.context,
                            reference.name,
                            others.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(" and ")
                        ),
                        "the parties of a grant reach each other over mutual TLS in one membership: add a common `member` line".to_owned(),
                    )
                })
            }),
            Some(Requirement::SharesWith(other)) => t.host(&reference.name).zip(t.host(other)).and_then(|(host, other)| {
                if let Some(missing) = [Profile::Decisions, Profile::Processes].iter().find(|p| !host.profiles.contains(p)) {
                    return Some((
                        format!(
                            "{} `{}` does not select the `{}` profile, which signing and sending its ballot or approval needs",
                            reference.context, reference.name, missing.name()
                        ),
                        format!("add `{}` to the `profiles` line of host `{}`", missing.name(), reference.name),
                    ));
                }
                let shared = host.memberships.iter().any(|m| other.memberships.contains(m));
                (!shared).then(|| {
                    (
                        format!(
                            "{} `{}` shares no membership with `{}`",
                            reference.context, reference.name, other.name
                        ),
                        format!(
                            "its ballots and approvals reach `{}` over mutual TLS in one membership: add a common `member` line",
                            other.name
                        ),
                    )
                })
            }),
            Some(Requirement::Selects(profile, why)) => t.host(&reference.name).and_then(|host| {
                (!host.profiles.contains(profile)).then(|| {
                    (
                        format!(
                            "{} `{}` does not select the `{}` profile, which {why}",
                            reference.context,
                            reference.name,
                            profile.name()
                        ),
                        format!("add `{}` to the `profiles` line of host `{}`", profile.name(), reference.name),
                    )
                })
            }),
            Some(Requirement::MapsTo(host)) => t.mappings.iter().find(|m| m.name == reference.name).and_then(|mapping| {
                (!mapping.destinations.iter().any(|d| d.host == *host)).then(|| {
                    (
                        format!(
                            "{} reads mapping `{}`, which has no destination `{host}`",
                            reference.context, reference.name
                        ),
                        format!("add `destination {host}` to mapping `{}`", reference.name),
                    )
                })
            }),
            Some(Requirement::DeliversTo(host)) => t.routes.iter().find(|r| r.name == reference.name).and_then(|route| {
                (!route.destinations.iter().any(|d| d.host == *host)).then(|| {
                    (
                        format!(
                            "{} reads route `{}`, which has no destination `{host}`",
                            reference.context, reference.name
                        ),
                        format!("add `destination {host}` to route `{}`", reference.name),
                    )
                })
            }),
        };
        if let Some((message, help)) = failure {
            problems.push(
                Diagnostic::at(&reference.file, reference.span, message, "here").with_help(help),
            );
        }
    }
}

fn hosts(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    let mut listens: HashMap<std::net::SocketAddr, usize> = HashMap::new();
    let mut dirs: HashMap<&std::path::Path, usize> = HashMap::new();
    for (index, host) in parsed.topology.hosts.iter().enumerate() {
        let (file, listen_span, dir_span) = &parsed.host_spans[index];
        if let Some(first) = listens.insert(host.listen, index) {
            let other = &parsed.topology.hosts[first].name;
            problems.push(
                Diagnostic::at(
                    file,
                    *listen_span,
                    format!(
                        "host `{}` listens on {}, as host `{other}` does",
                        host.name, host.listen
                    ),
                    "address in use by another host",
                )
                .with_help("give every host its own listen address"),
            );
        }
        if let (Some(dir), Some(dir_span)) = (&host.dir, dir_span)
            && let Some(first) = dirs.insert(dir.as_path(), index)
        {
            let other = &parsed.topology.hosts[first].name;
            problems.push(
                Diagnostic::at(
                    file,
                    *dir_span,
                    format!(
                        "host `{}` uses directory {}, as host `{other}` does",
                        host.name,
                        dir.display()
                    ),
                    "directory of another host",
                )
                .with_help("a host's state directory is private to it"),
            );
        }
    }
}

fn authorities(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    let t = &parsed.topology;
    storage_authorities(parsed, problems);
    for membership in &t.memberships {
        let Some(voters) = membership.authority_voters else {
            continue;
        };
        let eligible = t
            .hosts
            .iter()
            .filter(|h| {
                h.memberships.contains(&membership.name) && h.profiles.contains(&Profile::Authority)
            })
            .count();
        if eligible < voters as usize {
            let (file, span) = &parsed.authority_spans[&membership.name];
            problems.push(
                Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "membership `{}` asks for {voters} authority voters but only {eligible} member host{} select{} the `authority` profile",
                        membership.name,
                        if eligible == 1 { "" } else { "s" },
                        if eligible == 1 { "s" } else { "" },
                    ),
                    "too many voters",
                )
                .with_help("add `profiles … authority` to more member hosts or lower `voters`"),
            );
        }
    }
}

/// `storage authority="M"`: M declares an authority, and the host reaches it as a
/// client — over the transport, not as one of its voters (its start waits for the
/// authority's answer before it serves anything, its own Raft included).
fn storage_authorities(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    let t = &parsed.topology;
    for (file, span, host_name, membership) in &parsed.storage_authority_spans {
        let Some(host) = t.hosts.iter().find(|h| &h.name == host_name) else {
            continue;
        };
        let mut refuse = |message: String, label: &str, help: String| {
            problems.push(Diagnostic::at(file, *span, message, label).with_help(help));
        };
        let declared = t.memberships.iter().find(|m| &m.name == membership);
        if declared.is_some_and(|m| m.authority_voters.is_none()) {
            refuse(
                format!(
                    "`storage authority={membership}`: membership `{membership}` declares no authority"
                ),
                "no authority",
                format!(
                    "add `authority voters=N` to membership `{membership}`, or name a membership that has one"
                ),
            );
        } else if host.profiles.contains(&Profile::Authority) {
            refuse(
                format!(
                    "`storage authority={membership}`: host `{host_name}` selects the `authority` profile"
                ),
                "a voter of its own fence",
                format!(
                    "a host whose store is fenced at an authority asks it at every start before it serves, its own Raft included: keep `{host_name}` out of the authority's hosts"
                ),
            );
        } else if !host.profiles.contains(&Profile::Transport) {
            refuse(
                format!(
                    "`storage authority={membership}`: host `{host_name}` does not select the `transport` profile"
                ),
                "no transport",
                "the host asks the authority's voters over the transport: add `profiles … transport`"
                    .to_owned(),
            );
        }
    }
}

/// The file and span of an export's node, for its diagnostics.
fn export_origin(
    t: &Topology,
    export: &crate::topology::Export,
) -> (std::sync::Arc<miette::NamedSource<String>>, SourceSpan) {
    let source = &t.sources[export.origin.source];
    let file = std::sync::Arc::new(miette::NamedSource::new(
        source.path.display().to_string(),
        source.text.clone(),
    ));
    (
        file,
        SourceSpan::new(export.origin.offset.into(), export.origin.length),
    )
}

fn exports(t: &Topology, problems: &mut Vec<Diagnostic>) {
    for (i, export) in t.exports.iter().enumerate() {
        if let Some(first) = t.exports[..i]
            .iter()
            .find(|e| !e.retired && !export.retired && e.from == export.from && e.to == export.to)
        {
            let (file, span) = export_origin(t, export);
            problems.push(
                Diagnostic::at(
                    &file,
                    span,
                    format!(
                        "export `{}` carries `{}` onto `{}` as export `{}` does: each value would be published twice",
                        export.name, export.from, export.to, first.name
                    ),
                    "second export of the same routes",
                )
                .with_help(format!("retire `{}` (`retired=#true`) or remove this one", first.name)),
            );
        }
        let (Some(from), Some(to), Some(gateway)) = (
            t.routes.iter().find(|r| r.name == export.from),
            t.routes.iter().find(|r| r.name == export.to),
            t.host(&export.gateway),
        ) else {
            continue; // reported as unresolved references
        };
        let (file, span) = export_origin(t, export);
        if from.membership == to.membership {
            problems.push(
                Diagnostic::at(
                    &file,
                    span,
                    format!(
                        "export `{}` stays inside membership `{}`",
                        export.name, from.membership
                    ),
                    "not cross-domain",
                )
                .with_help(
                    "an export passes values between two memberships; a route already serves one",
                ),
            );
        }
        let mut refuse = |message: String, label: &str, help: String| {
            problems.push(Diagnostic::at(&file, span, message, label.to_owned()).with_help(help));
        };
        if !from.destinations.iter().any(|d| d.host == gateway.name) {
            refuse(
                format!(
                    "export `{}`: gateway `{}` is not a destination of route `{}`",
                    export.name, gateway.name, from.name
                ),
                "gateway cannot receive `from`",
                format!(
                    "add `destination {}` to route `{}`",
                    gateway.name, from.name
                ),
            );
        }
        if to.publisher != gateway.name {
            refuse(
                format!(
                    "export `{}`: route `{}` is published by `{}`, not by the gateway `{}`",
                    export.name, to.name, to.publisher, gateway.name
                ),
                "gateway cannot publish `to`",
                format!(
                    "make `{}` the publisher of route `{}`: its publication right is the claim `route:{}`",
                    gateway.name, to.name, to.name
                ),
            );
        }
        if !export.issuer.is_empty() && export.issuer != from.publisher {
            refuse(
                format!(
                    "export `{}`: the disclosure is by `{}`, which is not the publisher of route `{}` (`{}`)",
                    export.name, export.issuer, from.name, from.publisher
                ),
                "not the original owner",
                format!(
                    "only the original publisher of a value discloses it: `disclosure issuer={}`",
                    from.publisher
                ),
            );
        }
        for (host, role) in [
            (Some(gateway), "gateway"),
            (t.host(&export.issuer), "disclosure's issuer"),
        ] {
            if let Some(h) = host
                && !h.profiles.contains(&Profile::Exports)
            {
                refuse(
                    format!(
                        "export `{}`: its {role} `{}` does not select the `exports` profile",
                        export.name, h.name
                    ),
                    "profile missing",
                    format!("add `exports` to the `profiles` line of host `{}`", h.name),
                );
            }
        }
        for membership in [&from.membership, &to.membership] {
            if !gateway.memberships.contains(membership) {
                problems.push(
                    Diagnostic::at(
                        &file,
                        span,
                        format!(
                            "export `{}`: gateway `{}` is not a member of `{membership}`",
                            export.name, gateway.name
                        ),
                        "gateway outside a membership",
                    )
                    .with_help(format!(
                        "add `member {membership}` to host `{}`",
                        gateway.name
                    )),
                );
            }
        }
    }
}

/// Resolves a name inside `model` to its item index.
fn index_of(model: &Model, name: &str) -> Option<usize> {
    model.items.iter().position(|i| i.name() == name)
}

fn model(
    parsed: &Parsed,
    index: usize,
    model: &Model,
    options: crate::Options,
    problems: &mut Vec<Diagnostic>,
) {
    let (model_file, model_span) = &parsed.model_names[index];
    let known: HashSet<&str> = model.items.iter().map(Item::name).collect();
    let mut resolved = true;
    // Dependencies of each item (inputs have none), for the cycle check.
    let mut dependencies: Vec<Vec<(usize, SourceSpan)>> = vec![Vec::new(); model.items.len()];
    for (item_index, item) in model.items.iter().enumerate() {
        let Item::Cell(cell) = item else { continue };
        let site = &parsed.formulas[&(index, item_index)];
        let unknown = |name: &str, span: SourceSpan, problems: &mut Vec<Diagnostic>| {
            let help = match suggestion(name, &known) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!(
                    "declare `input {name}` or `cell {name} \"…\"` in model `{}`",
                    model.name
                ),
            };
            problems.push(
                Diagnostic::at(
                    &site.file,
                    span,
                    format!(
                        "cell `{}` refers to `{name}`, which model `{}` does not declare",
                        cell.name, model.name
                    ),
                    "unknown name",
                )
                .with_help(help),
            );
        };
        cell.expr.walk(&mut |expr: &Expr| match &expr.kind {
            ExprKind::Name(name) => match index_of(model, name) {
                Some(target) => dependencies[item_index].push((target, site.span(&expr.span))),
                None => {
                    resolved = false;
                    unknown(name, site.span(&expr.span), problems);
                }
            },
            ExprKind::Range { first, last } => {
                let a = index_of(model, &first.name);
                let b = index_of(model, &last.name);
                if a.is_none() {
                    unknown(&first.name, site.span(&first.span), problems);
                }
                if b.is_none() {
                    unknown(&last.name, site.span(&last.span), problems);
                }
                match (a, b) {
                    (Some(a), Some(b)) if a <= b => {
                        for target in a..=b {
                            dependencies[item_index].push((target, site.span(&expr.span)));
                        }
                    }
                    (Some(_), Some(_)) => {
                        resolved = false;
                        problems.push(
                            Diagnostic::at(
                                &site.file,
                                site.span(&expr.span),
                                format!(
                                    "range `{}:{}` is backwards: `{}` is declared after `{}`",
                                    first.name, last.name, first.name, last.name
                                ),
                                "backwards range",
                            )
                            .with_help(format!(
                                "a range covers inputs and cells in declaration order; write `{}:{}`",
                                last.name, first.name
                            )),
                        );
                    }
                    _ => resolved = false,
                }
            }
            ExprKind::Call(function, _) if model.scalar => {
                problems.push(
                    Diagnostic::at(
                        &site.file,
                        site.span(&expr.span),
                        format!(
                            "scalar model `{}` admits no functions; cell `{}` calls {function}",
                            model.name, cell.name
                        ),
                        "function in a scalar model",
                    )
                    .with_help("a scalar model admits arithmetic and comparisons only; drop scalar=#true or rewrite the formula"),
                );
            }
            _ => {}
        });
    }
    for (output_index, output) in model.outputs.iter().enumerate() {
        if !known.contains(output.cell.as_str()) {
            let (file, span) = &parsed.output_spans[&(index, output_index)];
            problems.push(
                Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "output `{}` is not an input or cell of model `{}`",
                        output.cell, model.name
                    ),
                    "unknown cell",
                )
                .with_help(match suggestion(&output.cell, &known) {
                    Some(near) => format!("did you mean `{near}`?"),
                    None => "an output publishes one of the model's cells".to_owned(),
                }),
            );
        }
    }
    if resolved {
        cycles(parsed, index, model, &dependencies, problems);
    }
    let ceiling = model.ceiling();
    if options.admission && model.operations > ceiling as u64 {
        let which = match model.declared_ceiling {
            Some(_) => format!("its ceiling {ceiling}"),
            None => format!(
                "the default ceiling {MODEL_OPERATIONS_CEILING_DEFAULT} (MODEL_OPERATIONS_CEILING_DEFAULT)"
            ),
        };
        problems.push(
            Diagnostic::at(
                model_file,
                *model_span,
                format!(
                    "model `{}` counts {} operations, above {which}",
                    model.name, model.operations
                ),
                "not admitted",
            )
            .with_help(format!(
                "declare a higher `ceiling=N` (at most MODEL_OPERATIONS_CEILING_MAX, {MODEL_OPERATIONS_CEILING_MAX}) or simplify the formulas; docs/models.md gives the counting rule"
            )),
        );
    }
}

/// Reports every dependency cycle once, with its path `a -> b -> a`. A reference inside
/// an IF branch counts even when that branch is not taken: cycles are decided on the
/// static dependency graph, so admission never depends on input values.
fn cycles(
    parsed: &Parsed,
    index: usize,
    model: &Model,
    dependencies: &[Vec<(usize, SourceSpan)>],
    problems: &mut Vec<Diagnostic>,
) {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut marks = vec![Mark::New; model.items.len()];
    for start in 0..model.items.len() {
        if marks[start] != Mark::New {
            continue;
        }
        // Iterative depth-first search: (item, next dependency to visit).
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        marks[start] = Mark::Open;
        while let Some(&mut (item, ref mut next)) = stack.last_mut() {
            if let Some(&(target, span)) = dependencies[item].get(*next) {
                *next += 1;
                match marks[target] {
                    Mark::New => {
                        marks[target] = Mark::Open;
                        stack.push((target, 0));
                    }
                    Mark::Open => {
                        let from = stack
                            .iter()
                            .position(|(i, _)| *i == target)
                            .expect("open items are on the stack");
                        let mut path: Vec<&str> = stack[from..]
                            .iter()
                            .map(|(i, _)| model.items[*i].name())
                            .collect();
                        path.push(model.items[target].name());
                        let file = &parsed.formulas[&(index, item)].file;
                        problems.push(
                            Diagnostic::at(
                                file,
                                span,
                                format!("cycle in model `{}`: {}", model.name, path.join(" -> ")),
                                "this reference closes the cycle",
                            )
                            .with_help("a cell may not depend on itself, even through an IF branch that is not taken"),
                        );
                    }
                    Mark::Done => {}
                }
            } else {
                marks[item] = Mark::Done;
                stack.pop();
            }
        }
    }
}

/// At most `LEDGERS_PER_HOST_MAX` ledgers per host.
fn ledgers(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    use crate::limits::LEDGERS_PER_HOST_MAX;
    let mut per_host: HashMap<&str, usize> = HashMap::new();
    for (index, ledger) in parsed.topology.ledgers.iter().enumerate() {
        let count = per_host.entry(ledger.host.as_str()).or_default();
        *count += 1;
        if *count == LEDGERS_PER_HOST_MAX + 1 {
            let (file, span) = &parsed.ledger_spans[index];
            problems.push(
                Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "host `{}` keeps more than LEDGERS_PER_HOST_MAX ({LEDGERS_PER_HOST_MAX}) ledgers",
                        ledger.host
                    ),
                    "one ledger too many",
                )
                .with_help("keep accounts of one host in fewer ledgers, or move ledgers to another host"),
            );
        }
    }
}
