//! The BACnet/IP adapter against a real device: `adapters/peers/bacnet_device.py`
//! (bacpypes3), one per test on its own UDP port (47810–47829), killed on drop.
//!
//! Every wait is bounded in events and in time; nothing asserts how fast anything is.
//! Without bacpypes3 these tests fail (they never skip): the device is part of the test.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use grid_adapters::bacnet::Objects;
use grid_adapters::{Connection, Event, Quality, Raw, Reading, TagEvent};
use grid_spec::{Origin, Tag, TagSource};
use serde_json::{Value, json};

/// How long the peer may take to answer one control request (or to start).
const PEER_WAIT: Duration = Duration::from_secs(20);
/// How long one wait for adapter events may take before the test fails.
const EVENTS_WAIT: Duration = Duration::from_secs(40);
/// How many events one wait may look through before the test fails.
const EVENTS_BUDGET: usize = 20_000;
/// The tests' poll interval (the fastest a tag may ask for, so that waits are short).
const INTERVAL_MS: u32 = grid_spec::limits::BACNET_INTERVAL_MS_MIN;
/// The device instance of every test's device.
const DEVICE: u32 = 1001;

// ---------------------------------------------------------------------------------
// The device.

struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: std_mpsc::Receiver<String>,
    port: u16,
}

impl Peer {
    /// Starts the device on `port` and waits for its `ready` line.
    fn start(port: u16) -> Peer {
        Peer::start_with(port, &[])
    }

    /// [`Peer::start`] with more arguments.
    fn start_with(port: u16, arguments: &[&str]) -> Peer {
        require_bacpypes3();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/bacnet_device.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--port", &port.to_string(), "--device", &DEVICE.to_string()])
            .args(arguments)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the BACnet peer");
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take().expect("piped stdin");
        let (sender, lines) = std_mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut peer = Peer {
            child,
            stdin,
            lines,
            port,
        };
        let ready = peer.line();
        assert_eq!(ready["ready"], true, "the peer's first line: {ready}");
        assert_eq!(ready["port"], port, "the peer's first line: {ready}");
        peer
    }

    fn line(&mut self) -> Value {
        let line = self.lines.recv_timeout(PEER_WAIT).unwrap_or_else(|error| {
            panic!(
                "the BACnet peer on port {} said nothing within {PEER_WAIT:?} ({error})",
                self.port
            )
        });
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("peer line {line:?}: {e}"))
    }

    /// Sends one control request and returns its (successful) answer.
    fn op(&mut self, request: Value) -> Value {
        writeln!(self.stdin, "{request}").expect("the peer reads its stdin");
        self.stdin.flush().expect("the peer reads its stdin");
        let answer = self.line();
        assert_eq!(answer["ok"], true, "{request} answered {answer}");
        answer
    }

    fn set(&mut self, object: &str, value: f64) {
        self.op(json!({"op": "set", "object": object, "value": value}));
    }

    fn flags(&mut self, object: &str, flag: Option<&str>) {
        let mut request = json!({"op": "flags", "object": object});
        if let Some(flag) = flag {
            request[flag] = json!(true);
        }
        self.op(request);
    }

    fn reliability(&mut self, object: &str, reliability: &str) {
        let answer =
            self.op(json!({"op": "reliability", "object": object, "reliability": reliability}));
        assert_eq!(answer["reliability"], reliability);
    }

    fn stats(&mut self) -> Stats {
        let stats = self.op(json!({"op": "stats"}));
        let count = |field: &str| stats[field].as_u64().expect("a count");
        Stats {
            subscriptions: count("subscriptions"),
            notifications: count("notifications"),
            acks: count("acks"),
            refusals: count("refusals"),
            reads: count("reads"),
            rejected: count("rejected"),
            subscribe_requests: count("subscribe-requests"),
        }
    }
}

