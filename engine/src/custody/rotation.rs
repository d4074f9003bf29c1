//! Rotating the signing and mail keys, crash-safely (docs/custody.md, "Rotation").
//!
//! The steps, each durable before the next: the new secret written to `KEY.next`
//! (synced) — for the mail key, also the old secret kept as `mail.key.N` (open-only) —
//! then the manifest naming the new key (synced), then the rename over `KEY` (the
//! directory synced). A host opening finds where a crash left it ([`finish_rotation`]):
//! a `.next` the manifest names is renamed into place — the rotation completes; a
//! `.next` the manifest does not name is removed — the old generation stays. Anything
//! else (a key matching neither) is refused by `verify`, never guessed.
//!
//! In a locked custody the signing and mail keys (the staged one and the kept old mail
//! secret too) are written encrypted under the passphrase the custody was unlocked
//! with; a rotation a crash interrupted there finishes at unlock, when the passphrase
//! is known ([`finish_rotation`] without one leaves it waiting).

use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use x25519_dalek::StaticSecret;

use super::keyfile::KeyKind;
use super::{
    CustodyError, KEYS_DIR, MAIL_KEY_FILE, Manifest, RetiredKey, RetiredMailKey, RetiredTlsKey,
    SIGNING_KEY_FILE, TLS_KEY_FILE, encrypted_at_rest, mail_fingerprint, manifest, open,
    random_secret, read_secret, retired_mail_file, retired_tls_file, signing_fingerprint,
    write_key_as, write_manifest,
};
use crate::store::{Failpoint, Failpoints};

/// A key that rotates on its own generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rotating {
    /// Ed25519: retired keys verify only.
    Signing,
    /// X25519: retired keys open only.
    Mail,
    /// Ed25519, the TLS identity: a retired key is offered only until every
    /// membership certifies the new one (then its secret is removed).
    Tls,
}

impl Rotating {
    pub const ALL: [Rotating; 3] = [Rotating::Signing, Rotating::Mail, Rotating::Tls];

    pub fn name(self) -> &'static str {
        match self {
            Rotating::Signing => "signing",
            Rotating::Mail => "mail",
            Rotating::Tls => "tls",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Rotating::Signing => SIGNING_KEY_FILE,
            Rotating::Mail => MAIL_KEY_FILE,
            Rotating::Tls => TLS_KEY_FILE,
        }
    }

    fn kind(self) -> KeyKind {
        match self {
            Rotating::Signing | Rotating::Tls => KeyKind::Ed25519,
            Rotating::Mail => KeyKind::X25519,
        }
    }

    /// The generation `manifest` holds of this key.
    pub fn generation(self, manifest: &Manifest) -> u32 {
        match self {
            Rotating::Signing => manifest.generation,
            Rotating::Mail => manifest.mail_generation,
            Rotating::Tls => manifest.tls_generation,
        }
    }

    /// The public fingerprint of `secret` as the manifest writes it.
    fn fingerprint(self, secret: [u8; 32]) -> String {
        match self {
            Rotating::Signing | Rotating::Tls => {
                signing_fingerprint(&SigningKey::from_bytes(&secret).verifying_key())
            }
            Rotating::Mail => mail_fingerprint(&StaticSecret::from(secret)),
        }
    }

    fn current(self, manifest: &Manifest) -> &str {
        match self {
            Rotating::Signing => &manifest.signing,
            Rotating::Mail => &manifest.mail,
            Rotating::Tls => &manifest.tls,
        }
    }

    /// This key's retired generations in `manifest`, with their fingerprints.
    fn retired_keys(self, manifest: &Manifest) -> Vec<(u32, &str)> {
        match self {
            Rotating::Signing => manifest
                .retired
                .iter()
                .map(|r| (r.generation, r.signing.as_str()))
                .collect(),
            Rotating::Mail => manifest
                .retired_mail
                .iter()
                .map(|r| (r.generation, r.mail.as_str()))
                .collect(),
            Rotating::Tls => manifest
                .retired_tls
                .iter()
                .map(|r| (r.generation, r.tls.as_str()))
                .collect(),
        }
    }

    /// Whether `fingerprint` is a generation of this key `manifest` retired.
    fn retired(self, manifest: &Manifest, fingerprint: &str) -> bool {
        let current = self.generation(manifest);
        self.retired_keys(manifest)
            .iter()
            .any(|&(g, f)| f == fingerprint && g < current)
    }

    /// The file an old secret of this key is kept in after a rotation (`None`: the
    /// secret goes — a retired signing key only verifies).
    fn kept_file(self, generation: u32) -> Option<String> {
        match self {
            Rotating::Signing => None,
            Rotating::Mail => Some(retired_mail_file(generation)),
            Rotating::Tls => Some(retired_tls_file(generation)),
        }
    }

    /// Whether `manifest` names generation `generation` of this key as retired.
    fn names_retired(self, manifest: &Manifest, generation: u32) -> bool {
        self.retired_keys(manifest)
            .iter()
            .any(|&(g, _)| g == generation)
    }
}

/// The staging file of a rotation's new key.
fn next_path(dir: &Path, key: Rotating) -> PathBuf {
    dir.join(KEYS_DIR).join(format!("{}.next", key.file()))
}

fn sync_keys_dir(dir: &Path) -> Result<(), CustodyError> {
    let keys = dir.join(KEYS_DIR);
    std::fs::File::open(&keys)
        .and_then(|d| d.sync_all())
        .map_err(|source| CustodyError::Io { path: keys, source })
}

