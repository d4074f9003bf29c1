//! Value delivery (SPEC C4) — groundwork for the `delivery` profile (issue 6): pure,
//! tested pieces that the profile will drive.
//!
//! - `seal`: a value sealed to a recipient's X25519 mail key as in HPKE (RFC 9180 base
//!   mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305);
//! - `ordered`: the Ordered and Latest route state machines — publisher outbox,
//!   frozen cohorts, recipient inboxes, cumulative receipts releasing obligations,
//!   separate capacities;
//! - `receipts`: signed cumulative receipts and their offline verification.

pub mod ordered;
pub mod receipts;
pub mod seal;
