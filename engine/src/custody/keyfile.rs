//! The bytes of a key file. Keys are written as **PEM PKCS#8 v1** (RFC 5208, with the
//! RFC 8410 algorithms Ed25519 and X25519, the secret alone and no public key): the
//! form `openssl pkey -in keys/tls.key` and `curl --key keys/tls.key` read as they are
//! (openssl refuses an Ed25519 PKCS#8 v2 key carrying its public key). The older form,
//! 64 hexadecimal digits, is still read: an installation made before starts unchanged,
//! and nothing rewrites it unless asked (`custody::rewrite_as_pem`).
//!
//! Invariants: encoding and decoding go through the `pkcs8`/`der` crates, never
//! hand-written DER; a file decodes only as the kind of key its name holds (an X25519
//! key in `signing.key` is malformed, not a signing key).

use pkcs8::der::asn1::OctetStringRef;
use pkcs8::der::{Decode, Encode};
use pkcs8::{
    AlgorithmIdentifierRef, EncodePrivateKey, LineEnding, ObjectIdentifier, PrivateKeyInfoRef,
    SecretDocument,
};
use zeroize::Zeroizing;

/// The algorithm of a key file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// `signing.key`, `tls.key`.
    Ed25519,
    /// `mail.key`.
    X25519,
}

/// How a key file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    /// PEM PKCS#8 v1 (`-----BEGIN PRIVATE KEY-----`): what Grid writes.
    Pem,
    /// 64 hexadecimal digits: what Grid wrote before, still read.
    Hex,
}

/// `id-X25519` (RFC 8410 §3).
const X25519_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.110");

/// The PEM label of a PKCS#8 private key (RFC 7468 §10).
const PRIVATE_KEY_LABEL: &str = "PRIVATE KEY";

impl KeyKind {
    fn oid(self) -> ObjectIdentifier {
        match self {
            KeyKind::Ed25519 => ed25519_dalek::pkcs8::ALGORITHM_OID,
            KeyKind::X25519 => X25519_OID,
        }
    }

    fn name(self) -> &'static str {
        match self {
            KeyKind::Ed25519 => "Ed25519",
            KeyKind::X25519 => "X25519",
        }
    }
}

/// The PEM PKCS#8 v1 text of a 32-byte secret of `kind`.
pub fn encode_pem(kind: KeyKind, secret: &[u8; 32]) -> Zeroizing<String> {
    let pem = match kind {
        KeyKind::Ed25519 => ed25519_dalek::pkcs8::KeypairBytes {
            secret_key: *secret,
            public_key: None,
        }
        .to_pkcs8_pem(LineEnding::LF),
        KeyKind::X25519 => {
            // RFC 8410 §7: the private key is `CurvePrivateKey ::= OCTET STRING`, itself
            // the content of PKCS#8's privateKey OCTET STRING.
            let inner = Zeroizing::new(
                OctetStringRef::new(secret)
                    .and_then(|octets| octets.to_der())
                    .expect("32 bytes encode as an OCTET STRING"),
            );
            OctetStringRef::new(&inner)
                .map_err(pkcs8::Error::from)
                .and_then(|private_key| {
                    PrivateKeyInfoRef {
                        algorithm: AlgorithmIdentifierRef {
                            oid: X25519_OID,
                            parameters: None,
                        },
                        private_key,
                        public_key: None,
                    }
                    .to_pkcs8_pem(LineEnding::LF)
                })
        }
    };
    pem.expect("a 32-byte secret encodes as PKCS#8")
}

/// The 32-byte secret of `kind` a key file holds, and its format; `Err` says why the
/// text is not such a key.
pub fn decode(kind: KeyKind, text: &str) -> Result<(Zeroizing<[u8; 32]>, KeyFormat), String> {
    let text = text.trim();
    if !text.starts_with("-----BEGIN") {
        return super::unhex(text)
            .map(|secret| (Zeroizing::new(secret), KeyFormat::Hex))
            .ok_or_else(|| {
                format!(
                    "expected a PEM PKCS#8 {} key (or the older 64 hexadecimal digits)",
                    kind.name()
                )
            });
    }
    let pem = |e: &dyn std::fmt::Display| format!("not a PEM PKCS#8 {} key: {e}", kind.name());
    let (label, document) = SecretDocument::from_pem(text).map_err(|e| pem(&e))?;
    if label != PRIVATE_KEY_LABEL {
        return Err(pem(&format!(
            "its label is `{label}`, not `{PRIVATE_KEY_LABEL}`"
        )));
    }
    let info = PrivateKeyInfoRef::from_der(document.as_bytes()).map_err(|e| pem(&e))?;
    if info.algorithm.oid != kind.oid() || info.algorithm.parameters.is_some() {
        return Err(pem(&format!(
            "its algorithm is {}, not {} ({})",
            info.algorithm.oid,
            kind.name(),
            kind.oid()
        )));
    }
    let octets = <&OctetStringRef>::from_der(info.private_key.as_bytes()).map_err(|e| pem(&e))?;
    let secret = <[u8; 32]>::try_from(octets.as_bytes())
        .map_err(|_| pem(&format!("its secret is {} bytes, not 32", octets.len())))?;
    Ok((Zeroizing::new(secret), KeyFormat::Pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_round_trip_through_pem_and_hex_still_reads() {
        let secret = [7u8; 32];
        for kind in [KeyKind::Ed25519, KeyKind::X25519] {
            let pem = encode_pem(kind, &secret);
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{}", *pem);
            let (decoded, format) = decode(kind, &pem).unwrap();
            assert_eq!((*decoded, format), (secret, KeyFormat::Pem));
            let (decoded, format) = decode(kind, &hex::encode(secret)).unwrap();
            assert_eq!((*decoded, format), (secret, KeyFormat::Hex));
        }
        // A key of the other kind is not this kind's key.
        let mail = encode_pem(KeyKind::X25519, &secret);
        assert!(
            decode(KeyKind::Ed25519, &mail)
                .unwrap_err()
                .contains("1.3.101.110")
        );
        assert!(decode(KeyKind::Ed25519, "-----BEGIN PRIVATE KEY-----\nAAAA\n").is_err());
        assert!(decode(KeyKind::X25519, "not a key").is_err());
    }

    /// PKCS#8 v1 for Ed25519 is 48 bytes of DER (RFC 8410 §10.3's example); the
    /// engine's earlier `ed25519_pkcs8` produced the same bytes.
    #[test]
    fn ed25519_pem_is_the_rfc_8410_v1_form() {
        let secret = [1u8; 32];
        let pem = encode_pem(KeyKind::Ed25519, &secret);
        let (_, document) = SecretDocument::from_pem(&pem).unwrap();
        assert_eq!(document.as_bytes().len(), 48);
        assert_eq!(
            document.as_bytes(),
            crate::transport::ed25519_pkcs8(&secret).as_slice()
        );
    }
}
