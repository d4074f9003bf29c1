//! Missions (SPEC C7, docs/missions.md): profile `missions`. A quiesced host reserves
//! a bounded allocation through the authority (the claim `mission:NAME`, its successor
//! enrolled) and its issuer's signature, consumes it with the authority unreachable
//! (runs `--via mission:NAME`, journaled by the `processes` room like any run), stops
//! at the signed limits, and returns it: a signed consumption record the issuer joins
//! with the runs' signed outcomes and the standing reservation into a signed
//! settlement, then the reservation is released and the models take batches from
//! outside again. Never-issued recovery: the issuer's signed proof that it issued no
//! allocation closes the reservation once, and its claim is handed to the successor.
//!
//! - `api`: terms, the four signed documents, the mission as its host holds it, calls;
//! - `machine`: what the issuer answers and what the host may do, pure;
//! - `service`: the host's steps, journaled;
//! - `issuer`: the issuer's decisions, journaled;
//! - `endpoint`: `POST /mission/M/issue|return|close`.

pub mod api;
pub mod endpoint;
mod issuer;
pub mod machine;
pub mod service;

#[cfg(test)]
mod tests;
