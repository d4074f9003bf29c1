//! What the parsers of the protocol-peer steps (`peer`, `device`) and of `expect-tag`
//! take from their nodes, and the checks of a peer's answer.

use serde_json::json;

use super::peers::{Expect, PeerStep, check_answer, read_device, read_peer};
use super::sources::read_expect_tag;
use crate::oracles::tag_source::TagExpect;
use crate::parse::read_last;
use crate::peers::{Metric, PeerSpec};
use crate::step::ParseError;

fn peer(source: &str) -> Result<PeerStep, ParseError> {
    read_last(source, read_peer)
}

fn peer_error(source: &str) -> String {
    let error = peer(source).expect_err("a parse error");
    match error.help {
        Some(help) => format!("{} | {help}", error.message),
        None => error.message,
    }
}

#[test]
fn peer_start_reads_each_kind() {
    assert_eq!(
        peer("peer start broker kind=mosquitto port=18890").unwrap(),
        PeerStep::Start {
            name: "broker".into(),
            spec: PeerSpec::Mosquitto { port: 18890 },
        }
    );
    assert_eq!(
        peer("peer start plc kind=modbus port=18892 units=\"1, 2\"").unwrap(),
        PeerStep::Start {
            name: "plc".into(),
            spec: PeerSpec::Modbus {
                port: 18892,
                units: Some("1,2".into()),
            },
        }
    );
    let node = peer(
        "peer start line-1 kind=sparkplug-node broker=\"127.0.0.1:18890\" group=plant \
         node=line-1 device=drive-3 {\n  metric Speed type=Double value=1.5\n  \
         metric Label type=String value=\"x y\"\n  metric Count type=Int32 value=7\n}",
    )
    .unwrap();
    let PeerStep::Start { name, spec } = node else {
        panic!("a start")
    };
    assert_eq!(name, "line-1");
    let metric = |name: &str, datatype: &str, value: &str| Metric {
        name: name.into(),
        datatype: datatype.into(),
        value: value.into(),
    };
    assert_eq!(
        spec,
        PeerSpec::SparkplugNode {
            broker: "127.0.0.1:18890".into(),
            group: "plant".into(),
            node: "line-1".into(),
            device: Some("drive-3".into()),
            metrics: vec![
                metric("Speed", "Double", "1.5"),
                metric("Label", "String", "x y"),
                metric("Count", "Int32", "7"),
            ],
        }
    );
    let (script, args) = spec.script_arguments().unwrap();
    assert_eq!(script, "sparkplug_node.py");
    assert_eq!(
        args,
        [
            "--broker",
            "127.0.0.1:18890",
            "--group",
            "plant",
            "--node",
            "line-1",
            "--device",
            "drive-3",
            "--metric",
            "Speed:Double=1.5",
            "--metric",
            "Label:String=x y",
            "--metric",
            "Count:Int32=7",
        ]
    );
}

#[test]
fn a_bacnet_device_is_read_with_its_instance_and_runs_on_udp() {
    let step =
        peer("peer start ahu kind=bacnet-device port=47831 device=1001 analog-inputs=2").unwrap();
    let spec = PeerSpec::BacnetDevice {
        port: 47831,
        device: 1001,
        analog_inputs: Some(2),
    };
    assert_eq!(
        step,
        PeerStep::Start {
            name: "ahu".into(),
            spec: spec.clone(),
        }
    );
    assert!(spec.udp() && spec.speaks_control());
    assert_eq!(spec.kind(), "bacnet-device");
    assert_eq!(
        spec.script_arguments().unwrap(),
        (
            "bacnet_device.py",
            [
                "--port",
                "47831",
                "--device",
                "1001",
                "--analog-inputs",
                "2"
            ]
            .map(String::from)
            .to_vec()
        )
    );
    for (source, message) in [
        (
            "peer start ahu kind=bacnet-device port=47831",
            "`peer start … kind=bacnet-device` needs device=N",
        ),
        (
            "peer start ahu kind=bacnet-device port=47831 device=4194303",
            "`device` is an instance 0 to 4194302, not 4194303",
        ),
        (
            "peer start ahu kind=bacnet-device port=47831 device=1 analog-inputs=0",
            "`analog-inputs` is 1 to 1000, not 0",
        ),
        (
            "peer start ahu kind=bacnet-devise port=47831 device=1",
            "unknown peer kind `bacnet-devise` | did you mean `bacnet-device`?",
        ),
    ] {
        let error = peer_error(source);
        assert!(
            error.starts_with(message),
            "{source}:\n  {error}\n  expected {message}"
        );
    }
}

