//! The `transport` profile (SPEC C2): HTTPS with mutual TLS 1.3 (rustls, ring) on the
//! host's `listen` address, between participants of a shared membership. The only
//! module that speaks TLS.
//!
//! Refused at the handshake: no client certificate, a certificate from an authority
//! of no membership this host belongs to (another authority, or a participant of no
//! shared membership), an expired certificate, a revoked participant (the revocation
//! lists the host loaded at start). The control API is served as `POST /control`
//! (one JSON call in the body, one JSON reply) for remote use; the Unix socket stays
//! for local operators.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, PrivatePkcs8KeyDer,
};

use crate::authority::service::Authorities;
use crate::custody::membership;
use crate::host::control::CONTROL_LINE_MAX;
use crate::host::{Handled, Host};
use crate::protocol::{Call, Reply};

/// The most TLS connections served at once.
pub const TRANSPORT_CONNECTIONS_MAX: usize = 256;

/// Wire observation (profile `wire-observation`): the bytes this host's sockets write
/// on each TLS stream — handshake, records, alerts — per peer, counted once at the
/// writer. Not counted: IP and TCP headers, TCP retransmissions by the kernel, bytes
/// the peer writes (its own observation counts those). A counter that would overflow
/// reports `unavailable` from then on.
#[derive(Debug, Default)]
pub struct WireCounters {
    peers: std::sync::Mutex<std::collections::BTreeMap<String, Option<u64>>>,
}

/// The peer a connection is attributed to before (or without) an authenticated
/// handshake.
pub const UNAUTHENTICATED_PEER: &str = "unauthenticated";

impl WireCounters {
    fn add(&self, peer: &str, bytes: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let entry = peers.entry(peer.to_owned()).or_insert(Some(0));
        *entry = entry.and_then(|total| total.checked_add(bytes));
    }

    /// `(peer, bytes written to it by this host as server)`; `None` is unavailable.
    pub fn snapshot(&self) -> Vec<(String, Option<u64>)> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.iter().map(|(p, b)| (p.clone(), *b)).collect()
    }
}

/// A socket that counts what it writes; the count moves to the peer's total when the
/// peer is known and whenever more is written.
struct Counted<S> {
    inner: S,
    written: Arc<std::sync::atomic::AtomicU64>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let result = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &result {
            self.written
                .fetch_add(*n as u64, std::sync::atomic::Ordering::Relaxed);
        }
        result
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// `participant in membership` from a verified participant certificate's
/// `grid://membership/participant` subject alternative name: a DER
/// `[6] IMPLICIT IA5String` (tag 0x86, short length), read by its length.
fn participant_of(der: &[u8]) -> String {
    match identity_of(der) {
        Some((membership, participant)) => format!("{participant} in {membership}"),
        None => "unnamed participant".to_owned(),
    }
}

/// `(membership, participant)` of a verified participant certificate.
fn identity_of(der: &[u8]) -> Option<(String, String)> {
    let marker = b"grid://";
    let name = der
        .windows(marker.len())
        .enumerate()
        .filter(|(at, w)| *w == marker && *at >= 2 && der[at - 2] == 0x86 && der[at - 1] < 0x80)
        .find_map(|(at, _)| {
            let length = der[at - 1] as usize;
            der.get(at..at + length)
                .and_then(|bytes| std::str::from_utf8(bytes).ok())
        });
    name.and_then(|n| n.strip_prefix("grid://")?.split_once('/'))
        .map(|(m, p)| (m.to_owned(), p.to_owned()))
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    #[error(
        "profile `transport` needs a membership certificate, and this host holds none (reconcile enrolls hosts listed with `member M`)"
    )]
    NoMembership,
    #[error("profile `transport`: listen address {address} is in use")]
    AddressInUse { address: SocketAddr },
    #[error("profile `transport`: listen address `{address}`: {reason}")]
    Listen { address: String, reason: String },
    #[error("profile `transport`: {path}: {reason}")]
    Credentials { path: String, reason: String },
    #[error("profile `transport`: TLS configuration refused: {0}")]
    Tls(String),
}

/// The DER of an Ed25519 PKCS#8 v1 private key (RFC 8410) around a 32-byte seed.
pub fn ed25519_pkcs8(seed: &[u8; 32]) -> Vec<u8> {
    const PREFIX: [u8; 16] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    let mut der = PREFIX.to_vec();
    der.extend_from_slice(seed);
    der
}

