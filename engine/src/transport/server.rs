//! The listener: TLS handshakes (refused ones end there), then each request routed by
//! its first path segment to the endpoint registered for it, after the transport
//! checked that the peer is certified in the membership the path names. The control
//! API is `POST /control` (any verified participant). Membership credentials are
//! reloaded when their files change (a revocation takes effect without a restart: new
//! handshakes use the new lists, and a connection made before has its peer's
//! certificate verified again at its next request); if they no longer load, every new
//! connection and request is refused until they do — never the old, weaker
//! configuration.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use rustls::ServerConfig;

use super::endpoint::{Endpoint, Inbound, Outbound};
use super::identity::{certified_in, identity_of, participant_of};
use super::tls::{credentials_stamp, server_credentials};
use super::wire::{Counted, Direction, Sink, UNAUTHENTICATED_PEER, WireCounters};
use crate::limits::{CREDENTIALS_CHECK_INTERVAL, TRANSPORT_CONNECTIONS_MAX};

type Verifier = Arc<dyn rustls::server::danger::ClientCertVerifier>;

/// The membership credentials the server runs with now: what new handshakes use, and
/// the verifier the connections already open are checked against again whenever
/// `epoch` moves (a revocation list distributed, a certificate renewed).
struct Credentials {
    stamp: Vec<(std::path::PathBuf, Option<std::time::SystemTime>)>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    verifier: Option<Verifier>,
    /// Raised at every reload.
    epoch: Arc<AtomicU64>,
}

impl Credentials {
    /// Reloads when the files changed; `None` acceptor: they no longer load.
    fn refresh(&mut self, dir: &std::path::Path) {
        let now = credentials_stamp(dir);
        if now == self.stamp {
            return;
        }
        self.stamp = now;
        match server_credentials(dir) {
            Ok((config, verifier)) => {
                tracing::info!("transport: membership credentials reloaded");
                self.acceptor = Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)));
                self.verifier = Some(verifier);
            }
            Err(e) => {
                tracing::error!(
                    reason = %e,
                    "transport: credentials no longer load; refusing connections until they do"
                );
                self.acceptor = None;
                self.verifier = None;
            }
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a connection checks before each request: the peer's certificate chain, and the
/// credentials epoch it was last verified under.
struct Checked {
    chain: Vec<rustls_pki_types::CertificateDer<'static>>,
    verified_at: AtomicU64,
    /// The credentials' epoch, read without their lock on every request.
    epoch: Arc<AtomicU64>,
    credentials: Arc<std::sync::Mutex<Credentials>>,
}

impl Checked {
    /// Why the peer may no longer be served on this connection: its certificate is
    /// verified again under credentials reloaded since (once per reload).
    fn refused(&self) -> Option<String> {
        if self.epoch.load(Ordering::SeqCst) == self.verified_at.load(Ordering::SeqCst) {
            return None;
        }
        let (epoch, verifier) = {
            let c = self.credentials.lock().unwrap_or_else(|p| p.into_inner());
            (c.epoch.load(Ordering::SeqCst), c.verifier.clone())
        };
        if epoch == self.verified_at.load(Ordering::SeqCst) {
            return None;
        }
        let Some(verifier) = verifier else {
            return Some("this host's membership credentials no longer load".to_owned());
        };
        let (end_entity, intermediates) = self.chain.split_first()?;
        match verifier.verify_client_cert(
            end_entity,
            intermediates,
            rustls_pki_types::UnixTime::now(),
        ) {
            Ok(_) => {
                self.verified_at.store(epoch, Ordering::SeqCst);
                None
            }
            Err(e) => Some(format!(
                "the certificate this connection was made with is no longer accepted ({e}); nothing was served"
            )),
        }
    }
}

/// What one host's transport serves.
pub struct Routes {
    /// `POST /control`: the host's control API.
    pub control: Arc<dyn Endpoint>,
    /// Every capability's endpoint, found by its path families.
    pub endpoints: Vec<Arc<dyn Endpoint>>,
    /// Set when the host runs with `wire-observation`.
    pub wire: Option<Arc<WireCounters>>,
    /// Memberships the host left: their requests are refused.
    pub left: super::LeftMemberships,
}

impl Routes {
    /// The refusal of a request in `membership` once the host left it.
    fn left_refusal(&self, membership: &str) -> Option<Outbound> {
        self.left
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(membership)
            .then(|| Outbound::refused(403, format!("this host left `{membership}`")))
    }

    fn find(&self, family: &str) -> Option<&Arc<dyn Endpoint>> {
        self.endpoints
            .iter()
            .find(|e| e.families().contains(&family))
    }
}

