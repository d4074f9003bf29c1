//! Observing original owners: what each host of the topology (and each host found in
//! the state directory) retains right now. Observing changes nothing anywhere.
//!
//! [`observe`] reads everything a plan needs into one [`World`] — hosts, custody
//! manifests, enrollments, revocation lists, authority status, publishing claims —
//! and the planner diffs that value without further IO (`crate::diff`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use grid_engine::authority::service::{AuthorityCall, AuthorityReply, VoterStatus};
use grid_engine::custody::Manifest;
use grid_engine::custody::membership::{AuthorityRecord, Enrollment};
use grid_spec::Topology;
use serde::{Deserialize, Serialize};

use grid_engine::exports::api::{ExportCall, ExportInstall, ExportReply};
use grid_engine::host::config::{HOST_CONFIG_FILE, HostConfig};
use grid_engine::host::control::{CallError, Client};
use grid_engine::protocol::{Call, Observation, Reply, Request};
use sha2::{Digest, Sha256};

/// Where the host called `name` lives under `state`. A host with `dir=` in the files
/// is reached through the link `<state>/hosts/NAME` that reconcile makes to it.
pub fn host_dir(state: &Path, name: &str) -> PathBuf {
    state.join("hosts").join(name)
}

/// What a copy on its way back into the state directory adds to its host's name.
const RETURNING_SUFFIX: &str = ".returning";

/// Where an installation moving back into the state directory's `hosts/H` (`link`) is
/// copied first, beside it: `hosts/H.returning` (docs/transfer.md).
pub fn returning(link: &Path) -> PathBuf {
    let mut name = link.file_name().unwrap_or_default().to_owned();
    name.push(RETURNING_SUFFIX);
    link.with_file_name(name)
}

/// The installed host `host`'s directory (its `host.toml` exists), or why not.
pub fn installed(state: &Path, host: &str) -> Result<PathBuf, String> {
    let dir = host_dir(state, host);
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

/// What one owner looked like.
// One per host in a plan's observation: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostStatus {
    /// No installation directory: the host was never created.
    Missing,
    /// The installation exists but its control API does not answer.
    Unreachable { reason: String },
    /// The host answered.
    Running(Observation),
    /// The host answered, but its custody is locked (docs/custody.md, "Locked
    /// custody"): it serves reads only, and what its rooms hold is not observed until
    /// `gridctl custody unlock` — so nothing is planned at it.
    Locked(Observation),
}

