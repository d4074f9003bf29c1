//! The host's OPC UA application instance certificate (docs/sources.md, "OPC UA"),
//! kept like the other keys:
//!
//! ```text
//! DIR/keys/
//!   opcua-cert.der     0600  the certificate, DER (what a server is given to trust)
//!   opcua-key.pem      0600  its RSA 2048 key, PEM PKCS#8
//!   opcua.toml         0600  their SHA-256 fingerprints and the application URI
//! ```
//! Created when the `sources` profile starts and none exists yet (so a host made
//! before OPC UA support gets one on its next start), recorded then; afterwards a
//! missing file, one weaker than 0600, or one whose fingerprint differs (replaced)
//! refuses the host. The fingerprints are in their own file beside `custody.toml`, whose
//! shape other hosts and the reconciler read.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{CustodyError, KEYS_DIR, write_private};

pub const CERTIFICATE_FILE: &str = "opcua-cert.der";
pub const KEY_FILE: &str = "opcua-key.pem";
pub const MANIFEST_FILE: &str = "opcua.toml";

/// What the custody recorded when it made the certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpcUaManifest {
    /// `sha256:<hex>` of `opcua-cert.der`.
    pub certificate: String,
    /// `sha256:<hex>` of `opcua-key.pem`.
    pub key: String,
    /// `urn:grid:HOST`.
    pub application_uri: String,
}

fn keys(dir: &Path) -> PathBuf {
    dir.join(KEYS_DIR)
}

