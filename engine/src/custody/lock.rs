//! Locking a custody at rest, and unlocking it (docs/custody.md, "Locked custody").
//!
//! A lock (or a change of passphrase) is all or nothing, crash-safely: every evidence
//! key (signing, mail, retired mail) is first written encrypted under the new
//! passphrase beside itself (`KEY.relock`, synced); then `keys/relock` is written and
//! synced — the commit; then each staged file is renamed over its key, `keys/locked`
//! written, `keys/relock` removed, the directory synced. A host opening finds where a
//! crash left it ([`finish_lock`]): staged files without `keys/relock` are removed —
//! the old keys and passphrase stay; with it, the renames complete — the new
//! passphrase unlocks. Never a custody half under one passphrase, half under another.

use std::path::{Path, PathBuf};

use super::keyfile::KeyKind;
use super::{
    Custody, CustodyError, KEYS_DIR, LOCKED_FILE, MAIL_KEY_FILE, Manifest, SIGNING_KEY_FILE,
    finish_rotation, manifest, open, read_secret, retired_mail_file, write_key_as, write_private,
};
use crate::store::{Failpoint, Failpoints};

/// Written (synced) once every staged key is: the lock's commit.
const RELOCK_FILE: &str = "relock";
/// The suffix of a key staged under the new passphrase.
const STAGED: &str = "relock";

/// The key files a lock encrypts: the signing key, the mail key and each retired mail
/// key (never the TLS key: a locked host still answers reads over TLS).
fn evidence_files(manifest: &Manifest) -> Vec<(String, KeyKind)> {
    let mut files = vec![
        (SIGNING_KEY_FILE.to_owned(), KeyKind::Ed25519),
        (MAIL_KEY_FILE.to_owned(), KeyKind::X25519),
    ];
    files.extend(
        manifest
            .retired_mail
            .iter()
            .map(|r| (retired_mail_file(r.generation), KeyKind::X25519)),
    );
    files
}

fn staged(folder: &Path, file: &str) -> PathBuf {
    folder.join(format!("{file}.{STAGED}"))
}

fn sync_dir(folder: &Path) -> Result<(), CustodyError> {
    crate::store::sync_dir(folder).map_err(io(folder))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CustodyError + '_ {
    move |source| CustodyError::Io {
        path: path.to_owned(),
        source,
    }
}

/// At a host's open, before its keys are read: finishes a lock a crash interrupted
/// after its commit, or discards one interrupted before it. What it did, if anything.
pub fn finish_lock(dir: &Path) -> Result<Option<String>, CustodyError> {
    let folder = dir.join(KEYS_DIR);
    let manifest = manifest(dir)?;
    let files = evidence_files(&manifest);
    let committed = folder.join(RELOCK_FILE).exists();
    let mut touched = false;
    for (file, _) in &files {
        let from = staged(&folder, file);
        if !from.exists() {
            continue;
        }
        touched = true;
        let to = folder.join(file);
        if committed {
            std::fs::rename(&from, &to).map_err(io(&to))?;
        } else {
            std::fs::remove_file(&from).map_err(io(&from))?;
        }
    }
    if !committed {
        if touched {
            sync_dir(&folder)?;
            return Ok(Some(
                "discarded a custody lock a stop interrupted before its commit: the keys and passphrase before it stay".to_owned(),
            ));
        }
        return Ok(None);
    }
    complete(&folder)?;
    Ok(Some(
        "completed a custody lock a stop interrupted after its commit: the new passphrase unlocks"
            .to_owned(),
    ))
}

/// The lock's last steps: `keys/locked` written, `keys/relock` removed, synced.
fn complete(folder: &Path) -> Result<(), CustodyError> {
    write_private(
        &folder.join(LOCKED_FILE),
        b"signing.key, mail.key and mail.key.N are encrypted PKCS#8 (scrypt, AES-256-GCM)\n",
    )?;
    let relock = folder.join(RELOCK_FILE);
    std::fs::remove_file(&relock).map_err(io(&relock))?;
    sync_dir(folder)
}

