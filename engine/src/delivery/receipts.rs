//! Signed cumulative receipts (SPEC C4, principle 5) and the digest chain they carry.
//!
//! A recipient signs, with its Ed25519 signing key, what it durably holds of one route:
//! the highest position and a digest of the held sequence. The receipt is cumulative —
//! it covers every position up to `highest_position` that the recipient owes — and it
//! verifies offline with the recipient's public key of the named generation.
//!
//! ## The digest chain
//! `chain(previous, position, payload)` is
//! `SHA-256(len ‖ "grid/delivery/chain/v1" ‖ previous ‖ position ‖ len ‖ payload)`, every
//! length and the position as 8 bytes big-endian. Starting from [`GENESIS`] (32 zero
//! bytes: nothing held):
//! - **Ordered**: the digest folds every value the recipient holds, in order:
//!   `digest_n = chain(digest_{n-1}, position_n, payload_n)` over the positions it owes
//!   (those whose frozen cohort names it). Publisher and recipient compute it the same
//!   way, so a receipt proves *which* sequence is held, not only how many values.
//! - **Latest**: the recipient holds one value, the newest it accepted, so the digest
//!   is the one-link chain `chain(GENESIS, position, payload)` of that value.
//!
//! The payload is whatever bytes the route carries end to end: the 8 big-endian bytes
//! of a finite `f64` for a scalar route (see `ordered::value_payload`). On an encrypted
//! route the chain covers the value bytes, not a sealed envelope: sealing (HPKE,
//! `seal`) is done per send, and both ends chain what the recipient opened.
//!
//! ## The signed bytes
//! [`ReceiptBody::signed_bytes`] is the one canonical byte string a receipt signs:
//!
//! | field | encoding |
//! |---|---|
//! | domain | u64 length ‖ `grid/delivery/receipt/v1` |
//! | route | u64 length ‖ UTF-8 |
//! | membership | u64 length ‖ UTF-8 |
//! | recipient | u64 length ‖ UTF-8 |
//! | class | 1 byte: `1` ordered, `2` latest |
//! | highest position | u64 |
//! | digest | 32 bytes |
//! | signer generation | u32 |
//!
//! Integers are big-endian. Every variable field is length-prefixed and every other
//! field has a fixed width, so the encoding is injective: no two distinct receipts share
//! signed bytes. The domain separates them from every other thing a host signs.
//!
//! Invariants (checked by the tests of this file):
//! - no receipt verifies under a key other than its signer's, nor after any field —
//!   generation included — is changed;
//! - no two receipts that differ in any field share signed bytes;
//! - no two different held sequences share a digest (short of a SHA-256 collision):
//!   position, payload and the order of links all enter the chain.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The digest of an empty holding: nothing received yet.
pub const GENESIS: [u8; 32] = [0; 32];

/// Domain of the digest chain.
pub const CHAIN_DOMAIN: &[u8] = b"grid/delivery/chain/v1";

/// Domain of a receipt's signed bytes.
pub const RECEIPT_DOMAIN: &[u8] = b"grid/delivery/receipt/v1";

/// A route's class (the topology's `class=ordered|latest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    Ordered,
    Latest,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Ordered => "ordered",
            Class::Latest => "latest",
        }
    }

    fn tag(self) -> u8 {
        match self {
            Class::Ordered => 1,
            Class::Latest => 2,
        }
    }
}

