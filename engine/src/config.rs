//! `DIR/host.toml`: who this host is. Written by `gridctl reconcile`, read by `gridd`.

use std::path::{Path, PathBuf};

use grid_spec::Profile;
use serde::{Deserialize, Serialize};

/// Why a host's configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Config {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("{path} selects unknown profile `{profile}`")]
    UnknownProfile {
        path: std::path::PathBuf,
        profile: String,
    },
    #[error(
        "profile `{profile}` cannot run: this build of gridd does not provide it yet; refusing to start rather than run without it"
    )]
    ProfileUnavailable { profile: String },
}

/// Profiles this build of gridd can run; every other one refuses to start. gridctl's
/// `check`, `plan`, `reconcile` and `up` refuse them too (`grid_spec::Options`).
pub const PROVIDED_PROFILES: [Profile; 13] = [
    Profile::Transport,
    Profile::WireObservation,
    Profile::Authority,
    Profile::Delivery,
    Profile::Processes,
    Profile::Sources,
    Profile::Ledger,
    Profile::ArchiveWallet,
    Profile::Missions,
    Profile::SharedMemberships,
    Profile::Exports,
    Profile::Decisions,
    Profile::Control,
];

/// [`PROVIDED_PROFILES`] by name.
pub const AVAILABLE_PROFILES: [&str; PROVIDED_PROFILES.len()] = {
    let mut names = [""; PROVIDED_PROFILES.len()];
    let mut i = 0;
    while i < PROVIDED_PROFILES.len() {
        names[i] = PROVIDED_PROFILES[i].name();
        i += 1;
    }
    names
};

/// The name of the configuration file inside a host's directory.
pub const HOST_CONFIG_FILE: &str = "host.toml";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    pub name: String,
    pub listen: String,
    #[serde(default)]
    pub profiles: Vec<String>,
    /// `metrics=` of the host: the loopback IP:PORT gridd serves Prometheus text on
    /// (`GET /metrics`); absent when the topology declares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    /// The participants whose control plane may inspect this host (`Call::Inspect`
    /// over `POST /control`, docs/control-plane.md): every other host selecting
    /// `control` that shares a membership with it — written by reconcile; a change is
    /// `~ host`, effective at restart. Anyone else is refused that call.
    #[serde(
        default,
        rename = "control-viewers",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub control_viewers: Vec<String>,
    /// Delivery capacity of the routes this host publishes (profile `delivery`);
    /// unset values are the engine's defaults.
    #[serde(default, skip_serializing_if = "CapacityConfig::is_default")]
    pub capacity: CapacityConfig,
    /// `capacity membership=M …`: the delivery capacity of the routes of M this host
    /// publishes, M's own pool; a value unset there is `capacity`'s, then the default.
    #[serde(
        default,
        rename = "membership-capacity",
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub membership_capacity: std::collections::BTreeMap<String, CapacityConfig>,
    /// `retain` of the host: how long answers stay in the hot store and the archive
    /// (docs/storage.md); unset values are the engine's defaults.
    #[serde(default, skip_serializing_if = "RetainConfig::is_default")]
    pub retain: RetainConfig,
    /// `archive` of the host: where its archive segments live (docs/storage.md,
    /// "Adapters"); absent: `DIR/archive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<S3ArchiveConfig>,
    /// The bucket the archive's segments move out of (`~ archive` away from a bucket,
    /// written by reconcile): gridd's start copies each segment from it to where
    /// `archive` keeps them, reads it back, and only then deletes it there. Kept after
    /// the move (the store records where the segments went; this is only read while
    /// the store still names this bucket).
    #[serde(
        default,
        rename = "archive-leaving",
        skip_serializing_if = "Option::is_none"
    )]
    pub archive_leaving: Option<Box<S3ArchiveConfig>>,
    /// The table the archive's index moves out of (`~ archive` away from a table,
    /// written by reconcile): gridd's start reads each of the host's records there,
    /// verifies its tag and puts it where `archive` keeps the index (the host's store,
    /// or another table), and records the new place only when every id the host
    /// archived there was found. Kept after the move, read only while the store still
    /// names this table.
    #[serde(
        default,
        rename = "archive-index-leaving",
        skip_serializing_if = "Option::is_none"
    )]
    pub archive_index_leaving: Option<Box<S3ArchiveConfig>>,
    /// `snapshots "s3://…"` of each membership whose authority this host takes part
    /// in (docs/storage.md, "Authority snapshots"); absent: its own files only.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub snapshots: std::collections::BTreeMap<String, S3ArchiveConfig>,
    /// `storage authority="M"` of the host (docs/transfer.md, "Fenced at the
    /// authority"): the store's generation is the claim `store:HOST` at M's authority,
    /// confirmed at every start before anything is served; absent: the installation's
    /// own record fences replaced stores, nothing else.
    #[serde(
        default,
        rename = "storage-claim",
        skip_serializing_if = "Option::is_none"
    )]
    pub storage_claim: Option<StorageClaimConfig>,
    /// `control listen=…` of the host (profile `control`, docs/control-plane.md):
    /// where it serves the operator control plane, and the owners its panels may
    /// inspect when an operator asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlConfig>,
}

