//! HTTP/1 for what a host serves to its operators rather than its peers (the
//! `metrics=` endpoint, the control plane's page): bind, accept, one hyper connection
//! task each. Plain on a loopback address (callers check the address first), or — for
//! a control line with operator mutual TLS — TLS whose handshake verified the
//! operator's certificate, handed to each request as a [`ClientCertificate`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};

/// The certificate (DER) the client presented in a TLS handshake that verified it: in
/// the extensions of every request of that connection.
#[derive(Debug, Clone)]
pub struct ClientCertificate(pub Arc<Vec<u8>>);

/// TLS for [`serve_tls`]: the acceptor and how long a handshake may take.
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub handshake: Duration,
}

/// Binds `address` (refusing when it is taken: `what on ADDRESS: …`) and serves each
/// request with `handle` on `runtime`; with `connections`, at most that many at once
/// (others wait to be accepted).
pub fn serve<H, F>(
    address: SocketAddr,
    what: &str,
    connections: Option<usize>,
    runtime: &tokio::runtime::Handle,
    handle: H,
) -> Result<(), String>
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    serve_tls(address, what, connections, None, runtime, handle).map(|_| ())
}

/// [`serve`], over `tls` when given: a connection whose handshake fails, or takes
/// longer than its bound, ends there without a request. The accept loop's task:
/// aborting it (and awaiting it) closes the listener.
pub fn serve_tls<H, F>(
    address: SocketAddr,
    what: &str,
    connections: Option<usize>,
    tls: Option<Tls>,
    runtime: &tokio::runtime::Handle,
    handle: H,
) -> Result<tokio::task::JoinHandle<()>, String>
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let refused = |e: std::io::Error| format!("{what} on {address}: {e}");
    let listener = std::net::TcpListener::bind(address)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(refused)?;
    let _entered = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).map_err(refused)?;
    let open = connections.map(|n| Arc::new(tokio::sync::Semaphore::new(n)));
    let handle = Arc::new(handle);
    let tls = tls.map(Arc::new);
    let accepting = runtime.spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let permit = match &open {
                Some(open) => match open.clone().acquire_owned().await {
                    Ok(permit) => Some(permit),
                    Err(_) => return,
                },
                None => None,
            };
            let handle = handle.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    None => connection(stream, None, handle).await,
                    Some(tls) => {
                        let accepted =
                            tokio::time::timeout(tls.handshake, tls.acceptor.accept(stream)).await;
                        match accepted {
                            Ok(Ok(stream)) => {
                                let certificate = stream
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|c| c.first())
                                    .map(|c| ClientCertificate(Arc::new(c.to_vec())));
                                connection(stream, certificate, handle).await;
                            }
                            Ok(Err(e)) => {
                                tracing::info!(%peer, "TLS handshake refused: {e}");
                            }
                            Err(_) => {
                                tracing::info!(%peer, "TLS handshake took too long: dropped");
                            }
                        }
                    }
                }
                drop(permit);
            });
        }
    });
    Ok(accepting)
}

/// One HTTP/1 connection over `io`, each request carrying `certificate` when given.
async fn connection<IO, H, F>(io: IO, certificate: Option<ClientCertificate>, handle: Arc<H>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        if let Some(certificate) = &certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        let answer = handle(request);
        async move { Ok::<_, Infallible>(answer.await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .await;
}
