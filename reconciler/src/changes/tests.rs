//! Field-level diffs as data: (before, after, the rendered lines expected).

use grid_engine::config::{CapacityConfig, HostConfig};
use grid_engine::custody::{Manifest, RetiredKey};
use grid_engine::delivery::api::{RouteDestination, RouteInstall};
use grid_engine::delivery::receipts::Class;

use super::{Change, Paint, render};

const HOSTS: &str =
    "grid version=1\nhost a listen=\"127.0.0.1:7001\"\nhost b listen=\"127.0.0.1:7002\"\n";

fn topology(objects: &str) -> grid_spec::Topology {
    let options = grid_spec::Options {
        references: false,
        ..grid_spec::Options::default()
    };
    grid_spec::load_str_with("t.kdl", &format!("{HOSTS}{objects}"), options)
        .unwrap_or_else(|e| panic!("{objects}: {e:?}"))
}

fn canonical_model(source: &str) -> String {
    grid_spec::canonical::model(&topology(source).models[0])
}

fn canonical_tag(source: &str) -> String {
    grid_spec::canonical::tag(&topology(source).tags[0]).expect("an installable tag")
}

/// Each case: the tag as two topology files declare it, and the lines its canonical
/// texts' diff renders.
fn tag_cases(cases: Vec<(String, String, &[&str])>) {
    for (before, after, expect) in cases {
        let changes = super::tag(&canonical_tag(&before), &canonical_tag(&after));
        assert_eq!(
            rendered(&changes),
            expect,
            "\nbefore: {before}\nafter:  {after}"
        );
    }
}

fn rendered(changes: &[Change]) -> Vec<String> {
    changes.iter().map(render).collect()
}