/// The control plane of a host: its addresses and the owners it may inspect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    pub listen: Vec<ControlListenConfig>,
    /// Every other host sharing a membership with this one and selecting `transport`
    /// (written by the reconciler from the files, in file order): asked only by an
    /// explicit "inspect now", never by opening a panel.
    #[serde(default)]
    pub owners: Vec<ControlOwner>,
}

/// One `control listen="IP:PORT" [operators="PATH" [certificate="PATH" key="PATH"]]`.
/// The files are named as the topology named them (absolute); gridd reads the private
/// copies reconcile made of them in the installation (`control::operators`), whose
/// `digest` this line holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlListenConfig {
    pub listen: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operators: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// SHA-256 of the files above as reconcile copied them (filled in by the
    /// reconciler, which reads them): a change of any is a change of the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// An owner the control plane reaches: its participant name, the membership it is
/// called in (the first this host shares with it, in file order) and its address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlOwner {
    pub name: String,
    pub membership: String,
    pub address: String,
}

/// Where the claim `store:HOST` is held: the membership and its voters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageClaimConfig {
    pub membership: String,
    /// The authority's voters (the first `authority voters=N` member hosts selecting
    /// `authority`, in the files' order), asked in turn.
    #[serde(default)]
    pub voters: Vec<VoterAddress>,
}

/// One voter of an authority: its participant name and listen address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VoterAddress {
    pub participant: String,
    pub address: String,
}

/// `archive "s3://…"` or `archive "dynamodb://…"` in `host.toml` (and an authority's
/// `snapshots "s3://…"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct S3ArchiveConfig {
    /// `s3://BUCKET/PREFIX`.
    pub url: String,
    pub endpoint: String,
    pub region: String,
    /// The credentials file (relative paths are the host directory's).
    pub credentials: String,
    /// A PEM file of the certificate authorities an `https://` endpoint is checked
    /// against instead of Mozilla's roots (relative paths are the host directory's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// A table's segment store (`[archive.segments]`, an `s3://` bucket; none: the
    /// installation's own `DIR/archive`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<Box<S3ArchiveConfig>>,
}

impl S3ArchiveConfig {
    /// The S3 archive this names: its address read again as the topology reads it.
    pub fn target(&self) -> Result<grid_spec::storage::S3Archive, String> {
        grid_spec::storage::check_endpoint(&self.endpoint).map_err(|e| {
            format!(
                "archive endpoint `{}`: {e}",
                grid_spec::diagnostic::quoted(&self.endpoint)
            )
        })?;
        grid_spec::storage::check_region(&self.region)?;
        Ok(grid_spec::storage::S3Archive {
            location: grid_spec::storage::S3Location::parse(&self.url)?,
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            credentials: self.credentials.clone().into(),
            ca: self.ca.clone().map(Into::into),
        })
    }

    /// The topology's `archive` as `host.toml` keeps it (`None`: files).
    pub fn from_target(target: &grid_spec::storage::ArchiveTarget) -> Option<S3ArchiveConfig> {
        match target {
            grid_spec::storage::ArchiveTarget::File => None,
            grid_spec::storage::ArchiveTarget::S3(s3) => Some(S3ArchiveConfig::bucket(s3)),
            grid_spec::storage::ArchiveTarget::DynamoDb(d) => Some(S3ArchiveConfig {
                url: format!("dynamodb://{}", d.table),
                endpoint: d.endpoint.clone(),
                region: d.region.clone(),
                credentials: d.credentials.display().to_string(),
                ca: d.ca.as_ref().map(|c| c.display().to_string()),
                segments: d
                    .segments
                    .as_ref()
                    .map(|s3| Box::new(S3ArchiveConfig::bucket(s3))),
            }),
        }
    }

    fn bucket(s3: &grid_spec::storage::S3Archive) -> S3ArchiveConfig {
        S3ArchiveConfig {
            url: s3.location.to_string(),
            endpoint: s3.endpoint.clone(),
            region: s3.region.clone(),
            credentials: s3.credentials.display().to_string(),
            ca: s3.ca.as_ref().map(|c| c.display().to_string()),
            segments: None,
        }
    }

