//! Key custody (SPEC C2, §1.6): a host's keys and the manifest of their public
//! fingerprints. The only module that reads or writes key files.
//!
//! ```text
//! DIR/keys/            0700
//!   signing.key        0600  Ed25519 secret, PEM PKCS#8 v1, current generation
//!   mail.key           0600  X25519 secret, PEM PKCS#8 v1
//!   tls.key            0600  Ed25519 secret for the TLS identity, PEM PKCS#8 v1
//!   custody.toml       0600  manifest: generation and every public fingerprint,
//!                            retired signing keys (verify-only) included
//! ```
//! The `sources` profile adds the OPC UA application certificate (`opcua.rs`:
//! `opcua-cert.der`, `opcua-key.pem`, `opcua.toml`, each 0600).
//! Key files written before are 64 hexadecimal digits: still read, rewritten as PEM
//! only by [`rewrite_as_pem`] (the `~ keys H (rewrite as PEM)` transition).
//!
//! Invariants:
//! - a key whose public half differs from the manifest is *replaced* and refuses the
//!   host (never "re-trusted"); a missing key refuses; weaker permissions refuse;
//! - rotation never deletes a public key: the old signing key is kept in the manifest as
//!   retired, so what it signed still verifies, and it cannot sign again;
//! - secrets are generated from the operating system's random source only.

use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use x25519_dalek::{PublicKey as MailPublicKey, StaticSecret};

pub mod keyfile;
pub mod membership;
pub mod opcua;
mod rotation;
pub mod seal;

pub use keyfile::{KeyFormat, KeyKind};

/// The keys directory inside a host installation.
pub const KEYS_DIR: &str = "keys";
pub const SIGNING_KEY_FILE: &str = "signing.key";
pub const MAIL_KEY_FILE: &str = "mail.key";
pub const TLS_KEY_FILE: &str = "tls.key";
pub const MANIFEST_FILE: &str = "custody.toml";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CustodyError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("key {path} is missing; refusing to run without it (the manifest names it)")]
    MissingKey { path: PathBuf },
    #[error(
        "key {path} was replaced: its public key is {found}, the custody manifest says {expected}; refusing to trust it"
    )]
    ReplacedKey {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("{path} is not a key: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error("the random source failed: {0}")]
    Random(String),
    #[error("cannot rotate signing keys from generation {from} to {to}: generations only grow")]
    GenerationNotGrowing { from: u32, to: u32 },
    #[error(transparent)]
    Private(#[from] crate::store::PrivateDirError),
}

/// The key files of a custody, each with its algorithm, in the order they are checked.
pub const KEY_FILES: [(&str, KeyKind); 3] = [
    (SIGNING_KEY_FILE, KeyKind::Ed25519),
    (MAIL_KEY_FILE, KeyKind::X25519),
    (TLS_KEY_FILE, KeyKind::Ed25519),
];

/// The manifest of public fingerprints (`keys/custody.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The current signing-key generation (1 for the first).
    pub generation: u32,
    /// `ed25519:<hex>` of the current signing key.
    pub signing: String,
    /// `x25519:<hex>` of the mail key.
    pub mail: String,
    /// `ed25519:<hex>` of the TLS key.
    pub tls: String,
    /// Signing keys of earlier generations: verify-only.
    #[serde(default)]
    pub retired: Vec<RetiredKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredKey {
    pub generation: u32,
    pub signing: String,
}

/// A host's verified keys.
#[derive(Clone)]
pub struct Custody {
    pub manifest: Manifest,
    signing: SigningKey,
    mail: StaticSecret,
}

impl std::fmt::Debug for Custody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Custody")
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

/// An owner's Ed25519 signature over an answer (or a run's outcome), made when the
/// answer was first given and retained with it: it verifies offline with the owner's
/// public key of that generation, also after rotation or revocation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AnswerSignature {
    /// The host that answered.
    pub host: String,
    /// Its signing-key generation.
    pub generation: u32,
    /// 64 bytes, hex.
    pub signature: String,
}

/// 32 bytes from 64 hexadecimal digits (surrounding white space ignored).
pub(crate) fn unhex(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut out).ok()?;
    Some(out)
}

