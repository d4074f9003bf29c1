//! Plan: the files' desired state against what the original owners retain, as one
//! line per transition. Planning changes nothing.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use grid_engine::host::config::HostConfig;
use grid_engine::protocol::{Outcome, Request};
use grid_spec::Topology;
use sha2::{Digest, Sha256};

use crate::observe::{self, HostObservation, HostStatus, hex};

/// `+` create, `~` change, `-` retire, `!` needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Create,
    Change,
    Retire,
    Attention,
}

impl Op {
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Create => "+",
            Op::Change => "~",
            Op::Retire => "-",
            Op::Attention => "!",
        }
    }

    pub fn from_symbol(symbol: &str) -> Option<Op> {
        [Op::Create, Op::Change, Op::Retire, Op::Attention]
            .into_iter()
            .find(|op| op.symbol() == symbol)
    }
}

/// What reconcile does for a transition.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing: the line informs (unreachable or unmanaged owners).
    None,
    /// Create or rewrite the host's installation (`DIR/host.toml`, DIR 0700).
    WriteHostConfig {
        config: HostConfig,
        dir: Option<PathBuf>,
    },
    /// Create the host's key custody (keys and manifest) in its installation.
    CreateCustody,
    /// Create a membership's certificate authority in the operator's state.
    CreateAuthority { membership: String },
    /// Certify the host's public TLS key as a participant of the membership.
    Enroll { membership: String },
    /// Revoke a participant: every certificate issued to it, in a new revocation list.
    Revoke {
        membership: String,
        participant: String,
    },
    /// Copy the membership's current revocation list into a member host's installation.
    DistributeRevocations { membership: String },
    /// Send an operation to the host.
    Submit { request: Request },
    /// Ask the host again for the retained answer of `op` and acknowledge it.
    Recover { op: String },
    /// A call to the authority of `membership` through the host's control socket:
    /// bootstrap, add or remove a voter.
    Authority {
        membership: String,
        call: grid_engine::authority::service::AuthorityCall,
    },
    /// A claim command sent as the host (its control socket) to the authority of
    /// `membership`, with the transition's operation id: the publishing right of a
    /// route.
    Claim {
        membership: String,
        command: grid_engine::authority::service::ClaimCommand,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub op: Op,
    pub kind: String,
    pub name: String,
    /// The owner it goes to.
    pub host: String,
    pub detail: String,
    /// The operation id sent to the owner (empty for lines without action).
    pub id: String,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub owner: String,
    pub fingerprint: String,
    pub summary: String,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub state: PathBuf,
    pub files: Vec<PathBuf>,
    /// What was observed of each owner.
    pub observed: Vec<Observed>,
    pub transitions: Vec<Transition>,
}

impl Plan {
    /// A digest of the whole plan's inputs: what was observed and what is desired.
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        for observed in &self.observed {
            hasher.update(observed.owner.as_bytes());
            hasher.update(observed.fingerprint.as_bytes());
        }
        for t in &self.transitions {
            hasher.update(t.op.symbol().as_bytes());
            hasher.update(t.kind.as_bytes());
            hasher.update(t.name.as_bytes());
            hasher.update(t.detail.as_bytes());
            hasher.update(format!("{:?}", t.action).as_bytes());
        }
        hex(&hasher.finalize()[..16])
    }

    pub fn count(&self, op: Op) -> usize {
        self.transitions.iter().filter(|t| t.op == op).count()
    }

    pub fn is_empty(&self) -> bool {
        self.transitions.is_empty()
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for t in &self.transitions {
            let _ = writeln!(
                out,
                "{} {} {} @ {}: {}",
                t.op.symbol(),
                t.kind,
                t.name,
                t.host,
                indent(&t.detail)
            );
        }
        let _ = writeln!(
            out,
            "plan: {} to create, {} to change, {} to retire, {} needing attention",
            self.count(Op::Create),
            self.count(Op::Change),
            self.count(Op::Retire),
            self.count(Op::Attention)
        );
        out
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "fingerprint": self.fingerprint(),
            "transitions": self.transitions.iter().map(|t| serde_json::json!({
                "op": t.op.symbol(),
                "kind": t.kind,
                "name": t.name,
                "host": t.host,
                "detail": t.detail,
                "id": t.id,
            })).collect::<Vec<_>>(),
            "counts": {
                "+": self.count(Op::Create),
                "~": self.count(Op::Change),
                "-": self.count(Op::Retire),
                "!": self.count(Op::Attention),
            },
        })
    }
}