impl From<grid_spec::RouteClass> for Class {
    fn from(class: grid_spec::RouteClass) -> Self {
        match class {
            grid_spec::RouteClass::Ordered => Class::Ordered,
            grid_spec::RouteClass::Latest => Class::Latest,
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One link of the digest chain: the digest after holding `payload` at `position` on
/// top of `previous`.
pub fn chain(previous: &[u8; 32], position: u64, payload: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update((CHAIN_DOMAIN.len() as u64).to_be_bytes());
    hash.update(CHAIN_DOMAIN);
    hash.update(previous);
    hash.update(position.to_be_bytes());
    hash.update((payload.len() as u64).to_be_bytes());
    hash.update(payload);
    hash.finalize().into()
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    #[error(
        "receipt of `{recipient}` for route `{route}` (membership `{membership}`, position {highest_position}) does not verify with the given key of generation {generation}"
    )]
    BadSignature {
        route: String,
        membership: String,
        recipient: String,
        highest_position: u64,
        generation: u32,
    },
}

/// What a recipient holds of one route: the data a receipt signs (without its signer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptBody {
    pub route: String,
    pub membership: String,
    pub recipient: String,
    pub class: Class,
    /// The highest position held (0: nothing yet). Ordered: every owed position up to
    /// it is held; Latest: the position of the one value held.
    pub highest_position: u64,
    #[serde(with = "hex::serde")]
    pub digest: [u8; 32],
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

impl ReceiptBody {
    /// The canonical bytes signed by generation `generation` (layout in the module
    /// documentation).
    pub fn signed_bytes(&self, generation: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            4 * 8
                + RECEIPT_DOMAIN.len()
                + self.route.len()
                + self.membership.len()
                + self.recipient.len()
                + 1
                + 8
                + 32
                + 4,
        );
        put_bytes(&mut out, RECEIPT_DOMAIN);
        put_bytes(&mut out, self.route.as_bytes());
        put_bytes(&mut out, self.membership.as_bytes());
        put_bytes(&mut out, self.recipient.as_bytes());
        out.push(self.class.tag());
        out.extend_from_slice(&self.highest_position.to_be_bytes());
        out.extend_from_slice(&self.digest);
        out.extend_from_slice(&generation.to_be_bytes());
        out
    }

    /// Signs with the recipient's signing key of generation `generation`.
    pub fn sign(&self, key: &SigningKey, generation: u32) -> Receipt {
        let signature = key.sign(&self.signed_bytes(generation));
        Receipt {
            body: self.clone(),
            generation,
            signature: signature.to_bytes(),
        }
    }
}

/// A signed cumulative receipt. JSON: strings and numbers, the digest and signature
/// in lower-case hexadecimal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// What is signed (its fields appear at the top level of the JSON).
    #[serde(flatten)]
    pub body: ReceiptBody,
    /// The generation of the recipient's signing key that signed it.
    pub generation: u32,
    #[serde(with = "hex::serde")]
    pub signature: [u8; 64],
}

impl Receipt {
    /// Signs `body` (the same as [`ReceiptBody::sign`]).
    pub fn sign(body: &ReceiptBody, key: &SigningKey, generation: u32) -> Receipt {
        body.sign(key, generation)
    }

    /// The canonical bytes this receipt signs.
    pub fn signed_bytes(&self) -> Vec<u8> {
        self.body.signed_bytes(self.generation)
    }

    /// Verifies the signature offline with the recipient's public key of generation
    /// `self.generation` (the caller picks the key by generation, e.g. from the
    /// recipient's custody manifest). Strict Ed25519 verification.
    pub fn verify(&self, key: &VerifyingKey) -> Result<(), ReceiptError> {
        self.verified(key).map(|_| ())
    }

    /// This receipt with its signature verified by `key` (as [`Receipt::verify`]): the
    /// only way to a [`Verified`], which an outbox applies without verifying again.
    pub fn verified(&self, key: &VerifyingKey) -> Result<Verified<'_>, ReceiptError> {
        key.verify_strict(
            &self.signed_bytes(),
            &Signature::from_bytes(&self.signature),
        )
        .map_err(|_| ReceiptError::BadSignature {
            route: self.body.route.clone(),
            membership: self.body.membership.clone(),
            recipient: self.body.recipient.clone(),
            highest_position: self.body.highest_position,
            generation: self.generation,
        })
        .map(|()| Verified(self))
    }
}

/// A receipt whose signature was verified ([`Receipt::verified`]).
#[derive(Debug, Clone, Copy)]
pub struct Verified<'a>(&'a Receipt);

