//! The session's rules, each fed real encoded payloads and read back as one line per
//! action: `good V`, `debt: REASON`, `refused: REASON`, `state S (DETAIL)`, `rebirth`.

use super::*;
use crate::limits::SPARKPLUG_REBIRTH_REPEAT_MS;
use crate::sparkplug::payload::{Value, encode};

const T: u64 = 1_000_000;

fn node_tag() -> Session {
    Session::new(Address {
        group: "plant".into(),
        node: "line-1".into(),
        device: None,
        metric: "Speed".into(),
    })
}

fn device_tag() -> Session {
    Session::new(Address {
        device: Some("drive-3".into()),
        ..node_tag().address
    })
}

fn lines(actions: Vec<Action>) -> Vec<String> {
    actions
        .into_iter()
        .map(|a| match a {
            Action::RequestRebirth => "rebirth".to_owned(),
            Action::Report(Event::Connection(c)) => match c.detail {
                Some(d) => format!("state {} ({d})", c.state),
                None => format!("state {}", c.state),
            },
            Action::Report(Event::Reading(r)) => match r.quality {
                Quality::Good { value } => format!("good {value}"),
                Quality::Debt { reason } => format!("debt: {reason}"),
                Quality::Refused { reason } => format!("refused: {reason}"),
            },
            Action::Report(Event::Completion(c)) => format!("completion {}", c.pgn),
        })
        .collect()
}

fn metric(
    name: Option<&str>,
    alias: Option<u64>,
    datatype: DataType,
    value: Option<Value>,
) -> Metric {
    Metric {
        name: name.map(str::to_owned),
        alias,
        datatype: Some(datatype as u32),
        value,
        ..Metric::default()
    }
}

fn double(v: f64) -> Option<Value> {
    Some(Value::DoubleValue(v))
}

/// A birth: `bdSeq`, the tag's metric `Speed` (alias 1) of `datatype` = `value`, and
/// `Other` (alias 2, Double).
fn birth(seq: u64, bdseq: u64, datatype: DataType, value: Option<Value>) -> Vec<u8> {
    encode(&Payload {
        timestamp: Some(T),
        seq: Some(seq),
        metrics: vec![
            metric(
                Some("bdSeq"),
                None,
                DataType::Int64,
                Some(Value::LongValue(bdseq)),
            ),
            metric(Some("Speed"), Some(1), datatype, value),
            metric(Some("Other"), Some(2), DataType::Double, double(0.0)),
        ],
        ..Payload::default()
    })
}

fn data(seq: u64, metrics: Vec<Metric>) -> Vec<u8> {
    encode(&Payload {
        timestamp: Some(T),
        seq: Some(seq),
        metrics,
        ..Payload::default()
    })
}

/// NDATA/DDATA of the tag's metric by alias alone.
fn speed(seq: u64, v: f64) -> Vec<u8> {
    data(
        seq,
        vec![metric(None, Some(1), DataType::Double, double(v))],
    )
}

fn death(bdseq: u64) -> Vec<u8> {
    encode(&Payload {
        timestamp: Some(T),
        metrics: vec![metric(
            Some("bdSeq"),
            None,
            DataType::Int64,
            Some(Value::LongValue(bdseq)),
        )],
        ..Payload::default()
    })
}

const NBIRTH: &str = "spBv1.0/plant/NBIRTH/line-1";
const NDATA: &str = "spBv1.0/plant/NDATA/line-1";
const NDEATH: &str = "spBv1.0/plant/NDEATH/line-1";
const DBIRTH: &str = "spBv1.0/plant/DBIRTH/line-1/drive-3";
const DDATA: &str = "spBv1.0/plant/DDATA/line-1/drive-3";
const DDEATH: &str = "spBv1.0/plant/DDEATH/line-1/drive-3";

impl Session {
    fn feed(&mut self, topic: &str, bytes: &[u8]) -> Vec<String> {
        lines(self.message(topic, bytes, T))
    }
}