fn indent(detail: &str) -> String {
    detail.replace('\n', "\n    ")
}

/// The line-level difference of two canonical texts, for `~` details.
pub(crate) fn diff(before: &str, after: &str) -> String {
    let old: Vec<&str> = before.lines().collect();
    let new: Vec<&str> = after.lines().collect();
    let mut out = Vec::new();
    for line in &old {
        if !new.contains(line) {
            out.push(format!("before: {}", line.trim()));
        }
    }
    for line in &new {
        if !old.contains(line) {
            out.push(format!("after:  {}", line.trim()));
        }
    }
    if out.is_empty() {
        "declaration order changed".to_owned()
    } else {
        out.join("\n")
    }
}

/// Where a topology host's installation is.
pub fn host_dir(state: &Path, host: &grid_spec::Host) -> PathBuf {
    observe::host_dir(state, &host.name)
}

/// Observes every owner and diffs. `state` is the operator's state directory.
pub fn plan(topology: &Topology, files: &[PathBuf], state: &Path) -> Plan {
    let mut observations: Vec<HostObservation> = Vec::new();
    let mut seen = BTreeSet::new();
    for host in &topology.hosts {
        seen.insert(host.name.clone());
        observations.push(observe::observe_host(&host.name, &host_dir(state, host)));
    }
    for name in observe::installed_hosts(state) {
        if !seen.contains(&name) {
            observations.push(observe::observe_host(
                &name,
                &observe::host_dir(state, &name),
            ));
        }
    }
    let mut transitions = membership_transitions(topology, state);
    for observation in &observations {
        let desired = topology.host(&observation.name);
        transitions.extend(host_transitions(topology, desired, observation));
        if let Some(desired) = desired {
            transitions.extend(enrollment_transitions(
                topology,
                state,
                desired,
                observation,
            ));
        }
    }
    let authority = authority_transitions(topology, state, &observations);
    // Routes wait for their membership's authority and its learners: a publishing
    // right is a claim there.
    let pending: BTreeSet<String> = authority
        .iter()
        .filter_map(|t| match &t.action {
            Action::Authority { membership, .. } => Some(membership.clone()),
            _ => (t.kind == "authority").then(|| t.name.clone()),
        })
        .collect();
    transitions.extend(authority);
    transitions.extend(crate::routes::transitions(
        topology,
        state,
        &observations,
        &pending,
    ));
    transitions.extend(crate::processes::transitions(
        topology,
        state,
        &observations,
    ));
    transitions.extend(crate::sources::transitions(topology, &observations));
    let mut observed: Vec<Observed> = observations
        .iter()
        .map(|o| Observed {
            owner: o.name.clone(),
            fingerprint: o.fingerprint(),
            summary: o.summary(),
        })
        .collect();
    for name in membership_names(topology, state) {
        let dir = grid_engine::custody::membership::authority_dir(state, &name);
        observed.push(Observed {
            owner: format!("{MEMBERSHIP_OWNER_PREFIX}{name}"),
            fingerprint: observe::authority_fingerprint(&dir),
            summary: match grid_engine::custody::membership::read_authority(&dir) {
                Ok(r) => format!(
                    "authority with {} enrollment(s), revoked [{}]",
                    r.enrolled.len(),
                    r.revoked.join(" ")
                ),
                Err(_) => "no authority".to_owned(),
            },
        });
    }
    let mut plan = Plan {
        state: state.to_owned(),
        files: files.to_owned(),
        observed,
        transitions,
    };
    // Operation ids derive from the plan: the same plan sends the same ids.
    let fingerprint = plan.fingerprint();
    for (index, t) in plan.transitions.iter_mut().enumerate() {
        if matches!(
            t.action,
            Action::Submit { .. } | Action::WriteHostConfig { .. } | Action::Claim { .. }
        ) {
            t.id = format!("plan-{fingerprint}-{index}");
        }
    }
    plan
}

fn attention(kind: &str, name: &str, host: &str, detail: String) -> Transition {
    Transition {
        op: Op::Attention,
        kind: kind.to_owned(),
        name: name.to_owned(),
        host: host.to_owned(),
        detail,
        id: String::new(),
        action: Action::None,
    }
}