fn credentials(path: &Path, reason: impl std::fmt::Display) -> TransportError {
    TransportError::Credentials {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Loads one membership's credentials from a host installation: its authority into
/// `roots`, its revocation list (if any) into `crls`; returns the participant
/// certificate chain.
fn load_membership(
    dir: &Path,
    m: &str,
    roots: &mut RootCertStore,
    crls: &mut Vec<CertificateRevocationListDer<'static>>,
) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let m_dir = membership::host_membership_dir(dir, m);
    let ca_path = m_dir.join("ca.pem");
    let ca = CertificateDer::from_pem_file(&ca_path).map_err(|e| credentials(&ca_path, e))?;
    roots.add(ca).map_err(|e| credentials(&ca_path, e))?;
    let crl_path = m_dir.join(membership::CRL_FILE);
    if crl_path.exists() {
        crls.push(
            CertificateRevocationListDer::from_pem_file(&crl_path)
                .map_err(|e| credentials(&crl_path, e))?,
        );
    }
    let cert_path = m_dir.join("participant.pem");
    CertificateDer::pem_file_iter(&cert_path)
        .map_err(|e| credentials(&cert_path, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| credentials(&cert_path, e))
}

/// The TLS server name of `participant` reached through `membership`:
/// `participant.membership.grid` when both are DNS labels, else the participant's name.
/// Participant certificates carry both names, so a host in several memberships shows
/// each client the certificate of the membership it asked for.
pub fn server_name(participant: &str, membership: &str) -> String {
    if membership::dns_label(participant) && membership::dns_label(membership) {
        format!("{participant}.{membership}.grid")
    } else {
        participant.to_owned()
    }
}

/// Chooses the participant certificate by the server name the client asked for; the
/// first membership's (by name) when it asked for none it knows.
#[derive(Debug)]
struct MembershipCertificates {
    by_name: std::collections::HashMap<String, Arc<rustls::sign::CertifiedKey>>,
    default: Arc<rustls::sign::CertifiedKey>,
}

impl rustls::server::ResolvesServerCert for MembershipCertificates {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(
            hello
                .server_name()
                .and_then(|name| self.by_name.get(name))
                .unwrap_or(&self.default)
                .clone(),
        )
    }
}

/// Builds the TLS configuration from the host's custody: its TLS key, the participant
/// certificate of each membership (chosen by server name), every membership's
/// authority as a client-certificate root, and every revocation list.
pub fn server_config(dir: &Path) -> Result<ServerConfig, TransportError> {
    let memberships = membership::enrolled_memberships(dir);
    if memberships.is_empty() {
        return Err(TransportError::NoMembership);
    }
    let seed = crate::custody::tls_secret(dir).map_err(|e| TransportError::Tls(e.to_string()))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ed25519_pkcs8(&seed)));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    let mut crls = Vec::new();
    let mut by_name = std::collections::HashMap::new();
    let mut default = None;
    for m in &memberships {
        let chain = load_membership(dir, m, &mut roots, &mut crls)?;
        let certified = Arc::new(rustls::sign::CertifiedKey::new(chain, signing_key.clone()));
        let participant = membership::read_enrollment(dir, m)
            .ok()
            .flatten()
            .map(|e| e.participant)
            .unwrap_or_default();
        by_name.insert(server_name(&participant, m), certified.clone());
        default.get_or_insert(certified);
    }
    let resolver = MembershipCertificates {
        by_name,
        default: default.expect("at least one membership"),
    };
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .with_crls(crls)
        .build()
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    Ok(ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TransportError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(resolver)))
}

/// Binds the listen address now, so a host whose address is taken refuses to start.
pub fn bind(listen: &str) -> Result<std::net::TcpListener, TransportError> {
    let address: SocketAddr = listen.parse().map_err(|_| TransportError::Listen {
        address: listen.to_owned(),
        reason: "not IP:PORT".to_owned(),
    })?;
    std::net::TcpListener::bind(address).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => TransportError::AddressInUse { address },
        _ => TransportError::Listen {
            address: listen.to_owned(),
            reason: e.to_string(),
        },
    })
}

/// When each membership credential file was last changed: reconcile writing a new
/// revocation list (or certificate) changes it.
fn credentials_stamp(dir: &Path) -> Vec<(std::path::PathBuf, Option<std::time::SystemTime>)> {
    membership::enrolled_memberships(dir)
        .into_iter()
        .flat_map(|m| {
            let m_dir = membership::host_membership_dir(dir, &m);
            ["ca.pem", "participant.pem", membership::CRL_FILE].map(|f| m_dir.join(f))
        })
        .map(|path| {
            let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
            (path, modified)
        })
        .collect()
}

