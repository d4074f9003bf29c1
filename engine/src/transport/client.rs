//! The HTTPS client side of the transport: one participant calling another over
//! mutual TLS 1.3 (reqwest, with the rustls configuration of [`super::tls`]). Every
//! capability calls its peers through [`PeerClient`]; operators call a host's control
//! API through [`Client`].

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::TransportError;

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

pub fn chain(e: &dyn std::error::Error) -> String {
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
    /// `participant` of `membership` listening on `address`, called as this
    /// installation's (`dir`) participant of the same membership.
    pub fn new(
        dir: &Path,
        membership: &str,
        participant: &str,
        address: &str,
    ) -> Result<PeerClient, PeerError> {
        let address: SocketAddr = address
            .parse()
            .map_err(|_| PeerError::NotSent(format!("voter address `{address}` is not IP:PORT")))?;
        let config = super::tls::client_tls(dir, membership)
            .map_err(|e| PeerError::NotSent(e.to_string()))?;
        let name = super::tls::server_name(participant, membership);
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

    /// `POST path` with raw bytes and one header, a JSON reply (a whole snapshot).
    pub async fn post_bytes<R: DeserializeOwned>(
        &self,
        path: &str,
        (name, value): (&str, &str),
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<R, PeerError> {
        self.send(
            self.http
                .post(format!("{}{path}", self.base))
                .header(name, value)
                .body(body),
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

/// A participant calling another host's control API over mutual TLS (reqwest with the
/// same rustls configuration rules): TLS 1.3 only, the server must present a
/// certificate of the membership's authority naming `peer`, not revoked by the lists
/// this participant holds.
pub struct Client {
    http: reqwest::blocking::Client,
    url: String,
}

impl Client {
    /// `own_dir` is the calling participant's installation; `membership` the shared
    /// membership; `peer` the participant name of the host at `address`.
    pub fn new(
        own_dir: &Path,
        membership: &str,
        peer: &str,
        address: SocketAddr,
    ) -> Result<Client, TransportError> {
        let config = super::tls::client_tls(own_dir, membership)?;
        let name = super::tls::server_name(peer, membership);
        let http = reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(config)
            .resolve(&name, address)
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| TransportError::Tls(e.to_string()))?;
        Ok(Client {
            http,
            url: format!("https://{name}:{}/control", address.port()),
        })
    }

    /// Sends one call. Once the request may have left, a failure is `Err(Lost)`-like:
    /// the caller must not assume it had no effect (the message says which).
    pub fn call<C: Serialize, R: DeserializeOwned>(&self, call: &C) -> Result<R, String> {
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(call).expect("calls serialize"))
            .send()
            .map_err(|e| chain(&e))?;
        let body = response.bytes().map_err(|e| e.to_string())?;
        serde_json::from_slice(&body).map_err(|e| format!("the reply does not decode: {e}"))
    }
}
