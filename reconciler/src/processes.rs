//! Grants and remote Processes (SPEC C5, C6's grants): plan grant transitions — the
//! first signed issue at the issuer, a raise by the difference, a surrender of unused
//! units when the file retires the grant, the issuer's settlement once no unit is held
//! — and the operator's calls: `gridctl process
//! run|resolve`, `gridctl inspect process|grants|processes`.

use std::path::Path;

use grid_engine::processes::api::{GrantIssue, MailboxAt, Peer, ProcessCall, ProcessReply};
use grid_engine::protocol::Request;
use grid_spec::Topology;

use crate::diff;
use crate::observe::{self, HostStatus, World};
use crate::resolve::Template;
use crate::transition::{Action, Op};
use crate::transition::{Draft, enrolled};

fn line(op: Op, name: &str, host: &str, detail: String, action: Action) -> Draft {
    Draft::new(op, "grant", name, host, detail, action)
}

pub use crate::observe::common_membership;

/// The grant's issue as the files describe it: complete when the caller's keys and
/// the mailbox's membership are known now, else a template completed when it is sent
/// (hosts this plan creates). `None` when it can never be made (no shared membership).
fn issue(
    grant: &grid_spec::Grant,
    topology: &Topology,
    world: &World,
    units: u64,
    allocated_before: u64,
) -> Option<Action> {
    let mailbox_host = match &grant.mailbox {
        None => None,
        Some(m) => Some((m.clone(), topology.host(m)?.listen.to_string())),
    };
    let caller_keys = world
        .host(&grant.caller)
        .and_then(|o| o.keys.manifest())
        .cloned();
    // The mailbox is reached in the grant's own membership, when it serves one.
    let mailbox_membership = mailbox_host.as_ref().map(|(m, _)| match &grant.membership {
        Some(membership) => Some(membership.clone()),
        None => crate::observe::common(&[
            world.enrolled(&grant.issuer).to_vec(),
            world.enrolled(m).to_vec(),
        ]),
    });
    let known = caller_keys.is_some() && mailbox_membership.as_ref().is_none_or(Option::is_some);
    if !known {
        return Some(Action::Resolve {
            template: Template::Grant {
                name: grant.name.clone(),
                issuer: grant.issuer.clone(),
                caller: grant.caller.clone(),
                units,
                allocated_before,
                mailbox: mailbox_host,
                membership: grant.membership.clone(),
            },
        });
    }
    let mailbox = match (mailbox_host, mailbox_membership) {
        (Some((host, address)), Some(Some(membership))) => Some(MailboxAt {
            host,
            address,
            membership,
        }),
        _ => None,
    };
    Some(Action::Submit {
        request: Request::IssueGrant {
            grant: GrantIssue {
                name: grant.name.clone(),
                caller: grant.caller.clone(),
                units,
                allocated_before,
                caller_keys: caller_keys.expect("known"),
                mailbox,
                membership: grant.membership.clone(),
            },
        },
    })
}

/// What an issue comes after: the installations, keys and enrollments of the
/// issuer, the caller and the mailbox.
fn issue_after(grant: &grid_spec::Grant, topology: &Topology) -> Vec<String> {
    let mut keys = Vec::new();
    for host in [
        Some(&grant.issuer),
        Some(&grant.caller),
        grant.mailbox.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        keys.extend(diff::installed(host));
        if let Some(h) = topology.host(host) {
            keys.extend(h.memberships.iter().map(|m| enrolled(host, m)));
        }
    }
    keys
}