/// What the transport serves: the host's control API, its authorities (Raft messages
/// and forwarded calls) and its delivery profile (pushes).
pub struct Served {
    pub host: Arc<Mutex<Host>>,
    pub wire: Option<Arc<WireCounters>>,
    pub authorities: Authorities,
    pub delivery: Option<Arc<crate::delivery::service::Delivery>>,
    pub processes: Option<Arc<crate::processes::service::Processes>>,
}

/// Serves HTTPS on `listener` on `runtime`, handing control calls to the host, Raft
/// messages and forwarded calls to the authorities, pushes to delivery.
/// Membership credentials are reloaded when their files change (a revocation takes
/// effect for new connections without a restart); if they no longer load, every new
/// connection is refused until they do — never the old, weaker configuration.
pub fn serve(
    listener: std::net::TcpListener,
    config: ServerConfig,
    dir: std::path::PathBuf,
    served: Served,
    runtime: &tokio::runtime::Handle,
) -> std::io::Result<()> {
    let Served {
        host,
        wire,
        authorities,
        delivery,
        processes,
    } = served;
    listener.set_nonblocking(true)?;
    let _entered = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener)?;
    runtime.spawn(async move {
                {
                let mut acceptor = Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)));
                let mut stamp = credentials_stamp(&dir);
                let permits = Arc::new(tokio::sync::Semaphore::new(TRANSPORT_CONNECTIONS_MAX));
                loop {
                    let Ok((stream, _)) = listener.accept().await else { continue };
                    // Small request/response exchanges: no Nagle delay waiting for an ACK.
                    let _ = stream.set_nodelay(true);
                    let now = credentials_stamp(&dir);
                    if now != stamp {
                        stamp = now;
                        acceptor = match server_config(&dir) {
                            Ok(config) => {
                                eprintln!("gridd: transport: membership credentials reloaded");
                                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
                            }
                            Err(e) => {
                                eprintln!("gridd: transport: credentials no longer load ({e}); refusing connections until they do");
                                None
                            }
                        };
                    }
                    let Some(acceptor) = acceptor.clone() else { continue };
                    let Ok(permit) = permits.clone().acquire_owned().await else { return };
                    let host = host.clone();
                    let wire = wire.clone();
                    let authorities = authorities.clone();
                    let delivery = delivery.clone();
                    let processes = processes.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
                        let stream = Counted { inner: stream, written: written.clone() };
                        // A refused handshake (no, foreign, expired or revoked
                        // certificate) ends here: nothing reaches the host.
                        let tls = match acceptor.accept(stream).await {
                            Ok(tls) => tls,
                            Err(_) => {
                                if let Some(wire) = &wire {
                                    wire.add(UNAUTHENTICATED_PEER, written.swap(0, std::sync::atomic::Ordering::Relaxed));
                                }
                                return;
                            }
                        };
                        let certificate = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .map(|c| c.as_ref().to_vec());
                        let peer = certificate
                            .as_deref()
                            .map(participant_of)
                            .unwrap_or_else(|| UNAUTHENTICATED_PEER.to_owned());
                        let identity = Arc::new(certificate.as_deref().and_then(identity_of));
                        let service = hyper::service::service_fn(move |request| {
                            let host = host.clone();
                            let authorities = authorities.clone();
                            let identity = identity.clone();
                            let delivery = delivery.clone();
                            let processes = processes.clone();
                            async move {
                                if request.uri().path().starts_with("/process/")
                                    || request.uri().path().starts_with("/mailbox/")
                                {
                                    // None: a failpoint lost the reply; the connection
                                    // closes without one.
                                    return route_processes(request, processes.as_ref(), identity.as_ref().as_ref())
                                        .await
                                        .ok_or(ReplyLost);
                                }
                                Ok::<_, ReplyLost>(
                                    route(request, host, &authorities, delivery.as_ref(), identity.as_ref().as_ref()).await,
                                )
                            }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                            .await;
                        // Everything this connection wrote, handshake included, once.
                        if let Some(wire) = &wire {
                            wire.add(&peer, written.swap(0, std::sync::atomic::Ordering::Relaxed));
                        }
                    });
                }
        }
    });
    Ok(())
}

