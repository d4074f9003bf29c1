//! The real protocol peers a journey starts (`peer start …`): Debian's `mosquitto`
//! broker and the Python peers of `adapters/peers/` (the Modbus device, the OPC UA server, the
//! Sparkplug edge node, the BACnet/IP device). [`Peers`] owns their processes like the runner owns the `gridd`
//! children: dropping it kills every peer still running, so no journey leaves one
//! behind — also when a step fails or panics (and on Linux they die with the harness
//! thread).
//!
//! A Python peer speaks the control protocol of `adapters/peers/README.md`: when it
//! serves it prints one JSON line with `"ready": true`; then it answers each JSON line
//! on its stdin with exactly one JSON line on its stdout. A broker has no control
//! channel: it is ready when its port accepts a TCP connection. Every wait is bounded
//! ([`PEER_READY_TIMEOUT`], [`PEER_STOP_TIMEOUT`], [`PEER_ANSWER_TIMEOUT`]).
//!
//! In the work directory: `peers/NAME-K.conf` (a broker's config) and
//! `logs/peer-NAME-K.log` (the K-th process of peer NAME: a broker's whole output, a
//! Python peer's stderr).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::error::Failure;

mod stores;
use crate::process::quote_output;
use crate::process::{describe_status, die_with_parent, tail, wait_bounded};
use crate::{HOST_EXIT_TIMEOUT, POLL_INTERVAL};
pub use stores::dynamodb;
use stores::make_table;

/// How long a started peer may take to be ready: a broker's port accepting a
/// connection, a Python peer's `{"ready": true}` line (the OPC UA server loads the
/// whole standard address space first: about ten seconds on a loaded 2-core machine).
pub const PEER_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `peer stop` waits after SIGTERM before it SIGKILLs the peer.
pub const PEER_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a peer may take to answer one control request.
pub const PEER_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Lines of each peer's log shown with a failure.
const LOG_TAIL_LINES: usize = 12;
/// How long a peer that closed its stdout is given to exit before the story says it
/// still runs.
const CLOSED_EXIT_WAIT: Duration = Duration::from_secs(1);
/// The one identity of a `seaweedfs` peer (written to its credentials file).
pub const SEAWEED_KEY: &str = "grid-journey";
pub const SEAWEED_SECRET: &str = "grid-journey-secret";
/// The Python peers, relative to the workspace root.
const PEERS_DIR: &str = "adapters/peers";

/// A peer's kind and arguments, kept for `peer restart` (same arguments, same port).
#[derive(Debug, Clone, PartialEq)]
pub enum PeerSpec {
    /// `mosquitto -c CONF` listening on `127.0.0.1:port`, anonymous, no persistence.
    Mosquitto { port: u16 },
    /// `weed server -s3` with S3 on `127.0.0.1:port` (its other servers on
    /// `port+1..=port+7`), data in `$WORK/peers/NAME`, and `bucket` made once ready.
    SeaweedFs { port: u16, bucket: String },
    /// `dynalite --port N --host 127.0.0.1 --path $WORK/peers/NAME` (npm `dynalite`
    /// 4.0.0, its LevelDB kept across `peer restart`), and `table` made once ready.
    Dynalite { port: u16, table: String },
    /// `adapters/peers/modbus_device.py --port N [--units 1,2]`.
    Modbus { port: u16, units: Option<String> },
    /// `adapters/peers/sparkplug_node.py --broker HOST:PORT --group G --node N
    /// [--device D] --metric NAME:TYPE=VALUE …`.
    SparkplugNode {
        broker: String,
        group: String,
        node: String,
        device: Option<String>,
        metrics: Vec<Metric>,
    },
    /// `adapters/peers/bacnet_device.py --port N --device N [--analog-inputs N]`, a
    /// BACnet/IP device on UDP `127.0.0.1:port`.
    BacnetDevice {
        port: u16,
        device: u32,
        analog_inputs: Option<u32>,
    },
    /// `adapters/peers/opcua_server.py --port N [--path /P/] [--security MODE
    /// --cert-dir DIR --trust CERT]` (paths relative to the work directory).
    OpcUaServer {
        port: u16,
        path: Option<String>,
        /// `sign` or `sign-and-encrypt`, its certificate directory and the client
        /// certificate it trusts.
        security: Option<(String, String, String)>,
    },
}

