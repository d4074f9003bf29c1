//! Reconcile: apply a plan's transitions, each sent once to its original owner with
//! the plan's operation id. Never retries: a lost reply makes the transition
//! `unknown` and reconcile stops there; the next plan shows the owner's retained
//! answer.

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use grid_engine::host::config::HOST_CONFIG_FILE;
use grid_engine::host::control::{CallError, Client};
use grid_engine::protocol::{Call, Outcome, Reply};

use crate::observe;
use crate::plan::{Action, Plan, Transition};

/// How one transition, or a whole reconcile, ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Succeeded,
    Failed,
    Unknown,
    Refused,
    /// Not attempted: an earlier transition stopped reconcile, or it has no action.
    Skipped,
    /// Not applied: it waits for something outside the plan (a host to run), directly
    /// or through a transition it comes after.
    Waiting,
    /// A whole reconcile that applied what it could, but lines needing attention
    /// remain (their owners or the files must change).
    Attention,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Unknown => "unknown",
            Status::Refused => "refused",
            Status::Skipped => "skipped",
            Status::Waiting => "waiting",
            Status::Attention => "attention",
        }
    }

    /// The process exit code for an overall outcome (docs/reconcile.md, "Exit codes").
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Succeeded | Status::Skipped => 0,
            Status::Failed => 1,
            Status::Unknown => 3,
            Status::Refused => 4,
            Status::Waiting => 5,
            Status::Attention => 6,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Applied {
    pub transition: Transition,
    pub status: Status,
    pub detail: String,
    /// The owner returned the answer it gave this operation id before: nothing was
    /// applied again.
    pub replayed: bool,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub outcome: Status,
    pub reason: Option<String>,
    pub applied: Vec<Applied>,
    /// The hosts waiting transitions need running, with their installations.
    pub start: Vec<(String, std::path::PathBuf)>,
}