fn json(status: StatusCode, body: &Reply) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(body).expect("replies serialize"),
        )))
        .expect("a valid response")
}

/// The participant a certificate names, if it was issued by `membership`'s authority:
/// every endpoint but the control API acts only for participants certified in the
/// membership its path names.
fn certified_in<'a>(
    identity: Option<&'a (String, String)>,
    membership: &str,
) -> Result<&'a str, String> {
    match identity {
        None => Err("no participant certificate".to_owned()),
        Some((certified, peer)) if certified != membership => Err(format!(
            "`{peer}` is certified in `{certified}`, not in `{membership}`"
        )),
        Some((_, peer)) => Ok(peer),
    }
}

/// The longest Raft message or forwarded call body accepted, in bytes.
pub const RAFT_MESSAGE_MAX: usize = 64 * 1024 * 1024;
/// The largest snapshot a voter accepts, in bytes.
pub const SNAPSHOT_BYTES_MAX: usize = 1024 * 1024 * 1024;

fn bytes_reply(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

/// `POST /raft/M/{append,vote,snapshot}` and `POST /authority/M/forward`: only from a
/// participant certified by membership M's authority, to this host's voter of M.
async fn route_authority(
    request: Request<Incoming>,
    authorities: &Authorities,
    identity: Option<&(String, String)>,
) -> Response<Full<Bytes>> {
    let refused = |status, reason: String| json(status, &Reply::Refused { reason });
    let path = request.uri().path().to_owned();
    let mut parts = path.trim_start_matches('/').splitn(3, '/');
    let (Some(kind), Some(membership), Some(what)) = (parts.next(), parts.next(), parts.next())
    else {
        return refused(StatusCode::NOT_FOUND, format!("no endpoint {path}"));
    };
    let peer = match certified_in(identity, membership) {
        Ok(peer) => peer,
        Err(reason) => return refused(StatusCode::FORBIDDEN, reason),
    };
    let Some(authority) = authorities.by_membership.get(membership).cloned() else {
        return refused(
            StatusCode::NOT_FOUND,
            format!("this host runs no authority of `{membership}`"),
        );
    };
    let header = request
        .headers()
        .get(crate::authority::network::SNAPSHOT_META_HEADER)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let limit = if what == "snapshot" {
        SNAPSHOT_BYTES_MAX
    } else {
        RAFT_MESSAGE_MAX
    };
    let body = match Limited::new(request.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body longer than {limit} bytes"),
            );
        }
    };
    match kind {
        "raft" => match authority.serve_raft(what, header.as_deref(), &body).await {
            Ok(reply) => bytes_reply(StatusCode::OK, reply),
            Err(reason) => refused(StatusCode::BAD_REQUEST, reason),
        },
        "authority" if what == "forward" => {
            let forwarded: crate::authority::service::Forwarded =
                match serde_json::from_slice(&body) {
                    Ok(f) => f,
                    Err(e) => {
                        return refused(StatusCode::BAD_REQUEST, format!("malformed call: {e}"));
                    }
                };
            let reply = authority.handle(forwarded.call, Some(peer)).await;
            bytes_reply(
                StatusCode::OK,
                serde_json::to_vec(&reply).expect("replies serialize"),
            )
        }
        _ => refused(StatusCode::NOT_FOUND, format!("no endpoint {path}")),
    }
}

/// `POST /delivery/M/push`: values for this host from a route's publisher, certified
/// in M; answered with the signed receipt of what this host durably holds.
async fn route_delivery(
    request: Request<Incoming>,
    delivery: Option<&Arc<crate::delivery::service::Delivery>>,
    identity: Option<&(String, String)>,
) -> Response<Full<Bytes>> {
    use crate::delivery::api::PushReply;
    let refused = |status, reason: String| {
        bytes_reply(
            status,
            serde_json::to_vec(&PushReply::Refused { reason }).expect("replies serialize"),
        )
    };
    let path = request.uri().path().to_owned();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["delivery", membership, "push"] = parts.as_slice() else {
        return refused(StatusCode::NOT_FOUND, format!("no endpoint {path}"));
    };
    let peer = match certified_in(identity, membership) {
        Ok(peer) => peer,
        Err(reason) => return refused(StatusCode::FORBIDDEN, reason),
    };
    let Some(delivery) = delivery else {
        return refused(
            StatusCode::NOT_FOUND,
            "this host does not run the `delivery` profile".to_owned(),
        );
    };
    let limit = crate::delivery::service::PUSH_BODY_MAX;
    let body = match Limited::new(request.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("push longer than PUSH_BODY_MAX ({limit} bytes)"),
            );
        }
    };
    let push = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => return refused(StatusCode::BAD_REQUEST, format!("malformed push: {e}")),
    };
    let reply = delivery.accept_push(peer, membership, push).await;
    bytes_reply(
        StatusCode::OK,
        serde_json::to_vec(&reply).expect("replies serialize"),
    )
}

