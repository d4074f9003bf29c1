//! Grants and remote Processes (SPEC C5, C6's grants): plan grant transitions — the
//! first signed issue at the issuer, a raise by the difference, a surrender of unused
//! units when the file retires the grant — and the operator's calls: `gridctl process
//! run|resolve`, `gridctl inspect process|grants|processes`.

use std::path::Path;

use grid_engine::host::control::Client;
use grid_engine::processes::api::{GrantIssue, MailboxAt, Peer, ProcessCall, ProcessReply};
use grid_engine::protocol::{Call, Reply, Request};
use grid_spec::Topology;

use crate::observe::{self, HostObservation, HostStatus};
use crate::plan::{Action, Op, Transition};

fn line(op: Op, name: &str, host: &str, detail: String, action: Action) -> Transition {
    Transition {
        op,
        kind: "grant".to_owned(),
        name: name.to_owned(),
        host: host.to_owned(),
        detail,
        id: String::new(),
        action,
    }
}

/// The first membership (in `first`'s enrollment order) every host named is
/// enrolled in.
pub fn common_membership(state: &Path, hosts: &[&str]) -> Option<String> {
    let enrolled: Vec<Vec<String>> = hosts
        .iter()
        .map(|h| {
            grid_engine::custody::membership::enrolled_memberships(&observe::host_dir(state, h))
        })
        .collect();
    let (first, rest) = enrolled.split_first()?;
    first
        .iter()
        .find(|m| rest.iter().all(|other| other.contains(m)))
        .cloned()
}

/// The grant's issue as the files describe it (`None` until the caller has its keys
/// and the hosts share an enrolled membership).
fn issue(
    grant: &grid_spec::Grant,
    topology: &Topology,
    state: &Path,
    units: u64,
    allocated_before: u64,
) -> Option<GrantIssue> {
    let caller_keys =
        grid_engine::custody::manifest(&observe::host_dir(state, &grant.caller)).ok()?;
    let mailbox = match &grant.mailbox {
        None => None,
        Some(m) => Some(MailboxAt {
            host: m.clone(),
            address: topology.host(m)?.listen.to_string(),
            membership: common_membership(state, &[&grant.issuer, m])?,
        }),
    };
    Some(GrantIssue {
        name: grant.name.clone(),
        caller: grant.caller.clone(),
        units,
        allocated_before,
        caller_keys,
        mailbox,
    })
}

/// The transitions of every grant: waits (prints nothing) until the issuer runs with
/// the `processes` profile and the caller has its keys.
pub fn transitions(
    topology: &Topology,
    state: &Path,
    observations: &[HostObservation],
) -> Vec<Transition> {
    let mut out = Vec::new();
    for grant in &topology.grants {
        let Some(issuer) = observations.iter().find(|o| o.name == grant.issuer) else {
            continue;
        };
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
        let attention = |detail: String| {
            line(
                Op::Attention,
                &grant.name,
                &grant.issuer,
                detail,
                Action::None,
            )
        };
        let Some(held) = held else {
            if grant.retired {
                continue; // never issued, and retired: nothing to do
            }
            let Some(issue) = issue(grant, topology, state, grant.units, 0) else {
                continue; // the caller's keys and enrollment come first
            };
            out.push(line(
                Op::Create,
                &grant.name,
                &grant.issuer,
                format!(
                    "`{}` signs a grant of {} execution unit(s) for `{}`{}",
                    grant.issuer,
                    grant.units,
                    grant.caller,
                    grant
                        .mailbox
                        .as_ref()
                        .map(|m| format!(", reachable through mailbox `{m}`"))
                        .unwrap_or_default()
                ),
                Action::Submit {
                    request: Request::IssueGrant { grant: issue },
                },
            ));
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
            )),
            (false, true) => out.push(attention(
                "surrendered at the issuer; a surrendered grant is never reopened: declare a new grant"
                    .to_owned(),
            )),
            (true, true) => {}
            (false, false) if grant.units > held.allocated => {
                let raise = grant.units - held.allocated;
                if let Some(issue) = issue(grant, topology, state, raise, held.allocated) {
                    out.push(line(
                        Op::Change,
                        &grant.name,
                        &grant.issuer,
                        format!(
                            "raise by {raise} unit(s): a new signed issue (allocated {} -> {})",
                            held.allocated, grant.units
                        ),
                        Action::Submit {
                            request: Request::IssueGrant { grant: issue },
                        },
                    ));
                }
            }
            (false, false) if grant.units < held.allocated => out.push(attention(format!(
                "the file says {} unit(s), the issuer allocated {}: signed units are never taken back; surrender the grant with retired=#true",
                grant.units, held.allocated
            ))),
            (false, false) => {}
        }
        if held.unknown > 0 {
            out.push(attention(format!(
                "{} unit(s) held by runs left unknown: the issuer's operator resolves each (`gridctl process resolve ID --outcome succeeded|failed --host {}`)",
                held.unknown, grant.issuer
            )));
        }
    }
    // Grants an issuer holds that no file declares: unmanaged, never surrendered.
    for o in observations {
        if let HostStatus::Running(observed) = &o.status {
            for held in &observed.grants {
                if !topology
                    .grants
                    .iter()
                    .any(|g| g.name == held.name && g.issuer == o.name)
                {
                    out.push(line(
                        Op::Attention,
                        &held.name,
                        &o.name,
                        "unmanaged: the host issued it but no file declares it; nothing is surrendered"
                            .to_owned(),
                        Action::None,
                    ));
                }
            }
        }
    }
    out
}

/// One processes call to the host `host` (its control socket).
pub fn call(state: &Path, host: &str, request: ProcessCall) -> Result<ProcessReply, String> {
    let dir = installed(state, host)?;
    let mut client = Client::connect(&dir).map_err(|e| e.to_string())?;
    match client.call(&Call::Process { request }) {
        Ok(Reply::Process(reply)) => Ok(*reply),
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

fn installed(state: &Path, host: &str) -> Result<std::path::PathBuf, String> {
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
    Ok(dir)
}

/// Another host as a caller names it: listen address from its `host.toml`, public
/// keys from its custody manifest.
pub fn peer(state: &Path, host: &str) -> Result<Peer, String> {
    let dir = installed(state, host)?;
    let config = grid_engine::host::config::HostConfig::read(&dir).map_err(|e| e.to_string())?;
    let keys = grid_engine::custody::manifest(&dir).map_err(|e| e.to_string())?;
    Ok(Peer {
        name: host.to_owned(),
        address: config.listen,
        keys,
    })
}

/// The `run` call `gridctl process run` sends to the caller's host.
pub fn run_call(
    state: &Path,
    receiver: &str,
    caller: &str,
    via: Option<&str>,
    request: grid_engine::processes::api::RunRequest,
    wait_ms: Option<u64>,
) -> Result<ProcessCall, String> {
    let mut hosts = vec![caller, receiver];
    hosts.extend(via);
    let membership = common_membership(state, &hosts).ok_or_else(|| {
        format!(
            "{} share no enrolled membership: the transport has no identity between them",
            hosts
                .iter()
                .map(|h| format!("`{h}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    Ok(ProcessCall::Run {
        request,
        receiver: peer(state, receiver)?,
        via: via.map(|m| peer(state, m)).transpose()?,
        membership,
        wait_ms,
    })
}