fn fingerprint(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The host's OPC UA identity: made and recorded when the custody has none, else read
/// and checked against what was recorded.
pub fn ensure(dir: &Path, host: &str) -> Result<grid_adapters::OpcUaIdentity, CustodyError> {
    if !keys(dir).join(MANIFEST_FILE).exists() {
        create(dir, host)?;
    }
    load(dir)
}

/// Makes the certificate and key (async-opcua's own certificate creation), writes
/// them 0600 and records them, the record last: files without a record are not yet
/// the host's and are made again.
pub fn create(dir: &Path, host: &str) -> Result<OpcUaManifest, CustodyError> {
    let keys = keys(dir);
    crate::store::ensure_private_dir(&keys)?;
    let (certificate, key_der) =
        grid_adapters::opcua::new_application_certificate(host).map_err(|reason| {
            CustodyError::Malformed {
                path: keys.join(CERTIFICATE_FILE),
                reason: format!("cannot make an OPC UA application certificate: {reason}"),
            }
        })?;
    let key_pem = pkcs8::SecretDocument::try_from(key_der.as_slice())
        .and_then(|document| document.to_pem("PRIVATE KEY", pkcs8::LineEnding::LF))
        .map_err(|e| CustodyError::Malformed {
            path: keys.join(KEY_FILE),
            reason: e.to_string(),
        })?;
    write_private(&keys.join(CERTIFICATE_FILE), &certificate)?;
    write_private(&keys.join(KEY_FILE), key_pem.as_bytes())?;
    let manifest = OpcUaManifest {
        certificate: fingerprint(&certificate),
        key: fingerprint(key_pem.as_bytes()),
        application_uri: format!("urn:grid:{host}"),
    };
    let text = toml::to_string(&manifest).expect("manifests serialize");
    write_private(&keys.join(MANIFEST_FILE), text.as_bytes())?;
    Ok(manifest)
}

/// Reads the recorded identity, refusing a missing, weak or replaced file.
pub fn load(dir: &Path) -> Result<grid_adapters::OpcUaIdentity, CustodyError> {
    let keys = keys(dir);
    let manifest_path = keys.join(MANIFEST_FILE);
    let manifest: OpcUaManifest =
        toml::from_str(&read_private(&manifest_path)?.1).map_err(|e| CustodyError::Malformed {
            path: manifest_path.clone(),
            reason: e.to_string(),
        })?;
    let certificate_path = keys.join(CERTIFICATE_FILE);
    let private_key_path = keys.join(KEY_FILE);
    let (certificate_der, _) = read_private(&certificate_path)?;
    check(&certificate_path, &certificate_der, &manifest.certificate)?;
    let (key_bytes, key_text) = read_private(&private_key_path)?;
    check(&private_key_path, &key_bytes, &manifest.key)?;
    let (_, document) =
        pkcs8::SecretDocument::from_pem(&key_text).map_err(|e| CustodyError::Malformed {
            path: private_key_path.clone(),
            reason: format!("not a PEM PKCS#8 key: {e}"),
        })?;
    Ok(grid_adapters::OpcUaIdentity {
        certificate_der,
        private_key_der: document.as_bytes().to_vec(),
        application_uri: manifest.application_uri,
        certificate_path,
        private_key_path,
        host_dir: dir.to_owned(),
    })
}

fn check(path: &Path, bytes: &[u8], expected: &str) -> Result<(), CustodyError> {
    let found = fingerprint(bytes);
    if found == expected {
        Ok(())
    } else {
        Err(CustodyError::ReplacedKey {
            path: path.to_owned(),
            expected: expected.to_owned(),
            found,
        })
    }
}

/// A recorded file's bytes (and as text, when it is): missing and weaker than 0600
/// refuse.
fn read_private(path: &Path) -> Result<(Vec<u8>, String), CustodyError> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
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
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 || !metadata.is_file() {
        return Err(crate::store::PrivateDirError::WeakPermissions {
            path: path.to_owned(),
            mode,
            expected: 0o600,
        }
        .into());
    }
    let bytes = std::fs::read(path).map_err(|source| CustodyError::Io {
        path: path.to_owned(),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok((bytes, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("grid-opcua-custody-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn made_once_0600_recorded_and_read_back_the_same() {
        let d = dir("made");
        let identity = ensure(&d, "edge-a").unwrap();
        assert_eq!(identity.application_uri, "urn:grid:edge-a");
        for file in [CERTIFICATE_FILE, KEY_FILE, MANIFEST_FILE] {
            assert_eq!(mode(&d.join(KEYS_DIR).join(file)), 0o600, "{file}");
        }
        assert_eq!(
            std::fs::read(d.join("keys/opcua-cert.der")).unwrap(),
            identity.certificate_der
        );
        let key = std::fs::read_to_string(d.join("keys/opcua-key.pem")).unwrap();
        assert!(key.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{key}");
        // The certificate names the host's application URI; a second start keeps it.
        let (_, cert) = x509_parser::parse_x509_certificate(&identity.certificate_der).unwrap();
        let san = cert.subject_alternative_name().unwrap().unwrap();
        assert!(
            format!("{:?}", san.value).contains("urn:grid:edge-a"),
            "{:?}",
            san.value
        );
        let again = ensure(&d, "edge-a").unwrap();
        assert_eq!(again.certificate_der, identity.certificate_der);
        assert_eq!(again.private_key_der, identity.private_key_der);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_weak_replaced_or_missing_file_refuses() {
        let d = dir("refusals");
        ensure(&d, "edge-a").unwrap();
        let key = d.join("keys").join(KEY_FILE);
        let cert = d.join("keys").join(CERTIFICATE_FILE);

        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let weak = ensure(&d, "edge-a").err().expect("refused");
        assert!(
            matches!(
                &weak,
                CustodyError::Private(crate::store::PrivateDirError::WeakPermissions { path, .. })
                    if path == &key
            ),
            "{weak}"
        );
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

        // Another certificate in its place: replaced, never re-trusted.
        let original = std::fs::read(&cert).unwrap();
        let other = dir("other");
        ensure(&other, "edge-a").unwrap();
        write_private(
            &cert,
            &std::fs::read(other.join("keys").join(CERTIFICATE_FILE)).unwrap(),
        )
        .unwrap();
        let replaced = ensure(&d, "edge-a").err().expect("refused");
        assert!(
            matches!(&replaced, CustodyError::ReplacedKey { path, .. } if path == &cert),
            "{replaced}"
        );
        write_private(&cert, &original).unwrap();
        ensure(&d, "edge-a").unwrap();

        // Missing after it was recorded: refused, not made again.
        std::fs::remove_file(&key).unwrap();
        let missing = ensure(&d, "edge-a").err().expect("refused");
        assert!(
            matches!(&missing, CustodyError::MissingKey { path } if path == &key),
            "{missing}"
        );
        assert!(!key.exists());
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(&other).unwrap();
    }
}
