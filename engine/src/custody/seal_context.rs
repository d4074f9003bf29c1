//! Many delivery values under one HPKE encapsulation (the sealed format's second form).
//!
//! [`seal_payload`](super::seal::seal_payload) encapsulates afresh for every value: two
//! X25519 operations at the publisher and one at the recipient per value — measured as
//! ~30 % of a publisher's CPU on an encrypted route (BENCHMARKS.md §16). A
//! [`SealContext`] encapsulates once to a destination's mail key (RFC 9180 §5.1
//! `SetupBaseS`, `info` = [`CONTEXT_INFO`]) and exports from it one ChaCha20-Poly1305
//! key (§5.3, exporter context [`VALUE_KEY_EXPORT`]); each value is then sealed under
//! that key with the nonce of its sequence number in the context (0, 1, 2, …, as a
//! 96-bit big-endian number) and the same associated data as the single-shot form
//! ([`value_binding`]: membership, route, position). The [`Sealed`] carries `enc`, its
//! `seq` and the ciphertext: it opens alone, in any order, after any restart.
//!
//! Why it is as safe as the single-shot form: the key is HPKE's, known only to whoever
//! holds the ephemeral secret (this context, in memory, never stored) and the
//! recipient's mail secret; a nonce is never used twice under a key because `seq` only
//! counts up within a context, and a context lives at most
//! [`SEAL_CONTEXT_VALUES_MAX`] values and [`SEAL_CONTEXT_AGE_MAX`] (then the push loop
//! makes a fresh one, as it does when the destination's mail key rotates). What a
//! value is bound to (its membership, route and position) is in its associated data,
//! so a value moved to another position, route or membership does not open.
//!
//! The recipient remembers the key of each context it opened (at most
//! [`SEAL_CONTEXTS_OPENED_MAX`], keyed by a digest of the mail secret that opened it and
//! the context's `enc`): the values of one context cost it one X25519 operation. A key
//! is remembered only after a value opened under it, and only for the secret that
//! opened it: a retired and removed mail key opens nothing afterwards, remembered or not.
//!
//! A host older than this form refuses such a value (it opens it single-shot: the
//! authentication fails, named); values without `seq` are the single-shot form and
//! still open as before.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use chacha20poly1305::aead::{Aead as _, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroize;

use super::seal::{
    ENC_LEN, SealError, Sealed, decap_and_export, setup_and_export, value_binding,
    with_fresh_ephemeral,
};
use crate::limits::{SEAL_CONTEXT_AGE_MAX, SEAL_CONTEXT_VALUES_MAX, SEAL_CONTEXTS_OPENED_MAX};

/// The HPKE `info` of a sender context: the application and the form's version.
pub const CONTEXT_INFO: &[u8] = b"grid/delivery/context/v2";
/// The exporter context of the values' ChaCha20-Poly1305 key (RFC 9180 §5.3).
pub const VALUE_KEY_EXPORT: &[u8] = b"grid/delivery/value-key/v2";

/// One encapsulation to one recipient's mail key, sealing values until it is full or
/// old ([`SealContext::serves`]). Held by a push loop in memory; never stored.
pub struct SealContext {
    recipient: [u8; ENC_LEN],
    enc: [u8; ENC_LEN],
    cipher: ChaCha20Poly1305,
    next: u64,
    born: Instant,
}

impl SealContext {
    /// A fresh context to `recipient`, its ephemeral key drawn from the operating system.
    pub fn new(recipient: &PublicKey) -> Result<SealContext, SealError> {
        with_fresh_ephemeral(|ikm_e| SealContext::with_ephemeral(ikm_e, recipient))
    }

    /// [`SealContext::new`] with the ephemeral key derived from `ikm_e` (tests only
    /// otherwise: reusing an `ikm_e` reuses the key and, with it, the nonces).
    pub(crate) fn with_ephemeral(
        ikm_e: &[u8; ENC_LEN],
        recipient: &PublicKey,
    ) -> Result<SealContext, SealError> {
        let (enc, mut key) = setup_and_export(ikm_e, recipient, CONTEXT_INFO, VALUE_KEY_EXPORT)?;
        let cipher = ChaCha20Poly1305::new(&key.into());
        key.zeroize();
        Ok(SealContext {
            recipient: *recipient.as_bytes(),
            enc,
            cipher,
            next: 0,
            born: Instant::now(),
        })
    }

    /// Whether this context may seal the next value for `recipient` at `now`: the same
    /// mail key, fewer than [`SEAL_CONTEXT_VALUES_MAX`] values sealed, younger than
    /// [`SEAL_CONTEXT_AGE_MAX`].
    pub fn serves(&self, recipient: &PublicKey, now: Instant) -> bool {
        self.recipient == *recipient.as_bytes()
            && self.next < SEAL_CONTEXT_VALUES_MAX
            && now.saturating_duration_since(self.born) < SEAL_CONTEXT_AGE_MAX
    }