fn host_transitions(
    topology: &Topology,
    desired: Option<&grid_spec::Host>,
    observation: &HostObservation,
) -> Vec<Transition> {
    let name = &observation.name;
    let mut out = Vec::new();
    let Some(desired) = desired else {
        out.push(attention(
            "host",
            name,
            name,
            format!(
                "unmanaged: an installation exists in {} but no file declares it",
                observation.dir.display()
            ),
        ));
        return out;
    };
    let config = HostConfig::from_host(desired);
    let write = |op: Op, detail: String| Transition {
        op,
        kind: "host".to_owned(),
        name: name.clone(),
        host: name.clone(),
        detail,
        id: String::new(),
        action: Action::WriteHostConfig {
            config: config.clone(),
            dir: desired.dir.clone(),
        },
    };
    // Where the installation is against where the files want it: moving it is an
    // installation transfer (SPEC C11), which is never inferred from an edit.
    if observation.config.is_some() {
        let linked = std::fs::read_link(&observation.dir).ok();
        if linked.as_deref() != desired.dir.as_deref() {
            let now = linked.map_or_else(
                || observation.dir.display().to_string(),
                |l| l.display().to_string(),
            );
            let wanted = desired.dir.as_ref().map_or_else(
                || observation.dir.display().to_string(),
                |d| d.display().to_string(),
            );
            out.push(attention(
                "host",
                name,
                name,
                format!("installed in {now}, the files say {wanted}: moving an installation is a transfer, which this version does not perform"),
            ));
        }
    }
    match (&observation.config, &observation.status) {
        (None, HostStatus::Missing) => {
            out.push(write(
                Op::Create,
                format!("installation in {}", observation.dir.display()),
            ));
            return out;
        }
        (None, HostStatus::Unreachable { reason }) => {
            out.push(attention(
                "host",
                name,
                name,
                format!("installation unreadable: {reason}"),
            ));
            return out;
        }
        (Some(found), _) if *found != config => {
            let before = found.to_toml();
            let after = config.to_toml();
            let mut detail = diff(&before, &after);
            if matches!(observation.status, HostStatus::Running(_)) {
                detail.push_str("\n(takes effect when gridd restarts)");
            }
            out.push(write(Op::Change, detail));
        }
        _ => {}
    }
    out.extend(key_transitions(desired, observation));
    let observed = match &observation.status {
        HostStatus::Running(o) => o,
        HostStatus::Missing => return out,
        HostStatus::Unreachable { reason } => {
            let models = topology.models.iter().filter(|m| m.host == *name).count();
            out.push(attention(
                "host",
                name,
                name,
                format!("unreachable: {reason}; its {models} model(s) cannot be planned"),
            ));
            return out;
        }
    };
    for retained in &observed.unacknowledged {
        let outcome = match retained.answer.outcome {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
        };
        out.push(Transition {
            op: Op::Attention,
            kind: "operation".to_owned(),
            name: retained.answer.op.clone(),
            host: name.clone(),
            detail: format!(
                "{} {outcome} at the owner ({}); its reply was never acknowledged",
                retained.request.describe(),
                retained.answer.detail
            ),
            id: retained.answer.op.clone(),
            action: Action::Recover {
                op: retained.answer.op.clone(),
            },
        });
    }
    let submit = |op: Op, model: &str, detail: String, request: Request| Transition {
        op,
        kind: "model".to_owned(),
        name: model.to_owned(),
        host: name.clone(),
        detail,
        id: String::new(),
        action: Action::Submit { request },
    };
    for model in topology.models.iter().filter(|m| m.host == *name) {
        let canonical = grid_spec::canonical::model(model);
        let install = Request::InstallModel {
            name: model.name.clone(),
            model: canonical.clone(),
        };
        match observed.models.iter().find(|m| m.name == model.name) {
            None if model.retired => {}
            None => out.push(submit(
                Op::Create,
                &model.name,
                format!(
                    "{} inputs, {} cells",
                    model.inputs().count(),
                    model.cells().count()
                ),
                install,
            )),
            Some(held) if held.retired && !model.retired => out.push(submit(
                Op::Create,
                &model.name,
                "reinstate a retired model as a new generation".to_owned(),
                install,
            )),
            Some(held) if held.retired => {}
            Some(_) if model.retired => out.push(submit(
                Op::Retire,
                &model.name,
                "retired=#true in the files".to_owned(),
                Request::RetireModel {
                    name: model.name.clone(),
                },
            )),
            Some(held) if held.model != canonical => out.push(submit(
                Op::Change,
                &model.name,
                diff(&held.model, &canonical),
                install,
            )),
            Some(_) => {}
        }
    }
    for held in observed.models.iter().filter(|m| !m.retired) {
        let declared = topology
            .models
            .iter()
            .any(|m| m.name == held.name && m.host == *name);
        if !declared {
            out.push(attention(
                "model",
                &held.name,
                name,
                "unmanaged: the host holds it but no file declares it here; mark it retired=#true to retire it".to_owned(),
            ));
        }
    }
    out
}

