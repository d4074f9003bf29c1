//! The wallet and the archive wallet (issue 18 §3, docs/wallet.md).
//!
//! - `view`: a participant's wallet assembled from its original owners' answers —
//!   money (ledger accounts it owns), execution grants it holds, its open waits, and
//!   every owner that did not answer — pure, no IO;
//! - `api`: the control calls (`Call::Wallet`), the signed proposal, journal entries;
//! - `journal`: the wallet's own journal, fsynced, in `DIR/wallet/`;
//! - `archive`: the signed archive snapshot and its offline verification, pure;
//! - `service`: the archive wallet of one host (profile `archive-wallet`);
//! - `ops`: its five Processes of the interface `wallet@1.1.0`.

pub mod api;
pub mod archive;
pub mod journal;
pub mod ops;
pub mod service;
pub mod view;

use std::path::PathBuf;

/// The id of the one ledger transfer of run `request` from `caller`: the same
/// derivation as the `ledger.transfer` Process's (`process:CALLER:REQUEST`), used here
/// only to check a proposal's id fits before it is stored.
pub fn transfer_id(caller: &str, request: &str) -> String {
    format!("process:{caller}:{request}")
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalletError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Private(#[from] crate::store::PrivateDirError),
    #[error(transparent)]
    Custody(#[from] crate::custody::CustodyError),
    #[error(
        "{path}: line {line} is not a wallet journal entry ({reason}); refusing to open the wallet"
    )]
    Corrupt {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error(
        "{path}: the foreign archive held does not verify ({reason}); refusing to open the wallet"
    )]
    Foreign { path: PathBuf, reason: String },
    #[error("{0}")]
    Limit(String),
    #[error("{0}")]
    Refused(String),
}
