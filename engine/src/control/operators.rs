//! Operator mutual TLS of a control line (`control listen=… operators="CA"
//! [certificate="PEM" key="PEM"]`, docs/control-plane.md): the PEM files the topology
//! names are read and checked by the reconciler at plan time, copied privately into the
//! installation by reconcile (`control/ADDRESS/`, files 0600 in a 0700 directory, their
//! SHA-256 in `host.toml`), and read from those copies alone at gridd's start — a copy
//! missing, weakened or other than `host.toml` says refuses the start by name.
//!
//! The page presents `certificate=` (with `key=`), or without them the host's
//! participant certificate of each membership (chosen by server name, as the transport
//! does); it takes only connections whose client certificate chains to `operators=`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::config::ControlListenConfig;
use crate::limits::CONTROL_CREDENTIAL_BYTES_MAX;

/// The copy of `operators=` in the installation.
pub const CA_FILE: &str = "operators.pem";
/// The copy of `certificate=`.
pub const CERTIFICATE_FILE: &str = "certificate.pem";
/// The copy of `key=`.
pub const KEY_FILE: &str = "key.pem";

/// The directory holding the copies of the files of the line listening on `listen`.
pub fn copies_dir(dir: &Path, listen: &str) -> PathBuf {
    let name: String = listen
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    dir.join("control").join(name)
}

/// The PEM files of one control line served with operator mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The operators' certificate authority (one or more certificates).
    pub ca: Vec<u8>,
    /// The page's certificate chain and its private key, when the line names them.
    pub page: Option<(Vec<u8>, Vec<u8>)>,
}

/// A TLS configuration for a control line, and the host names a browser may address
/// it by (besides its listen address).
pub struct Served {
    pub config: ServerConfig,
    pub names: Vec<String>,
}

