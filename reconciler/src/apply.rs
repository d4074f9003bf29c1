//! Reconcile: apply a plan's transitions, each sent once to its original owner with
//! the plan's operation id. Never retries: a lost reply makes the transition
//! `unknown` and reconcile stops there; the next plan shows the owner's retained
//! answer.

use std::path::Path;

use grid_engine::host::control::Client;

use crate::diff::{authority, hosts, memberships};
use crate::plan::{Action, Plan, Transition};
use crate::{missions, observe, operation, routes};

pub use crate::transition::{Effect, Status};

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
    /// Those of `start` whose store is fenced at an authority (`storage authority=`):
    /// each asks it before it serves, so it starts in a gridd of its own once the
    /// authority runs.
    pub fenced: Vec<String>,
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
            let (fenced, plain): (Vec<_>, Vec<_>) = self
                .start
                .iter()
                .take(max)
                .partition(|(h, _)| self.fenced.contains(h));
            let mut commands = String::new();
            if !plain.is_empty() {
                commands.push_str(&format!(
                    "  gridd{}{}\n",
                    plain
                        .iter()
                        .map(|(_, d)| format!(" --dir {}", d.display()))
                        .collect::<String>(),
                    if self.start.len() > max {
                        format!(" … ({} hosts in all: --json lists them)", self.start.len())
                    } else {
                        String::new()
                    }
                ));
            }
            for (_, dir) in fenced {
                commands.push_str(&format!(
                    "  gridd --dir {}   # once its authority runs: its store is fenced there (storage authority=)\n",
                    dir.display()
                ));
            }
            out.push_str(&format!(
                "{waiting} transition(s) wait for {} to run. Start them, then reconcile again:\n{commands}or run the whole topology with `gridctl up FILES`.\n",
                crate::plan::shown(&names, max),
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
                "fenced": self.fenced.contains(h),
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
    // The archive is its own transition: as this plan's wrote it, it is the plan's.
    let archived = plan.transitions.iter().find_map(|t| match &t.action {
        Action::WriteArchive { archive, .. } if t.host == now.name => Some(archive.as_ref()),
        _ => None,
    });
    // So are the snapshot stores.
    let stored: Vec<&crate::diff::snapshots::SnapshotStore> = plan
        .transitions
        .iter()
        .filter_map(|t| match &t.action {
            Action::WriteSnapshots { store } if t.host == now.name => Some(store),
            _ => None,
        })
        .collect();
    let now_config = now.config.clone().map(|mut c| {
        if c.archive.is_some() && archived == Some(c.archive.as_ref()) {
            c.archive = None;
        }
        c.snapshots
            .retain(|m, s| !stored.iter().any(|w| &w.membership == m && &w.store == s));
        c
    });
    if now_config.is_some() && now_config.as_ref() != written {
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

/// Whether a transition of a saved plan already took effect at its owner: asked of the
/// capability that owns it.
fn took_effect(plan: &Plan, t: &Transition) -> bool {
    let state = &plan.state;
    let dir = observe::host_dir(state, &t.host);
    match &t.action {
        Action::None => true,
        Action::Submit { .. } | Action::Resolve { .. } => operation::answered(&dir, &t.id),
        Action::Recover { op } => operation::answered(&dir, op),
        Action::WriteHostConfig { config, .. } => hosts::written(&dir, config),
        Action::Transfer { destination, .. } => crate::transfer::done(state, &t.host, destination),
        Action::ReplaceStorage { generation, .. } => crate::replace::done(&dir, *generation),
        Action::WriteArchive {
            archive,
            leaving,
            index_leaving,
        } => crate::diff::archive::written(
            &dir,
            archive.as_ref(),
            (leaving.as_ref(), index_leaving.as_ref()),
        ),
        Action::WriteSnapshots { store } => crate::diff::snapshots::written(&dir, store),
        Action::CreateCustody => hosts::custody_created(&dir),
        Action::RewriteKeysAsPem => hosts::keys_rewritten(&dir),
        Action::CreateAuthority { membership } => memberships::authority_created(state, membership),
        Action::Revoke {
            membership,
            participant,
        } => memberships::revoked(state, membership, participant),
        Action::Enroll { membership, .. } => memberships::enrolled_in(&dir, membership),
        Action::Renew {
            membership, serial, ..
        } => memberships::renewed(&dir, membership, *serial),
        Action::DistributeRevocations { membership } => {
            memberships::revocations_distributed(state, &dir, membership)
        }
        Action::PublishKeys {
            membership,
            members,
        } => crate::diff::peer_keys::published(state, &dir, membership, members),
        Action::Authority { membership, call } => authority::took_effect(&dir, membership, call),
        Action::Claim {
            membership,
            command,
        } => routes::claim_held(&dir, membership, &t.host, command),
        // The host answers a re-sent op id from its record: always asked.
        Action::Mission { .. } => false,
    }
}

/// Applies one transition: sent to the capability that owns it.
fn effect(plan: &Plan, t: &Transition) -> Effect {
    let state = &plan.state;
    let dir = observe::host_dir(state, &t.host);
    match &t.action {
        // What needs attention is said again here: a reconcile shows no plan.
        Action::None => Effect::new(
            Status::Skipped,
            format!("needs attention, nothing to apply: {}", t.detail),
        ),
        Action::WriteHostConfig {
            config,
            dir: custom,
        } => hosts::write(&dir, custom.as_deref(), config),
        Action::WriteArchive {
            archive,
            leaving,
            index_leaving,
        } => crate::diff::archive::write(
            &dir,
            archive.as_ref(),
            (leaving.as_ref(), index_leaving.as_ref()),
        ),
        Action::WriteSnapshots { store } => crate::diff::snapshots::write_store(&dir, store),
        Action::Transfer {
            source,
            destination,
        } => crate::transfer::apply(state, &t.host, &t.id, source, destination),
        Action::ReplaceStorage { from, .. } => crate::replace::effect(state, &t.host, &t.id, from),
        Action::CreateCustody => hosts::create_custody(&dir),
        Action::RewriteKeysAsPem => hosts::rewrite_keys_as_pem(&dir),
        Action::Submit { request } => operation::submit(&dir, &t.id, request.clone()),
        Action::Resolve { template } => operation::resolve_and_submit(state, &dir, &t.id, template),
        Action::Recover { op } => operation::recover(&dir, op),
        Action::CreateAuthority { membership } => memberships::create_authority(state, membership),
        Action::Enroll {
            membership,
            valid_days,
        } => memberships::enroll(state, &dir, membership, &t.host, *valid_days),
        Action::Renew {
            membership,
            serial,
            valid_days,
        } => memberships::renew(state, &dir, membership, &t.host, *serial, *valid_days),
        Action::Revoke {
            membership,
            participant,
        } => memberships::revoke(state, membership, participant),
        Action::DistributeRevocations { membership } => {
            memberships::distribute_revocations(state, &dir, membership)
        }
        Action::PublishKeys {
            membership,
            members,
        } => crate::diff::peer_keys::publish(state, &dir, membership, members),
        Action::Authority { membership, call } => authority::apply(&dir, membership, call),
        Action::Claim {
            membership,
            command,
        } => routes::claim(state, membership, &t.host, &t.id, command),
        Action::Mission { step } => missions::apply(state, &t.host, &t.id, step),
    }
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
    // Transitions needing attention, and those planned after them.
    let mut attended: std::collections::HashSet<&str> = std::collections::HashSet::new();
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
        if let Some(id) = t.after.iter().find(|a| attended.contains(a.as_str())) {
            attended.insert(&t.id);
            attention = true;
            let title = plan.transitions.iter().find(|d| d.id == *id);
            applied.push(Applied {
                transition: t.clone(),
                status: Status::Skipped,
                detail: format!(
                    "after {}, which needs attention",
                    title.map_or_else(|| id.clone(), Transition::title)
                ),
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
                        let wait = crate::plan::Wait {
                            reason: w.reason,
                            hosts: stopped.clone(),
                        }
                        .describe();
                        // What it waits for is on its line: named here too.
                        match w.reason {
                            crate::plan::WaitReason::ObligationsOpen => {
                                format!("{wait} ({})", t.detail)
                            }
                            _ => wait,
                        }
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
            // What is planned after it (an installation refused for its files: its
            // enrollment) is not applied: it needs the operator first.
            attended.insert(&t.id);
        }
        let Effect {
            status,
            detail,
            replayed,
            ..
        } = effect(plan, t);
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
    let start: Vec<(String, std::path::PathBuf)> = start
        .into_iter()
        .map(|h| {
            let dir = observe::host_dir(&plan.state, &h);
            (h, dir)
        })
        .collect();
    let fenced = start
        .iter()
        .filter(|(_, dir)| {
            grid_engine::host::config::HostConfig::read(dir)
                .is_ok_and(|c| c.storage_claim.is_some())
        })
        .map(|(h, _)| h.clone())
        .collect();
    Report {
        outcome,
        reason,
        applied,
        start,
        fenced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host fenced at an authority is named in a gridd of its own, after the others.
    #[test]
    fn the_start_hint_keeps_a_fenced_host_out_of_the_packed_gridd() {
        let report = Report {
            outcome: Status::Waiting,
            reason: None,
            applied: Vec::new(),
            start: vec![
                ("edge".to_owned(), "st/hosts/edge".into()),
                ("hq".to_owned(), "st/hosts/hq".into()),
                ("site".to_owned(), "st/hosts/site".into()),
            ],
            fenced: vec!["edge".to_owned()],
        };
        let text = report.render();
        assert!(
            text.contains("\n  gridd --dir st/hosts/hq --dir st/hosts/site\n  gridd --dir st/hosts/edge   # once its authority runs"),
            "{text}"
        );
        let json = report.to_json();
        assert_eq!(json["start"][0]["fenced"], true);
        assert_eq!(json["start"][1]["fenced"], false);
    }
}
