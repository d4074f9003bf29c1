//! TLS configuration from a host's custody (SPEC C2): TLS 1.3 only (rustls, ring), the
//! participant certificate of each membership chosen by server name, every membership's
//! authority as the only roots, every revocation list. Server and client side.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, PrivatePkcs8KeyDer,
};

use crate::custody::membership;

use super::TransportError;

/// The DER of an Ed25519 private key in PKCS#8 v1 (RFC 8410: the seed alone, no
/// public key — the form both rustls and openssl read), from the key's 32-byte seed.
pub fn ed25519_pkcs8(seed: &[u8; 32]) -> Vec<u8> {
    use ed25519_dalek::pkcs8::{EncodePrivateKey, KeypairBytes};
    KeypairBytes {
        secret_key: *seed,
        public_key: None,
    }
    .to_pkcs8_der()
    .expect("an Ed25519 seed encodes as PKCS#8")
    .as_bytes()
    .to_vec()
}

fn credentials(path: &Path, reason: impl std::fmt::Display) -> TransportError {
    TransportError::Credentials {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Loads one membership's credentials from a host installation: its authority into
/// `roots`, its revocation list (if any) into `crls`; returns the participant
/// certificate chain.
fn load_membership(
    dir: &Path,
    m: &str,
    roots: &mut RootCertStore,
    crls: &mut Vec<CertificateRevocationListDer<'static>>,
) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let m_dir = membership::host_membership_dir(dir, m);
    let ca_path = m_dir.join("ca.pem");
    let ca = CertificateDer::from_pem_file(&ca_path).map_err(|e| credentials(&ca_path, e))?;
    roots.add(ca).map_err(|e| credentials(&ca_path, e))?;
    let crl_path = m_dir.join(membership::CRL_FILE);
    if crl_path.exists() {
        crls.push(
            CertificateRevocationListDer::from_pem_file(&crl_path)
                .map_err(|e| credentials(&crl_path, e))?,
        );
    }
    let cert_path = m_dir.join("participant.pem");
    CertificateDer::pem_file_iter(&cert_path)
        .map_err(|e| credentials(&cert_path, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| credentials(&cert_path, e))
}

/// The TLS key `membership`'s certificate certifies (its enrollment names it): the
/// current one, or — between a TLS rotation and the new certificate — the one it
/// replaced (`custody::tls_secret_for`).
fn certified_key(dir: &Path, membership: &str) -> Result<PrivateKeyDer<'static>, TransportError> {
    let enrollment = membership::read_enrollment(dir, membership)
        .map_err(|e| TransportError::Tls(e.to_string()))?
        .ok_or_else(|| {
            TransportError::Tls(format!(
                "no enrollment in `{membership}` in {}",
                dir.display()
            ))
        })?;
    let seed = crate::custody::tls_secret_for(dir, &enrollment.tls)
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        ed25519_pkcs8(&seed),
    )))
}

/// The TLS server name of `participant` reached through `membership`:
/// `participant.membership.grid` when both are DNS labels, else the participant's name.
/// Participant certificates carry both names, so a host in several memberships shows
/// each client the certificate of the membership it asked for.
pub fn server_name(participant: &str, membership: &str) -> String {
    if membership::dns_label(participant) && membership::dns_label(membership) {
        format!("{participant}.{membership}.grid")
    } else {
        participant.to_owned()
    }
}

/// Chooses the participant certificate by the server name the client asked for; the
/// first membership's (by name) when it asked for none it knows.
#[derive(Debug)]
struct MembershipCertificates {
    by_name: std::collections::HashMap<String, Arc<rustls::sign::CertifiedKey>>,
    default: Arc<rustls::sign::CertifiedKey>,
}

impl rustls::server::ResolvesServerCert for MembershipCertificates {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(
            hello
                .server_name()
                .and_then(|name| self.by_name.get(name))
                .unwrap_or(&self.default)
                .clone(),
        )
    }
}

/// Builds the TLS configuration from the host's custody: its TLS key, the participant
/// certificate of each membership (chosen by server name), every membership's
/// authority as a client-certificate root, and every revocation list.
pub fn server_config(dir: &Path) -> Result<ServerConfig, TransportError> {
    server_credentials(dir).map(|(config, _)| config)
}

/// The server configuration and its client-certificate verifier (every membership's
/// authority, every revocation list), which the server applies again to the
/// connections already open when the files change.
pub(super) fn server_credentials(
    dir: &Path,
) -> Result<
    (
        ServerConfig,
        Arc<dyn rustls::server::danger::ClientCertVerifier>,
    ),
    TransportError,
> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (resolver, _) = participant_certificates(dir)?;
    let mut roots = RootCertStore::empty();
    let mut crls = Vec::new();
    for m in &membership::enrolled_memberships(dir) {
        load_membership(dir, m, &mut roots, &mut crls)?;
    }
    // Each membership's list covers its own authority's certificates only: a
    // participant of a membership without a list (none revoked there) is not refused
    // because another membership of this host revoked someone.
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .with_crls(crls)
        .allow_unknown_revocation_status()
        .build()
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TransportError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier.clone())
        .with_cert_resolver(resolver);
    Ok((config, verifier))
}

/// The host's participant certificate of each membership it is enrolled in, chosen by
/// the server name a client asks for (the first membership's when it asks for none it
/// knows), and those server names (`participant.membership.grid`).
pub fn participant_certificates(
    dir: &Path,
) -> Result<(Arc<dyn rustls::server::ResolvesServerCert>, Vec<String>), TransportError> {
    let memberships = membership::enrolled_memberships(dir);
    if memberships.is_empty() {
        return Err(TransportError::NoMembership);
    }
    let provider = rustls::crypto::ring::default_provider();
    let mut by_name = std::collections::HashMap::new();
    let mut names = Vec::new();
    let mut default = None;
    for m in &memberships {
        let chain = load_membership(dir, m, &mut RootCertStore::empty(), &mut Vec::new())?;
        let signing_key = provider
            .key_provider
            .load_private_key(certified_key(dir, m)?)
            .map_err(|e| TransportError::Tls(e.to_string()))?;
        let certified = Arc::new(rustls::sign::CertifiedKey::new(chain, signing_key));
        let participant = membership::read_enrollment(dir, m)
            .ok()
            .flatten()
            .map(|e| e.participant)
            .unwrap_or_default();
        let name = server_name(&participant, m);
        names.push(name.clone());
        by_name.insert(name, certified.clone());
        default.get_or_insert(certified);
    }
    let resolver = MembershipCertificates {
        by_name,
        default: default.expect("at least one membership"),
    };
    Ok((Arc::new(resolver), names))
}

/// Binds the listen address now, so a host whose address is taken refuses to start.
pub fn bind(listen: &str) -> Result<std::net::TcpListener, TransportError> {
    let address: SocketAddr = listen.parse().map_err(|_| TransportError::Listen {
        address: listen.to_owned(),
        reason: "not IP:PORT".to_owned(),
    })?;
    std::net::TcpListener::bind(address).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => TransportError::AddressInUse { address },
        _ => TransportError::Listen {
            address: listen.to_owned(),
            reason: e.to_string(),
        },
    })
}

/// When each membership credential file was last changed: reconcile writing a new
/// revocation list (or certificate) changes it.
pub(super) fn credentials_stamp(
    dir: &Path,
) -> Vec<(std::path::PathBuf, Option<std::time::SystemTime>)> {
    membership::enrolled_memberships(dir)
        .into_iter()
        .flat_map(|m| membership_stamp(dir, &m))
        .collect()
}

/// The same for one membership's files: what a client of it was built from.
pub(super) fn membership_stamp(
    dir: &Path,
    membership: &str,
) -> Vec<(std::path::PathBuf, Option<std::time::SystemTime>)> {
    let m_dir = membership::host_membership_dir(dir, membership);
    ["ca.pem", "participant.pem", membership::CRL_FILE]
        .map(|f| {
            let path = m_dir.join(f);
            let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
            (path, modified)
        })
        .into()
}

/// The TLS configuration of a participant calling other participants of
/// `membership`: TLS 1.3 only, its own participant certificate as client
/// certificate, the membership's authority as the only root, its revocation list.
pub fn client_tls(
    own_dir: &Path,
    membership: &str,
) -> Result<rustls::ClientConfig, TransportError> {
    let mut roots = RootCertStore::empty();
    let mut crls = Vec::new();
    let chain = load_membership(own_dir, membership, &mut roots, &mut crls)?;
    let key = certified_key(own_dir, membership)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .with_crls(crls)
    .build()
    .map_err(|e| TransportError::Tls(e.to_string()))?;
    rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TransportError::Tls(e.to_string()))?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(chain, key)
        .map_err(|e| TransportError::Tls(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_ask_for_a_membership_when_both_are_dns_labels() {
        assert_eq!(server_name("edge-a", "plant-ops"), "edge-a.plant-ops.grid");
        assert_eq!(server_name("edge-a", "plant/ops"), "edge-a");
    }

    #[test]
    fn the_pkcs8_key_is_rfc_8410_v1_and_loads_in_rustls() {
        let der = ed25519_pkcs8(&[7u8; 32]);
        // SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING seed } }
        let prefix = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        assert_eq!(der[..16], prefix);
        assert_eq!(der[16..], [7u8; 32]);
        let key = rustls_pki_types::PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der));
        assert!(
            rustls::crypto::ring::default_provider()
                .key_provider
                .load_private_key(key)
                .is_ok()
        );
    }
}
