//! Plain HTTP/1 on a loopback address, for what a host serves to its own machine only
//! (the `metrics=` endpoint, the control plane's page): bind, accept, one hyper
//! connection task each. No TLS: callers check the address is loopback first.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};

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
    let refused = |e: std::io::Error| format!("{what} on {address}: {e}");
    let listener = std::net::TcpListener::bind(address)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(refused)?;
    let _entered = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).map_err(refused)?;
    let open = connections.map(|n| Arc::new(tokio::sync::Semaphore::new(n)));
    let handle = Arc::new(handle);
    runtime.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
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
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let answer = handle(request);
                    async move { Ok::<_, Infallible>(answer.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                drop(permit);
            });
        }
    });
    Ok(())
}