impl HostStatus {
    /// Whether a gridd serves the installation (locked or not).
    pub fn serves(&self) -> bool {
        matches!(self, HostStatus::Running(_) | HostStatus::Locked(_))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostObservation {
    pub name: String,
    pub dir: PathBuf,
    /// `host.toml` as found, when the installation exists and it reads.
    pub config: Option<HostConfig>,
    /// A digest of the installation's custody files (key manifest, enrollments,
    /// revocation lists) and the memberships it is enrolled in.
    pub custody: (String, Vec<String>),
    pub status: HostStatus,
    /// Where `<state>/hosts/NAME` links to (a host with `dir=`), when it is a link.
    #[serde(default)]
    pub link: Option<PathBuf>,
    /// The key manifest of the installation's custody.
    #[serde(default)]
    pub keys: Keys,
    /// Per membership named by the files or enrolled: the certificate held and whether
    /// the revocation list held is the authority's current one.
    #[serde(default)]
    pub enrollments: BTreeMap<String, EnrollmentView>,
    /// Per membership with an authority: this host's view of it (asked only of a
    /// running host that selects `authority`).
    #[serde(default)]
    pub authority: BTreeMap<String, Result<VoterStatus, String>>,
    /// Publishing claims (`route:R`) read through this host, the route's publisher.
    #[serde(default)]
    pub claims: BTreeMap<String, Result<AuthorityReply, String>>,
    /// Key files of its custody still in the older hex form.
    #[serde(default)]
    pub hex_keys: Vec<String>,
    /// The installation's transfer journal (`DIR/transfer.toml`, docs/transfer.md):
    /// an open transfer resumes under its own operation id.
    #[serde(default)]
    pub transfer: Option<grid_engine::store::transfer::Record>,
    /// The installation's storage generation (`DIR/keys/storage.toml`; 1 when it has
    /// none, or when it does not read — the replacement itself then refuses by name),
    /// and an open replacement's journal (`DIR/replace.toml`), which resumes under its
    /// own operation id.
    #[serde(default)]
    pub storage_generation: u64,
    #[serde(default)]
    pub replacement: Option<grid_engine::store::replace::Journal>,
    /// The models its custody says the installation ever held (`DIR/keys/held-models`,
    /// `grid_engine::store::held`): one its store does not hold is never planned afresh.
    #[serde(default)]
    pub held_models: BTreeSet<String>,
    /// The ledgers its custody says the installation ever held
    /// (`DIR/keys/held-ledgers`): one its store does not hold is never planned afresh.
    #[serde(default)]
    pub held_ledgers: BTreeSet<String>,
    /// Per membership the files say the host leaves and it is still enrolled in: what
    /// it still owes there (`Call::Obligations`; asked only of a running host).
    #[serde(default)]
    pub obligations: BTreeMap<String, Result<Vec<String>, String>>,
    /// What a running installation the files move holds (asked only of a running host
    /// whose `dir` the files change), for the transfer's plan line.
    #[serde(default)]
    pub inventory: Option<Inventory>,
}

/// What an installation holds, as its running gridd tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// Models not retired.
    pub models: usize,
    /// Runs it received, by where they stand (`None`: it does not run `processes`).
    pub runs: Option<grid_engine::processes::api::RunCounts>,
    /// Grants it issued.
    pub grants: usize,
    /// Open obligations in its memberships (`Call::Obligations`: values owed or not
    /// receipted, runs not terminal, units held), or why they could not be read.
    pub obligations: Result<usize, String>,
}

impl Inventory {
    /// `models 3, runs 120 (2 unknown), grants 2, open obligations 41`.
    pub fn describe(&self) -> String {
        let runs = match &self.runs {
            Some(r) => format!(
                "runs {} ({} unknown), ",
                r.succeeded + r.failed + r.unknown + r.running,
                r.unknown
            ),
            None => String::new(),
        };
        let obligations = match &self.obligations {
            Ok(n) => n.to_string(),
            Err(_) => "unknown".to_owned(),
        };
        format!(
            "models {}, {runs}grants {}, open obligations {obligations}",
            self.models, self.grants
        )
    }
}

/// An installation's key custody as found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Keys {
    /// No `keys/` directory: custody was never created.
    #[default]
    Absent,
    Held(Manifest),
    Unreadable(String),
}

impl Keys {
    pub fn manifest(&self) -> Option<&Manifest> {
        match self {
            Keys::Held(m) => Some(m),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnrollmentView {
    pub enrollment: Option<Enrollment>,
    /// The revocation list held equals the membership authority's current one.
    pub revocations_current: bool,
    /// Fellow members' public keys this installation learned through the membership
    /// (`custody::book`), by participant.
    #[serde(default)]
    pub peer_keys: std::collections::BTreeMap<String, Manifest>,
}

/// A membership's certificate authority in the operator's state directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MembershipObservation {
    pub name: String,
    pub record: Option<AuthorityRecord>,
    /// [`authority_fingerprint`] of its files.
    pub fingerprint: String,
}

/// Everything a plan is made from: one observation of every owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct World {
    pub state: PathBuf,
    /// The topology's hosts in file order, then installations no file declares.
    pub hosts: Vec<HostObservation>,
    pub memberships: Vec<MembershipObservation>,
    /// Host name → index in `hosts`, built on first use (a plan of many objects asks
    /// for hosts by name often).
    #[serde(skip)]
    pub index: std::sync::OnceLock<std::collections::HashMap<String, usize>>,
}

impl World {
    pub fn host(&self, name: &str) -> Option<&HostObservation> {
        let index = self.index.get_or_init(|| {
            self.hosts
                .iter()
                .enumerate()
                .map(|(i, h)| (h.name.clone(), i))
                .collect()
        });
        index.get(name).map(|&i| &self.hosts[i])
    }

    pub fn membership(&self, name: &str) -> Option<&MembershipObservation> {
        self.memberships.iter().find(|m| m.name == name)
    }

    /// The host's observation when it answered.
    pub fn running(&self, name: &str) -> Option<&Observation> {
        match &self.host(name)?.status {
            HostStatus::Running(o) => Some(o),
            _ => None,
        }
    }