/// One metric a Sparkplug node declares in its births.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: String,
    /// A Sparkplug datatype name (`Double`, `String`, …), passed as written.
    pub datatype: String,
    /// Its first value, as text.
    pub value: String,
}

impl PeerSpec {
    /// The kind's name, as `peer start … kind=` writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            PeerSpec::Mosquitto { .. } => "mosquitto",
            PeerSpec::SeaweedFs { .. } => "seaweedfs",
            PeerSpec::Dynalite { .. } => "dynalite",
            PeerSpec::Modbus { .. } => "modbus",
            PeerSpec::SparkplugNode { .. } => "sparkplug-node",
            PeerSpec::BacnetDevice { .. } => "bacnet-device",
            PeerSpec::OpcUaServer { .. } => "opcua-server",
        }
    }

    /// The loopback port the peer serves, which must be free before it starts.
    pub fn port(&self) -> Option<u16> {
        match self {
            PeerSpec::Mosquitto { port }
            | PeerSpec::SeaweedFs { port, .. }
            | PeerSpec::Dynalite { port, .. }
            | PeerSpec::Modbus { port, .. }
            | PeerSpec::BacnetDevice { port, .. } => Some(*port),
            PeerSpec::OpcUaServer { port, .. } => Some(*port),
            PeerSpec::SparkplugNode { .. } => None,
        }
    }

    /// Whether its port is a UDP port (BACnet/IP) rather than TCP.
    pub fn udp(&self) -> bool {
        matches!(self, PeerSpec::BacnetDevice { .. })
    }

    /// Whether the peer answers control requests on its stdin (`device …`).
    pub fn speaks_control(&self) -> bool {
        !matches!(
            self,
            PeerSpec::Mosquitto { .. } | PeerSpec::SeaweedFs { .. } | PeerSpec::Dynalite { .. }
        )
    }

    /// The Python script and its arguments (`None` for a broker).
    pub fn script_arguments(&self) -> Option<(&'static str, Vec<String>)> {
        match self {
            PeerSpec::Mosquitto { .. } | PeerSpec::SeaweedFs { .. } | PeerSpec::Dynalite { .. } => {
                None
            }
            PeerSpec::Modbus { port, units } => {
                let mut args = vec!["--port".to_owned(), port.to_string()];
                if let Some(units) = units {
                    args.extend(["--units".to_owned(), units.clone()]);
                }
                Some(("modbus_device.py", args))
            }
            PeerSpec::SparkplugNode {
                broker,
                group,
                node,
                device,
                metrics,
            } => {
                let mut args = vec![
                    "--broker".to_owned(),
                    broker.clone(),
                    "--group".to_owned(),
                    group.clone(),
                    "--node".to_owned(),
                    node.clone(),
                ];
                if let Some(device) = device {
                    args.extend(["--device".to_owned(), device.clone()]);
                }
                for metric in metrics {
                    args.push("--metric".to_owned());
                    args.push(format!(
                        "{}:{}={}",
                        metric.name, metric.datatype, metric.value
                    ));
                }
                Some(("sparkplug_node.py", args))
            }
            PeerSpec::BacnetDevice {
                port,
                device,
                analog_inputs,
            } => {
                let mut args = vec![
                    "--port".to_owned(),
                    port.to_string(),
                    "--device".to_owned(),
                    device.to_string(),
                ];
                if let Some(n) = analog_inputs {
                    args.extend(["--analog-inputs".to_owned(), n.to_string()]);
                }
                Some(("bacnet_device.py", args))
            }
            PeerSpec::OpcUaServer {
                port,
                path,
                security,
            } => {
                let mut args = vec!["--port".to_owned(), port.to_string()];
                if let Some(path) = path {
                    args.extend(["--path".to_owned(), path.clone()]);
                }
                if let Some((mode, cert_dir, trust)) = security {
                    args.extend([
                        "--security".to_owned(),
                        mode.clone(),
                        "--cert-dir".to_owned(),
                        cert_dir.clone(),
                        "--trust".to_owned(),
                        trust.clone(),
                    ]);
                }
                Some(("opcua_server.py", args))
            }
        }
    }

    /// A broker's config file.
    pub fn mosquitto_config(port: u16) -> String {
        format!(
            "# written by the journeys harness\nlistener {port} 127.0.0.1\nallow_anonymous true\n\
             persistence false\nlog_dest stderr\n"
        )
    }
}

