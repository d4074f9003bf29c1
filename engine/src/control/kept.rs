//! What the control plane retained, kept across its host's restarts: one signed record
//! per subject in `DIR/control/retained/` (files 0600 in a 0700 directory), written
//! after each inspection ended (an answer, uncertain or not, or why none came — a
//! surrender sent without a receipt stays `Unknown` after a restart), read at the next
//! start: a kept answer reads "retained before this host restarted", with its age.
//!
//! Each record is signed with this host's signing key (domain `grid-control-retained/1`)
//! and verified at start with the public keys of its custody manifest — which needs no
//! unlocked custody. A record that does not verify, names another host or subject, or
//! is larger than CONTROL_RETAINED_BYTES_MAX is refused by name (its subject reads
//! `damaged`), never shown. A read barrier is never kept: after a restart whether a
//! leader holds a quorum is unknown until a barrier is run again.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::retained::{Entry, Known};
use crate::custody::Custody;
use crate::limits::CONTROL_RETAINED_BYTES_MAX;

/// The text every record's signed bytes begin with.
const DOMAIN: &str = "grid-control-retained/1";

/// The directory of the kept records in an installation.
pub fn kept_dir(dir: &Path) -> PathBuf {
    dir.join("control").join("retained")
}

/// Whether `subject` is kept across restarts (a read barrier is not).
pub fn is_kept(subject: &str) -> bool {
    !subject.starts_with("barrier:")
}

/// One kept record, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    record: String,
    host: String,
    subject: String,
    /// `retained`, `uncertain` or `unreachable`.
    known: String,
    /// Why no answer came (`unreachable`).
    reason: Option<String>,
    /// When the last answer arrived, in milliseconds since the epoch.
    at_ms: Option<u64>,
    /// The last answer as JSON text (signed as its SHA-256).
    observation: Option<String>,
    generation: u32,
    signature: String,
}

impl Record {
    fn signed_bytes(&self) -> Vec<u8> {
        // Every text quoted as JSON: no field can end a line of another.
        let quoted = |t: &str| serde_json::Value::from(t).to_string();
        format!(
            "{DOMAIN}\nhost {}\nsubject {}\nknown {}\nreason {}\nat_ms {}\nobservation {}\n",
            quoted(&self.host),
            quoted(&self.subject),
            quoted(&self.known),
            self.reason
                .as_deref()
                .map_or_else(|| "none".to_owned(), quoted),
            self.at_ms
                .map_or_else(|| "none".to_owned(), |t| t.to_string()),
            self.observation.as_deref().map_or_else(
                || "none".to_owned(),
                |o| format!("sha256:{}", hex::encode(Sha256::digest(o.as_bytes())))
            ),
        )
        .into_bytes()
    }
}

/// The kept records of one host's control plane.
pub struct Kept {
    dir: PathBuf,
    host: String,
    custody: Custody,
    /// Held while a record is written: one write at a time, each of the state read
    /// under it, so the last write of a subject is of its latest state.
    writing: std::sync::Mutex<()>,
}

impl Kept {
    pub fn new(installation: &Path, host: &str, custody: Custody) -> Kept {
        Kept {
            writing: std::sync::Mutex::default(),
            dir: kept_dir(installation),
            host: host.to_owned(),
            custody,
        }
    }

    fn path(&self, subject: &str) -> PathBuf {
        self.dir.join(format!("{}.json", hex::encode(subject)))
    }

    /// Keeps the state of `subject` that `latest` reads, read while no other record
    /// is written (blocking: file IO and an fsync): two inspections of one subject
    /// ending together leave the later one's state on disk.
    pub fn keep_latest(
        &self,
        subject: &str,
        latest: impl FnOnce() -> Option<Entry>,
    ) -> Result<(), String> {
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        match latest() {
            Some(entry) => self.keep(subject, &entry),
            None => Ok(()),
        }
    }

