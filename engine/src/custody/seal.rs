//! Sealing a value to a recipient's X25519 mail key (SPEC C4, issue 6): HPKE (RFC 9180)
//! base mode, single shot, with the suite
//!
//! | part | algorithm | RFC 9180 id |
//! |---|---|---|
//! | KEM | DHKEM(X25519, HKDF-SHA256) | `0x0020` |
//! | KDF | HKDF-SHA256 | `0x0001` |
//! | AEAD | ChaCha20-Poly1305 | `0x0003` |
//!
//! so that a relay, or anyone reading a journal, without the recipient's mail secret cannot
//! read a value of an encrypted route.
//!
//! # Why the `hpke` crate
//! The RFC's construction is implemented by the `hpke` crate (rozbb/rust-hpke, 0.15), not
//! here. With `default-features = false` and only `alloc`, `x25519` and `chacha` it builds on
//! exactly the crates the workspace already uses — x25519-dalek 3 / curve25519-dalek 5,
//! sha2 0.11 (through hkdf 0.13 / digest 0.11), rand_core 0.10, hybrid-array 0.4 — and adds
//! only the small symmetric pieces a hand-written version would need too (hkdf, hmac,
//! chacha20poly1305 and their traits) plus itself; `cargo tree -d -p grid-engine` lists no
//! new duplicate. A maintained implementation that passes the RFC's known-answer tests is
//! less risky than re-deriving LabeledExtract/LabeledExpand and the key schedule by hand;
//! this module only adapts types, binds delivery context, and maps errors. Its own tests
//! check the RFC 9180 Appendix A.2.1 vector through this module's entry points.
//!
//! # The ephemeral key
//! RFC 9180 §7.1.3: `GenerateKeyPair()` is `DeriveKeyPair(random ikm)`. [`seal`] draws the
//! 32 bytes of `ikmE` from the operating system (`getrandom`) and hands them to the
//! crate-private `seal_with_ephemeral`, the deterministic form the tests drive with the
//! RFC's `ikmE`. So the tests run the very path production uses. The `ikmE` buffer is zeroed
//! after use.
//!
//! # Wire form
//! [`Sealed`] is the pair `(enc, ct)` of RFC 9180 §6.1: `enc` is the sender's 32-byte
//! ephemeral public key, `ciphertext` the AEAD output (plaintext length + 16-byte tag).
//! With serde both are lower-case hexadecimal strings — `{"enc":"…64 hex…","ciphertext":"…"}`
//! — like the key fingerprints of `custody`; decoding refuses odd lengths, non-hex digits and
//! an `enc` that is not 32 bytes.
//!
//! # Delivery values
//! [`seal_value`] / [`open_value`] carry one finite `f64` (its 8 IEEE-754 bytes, big-endian)
//! with `info` = [`VALUE_INFO`] and the associated data binding the membership, the route and
//! the position (each length-prefixed, see [`value_binding`]). A value sealed for one
//! position, route or membership does not open at another. A non-finite value is refused
//! before it is sealed, and refused again if an opened plaintext is not finite (SPEC §1.7).
//!
//! Base mode gives confidentiality and integrity towards the holder of the mail secret, not
//! sender authentication: anyone knowing the recipient's public key can seal. Who published
//! a value is established by the transport (mutual TLS) and the route's publisher claim,
//! not by the seal.
//!
//! Nothing here panics on bad input: a wrong key, a truncated or altered ciphertext, an
//! altered `enc`, `info` or associated data each return a [`SealError`].

use std::convert::Infallible;

use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::rand_core::{TryCryptoRng, TryRng};
use hpke::{Deserializable, HpkeError, OpModeR, OpModeS, Serializable};
use serde::{Deserialize, Serialize};
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroize;

type Kem = X25519HkdfSha256;
type Kdf = HkdfSha256;
type Aead = ChaCha20Poly1305;
type KemPublicKey = <Kem as hpke::Kem>::PublicKey;
type KemPrivateKey = <Kem as hpke::Kem>::PrivateKey;
type EncappedKey = <Kem as hpke::Kem>::EncappedKey;