fn random_secret() -> Result<[u8; 32], CustodyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| CustodyError::Random(e.to_string()))?;
    Ok(seed)
}

fn signing_fingerprint(key: &VerifyingKey) -> String {
    format!("ed25519:{}", hex::encode(key.as_bytes()))
}

fn mail_fingerprint(secret: &StaticSecret) -> String {
    format!(
        "x25519:{}",
        hex::encode(MailPublicKey::from(secret).as_bytes())
    )
}

/// Writes `bytes` to `path` 0600, synced, replacing it atomically (a private file of
/// an installation: keys, certificates, `host.toml`).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CustodyError> {
    crate::store::write_private(path, bytes).map_err(|source| CustodyError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Writes a 32-byte secret of `kind` to `path` as a PEM PKCS#8 v1 key file (0600,
/// synced, atomically).
fn write_key(path: &Path, kind: KeyKind, secret: &[u8; 32]) -> Result<(), CustodyError> {
    write_private(path, keyfile::encode_pem(kind, secret).as_bytes())
}

/// The secret of `kind` in key file `path` (PEM PKCS#8, or the older hex) and its
/// format.
pub fn read_key(
    path: &Path,
    kind: KeyKind,
) -> Result<(zeroize::Zeroizing<[u8; 32]>, KeyFormat), CustodyError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CustodyError::MissingKey {
                path: path.to_owned(),
            });
        }
        Err(source) => {
            return Err(CustodyError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let text = zeroize::Zeroizing::new(text);
    keyfile::decode(kind, &text).map_err(|reason| CustodyError::Malformed {
        path: path.to_owned(),
        reason,
    })
}

fn read_secret(path: &Path, kind: KeyKind) -> Result<[u8; 32], CustodyError> {
    read_key(path, kind).map(|(secret, _)| *secret)
}

fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), CustodyError> {
    let text = toml::to_string(manifest).expect("manifests serialize");
    write_private(&manifest_path(dir), text.as_bytes())
}

fn manifest_path(dir: &Path) -> PathBuf {
    dir.join(KEYS_DIR).join(MANIFEST_FILE)
}

/// Whether `dir` holds a key custody (a manifest).
pub fn exists(dir: &Path) -> bool {
    manifest_path(dir).exists()
}

/// Reads the manifest alone (public fingerprints; no secret is read).
pub fn manifest(dir: &Path) -> Result<Manifest, CustodyError> {
    let path = manifest_path(dir);
    let text = std::fs::read_to_string(&path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => CustodyError::MissingKey { path: path.clone() },
        _ => CustodyError::Io {
            path: path.clone(),
            source,
        },
    })?;
    toml::from_str(&text).map_err(|e| CustodyError::Malformed {
        path,
        reason: e.to_string(),
    })
}

/// Creates a host's keys and manifest in `dir/keys` (0700). Refuses to overwrite an
/// existing custody.
pub fn create(dir: &Path) -> Result<Manifest, CustodyError> {
    let keys = dir.join(KEYS_DIR);
    std::fs::create_dir_all(&keys).map_err(|source| CustodyError::Io {
        path: keys.clone(),
        source,
    })?;
    std::fs::set_permissions(&keys, std::os::unix::fs::PermissionsExt::from_mode(0o700)).map_err(
        |source| CustodyError::Io {
            path: keys.clone(),
            source,
        },
    )?;
    if exists(dir) {
        return manifest(dir);
    }
    let signing = SigningKey::from_bytes(&random_secret()?);
    let mail = StaticSecret::from(random_secret()?);
    let tls = SigningKey::from_bytes(&random_secret()?);
    write_key(
        &keys.join(SIGNING_KEY_FILE),
        KeyKind::Ed25519,
        &signing.to_bytes(),
    )?;
    write_key(&keys.join(MAIL_KEY_FILE), KeyKind::X25519, mail.as_bytes())?;
    write_key(&keys.join(TLS_KEY_FILE), KeyKind::Ed25519, &tls.to_bytes())?;
    let manifest = Manifest {
        generation: 1,
        signing: signing_fingerprint(&signing.verifying_key()),
        mail: mail_fingerprint(&mail),
        tls: signing_fingerprint(&tls.verifying_key()),
        retired: Vec::new(),
    };
    // The manifest last: a custody without one is not a custody yet.
    write_manifest(dir, &manifest)?;
    Ok(manifest)
}