/// A node tag connected and born (seq 0, bdSeq 7) with Speed = 1.5.
fn online() -> Session {
    let mut s = node_tag();
    s.connected(T);
    assert_eq!(
        s.feed(NBIRTH, &birth(0, 7, DataType::Double, double(1.5))),
        ["state online", "good 1.5"]
    );
    s
}

#[test]
fn every_connect_awaits_a_birth_and_asks_for_a_rebirth() {
    let mut s = node_tag();
    assert_eq!(lines(s.connected(T)), ["state awaiting-birth", "rebirth"]);
    let mut s = online();
    assert_eq!(lines(s.connected(T)), ["state awaiting-birth", "rebirth"]);
    assert_eq!(s.feed(NDATA, &speed(1, 2.0)), ["debt: awaiting birth"]);
}

#[test]
fn data_before_the_birth_is_one_debt_and_one_rebirth_request() {
    let mut s = node_tag();
    s.connected(T);
    assert_eq!(s.feed(NDATA, &speed(4, 2.0)), ["debt: awaiting birth"]);
    assert!(s.feed(NDATA, &speed(5, 2.0)).is_empty());
    assert!(s.feed(NDATA, &speed(6, 2.0)).is_empty());
    // Unanswered for long enough: asked again, still one debt.
    let later = T + SPARKPLUG_REBIRTH_REPEAT_MS;
    assert_eq!(lines(s.message(NDATA, &speed(7, 2.0), later)), ["rebirth"]);
    assert!(lines(s.message(NDATA, &speed(8, 2.0), later + 1)).is_empty());
    // Without a connect first (a session fed before its ConnAck) too.
    let mut s = node_tag();
    assert_eq!(
        s.feed(NDATA, &speed(1, 2.0)),
        ["debt: awaiting birth", "rebirth"]
    );
}

#[test]
fn the_birth_value_then_data_by_alias_or_name_are_good() {
    let mut s = online();
    assert_eq!(s.feed(NDATA, &speed(1, 2.5)), ["good 2.5"]);
    let by_name = data(
        2,
        vec![metric(Some("Speed"), None, DataType::Double, double(3.0))],
    );
    assert_eq!(s.feed(NDATA, &by_name), ["good 3"]);
    // Other metrics of the node are not the tag's.
    let other = data(
        3,
        vec![metric(None, Some(2), DataType::Double, double(9.0))],
    );
    assert!(s.feed(NDATA, &other).is_empty());
    // Several values of the tag in one message are several readings.
    let two = data(
        4,
        vec![
            metric(None, Some(1), DataType::Double, double(4.0)),
            metric(None, Some(1), DataType::Double, double(5.0)),
        ],
    );
    assert_eq!(s.feed(NDATA, &two), ["good 4", "good 5"]);
}

#[test]
fn readings_carry_raw_values_and_device_times() {
    let mut s = online();
    let mut m = metric(None, Some(1), DataType::Double, double(2.0));
    m.timestamp = Some(T + 5);
    let with_own_time = encode(&Payload {
        timestamp: Some(T + 9),
        seq: Some(1),
        metrics: vec![m],
        ..Payload::default()
    });
    let payload_time = encode(&Payload {
        timestamp: Some(T + 9),
        seq: Some(2),
        metrics: vec![metric(None, Some(1), DataType::Double, double(3.0))],
        ..Payload::default()
    });
    for (bytes, device_time) in [(with_own_time, T + 5), (payload_time, T + 9)] {
        let actions = s.message(NDATA, &bytes, T + 20);
        let [Action::Report(Event::Reading(r))] = actions.as_slice() else {
            panic!("one reading: {actions:?}");
        };
        assert_eq!(r.device_time_ms, Some(device_time));
        assert_eq!(r.received_ms, T + 20);
        assert!(matches!(r.raw, Raw::Float(_)));
    }
}