/// Length of `enc` (the KEM's `Nenc`) and of an X25519 key.
pub const ENC_LEN: usize = 32;
/// Length of the ChaCha20-Poly1305 tag (`Nt`) every ciphertext carries.
pub const TAG_LEN: usize = 16;
/// Length of a sealed `f64`: 8 value bytes and the tag.
pub const VALUE_CIPHERTEXT_LEN: usize = 8 + TAG_LEN;
/// The HPKE `info` of every delivery value: the application and the format's version.
pub const VALUE_INFO: &[u8] = b"grid/delivery/value/v1";

/// A sealed message: HPKE's `(enc, ct)`, and for a value sealed under a shared
/// context ([`SealContext`](super::seal_context::SealContext)) its sequence number
/// there. Serialized as hexadecimal strings; `seq` is absent from a single-shot seal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// The sender's ephemeral X25519 public key (`enc`, 32 bytes).
    #[serde(with = "hex::serde")]
    pub enc: [u8; ENC_LEN],
    /// The value's sequence number in its sender context (its nonce there); `None` for
    /// a single-shot seal (RFC 9180 §6.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The AEAD ciphertext: the plaintext's length plus the 16-byte tag.
    #[serde(with = "hex::serde")]
    pub ciphertext: Vec<u8>,
}

/// Why a value could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SealError {
    /// SPEC §1.7: only finite numbers are values; refused before sealing, and when an opened
    /// value is not finite.
    #[error("value {value} is not a finite number; only finite values are delivered")]
    NotFinite { value: f64 },
    /// The operating system did not provide randomness for the ephemeral key.
    #[error("no randomness for the ephemeral key: {0}")]
    Randomness(String),
    /// Encapsulation failed: the recipient's public key gives an all-zero X25519 result (a
    /// low-order point), so it is not a usable mail key.
    #[error("cannot seal: the recipient's mail key is not a usable X25519 public key")]
    RecipientKey,
    /// Decapsulation failed: `enc` gives an all-zero X25519 result (a low-order point).
    #[error("cannot open: the sealed value's enc is not a usable X25519 public key")]
    Enc,
    /// The AEAD refused to encrypt (the message limit or an internal length bound).
    #[error("cannot seal: the AEAD refused the plaintext ({0})")]
    Encrypt(String),
    /// Authentication failed: the ciphertext is truncated or altered, or the key, `enc`,
    /// `info` or associated data is not the one it was sealed with.
    #[error(
        "cannot open: authentication failed (wrong recipient key, or an altered or truncated \
         ciphertext, enc, info or binding)"
    )]
    Open,
    /// An opened value is not the 8 bytes of an `f64`.
    #[error("opened value has {len} bytes; a sealed value is 8 bytes")]
    ValueLength { len: usize },
    /// Any other failure reported by the HPKE implementation.
    #[error("HPKE failure: {0}")]
    Hpke(String),
}

/// Seals `plaintext` to `recipient` (RFC 9180 §6.1 `SealBase`) with a fresh ephemeral key.
pub fn seal(
    recipient: &PublicKey,
    info: &[u8],
    aad: &[u8],
    plaintext: &[u8],
) -> Result<Sealed, SealError> {
    with_fresh_ephemeral(|ikm_e| seal_with_ephemeral(ikm_e, recipient, info, aad, plaintext))
}

/// Runs `make` with 32 bytes of `ikmE` drawn from the operating system (`getrandom`),
/// zeroed afterwards: a fresh ephemeral key for one seal or one sealing context.
pub(super) fn with_fresh_ephemeral<T>(
    make: impl FnOnce(&[u8; ENC_LEN]) -> Result<T, SealError>,
) -> Result<T, SealError> {
    let mut ikm_e = [0u8; ENC_LEN];
    let drawn = getrandom::fill(&mut ikm_e).map_err(|e| SealError::Randomness(e.to_string()));
    let made = drawn.and_then(|()| make(&ikm_e));
    ikm_e.zeroize();
    made
}

