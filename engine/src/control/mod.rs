//! The operator control plane (profile `control`, SPEC C13, docs/control-plane.md): a
//! web page served by a host with a panel for every original owner's part, drawn from
//! what this host retained of each owner — with its age — and never from a fresh call.
//!
//! - `retained`: the pure state of what is known of each owner (`never`, `retained`,
//!   `uncertain`, `unreachable`) and the only ways it changes (an explicit inspection
//!   begun, finished, or abandoned by the panel that asked).
//! - `kept`: what is retained, kept across restarts as one signed record per subject
//!   in the installation, verified at start with the host's public keys.
//! - `page`: the panels, rendered as HTML from that state (maud), and the two assets.
//! - `wallet`: the wallet panel and the confirmation of a guarded surrender.
//! - `operators`: operator mutual TLS of a `control` line (`operators=`): its files
//!   checked, copied privately into the installation, and served from those copies.
//! - `server`: the HTTP server on the host's `control listen=` addresses, and
//!   the `Inspector` the composition root provides (this host's own observation, or a
//!   peer's over `POST /control`).

pub mod kept;
pub mod operators;
pub mod page;
pub mod retained;
pub mod server;
pub mod wallet;
