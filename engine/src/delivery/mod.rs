//! Value delivery (SPEC C4): the `delivery` profile (docs/delivery.md).
//!
//! - `service`: routes at a host — publish, push over mutual TLS, accept pushes,
//!   receipts — persisted in the host's store;
//! - `api`: its wire types (control calls, route definitions, pushes);
//! - `seal`: a value sealed to a recipient's X25519 mail key as in HPKE (RFC 9180 base
//!   mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305);
//! - `ordered`: the Ordered and Latest route state machines — publisher outbox,
//!   frozen cohorts, recipient inboxes, cumulative receipts releasing obligations,
//!   separate capacities;
//! - `receipts`: signed cumulative receipts and their offline verification.

pub mod api;
pub mod ordered;
pub mod receipts;
pub mod seal;
pub mod service;

/// Lower-case hexadecimal (the custody fingerprints' form).
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    crate::custody::hex(bytes)
}

/// Hexadecimal (either case) to bytes; the error names what is wrong.
pub(crate) fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!(
            "expected an even number of hexadecimal digits, found {}",
            text.len()
        ));
    }
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    text.as_bytes()
        .chunks_exact(2)
        .enumerate()
        .map(|(i, pair)| match (digit(pair[0]), digit(pair[1])) {
            (Some(high), Some(low)) => Ok(high << 4 | low),
            _ => Err(format!("not a hexadecimal digit at position {}", 2 * i)),
        })
        .collect()
}