/// A reply a failpoint lost: hyper closes the connection without answering.
#[derive(Debug)]
struct ReplyLost;

impl std::fmt::Display for ReplyLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the reply was lost at a failpoint")
    }
}

impl std::error::Error for ReplyLost {}

/// `POST /process/M/{run,status}` (the direct service) and `POST
/// /mailbox/M/{deposit,fetch,collect}`: from participants certified in M, acting as
/// their certificate's participant. `None`: the reply is lost (failpoint).
async fn route_processes(
    request: Request<Incoming>,
    processes: Option<&Arc<crate::processes::service::Processes>>,
    identity: Option<&(String, String)>,
) -> Option<Response<Full<Bytes>>> {
    use crate::processes::api::{MailboxReply, ServiceReply};
    let path = request.uri().path().to_owned();
    let parts: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(str::to_owned)
        .collect();
    let refused = |status, reason: String| {
        Some(bytes_reply(
            status,
            serde_json::to_vec(&ServiceReply::Refused { reason }).expect("replies serialize"),
        ))
    };
    let [kind, membership, what] = parts.as_slice() else {
        return refused(StatusCode::NOT_FOUND, format!("no endpoint {path}"));
    };
    if request.method() != Method::POST {
        return refused(StatusCode::NOT_FOUND, format!("no endpoint {path}"));
    }
    let peer = match certified_in(identity, membership) {
        Ok(peer) => peer,
        Err(reason) => return refused(StatusCode::FORBIDDEN, reason),
    };
    let Some(processes) = processes else {
        return refused(
            StatusCode::NOT_FOUND,
            "this host does not run the `processes` profile".to_owned(),
        );
    };
    let limit = crate::processes::service::PROCESS_BODY_MAX;
    let body = match Limited::new(request.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body longer than PROCESS_BODY_MAX ({limit} bytes)"),
            );
        }
    };
    fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
        serde_json::from_slice(body).map_err(|e| format!("malformed call: {e}"))
    }
    fn ok<T: serde::Serialize>(reply: &T) -> Option<Response<Full<Bytes>>> {
        Some(bytes_reply(
            StatusCode::OK,
            serde_json::to_vec(reply).expect("replies serialize"),
        ))
    }
    match (kind.as_str(), what.as_str()) {
        ("process", "run") => match parse(&body) {
            Ok(run) => {
                let reply = processes.serve_run(peer, "direct", run).await;
                if processes.drop_reply() {
                    return None;
                }
                ok(&reply)
            }
            Err(reason) => refused(StatusCode::BAD_REQUEST, reason),
        },
        ("process", "status") => match parse(&body) {
            Ok(query) => ok(&processes.status(peer, &query)),
            Err(reason) => refused(StatusCode::BAD_REQUEST, reason),
        },
        ("mailbox", "deposit") => match parse(&body) {
            Ok(deposit) => ok(&processes.deposit(peer, deposit).await),
            Err(reason) => ok(&MailboxReply::Refused { reason }),
        },
        ("mailbox", "fetch") => match parse(&body) {
            Ok(fetch) => ok(&processes.fetch(peer, &fetch)),
            Err(reason) => ok(&MailboxReply::Refused { reason }),
        },
        ("mailbox", "collect") => match parse(&body) {
            Ok(collect) => ok(&processes.collect(peer, &collect)),
            Err(reason) => ok(&MailboxReply::Refused { reason }),
        },
        _ => refused(StatusCode::NOT_FOUND, format!("no endpoint {path}")),
    }
}

