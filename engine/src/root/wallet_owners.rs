//! The archive wallet's way to other owners (`wallet::service::Owners`), wired here
//! because it joins two rooms' words: the wallet asks, the control protocol
//! (`POST /control` over the transport's mutual TLS) carries it.

use std::sync::Arc;

use crate::limits::WALLET_OWNER_WAIT;
use crate::processes::service::Processes;
use crate::protocol::{Call, Outcome, Reply, Request};
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

    fn surrender(
        &self,
        membership: &str,
        name: &str,
        address: &str,
        op: &str,
        grant: &str,
        issuer_keys: &crate::custody::Manifest,
    ) -> Result<SurrenderAnswer, String> {
        let call = Call::Submit {
            op: op.to_owned(),
            request: Request::SurrenderGrant {
                name: grant.to_owned(),
            },
        };
        match self.call(membership, name, address, &call)? {
            Reply::Answer(answer) => Ok(SurrenderAnswer {
                succeeded: answer.outcome == Outcome::Succeeded,
                verified: answer.verify(issuer_keys).is_some(),
                detail: answer.detail,
            }),
            Reply::Refused { reason } => Err(format!("{name} refused the call: {reason}")),
            other => Err(format!("{name} answered {other:?}")),
        }
    }
}
