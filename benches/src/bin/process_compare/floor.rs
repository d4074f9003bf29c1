//! The floor: a plain HTTPS request/response without journaling. One small JSON request
//! (`POST /run`, the same request id, Process name and arguments as a Grid run) and one
//! small JSON reply (the run's outcome and the counter's new value), over mutual TLS 1.3
//! (rustls with ring, Ed25519 certificates like Grid's membership certificates, made here
//! with rcgen), HTTP/1.1 with keep-alive (hyper), one connection per caller.
//!
//! The server is this benchmark's own executable started again as a separate process
//! (`process_compare --serve-floor DIR PORT`), so it has its own CPU time and its own
//! runtime, as each `gridd` has; it keeps nothing but a counter in memory.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use grid_benches::pki::{Ca, SERVER_NAME, role};
use grid_benches::procs::{Procs, Result, free_ports};

const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The argument that makes this executable the floor's server.
pub const SERVE_ARG: &str = "--serve-floor";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA and the server's and the client's certificates, all Ed25519, as DER files in
/// `dir`: `ca.der`, `server.der`/`server.key`, `client.der`/`client.key` (PKCS#8).
fn make_pki(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let ca = Ca::new("process_compare floor CA", &rcgen::PKCS_ED25519)?;
    std::fs::write(dir.join("ca.der"), ca.cert.der())?;
    for (name, server) in [("server", true), ("client", false)] {
        let leaf = ca.leaf(
            name,
            &[rcgen::KeyUsagePurpose::DigitalSignature],
            &[role(server)],
        )?;
        std::fs::write(dir.join(format!("{name}.der")), leaf.cert.der())?;
        std::fs::write(dir.join(format!("{name}.key")), leaf.key.serialize_der())?;
    }
    Ok(())
}

fn read_cert(path: &Path) -> Result<CertificateDer<'static>> {
    Ok(CertificateDer::from(
        std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?,
    ))
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?,
    )))
}

fn roots(dir: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots.add(read_cert(&dir.join("ca.der"))?)?;
    Ok(roots)
}

/// TLS 1.3 only; a client certificate of the CA is required.
fn server_config(dir: &Path) -> Result<ServerConfig> {
    let provider = provider();
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots(dir)?), provider.clone())
            .build()?;
    Ok(ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![read_cert(&dir.join("server.der"))?],
            read_key(&dir.join("server.key"))?,
        )?)
}

/// TLS 1.3 only; the server must present a certificate of the CA naming `localhost`;
/// the client presents its own.
fn client_config(dir: &Path) -> Result<ClientConfig> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(dir)?)
        .with_client_auth_cert(
            vec![read_cert(&dir.join("client.der"))?],
            read_key(&dir.join("client.key"))?,
        )?)
}

/// The server's side of one call: parse the request, count, answer.
async fn answer(request: Request<Incoming>, count: &AtomicU64) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: serde_json::Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                serde_json::to_vec(&body).expect("JSON values serialize"),
            )))
            .expect("a valid response")
    };
    if request.method() != hyper::Method::POST || request.uri().path() != "/run" {
        return reply(
            StatusCode::NOT_FOUND,
            serde_json::json!({"reply": "refused", "reason": "POST /run only"}),
        );
    }
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"reply": "refused", "reason": e.to_string()}),
            );
        }
    };
    let run: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(run) => run,
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"reply": "refused", "reason": e.to_string()}),
            );
        }
    };
    let n = count.fetch_add(1, Ordering::Relaxed) + 1;
    reply(
        StatusCode::OK,
        serde_json::json!({
            "reply": "ran",
            "run": {
                "request": run["request"],
                "process": run["process"],
                "arguments": run["arguments"],
                "outcome": "succeeded",
                "result": n,
            }
        }),
    )
}

