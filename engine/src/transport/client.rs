//! The HTTPS client side of the transport: one participant calling another over
//! mutual TLS 1.3 (hyper's pooled HTTP/1 client over a connector of our own: TCP, the
//! wire observation's byte count, then tokio-rustls with the configuration of
//! [`super::tls`]). Every capability calls its peers through [`PeerClient`]; operators
//! call a host's control API through [`Client`].

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::ServerName;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::TransportError;
use super::wire::{Counted, Sink};
use crate::limits::PEER_REPLY_BYTES_MAX;

/// How long a connection (TCP and the TLS handshake) to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an idle connection stays in the pool for the next call.
const POOL_IDLE: Duration = Duration::from_secs(30);
/// How long an operator's control call may take, reply included.
const CONTROL_CALL_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Whether `e` is the peer refusing this host's certificate in the TLS handshake — an
/// alert only a handshake sends. In TLS 1.3 it arrives after the client may have
/// written its request, but a server that refused the handshake never reads
/// application data: the request was not served.
fn certificate_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    use rustls::AlertDescription as A;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        let tls = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::AlertReceived(alert)) = tls {
            return matches!(
                alert,
                A::BadCertificate
                    | A::CertificateRevoked
                    | A::CertificateExpired
                    | A::CertificateUnknown
                    | A::UnsupportedCertificate
                    | A::UnknownCA
                    | A::CertificateRequired
            );
        }
        source = s.source();
    }
    false
}

/// Opens one connection to one peer: TCP to its address, counted when the calling
/// installation observes its wire, then the TLS handshake that must find the peer's
/// certificate of the membership naming `name`.
#[derive(Clone)]
struct Connector {
    tls: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    address: SocketAddr,
    /// The calling installation's counters, and the peer they attribute bytes to.
    wire: Option<(Arc<super::WireCounters>, Arc<str>)>,
}

/// A connection the pool holds: TLS over a counted TCP stream.
struct Stream(TokioIo<tokio_rustls::client::TlsStream<Counted<tokio::net::TcpStream>>>);

impl tower_service::Service<hyper::Uri> for Connector {
    type Response = Stream;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Stream>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let connect = async {
                let tcp = tokio::net::TcpStream::connect(this.address).await?;
                // Small request/response exchanges: no Nagle delay waiting for an ACK.
                tcp.set_nodelay(true)?;
                let sink = match &this.wire {
                    Some((counters, peer)) => Sink::Live {
                        counters: counters.clone(),
                        peer: peer.to_string(),
                    },
                    None => Sink::Off,
                };
                let counted = Counted { inner: tcp, sink };
                let tls = this.tls.connect(this.name.clone(), counted).await?;
                Ok(Stream(TokioIo::new(tls)))
            };
            match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
                Ok(result) => result,
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no connection to {} within {} ms",
                        this.address,
                        CONNECT_TIMEOUT.as_millis()
                    ),
                )),
            }
        })
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
}

type Http = hyper_util::client::legacy::Client<Connector, Full<Bytes>>;

/// The pooled client of `participant` of `membership` at `address`, as the participant
/// of installation `dir`.
fn http(
    dir: &Path,
    membership: &str,
    participant: &str,
    address: SocketAddr,
) -> Result<(Http, String), TransportError> {
    let config = super::tls::client_tls(dir, membership)?;
    let name = super::tls::server_name(participant, membership);
    let server = ServerName::try_from(name.clone())
        .map_err(|e| TransportError::Tls(format!("server name `{name}`: {e}")))?;
    let connector = Connector {
        tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        name: server,
        address,
        wire: super::wire::registered(dir).map(|counters| {
            (
                counters,
                Arc::from(format!("{participant} in {membership}")),
            )
        }),
    };
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector);
    Ok((client, format!("https://{name}:{}", address.port())))
}

/// Sends one request and reads its whole reply: `NotSent` when no connection could be
/// made, `Lost` once the request may have left.
async fn exchange(
    http: &Http,
    request: hyper::Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<(hyper::StatusCode, Bytes), PeerError> {
    let exchange = async {
        let response = http.request(request).await.map_err(|e| {
            if e.is_connect() || certificate_refused(&e) {
                PeerError::NotSent(chain(&e))
            } else {
                PeerError::Lost(chain(&e))
            }
        })?;
        let status = response.status();
        let body = Limited::new(response.into_body(), PEER_REPLY_BYTES_MAX)
            .collect()
            .await
            .map_err(|e| {
                PeerError::Lost(format!(
                    "the reply ({status}) was not read whole (at most PEER_REPLY_BYTES_MAX = {PEER_REPLY_BYTES_MAX} bytes): {e}"
                ))
            })?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(PeerError::Lost(format!(
                "no reply within {} ms",
                timeout.as_millis()
            )))
        })
}

fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<hyper::Request<Full<Bytes>>, PeerError> {
    let mut request = hyper::Request::post(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| PeerError::NotSent(format!("request to {url}: {e}")))
}

fn decode<R: DeserializeOwned>(status: hyper::StatusCode, body: &[u8]) -> Result<R, PeerError> {
    serde_json::from_slice(body).map_err(|e| {
        PeerError::Lost(format!(
            "the reply ({status}) does not decode: {e}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    })
}

/// An HTTPS client of one peer, as this participant of the membership. Its TLS
/// configuration — the membership's authority, this participant's certificate, the
/// revocation list — is rebuilt, with a fresh pool, as soon as one of those files
/// changes: a peer revoked since is refused at the next request, not only after a
/// restart (a pooled connection made before is not used again).
#[derive(Clone)]
pub struct PeerClient {
    current: Arc<std::sync::Mutex<Current>>,
    dir: PathBuf,
    membership: String,
    participant: String,
    address: SocketAddr,
}

type Stamp = Vec<(PathBuf, Option<std::time::SystemTime>)>;

/// The client built from the membership's files as `stamp` found them.
struct Current {
    http: Http,
    base: String,
    stamp: Stamp,
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
        let stamp = super::tls::membership_stamp(dir, membership);
        let (http, base) = http(dir, membership, participant, address)
            .map_err(|e| PeerError::NotSent(e.to_string()))?;
        Ok(PeerClient {
            current: Arc::new(std::sync::Mutex::new(Current { http, base, stamp })),
            dir: dir.to_owned(),
            membership: membership.to_owned(),
            participant: participant.to_owned(),
            address,
        })
    }

    /// The client of the membership's files as they are now (three `stat`s; rebuilt
    /// when one changed).
    fn current(&self) -> Result<(Http, String), PeerError> {
        let stamp = super::tls::membership_stamp(&self.dir, &self.membership);
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.stamp != stamp {
            let (http, base) = http(&self.dir, &self.membership, &self.participant, self.address)
                .map_err(|e| {
                PeerError::NotSent(format!(
                    "the credentials of `{}` changed and no longer load: {e}",
                    self.membership
                ))
            })?;
            tracing::info!(
                membership = self.membership,
                peer = self.participant,
                "transport: client credentials reloaded"
            );
            *current = Current { http, base, stamp };
        }
        Ok((current.http.clone(), current.base.clone()))
    }

    /// `POST path` with a JSON body, a JSON reply.
    pub async fn post<Q: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &Q,
        timeout: Duration,
    ) -> Result<R, PeerError> {
        let bytes = serde_json::to_vec(body).map_err(|e| PeerError::NotSent(e.to_string()))?;
        let (http, base) = self.current()?;
        let request = post(&format!("{base}{path}"), &[], bytes)?;
        let (status, body) = exchange(&http, request, timeout).await?;
        decode(status, &body)
    }

    /// `POST path` with raw bytes and one header, a JSON reply (a whole snapshot).
    pub async fn post_bytes<R: DeserializeOwned>(
        &self,
        path: &str,
        header: (&str, &str),
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<R, PeerError> {
        let (http, base) = self.current()?;
        let request = post(&format!("{base}{path}"), &[header], body)?;
        let (status, body) = exchange(&http, request, timeout).await?;
        decode(status, &body)
    }
}

/// A participant calling another host's control API over mutual TLS (the same client
/// and rules as [`PeerClient`], on a runtime of its own): TLS 1.3 only, the server must
/// present a certificate of the membership's authority naming `peer`, not revoked by
/// the lists this participant holds.
pub struct Client {
    runtime: tokio::runtime::Runtime,
    http: Http,
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
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TransportError::Tls(format!("a client runtime: {e}")))?;
        let (http, base) = {
            let _entered = runtime.enter();
            http(own_dir, membership, peer, address)?
        };
        Ok(Client {
            runtime,
            http,
            url: format!("{base}/control"),
        })
    }

    /// Sends one call. Once the request may have left, a failure is `Err(Lost)`-like:
    /// the caller must not assume it had no effect (the message says which).
    pub fn call<C: Serialize, R: DeserializeOwned>(&self, call: &C) -> Result<R, String> {
        let body = serde_json::to_vec(call).expect("calls serialize");
        let request = post(&self.url, &[], body).map_err(|e| e.to_string())?;
        let (status, body) = self
            .runtime
            .block_on(exchange(&self.http, request, CONTROL_CALL_TIMEOUT))
            .map_err(|e| e.to_string())?;
        serde_json::from_slice(&body)
            .map_err(|e| format!("the reply ({status}) does not decode: {e}"))
    }
}
