//! An authority's snapshots on S3 (issue 29, docs/storage.md "Authority snapshots"):
//! `authority voters=N { snapshots "s3://BUCKET/PREFIX" endpoint=… credentials=… }`.
//!
//! Every snapshot a voter builds is also put in the bucket, sealed
//! ([`Sealed`]: XChaCha20-Poly1305, the name and length in every chunk's associated
//! data) under a key of its own: HMAC-SHA-256 of the voter's snapshot sealing key
//! (`authority/M/snapshot-seal.key`, 0600, made once) over the object's name. A leader
//! that must bring a new or lagging voter up to date does not stream the snapshot: it
//! puts it (put-if-absent: the same bytes again are idempotent) and sends, over the
//! membership's mutual TLS, a [`SnapshotRef`] — the object's name, its key, the SHA-256
//! of its plaintext. The voter fetches the object, opens it, checks the digest and
//! installs it through openraft (its own identity and vote unchanged), then catches up
//! from the log.
//!
//! Object names: `snapshots/PARTICIPANT/INDEX(20 digits)-TERM-DIGEST(16 hex)-KEYID(8 hex)`:
//! content addressed, so a rebuilt snapshot of the same state is the same object and another
//! state never lands on an existing name. The newest [`SNAPSHOTS_REMOTE_KEPT`] of each
//! voter stay; older ones are deleted after a put.
//!
//! Invariants, stated as absences: no plaintext of a snapshot reaches the bucket; no
//! snapshot is installed from an object that did not open under its key or whose
//! digest differs from the one the leader sent (a changed, cut, swapped or removed
//! object is refused, naming it); no voter with `snapshots "s3://…"` falls back to
//! streaming when the bucket does not answer (the voter stays behind, the error shown by
//! `inspect authority`, and openraft tries again); no key appears in a log line or a
//! `Debug` output.

use std::path::Path;
use std::sync::Mutex;

use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::S3ArchiveConfig;
use crate::limits::{REMOTE_BLOB_BYTES_MAX, SNAPSHOT_OBJECT_NAME_BYTES_MAX, SNAPSHOTS_REMOTE_KEPT};
use crate::store::archive::Blobs;
use crate::store::s3::S3Blobs;
use crate::store::sealed::Sealed;

/// The voter's snapshot sealing key, in the authority's directory.
pub const SNAPSHOT_SEAL_KEY: &str = "snapshot-seal.key";

/// The prefix of every snapshot object under the store's own prefix.
const OBJECTS: &str = "snapshots/";

/// What a leader sends a voter in place of a snapshot's bytes.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SnapshotRef {
    /// The object's name under the store's prefix.
    pub name: String,
    /// The object's sealing key, hex (sent over mutual TLS only).
    pub key: String,
    /// SHA-256 of the snapshot's bytes, hex.
    pub digest: String,
    /// The snapshot's length in bytes.
    pub bytes: u64,
}

impl std::fmt::Debug for SnapshotRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotRef")
            .field("name", &self.name)
            .field("key", &"(not shown)")
            .field("digest", &self.digest)
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// What `inspect authority` shows of a voter's snapshot store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteStatus {
    /// `s3://BUCKET/PREFIX`.
    pub url: String,
    /// Snapshots this voter put in the bucket since it started (a put that found the
    /// same object counts).
    pub uploaded: u64,
    /// Snapshots this voter fetched from the bucket, opened and checked since it
    /// started (each then handed to openraft, which installs it unless a newer vote
    /// made it obsolete).
    pub fetched: u64,
    /// The newest object this voter put.
    pub last_object: Option<String>,
    /// The last failure, until a put or fetch succeeds.
    pub last_error: Option<String>,
}

/// A voter's snapshot store in a bucket.
pub struct RemoteSnapshots {
    blobs: S3Blobs,
    key: [u8; 32],
    /// The first 8 hex digits of SHA-256 of `key`: in every name, so a voter whose
    /// files were wiped (a new key) never meets an object sealed under its old one.
    key_id: String,
    participant: String,
    /// `s3://BUCKET/PREFIX`, as messages name it.
    url: String,
    status: Mutex<RemoteStatus>,
}

impl std::fmt::Debug for RemoteSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSnapshots")
            .field("participant", &self.participant)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

fn hex_key(text: &str) -> Option<[u8; 32]> {
    hex::decode(text).ok()?.try_into().ok()
}

