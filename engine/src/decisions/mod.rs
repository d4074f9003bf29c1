//! Decisions (SPEC C13's decision workflow, issue 35, docs/decisions.md): profile
//! `decisions`. A decision's host opens a decision under an installed policy (a
//! fixed roster, a threshold, a human gate, one effect, an expiry) in a signed Open
//! record; roster members send signed ballots and the gate operator a signed
//! approval, each as a Process under a grant the host issued them; once approved, the
//! host applies the effect exactly once as a Process under its own grant at the
//! effect's owner and signs the applied receipt joining them all.
//!
//! - `api`: the policy, the four signed documents, the record, calls;
//! - `machine`: what the host admits given its record and the time, pure;
//! - `service`: the room — records, casts, the one apply run;
//! - `process`: `decision.ballot` and `decision.gate`;
//! - `archive`: closed decisions and kept documents moved to the installation's shelf;
//! - `verify`: a record's signatures and chain checked with the signers' keys, pure.

pub mod api;
mod archive;
pub mod machine;
pub mod process;
pub mod service;
pub mod verify;

#[cfg(test)]
mod tests;