/// Key custody: created with the installation; rotated only when the files raise
/// `keys generation=N`; never regenerated because a key is missing (that refuses the
/// host instead) and never rotated backwards.
fn key_transitions(desired: &grid_spec::Host, observation: &HostObservation) -> Vec<Transition> {
    let name = &observation.name;
    let mut out = Vec::new();
    if observation.config.is_none() {
        return out; // `+ host` creates the custody with the installation.
    }
    let wanted = desired.key_generation.unwrap_or(1);
    let manifest = match grid_engine::custody::manifest(&observation.dir) {
        Ok(m) => m,
        Err(grid_engine::custody::CustodyError::MissingKey { .. })
            if !observation
                .dir
                .join(grid_engine::custody::KEYS_DIR)
                .exists() =>
        {
            out.push(Transition {
                op: Op::Create,
                kind: "keys".to_owned(),
                name: name.clone(),
                host: name.clone(),
                detail: "key custody: signing, mail and TLS keys with their manifest".to_owned(),
                id: String::new(),
                action: Action::CreateCustody,
            });
            return out;
        }
        Err(e) => {
            out.push(attention(
                "keys",
                name,
                name,
                format!("key custody unreadable: {e}"),
            ));
            return out;
        }
    };
    let current = match &observation.status {
        HostStatus::Running(o) => o
            .keys
            .as_ref()
            .map_or(manifest.generation, |k| k.generation),
        _ => manifest.generation,
    };
    if wanted < current {
        out.push(attention(
            "keys",
            name,
            name,
            format!("the files say signing generation {wanted}, the host holds {current}: generations only grow"),
        ));
    } else if wanted > current {
        if matches!(observation.status, HostStatus::Running(_)) {
            out.push(Transition {
                op: Op::Change,
                kind: "keys".to_owned(),
                name: name.clone(),
                host: name.clone(),
                detail: format!("signing key generation {current} -> {wanted} (generation {current} kept verify-only)"),
                id: String::new(),
                action: Action::Submit {
                    request: Request::RotateKeys { generation: wanted },
                },
            });
        } else {
            out.push(attention(
                "keys",
                name,
                name,
                format!("signing key generation {current} -> {wanted} waits for the host to run (its owner rotates)"),
            ));
        }
    }
    out
}

/// Saved plans name a membership authority as the owner `membership:NAME`.
pub const MEMBERSHIP_OWNER_PREFIX: &str = "membership:";

/// Memberships declared in the files or holding an authority in the state directory.
fn membership_names(topology: &Topology, state: &Path) -> Vec<String> {
    let mut names: BTreeSet<String> = topology
        .memberships
        .iter()
        .map(|m| m.name.clone())
        .collect();
    if let Ok(entries) = std::fs::read_dir(state.join("memberships")) {
        for entry in entries.flatten() {
            if let Ok(name) = entry.file_name().into_string() {
                names.insert(name);
            }
        }
    }
    names.into_iter().collect()
}

fn membership_transitions(topology: &Topology, state: &Path) -> Vec<Transition> {
    use grid_engine::custody::membership;
    let mut out = Vec::new();
    let owner = |m: &str| format!("{MEMBERSHIP_OWNER_PREFIX}{m}");
    for name in membership_names(topology, state) {
        let dir = membership::authority_dir(state, &name);
        let record = membership::read_authority(&dir).ok();
        let Some(desired) = topology.memberships.iter().find(|m| m.name == name) else {
            out.push(attention(
                "membership",
                &name,
                &owner(&name),
                "unmanaged: its authority exists in the state directory but no file declares it"
                    .to_owned(),
            ));
            continue;
        };
        if record.is_none() {
            out.push(Transition {
                op: Op::Create,
                kind: "membership".to_owned(),
                name: name.clone(),
                host: owner(&name),
                detail: format!("certificate authority in {}", dir.display()),
                id: String::new(),
                action: Action::CreateAuthority {
                    membership: name.clone(),
                },
            });
        }
        for participant in &desired.revoked {
            let done = record
                .as_ref()
                .is_some_and(|r| r.revoked.contains(participant));
            if !done {
                out.push(Transition {
                    op: Op::Retire,
                    kind: "participant".to_owned(),
                    name: participant.clone(),
                    host: owner(&name),
                    detail: format!("revoke `{participant}` in membership {name}: every certificate it holds, in a new revocation list"),
                    id: String::new(),
                    action: Action::Revoke {
                        membership: name.clone(),
                        participant: participant.clone(),
                    },
                });
            }
        }
    }
    out
}