/// Serves HTTPS on `listener` on `runtime` until the process ends.
pub fn serve(
    listener: std::net::TcpListener,
    config: ServerConfig,
    dir: std::path::PathBuf,
    routes: Routes,
    runtime: &tokio::runtime::Handle,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let _entered = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let routes = Arc::new(routes);
    let verifier = server_credentials(&dir)
        .map(|(_, verifier)| verifier)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let credentials = Arc::new(std::sync::Mutex::new(Credentials {
        stamp: credentials_stamp(&dir),
        acceptor: Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        verifier: Some(verifier),
        epoch: Arc::new(AtomicU64::new(0)),
    }));
    // Connections already open are checked again after a reload: the files are looked
    // at every CREDENTIALS_CHECK_INTERVAL even when no new connection comes.
    {
        let (credentials, dir) = (credentials.clone(), dir.clone());
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(CREDENTIALS_CHECK_INTERVAL).await;
                credentials
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .refresh(&dir);
            }
        });
    }
    runtime.spawn(async move {
        let permits = Arc::new(tokio::sync::Semaphore::new(TRANSPORT_CONNECTIONS_MAX));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            // Small request/response exchanges: no Nagle delay waiting for an ACK.
            let _ = stream.set_nodelay(true);
            let (acceptor, epoch) = {
                let mut c = credentials.lock().unwrap_or_else(|p| p.into_inner());
                c.refresh(&dir);
                (c.acceptor.clone(), c.epoch.load(Ordering::SeqCst))
            };
            let Some(acceptor) = acceptor else {
                let peer = stream
                    .peer_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                tracing::warn!(
                    peer,
                    reason = "credentials do not load",
                    "connection refused"
                );
                continue;
            };
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            tokio::spawn(connection(
                stream,
                acceptor,
                routes.clone(),
                (credentials.clone(), epoch),
                permit,
            ));
        }
    });
    Ok(())
}

async fn connection(
    stream: tokio::net::TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    routes: Arc<Routes>,
    (credentials, epoch): (Arc<std::sync::Mutex<Credentials>>, u64),
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let written = Arc::new(AtomicU64::new(0));
    let address = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let stream = Counted {
        inner: stream,
        sink: Sink::Tally(written.clone()),
    };
    // A refused handshake (no, foreign, expired or revoked certificate) ends here:
    // nothing reaches the host.
    let tls = match acceptor.accept(stream).await {
        Ok(tls) => tls,
        Err(e) => {
            tracing::warn!(peer = address, reason = %e, "connection refused");
            if let Some(wire) = &routes.wire {
                wire.add(
                    UNAUTHENTICATED_PEER,
                    Direction::ServerToClient,
                    written.swap(0, Ordering::Relaxed),
                );
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
    let shared_epoch = credentials
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .epoch
        .clone();
    let checked = Arc::new(Checked {
        chain: tls
            .get_ref()
            .1
            .peer_certificates()
            .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
            .unwrap_or_default(),
        verified_at: AtomicU64::new(epoch),
        epoch: shared_epoch,
        credentials,
    });
    let served = routes.clone();
    let service = hyper::service::service_fn(move |request| {
        let routes = served.clone();
        let identity = identity.clone();
        let checked = checked.clone();
        async move {
            let outbound = match checked.refused() {
                Some(reason) => {
                    tracing::warn!(%reason, "request refused on a connection made before");
                    Outbound::refused(403, reason)
                }
                None => route(request, &routes, identity.as_ref().as_ref()).await,
            };
            match outbound {
                Outbound::Reply { status, body } => Ok(response(status, body)),
                Outbound::Lost => Err(ReplyLost),
            }
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
        .await;
    // Everything this connection wrote, handshake included, once.
    if let Some(wire) = &routes.wire {
        wire.add(
            &peer,
            Direction::ServerToClient,
            written.swap(0, Ordering::Relaxed),
        );
    }
}

fn response(status: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    if !body.is_empty() {
        builder = builder.header("content-type", "application/json");
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
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

async fn route(
    request: Request<Incoming>,
    routes: &Routes,
    identity: Option<&(String, String)>,
) -> Outbound {
    let path = request.uri().path().to_owned();
    let post = request.method() == Method::POST;
    if post && path == "/control" {
        // The membership is the certificate's (the path names none).
        let (membership, peer) = identity.cloned().unwrap_or_default();
        if let Some(refused) = routes.left_refusal(&membership) {
            return refused;
        }
        return admit(request, &routes.control, "control", &membership, "", peer).await;
    }
    let mut parts = path.trim_start_matches('/').splitn(3, '/');
    let family = parts.next().unwrap_or_default();
    let Some(endpoint) = routes.find(family) else {
        return Outbound::refused(404, "the control API is POST /control");
    };
    let no_endpoint = || Outbound::refused(404, format!("no endpoint {path}"));
    let (Some(membership), Some(what)) = (parts.next(), parts.next()) else {
        return no_endpoint();
    };
    if !post || !endpoint.serves(family, what) {
        return no_endpoint();
    }
    let peer = match certified_in(identity, membership) {
        Ok(peer) => peer.to_owned(),
        Err(reason) => return Outbound::refused(403, reason),
    };
    if let Some(refused) = routes.left_refusal(membership) {
        return refused;
    }
    let (membership, what) = (membership.to_owned(), what.to_owned());
    admit(request, endpoint, family, &membership, &what, peer).await
}

/// Reads the body within the endpoint's limit and hands the request over.
async fn admit(
    request: Request<Incoming>,
    endpoint: &Arc<dyn Endpoint>,
    family: &str,
    membership: &str,
    what: &str,
    peer: String,
) -> Outbound {
    let header = endpoint.header().and_then(|name| {
        request
            .headers()
            .get(name)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
    });
    let limit = endpoint.body_limit(family, what);
    let body = match Limited::new(request.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes().to_vec(),
        Err(_) => return Outbound::refused(413, endpoint.too_long(limit)),
    };
    endpoint
        .serve(Inbound {
            family: family.to_owned(),
            membership: membership.to_owned(),
            what: what.to_owned(),
            peer,
            header,
            body,
        })
        .await
}
