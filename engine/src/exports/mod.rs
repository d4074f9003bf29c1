//! Cross-domain exports (SPEC C10, profile `exports`, docs/exports.md): a gateway that
//! is a destination of route `from` in one membership and the publisher of route `to`
//! in another passes each value of `from` onto `to` — only while it holds both rights:
//! the **disclosure** the original publisher of `from` signed (naming the export, the
//! gateway, both routes, the first position disclosed and an optional expiry), and the
//! **publication** right, the claim `route:TO` at the second membership's authority
//! (confirmed as any publisher's). Each value crossed is one signed **mapping** (`from`
//! position N → `to` position M), journaled in the same synced write that stages the
//! publication, so the two never part: a crash anywhere forwards each value once.
//!
//! - `api`: the disclosure, the mapping (both signed documents), calls and views;
//! - `service`: the disclosures an issuer signed, the exports a gateway runs, the
//!   forwarder.

pub mod api;
pub mod service;

#[cfg(test)]
mod tests;
