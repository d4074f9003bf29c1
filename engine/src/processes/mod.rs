//! Remote Processes under execution grants (SPEC C5, C6's grants): the `processes`
//! profile (docs/processes.md).
//!
//! - `service`: a host's Processes — the receiver's run journal and grants, the
//!   caller's wait journal, the mailbox it keeps for others, the built-in Processes
//!   `demo.count` and `model.eval` — persisted in the host's store;
//! - `api`: its wire types (control calls, grant issues, the direct service, the
//!   mailbox);
//! - `grants`: the units of a grant — available, reserved, consumed, surrendered,
//!   unknown — pure, no IO.

pub mod api;
pub mod endpoint;
pub mod grants;
pub mod service;