async fn route(
    request: Request<Incoming>,
    host: Arc<Mutex<Host>>,
    authorities: &Authorities,
    delivery: Option<&Arc<crate::delivery::service::Delivery>>,
    identity: Option<&(String, String)>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if request.method() == Method::POST
        && (path.starts_with("/raft/") || path.starts_with("/authority/"))
    {
        return route_authority(request, authorities, identity).await;
    }
    if request.method() == Method::POST && path.starts_with("/delivery/") {
        return route_delivery(request, delivery, identity).await;
    }
    if request.method() != Method::POST || request.uri().path() != "/control" {
        return json(
            StatusCode::NOT_FOUND,
            &Reply::Refused {
                reason: "the control API is POST /control".to_owned(),
            },
        );
    }
    let body = match Limited::new(request.into_body(), CONTROL_LINE_MAX as usize)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return json(
                StatusCode::PAYLOAD_TOO_LARGE,
                &Reply::Refused {
                    reason: format!("call longer than CONTROL_LINE_MAX ({CONTROL_LINE_MAX} bytes)"),
                },
            );
        }
    };
    let call: Call = match serde_json::from_slice(&body) {
        Ok(call) => call,
        Err(e) => {
            return json(
                StatusCode::BAD_REQUEST,
                &Reply::Refused {
                    reason: format!("malformed call: {e}"),
                },
            );
        }
    };
    let handled = tokio::task::spawn_blocking(move || {
        host.lock().unwrap_or_else(|p| p.into_inner()).handle(call)
    })
    .await;
    match handled {
        Ok(Handled::Reply(reply)) => json(StatusCode::OK, &reply),
        // A failpoint: the operation is durable, its reply is lost.
        Ok(Handled::DropReply) | Err(_) => Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .body(Full::new(Bytes::new()))
            .expect("a valid response"),
    }
}

/// The TLS configuration of a participant calling other participants of
/// `membership`: TLS 1.3 only, its own participant certificate as client
/// certificate, the membership's authority as the only root, its revocation list.
pub fn client_tls(
    own_dir: &Path,
    membership: &str,
) -> Result<rustls::ClientConfig, TransportError> {
    let mut roots = RootCertStore::empty();
    let mut crls = Vec::new();
    let chain = load_membership(own_dir, membership, &mut roots, &mut crls)?;
    let seed =
        crate::custody::tls_secret(own_dir).map_err(|e| TransportError::Tls(e.to_string()))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ed25519_pkcs8(&seed)));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .with_crls(crls)
    .build()
    .map_err(|e| TransportError::Tls(e.to_string()))?;
    rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TransportError::Tls(e.to_string()))?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(chain, key)
        .map_err(|e| TransportError::Tls(e.to_string()))
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
        let config = client_tls(own_dir, membership)?;
        let name = server_name(peer, membership);
        let http = reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(config)
            .resolve(&name, address)
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| TransportError::Tls(e.to_string()))?;
        Ok(Client {
            http,
            url: format!("https://{name}:{}/control", address.port()),
        })
    }

    /// Sends one call. Once the request may have left, a failure is `Err(Lost)`-like:
    /// the caller must not assume it had no effect (the message says which).
    pub fn call(&self, call: &Call) -> Result<Reply, String> {
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(call).expect("calls serialize"))
            .send()
            .map_err(|e| {
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text.push_str(": ");
                    text.push_str(&s.to_string());
                    source = s.source();
                }
                text
            })?;
        let body = response.bytes().map_err(|e| e.to_string())?;
        serde_json::from_slice(&body).map_err(|e| format!("the reply does not decode: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflowing_counter_reads_unavailable_from_then_on() {
        let wire = WireCounters::default();
        wire.add("b in ops", 10);
        wire.add("b in ops", 5);
        wire.add("c in other", u64::MAX);
        wire.add("c in other", 1);
        wire.add("c in other", 1);
        assert_eq!(
            wire.snapshot(),
            vec![
                ("b in ops".to_owned(), Some(15)),
                ("c in other".to_owned(), None)
            ]
        );
    }

    #[test]
    fn server_names_ask_for_a_membership_when_both_are_dns_labels() {
        assert_eq!(server_name("edge-a", "plant-ops"), "edge-a.plant-ops.grid");
        assert_eq!(server_name("edge-a", "plant/ops"), "edge-a");
    }

    #[test]
    fn the_participant_is_read_from_the_grid_name_by_its_length() {
        // [6] IMPLICIT IA5String "grid://ops/b" followed by a DER SEQUENCE tag ('0').
        let mut der = vec![0x30, 0x10, 0x86, 12];
        der.extend_from_slice(b"grid://ops/b");
        der.extend_from_slice(b"0\x0e");
        assert_eq!(participant_of(&der), "b in ops");
        assert_eq!(participant_of(b"no name here"), "unnamed participant");
    }
}