#[test]
fn numeric_datatypes_are_captured_with_their_signs() {
    let cases = [
        (DataType::Int8, Value::IntValue(0xfe), "good -2"),
        (DataType::Int16, Value::IntValue(0xfffe), "good -2"),
        (DataType::Int32, Value::IntValue(u32::MAX), "good -1"),
        (DataType::Int64, Value::LongValue(u64::MAX), "good -1"),
        (DataType::UInt8, Value::IntValue(250), "good 250"),
        (DataType::UInt16, Value::IntValue(65_000), "good 65000"),
        (
            DataType::UInt32,
            Value::IntValue(4_000_000_000),
            "good 4000000000",
        ),
        (
            DataType::UInt64,
            Value::LongValue(1 << 40),
            "good 1099511627776",
        ),
        (DataType::Float, Value::FloatValue(0.5), "good 0.5"),
        (DataType::Double, Value::DoubleValue(-0.5), "good -0.5"),
        (DataType::Boolean, Value::BooleanValue(true), "good 1"),
        (DataType::Boolean, Value::BooleanValue(false), "good 0"),
    ];
    for (datatype, value, line) in cases {
        let mut s = node_tag();
        s.connected(T);
        assert_eq!(
            s.feed(NBIRTH, &birth(0, 1, datatype, Some(value.clone()))),
            ["state online", line],
            "{datatype:?}"
        );
        let next = data(1, vec![metric(None, Some(1), datatype, Some(value))]);
        assert_eq!(s.feed(NDATA, &next), [line], "{datatype:?}");
    }
}

#[test]
fn a_non_numeric_datatype_is_refused_once_and_nothing_of_it_is_captured() {
    let mut s = node_tag();
    s.connected(T);
    let string = || Some(Value::StringValue("hello".into()));
    assert_eq!(
        s.feed(NBIRTH, &birth(0, 1, DataType::String, string())),
        [
            "refused: datatype String is not numeric",
            "state refused (datatype String is not numeric)"
        ]
    );
    let next = data(1, vec![metric(None, Some(1), DataType::String, string())]);
    assert!(s.feed(NDATA, &next).is_empty());
    let null = Metric {
        is_null: Some(true),
        ..metric(None, Some(1), DataType::String, None)
    };
    assert!(s.feed(NDATA, &data(2, vec![null])).is_empty());
    // A rebirth that still declares it String: no second refusal, no debt.
    assert!(
        s.feed(NBIRTH, &birth(0, 1, DataType::String, string()))
            .is_empty()
    );
    assert_eq!(s.feed(NDEATH, &death(1)), ["state offline (NDEATH)"]);
    assert_eq!(
        lines(s.connection_lost("reset", T)),
        ["state offline (connection lost: reset)"]
    );
    assert_eq!(lines(s.connected(T)), ["state awaiting-birth", "rebirth"]);
    // Declared another non-numeric way: refused again, with the new reason.
    assert_eq!(
        s.feed(NBIRTH, &birth(0, 2, DataType::Text, string())),
        [
            "refused: datatype Text is not numeric",
            "state refused (datatype Text is not numeric)"
        ]
    );
    // Declared numeric by the next birth: captured from then on.
    assert_eq!(
        s.feed(NBIRTH, &birth(0, 2, DataType::Double, double(4.0))),
        ["state online", "good 4"]
    );
    assert_eq!(s.feed(NDATA, &speed(1, 5.0)), ["good 5"]);
}

#[test]
fn every_non_numeric_datatype_is_refused_by_its_name() {
    let non_numeric = (12..=34).chain([0, 99]);
    for code in non_numeric {
        let mut s = node_tag();
        s.connected(T);
        let bytes = encode(&Payload {
            seq: Some(0),
            metrics: vec![Metric {
                name: Some("Speed".into()),
                alias: Some(1),
                datatype: Some(code),
                ..Metric::default()
            }],
            ..Payload::default()
        });
        let name = DataType::from_code(code).name();
        assert_eq!(
            s.feed(NBIRTH, &bytes)[0],
            format!("refused: datatype {name} is not numeric")
        );
    }
}

