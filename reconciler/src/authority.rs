//! The operator's side of the coordination authority: claim commands sent as a host
//! of the membership (through that host's control socket, so the host acts with its
//! own credentials), claims read after a barrier, and `inspect authority`.
//!
//! Nothing here retries: a command whose reply was not seen is reported `unknown`
//! with the exact command to re-send (the same op id).

use std::path::{Path, PathBuf};

use grid_engine::authority::service::{
    AuthorityCall, AuthorityReply, ClaimCommand, ClaimOutcome, VoterStatus,
};
use grid_engine::host::config::HostConfig;

use crate::observe;

/// How the fault, custody and storage profiles of this build's authority are
/// installed (reported by `inspect authority`).
pub const FAULT_PROFILE: &str = "crash-recovery: log entries and votes fsynced before acknowledgment; a majority of voters must run";
pub const CUSTODY_PROFILE: &str =
    "local-files: host keys and membership certificates in each voter's installation";
pub const STORAGE_PROFILE: &str = "fjall log per voter, snapshots as local files";

/// A host installed under the state directory that runs a voter of `membership`.
#[derive(Debug, Clone)]
pub struct VoterHost {
    pub name: String,
    pub dir: PathBuf,
}

/// Hosts installed under `state` that select the `authority` profile, with the
/// memberships each is enrolled in.
fn authority_installations(state: &Path) -> Vec<(VoterHost, Vec<String>)> {
    observe::installed_hosts(state)
        .into_iter()
        .filter_map(|name| {
            let dir = observe::host_dir(state, &name);
            let config = HostConfig::read(&dir).ok()?;
            if !config.selects(grid_spec::Profile::Authority) {
                return None;
            }
            let memberships = grid_engine::custody::membership::enrolled_memberships(&dir);
            Some((VoterHost { name, dir }, memberships))
        })
        .collect()
}

/// Hosts under `state` that select the `authority` profile and are enrolled in
/// `membership`.
pub fn voter_hosts(state: &Path, membership: &str) -> Vec<VoterHost> {
    authority_installations(state)
        .into_iter()
        .filter(|(_, memberships)| memberships.iter().any(|m| m == membership))
        .map(|(host, _)| host)
        .collect()
}