impl RemoteSnapshots {
    /// The store `config` names for the voter `participant` whose files are in
    /// `authority_dir` (the credentials path is the host directory's, `host_dir`).
    /// Refused, by name, when the address does not read, the credentials file is
    /// missing or weak, or the sealing key is not a private 32-byte file. A bucket
    /// that does not answer is not refused here: puts and fetches fail, and say so.
    pub fn open(
        host_dir: &Path,
        authority_dir: &Path,
        participant: &str,
        config: &S3ArchiveConfig,
    ) -> Result<RemoteSnapshots, String> {
        let blobs = config.blobs(host_dir, "snapshots")?;
        let path = authority_dir.join(SNAPSHOT_SEAL_KEY);
        let key = crate::store::key_file(&path, "the authority's snapshot sealing key", Ok(()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(RemoteSnapshots {
            blobs,
            key_id: hex::encode(Sha256::digest(key))[..8].to_owned(),
            key,
            participant: participant.to_owned(),
            url: config.url.clone(),
            status: Mutex::new(RemoteStatus {
                url: config.url.clone(),
                ..RemoteStatus::default()
            }),
        })
    }

    pub fn status(&self) -> RemoteStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn record<T>(&self, outcome: &Result<T, String>, name: &str, fetched: bool) {
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(_) if fetched => {
                status.fetched += 1;
                status.last_error = None;
            }
            Ok(_) => {
                status.uploaded += 1;
                status.last_object = Some(name.to_owned());
                status.last_error = None;
            }
            Err(e) => status.last_error = Some(e.clone()),
        }
    }

    /// The sealing key of the object `name`.
    fn object_key(&self, name: &str) -> [u8; 32] {
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(b"grid-authority-snapshot/1\0");
        mac.update(name.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// A store's failure, worded for the snapshot object `name`.
    fn failed(&self, name: &str, e: crate::store::archive::ArchiveError) -> String {
        use crate::store::archive::ArchiveError;
        match e {
            ArchiveError::Damaged { detail, .. } => {
                format!("{} is damaged: {detail}", self.location(name))
            }
            ArchiveError::Missing { .. } => format!("{} is missing", self.location(name)),
            ArchiveError::Remote { detail, .. } => format!("{}: {detail}", self.location(name)),
            other => format!("{}: {other}", self.location(name)),
        }
    }

    fn location(&self, name: &str) -> String {
        format!("snapshot object {name} in {}", self.url)
    }

    /// Puts the snapshot `bytes` whose last entry is `(term, index)` in the bucket,
    /// deletes this voter's older objects beyond the newest `SNAPSHOTS_REMOTE_KEPT`,
    /// and answers the reference a voter fetches it by. Blocking. A put of an object
    /// already there (the leader sending a snapshot it built) reads it back and
    /// compares it: the leader never names an object that changed behind its back.
    pub fn put(&self, term: u64, index: u64, bytes: &[u8]) -> Result<SnapshotRef, String> {
        let outcome = self.put_inner(term, index, bytes);
        let name = outcome.as_ref().map_or("", |r| r.name.as_str()).to_owned();
        self.record(&outcome, &name, false);
        outcome
    }

    fn put_inner(&self, term: u64, index: u64, bytes: &[u8]) -> Result<SnapshotRef, String> {
        let digest = hex::encode(Sha256::digest(bytes));
        let name = format!(
            "{OBJECTS}{}/{index:020}-{term}-{}-{}",
            self.participant,
            &digest[..16],
            self.key_id
        );
        // The sealed object must be one a fetch can read back whole.
        if crate::store::sealed::sealed_len(bytes.len() as u64) > REMOTE_BLOB_BYTES_MAX {
            return Err(format!(
                "{}: a snapshot of {} bytes is over the {} bytes an object may hold (REMOTE_BLOB_BYTES_MAX)",
                self.location(&name),
                bytes.len(),
                REMOTE_BLOB_BYTES_MAX
            ));
        }
        let key = self.object_key(&name);
        let sealed = Sealed::new(&self.blobs, &key);
        match sealed.put_if_absent(&name, bytes) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "{} holds other bytes than the snapshot it is named after (changed behind this voter's back?)",
                    self.location(&name)
                ));
            }
            Err(e) => return Err(self.failed(&name, e)),
        }
        self.prune()?;
        Ok(SnapshotRef {
            name,
            key: hex::encode(key),
            digest,
            bytes: bytes.len() as u64,
        })
    }

    /// Deletes this voter's objects older than its newest `SNAPSHOTS_REMOTE_KEPT`.
    fn prune(&self) -> Result<(), String> {
        let mine = format!("{OBJECTS}{}/", self.participant);
        let mut names: Vec<String> = self
            .blobs
            .list(&mine)
            .map_err(|e| format!("listing {mine}: {e}"))?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort();
        let old = names.len().saturating_sub(SNAPSHOTS_REMOTE_KEPT);
        for name in &names[..old] {
            self.blobs
                .delete(name)
                .map_err(|e| format!("deleting {}: {e}", self.location(name)))?;
        }
        Ok(())
    }

    /// Fetches, opens and checks the snapshot `reference` names. Blocking.
    pub fn fetch(&self, reference: &SnapshotRef) -> Result<Vec<u8>, String> {
        let outcome = self.fetch_inner(reference);
        self.record(&outcome, &reference.name, true);
        outcome
    }

    fn fetch_inner(&self, reference: &SnapshotRef) -> Result<Vec<u8>, String> {
        let name = &reference.name;
        let shown = self.location(name);
        if !name.starts_with(OBJECTS)
            || name.contains("..")
            || name.len() > SNAPSHOT_OBJECT_NAME_BYTES_MAX
        {
            return Err(format!("{shown}: not a snapshot object's name"));
        }
        let key = hex_key(&reference.key)
            .ok_or_else(|| format!("{shown}: a key that is not 32 bytes of hex"))?;
        let sealed = Sealed::new(&self.blobs, &key);
        let bytes = match sealed.get(name) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err(format!("{shown} is missing")),
            Err(e) => return Err(self.failed(name, e)),
        };
        let digest = hex::encode(Sha256::digest(&bytes));
        if digest != reference.digest || bytes.len() as u64 != reference.bytes {
            return Err(format!(
                "{shown} is not the snapshot the leader sent: digest {digest} ({} bytes), expected {} ({} bytes)",
                bytes.len(),
                reference.digest,
                reference.bytes
            ));
        }
        Ok(bytes)
    }
}
