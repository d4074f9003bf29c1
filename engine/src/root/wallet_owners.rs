//! The archive wallet's way to other owners (`wallet::service::Owners`), wired here
//! because it joins rooms' words: the wallet asks; the control protocol (`POST
//! /control` over the transport's mutual TLS) carries an observation, and the
//! Processes' recipient surrender (`POST /process/M/surrender`) a surrender.

use std::sync::Arc;

use crate::ledger::api::{LedgerCall, LedgerReply, LedgerView};
use crate::limits::WALLET_OWNER_WAIT;
use crate::processes::api::Peer;
use crate::processes::service::Processes;
use crate::protocol::{Call, Reply};
use crate::wallet::service::{Owners, PeerHoldings, SurrenderAnswer};

/// Calls peers as this installation's participant, once per call, with the peer
/// clients (and connections) the host's Processes keep.
pub struct PeerOwners {
    pub processes: Arc<Processes>,
    pub runtime: tokio::runtime::Handle,
}

impl PeerOwners {
    fn call(
        &self,
        membership: &str,
        name: &str,
        address: &str,
        call: &Call,
    ) -> Result<Reply, String> {
        let client = self
            .processes
            .peer_client(membership, name, address)
            .map_err(|e| format!("cannot reach {name}: {e}"))?;
        self.runtime
            .block_on(client.post::<_, Reply>("/control", call, WALLET_OWNER_WAIT))
            .map_err(|e| format!("{name} did not answer: {e}"))
    }
}

impl Owners for PeerOwners {
    fn observe(&self, membership: &str, name: &str, address: &str) -> Result<PeerHoldings, String> {
        match self.call(membership, name, address, &Call::Observe)? {
            Reply::Observation(o) => Ok(PeerHoldings {
                grants: o.grants,
                ledgers: o.ledgers,
            }),
            other => Err(format!("{name} answered {other:?}")),
        }
    }

    fn account(
        &self,
        membership: &str,
        name: &str,
        address: &str,
        ledger: &str,
        account: &str,
    ) -> Result<LedgerView, String> {
        let call = Call::Ledger {
            request: LedgerCall::Inspect {
                ledger: ledger.to_owned(),
                account: Some(account.to_owned()),
            },
        };
        match self.call(membership, name, address, &call)? {
            Reply::Ledger(reply) => match *reply {
                LedgerReply::Inspected(view) => Ok(*view),
                LedgerReply::Refused { reason } => Err(format!("{name} refused: {reason}")),
                other => Err(format!("{name} answered {other:?}")),
            },
            Reply::Refused { reason } => Err(format!("{name} refused: {reason}")),
            other => Err(format!("{name} answered {other:?}")),
        }
    }

    fn surrender(
        &self,
        membership: &str,
        name: &str,
        address: &str,
        op: &str,
        grant: &str,
        issuer_keys: &crate::custody::Manifest,
    ) -> Result<SurrenderAnswer, String> {
        // The recipient's surrender (`POST /process/M/surrender`): the issuer takes it
        // only from the grant's certified caller and answers a signed receipt, which
        // `surrender_grant` checks. `op` names it in the wallet's own journal.
        let _ = op;
        let issuer = Peer {
            name: name.to_owned(),
            address: address.to_owned(),
            keys: issuer_keys.clone(),
        };
        let (view, receipt) = self
            .runtime
            .block_on(self.processes.surrender_grant(&issuer, membership, grant))?;
        Ok(SurrenderAnswer {
            succeeded: view.retired,
            verified: true,
            detail: format!(
                "{name} surrendered grant {grant} of {} (signed receipt): {} unit(s) surrendered in all, {} reserved and {} unknown still held",
                receipt.caller, receipt.surrendered, receipt.reserved, receipt.unknown
            ),
        })
    }
}
