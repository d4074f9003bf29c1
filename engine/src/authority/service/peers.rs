//! The other voters: their clients, forwarding a call to the leader, and the Raft
//! messages they send here.

use std::time::Duration;

use openraft::ServerState;

use super::{Authority, AuthorityCall, AuthorityReply, Forwarded, VOTER_CATCH_UP_TIMEOUT};
use crate::authority::types::Voter;
use crate::transport::{PeerClient, PeerError};

impl Authority {
    pub(super) fn peer(&self, voter: &Voter) -> Result<PeerClient, PeerError> {
        let key = (voter.participant.clone(), voter.address.clone());
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = PeerClient::new(
            &self.dir,
            &self.membership,
            &voter.participant,
            &voter.address,
        )?;
        clients.insert(key, client.clone());
        Ok(client)
    }

    pub(super) async fn forward(
        &self,
        leader: &Voter,
        call: AuthorityCall,
        timeout: Duration,
    ) -> Result<AuthorityReply, PeerError> {
        let path = format!("/authority/{}/forward", self.membership);
        self.peer(leader)?
            .post(&path, &Forwarded { call }, timeout)
            .await
    }

    /// Runs `here` at the leader, or forwards `call` to it (once).
    pub(super) async fn at_leader(
        &self,
        call: AuthorityCall,
        forwarded_by: Option<&str>,
        here: impl std::future::Future<Output = AuthorityReply>,
    ) -> AuthorityReply {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.state == ServerState::Leader {
            return here.await;
        }
        if forwarded_by.is_some() {
            return AuthorityReply::Refused {
                reason: format!("`{}` is not the leader", self.participant),
            };
        }
        let Some(leader) = self.leader() else {
            return AuthorityReply::Refused {
                reason: format!("no leader of `{}` is known", self.membership),
            };
        };
        match self
            .forward(
                &leader,
                call,
                VOTER_CATCH_UP_TIMEOUT + Duration::from_secs(10),
            )
            .await
        {
            Ok(reply) => reply,
            Err(PeerError::NotSent(e)) => AuthorityReply::Refused {
                reason: format!("the leader `{}` is unreachable: {e}", leader.participant),
            },
            Err(PeerError::Lost(e)) => AuthorityReply::Unknown {
                reason: format!("the leader `{}` did not answer: {e}", leader.participant),
            },
        }
    }

    /// Serves a Raft message from another voter (`what` is the last path segment).
    pub async fn serve_raft(
        &self,
        what: &str,
        header: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, String> {
        fn encode<T: serde::Serialize>(t: &T) -> Result<Vec<u8>, String> {
            serde_json::to_vec(t).map_err(|e| e.to_string())
        }
        match what {
            "append" => {
                let rpc = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
                encode(&self.raft.append_entries(rpc).await)
            }
            "vote" => {
                let rpc = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
                encode(&self.raft.vote(rpc).await)
            }
            "snapshot" => {
                let header = header.ok_or("no snapshot meta header")?;
                let (vote, meta): (
                    crate::authority::types::Vote,
                    crate::authority::types::SnapshotMeta,
                ) = serde_json::from_str(header).map_err(|e| e.to_string())?;
                // Written and fsynced on a blocking thread, not the runtime's.
                let machine = self.machine.clone();
                let data = tokio::task::spawn_blocking(move || machine.receive(&body))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                let snapshot = crate::authority::types::Snapshot {
                    meta,
                    snapshot: Box::new(data),
                };
                encode(&self.raft.install_full_snapshot(vote, snapshot).await)
            }
            "snapshot-ref" => {
                let header = header.ok_or("no snapshot meta header")?;
                let (vote, meta): (
                    crate::authority::types::Vote,
                    crate::authority::types::SnapshotMeta,
                ) = serde_json::from_str(header).map_err(|e| e.to_string())?;
                let Some(remote) = self.remote.clone() else {
                    return Err(format!(
                        "this voter of `{}` keeps no snapshot store: a snapshot in a bucket cannot reach it (give its host the membership's `snapshots` and restart it)",
                        self.membership
                    ));
                };
                let reference: crate::authority::remote::SnapshotRef =
                    serde_json::from_slice(&body).map_err(|e| e.to_string())?;
                let machine = self.machine.clone();
                let data = tokio::task::spawn_blocking(move || {
                    let bytes = remote.fetch(&reference)?;
                    machine.receive(&bytes).map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| e.to_string())??;
                let snapshot = crate::authority::types::Snapshot {
                    meta,
                    snapshot: Box::new(data),
                };
                encode(&self.raft.install_full_snapshot(vote, snapshot).await)
            }
            other => Err(format!("no Raft message `{other}`")),
        }
    }
}
