//! The wallet's wire types: its control calls (`Call::Wallet`), its replies, the
//! signed proposal and the wallet journal's entries. Fields are only ever added.

use serde::{Deserialize, Serialize};

use crate::processes::api::{Peer, RunView};

/// A control call to the host's wallet (`Call::Wallet`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum WalletCall {
    /// The caller's open waits (profile `processes`): `gridctl wallet show` reads the
    /// wallet's unknown runs here.
    Waits,
    /// A coherent archive of the wallet (profile `archive-wallet`), signed by the host.
    Archive,
    /// Opens `archive` (the file's text) as a foreign archive: observed only.
    Open { archive: String },
    /// The interface the host's wallet Processes implement (profile `archive-wallet`).
    Interface,
}

/// Tagged `result` (it travels inside `Reply`, which is tagged `reply`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum WalletReply {
    Waits {
        host: String,
        waits: Vec<RunView>,
    },
    /// The archive file's text (signed body line, signature line).
    Archived {
        archive: String,
    },
    Opened {
        host: String,
        /// The archived wallet's host.
        from: String,
        created_ms: u64,
        /// The same archive was already open: nothing changed.
        already: bool,
    },
    Refused {
        reason: String,
    },
    Interface {
        interface: String,
        processes: Vec<String>,
    },
}

/// A transfer proposal: signed by the wallet's host and stored; it moves no money.
/// `wallet.submit` makes it ONE `ledger.transfer` run at `keeper`, request id
/// [`Proposal::request`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub id: String,
    /// The wallet's host (the caller of the transfer).
    pub host: String,
    pub ledger: String,
    /// The host that keeps the ledger: its address and public keys, as the proposer
    /// named them.
    pub keeper: Peer,
    /// The membership the wallet and the keeper are both certified in.
    pub membership: String,
    pub debit: String,
    pub credit: String,
    #[serde(with = "crate::ledger::api::amount")]
    pub amount: u128,
    pub currency: String,
    pub pending: bool,
    pub created_ms: u64,
    /// The host's signing-key generation and its signature (hex) over
    /// [`Proposal::signed_bytes`].
    pub generation: u32,
    pub signature: String,
}

impl Proposal {
    pub fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-wallet-proposal/1\nhost {}\nid {}\nledger {}\nkeeper {}\nmembership {}\ndebit {}\ncredit {}\namount {}\ncurrency {}\npending {}\ncreated_ms {}\n",
            self.host,
            self.id,
            self.ledger,
            self.keeper.name,
            self.membership,
            self.debit,
            self.credit,
            self.amount,
            self.currency,
            self.pending,
            self.created_ms,
        )
        .into_bytes()
    }

    pub fn verify(&self, manifest: &crate::custody::Manifest) -> bool {
        crate::custody::verify_hex_signature(
            manifest,
            self.generation,
            &self.signed_bytes(),
            &self.signature,
        )
    }

    /// The request id of its one `ledger.transfer` run.
    pub fn request(&self) -> String {
        request_of(&self.id)
    }

    /// The `ledger.transfer` arguments of it.
    pub fn arguments(&self) -> std::collections::BTreeMap<String, String> {
        let mut arguments = std::collections::BTreeMap::new();
        for (k, v) in [
            ("ledger", self.ledger.clone()),
            ("debit", self.debit.clone()),
            ("credit", self.credit.clone()),
            ("amount", self.amount.to_string()),
            ("currency", self.currency.clone()),
        ] {
            arguments.insert(k.to_owned(), v);
        }
        if self.pending {
            arguments.insert("pending".to_owned(), "true".to_owned());
        }
        arguments
    }
}

/// The request id of proposal `id`'s one `ledger.transfer` run.
pub fn request_of(id: &str) -> String {
    format!("wallet-{id}")
}

/// One entry of the wallet's journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// 1, 2, 3, … in the order written.
    pub position: u64,
    pub at_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

// One per journal line, moved once: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Event {
    /// A proposal signed and stored: no money moved.
    Proposed { proposal: Proposal },
    /// Journaled before the proposal's one run was first sent.
    Submitted { proposal: String, request: String },
    /// The terminal outcome its run answered (once).
    Answered {
        proposal: String,
        request: String,
        outcome: String,
        #[serde(default)]
        result: Option<serde_json::Value>,
    },
    /// A grant's available units surrendered at its issuer (its answer).
    Surrendered {
        grant: String,
        issuer: String,
        op: String,
        detail: String,
    },
    /// A foreign archive opened here, observed only.
    Opened {
        from: String,
        created_ms: u64,
        digest: String,
    },
}