/// The workspace root whose `adapters/peers/` holds the Python peers: the nearest
/// ancestor of the journey's directory that has one (journeys live in `journeys/`),
/// else the workspace this harness was built from.
pub fn workspace_root(journey_dir: &Path) -> PathBuf {
    journey_dir
        .ancestors()
        .find(|dir| dir.join(PEERS_DIR).is_dir())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
            crate_dir.parent().unwrap_or(crate_dir).to_path_buf()
        })
}

/// `mosquitto` on `PATH`, else Debian's `/usr/sbin/mosquitto` (sbin is often not on a
/// user's `PATH`).
pub fn find_mosquitto() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("mosquitto"))
        .find(|candidate| candidate.is_file())
}

/// The peers of one journey, by name; dropping it kills every one still running.
pub struct Peers {
    /// Where brokers' configs go (`$WORK/peers`).
    configs: PathBuf,
    logs: PathBuf,
    work: PathBuf,
    root: PathBuf,
    map: BTreeMap<String, Peer>,
}

struct Peer {
    spec: PeerSpec,
    child: Child,
    /// 1 for the first process of the peer in this journey, 2 after a restart, …
    generation: u32,
    log: PathBuf,
    /// A Python peer's control channel: its stdin, and its stdout's lines (read by a
    /// thread; the channel closes when the peer's stdout does).
    stdin: Option<ChildStdin>,
    lines: Option<Receiver<String>>,
    exited: Option<ExitStatus>,
    /// Whether a step stopped or killed it, or its exit was already told.
    exit_told: bool,
}

impl Peer {
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    fn read_log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// SIGKILL (if it runs) and a bounded wait; closes the control channel.
    fn kill(&mut self) -> Option<ExitStatus> {
        if self.poll().is_none() {
            let _ = self.child.kill();
            self.exited = wait_bounded(&mut self.child, HOST_EXIT_TIMEOUT)
                .ok()
                .flatten();
        }
        self.stdin = None;
        self.exited
    }
}

impl Peers {
    /// The peers of a journey whose work directory is `work` (logs in `logs`), with the
    /// Python peers under `root/adapters/peers`.
    pub fn new(work: &Path, logs: &Path, root: PathBuf) -> Peers {
        Peers {
            configs: work.join("peers"),
            logs: logs.to_path_buf(),
            work: work.to_path_buf(),
            root,
            map: BTreeMap::new(),
        }
    }

    /// Whether peer `name` runs.
    pub fn running(&mut self, name: &str) -> bool {
        self.map
            .get_mut(name)
            .is_some_and(|peer| peer.poll().is_none())
    }

    /// The spec peer `name` was last started with.
    pub fn spec(&self, name: &str) -> Option<&PeerSpec> {
        self.map.get(name).map(|peer| &peer.spec)
    }

    /// Starts peer `name` and waits (within [`PEER_READY_TIMEOUT`]) until it is ready;
    /// returns the story's lines (the command, then how it became ready). Its port must
    /// be free first: a leftover listening there would pass for the peer.
    pub fn start(&mut self, name: &str, spec: &PeerSpec) -> Result<Vec<String>, Failure> {
        if self.running(name) {
            return Err(Failure::new(
                format!("peer `{name}` not to be running before it is started"),
                "it is still running (stop or kill it first)",
            ));
        }
        if let Some(port) = spec.port()
            && let Err(error) = if spec.udp() {
                UdpSocket::bind(("127.0.0.1", port)).map(drop)
            } else {
                TcpListener::bind(("127.0.0.1", port)).map(drop)
            }
        {
            return Err(Failure::new(
                format!("127.0.0.1:{port} free for peer `{name}`"),
                format!("it is in use: {error}"),
            ));
        }
        let generation = self.map.get(name).map_or(0, |p| p.generation) + 1;
        let log = self.logs.join(format!("peer-{name}-{generation}.log"));
        let (mut command, shown) = self.command(name, generation, spec)?;
        let expected = format!(
            "peer `{name}` ({}) to start and be ready: `{shown}`",
            spec.kind()
        );
        let python = spec.speaks_control();
        let spawned = File::create(&log).and_then(|file| {
            command.current_dir(&self.work).env("PYTHONUNBUFFERED", "1");
            if python {
                command
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(file);
            } else {
                command
                    .stdin(Stdio::null())
                    .stdout(file.try_clone()?)
                    .stderr(file);
            }
            die_with_parent(&mut command);
            command.spawn()
        });
        let mut child = spawned.map_err(|error| {
            Failure::new(
                expected.clone(),
                format!("could not run `{shown}`: {error}"),
            )
        })?;
        let stdin = child.stdin.take();
        let lines = child.stdout.take().map(|stdout| {
            let (sender, receiver) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
            receiver
        });
        self.map.insert(
            name.to_owned(),
            Peer {
                spec: spec.clone(),
                child,
                generation,
                log,
                stdin,
                lines,
                exited: None,
                exit_told: false,
            },
        );
        let mut said = vec![format!("$ {shown}")];
        let started = Instant::now();
        let ready = match (spec, spec.port()) {
            (PeerSpec::SeaweedFs { port, bucket }, _) => {
                self.wait_port(name, *port, &expected)?;
                self.make_bucket(name, *port, bucket, &expected)?
            }
            (PeerSpec::Dynalite { port, table }, _) => {
                self.wait_port(name, *port, &expected)?;
                make_table(*port, table).map_err(|e| Failure::new(expected.clone(), e))?
            }
            (_, Some(port)) if !python => self.wait_port(name, port, &expected)?,
            _ => self.wait_ready_line(name, &expected, &mut said)?,
        };
        let peer = &self.map[name];
        said.push(format!(
            "peer {name} ready (pid {}, {ready}) after {} ms; log {}",
            peer.child.id(),
            started.elapsed().as_millis(),
            peer.log.display()
        ));
        Ok(said)
    }