    /// The host has no installation yet: it certainly holds nothing.
    pub fn missing(&self, name: &str) -> bool {
        self.host(name)
            .is_none_or(|h| matches!(h.status, HostStatus::Missing) && h.config.is_none())
    }

    /// The memberships the host holds a certificate of, in enrollment order.
    pub fn enrolled(&self, name: &str) -> &[String] {
        self.host(name).map_or(&[][..], |h| &h.custody.1)
    }
}

/// Observes every owner the files name (and every installation in the state
/// directory), hosts in parallel.
pub fn observe(topology: &Topology, state: &Path) -> World {
    let mut names: Vec<String> = topology.hosts.iter().map(|h| h.name.clone()).collect();
    let declared: std::collections::BTreeSet<&str> =
        topology.hosts.iter().map(|h| h.name.as_str()).collect();
    let extra: Vec<String> = installed_hosts(state)
        .into_iter()
        .filter(|n| !declared.contains(n.as_str()))
        .collect();
    names.extend(extra);
    let memberships: Vec<MembershipObservation> = membership_names(topology, state)
        .into_iter()
        .map(|name| {
            let dir = grid_engine::custody::membership::authority_dir(state, &name);
            MembershipObservation {
                record: grid_engine::custody::membership::read_authority(&dir).ok(),
                fingerprint: authority_fingerprint(&dir),
                name,
            }
        })
        .collect();
    let hosts = parallel(&names, |name| {
        observe_planned(topology, state, name, &host_dir(state, name))
    });
    World {
        state: state.to_owned(),
        hosts,
        memberships,
        index: std::sync::OnceLock::new(),
    }
}

/// `f` over every host installed under `state`, at most `PLAN_OBSERVERS_MAX` at a
/// time: `(name, result)` in name order.
pub fn each_installed<R: Send>(state: &Path, f: impl Fn(&str) -> R + Sync) -> Vec<(String, R)> {
    let hosts = installed_hosts(state);
    let results = parallel(&hosts, |name| f(name));
    hosts.into_iter().zip(results).collect()
}

/// `f` over `items`, at most `PLAN_OBSERVERS_MAX` at a time, results in order.
fn parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let chunk = items
        .len()
        .div_ceil(grid_spec::limits::PLAN_OBSERVERS_MAX)
        .max(1);
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("an observer panicked"))
            .collect()
    })
}

