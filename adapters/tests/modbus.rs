//! The Modbus TCP adapter against a real device: `adapters/peers/modbus_device.py`
//! (pymodbus), one per test on its own port (15020–15039), killed on drop.
//!
//! Every wait is bounded in events and in time; nothing asserts how fast anything is.
//! Without pymodbus these tests fail (they never skip): the device is part of the test.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use grid_adapters::modbus::Devices;
use grid_adapters::{Connection, Event, Quality, Raw, Reading, TagEvent};
use grid_spec::{ModbusRegister, ModbusType, Origin, Tag, TagSource, WordOrder};
use serde_json::{Value, json};

use ModbusRegister::{Coil, Discrete, Holding, Input};
use ModbusType::{Bool, F32, I16, I32, U16, U32};

/// How long the peer may take to answer one control request (or to start).
const PEER_WAIT: Duration = Duration::from_secs(20);
/// How long one wait for adapter events may take before the test fails.
const EVENTS_WAIT: Duration = Duration::from_secs(40);
/// How many events one wait may look through before the test fails.
const EVENTS_BUDGET: usize = 20_000;
/// The tests' poll interval (fast, so that waits are short).
const INTERVAL_MS: u32 = 50;

// ---------------------------------------------------------------------------------
// The device.

struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: std_mpsc::Receiver<String>,
    port: u16,
}

impl Peer {
    /// Starts the device on `port` (units 1 and 2) and waits for its `ready` line.
    fn start(port: u16) -> Peer {
        require_pymodbus();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/peers/modbus_device.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--port", &port.to_string(), "--units", "1,2"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the Modbus peer");
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
                "the Modbus peer on port {} said nothing within {PEER_WAIT:?} ({error})",
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

    fn set(&mut self, register: &str, address: u16, values: &[u16]) {
        self.op(
            json!({"op": "set", "unit": 1, "register": register, "address": address,
                       "values": values}),
        );
    }

    fn stats(&mut self) -> Stats {
        let stats = self.op(json!({"op": "stats"}));
        let count = |field: &str| stats[field].as_u64().expect("a count");
        Stats {
            reads: count("reads"),
            connections: count("connections"),
            open: count("open"),
        }
    }
}