/// What the device counted: COV subscriptions active now; confirmed notifications
/// sent, acknowledged (SimpleACK) and unanswered or refused; read requests served.
#[derive(Debug)]
struct Stats {
    subscriptions: u64,
    notifications: u64,
    acks: u64,
    refusals: u64,
    reads: u64,
    /// ReadPropertyMultiple requests rejected (`--without-read-property-multiple`).
    rejected: u64,
    /// SubscribeCOV requests received: subscriptions, renewals, cancellations.
    subscribe_requests: u64,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn require_bacpypes3() {
    let imported = Command::new("python3")
        .args(["-c", "import bacpypes3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(imported, Ok(status) if status.success()) {
        panic!(
            "python3 cannot import bacpypes3 ({imported:?}): these tests run against a \
             real BACnet device; install it with \
             `pip install -r adapters/peers/requirements.txt`"
        );
    }
}

// ---------------------------------------------------------------------------------
// The adapter.

struct Adapter {
    objects: Objects,
    events: tokio::sync::mpsc::Receiver<TagEvent>,
    runtime: tokio::runtime::Runtime,
}

impl Adapter {
    fn new() -> Adapter {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let (sink, events) = tokio::sync::mpsc::channel(1024);
        Adapter {
            objects: Objects::new(runtime.handle().clone(), sink),
            events,
            runtime,
        }
    }

    fn start(&mut self, tag: &Tag, generation: u64) {
        self.objects.start(tag, generation).expect("the tag starts");
    }

    fn next(&mut self, deadline: Instant) -> Option<TagEvent> {
        let left = deadline.saturating_duration_since(Instant::now());
        let events = &mut self.events;
        self.runtime.block_on(async {
            tokio::time::timeout(left, events.recv())
                .await
                .ok()
                .flatten()
        })
    }

    /// The events up to the first that `wanted` accepts (returned last), bounded in
    /// count and time: the test fails, showing the latest events, when none comes.
    fn until(&mut self, what: &str, mut wanted: impl FnMut(&TagEvent) -> bool) -> Vec<TagEvent> {
        let deadline = Instant::now() + EVENTS_WAIT;
        let mut seen = Vec::new();
        while seen.len() < EVENTS_BUDGET {
            let Some(event) = self.next(deadline) else {
                break;
            };
            let done = wanted(&event);
            seen.push(event);
            if done {
                return seen;
            }
        }
        let latest = &seen[seen.len().saturating_sub(12)..];
        panic!(
            "waited for {what}: not among {} events within {EVENTS_WAIT:?}; the latest: \
             {latest:#?}",
            seen.len()
        );
    }

    /// Events until `tag` reads good `value`.
    fn good(&mut self, tag: &str, value: f64) -> Vec<TagEvent> {
        self.until(&format!("{tag} good {value}"), |event| {
            event.tag == tag && good(event) == Some(value)
        })
    }

    /// Events until `tag` is debt for `reason`.
    fn debt(&mut self, tag: &str, reason: &str) -> Vec<TagEvent> {
        self.until(&format!("{tag} debt {reason:?}"), |event| {
            event.tag == tag && debt(event) == Some(reason)
        })
    }

    /// Releases `tag` and waits for the device's answer.
    fn release(&mut self, tag: &str) -> Result<String, String> {
        let released = self
            .objects
            .release(tag)
            .expect("a COV tag holds a subscription to release");
        self.runtime.block_on(async {
            tokio::time::timeout(EVENTS_WAIT, released)
                .await
                .expect("the release is answered")
                .expect("the task answers before it ends")
        })
    }
}

/// Checks `condition` every 100 ms, at most 300 times, and fails the test if it never
/// holds.
fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..300 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("waited for {what} for 300 checks 100 ms apart: never");
}

fn reading(event: &TagEvent) -> Option<&Reading> {
    match &event.event {
        Event::Reading(reading) => Some(reading),
        Event::Connection(_) | Event::Completion(_) => None,
    }
}

fn good(event: &TagEvent) -> Option<f64> {
    match reading(event)?.quality {
        Quality::Good { value } => Some(value),
        _ => None,
    }
}

fn debt(event: &TagEvent) -> Option<&str> {
    match &reading(event)?.quality {
        Quality::Debt { reason } => Some(reason),
        _ => None,
    }
}

fn connection(event: &TagEvent) -> Option<&Connection> {
    match &event.event {
        Event::Connection(connection) => Some(connection),
        Event::Reading(_) | Event::Completion(_) => None,
    }
}

// ---------------------------------------------------------------------------------
// Tags.

fn tag(name: &str, port: u16, object: &str, cov: Option<u32>) -> Tag {
    Tag {
        name: name.to_owned(),
        host: "edge-a".to_owned(),
        source: TagSource::Bacnet {
            address: format!("127.0.0.1:{port}"),
            device: DEVICE,
            object: object.to_owned(),
            property: "present-value".to_owned(),
            cov: cov.is_some(),
            lifetime_s: cov,
            interval_ms: INTERVAL_MS,
        },
        retired: false,
        origin: Origin {
            source: 0,
            offset: 0,
            length: 0,
        },
    }
}

// ---------------------------------------------------------------------------------
// The tests.

#[test]
fn polled_values_flow_and_status_flags_and_reliability_are_debt_then_good_again() {
    const PORT: u16 = 47810;
    let mut peer = Peer::start(PORT);
    let mut adapter = Adapter::new();
    adapter.start(&tag("zone-temp", PORT, "analog-input:1", None), 1);
    adapter.start(&tag("occupied", PORT, "binary-input:1", None), 1);

    let seen = adapter.good("zone-temp", 0.0);
    assert!(
        seen.iter()
            .any(|e| e.tag == "zone-temp" && connection(e).is_some_and(|c| c.state == "connected")),
        "{seen:#?}"
    );
    peer.set("analog-input:1", 21.5);
    let seen = adapter.good("zone-temp", 21.5);
    let last = reading(seen.last().unwrap()).unwrap();
    assert_eq!(last.raw, Raw::Float(21.5));

    // The fault flag comes with the reliability that explains it (the device derives
    // its status flags): the reliability names the debt.
    peer.flags("analog-input:1", Some("fault"));
    adapter.debt("zone-temp", "reliability: unreliable-other");
    peer.reliability("analog-input:1", "over-range");
    adapter.debt("zone-temp", "reliability: over-range");
    peer.reliability("analog-input:1", "no-fault-detected");
    adapter.good("zone-temp", 21.5);
    peer.flags("analog-input:1", Some("in-alarm"));
    adapter.debt("zone-temp", "in-alarm");
    peer.flags("analog-input:1", Some("out-of-service"));
    adapter.debt("zone-temp", "out-of-service");
    peer.flags("analog-input:1", None);
    adapter.good("zone-temp", 21.5);

    // A REAL that is not a number is debt (the peer takes "nan", "-inf" as text).
    for (text, reason) in [("nan", "not finite: NaN"), ("-inf", "not finite: -inf")] {
        peer.op(json!({"op": "set", "object": "analog-input:1", "value": text}));
        adapter.debt("zone-temp", reason);
    }
    peer.set("analog-input:1", 21.5);
    adapter.good("zone-temp", 21.5);

    // Binary objects: active 1, inactive 0.
    peer.set("binary-input:1", 1.0);
    let seen = adapter.good("occupied", 1.0);
    assert_eq!(reading(seen.last().unwrap()).unwrap().raw, Raw::Bool(true));
    peer.set("binary-input:1", 0.0);
    adapter.good("occupied", 0.0);

    // An object the device does not have: its Error PDU, by name, reported once (not
    // once per poll) while it lasts.
    adapter.start(&tag("missing", PORT, "analog-input:99", None), 1);
    adapter.debt("missing", "error: object / unknown-object");
    let mut goods = 0;
    let seen = adapter.until("ten more polls of zone-temp", |event| {
        goods += usize::from(event.tag == "zone-temp" && good(event).is_some());
        goods == 10
    });
    assert!(!seen.iter().any(|e| e.tag == "missing"), "{seen:#?}");
    let stats = peer.stats();
    assert!(stats.reads > 0, "{stats:?}");
    assert_eq!(
        stats.subscriptions, 0,
        "polling subscribes to nothing: {stats:?}"
    );
}

#[test]
fn cov_values_flow_and_every_notification_is_acknowledged() {
    const PORT: u16 = 47811;
    let mut peer = Peer::start(PORT);
    let mut adapter = Adapter::new();
    adapter.start(&tag("zone-temp", PORT, "analog-input:2", Some(60)), 1);

    // The device notifies once on subscribing: the value as it is.
    adapter.good("zone-temp", 0.0);
    eventually("one subscription at the device", || {
        peer.stats().subscriptions == 1
    });
    peer.set("analog-input:2", 3.5);
    adapter.good("zone-temp", 3.5);
    peer.set("analog-input:2", -7.25);
    adapter.good("zone-temp", -7.25);
    // The notification carries the fault flag; the reliability read beside it names it.
    peer.reliability("analog-input:2", "open-loop");
    adapter.debt("zone-temp", "reliability: open-loop");
    peer.flags("analog-input:2", Some("in-alarm"));
    adapter.debt("zone-temp", "in-alarm");
    peer.flags("analog-input:2", None);
    adapter.good("zone-temp", -7.25);

    eventually("every notification acknowledged", || {
        let stats = peer.stats();
        stats.notifications >= 6 && stats.acks == stats.notifications
    });
    let stats = peer.stats();
    assert_eq!(stats.refusals, 0, "{stats:?}");
    assert_eq!(
        stats.reads, 1,
        "a COV tag does not poll; it read the reliability once, for the fault: {stats:?}"
    );
}

#[test]
fn release_cancels_the_subscription_and_stop_leaves_it_to_expire() {
    const PORT: u16 = 47812;
    let mut peer = Peer::start(PORT);
    let mut adapter = Adapter::new();
    adapter.start(&tag("retired", PORT, "analog-input:1", Some(300)), 1);
    adapter.start(&tag("removed", PORT, "analog-input:2", Some(300)), 1);
    adapter.good("retired", 0.0);
    adapter.good("removed", 0.0);
    eventually("two subscriptions at the device", || {
        peer.stats().subscriptions == 2
    });

    assert_eq!(
        adapter.release("retired"),
        Ok("COV subscription cancelled".to_owned())
    );
    let stats = peer.stats();
    assert_eq!(stats.subscriptions, 1, "{stats:?}");

    // A polled tag holds nothing to release.
    adapter.start(&tag("polled", PORT, "analog-input:3", None), 1);
    adapter.good("polled", 0.0);
    assert!(adapter.objects.release("polled").is_none());

    adapter.objects.stop("removed");
    let before = peer.stats();
    // A change is still notified to the stopped tag's subscription, which nobody
    // acknowledges now; the subscription stays until its lifetime ends.
    peer.set("analog-input:2", 9.0);
    eventually("the notification to the stopped tag sent", || {
        peer.stats().notifications > before.notifications
    });
    let stats = peer.stats();
    assert_eq!(stats.subscriptions, 1, "{stats:?}");
    // Nothing is reported for a stopped or released tag.
    for event in std::iter::from_fn(|| adapter.events.try_recv().ok()) {
        assert!(
            event.tag != "removed" && event.tag != "retired",
            "{event:?}"
        );
    }
}

#[test]
fn a_killed_device_is_timeout_debt_then_good_once_it_is_back() {
    const PORT: u16 = 47813;
    let mut peer = Peer::start(PORT);
    let mut adapter = Adapter::new();
    adapter.start(&tag("zone-temp", PORT, "analog-input:1", None), 1);
    peer.set("analog-input:1", 4.0);
    adapter.good("zone-temp", 4.0);

    drop(peer);
    let seen = adapter.debt("zone-temp", "timeout");
    assert!(
        seen.iter().any(|e| connection(e)
            .is_some_and(|c| c.state == "offline" && c.detail.as_deref() == Some("timeout"))),
        "{seen:#?}"
    );

    let mut peer = Peer::start(PORT);
    peer.set("analog-input:1", 5.0);
    let seen = adapter.good("zone-temp", 5.0);
    assert!(
        seen.iter()
            .any(|e| connection(e).is_some_and(|c| c.state == "connected")),
        "{seen:#?}"
    );
}

#[test]
fn a_device_without_read_property_multiple_is_read_property_by_property() {
    const PORT: u16 = 47814;
    let mut peer = Peer::start_with(PORT, &["--without-read-property-multiple"]);
    let mut adapter = Adapter::new();
    adapter.start(&tag("zone-temp", PORT, "analog-input:1", None), 1);
    peer.set("analog-input:1", 2.5);
    adapter.good("zone-temp", 2.5);
    peer.reliability("analog-input:1", "under-range");
    adapter.debt("zone-temp", "reliability: under-range");
    peer.reliability("analog-input:1", "no-fault-detected");
    adapter.good("zone-temp", 2.5);
    let stats = peer.stats();
    // Asked once, rejected once: ReadProperty (three per poll) from then on.
    assert_eq!(stats.rejected, 1, "{stats:?}");
    assert!(stats.reads >= 9, "{stats:?}");
}

#[test]
fn a_release_the_device_does_not_answer_says_why() {
    const PORT: u16 = 47815;
    let mut peer = Peer::start(PORT);
    let mut adapter = Adapter::new();
    adapter.start(&tag("zone-temp", PORT, "analog-input:1", Some(60)), 1);
    peer.set("analog-input:1", 6.0);
    adapter.good("zone-temp", 6.0);
    drop(peer);
    // The subscription then lapses at the device by its lifetime.
    assert_eq!(adapter.release("zone-temp"), Err("timeout".to_owned()));
}

#[test]
fn a_cov_subscription_is_renewed_before_its_lifetime_ends_and_again_at_a_restarted_device() {
    const PORT: u16 = 47816;
    let lifetime_s = grid_spec::limits::BACNET_COV_LIFETIME_S_MIN;
    let mut peer = Peer::start(PORT);
    let mut adapter = Adapter::new();
    adapter.start(
        &tag("zone-temp", PORT, "analog-input:1", Some(lifetime_s)),
        1,
    );
    adapter.good("zone-temp", 0.0);
    // Renewed at half its lifetime: the same subscription, never lapsed.
    eventually("two renewals", || {
        let stats = peer.stats();
        assert_eq!(stats.subscriptions, 1, "{stats:?}");
        stats.subscribe_requests >= 3
    });
    peer.set("analog-input:1", 1.5);
    adapter.good("zone-temp", 1.5);

    // A restarted device has forgotten the subscription: the next renewal subscribes
    // again (a dead device in between is `subscription: timeout` debt).
    drop(peer);
    adapter.debt("zone-temp", "subscription: timeout");
    let mut peer = Peer::start(PORT);
    peer.set("analog-input:1", 2.5);
    let seen = adapter.good("zone-temp", 2.5);
    assert!(
        seen.iter()
            .any(|e| connection(e).is_some_and(|c| c.state == "connected")),
        "{seen:#?}"
    );
    assert_eq!(peer.stats().subscriptions, 1);
}