    /// The bucket this names, reached with the credentials file and, with `ca`, trusting
    /// only the authorities it names (relative paths are `dir`'s): refused, by name,
    /// when its address does not read or a file is missing, weak or not what it should
    /// hold. Nothing is sent. `what` names it in a refusal (`archive`, `snapshots`).
    pub fn blobs(&self, dir: &Path, what: &str) -> Result<crate::store::s3::S3Blobs, String> {
        let target = self.target()?;
        let keys = crate::store::s3::AccessKeys::read(&dir.join(&target.credentials))
            .map_err(|e| format!("{what} {}: {e}", self.url))?;
        let blobs = crate::store::s3::S3Blobs::new(
            target.location,
            &target.endpoint,
            &target.region,
            &keys,
        )
        .map_err(|e| e.to_string())?;
        Ok(match self.roots(dir, what)? {
            Some(roots) => blobs.trusting(&roots),
            None => blobs,
        })
    }

    /// The certificates of `ca` (none: Mozilla's roots are trusted).
    fn roots(
        &self,
        dir: &Path,
        what: &str,
    ) -> Result<Option<Vec<ureq::tls::Certificate<'static>>>, String> {
        let Some(ca) = &self.ca else {
            return Ok(None);
        };
        let path = dir.join(ca);
        crate::store::s3::read_roots(&path).map(Some).map_err(|e| {
            format!(
                "{what} {}: ca {}: {e}",
                self.url,
                grid_spec::diagnostic::quoted(&path.display().to_string())
            )
        })
    }

    /// Where the segments of this archive live: the bucket of an `s3://` archive, a
    /// table's `segments` (none: the installation's own `DIR/archive`).
    pub fn segment_store(&self) -> Option<&S3ArchiveConfig> {
        match self.table() {
            None => Some(self),
            Some(_) => self.segments.as_deref(),
        }
    }

    /// The DynamoDB table of `archive "dynamodb://TABLE"` (none: an S3 store).
    pub fn table(&self) -> Option<&str> {
        self.url.strip_prefix("dynamodb://")
    }

    /// The records this names, reached with the credentials file (relative to `dir`):
    /// refused when it names no table, its address does not read, or the file is
    /// missing or weak. Nothing is sent.
    pub fn records(
        &self,
        dir: &std::path::Path,
    ) -> Result<crate::store::dynamodb::DynamoRecords, String> {
        let table = self
            .table()
            .ok_or_else(|| format!("archive {} is not a dynamodb:// table", self.url))?;
        grid_spec::storage::check_region(&self.region)?;
        let keys = crate::store::s3::AccessKeys::read(&dir.join(&self.credentials))
            .map_err(|e| format!("archive {}: {e}", self.url))?;
        let records =
            crate::store::dynamodb::DynamoRecords::new(table, &self.endpoint, &self.region, &keys)
                .map_err(|e| e.to_string())?;
        Ok(match self.roots(dir, "archive")? {
            Some(roots) => records.trusting(&roots),
            None => records,
        })
    }

    /// `s3://grid-archive/edge-a at http://127.0.0.1:8333 (us-east-1, credentials /etc/grid/s3.credentials)`
    /// (a table's segment store after it: `; segments in s3://… at …`).
    pub fn describe(&self) -> String {
        let segments = self
            .segments
            .as_ref()
            .map_or(String::new(), |s| format!("; segments in {}", s.describe()));
        let ca = self
            .ca
            .as_ref()
            .map_or(String::new(), |ca| format!(", ca {ca}"));
        format!(
            "{} at {} ({}, credentials {}{ca}){segments}",
            self.url, self.endpoint, self.region, self.credentials
        )
    }
}

/// `retain` in `host.toml` (from the topology's `retain` child of the host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RetainConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_days: Option<u32>,
}

impl RetainConfig {
    pub fn is_default(&self) -> bool {
        *self == RetainConfig::default()
    }

    /// The hot window in days (`RETAIN_HOT_DAYS_DEFAULT` when unset).
    pub fn hot_days(&self) -> u32 {
        self.hot_days
            .unwrap_or(crate::limits::RETAIN_HOT_DAYS_DEFAULT)
    }
}

/// `capacity` in `host.toml` (from the topology's `capacity` child of the host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CapacityConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordered_per_destination: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordered_per_host: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_per_destination: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_per_host: Option<u64>,
}

impl CapacityConfig {
    pub fn is_default(&self) -> bool {
        *self == CapacityConfig::default()
    }

    /// These values, each unset one taken from `host` (a membership's line over the
    /// host's).
    pub fn over(&self, host: &CapacityConfig) -> CapacityConfig {
        CapacityConfig {
            ordered_per_destination: self
                .ordered_per_destination
                .or(host.ordered_per_destination),
            ordered_per_host: self.ordered_per_host.or(host.ordered_per_host),
            latest_per_destination: self.latest_per_destination.or(host.latest_per_destination),
            latest_per_host: self.latest_per_host.or(host.latest_per_host),
        }
    }
}