/// Reads every key and checks it against the manifest.
pub fn verify(dir: &Path) -> Result<Custody, CustodyError> {
    let manifest = manifest(dir)?;
    let keys = dir.join(KEYS_DIR);
    let check = |file: &str, found: String, expected: &str| {
        if found == expected {
            Ok(())
        } else {
            Err(CustodyError::ReplacedKey {
                path: keys.join(file),
                expected: expected.to_owned(),
                found,
            })
        }
    };
    let signing = SigningKey::from_bytes(&read_secret(
        &keys.join(SIGNING_KEY_FILE),
        KeyKind::Ed25519,
    )?);
    check(
        SIGNING_KEY_FILE,
        signing_fingerprint(&signing.verifying_key()),
        &manifest.signing,
    )?;
    let mail = StaticSecret::from(read_secret(&keys.join(MAIL_KEY_FILE), KeyKind::X25519)?);
    check(MAIL_KEY_FILE, mail_fingerprint(&mail), &manifest.mail)?;
    let tls = SigningKey::from_bytes(&read_secret(&keys.join(TLS_KEY_FILE), KeyKind::Ed25519)?);
    check(
        TLS_KEY_FILE,
        signing_fingerprint(&tls.verifying_key()),
        &manifest.tls,
    )?;
    Ok(Custody {
        manifest,
        signing,
        mail,
    })
}

/// The TLS key's secret, after the whole custody verifies (for the transport only).
pub fn tls_secret(dir: &Path) -> Result<[u8; 32], CustodyError> {
    verify(dir)?;
    read_secret(&dir.join(KEYS_DIR).join(TLS_KEY_FILE), KeyKind::Ed25519)
}

/// The names of `dir`'s key files still in the older hex form (none for a custody
/// made by this build). Reads the files; verifies nothing.
pub fn legacy_key_files(dir: &Path) -> Result<Vec<String>, CustodyError> {
    let keys = dir.join(KEYS_DIR);
    let mut legacy = Vec::new();
    for (file, kind) in KEY_FILES {
        if read_key(&keys.join(file), kind)?.1 == KeyFormat::Hex {
            legacy.push(file.to_owned());
        }
    }
    Ok(legacy)
}

/// Rewrites each of `dir`'s key files still in hex as PEM PKCS#8 v1 — the same
/// secret, so every fingerprint and identity is unchanged — and returns their names.
/// Each file is replaced atomically (a synced temporary file renamed over it, 0600,
/// then the directory synced). The whole custody must verify against its manifest
/// before (else nothing is rewritten) and verifies again after; the keys directory
/// must be private. Idempotent: once every file is PEM, it rewrites nothing.
pub fn rewrite_as_pem(dir: &Path) -> Result<Vec<String>, CustodyError> {
    let keys = dir.join(KEYS_DIR);
    crate::store::ensure_private_dir(&keys)?;
    verify(dir)?;
    let mut rewritten = Vec::new();
    for (file, kind) in KEY_FILES {
        let path = keys.join(file);
        let (secret, format) = read_key(&path, kind)?;
        if format == KeyFormat::Hex {
            write_key(&path, kind, &secret)?;
            rewritten.push(file.to_owned());
        }
    }
    if !rewritten.is_empty() {
        std::fs::File::open(&keys)
            .and_then(|d| d.sync_all())
            .map_err(|source| CustodyError::Io {
                path: keys.clone(),
                source,
            })?;
    }
    verify(dir)?;
    Ok(rewritten)
}

pub use rotation::{finish_rotation, rotate};

impl Custody {
    /// Signs with the current signing key.
    pub fn sign(&self, message: &[u8]) -> (u32, Signature) {
        (self.manifest.generation, self.signing.sign(message))
    }

