//! Raft messages between voters over the mutual-TLS transport (SPEC C2): `POST
//! /raft/M/{append,vote,snapshot}` on the target's listen address, authenticated both
//! ways by participant certificates of membership M. Forwarded writes and read
//! barriers to the leader use the same clients (`POST /authority/M/…`).
//!
//! A snapshot travels whole (openraft's `generic-snapshot-data`): one request with
//! the snapshot's meta in a header and its bytes as the body, under its own timeout
//! (`SNAPSHOT_SEND_TIMEOUT`), so a far-behind voter is never caught in openraft 0.9's
//! loop of chunks timing out and restarting.

use std::future::Future;
use std::net::SocketAddr;
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

use super::types::{NodeId, Snapshot, TypeConfig, Vote, Voter};

/// The longest a whole snapshot may take to reach a voter and be installed.
pub const SNAPSHOT_SEND_TIMEOUT: Duration = Duration::from_secs(300);

/// The header carrying a snapshot's vote and meta (JSON).
pub const SNAPSHOT_META_HEADER: &str = "grid-raft-snapshot";

/// Why a request to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// It never left: no connection could be made (or no client could be built).
    #[error("{0}")]
    NotSent(String),
    /// It may have arrived: the reply was lost or did not decode.
    #[error("{0}")]
    Lost(String),
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// An HTTPS client of one peer voter, as this participant of the membership.
#[derive(Clone)]
pub struct PeerClient {
    http: reqwest::Client,
    base: String,
}

impl PeerClient {
    pub fn new(
        dir: &std::path::Path,
        membership: &str,
        peer: &Voter,
    ) -> Result<PeerClient, PeerError> {
        let address: SocketAddr = peer.address.parse().map_err(|_| {
            PeerError::NotSent(format!("voter address `{}` is not IP:PORT", peer.address))
        })?;
        let config = crate::transport::client_tls(dir, membership)
            .map_err(|e| PeerError::NotSent(e.to_string()))?;
        let name = crate::transport::server_name(&peer.participant, membership);
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(config)
            .resolve(&name, address)
            .connect_timeout(Duration::from_secs(2))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| PeerError::NotSent(chain(&e)))?;
        Ok(PeerClient {
            http,
            base: format!("https://{name}:{}", address.port()),
        })
    }

    /// `POST path` with a JSON body, a JSON reply.
    pub async fn post<Q: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &Q,
        timeout: Duration,
    ) -> Result<R, PeerError> {
        let bytes = serde_json::to_vec(body).map_err(|e| PeerError::NotSent(e.to_string()))?;
        self.send(
            self.http.post(format!("{}{path}", self.base)).body(bytes),
            timeout,
        )
        .await
    }

    async fn send<R: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<R, PeerError> {
        let response = request
            .header("content-type", "application/json")
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    PeerError::NotSent(chain(&e))
                } else {
                    PeerError::Lost(chain(&e))
                }
            })?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| PeerError::Lost(chain(&e)))?;
        serde_json::from_slice(&body).map_err(|e| {
            PeerError::Lost(format!(
                "the reply ({status}) does not decode: {e}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ))
        })
    }
}

/// Builds connections to the other voters of one membership.
#[derive(Clone)]
pub struct Peers {
    pub dir: PathBuf,
    pub membership: String,
}

pub struct Connection {
    target: NodeId,
    peer: Voter,
    dir: PathBuf,
    membership: String,
    client: Option<PeerClient>,
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
        }
    }
}

impl Connection {
    fn client(&mut self) -> Result<PeerClient, PeerError> {
        if self.client.is_none() {
            self.client = Some(PeerClient::new(&self.dir, &self.membership, &self.peer)?);
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
        let bytes = snapshot.snapshot.into_inner();
        let request = client
            .http
            .post(format!("{}/raft/{}/snapshot", client.base, self.membership))
            .header(SNAPSHOT_META_HEADER, header)
            .body(bytes);
        let send = client.send::<Result<SnapshotResponse<NodeId>, Fatal<NodeId>>>(
            request,
            SNAPSHOT_SEND_TIMEOUT,
        );
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
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