/// [`seal`] with the ephemeral key derived from `ikm_e` (RFC 9180 §7.1.3 `DeriveKeyPair`),
/// as in the RFC's test vectors. Only [`seal`] (with fresh randomness) and tests call it:
/// reusing an `ikm_e` reuses the ephemeral key.
pub(crate) fn seal_with_ephemeral(
    ikm_e: &[u8; ENC_LEN],
    recipient: &PublicKey,
    info: &[u8],
    aad: &[u8],
    plaintext: &[u8],
) -> Result<Sealed, SealError> {
    let recipient = KemPublicKey::from_bytes(recipient.as_bytes()).map_err(on_seal)?;
    let mut ephemeral = OnceRng::new(ikm_e);
    let (enc, ciphertext) = hpke::single_shot_seal_with_rng::<Aead, Kdf, Kem>(
        &OpModeS::Base,
        &recipient,
        info,
        plaintext,
        aad,
        &mut ephemeral,
    )
    .map_err(on_seal)?;
    ephemeral.drawn_once()?;
    Ok(Sealed {
        enc: enc_bytes(&enc),
        seq: None,
        ciphertext,
    })
}

fn enc_bytes(enc: &EncappedKey) -> [u8; ENC_LEN] {
    let mut bytes = [0u8; ENC_LEN];
    bytes.copy_from_slice(&enc.to_bytes());
    bytes
}

/// RFC 9180 §5.1 `SetupBaseS` to `recipient` with the ephemeral key derived from `ikm_e`,
/// then §5.3 `Export(exporter_context, 32)`: the context's `enc` and the exported key.
pub(super) fn setup_and_export(
    ikm_e: &[u8; ENC_LEN],
    recipient: &PublicKey,
    info: &[u8],
    exporter_context: &[u8],
) -> Result<([u8; ENC_LEN], [u8; 32]), SealError> {
    let recipient = KemPublicKey::from_bytes(recipient.as_bytes()).map_err(on_seal)?;
    let mut ephemeral = OnceRng::new(ikm_e);
    let (enc, context) = hpke::setup_sender_with_rng::<Aead, Kdf, Kem>(
        &OpModeS::Base,
        &recipient,
        info,
        &mut ephemeral,
    )
    .map_err(on_seal)?;
    ephemeral.drawn_once()?;
    let mut key = [0u8; 32];
    context
        .export(exporter_context, &mut key)
        .map_err(on_seal)?;
    Ok((enc_bytes(&enc), key))
}

/// RFC 9180 §5.1 `SetupBaseR` of `enc` with the mail secret, then §5.3
/// `Export(exporter_context, 32)`: the key [`setup_and_export`] exported.
pub(super) fn decap_and_export(
    recipient: &StaticSecret,
    enc: &[u8; ENC_LEN],
    info: &[u8],
    exporter_context: &[u8],
) -> Result<[u8; 32], SealError> {
    let mut secret = recipient.to_bytes();
    let key = KemPrivateKey::from_bytes(&secret);
    secret.zeroize();
    let key = key.map_err(on_open)?;
    let enc = EncappedKey::from_bytes(enc).map_err(on_open)?;
    let context = hpke::setup_receiver::<Aead, Kdf, Kem>(&OpModeR::Base, &key, &enc, info)
        .map_err(on_open)?;
    let mut exported = [0u8; 32];
    context
        .export(exporter_context, &mut exported)
        .map_err(on_open)?;
    Ok(exported)
}

