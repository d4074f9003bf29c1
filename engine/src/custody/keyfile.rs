//! The bytes of a key file. Keys are written as **PEM PKCS#8 v1** (RFC 5208, with the
//! RFC 8410 algorithms Ed25519 and X25519, the secret alone and no public key): the
//! form `openssl pkey -in keys/tls.key` and `curl --key keys/tls.key` read as they are
//! (openssl refuses an Ed25519 PKCS#8 v2 key carrying its public key). The older form,
//! 64 hexadecimal digits, is still read: an installation made before starts unchanged,
//! and nothing rewrites it unless asked (`custody::rewrite_as_pem`).
//!
//! A locked custody's signing and mail keys are **encrypted PKCS#8**
//! (`-----BEGIN ENCRYPTED PRIVATE KEY-----`, RFC 5958 with PBES2, RFC 8018): scrypt
//! (`CUSTODY_SCRYPT_LOG_N`, r = 8, p = 1, a fresh 16-byte salt) derives an AES-256-GCM
//! key (a fresh 12-byte nonce) from the passphrase; the tag authenticates the whole
//! key, so a wrong passphrase is told apart from a damaged file only by the manifest's
//! fingerprint check after it.
//!
//! Invariants: encoding and decoding go through the `pkcs8`/`der`/`pkcs5` crates, never
//! hand-written DER or cryptography; a file decodes only as the kind of key its name
//! holds (an X25519 key in `signing.key` is malformed, not a signing key); no
//! encrypted file is decrypted with a key derivation weaker than
//! `CUSTODY_SCRYPT_LOG_N_MIN`, nor costlier than `CUSTODY_SCRYPT_LOG_N_MAX`.

use pkcs8::der::asn1::OctetStringRef;
use pkcs8::der::{Decode, Encode};
use pkcs8::pkcs5::pbes2;
use pkcs8::{
    AlgorithmIdentifierRef, EncodePrivateKey, EncryptedPrivateKeyInfoRef, LineEnding,
    ObjectIdentifier, PrivateKeyInfoRef, SecretDocument,
};
use zeroize::Zeroizing;

use crate::limits::{
    CUSTODY_SCRYPT_LOG_N, CUSTODY_SCRYPT_LOG_N_MAX, CUSTODY_SCRYPT_LOG_N_MIN, CUSTODY_SCRYPT_P_MAX,
    CUSTODY_SCRYPT_R_MAX,
};

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
    /// Encrypted PEM PKCS#8 (`-----BEGIN ENCRYPTED PRIVATE KEY-----`): a locked
    /// custody's signing and mail keys.
    Encrypted,
}

/// Why a key file's text gives no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// It is encrypted and no passphrase was given.
    Encrypted,
    /// The passphrase does not decrypt it (or the file was altered: the AEAD tag
    /// covers both).
    WrongPassphrase,
    /// Encrypted with a scheme a locked custody refuses (why).
    Weak(String),
    /// Not a key of this kind (why).
    Malformed(String),
}

/// The PEM label of an encrypted PKCS#8 private key (RFC 7468 §11).
const ENCRYPTED_KEY_LABEL: &str = "ENCRYPTED PRIVATE KEY";

/// Whether a key file's text is an encrypted key (read without a passphrase).
pub fn is_encrypted(text: &str) -> bool {
    text.trim_start()
        .starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----")
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
    encode_der(kind, secret)
        .to_pem(PRIVATE_KEY_LABEL, LineEnding::LF)
        .expect("a PKCS#8 document encodes as PEM")
}

