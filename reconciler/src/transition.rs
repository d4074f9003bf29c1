//! The plan's vocabulary, on the reconciler's ground floor: what a transition is
//! ([`Transition`], its [`Op`], the [`Action`] reconcile takes, what it [`Wait`]s for),
//! how a capability drafts one ([`Draft`], with the keys it comes after), and the
//! files' [`Index`], and how applying one ended ([`Status`], [`Effect`]). Every
//! capability module (`diff::hosts`, `routes`, `missions`, …) builds its transitions
//! from these and applies its own; this module imports no capability, so no
//! capability imports another through the plan.

use std::path::{Path, PathBuf};

use grid_engine::host::config::HostConfig;
use grid_engine::protocol::Request;
use grid_spec::Topology;
use serde::{Deserialize, Serialize};

use crate::changes::Change;

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
/// One membership's snapshot store as `WriteSnapshots` writes it (`diff::snapshots`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotStore {
    pub membership: String,
    pub store: grid_engine::config::S3ArchiveConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing: the line informs (unreachable or unmanaged owners).
    None,
    /// Create or rewrite the host's installation (`DIR/host.toml`, DIR 0700).
    WriteHostConfig {
        config: HostConfig,
        dir: Option<PathBuf>,
    },
    /// Point the installation's archive at a bucket or a table, or (none) its own
    /// files (`host.toml`'s `archive`), once the servers answer; `leaving`: the bucket
    /// its segments move out of (`archive-leaving`); `index_leaving`: the table its
    /// index moves out of (`archive-index-leaving`).
    WriteArchive {
        archive: Option<grid_engine::config::S3ArchiveConfig>,
        leaving: Option<grid_engine::config::S3ArchiveConfig>,
        index_leaving: Option<grid_engine::config::S3ArchiveConfig>,
    },
    /// Point an authority voter's snapshot store at an S3 bucket (`host.toml`'s
    /// `snapshots`), once the server answers.
    WriteSnapshots { store: SnapshotStore },
    /// Create the host's key custody (keys and manifest) in its installation.
    CreateCustody,
    /// Rewrite the custody's key files still in hex as PEM PKCS#8 (the same secrets:
    /// fingerprints and identities unchanged).
    RewriteKeysAsPem,
    /// Create a membership's certificate authority in the operator's state.
    CreateAuthority { membership: String },
    /// Certify the host's public TLS key as a participant of the membership, for
    /// `valid_days` (the membership's `certificates valid-days`).
    Enroll { membership: String, valid_days: u32 },
    /// Renew the host's certificate of serial `serial` in the membership: a new one
    /// for the same participant and key, valid `valid_days` (done once the host holds
    /// another serial).
    Renew {
        membership: String,
        serial: u64,
        valid_days: u32,
    },
    /// Revoke a participant: every certificate issued to it, in a new revocation list.
    Revoke {
        membership: String,
        participant: String,
    },
    /// Copy the membership's current revocation list into a member host's installation.
    DistributeRevocations { membership: String },
    /// Write the current public keys of `members` of `membership` (rotated since
    /// they were recorded) into a member host's installation (`custody::book`).
    PublishKeys {
        membership: String,
        members: Vec<String>,
    },
    /// Move the stopped host's installation from `source` to `destination`
    /// (docs/transfer.md): resumed under the same operation id after a stop.
    Transfer {
        source: PathBuf,
        destination: PathBuf,
    },
    /// Replace the stopped host's store by the copy `from` under storage generation
    /// `generation` (docs/transfer.md, "Storage replacement"): resumed under the same
    /// operation id after a stop.
    ReplaceStorage { from: PathBuf, generation: u64 },
    /// Send an operation to the host.
    Submit { request: Request },
    /// Send an operation to the host whose request names values known only after
    /// earlier transitions of this plan apply (public keys of hosts it creates): the
    /// template is completed from their owners when it is sent.
    Resolve { template: crate::resolve::Template },
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
    /// A mission step sent to its host's control socket with the transition's
    /// operation id (`Call::Mission`): the reservation (its terms completed from the
    /// installations when sent) or the return.
    Mission { step: MissionStep },
}