/// The passphrase in `file` (a passphrase file, `/dev/fd/N`, a systemd credential):
/// UTF-8, one trailing newline (`\n` or `\r\n`) dropped, not empty, at most
/// `CUSTODY_PASSPHRASE_BYTES_MAX` bytes (no more is read).
pub fn read_passphrase_file(file: &Path) -> Result<zeroize::Zeroizing<String>, CustodyError> {
    use crate::limits::CUSTODY_PASSPHRASE_BYTES_MAX;
    use std::io::Read;
    let mut bytes = zeroize::Zeroizing::new(Vec::new());
    std::fs::File::open(file)
        .and_then(|f| {
            f.take(CUSTODY_PASSPHRASE_BYTES_MAX as u64 + 2)
                .read_to_end(&mut bytes)
        })
        .map_err(io(file))?;
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Err(CustodyError::Passphrase(format!(
            "{} is not UTF-8 text",
            file.display()
        )));
    };
    let text = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text);
    if text.len() > CUSTODY_PASSPHRASE_BYTES_MAX {
        return Err(CustodyError::Passphrase(format!(
            "the one in {} is longer than CUSTODY_PASSPHRASE_BYTES_MAX ({CUSTODY_PASSPHRASE_BYTES_MAX} bytes)",
            file.display()
        )));
    }
    if text.is_empty() {
        return Err(CustodyError::Passphrase(format!(
            "{} is empty",
            file.display()
        )));
    }
    Ok(zeroize::Zeroizing::new(text.to_owned()))
}

impl Custody {
    /// Unlocks a custody opened locked: finishes a rotation a crash left waiting for
    /// the passphrase, decrypts every key with `passphrase` and checks it against the
    /// manifest, then installs the keys in this custody and every clone of it. A wrong
    /// passphrase changes nothing. What was done, one line each.
    pub fn unlock(&self, passphrase: &[u8]) -> Result<Vec<String>, CustodyError> {
        let done = finish_rotation(&self.dir, Some(passphrase))?;
        let opened = open(&self.dir, Some(passphrase))?;
        if opened.is_locked() {
            // Only an encrypted file without its passphrase leaves a custody locked.
            return Err(CustodyError::Locked {
                dir: self.dir.as_ref().clone(),
            });
        }
        self.replace(opened);
        Ok(done)
    }

    /// Locks the custody at rest: the signing key, the mail key and every retired mail
    /// key rewritten encrypted under `passphrase` — the same secrets: fingerprints
    /// unchanged — all or nothing (the module's steps), then `keys/locked`. The
    /// running keys stay in use; the next start needs the passphrase. Locking a locked
    /// custody again changes its passphrase. Refused while locked, and for a passphrase
    /// shorter than `CUSTODY_PASSPHRASE_BYTES_MIN`. The files rewritten.
    /// `failpoints`: `custody-lock-before-commit`, `custody-lock-midway`.
    pub fn lock(
        &self,
        passphrase: &[u8],
        failpoints: &Failpoints,
    ) -> Result<Vec<String>, CustodyError> {
        use crate::limits::{CUSTODY_PASSPHRASE_BYTES_MAX, CUSTODY_PASSPHRASE_BYTES_MIN};
        if passphrase.len() < CUSTODY_PASSPHRASE_BYTES_MIN {
            return Err(CustodyError::Passphrase(format!(
                "it is {} bytes, fewer than {CUSTODY_PASSPHRASE_BYTES_MIN} (CUSTODY_PASSPHRASE_BYTES_MIN)",
                passphrase.len()
            )));
        }
        if passphrase.len() > CUSTODY_PASSPHRASE_BYTES_MAX {
            return Err(CustodyError::Passphrase(format!(
                "it is more than {CUSTODY_PASSPHRASE_BYTES_MAX} bytes (CUSTODY_PASSPHRASE_BYTES_MAX)"
            )));
        }
        let keys = self.keys();
        if keys.signing.is_none() {
            return Err(CustodyError::Locked {
                dir: self.dir.as_ref().clone(),
            });
        }
        let dir = self.dir.as_ref();
        let folder = dir.join(KEYS_DIR);
        crate::store::ensure_private_dir(&folder)?;
        let current = keys.passphrase.as_deref().map(Vec::as_slice);
        let files = evidence_files(&keys.manifest);
        for (file, kind) in &files {
            let secret = read_secret(&folder.join(file), *kind, current)?;
            write_key_as(&staged(&folder, file), *kind, &secret, Some(passphrase))?;
        }
        failpoints.abort_if_armed(Failpoint::CustodyLockBeforeCommit);
        // Synced with its directory: the staged keys are committed.
        write_private(&folder.join(RELOCK_FILE), b"staged keys replace the keys\n")?;
        for (file, _) in &files {
            let to = folder.join(file);
            std::fs::rename(staged(&folder, file), &to).map_err(io(&to))?;
            failpoints.abort_if_armed(Failpoint::CustodyLockMidway);
        }
        complete(&folder)?;
        let opened = open(dir, Some(passphrase))?;
        self.replace(opened);
        Ok(files.into_iter().map(|(file, _)| file).collect())
    }
}
