//! The harness's protocol peers against the real `mosquitto` (Debian's package; `.ci/run`
//! installs it): a started broker serves MQTT on its loopback port, a stopped or killed
//! one frees the port, a port in use is refused before anything starts, and dropping
//! the owner kills what still runs. A stand-in Python peer (`tests/data/fake_device.py`)
//! answers control requests, and its exit on its own is told once. The brokers' ports
//! are found free, odd and outside the kernel's ephemeral range where it leaves room
//! (see [`unephemeral_port`]): a fixed one, or one released an instant before the
//! broker binds it, can become another connection's local port on a machine whose
//! range is wide, which failed CI with "in use" three times. The Python peer's port is
//! found the same way.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use grid_journeys::PEER_ANSWER_TIMEOUT;
use grid_journeys::peers::{PeerSpec, Peers, find_mosquitto};
use serde_json::json;

/// A fresh directory with `logs/`, removed on drop.
struct Work(PathBuf);

impl Work {
    fn new(name: &str) -> Work {
        let dir =
            std::env::temp_dir().join(format!("grid-journeys-peers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        Work(dir)
    }

    fn peers(&self) -> Peers {
        assert!(
            find_mosquitto().is_some(),
            "these tests need mosquitto (apt-get install mosquitto; .ci/run installs it)"
        );
        Peers::new(&self.0, &self.0.join("logs"), self.0.clone())
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.0.join("logs").join(name)).unwrap_or_default()
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An MQTT 3.1.1 CONNECT (clean session, client id "t") answered by CONNACK "accepted":
/// the peer on `port` is a broker speaking MQTT, not merely an open port.
fn mqtt_connack(port: u16) -> [u8; 4] {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the broker accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let connect = [
        0x10, 13, 0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 60, 0, 1, b't',
    ];
    stream.write_all(&connect).unwrap();
    let mut connack = [0u8; 4];
    stream.read_exact(&mut connack).expect("a CONNACK");
    connack
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The kernel's range of local ports for outgoing connections
/// (`/proc/sys/net/ipv4/ip_local_port_range`; Linux's default when unreadable).
fn ephemeral_range() -> (usize, usize) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(str::parse::<usize>);
            Some((parts.next()?.ok()?, parts.next()?.ok()?))
        })
        .unwrap_or((32_768, 60_999))
}

/// A free loopback port, held by the returned listener. Between its release and a
/// peer's start another socket's outgoing connection (the other tests here connect to
/// their brokers) could be handed it, which failed CI three times. So: a port outside
/// the kernel's ephemeral range where the range leaves room (a CI machine's may be
/// wide), and an odd one — Linux hands even ports to `connect()` first. A test that
/// still loses its port to a stranger starts again on another ([`STARTS`]).
fn unephemeral_port() -> (TcpListener, u16) {
    // Each call starts elsewhere: tests of this binary run at once, in one process.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let seed = std::process::id() as usize * 7 + call * 1_009;
    let (low, high) = ephemeral_range();
    let (from, span) = if low >= 12_000 {
        (10_000, low - 10_000)
    } else if high <= 55_000 {
        (high + 1, 65_000 - high)
    } else {
        (20_000, 12_000)
    };
    (0..500)
        .map(|i| (from + (seed + i * 101) % span) | 1)
        .find_map(|port| {
            let port = u16::try_from(port).ok()?;
            TcpListener::bind(("127.0.0.1", port))
                .ok()
                .map(|l| (l, port))
        })
        .expect("a free loopback port")
}

/// How many times a test starts over on a fresh port after a stranger took its port
/// in the instant between the test's release and the peer's start.
const STARTS: usize = 5;

/// Whether a failed start of peer `name` is its port taken by someone else (the test's
/// cue to start over on another port), not a fault of the harness.
fn port_taken_from(failure: &grid_journeys::Failure, name: &str, port: u16) -> bool {
    failure
        .expected
        .ends_with(&format!("free for peer `{name}`"))
        && failure.expected.contains(&format!(":{port} "))
        && failure.observed.starts_with("it is in use")
}

/// Starts peer `broker` (mosquitto) on a free port — `first`'s, released here, if
/// given — and returns its port and the start's lines (see [`start_on_free_port`]).
fn start_broker(peers: &mut Peers, first: Option<(TcpListener, u16)>) -> (u16, Vec<String>) {
    start_on_free_port(peers, "broker", first, |port| PeerSpec::Mosquitto { port })
}

/// Starts peer `name` as `spec_of` its port says, on a free port — `first`'s, released
/// here, if given — and returns its port and the start's lines. On a port a stranger
/// took in between it starts over on another, at most [`STARTS`] times.
fn start_on_free_port(
    peers: &mut Peers,
    name: &str,
    first: Option<(TcpListener, u16)>,
    spec_of: impl Fn(u16) -> PeerSpec,
) -> (u16, Vec<String>) {
    let mut first = first;
    for start in 1..=STARTS {
        let (held, port) = first.take().unwrap_or_else(unephemeral_port);
        drop(held);
        match peers.start(name, &spec_of(port)) {
            Ok(said) => return (port, said),
            Err(failure) if port_taken_from(&failure, name, port) && start < STARTS => {
                eprintln!("{failure}: starting over on another port");
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    unreachable!("the last start returns or panics")
}

#[test]
fn a_mosquitto_peer_serves_mqtt_until_it_is_stopped_and_then_frees_its_port() {
    let work = Work::new("serve");
    let mut peers = work.peers();
    let (port, said) = start_broker(&mut peers, None);
    assert!(
        said[0].starts_with("$ ") && said[0].contains(" -c "),
        "{said:?}"
    );
    assert!(
        said[1].contains(&format!("127.0.0.1:{port} accepts connections")),
        "{said:?}"
    );
    let config = std::fs::read_to_string(work.0.join("peers/broker-1.conf")).unwrap();
    assert!(
        config.contains(&format!("listener {port} 127.0.0.1")),
        "{config}"
    );

    assert_eq!(mqtt_connack(port), [0x20, 2, 0, 0], "CONNACK, accepted");
    assert!(peers.running("broker"));

    let stopped = peers.stop("broker").unwrap_or_else(|f| panic!("{f}"));
    assert!(
        stopped.contains("stopped (exit 0)") && stopped.ends_with("ms after SIGTERM"),
        "{stopped}"
    );
    assert!(!peers.running("broker"));
    assert!(
        port_is_free(port),
        "port {port} is free again after the stop"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing accepts on {port}"
    );
    assert!(
        work.log("peer-broker-1.log").contains("mosquitto version"),
        "the broker's output is in its log"
    );
    assert!(
        peers.exited_by_themselves().is_empty(),
        "a stopped peer did not exit by itself"
    );
}

#[test]
fn a_port_in_use_is_refused_and_a_killed_peer_restarts_on_the_same_port() {
    let work = Work::new("restart");
    let (occupied, port) = unephemeral_port();
    let mut peers = work.peers();
    let spec = PeerSpec::Mosquitto { port };

    let refused = peers.start("broker", &spec).unwrap_err();
    assert_eq!(
        refused.expected,
        format!("127.0.0.1:{port} free for peer `broker`")
    );
    assert!(refused.observed.starts_with("it is in use"), "{refused}");
    assert!(!peers.running("broker"), "nothing was started");

    // Released, the port serves the broker; killed, the broker restarts on it.
    let (mut port, _) = start_broker(&mut peers, Some((occupied, port)));
    let mut started = 1;
    let said = loop {
        let killed = peers.kill("broker").unwrap_or_else(|f| panic!("{f}"));
        assert!(killed.contains("SIGKILL"), "{killed}");
        assert!(port_is_free(port), "a killed broker frees its port");
        match peers.restart("broker") {
            Ok(said) => break said,
            Err(failure) if port_taken_from(&failure, "broker", port) && started < STARTS => {
                eprintln!("{failure}: starting over on another port");
                port = start_broker(&mut peers, None).0;
                started += 1;
            }
            Err(failure) => panic!("{failure}"),
        }
    };
    started += 1;
    assert_eq!(
        said.len(),
        2,
        "not running: started without a stop first: {said:?}"
    );
    assert_eq!(peers.spec("broker"), Some(&PeerSpec::Mosquitto { port }));
    assert!(
        Path::new(&work.0.join(format!("logs/peer-broker-{started}.log"))).is_file(),
        "each start has its own log"
    );
    assert_eq!(mqtt_connack(port), [0x20, 2, 0, 0]);

    // Running: restart stops it first (SIGTERM), then starts it again.
    let said = peers.restart("broker").unwrap_or_else(|f| panic!("{f}"));
    assert!(said[0].contains("ms after SIGTERM"), "{said:?}");
    assert_eq!(mqtt_connack(port), [0x20, 2, 0, 0]);

    drop(peers);
    assert!(port_is_free(port), "dropping the owner killed the broker");
}

#[test]
fn a_python_peer_answers_each_request_and_its_own_exit_is_told_once() {
    let work = Work::new("python");
    let scripts = work.0.join("adapters/peers");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fake_device.py"),
        scripts.join("modbus_device.py"),
    )
    .unwrap();
    let mut peers = Peers::new(&work.0, &work.0.join("logs"), work.0.clone());
    let (port, said) = start_on_free_port(&mut peers, "dev", None, |port| PeerSpec::Modbus {
        port,
        units: None,
    });
    assert_eq!(
        said[1],
        "(peer dev printed before it was ready: not JSON, said before it is ready)"
    );
    assert!(
        said[2].contains(&format!(r#"{{"ready": true, "port": {port}}}"#)),
        "{said:?}"
    );

    let ask = |peers: &mut Peers, request| peers.ask("dev", &request, PEER_ANSWER_TIMEOUT);
    let (answer, noted) = ask(&mut peers, json!({"op": "set", "values": [1]})).unwrap();
    assert_eq!(answer["echo"], json!({"op": "set", "values": [1]}));
    assert!(noted.is_empty(), "{noted:?}");
    let (answer, _) = ask(&mut peers, json!({"op": "stats"})).unwrap();
    assert_eq!(answer, json!({"ok": true, "sets": 1, "units": null}));

    let (answer, _) = ask(&mut peers, json!({"op": "exit"})).unwrap();
    assert_eq!(answer, json!({"ok": true}));
    let deadline = Instant::now() + Duration::from_secs(10);
    while peers.running("dev") {
        assert!(
            Instant::now() < deadline,
            "the peer exits after answering `exit`"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let told = peers.exited_by_themselves();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].starts_with("peer dev exited by itself (exit 3)")
            && told[0].contains("fake device serving"),
        "{told:?}"
    );
    assert!(peers.exited_by_themselves().is_empty(), "told once");
    let gone = ask(&mut peers, json!({"op": "stats"})).unwrap_err();
    assert_eq!(gone.observed, "it has exited (exit 3)");
    assert!(port_is_free(18896));
}