/// What the device counted: read requests and connections so far, connections open.
struct Stats {
    reads: u64,
    connections: u64,
    open: u64,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn require_pymodbus() {
    let imported = Command::new("python3")
        .args(["-c", "import pymodbus"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(imported, Ok(status) if status.success()) {
        panic!(
            "python3 cannot import pymodbus ({imported:?}): these tests run against a \
             real Modbus device; install it with \
             `pip install -r adapters/peers/requirements.txt`"
        );
    }
}

// ---------------------------------------------------------------------------------
// The adapter.

struct Adapter {
    devices: Devices,
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
            devices: Devices::new(runtime.handle().clone(), sink),
            events,
            runtime,
        }
    }

    fn start(&mut self, tag: &Tag, generation: u64) {
        self.devices.start(tag, generation).expect("the tag starts");
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

    /// The events already sent, without waiting.
    fn pending(&mut self) -> Vec<TagEvent> {
        std::iter::from_fn(|| self.events.try_recv().ok()).collect()
    }

    /// Events until `tag` has had `count` good readings, at most `EVENTS_BUDGET`.
    fn goods(&mut self, tag: &str, count: usize) -> Vec<TagEvent> {
        let mut goods = 0;
        self.until(&format!("{count} good readings of {tag}"), |event| {
            goods += usize::from(event.tag == tag && good(event).is_some());
            goods == count
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

/// A Modbus tag's parameters, unit 1, big word order, unscaled, polled every 50 ms.
#[derive(Clone, Copy)]
struct Def {
    unit: u8,
    register: ModbusRegister,
    address: u16,
    value_type: ModbusType,
    word_order: WordOrder,
    scale: f64,
    offset: f64,
}

fn def(register: ModbusRegister, address: u16, value_type: ModbusType) -> Def {
    Def {
        unit: 1,
        register,
        address,
        value_type,
        word_order: WordOrder::Big,
        scale: 1.0,
        offset: 0.0,
    }
}

impl Def {
    fn tag(self, name: &str, port: u16) -> Tag {
        Tag {
            name: name.to_owned(),
            host: "edge-a".to_owned(),
            source: TagSource::Modbus {
                address: format!("127.0.0.1:{port}"),
                unit: self.unit,
                register: self.register,
                register_address: self.address,
                value_type: self.value_type,
                word_order: self.word_order,
                scale: self.scale,
                offset: self.offset,
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
}

fn words32(value: u32, order: WordOrder) -> Vec<u16> {
    let (high, low) = ((value >> 16) as u16, value as u16);
    match order {
        WordOrder::Big => vec![high, low],
        WordOrder::Little => vec![low, high],
    }
}

fn good_reading(raw: Raw, value: f64) -> (Raw, Quality) {
    (raw, Quality::Good { value })
}

// ---------------------------------------------------------------------------------
// The tests.

#[test]
fn values_flow_for_every_type_and_both_word_orders_with_scale_and_offset() {
    const PORT: u16 = 15020;
    let mut peer = Peer::start(PORT);
    let little = WordOrder::Little;
    peer.set("holding", 100, &[215, (-10i16) as u16]);
    peer.op(
        json!({"op": "set-u32", "unit": 1, "register": "holding", "address": 102,
                   "value": 70000, "word-order": "big"}),
    );
    peer.op(
        json!({"op": "set-u32", "unit": 1, "register": "holding", "address": 104,
                   "value": 70000, "word-order": "little"}),
    );
    peer.op(
        json!({"op": "set-i32", "unit": 1, "register": "input", "address": 10,
                   "value": -123456, "word-order": "big"}),
    );
    peer.op(
        json!({"op": "set-i32", "unit": 1, "register": "input", "address": 12,
                   "value": -123456, "word-order": "little"}),
    );
    peer.op(
        json!({"op": "set-f32", "unit": 1, "register": "holding", "address": 110,
                   "value": 21.5, "word-order": "big"}),
    );
    peer.op(
        json!({"op": "set-f32", "unit": 1, "register": "holding", "address": 112,
                   "value": -3.25, "word-order": "little"}),
    );
    peer.op(json!({"op": "set", "unit": 1, "register": "coil", "address": 7, "value": 1}));
    peer.op(
        json!({"op": "set", "unit": 2, "register": "discrete", "address": 9,
                   "values": [0]}),
    );
    // A quiet NaN, high word first.
    peer.set("holding", 120, &[0x7fc0, 0]);

    let i32_bits = (-123456i32) as u32;
    let cases: Vec<(&str, Def, (Raw, Quality))> = vec![
        (
            "u16",
            Def {
                scale: 0.1,
                ..def(Holding, 100, U16)
            },
            good_reading(Raw::Registers(vec![215]), 215.0 * 0.1),
        ),
        (
            "i16",
            Def {
                offset: 5.0,
                ..def(Holding, 101, I16)
            },
            good_reading(Raw::Registers(vec![(-10i16) as u16]), -5.0),
        ),
        (
            "u32-big",
            Def {
                scale: 2.0,
                ..def(Holding, 102, U32)
            },
            good_reading(Raw::Registers(words32(70000, WordOrder::Big)), 140000.0),
        ),
        (
            "u32-little",
            Def {
                word_order: little,
                ..def(Holding, 104, U32)
            },
            good_reading(Raw::Registers(words32(70000, little)), 70000.0),
        ),
        (
            "i32-big",
            Def {
                scale: 0.5,
                ..def(Input, 10, I32)
            },
            good_reading(Raw::Registers(words32(i32_bits, WordOrder::Big)), -61728.0),
        ),
        (
            "i32-little",
            Def {
                word_order: little,
                offset: 0.5,
                ..def(Input, 12, I32)
            },
            good_reading(Raw::Registers(words32(i32_bits, little)), -123455.5),
        ),
        (
            "f32-big",
            Def {
                offset: 1.0,
                ..def(Holding, 110, F32)
            },
            good_reading(
                Raw::Registers(words32(21.5f32.to_bits(), WordOrder::Big)),
                22.5,
            ),
        ),
        (
            "f32-little",
            Def {
                word_order: little,
                scale: 2.0,
                ..def(Holding, 112, F32)
            },
            good_reading(Raw::Registers(words32((-3.25f32).to_bits(), little)), -6.5),
        ),
        (
            "coil",
            Def {
                scale: 2.0,
                offset: 1.0,
                ..def(Coil, 7, Bool)
            },
            good_reading(Raw::Bool(true), 3.0),
        ),
        (
            "discrete-unit-2",
            Def {
                unit: 2,
                offset: 0.5,
                ..def(Discrete, 9, Bool)
            },
            good_reading(Raw::Bool(false), 0.5),
        ),
        (
            "nan",
            def(Holding, 120, F32),
            (
                Raw::Registers(vec![0x7fc0, 0]),
                Quality::Debt {
                    reason: "not finite: NaN".to_owned(),
                },
            ),
        ),
        (
            "refused",
            def(Coil, 3, U16),
            (
                Raw::None,
                Quality::Refused {
                    reason: "a coil holds a bit, not u16".to_owned(),
                },
            ),
        ),
    ];

    let mut adapter = Adapter::new();
    for (name, def, _) in &cases {
        adapter.start(&def.tag(name, PORT), 1);
    }
    let mut first: BTreeMap<String, Reading> = BTreeMap::new();
    let events = adapter.until("a first reading of every tag", |event| {
        if let Some(reading) = reading(event) {
            first
                .entry(event.tag.clone())
                .or_insert_with(|| reading.clone());
        }
        first.len() == cases.len()
    });
    for (name, _, (raw, quality)) in &cases {
        let reading = &first[*name];
        assert_eq!(
            (&reading.raw, &reading.quality),
            (raw, quality),
            "tag {name}"
        );
        assert_eq!(reading.device_time_ms, None, "Modbus has no device time");
        assert!(reading.received_ms > 0);
    }
    // The first tag saw the connection open before its first reading.
    let states: Vec<&str> = events
        .iter()
        .filter(|e| e.tag == "u16")
        .filter_map(|e| connection(e).map(|c| c.state.as_str()))
        .collect();
    assert_eq!(states, ["connecting", "connected"]);
    assert!(events.iter().all(|e| e.generation == 1));
}

#[test]
fn due_tags_at_contiguous_or_overlapping_addresses_share_reads() {
    const PORT: u16 = 15021;
    let mut peer = Peer::start(PORT);
    peer.set("holding", 0, &(1..=12).collect::<Vec<u16>>());
    let mut adapter = Adapter::new();
    let mut tags: Vec<String> = Vec::new();
    for address in 0..10 {
        let name = format!("h{address}");
        adapter.start(&def(Holding, address, U16).tag(&name, PORT), 1);
        tags.push(name);
    }
    // An f32 at 10..=11 and an i16 overlapping its second register.
    adapter.start(&def(Holding, 10, F32).tag("f32", PORT), 1);
    adapter.start(&def(Holding, 11, I16).tag("i16", PORT), 1);
    tags.extend(["f32".to_owned(), "i16".to_owned()]);

    const POLLS: usize = 8;
    let mut readings: BTreeMap<String, usize> = BTreeMap::new();
    adapter.until("every tag read 8 times", |event| {
        if let Some(reading) = reading(event) {
            assert!(matches!(reading.quality, Quality::Good { .. }), "{event:?}");
            *readings.entry(event.tag.clone()).or_default() += 1;
        }
        readings.len() == tags.len() && readings.values().all(|&n| n >= POLLS)
    });
    for tag in &tags {
        adapter.devices.stop(tag);
    }
    let reads = peer.stats().reads;
    let polls = *readings.values().min().expect("readings");
    assert!(
        reads < (tags.len() * polls) as u64,
        "{reads} reads for {} tags polled {polls} times each",
        tags.len()
    );
}

#[test]
fn an_exception_is_debt_named_once_then_good_after_heal() {
    const PORT: u16 = 15022;
    let mut peer = Peer::start(PORT);
    peer.set("holding", 0, &[1, 2, 3]);
    let mut adapter = Adapter::new();
    for (name, address) in [("a", 0), ("b", 1), ("c", 2)] {
        adapter.start(&def(Holding, address, U16).tag(name, PORT), 1);
    }
    adapter.goods("b", 1);

    peer.op(
        json!({"op": "fail", "unit": 1, "register": "holding", "address": 1,
                   "exception": "illegal-address"}),
    );
    adapter.until("b's exception", |e| e.tag == "b" && debt(e).is_some());
    // The coalesced read failed; its tags were read alone, so a and c stay good while
    // b's debt is not reported again.
    let window = adapter.goods("a", 5);
    let b_readings: Vec<&Reading> = window
        .iter()
        .filter(|e| e.tag == "b")
        .filter_map(reading)
        .collect();
    assert!(b_readings.is_empty(), "b reported again: {b_readings:?}");
    assert!(window.iter().any(|e| e.tag == "c" && good(e) == Some(3.0)));

    peer.op(json!({"op": "heal"}));
    let healed = adapter.until("b good again", |e| e.tag == "b" && reading(e).is_some());
    assert_eq!(good(healed.last().expect("an event")), Some(2.0));

    peer.op(
        json!({"op": "fail", "unit": 1, "register": "holding", "address": 2,
                   "exception": "device-failure"}),
    );
    let failed = adapter.until("c's exception", |e| e.tag == "c" && debt(e).is_some());
    assert_eq!(
        debt(failed.last().expect("an event")),
        Some("exception: server device failure")
    );
}

#[test]
fn the_first_exception_names_illegal_data_address() {
    const PORT: u16 = 15026;
    let mut peer = Peer::start(PORT);
    peer.op(
        json!({"op": "fail", "unit": 1, "register": "input", "address": 5,
                   "exception": "illegal-address"}),
    );
    let mut adapter = Adapter::new();
    adapter.start(&def(Input, 5, U16).tag("x", PORT), 1);
    let events = adapter.until("x's first reading", |e| reading(e).is_some());
    let reading = reading(events.last().expect("an event")).expect("a reading");
    assert_eq!(reading.raw, Raw::None);
    assert_eq!(
        reading.quality,
        Quality::Debt {
            reason: "exception: illegal data address".to_owned()
        }
    );
}

#[test]
fn a_silent_device_is_timeout_debt_and_the_connection_is_reopened() {
    const PORT: u16 = 15023;
    let mut peer = Peer::start(PORT);
    peer.set("holding", 0, &[7]);
    let mut adapter = Adapter::new();
    adapter.start(&def(Holding, 0, U16).tag("t", PORT), 1);
    adapter.goods("t", 1);
    let connections_before = peer.stats().connections;

    peer.op(json!({"op": "silence", "unit": 1}));
    let events = adapter.until("timeout debt", |e| reading(e).is_some());
    assert_eq!(debt(events.last().expect("an event")), Some("timeout"));
    assert!(events.iter().any(|e| {
        connection(e)
            .is_some_and(|c| c.state == "offline" && c.detail.as_deref() == Some("timeout"))
    }));
    // The connection is reopened (the device counts it) and times out again, twice:
    // no second debt entry.
    eventually("two reconnections", || {
        peer.stats().connections >= connections_before + 2
    });
    let quiet = adapter.pending();
    assert!(quiet.iter().all(|e| reading(e).is_none()), "{quiet:#?}");

    peer.op(json!({"op": "heal"}));
    let events = adapter.until("t good again", |e| reading(e).is_some());
    assert_eq!(good(events.last().expect("an event")), Some(7.0));
    let connections_after = peer.stats().connections;
    assert!(
        connections_after > connections_before,
        "{connections_before} → {connections_after} connections"
    );
}

#[test]
fn a_restarted_device_is_connection_debt_then_values_resume() {
    const PORT: u16 = 15024;
    let mut peer = Peer::start(PORT);
    peer.set("holding", 0, &[1]);
    let mut adapter = Adapter::new();
    adapter.start(&def(Holding, 0, U16).tag("t", PORT), 1);
    adapter.goods("t", 1);

    drop(peer); // SIGKILL
    // The open connection is lost; reopening it is refused until the device returns.
    let mut readings: Vec<Reading> = Vec::new();
    adapter.until("connection refused debt", |e| {
        readings.extend(reading(e).cloned());
        debt(e).is_some_and(|d| d.starts_with("connection refused: "))
    });
    let mut peer = Peer::start(PORT);
    peer.set("holding", 0, &[2]);
    adapter.until("t good again", |e| {
        readings.extend(reading(e).cloned());
        good(e) == Some(2.0)
    });
    let debts: Vec<&str> = readings
        .iter()
        .filter_map(|r| match &r.quality {
            Quality::Debt { reason } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert!(!debts.is_empty());
    for reason in &debts {
        assert!(
            reason.starts_with("connection lost: ") || reason.starts_with("connection refused: "),
            "{debts:?}"
        );
    }
    // Debt is reported when its reason changes, not once per poll.
    for pair in readings.windows(2) {
        assert!(
            matches!(pair[0].quality, Quality::Good { .. }) || pair[0].quality != pair[1].quality,
            "{readings:#?}"
        );
    }
}

#[test]
fn a_replaced_or_stopped_tag_stops_reporting() {
    const PORT: u16 = 15025;
    let mut peer = Peer::start(PORT);
    peer.set("holding", 0, &[10, 20, 30]);
    let mut adapter = Adapter::new();
    adapter.start(&def(Holding, 0, U16).tag("t", PORT), 1);
    adapter.goods("t", 2);

    // Replaced in place: generation 2 reads address 1.
    adapter.start(&def(Holding, 1, U16).tag("t", PORT), 2);
    adapter.until("generation 2", |e| e.generation == 2);
    let events = adapter.goods("t", 5);
    for event in &events {
        assert_eq!(event.generation, 2, "{event:?}");
        if let Some(value) = good(event) {
            assert_eq!(value, 20.0);
        }
    }

    // Stopped: nothing of it follows what the next tag reports.
    adapter.devices.stop("t");
    adapter.start(&def(Holding, 2, U16).tag("marker", PORT), 1);
    adapter.until("the marker", |e| e.tag == "marker");
    let events = adapter.goods("marker", 5);
    assert!(events.iter().all(|e| e.tag == "marker"), "{events:#?}");

    // The device's task ends with its last tag, and its connection closes.
    assert_eq!(peer.stats().open, 1);
    adapter.devices.stop("marker");
    eventually("the connection closed", || peer.stats().open == 0);
}
