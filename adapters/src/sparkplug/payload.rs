//! Sparkplug B payloads (adapters/proto/sparkplug_b.proto, compiled by build.rs):
//! decoding what an edge node publishes, encoding the rebirth command, and reading a
//! metric's value by its declared datatype.

use prost::Message;

use crate::Raw;

#[allow(clippy::all, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/org.eclipse.tahu.protobuf.rs"));
}

pub use generated::DataType;
pub use generated::Payload;
pub use generated::payload::Metric;
pub use generated::payload::metric::Value;

/// The node command metric that asks an edge node to publish its births again.
pub const REBIRTH_METRIC: &str = "Node Control/Rebirth";
/// The NBIRTH/NDEATH metric that names the node's MQTT session.
pub const BDSEQ_METRIC: &str = "bdSeq";

/// Decodes one payload as published.
pub fn decode(bytes: &[u8]) -> Result<Payload, prost::DecodeError> {
    Payload::decode(bytes)
}

/// Encodes one payload for publication.
pub fn encode(payload: &Payload) -> Vec<u8> {
    payload.encode_to_vec()
}

/// The NCMD payload asking for a rebirth: `Node Control/Rebirth`, Boolean, true.
pub fn rebirth(timestamp_ms: u64) -> Vec<u8> {
    encode(&Payload {
        timestamp: Some(timestamp_ms),
        metrics: vec![Metric {
            name: Some(REBIRTH_METRIC.to_owned()),
            timestamp: Some(timestamp_ms),
            datatype: Some(DataType::Boolean as u32),
            value: Some(Value::BooleanValue(true)),
            ..Metric::default()
        }],
        ..Payload::default()
    })
}

/// The `bdSeq` metric's value in an NBIRTH or NDEATH, if it carries one.
pub fn bdseq(payload: &Payload) -> Option<u64> {
    payload
        .metrics
        .iter()
        .find(|m| m.name.as_deref() == Some(BDSEQ_METRIC))
        .and_then(|m| match m.value {
            Some(Value::LongValue(v)) => Some(v),
            Some(Value::IntValue(v)) => Some(u64::from(v)),
            _ => None,
        })
}

impl DataType {
    /// The datatype of a code as published (`Unknown` for a code the specification
    /// does not define).
    pub fn from_code(code: u32) -> DataType {
        i32::try_from(code)
            .ok()
            .and_then(|c| DataType::try_from(c).ok())
            .unwrap_or(DataType::Unknown)
    }

    /// The specification's name (`Int8`, `UUID`, `DoubleArray`, …).
    pub fn name(self) -> &'static str {
        self.as_str_name()
    }

    /// Whether a metric of this datatype is one number Grid may capture: the integers,
    /// Float, Double and Boolean (0/1). Everything else (String, Text, DateTime, UUID,
    /// DataSet, Bytes, File, Template, property sets, arrays, Unknown) is refused.
    pub fn is_numeric(self) -> bool {
        use DataType::*;
        matches!(
            self,
            Int8 | Int16
                | Int32
                | Int64
                | UInt8
                | UInt16
                | UInt32
                | UInt64
                | Float
                | Double
                | Boolean
        )
    }

    /// Width in bits of an integer datatype.
    fn integer_bits(self) -> Option<(u32, bool)> {
        use DataType::*;
        match self {
            Int8 => Some((8, true)),
            Int16 => Some((16, true)),
            Int32 => Some((32, true)),
            Int64 => Some((64, true)),
            UInt8 => Some((8, false)),
            UInt16 => Some((16, false)),
            UInt32 => Some((32, false)),
            UInt64 => Some((64, false)),
            _ => None,
        }
    }
}