/// Opens `sealed` with the recipient's mail secret (RFC 9180 §6.1 `OpenBase`).
pub fn open(
    recipient: &StaticSecret,
    info: &[u8],
    aad: &[u8],
    sealed: &Sealed,
) -> Result<Vec<u8>, SealError> {
    if sealed.seq.is_some() {
        // A value of a shared context opens only as a delivery value (open_payload).
        return Err(SealError::Open);
    }
    let mut secret = recipient.to_bytes();
    let key = KemPrivateKey::from_bytes(&secret);
    secret.zeroize();
    let key = key.map_err(on_open)?;
    let enc = EncappedKey::from_bytes(&sealed.enc).map_err(on_open)?;
    hpke::single_shot_open::<Aead, Kdf, Kem>(
        &OpModeR::Base,
        &key,
        &enc,
        info,
        &sealed.ciphertext,
        aad,
    )
    .map_err(on_open)
}

/// Seals one delivery value for `recipient`, bound to its membership, route and position.
/// A non-finite value is refused before anything is sealed.
pub fn seal_value(
    recipient: &PublicKey,
    route: &str,
    membership: &str,
    position: u64,
    value: f64,
) -> Result<Sealed, SealError> {
    if !value.is_finite() {
        return Err(SealError::NotFinite { value });
    }
    seal_payload(recipient, route, membership, position, &value.to_be_bytes())
}

/// Seals one delivery payload (a scalar's 8 bytes, or a mapping's GRDX matrix) for
/// `recipient`, bound to its membership, route and position as [`seal_value`] binds.
pub fn seal_payload(
    recipient: &PublicKey,
    route: &str,
    membership: &str,
    position: u64,
    payload: &[u8],
) -> Result<Sealed, SealError> {
    let binding = value_binding(membership, route, position);
    seal(recipient, VALUE_INFO, &binding, payload)
}

/// Opens one delivery payload sealed by [`seal_payload`] for this membership, route
/// and position; what it holds is for the caller to check (a mapping decodes it as
/// GRDX).
pub fn open_payload(
    recipient: &StaticSecret,
    route: &str,
    membership: &str,
    position: u64,
    sealed: &Sealed,
) -> Result<Vec<u8>, SealError> {
    let binding = value_binding(membership, route, position);
    match sealed.seq {
        Some(seq) => super::seal_context::open_in_context(recipient, &binding, sealed, seq),
        None => open(recipient, VALUE_INFO, &binding, sealed),
    }
}

/// Opens one delivery value sealed by [`seal_value`] for this membership, route and position.
/// Refuses a plaintext that is not 8 bytes or not a finite number.
pub fn open_value(
    recipient: &StaticSecret,
    route: &str,
    membership: &str,
    position: u64,
    sealed: &Sealed,
) -> Result<f64, SealError> {
    let mut plain = open_payload(recipient, route, membership, position, sealed)?;
    let bytes: Result<[u8; 8], _> = plain.as_slice().try_into();
    let len = plain.len();
    plain.zeroize();
    let value = f64::from_be_bytes(bytes.map_err(|_| SealError::ValueLength { len })?);
    if !value.is_finite() {
        return Err(SealError::NotFinite { value });
    }
    Ok(value)
}