impl Action {
    /// The action is a call to the owner's control socket: the owner must run.
    pub fn needs_running_owner(&self) -> bool {
        matches!(
            self,
            Action::Submit { .. }
                | Action::Resolve { .. }
                | Action::Recover { .. }
                | Action::Authority { .. }
                | Action::Claim { .. }
                | Action::Mission { .. }
        )
    }
}

/// Why a transition cannot be applied now, whatever else this plan applies first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitReason {
    /// Its owner (or a host it needs) does not run: start it (`gridd --dir …`).
    HostNotRunning,
    /// A host it needs holds no certificate of the membership and this plan cannot
    /// give it one (see that host's `!` line).
    HostNotEnrolled,
    /// A host leaving a membership still has obligations there (listed on the line):
    /// values to deliver, runs to finish or resolve.
    ObligationsOpen,
}

impl WaitReason {
    pub fn name(self) -> &'static str {
        match self {
            WaitReason::HostNotRunning => "host-not-running",
            WaitReason::HostNotEnrolled => "host-not-enrolled",
            WaitReason::ObligationsOpen => "obligations-open",
        }
    }

    pub fn from_name(name: &str) -> Option<WaitReason> {
        [
            WaitReason::HostNotRunning,
            WaitReason::HostNotEnrolled,
            WaitReason::ObligationsOpen,
        ]
        .into_iter()
        .find(|w| w.name() == name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub reason: WaitReason,
    /// The hosts it waits for, sorted.
    pub hosts: Vec<String>,
}

impl Wait {
    pub fn running(hosts: impl IntoIterator<Item = String>) -> Wait {
        let mut hosts: Vec<String> = hosts.into_iter().collect();
        hosts.sort();
        hosts.dedup();
        Wait {
            reason: WaitReason::HostNotRunning,
            hosts,
        }
    }

    /// For people: `edge-a must be running`.
    pub fn describe(&self) -> String {
        let hosts = self.hosts.join(", ");
        match self.reason {
            WaitReason::HostNotRunning => format!("{hosts} must be running"),
            WaitReason::HostNotEnrolled => format!("{hosts} must be enrolled"),
            WaitReason::ObligationsOpen => {
                format!("{hosts} must close its obligations in the membership first")
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub op: Op,
    pub kind: String,
    pub name: String,
    /// The owner it goes to.
    pub host: String,
    pub detail: String,
    /// Field-level changes of a `~` line (`cell power: "a" → "b"`), when known.
    pub changes: Vec<Change>,
    /// The operation id sent to the owner; every transition has one.
    pub id: String,
    pub action: Action,
    /// Ids of the transitions of this plan that must succeed first.
    pub after: Vec<String>,
    /// Why it cannot be applied now (`None`: it can, once `after` succeeded).
    pub waits_for: Option<Wait>,
}

impl Transition {
    /// `+ host edge-a`, `+ route plant/temp_f @ site-b`: the title without an owner
    /// its name already says.
    pub fn short(&self) -> String {
        if self.name.contains(&self.host) || self.host.starts_with(MEMBERSHIP_OWNER_PREFIX) {
            format!("{} {} {}", self.op.symbol(), self.kind, self.name)
        } else {
            self.title()
        }
    }

    /// `+ model boiler @ edge-a`.
    pub fn title(&self) -> String {
        format!(
            "{} {} {} @ {}",
            self.op.symbol(),
            self.kind,
            self.name,
            self.host
        )
    }
}

/// The line-level difference of two canonical texts, for `~` details.
pub fn diff(before: &str, after: &str) -> String {
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

/// Saved plans name a membership authority as the owner `membership:NAME`.
pub const MEMBERSHIP_OWNER_PREFIX: &str = "membership:";

/// One transition as the diff makes it.
#[derive(Debug, Clone)]
pub struct Draft {
    pub transition: Transition,
    /// What other transitions name it by (empty for lines nothing comes after).
    pub key: String,
    /// Keys of the transitions it comes after.
    pub after: Vec<String>,
}

impl Draft {
    pub fn new(
        op: Op,
        kind: &str,
        name: &str,
        host: &str,
        detail: String,
        action: Action,
    ) -> Draft {
        Draft {
            transition: Transition {
                op,
                kind: kind.to_owned(),
                name: name.to_owned(),
                host: host.to_owned(),
                detail,
                changes: Vec::new(),
                id: String::new(),
                action,
                after: Vec::new(),
                waits_for: None,
            },
            key: String::new(),
            after: Vec::new(),
        }
    }

    pub fn attention(kind: &str, name: &str, host: &str, detail: String) -> Draft {
        Draft::new(Op::Attention, kind, name, host, detail, Action::None)
    }

    /// `! KIND NAME @ HOST`: the installation's custody file `held` (in `dir/keys`)
    /// names it, its store does not; installing it afresh would do `afresh`.
    pub fn lost(kind: &str, name: &str, host: &str, dir: &Path, held: &str, afresh: &str) -> Draft {
        Draft::attention(
            kind,
            name,
            host,
            format!(
                "lost: {}/keys/{held} shows this installation held {kind} `{name}`, but its store does not (replaced, or made afresh with its marks removed); it is not installed afresh, which would {afresh} — put back the store this installation served (docs/storage.md)",
                dir.display()
            ),
        )
    }

    pub fn key(mut self, key: String) -> Draft {
        self.key = key;
        self
    }

    pub fn after(mut self, keys: impl IntoIterator<Item = String>) -> Draft {
        self.after.extend(keys);
        self
    }

    pub fn waits(mut self, wait: Option<Wait>) -> Draft {
        self.transition.waits_for = wait;
        self
    }

    pub fn id(mut self, id: String) -> Draft {
        self.transition.id = id;
        self
    }

    pub fn changes(mut self, changes: Vec<Change>) -> Draft {
        self.transition.changes = changes;
        self
    }
}

/// The keys of the transitions that create a host's installation and custody:
/// whatever needs its files comes after these.
pub fn installed(host: &str) -> [String; 2] {
    [format!("host:{host}"), format!("keys:{host}")]
}

pub fn enrolled(host: &str, membership: &str) -> String {
    format!("enroll:{host}:{membership}")
}

/// The files' hosts and models by name, built once per plan: the diff looks them up
/// for every object, and a linear search would make a plan quadratic.
pub struct Index<'t> {
    pub hosts: std::collections::HashMap<&'t str, &'t grid_spec::Host>,
    /// Each host's models, in file order.
    pub models: std::collections::HashMap<&'t str, Vec<&'t grid_spec::Model>>,
    /// Per membership with an authority: its hosts (those selecting `authority`, voters
    /// first, in file order) and their listen addresses.
    pub authority_hosts: std::collections::HashMap<&'t str, Vec<(String, String)>>,
    /// Every host, in file order.
    pub ordered: Vec<&'t grid_spec::Host>,
    /// The whole topology the index was made of.
    pub topology: &'t Topology,
}

impl<'t> Index<'t> {
    pub fn of(topology: &'t Topology) -> Index<'t> {
        let mut models: std::collections::HashMap<&str, Vec<&grid_spec::Model>> =
            std::collections::HashMap::new();
        for m in &topology.models {
            models.entry(m.host.as_str()).or_default().push(m);
        }
        Index {
            topology,
            ordered: topology.hosts.iter().collect(),
            hosts: topology
                .hosts
                .iter()
                .map(|h| (h.name.as_str(), h))
                .collect(),
            models,
            authority_hosts: topology
                .memberships
                .iter()
                .filter(|m| m.authority_voters.is_some())
                .map(|m| {
                    let hosts = topology
                        .hosts
                        .iter()
                        .filter(|h| {
                            h.memberships.contains(&m.name)
                                && h.profiles.contains(&grid_spec::Profile::Authority)
                        })
                        .map(|h| (h.name.clone(), h.listen.to_string()))
                        .collect();
                    (m.name.as_str(), hosts)
                })
                .collect(),
        }
    }

    pub fn host(&self, name: &str) -> Option<&'t grid_spec::Host> {
        self.hosts.get(name).copied()
    }

    pub fn models(&self, host: &str) -> &[&'t grid_spec::Model] {
        self.models.get(host).map_or(&[][..], Vec::as_slice)
    }

    /// The request installing `model` as the files say (`canonical`: its canonical
    /// text, when already made), with the models ceiling of each membership it serves.
    pub fn install_model(&self, model: &grid_spec::Model, canonical: Option<String>) -> Request {
        Request::InstallModel {
            name: model.name.clone(),
            model: canonical.unwrap_or_else(|| grid_spec::canonical::model(model)),
            serves: model.serves.clone(),
            ceilings: grid_spec::serving::serve_ceilings(self.topology, model),
        }
    }

    /// Every other host, not retired, sharing a membership with `host`, in file
    /// order, with the first membership of `host`'s order it shares.
    fn sharing<'a>(
        &'a self,
        host: &'a grid_spec::Host,
    ) -> impl Iterator<Item = (&'t grid_spec::Host, &'a String)> + 'a {
        self.ordered
            .iter()
            .filter(move |h| h.name != host.name && !h.retired)
            .filter_map(move |h| {
                let shared = host
                    .memberships
                    .iter()
                    .find(|m| h.memberships.contains(m))?;
                Some((*h, shared))
            })
    }

    /// The hosts whose control plane may inspect `host`: every other one selecting
    /// `control` that shares a membership with it (its owners include `host`).
    pub fn control_viewers(&self, host: &grid_spec::Host) -> Vec<String> {
        if !host.profiles.contains(&grid_spec::Profile::Transport) {
            return Vec::new();
        }
        self.sharing(host)
            .filter(|(h, _)| h.profiles.contains(&grid_spec::Profile::Control))
            .map(|(h, _)| h.name.clone())
            .collect()
    }

    /// The owners `host`'s control plane may inspect (docs/control-plane.md): every
    /// other host, not retired, sharing a membership with it and selecting
    /// `transport`, in file order, each called in the first membership of `host`'s
    /// order it shares.
    pub fn control_owners(&self, host: &grid_spec::Host) -> Vec<grid_engine::config::ControlOwner> {
        self.sharing(host)
            .filter(|(h, _)| h.profiles.contains(&grid_spec::Profile::Transport))
            .map(|(h, membership)| grid_engine::config::ControlOwner {
                name: h.name.clone(),
                membership: membership.clone(),
                address: h.listen.to_string(),
            })
            .collect()
    }
}

/// What reconcile sends for a mission's transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum MissionStep {
    /// Quiesce and reserve, with the terms the files state; the keys and addresses
    /// are read from the installations when it is sent.
    Reserve {
        name: String,
        host: String,
        units: u64,
        deadline: String,
        successor: String,
        issuer: String,
        membership: String,
    },
    Return {
        name: String,
    },
}

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

/// What applying one transition at its owner came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub status: Status,
    pub detail: String,
    /// The owner returned the answer it gave this operation id before: nothing was
    /// applied again.
    pub replayed: bool,
    /// That earlier answer came from the owner's archive (older than its hot window).
    pub archived: bool,
}

impl Effect {
    pub fn new(status: Status, detail: impl Into<String>) -> Effect {
        Effect {
            status,
            detail: detail.into(),
            replayed: false,
            archived: false,
        }
    }

    /// A local step: succeeded with its detail, or failed with its reason.
    pub fn local(result: Result<String, String>) -> Effect {
        match result {
            Ok(detail) => Effect::new(Status::Succeeded, detail),
            Err(reason) => Effect::new(Status::Failed, reason),
        }
    }
}