    /// The command that runs the peer, and how the story shows it.
    fn command(
        &self,
        name: &str,
        generation: u32,
        spec: &PeerSpec,
    ) -> Result<(Command, String), Failure> {
        let expected = format!("peer `{name}` ({}) to start", spec.kind());
        if let Some((script, args)) = spec.script_arguments() {
            let path = self.root.join(PEERS_DIR).join(script);
            if !path.is_file() {
                return Err(Failure::new(
                    expected,
                    format!(
                        "{} does not exist (the Python peers live in {PEERS_DIR}/ of the workspace)",
                        path.display()
                    ),
                ));
            }
            let mut command = Command::new("python3");
            command.arg(&path).args(&args);
            let shown = format!("python3 {PEERS_DIR}/{script} {}", args.join(" "));
            return Ok((command, shown));
        }
        if let PeerSpec::SeaweedFs { port, .. } = spec {
            return self.seaweedfs(name, *port, &expected);
        }
        if let PeerSpec::Dynalite { port, .. } = spec {
            return self.dynalite(name, *port, &expected);
        }
        let PeerSpec::Mosquitto { port } = spec else {
            unreachable!("every kind without a script is a broker or SeaweedFS")
        };
        let Some(mosquitto) = find_mosquitto() else {
            return Err(Failure::new(
                expected,
                "no `mosquitto` on PATH nor in /usr/sbin (Debian: apt-get install mosquitto; \
                 .ci/run installs it)",
            ));
        };
        let config = self.configs.join(format!("{name}-{generation}.conf"));
        std::fs::create_dir_all(&self.configs)
            .and_then(|()| std::fs::write(&config, PeerSpec::mosquitto_config(*port)))
            .map_err(|e| Failure::new(expected, format!("{}: {e}", config.display())))?;
        let mut command = Command::new(&mosquitto);
        command.arg("-c").arg(&config);
        let shown = format!("{} -c {}", mosquitto.display(), config.display());
        Ok((command, shown))
    }