/// Each case: the model as two topology files declare it, and the lines its
/// canonical texts' diff renders.
#[test]
fn models() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            r#"model m host=a { input flow; input factor; cell power "flow * factor"; }"#,
            r#"model m host=a { input flow; input factor; cell power "flow * factor + 1"; }"#,
            &[r#"cell power: "flow * factor" → "flow * factor + 1""#],
        ),
        (
            "model m host=a ceiling=128 { input x; }",
            "model m host=a ceiling=200 { input x; }",
            &["ceiling: 128 → 200"],
        ),
        (
            "model m host=a { input x; }",
            "model m host=a ceiling=200 { input x; }",
            &["ceiling: (none) → 200"],
        ),
        (
            "model m host=a ceiling=128 { input x; }",
            "model m host=a { input x; }",
            &["ceiling: 128 → (none)"],
        ),
        (
            "model m host=a { input factor default=2; }",
            "model m host=a { input factor default=3; }",
            &["input factor default: 2 → 3"],
        ),
        (
            "model m host=a { input factor default=0.5; }",
            "model m host=a { input factor default=-0.25; }",
            &["input factor default: 0.5 → -0.25"],
        ),
        (
            "model m host=a { input factor default=1e20; }",
            "model m host=a { input factor default=100; }",
            &["input factor default: 1e20 → 100"],
        ),
        (
            "model m host=a { input factor; }",
            "model m host=a { input factor default=2; }",
            &["input factor default: (none) → 2"],
        ),
        (
            "model m host=a { input factor default=2; }",
            "model m host=a { input factor; }",
            &["input factor default: 2 → (none)"],
        ),
        (
            r#"model m host=a { input temp from="tag:a"; }"#,
            r#"model m host=a { input temp from="tag:b"; }"#,
            &[r#"input temp from: "tag:a" → "tag:b""#],
        ),
        (
            r#"model m host=a { input temp from="tag:a"; }"#,
            r#"model m host=a { input temp from="route:r"; }"#,
            &[r#"input temp from: "tag:a" → "route:r""#],
        ),
        (
            r#"model m host=a { input temp from="tag:a"; }"#,
            "model m host=a { input temp; }",
            &[r#"input temp from: "tag:a" → (none)"#],
        ),
        (
            r#"model m host=a { input temp default=1 from="tag:a"; }"#,
            r#"model m host=a { input temp default=2 from="tag:b"; }"#,
            &[
                "input temp default: 1 → 2",
                r#"input temp from: "tag:a" → "tag:b""#,
            ],
        ),
        (
            r#"model m host=a { input a; cell y "a"; }"#,
            r#"model m host=a { input a; cell y "a"; cell x "a + 1"; }"#,
            &[r#"cell x: (none) → "a + 1""#],
        ),
        (
            r#"model m host=a { input b; cell y "b"; }"#,
            "model m host=a { input b; }",
            &[r#"cell y: "b" → (removed)"#],
        ),
        (
            "model m host=a { input a; }",
            "model m host=a { input a; input b; }",
            &["input b: (none) → (declared)"],
        ),
        (
            "model m host=a { input a; input b default=4; }",
            "model m host=a { input a; }",
            &["input b: default=4 → (removed)"],
        ),
        (
            r#"model m host=a { input a; cell power "a"; output power route="r1"; }"#,
            r#"model m host=a { input a; cell power "a"; output power route="r2"; }"#,
            &[r#"output power route: "r1" → "r2""#],
        ),
        (
            r#"model m host=a { input a; cell power "a"; }"#,
            r#"model m host=a { input a; cell power "a"; output power route="r1"; }"#,
            &[r#"output power: (none) → route="r1""#],
        ),
        (
            "model m host=a { input a; }",
            "model m host=a scalar=#true { input a; }",
            &["scalar: false → true"],
        ),
        (
            "model m host=a scalar=#true { input a; }",
            "model m host=a { input a; }",
            &["scalar: true → false"],
        ),
        (
            "model m host=a { input a; }",
            "model m host=b { input a; }",
            &[r#"host: "a" → "b""#],
        ),
        (
            r#"model m host=a { input t; cell c "IF(t > 1, t, 0)"; }"#,
            r#"model m host=a { input t; cell c "IF(t >= 1, t, -1)"; }"#,
            &[r#"cell c: "IF(t > 1, t, 0)" → "IF(t >= 1, t, -1)""#],
        ),
        // In the after text's order, removed children last.
        (
            r#"model m host=a ceiling=100 { input a default=1; cell gone "a"; cell kept "a"; }"#,
            r#"model m host=a ceiling=90 { input a default=2; cell kept "a * 2"; cell new "a"; input z; }"#,
            &[
                "ceiling: 100 → 90",
                "input a default: 1 → 2",
                r#"cell kept: "a" → "a * 2""#,
                r#"cell new: (none) → "a""#,
                "input z: (none) → (declared)",
                r#"cell gone: "a" → (removed)"#,
            ],
        ),
        // Only the declaration order changed (ranges `a:b` follow it).
        (
            r#"model m host=a { input a; input b; cell s "a + b"; }"#,
            r#"model m host=a { input b; input a; cell s "a + b"; }"#,
            &["order: input a, input b, cell s → input b, input a, cell s"],
        ),
        (
            r#"model m host=a { input a; cell s "a"; }"#,
            r#"model m host=a { input a; cell s "a"; }"#,
            &[],
        ),
    ];
    for (before, after, expect) in cases {
        let changes = super::model(&canonical_model(before), &canonical_model(after));
        assert_eq!(
            rendered(&changes),
            *expect,
            "\nbefore: {before}\nafter:  {after}"
        );
    }
}

/// Texts that are not (both) canonical models: a model held `retired`, a text that
/// does not read, another kind, nesting deeper than any canonical text.
#[test]
fn texts() {
    let model = "model \"m\" host=\"a\" {\n    input \"x\" default=2.0\n}\n";
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "model \"m\" host=\"a\" retired=#true {\n}\n",
            "model \"m\" host=\"a\" {\n}\n",
            &["retired: true → false"],
        ),
        (
            "model \"m\" host=\"a\" {\n    input \"x\" default=2.0\n",
            model,
            &[r#"definition: (none) → }"#],
        ),
        (
            "model \"m\" host=\"a\" {\n    input \"x\" default=1.0\n",
            model,
            &[r#"definition: input "x" default=1.0 → input "x" default=2.0; }"#],
        ),
        (
            "",
            model,
            &[r#"definition: (none) → model "m" host="a" {; input "x" default=2.0; }"#],
        ),
        (
            model,
            "tag \"m\" host=\"a\" {\n}\n",
            &[r#"definition: model "m" host="a" {; input "x" default=2.0 → tag "m" host="a" {"#],
        ),
        (
            "model \"m\" host=\"a\" {\n    input \"x\" { deeper { still; }; }\n}\n",
            model,
            &[r#"definition: input "x" { deeper { still; }; } → input "x" default=2.0"#],
        ),
        (
            "model \"m\" host=\"a\" {\n}\nmodel \"n\" host=\"a\" {\n}\n",
            "model \"m\" host=\"a\" {\n}\n",
            &[r#"definition: model "n" host="a" { → (none)"#],
        ),
        (
            "model \"m\" host=\"a\" {\n}\n",
            "model \"n\" host=\"a\" {\n}\n",
            &[r#"name: "m" → "n""#],
        ),
        // Strings read back quoted and escaped as canonical texts write them.
        (
            "model \"m\" host=\"a\" {\n    cell \"c\" \"say \\\"hi\\\"\"\n}\n",
            "model \"m\" host=\"a\" {\n    cell \"c\" \"say\\tno\"\n}\n",
            &[r#"cell c: "say \"hi\"" → "say\tno""#],
        ),
    ];
    for (before, after, expect) in cases {
        assert_eq!(
            rendered(&super::model(before, after)),
            *expect,
            "\nbefore: {before}\nafter:  {after}"
        );
    }
}

/// No text makes the diff panic or come back empty when the texts differ: every
/// prefix of a canonical text, and a nesting thousands deep.
#[test]
fn any_text_gives_changes_without_panicking() {
    let after = canonical_model(
        r#"model m host=a ceiling=64 { input a default=1 from="tag:t"; cell c "IF(a > 1, a, 2)"; output c route="r"; }"#,
    );
    for end in (0..after.len()).filter(|i| after.is_char_boundary(*i)) {
        let before = &after[..end];
        assert!(!super::model(before, &after).is_empty(), "{before:?}");
        assert!(!super::model(&after, before).is_empty(), "{before:?}");
    }
    let deep = format!("model \"m\" {}{}", "{ x ".repeat(2_000), "}".repeat(2_000));
    assert_eq!(super::model(&deep, &after).len(), 1);
}

#[test]
fn tags() {
    let tag = |props: &str| format!("tag t host=a {{ simulate {props}; }}");
    let base = "wave=sine period-s=20 min=60 max=95.5 seed=7";
    let cases: Vec<(String, String, &[&str])> = vec![
        (
            tag(base),
            tag("wave=sine period-s=10 min=60 max=95.5 seed=7"),
            &["simulate period-s: 20 → 10"],
        ),
        (
            tag(base),
            tag("wave=square period-s=20 min=60 max=95.5 seed=7"),
            &["simulate wave: sine → square"],
        ),
        (
            tag(base),
            tag("wave=sine period-s=20 min=55.5 max=95.5 seed=8 interval-ms=250"),
            &[
                "simulate min: 60 → 55.5",
                "simulate seed: 7 → 8",
                "simulate interval-ms: 1000 → 250",
            ],
        ),
        (
            tag(base),
            format!("tag t host=b {{ simulate {base}; }}"),
            &[r#"host: "a" → "b""#],
        ),
        (tag(base), tag(base), &[]),
    ];
    tag_cases(cases);
}

/// Modbus and Sparkplug tags diff field by field too: their canonical texts write every
/// field, defaults included, so a field given for the first time shows its default.
#[test]
fn industrial_tags() {
    let modbus = |props: &str| {
        format!(
            "tag t host=a {{ modbus \"127.0.0.1:5020\" unit=1 register=holding address=100 {props}; }}"
        )
    };
    let sparkplug = |url: &str, props: &str| {
        format!("tag t host=a {{ sparkplug \"{url}\" group=plant node=\"line-1\" {props}; }}")
    };
    let cases: Vec<(String, String, &[&str])> = vec![
        (
            modbus("type=u16 scale=0.1"),
            modbus("type=u16 scale=0.2"),
            &["modbus 127.0.0.1:5020 scale: 0.1 → 0.2"],
        ),
        (
            modbus("type=u16 scale=0.1"),
            modbus("type=u16 scale=0.1 offset=-40 interval-ms=500"),
            &[
                "modbus 127.0.0.1:5020 offset: 0 → -40",
                "modbus 127.0.0.1:5020 interval-ms: 1000 → 500",
            ],
        ),
        (
            modbus("type=u32"),
            modbus("type=u32 word-order=little"),
            &["modbus 127.0.0.1:5020 word-order: big → little"],
        ),
        (
            modbus("type=u16"),
            modbus("type=f32"),
            &[
                "modbus 127.0.0.1:5020 type: u16 → f32",
                "modbus 127.0.0.1:5020 word-order: (none) → big",
            ],
        ),
        (modbus("type=u16 scale=1"), modbus("type=u16"), &[]),
        (
            sparkplug("mqtt://127.0.0.1", "metric=Speed"),
            sparkplug("mqtt://127.0.0.1", "device=\"drive-3\" metric=Torque"),
            &[
                r#"sparkplug mqtt://127.0.0.1:1883 device: (none) → "drive-3""#,
                r#"sparkplug mqtt://127.0.0.1:1883 metric: "Speed" → "Torque""#,
            ],
        ),
        (
            sparkplug("mqtt://127.0.0.1", "metric=Speed"),
            sparkplug("mqtt://127.0.0.1:1883", "metric=Speed"),
            &[],
        ),
        (
            sparkplug("mqtt://127.0.0.1", "metric=Speed"),
            sparkplug("mqtts://broker.plant", "metric=Speed ca=\"/etc/ca.pem\""),
            &[
                r#"sparkplug mqtts://broker.plant:8883: (none) → group="plant" node="line-1" metric="Speed" ca="/etc/ca.pem""#,
                r#"sparkplug mqtt://127.0.0.1:1883: group="plant" node="line-1" metric="Speed" → (removed)"#,
            ],
        ),
    ];
    tag_cases(cases);
}

fn host(listen: &str, profiles: &[&str]) -> HostConfig {
    HostConfig {
        name: "a".to_owned(),
        listen: listen.to_owned(),
        profiles: profiles.iter().map(|p| (*p).to_owned()).collect(),
        metrics: None,
        control_viewers: Vec::new(),
        capacity: CapacityConfig::default(),
        membership_capacity: Default::default(),
        retain: Default::default(),
        archive: None,
        archive_leaving: None,
        archive_index_leaving: None,
        snapshots: Default::default(),
        storage_claim: None,
        control: None,
    }
}

#[test]
fn hosts() {
    let base = host("127.0.0.1:7001", &["transport"]);
    let capped = HostConfig {
        capacity: CapacityConfig {
            ordered_per_destination: Some(64),
            latest_per_host: Some(8),
            ..CapacityConfig::default()
        },
        ..base.clone()
    };
    let cases: Vec<(HostConfig, HostConfig, &[&str])> = vec![
        (
            base.clone(),
            host("127.0.0.1:7009", &["transport"]),
            &[r#"listen: "127.0.0.1:7001" → "127.0.0.1:7009""#],
        ),
        (
            base.clone(),
            host("127.0.0.1:7001", &["transport", "delivery", "sources"]),
            &["profiles: transport → transport delivery sources"],
        ),
        (
            host("127.0.0.1:7001", &[]),
            base.clone(),
            &["profiles: (none) → transport"],
        ),
        (
            base.clone(),
            capped.clone(),
            &[
                "capacity ordered-per-destination: (none) → 64",
                "capacity latest-per-host: (none) → 8",
            ],
        ),
        (
            capped.clone(),
            base.clone(),
            &[
                "capacity ordered-per-destination: 64 → (none)",
                "capacity latest-per-host: 8 → (none)",
            ],
        ),
        (
            base.clone(),
            HostConfig {
                name: "b".to_owned(),
                ..base.clone()
            },
            &[r#"name: "a" → "b""#],
        ),
        (
            base.clone(),
            HostConfig {
                retain: grid_engine::config::RetainConfig {
                    hot_days: Some(3),
                    archive_days: Some(30),
                },
                ..base.clone()
            },
            &[
                "retain hot-days: (none) → 3",
                "retain archive-days: (none) → 30",
            ],
        ),
        (
            capped.clone(),
            HostConfig {
                membership_capacity: [(
                    "utility".to_owned(),
                    CapacityConfig {
                        ordered_per_host: Some(1024),
                        ..CapacityConfig::default()
                    },
                )]
                .into(),
                ..capped.clone()
            },
            &["capacity membership=utility ordered-per-host: (none) → 1024"],
        ),
        (base.clone(), base.clone(), &[]),
    ];
    for (before, after, expect) in cases {
        let changes = super::host_config(&before, &after);
        assert_eq!(rendered(&changes), expect, "\n{before:?}\n{after:?}");
    }
}

fn keys(generation: u32) -> Manifest {
    Manifest {
        generation,
        signing: format!("ed25519:{generation}{generation}"),
        mail: "x25519:cc".to_owned(),
        tls: "ed25519:dd".to_owned(),
        retired: (1..generation)
            .map(|g| RetiredKey {
                generation: g,
                signing: format!("ed25519:{g}{g}"),
            })
            .collect(),
        mail_generation: 1,
        retired_mail: Vec::new(),
        tls_generation: 1,
        retired_tls: Vec::new(),
    }
}

fn destination(host: &str, port: u16) -> RouteDestination {
    RouteDestination {
        host: host.to_owned(),
        address: format!("127.0.0.1:{port}"),
        retired: false,
        keys: keys(1),
    }
}

fn route(destinations: Vec<RouteDestination>) -> RouteInstall {
    RouteInstall {
        name: "plant/temp".to_owned(),
        membership: "ops".to_owned(),
        class: Class::Ordered,
        encrypted: false,
        publisher: "a".to_owned(),
        destinations,
        matrix: None,
    }
}

#[test]
fn routes() {
    let base = route(vec![destination("b", 7002), destination("c", 7003)]);
    let with = |f: &dyn Fn(&mut RouteInstall)| {
        let mut r = base.clone();
        f(&mut r);
        r
    };
    let cases: Vec<(RouteInstall, RouteInstall, &[&str])> = vec![
        (
            base.clone(),
            with(&|r| r.destinations.push(destination("d", 7004))),
            &[r#"destination d: (none) → "127.0.0.1:7004""#],
        ),
        (
            base.clone(),
            with(&|r| r.destinations[0].retired = true),
            &["destination b retired: false → true"],
        ),
        (
            with(&|r| r.destinations[0].retired = true),
            base.clone(),
            &["destination b retired: true → false"],
        ),
        (
            base.clone(),
            with(&|r| r.destinations[1].address = "127.0.0.1:7033".to_owned()),
            &[r#"destination c address: "127.0.0.1:7003" → "127.0.0.1:7033""#],
        ),
        (
            base.clone(),
            with(&|r| r.destinations[0].keys = keys(2)),
            &[
                "destination b keys generation: 1 → 2",
                r#"destination b keys signing: "ed25519:11" → "ed25519:22""#,
                "destination b keys retired: (none) → 1",
            ],
        ),
        (
            base.clone(),
            with(&|r| r.destinations[0].keys.tls = "ed25519:ee".to_owned()),
            &[r#"destination b keys tls: "ed25519:dd" → "ed25519:ee""#],
        ),
        (
            base.clone(),
            with(&|r| {
                r.class = Class::Latest;
                r.encrypted = true;
            }),
            &["class: ordered → latest", "encrypted: false → true"],
        ),
        (
            base.clone(),
            with(&|r| {
                r.membership = "plant".to_owned();
                r.publisher = "z".to_owned();
            }),
            &[r#"membership: "ops" → "plant""#, r#"publisher: "a" → "z""#],
        ),
        // Removed destinations last, after the after definition's own.
        (
            base.clone(),
            with(&|r| {
                r.destinations.remove(0);
                r.destinations.push(RouteDestination {
                    retired: true,
                    ..destination("e", 7005)
                });
            }),
            &[
                r#"destination e: (none) → "127.0.0.1:7005" retired=true"#,
                r#"destination b: "127.0.0.1:7002" → (removed)"#,
            ],
        ),
        (base.clone(), base.clone(), &[]),
    ];
    for (before, after, expect) in cases {
        assert_eq!(
            rendered(&super::route(&before, &after)),
            expect,
            "\n{before:?}\n{after:?}"
        );
    }
}

#[test]
fn changes_serialize_as_field_before_after() {
    let change = Change {
        field: "ceiling".to_owned(),
        before: "128".to_owned(),
        after: "200".to_owned(),
    };
    let json = serde_json::to_value(&change).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"field": "ceiling", "before": "128", "after": "200"})
    );
    assert_eq!(serde_json::from_value::<Change>(json).unwrap(), change);
}

#[test]
fn colours_only_on_a_terminal_without_no_color() {
    use std::ffi::OsStr;
    let cases: &[(bool, Option<&str>, bool)] = &[
        (true, None, true),
        (true, Some(""), true),
        (true, Some("1"), false),
        (true, Some("0"), false),
        (false, None, false),
        (false, Some(""), false),
    ];
    for (terminal, no_color, on) in cases {
        let paint = Paint::decide(*terminal, no_color.map(OsStr::new));
        assert_eq!(
            paint.is_on(),
            *on,
            "terminal={terminal} NO_COLOR={no_color:?}"
        );
    }
    let on = Paint::new(true);
    assert_eq!(on.op("+"), "\u{1b}[32m+\u{1b}[0m");
    assert_eq!(on.op("~"), "\u{1b}[33m~\u{1b}[0m");
    assert_eq!(on.op("-"), "\u{1b}[31m-\u{1b}[0m");
    assert_eq!(on.op("!"), "\u{1b}[1m\u{1b}[35m!\u{1b}[0m");
    assert_eq!(on.op("?"), "?");
    for symbol in ["+", "~", "-", "!"] {
        assert_eq!(Paint::new(false).op(symbol), symbol);
    }
}