fn enrollment_transitions(
    topology: &Topology,
    state: &Path,
    desired: &grid_spec::Host,
    observation: &HostObservation,
) -> Vec<Transition> {
    use grid_engine::custody::membership;
    let mut out = Vec::new();
    let name = &observation.name;
    if observation.config.is_none() || !grid_engine::custody::exists(&observation.dir) {
        return out; // the installation and its keys come first
    }
    let Ok(manifest) = grid_engine::custody::manifest(&observation.dir) else {
        return out;
    };
    for m in &desired.memberships {
        let Some(membership_spec) = topology.memberships.iter().find(|x| x.name == *m) else {
            continue;
        };
        let authority_dir = membership::authority_dir(state, m);
        let record = membership::read_authority(&authority_dir).ok();
        if membership_spec.revoked.contains(name)
            || record.as_ref().is_some_and(|r| r.revoked.contains(name))
        {
            out.push(attention(
                "enrollment",
                &format!("{name} in {m}"),
                name,
                format!("`{name}` is revoked in {m}; its `member {m}` line no longer admits it and it is never enrolled again"),
            ));
            continue;
        }
        let held = membership::read_enrollment(&observation.dir, m)
            .ok()
            .flatten();
        let reason = match (&held, &record) {
            (None, _) => Some("certificate for its TLS key".to_owned()),
            (Some(e), Some(r)) if e.authority != r.fingerprint => {
                Some("its certificate is from another authority".to_owned())
            }
            (Some(e), _) if e.tls != manifest.tls => {
                Some("its certificate names another TLS key".to_owned())
            }
            _ => None,
        };
        if let Some(reason) = reason {
            out.push(Transition {
                op: Op::Create,
                kind: "enrollment".to_owned(),
                name: format!("{name} in {m}"),
                host: name.clone(),
                detail: reason,
                id: String::new(),
                action: Action::Enroll {
                    membership: m.clone(),
                },
            });
            continue;
        }
        let revoking = !membership_spec
            .revoked
            .iter()
            .all(|p| record.as_ref().is_some_and(|r| r.revoked.contains(p)));
        if revoking || !membership::revocations_current(&authority_dir, &observation.dir, m) {
            out.push(Transition {
                op: Op::Change,
                kind: "revocations".to_owned(),
                name: format!("{m} at {name}"),
                host: name.clone(),
                detail: "load the membership's current revocation list".to_owned(),
                id: String::new(),
                action: Action::DistributeRevocations {
                    membership: m.clone(),
                },
            });
        }
    }
    for m in &observation.custody.1 {
        let revoked = membership::read_authority(&membership::authority_dir(state, m))
            .is_ok_and(|r| r.revoked.contains(name));
        if !desired.memberships.contains(m) && !revoked {
            out.push(attention(
                "enrollment",
                &format!("{name} in {m}"),
                name,
                format!("unmanaged: the files no longer list `member {m}`; nothing is revoked until a `revoke {name}` line says so"),
            ));
        }
    }
    out
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

/// Bootstrapping each membership's authority and changing its voters, one explicit
/// transition each, sent to a running voter (which forwards to the leader). Waits
/// (prints nothing) until the voters' installations are enrolled; says `!` while a
/// voter does not run, since only running voters can be asked.
fn authority_transitions(
    topology: &Topology,
    state: &Path,
    observations: &[HostObservation],
) -> Vec<Transition> {
    use grid_engine::authority::service::AuthorityCall;
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
        let enrolled = all.iter().all(|h| {
            grid_engine::custody::membership::read_enrollment(&host_dir(state, h), m)
                .is_ok_and(|e| e.is_some())
        });
        if !enrolled {
            continue; // installations, keys and enrollments come first
        }
        let mut statuses = Vec::new();
        let mut stopped = Vec::new();
        for h in &all {
            let running = observations
                .iter()
                .any(|o| o.name == h.name && matches!(o.status, observe::HostStatus::Running(_)));
            match running.then(|| observe::authority_status(&host_dir(state, h), m)) {
                Some(Ok(status)) => statuses.push(status),
                Some(Err(e)) => stopped.push(format!("`{}` ({e})", h.name)),
                None => stopped.push(format!("`{}` (not running)", h.name)),
            }
        }
        if !stopped.is_empty() {
            out.push(attention(
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
        // The newest view: the leader's if one is known, else the highest term's.
        let view = statuses
            .iter()
            .filter(|s| s.initialized)
            .max_by_key(|s| (s.state == "leader", s.term));
        let Some(view) = view else {
            let first = desired[0];
            out.push(Transition {
                op: Op::Create,
                kind: "authority".to_owned(),
                name: m.clone(),
                host: first.name.clone(),
                detail: format!("bootstrap the Raft group with voter `{}`", first.name),
                id: String::new(),
                action: Action::Authority {
                    membership: m.clone(),
                    call: AuthorityCall::Initialize,
                },
            });
            for h in &desired[1..] {
                out.push(add_voter(m, &first.name, h));
            }
            for h in learners {
                out.push(add_learner(m, &first.name, h));
            }
            continue;
        };
        let via = view.participant.clone();
        for h in desired {
            if !view.voters.contains(&h.name) {
                out.push(add_voter(m, &via, h));
            }
        }
        for h in learners {
            if !view.voters.contains(&h.name) && !view.learners.contains(&h.name) {
                out.push(add_learner(m, &via, h));
            }
        }
        for voter in &view.voters {
            if !desired.iter().any(|h| &h.name == voter) {
                let keep = learners.iter().any(|h| &h.name == voter);
                out.push(Transition {
                    op: Op::Retire,
                    kind: "voter".to_owned(),
                    name: format!("{voter} in {m}"),
                    host: via.clone(),
                    detail: if keep {
                        format!("`{voter}` stops voting in {m} and stays a learner")
                    } else {
                        format!("remove `{voter}` from the voters of {m}")
                    },
                    id: String::new(),
                    action: Action::Authority {
                        membership: m.clone(),
                        call: AuthorityCall::RemoveVoter {
                            participant: voter.clone(),
                            keep_as_learner: keep,
                        },
                    },
                });
            }
        }
        for learner in &view.learners {
            if !all.iter().any(|h| &h.name == learner) {
                out.push(Transition {
                    op: Op::Retire,
                    kind: "learner".to_owned(),
                    name: format!("{learner} in {m}"),
                    host: via.clone(),
                    detail: format!("`{learner}` no longer replicates the authority of {m}"),
                    id: String::new(),
                    action: Action::Authority {
                        membership: m.clone(),
                        call: AuthorityCall::RemoveLearner {
                            participant: learner.clone(),
                        },
                    },
                });
            }
        }
    }
    out
}

fn add_learner(membership: &str, via: &str, host: &grid_spec::Host) -> Transition {
    Transition {
        op: Op::Create,
        kind: "learner".to_owned(),
        name: format!("{} in {membership}", host.name),
        host: via.to_owned(),
        detail: format!(
            "add `{}` ({}) as a learner: a non-voting replica (beyond `voters`), through which it sends claim commands",
            host.name, host.listen
        ),
        id: String::new(),
        action: Action::Authority {
            membership: membership.to_owned(),
            call: grid_engine::authority::service::AuthorityCall::AddLearner {
                participant: host.name.clone(),
                address: host.listen.to_string(),
            },
        },
    }
}

fn add_voter(membership: &str, via: &str, host: &grid_spec::Host) -> Transition {
    Transition {
        op: Op::Create,
        kind: "voter".to_owned(),
        name: format!("{} in {membership}", host.name),
        host: via.to_owned(),
        detail: format!(
            "add `{}` ({}) as a learner, let it catch up, then promote it to voter",
            host.name, host.listen
        ),
        id: String::new(),
        action: Action::Authority {
            membership: membership.to_owned(),
            call: grid_engine::authority::service::AuthorityCall::AddVoter {
                participant: host.name.clone(),
                address: host.listen.to_string(),
            },
        },
    }
}
