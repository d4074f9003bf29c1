//! The OPC UA adapter against a real server: `adapters/peers/opcua_server.py`
//! (asyncua), one per test on its own port (14840–14859), killed on drop.
//!
//! Every wait is bounded in events and in time; nothing asserts how fast anything is.
//! Without asyncua these tests fail (they never skip): the server is part of the test.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use grid_adapters::{Adapters, Credentials, Event, OpcUaIdentity, Quality, TagEvent};
use grid_spec::{OpcUaSecurity, Origin, Tag, TagSource};
use serde_json::{Value, json};

/// How long the server may take to start (asyncua loads the whole standard address
/// space) or to answer one control request.
const PEER_WAIT: Duration = Duration::from_secs(90);
/// How long one wait for adapter events may take before the test fails.
const WAIT: Duration = Duration::from_secs(60);

const PEERS_INSTALL: &str = "pip install -r adapters/peers/requirements.txt";

/// A scratch directory of one test, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path = std::env::temp_dir().join(format!("grid-opcua-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn peer_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/opcua_server.py")
}

fn require_asyncua() {
    match Command::new("python3")
        .args(["-c", "import asyncua, cryptography"])
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "the OPC UA server's Python packages are missing ({}): run `{PEERS_INSTALL}`",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => {
            panic!("python3 is not installed ({e}): install Python 3, then `{PEERS_INSTALL}`")
        }
    }
}

