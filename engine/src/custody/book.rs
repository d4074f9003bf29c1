//! Peers' keys learned through memberships (docs/custody.md, "Peers learn rotated
//! keys").
//!
//! A host records a peer's public keys where its work needs them — a route's
//! destinations, a grant's caller, a mission's issuer — as they were when the route,
//! grant or mission was installed. When the peer rotates a key, the operator (who
//! holds the membership's authority, and writes `ca.pem` and `crl.pem` into every
//! member's installation) writes the peer's new public manifest into each member's
//! installation too:
//! ```text
//! DIR/memberships/M/keys/   0700
//!   PARTICIPANT.toml        0600  membership, participant and its custody manifest
//! ```
//! A host uses an entry only when it *extends* what it recorded (the same signing and
//! mail keys at the same generations, and more): a rotation is learned, a replaced
//! identity is not — it keeps the recorded keys, and what the replacement signs does
//! not verify. Secrets never leave their host; these are public keys only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{CustodyError, Manifest, write_private};

/// The folder of peers' manifests inside a host's membership directory.
pub const BOOK_DIR: &str = "keys";

/// One peer's public keys as a membership published them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub membership: String,
    pub participant: String,
    pub keys: Manifest,
}

fn entry_path(host_dir: &Path, membership: &str, participant: &str) -> PathBuf {
    super::membership::host_membership_dir(host_dir, membership)
        .join(BOOK_DIR)
        .join(format!("{participant}.toml"))
}

/// Writes `participant`'s public `keys` into the installation `host_dir` for
/// `membership` (0600 in a 0700 folder, synced, atomically).
pub fn write(
    host_dir: &Path,
    membership: &str,
    participant: &str,
    keys: &Manifest,
) -> Result<(), CustodyError> {
    let path = entry_path(host_dir, membership, participant);
    let folder = path.parent().expect("an entry has a folder");
    std::fs::create_dir_all(folder).map_err(|source| CustodyError::Io {
        path: folder.to_owned(),
        source,
    })?;
    std::fs::set_permissions(folder, std::os::unix::fs::PermissionsExt::from_mode(0o700)).map_err(
        |source| CustodyError::Io {
            path: folder.to_owned(),
            source,
        },
    )?;
    let entry = Entry {
        membership: membership.to_owned(),
        participant: participant.to_owned(),
        keys: keys.clone(),
    };
    write_private(
        &path,
        toml::to_string(&entry)
            .expect("entries serialize")
            .as_bytes(),
    )
}

/// `participant`'s keys that `membership` published into `host_dir` (`None`: none).
pub fn read(
    host_dir: &Path,
    membership: &str,
    participant: &str,
) -> Result<Option<Manifest>, CustodyError> {
    let path = entry_path(host_dir, membership, participant);
    match std::fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CustodyError::Io { path, source }),
        Ok(text) => {
            let entry: Entry = toml::from_str(&text).map_err(|e| CustodyError::Malformed {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            if entry.membership != membership || entry.participant != participant {
                return Err(CustodyError::Malformed {
                    path,
                    reason: format!(
                        "it names participant `{}` of `{}`",
                        entry.participant, entry.membership
                    ),
                });
            }
            Ok(Some(entry.keys))
        }
    }
}

/// Entries as last read, by path, with the modification time they were read at: a
/// lookup costs a directory listing and one `stat` per membership.
#[derive(Default)]
pub struct Cache {
    read: Mutex<HashMap<PathBuf, (SystemTime, Option<Manifest>)>>,
}

impl Cache {
    /// The newest keys of `host` that extend `embedded`: `embedded` itself when no
    /// membership of `host_dir` published later ones (or only ones that do not extend
    /// it — those are ignored, logged once per read).
    pub fn newest(&self, host_dir: &Path, host: &str, embedded: &Manifest) -> Manifest {
        let Ok(memberships) = std::fs::read_dir(host_dir.join("memberships")) else {
            return embedded.clone();
        };
        let mut best = embedded.clone();
        for membership in memberships.filter_map(|e| e.ok()) {
            let Some(name) = membership.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let path = entry_path(host_dir, &name, host);
            let Ok(modified) = std::fs::metadata(&path).and_then(|m| m.modified()) else {
                continue;
            };
            let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
            let keys = match read.get(&path) {
                Some((at, keys)) if *at == modified => keys.clone(),
                _ => {
                    let keys = match self::read(host_dir, &name, host) {
                        Ok(keys) => keys,
                        Err(e) => {
                            tracing::warn!(%e, "a peer's published keys are unreadable; using those recorded");
                            None
                        }
                    };
                    read.insert(path.clone(), (modified, keys.clone()));
                    if let Some(keys) = &keys
                        && !keys.extends(embedded)
                    {
                        tracing::warn!(
                            path = %path.display(),
                            "a peer's published keys do not extend those recorded (not a rotation of the same custody); ignored"
                        );
                    }
                    keys
                }
            };
            if let Some(keys) = keys
                && keys.extends(&best)
            {
                best = keys;
            }
        }
        best
    }
}

/// Every peer's keys `membership` published into `host_dir`, by participant
/// (unreadable entries left out: the plan writes them again).
pub fn held(host_dir: &Path, membership: &str) -> std::collections::BTreeMap<String, Manifest> {
    let folder = super::membership::host_membership_dir(host_dir, membership).join(BOOK_DIR);
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Default::default();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_suffix(".toml")?.to_owned();
            let keys = read(host_dir, membership, &name).ok()??;
            Some((name, keys))
        })
        .collect()
}
