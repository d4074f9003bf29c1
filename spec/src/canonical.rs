//! Canonical KDL text of desired objects: one rendering per meaning, so two objects
//! are the same desired state exactly when their texts are equal, and a field-level
//! diff is a line diff. The reconciler sends this text to an owner, the owner keeps it
//! and reports it back, and plan compares the two.

use std::fmt::Write;

use crate::topology::{InputSource, Item, J1939Input, MatrixApply, Model, Tag, TagSource};

/// A KDL 2 quoted string.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A finite number as KDL reads it back to the same `f64`.
pub fn number(value: f64) -> String {
    assert!(value.is_finite(), "desired state holds finite numbers only");
    format!("{value:?}")
}

/// The canonical `model` node (without `retired`, which is a transition, not content).
pub fn model(model: &Model) -> String {
    let mut out = format!("model {} host={}", quote(&model.name), quote(&model.host));
    if let Some(ceiling) = model.declared_ceiling {
        let _ = write!(out, " ceiling={ceiling}");
    }
    if model.scalar {
        out.push_str(" scalar=#true");
    }
    out.push_str(" {\n");
    for item in &model.items {
        match item {
            Item::Input(input) => {
                let _ = write!(out, "    input {}", quote(&input.name));
                if let Some(default) = input.default {
                    let _ = write!(out, " default={}", number(default));
                }
                match &input.from {
                    Some(InputSource::Tag(tag)) => {
                        let _ = write!(out, " from={}", quote(&format!("tag:{tag}")));
                    }
                    Some(InputSource::Route(route)) => {
                        let _ = write!(out, " from={}", quote(&format!("route:{route}")));
                    }
                    None => {}
                }
                out.push('\n');
            }
            Item::Cell(cell) => {
                let _ = writeln!(
                    out,
                    "    cell {} {}",
                    quote(&cell.name),
                    quote(&cell.formula)
                );
            }
            // `version=` is a transition (the plan applies it), not content.
            Item::Matrix(matrix) => {
                let _ = write!(
                    out,
                    "    matrix {} rows={} cols={} from={}",
                    quote(&matrix.name),
                    matrix.rows,
                    matrix.cols,
                    quote(&format!("mapping:{}", matrix.mapping))
                );
                if matrix.apply == MatrixApply::OnReceipt {
                    out.push_str(" apply=\"on-receipt\"");
                }
                out.push('\n');
            }
        }
    }
    for output in &model.outputs {
        let _ = writeln!(
            out,
            "    output {} route={}",
            quote(&output.cell),
            quote(&output.route)
        );
    }
    out.push_str("}\n");
    out
}