/// The encrypted PEM PKCS#8 text of a 32-byte secret of `kind` under `passphrase`
/// (scrypt at `CUSTODY_SCRYPT_LOG_N`, AES-256-GCM; fresh salt and nonce from the
/// operating system's random source). `Err`: the random source failed.
pub fn encode_encrypted_pem(
    kind: KeyKind,
    secret: &[u8; 32],
    passphrase: &[u8],
) -> Result<Zeroizing<String>, String> {
    let mut salt = [0u8; 16];
    let mut nonce = [0u8; 12];
    getrandom::fill(&mut salt).map_err(|e| e.to_string())?;
    getrandom::fill(&mut nonce).map_err(|e| e.to_string())?;
    let cost = pkcs8::pkcs5::scrypt::Params::new(CUSTODY_SCRYPT_LOG_N, 8, 1)
        .expect("the named scrypt cost is valid");
    let params = pbes2::Parameters::scrypt_aes256gcm(cost, &salt, nonce)
        .expect("a 16-byte salt is a valid scrypt salt");
    encrypted_pem(params, passphrase, encode_der(kind, secret).as_bytes())
}

/// The encrypted PEM PKCS#8 text of the PKCS#8 document `plain` under `passphrase`
/// with `params`.
fn encrypted_pem(
    params: pbes2::Parameters,
    passphrase: &[u8],
    plain: &[u8],
) -> Result<Zeroizing<String>, String> {
    let sealed = params
        .encrypt(passphrase, plain)
        .map_err(|e| format!("encrypting the key: {e}"))?;
    let der = EncryptedPrivateKeyInfoRef {
        encryption_algorithm: params.into(),
        encrypted_data: OctetStringRef::new(&sealed).map_err(|e| e.to_string())?,
    }
    .to_der()
    .map_err(|e| e.to_string())?;
    Ok(Zeroizing::new(
        pkcs8::der::pem::encode_string(ENCRYPTED_KEY_LABEL, LineEnding::LF, &der)
            .expect("DER encodes as PEM"),
    ))
}

/// The PKCS#8 v1 document of a 32-byte secret of `kind`.
fn encode_der(kind: KeyKind, secret: &[u8; 32]) -> SecretDocument {
    let der = match kind {
        KeyKind::Ed25519 => ed25519_dalek::pkcs8::KeypairBytes {
            secret_key: *secret,
            public_key: None,
        }
        .to_pkcs8_der(),
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
                    .to_pkcs8_der()
                })
        }
    };
    der.expect("a 32-byte secret encodes as PKCS#8")
}

/// Checks how an encrypted key file's text is encrypted, without a passphrase: scrypt
/// within `CUSTODY_SCRYPT_LOG_N_MIN..=CUSTODY_SCRYPT_LOG_N_MAX` and AES-256-GCM, else
/// [`DecodeError::Weak`] saying why. Text that is not an encrypted key is malformed.
pub fn check_encryption(text: &str) -> Result<(), DecodeError> {
    let (label, document) = SecretDocument::from_pem(text.trim())
        .map_err(|e| DecodeError::Malformed(format!("not an encrypted PEM PKCS#8 key: {e}")))?;
    if label != ENCRYPTED_KEY_LABEL {
        return Err(DecodeError::Malformed(format!(
            "its label is `{label}`, not `{ENCRYPTED_KEY_LABEL}`"
        )));
    }
    let info = EncryptedPrivateKeyInfoRef::from_der(document.as_bytes())
        .map_err(|e| DecodeError::Malformed(format!("not an encrypted PKCS#8 key: {e}")))?;
    strong_enough(&info)
}