/// Memberships declared in the files or holding an authority in the state directory.
pub fn membership_names(topology: &Topology, state: &Path) -> Vec<String> {
    let mut names: std::collections::BTreeSet<String> = topology
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

/// One host, with what the files make the planner ask of it: its custody, its
/// enrollments, its view of each authority it takes part in, and the publishing
/// claims of the routes it publishes.
fn observe_planned(topology: &Topology, state: &Path, name: &str, dir: &Path) -> HostObservation {
    use grid_engine::custody::membership;
    let mut o = observe_host(name, dir);
    o.link = std::fs::read_link(dir).ok();
    if o.config.is_none() {
        return o;
    }
    o.keys = match grid_engine::custody::manifest(dir) {
        Ok(m) => Keys::Held(m),
        Err(grid_engine::custody::CustodyError::MissingKey { .. })
            if !dir.join(grid_engine::custody::KEYS_DIR).exists() =>
        {
            Keys::Absent
        }
        Err(e) => Keys::Unreadable(e.to_string()),
    };
    if matches!(o.keys, Keys::Held(_)) {
        o.hex_keys = grid_engine::custody::legacy_key_files(dir).unwrap_or_default();
    }
    o.transfer = grid_engine::store::transfer::record(dir).ok().flatten();
    o.storage_generation = grid_engine::store::replace::storage(dir).map_or(1, |s| s.generation);
    o.replacement = grid_engine::store::replace::journal(dir).ok().flatten();
    let desired = topology.host(name);
    let mut memberships: Vec<String> = desired.map(|h| h.memberships.clone()).unwrap_or_default();
    memberships.extend(o.custody.1.iter().cloned());
    memberships.sort();
    memberships.dedup();
    for m in &memberships {
        let authority = membership::authority_dir(state, m);
        o.enrollments.insert(
            m.clone(),
            EnrollmentView {
                enrollment: membership::read_enrollment(dir, m).ok().flatten(),
                revocations_current: membership::revocations_current(&authority, dir, m),
                peer_keys: grid_engine::custody::book::held(dir, m),
            },
        );
    }
    if !matches!(o.status, HostStatus::Running(_)) {
        return o;
    }
    let Some(desired) = desired else { return o };
    if desired.dir.is_some()
        && o.link.as_deref() != desired.dir.as_deref()
        && let HostStatus::Running(observed) = &o.status
    {
        o.inventory = Some(inventory(topology, name, dir, observed, &o.custody.1));
    }
    for m in desired.leaving.iter().filter(|m| o.custody.1.contains(m)) {
        let grants = leave_grants(topology, name, m);
        o.obligations.insert(m.clone(), obligations(dir, m, grants));
    }
    if desired.profiles.contains(&grid_spec::Profile::Authority) {
        for m in topology
            .memberships
            .iter()
            .filter(|m| m.authority_voters.is_some())
        {
            if desired.memberships.contains(&m.name) {
                o.authority
                    .insert(m.name.clone(), authority_status(dir, &m.name));
            }
        }
    }
    // The publishing right of each route and mapping it publishes.
    let routes = topology
        .routes
        .iter()
        .filter(|r| r.publisher == name && !r.retired)
        .map(|r| {
            (
                &r.membership,
                grid_engine::delivery::api::publishing_claim(&r.name),
            )
        });
    let mappings = topology
        .mappings
        .iter()
        .filter(|m| m.publisher == name && !m.retired)
        .map(|m| {
            (
                &m.membership,
                grid_engine::delivery::api::mapping_claim(&m.name),
            )
        });
    for (membership, claim) in routes.chain(mappings) {
        // A replica that is not initialized yet has nothing to show (its plan adds it).
        let uninitialized = matches!(o.authority.get(membership), Some(Ok(s)) if !s.initialized);
        if !uninitialized {
            let shown = authority_call(
                dir,
                membership,
                AuthorityCall::Show {
                    claim: claim.clone(),
                },
            );
            o.claims.insert(claim, shown);
        }
    }
    o
}

impl HostObservation {
    /// A digest of everything observed of this owner: a saved plan is stale when it
    /// differs.
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.name.as_bytes());
        hasher.update([0]);
        match &self.config {
            Some(c) => hasher.update(c.to_toml().as_bytes()),
            None => hasher.update(b"no config"),
        }
        hasher.update([0]);
        hasher.update(self.custody.0.as_bytes());
        hasher.update([0]);
        for model in &self.held_models {
            hasher.update(model.as_bytes());
            hasher.update([0]);
        }
        if !self.held_ledgers.is_empty() {
            hasher.update(b"held ledgers\0");
            for ledger in &self.held_ledgers {
                hasher.update(ledger.as_bytes());
                hasher.update([0]);
            }
        }
        match &self.status {
            HostStatus::Missing => hasher.update(b"missing"),
            HostStatus::Unreachable { .. } => hasher.update(b"unreachable"),
            HostStatus::Locked(_) => hasher.update(b"locked"),
            HostStatus::Running(o) => {
                // Batches applied are not part of it: inputs flowing into a model do
                // not make a plan about the model's definition stale.
                let mut o = o.clone();
                o.models.iter_mut().for_each(|m| m.batches = 0);
                // Nor are observations a simulated tag journals.
                o.tags.iter_mut().for_each(|t| t.observations = 0);
                // Nor are runs charging grants: only what a plan changes of a grant.
                o.grants.iter_mut().for_each(|g| {
                    g.reserved = 0;
                    g.consumed = 0;
                    g.unknown = 0;
                });
                // Nor are runs consuming a mission, nor its clock: only its state.
                o.missions.iter_mut().for_each(|m| {
                    use grid_engine::missions::api::{MissionState, MissionUnits};
                    m.units = MissionUnits::default();
                    m.limit = None;
                    m.expired = false;
                    if m.state == MissionState::Exhausted {
                        m.state = MissionState::Active;
                    }
                });
                hasher.update(serde_json::to_vec(&o).expect("observations serialize"))
            }
        }
        hex(&hasher.finalize()[..16])
    }

    /// What was observed, in words: kept in saved plans so a stale plan can say what
    /// changed.
    pub fn summary(&self) -> String {
        let config = match &self.config {
            Some(c) => format!(
                "listen {} profiles [{}] enrolled in [{}]",
                c.listen,
                c.profiles.join(" "),
                self.custody.1.join(" ")
            ),
            None => NO_INSTALLATION.to_owned(),
        };
        match &self.status {
            HostStatus::Missing => config,
            HostStatus::Unreachable { .. } => format!("{config}; not reachable"),
            HostStatus::Locked(_) => format!("{config}; custody locked"),
            HostStatus::Running(o) => {
                let models: Vec<String> = o
                    .models
                    .iter()
                    .map(|m| {
                        format!(
                            "{} generation {}{}",
                            m.name,
                            m.generation,
                            if m.retired { " retired" } else { "" }
                        )
                    })
                    .collect();
                format!(
                    "{config}; models [{}]; {} unacknowledged answer(s)",
                    models.join(", "),
                    o.unacknowledged.len()
                )
            }
        }
    }

    /// What changed since an earlier observation of this owner, for people.
    pub fn difference(&self, earlier_fingerprint: &str, earlier_summary: &str) -> Option<String> {
        (self.fingerprint() != earlier_fingerprint).then(|| {
            format!(
                "host `{}` changed since the plan was made: it was \"{earlier_summary}\", it is now \"{}\"",
                self.name,
                self.summary()
            )
        })
    }
}