#[test]
fn a_sequence_gap_is_debt_a_rebirth_request_and_awaiting_birth() {
    let mut s = online();
    assert_eq!(s.feed(NDATA, &speed(1, 2.0)), ["good 2"]);
    assert_eq!(
        s.feed(NDATA, &speed(3, 3.0)),
        [
            "debt: sequence gap: expected 2, got 3",
            "state awaiting-birth (sequence gap: expected 2, got 3)",
            "rebirth"
        ]
    );
    assert_eq!(s.feed(NDATA, &speed(4, 4.0)), ["debt: awaiting birth"]);
    assert!(s.feed(NDATA, &speed(5, 4.0)).is_empty());
    assert_eq!(
        s.feed(NBIRTH, &birth(0, 7, DataType::Double, double(6.0))),
        ["state online", "good 6"]
    );
    assert_eq!(s.feed(NDATA, &speed(1, 7.0)), ["good 7"]);
}

#[test]
fn seq_wraps_after_255_and_counts_every_message_of_the_node() {
    let mut s = node_tag();
    s.connected(T);
    s.feed(NBIRTH, &birth(254, 1, DataType::Double, double(1.0)));
    assert_eq!(s.feed(NDATA, &speed(255, 2.0)), ["good 2"]);
    assert_eq!(s.feed(NDATA, &speed(0, 3.0)), ["good 3"]);
    // A device's message takes a number of the node's sequence too.
    let other_device = "spBv1.0/plant/DDATA/line-1/pump-9";
    assert!(s.feed(other_device, &speed(1, 0.0)).is_empty());
    assert_eq!(
        s.feed(NDATA, &speed(1, 4.0))[0],
        "debt: sequence gap: expected 2, got 1"
    );
}

#[test]
fn an_alias_not_in_the_birth_is_debt_and_asks_for_a_rebirth_once() {
    let mut s = online();
    let unknown = data(
        1,
        vec![metric(None, Some(99), DataType::Double, double(1.0))],
    );
    assert_eq!(
        s.feed(NDATA, &unknown),
        ["debt: alias 99 not in the current birth", "rebirth"]
    );
    let unknown = data(
        2,
        vec![metric(None, Some(99), DataType::Double, double(1.0))],
    );
    assert!(s.feed(NDATA, &unknown).is_empty());
    // The aliases it knows still read.
    assert_eq!(s.feed(NDATA, &speed(3, 2.0)), ["good 2"]);
    // The node's new birth answers the request; a new unknown alias asks again.
    s.feed(NBIRTH, &birth(0, 7, DataType::Double, double(2.0)));
    let unknown = data(
        1,
        vec![metric(None, Some(98), DataType::Double, double(1.0))],
    );
    assert_eq!(
        s.feed(NDATA, &unknown),
        ["debt: alias 98 not in the current birth", "rebirth"]
    );
}

#[test]
fn null_and_non_finite_values_are_debt_reported_once_until_a_good_one() {
    let mut s = online();
    let null = |seq| {
        data(
            seq,
            vec![Metric {
                is_null: Some(true),
                ..metric(None, Some(1), DataType::Double, None)
            }],
        )
    };
    assert_eq!(s.feed(NDATA, &null(1)), ["debt: is_null"]);
    assert!(s.feed(NDATA, &null(2)).is_empty());
    assert_eq!(
        s.feed(NDATA, &speed(3, f64::NAN)),
        ["debt: not finite: NaN"]
    );
    assert_eq!(
        s.feed(NDATA, &speed(4, f64::INFINITY)),
        ["debt: not finite: inf"]
    );
    assert_eq!(
        s.feed(NDATA, &speed(5, f64::NEG_INFINITY)),
        ["debt: not finite: -inf"]
    );
    assert!(s.feed(NDATA, &speed(6, f64::NEG_INFINITY)).is_empty());
    assert_eq!(s.feed(NDATA, &speed(7, 1.0)), ["good 1"]);
    assert_eq!(s.feed(NDATA, &null(8)), ["debt: is_null"]);
    // A value of the wrong kind for the declared datatype.
    let wrong = data(
        9,
        vec![metric(
            None,
            Some(1),
            DataType::Double,
            Some(Value::StringValue("x".into())),
        )],
    );
    assert_eq!(
        s.feed(NDATA, &wrong),
        ["debt: no Double value in the metric"]
    );
    // The birth's own value too.
    let mut s = node_tag();
    s.connected(T);
    let null_birth = encode(&Payload {
        seq: Some(0),
        metrics: vec![Metric {
            is_null: Some(true),
            ..metric(Some("Speed"), Some(1), DataType::Float, None)
        }],
        ..Payload::default()
    });
    assert_eq!(
        s.feed(NBIRTH, &null_birth),
        ["state online", "debt: is_null"]
    );
}

