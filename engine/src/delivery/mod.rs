//! Value delivery (SPEC C4): the `delivery` profile (docs/delivery.md).
//!
//! - `service`: routes at a host — publish, push over mutual TLS, accept pushes,
//!   receipts — persisted in the host's store;
//! - `api`: its wire types (control calls, route definitions, pushes);
//! - `ordered`: the Ordered and Latest route state machines — publisher outbox,
//!   frozen cohorts, recipient inboxes, cumulative receipts releasing obligations,
//!   separate capacities;
//! - `receipts`: signed cumulative receipts and their offline verification.

pub mod api;
pub mod endpoint;
pub mod ordered;
pub mod receipts;
pub mod service;