    /// Seals one delivery payload, bound to its membership, route and position as
    /// [`seal_payload`](super::seal::seal_payload) binds, under the next sequence number.
    pub fn seal_payload(
        &mut self,
        route: &str,
        membership: &str,
        position: u64,
        payload: &[u8],
    ) -> Result<Sealed, SealError> {
        if self.next >= SEAL_CONTEXT_VALUES_MAX {
            return Err(SealError::Encrypt(format!(
                "a sealing context seals at most SEAL_CONTEXT_VALUES_MAX \
                 ({SEAL_CONTEXT_VALUES_MAX}) values"
            )));
        }
        let seq = self.next;
        self.next += 1;
        let binding = value_binding(membership, route, position);
        let ciphertext = self
            .cipher
            .encrypt(
                &nonce(seq),
                Payload {
                    msg: payload,
                    aad: &binding,
                },
            )
            .map_err(|e| SealError::Encrypt(e.to_string()))?;
        Ok(Sealed {
            enc: self.enc,
            seq: Some(seq),
            ciphertext,
        })
    }
}

/// The nonce of value `seq` of a context: 96 bits, big-endian.
fn nonce(seq: u64) -> Nonce {
    let mut bytes = [0u8; 12];
    bytes[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::from(bytes)
}

/// An opened context: the SHA-256 of the mail secret that opened it, and its `enc`.
type OpenedContext = ([u8; 32], [u8; ENC_LEN]);

/// The keys of opened contexts. A memo of a pure function: forgetting an entry only
/// costs a decapsulation.
static OPENED: LazyLock<Mutex<HashMap<OpenedContext, [u8; 32]>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Opens value `seq` of the context `sealed.enc` names with `recipient`'s mail secret,
/// against `aad`.
pub(super) fn open_in_context(
    recipient: &StaticSecret,
    aad: &[u8],
    sealed: &Sealed,
    seq: u64,
) -> Result<Vec<u8>, SealError> {
    let mut secret = recipient.to_bytes();
    let digest: [u8; 32] = Sha256::digest(secret).into();
    secret.zeroize();
    let memo = (digest, sealed.enc);
    let known = OPENED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&memo)
        .copied();
    let mut key = match known {
        Some(key) => key,
        None => decap_and_export(recipient, &sealed.enc, CONTEXT_INFO, VALUE_KEY_EXPORT)?,
    };
    let opened = ChaCha20Poly1305::new(&key.into())
        .decrypt(
            &nonce(seq),
            Payload {
                msg: &sealed.ciphertext,
                aad,
            },
        )
        .map_err(|_| SealError::Open);
    if opened.is_ok() && known.is_none() {
        let mut opened_keys = OPENED.lock().unwrap_or_else(|p| p.into_inner());
        if opened_keys.len() >= SEAL_CONTEXTS_OPENED_MAX {
            opened_keys.values_mut().for_each(Zeroize::zeroize);
            opened_keys.clear();
        }
        opened_keys.insert(memo, key);
    }
    key.zeroize();
    opened
}