fn strong_enough(info: &EncryptedPrivateKeyInfoRef<'_>) -> Result<(), DecodeError> {
    let weak = |why: String| Err(DecodeError::Weak(why));
    let Some(params) = info.encryption_algorithm.pbes2() else {
        return weak("it is not encrypted with PBES2 (a PBES1 scheme)".to_owned());
    };
    let Some(scrypt) = params.kdf.scrypt() else {
        return weak(format!(
            "its key derivation is {}, not scrypt",
            params.kdf.oid()
        ));
    };
    if !matches!(params.encryption, pbes2::EncryptionScheme::Aes256Gcm { .. }) {
        return weak(format!(
            "its cipher is {}, not AES-256-GCM",
            params.encryption.oid()
        ));
    }
    let n = scrypt.cost_parameter;
    if !n.is_power_of_two() {
        return weak(format!("its scrypt cost N = {n} is not a power of two"));
    }
    let log_n = n.trailing_zeros();
    if log_n < u32::from(CUSTODY_SCRYPT_LOG_N_MIN) {
        return weak(format!(
            "its scrypt cost is 2^{log_n}, below 2^{CUSTODY_SCRYPT_LOG_N_MIN} (CUSTODY_SCRYPT_LOG_N_MIN)"
        ));
    }
    if log_n > u32::from(CUSTODY_SCRYPT_LOG_N_MAX)
        || scrypt.block_size > CUSTODY_SCRYPT_R_MAX
        || scrypt.parallelization > CUSTODY_SCRYPT_P_MAX
    {
        return weak(format!(
            "its scrypt cost (2^{log_n}, r = {}, p = {}) is above what a host decrypts (CUSTODY_SCRYPT_LOG_N_MAX, CUSTODY_SCRYPT_R_MAX, CUSTODY_SCRYPT_P_MAX)",
            scrypt.block_size, scrypt.parallelization
        ));
    }
    if scrypt.block_size < 8 {
        return weak(format!(
            "its scrypt block size r = {} is below 8",
            scrypt.block_size
        ));
    }
    Ok(())
}

/// The 32-byte secret of `kind` a key file holds, and its format: an encrypted file
/// only with `passphrase` (and only if [`check_encryption`] accepts how it is
/// encrypted); `Err` says why there is no secret.
pub fn decode(
    kind: KeyKind,
    text: &str,
    passphrase: Option<&[u8]>,
) -> Result<(Zeroizing<[u8; 32]>, KeyFormat), DecodeError> {
    let text = text.trim();
    if !text.starts_with("-----BEGIN") {
        return super::unhex(text)
            .map(|secret| (Zeroizing::new(secret), KeyFormat::Hex))
            .ok_or_else(|| {
                DecodeError::Malformed(format!(
                    "expected a PEM PKCS#8 {} key (or the older 64 hexadecimal digits)",
                    kind.name()
                ))
            });
    }
    if is_encrypted(text) {
        check_encryption(text)?;
        let Some(passphrase) = passphrase else {
            return Err(DecodeError::Encrypted);
        };
        let (_, document) =
            SecretDocument::from_pem(text).map_err(|e| DecodeError::Malformed(e.to_string()))?;
        let info = EncryptedPrivateKeyInfoRef::from_der(document.as_bytes())
            .map_err(|e| DecodeError::Malformed(e.to_string()))?;
        let plain = info
            .decrypt(passphrase)
            .map_err(|_| DecodeError::WrongPassphrase)?;
        let secret = decode_der(kind, plain.as_bytes()).map_err(DecodeError::Malformed)?;
        return Ok((secret, KeyFormat::Encrypted));
    }
    let pem = |e: &dyn std::fmt::Display| format!("not a PEM PKCS#8 {} key: {e}", kind.name());
    let (label, document) =
        SecretDocument::from_pem(text).map_err(|e| DecodeError::Malformed(pem(&e)))?;
    if label != PRIVATE_KEY_LABEL {
        return Err(DecodeError::Malformed(pem(&format!(
            "its label is `{label}`, not `{PRIVATE_KEY_LABEL}`"
        ))));
    }
    let secret = decode_der(kind, document.as_bytes()).map_err(DecodeError::Malformed)?;
    Ok((secret, KeyFormat::Pem))
}

