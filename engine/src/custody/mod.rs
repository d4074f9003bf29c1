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
//!   locked             0600  present once the custody is locked: signing.key,
//!                            mail.key and mail.key.N are then encrypted PKCS#8
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
//! - secrets are generated from the operating system's random source only;
//! - a locked custody's signing and mail keys are never written unencrypted, and one
//!   found unencrypted (or encrypted weakly) is refused by name; a custody opened
//!   without its passphrase holds no signing or mail secret, so it signs and opens
//!   nothing (`Custody::is_locked`; gridd then runs no room until it is unlocked).

use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use x25519_dalek::{PublicKey as MailPublicKey, StaticSecret};

pub mod book;
pub mod keyfile;
mod lock;
pub mod membership;
pub mod opcua;
mod rotation;
pub mod seal;
pub mod seal_context;

pub use keyfile::{KeyFormat, KeyKind};

/// The keys directory inside a host installation.
pub const KEYS_DIR: &str = "keys";
pub const SIGNING_KEY_FILE: &str = "signing.key";
pub const MAIL_KEY_FILE: &str = "mail.key";
pub const TLS_KEY_FILE: &str = "tls.key";
pub const MANIFEST_FILE: &str = "custody.toml";
/// Present once the custody is locked (docs/custody.md, "Locked custody").
pub const LOCKED_FILE: &str = "locked";

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
    #[error("cannot rotate the {key} key from generation {from} to {to}: generations only grow")]
    GenerationNotGrowing {
        key: &'static str,
        from: u32,
        to: u32,
    },
    #[error(transparent)]
    Private(#[from] crate::store::PrivateDirError),
    #[error(
        "the custody in {dir} is locked: its signing and mail keys are encrypted at rest and not unlocked (gridctl custody unlock HOST --passphrase-file FILE)"
    )]
    Locked { dir: PathBuf },
    #[error("the passphrase does not decrypt {path}: the custody stays locked")]
    WrongPassphrase { path: PathBuf },
    #[error("{path} is refused: {reason}")]
    WeakKey { path: PathBuf, reason: String },
    #[error("the passphrase is refused: {0}")]
    Passphrase(String),
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
    /// The current mail-key generation (1 for the first; absent in manifests made
    /// before mail keys rotated).
    #[serde(default = "first_generation", skip_serializing_if = "is_first")]
    pub mail_generation: u32,
    /// Mail keys of earlier generations: open-only (values sealed to them still open;
    /// nothing new is sealed to them). Their secrets are `keys/mail.key.N`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_mail: Vec<RetiredMailKey>,
    /// The current TLS-key generation (1 for the first).
    #[serde(default = "first_generation", skip_serializing_if = "is_first")]
    pub tls_generation: u32,
    /// TLS keys of earlier generations: never offered for a session once every
    /// membership certifies the current one. A retired key's secret
    /// (`keys/tls.key.N`) stays only while a membership's certificate still names it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired_tls: Vec<RetiredTlsKey>,
}

fn first_generation() -> u32 {
    1
}