/// The server (adapters/peers/opcua_server.py), killed on drop.
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Server {
    /// Serves `opc.tcp://127.0.0.1:PORT/grid/` with `args` (`--security …`).
    fn start(dir: &Path, port: u16, args: &[&str]) -> Server {
        require_asyncua();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))
            .unwrap();
        let mut child = Command::new("python3")
            .arg(peer_script())
            .args(["--port", &port.to_string()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
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
        let mut server = Server {
            child,
            stdin,
            lines,
        };
        let ready = server.line();
        assert_eq!(ready["ready"], json!(true), "{ready}");
        server
    }

    fn line(&mut self) -> Value {
        let line = self.lines.recv_timeout(PEER_WAIT).unwrap_or_else(|e| {
            panic!("the OPC UA server did not answer ({e}); see its server.log")
        });
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    fn op(&mut self, request: Value) -> Value {
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        let answer = self.line();
        assert_eq!(answer["ok"], json!(true), "{request} → {answer}");
        answer
    }

    fn set(&mut self, node: &str, value: Value) {
        self.op(json!({"op": "set", "node": node, "value": value}));
    }

    fn status(&mut self, node: &str, code: &str) {
        self.op(json!({"op": "status", "node": node, "code": code}));
    }

    fn stats(&mut self) -> Value {
        self.op(json!({"op": "stats"}))
    }

    /// SIGKILL: the server's sockets close without a goodbye.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `DIR/NAME-cert.der` and `DIR/NAME-key.pem`, made by the peer (`--make-cert`).
fn make_cert(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    require_asyncua();
    let out = Command::new("python3")
        .arg(peer_script())
        .arg("--make-cert")
        .arg(dir)
        .args(["--name", name])
        .output()
        .expect("python3 starts");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        dir.join(format!("{name}-cert.der")),
        dir.join(format!("{name}-key.pem")),
    )
}

/// The host's application identity, as its custody would keep it: made by the
/// adapters' own certificate creation, written under DIR/keys/.
fn identity(dir: &Path) -> OpcUaIdentity {
    let (certificate_der, private_key_der) =
        grid_adapters::opcua::new_application_certificate("edge-a").unwrap();
    let keys = dir.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let certificate_path = keys.join("opcua-cert.der");
    let private_key_path = keys.join("opcua-key.pem");
    std::fs::write(&certificate_path, &certificate_der).unwrap();
    let document = pkcs8::SecretDocument::try_from(private_key_der.as_slice()).unwrap();
    let pem = document
        .to_pem("PRIVATE KEY", pkcs8::LineEnding::LF)
        .unwrap();
    std::fs::write(&private_key_path, pem.as_bytes()).unwrap();
    OpcUaIdentity {
        certificate_der,
        private_key_der,
        application_uri: "urn:grid:edge-a".into(),
        certificate_path,
        private_key_path,
        host_dir: dir.to_owned(),
    }
}

fn tag(name: &str, port: u16, node: &str) -> Tag {
    Tag {
        name: name.into(),
        host: "edge-a".into(),
        source: TagSource::OpcUa {
            endpoint: format!("opc.tcp://127.0.0.1:{port}/grid/"),
            node: format!("ns=2;s={node}"),
            security: OpcUaSecurity::None,
            policy: None,
            publishing_ms: 50,
            server_certificate: None,
        },
        retired: false,
        origin: Origin {
            source: 0,
            offset: 0,
            length: 0,
        },
    }
}

fn secured(mut tag: Tag, server_certificate: &Path) -> Tag {
    if let TagSource::OpcUa {
        security,
        policy,
        server_certificate: certificate,
        ..
    } = &mut tag.source
    {
        *security = OpcUaSecurity::SignAndEncrypt;
        *policy = Some("Basic256Sha256".into());
        *certificate = Some(server_certificate.display().to_string());
    }
    tag
}

// ----------------------------------------------------------------------------- grid --

/// The host's side: the adapters of one host on their own runtime, reporting into a
/// bounded channel the test reads.
struct Grid {
    runtime: tokio::runtime::Runtime,
    adapters: Option<Adapters>,
    events: tokio::sync::mpsc::Receiver<TagEvent>,
    seen: Vec<TagEvent>,
    /// Per tag: how much of `seen` its waits have looked through.
    looked: std::collections::HashMap<String, usize>,
}

impl Grid {
    fn start(tags: &[Tag], credentials: Credentials) -> Grid {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (sink, events) = tokio::sync::mpsc::channel(64);
        let mut adapters = Adapters::new(runtime.handle().clone(), sink, "edge-a", credentials);
        for tag in tags {
            adapters.check(tag).expect("the tag could start");
            adapters.start(tag, 1).expect("the tag starts");
        }
        Grid {
            runtime,
            adapters: Some(adapters),
            events,
            seen: Vec::new(),
            looked: std::collections::HashMap::new(),
        }
    }

    /// The next event of `tag` (after what its last wait returned) that satisfies
    /// `want`, reading more events as needed; fails after `WAIT`, listing what came.
    /// Each tag's waits go through its own events in order, whatever other tags sent
    /// in between.
    fn until(&mut self, tag: &str, what: &str, want: impl Fn(&Event) -> bool) -> Event {
        let from = self.looked.get(tag).copied().unwrap_or(0);
        if let Some(at) =
            (from..self.seen.len()).find(|&i| self.seen[i].tag == tag && want(&self.seen[i].event))
        {
            self.looked.insert(tag.to_owned(), at + 1);
            return self.seen[at].event.clone();
        }
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let next = self
                .runtime
                .block_on(async { tokio::time::timeout_at(deadline, self.events.recv()).await });
            let event = match next {
                Ok(Some(e)) => e,
                Ok(None) => panic!("the adapters stopped before {what}; seen: {:#?}", self.seen),
                Err(_) => panic!(
                    "no {what} of `{tag}` within {WAIT:?}; seen: {:#?}",
                    self.seen
                ),
            };
            assert_eq!(event.generation, 1);
            self.seen.push(event.clone());
            if event.tag == tag && want(&event.event) {
                self.looked.insert(tag.to_owned(), self.seen.len());
                return event.event;
            }
        }
    }

    fn until_good(&mut self, tag: &str, value: f64) {
        self.until(tag, &format!("good {value}"), |e| good(e) == Some(value));
    }

    fn until_debt(&mut self, tag: &str, prefix: &str) -> String {
        let event = self.until(tag, &format!("debt `{prefix}…`"), |e| {
            debt(e).is_some_and(|r| r.starts_with(prefix))
        });
        debt(&event).unwrap().to_owned()
    }

    fn until_state(&mut self, tag: &str, state: &str) {
        self.until(
            tag,
            &format!("state {state}"),
            |e| matches!(e, Event::Connection(c) if c.state == state),
        );
    }

    /// The qualities of `tag`'s readings seen so far (connection changes left out).
    fn readings(&self, tag: &str) -> Vec<&Quality> {
        self.seen
            .iter()
            .filter(|e| e.tag == tag)
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

// ---------------------------------------------------------------------------- tests --

#[test]
fn numeric_values_flow_and_a_bad_status_is_debt_by_name_until_good_again() {
    let dir = Dir::new("flow");
    let port = 14840;
    let mut server = Server::start(&dir.0, port, &[]);
    let tags = [
        tag("pressure", port, "Boiler.Pressure"),
        tag("count", port, "Line.Count"),
        tag("running", port, "Pump.Running"),
    ];
    let mut grid = Grid::start(&tags, Credentials::default());
    // The initial values, then changes.
    grid.until_good("pressure", 0.0);
    grid.until_good("count", 0.0);
    grid.until_good("running", 0.0);
    server.set("Boiler.Pressure", json!(2.5));
    server.set("Line.Count", json!(-7));
    server.set("Pump.Running", json!(true));
    grid.until_good("pressure", 2.5);
    grid.until_good("count", -7.0);
    grid.until_good("running", 1.0);
    let device_time = grid.seen.iter().rev().find_map(|e| match &e.event {
        Event::Reading(r) if e.tag == "running" => r.device_time_ms,
        _ => None,
    });
    assert!(
        device_time.is_some(),
        "a data change carries the server's timestamp"
    );

    // A Bad status is debt with its name, not a value; a good value afterwards is good.
    server.status("Boiler.Pressure", "BadSensorFailure");
    assert_eq!(grid.until_debt("pressure", "Bad"), "BadSensorFailure");
    server.status("Boiler.Pressure", "UncertainLastUsableValue");
    assert_eq!(
        grid.until_debt("pressure", "Uncertain"),
        "UncertainLastUsableValue"
    );
    server.set("Boiler.Pressure", json!(3.25));
    grid.until_good("pressure", 3.25);
    // A Good status with a non-finite number is debt too.
    server.set("Boiler.Pressure", json!(f64::NAN.to_string()));
    assert_eq!(grid.until_debt("pressure", "not finite"), "not finite: NaN");
    server.set("Boiler.Pressure", json!(4.0));
    grid.until_good("pressure", 4.0);
    grid.stop();
    // Nothing was refused, and no value of the debt was ever projected as good.
    for quality in grid.readings("pressure") {
        assert!(!matches!(quality, Quality::Refused { .. }), "{quality:?}");
    }
}

#[test]
fn a_string_node_is_refused_once_before_anything_is_captured() {
    let dir = Dir::new("string");
    let port = 14841;
    let mut server = Server::start(&dir.0, port, &[]);
    let before = server.stats();
    let mut grid = Grid::start(&[tag("batch", port, "Batch.Name")], Credentials::default());
    grid.until_state("batch", "refused");
    grid.stop();
    assert_eq!(
        grid.readings("batch"),
        vec![&Quality::Refused {
            reason: "not numeric: String".into()
        }]
    );
    // Refused before capture: no monitored item was ever asked for, no value read.
    let after = server.stats();
    assert_eq!(
        after["monitored_items"], before["monitored_items"],
        "{after}"
    );
    assert_eq!(after["value_reads"], before["value_reads"], "{after}");
}

#[test]
fn a_killed_server_is_connection_debt_then_a_new_session_brings_good_values() {
    let dir = Dir::new("killed");
    let port = 14842;
    let server = Server::start(&dir.0, port, &[]);
    let mut grid = Grid::start(
        &[tag("pressure", port, "Boiler.Pressure")],
        Credentials::default(),
    );
    grid.until_good("pressure", 0.0);
    server.kill();
    let reason = grid.until_debt("pressure", "connection");
    assert!(reason.starts_with("connection lost"), "{reason}");
    grid.until_state("pressure", "offline");
    let mut server = Server::start(&dir.0, port, &[]);
    grid.until_state("pressure", "online");
    server.set("Boiler.Pressure", json!(6.5));
    grid.until_good("pressure", 6.5);
    grid.stop();
}

#[test]
fn sign_and_encrypt_works_with_the_named_server_certificate_and_no_other() {
    let dir = Dir::new("secure");
    let port = 14843;
    let identity = identity(&dir.0);
    let (server_cert, server_key) = make_cert(&dir.0, "server");
    let (other_cert, _) = make_cert(&dir.0, "other");
    let args = [
        "--security",
        "sign-and-encrypt",
        "--cert",
        server_cert.to_str().unwrap(),
        "--key",
        server_key.to_str().unwrap(),
        "--trust",
        identity.certificate_path.to_str().unwrap(),
    ];
    let mut server = Server::start(&dir.0, port, &args);
    let credentials = Credentials {
        opcua: Some(identity),
        ..Credentials::default()
    };
    // Trusting another certificate: refused before a session, again and again.
    let mistrusting = secured(tag("elsewhere", port, "Boiler.Pressure"), &other_cert);
    // A relative path is the host directory's.
    let trusting = secured(
        tag("pressure", port, "Boiler.Pressure"),
        Path::new("server-cert.der"),
    );
    let mut grid = Grid::start(&[mistrusting, trusting], credentials);
    grid.until_good("pressure", 0.0);
    server.set("Boiler.Pressure", json!(8.5));
    grid.until_good("pressure", 8.5);
    let reason = grid.until_debt("elsewhere", "the server's certificate");
    assert_eq!(
        reason,
        "the server's certificate is not the one server-certificate names"
    );
    grid.stop();
    assert!(
        grid.readings("elsewhere")
            .iter()
            .all(|q| matches!(q, Quality::Debt { .. })),
        "{:?}",
        grid.readings("elsewhere")
    );
    // Exactly one session: the trusting tag's.
    assert_eq!(server.stats()["sessions"], json!(1));
}

#[test]
fn a_secured_tag_without_the_hosts_certificate_or_its_server_certificate_cannot_start() {
    let dir = Dir::new("check");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (sink, _events) = tokio::sync::mpsc::channel(4);
    let missing = dir.0.join("missing.der");
    let tag = secured(tag("pressure", 14844, "Boiler.Pressure"), &missing);

    let adapters = Adapters::new(
        runtime.handle().clone(),
        sink.clone(),
        "edge-a",
        Credentials::default(),
    );
    let refused = adapters.check(&tag).unwrap_err().to_string();
    assert!(
        refused.contains("needs the host's OPC UA application certificate"),
        "{refused}"
    );

    let credentials = Credentials {
        opcua: Some(identity(&dir.0)),
        ..Credentials::default()
    };
    let adapters = Adapters::new(runtime.handle().clone(), sink, "edge-a", credentials);
    let refused = adapters.check(&tag).unwrap_err().to_string();
    assert!(
        refused.contains(&format!(
            "server-certificate `{}` cannot be read",
            missing.display()
        )),
        "{refused}"
    );
    // security=none needs neither.
    let plain = self::tag("pressure", 14844, "Boiler.Pressure");
    adapters.check(&plain).unwrap();
}