    /// Signs `message` with the current key: its generation and the 64-byte signature
    /// as lower-case hexadecimal.
    pub fn sign_hex(&self, message: &[u8]) -> (u32, String) {
        let (generation, signature) = self.sign(message);
        (generation, hex::encode(signature.to_bytes()))
    }

    /// `host`'s signature over an answer's signed bytes, retained with the answer.
    pub fn sign_answer(&self, host: &str, message: &[u8]) -> AnswerSignature {
        let (generation, signature) = self.sign_hex(message);
        AnswerSignature {
            host: host.to_owned(),
            generation,
            signature,
        }
    }

    pub fn mail_public(&self) -> MailPublicKey {
        MailPublicKey::from(&self.mail)
    }

    /// The current signing key, for signers that sign their own formats (receipts).
    pub(crate) fn signing_key(&self) -> &SigningKey {
        &self.signing
    }

    /// The mail secret, to open values sealed to this host.
    pub(crate) fn mail_secret(&self) -> &StaticSecret {
        &self.mail
    }
}

/// Verifies a signature made by generation `generation` of the signing keys that
/// `manifest` names, current or retired.
pub fn verify_signature(
    manifest: &Manifest,
    generation: u32,
    message: &[u8],
    signature: &Signature,
) -> bool {
    signing_key_of(manifest, generation).is_some_and(|key| key.verify(message, signature).is_ok())
}

/// The public signing key of generation `generation` that `manifest` names, current
/// or retired.
pub fn signing_key_of(manifest: &Manifest, generation: u32) -> Option<VerifyingKey> {
    let fingerprint = if generation == manifest.generation {
        Some(&manifest.signing)
    } else {
        manifest
            .retired
            .iter()
            .find(|r| r.generation == generation)
            .map(|r| &r.signing)
    };
    fingerprint
        .and_then(|f| f.strip_prefix("ed25519:"))
        .and_then(unhex)
        .and_then(|bytes| VerifyingKey::from_bytes(&bytes).ok())
}

/// The public mail key that `manifest` names.
pub fn mail_key_of(manifest: &Manifest) -> Option<MailPublicKey> {
    manifest
        .mail
        .strip_prefix("x25519:")
        .and_then(unhex)
        .map(MailPublicKey::from)
}

/// Verifies a hex signature (64 bytes) of `message` by generation `generation` of the
/// signing keys `manifest` names.
pub fn verify_hex_signature(
    manifest: &Manifest,
    generation: u32,
    message: &[u8],
    signature: &str,
) -> bool {
    let mut bytes = [0u8; 64];
    if hex::decode_to_slice(signature, &mut bytes).is_err() {
        return false;
    }
    verify_signature(
        manifest,
        generation,
        message,
        &Signature::from_bytes(&bytes),
    )
}

/// A statement a host signs once and anyone verifies offline with the signer's custody
/// manifest (public keys only): the text it signs, and the generation and hex
/// signature it carries.
pub trait Signed {
    /// The exact bytes signed, a versioned text (`grid-…/1`).
    fn signed_bytes(&self) -> Vec<u8>;
    /// The signing-key generation and the hex signature.
    fn signature(&self) -> (u32, &str);