    /// Keeps `entry` of `subject` as an inspection just left it (blocking: file IO
    /// and an fsync). Why it was not kept, otherwise (the page goes on from memory).
    pub fn keep(&self, subject: &str, entry: &Entry) -> Result<(), String> {
        if !is_kept(subject) {
            return Ok(());
        }
        let (known, reason) = match &entry.known {
            Known::Retained => ("retained", None),
            Known::Uncertain => ("uncertain", None),
            Known::Unreachable { reason } => ("unreachable", Some(reason.clone())),
            // Not what an inspection leaves: nothing new to keep.
            Known::Never | Known::Kept | Known::Damaged { .. } => return Ok(()),
        };
        let mut record = Record {
            record: DOMAIN.to_owned(),
            host: self.host.clone(),
            subject: subject.to_owned(),
            known: known.to_owned(),
            reason,
            at_ms: entry.at.map(|at| {
                at.duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64)
            }),
            observation: entry.observation.as_ref().map(|o| o.to_string()),
            generation: 0,
            signature: String::new(),
        };
        let (generation, signature) = self
            .custody
            .try_sign(&record.signed_bytes())
            .map_err(|e| format!("{subject}: not kept: {e}"))?;
        record.generation = generation;
        record.signature = hex::encode(signature.to_bytes());
        let text = serde_json::to_vec(&record).map_err(|e| format!("{subject}: {e}"))?;
        if text.len() as u64 > CONTROL_RETAINED_BYTES_MAX {
            return Err(format!(
                "{subject}: its record is {} bytes, more than CONTROL_RETAINED_BYTES_MAX ({CONTROL_RETAINED_BYTES_MAX}): not kept",
                text.len()
            ));
        }
        // Made private when absent (what is in it was checked as each record was read).
        if !self.dir.is_dir() {
            crate::store::ensure_private_dir(&self.dir)
                .map_err(|e| format!("{subject}: not kept: {e}"))?;
        }
        crate::store::write_private(&self.path(subject), &text)
            .map_err(|e| format!("{subject}: not kept in {}: {e}", self.dir.display()))
    }

    /// The entry kept for `subject` before this start: `None` when nothing was kept;
    /// `Known::Damaged` naming why when its record is refused.
    pub fn load(&self, subject: &str) -> Option<Entry> {
        if !is_kept(subject) {
            return None;
        }
        let path = self.path(subject);
        let metadata = match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            other => other,
        };
        let read = metadata
            .map_err(|e| e.to_string())
            .and_then(|m| self.read(&path, &m, subject));
        Some(read.unwrap_or_else(|why| {
            Entry::damaged(format!(
                "refused: {why} — the record kept before this host restarted ({})",
                path.display()
            ))
        }))
    }

    fn read(
        &self,
        path: &Path,
        metadata: &std::fs::Metadata,
        subject: &str,
    ) -> Result<Entry, String> {
        use std::os::unix::fs::PermissionsExt;
        // No larger record is ever written: one is not read.
        if metadata.len() > CONTROL_RETAINED_BYTES_MAX {
            return Err(format!(
                "{} bytes: larger than any record kept",
                metadata.len()
            ));
        }
        // Private: a regular file 0600 in a directory 0700.
        let dir_mode = std::fs::metadata(&self.dir)
            .map_err(|e| e.to_string())?
            .permissions()
            .mode();
        let mode = metadata.permissions().mode();
        if !metadata.is_file() || mode & 0o077 != 0 || dir_mode & 0o077 != 0 {
            return Err(format!(
                "not private (file mode {:o}, directory mode {:o}; expected 600 and 700)",
                mode & 0o777,
                dir_mode & 0o777
            ));
        }
        let text = std::fs::read(path).map_err(|e| e.to_string())?;
        let record: Record =
            serde_json::from_slice(&text).map_err(|e| format!("malformed: {e}"))?;
        if record.record != DOMAIN || record.host != self.host || record.subject != subject {
            return Err(format!(
                "it is {}'s record of {} ({}), not {}'s of {subject}",
                record.host, record.subject, record.record, self.host
            ));
        }
        let manifest = self.custody.manifest();
        if !crate::custody::verify_hex_signature(
            &manifest,
            record.generation,
            &record.signed_bytes(),
            &record.signature,
        ) {
            return Err(format!(
                "its signature does not verify with generation {} of this host's signing key",
                record.generation
            ));
        }
        let observation = match &record.observation {
            Some(o) => Some(serde_json::from_str(o).map_err(|e| format!("malformed answer: {e}"))?),
            None => None,
        };
        let known = match (record.known.as_str(), &record.reason, &observation) {
            ("retained", None, Some(_)) => Known::Kept,
            ("uncertain", None, _) => Known::Uncertain,
            ("unreachable", Some(reason), _) => Known::Unreachable {
                reason: format!("{reason} (before this host restarted)"),
            },
            (other, _, _) => return Err(format!("it says `{other}` inconsistently")),
        };
        let at = record.at_ms.map(|t| UNIX_EPOCH + Duration::from_millis(t));
        Ok(Entry::kept(observation, at, known))
    }

    /// Removes the records of subjects this plane no longer has (an owner gone from
    /// host.toml): nothing is owed on them.
    pub fn purge_others(&self, subjects: &[String]) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let wanted: std::collections::BTreeSet<PathBuf> =
            subjects.iter().map(|s| self.path(s)).collect();
        for entry in entries.flatten() {
            let path = entry.path();
            if !wanted.contains(&path) {
                tracing::info!(path = %path.display(), "control plane: a kept record of no current subject removed");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::retained::Retained;

    fn installation(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-kept-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        crate::store::ensure_private_dir(&dir).unwrap();
        crate::custody::create(&dir).unwrap();
        dir
    }

    fn kept(dir: &Path, host: &str) -> Kept {
        Kept::new(dir, host, crate::custody::verify(dir).unwrap())
    }

    /// An entry as an inspection leaves it.
    fn inspected(reply: Result<serde_json::Value, String>, close_first: bool) -> Entry {
        let mut retained = Retained::new(["plant"]);
        let ticket = retained.begin("plant", SystemTime::now()).unwrap();
        if close_first {
            retained.abandon("plant", ticket);
        }
        retained.finish("plant", ticket, reply, SystemTime::now());
        retained.entry("plant").unwrap().clone()
    }

    use std::time::SystemTime;

    #[test]
    fn a_kept_answer_reads_kept_with_its_time_after_a_restart() {
        let dir = installation("answer");
        let answer = serde_json::json!({ "host": "plant", "models": [1, 2] });
        let entry = inspected(Ok(answer.clone()), false);
        kept(&dir, "hq").keep("plant", &entry).unwrap();
        let mode = |p: &Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777
        };
        assert_eq!(mode(&kept_dir(&dir)), 0o700);
        let loaded = kept(&dir, "hq").load("plant").unwrap();
        assert_eq!(loaded.known, Known::Kept);
        assert_eq!(loaded.observation, Some(answer.clone()));
        let ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis();
        assert_eq!(loaded.at.map(ms), entry.at.map(ms));
        // Nothing kept of another subject; a barrier never.
        assert_eq!(kept(&dir, "hq").load("storage:plant"), None);
        kept(&dir, "hq")
            .keep("barrier:ops", &inspected(Ok(answer), false))
            .unwrap();
        assert_eq!(kept(&dir, "hq").load("barrier:ops"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn uncertain_and_unreachable_stay_so_and_a_changed_record_is_refused() {
        let dir = installation("changed");
        let k = kept(&dir, "hq");
        k.keep("plant", &inspected(Ok(serde_json::json!({ "n": 1 })), true))
            .unwrap();
        assert_eq!(k.load("plant").unwrap().known, Known::Uncertain);
        k.keep(
            "surrender:plant",
            &inspected(Err("sent, no receipt".to_owned()), false),
        )
        .unwrap();
        let loaded = k.load("surrender:plant").unwrap();
        assert!(
            matches!(&loaded.known, Known::Unreachable { reason } if reason.starts_with("sent, no receipt")),
            "{loaded:?}"
        );
        // One character of the answer changed on disk: refused, nothing shown.
        let path = k.path("plant");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\\\"n\\\":1", "\\\"n\\\":2")).unwrap();
        let loaded = k.load("plant").unwrap();
        assert!(
            matches!(&loaded.known, Known::Damaged { reason } if reason.contains("does not verify")),
            "{loaded:?}"
        );
        assert_eq!(loaded.observation, None);
        // Another host's record, or another subject's, is not this one's.
        std::fs::copy(k.path("surrender:plant"), k.path("plant")).unwrap();
        let loaded = k.load("plant").unwrap();
        assert!(
            matches!(&loaded.known, Known::Damaged { reason } if reason.contains("not hq's of plant")),
            "{loaded:?}"
        );
        assert!(matches!(
            kept(&dir, "hq2").load("surrender:plant").unwrap().known,
            Known::Damaged { .. }
        ));
        // Records of subjects no longer served are removed.
        k.purge_others(&["plant".to_owned()]);
        assert!(k.path("plant").exists() && !k.path("surrender:plant").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
