//! The live view of `gridctl up`: what one refresh observes of every owner (each
//! observation bounded, all side by side) and how it is drawn — models, routes with
//! each destination's receipt verified offline, grants, each authority's leader and
//! read barrier.

use grid_spec::limits::VIEW_REASON_CHARS_MAX;
use std::path::Path;
use std::time::{Duration, Instant};

use grid_engine::authority::service::{AuthorityCall, AuthorityReply, VoterStatus};
use grid_engine::delivery::api::{DeliveryCall, DeliveryReply};
use grid_engine::delivery::receipts::Receipt;
use grid_engine::host::control::Client;
use grid_engine::processes::api::{ProcessCall, ProcessReply};
use grid_engine::protocol::{Call, Reply, ValueText};
use grid_spec::Topology;

use crate::observe;

/// The longest one observation of the live view may take (one model's values, one
/// route's receipts, one grant, one authority's statuses and barrier). Observations
/// run side by side, so a host that does not answer costs a refresh at most this.
pub const VIEW_OBSERVATION_TIMEOUT: Duration = Duration::from_millis(400);

/// What one refresh of the live view observed; [`render`] draws it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    pub models: Vec<ModelRow>,
    pub tags: Vec<TagRow>,
    pub routes: Vec<RouteRow>,
    pub grants: Vec<GrantRow>,
    pub authorities: Vec<AuthorityRow>,
}

/// One model's values as its owner holds them (`name=value` in order).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRow {
    pub model: String,
    pub host: String,
    pub values: Result<Vec<(String, String)>, String>,
}

/// One tag at its host: last index, the adapter's connection, outstanding debt.
#[derive(Debug, Clone, PartialEq)]
pub struct TagRow {
    pub tag: String,
    pub host: String,
    /// `None`: the host does not hold it (yet).
    pub state: Result<Option<grid_engine::protocol::TagState>, String>,
}

/// One route at its publisher.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteRow {
    pub route: String,
    pub publisher: String,
    /// The last position published, or why the publisher could not say.
    pub published: Result<u64, String>,
    pub destinations: Vec<DestinationRow>,
}

/// One destination of a route, as the publisher's newest receipt from it says.
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationRow {
    pub host: String,
    pub retired: bool,
    /// The position the newest signed receipt covers (`None`: no receipt yet).
    pub receipted: Option<u64>,
    /// Values still owed to it.
    pub outstanding: Option<u64>,
    /// Whether that receipt verifies offline with the destination's public keys.
    pub verified: Option<Result<(), String>>,
}

/// One grant at its issuer.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantRow {
    pub grant: String,
    pub issuer: String,
    pub caller: String,
    /// `None`: the issuer holds no such grant yet.
    pub units: Result<Option<GrantUnits>, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantUnits {
    pub allocated: u64,
    pub reserved: u64,
    pub consumed: u64,
    pub unknown: u64,
    pub surrendered: u64,
    pub available: u64,
}

/// One membership's authority: the leader each voter reports, then a read barrier.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorityRow {
    pub membership: String,
    /// Each voter's report: the leader it believes in, or why it did not answer.
    pub voters: Vec<(String, Result<Option<String>, String>)>,
    /// `ok` or `unknown`.
    pub barrier: String,
    /// Through which voter the barrier passed, or why it failed.
    pub barrier_detail: String,
}

