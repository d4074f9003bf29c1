//! `tag` nodes and their sources (`simulate`, `modbus`, `sparkplug`, and the shapes of
//! `opcua`, `bacnet`, `j1939`).

use super::*;
use crate::canonical::quote;
use crate::endpoint::{Broker, DeviceAddress, MQTTS_PORT_DEFAULT};

impl FileReader<'_> {
    pub(super) fn tag(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "tag");
        let label = format!("tag `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let host = self.host_ref(&mut n, "host", &label);
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        let mut source: Option<(TagSource, SourceSpan)> = None;
        // A source child that failed to read has its own diagnostics already.
        let mut unreadable = false;
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            let known = matches!(
                child.name().value(),
                "modbus" | "opcua" | "sparkplug" | "bacnet" | "j1939" | "simulate"
            );
            let read = match child.name().value() {
                "modbus" => self.modbus(&mut c),
                "opcua" => (|| {
                    // TODO(issue 17, opcua): every field with its diagnostics.
                    let (endpoint, _) = c.string_arg(self, 0, "endpoint")?;
                    let (node, _) = c.string_prop(self, "node", true)?;
                    c.skip_all();
                    Some(TagSource::OpcUa {
                        endpoint,
                        node,
                        security: OpcUaSecurity::None,
                        policy: None,
                        publishing_ms: 1000,
                        server_certificate: None,
                    })
                })(),
                "sparkplug" => self.sparkplug(&mut c, &label, host.as_deref()),
                "bacnet" => self.bacnet(&mut c),
                "simulate" => self.simulate(&mut c),
                "j1939" => self.j1939(&mut c),
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown tag source `{other}`"),
                        "not a source",
                        "a tag reads from one of: modbus, opcua, sparkplug, bacnet, j1939, simulate",
                    );
                    None
                }
            };
            c.no_children(self);
            c.finish(self);
            unreadable |= known && read.is_none();
            if let Some(read) = read {
                if let Some((_, first)) = &source {
                    let d = Diagnostic::at(
                        &self.file,
                        child.name().span(),
                        "a tag has exactly one source",
                        "second source",
                    )
                    .with_label(*first, "first source")
                    .with_help("declare another tag for another source");
                    self.problems.push(d);
                } else {
                    source = Some((read, child.name().span()));
                }
            }
        }
        n.finish(self);
        let Some((name, span)) = name else { return };
        let Some((source, _)) = source else {
            if unreadable {
                return;
            }
            self.error(
                span,
                format!("tag `{name}` has no source"),
                "needs a source",
                "add one child: modbus, opcua, sparkplug, bacnet, j1939 or simulate",
            );
            return;
        };
        let Some(host) = host else { return };
        let origin = self.origin(span);
        self.parsed.topology.tags.push(Tag {
            name,
            host,
            source,
            retired,
            origin,
        });
    }

    /// `simulate wave=… period-s=N min=X max=Y seed=N [interval-ms=N]`.
    pub(super) fn simulate(&mut self, c: &mut NodeReader) -> Option<TagSource> {
        let wave = c.string_prop(self, "wave", true).and_then(|(w, span)| {
            Wave::from_name(&w).or_else(|| {
                self.error(
                    span,
                    format!("unknown wave `{w}`"),
                    "not a wave",
                    "wave is sine, triangle, square or sawtooth",
                );
                None
            })
        });
        let period = c.int_prop(
            self,
            "period-s",
            true,
            1,
            limits::SIMULATE_PERIOD_S_MAX as i128,
        );
        let number = |this: &mut Self, c: &mut NodeReader, key: &str| {
            let v = c.float_prop(this, key);
            if v.is_none() && c.has_property(key).is_none() {
                c.missing(
                    this,
                    format!("`simulate` needs the property `{key}`"),
                    format!("add {key}=NUMBER, a finite number"),
                );
            }
            v
        };
        let min = number(self, c, "min");
        let max = number(self, c, "max");
        let max_span = c.has_property("max");
        let seed = c.int_prop(self, "seed", true, 0, u64::MAX as i128);
        let interval = match c.int_prop(
            self,
            "interval-ms",
            false,
            limits::SIMULATE_INTERVAL_MS_MIN as i128,
            limits::SIMULATE_INTERVAL_MS_MAX as i128,
        ) {
            Some((i, _)) => Some(i as u32),
            None if c.has_property("interval-ms").is_some() => None,
            None => Some(limits::SIMULATE_INTERVAL_MS_DEFAULT),
        };
        let (min, max) = (min?, max?);
        if min >= max {
            if let Some(span) = max_span {
                self.error(
                    span,
                    format!("`simulate` has min={min} not below max={max}"),
                    "not above min",
                    "a simulated tag ranges from min up to a larger max",
                );
            }
            return None;
        }
        Some(TagSource::Simulate {
            wave: wave?,
            period_s: period?.0 as u32,
            min,
            max,
            seed: seed?.0 as u64,
            interval_ms: interval?,
        })
    }

    /// `modbus "HOST:PORT" unit=N register=holding|input|coil|discrete address=N
    /// type=u16|i16|u32|i32|f32|bool [word-order=big|little] [scale=X] [offset=X]
    /// [interval-ms=N]`.
    pub(super) fn modbus(&mut self, c: &mut NodeReader) -> Option<TagSource> {
        let address = c.string_arg(self, 0, "address").and_then(|(text, span)| {
            match DeviceAddress::parse(&text) {
                Ok(address) => Some(address.to_string()),
                Err(why) => {
                    self.error(
                        span,
                        format!(
                            "the address of `modbus` is {}, not HOST:PORT: {why}",
                            quote(&text)
                        ),
                        "not HOST:PORT",
                        "write the device's HOST:PORT, the port 1 to 65535: \"127.0.0.1:502\", \"plc-7.plant:502\", \"[::1]:502\"",
                    );
                    None
                }
            }
        });
        let unit = c.int_prop(self, "unit", true, 0, u8::MAX as i128);
        let register = c.string_prop(self, "register", true).and_then(|(r, span)| {
            let kind = ModbusRegister::from_name(&r);
            if kind.is_none() {
                self.error(
                    span,
                    format!("unknown Modbus register kind `{r}`"),
                    "not a register kind",
                    "register is holding, input, coil or discrete",
                );
            }
            Some((kind?, span))
        });
        let register_address = c.int_prop(self, "address", true, 0, u16::MAX as i128);
        let value_type = c.string_prop(self, "type", true).and_then(|(t, span)| {
            let value_type = ModbusType::from_name(&t);
            if value_type.is_none() {
                self.error(
                    span,
                    format!("unknown Modbus value type `{t}`"),
                    "not a type",
                    "type is u16, i16, u32, i32, f32 or bool",
                );
            }
            Some((value_type?, span))
        });
        let word_order = match c.string_prop(self, "word-order", false) {
            Some((w, span)) => {
                let order = WordOrder::from_name(&w);
                if order.is_none() {
                    self.error(
                        span,
                        format!("unknown Modbus word order `{w}`"),
                        "not a word order",
                        "word-order is big (the high word at the lower address, the default) or little",
                    );
                }
                Some(Some((order?, span)))
            }
            None if c.has_property("word-order").is_some() => None,
            None => Some(None),
        };
        let scale = number_or(self, c, "scale", 1.0).filter(|&scale| {
            if scale == 0.0
                && let Some(span) = c.has_property("scale")
            {
                self.error(
                    span,
                    "property `scale` of `modbus` is 0",
                    "zero",
                    "value = raw × scale + offset: with scale 0 every reading would be `offset`; leave scale out for 1",
                );
                return false;
            }
            true
        });
        let offset = number_or(self, c, "offset", 0.0);
        let interval = match c.limited_int_prop(
            self,
            "interval-ms",
            false,
            (
                limits::MODBUS_INTERVAL_MS_MIN.into(),
                "MODBUS_INTERVAL_MS_MIN",
            ),
            (
                limits::MODBUS_INTERVAL_MS_MAX.into(),
                "MODBUS_INTERVAL_MS_MAX",
            ),
        ) {
            Some((i, _)) => Some(i as u32),
            None if c.has_property("interval-ms").is_some() => None,
            None => Some(limits::MODBUS_INTERVAL_MS_DEFAULT),
        };
        // What the fields mean together, once each reads on its own.
        let mut fits = true;
        if let (Some((register, register_span)), Some((value_type, type_span))) =
            (register, value_type)
            && register.holds_bits() != (value_type == ModbusType::Bool)
        {
            let holds = if register.holds_bits() {
                "bits"
            } else {
                "16-bit words"
            };
            let d = Diagnostic::at(
                &self.file,
                type_span,
                format!(
                    "a `{}` register holds {holds}: it cannot hold type `{}`",
                    register.name(),
                    value_type.name()
                ),
                "not held by this register",
            )
            .with_label(register_span, "this register kind")
            .with_help(
                "coil and discrete registers take type=bool; holding and input registers take u16, i16, u32, i32 or f32",
            );
            self.problems.push(d);
            fits = false;
        }
        if let (Some((start, span)), Some((value_type, _))) = (register_address, value_type) {
            let registers = i128::from(value_type.registers());
            let last = start + registers - 1;
            if last > i128::from(u16::MAX) {
                self.error(
                    span,
                    format!(
                        "type `{}` at address {start} takes addresses {start} to {last}, beyond the last Modbus address 65535",
                        value_type.name()
                    ),
                    "out of range",
                    &format!(
                        "type {} takes {registers} registers: its address is at most {}",
                        value_type.name(),
                        i128::from(u16::MAX) - registers + 1
                    ),
                );
                fits = false;
            }
        }
        if let (Some(Some((_, span))), Some((value_type, _))) = (word_order, value_type)
            && value_type.registers() == 1
        {
            self.error(
                span,
                format!(
                    "`word-order` is for the two-register types u32, i32 and f32, not `{}`",
                    value_type.name()
                ),
                "one register",
                &format!(
                    "remove word-order: type {} is one register",
                    value_type.name()
                ),
            );
            fits = false;
        }
        let source = TagSource::Modbus {
            address: address?,
            unit: unit?.0 as u8,
            register: register?.0,
            register_address: register_address?.0 as u16,
            value_type: value_type?.0,
            word_order: word_order?.map_or(WordOrder::Big, |(order, _)| order),
            scale: scale?,
            offset: offset?,
            interval_ms: interval?,
        };
        fits.then_some(source)
    }

    /// `sparkplug "mqtt[s]://HOST[:PORT]" group=G node=N [device=D] metric=NAME
    /// [client-id=ID] [ca=PATH] [membership=M]`, read at `host` (when it read).
    pub(super) fn sparkplug(
        &mut self,
        c: &mut NodeReader,
        label: &str,
        host: Option<&str>,
    ) -> Option<TagSource> {
        let broker = c.string_arg(self, 0, "broker URL").and_then(|(text, span)| {
            match Broker::parse(&text) {
                Ok(broker) => Some((broker, span)),
                Err(why) => {
                    self.error(
                        span,
                        format!(
                            "the broker of `sparkplug` is {}, not mqtt://HOST[:PORT] or mqtts://HOST[:PORT]: {why}",
                            quote(&text)
                        ),
                        "not a broker URL",
                        "for example \"mqtts://broker.plant\" (TLS, port 8883 unless given) or \"mqtt://127.0.0.1:1883\" (plain TCP, to a broker on this machine)",
                    );
                    None
                }
            }
        });
        let group = self.topic_level(c, "group", true);
        let node = self.topic_level(c, "node", true);
        let device = self.topic_level(c, "device", false);
        let metric = c.string_prop(self, "metric", true).and_then(|(metric, span)| {
            if metric.is_empty() {
                self.error(
                    span,
                    "property `metric` of `sparkplug` is empty",
                    "empty",
                    "name the metric as the edge node's birth certificate does, for example metric=\"Speed\"",
                );
                return None;
            }
            Some(metric)
        });
        let client_id = self.optional(c, "client-id", |this, id, span| this.client_id(id, span));
        let ca = self.optional(c, "ca", |this, path, span| {
            if path.is_empty() {
                this.error(
                    span,
                    "property `ca` of `sparkplug` is empty",
                    "empty",
                    "name a PEM file of the CA that certifies the broker",
                );
            }
            !path.is_empty()
        });
        let membership = self.optional(c, "membership", |this, name, span| {
            this.parsed.references.push(Reference {
                kind: RefKind::Membership,
                name: name.to_owned(),
                file: this.file.clone(),
                span,
                context: format!("{label} sparkplug `membership`"),
                require: host.map(|h| Requirement::HasMember(h.to_owned())),
            });
            true
        });
        // TLS: mqtts:// needs something to trust; mqtt:// has nothing to configure.
        let mut sound = true;
        if let Some((broker, span)) = &broker {
            let tls_spans = [
                ("ca", c.has_property("ca")),
                ("membership", c.has_property("membership")),
            ];
            if broker.tls && tls_spans.iter().all(|(_, s)| s.is_none()) {
                self.error(
                    *span,
                    format!("`sparkplug` to {broker} (TLS) names nothing to trust the broker by"),
                    "needs ca= or membership=",
                    "add ca=\"PATH\" (a PEM file of the CA that certifies the broker), membership=M (present the host's certificate of M; trust M's authority unless ca is given), or both",
                );
                sound = false;
            }
            if !broker.tls && !broker.host.is_loopback() {
                self.error(
                    *span,
                    format!(
                        "`sparkplug` to {broker} is plain TCP (mqtt://), and `{}` is not a loopback broker",
                        broker.host
                    ),
                    "plain TCP beyond this machine",
                    &format!(
                        "use mqtts://{}:{MQTTS_PORT_DEFAULT} with ca= or membership=: mqtt:// is only for a loopback broker (127.0.0.0/8, ::1, localhost)",
                        broker.host
                    ),
                );
                sound = false;
            }
            for (key, key_span) in tls_spans {
                if let (false, Some(key_span)) = (broker.tls, key_span) {
                    self.error(
                        key_span,
                        format!(
                            "property `{key}` of `sparkplug` configures TLS, which {broker} does not use"
                        ),
                        "no TLS on mqtt://",
                        &format!("use an mqtts:// broker, or remove `{key}`"),
                    );
                    sound = false;
                }
            }
        }
        let source = TagSource::Sparkplug {
            broker: broker?.0.to_string(),
            group: group??,
            node: node??,
            device: device?,
            metric: metric?,
            client_id: client_id?,
            ca: ca?,
            membership: membership?,
        };
        sound.then_some(source)
    }

    /// A string property that may be absent: `Some(None)` when absent, `None` when it
    /// is not a string or `check` refuses it (having reported why).
    pub(super) fn optional(
        &mut self,
        c: &mut NodeReader,
        key: &str,
        check: impl FnOnce(&mut Self, &str, SourceSpan) -> bool,
    ) -> Option<Option<String>> {
        match c.string_prop(self, key, false) {
            Some((value, span)) => check(self, &value, span).then_some(Some(value)),
            None if c.has_property(key).is_some() => None,
            None => Some(None),
        }
    }

    /// A Sparkplug group, node or device id: one MQTT topic level.
    fn topic_level(
        &mut self,
        c: &mut NodeReader,
        key: &str,
        required: bool,
    ) -> Option<Option<String>> {
        if required && c.has_property(key).is_none() {
            c.string_prop(self, key, true); // reports it missing
            return None;
        }
        self.optional(c, key, |this, id, span| {
            let why = if id.is_empty() {
                "is empty".to_owned()
            } else if let Some(bad) = id.chars().find(|c| matches!(c, '/' | '+' | '#')) {
                format!("is {}, which holds `{bad}`", quote(id))
            } else {
                return true;
            };
            this.error(
                span,
                format!("property `{key}` of `sparkplug` {why}"),
                "not one topic level",
                "a Sparkplug group, node or device id is one MQTT topic level (spBv1.0/GROUP/NDATA/NODE/DEVICE): not empty, without `/`, `+` or `#`",
            );
            false
        })
    }

    fn client_id(&mut self, id: &str, span: SourceSpan) -> bool {
        let max = limits::SPARKPLUG_CLIENT_ID_LENGTH_MAX;
        let (message, label) = if id.is_empty() {
            (
                "property `client-id` of `sparkplug` is empty".to_owned(),
                "empty",
            )
        } else if id.len() > max {
            (
                format!(
                    "property `client-id` of `sparkplug` is {} bytes long, above SPARKPLUG_CLIENT_ID_LENGTH_MAX ({max})",
                    id.len()
                ),
                "too long",
            )
        } else if let Some(bad) = id.chars().find(|c| !c.is_ascii_graphic()) {
            let bad = match bad {
                ' ' => "a space".to_owned(),
                other => format!("{other:?}"),
            };
            (
                format!(
                    "property `client-id` of `sparkplug` holds {bad}: a client id is printable ASCII without spaces"
                ),
                "not printable ASCII without spaces",
            )
        } else {
            return true;
        };
        self.error(
            span,
            message,
            label,
            &format!(
                "a client id is 1 to {max} printable ASCII characters without spaces (`!` to `~`); leave it out for grid-HOST-TAG"
            ),
        );
        false
    }
}

/// A finite number property, `default` when absent; `None` when it is not a finite
/// number (reported).
fn number_or(r: &mut FileReader, c: &mut NodeReader, key: &str, default: f64) -> Option<f64> {
    match c.float_prop(r, key) {
        Some(value) => Some(value),
        None if c.has_property(key).is_some() => None,
        None => Some(default),
    }
}
