//! What the wallet room (`crate::wallet`) reads of this host's Processes: the caller's
//! open waits. Read-only; nothing here changes a journal.

use super::api::{Peer, RunView};
use super::caller::WaitRecord;
use super::service::Processes;

impl Processes {
    /// The caller's waits with no terminal outcome learned (`unknown` at the caller),
    /// by request id.
    pub fn open_wait_views(&self) -> Vec<RunView> {
        let ids: Vec<String> = self
            .open_waits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        ids.iter()
            .filter_map(|id| self.wait_record(id))
            .filter(|w| w.run.is_none())
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

    /// Every receiver this host has called (from its wait journal), with the
    /// membership it was called in: the owners a wallet observation may ask.
    pub fn called_peers(&self) -> Vec<(Peer, String)> {
        let mut peers: Vec<(Peer, String)> = Vec::new();
        for guard in self.ks.waits.iter() {
            let Ok((_, bytes)) = guard.into_inner() else {
                continue;
            };
            let Ok(record) = serde_json::from_slice::<WaitRecord>(&bytes) else {
                continue;
            };
            if !peers.iter().any(|(p, _)| p.name == record.receiver.name) {
                peers.push((record.receiver, record.membership));
            }
        }
        peers
    }
}