/// The transitions of every grant: at an issuer that runs with the `processes`
/// profile, or one this plan creates (it certainly holds no grant yet).
pub fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for grant in &topology.grants {
        let Some(issuer) = world.host(&grant.issuer) else {
            continue;
        };
        let key = format!("grant:{}:{}", grant.issuer, grant.name);
        let create = |action: Action| {
            line(
                Op::Create,
                &grant.name,
                &grant.issuer,
                format!(
                    "`{}` signs a grant of {} execution unit(s) for `{}`{}{}",
                    grant.issuer,
                    grant.units,
                    grant.caller,
                    grant
                        .membership
                        .as_ref()
                        .map(|m| format!(", for runs through membership `{m}`"))
                        .unwrap_or_default(),
                    grant
                        .mailbox
                        .as_ref()
                        .map(|m| format!(", reachable through mailbox `{m}`"))
                        .unwrap_or_default()
                ),
                action,
            )
            .key(key.clone())
            .after(issue_after(grant, topology))
        };
        if world.missing(&grant.issuer) {
            if !grant.retired
                && let Some(action) = issue(grant, topology, world, grant.units, 0)
            {
                out.push(create(action));
            }
            continue;
        }
        let HostStatus::Running(observed) = &issuer.status else {
            continue; // the host's own line says it does not run
        };
        if !issuer
            .config
            .as_ref()
            .is_some_and(|c| c.selects(grid_spec::Profile::Processes))
        {
            continue; // its `~ host` line comes first
        }
        let held = observed.grants.iter().find(|g| g.name == grant.name);
        let attention =
            |detail: String| Draft::attention("grant", &grant.name, &grant.issuer, detail);
        let Some(held) = held else {
            if grant.retired {
                continue; // never issued, and retired: nothing to do
            }
            if let Some(action) = issue(grant, topology, world, grant.units, 0) {
                out.push(create(action));
            }
            continue;
        };
        if held.caller != grant.caller {
            out.push(attention(format!(
                "issued to `{}`, not `{}`: a grant never changes its caller; declare a new grant",
                held.caller, grant.caller
            )));
            continue;
        }
        if held.mailbox != grant.mailbox && !held.retired && !grant.retired {
            out.push(attention(format!(
                "its mailbox is `{}` at the issuer, the file says `{}`: changing a grant's mailbox is not supported by this version",
                held.mailbox.as_deref().unwrap_or("none"),
                grant.mailbox.as_deref().unwrap_or("none")
            )));
        }
        // A grant serves the membership of its first issue for ever (signed in it).
        let membership_changed = held.membership != grant.membership;
        if membership_changed && !held.retired && !grant.retired {
            out.push(attention(format!(
                "it serves {} at the issuer, the file says {}: a grant never changes its membership (it is signed in every issue); declare a new grant",
                grid_engine::processes::grants::serves(held.membership.as_deref()),
                grid_engine::processes::grants::serves(grant.membership.as_deref())
            )));
        }
        // The issuer's settlement: a step of its own after the surrender, once no unit
        // is held (a run still reserved or unknown: a later plan settles it).
        let settle = || {
            line(
                Op::Change,
                &grant.name,
                &grant.issuer,
                format!(
                    "settle: the issuer signs the final account ({} allocated = {} consumed + {} surrendered)",
                    held.allocated,
                    held.consumed,
                    held.surrendered + if held.retired { 0 } else { held.available() }
                ),
                Action::Submit {
                    request: Request::SettleGrant {
                        name: grant.name.clone(),
                    },
                },
            )
            .key(format!("{key}:settle"))
            .after([key.clone()])
        };
        let nothing_held = held.reserved == 0 && held.unknown == 0;
        match (grant.retired, held.retired) {
            (true, false) => out.push(line(
                Op::Retire,
                &grant.name,
                &grant.issuer,
                format!(
                    "surrender {} unused unit(s) of {} allocated; {} reserved and {} unknown stay held until their runs close",
                    held.available(),
                    held.allocated,
                    held.reserved,
                    held.unknown
                ),
                Action::Submit {
                    request: Request::SurrenderGrant {
                        name: grant.name.clone(),
                    },
                },
            ).key(key.clone())),
            (false, true) => out.push(attention(
                "surrendered at the issuer; a surrendered grant is never reopened: declare a new grant"
                    .to_owned(),
            )),
            (true, true) => {}
            (false, false) if grant.units > held.allocated && !membership_changed => {
                let raise = grant.units - held.allocated;
                if let Some(action) = issue(grant, topology, world, raise, held.allocated) {
                    out.push(line(
                        Op::Change,
                        &grant.name,
                        &grant.issuer,
                        format!(
                            "raise by {raise} unit(s): a new signed issue (allocated {} -> {})",
                            held.allocated, grant.units
                        ),
                        action,
                    ).key(key.clone()).after(issue_after(grant, topology)));
                }
            }
            (false, false) if grant.units < held.allocated => out.push(attention(format!(
                "the file says {} unit(s), the issuer allocated {}: signed units are never taken back; surrender the grant with retired=#true",
                grant.units, held.allocated
            ))),
            (false, false) => {}
        }
        if grant.retired && held.settlement.is_none() && nothing_held {
            out.push(settle());
        }
        if held.unknown > 0 {
            out.push(attention(format!(
                "{} unit(s) held by runs left unknown: the issuer's operator resolves each (`gridctl process resolve ID --outcome succeeded|failed --host {}`)",
                held.unknown, grant.issuer
            )));
        }
    }
    // Grants an issuer holds that no file declares: unmanaged, never surrendered.
    for o in &world.hosts {
        if let HostStatus::Running(observed) = &o.status {
            for held in &observed.grants {
                if !topology
                    .grants
                    .iter()
                    .any(|g| g.name == held.name && g.issuer == o.name)
                {
                    out.push(Draft::attention(
                        "grant",
                        &held.name,
                        &o.name,
                        "unmanaged: the host issued it but no file declares it; nothing is surrendered"
                            .to_owned(),
                    ));
                }
            }
        }
    }
    out
}

