//! What an OPC UA DataValue means for a tag (pure: no IO, no clock).
//!
//! - A node's DataType is numeric when it is one of OPC UA's built-in numeric types
//!   (Boolean, SByte … UInt64, Float, Double); anything else is refused before capture.
//! - StatusCode Good with a finite number is good; Uncertain* and Bad* are debt with the
//!   status code's name (`BadSensorFailure`); a Good value that is not a finite number
//!   (NaN, ±∞, an empty or non-numeric variant) is debt too.
//! - The device time is the source timestamp, else the server timestamp.

use opcua::types::{DataTypeId, DataValue, DateTime, NodeId, StatusCode, Variant, VariantTypeId};

use crate::{Quality, Raw, Reading};

/// Whether a node of DataType `data_type` can be captured: `Err("not numeric: …")`
/// names the type otherwise.
pub fn admit(data_type: &NodeId) -> Result<(), String> {
    match numeric_type(data_type) {
        Some(_) => Ok(()),
        None => Err(format!("not numeric: {}", type_name(data_type))),
    }
}

/// The built-in numeric type `data_type` is, if it is one.
fn numeric_type(data_type: &NodeId) -> Option<DataTypeId> {
    let id = data_type.as_data_type_id().ok()?;
    matches!(
        id,
        DataTypeId::Boolean
            | DataTypeId::SByte
            | DataTypeId::Byte
            | DataTypeId::Int16
            | DataTypeId::UInt16
            | DataTypeId::Int32
            | DataTypeId::UInt32
            | DataTypeId::Int64
            | DataTypeId::UInt64
            | DataTypeId::Float
            | DataTypeId::Double
    )
    .then_some(id)
}

/// A DataType's name (`String`, `DateTime`) when it is a standard one, else its node id.
fn type_name(data_type: &NodeId) -> String {
    match data_type.as_data_type_id() {
        Ok(id) => format!("{id:?}"),
        Err(_) => data_type.to_string(),
    }
}

/// The reading one data change of the tag's monitored item is.
pub fn reading(value: &DataValue, received_ms: u64) -> Reading {
    let device_time_ms = value
        .source_timestamp
        .as_ref()
        .or(value.server_timestamp.as_ref())
        .and_then(unix_ms);
    let status = value.status.unwrap_or(StatusCode::Good);
    let raw = value.value.as_ref().map_or(Raw::None, raw);
    let quality = if !status.is_good() {
        Quality::Debt {
            reason: status.sub_code().name().to_owned(),
        }
    } else {
        match (&raw, value.value.as_ref()) {
            (Raw::Bool(b), _) => Quality::Good {
                value: f64::from(u8::from(*b)),
            },
            (Raw::Int(i), _) => good(*i as f64),
            (Raw::UInt(u), _) => good(*u as f64),
            (Raw::Float(f), _) => good(*f),
            (_, None | Some(Variant::Empty)) => Quality::Debt {
                reason: "no value".to_owned(),
            },
            (_, Some(other)) => Quality::Debt {
                reason: format!("not numeric: {}", variant_name(other)),
            },
        }
    };
    Reading {
        raw,
        quality,
        device_time_ms,
        received_ms,
    }
}

/// `String`, `an array of Double`.
fn variant_name(variant: &Variant) -> String {
    match variant.type_id() {
        VariantTypeId::Empty => "empty".to_owned(),
        VariantTypeId::Scalar(scalar) => format!("{scalar:?}"),
        VariantTypeId::Array(scalar, _) => format!("an array of {scalar:?}"),
    }
}

fn good(value: f64) -> Quality {
    if value.is_finite() {
        Quality::Good { value }
    } else {
        Quality::Debt {
            reason: format!("not finite: {value}"),
        }
    }
}