#[test]
fn peer_scripts_get_their_arguments_and_brokers_their_config() {
    let modbus = PeerSpec::Modbus {
        port: 18892,
        units: Some("1,2".into()),
    };
    assert_eq!(
        modbus.script_arguments().unwrap(),
        (
            "modbus_device.py",
            vec![
                "--port".into(),
                "18892".into(),
                "--units".into(),
                "1,2".into()
            ]
        )
    );
    let broker = PeerSpec::Mosquitto { port: 18890 };
    assert_eq!(broker.script_arguments(), None);
    assert!(!broker.speaks_control());
    let config = PeerSpec::mosquitto_config(18890);
    for line in [
        "listener 18890 127.0.0.1",
        "allow_anonymous true",
        "persistence false",
    ] {
        assert!(config.lines().any(|l| l == line), "{line} in {config}");
    }
}

#[test]
fn peer_slips_are_parse_errors() {
    let start = "peer start broker kind=mosquitto port=18890\n";
    for (source, message) in [
        (
            "peer begin broker",
            "unknown `peer` verb `begin` | verbs are: start, stop, kill, restart",
        ),
        (
            "peer strat broker",
            "unknown `peer` verb `strat` | did you mean `start`? verbs are",
        ),
        (
            "peer start b kind=mosquito port=1",
            "unknown peer kind `mosquito` | did you mean `mosquitto`?",
        ),
        (
            "peer start b kind=mosquitto",
            "`peer start` of this kind needs port=PORT",
        ),
        (
            "peer start b kind=mosquitto port=70000",
            "`port` is a port, 1 to 65535, not 70000",
        ),
        (
            "peer start b kind=mosquitto port=0",
            "`port` is a port, 1 to 65535, not 0",
        ),
        (
            "peer start \"a b\" kind=mosquitto port=1",
            "peer name `a b` must be letters, digits",
        ),
        (
            "peer start b port=1",
            "`peer` needs kind=\"mosquitto|modbus|sparkplug-node|opcua-server\"",
        ),
        (
            "peer start p kind=modbus port=1 units=\"1,x\"",
            "`units` is Modbus unit ids 0..255",
        ),
        (
            "peer start n kind=sparkplug-node broker=\"localhost\" group=g node=n { metric A type=Double value=1; }",
            "`broker` is HOST:PORT, not `localhost`",
        ),
        (
            "peer start n kind=sparkplug-node broker=\"127.0.0.1:1\" group=g node=n",
            "a sparkplug node needs at least one metric",
        ),
        (
            "peer start n kind=sparkplug-node broker=\"127.0.0.1:1\" group=g node=n { metric \"a:b\" type=Double value=1; }",
            "metric name \"a:b\" must be non-empty and without `:`",
        ),
        (
            "peer start n kind=sparkplug-node broker=\"127.0.0.1:1\" group=g node=n { metric A type=Double; }",
            "a metric is `metric NAME type=TYPE value=V`",
        ),
        (
            "peer start n kind=sparkplug-node broker=\"127.0.0.1:1\" group=g node=n { metrik A type=Double value=1; }",
            "unknown child `metrik` of `peer start`",
        ),
        (
            "peer stop broker",
            "peer `broker` is not started by an earlier `peer start` | no `peer start` comes before this step",
        ),
        (
            "peer start broker kind=mosquitto port=18890\npeer stop brokr",
            "peer `brokr` is not started by an earlier `peer start` | did you mean `broker`? the peers started before it are: broker",
        ),
    ] {
        let error = peer_error(source);
        assert!(
            error.starts_with(message),
            "{source}:\n  {error}\n  expected {message}"
        );
    }
    assert_eq!(
        peer(&format!("{start}peer restart broker")).unwrap(),
        PeerStep::Restart {
            name: "broker".into()
        }
    );
    assert_eq!(
        peer(&format!("{start}peer kill broker")).unwrap(),
        PeerStep::Kill {
            name: "broker".into()
        }
    );
    // A property the kind does not take is left over: the parser reports it.
    let leftover = read_last("peer start b kind=mosquitto port=1 units=1", read_peer);
    assert_eq!(
        leftover.unwrap_err().message,
        "unknown property `units` of `peer`"
    );
}