/// `process_compare --serve-floor DIR PORT`: serves `POST /run` on 127.0.0.1:PORT with
/// the certificates in DIR until killed.
pub fn serve(dir: &Path, port: u16) -> Result<()> {
    let config = Arc::new(server_config(dir)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let count = Arc::new(AtomicU64::new(0));
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let acceptor = acceptor.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request| {
                    let count = count.clone();
                    async move { Ok::<_, Infallible>(answer(request, &count).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    })
}

/// The floor's server process.
pub struct FloorServer {
    pub port: u16,
    tls: PathBuf,
    client_config: Arc<ClientConfig>,
    pub procs: Procs,
}

impl FloorServer {
    /// Makes the certificates under `work/floor`, starts the server and waits until it
    /// answers one call.
    pub async fn start(work: &Path) -> Result<FloorServer> {
        let dir = work.join("floor");
        let tls = dir.join("tls");
        make_pki(&tls)?;
        let port = free_ports(1)?[0];
        let mut command = Command::new(std::env::current_exe()?);
        command.arg(SERVE_ARG).arg(&tls).arg(port.to_string());
        let mut procs = Procs::default();
        procs.spawn("floor server", command, &dir.join("server.log"))?;
        let mut server = FloorServer {
            port,
            client_config: Arc::new(client_config(&tls)?),
            tls,
            procs,
        };
        let started = Instant::now();
        loop {
            server.procs.check_running()?;
            match server.connect().await {
                Ok(mut client) => {
                    client.run("floor-check").await?;
                    return Ok(server);
                }
                Err(e) if started.elapsed() > SERVER_READY_TIMEOUT => {
                    return Err(format!(
                        "the floor server did not answer within {SERVER_READY_TIMEOUT:?}: {e}\n{}",
                        server.procs.log_tail("floor server")
                    )
                    .into());
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Where its certificates are (for the report).
    pub fn tls_dir(&self) -> &Path {
        &self.tls
    }

    /// A new connection (see [`Connector::connect`]).
    pub async fn connect(&self) -> Result<FloorClient> {
        self.connector().connect().await
    }

    /// What a caller task needs to open connections of its own.
    pub fn connector(&self) -> Connector {
        Connector {
            port: self.port,
            client_config: self.client_config.clone(),
        }
    }
}

/// Opens connections to the floor server.
#[derive(Clone)]
pub struct Connector {
    port: u16,
    client_config: Arc<ClientConfig>,
}

impl Connector {
    /// A new connection: TCP (no Nagle), the TLS 1.3 handshake with client certificate,
    /// an HTTP/1.1 connection kept alive.
    pub async fn connect(&self) -> Result<FloorClient> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        tcp.set_nodelay(true)?;
        let tls = tokio_rustls::TlsConnector::from(self.client_config.clone())
            .connect(ServerName::try_from(SERVER_NAME)?, tcp)
            .await?;
        let version = tls.get_ref().1.protocol_version();
        if version != Some(rustls::ProtocolVersion::TLSv1_3) {
            return Err(format!("the floor negotiated {version:?}, not TLS 1.3").into());
        }
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(FloorClient { sender })
    }
}

/// One caller's connection to the floor server.
pub struct FloorClient {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl FloorClient {
    /// One call under request id `id`: `Ok` when the reply says it succeeded for `id`.
    pub async fn run(&mut self, id: &str) -> std::result::Result<(), String> {
        let body = serde_json::json!({
            "request": id,
            "process": crate::grid::PROCESS,
            "arguments": {},
        });
        let request = Request::post("/run")
            .header("host", SERVER_NAME)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                serde_json::to_vec(&body).expect("JSON values serialize"),
            )))
            .map_err(|e| e.to_string())?;
        self.sender
            .ready()
            .await
            .map_err(|e| format!("connection: {e}"))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("reply: {e}"))?
            .to_bytes();
        let reply: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| format!("the reply does not decode: {e}"))?;
        let run = &reply["run"];
        if status == StatusCode::OK
            && reply["reply"] == "ran"
            && run["outcome"] == "succeeded"
            && run["request"] == id
        {
            Ok(())
        } else {
            Err(format!("{status}: {reply}"))
        }
    }
}