/// A number for people: at most four decimals, trailing zeros dropped (the owners
/// hold the exact values; `gridctl inspect model` prints them).
fn readable(x: f64) -> String {
    // Four decimals at most; a number too large or too small for that reads in
    // exponent form, never in hundreds of digits.
    if x != 0.0 && !(1e-4..1e16).contains(&x.abs()) {
        return grid_engine::model::number_text(x);
    }
    let text = format!("{x:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

/// One screen of the live view: observes every owner (each observation bounded by
/// [`VIEW_OBSERVATION_TIMEOUT`]) and draws it.
pub fn view(topology: &Topology, state: &Path) -> String {
    render(&observe_view(topology, state))
}

/// Observes everything the view shows, all observations side by side.
pub fn observe_view(topology: &Topology, state: &Path) -> Observed {
    let deadline = Instant::now() + VIEW_OBSERVATION_TIMEOUT;
    std::thread::scope(|scope| {
        let models: Vec<_> = topology
            .models
            .iter()
            .filter(|m| !m.retired)
            .map(|m| scope.spawn(move || observe_model(m, state, deadline)))
            .collect();
        // One `observe` per host that reads tags, all of its tags from it.
        let mut tag_hosts: Vec<&str> = topology.tags.iter().map(|t| t.host.as_str()).collect();
        tag_hosts.sort_unstable();
        tag_hosts.dedup();
        let tags: Vec<_> = tag_hosts
            .into_iter()
            .map(|host| scope.spawn(move || observe_tags(topology, host, state, deadline)))
            .collect();
        let routes: Vec<_> = topology
            .routes
            .iter()
            .filter(|r| !r.retired)
            .map(|r| scope.spawn(move || observe_route(r, state, deadline)))
            .collect();
        let grants: Vec<_> = topology
            .grants
            .iter()
            .filter(|g| !g.retired)
            .map(|g| scope.spawn(move || observe_grant(g, state, deadline)))
            .collect();
        let authorities: Vec<_> = topology
            .memberships
            .iter()
            .filter(|m| m.authority_voters.is_some())
            .map(|m| scope.spawn(move || observe_authority(&m.name, state, deadline)))
            .collect();
        fn join<T>(handles: Vec<std::thread::ScopedJoinHandle<'_, T>>) -> Vec<T> {
            handles
                .into_iter()
                .map(|h| h.join().expect("an observation panicked"))
                .collect()
        }
        Observed {
            models: join(models),
            tags: {
                let mut rows: Vec<TagRow> = join(tags).into_iter().flatten().collect();
                let order = |row: &TagRow| topology.tags.iter().position(|t| t.name == row.tag);
                rows.sort_by_key(order);
                rows
            },
            routes: join(routes),
            grants: join(grants),
            authorities: join(authorities),
        }
    })
}

/// One control call to the host in `dir`, given up at `deadline` (the host may still
/// act on it: only observing calls are sent this way).
fn call_within(dir: &Path, call: &Call, deadline: Instant) -> Result<Reply, String> {
    let timed_out = || {
        format!(
            "no answer in time (VIEW_OBSERVATION_TIMEOUT = {} ms)",
            VIEW_OBSERVATION_TIMEOUT.as_millis()
        )
    };
    let mut client =
        Client::connect(dir).map_err(|_| "not running (no control socket answers)".to_owned())?;
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(timed_out());
    }
    client.set_timeout(Some(left)).map_err(|e| e.to_string())?;
    client.call(call).map_err(|e| {
        if Instant::now() >= deadline {
            timed_out()
        } else {
            e.to_string()
        }
    })
}

fn unexpected(reply: &impl std::fmt::Debug) -> String {
    let text = format!("{reply:?}");
    format!(
        "unexpected reply {}",
        text.split(['(', ' ', '{']).next().unwrap_or("")
    )
}

fn observe_model(model: &grid_spec::Model, state: &Path, deadline: Instant) -> ModelRow {
    let dir = observe::host_dir(state, &model.host);
    let values = match call_within(
        &dir,
        &Call::Values {
            model: model.name.clone(),
        },
        deadline,
    ) {
        Ok(Reply::Values { values, .. }) => Ok(values
            .into_iter()
            .map(|(n, v)| {
                let v = match v {
                    ValueText::Number(x) => readable(x),
                    ValueText::Error(e) => e,
                };
                (n, v)
            })
            .collect()),
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(unexpected(&other)),
        Err(e) => Err(e),
    };
    ModelRow {
        model: model.name.clone(),
        host: model.host.clone(),
        values,
    }
}

/// The rows of every tag the files declare at `host`, from one `observe` of it.
fn observe_tags(topology: &Topology, host: &str, state: &Path, deadline: Instant) -> Vec<TagRow> {
    let dir = observe::host_dir(state, host);
    let held = match call_within(&dir, &Call::Observe, deadline) {
        Ok(Reply::Observation(o)) => Ok(o.tags),
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(unexpected(&other)),
        Err(e) => Err(e),
    };
    topology
        .tags
        .iter()
        .filter(|t| t.host == host)
        .map(|tag| TagRow {
            tag: tag.name.clone(),
            host: tag.host.clone(),
            state: match &held {
                Ok(tags) => Ok(tags.iter().find(|t| t.name == tag.name).cloned()),
                Err(e) => Err(e.clone()),
            },
        })
        .collect()
}

/// Whether `receipt` verifies offline with its recipient's public keys, read from the
/// recipient's installation (as `gridctl inspect receipts --verify` checks it).
pub fn verify_receipt(state: &Path, receipt: &Receipt) -> Result<(), String> {
    let recipient = &receipt.body.recipient;
    let manifest = grid_engine::custody::manifest(&observe::host_dir(state, recipient))
        .map_err(|e| format!("the public keys of `{recipient}` cannot be read: {e}"))?;
    let key =
        grid_engine::custody::signing_key_of(&manifest, receipt.generation).ok_or_else(|| {
            format!(
                "`{recipient}` has no signing key of generation {}",
                receipt.generation
            )
        })?;
    receipt.verify(&key).map_err(|e| e.to_string())
}

fn observe_route(route: &grid_spec::Route, state: &Path, deadline: Instant) -> RouteRow {
    let dir = observe::host_dir(state, &route.publisher);
    let reply = match call_within(
        &dir,
        &Call::Delivery {
            request: DeliveryCall::Receipts {
                route: route.name.clone(),
            },
        },
        deadline,
    ) {
        Ok(Reply::Delivery(reply)) => match *reply {
            DeliveryReply::Receipts {
                published,
                receipts,
                outstanding,
                ..
            } => Ok((published, receipts, outstanding)),
            DeliveryReply::Refused { reason } => Err(reason),
            other => Err(unexpected(&other)),
        },
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(unexpected(&other)),
        Err(e) => Err(e),
    };
    let (published, receipts, outstanding) = match reply {
        Ok((p, r, o)) => (Ok(p), r, o),
        Err(e) => (Err(e), Vec::new(), Default::default()),
    };
    let destinations = route
        .destinations
        .iter()
        .map(|d| {
            let receipt = receipts.iter().find(|r| r.body.recipient == d.host);
            DestinationRow {
                host: d.host.clone(),
                retired: d.retired,
                receipted: receipt.map(|r| r.body.highest_position),
                outstanding: outstanding.get(&d.host).copied(),
                verified: receipt.map(|r| verify_receipt(state, r)),
            }
        })
        .collect();
    RouteRow {
        route: route.name.clone(),
        publisher: route.publisher.clone(),
        published,
        destinations,
    }
}

fn observe_grant(grant: &grid_spec::Grant, state: &Path, deadline: Instant) -> GrantRow {
    let dir = observe::host_dir(state, &grant.issuer);
    let units = match call_within(
        &dir,
        &Call::Process {
            request: ProcessCall::Grants,
        },
        deadline,
    ) {
        Ok(Reply::Process(reply)) => match *reply {
            ProcessReply::Grants { grants, .. } => Ok(grants
                .iter()
                .find(|g| g.name == grant.name)
                .map(|g| GrantUnits {
                    allocated: g.allocated,
                    reserved: g.reserved,
                    consumed: g.consumed,
                    unknown: g.unknown,
                    surrendered: g.surrendered,
                    available: g.available(),
                })),
            other => Err(unexpected(&other)),
        },
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(unexpected(&other)),
        Err(e) => Err(e),
    };
    GrantRow {
        grant: grant.name.clone(),
        issuer: grant.issuer.clone(),
        caller: grant.caller.clone(),
        units,
    }
}

fn authority_within(
    dir: &Path,
    membership: &str,
    request: AuthorityCall,
    deadline: Instant,
) -> Result<AuthorityReply, String> {
    match call_within(
        dir,
        &Call::Authority {
            membership: Some(membership.to_owned()),
            request,
        },
        deadline,
    )? {
        Reply::Authority(reply) => Ok(reply),
        Reply::Refused { reason } => Err(reason),
        other => Err(unexpected(&other)),
    }
}

/// Each voter's status side by side (by half the time), then a read barrier through
/// the voters in order of how likely they lead (as `gridctl inspect authority` does),
/// all by `deadline`.
fn observe_authority(membership: &str, state: &Path, deadline: Instant) -> AuthorityRow {
    let voters = crate::authority::voter_hosts(state, membership);
    // Half the time for the statuses, so a voter that does not answer leaves the
    // barrier time to pass through the others.
    let statuses_by = deadline - VIEW_OBSERVATION_TIMEOUT / 2;
    let statuses: Vec<Result<VoterStatus, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = voters
            .iter()
            .map(|v| {
                scope.spawn(move || {
                    match authority_within(&v.dir, membership, AuthorityCall::Status, statuses_by)?
                    {
                        AuthorityReply::Status(s) => Ok(*s),
                        other => Err(unexpected(&other)),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a status observation panicked"))
            .collect()
    });
    let mut row = AuthorityRow {
        membership: membership.to_owned(),
        voters: voters
            .iter()
            .zip(&statuses)
            .map(|(v, s)| {
                let report = match s {
                    Ok(s) if !s.initialized => Err("not bootstrapped".to_owned()),
                    Ok(s) if s.state == "leader" => Ok(Some(s.participant.clone())),
                    Ok(s) => Ok(s.leader.clone()),
                    Err(e) => Err(e.clone()),
                };
                (v.name.clone(), report)
            })
            .collect(),
        barrier: "unknown".to_owned(),
        barrier_detail: if voters.is_empty() {
            "no voter is installed".to_owned()
        } else {
            "no voter answered".to_owned()
        },
    };
    let mut order: Vec<usize> = (0..voters.len())
        .filter(|&i| statuses[i].as_ref().is_ok_and(|s| s.initialized))
        .collect();
    order.sort_by_key(|&i| statuses[i].as_ref().map_or(true, |s| s.state != "leader"));
    let mut details = Vec::new();
    for i in order {
        match authority_within(&voters[i].dir, membership, AuthorityCall::Barrier, deadline) {
            Ok(AuthorityReply::Barrier {
                barrier,
                read_index,
                ..
            }) if barrier == "ok" => {
                row.barrier = barrier;
                row.barrier_detail = format!(
                    "through {}{}",
                    voters[i].name,
                    read_index.map_or(String::new(), |n| format!(", read index {n}"))
                );
                return row;
            }
            Ok(AuthorityReply::Barrier { detail, .. }) => {
                details.push(format!("{}: {detail}", voters[i].name))
            }
            Ok(other) => details.push(format!("{}: {}", voters[i].name, unexpected(&other))),
            Err(e) => details.push(format!("{}: {e}", voters[i].name)),
        }
    }
    if !details.is_empty() {
        row.barrier_detail = details.join("; ");
    } else if statuses
        .iter()
        .any(|s| s.as_ref().is_ok_and(|s| !s.initialized))
    {
        row.barrier_detail = "the authority is not bootstrapped".to_owned();
    }
    row
}

/// A failure's reason on one short line.
pub(super) fn short(reason: &str) -> String {
    let line = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= VIEW_REASON_CHARS_MAX {
        line
    } else {
        let cut: String = line.chars().take(VIEW_REASON_CHARS_MAX - 1).collect();
        format!("{cut}…")
    }
}

/// Rows with their columns padded to a common width (the last column is not).
fn table(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter(|r| c + 1 < r.len())
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::from(" ");
        for (c, cell) in row.iter().enumerate() {
            line.push(' ');
            if c + 1 < row.len() {
                line.push_str(&format!("{cell:<width$}", width = widths[c]));
                line.push(' ');
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

pub(super) fn section(out: &mut String, header: &str, rows: &[Vec<String>]) {
    out.push_str(header);
    out.push('\n');
    if rows.is_empty() {
        out.push_str("  (none declared)\n");
    } else {
        table(out, rows);
    }
}

/// Draws one screen: sections `models`, `tags`, `routes`, `grants`, `authority`, one line per
/// item (a route's destinations on lines of their own), failures as short reasons.
pub fn render(observed: &Observed) -> String {
    let mut out = String::new();
    let models: Vec<Vec<String>> = observed
        .models
        .iter()
        .map(|m| {
            vec![
                m.model.clone(),
                format!("@ {}", m.host),
                match &m.values {
                    Ok(values) if values.is_empty() => "(no values)".to_owned(),
                    Ok(values) => values
                        .iter()
                        .map(|(n, v)| format!("{n}={v}"))
                        .collect::<Vec<_>>()
                        .join(" "),
                    Err(e) => format!("unavailable: {}", short(e)),
                },
            ]
        })
        .collect();
    section(&mut out, "models", &models);

    let tags: Vec<Vec<String>> = observed
        .tags
        .iter()
        .map(|t| {
            vec![
                t.tag.clone(),
                format!("@ {}", t.host),
                match &t.state {
                    Ok(None) => "not installed yet".to_owned(),
                    Ok(Some(s)) => format!(
                        "{} observation(s){}{}",
                        s.observations,
                        s.connection
                            .as_ref()
                            .map_or(String::new(), |c| format!(", {c}")),
                        if s.debt > 0 {
                            format!(", {} debt outstanding", s.debt)
                        } else {
                            String::new()
                        }
                    ),
                    Err(e) => format!("unavailable: {}", short(e)),
                },
            ]
        })
        .collect();
    // Drawn only when the files declare tags (the screen of a topology without any
    // stays as it was).
    if !tags.is_empty() {
        section(&mut out, "tags", &tags);
    }

    let mut routes = Vec::new();
    for r in &observed.routes {
        routes.push(vec![
            r.route.clone(),
            format!("@ {}", r.publisher),
            match &r.published {
                Ok(n) => format!("published through {n}"),
                Err(e) => format!("unavailable: {}", short(e)),
            },
        ]);
        if r.published.is_err() {
            continue;
        }
        for d in &r.destinations {
            let receipt = match (&d.receipted, &d.verified) {
                (None, _) => "no receipt yet".to_owned(),
                (Some(n), Some(Ok(()))) => format!("receipted through {n}, signature verified"),
                (Some(n), Some(Err(e))) => {
                    format!("receipted through {n}, NOT VERIFIED: {}", short(e))
                }
                (Some(n), None) => format!("receipted through {n}"),
            };
            routes.push(vec![
                String::new(),
                format!("-> {}", d.host),
                format!(
                    "{receipt}; {} outstanding{}",
                    d.outstanding.unwrap_or(0),
                    if d.retired { " (retired)" } else { "" }
                ),
            ]);
        }
    }
    section(&mut out, "routes", &routes);

    let grants: Vec<Vec<String>> = observed
        .grants
        .iter()
        .map(|g| {
            vec![
                g.grant.clone(),
                format!("@ {} for {}", g.issuer, g.caller),
                match &g.units {
                    Ok(Some(u)) => format!(
                        "allocated {} reserved {} consumed {} unknown {} available {}{}",
                        u.allocated,
                        u.reserved,
                        u.consumed,
                        u.unknown,
                        u.available,
                        if u.surrendered > 0 {
                            format!(" surrendered {}", u.surrendered)
                        } else {
                            String::new()
                        }
                    ),
                    Ok(None) => "not issued yet".to_owned(),
                    Err(e) => format!("unavailable: {}", short(e)),
                },
            ]
        })
        .collect();
    section(&mut out, "grants", &grants);

    let authorities: Vec<Vec<String>> = observed
        .authorities
        .iter()
        .map(|a| {
            vec![
                a.membership.clone(),
                format!("leader {}", reported_leader(&a.voters)),
                if a.barrier == "ok" {
                    format!("barrier ok ({})", a.barrier_detail)
                } else {
                    format!("barrier {}: {}", a.barrier, short(&a.barrier_detail))
                },
            ]
        })
        .collect();
    section(&mut out, "authority", &authorities);
    out
}

/// The leader as the voters report it: `a (reported by a, b)`, every differing report
/// named, then the voters that did not report and why.
fn reported_leader(voters: &[(String, Result<Option<String>, String>)]) -> String {
    let mut leaders: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (name, report) in voters {
        if let Ok(Some(l)) = report {
            leaders.entry(l.as_str()).or_default().push(name);
        }
    }
    let silent: Vec<String> = voters
        .iter()
        .filter_map(|(name, r)| r.as_ref().err().map(|e| format!("{name}: {}", short(e))))
        .collect();
    let mut text = if leaders.is_empty() {
        "none reported".to_owned()
    } else {
        leaders
            .iter()
            .map(|(l, by)| format!("{l} (reported by {})", by.join(", ")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !silent.is_empty() {
        text.push_str(&format!(" [{}]", silent.join("; ")));
    }
    text
}
