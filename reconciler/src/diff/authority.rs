//! Each membership's authority: its bootstrap and its voters and learners, one
//! explicit transition each, sent to a running voter (which forwards to the leader).

use std::path::Path;

use grid_engine::authority::service::{AuthorityCall, AuthorityReply, VoterStatus};
use grid_spec::Topology;

use crate::observe::{self, World};
use crate::transition::{Action, Effect, Op, Status, Wait, WaitReason};
use crate::transition::{Draft, enrolled};

/// What the planner knows of a membership's authority.
#[derive(Debug)]
pub enum AuthorityState<'w> {
    /// The files declare no authority for it (or no host selects `authority`).
    Undeclared,
    /// It certainly holds nothing yet: no authority host has an installation with a
    /// certificate of the membership, or every one answers that it is not initialized.
    /// This plan bootstraps it.
    Empty,
    /// The newest view among its hosts (the leader's if one is known).
    Known(&'w VoterStatus),
    /// Some of its hosts cannot be asked: `` `a` (not running) ``, ….
    Unknown(Vec<String>),
}

/// The member hosts of `membership` that select the `authority` profile, in file
/// order: the first N (`authority voters=N`) vote, the others are learners (non-voting
/// replicas through which their hosts send claim commands).
pub fn authority_hosts<'t>(topology: &'t Topology, membership: &str) -> Vec<&'t grid_spec::Host> {
    topology
        .hosts
        .iter()
        .filter(|h| {
            h.memberships.iter().any(|m| m == membership)
                && h.profiles.contains(&grid_spec::Profile::Authority)
        })
        .collect()
}

pub fn state<'w>(topology: &Topology, world: &'w World, membership: &str) -> AuthorityState<'w> {
    let declared = topology
        .memberships
        .iter()
        .find(|m| m.name == membership)
        .and_then(|m| m.authority_voters);
    let all = authority_hosts(topology, membership);
    if declared.is_none() || all.is_empty() {
        return AuthorityState::Undeclared;
    }
    let mut statuses = Vec::new();
    let mut unknown = Vec::new();
    for h in &all {
        let Some(o) = world.host(&h.name) else {
            continue;
        };
        let certified = o
            .enrollments
            .get(membership)
            .is_some_and(|e| e.enrollment.is_some());
        if world.missing(&h.name) || !certified {
            continue; // no certificate, no replica of the authority
        }
        match o.authority.get(membership) {
            Some(Ok(status)) => statuses.push(status),
            Some(Err(e)) => unknown.push(format!("`{}` ({e})", h.name)),
            None => unknown.push(format!("`{}` (not running)", h.name)),
        }
    }
    if !unknown.is_empty() {
        return AuthorityState::Unknown(unknown);
    }
    match statuses
        .iter()
        .filter(|s| s.initialized)
        .max_by_key(|s| (s.state == "leader", s.term))
    {
        Some(view) => AuthorityState::Known(view),
        None => AuthorityState::Empty,
    }
}

/// The key of the transition that makes `host` take part in `membership`'s
/// authority (as a voter or a learner).
pub fn joined(membership: &str, host: &str) -> [String; 2] {
    [
        format!("voter:{membership}:{host}"),
        format!("learner:{membership}:{host}"),
    ]
}

pub fn bootstrapped(membership: &str) -> String {
    format!("authority:{membership}")
}

/// The hosts among `hosts` that do not run now.
fn stopped<'a>(world: &World, hosts: impl IntoIterator<Item = &'a str>) -> Option<Wait> {
    let stopped: Vec<String> = hosts
        .into_iter()
        .filter(|h| world.running(h).is_none())
        .map(str::to_owned)
        .collect();
    (!stopped.is_empty()).then(|| Wait::running(stopped))
}

/// A host whose enrollment in `membership` is neither held nor planned (revoked).
fn unenrollable(topology: &Topology, world: &World, membership: &str, host: &str) -> bool {
    let spec = topology.memberships.iter().find(|m| m.name == membership);
    spec.is_some_and(|m| m.revoked.iter().any(|p| p == host))
        || world
            .membership(membership)
            .and_then(|m| m.record.as_ref())
            .is_some_and(|r| r.revoked.iter().any(|p| p == host))
}