fn is_first(generation: &u32) -> bool {
    *generation == 1
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredMailKey {
    pub generation: u32,
    pub mail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredTlsKey {
    pub generation: u32,
    pub tls: String,
}

impl Manifest {
    /// Every signing key this manifest names, by generation, current included.
    fn signing_keys(&self) -> impl Iterator<Item = (u32, &str)> {
        std::iter::once((self.generation, self.signing.as_str())).chain(
            self.retired
                .iter()
                .map(|r| (r.generation, r.signing.as_str())),
        )
    }

    /// Every mail key this manifest names, by generation, current included.
    fn mail_keys(&self) -> impl Iterator<Item = (u32, &str)> {
        std::iter::once((self.mail_generation, self.mail.as_str())).chain(
            self.retired_mail
                .iter()
                .map(|r| (r.generation, r.mail.as_str())),
        )
    }

    /// Whether `self` is a later state of the same custody as `earlier`: no generation
    /// lower, and every signing and mail key `earlier` names named again at the same
    /// generation (rotation keeps public keys; a replaced identity does not extend).
    pub fn extends(&self, earlier: &Manifest) -> bool {
        self.generation >= earlier.generation
            && self.mail_generation >= earlier.mail_generation
            && earlier
                .signing_keys()
                .all(|k| self.signing_keys().any(|m| m == k))
            && earlier
                .mail_keys()
                .all(|k| self.mail_keys().any(|m| m == k))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetiredKey {
    pub generation: u32,
    pub signing: String,
}

/// A host's verified keys, shared: every clone (each room holds one) sees a rotation
/// the moment [`Custody::replace`] installs it, so new work uses new keys at once.
#[derive(Clone)]
pub struct Custody {
    keys: std::sync::Arc<std::sync::RwLock<std::sync::Arc<Keys>>>,
    /// The installation, where peers' keys learned through memberships are read.
    dir: std::sync::Arc<PathBuf>,
    /// Those peers' keys as last read ([`book`]).
    book: std::sync::Arc<book::Cache>,
}

/// One verified state of a custody.
struct Keys {
    manifest: Manifest,
    /// `None`: locked (its file is encrypted and no passphrase was given).
    signing: Option<SigningKey>,
    /// `None`: locked.
    mail: Option<StaticSecret>,
    /// Earlier mail secrets, newest first: open-only (empty while locked).
    retired_mail: Vec<StaticSecret>,
    /// The passphrase a locked custody was unlocked with, kept while gridd runs so a
    /// rotation writes its new key encrypted too.
    passphrase: Option<zeroize::Zeroizing<Vec<u8>>>,
    /// Whether the key files are encrypted at rest (`keys/locked`).
    encrypted: bool,
}

impl std::fmt::Debug for Custody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Custody")
            .field("manifest", &self.keys().manifest)
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

/// The secret of `kind` in key file `path` (PEM PKCS#8, encrypted with `passphrase`,
/// or the older hex) and its format.
pub fn read_key(
    path: &Path,
    kind: KeyKind,
    passphrase: Option<&[u8]>,
) -> Result<(zeroize::Zeroizing<[u8; 32]>, KeyFormat), CustodyError> {
    let text = read_key_text(path)?;
    decode_key(path, kind, &text, passphrase)
}

/// A key file's text.
fn read_key_text(path: &Path) -> Result<zeroize::Zeroizing<String>, CustodyError> {
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
    Ok(zeroize::Zeroizing::new(text))
}

/// [`keyfile::decode`] of `path`'s text, its refusals named by `path`.
fn decode_key(
    path: &Path,
    kind: KeyKind,
    text: &str,
    passphrase: Option<&[u8]>,
) -> Result<(zeroize::Zeroizing<[u8; 32]>, KeyFormat), CustodyError> {
    keyfile::decode(kind, text, passphrase).map_err(|e| match e {
        keyfile::DecodeError::Encrypted => CustodyError::Locked {
            dir: path
                .parent()
                .and_then(Path::parent)
                .unwrap_or(path)
                .to_owned(),
        },
        keyfile::DecodeError::WrongPassphrase => CustodyError::WrongPassphrase {
            path: path.to_owned(),
        },
        keyfile::DecodeError::Weak(reason) => CustodyError::WeakKey {
            path: path.to_owned(),
            reason: format!("a locked custody's key must be strongly encrypted: {reason}"),
        },
        keyfile::DecodeError::Malformed(reason) => CustodyError::Malformed {
            path: path.to_owned(),
            reason,
        },
    })
}

fn read_secret(
    path: &Path,
    kind: KeyKind,
    passphrase: Option<&[u8]>,
) -> Result<[u8; 32], CustodyError> {
    read_key(path, kind, passphrase).map(|(secret, _)| *secret)
}

/// Whether `dir`'s custody is locked: its signing and mail keys encrypted at rest.
pub fn encrypted_at_rest(dir: &Path) -> bool {
    dir.join(KEYS_DIR).join(LOCKED_FILE).exists()
}

/// Writes a 32-byte secret of `kind` to `path`: encrypted under `passphrase` when one
/// is given (a locked custody's signing and mail keys), else PEM PKCS#8 v1.
fn write_key_as(
    path: &Path,
    kind: KeyKind,
    secret: &[u8; 32],
    passphrase: Option<&[u8]>,
) -> Result<(), CustodyError> {
    match passphrase {
        None => write_key(path, kind, secret),
        Some(passphrase) => {
            let text = keyfile::encode_encrypted_pem(kind, secret, passphrase)
                .map_err(CustodyError::Random)?;
            write_private(path, text.as_bytes())
        }
    }
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
        mail_generation: 1,
        retired_mail: Vec::new(),
        tls_generation: 1,
        retired_tls: Vec::new(),
    };
    // The manifest last: a custody without one is not a custody yet.
    write_manifest(dir, &manifest)?;
    Ok(manifest)
}

/// Reads every key and checks it against the manifest. A locked custody opens locked
/// (no signing or mail secret; [`Custody::unlock`]).
pub fn verify(dir: &Path) -> Result<Custody, CustodyError> {
    open(dir, None)
}

/// Reads every key — a locked custody's encrypted ones with `passphrase` — and checks
/// it against the manifest. Without the passphrase a locked custody opens locked: its
/// encrypted files are checked for how they are encrypted (a weak one refuses) but
/// not decrypted; an unencrypted signing or mail key in a locked custody refuses.
pub fn open(dir: &Path, passphrase: Option<&[u8]>) -> Result<Custody, CustodyError> {
    let manifest = manifest(dir)?;
    let keys = dir.join(KEYS_DIR);
    let encrypted = encrypted_at_rest(dir);
    // Each evidence key's secret, `None` while encrypted and no passphrase is given.
    let evidence = |file: &str, kind: KeyKind| -> Result<Option<[u8; 32]>, CustodyError> {
        let path = keys.join(file);
        let text = read_key_text(&path)?;
        if encrypted && !keyfile::is_encrypted(&text) {
            return Err(CustodyError::WeakKey {
                path,
                reason: format!(
                    "the custody is locked ({KEYS_DIR}/{LOCKED_FILE}) but this key is stored unencrypted"
                ),
            });
        }
        match decode_key(&path, kind, &text, passphrase) {
            Ok((secret, _)) => Ok(Some(*secret)),
            Err(CustodyError::Locked { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
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
    let signing = evidence(SIGNING_KEY_FILE, KeyKind::Ed25519)?.map(|s| SigningKey::from_bytes(&s));
    if let Some(signing) = &signing {
        check(
            SIGNING_KEY_FILE,
            signing_fingerprint(&signing.verifying_key()),
            &manifest.signing,
        )?;
    }
    let mail = evidence(MAIL_KEY_FILE, KeyKind::X25519)?.map(StaticSecret::from);
    if let Some(mail) = &mail {
        check(MAIL_KEY_FILE, mail_fingerprint(mail), &manifest.mail)?;
    }
    let tls = SigningKey::from_bytes(&read_secret(
        &keys.join(TLS_KEY_FILE),
        KeyKind::Ed25519,
        None,
    )?);
    check(
        TLS_KEY_FILE,
        signing_fingerprint(&tls.verifying_key()),
        &manifest.tls,
    )?;
    let mut retired_mail = Vec::with_capacity(manifest.retired_mail.len());
    for retired in manifest.retired_mail.iter().rev() {
        let file = retired_mail_file(retired.generation);
        if let Some(secret) = evidence(&file, KeyKind::X25519)?.map(StaticSecret::from) {
            check(&file, mail_fingerprint(&secret), &retired.mail)?;
            retired_mail.push(secret);
        }
    }
    let locked = signing.is_none() || mail.is_none();
    if locked {
        // Some keys may be unencrypted (a lock a crash interrupted): none is used.
        retired_mail.clear();
    }
    // A retired TLS secret is kept only while a certificate names it: absent is fine.
    for retired in &manifest.retired_tls {
        let file = retired_tls_file(retired.generation);
        if keys.join(&file).exists() {
            let secret =
                SigningKey::from_bytes(&read_secret(&keys.join(&file), KeyKind::Ed25519, None)?);
            check(
                &file,
                signing_fingerprint(&secret.verifying_key()),
                &retired.tls,
            )?;
        }
    }
    Ok(Custody {
        keys: std::sync::Arc::new(std::sync::RwLock::new(std::sync::Arc::new(Keys {
            manifest,
            signing: signing.filter(|_| !locked),
            mail: mail.filter(|_| !locked),
            retired_mail,
            passphrase: passphrase
                .filter(|_| !locked)
                .map(|p| zeroize::Zeroizing::new(p.to_vec())),
            encrypted,
        }))),
        dir: std::sync::Arc::new(dir.to_owned()),
        book: std::sync::Arc::default(),
    })
}

/// The file of a retired mail key's secret (`mail.key.N`), kept open-only.
pub fn retired_mail_file(generation: u32) -> String {
    format!("{MAIL_KEY_FILE}.{generation}")
}

/// The TLS secret whose public key is `certified` (`ed25519:<hex>`, what a membership's
/// certificate names): the current key, or — between a TLS rotation and the new
/// certificate — the retired one it replaced, never another. After the whole custody
/// verifies (for the transport only).
pub fn tls_secret_for(dir: &Path, certified: &str) -> Result<[u8; 32], CustodyError> {
    let custody = verify(dir)?;
    let manifest = custody.manifest();
    let keys = dir.join(KEYS_DIR);
    let file = if certified == manifest.tls {
        TLS_KEY_FILE.to_owned()
    } else if let Some(retired) = manifest.retired_tls.iter().find(|r| r.tls == certified) {
        retired_tls_file(retired.generation)
    } else {
        return Err(CustodyError::Malformed {
            path: keys.join(MANIFEST_FILE),
            reason: format!("no TLS key of this custody is {certified}, which a certificate names"),
        });
    };
    let path = keys.join(&file);
    let secret = read_secret(&path, KeyKind::Ed25519, None)?;
    let found = signing_fingerprint(&SigningKey::from_bytes(&secret).verifying_key());
    if found != certified {
        return Err(CustodyError::ReplacedKey {
            path,
            expected: certified.to_owned(),
            found,
        });
    }
    Ok(secret)
}

/// The file of a retired TLS key's secret (`tls.key.N`), kept only until every
/// membership certifies the current key.
pub fn retired_tls_file(generation: u32) -> String {
    format!("{TLS_KEY_FILE}.{generation}")
}

/// Removes each retired TLS secret (`tls.key.N`) no certificate in `certified` (the
/// TLS keys the installation's memberships certify) names any more: from then on it
/// is never offered. The names of the files removed.
pub fn forget_retired_tls(dir: &Path, certified: &[String]) -> Result<Vec<String>, CustodyError> {
    let manifest = manifest(dir)?;
    let keys = dir.join(KEYS_DIR);
    let mut removed = Vec::new();
    for retired in &manifest.retired_tls {
        let file = retired_tls_file(retired.generation);
        let path = keys.join(&file);
        if certified.contains(&retired.tls) || !path.exists() {
            continue;
        }
        std::fs::remove_file(&path).map_err(|source| CustodyError::Io {
            path: path.clone(),
            source,
        })?;
        removed.push(file);
    }
    if !removed.is_empty() {
        std::fs::File::open(&keys)
            .and_then(|d| d.sync_all())
            .map_err(|source| CustodyError::Io { path: keys, source })?;
    }
    Ok(removed)
}

/// The names of `dir`'s key files still in the older hex form (none for a custody
/// made by this build). Reads the files; verifies nothing.
pub fn legacy_key_files(dir: &Path) -> Result<Vec<String>, CustodyError> {
    let keys = dir.join(KEYS_DIR);
    let mut legacy = Vec::new();
    for (file, kind) in KEY_FILES {
        let text = read_key_text(&keys.join(file))?;
        if !keyfile::is_encrypted(&text)
            && read_key(&keys.join(file), kind, None)?.1 == KeyFormat::Hex
        {
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
        if keyfile::is_encrypted(&read_key_text(&path)?) {
            continue;
        }
        let (secret, format) = read_key(&path, kind, None)?;
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

pub use lock::{finish_lock, read_passphrase_file};
pub use rotation::{Rotating, finish_rotation, rotate};

impl Custody {
    fn keys(&self) -> std::sync::Arc<Keys> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The manifest of the keys in use now.
    pub fn manifest(&self) -> Manifest {
        self.keys().manifest.clone()
    }

    /// The current signing-key generation.
    pub fn generation(&self) -> u32 {
        self.keys().manifest.generation
    }

    /// Installs `rotated` (the same installation's keys, verified after a rotation) in
    /// this custody and every clone of it.
    pub fn replace(&self, rotated: Custody) {
        let keys = rotated.keys();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = keys;
    }

    /// Whether this custody holds no signing or mail secret: opened without the
    /// passphrase of its encrypted keys. Nothing may sign or open with it until
    /// [`Custody::unlock`]; gridd runs no room meanwhile (`root::locked`).
    pub fn is_locked(&self) -> bool {
        self.keys().signing.is_none()
    }

    /// Whether the key files are encrypted at rest (`keys/locked`).
    pub fn is_encrypted(&self) -> bool {
        self.keys().encrypted
    }

    /// The passphrase this custody was unlocked with (`None`: not encrypted at rest):
    /// a rotation writes its new key under it.
    pub(crate) fn passphrase(&self) -> Option<zeroize::Zeroizing<Vec<u8>>> {
        self.keys().passphrase.clone()
    }

    fn signing(&self) -> (std::sync::Arc<Keys>, u32) {
        let keys = self.keys();
        assert!(
            keys.signing.is_some(),
            "a locked custody never signs: gridd runs no room before it is unlocked"
        );
        let generation = keys.manifest.generation;
        (keys, generation)
    }

    /// Signs with the current signing key. Never called on a locked custody.
    pub fn sign(&self, message: &[u8]) -> (u32, Signature) {
        self.try_sign(message)
            .expect("a locked custody never signs: gridd runs no room before it is unlocked")
    }

    /// Signs with the current signing key, or refuses while the custody is locked.
    pub fn try_sign(&self, message: &[u8]) -> Result<(u32, Signature), CustodyError> {
        let keys = self.keys();
        match &keys.signing {
            Some(key) => Ok((keys.manifest.generation, key.sign(message))),
            None => Err(CustodyError::Locked {
                dir: self.dir.as_ref().clone(),
            }),
        }
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
        mail_key_of(&self.keys().manifest).expect("a verified manifest names its mail key")
    }

    /// Signs with the current signing key and its generation, for signers that sign
    /// their own formats (receipts). Never called on a locked custody.
    pub(crate) fn with_signing_key<T>(&self, sign: impl FnOnce(&SigningKey, u32) -> T) -> T {
        let (keys, generation) = self.signing();
        sign(
            keys.signing.as_ref().expect("checked by signing()"),
            generation,
        )
    }

    /// Opens something sealed to this host: with the current mail secret, else with
    /// each retired one, newest first (open-only: sealed before a rotation, it still
    /// opens). The current key's error when none opens it.
    pub(crate) fn open_sealed<T, E>(
        &self,
        open: impl Fn(&StaticSecret) -> Result<T, E>,
    ) -> Result<T, E> {
        let (keys, _) = self.signing();
        let first = open(
            keys.mail
                .as_ref()
                .expect("an unlocked custody holds its mail key"),
        );
        if first.is_ok() {
            return first;
        }
        keys.retired_mail
            .iter()
            .find_map(|secret| open(secret).ok())
            .map_or(first, Ok)
    }

    /// `host`'s keys as this host should use them now: `embedded` (what an install,
    /// a grant or a mission recorded), or the later state of the same custody that a
    /// membership this host holds has published ([`book`]) — so a peer's rotated keys
    /// are used without a new grant, route or restart.
    pub fn peer_keys(&self, host: &str, embedded: &Manifest) -> Manifest {
        self.book.newest(&self.dir, host, embedded)
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
mod tests;