/// One processes call to the host `host` (its control socket).
pub fn call(state: &Path, host: &str, request: ProcessCall) -> Result<ProcessReply, String> {
    observe::process_call(&observe::installed(state, host)?, request)
}

/// Another host as a caller names it: listen address from its `host.toml`, public
/// keys from its custody manifest.
pub fn peer(state: &Path, host: &str) -> Result<Peer, String> {
    let dir = observe::installed(state, host)?;
    let config = grid_engine::host::config::HostConfig::read(&dir).map_err(|e| e.to_string())?;
    let keys = grid_engine::custody::manifest(&dir).map_err(|e| e.to_string())?;
    Ok(Peer {
        name: host.to_owned(),
        address: config.listen,
        keys,
    })
}

/// The `run` call `gridctl process run` sends to the caller's host, through
/// `membership` (`--membership`: a grant serving one membership charges only runs that
/// reach its issuer through it; refused, nothing sent, when a host is not enrolled in
/// it), else the first membership the hosts share.
pub fn run_call(
    state: &Path,
    receiver: &str,
    caller: &str,
    via: Option<&str>,
    membership: Option<&str>,
    request: grid_engine::processes::api::RunRequest,
    wait_ms: Option<u64>,
) -> Result<ProcessCall, String> {
    let mut hosts = vec![caller, receiver];
    hosts.extend(via);
    let membership = match membership {
        Some(m) => enrolled_in_all(state, &hosts, m)?,
        None => common_membership(state, &hosts).ok_or_else(|| {
            format!(
                "{} share no enrolled membership: the transport has no identity between them",
                hosts
                    .iter()
                    .map(|h| format!("`{h}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?,
    };
    Ok(ProcessCall::Run {
        request,
        receiver: peer(state, receiver)?,
        via: via.map(|m| peer(state, m)).transpose()?,
        membership,
        wait_ms,
        mission: None,
    })
}

/// `membership`, when every host in `hosts` is enrolled in it; else why not (nothing
/// was sent).
fn enrolled_in_all(state: &Path, hosts: &[&str], membership: &str) -> Result<String, String> {
    for host in hosts {
        let enrolled =
            grid_engine::custody::membership::enrolled_memberships(&observe::host_dir(state, host));
        if !enrolled.iter().any(|m| m == membership) {
            return Err(format!(
                "`{host}` is not enrolled in membership `{}` (it is in: {}); nothing was sent",
                grid_spec::diagnostic::quoted(membership),
                if enrolled.is_empty() {
                    "none".to_owned()
                } else {
                    enrolled.join(", ")
                }
            ));
        }
    }
    Ok(membership.to_owned())
}
