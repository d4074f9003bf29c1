//! Rotating the signing key, crash-safely (docs/custody.md, "Rotation").
//!
//! The steps, each durable before the next: the new secret written to
//! `signing.key.next` (synced), the manifest naming it (synced), then the rename over
//! `signing.key` (the directory synced). A host opening finds where a crash left it
//! ([`finish_rotation`]): a `.next` the manifest names is renamed into place — the
//! rotation completes; a `.next` the manifest does not name is removed — the old
//! generation stays. Anything else (a key matching neither) is refused by `verify`,
//! never guessed.

use std::path::Path;

use ed25519_dalek::SigningKey;

use super::keyfile::KeyKind;
use super::{
    CustodyError, KEYS_DIR, Manifest, RetiredKey, SIGNING_KEY_FILE, manifest, random_secret,
    read_secret, signing_fingerprint, verify, write_key, write_manifest,
};
use crate::store::{Failpoint, Failpoints};

/// The staging file of a rotation's new signing key.
fn next_path(dir: &Path) -> std::path::PathBuf {
    dir.join(KEYS_DIR).join(format!("{SIGNING_KEY_FILE}.next"))
}

fn sync_keys_dir(dir: &Path) -> Result<(), CustodyError> {
    let keys = dir.join(KEYS_DIR);
    std::fs::File::open(&keys)
        .and_then(|d| d.sync_all())
        .map_err(|source| CustodyError::Io { path: keys, source })
}

/// Rotates the signing key to `generation`: a new key, the old one kept in the
/// manifest as retired (verify-only). Rotating to the current generation is a no-op.
/// `failpoints`: `rotation-before-manifest`, `rotation-before-rename`.
pub fn rotate(
    dir: &Path,
    generation: u32,
    failpoints: &Failpoints,
) -> Result<Manifest, CustodyError> {
    let current = verify(dir)?;
    let from = current.manifest.generation;
    if generation == from {
        return Ok(current.manifest);
    }
    if generation < from {
        return Err(CustodyError::GenerationNotGrowing {
            from,
            to: generation,
        });
    }
    let next = SigningKey::from_bytes(&random_secret()?);
    let mut manifest = current.manifest.clone();
    manifest.retired.push(RetiredKey {
        generation: from,
        signing: manifest.signing.clone(),
    });
    manifest.generation = generation;
    manifest.signing = signing_fingerprint(&next.verifying_key());
    let staged = next_path(dir);
    write_key(&staged, KeyKind::Ed25519, &next.to_bytes())?;
    failpoints.abort_if_armed(Failpoint::RotationBeforeManifest);
    write_manifest(dir, &manifest)?;
    failpoints.abort_if_armed(Failpoint::RotationBeforeRename);
    let key = dir.join(KEYS_DIR).join(SIGNING_KEY_FILE);
    std::fs::rename(&staged, &key).map_err(|source| CustodyError::Io { path: key, source })?;
    sync_keys_dir(dir)?;
    Ok(manifest)
}

/// At a host's open, before its keys are verified: finishes a rotation a crash
/// interrupted. `Some(what it did)`, `None` when no rotation was under way.
pub fn finish_rotation(dir: &Path) -> Result<Option<String>, CustodyError> {
    let staged = next_path(dir);
    if !staged.exists() {
        return Ok(None);
    }
    let manifest = manifest(dir)?;
    let next = signing_fingerprint(
        &SigningKey::from_bytes(&read_secret(&staged, KeyKind::Ed25519)?).verifying_key(),
    );
    let key = dir.join(KEYS_DIR).join(SIGNING_KEY_FILE);
    let current = signing_fingerprint(
        &SigningKey::from_bytes(&read_secret(&key, KeyKind::Ed25519)?).verifying_key(),
    );
    if next == manifest.signing {
        // The manifest was written: the rotation completes — if the key in place is
        // the one it retired (anything else is refused by `verify`, untouched).
        let retired = manifest
            .retired
            .iter()
            .any(|r| r.signing == current && r.generation < manifest.generation);
        if !retired {
            return Ok(None);
        }
        std::fs::rename(&staged, &key).map_err(|source| CustodyError::Io {
            path: key.clone(),
            source,
        })?;
        sync_keys_dir(dir)?;
        return Ok(Some(format!(
            "completed the rotation of the signing key to generation {} (the manifest named the new key)",
            manifest.generation
        )));
    }
    if current == manifest.signing {
        // The manifest was not written: the old generation stays.
        std::fs::remove_file(&staged).map_err(|source| CustodyError::Io {
            path: staged.clone(),
            source,
        })?;
        sync_keys_dir(dir)?;
        return Ok(Some(format!(
            "discarded an unfinished rotation of the signing key: generation {} kept (the manifest did not name the new key)",
            manifest.generation
        )));
    }
    Ok(None)
}