#[test]
fn a_non_finite_reading_keeps_its_raw_value() {
    let mut s = online();
    let actions = s.message(NDATA, &speed(1, f64::INFINITY), T);
    let [Action::Report(Event::Reading(r))] = actions.as_slice() else {
        panic!("one reading: {actions:?}");
    };
    assert_eq!(r.raw, Raw::Float(f64::INFINITY));
}

#[test]
fn ndeath_of_the_current_session_is_debt_and_offline_until_a_birth() {
    let mut s = online();
    // An older session's will: ignored.
    assert!(s.feed(NDEATH, &death(6)).is_empty());
    assert_eq!(s.feed(NDATA, &speed(1, 2.0)), ["good 2"]);
    assert_eq!(
        s.feed(NDEATH, &death(7)),
        ["debt: NDEATH", "state offline (NDEATH)"]
    );
    assert!(s.feed(NDEATH, &death(7)).is_empty());
    assert_eq!(
        s.feed(NBIRTH, &birth(0, 8, DataType::Double, double(3.0))),
        ["state online", "good 3"]
    );
    // The new session's bdSeq is the one that counts now.
    assert!(s.feed(NDEATH, &death(7)).is_empty());
    assert_eq!(
        s.feed(NDEATH, &death(8)),
        ["debt: NDEATH", "state offline (NDEATH)"]
    );
}

#[test]
fn a_device_tag_reads_its_devices_birth_and_data() {
    let mut s = device_tag();
    s.connected(T);
    let node_birth = encode(&Payload {
        seq: Some(0),
        metrics: vec![
            metric(
                Some("bdSeq"),
                None,
                DataType::Int64,
                Some(Value::LongValue(3)),
            ),
            metric(Some("Speed"), Some(50), DataType::String, None), // the node's, not the tag's
        ],
        ..Payload::default()
    });
    // Before the device's birth: awaiting it.
    assert!(s.feed(NBIRTH, &node_birth).is_empty()); // already awaiting-birth
    assert_eq!(
        s.feed(DDATA, &speed(1, 1.0)),
        ["debt: awaiting birth", "rebirth"]
    );
    s.feed(NBIRTH, &node_birth);
    assert_eq!(
        s.feed(DBIRTH, &birth(1, 0, DataType::Double, double(1.5))),
        ["state online", "good 1.5"]
    );
    assert_eq!(s.feed(DDATA, &speed(2, 2.0)), ["good 2"]);
    // Node data and other devices' messages are not the tag's, but count in seq.
    assert!(s.feed(NDATA, &speed(3, 9.0)).is_empty());
    assert!(
        s.feed("spBv1.0/plant/DDATA/line-1/pump-9", &speed(4, 9.0))
            .is_empty()
    );
    assert!(
        s.feed("spBv1.0/plant/DDEATH/line-1/pump-9", &data(5, vec![]))
            .is_empty()
    );
    assert_eq!(s.feed(DDATA, &speed(6, 3.0)), ["good 3"]);
    assert_eq!(
        s.feed(DDEATH, &data(7, vec![])),
        ["debt: DDEATH", "state offline (DDEATH)"]
    );
    assert_eq!(
        s.feed(DDATA, &speed(8, 4.0)),
        ["debt: awaiting birth", "rebirth"]
    );
    assert_eq!(
        s.feed(DBIRTH, &birth(9, 0, DataType::Double, double(5.0))),
        ["state online", "good 5"]
    );
    // An NBIRTH forgets the device's birth.
    assert_eq!(s.feed(NBIRTH, &node_birth), ["state awaiting-birth"]);
    assert_eq!(
        s.feed(DDATA, &speed(1, 6.0)),
        ["debt: awaiting birth", "rebirth"]
    );
    s.feed(DBIRTH, &birth(2, 0, DataType::Double, double(7.0)));
    // NDEATH of the node is the device tag's debt too.
    assert_eq!(
        s.feed(NDEATH, &death(3)),
        ["debt: NDEATH", "state offline (NDEATH)"]
    );
}