    /// Waits until the broker's port accepts a TCP connection.
    fn wait_port(&mut self, name: &str, port: u16, expected: &str) -> Result<String, Failure> {
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let started = Instant::now();
        loop {
            let peer = self.map.get_mut(name).expect("just started");
            if let Some(status) = peer.poll() {
                peer.exit_told = true;
                return Err(Failure::new(
                    expected,
                    format!(
                        "it exited ({}) before it was ready; it printed: {}",
                        describe_status(&status),
                        quote_output(&peer.read_log())
                    ),
                ));
            }
            if TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_ok() {
                return Ok(format!("{address} accepts connections"));
            }
            if started.elapsed() >= PEER_READY_TIMEOUT {
                let never = format!("{address} never accepted a connection");
                return Err(not_ready(peer, expected, &never));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Waits for the Python peer's `{"ready": true}` line; other lines are told.
    fn wait_ready_line(
        &mut self,
        name: &str,
        expected: &str,
        said: &mut Vec<String>,
    ) -> Result<String, Failure> {
        let deadline = Instant::now() + PEER_READY_TIMEOUT;
        loop {
            let peer = self.map.get_mut(name).expect("just started");
            let lines = peer.lines.as_ref().expect("a Python peer's stdout");
            let wait = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(wait) {
                Ok(line) => match serde_json::from_str::<Value>(&line) {
                    Ok(json) if json["ready"] == true => return Ok(line),
                    _ => said.push(format!("(peer {name} printed before it was ready: {line})")),
                },
                Err(RecvTimeoutError::Disconnected) => {
                    let status = wait_bounded(&mut peer.child, HOST_EXIT_TIMEOUT)
                        .ok()
                        .flatten();
                    peer.exited = status;
                    peer.exit_told = true;
                    return Err(Failure::new(
                        expected,
                        format!(
                            "it closed its stdout ({}) before a {{\"ready\": true}} line; its \
                             log: {}",
                            status.map_or("still running".to_owned(), |s| describe_status(&s)),
                            quote_output(&peer.read_log())
                        ),
                    ));
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(not_ready(peer, expected, "no {\"ready\": true} line"));
                }
            }
        }
    }

    fn started(&mut self, name: &str) -> Result<&mut Peer, Failure> {
        self.map.get_mut(name).ok_or_else(|| {
            Failure::new(
                format!("peer `{name}` to have been started by this journey"),
                "the harness never started it",
            )
        })
    }

    /// The running peer a step ends (its exit is the step's, never told as its own), or
    /// how it had already ended.
    fn ending(&mut self, name: &str) -> Result<Result<&mut Peer, String>, Failure> {
        let peer = self.started(name)?;
        peer.exit_told = true;
        match peer.poll() {
            Some(status) => Ok(Err(format!(
                "peer {name} had already exited ({})",
                describe_status(&status)
            ))),
            None => Ok(Ok(peer)),
        }
    }

    /// SIGTERM, then (after [`PEER_STOP_TIMEOUT`]) SIGKILL; returns how it ended.
    pub fn stop(&mut self, name: &str) -> Result<String, Failure> {
        let peer = match self.ending(name)? {
            Ok(peer) => peer,
            Err(ended) => return Ok(ended),
        };
        let started = Instant::now();
        let pid = libc::pid_t::try_from(peer.child.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) with a pid the harness has not reaped yet (it is our child and
        // still running), so it cannot name another process.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        if let Ok(Some(status)) = wait_bounded(&mut peer.child, PEER_STOP_TIMEOUT) {
            peer.exited = Some(status);
            peer.stdin = None;
            return Ok(format!(
                "peer {name} stopped ({}) {} ms after SIGTERM",
                describe_status(&status),
                started.elapsed().as_millis()
            ));
        }
        match peer.kill() {
            Some(status) => Ok(format!(
                "peer {name} did not stop within PEER_STOP_TIMEOUT ({} s) of SIGTERM: SIGKILLed \
                 ({})",
                PEER_STOP_TIMEOUT.as_secs(),
                describe_status(&status)
            )),
            None => Err(still_running(name)),
        }
    }

    /// SIGKILL and a bounded wait; returns how it ended.
    pub fn kill(&mut self, name: &str) -> Result<String, Failure> {
        let peer = match self.ending(name)? {
            Ok(peer) => peer,
            Err(ended) => return Ok(ended),
        };
        match peer.kill() {
            Some(status) => Ok(format!("peer {name}: {}", describe_status(&status))),
            None => Err(still_running(name)),
        }
    }

    /// Stops the peer if it runs (as [`Peers::stop`]) and starts it again with the same
    /// spec (same arguments, same port).
    pub fn restart(&mut self, name: &str) -> Result<Vec<String>, Failure> {
        let spec = self.started(name)?.spec.clone();
        let mut said = Vec::new();
        if self.running(name) {
            said.push(self.stop(name)?);
        }
        said.extend(self.start(name, &spec)?);
        Ok(said)
    }

    /// Sends one request line to the peer and waits (within `timeout`) for its one
    /// answer line, a JSON object. Lines it printed unasked before the request, and
    /// lines that are not JSON, are returned beside the answer for the story.
    pub fn ask(
        &mut self,
        name: &str,
        request: &Value,
        timeout: Duration,
    ) -> Result<(Value, Vec<String>), Failure> {
        let expected = format!("peer `{name}` to answer {request}");
        let peer = self.started(name)?;
        let (Some(stdin), Some(lines)) = (peer.stdin.as_mut(), peer.lines.as_ref()) else {
            let why = match peer.poll() {
                Some(status) => format!("it has exited ({})", describe_status(&status)),
                None => format!("a {} peer has no control channel", peer.spec.kind()),
            };
            return Err(Failure::new(expected, why));
        };
        let mut noted = Vec::new();
        while let Ok(line) = lines.try_recv() {
            noted.push(format!("(peer {name} had printed, unasked: {line})"));
        }
        let mut text = request.to_string();
        text.push('\n');
        let sent = stdin
            .write_all(text.as_bytes())
            .and_then(|()| stdin.flush());
        let deadline = Instant::now() + timeout;
        let gone = |peer: &mut Peer, what: String| {
            let status = wait_bounded(&mut peer.child, CLOSED_EXIT_WAIT)
                .ok()
                .flatten();
            peer.exited = peer.exited.or(status);
            peer.exit_told = true;
            peer.stdin = None;
            Failure::new(
                expected.clone(),
                format!(
                    "{what} ({}); its log: {}",
                    status.map_or("still running".to_owned(), |s| describe_status(&s)),
                    quote_output(&peer.read_log())
                ),
            )
        };
        if let Err(error) = sent {
            return Err(gone(peer, format!("could not write to its stdin: {error}")));
        }
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            let lines = peer.lines.as_ref().expect("checked above");
            match lines.recv_timeout(wait) {
                Ok(line) => match serde_json::from_str::<Value>(&line) {
                    Ok(answer) if answer.is_object() => return Ok((answer, noted)),
                    _ => noted.push(format!("(peer {name} printed, not a JSON answer: {line})")),
                },
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(gone(peer, "it closed its stdout without answering".into()));
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(Failure::new(
                        format!("{expected} within {} s", timeout.as_secs()),
                        format!(
                            "no answer line; its log: {}",
                            quote_output(&peer.read_log())
                        ),
                    ));
                }
            }
        }
    }

    /// Peers that exited since the last call without a step stopping or killing them,
    /// each told once with the last lines of its log. Not a failure by itself (a
    /// broker's clients may end when the broker goes); a later step that needs the peer
    /// fails.
    pub fn exited_by_themselves(&mut self) -> Vec<String> {
        let mut told = Vec::new();
        for (name, peer) in &mut self.map {
            if peer.exit_told {
                continue;
            }
            let Some(status) = peer.poll() else { continue };
            peer.exit_told = true;
            peer.stdin = None;
            told.push(format!(
                "peer {name} exited by itself ({}) — log {}:\n{}",
                describe_status(&status),
                peer.log.display(),
                quote_output(&peer.read_log())
            ));
        }
        told
    }

    /// The last lines of each peer's log, for a failure's report.
    pub fn log_tails(&self) -> String {
        let mut text = String::new();
        for (name, peer) in &self.map {
            let log = peer.read_log();
            if log.trim().is_empty() {
                continue;
            }
            text.push_str(&format!(
                "  peer {name} ({} #{}) log, {}:\n",
                peer.spec.kind(),
                peer.generation,
                peer.log.display()
            ));
            for line in tail(&log, LOG_TAIL_LINES).lines() {
                text.push_str(&format!("    {line}\n"));
            }
        }
        text
    }

    /// SIGKILLs every peer still running and waits for each.
    pub fn kill_all(&mut self) {
        for peer in self.map.values_mut() {
            peer.kill();
        }
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A peer not ready within [`PEER_READY_TIMEOUT`]: killed, and the failure with its log.
fn not_ready(peer: &mut Peer, expected: &str, what: &str) -> Failure {
    peer.kill();
    peer.exit_told = true;
    Failure::new(
        format!(
            "{expected} within PEER_READY_TIMEOUT ({} s)",
            PEER_READY_TIMEOUT.as_secs()
        ),
        format!(
            "{what} (killed); its log: {}",
            quote_output(&peer.read_log())
        ),
    )
}

fn still_running(name: &str) -> Failure {
    Failure::new(
        format!(
            "peer `{name}` to exit within HOST_EXIT_TIMEOUT ({} s) after SIGKILL",
            HOST_EXIT_TIMEOUT.as_secs()
        ),
        "it is still running",
    )
}
