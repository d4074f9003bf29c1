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
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Unknown => "unknown",
            Status::Refused => "refused",
            Status::Skipped => "skipped",
        }
    }

    /// The process exit code for an overall outcome.
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Succeeded | Status::Skipped => 0,
            Status::Failed => 1,
            Status::Unknown => 3,
            Status::Refused => 4,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Applied {
    pub transition: Transition,
    pub status: Status,
    pub detail: String,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub outcome: Status,
    pub reason: Option<String>,
    pub applied: Vec<Applied>,
}

impl Report {
    pub fn render(&self) -> String {
        let mut out = String::new();
        for a in &self.applied {
            let t = &a.transition;
            out.push_str(&format!(
                "{} {} {} @ {}: {}{}\n",
                t.op.symbol(),
                t.kind,
                t.name,
                t.host,
                a.status.name(),
                if a.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", a.detail)
                }
            ));
        }
        if let Some(reason) = &self.reason {
            out.push_str(&format!("{reason}\n"));
        }
        out.push_str(&format!("reconcile: {}\n", self.outcome.name()));
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
            None => observe::observe_host(
                &observed.owner,
                &observe::host_dir(&plan.state, &observed.owner),
            )
            .difference(&observed.fingerprint, &observed.summary),
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

/// Whether a transition of a saved plan already took effect at its owner.
fn took_effect(plan: &Plan, t: &Transition) -> bool {
    use grid_engine::custody::membership;
    let dir = observe::host_dir(&plan.state, &t.host);
    let answered = |op: &str| matches!(retained(&dir, op), Some(Reply::Answer(_)));
    match &t.action {
        Action::None => true,
        Action::Submit { .. } => answered(&t.id),
        Action::Recover { op } => answered(op),
        Action::WriteHostConfig { config, .. } => {
            grid_engine::host::config::HostConfig::read(&dir)
                .ok()
                .as_ref()
                == Some(config)
        }
        Action::CreateCustody => grid_engine::custody::exists(&dir),
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
    }
}

fn retained(dir: &Path, op: &str) -> Option<Reply> {
    Client::connect(dir)
        .ok()?
        .call(&Call::Answer { op: op.to_owned() })
        .ok()
}

/// Applies every transition in order; stops at the first that does not succeed.
pub fn apply(plan: &Plan) -> Report {
    let mut applied = Vec::new();
    let mut outcome = Status::Succeeded;
    let mut reason = None;
    for t in &plan.transitions {
        if outcome != Status::Succeeded {
            applied.push(Applied {
                transition: t.clone(),
                status: Status::Skipped,
                detail: "not attempted".to_owned(),
            });
            continue;
        }
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
            Action::Submit { request } => send(
                &dir,
                Call::Submit {
                    op: t.id.clone(),
                    request: request.clone(),
                },
            ),
            Action::Recover { op } => send(&dir, Call::Answer { op: op.clone() }),
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
        });
    }
    Report {
        outcome,
        reason,
        applied,
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
/// answer it receives.
pub fn send(dir: &Path, call: Call) -> (Status, String) {
    let mut client = match Client::connect(dir) {
        Ok(c) => c,
        // Nothing was sent: the owner cannot have acted.
        Err(e) => return (Status::Failed, e.to_string()),
    };
    match client.call(&call) {
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
    }
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
