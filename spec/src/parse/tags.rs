//! `tag` nodes and their sources (`simulate`, `modbus`).

use super::*;

impl FileReader<'_> {
    pub(super) fn tag(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "tag");
        let label = format!("tag `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let host = self.host_ref(&mut n, "host", &label);
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
                    let (endpoint, _) = c.string_arg(self, 0, "endpoint")?;
                    let (node, _) = c.string_prop(self, "node", true)?;
                    Some(TagSource::OpcUa { endpoint, node })
                })(),
                "sparkplug" => (|| {
                    let broker = c.string_arg(self, 0, "broker");
                    let group = c.string_prop(self, "group", true);
                    let node = c.string_prop(self, "node", true);
                    let device = c.string_prop(self, "device", false).map(|d| d.0);
                    let metric = c.string_prop(self, "metric", true);
                    let client_id = c.string_prop(self, "client-id", false).map(|d| d.0);
                    let ca = c.string_prop(self, "ca", false).map(|d| d.0);
                    let membership = c.string_prop(self, "membership", false).map(|d| d.0);
                    Some(TagSource::Sparkplug {
                        broker: broker?.0,
                        group: group?.0,
                        node: node?.0,
                        device,
                        metric: metric?.0,
                        client_id,
                        ca,
                        membership,
                    })
                })(),
                "bacnet" => (|| {
                    let address = c.string_arg(self, 0, "address");
                    let device = c.int_prop(self, "device", true, 0, 4_194_303);
                    let object = c.string_prop(self, "object", true);
                    Some(TagSource::Bacnet {
                        address: address?.0,
                        device: device?.0 as u32,
                        object: object?.0,
                    })
                })(),
                "simulate" => self.simulate(&mut c),
                "j1939" => (|| {
                    let source = c.string_arg(self, 0, "candump log or interface");
                    let pgn = c.int_prop(self, "pgn", true, 0, 0x3FFFF);
                    let spn = c.int_prop(self, "spn", true, 0, 0x7FFFF);
                    Some(TagSource::J1939 {
                        source: source?.0,
                        pgn: pgn?.0 as u32,
                        spn: spn?.0 as u32,
                    })
                })(),
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

    pub(super) fn modbus(&mut self, c: &mut NodeReader) -> Option<TagSource> {
        let address = c.string_arg(self, 0, "address");
        let unit = c.int_prop(self, "unit", true, 0, 255);
        let register = c.string_prop(self, "register", true).and_then(|(r, span)| {
            Some(match r.as_str() {
                "holding" => ModbusRegister::Holding,
                "input" => ModbusRegister::Input,
                "coil" => ModbusRegister::Coil,
                "discrete" => ModbusRegister::Discrete,
                other => {
                    self.error(
                        span,
                        format!("unknown Modbus register kind `{other}`"),
                        "not a register kind",
                        "register is holding, input, coil or discrete",
                    );
                    return None;
                }
            })
        });
        let register_address = c.int_prop(self, "address", true, 0, u16::MAX as i128);
        let value_type = c.string_prop(self, "type", true).and_then(|(t, span)| {
            Some(match t.as_str() {
                "u16" => ModbusType::U16,
                "i16" => ModbusType::I16,
                "u32" => ModbusType::U32,
                "i32" => ModbusType::I32,
                "f32" => ModbusType::F32,
                other => {
                    self.error(
                        span,
                        format!("unknown Modbus value type `{other}`"),
                        "not a type",
                        "type is u16, i16, u32, i32 or f32",
                    );
                    return None;
                }
            })
        });
        let scale = c.float_prop(self, "scale").unwrap_or(1.0);
        let offset = c.float_prop(self, "offset").unwrap_or(0.0);
        Some(TagSource::Modbus {
            address: address?.0,
            unit: unit?.0 as u8,
            register: register?,
            register_address: register_address?.0 as u16,
            value_type: value_type?,
            word_order: WordOrder::Big,
            scale,
            offset,
            interval_ms: limits::MODBUS_INTERVAL_MS_DEFAULT,
        })
    }
}