impl Report {
    pub fn render(&self) -> String {
        let mut out = String::new();
        for a in &self.applied {
            let t = &a.transition;
            out.push_str(&format!(
                "{} {} {} @ {}: {}{}{}\n",
                t.op.symbol(),
                t.kind,
                t.name,
                t.host,
                a.status.name(),
                if a.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", a.detail)
                },
                if a.replayed {
                    " — original answer, nothing applied again"
                } else {
                    ""
                }
            ));
        }
        if let Some(reason) = &self.reason {
            out.push_str(&format!("{reason}\n"));
        }
        out.push_str(&format!("reconcile: {}\n", self.outcome.name()));
        if !self.start.is_empty() {
            let waiting = self
                .applied
                .iter()
                .filter(|a| a.status == Status::Waiting)
                .count();
            let max = grid_spec::limits::PLAN_HOSTS_SHOWN_MAX;
            let names: Vec<String> = self.start.iter().map(|(h, _)| h.clone()).collect();
            out.push_str(&format!(
                "{waiting} transition(s) wait for {} to run. Start them, then reconcile again:\n  gridd{}{}\nor run the whole topology with `gridctl up FILES`.\n",
                crate::plan::shown(&names, max),
                self.start
                    .iter()
                    .take(max)
                    .map(|(_, d)| format!(" --dir {}", d.display()))
                    .collect::<String>(),
                if self.start.len() > max {
                    format!(" … ({} hosts in all: --json lists them)", self.start.len())
                } else {
                    String::new()
                }
            ));
        }
        out
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "outcome": self.outcome.name(),
            "reason": self.reason,
            "transitions": self.applied.iter().map(|a| serde_json::json!({
                "op": a.transition.op.symbol(),
                "kind": a.transition.kind,
                "name": a.transition.name,
                "host": a.transition.host,
                "id": a.transition.id,
                "status": a.status.name(),
                "detail": a.detail,
                "replayed": a.replayed,
                "after": a.transition.after,
                "waits_for": a.transition.waits_for.as_ref().map(|w| w.reason.name()),
            })).collect::<Vec<_>>(),
            "start": self.start.iter().map(|(h, d)| serde_json::json!({
                "host": h,
                "dir": d,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Refuses a saved plan whose owners changed since it was made, except owners for
/// which every transition already took effect (re-applying the same plan returns
/// those answers and acts on nothing).
pub fn check_fresh(plan: &Plan) -> Result<(), String> {
    for observed in &plan.observed {
        let membership = observed
            .owner
            .strip_prefix(crate::plan::MEMBERSHIP_OWNER_PREFIX);
        let change = match membership {
            Some(m) => {
                let dir = grid_engine::custody::membership::authority_dir(&plan.state, m);
                (observe::authority_fingerprint(&dir) != observed.fingerprint).then(|| {
                    format!(
                        "membership `{m}` changed since the plan was made (it was \"{}\")",
                        observed.summary
                    )
                })
            }
            None => {
                let now = observe::observe_host(
                    &observed.owner,
                    &observe::host_dir(&plan.state, &observed.owner),
                );
                if observed.summary == observe::NO_INSTALLATION && created_by_plan(plan, &now) {
                    continue; // the plan made it; only its own transitions show
                }
                now.difference(&observed.fingerprint, &observed.summary)
            }
        };
        let Some(change) = change else { continue };
        let pending: Vec<&Transition> = plan
            .transitions
            .iter()
            .filter(|t| t.host == observed.owner && !matches!(t.action, Action::None))
            .collect();
        // A host that changed with nothing of this plan to show for it changed on its
        // own. A membership's record also changes as a side effect of the plan's
        // enrollments, so there only the plan's own transitions for it count.
        let own_change = pending.is_empty() && membership.is_none();
        if own_change || !pending.iter().all(|t| took_effect(plan, t)) {
            return Err(format!(
                "the saved plan is stale: {change}; make a new plan (nothing was applied)"
            ));
        }
    }
    Ok(())
}

/// A host that did not exist when the plan was made holds nothing but what this
/// plan's own transitions put there (and took effect): its installation as the plan
/// wrote it, and models, routes, tags and grants answered under the plan's ids.
fn created_by_plan(plan: &Plan, now: &observe::HostObservation) -> bool {
    let ours = |kind: &str, name: &str| {
        plan.transitions
            .iter()
            .any(|t| t.host == now.name && t.kind == kind && t.name == name && took_effect(plan, t))
    };
    let written = plan.transitions.iter().find_map(|t| match &t.action {
        Action::WriteHostConfig { config, .. } if t.host == now.name => Some(config),
        _ => None,
    });
    if now.config.is_some() && now.config.as_ref() != written {
        return false;
    }
    match &now.status {
        observe::HostStatus::Running(o) => {
            o.models.iter().all(|m| ours("model", &m.name))
                && o.routes.iter().all(|r| ours("route", &r.name))
                && o.tags.iter().all(|t| ours("tag", &t.name))
                && o.grants.iter().all(|g| ours("grant", &g.name))
                && o.unacknowledged
                    .iter()
                    .all(|u| plan.transitions.iter().any(|t| t.id == u.answer.op))
        }
        _ => true,
    }
}

/// Whether a transition of a saved plan already took effect at its owner.
fn took_effect(plan: &Plan, t: &Transition) -> bool {
    use grid_engine::custody::membership;
    let dir = observe::host_dir(&plan.state, &t.host);
    let answered = |op: &str| matches!(retained(&dir, op), Some(Reply::Answer(_)));
    match &t.action {
        Action::None => true,
        Action::Submit { .. } | Action::Resolve { .. } => answered(&t.id),
        Action::Recover { op } => answered(op),
        Action::WriteHostConfig { config, .. } => {
            grid_engine::host::config::HostConfig::read(&dir)
                .ok()
                .as_ref()
                == Some(config)
        }
        Action::CreateCustody => grid_engine::custody::exists(&dir),
        Action::RewriteKeysAsPem => {
            grid_engine::custody::legacy_key_files(&dir).is_ok_and(|hex| hex.is_empty())
        }
        Action::CreateAuthority { membership: m } => {
            membership::read_authority(&membership::authority_dir(&plan.state, m)).is_ok()
        }
        Action::Revoke {
            membership: m,
            participant,
        } => membership::read_authority(&membership::authority_dir(&plan.state, m))
            .is_ok_and(|r| r.revoked.contains(participant)),
        Action::Enroll { membership: m } => {
            membership::read_enrollment(&dir, m).is_ok_and(|e| e.is_some())
        }
        Action::DistributeRevocations { membership: m } => {
            membership::revocations_current(&membership::authority_dir(&plan.state, m), &dir, m)
        }
        Action::Authority {
            membership: m,
            call,
        } => {
            use grid_engine::authority::service::AuthorityCall;
            let Ok(status) = observe::authority_status(&dir, m) else {
                return false;
            };
            match call {
                AuthorityCall::Initialize => status.initialized,
                AuthorityCall::AddVoter { participant, .. } => status.voters.contains(participant),
                AuthorityCall::RemoveVoter { participant, .. } => {
                    !status.voters.contains(participant)
                }
                AuthorityCall::AddLearner { participant, .. } => {
                    status.learners.contains(participant)
                }
                AuthorityCall::RemoveLearner { participant } => {
                    !status.learners.contains(participant)
                }
                _ => false,
            }
        }
        Action::Claim {
            membership,
            command,
        } => {
            use grid_engine::authority::service::{AuthorityCall, AuthorityReply};
            let claim = crate::authority::command_claim(command).to_owned();
            matches!(
                observe::authority_call(&dir, membership, AuthorityCall::Show { claim }),
                Ok(AuthorityReply::Shown { claim: Some(c), .. })
                    if c.owner == t.host
                        && c.state == grid_engine::authority::claims::ClaimState::Held
            )
        }
        // The host answers a re-sent op id from its record: always asked.
        Action::Mission { .. } => false,
    }
}

fn retained(dir: &Path, op: &str) -> Option<Reply> {
    Client::connect(dir)
        .ok()?
        .call(&Call::Answer { op: op.to_owned() })
        .ok()
}

/// Whether a host answers on its control socket now.
fn answers(state: &Path, host: &str) -> bool {
    Client::connect(&observe::host_dir(state, host)).is_ok()
}

/// Applies the transitions in order, each whose owner can take it now; stops at the
/// first that does not succeed. A transition that waits (for a host to run, or after
/// one that waits) is not applied, and nothing is applied early: the hosts it waits
/// for are asked again now, since a saved plan may be applied after they started.
pub fn apply(plan: &Plan) -> Report {
    let mut applied = Vec::new();
    let mut outcome = Status::Succeeded;
    let mut reason = None;
    let mut waiting: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut start: Vec<String> = Vec::new();
    let mut running: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
    let mut attention = false;
    for t in &plan.transitions {
        if matches!(outcome, Status::Failed | Status::Unknown | Status::Refused) {
            applied.push(Applied {
                transition: t.clone(),
                status: Status::Skipped,
                detail: "not attempted".to_owned(),
                replayed: false,
            });
            continue;
        }
        let blocked = t.after.iter().find(|a| waiting.contains(a.as_str()));
        let stopped: Vec<String> = match &t.waits_for {
            Some(w) if w.reason == crate::plan::WaitReason::HostNotRunning => w
                .hosts
                .iter()
                .filter(|h| {
                    !*running
                        .entry((*h).clone())
                        .or_insert_with(|| answers(&plan.state, h))
                })
                .cloned()
                .collect(),
            Some(w) => w.hosts.clone(),
            None => Vec::new(),
        };
        if blocked.is_some() || !stopped.is_empty() {
            waiting.insert(&t.id);
            let detail = match blocked {
                Some(id) => format!(
                    "after {}, which waits",
                    plan.transitions
                        .iter()
                        .find(|d| d.id == *id)
                        .map_or_else(|| id.clone(), Transition::title)
                ),
                None => t
                    .waits_for
                    .as_ref()
                    .map(|w| {
                        crate::plan::Wait {
                            reason: w.reason,
                            hosts: stopped.clone(),
                        }
                        .describe()
                    })
                    .unwrap_or_default(),
            };
            if t.waits_for
                .as_ref()
                .is_some_and(|w| w.reason == crate::plan::WaitReason::HostNotRunning)
            {
                start.extend(stopped);
            }
            applied.push(Applied {
                transition: t.clone(),
                status: Status::Waiting,
                detail,
                replayed: false,
            });
            continue;
        }
        if matches!(t.action, Action::None) {
            attention = true;
        }
        let mut replayed = false;
        let dir = observe::host_dir(&plan.state, &t.host);
        let (status, detail) = match &t.action {
            Action::None => (
                Status::Skipped,
                "needs attention; nothing to apply".to_owned(),
            ),
            Action::WriteHostConfig {
                config,
                dir: custom,
            } => match write_host(&dir, custom.as_deref(), config) {
                Ok(detail) => (Status::Succeeded, detail),
                Err(e) => (Status::Failed, e),
            },
            Action::Submit { request } => {
                let (status, detail, again) = send(
                    &dir,
                    Call::Submit {
                        op: t.id.clone(),
                        request: request.clone(),
                    },
                );
                replayed = again;
                (status, detail)
            }
            Action::Resolve { template } => match template.resolve(&plan.state) {
                Ok(request) => {
                    let (status, detail, again) = send(
                        &dir,
                        Call::Submit {
                            op: t.id.clone(),
                            request,
                        },
                    );
                    replayed = again;
                    (status, detail)
                }
                // Nothing was sent.
                Err(e) => (Status::Failed, e),
            },
            Action::Recover { op } => {
                let (status, detail, _) = send(&dir, Call::Answer { op: op.clone() });
                (status, detail)
            }
            Action::CreateAuthority { membership } => {
                let authority =
                    grid_engine::custody::membership::authority_dir(&plan.state, membership);
                match grid_engine::custody::membership::create_authority(&authority, membership) {
                    Ok(r) => (Status::Succeeded, format!("authority {}", r.fingerprint)),
                    Err(e) => (Status::Failed, e.to_string()),
                }
            }
            Action::Enroll { membership } => enroll(&plan.state, &dir, membership, &t.host),
            Action::Revoke {
                membership,
                participant,
            } => {
                let authority =
                    grid_engine::custody::membership::authority_dir(&plan.state, membership);
                match grid_engine::custody::membership::read_authority(&authority) {
                    Ok(r) if r.revoked.contains(participant) => (
                        Status::Succeeded,
                        format!("`{participant}` already revoked"),
                    ),
                    _ => match grid_engine::custody::membership::revoke(&authority, participant) {
                        Ok(r) => (
                            Status::Succeeded,
                            format!("revocation list {} issued", r.crl_number),
                        ),
                        Err(e) => (Status::Failed, e.to_string()),
                    },
                }
            }
            Action::DistributeRevocations { membership } => {
                let authority =
                    grid_engine::custody::membership::authority_dir(&plan.state, membership);
                match grid_engine::custody::membership::distribute_revocations(
                    &authority, &dir, membership,
                ) {
                    Ok(()) => (Status::Succeeded, "revocation list loaded".to_owned()),
                    Err(e) => (Status::Failed, e.to_string()),
                }
            }
            // A saved plan applied again: the authority already shows its effect.
            Action::Authority { .. } if took_effect(plan, t) => {
                (Status::Succeeded, "already in effect".to_owned())
            }
            Action::Authority { membership, call } => {
                use grid_engine::authority::service::AuthorityReply;
                match observe::authority_call(&dir, membership, call.clone()) {
                    Ok(AuthorityReply::Done { detail }) => (Status::Succeeded, detail),
                    Ok(AuthorityReply::Refused { reason }) => (Status::Refused, reason),
                    Ok(AuthorityReply::Unknown { reason }) => (Status::Unknown, reason),
                    Ok(other) => (Status::Failed, format!("unexpected reply {other:?}")),
                    Err(e) => (Status::Unknown, e),
                }
            }
            Action::Claim {
                membership,
                command,
            } => {
                use grid_engine::authority::service::ClaimOutcome;
                match crate::authority::claim(
                    &plan.state,
                    Some(membership),
                    &t.host,
                    &t.id,
                    command.clone(),
                ) {
                    Ok(r) => match r.outcome {
                        ClaimOutcome::Succeeded => (
                            Status::Succeeded,
                            format!("held at epoch {}", r.epoch.unwrap_or_default()),
                        ),
                        ClaimOutcome::Failed => (Status::Failed, r.detail),
                        ClaimOutcome::Refused => (Status::Refused, r.detail),
                        ClaimOutcome::Unknown => (Status::Unknown, r.detail),
                    },
                    Err(e) => (Status::Refused, e),
                }
            }
            Action::Mission { step } => mission(plan, t, step),
            Action::RewriteKeysAsPem => match grid_engine::custody::rewrite_as_pem(&dir) {
                Ok(files) if files.is_empty() => (
                    Status::Succeeded,
                    "every key file is PEM already".to_owned(),
                ),
                Ok(files) => (
                    Status::Succeeded,
                    format!("rewrote {} as PEM", files.join(", ")),
                ),
                Err(e) => (Status::Failed, e.to_string()),
            },
            Action::CreateCustody => match grid_engine::custody::create(&dir) {
                Ok(m) => (
                    Status::Succeeded,
                    format!("created key custody (generation {})", m.generation),
                ),
                Err(e) => (Status::Failed, e.to_string()),
            },
        };
        if matches!(status, Status::Failed | Status::Unknown | Status::Refused) {
            outcome = status;
            reason = Some(match status {
                Status::Unknown => format!(
                    "the reply of {} {} was lost: its outcome is unknown. Reconcile stopped and retries nothing; `gridctl plan` shows the owner's retained answer",
                    t.kind, t.name
                ),
                _ => format!("{} {} {}: reconcile stopped", t.kind, t.name, status.name()),
            });
        }
        applied.push(Applied {
            transition: t.clone(),
            status,
            detail,
            replayed,
        });
    }
    if outcome == Status::Succeeded {
        if !waiting.is_empty() {
            outcome = Status::Waiting;
        } else if attention {
            outcome = Status::Attention;
        }
    }
    start.sort();
    start.dedup();
    Report {
        outcome,
        reason,
        applied,
        start: start
            .into_iter()
            .map(|h| {
                let dir = observe::host_dir(&plan.state, &h);
                (h, dir)
            })
            .collect(),
    }
}

/// Enrolls once: a host already holding a current certificate of this authority for
/// its current TLS key is answered "already enrolled", never issued a second one.
fn enroll(state: &Path, dir: &Path, membership: &str, participant: &str) -> (Status, String) {
    use grid_engine::custody::membership;
    let authority = membership::authority_dir(state, membership);
    let record = match membership::read_authority(&authority) {
        Ok(r) => r,
        Err(e) => return (Status::Failed, e.to_string()),
    };
    let tls = grid_engine::custody::manifest(dir).map(|m| m.tls).ok();
    if let Ok(Some(held)) = membership::read_enrollment(dir, membership)
        && held.authority == record.fingerprint
        && Some(&held.tls) == tls.as_ref()
    {
        return (
            Status::Succeeded,
            format!("already enrolled (serial {})", held.serial),
        );
    }
    match membership::enroll(&authority, dir, participant) {
        Ok(e) => (
            Status::Succeeded,
            format!(
                "certificate serial {} valid until {}",
                e.serial, e.not_after
            ),
        ),
        Err(e) => (Status::Failed, e.to_string()),
    }
}

/// Sends one call (a submit, or a recovery of a retained answer) and acknowledges the
/// answer it receives; `true` when the owner returned its original answer to a
/// re-sent id.
pub fn send(dir: &Path, call: Call) -> (Status, String, bool) {
    let mut client = match Client::connect(dir) {
        Ok(c) => c,
        // Nothing was sent: the owner cannot have acted.
        Err(e) => return (Status::Failed, e.to_string(), false),
    };
    let reply = client.call(&call);
    let replayed = matches!(&reply, Ok(Reply::Answer(a)) if a.replayed);
    let (status, detail) = match reply {
        Ok(Reply::Answer(answer)) => {
            // Losing the acknowledgement only makes the answer show once more.
            let _ = client.call(&Call::Acknowledge {
                op: answer.op.clone(),
            });
            let status = match answer.outcome {
                Outcome::Succeeded => Status::Succeeded,
                Outcome::Failed => Status::Failed,
            };
            (status, answer.detail)
        }
        Ok(Reply::NoAnswer { op }) => (
            Status::Failed,
            format!("the owner never received operation {op}"),
        ),
        Ok(Reply::Refused { reason }) => (Status::Refused, reason),
        Ok(other) => (Status::Failed, format!("unexpected reply {other:?}")),
        Err(CallError::Lost { detail }) => (Status::Unknown, detail),
        Err(e @ CallError::Unreachable { .. }) => (Status::Failed, e.to_string()),
    };
    (status, detail, replayed)
}

/// Creates or rewrites a host installation: `DIR` 0700 and `DIR/host.toml` 0600. A
/// host with `dir=` in the files lives there, reached through `<state>/hosts/NAME`.
fn write_host(
    link: &Path,
    custom: Option<&Path>,
    config: &grid_engine::host::config::HostConfig,
) -> Result<String, String> {
    let dir = custom.unwrap_or(link);
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    // Created 0700 when absent; an existing one with weaker permissions is refused.
    grid_engine::store::ensure_private_dir(dir).map_err(|e| e.to_string())?;
    if let Some(custom) = custom {
        if let Some(parent) = link.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(io)?;
        }
        if std::fs::symlink_metadata(link).is_err() {
            std::os::unix::fs::symlink(custom, link).map_err(io)?;
        }
    }
    let path = dir.join(HOST_CONFIG_FILE);
    grid_engine::custody::write_private(&path, config.to_toml().as_bytes())
        .map_err(|e| e.to_string())?;
    // A new installation gets its keys; an existing custody is left as it is.
    let created = !grid_engine::custody::exists(dir);
    let manifest = grid_engine::custody::create(dir).map_err(|e| e.to_string())?;
    if created {
        Ok(format!(
            "wrote {} and key custody (generation {})",
            path.display(),
            manifest.generation
        ))
    } else {
        Ok(format!("wrote {}", path.display()))
    }
}

/// Sends a mission step to its host once, with the transition's id.
fn mission(plan: &Plan, t: &Transition, step: &crate::missions::Step) -> (Status, String) {
    use crate::missions::Step;
    use grid_engine::missions::api::{MissionCall, MissionReply};
    let call = match step {
        Step::Reserve { name, .. } => match crate::missions::terms(&plan.state, step) {
            Ok(terms) => MissionCall::Reserve {
                op: t.id.clone(),
                mission: name.clone(),
                terms,
            },
            Err(e) => return (Status::Refused, format!("{e}; nothing was sent")),
        },
        Step::Return { name } => MissionCall::Return {
            op: t.id.clone(),
            mission: name.clone(),
        },
    };
    match crate::missions::call(&plan.state, &t.host, call) {
        Ok(MissionReply::Mission { mission }) => (Status::Succeeded, mission.detail.clone()),
        Ok(MissionReply::Unknown { reason, .. }) => (Status::Unknown, reason),
        Ok(MissionReply::Refused { reason }) => (Status::Refused, reason),
        Ok(other) => (Status::Failed, format!("unexpected reply {other:?}")),
        Err(e) => (Status::Unknown, e),
    }
}