/// The associated data of a delivery value: [`VALUE_INFO`], then the membership and the
/// route (each as a big-endian `u64` byte length and its UTF-8 bytes), then the position as
/// a big-endian `u64`. The length prefixes keep `("a/b", "c")` and `("a", "b/c")` apart.
pub fn value_binding(membership: &str, route: &str, position: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(VALUE_INFO.len() + 8 + membership.len() + 8 + route.len() + 8);
    out.extend_from_slice(VALUE_INFO);
    for part in [membership, route] {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(&position.to_be_bytes());
    out
}

fn on_seal(error: HpkeError) -> SealError {
    match error {
        HpkeError::EncapError => SealError::RecipientKey,
        HpkeError::SealError | HpkeError::MessageLimitReached => {
            SealError::Encrypt(error.to_string())
        }
        other => SealError::Hpke(other.to_string()),
    }
}

fn on_open(error: HpkeError) -> SealError {
    match error {
        HpkeError::DecapError => SealError::Enc,
        HpkeError::OpenError => SealError::Open,
        other => SealError::Hpke(other.to_string()),
    }
}

/// The "randomness" of one encapsulation: exactly the 32 bytes of `ikmE`, handed out once.
/// `hpke` asks its RNG for the ephemeral key's input keying material (`GenerateKeyPair` is
/// `DeriveKeyPair(random ikm)`); giving it bytes drawn from the operating system (or, in
/// tests, the RFC's `ikmE`) makes the KEM use exactly that key. A request beyond those 32
/// bytes is answered with zeros and marks the generator `overdrawn`, which the caller checks
/// before using the result — so it can never silently seal with a predictable key.
struct OnceRng {
    bytes: [u8; ENC_LEN],
    used: usize,
    overdrawn: bool,
}

impl OnceRng {
    fn new(ikm_e: &[u8; ENC_LEN]) -> Self {
        Self {
            bytes: *ikm_e,
            used: 0,
            overdrawn: false,
        }
    }

    /// Refuses what was made with it if the KEM asked for more than one key's worth of
    /// randomness: the ephemeral key would not be the one derived from `ikm_e`. Never
    /// hand out such a seal or context.
    fn drawn_once(&self) -> Result<(), SealError> {
        match self.overdrawn {
            true => Err(SealError::Hpke(
                "the KEM asked for more than 32 bytes of ephemeral randomness".to_owned(),
            )),
            false => Ok(()),
        }
    }
}

impl Drop for OnceRng {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl TryRng for OnceRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut word = [0u8; 4];
        self.try_fill_bytes(&mut word)?;
        Ok(u32::from_le_bytes(word))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut word = [0u8; 8];
        self.try_fill_bytes(&mut word)?;
        Ok(u64::from_le_bytes(word))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        let available = &self.bytes[self.used..];
        let n = available.len().min(dst.len());
        dst[..n].copy_from_slice(&available[..n]);
        dst[n..].fill(0);
        self.used += n;
        if n < dst.len() {
            self.overdrawn = true;
        }
        Ok(())
    }
}

// Only the values drawn in `seal` (or a test vector) are handed out, once; see the type's doc.
impl TryCryptoRng for OnceRng {}

#[cfg(test)]
mod tests {
    use super::*;
    use hpke::Kem as _;

    /// RFC 9180 Appendix A.2.1: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20Poly1305,
    /// base mode (mode 0, kem_id 32, kdf_id 1, aead_id 3), and its first encryption
    /// (sequence number 0), copied from the RFC.
    mod a_2_1 {
        pub const INFO: &str = "4f6465206f6e2061204772656369616e2055726e";
        pub const IKM_E: &str = "909a9b35d3dc4713a5e72a4da274b55d3d3821a37e5d099e74a647db583a904b";
        pub const PK_EM: &str = "1afa08d3dec047a643885163f1180476fa7ddb54c6a8029ea33f95796bf2ac4a";
        pub const SK_EM: &str = "f4ec9b33b792c372c1d2c2063507b684ef925b8c75a42dbcbf57d63ccd381600";
        pub const IKM_R: &str = "1ac01f181fdf9f352797655161c58b75c656a6cc2716dcb66372da835542e1df";
        pub const PK_RM: &str = "4310ee97d88cc1f088a5576c77ab0cf5c3ac797f3d95139c6c84b5429c59662a";
        pub const SK_RM: &str = "8057991eef8f1f1af18f4a9491d16a1ce333f695d4db8e38da75975c4478e0fb";
        pub const ENC: &str = "1afa08d3dec047a643885163f1180476fa7ddb54c6a8029ea33f95796bf2ac4a";
        pub const AAD_0: &str = "436f756e742d30";
        pub const PT: &str = "4265617574792069732074727574682c20747275746820626561757479";
        pub const CT_0: &str = "1c5250d8034ec2b784ba2cfd69dbdb8af406cfe3ff938e131f0def8c8b60b4db21993c62ce81883d2dd1b51a28";
    }

    fn bytes(text: &str) -> Vec<u8> {
        hex::decode(text).expect("test hex")
    }