/// A numeric metric's value as published and as the number it means, read by its
/// declared `datatype` (the birth's). Signed integers are two's complement in the low
/// bits of `int_value` (Int8, Int16, Int32) or `long_value` (Int64), as the
/// specification says; either field is accepted for every integer width, since
/// encoders differ (Eclipse Tahu's Java encoder puts UInt32 in `long_value`).
/// Err: the reason the value cannot be read (no value of that kind).
pub fn numeric(datatype: DataType, value: Option<&Value>) -> Result<(Raw, f64), String> {
    let missing = || format!("no {} value in the metric", datatype.name());
    if let Some((bits, signed)) = datatype.integer_bits() {
        let word = match value {
            Some(Value::IntValue(v)) => u64::from(*v),
            Some(Value::LongValue(v)) => *v,
            _ => return Err(missing()),
        };
        let shift = 64 - bits;
        // Lossy conversions to f64 are the value's meaning beyond 2^53: documented.
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_wrap)]
        return Ok(if signed {
            let v = ((word << shift) as i64) >> shift;
            (Raw::Int(v), v as f64)
        } else {
            let v = (word << shift) >> shift;
            (Raw::UInt(v), v as f64)
        });
    }
    match (datatype, value) {
        (DataType::Float | DataType::Double, Some(Value::FloatValue(v))) => {
            Ok((Raw::Float(f64::from(*v)), f64::from(*v)))
        }
        (DataType::Float | DataType::Double, Some(Value::DoubleValue(v))) => {
            Ok((Raw::Float(*v), *v))
        }
        (DataType::Boolean, Some(Value::BooleanValue(b))) => {
            Ok((Raw::Bool(*b), if *b { 1.0 } else { 0.0 }))
        }
        _ => Err(missing()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rebirth_command_round_trips_through_the_generated_types() {
        let p = decode(&rebirth(1_700_000_000_000)).unwrap();
        assert_eq!(p.timestamp, Some(1_700_000_000_000));
        assert_eq!(p.metrics.len(), 1);
        let m = &p.metrics[0];
        assert_eq!(m.name.as_deref(), Some(REBIRTH_METRIC));
        assert_eq!(m.datatype, Some(11));
        assert_eq!(m.value, Some(Value::BooleanValue(true)));
    }

    #[test]
    fn field_numbers_are_the_specifications() {
        // Metric { name = 1: "a", alias = 2: 5, datatype = 4: 10, double_value = 13: 1.5 }
        // inside Payload { metrics = 2, seq = 3: 7 }, hand-encoded in field order.
        let metric = [
            0x0a, 0x01, b'a', // 1: "a"
            0x10, 0x05, // 2: 5
            0x20, 0x0a, // 4: 10
            0x69, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, // 13: 1.5 (fixed64)
        ];
        let mut bytes = vec![0x12, metric.len() as u8];
        bytes.extend_from_slice(&metric);
        bytes.extend_from_slice(&[0x18, 0x07]); // 3: 7
        let p = decode(&bytes).unwrap();
        assert_eq!(p.seq, Some(7));
        let m = &p.metrics[0];
        assert_eq!(
            (m.name.as_deref(), m.alias, m.datatype),
            (Some("a"), Some(5), Some(10))
        );
        assert_eq!(m.value, Some(Value::DoubleValue(1.5)));
        assert_eq!(encode(&p), bytes);
    }

    #[test]
    fn datatype_codes_have_the_specifications_names() {
        let names: Vec<_> = (0..=34).map(|c| DataType::from_code(c).name()).collect();
        assert_eq!(names[1], "Int8");
        assert_eq!(names[8], "UInt64");
        assert_eq!(names[11], "Boolean");
        assert_eq!(names[12], "String");
        assert_eq!(names[15], "UUID");
        assert_eq!(names[19], "Template");
        assert_eq!(names[21], "PropertySetList");
        assert_eq!(names[34], "DateTimeArray");
        assert_eq!(DataType::from_code(99), DataType::Unknown);
        let numeric: Vec<_> = (0..=34)
            .filter(|c| DataType::from_code(*c).is_numeric())
            .collect();
        assert_eq!(numeric, (1..=11).collect::<Vec<_>>());
    }

    #[test]
    fn signed_integers_are_twos_complement_in_the_low_bits() {
        use DataType::*;
        let int = |t, v: u32| numeric(t, Some(&Value::IntValue(v))).unwrap();
        assert_eq!(int(Int8, 0xff), (Raw::Int(-1), -1.0));
        assert_eq!(int(Int8, 0xffff_ff80), (Raw::Int(-128), -128.0)); // sign-extended
        assert_eq!(int(Int8, 0x7f), (Raw::Int(127), 127.0));
        assert_eq!(int(Int16, 0x8000), (Raw::Int(-32768), -32768.0));
        assert_eq!(int(Int32, u32::MAX), (Raw::Int(-1), -1.0));
        assert_eq!(int(UInt8, 200), (Raw::UInt(200), 200.0));
        assert_eq!(
            int(UInt32, u32::MAX),
            (Raw::UInt(4_294_967_295), 4_294_967_295.0)
        );
        let long = |t, v: u64| numeric(t, Some(&Value::LongValue(v))).unwrap();
        assert_eq!(long(Int64, u64::MAX - 1), (Raw::Int(-2), -2.0));
        assert_eq!(
            long(UInt64, 1 << 40),
            (Raw::UInt(1 << 40), (1u64 << 40) as f64)
        );
        assert_eq!(long(UInt32, 7), (Raw::UInt(7), 7.0));
    }

    #[test]
    fn floats_and_booleans_read_their_own_fields() {
        use DataType::*;
        assert_eq!(
            numeric(Float, Some(&Value::FloatValue(2.5))).unwrap(),
            (Raw::Float(2.5), 2.5)
        );
        assert_eq!(
            numeric(Double, Some(&Value::DoubleValue(-0.25))).unwrap(),
            (Raw::Float(-0.25), -0.25)
        );
        assert_eq!(
            numeric(Boolean, Some(&Value::BooleanValue(true))).unwrap(),
            (Raw::Bool(true), 1.0)
        );
        assert_eq!(
            numeric(Double, Some(&Value::StringValue("x".into()))).unwrap_err(),
            "no Double value in the metric"
        );
        assert_eq!(
            numeric(Int32, None).unwrap_err(),
            "no Int32 value in the metric"
        );
        assert_eq!(
            numeric(Boolean, Some(&Value::IntValue(1))).unwrap_err(),
            "no Boolean value in the metric"
        );
    }

    #[test]
    fn bdseq_is_read_from_its_metric() {
        let p = Payload {
            metrics: vec![Metric {
                name: Some(BDSEQ_METRIC.into()),
                datatype: Some(DataType::Int64 as u32),
                value: Some(Value::LongValue(3)),
                ..Metric::default()
            }],
            ..Payload::default()
        };
        assert_eq!(bdseq(&p), Some(3));
        assert_eq!(bdseq(&Payload::default()), None);
    }
}
