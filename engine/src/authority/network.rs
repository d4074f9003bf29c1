//! Raft messages between voters over the mutual-TLS transport (SPEC C2): `POST
//! /raft/M/{append,vote,snapshot}` on the target's listen address, authenticated both
//! ways by participant certificates of membership M. Forwarded writes and read
//! barriers to the leader use the same clients (`POST /authority/M/…`).
//!
//! A snapshot travels whole (openraft's `generic-snapshot-data`): one request with
//! the snapshot's meta in a header and its bytes as the body, under its own timeout
//! (`SNAPSHOT_SEND_TIMEOUT`), so a far-behind voter is never caught in openraft 0.9's
//! loop of chunks timing out and restarting.
//!
//! With `snapshots "s3://…"` ([`RemoteSnapshots`]) the snapshot does not travel: the
//! leader puts it in the bucket and sends `POST /raft/M/snapshot-ref` — the meta in the
//! header and a [`SnapshotRef`](super::remote::SnapshotRef) as the body — and the voter
//! fetches it from there. A bucket that does not answer fails the send (openraft
//! tries again later); it never falls back to streaming.

use crate::transport::{PeerClient, PeerError};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use openraft::OptionalSend;
use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError as OpenRaftError, RemoteError, ReplicationClosed,
    StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::remote::RemoteSnapshots;
use super::types::{NodeId, Snapshot, TypeConfig, Vote, Voter};
use std::sync::Arc;

/// The longest a whole snapshot may take to reach a voter and be installed.
pub const SNAPSHOT_SEND_TIMEOUT: Duration = Duration::from_secs(300);

/// The header carrying a snapshot's vote and meta (JSON).
pub const SNAPSHOT_META_HEADER: &str = "grid-raft-snapshot";

/// Builds connections to the other voters of one membership.
#[derive(Clone)]
pub struct Peers {
    pub dir: PathBuf,
    pub membership: String,
    /// `snapshots "s3://…"` of this voter.
    pub remote: Option<Arc<RemoteSnapshots>>,
}

pub struct Connection {
    target: NodeId,
    peer: Voter,
    dir: PathBuf,
    membership: String,
    client: Option<PeerClient>,
    remote: Option<Arc<RemoteSnapshots>>,
}

impl RaftNetworkFactory<TypeConfig> for Peers {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, node: &Voter) -> Connection {
        Connection {
            target,
            peer: node.clone(),
            dir: self.dir.clone(),
            membership: self.membership.clone(),
            client: None,
            remote: self.remote.clone(),
        }
    }
}

impl Connection {
    fn client(&mut self) -> Result<PeerClient, PeerError> {
        if self.client.is_none() {
            self.client = Some(PeerClient::new(
                &self.dir,
                &self.membership,
                &self.peer.participant,
                &self.peer.address,
            )?);
        }
        Ok(self.client.clone().expect("just built"))
    }

    async fn rpc<Q: Serialize, R: DeserializeOwned>(
        &mut self,
        what: &str,
        body: &Q,
        option: &RPCOption,
    ) -> Result<R, RPCError<NodeId, Voter, OpenRaftError<NodeId>>> {
        let path = format!("/raft/{}/{what}", self.membership);
        let client = self
            .client()
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let reply: Result<R, OpenRaftError<NodeId>> = client
            .post(&path, body, option.hard_ttl())
            .await
            .map_err(|e| match e {
                PeerError::NotSent(_) => RPCError::Unreachable(Unreachable::new(&e)),
                PeerError::Lost(_) => RPCError::Network(NetworkError::new(&e)),
            })?;
        reply.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.peer.clone(),
                e,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Voter, OpenRaftError<NodeId>>> {
        self.rpc("append", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Voter, OpenRaftError<NodeId>>> {
        self.rpc("vote", &rpc, &option).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let client = self
            .client()
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))?;
        let header = serde_json::to_string(&(vote, &snapshot.meta))
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let mut cancel = std::pin::pin!(cancel);
        // The file travels in one body (read here; a voter builds it without holding
        // it whole).
        let data = *snapshot.snapshot;
        let read = tokio::task::spawn_blocking(move || data.bytes());
        let bytes = tokio::select! {
            closed = &mut cancel => return Err(StreamingError::Closed(closed)),
            read = read => read,
        }
        .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?
        .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
        let (path, bytes) = match &self.remote {
            None => (format!("/raft/{}/snapshot", self.membership), bytes),
            Some(remote) => {
                let remote = remote.clone();
                let (term, index) = snapshot
                    .meta
                    .last_log_id
                    .map_or((0, 0), |l| (l.leader_id.term, l.index));
                let put = tokio::task::spawn_blocking(move || remote.put(term, index, &bytes));
                let reference = tokio::select! {
                    closed = &mut cancel => return Err(StreamingError::Closed(closed)),
                    put = put => put,
                };
                let reference = reference
                    .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?
                    .map_err(|e| {
                        StreamingError::Unreachable(Unreachable::new(&std::io::Error::other(e)))
                    })?;
                let body = serde_json::to_vec(&reference)
                    .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
                (format!("/raft/{}/snapshot-ref", self.membership), body)
            }
        };
        let send = client.post_bytes::<Result<SnapshotResponse<NodeId>, Fatal<NodeId>>>(
            &path,
            (SNAPSHOT_META_HEADER, &header),
            bytes,
            SNAPSHOT_SEND_TIMEOUT,
        );
        let reply = tokio::select! {
            closed = &mut cancel => return Err(StreamingError::Closed(closed)),
            reply = send => reply,
        };
        let reply = reply.map_err(|e| match e {
            PeerError::NotSent(_) => StreamingError::Unreachable(Unreachable::new(&e)),
            PeerError::Lost(_) => StreamingError::Network(NetworkError::new(&e)),
        })?;
        reply.map_err(|e| {
            StreamingError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.peer.clone(),
                e,
            ))
        })
    }
}