/// The canonical `tag` node of a tag whose source an owner may install (`simulate`,
/// `modbus`, `sparkplug`, `opcua`, `bacnet`, `j1939`): every field written, defaults too
/// (`word-order` for the two-register types only, where it means something), in one
/// order, so an unchanged tag gives the same text and a changed one differs field by
/// field. Optional fields without a default (a Sparkplug `device`, `client-id`, `ca`,
/// `membership`, a J1939 `source-address`) are written when given; an `opcua` tag writes
/// its `policy` (the default too) and `server-certificate` unless `security=none`.
/// Always `Some` in this build; `None` is kept for a source a build cannot install.
pub fn tag(tag: &Tag) -> Option<String> {
    let source = match &tag.source {
        TagSource::Simulate {
            wave,
            period_s,
            min,
            max,
            seed,
            interval_ms,
        } => format!(
            "simulate wave={} period-s={period_s} min={} max={} seed={seed} interval-ms={interval_ms}",
            wave.name(),
            number(*min),
            number(*max),
        ),
        TagSource::Modbus {
            address,
            unit,
            register,
            register_address,
            value_type,
            word_order,
            scale,
            offset,
            interval_ms,
        } => {
            let mut out = format!(
                "modbus {} unit={unit} register={} address={register_address} type={}",
                quote(address),
                register.name(),
                value_type.name()
            );
            if value_type.registers() > 1 {
                let _ = write!(out, " word-order={}", word_order.name());
            }
            let _ = write!(
                out,
                " scale={} offset={} interval-ms={interval_ms}",
                number(*scale),
                number(*offset)
            );
            out
        }
        TagSource::Sparkplug {
            broker,
            group,
            node,
            device,
            metric,
            client_id,
            ca,
            membership,
        } => {
            let optional = |key: &str, value: &Option<String>| {
                value
                    .as_ref()
                    .map_or_else(String::new, |v| format!(" {key}={}", quote(v)))
            };
            format!(
                "sparkplug {} group={} node={}{} metric={}{}{}{}",
                quote(broker),
                quote(group),
                quote(node),
                optional("device", device),
                quote(metric),
                optional("client-id", client_id),
                optional("ca", ca),
                optional("membership", membership),
            )
        }
        TagSource::J1939 {
            input,
            pgn,
            spn,
            source_address,
        } => {
            let input = match input {
                J1939Input::Log(path) => format!("log={}", quote(path)),
                J1939Input::Interface(name) => format!("interface={}", quote(name)),
            };
            let mut out = format!("j1939 {input} pgn={pgn} spn={spn}");
            if let Some(address) = source_address {
                let _ = write!(out, " source-address={address}");
            }
            out
        }
        TagSource::Bacnet {
            address,
            device,
            object,
            property,
            cov,
            lifetime_s,
            interval_ms,
        } => {
            let mut out = format!(
                "bacnet {} device={device} object={} property={property}",
                quote(address),
                quote(object),
            );
            match lifetime_s {
                Some(lifetime_s) if *cov => {
                    let _ = write!(out, " cov=#true lifetime-s={lifetime_s}");
                }
                _ => {
                    let _ = write!(out, " cov=#false interval-ms={interval_ms}");
                }
            }
            out
        }
        TagSource::OpcUa {
            endpoint,
            node,
            security,
            policy,
            publishing_ms,
            server_certificate,
        } => {
            let mut out = format!(
                "opcua {} node={} security={}",
                quote(endpoint),
                quote(node),
                security.name()
            );
            if let Some(policy) = policy {
                let _ = write!(out, " policy={policy}");
            }
            let _ = write!(out, " publishing-ms={publishing_ms}");
            if let Some(path) = server_certificate {
                let _ = write!(out, " server-certificate={}", quote(path));
            }
            out
        }
    };
    Some(format!(
        "tag {} host={} {{\n    {source}\n}}\n",
        quote(&tag.name),
        quote(&tag.host),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_simulated_tag_reads_back_to_the_same_text() {
        let text = "grid version=1\nhost h listen=\"127.0.0.1:1\"\ntag t host=h { simulate wave=sine period-s=20 min=60 max=95.5 seed=7; }\n";
        let topology = crate::load_str("t.kdl", text).unwrap();
        let canonical = super::tag(&topology.tags[0]).unwrap();
        assert!(canonical.contains("interval-ms=1000"), "{canonical}");
        let again = format!("grid version=1\nhost h listen=\"127.0.0.1:1\"\n{canonical}");
        let topology2 = crate::load_str("again.kdl", &again).unwrap();
        assert_eq!(topology2.tags[0].source, topology.tags[0].source);
        assert_eq!(super::tag(&topology2.tags[0]).unwrap(), canonical);
    }

    /// Text → topology → canonical text → topology: the same source and the same text.
    fn round_trip(source: &str) -> (crate::TagSource, String) {
        let hosts = "grid version=1\nmembership m\nhost h listen=\"127.0.0.1:1\" { member m; }\n";
        let topology = crate::load_str("t.kdl", &format!("{hosts}{source}"))
            .unwrap_or_else(|e| panic!("{source}: {:?}", e.items));
        let canonical = super::tag(&topology.tags[0]).expect("an installable tag");
        let again = crate::load_str("again.kdl", &format!("{hosts}{canonical}"))
            .unwrap_or_else(|e| panic!("{canonical}: {:?}", e.items));
        assert_eq!(again.tags[0].source, topology.tags[0].source, "{canonical}");
        assert_eq!(super::tag(&again.tags[0]).unwrap(), canonical);
        (topology.tags[0].source.clone(), canonical)
    }

    #[test]
    fn modbus_tags_read_back_to_the_same_text_with_defaults_written_out() {
        let (_, canonical) = round_trip(
            "tag t host=h { modbus \"127.0.0.1:5020\" unit=1 register=holding address=100 type=u16 scale=0.1; }\n",
        );
        assert_eq!(
            canonical,
            "tag \"t\" host=\"h\" {\n    modbus \"127.0.0.1:5020\" unit=1 register=holding address=100 type=u16 scale=0.1 offset=0.0 interval-ms=1000\n}\n"
        );
        let (source, canonical) = round_trip(
            "tag t host=h { modbus \"PLC.plant:502\" unit=0 register=input address=65534 type=f32 word-order=little offset=-40 interval-ms=10; }\n",
        );
        assert!(
            matches!(
                source,
                crate::TagSource::Modbus {
                    word_order: crate::WordOrder::Little,
                    ..
                }
            ),
            "{source:?}"
        );
        assert!(
            canonical.contains("\"plc.plant:502\" unit=0 register=input address=65534 type=f32 word-order=little scale=1.0 offset=-40.0 interval-ms=10"),
            "{canonical}"
        );
        let (_, canonical) = round_trip(
            "tag t host=h { modbus \"[::1]:502\" unit=255 register=holding address=7 type=i32; }\n",
        );
        assert!(
            canonical.contains("type=i32 word-order=big scale=1.0"),
            "{canonical}"
        );
        let (_, canonical) = round_trip(
            "tag t host=h { modbus \"127.0.0.1:502\" unit=3 register=coil address=65535 type=bool; }\n",
        );
        assert!(
            canonical.contains("register=coil address=65535 type=bool scale=1.0"),
            "{canonical}"
        );
    }

    #[test]
    fn sparkplug_tags_read_back_to_the_same_text() {
        let (_, canonical) = round_trip(
            "tag t host=h { sparkplug \"mqtt://127.0.0.1\" group=plant node=\"line-1\" metric=Speed; }\n",
        );
        assert_eq!(
            canonical,
            "tag \"t\" host=\"h\" {\n    sparkplug \"mqtt://127.0.0.1:1883\" group=\"plant\" node=\"line-1\" metric=\"Speed\"\n}\n"
        );
        let (source, canonical) = round_trip(
            "tag t host=h { sparkplug \"mqtts://Broker.Plant\" group=plant node=n1 device=\"drive-3\" metric=\"Motor/Speed\" client-id=\"edge-7\" ca=\"/etc/grid/ca.pem\" membership=m; }\n",
        );
        assert_eq!(
            source,
            crate::TagSource::Sparkplug {
                broker: "mqtts://broker.plant:8883".into(),
                group: "plant".into(),
                node: "n1".into(),
                device: Some("drive-3".into()),
                metric: "Motor/Speed".into(),
                client_id: Some("edge-7".into()),
                ca: Some("/etc/grid/ca.pem".into()),
                membership: Some("m".into()),
            }
        );
        assert!(
            canonical.contains("device=\"drive-3\" metric=\"Motor/Speed\" client-id=\"edge-7\" ca=\"/etc/grid/ca.pem\" membership=\"m\""),
            "{canonical}"
        );
        round_trip(
            "tag t host=h { sparkplug \"mqtts://10.0.0.9:8884\" group=g node=n metric=x membership=m; }\n",
        );
    }

    #[test]
    fn j1939_tags_read_back_to_the_same_text() {
        let (source, canonical) =
            round_trip("tag t host=h { j1939 log=\"engine.log\" pgn=61444 spn=190; }\n");
        assert_eq!(
            canonical,
            "tag \"t\" host=\"h\" {\n    j1939 log=\"engine.log\" pgn=61444 spn=190\n}\n"
        );
        assert!(matches!(
            source,
            crate::TagSource::J1939 {
                input: crate::J1939Input::Log(_),
                source_address: None,
                ..
            }
        ));
        let (_, canonical) = round_trip(
            "tag t host=h { j1939 source-address=0 spn=110 interface=\"can0\" pgn=65262; }\n",
        );
        assert!(
            canonical.contains("j1939 interface=\"can0\" pgn=65262 spn=110 source-address=0\n"),
            "{canonical}"
        );
    }

    #[test]
    fn bacnet_tags_read_back_to_the_same_text_with_defaults_written_out() {
        let (_, canonical) = round_trip(
            "tag t host=h { bacnet \"127.0.0.1:47831\" device=1001 object=\"analog-input:3\" property=present-value; }\n",
        );
        assert_eq!(
            canonical,
            "tag \"t\" host=\"h\" {\n    bacnet \"127.0.0.1:47831\" device=1001 object=\"analog-input:3\" property=present-value cov=#false interval-ms=1000\n}\n"
        );
        let (source, canonical) = round_trip(
            "tag t host=h { bacnet \"AHU-3.plant:47808\" device=0 object=\"binary-value:4194303\" property=present-value cov=#true; }\n",
        );
        assert_eq!(
            source,
            crate::TagSource::Bacnet {
                address: "ahu-3.plant:47808".into(),
                device: 0,
                object: "binary-value:4194303".into(),
                property: "present-value".into(),
                cov: true,
                lifetime_s: Some(300),
                interval_ms: 1000,
            }
        );
        assert!(
            canonical.contains(
                "object=\"binary-value:4194303\" property=present-value cov=#true lifetime-s=300\n"
            ),
            "{canonical}"
        );
        let (_, canonical) = round_trip(
            "tag t host=h { bacnet \"[::1]:47808\" device=4194302 object=\"multi-state-value:7\" property=present-value cov=#true lifetime-s=10; }\n",
        );
        assert!(canonical.contains("cov=#true lifetime-s=10"), "{canonical}");
        let (_, canonical) = round_trip(
            "tag t host=h { bacnet \"127.0.0.1:47808\" device=5 object=\"analog-value:1\" property=present-value cov=#false interval-ms=100; }\n",
        );
        assert!(
            canonical.contains("cov=#false interval-ms=100"),
            "{canonical}"
        );
    }

    #[test]
    fn opcua_tags_read_back_to_the_same_text_with_defaults_written_out() {
        let (_, canonical) = round_trip(
            "tag t host=h { opcua \"opc.tcp://127.0.0.1:4840/grid/\" node=\"ns=2;s=Boiler.Pressure\" security=none; }\n",
        );
        assert_eq!(
            canonical,
            "tag \"t\" host=\"h\" {\n    opcua \"opc.tcp://127.0.0.1:4840/grid/\" node=\"ns=2;s=Boiler.Pressure\" security=none publishing-ms=1000\n}\n"
        );
        let (source, canonical) = round_trip(
            "tag t host=h { opcua \"OPC.TCP://Server.Plant:4843\" node=\"ns=0;i=2258\" security=sign server-certificate=\"certs/server.der\" publishing-ms=250; }\n",
        );
        assert_eq!(
            source,
            crate::TagSource::OpcUa {
                endpoint: "opc.tcp://server.plant:4843".into(),
                node: "i=2258".into(),
                security: crate::OpcUaSecurity::Sign,
                policy: Some("Basic256Sha256".into()),
                publishing_ms: 250,
                server_certificate: Some("certs/server.der".into()),
            }
        );
        assert!(
            canonical.contains("opcua \"opc.tcp://server.plant:4843\" node=\"i=2258\" security=sign policy=Basic256Sha256 publishing-ms=250 server-certificate=\"certs/server.der\""),
            "{canonical}"
        );
        round_trip(
            "tag t host=h { opcua \"opc.tcp://10.0.0.9:4840\" node=\"ns=3;g=09087E75-8E5E-499B-954F-F2A9603DB28A\" security=sign-and-encrypt policy=Aes256Sha256RsaPss server-certificate=\"/etc/grid/s.pem\"; }\n",
        );
    }

    #[test]
    fn every_source_of_the_language_has_a_canonical_text() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/valid/industrial-sources.kdl"
        ))
        .unwrap();
        let topology = crate::load_str("industrial-sources.kdl", &text).unwrap();
        let mut kinds: Vec<&str> = topology.tags.iter().map(|t| t.source.kind()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds, ["bacnet", "j1939", "modbus", "opcua", "sparkplug"]);
        for tag in &topology.tags {
            assert!(super::tag(tag).is_some(), "{}", tag.name);
        }
    }

    #[test]
    fn a_model_reads_back_to_the_same_text() {
        let text = r#"grid version=1
host h listen="127.0.0.1:1"
model m host=h ceiling=64 {
    input a default=0.1
    input b
    cell c "IF(a > 1, \"x\" = 1, b)"
    cell d "a*2"
}
"#;
        // The quoted formula is nonsense but parses up to the quote: use a valid one.
        let text = text.replace(r#""IF(a > 1, \"x\" = 1, b)""#, r#""IF(a > 1, a, b)""#);
        let topology = crate::load_str("m.kdl", &text).unwrap();
        let canonical = super::model(&topology.models[0]);
        let again = format!("grid version=1\nhost h listen=\"127.0.0.1:1\"\n{canonical}");
        let topology2 = crate::load_str("again.kdl", &again).unwrap();
        assert_eq!(super::model(&topology2.models[0]), canonical);
        assert_eq!(topology2.models[0].items, topology.models[0].items);
    }

    #[test]
    fn a_model_with_a_matrix_reads_back_to_the_same_text() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/valid/matrices.kdl"
        ))
        .unwrap();
        let topology = crate::load_str("matrices.kdl", &text).unwrap();
        let model = topology.model("cost").unwrap();
        let canonical = super::model(model);
        assert!(
            canonical.contains("    matrix \"tariff\" rows=24 cols=7 from=\"mapping:tariffs\"\n"),
            "{canonical}"
        );
        let start = text.find("\nmodel cost").unwrap() + 1;
        let again = format!("{}{canonical}", &text[..start]);
        let topology2 = crate::load_str("again.kdl", &again).unwrap();
        let model2 = topology2.model("cost").unwrap();
        assert_eq!(super::model(model2), canonical);
        assert!(canonical.contains(" apply=\"on-receipt\"\n"), "{canonical}");
        // `version=` is a transition, not content: everything else reads back.
        let unpinned: Vec<crate::Item> = model
            .items
            .iter()
            .cloned()
            .map(|item| match item {
                crate::Item::Matrix(m) => {
                    crate::Item::Matrix(crate::MatrixItem { version: None, ..m })
                }
                other => other,
            })
            .collect();
        assert_eq!(model2.items, unpinned);
    }

    #[test]
    fn quoting_escapes() {
        assert_eq!(super::quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
    }
}