pub fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for membership in &topology.memberships {
        let m = &membership.name;
        let Some(voters) = membership.authority_voters else {
            continue;
        };
        let all = authority_hosts(topology, m);
        let (desired, learners) = all.split_at((voters as usize).min(all.len()));
        if desired.is_empty() {
            continue;
        }
        let waits = |hosts: &[&str]| -> Option<Wait> {
            let revoked: Vec<String> = hosts
                .iter()
                .filter(|h| unenrollable(topology, world, m, h))
                .map(|h| (*h).to_owned())
                .collect();
            if !revoked.is_empty() {
                return Some(Wait {
                    reason: WaitReason::HostNotEnrolled,
                    hosts: revoked,
                });
            }
            stopped(world, hosts.iter().copied())
        };
        let view = match state(topology, world, m) {
            AuthorityState::Undeclared => continue,
            AuthorityState::Unknown(stopped) => {
                out.push(Draft::attention(
                    "authority",
                    m,
                    &desired[0].name,
                    format!(
                        "voters {} cannot be asked; start them and plan again",
                        stopped.join(", ")
                    ),
                ));
                continue;
            }
            AuthorityState::Empty => {
                let first = desired[0];
                out.push(
                    Draft::new(
                        Op::Create,
                        "authority",
                        m,
                        &first.name,
                        format!("bootstrap the Raft group with voter `{}`", first.name),
                        Action::Authority {
                            membership: m.clone(),
                            call: AuthorityCall::Initialize,
                        },
                    )
                    .key(bootstrapped(m))
                    .after([enrolled(&first.name, m)])
                    .waits(waits(&[&first.name])),
                );
                for h in &desired[1..] {
                    out.push(
                        add_voter(m, &first.name, h)
                            .after([bootstrapped(m)])
                            .waits(waits(&[&first.name, &h.name])),
                    );
                }
                for h in learners {
                    out.push(
                        add_learner(m, &first.name, h)
                            .after([bootstrapped(m)])
                            .waits(waits(&[&first.name, &h.name])),
                    );
                }
                continue;
            }
            AuthorityState::Known(view) => view,
        };
        let via = view.participant.clone();
        for h in desired {
            if !view.voters.contains(&h.name) {
                out.push(add_voter(m, &via, h).waits(waits(&[&via, &h.name])));
            }
        }
        for h in learners {
            if !view.voters.contains(&h.name) && !view.learners.contains(&h.name) {
                out.push(add_learner(m, &via, h).waits(waits(&[&via, &h.name])));
            }
        }
        for voter in &view.voters {
            if !desired.iter().any(|h| &h.name == voter) {
                let keep = learners.iter().any(|h| &h.name == voter);
                out.push(
                    Draft::new(
                        Op::Retire,
                        "voter",
                        &format!("{voter} in {m}"),
                        &via,
                        if keep {
                            format!("`{voter}` stops voting in {m} and stays a learner")
                        } else {
                            format!("remove `{voter}` from the voters of {m}")
                        },
                        Action::Authority {
                            membership: m.clone(),
                            call: AuthorityCall::RemoveVoter {
                                participant: voter.clone(),
                                keep_as_learner: keep,
                            },
                        },
                    )
                    .after(after_leaving(topology, m, voter)),
                );
            }
        }
        for learner in &view.learners {
            if !all.iter().any(|h| &h.name == learner) {
                out.push(
                    Draft::new(
                        Op::Retire,
                        "learner",
                        &format!("{learner} in {m}"),
                        &via,
                        format!("`{learner}` no longer replicates the authority of {m}"),
                        Action::Authority {
                            membership: m.clone(),
                            call: AuthorityCall::RemoveLearner {
                                participant: learner.clone(),
                            },
                        },
                    )
                    .after(after_leaving(topology, m, learner)),
                );
            }
        }
    }
    out
}

/// A host leaving `membership` stops replicating its authority only after its leave
/// (which may wait for obligations, and needs its publishing rights until then).
fn after_leaving(topology: &Topology, membership: &str, host: &str) -> Vec<String> {
    topology
        .host(host)
        .filter(|h| h.leaving.iter().any(|m| m == membership))
        .map(|_| super::memberships::left(membership, host))
        .into_iter()
        .collect()
}

fn add_learner(membership: &str, via: &str, host: &grid_spec::Host) -> Draft {
    Draft::new(
        Op::Create,
        "learner",
        &format!("{} in {membership}", host.name),
        via,
        format!(
            "add `{}` ({}) as a learner: a non-voting replica (beyond `voters`), through which it sends claim commands",
            host.name, host.listen
        ),
        Action::Authority {
            membership: membership.to_owned(),
            call: AuthorityCall::AddLearner {
                participant: host.name.clone(),
                address: host.listen.to_string(),
            },
        },
    )
    .key(format!("learner:{membership}:{}", host.name))
    .after([enrolled(&host.name, membership)])
}

fn add_voter(membership: &str, via: &str, host: &grid_spec::Host) -> Draft {
    Draft::new(
        Op::Create,
        "voter",
        &format!("{} in {membership}", host.name),
        via,
        format!(
            "add `{}` ({}) as a learner, let it catch up, then promote it to voter",
            host.name, host.listen
        ),
        Action::Authority {
            membership: membership.to_owned(),
            call: AuthorityCall::AddVoter {
                participant: host.name.clone(),
                address: host.listen.to_string(),
            },
        },
    )
    .key(format!("voter:{membership}:{}", host.name))
    .after([enrolled(&host.name, membership)])
}

// Applying: calls to the authority through a host's control socket.

/// Sends `call` to the authority of `membership` through the host at `dir` — unless
/// the authority already shows its effect (a saved plan applied again).
pub fn apply(dir: &Path, membership: &str, call: &AuthorityCall) -> Effect {
    if took_effect(dir, membership, call) {
        return Effect::new(Status::Succeeded, "already in effect");
    }
    match observe::authority_call(dir, membership, call.clone()) {
        Ok(AuthorityReply::Done { detail }) => Effect::new(Status::Succeeded, detail),
        Ok(AuthorityReply::Refused { reason }) => Effect::new(Status::Refused, reason),
        Ok(AuthorityReply::Unknown { reason }) => Effect::new(Status::Unknown, reason),
        Ok(other) => Effect::new(Status::Failed, format!("unexpected reply {other:?}")),
        Err(e) => Effect::new(Status::Unknown, e),
    }
}

/// Whether the authority of `membership`, asked through the host at `dir`, shows the
/// effect of `call`.
pub fn took_effect(dir: &Path, membership: &str, call: &AuthorityCall) -> bool {
    let Ok(status) = observe::authority_status(dir, membership) else {
        return false;
    };
    match call {
        AuthorityCall::Initialize => status.initialized,
        AuthorityCall::AddVoter { participant, .. } => status.voters.contains(participant),
        AuthorityCall::RemoveVoter { participant, .. } => !status.voters.contains(participant),
        AuthorityCall::AddLearner { participant, .. } => status.learners.contains(participant),
        AuthorityCall::RemoveLearner { participant } => !status.learners.contains(participant),
        _ => false,
    }
}