    fn key32(text: &str) -> [u8; 32] {
        bytes(text).try_into().expect("32 bytes")
    }

    fn keypair(seed: u8) -> (StaticSecret, PublicKey) {
        let secret = StaticSecret::from([seed; 32]);
        let public = PublicKey::from(&secret);
        (secret, public)
    }

    fn altered(of: &[u8], at: usize) -> Vec<u8> {
        let mut changed = of.to_vec();
        changed[at] ^= 0x01;
        changed
    }

    #[test]
    fn rfc_9180_a_2_1_keys() {
        // The RFC's skEm/skRm are DeriveKeyPair's output before clamping; X25519 clamps
        // when it multiplies, so both give the listed public keys.
        let sk_em = StaticSecret::from(key32(a_2_1::SK_EM));
        assert_eq!(PublicKey::from(&sk_em).as_bytes(), &key32(a_2_1::PK_EM));
        let sk_rm = StaticSecret::from(key32(a_2_1::SK_RM));
        assert_eq!(PublicKey::from(&sk_rm).as_bytes(), &key32(a_2_1::PK_RM));
        // DeriveKeyPair(ikmE) and DeriveKeyPair(ikmR) give the same key pairs.
        for (ikm, sk, pk) in [
            (a_2_1::IKM_E, a_2_1::SK_EM, a_2_1::PK_EM),
            (a_2_1::IKM_R, a_2_1::SK_RM, a_2_1::PK_RM),
        ] {
            let (derived_sk, derived_pk) = Kem::derive_keypair(&bytes(ikm));
            assert_eq!(derived_pk.to_bytes().as_slice(), bytes(pk).as_slice());
            let clamped = x25519_dalek::StaticSecret::from(key32(sk));
            let from_derived = StaticSecret::from(
                <[u8; 32]>::try_from(derived_sk.to_bytes().as_slice()).expect("32 bytes"),
            );
            assert_eq!(
                PublicKey::from(&clamped).as_bytes(),
                PublicKey::from(&from_derived).as_bytes()
            );
        }
    }

    #[test]
    fn rfc_9180_a_2_1_first_encryption() {
        let pk_rm = PublicKey::from(key32(a_2_1::PK_RM));
        let sealed = seal_with_ephemeral(
            &key32(a_2_1::IKM_E),
            &pk_rm,
            &bytes(a_2_1::INFO),
            &bytes(a_2_1::AAD_0),
            &bytes(a_2_1::PT),
        )
        .expect("seal");
        assert_eq!(sealed.enc, key32(a_2_1::ENC));
        assert_eq!(sealed.ciphertext, bytes(a_2_1::CT_0));

        let sk_rm = StaticSecret::from(key32(a_2_1::SK_RM));
        let vector = Sealed {
            enc: key32(a_2_1::ENC),
            seq: None,
            ciphertext: bytes(a_2_1::CT_0),
        };
        let opened =
            open(&sk_rm, &bytes(a_2_1::INFO), &bytes(a_2_1::AAD_0), &vector).expect("open");
        assert_eq!(opened, bytes(a_2_1::PT));
    }

    #[test]
    fn round_trip_with_fresh_ephemeral_keys() {
        let (secret, public) = keypair(7);
        let first = seal(&public, b"info", b"aad", b"hello").expect("seal");
        let second = seal(&public, b"info", b"aad", b"hello").expect("seal");
        assert_ne!(
            first.enc, second.enc,
            "each seal uses a fresh ephemeral key"
        );
        assert_ne!(first.ciphertext, second.ciphertext);
        assert_eq!(first.ciphertext.len(), 5 + TAG_LEN);
        for sealed in [&first, &second] {
            assert_eq!(
                open(&secret, b"info", b"aad", sealed).expect("open"),
                b"hello"
            );
        }
        let empty = seal(&public, b"", b"", b"").expect("seal empty");
        assert_eq!(empty.ciphertext.len(), TAG_LEN);
        assert_eq!(open(&secret, b"", b"", &empty).expect("open empty"), b"");
    }