/// The summary of a host that has no installation.
pub const NO_INSTALLATION: &str = "no installation";

/// Lowercase hex of a digest, as fingerprints show it (the planner's too).
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

impl HostObservation {
    /// A host with no installation in `dir`: it holds nothing.
    pub fn missing(name: &str, dir: &Path) -> HostObservation {
        HostObservation {
            name: name.to_owned(),
            dir: dir.to_owned(),
            config: None,
            custody: (String::new(), Vec::new()),
            status: HostStatus::Missing,
            link: None,
            keys: Keys::Absent,
            enrollments: BTreeMap::new(),
            authority: BTreeMap::new(),
            claims: BTreeMap::new(),
            hex_keys: Vec::new(),
            transfer: None,
            storage_generation: 1,
            replacement: None,
            held_models: BTreeSet::new(),
            held_ledgers: BTreeSet::new(),
            obligations: BTreeMap::new(),
            inventory: None,
        }
    }
}

/// Observes the host `name` whose installation is `dir`.
pub fn observe_host(name: &str, dir: &Path) -> HostObservation {
    let mut observation = HostObservation::missing(name, dir);
    if !dir.join(HOST_CONFIG_FILE).exists() {
        return observation;
    }
    observation.custody = custody_digest(dir);
    match grid_engine::store::held::read(dir) {
        Ok(held) => observation.held_models = held,
        Err(e) => {
            observation.status = HostStatus::Unreachable {
                reason: format!("{}: {e}", grid_engine::store::held::path(dir).display()),
            };
            return observation;
        }
    }
    match grid_engine::store::held::read_ledgers(dir) {
        Ok(held) => observation.held_ledgers = held,
        Err(e) => {
            observation.status = HostStatus::Unreachable {
                reason: format!(
                    "{}: {e}",
                    grid_engine::store::held::ledgers_path(dir).display()
                ),
            };
            return observation;
        }
    }
    match HostConfig::read(dir) {
        Ok(config) => observation.config = Some(config),
        Err(e) => {
            observation.status = HostStatus::Unreachable {
                reason: e.to_string(),
            };
            return observation;
        }
    }
    observation.status = match Client::connect(dir).and_then(|mut c| c.call(&Call::Observe)) {
        Ok(Reply::Observation(o)) if o.keys.as_ref().is_some_and(|k| k.locked) => {
            HostStatus::Locked(o)
        }
        Ok(Reply::Observation(o)) => HostStatus::Running(o),
        Ok(other) => HostStatus::Unreachable {
            reason: format!("unexpected reply {other:?}"),
        },
        Err(CallError::Unreachable { .. }) => HostStatus::Unreachable {
            reason: "not running (no control socket answers)".to_owned(),
        },
        Err(e) => HostStatus::Unreachable {
            reason: e.to_string(),
        },
    };
    observation
}