#[test]
fn device_sends_typed_properties_and_lists_and_keeps_expectations_apart() {
    let source = "peer start plc kind=modbus port=18892\n\
                  device set plc unit=1 register=holding address=100 word-order=\"big\" \
                  scale=0.5 strict=#true missing=#null expect-ok=#true { values 215 216 }";
    let device = read_last(source, read_device).unwrap();
    assert_eq!(device.peer, "plc");
    assert_eq!(
        device.request.to_string(),
        json!({"op": "set", "unit": 1, "register": "holding", "address": 100,
               "word-order": "big", "scale": 0.5, "strict": true, "missing": null,
               "values": [215, 216]})
        .to_string(),
        "file order, typed"
    );
    assert_eq!(device.expects, [Expect::Equals("ok".into(), json!(true))]);

    let stats = read_last(
        "peer start node-1 kind=sparkplug-node broker=\"127.0.0.1:1\" group=g node=n { metric A type=Double value=1; }\n\
         device stats node-1 expect-rebirths-at-least=1 expect-seq=4 within=10",
        read_device,
    )
    .unwrap();
    assert_eq!(stats.request, json!({"op": "stats"}));
    assert_eq!(
        stats.expects,
        [
            Expect::AtLeast("rebirths".into(), 1.0),
            Expect::Equals("seq".into(), json!(4))
        ]
    );
    assert_eq!(stats.within, Some(std::time::Duration::from_secs(10)));

    let start = "peer start plc kind=modbus port=18892\npeer start broker kind=mosquitto port=1\n";
    for (step, message) in [
        (
            "device set broker",
            "peer `broker` is a mosquitto broker: it answers no control requests",
        ),
        (
            "device set plk",
            "peer `plk` is not started by an earlier `peer start`",
        ),
        (
            "device set plc op=\"x\"",
            "the operation is the step's first argument",
        ),
        (
            "device stats plc expect-reads-at-least=\"many\"",
            "`expect-reads-at-least` is a number",
        ),
        (
            "device stats plc within=5",
            "`within` repeats the request until its expect-… conditions hold",
        ),
        (
            "device set plc { values a=1 }",
            "a list `values ITEM…` takes no properties",
        ),
        ("device set plc unit=1 { unit 2 }", "`unit` is given twice"),
    ] {
        let error = read_last(&format!("{start}{step}"), read_device).unwrap_err();
        assert!(
            error.message.starts_with(message),
            "{step}: {}",
            error.message
        );
    }
}

