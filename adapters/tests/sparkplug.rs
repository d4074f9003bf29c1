//! The Sparkplug B adapter against real peers: Debian's `mosquitto` (started here with
//! a config this test writes) and the edge node of adapters/peers/sparkplug_node.py
//! (mqtt-spb-wrapper over paho-mqtt), driven by the peers' control protocol
//! (adapters/peers/README.md). Every wait is bounded; nothing is timed.
//!
//! Ports 18830–18849 only, one (or two) per test, so the tests run in parallel. A
//! missing mosquitto or Python package fails the test with the command that installs
//! it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use grid_adapters::{Adapters, Credentials, Event, Quality, TagEvent};
use serde_json::{Value, json};

/// The longest any one wait lasts before the test fails (a bound, not a measurement).
const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------- peers --

/// A directory of this test's files, removed when the test passes (kept to read when
/// it fails).
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path =
            std::env::temp_dir().join(format!("grid-sparkplug-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn mosquitto() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("mosquitto"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("mosquitto is not installed: run `apt-get install -y mosquitto` (Debian)")
        })
}

/// A mosquitto broker on loopback, killed on drop. It logs every packet to a file, so
/// a test can see what the adapter published.
struct Broker {
    child: Child,
    conf: PathBuf,
    log: PathBuf,
    port: u16,
}