/// Names of host installations present under `<state>/hosts`, sorted — not the places
/// a transfer of host H uses beside `hosts/H` while it moves (`H.relink`, the new link;
/// `H.returning`, a copy on its way back into the state directory).
pub fn installed_hosts(state: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state.join("hosts")) else {
        return Vec::new();
    };
    let hosts = state.join("hosts");
    let moving = |name: &str| {
        [".relink", RETURNING_SUFFIX].iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|host| hosts.join(host).join(HOST_CONFIG_FILE).exists())
        })
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(HOST_CONFIG_FILE).exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| !moving(name))
        .collect();
    names.sort();
    names
}

/// A digest of what the installation holds in custody, and its memberships.
fn custody_digest(dir: &Path) -> (String, Vec<String>) {
    use grid_engine::custody::membership;
    let mut hasher = Sha256::new();
    let read = |path: PathBuf| std::fs::read(path).unwrap_or_default();
    hasher.update(read(
        dir.join("keys").join(grid_engine::custody::MANIFEST_FILE),
    ));
    let memberships = membership::enrolled_memberships(dir);
    for m in &memberships {
        let d = membership::host_membership_dir(dir, m);
        hasher.update(m.as_bytes());
        hasher.update(read(d.join(membership::ENROLLMENT_FILE)));
        hasher.update(read(d.join(membership::CRL_FILE)));
    }
    (hex(&hasher.finalize()[..16]), memberships)
}

/// A digest of a membership authority's record and revocation list ("absent" when
/// none exists), for saved plans.
pub fn authority_fingerprint(dir: &Path) -> String {
    use grid_engine::custody::membership;
    let record = std::fs::read(dir.join(membership::AUTHORITY_FILE));
    let Ok(record) = record else {
        return "absent".to_owned();
    };
    let mut hasher = Sha256::new();
    hasher.update(record);
    hasher.update(std::fs::read(dir.join(membership::CRL_FILE)).unwrap_or_default());
    hex(&hasher.finalize()[..16])
}

