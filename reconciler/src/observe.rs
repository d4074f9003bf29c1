//! Observing original owners: what each host of the topology (and each host found in
//! the state directory) retains right now. Observing changes nothing anywhere.

use std::path::{Path, PathBuf};

use grid_engine::host::config::{HOST_CONFIG_FILE, HostConfig};
use grid_engine::host::control::{CallError, Client};
use grid_engine::protocol::{Call, Observation, Reply};
use sha2::{Digest, Sha256};

/// Where the host called `name` lives under `state`. A host with `dir=` in the files
/// is reached through the link `<state>/hosts/NAME` that reconcile makes to it.
pub fn host_dir(state: &Path, name: &str) -> PathBuf {
    state.join("hosts").join(name)
}

/// What one owner looked like.
#[derive(Debug, Clone)]
pub enum HostStatus {
    /// No installation directory: the host was never created.
    Missing,
    /// The installation exists but its control API does not answer.
    Unreachable { reason: String },
    /// The host answered.
    Running(Observation),
}

#[derive(Debug, Clone)]
pub struct HostObservation {
    pub name: String,
    pub dir: PathBuf,
    /// `host.toml` as found, when the installation exists and it reads.
    pub config: Option<HostConfig>,
    /// A digest of the installation's custody files (key manifest, enrollments,
    /// revocation lists) and the memberships it is enrolled in.
    pub custody: (String, Vec<String>),
    pub status: HostStatus,
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
        match &self.status {
            HostStatus::Missing => hasher.update(b"missing"),
            HostStatus::Unreachable { .. } => hasher.update(b"unreachable"),
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
            None => "no installation".to_owned(),
        };
        match &self.status {
            HostStatus::Missing => config,
            HostStatus::Unreachable { .. } => format!("{config}; not reachable"),
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

/// Lowercase hex of a digest, as fingerprints show it (the planner's too).
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Observes the host `name` whose installation is `dir`.
pub fn observe_host(name: &str, dir: &Path) -> HostObservation {
    let mut observation = HostObservation {
        name: name.to_owned(),
        dir: dir.to_owned(),
        config: None,
        custody: (String::new(), Vec::new()),
        status: HostStatus::Missing,
    };
    if !dir.join(HOST_CONFIG_FILE).exists() {
        return observation;
    }
    observation.custody = custody_digest(dir);
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

/// Names of host installations present under `<state>/hosts`, sorted.
pub fn installed_hosts(state: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state.join("hosts")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(HOST_CONFIG_FILE).exists())
        .filter_map(|e| e.file_name().into_string().ok())
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
pub fn authority_status(
    dir: &Path,
    membership: &str,
) -> Result<grid_engine::authority::service::VoterStatus, String> {
    use grid_engine::authority::service::{AuthorityCall, AuthorityReply};
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
    request: grid_engine::authority::service::AuthorityCall,
) -> Result<grid_engine::authority::service::AuthorityReply, String> {
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

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(super::hex(&[0x00, 0x0f, 0xab, 0xff]), "000fabff");
        assert_eq!(super::hex(&[]), "");
    }
}