/// How many opened contexts are remembered now (tests).
#[cfg(test)]
pub(super) fn opened_contexts() -> usize {
    OPENED.lock().unwrap_or_else(|p| p.into_inner()).len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::custody::seal::{open_payload, open_value, seal_value};
    use std::time::Duration;

    fn keypair(seed: u8) -> (StaticSecret, PublicKey) {
        let secret = StaticSecret::from([seed; 32]);
        let public = PublicKey::from(&secret);
        (secret, public)
    }

    #[test]
    fn values_of_one_context_share_its_enc_and_each_opens_only_where_it_was_sealed() {
        let (secret, public) = keypair(41);
        let mut context = SealContext::new(&public).expect("context");
        let mut sealed = Vec::new();
        for position in 1..=5u64 {
            let value = position as f64 * 1.5;
            let s = context
                .seal_payload("to-util", "utility", position, &value.to_be_bytes())
                .expect("seal");
            assert_eq!(
                s.seq,
                Some(position - 1),
                "sequence numbers count up from 0"
            );
            sealed.push((position, value, s));
        }
        assert!(sealed.iter().all(|(_, _, s)| s.enc == sealed[0].2.enc));
        // In any order, each at its own position only.
        for (position, value, s) in sealed.iter().rev() {
            let opened = open_value(&secret, "to-util", "utility", *position, s);
            assert_eq!(opened, Ok(*value));
            for (route, membership, at) in [
                ("to-util", "utility", position + 1),
                ("to-site", "utility", *position),
                ("to-util", "plant-ops", *position),
            ] {
                assert_eq!(
                    open_value(&secret, route, membership, at, s),
                    Err(SealError::Open)
                );
            }
        }
        // Another recipient's secret opens none of them, remembered or not.
        let (other, _) = keypair(42);
        for (position, _, s) in &sealed {
            assert_eq!(
                open_value(&other, "to-util", "utility", *position, s),
                Err(SealError::Open)
            );
        }
        // Its sequence number is bound: the same bytes under another `seq` do not open.
        let (position, _, s) = &sealed[2];
        for seq in [None, Some(0), Some(3), Some(u64::MAX)] {
            let moved = Sealed { seq, ..s.clone() };
            assert!(open_value(&secret, "to-util", "utility", *position, &moved).is_err());
        }
    }

    #[test]
    fn tampering_fails_without_panicking_and_a_fresh_context_draws_a_fresh_key() {
        let (secret, public) = keypair(43);
        let mut context = SealContext::new(&public).expect("context");
        let s = context
            .seal_payload("r", "m", 9, b"payload bytes")
            .expect("seal");
        for at in 0..s.ciphertext.len() {
            let mut ciphertext = s.ciphertext.clone();
            ciphertext[at] ^= 0x01;
            let tampered = Sealed {
                ciphertext,
                ..s.clone()
            };
            assert_eq!(
                open_payload(&secret, "r", "m", 9, &tampered),
                Err(SealError::Open)
            );
        }
        for at in 0..ENC_LEN {
            let mut enc = s.enc;
            enc[at] ^= 0x01;
            let tampered = Sealed { enc, ..s.clone() };
            assert!(open_payload(&secret, "r", "m", 9, &tampered).is_err());
        }
        for len in 0..s.ciphertext.len() {
            let truncated = Sealed {
                ciphertext: s.ciphertext[..len].to_vec(),
                ..s.clone()
            };
            assert_eq!(
                open_payload(&secret, "r", "m", 9, &truncated),
                Err(SealError::Open)
            );
        }
        assert_eq!(
            open_payload(&secret, "r", "m", 9, &s).expect("untouched"),
            b"payload bytes"
        );
        let again = SealContext::new(&public).expect("context");
        assert_ne!(again.enc, context.enc, "each context its own ephemeral key");
    }

    #[test]
    fn a_context_serves_one_key_for_a_bounded_count_and_age() {
        let (_, public) = keypair(44);
        let (_, rotated) = keypair(45);
        let mut context = SealContext::with_ephemeral(&[7; 32], &public).expect("context");
        let now = Instant::now();
        assert!(context.serves(&public, now));
        assert!(!context.serves(&rotated, now), "a rotated mail key");
        assert!(!context.serves(&public, now + SEAL_CONTEXT_AGE_MAX + Duration::from_secs(1)));
        context.next = SEAL_CONTEXT_VALUES_MAX - 1;
        assert!(context.serves(&public, now));
        context
            .seal_payload("r", "m", 1, b"x")
            .expect("the last value");
        assert!(!context.serves(&public, now), "full");
        assert!(matches!(
            context.seal_payload("r", "m", 2, b"y"),
            Err(SealError::Encrypt(_))
        ));
    }

    #[test]
    fn single_shot_values_open_as_before_and_keep_their_form() {
        let (secret, public) = keypair(46);
        let single = seal_value(&public, "r", "m", 3, 82.5).expect("seal");
        assert_eq!(single.seq, None);
        let json = serde_json::to_string(&single).expect("json");
        assert!(!json.contains("seq"), "{json}");
        assert_eq!(open_value(&secret, "r", "m", 3, &single), Ok(82.5));
        let mut context = SealContext::new(&public).expect("context");
        let shared = context
            .seal_payload("r", "m", 3, &82.5f64.to_be_bytes())
            .expect("seal");
        let json = serde_json::to_string(&shared).expect("json");
        assert!(json.contains("\"seq\":0"), "{json}");
        let back: Sealed = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, shared);
        assert_eq!(open_value(&secret, "r", "m", 3, &back), Ok(82.5));
    }

    #[test]
    fn opened_contexts_are_remembered_within_their_bound() {
        let (secret, public) = keypair(47);
        for i in 0..(SEAL_CONTEXTS_OPENED_MAX + 8) {
            let mut context = SealContext::new(&public).expect("context");
            let s = context
                .seal_payload("r", "m", i as u64, b"v")
                .expect("seal");
            assert_eq!(
                open_payload(&secret, "r", "m", i as u64, &s),
                Ok(b"v".to_vec())
            );
            assert!(opened_contexts() <= SEAL_CONTEXTS_OPENED_MAX);
        }
    }
}