#[test]
fn a_lost_connection_is_one_debt_per_outage() {
    let mut s = node_tag();
    assert_eq!(
        lines(s.connection_lost("refused", T)),
        [
            "debt: connection failed: refused",
            "state offline (connection failed: refused)"
        ]
    );
    assert!(lines(s.connection_lost("refused", T)).is_empty());
    let mut s = online();
    assert_eq!(
        lines(s.connection_lost("reset by peer", T)),
        [
            "debt: connection lost: reset by peer",
            "state offline (connection lost: reset by peer)"
        ]
    );
    assert!(lines(s.connection_lost("refused", T)).is_empty());
    assert!(lines(s.connection_lost("timeout", T)).is_empty());
    assert_eq!(lines(s.connected(T)), ["state awaiting-birth", "rebirth"]);
    assert_eq!(s.feed(NDATA, &speed(9, 1.0)), ["debt: awaiting birth"]);
    assert_eq!(
        s.feed(NBIRTH, &birth(0, 8, DataType::Double, double(2.0))),
        ["state online", "good 2"]
    );
}

#[test]
fn other_nodes_commands_and_unknown_topics_are_ignored() {
    let mut s = online();
    let bytes = speed(1, 9.0);
    for topic in [
        "spBv1.0/plant/NDATA/line-2",
        "spBv1.0/other/NDATA/line-1",
        "spBv2.0/plant/NDATA/line-1",
        "spBv1.0/plant/NCMD/line-1",
        "spBv1.0/plant/DCMD/line-1/drive-3",
        "spBv1.0/plant/STATE/line-1",
        "spBv1.0/plant/NDATA/line-1/x/y",
        "spBv1.0/plant/DDATA/line-1",
        "spBv1.0/plant",
    ] {
        assert!(s.feed(topic, &bytes).is_empty(), "{topic}");
    }
    assert_eq!(s.feed(NDATA, &bytes), ["good 9"]);
}

#[test]
fn an_undecodable_payload_loses_the_sequence() {
    let mut s = online();
    let lines = s.feed(NDATA, &[0xff, 0xff, 0xff]);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].starts_with("debt: undecodable payload: "),
        "{lines:?}"
    );
    assert_eq!(lines[2], "rebirth");
    assert!(s.feed(NDEATH, &[0xff]).is_empty());
}

#[test]
fn a_metric_the_birth_does_not_declare_is_debt() {
    let mut s = node_tag();
    s.connected(T);
    let without = encode(&Payload {
        seq: Some(0),
        metrics: vec![metric(
            Some("Other"),
            Some(2),
            DataType::Double,
            double(0.0),
        )],
        ..Payload::default()
    });
    assert_eq!(
        s.feed(NBIRTH, &without),
        [
            "debt: metric Speed not in the birth",
            "state awaiting-birth (metric Speed not in the birth)"
        ]
    );
    let by_name = data(
        1,
        vec![metric(Some("Speed"), None, DataType::Double, double(1.0))],
    );
    assert_eq!(
        s.feed(NDATA, &by_name),
        ["debt: metric Speed not in the current birth", "rebirth"]
    );
}

#[test]
fn the_subscriptions_and_the_command_topic_name_the_node() {
    let s = device_tag();
    assert_eq!(
        s.address().filters(),
        ["spBv1.0/plant/+/line-1", "spBv1.0/plant/+/line-1/+"]
    );
    assert_eq!(s.address().ncmd_topic(), "spBv1.0/plant/NCMD/line-1");
}