/// The membership a command means: the one given, or the only one with voters.
pub fn membership_of(state: &Path, given: Option<&str>) -> Result<String, String> {
    if let Some(m) = given {
        return Ok(m.to_owned());
    }
    let found: std::collections::BTreeSet<String> = authority_installations(state)
        .into_iter()
        .flat_map(|(_, memberships)| memberships)
        .collect();
    match found.len() {
        1 => Ok(found.into_iter().next().expect("one")),
        0 => Err(format!(
            "no host under {} runs an authority",
            state.display()
        )),
        _ => Err(format!(
            "several memberships have authorities ({}); name one with --membership",
            found.into_iter().collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The result of one claim command, as printed.
#[derive(Debug, Clone)]
pub struct ClaimResult {
    pub op: String,
    pub claim: String,
    pub membership: String,
    pub caller: String,
    pub outcome: ClaimOutcome,
    pub owner: Option<String>,
    pub epoch: Option<u64>,
    pub detail: String,
}

impl ClaimResult {
    pub fn outcome_name(&self) -> &'static str {
        match self.outcome {
            ClaimOutcome::Succeeded => "succeeded",
            ClaimOutcome::Failed => "failed",
            ClaimOutcome::Refused => "refused",
            ClaimOutcome::Unknown => "unknown",
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self.outcome {
            ClaimOutcome::Succeeded => 0,
            ClaimOutcome::Failed => 1,
            ClaimOutcome::Unknown => 3,
            ClaimOutcome::Refused => 4,
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "op": self.op,
            "claim": self.claim,
            "membership": self.membership,
            "as": self.caller,
            "outcome": self.outcome_name(),
            "owner": self.owner,
            "epoch": self.epoch,
            "detail": self.detail,
        })
    }
}

/// Sends one claim command as host `caller`, once.
pub fn claim(
    state: &Path,
    membership: Option<&str>,
    caller: &str,
    op: &str,
    command: ClaimCommand,
) -> Result<ClaimResult, String> {
    let dir = observe::installed(state, caller)?;
    let membership = match membership {
        Some(m) => m.to_owned(),
        None => {
            let enrolled = grid_engine::custody::membership::enrolled_memberships(&dir);
            match enrolled.as_slice() {
                [one] => one.clone(),
                _ => membership_of(state, None)?,
            }
        }
    };
    let claim_name = command.claim().to_owned();
    let mut result = ClaimResult {
        op: op.to_owned(),
        claim: claim_name,
        membership: membership.clone(),
        caller: caller.to_owned(),
        outcome: ClaimOutcome::Unknown,
        owner: None,
        epoch: None,
        detail: String::new(),
    };
    let mut client = match grid_engine::host::control::Client::connect(&dir) {
        Ok(c) => c,
        Err(e) => {
            // Nothing was sent.
            result.outcome = ClaimOutcome::Refused;
            result.detail = format!("host `{caller}` does not answer ({e}); nothing was sent");
            return Ok(result);
        }
    };
    let reply = client.call(&grid_engine::protocol::Call::Authority {
        membership: Some(membership.clone()),
        request: AuthorityCall::Claim {
            op: op.to_owned(),
            command,
        },
    });
    match reply {
        Ok(grid_engine::protocol::Reply::Authority(AuthorityReply::Claim {
            outcome,
            owner,
            epoch,
            detail,
            ..
        })) => {
            result.outcome = outcome;
            if matches!(outcome, ClaimOutcome::Succeeded | ClaimOutcome::Failed) {
                result.owner = owner;
                result.epoch = Some(epoch);
            }
            result.detail = detail;
        }
        Ok(grid_engine::protocol::Reply::Refused { reason }) => {
            result.outcome = ClaimOutcome::Refused;
            result.detail = reason;
        }
        Ok(other) => {
            result.detail = format!("unexpected reply {other:?}; re-send the same op id");
        }
        Err(e) => {
            result.detail =
                format!("the reply was lost ({e}); re-send the same op id to learn its outcome");
        }
    }
    Ok(result)
}

/// A claim as the authority holds it, after a read barrier through any running voter.
pub fn show(
    state: &Path,
    membership: &str,
    claim: &str,
) -> Result<(Option<grid_engine::authority::claims::Claim>, u64, String), String> {
    let voters = voter_hosts(state, membership);
    if voters.is_empty() {
        return Err(format!(
            "no host under {} runs a voter of `{membership}`",
            state.display()
        ));
    }
    let mut errors = Vec::new();
    for voter in &voters {
        match observe::authority_call(
            &voter.dir,
            membership,
            AuthorityCall::Show {
                claim: claim.to_owned(),
            },
        ) {
            Ok(AuthorityReply::Shown { claim, read_index }) => {
                return Ok((claim, read_index, voter.name.clone()));
            }
            Ok(AuthorityReply::Unknown { reason }) => {
                errors.push(format!("{}: {reason}", voter.name))
            }
            Ok(other) => errors.push(format!("{}: {other:?}", voter.name)),
            Err(e) => errors.push(format!("{}: {e}", voter.name)),
        }
    }
    Err(format!(
        "unknown: no voter could read it after a barrier ({})",
        errors.join("; ")
    ))
}

/// What `inspect authority` reports.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub membership: String,
    pub members: Vec<(String, Result<VoterStatus, String>)>,
    /// `ok` or `unknown`.
    pub barrier: String,
    pub barrier_detail: String,
    /// The leader a successful barrier went through (`None` when the barrier failed:
    /// a remembered leader is not evidence of a live quorum).
    pub leader: Option<String>,
    pub read_index: Option<u64>,
}

impl Inspection {
    /// `STORAGE_PROFILE`, and the bucket the voters also keep their snapshots in
    /// (`snapshots "s3://…"`), as any running voter reports it.
    fn storage_profile(&self) -> String {
        let bucket = self.members.iter().find_map(|(_, s)| {
            s.as_ref()
                .ok()
                .and_then(|s| s.snapshot_store.as_ref())
                .map(|r| r.url.clone())
        });
        match bucket {
            Some(url) => format!("{STORAGE_PROFILE}, also sealed in {url}"),
            None => STORAGE_PROFILE.to_owned(),
        }
    }

    /// The freshest view among the voters that answered.
    fn view(&self) -> Option<&VoterStatus> {
        self.members
            .iter()
            .filter_map(|(_, s)| s.as_ref().ok())
            .filter(|s| s.initialized)
            .max_by_key(|s| (s.term, s.state == "leader", s.last_applied))
    }

    pub fn to_json(&self) -> serde_json::Value {
        let view = self.view();
        serde_json::json!({
            "membership": self.membership,
            "voters": view.map(|v| v.voters.clone()).unwrap_or_default(),
            "learners": view.map(|v| v.learners.clone()).unwrap_or_default(),
            "leader": self.leader,
            "remembered_leader": view.and_then(|v| v.leader.clone()),
            "term": view.map(|v| v.term),
            "last_applied": view.and_then(|v| v.last_applied),
            "barrier": self.barrier,
            "barrier_detail": self.barrier_detail,
            "read_index": self.read_index,
            "profile": {
                "fault": FAULT_PROFILE,
                "custody": CUSTODY_PROFILE,
                "storage": self.storage_profile(),
            },
            "members": self.members.iter().map(|(name, s)| match s {
                Ok(s) => serde_json::to_value(s).expect("statuses serialize"),
                Err(e) => serde_json::json!({"participant": name, "unreachable": e}),
            }).collect::<Vec<_>>(),
        })
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let view = self.view();
        out.push_str(&format!("authority of {}\n", self.membership));
        out.push_str(&format!(
            "  voters: {}\n",
            view.map(|v| v.voters.join(", "))
                .unwrap_or_else(|| "(not bootstrapped)".to_owned())
        ));
        if let Some(v) = view.filter(|v| !v.learners.is_empty()) {
            out.push_str(&format!("  learners: {}\n", v.learners.join(", ")));
        }
        out.push_str(&format!(
            "  barrier: {} ({})\n",
            self.barrier, self.barrier_detail
        ));
        out.push_str(&format!(
            "  leader: {}\n",
            match (&self.leader, view.and_then(|v| v.leader.as_ref())) {
                (Some(l), _) => format!("{l} (confirmed by the barrier)"),
                (None, Some(l)) => format!("unknown (`{l}` is only remembered, not confirmed)"),
                (None, None) => "unknown".to_owned(),
            }
        ));
        if let Some(v) = view {
            out.push_str(&format!(
                "  term: {}, last applied: {}\n",
                v.term,
                v.last_applied.map_or("none".to_owned(), |i| i.to_string())
            ));
        }
        out.push_str(&format!("  fault profile: {FAULT_PROFILE}\n  custody profile: {CUSTODY_PROFILE}\n  storage profile: {}\n", self.storage_profile()));
        for (name, status) in &self.members {
            match status {
                Ok(s) => {
                    out.push_str(&format!(
                        "  {name}: {} term {} applied {} snapshot {} purged {} files [{}]\n",
                        s.state,
                        s.term,
                        s.last_applied.map_or("-".to_owned(), |i| i.to_string()),
                        s.snapshot.map_or("-".to_owned(), |i| i.to_string()),
                        s.purged.map_or("-".to_owned(), |i| i.to_string()),
                        s.snapshot_files.join(" ")
                    ));
                    if let Some(r) = &s.snapshot_store {
                        out.push_str(&format!(
                            "    snapshots at {}: put {}, fetched {}, newest {}{}\n",
                            r.url,
                            r.uploaded,
                            r.fetched,
                            r.last_object.as_deref().unwrap_or("-"),
                            r.last_error
                                .as_ref()
                                .map_or(String::new(), |e| format!(", last error: {e}"))
                        ));
                    }
                }
                Err(e) => out.push_str(&format!("  {name}: unreachable ({e})\n")),
            }
        }
        out
    }
}

/// Each voter's view, then an explicit read barrier.
pub fn inspect(state: &Path, membership: &str) -> Result<Inspection, String> {
    let voters = voter_hosts(state, membership);
    if voters.is_empty() {
        return Err(format!(
            "no host under {} runs a voter of `{membership}`",
            state.display()
        ));
    }
    let members: Vec<(String, Result<VoterStatus, String>)> = voters
        .iter()
        .map(|v| {
            (
                v.name.clone(),
                observe::authority_status(&v.dir, membership),
            )
        })
        .collect();
    let mut inspection = Inspection {
        membership: membership.to_owned(),
        members,
        barrier: "unknown".to_owned(),
        barrier_detail: "no voter answered".to_owned(),
        leader: None,
        read_index: None,
    };
    // Ask the voters in order of how likely they lead; the first `ok` settles it.
    let mut order: Vec<usize> = (0..voters.len()).collect();
    order.sort_by_key(|&i| match &inspection.members[i].1 {
        Ok(s) if s.state == "leader" => 0,
        Ok(_) => 1,
        Err(_) => 2,
    });
    let mut details = Vec::new();
    for i in order {
        let Ok(status) = &inspection.members[i].1 else {
            continue;
        };
        if !status.initialized {
            continue;
        }
        match observe::authority_call(&voters[i].dir, membership, AuthorityCall::Barrier) {
            Ok(AuthorityReply::Barrier {
                barrier,
                read_index,
                detail,
            }) if barrier == "ok" => {
                inspection.barrier = barrier;
                inspection.read_index = read_index;
                inspection.barrier_detail = format!("through `{}`: {detail}", voters[i].name);
                inspection.leader = if status.state == "leader" {
                    Some(status.participant.clone())
                } else {
                    status.leader.clone()
                };
                return Ok(inspection);
            }
            Ok(AuthorityReply::Barrier { detail, .. }) => {
                details.push(format!("{}: {detail}", voters[i].name))
            }
            Ok(other) => details.push(format!("{}: {other:?}", voters[i].name)),
            Err(e) => details.push(format!("{}: {e}", voters[i].name)),
        }
    }
    if !details.is_empty() {
        inspection.barrier_detail = details.join("; ");
    } else if inspection
        .members
        .iter()
        .any(|(_, s)| s.as_ref().is_ok_and(|s| !s.initialized))
    {
        inspection.barrier_detail = "the authority is not bootstrapped".to_owned();
    }
    Ok(inspection)
}

/// Asks a voter to build a snapshot now (then the log it covers is purged).
pub fn snapshot(state: &Path, membership: &str, host: &str) -> Result<String, String> {
    let dir = observe::host_dir(state, host);
    match observe::authority_call(&dir, membership, AuthorityCall::Snapshot)? {
        AuthorityReply::Done { detail } => Ok(detail),
        AuthorityReply::Refused { reason } | AuthorityReply::Unknown { reason } => Err(reason),
        other => Err(format!("unexpected reply {other:?}")),
    }
}