#[test]
fn a_peer_answer_is_checked_for_ok_and_every_expectation() {
    let none: [Expect; 0] = [];
    check_answer("plc", &json!({"ok": true}), &none).unwrap();
    let refused =
        check_answer("plc", &json!({"ok": false, "error": "no such unit"}), &none).unwrap_err();
    assert_eq!(refused.expected, "peer `plc` to answer ok");
    assert_eq!(refused.observed, "ok false: no such unit");
    let no_ok = check_answer("plc", &json!({"reads": 3}), &none).unwrap_err();
    assert_eq!(no_ok.observed, "{\"reads\":3}");

    let stats = json!({"ok": true, "reads": 3, "label": "x"});
    let at_least = |n: f64| [Expect::AtLeast("reads".into(), n)];
    check_answer("plc", &stats, &at_least(3.0)).unwrap();
    let short = check_answer("plc", &stats, &at_least(4.0)).unwrap_err();
    assert_eq!(short.expected, "peer `plc`'s answer to have reads ≥ 4");
    assert!(
        short.observed.starts_with("reads is 3; the answer: "),
        "{}",
        short.observed
    );
    check_answer("plc", &stats, &[Expect::Equals("reads".into(), json!(3.0))])
        .expect("numbers compare by value");
    let absent = check_answer("plc", &stats, &[Expect::AtLeast("writes".into(), 0.0)]);
    assert!(absent.is_err(), "an absent field is no number");
    // Stating `ok` replaces the automatic check: a refusal the journey expects.
    let expects = [
        Expect::Equals("ok".into(), json!(false)),
        Expect::Equals("error".into(), json!("no such unit")),
    ];
    check_answer(
        "plc",
        &json!({"ok": false, "error": "no such unit"}),
        &expects,
    )
    .unwrap();
    assert!(check_answer("plc", &json!({"ok": true}), &expects).is_err());
}

#[test]
fn expect_tag_reads_its_conditions() {
    let step = read_last(
        "expect-tag boiler-temp host=edge-a within=20 connection=online stale=#false \
         last-good=21.5 good-at-least=3 debt-at-least=1 refused-at-least=0 good=4 debt=2 completions=1 \
         outstanding-debt=0 reason=\"illegal address\" consecutive=#true fed-all=#true",
        read_expect_tag,
    )
    .unwrap();
    assert_eq!(step.tag, "boiler-temp");
    assert_eq!(step.host, "edge-a");
    assert_eq!(step.within, Some(std::time::Duration::from_secs(20)));
    assert_eq!(
        step.expect,
        TagExpect {
            connection: Some("online".into()),
            stale: Some(false),
            last_good: Some(json!(21.5)),
            good_at_least: Some(3),
            debt_at_least: Some(1),
            refused_at_least: Some(0),
            good: Some(4),
            debt: Some(2),
            completions: Some(1),
            outstanding_debt: Some(0),
            reason: Some("illegal address".into()),
            reason_seen: None,
            consecutive: Some(true),
            fed_all: Some(true),
            retired: None,
        }
    );
    let none_yet = read_last("expect-tag t host=h last-good=#null", read_expect_tag).unwrap();
    assert_eq!(none_yet.expect.last_good, Some(serde_json::Value::Null));
    for (source, message) in [
        (
            "expect-tag t host=h",
            "`expect-tag` needs at least one condition",
        ),
        ("expect-tag t stale=#true", "`expect-tag` needs host=HOST"),
        ("expect-tag t host=h stale=1", "`stale` is #true or #false"),
        (
            "expect-tag t host=h good-at-least=-1",
            "property `good-at-least` must be 0 or more",
        ),
        (
            "expect-tag t host=h within=61 stale=#true",
            "`within` is at most 60 seconds",
        ),
    ] {
        let error = read_last(source, read_expect_tag).unwrap_err();
        assert!(
            error.message.starts_with(message),
            "{source}: {}",
            error.message
        );
    }
}

#[test]
fn a_sealed_object_is_checked_without_a_text_ciphertext_cannot_hold_by_chance() {
    let source = |without: &str| {
        format!(
            "peer start s3 kind=seaweedfs port=18999 bucket=\"grid-archive\"\ns3-object s3 \"h/segments/1.seg\" expect-sealed=#true without=\"{without}\"\n"
        )
    };
    let short = read_last(&source("v1"), super::objects::parse_s3_object)
        .err()
        .expect("a parse error");
    assert!(
        short
            .message
            .starts_with("`without=\"v1\"` is shorter than SEALED_WITHOUT_BYTES_MIN"),
        "{}",
        short.message
    );
    assert!(read_last(&source("acknowledged"), super::objects::parse_s3_object).is_ok());
}
