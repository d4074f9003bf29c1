//! Value delivery (SPEC C4): the `delivery` profile (docs/delivery.md).
//!
//! - `service`: routes at a host, persisted in the host's store — opening and
//!   installing routes in `service.rs`, and beside it `publish` (the publishing right,
//!   staging, settling), `push` (pushers and the receipts they bring back), `inbox`
//!   (accepting pushes), `reads` (control reads) and `recover` (replay at open);
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
