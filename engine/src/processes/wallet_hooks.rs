//! What the wallet room (`crate::wallet`) reads of this host's Processes: the caller's
//! open waits. Read-only; nothing here changes a journal.

use super::api::{Peer, RunView};
use super::caller::Called;
use super::service::Processes;

impl Processes {
    /// The caller's waits with no terminal outcome learned (`unknown` at the caller),
    /// by request id.
    pub fn open_wait_views(&self) -> Vec<RunView> {
        self.open_wait_records()
            .into_iter()
            .map(|w| {
                w.view(
                    &self.host,
                    "waiting: no outcome learned from the receiver yet",
                )
            })
            .collect()
    }

    /// The peer client this host's Processes keep for `name` (its connection pool,
    /// reused), for the wallet's calls to other owners.
    pub fn peer_client(
        &self,
        membership: &str,
        name: &str,
        address: &str,
    ) -> Result<crate::transport::PeerClient, crate::transport::PeerError> {
        self.client(membership, name, address)
    }

    /// This host's name (the caller's name in its waits).
    pub fn host_name(&self) -> &str {
        &self.host
    }

    /// Every receiver this host has called (noted with each wait, kept when the waits
    /// move to the archive), with the membership its newest wait called it in: the
    /// owners a wallet observation may ask.
    pub fn called_peers(&self) -> Vec<(Peer, String)> {
        self.ks
            .called
            .iter()
            .filter_map(|guard| guard.into_inner().ok())
            .filter_map(|(_, bytes)| serde_json::from_slice::<Called>(&bytes).ok())
            .map(|called| (called.receiver, called.membership))
            .collect()
    }
}