fn read_bounded(path: &Path, private: bool) -> Result<Vec<u8>, String> {
    let metadata = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !metadata.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if metadata.len() > CONTROL_CREDENTIAL_BYTES_MAX {
        return Err(format!(
            "{}: {} bytes, more than CONTROL_CREDENTIAL_BYTES_MAX ({CONTROL_CREDENTIAL_BYTES_MAX})",
            path.display(),
            metadata.len()
        ));
    }
    let mode = metadata.permissions().mode() & 0o777;
    if private && mode & 0o077 != 0 {
        return Err(format!(
            "{}: mode {mode:o}: a private key must be a file of mode 600 (chmod 600 it)",
            path.display()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

impl Credentials {
    /// The files `line` names, as the topology named them (the reconciler's, at plan
    /// and at reconcile): `None` for a line without operator mutual TLS. The key must
    /// be private (mode 600); every file is parsed.
    pub fn read_named(line: &ControlListenConfig) -> Result<Option<Credentials>, String> {
        let Some(ca) = &line.operators else {
            return Ok(None);
        };
        let page = match (&line.certificate, &line.key) {
            (Some(c), Some(k)) => Some((read_bounded(c, false)?, read_bounded(k, true)?)),
            (None, None) => None,
            _ => {
                return Err(format!(
                    "control listen=\"{}\": `certificate` and `key` go together",
                    line.listen
                ));
            }
        };
        let credentials = Credentials {
            ca: read_bounded(ca, false)?,
            page,
        };
        credentials.check(line)?;
        Ok(Some(credentials))
    }

    /// The private copies in the installation `dir` (gridd's, at start), refused when
    /// missing, weaker than private, or other than `host.toml`'s digest says.
    pub fn read_copies(
        dir: &Path,
        line: &ControlListenConfig,
    ) -> Result<Option<Credentials>, String> {
        if line.operators.is_none() {
            return Ok(None);
        }
        let copies = copies_dir(dir, &line.listen);
        let refused = |why: String| {
            format!(
                "control listen=\"{}\": the operators' files copied into {}: {why}; run `gridctl reconcile` to copy them again",
                line.listen,
                copies.display()
            )
        };
        if !copies.is_dir() {
            return Err(refused("missing".to_owned()));
        }
        crate::store::ensure_private_dir(&copies).map_err(|e| refused(e.to_string()))?;
        let read = |file: &str| read_bounded(&copies.join(file), true).map_err(refused);
        let credentials = Credentials {
            ca: read(CA_FILE)?,
            page: match line.certificate {
                Some(_) => Some((read(CERTIFICATE_FILE)?, read(KEY_FILE)?)),
                None => None,
            },
        };
        let digest = credentials.digest();
        if line.digest.as_deref() != Some(digest.as_str()) {
            return Err(refused(format!(
                "their digest is {digest}, host.toml says {}",
                line.digest.as_deref().unwrap_or("none")
            )));
        }
        Ok(Some(credentials))
    }

    /// SHA-256 of the files, each length-prefixed: what `host.toml` records.
    pub fn digest(&self) -> String {
        let mut hash = Sha256::new();
        let mut part = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        };
        part(&self.ca);
        if let Some((certificate, key)) = &self.page {
            part(certificate);
            part(key);
        }
        hex::encode(hash.finalize())
    }

    /// Writes the copies into the installation `dir`, privately and synced.
    pub fn install(&self, dir: &Path, listen: &str) -> Result<(), String> {
        let copies = copies_dir(dir, listen);
        let io = |e: &dyn std::fmt::Display| format!("{}: {e}", copies.display());
        crate::store::ensure_private_dir(&copies).map_err(|e| io(&e))?;
        let mut files = vec![(CA_FILE, &self.ca)];
        if let Some((certificate, key)) = &self.page {
            files.push((CERTIFICATE_FILE, certificate));
            files.push((KEY_FILE, key));
        }
        for (name, bytes) in files {
            crate::store::write_private(&copies.join(name), bytes).map_err(|e| io(&e))?;
        }
        Ok(())
    }

    /// Every file parses: operators' authority, the page's chain, its key matching.
    fn check(&self, line: &ControlListenConfig) -> Result<(), String> {
        let named = |p: &Option<PathBuf>| {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        operator_roots(&self.ca)
            .map_err(|e| format!("operators=\"{}\": {e}", named(&line.operators)))?;
        if let Some((certificate, key)) = &self.page {
            page_key(certificate, key).map_err(|e| {
                format!(
                    "certificate=\"{}\" key=\"{}\": {e}",
                    named(&line.certificate),
                    named(&line.key)
                )
            })?;
        }
        Ok(())
    }

    /// The line's TLS configuration: TLS 1.3, HTTP/1.1, a client certificate chaining
    /// to the operators' authority required; the page's certificate, or the host's
    /// participant certificates from the installation `dir`.
    pub fn served(&self, dir: &Path) -> Result<Served, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(operator_roots(&self.ca)?),
            provider.clone(),
        )
        .build()
        .map_err(|e| format!("the operators' certificate authority: {e}"))?;
        let builder = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier);
        let (mut config, names) = match &self.page {
            Some((certificate, key)) => {
                let certified = page_key(certificate, key)?;
                let names = dns_names(&certified.cert[0]);
                let resolver = Arc::new(PageCertificate(Arc::new(certified)));
                (builder.with_cert_resolver(resolver), names)
            }
            None => {
                let (resolver, names) = crate::transport::tls::participant_certificates(dir)
                    .map_err(|e| format!("the host's participant certificate: {e}"))?;
                (builder.with_cert_resolver(resolver), names)
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Served { config, names })
    }
}

/// The page's own certificate, whatever server name the browser asked for.
#[derive(Debug)]
struct PageCertificate(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for PageCertificate {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The operators' certificate authority: every certificate of the PEM file, at least one.
fn operator_roots(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(pem) {
        let certificate = certificate.map_err(|e| format!("not PEM certificates: {e}"))?;
        roots
            .add(certificate)
            .map_err(|e| format!("not a certificate authority: {e}"))?;
    }
    if roots.is_empty() {
        return Err("holds no certificate".to_owned());
    }
    Ok(roots)
}

/// The page's certificate chain with its private key, checked to match.
fn page_key(certificate: &[u8], key: &[u8]) -> Result<rustls::sign::CertifiedKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(certificate)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate is not PEM: {e}"))?;
    if chain.is_empty() {
        return Err("the certificate file holds no certificate".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| format!("the key is not a PEM private key: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("the key: {e}"))?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| format!("the key is not the certificate's: {e}"))?;
    Ok(certified)
}

/// The DNS names a certificate is issued for (its subject alternative names).
fn dns_names(der: &[u8]) -> Vec<String> {
    let Ok((_, certificate)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let Ok(Some(names)) = certificate.subject_alternative_name() else {
        return Vec::new();
    };
    names
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(name) => Some((*name).to_owned()),
            _ => None,
        })
        .collect()
}

/// Who an operator's verified certificate names: its subject's common name, for logs.
pub fn operator_of(der: &[u8]) -> String {
    X509Certificate::from_der(der)
        .ok()
        .and_then(|(_, c)| {
            c.subject()
                .iter_common_name()
                .next()
                .and_then(|n| n.as_str().ok().map(str::to_owned))
        })
        .unwrap_or_else(|| "an operator without a common name".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certified(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    fn line() -> ControlListenConfig {
        ControlListenConfig {
            listen: "10.0.0.5:8443".into(),
            operators: Some("ops-ca.pem".into()),
            certificate: Some("control.pem".into()),
            key: Some("control-key.pem".into()),
            digest: None,
        }
    }

    #[test]
    fn every_file_is_checked_and_named() {
        let (ca, _) = certified("ops");
        let (certificate, key) = certified("control.test");
        let (_, other_key) = certified("elsewhere");
        let credentials = |ca: &str, certificate: &str, key: &str| Credentials {
            ca: ca.as_bytes().to_vec(),
            page: Some((certificate.as_bytes().to_vec(), key.as_bytes().to_vec())),
        };
        assert_eq!(credentials(&ca, &certificate, &key).check(&line()), Ok(()));
        let refused = credentials("not pem", &certificate, &key)
            .check(&line())
            .unwrap_err();
        assert!(refused.starts_with("operators=\"ops-ca.pem\""), "{refused}");
        let refused = credentials(&ca, &certificate, &other_key)
            .check(&line())
            .unwrap_err();
        assert!(
            refused.contains("control-key.pem") && refused.contains("not the certificate's"),
            "{refused}"
        );
        let refused = credentials(&ca, "", &key).check(&line()).unwrap_err();
        assert!(refused.contains("holds no certificate"), "{refused}");
    }

    #[test]
    fn the_digest_covers_every_file_and_where_one_ends() {
        let one = Credentials {
            ca: b"ab".to_vec(),
            page: Some((b"c".to_vec(), b"d".to_vec())),
        };
        let moved = Credentials {
            ca: b"a".to_vec(),
            page: Some((b"bc".to_vec(), b"d".to_vec())),
        };
        let without = Credentials {
            ca: b"ab".to_vec(),
            page: None,
        };
        assert_ne!(one.digest(), moved.digest());
        assert_ne!(one.digest(), without.digest());
        assert_eq!(one.digest(), one.clone().digest());
    }

    #[test]
    fn copies_live_in_one_directory_per_address() {
        let dir = Path::new("/grid/hq");
        assert_eq!(
            copies_dir(dir, "10.0.0.5:8443"),
            Path::new("/grid/hq/control/10-0-0-5-8443")
        );
        assert_eq!(
            copies_dir(dir, "[::1]:8443"),
            Path::new("/grid/hq/control/---1--8443")
        );
    }
}