/// What the server sent, before it became a number.
fn raw(variant: &Variant) -> Raw {
    match variant {
        Variant::Boolean(b) => Raw::Bool(*b),
        Variant::SByte(v) => Raw::Int(i64::from(*v)),
        Variant::Int16(v) => Raw::Int(i64::from(*v)),
        Variant::Int32(v) => Raw::Int(i64::from(*v)),
        Variant::Int64(v) => Raw::Int(*v),
        Variant::Byte(v) => Raw::UInt(u64::from(*v)),
        Variant::UInt16(v) => Raw::UInt(u64::from(*v)),
        Variant::UInt32(v) => Raw::UInt(u64::from(*v)),
        Variant::UInt64(v) => Raw::UInt(*v),
        Variant::Float(v) => Raw::Float(f64::from(*v)),
        Variant::Double(v) => Raw::Float(*v),
        _ => Raw::None,
    }
}

fn unix_ms(time: &DateTime) -> Option<u64> {
    u64::try_from(time.as_chrono().timestamp_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(variant: Variant, status: StatusCode) -> DataValue {
        DataValue {
            value: Some(variant),
            status: Some(status),
            source_timestamp: Some(DateTime::from(
                1_700_000_000_123i64 * 10_000 + 116_444_736_000_000_000,
            )),
            ..DataValue::default()
        }
    }

    #[test]
    fn numeric_types_are_admitted_and_others_refused_by_name() {
        for id in [
            DataTypeId::Boolean,
            DataTypeId::Int32,
            DataTypeId::UInt64,
            DataTypeId::Double,
        ] {
            assert_eq!(admit(&id.into()), Ok(()));
        }
        assert_eq!(
            admit(&DataTypeId::String.into()),
            Err("not numeric: String".to_owned())
        );
        assert_eq!(
            admit(&DataTypeId::DateTime.into()),
            Err("not numeric: DateTime".to_owned())
        );
        assert_eq!(
            admit(&NodeId::new(2, 3001u32)),
            Err("not numeric: ns=2;i=3001".to_owned())
        );
    }

    #[test]
    fn good_finite_values_are_good_and_everything_else_debt() {
        let r = reading(&value(Variant::Double(2.5), StatusCode::Good), 7);
        assert_eq!(r.quality, Quality::Good { value: 2.5 });
        assert_eq!(r.raw, Raw::Float(2.5));
        assert_eq!(r.device_time_ms, Some(1_700_000_000_123));
        assert_eq!(r.received_ms, 7);
        let r = reading(&value(Variant::Boolean(true), StatusCode::Good), 7);
        assert_eq!(
            (r.raw, r.quality),
            (Raw::Bool(true), Quality::Good { value: 1.0 })
        );
        let r = reading(&value(Variant::Int32(-4), StatusCode::Good), 7);
        assert_eq!(
            (r.raw, r.quality),
            (Raw::Int(-4), Quality::Good { value: -4.0 })
        );
        let r = reading(&value(Variant::Double(f64::NAN), StatusCode::Good), 7);
        assert_eq!(
            r.quality,
            Quality::Debt {
                reason: "not finite: NaN".into()
            }
        );
        let r = reading(&value(Variant::Float(f32::INFINITY), StatusCode::Good), 7);
        assert_eq!(
            r.quality,
            Quality::Debt {
                reason: "not finite: inf".into()
            }
        );
        let r = reading(
            &value(Variant::Double(1.0), StatusCode::BadSensorFailure),
            7,
        );
        assert_eq!(
            r.quality,
            Quality::Debt {
                reason: "BadSensorFailure".into()
            }
        );
        let r = reading(
            &value(Variant::Double(1.0), StatusCode::UncertainLastUsableValue),
            7,
        );
        assert_eq!(
            r.quality,
            Quality::Debt {
                reason: "UncertainLastUsableValue".into()
            }
        );
        let r = reading(&value(Variant::from("x"), StatusCode::Good), 7);
        assert_eq!(
            r.quality,
            Quality::Debt {
                reason: "not numeric: String".into()
            }
        );
        let empty = DataValue {
            status: Some(StatusCode::BadWaitingForInitialData),
            server_timestamp: Some(DateTime::from(116_444_736_000_000_000i64 + 10_000)),
            ..DataValue::default()
        };
        let r = reading(&empty, 7);
        assert_eq!(r.raw, Raw::None);
        assert_eq!(r.device_time_ms, Some(1));
        assert_eq!(
            r.quality,
            Quality::Debt {
                reason: "BadWaitingForInitialData".into()
            }
        );
    }
}
