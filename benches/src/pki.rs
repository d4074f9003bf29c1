//! The certificates the alternatives run with, made here with rcgen: a certificate
//! authority of the benchmark and leaf certificates it issues, each naming `localhost`
//! and 127.0.0.1 (mutual TLS on loopback, as Grid's hosts use).

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SignatureAlgorithm,
};

use crate::procs::Result;

/// The name every leaf certificate carries and every client asks for.
pub const SERVER_NAME: &str = "localhost";

/// A certificate authority; its keys and its leaves' are of one algorithm.
pub struct Ca {
    pub cert: Certificate,
    issuer: Issuer<'static, KeyPair>,
    algorithm: &'static SignatureAlgorithm,
}

/// A leaf certificate and its key pair.
pub struct Leaf {
    pub cert: Certificate,
    pub key: KeyPair,
}

impl Ca {
    /// A self-signed CA called `common_name` (ECDSA P-256: `rcgen::PKCS_ECDSA_P256_SHA256`;
    /// Ed25519: `rcgen::PKCS_ED25519`).
    pub fn new(common_name: &str, algorithm: &'static SignatureAlgorithm) -> Result<Ca> {
        let key = KeyPair::generate_for(algorithm)?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert,
            issuer: Issuer::new(params, key),
            algorithm,
        })
    }

    /// A leaf called `name` for [`SERVER_NAME`] and 127.0.0.1, with its key usages.
    pub fn leaf(
        &self,
        name: &str,
        key_usages: &[KeyUsagePurpose],
        extended: &[ExtendedKeyUsagePurpose],
    ) -> Result<Leaf> {
        let mut params = CertificateParams::new(vec![SERVER_NAME.to_owned()])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = key_usages.to_vec();
        params.extended_key_usages = extended.to_vec();
        let key = KeyPair::generate_for(self.algorithm)?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Leaf { cert, key })
    }
}

/// The key usages of an ECDSA leaf of the alternatives (etcd, NATS).
pub const ECDSA_LEAF_USAGES: [KeyUsagePurpose; 2] = [
    KeyUsagePurpose::DigitalSignature,
    KeyUsagePurpose::KeyEncipherment,
];

/// A server's or a client's extended key usage.
pub fn role(server: bool) -> ExtendedKeyUsagePurpose {
    if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }
}