/// Asks the host in `dir` for its view of `membership`'s authority (no barrier).
pub fn authority_status(dir: &Path, membership: &str) -> Result<VoterStatus, String> {
    match authority_call(dir, membership, AuthorityCall::Status)? {
        AuthorityReply::Status(status) => Ok(*status),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// Sends one call to the authority of `membership` on the host in `dir` (its control
/// socket). `Err` when the host did not answer.
pub fn authority_call(
    dir: &Path,
    membership: &str,
    request: AuthorityCall,
) -> Result<AuthorityReply, String> {
    let mut client = Client::connect(dir).map_err(|e| e.to_string())?;
    match client.call(&Call::Authority {
        membership: Some(membership.to_owned()),
        request,
    }) {
        Ok(Reply::Authority(reply)) => Ok(reply),
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The grants binding `host` in `membership`, which its leave waits for: those it
/// issues serving that membership (`grant … membership=M`), and those serving any
/// membership issued to a caller that is a member of it (or leaves it too).
pub fn leave_grants(topology: &Topology, host: &str, membership: &str) -> Vec<String> {
    topology
        .grants
        .iter()
        .filter(|g| g.issuer == host)
        .filter(|g| match &g.membership {
            Some(serves) => serves == membership,
            None => topology.host(&g.caller).is_some_and(|c| {
                c.memberships.iter().any(|m| m == membership)
                    || c.leaving.iter().any(|m| m == membership)
            }),
        })
        .map(|g| g.name.clone())
        .collect()
}

/// What the running installation `dir` of `name` holds ([`Inventory`]).
fn inventory(
    topology: &Topology,
    name: &str,
    dir: &Path,
    observed: &Observation,
    memberships: &[String],
) -> Inventory {
    let runs = observed
        .profiles
        .as_ref()
        .is_some_and(|p| p.iter().any(|p| p == "processes"))
        .then(|| {
            use grid_engine::processes::api::{ProcessCall, ProcessReply};
            match process_call(dir, ProcessCall::Processes) {
                Ok(ProcessReply::Processes { runs, .. }) => Some(runs),
                _ => None,
            }
        })
        .flatten();
    let mut open = Ok(0);
    for m in memberships {
        let owed = obligations(dir, m, leave_grants(topology, name, m));
        open = match (open, owed) {
            (Ok(n), Ok(list)) => Ok(n + list.len()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
    }
    Inventory {
        models: observed.models.iter().filter(|m| !m.retired).count(),
        runs,
        grants: observed.grants.len(),
        obligations: open,
    }
}

/// One processes call to the host at `dir` (its control socket).
pub fn process_call(
    dir: &Path,
    request: grid_engine::processes::api::ProcessCall,
) -> Result<grid_engine::processes::api::ProcessReply, String> {
    let mut client = Client::connect(dir).map_err(|e| e.to_string())?;
    match client.call(&Call::Process { request }) {
        Ok(Reply::Process(reply)) => Ok(*reply),
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// What the host at `dir` still owes in `membership` (`Call::Obligations`).
pub fn obligations(
    dir: &Path,
    membership: &str,
    grants: Vec<String>,
) -> Result<Vec<String>, String> {
    let mut client = Client::connect(dir).map_err(|e| e.to_string())?;
    match client.call(&Call::Obligations {
        membership: membership.to_owned(),
        grants,
    }) {
        Ok(Reply::Obligations { open, .. }) => Ok(open),
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The first membership (in `first`'s enrollment order) every host named is
/// enrolled in.
pub fn common_membership(state: &Path, hosts: &[&str]) -> Option<String> {
    let enrolled: Vec<Vec<String>> = hosts
        .iter()
        .map(|h| grid_engine::custody::membership::enrolled_memberships(&host_dir(state, h)))
        .collect();
    common(&enrolled)
}

pub(crate) fn common(enrolled: &[Vec<String>]) -> Option<String> {
    let (first, rest) = enrolled.split_first()?;
    first
        .iter()
        .find(|m| rest.iter().all(|other| other.contains(m)))
        .cloned()
}

/// One call to `host`'s `exports` profile (docs/exports.md).
pub fn export_call(state: &Path, host: &str, request: ExportCall) -> Result<ExportReply, String> {
    let dir = installed(state, host)?;
    let mut client = Client::connect(&dir).map_err(|e| e.to_string())?;
    match client.call(&Call::Export { request }) {
        Ok(Reply::Export(reply)) => Ok(*reply),
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `Request::InstallExport` for export `name`: the disclosure `issuer` signed, read from
/// it now, with its public keys (a `+ export` line's template, `resolve.rs`).
pub fn export_install(state: &Path, name: &str, issuer: &str) -> Result<Request, String> {
    let disclosure = match export_call(
        state,
        issuer,
        ExportCall::Disclosure {
            export: name.to_owned(),
        },
    )? {
        ExportReply::Disclosure { disclosure } => *disclosure,
        ExportReply::Refused { reason } => return Err(reason),
        other => return Err(format!("unexpected reply {other:?}")),
    };
    let issuer_keys = grid_engine::custody::manifest(&host_dir(state, issuer))
        .map_err(|e| format!("the public keys of `{issuer}` cannot be read: {e}"))?;
    Ok(Request::InstallExport {
        export: ExportInstall {
            disclosure,
            issuer_keys,
        },
    })
}

/// Files and bytes below `dir` (what a transfer copies), for the plan's line.
pub fn installation_size(dir: &Path) -> (u64, u64) {
    let mut total = (0, 0);
    let mut pending = vec![dir.to_owned()];
    while let Some(at) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total.0 += 1;
                total.1 += meta.len();
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(super::hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
        assert_eq!(super::hex(&[]), "");
    }

    #[test]
    fn a_leave_waits_for_the_grants_serving_its_membership_or_any() {
        let text = r#"grid version=1
membership ops
membership util
host edge listen="127.0.0.1:7401" {
    member ops
    member util leave=#true
    profiles transport processes
}
host both listen="127.0.0.1:7402" {
    member ops
    member util
    profiles transport processes
}
grant any issuer=edge caller=both units=1
grant ops-only issuer=edge caller=both units=1 membership=ops
grant util-only issuer=edge caller=both units=1 membership=util
"#;
        let topology = grid_spec::load_str("leave.kdl", text).expect("valid");
        assert_eq!(
            super::leave_grants(&topology, "edge", "util"),
            ["any", "util-only"]
        );
        assert_eq!(
            super::leave_grants(&topology, "edge", "ops"),
            ["any", "ops-only"]
        );
    }
}