    #[test]
    fn wrong_recipient_key_fails() {
        let (_, public) = keypair(7);
        let (other, _) = keypair(8);
        let sealed = seal(&public, b"info", b"aad", b"secret").expect("seal");
        assert_eq!(open(&other, b"info", b"aad", &sealed), Err(SealError::Open));
    }

    #[test]
    fn tampering_fails_without_panicking() {
        let (secret, public) = keypair(9);
        let sealed = seal(&public, b"info", b"aad", b"payload").expect("seal");
        for at in 0..sealed.ciphertext.len() {
            let tampered = Sealed {
                ciphertext: altered(&sealed.ciphertext, at),
                ..sealed.clone()
            };
            assert_eq!(
                open(&secret, b"info", b"aad", &tampered),
                Err(SealError::Open)
            );
        }
        for at in 0..ENC_LEN {
            let enc = <[u8; 32]>::try_from(altered(&sealed.enc, at).as_slice()).expect("32");
            let tampered = Sealed {
                enc,
                ..sealed.clone()
            };
            assert!(open(&secret, b"info", b"aad", &tampered).is_err());
        }
        for len in 0..sealed.ciphertext.len() {
            let truncated = Sealed {
                ciphertext: sealed.ciphertext[..len].to_vec(),
                ..sealed.clone()
            };
            assert_eq!(
                open(&secret, b"info", b"aad", &truncated),
                Err(SealError::Open)
            );
        }
        assert_eq!(
            open(&secret, b"info", b"aae", &sealed),
            Err(SealError::Open)
        );
        assert_eq!(
            open(&secret, b"infp", b"aad", &sealed),
            Err(SealError::Open)
        );
        assert_eq!(
            open(&secret, b"info", b"aad", &sealed).expect("untouched"),
            b"payload"
        );
    }

    #[test]
    fn low_order_points_are_refused() {
        let (secret, _) = keypair(10);
        // The all-zero u-coordinate is a low-order point: X25519 gives all zeros.
        let zero = PublicKey::from([0u8; 32]);
        assert_eq!(seal(&zero, b"", b"", b"x"), Err(SealError::RecipientKey));
        let sealed = Sealed {
            enc: [0u8; 32],
            seq: None,
            ciphertext: vec![0u8; 24],
        };
        assert_eq!(open(&secret, b"", b"", &sealed), Err(SealError::Enc));
    }

    #[test]
    fn value_round_trip_and_binding() {
        let (secret, public) = keypair(11);
        for value in [0.0, -0.0, 1.5, -273.15, f64::MAX, f64::MIN_POSITIVE, 82.5] {
            let sealed = seal_value(&public, "plant/temp_f", "plant-ops", 5, value).expect("seal");
            assert_eq!(sealed.ciphertext.len(), VALUE_CIPHERTEXT_LEN);
            let opened =
                open_value(&secret, "plant/temp_f", "plant-ops", 5, &sealed).expect("open");
            assert_eq!(opened.to_bits(), value.to_bits());
        }

        let sealed = seal_value(&public, "plant/temp_f", "plant-ops", 5, 99.25).expect("seal");
        assert_eq!(
            open_value(&secret, "plant/temp_f", "plant-ops", 6, &sealed),
            Err(SealError::Open),
            "another position"
        );
        assert_eq!(
            open_value(&secret, "plant/temp_c", "plant-ops", 5, &sealed),
            Err(SealError::Open),
            "another route"
        );
        assert_eq!(
            open_value(&secret, "plant/temp_f", "other-ops", 5, &sealed),
            Err(SealError::Open),
            "another membership"
        );
        let (other, _) = keypair(12);
        assert_eq!(
            open_value(&other, "plant/temp_f", "plant-ops", 5, &sealed),
            Err(SealError::Open),
            "another recipient"
        );
        // Length prefixes keep the parts apart.
        assert_ne!(value_binding("a/b", "c", 1), value_binding("a", "b/c", 1));
        assert_ne!(value_binding("ab", "", 1), value_binding("a", "b", 1));
    }