/// Keeps the old secret of `key` (generation `from`) in its own file, before any
/// manifest names the new one: values sealed to an old mail key still open, and an old
/// TLS key serves until the new one is certified.
fn keep_old(dir: &Path, key: Rotating, from: u32, lock: Option<&[u8]>) -> Result<(), CustodyError> {
    let keys = dir.join(KEYS_DIR);
    let file = key.kept_file(from).expect("a kept key");
    let old = read_secret(&keys.join(key.file()), key.kind(), lock)?;
    write_key_as(&keys.join(file), key.kind(), &old, lock)
}

/// Rotates `key` to `generation`: a new key, the old one kept in the manifest as
/// retired (signing: verify-only; mail: its secret kept in `mail.key.N`, open-only).
/// Rotating to the current generation is a no-op. `passphrase`: what a locked custody
/// was unlocked with (its new signing or mail key is written encrypted under it).
/// `failpoints`: `rotation-before-manifest`, `rotation-before-rename`.
pub fn rotate(
    dir: &Path,
    key: Rotating,
    generation: u32,
    passphrase: Option<&[u8]>,
    failpoints: &Failpoints,
) -> Result<Manifest, CustodyError> {
    let current = open(dir, passphrase)?;
    if current.is_locked() {
        return Err(CustodyError::Locked {
            dir: dir.to_owned(),
        });
    }
    // The TLS key is never encrypted; the others are in a locked custody.
    let lock = passphrase.filter(|_| key != Rotating::Tls && encrypted_at_rest(dir));
    let mut manifest = current.manifest();
    let from = key.generation(&manifest);
    if generation == from {
        return Ok(manifest);
    }
    if generation < from {
        return Err(CustodyError::GenerationNotGrowing {
            key: key.name(),
            from,
            to: generation,
        });
    }
    let keys = dir.join(KEYS_DIR);
    let secret = random_secret()?;
    let staged = next_path(dir, key);
    write_key_as(&staged, key.kind(), &secret, lock)?;
    match key {
        Rotating::Signing => {
            manifest.retired.push(RetiredKey {
                generation: from,
                signing: manifest.signing.clone(),
            });
            manifest.generation = generation;
            manifest.signing = key.fingerprint(secret);
        }
        Rotating::Mail => {
            keep_old(dir, key, from, lock)?;
            manifest.retired_mail.push(RetiredMailKey {
                generation: from,
                mail: manifest.mail.clone(),
            });
            manifest.mail_generation = generation;
            manifest.mail = key.fingerprint(secret);
        }
        Rotating::Tls => {
            keep_old(dir, key, from, lock)?;
            manifest.retired_tls.push(RetiredTlsKey {
                generation: from,
                tls: manifest.tls.clone(),
            });
            manifest.tls_generation = generation;
            manifest.tls = key.fingerprint(secret);
        }
    }
    failpoints.abort_if_armed(Failpoint::RotationBeforeManifest);
    write_manifest(dir, &manifest)?;
    failpoints.abort_if_armed(Failpoint::RotationBeforeRename);
    let path = keys.join(key.file());
    std::fs::rename(&staged, &path).map_err(|source| CustodyError::Io { path, source })?;
    sync_keys_dir(dir)?;
    Ok(manifest)
}

/// At a host's open, before its keys are verified (and at unlock, with the passphrase):
/// finishes each rotation a crash interrupted. What it did, one line per key (empty
/// when no rotation was under way). An encrypted key without `passphrase` waits.
pub fn finish_rotation(dir: &Path, passphrase: Option<&[u8]>) -> Result<Vec<String>, CustodyError> {
    let mut done = Vec::new();
    for key in Rotating::ALL {
        match finish(dir, key, passphrase) {
            Ok(Some(what)) => done.push(what),
            Ok(None) => {}
            Err(CustodyError::Locked { .. }) => done.push(format!(
                "the rotation of the {} key a stop interrupted finishes when the custody is unlocked",
                key.name()
            )),
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn finish(
    dir: &Path,
    key: Rotating,
    passphrase: Option<&[u8]>,
) -> Result<Option<String>, CustodyError> {
    let staged = next_path(dir, key);
    if !staged.exists() {
        return Ok(None);
    }
    let manifest = manifest(dir)?;
    let next = key.fingerprint(read_secret(&staged, key.kind(), passphrase)?);
    let path = dir.join(KEYS_DIR).join(key.file());
    let current = key.fingerprint(read_secret(&path, key.kind(), passphrase)?);
    let generation = key.generation(&manifest);
    let name = key.name();
    if next == key.current(&manifest) {
        // The manifest was written: the rotation completes — if the key in place is
        // the one it retired (anything else is refused by `verify`, untouched).
        if !key.retired(&manifest, &current) {
            return Ok(None);
        }
        std::fs::rename(&staged, &path).map_err(|source| CustodyError::Io {
            path: path.clone(),
            source,
        })?;
        sync_keys_dir(dir)?;
        return Ok(Some(format!(
            "completed the rotation of the {name} key to generation {generation} (the manifest named the new key)"
        )));
    }
    if current == key.current(&manifest) {
        // The manifest was not written: the old generation stays (and the copy of
        // the old mail secret made for it goes, unless the manifest names it).
        let remove = |path: &Path| {
            std::fs::remove_file(path).map_err(|source| CustodyError::Io {
                path: path.to_owned(),
                source,
            })
        };
        remove(&staged)?;
        if let Some(file) = key.kept_file(generation)
            && !key.names_retired(&manifest, generation)
        {
            let copy = dir.join(KEYS_DIR).join(file);
            if copy.exists() {
                remove(&copy)?;
            }
        }
        sync_keys_dir(dir)?;
        return Ok(Some(format!(
            "discarded an unfinished rotation of the {name} key: generation {generation} kept (the manifest did not name the new key)"
        )));
    }
    Ok(None)
}