impl Broker {
    fn start(dir: &Path, port: u16, listeners: &str) -> Broker {
        let log = dir.join("mosquitto.log");
        let conf = dir.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "allow_anonymous true\nlog_dest file {}\nlog_type all\n\
                 listener {port} 127.0.0.1\n{listeners}",
                log.display()
            ),
        )
        .unwrap();
        let child = spawn_mosquitto(&conf, &log, port);
        Broker {
            child,
            conf,
            log,
            port,
        }
    }

    /// Starts the broker again, with the same configuration (after [`Broker::kill`]).
    fn restart(&mut self) {
        self.child = spawn_mosquitto(&self.conf, &self.log, self.port);
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the broker's log has a line containing `needle`.
    fn until_logged(&self, needle: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.log_text().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "mosquitto never logged `{needle}`"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn spawn_mosquitto(conf: &Path, log: &Path, port: u16) -> Child {
    // Run as root, mosquitto drops to its own user: let it write its (fresh) log.
    std::fs::write(log, "").unwrap();
    set_mode(log, 0o666);
    let mut child = Command::new(mosquitto())
        .arg("-c")
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mosquitto starts");
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            panic!("mosquitto exited ({status}): {log}");
        }
        assert!(
            Instant::now() < deadline,
            "mosquitto never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The edge node (adapters/peers/sparkplug_node.py), killed on drop.
struct Node {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

const PEERS_INSTALL: &str = "pip install -r adapters/peers/requirements.txt";

impl Node {
    /// Group `plant`, node `line-1`, and `args` (`--metric`, `--device`).
    fn start(dir: &Path, port: u16, args: &[&str]) -> Node {
        let check = Command::new("python3")
            .args([
                "-c",
                "import mqtt_spb_wrapper, paho.mqtt.client, google.protobuf",
            ])
            .output();
        match check {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "the edge node's Python packages are missing ({}): run `{PEERS_INSTALL}`",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => {
                panic!("python3 is not installed ({e}): install Python 3, then `{PEERS_INSTALL}`")
            }
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/sparkplug_node.py");
        let stderr = std::fs::File::create(dir.join("node.log")).unwrap();
        let broker = format!("127.0.0.1:{port}");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--broker", &broker, "--group", "plant", "--node", "line-1"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("python3 starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut node = Node {
            child,
            stdin,
            lines,
        };
        let ready = node.line();
        assert_eq!(ready["ready"], json!(true), "{ready}");
        node
    }

    fn line(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("the edge node did not answer ({e}); see its node.log"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    fn op(&mut self, request: Value) -> Value {
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        let answer = self.line();
        assert_eq!(answer["ok"], json!(true), "{request} → {answer}");
        answer
    }

    fn set(&mut self, metric: &str, value: Value) {
        self.op(json!({"op": "set", "metric": metric, "value": value}));
    }

    fn stats(&mut self) -> Value {
        self.op(json!({"op": "stats"}))
    }

    /// Waits until the node has received more than `n` rebirth commands.
    fn until_rebirths_above(&mut self, n: u64) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            let rebirths = self.stats()["rebirths"].as_u64().unwrap();
            if rebirths > n {
                return rebirths;
            }
            assert!(
                Instant::now() < deadline,
                "the node never saw a rebirth request beyond {n}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the node is connected to its broker again.
    fn until_connected(&mut self) {
        let deadline = Instant::now() + WAIT;
        while self.stats()["connected"] != json!(true) {
            assert!(Instant::now() < deadline, "the node never reconnected");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ----------------------------------------------------------------------------- grid --

/// The host's side: the adapters of one host on their own runtime, reporting into a
/// bounded channel the test reads.
struct Grid {
    runtime: tokio::runtime::Runtime,
    adapters: Option<Adapters>,
    events: tokio::sync::mpsc::Receiver<TagEvent>,
    seen: Vec<TagEvent>,
}

impl Grid {
    fn start(tag: grid_spec::Tag, credentials: Credentials) -> Grid {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (sink, events) = tokio::sync::mpsc::channel(64);
        let mut adapters = Adapters::new(runtime.handle().clone(), sink, "edge-a", credentials);
        adapters.start(&tag, 1).expect("the tag starts");
        Grid {
            runtime,
            adapters: Some(adapters),
            events,
            seen: Vec::new(),
        }
    }

    /// Reads events until one satisfies `want`; fails after `WAIT`, listing what came.
    fn until(&mut self, what: &str, want: impl Fn(&Event) -> bool) -> Event {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let next = self
                .runtime
                .block_on(async { tokio::time::timeout_at(deadline, self.events.recv()).await });
            let event = match next {
                Ok(Some(e)) => e,
                Ok(None) => panic!("the adapters stopped before {what}; seen: {:#?}", self.seen),
                Err(_) => panic!("no {what} within {WAIT:?}; seen: {:#?}", self.seen),
            };
            assert_eq!((event.tag.as_str(), event.generation), (tag_name(), 1));
            self.seen.push(event.clone());
            if want(&event.event) {
                return event.event;
            }
        }
    }

    fn until_good(&mut self, value: f64) {
        self.until(&format!("good {value}"), |e| good(e) == Some(value));
    }

    fn until_debt(&mut self, prefix: &str) -> String {
        let event = self.until(&format!("debt `{prefix}…`"), |e| {
            debt(e).is_some_and(|r| r.starts_with(prefix))
        });
        debt(&event).unwrap().to_owned()
    }

    fn until_state(&mut self, state: &str) {
        self.until(
            &format!("state {state}"),
            |e| matches!(e, Event::Connection(c) if c.state == state),
        );
    }

    /// The readings seen so far (connection changes left out).
    fn readings(&self) -> Vec<&Quality> {
        self.seen
            .iter()
            .filter_map(|e| match &e.event {
                Event::Reading(r) => Some(&r.quality),
                Event::Connection(_) | Event::Completion(_) => None,
            })
            .collect()
    }

    /// Stops every adapter, then waits until their tasks have let go of the sink.
    fn stop(&mut self) {
        drop(self.adapters.take());
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let next = self
                .runtime
                .block_on(async { tokio::time::timeout_at(deadline, self.events.recv()).await });
            match next {
                Ok(Some(e)) => self.seen.push(e),
                Ok(None) => return,
                Err(_) => panic!("a stopped adapter still holds the sink"),
            }
        }
    }
}

fn good(e: &Event) -> Option<f64> {
    match e {
        Event::Reading(r) => match r.quality {
            Quality::Good { value } => Some(value),
            _ => None,
        },
        Event::Connection(_) | Event::Completion(_) => None,
    }
}

fn debt(e: &Event) -> Option<&str> {
    match e {
        Event::Reading(r) => match &r.quality {
            Quality::Debt { reason } => Some(reason),
            _ => None,
        },
        Event::Connection(_) | Event::Completion(_) => None,
    }
}

fn tag_name() -> &'static str {
    "line-speed"
}

fn tag(broker: &str, device: Option<&str>, metric: &str) -> grid_spec::Tag {
    grid_spec::Tag {
        name: tag_name().into(),
        host: "edge-a".into(),
        source: grid_spec::TagSource::Sparkplug {
            broker: broker.into(),
            group: "plant".into(),
            node: "line-1".into(),
            device: device.map(str::to_owned),
            metric: metric.into(),
            client_id: None,
            ca: None,
            membership: None,
        },
        retired: false,
        origin: grid_spec::Origin {
            source: 0,
            offset: 0,
            length: 0,
        },
    }
}

/// A broker on `port`, a node with `Speed` (Double 1.5) and `node_args`, and the
/// adapter reading `metric`, its first value (from the rebirth it asked for) seen
/// unless the metric is `Label`.
fn setup(
    name: &str,
    port: u16,
    node_args: &[&str],
    device: Option<&str>,
    metric: &str,
) -> (Dir, Broker, Node, Grid) {
    let dir = Dir::new(name);
    let broker = Broker::start(&dir.0, port, "");
    let mut args = vec!["--metric", "Speed:Double=1.5"];
    args.extend_from_slice(node_args);
    let node = Node::start(&dir.0, port, &args);
    let url = format!("mqtt://127.0.0.1:{port}");
    let mut grid = Grid::start(tag(&url, device, metric), Credentials::default());
    if metric == "Speed" {
        grid.until_good(1.5);
    }
    (dir, broker, node, grid)
}

// ---------------------------------------------------------------------------- tests --

/// How mosquitto logs the adapter's rebirth command (client id `grid-<host>-<tag>`).
const NCMD_RECEIVED: &str =
    "Received PUBLISH from grid-edge-a-line-speed (d0, q0, r0, m0, 'spBv1.0/plant/NCMD/line-1'";

#[test]
fn values_flow_from_the_birth_the_adapter_asked_for_then_by_alias() {
    let (_dir, broker, mut node, mut grid) = setup("flow", 18830, &[], None, "Speed");
    // The node was born before the adapter subscribed: its first value came from the
    // rebirth the adapter asked for on connecting.
    assert!(node.stats()["rebirths"].as_u64().unwrap() >= 1);
    broker.until_logged(NCMD_RECEIVED);
    for v in [2.5, -3.25, 1e6] {
        node.set("Speed", json!(v));
        grid.until_good(v);
    }
    let Some(Event::Reading(r)) = grid
        .seen
        .iter()
        .rev()
        .map(|e| &e.event)
        .find(|e| good(e).is_some())
    else {
        unreachable!()
    };
    assert!(r.device_time_ms.is_some(), "{r:?}");
    assert_eq!(r.raw, grid_adapters::Raw::Float(1e6));
    grid.stop();
}

#[test]
fn a_string_metric_is_refused_once_and_nothing_of_it_is_captured() {
    let (_dir, _broker, mut node, mut grid) = setup(
        "string",
        18831,
        &["--metric", "Label:String=hello"],
        None,
        "Label",
    );
    grid.until(
        "the refusal",
        |e| matches!(e, Event::Reading(r) if r.quality == Quality::Refused { reason: "datatype String is not numeric".into() }),
    );
    node.set("Label", json!("world"));
    node.set("Label", json!("again"));
    node.set("Speed", json!(2.0));
    // The death follows the data on the same connection: once it is seen, the data was.
    node.op(json!({"op": "death"}));
    grid.until_state("offline");
    assert_eq!(
        grid.readings(),
        [&Quality::Refused {
            reason: "datatype String is not numeric".into()
        }]
    );
}

#[test]
fn a_null_is_debt_until_a_good_value() {
    let (_dir, _broker, mut node, mut grid) = setup("null", 18832, &[], None, "Speed");
    node.op(json!({"op": "null", "metric": "Speed"}));
    assert_eq!(grid.until_debt("is_null"), "is_null");
    node.set("Speed", json!("NaN"));
    assert_eq!(grid.until_debt("not finite"), "not finite: NaN");
    node.set("Speed", json!(4.0));
    grid.until_good(4.0);
}

#[test]
fn a_sequence_gap_is_debt_and_a_rebirth_request_then_values_again() {
    let (_dir, _broker, mut node, mut grid) = setup("gap", 18833, &[], None, "Speed");
    let rebirths = node.stats()["rebirths"].as_u64().unwrap();
    node.op(json!({"op": "gap"}));
    node.set("Speed", json!(2.0));
    let reason = grid.until_debt("sequence gap: ");
    assert_eq!(reason, "sequence gap: expected 1, got 2");
    grid.until_state("awaiting-birth");
    node.until_rebirths_above(rebirths);
    // The new birth carries the value the gapped message had.
    grid.until_good(2.0);
    node.set("Speed", json!(5.0));
    grid.until_good(5.0);
}

#[test]
fn ndeath_is_debt_until_the_next_birth() {
    let (_dir, _broker, mut node, mut grid) = setup("death", 18834, &[], None, "Speed");
    node.op(json!({"op": "death"}));
    assert_eq!(grid.until_debt("NDEATH"), "NDEATH");
    grid.until_state("offline");
    node.op(json!({"op": "birth"}));
    grid.until_state("online");
    grid.until_good(1.5);
    node.set("Speed", json!(6.0));
    grid.until_good(6.0);
}

#[test]
fn the_nodes_will_is_its_ndeath() {
    let (dir, broker, node, mut grid) = setup("will", 18840, &[], None, "Speed");
    // SIGKILL: the node says nothing; the broker publishes its will (the NDEATH with
    // the bdSeq of the session the adapter saw born).
    drop(node);
    assert_eq!(grid.until_debt("NDEATH"), "NDEATH");
    grid.until_state("offline");
    // A new node process is a new session with its own birth.
    let mut node = Node::start(&dir.0, broker.port, &["--metric", "Speed:Double=9.5"]);
    grid.until_good(9.5);
    node.set("Speed", json!(1.0));
    grid.until_good(1.0);
}

#[test]
fn a_broker_restart_is_debt_then_a_rebirth_rebuilds_the_aliases() {
    let (_dir, mut broker, mut node, mut grid) = setup("restart", 18835, &[], None, "Speed");
    broker.kill();
    grid.until_debt("connection lost: ");
    grid.until_state("offline");
    broker.restart();
    grid.until_state("awaiting-birth");
    // On reconnecting the adapter asked for a rebirth (the broker logged its NCMD)…
    broker.until_logged(NCMD_RECEIVED);
    // …and read the node's new birth, whichever of the two reconnected first.
    grid.until_good(1.5);
    node.until_connected();
    node.set("Speed", json!(7.0));
    grid.until_good(7.0);
}

#[test]
fn an_alias_not_in_the_birth_is_debt_and_a_rebirth_request() {
    let (_dir, _broker, mut node, mut grid) = setup("alias", 18836, &[], None, "Speed");
    let rebirths = node.stats()["rebirths"].as_u64().unwrap();
    let alias = node.op(json!({"op": "unknown-alias"}))["alias"]
        .as_u64()
        .unwrap();
    assert_eq!(
        grid.until_debt("alias "),
        format!("alias {alias} not in the current birth")
    );
    node.until_rebirths_above(rebirths);
    grid.until_good(1.5);
    node.set("Speed", json!(8.0));
    grid.until_good(8.0);
}

#[test]
fn a_device_tag_reads_ddata_and_ddeath_is_debt() {
    let (_dir, _broker, mut node, mut grid) = setup(
        "device",
        18837,
        &["--device", "drive-3"],
        Some("drive-3"),
        "Speed",
    );
    node.set("Speed", json!(2.0));
    grid.until_good(2.0);
    node.op(json!({"op": "death"}));
    assert_eq!(grid.until_debt("DDEATH"), "DDEATH");
    node.op(json!({"op": "birth"}));
    grid.until_good(2.0);
    node.set("Speed", json!(3.0));
    grid.until_good(3.0);
}

#[test]
fn a_membership_this_host_lacks_is_refused_at_start() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (sink, _events) = tokio::sync::mpsc::channel(1);
    let mut adapters = Adapters::new(
        runtime.handle().clone(),
        sink,
        "edge-a",
        Credentials::default(),
    );
    let mut t = tag("mqtts://127.0.0.1:18849", None, "Speed");
    if let grid_spec::TagSource::Sparkplug { membership, .. } = &mut t.source {
        *membership = Some("plant-ops".into());
    }
    let err = adapters.start(&t, 1).unwrap_err().to_string();
    assert!(err.contains("`plant-ops`"), "{err}");
    assert!(err.contains(tag_name()), "{err}");
}

// -------------------------------------------------------------------------------- tls --

struct Pki {
    ca: PathBuf,
    client: Arc<rustls::ClientConfig>,
}

/// A CA, the broker's certificate for 127.0.0.1 and a client certificate (the host's
/// "membership"), all made here.
fn pki(dir: &Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let params = |name: &str, san: Vec<String>| {
        let mut p = CertificateParams::new(san).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = params("Grid test CA", vec![]);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, &ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = params("broker", vec!["127.0.0.1".to_owned()])
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = params("edge-a", vec!["edge-a".to_owned()])
        .signed_by(&client_key, &issuer)
        .unwrap();
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        set_mode(&path, 0o644);
        path
    };
    let ca = write("ca.pem", ca_cert.pem());
    write("server.pem", server.pem());
    write("server.key", server_key.serialize_pem());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_cert.der().clone()).unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(client_key.serialize_der().into());
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(vec![client.der().clone()], key)
    .unwrap();
    Pki {
        ca,
        client: Arc::new(client),
    }
}

#[test]
fn mqtts_trusts_the_ca_file_and_presents_the_membership_certificate() {
    let dir = Dir::new("tls");
    let pki = pki(&dir.0);
    let (plain, tls) = (18838, 18839);
    let listener = format!(
        "listener {tls} 127.0.0.1\ncafile {0}/ca.pem\ncertfile {0}/server.pem\n\
         keyfile {0}/server.key\nrequire_certificate true\n",
        dir.0.display()
    );
    let _broker = Broker::start(&dir.0, plain, &listener);
    let mut node = Node::start(&dir.0, plain, &["--metric", "Speed:Double=1.5"]);
    let with = |membership: Option<&str>| {
        let mut t = tag(&format!("mqtts://127.0.0.1:{tls}"), None, "Speed");
        if let grid_spec::TagSource::Sparkplug {
            ca, membership: m, ..
        } = &mut t.source
        {
            *ca = Some(pki.ca.display().to_string());
            *m = membership.map(str::to_owned);
        }
        t
    };
    // Without a client certificate the broker refuses the handshake.
    let mut anonymous = Grid::start(with(None), Credentials::default());
    anonymous.until_debt("connection failed: ");
    anonymous.stop();
    let mut credentials = Credentials::default();
    credentials
        .memberships
        .insert("plant-ops".into(), pki.client.clone());
    let mut grid = Grid::start(with(Some("plant-ops")), credentials);
    grid.until_good(1.5);
    node.set("Speed", json!(2.0));
    grid.until_good(2.0);
}
