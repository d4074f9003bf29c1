//! The `transport` profile (SPEC C2): HTTPS with mutual TLS 1.3 (rustls, ring) on the
//! host's `listen` address, between participants of a shared membership. The ground
//! floor's only module that speaks TLS; it knows no capability.
//!
//! - `tls`: TLS configuration from custody (server and client side);
//! - `identity`: the participant and membership a verified certificate names;
//! - `endpoint`: the trait each capability implements to be served (path family, body
//!   limit, how it serves an admitted peer of a membership);
//! - `server`: the listener — handshake, certification check, routing to endpoints;
//! - `client`: the HTTPS client every capability (and operator) calls peers with;
//! - `wire`: wire observation (bytes per peer);
//! - `plain`: plain HTTP/1 on a loopback address (metrics, the control plane's page).
//!
//! Refused at the handshake: no client certificate, a certificate from an authority
//! of no membership this host belongs to (another authority, or a participant of no
//! shared membership), an expired certificate, a revoked participant (the revocation
//! lists the host loaded at start). The control API is served as `POST /control`
//! (one JSON call in the body, one JSON reply) for remote use; the Unix socket stays
//! for local operators.

use std::net::SocketAddr;

pub mod client;
pub mod endpoint;
pub mod identity;
pub mod plain;
pub mod server;
pub mod tls;
pub mod wire;

pub use client::{Client, PeerClient, PeerError};
pub use endpoint::{Endpoint, Inbound, Outbound};
pub use server::{Routes, serve};
pub use tls::{bind, client_tls, ed25519_pkcs8, server_config, server_name};
pub use wire::{UNAUTHENTICATED_PEER, WireCounters};

/// The memberships this host left while running (docs/memberships.md, "Leaving"): the
/// transport refuses their requests even on a connection opened before the leave
/// (new connections are refused by TLS once the certificate is set aside).
pub type LeftMemberships = std::sync::Arc<std::sync::RwLock<std::collections::BTreeSet<String>>>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    #[error(
        "profile `transport` needs a membership certificate, and this host holds none (reconcile enrolls hosts listed with `member M`)"
    )]
    NoMembership,
    #[error("profile `transport`: listen address {address} is in use")]
    AddressInUse { address: SocketAddr },
    #[error("profile `transport`: listen address `{address}`: {reason}")]
    Listen { address: String, reason: String },
    #[error("profile `transport`: {path}: {reason}")]
    Credentials { path: String, reason: String },
    #[error("profile `transport`: TLS configuration refused: {0}")]
    Tls(String),
}