/// The secret of a PKCS#8 v1 document of `kind`.
fn decode_der(kind: KeyKind, der: &[u8]) -> Result<Zeroizing<[u8; 32]>, String> {
    let pem = |e: &dyn std::fmt::Display| format!("not a PEM PKCS#8 {} key: {e}", kind.name());
    let info = PrivateKeyInfoRef::from_der(der).map_err(|e| pem(&e))?;
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
    Ok(Zeroizing::new(secret))
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
            let (decoded, format) = decode(kind, &pem, None).unwrap();
            assert_eq!((*decoded, format), (secret, KeyFormat::Pem));
            let (decoded, format) = decode(kind, &hex::encode(secret), None).unwrap();
            assert_eq!((*decoded, format), (secret, KeyFormat::Hex));
        }
        // A key of the other kind is not this kind's key.
        let mail = encode_pem(KeyKind::X25519, &secret);
        assert!(matches!(
            decode(KeyKind::Ed25519, &mail, None),
            Err(DecodeError::Malformed(why)) if why.contains("1.3.101.110")
        ));
        assert!(
            decode(
                KeyKind::Ed25519,
                "-----BEGIN PRIVATE KEY-----\nAAAA\n",
                None
            )
            .is_err()
        );
        assert!(decode(KeyKind::X25519, "not a key", None).is_err());
    }

    #[test]
    fn an_encrypted_key_opens_with_its_passphrase_only() {
        let secret = [9u8; 32];
        for kind in [KeyKind::Ed25519, KeyKind::X25519] {
            let text = encode_encrypted_pem(kind, &secret, b"correct horse battery").unwrap();
            assert!(is_encrypted(&text), "{}", *text);
            assert_eq!(check_encryption(&text), Ok(()));
            let (decoded, format) = decode(kind, &text, Some(b"correct horse battery")).unwrap();
            assert_eq!((*decoded, format), (secret, KeyFormat::Encrypted));
            assert_eq!(
                decode(kind, &text, None).unwrap_err(),
                DecodeError::Encrypted
            );
            assert_eq!(
                decode(kind, &text, Some(b"correct horse batterz")).unwrap_err(),
                DecodeError::WrongPassphrase
            );
            // Fresh salt and nonce each time: the same key never encrypts alike.
            let again = encode_encrypted_pem(kind, &secret, b"correct horse battery").unwrap();
            assert_ne!(*text, *again);
        }
        // Decrypted, the other kind's key is still not this kind's.
        let mail = encode_encrypted_pem(KeyKind::X25519, &secret, b"pass phrase 12").unwrap();
        assert!(matches!(
            decode(KeyKind::Ed25519, &mail, Some(b"pass phrase 12")),
            Err(DecodeError::Malformed(_))
        ));
    }

    /// A file encrypted with a weak scheme is refused before any passphrase is tried.
    #[test]
    fn weak_encryption_is_refused() {
        let plain = encode_der(KeyKind::Ed25519, &[3u8; 32]);
        let encrypt = |params: pbes2::Parameters| {
            encrypted_pem(params, b"pass phrase 12", plain.as_bytes()).unwrap()
        };
        let cheap = pkcs8::pkcs5::scrypt::Params::new(10, 8, 1).unwrap();
        let low =
            encrypt(pbes2::Parameters::scrypt_aes256gcm(cheap, &[1u8; 16], [2u8; 12]).unwrap());
        let pbkdf2 = encrypt(pbes2::Parameters {
            kdf: pbes2::Pbkdf2Params::hmac_sha256(1_000, &[1u8; 16])
                .unwrap()
                .into(),
            encryption: pbes2::EncryptionScheme::Aes256Cbc { iv: [2u8; 16] },
        });
        let cost = pkcs8::pkcs5::scrypt::Params::new(CUSTODY_SCRYPT_LOG_N_MIN, 8, 1).unwrap();
        let cbc = encrypt(pbes2::Parameters {
            kdf: pbes2::ScryptParams::from_params_and_salt(cost, &[1u8; 16])
                .unwrap()
                .into(),
            encryption: pbes2::EncryptionScheme::Aes256Cbc { iv: [2u8; 16] },
        });
        for (text, says) in [
            (low, "2^10"),
            (pbkdf2, "not scrypt"),
            (cbc, "not AES-256-GCM"),
        ] {
            match decode(KeyKind::Ed25519, &text, Some(b"pass phrase 12")) {
                Err(DecodeError::Weak(why)) => assert!(why.contains(says), "{why}"),
                other => panic!("{says}: {other:?}"),
            }
        }
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