    #[test]
    fn non_finite_values_are_refused_both_ways() {
        let (secret, public) = keypair(13);
        for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            match seal_value(&public, "r", "m", 1, value) {
                Err(SealError::NotFinite { value: refused }) => {
                    assert_eq!(refused.to_bits(), value.to_bits());
                }
                other => panic!("expected NotFinite, got {other:?}"),
            }
            // A sender that skips the check: the recipient still refuses.
            let forged = seal(
                &public,
                VALUE_INFO,
                &value_binding("m", "r", 1),
                &value.to_be_bytes(),
            )
            .expect("raw seal");
            match open_value(&secret, "r", "m", 1, &forged) {
                Err(SealError::NotFinite { value: refused }) => {
                    assert_eq!(refused.to_bits(), value.to_bits());
                }
                other => panic!("expected NotFinite, got {other:?}"),
            }
        }
        // A plaintext of the wrong length is refused, not padded or truncated.
        let short =
            seal(&public, VALUE_INFO, &value_binding("m", "r", 1), &[0u8; 7]).expect("seal");
        assert_eq!(
            open_value(&secret, "r", "m", 1, &short),
            Err(SealError::ValueLength { len: 7 })
        );
    }

    #[test]
    fn ciphertext_never_contains_the_plaintext_bytes() {
        let (_, public) = keypair(14);
        for (i, value) in [0.0, 1.0, 82.5, -1e300, 123_456.789, f64::MAX]
            .into_iter()
            .enumerate()
        {
            let plain = value.to_be_bytes();
            let sealed =
                seal_value(&public, "plant/temp_f", "plant-ops", i as u64, value).expect("seal");
            let mut wire = sealed.enc.to_vec();
            wire.extend_from_slice(&sealed.ciphertext);
            assert!(
                !wire.windows(8).any(|w| w == plain),
                "plaintext bytes of {value} appear in the sealed form"
            );
            let json = serde_json::to_string(&sealed).expect("json");
            assert!(!json.contains(&hex::encode(plain)));
        }
    }

    #[test]
    fn serde_is_hex_and_round_trips() {
        let (secret, public) = keypair(15);
        let sealed = seal_value(&public, "r", "m", 3, 4.25).expect("seal");
        let json = serde_json::to_string(&sealed).expect("json");
        assert_eq!(
            json,
            format!(
                r#"{{"enc":"{}","ciphertext":"{}"}}"#,
                hex::encode(sealed.enc),
                hex::encode(&sealed.ciphertext)
            )
        );
        let back: Sealed = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, sealed);
        assert_eq!(open_value(&secret, "r", "m", 3, &back), Ok(4.25));

        let short_enc = r#"{"enc":"00","ciphertext":""}"#;
        assert!(serde_json::from_str::<Sealed>(short_enc).is_err());
        let odd = format!(
            r#"{{"enc":"{}","ciphertext":"abc"}}"#,
            hex::encode([1u8; 32])
        );
        assert!(serde_json::from_str::<Sealed>(&odd).is_err());
        let not_hex = format!(
            r#"{{"enc":"{}","ciphertext":"zz"}}"#,
            hex::encode([1u8; 32])
        );
        assert!(serde_json::from_str::<Sealed>(&not_hex).is_err());
    }

    #[test]
    fn once_rng_hands_out_its_bytes_once() {
        let mut rng = OnceRng::new(&[7u8; 32]);
        let mut first = [0u8; 32];
        rng.try_fill_bytes(&mut first).expect("infallible");
        assert_eq!(first, [7u8; 32]);
        assert!(!rng.overdrawn);
        let mut more = [1u8; 4];
        rng.try_fill_bytes(&mut more).expect("infallible");
        assert_eq!(more, [0u8; 4]);
        assert!(rng.overdrawn);
    }
}