    /// Whether the signature verifies with `signer`'s manifest.
    fn verify(&self, signer: &Manifest) -> bool {
        let (generation, signature) = self.signature();
        verify_hex_signature(signer, generation, &self.signed_bytes(), signature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-custody-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn created_keys_verify_and_replaced_or_missing_keys_refuse() {
        let d = dir("verify");
        let manifest = create(&d).unwrap();
        assert_eq!(manifest.generation, 1);
        verify(&d).unwrap();
        // A replaced mail key.
        write_private(&d.join("keys/mail.key"), hex::encode([7u8; 32]).as_bytes()).unwrap();
        assert!(matches!(verify(&d), Err(CustodyError::ReplacedKey { .. })));
        std::fs::remove_file(d.join("keys/mail.key")).unwrap();
        assert!(matches!(verify(&d), Err(CustodyError::MissingKey { .. })));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Turns a custody's key files into the hex form Grid wrote before.
    fn as_hex(d: &Path) {
        for (file, kind) in KEY_FILES {
            let path = d.join(KEYS_DIR).join(file);
            let (secret, _) = read_key(&path, kind).unwrap();
            write_private(&path, hex::encode(*secret).as_bytes()).unwrap();
        }
    }

    fn openssl_reads(path: &Path) -> Result<(), String> {
        let output = std::process::Command::new("openssl")
            .args(["pkey", "-noout", "-in"])
            .arg(path)
            .output()
            .expect("openssl is installed");
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    #[test]
    fn created_keys_are_pem_pkcs8_that_openssl_reads() {
        let d = dir("pem");
        create(&d).unwrap();
        assert_eq!(legacy_key_files(&d).unwrap(), Vec::<String>::new());
        for (file, _) in KEY_FILES {
            let path = d.join(KEYS_DIR).join(file);
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{file}");
            openssl_reads(&path).unwrap_or_else(|e| panic!("openssl refuses {file}: {e}"));
        }
        // A rotated signing key is PEM too.
        rotate(&d, 2, &crate::store::Failpoints::default()).unwrap();
        openssl_reads(&d.join(KEYS_DIR).join(SIGNING_KEY_FILE)).unwrap();
        assert_eq!(legacy_key_files(&d).unwrap(), Vec::<String>::new());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn hex_keys_still_verify_and_rewrite_as_pem_keeps_every_fingerprint() {
        let d = dir("hex");
        let manifest = create(&d).unwrap();
        as_hex(&d);
        assert!(openssl_reads(&d.join(KEYS_DIR).join(TLS_KEY_FILE)).is_err());
        let before = verify(&d).unwrap();
        assert_eq!(
            before.manifest, manifest,
            "a hex installation still verifies"
        );
        let tls_before = tls_secret(&d).unwrap();
        assert_eq!(
            legacy_key_files(&d).unwrap(),
            ["signing.key", "mail.key", "tls.key"]
        );
        assert_eq!(
            rewrite_as_pem(&d).unwrap(),
            ["signing.key", "mail.key", "tls.key"]
        );
        assert_eq!(legacy_key_files(&d).unwrap(), Vec::<String>::new());
        let after = verify(&d).unwrap();
        assert_eq!(after.manifest, manifest, "fingerprints unchanged");
        assert_eq!(
            after.mail_public().as_bytes(),
            before.mail_public().as_bytes()
        );
        assert_eq!(
            tls_secret(&d).unwrap(),
            tls_before,
            "the TLS identity unchanged"
        );
        let (generation, signature) = after.sign(b"m");
        assert!(verify_signature(&manifest, generation, b"m", &signature));
        for (file, _) in KEY_FILES {
            let path = d.join(KEYS_DIR).join(file);
            openssl_reads(&path).unwrap_or_else(|e| panic!("openssl refuses {file}: {e}"));
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&path).unwrap().permissions(),
            );
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
        assert_eq!(
            rewrite_as_pem(&d).unwrap(),
            Vec::<String>::new(),
            "idempotent"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn rewrite_refuses_weak_permissions_and_replaced_keys_rewriting_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("rewrite-refusals");
        create(&d).unwrap();
        as_hex(&d);
        let signing = d.join(KEYS_DIR).join(SIGNING_KEY_FILE);
        std::fs::set_permissions(&signing, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            rewrite_as_pem(&d),
            Err(CustodyError::Private(
                crate::store::PrivateDirError::WeakPermissions { .. }
            ))
        ));
        let keys = d.join(KEYS_DIR);
        assert!(
            crate::store::ensure_private_dir(&keys).is_err(),
            "a host refuses too"
        );
        std::fs::set_permissions(&signing, std::fs::Permissions::from_mode(0o600)).unwrap();
        crate::store::ensure_private_dir(&keys).unwrap();
        // A replaced key: nothing is rewritten, the hex files stay as they were.
        write_private(
            &d.join(KEYS_DIR).join(MAIL_KEY_FILE),
            hex::encode([9u8; 32]).as_bytes(),
        )
        .unwrap();
        assert!(matches!(
            rewrite_as_pem(&d),
            Err(CustodyError::ReplacedKey { .. })
        ));
        assert_eq!(legacy_key_files(&d).unwrap().len(), 3);
        // The same with weak permissions on a PEM key: a host still refuses it.
        let pem = dir("pem-weak");
        create(&pem).unwrap();
        let tls = pem.join(KEYS_DIR).join(TLS_KEY_FILE);
        std::fs::set_permissions(&tls, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(crate::store::ensure_private_dir(&pem.join(KEYS_DIR)).is_err());
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&pem).unwrap();
    }

    #[test]
    fn rotation_keeps_old_signatures_verifying_and_never_goes_back() {
        let d = dir("rotate");
        create(&d).unwrap();
        let before = verify(&d).unwrap();
        let (generation, signature) = before.sign(b"grant 1");
        let manifest = rotate(&d, 2, &crate::store::Failpoints::default()).unwrap();
        assert_eq!(manifest.generation, 2);
        assert_eq!(manifest.retired.len(), 1);
        let after = verify(&d).unwrap();
        assert!(verify_signature(
            &manifest, generation, b"grant 1", &signature
        ));
        assert!(!verify_signature(
            &manifest, generation, b"grant 2", &signature
        ));
        let (g2, s2) = after.sign(b"grant 2");
        assert_eq!(g2, 2);
        assert!(verify_signature(&manifest, 2, b"grant 2", &s2));
        // The retired key does not verify new work under the new generation.
        assert!(!verify_signature(&manifest, 2, b"grant 1", &signature));
        assert!(matches!(
            rotate(&d, 1, &crate::store::Failpoints::default()),
            Err(CustodyError::GenerationNotGrowing { .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The two states a crash in a rotation can leave (rotation.rs): the host opens
    /// either way, with the old generation or the new, never a hand fix — and a key
    /// that is neither is still refused.
    #[test]
    fn an_interrupted_rotation_completes_or_keeps_the_old_generation() {
        let keys = |d: &Path| d.join(KEYS_DIR);
        let next = |d: &Path| keys(d).join(format!("{SIGNING_KEY_FILE}.next"));
        // Crashed before the manifest: the staged key is discarded.
        let d = dir("rotate-before-manifest");
        create(&d).unwrap();
        write_key(&next(&d), KeyKind::Ed25519, &random_secret().unwrap()).unwrap();
        let done = finish_rotation(&d).unwrap().unwrap();
        assert!(done.contains("generation 1 kept"), "{done}");
        assert!(!next(&d).exists());
        assert_eq!(verify(&d).unwrap().manifest.generation, 1);
        assert_eq!(finish_rotation(&d).unwrap(), None, "nothing under way");
        std::fs::remove_dir_all(&d).unwrap();
        // Crashed before the rename: the manifest names the staged key, the old one is
        // in place — the rotation completes.
        let d = dir("rotate-before-rename");
        create(&d).unwrap();
        let old = std::fs::read(keys(&d).join(SIGNING_KEY_FILE)).unwrap();
        let manifest = rotate(&d, 2, &crate::store::Failpoints::default()).unwrap();
        std::fs::rename(keys(&d).join(SIGNING_KEY_FILE), next(&d)).unwrap();
        write_private(&keys(&d).join(SIGNING_KEY_FILE), &old).unwrap();
        assert!(matches!(verify(&d), Err(CustodyError::ReplacedKey { .. })));
        let done = finish_rotation(&d).unwrap().unwrap();
        assert!(done.contains("generation 2"), "{done}");
        assert_eq!(verify(&d).unwrap().manifest, manifest);
        // A signing key that is neither the retired nor the new one: left for verify
        // to refuse.
        write_key(&next(&d), KeyKind::Ed25519, &random_secret().unwrap()).unwrap();
        write_key(
            &keys(&d).join(SIGNING_KEY_FILE),
            KeyKind::Ed25519,
            &random_secret().unwrap(),
        )
        .unwrap();
        assert_eq!(finish_rotation(&d).unwrap(), None);
        assert!(next(&d).exists(), "untouched");
        assert!(matches!(verify(&d), Err(CustodyError::ReplacedKey { .. })));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