impl From<&grid_spec::topology::DeliveryCapacity> for CapacityConfig {
    fn from(c: &grid_spec::topology::DeliveryCapacity) -> CapacityConfig {
        CapacityConfig {
            ordered_per_destination: c.ordered_per_destination,
            ordered_per_host: c.ordered_per_host,
            latest_per_destination: c.latest_per_destination,
            latest_per_host: c.latest_per_host,
        }
    }
}

impl HostConfig {
    pub fn from_host(host: &grid_spec::Host) -> HostConfig {
        HostConfig {
            name: host.name.clone(),
            listen: host.listen.to_string(),
            profiles: host.profiles.iter().map(|p| p.name().to_owned()).collect(),
            metrics: host.metrics.map(|m| m.to_string()),
            capacity: CapacityConfig::from(&host.capacity),
            membership_capacity: host
                .membership_capacity
                .iter()
                .map(|(m, c)| (m.clone(), CapacityConfig::from(c)))
                .collect(),
            retain: RetainConfig {
                hot_days: host.retain.hot_days,
                archive_days: host.retain.archive_days,
            },
            archive: S3ArchiveConfig::from_target(&host.archive),
            // Written by the archive's own transition (the reconciler's `diff::archive`).
            archive_leaving: None,
            archive_index_leaving: None,
            // Written apart, per membership (the reconciler's `diff::snapshots`).
            snapshots: Default::default(),
            // The voters are filled in from the other hosts (the reconciler's
            // `diff::hosts`).
            storage_claim: host.storage.as_ref().and_then(|s| s.authority.clone()).map(
                |membership| StorageClaimConfig {
                    membership,
                    voters: Vec::new(),
                },
            ),
            // Filled in from the other hosts (the reconciler's `diff::hosts`).
            control_viewers: Vec::new(),
            // The owners are filled in from the other hosts (the reconciler's
            // `diff::hosts`).
            control: (!host.control.is_empty()).then(|| ControlConfig {
                listen: host
                    .control
                    .iter()
                    .map(|c| {
                        let absolute = |p: &PathBuf| std::path::absolute(p).unwrap_or(p.clone());
                        let o = c.operators.as_ref();
                        ControlListenConfig {
                            listen: c.listen.to_string(),
                            operators: o.map(|o| absolute(&o.ca)),
                            certificate: o.and_then(|o| o.certificate.as_ref()).map(absolute),
                            key: o.and_then(|o| o.key.as_ref()).map(absolute),
                            // Filled in by the reconciler, which reads the files.
                            digest: None,
                        }
                    })
                    .collect(),
                owners: Vec::new(),
            }),
        }
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a host configuration always serializes")
    }

    pub fn from_toml(text: &str) -> Result<HostConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    pub fn read(dir: &Path) -> Result<HostConfig, ConfigError> {
        let path = dir.join(HOST_CONFIG_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io {
            path: path.clone(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Config {
            path,
            reason: e.to_string(),
        })
    }

    /// Every selected profile must be one this build can run; none may be silently
    /// weakened or skipped (SPEC §1.1).
    pub fn check_profiles(&self, dir: &Path) -> Result<(), ConfigError> {
        if let Some(unknown) = self
            .profiles
            .iter()
            .find(|p| Profile::from_name(p).is_none())
        {
            return Err(ConfigError::UnknownProfile {
                path: dir.join(HOST_CONFIG_FILE),
                profile: unknown.clone(),
            });
        }
        // Profiles that have not landed refuse rather than run weaker.
        match self
            .profiles
            .iter()
            .find(|p| !AVAILABLE_PROFILES.contains(&p.as_str()))
        {
            Some(profile) => Err(ConfigError::ProfileUnavailable {
                profile: profile.clone(),
            }),
            None => Ok(()),
        }
    }

    pub fn selects(&self, profile: Profile) -> bool {
        self.profiles.iter().any(|p| p == profile.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_is_written_only_when_declared() {
        let mut config = HostConfig {
            name: "solo".to_owned(),
            listen: "127.0.0.1:7600".to_owned(),
            profiles: Vec::new(),
            metrics: None,
            control_viewers: Vec::new(),
            capacity: CapacityConfig::default(),
            membership_capacity: Default::default(),
            retain: RetainConfig::default(),
            archive: None,
            archive_leaving: None,
            archive_index_leaving: None,
            snapshots: Default::default(),
            storage_claim: None,
            control: None,
        };
        let text = config.to_toml();
        assert_eq!(
            text,
            "name = \"solo\"\nlisten = \"127.0.0.1:7600\"\nprofiles = []\n"
        );
        assert_eq!(HostConfig::from_toml(&text), Ok(config.clone()));
        config.metrics = Some("127.0.0.1:9600".to_owned());
        let text = config.to_toml();
        assert!(text.contains("metrics = \"127.0.0.1:9600\"\n"), "{text}");
        assert_eq!(HostConfig::from_toml(&text), Ok(config));
    }
}