impl Verified<'_> {
    pub fn receipt(&self) -> &Receipt {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn body() -> ReceiptBody {
        ReceiptBody {
            route: "temps".into(),
            membership: "plant".into(),
            recipient: "b".into(),
            class: Class::Ordered,
            highest_position: 3,
            digest: chain(&chain(&GENESIS, 1, b"one"), 3, b"three"),
        }
    }

    #[test]
    fn a_receipt_verifies_with_its_signer_only() {
        let receipt = body().sign(&key(1), 2);
        assert_eq!(receipt.generation, 2);
        assert_eq!(receipt.body, body());
        receipt.verify(&key(1).verifying_key()).unwrap();
        let err = receipt.verify(&key(2).verifying_key()).unwrap_err();
        assert!(err.to_string().contains("`b`"), "{err}");
        assert!(err.to_string().contains("generation 2"), "{err}");
    }

    #[test]
    fn changing_any_field_breaks_the_signature() {
        let receipt = body().sign(&key(1), 1);
        let public = key(1).verifying_key();
        let mut changed: Vec<Receipt> = Vec::new();
        let mut r = receipt.clone();
        r.body.route.push('x');
        changed.push(r);
        let mut r = receipt.clone();
        r.body.membership.push('x');
        changed.push(r);
        let mut r = receipt.clone();
        r.body.recipient = "c".into();
        changed.push(r);
        let mut r = receipt.clone();
        r.body.class = Class::Latest;
        changed.push(r);
        let mut r = receipt.clone();
        r.body.highest_position += 1;
        changed.push(r);
        let mut r = receipt.clone();
        r.body.digest[0] ^= 1;
        changed.push(r);
        let mut r = receipt.clone();
        r.generation = 2;
        changed.push(r);
        let mut r = receipt.clone();
        r.signature[5] ^= 1;
        changed.push(r);
        for r in changed {
            assert!(r.verify(&public).is_err(), "{r:?} verified");
        }
    }

    #[test]
    fn signed_bytes_are_injective_across_field_boundaries() {
        // Moving bytes between adjacent strings changes the signed bytes.
        let mut a = body();
        a.route = "ab".into();
        a.membership = "c".into();
        let mut b = body();
        b.route = "a".into();
        b.membership = "bc".into();
        assert_ne!(a.signed_bytes(1), b.signed_bytes(1));
        let mut c = body();
        c.membership = String::new();
        c.recipient = format!("{}{}", c.membership, c.recipient);
        assert_ne!(body().signed_bytes(1), c.signed_bytes(1));
        // The layout is fixed: domain, three strings, class, position, digest, generation.
        let bytes = body().signed_bytes(7);
        let expected_len = 8 + RECEIPT_DOMAIN.len() + 8 + 5 + 8 + 5 + 8 + 1 + 1 + 8 + 32 + 4;
        assert_eq!(bytes.len(), expected_len);
        assert_eq!(&bytes[8..8 + RECEIPT_DOMAIN.len()], RECEIPT_DOMAIN);
        assert_eq!(&bytes[bytes.len() - 4..], &7u32.to_be_bytes());
        assert_eq!(&bytes[bytes.len() - 36..bytes.len() - 4], &body().digest);
    }

    #[test]
    fn the_chain_depends_on_order_position_and_payload() {
        let ab = chain(&chain(&GENESIS, 1, b"a"), 2, b"b");
        let ba = chain(&chain(&GENESIS, 1, b"b"), 2, b"a");
        let skipped = chain(&chain(&GENESIS, 1, b"a"), 3, b"b");
        let shifted = chain(&chain(&GENESIS, 1, b"ab"), 2, b"");
        assert_ne!(ab, ba);
        assert_ne!(ab, skipped);
        assert_ne!(ab, shifted);
        // Deterministic: both ends compute the same digest.
        assert_eq!(ab, chain(&chain(&GENESIS, 1, b"a"), 2, b"b"));
        assert_ne!(chain(&GENESIS, 1, b""), GENESIS);
    }

    #[test]
    fn json_round_trips_with_hex_bytes() {
        let receipt = body().sign(&key(3), 4);
        let json = serde_json::to_string(&receipt).unwrap();
        assert!(json.contains(&hex::encode(receipt.body.digest)), "{json}");
        assert!(json.contains("\"class\":\"ordered\""), "{json}");
        let back: Receipt = serde_json::from_str(&json).unwrap();
        assert_eq!(back, receipt);
        back.verify(&key(3).verifying_key()).unwrap();
        let broken = json.replace(&hex::encode(receipt.body.digest), "zz");
        assert!(serde_json::from_str::<Receipt>(&broken).is_err());
    }

    #[test]
    fn hex_round_trips() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(hex::decode(hex::encode(&bytes)).unwrap(), bytes);
        assert_eq!(hex::decode("0A").unwrap(), vec![10]);
        assert!(hex::decode("abc").is_err());
        assert!(hex::decode("0g").is_err());
    }
}
