//! What a BACnet object's properties mean for a reading (pure): its present value, its
//! status flags and its reliability, as a ReadProperty(Multiple) answer or a COV
//! notification carried them.

use bacnet_encoding::primitives::decode_application_value;
use bacnet_types::enums::{AbortReason, ErrorClass, RejectReason, Reliability};
use bacnet_types::error::{Error, RemoteError};
use bacnet_types::primitives::PropertyValue;
use grid_spec::bacnet::BacnetObjectType;

use crate::{Quality, Raw, Reading, now_ms};

/// The four StatusFlags bits (ASHRAE 135 clause 12, BACnetStatusFlags), in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusFlags {
    pub in_alarm: bool,
    pub fault: bool,
    pub overridden: bool,
    pub out_of_service: bool,
}

/// One observation of an object: what its properties said (each `None` when it was
/// not read or not given).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The encoded present value (application-tagged).
    pub present_value: Option<Vec<u8>>,
    pub status_flags: Option<StatusFlags>,
    /// The reliability's name, `no-fault-detected` when all is well.
    pub reliability: Option<String>,
}

/// A constant's name in BACnet's spelling: `OVER_RANGE` → `over-range`.
pub fn bacnet_name(constant: &str) -> String {
    constant.to_ascii_lowercase().replace('_', "-")
}

/// The first application-tagged value of `bytes`.
fn value(bytes: &[u8]) -> Result<PropertyValue, String> {
    decode_application_value(bytes, 0)
        .map(|(v, _)| v)
        .map_err(|e| format!("undecodable: {e}"))
}

/// StatusFlags from its encoded BIT STRING.
pub fn status_flags(bytes: &[u8]) -> Result<StatusFlags, String> {
    match value(bytes)? {
        PropertyValue::BitString { data, .. } => {
            let bit = |i: u8| data.first().is_some_and(|b| b & (0x80 >> i) != 0);
            Ok(StatusFlags {
                in_alarm: bit(0),
                fault: bit(1),
                overridden: bit(2),
                out_of_service: bit(3),
            })
        }
        other => Err(format!("status-flags is not a bit string: {other:?}")),
    }
}

/// Reliability's name from its encoded ENUMERATED.
pub fn reliability(bytes: &[u8]) -> Result<String, String> {
    match value(bytes)? {
        PropertyValue::Enumerated(raw) => Ok(Reliability::from_raw(raw)
            .name()
            .map_or_else(|| raw.to_string(), bacnet_name)),
        other => Err(format!("reliability is not enumerated: {other:?}")),
    }
}

/// What a present value is as a number: binary objects active = 1, inactive = 0;
/// multi-state objects their state; analog objects their REAL.
fn present_value(object_type: BacnetObjectType, bytes: &[u8]) -> (Raw, Result<f64, String>) {
    match value(bytes) {
        Ok(PropertyValue::Real(f)) => (Raw::Float(f64::from(f)), Ok(f64::from(f))),
        Ok(PropertyValue::Double(f)) => (Raw::Float(f), Ok(f)),
        Ok(PropertyValue::Enumerated(v)) if object_type.is_binary() => match v {
            0 | 1 => (Raw::Bool(v == 1), Ok(f64::from(v))),
            other => (
                Raw::UInt(u64::from(other)),
                Err(format!(
                    "binary present value {other} is neither inactive nor active"
                )),
            ),
        },
        Ok(PropertyValue::Boolean(b)) => (Raw::Bool(b), Ok(if b { 1.0 } else { 0.0 })),
        Ok(PropertyValue::Unsigned(u)) => (Raw::UInt(u), Ok(u as f64)),
        Ok(PropertyValue::Signed(i)) => (Raw::Int(i64::from(i)), Ok(f64::from(i))),
        Ok(PropertyValue::Enumerated(v)) => (Raw::UInt(u64::from(v)), Ok(f64::from(v))),
        Ok(PropertyValue::Null) => (Raw::None, Err("present value is null".to_owned())),
        Ok(other) => (
            Raw::None,
            Err(format!("present value is not a number: {other:?}")),
        ),
        Err(why) => (Raw::None, Err(format!("present value {why}"))),
    }
}

/// The reading an observation is: debt when the object says it is out of service,
/// unreliable, in fault or in alarm, or its value is not a finite number.
pub fn reading(object_type: BacnetObjectType, observed: &Observed) -> Reading {
    let (raw, value) = match &observed.present_value {
        Some(bytes) => present_value(object_type, bytes),
        None => (Raw::None, Err("no present value".to_owned())),
    };
    let flags = observed.status_flags.unwrap_or_default();
    let unreliable = observed
        .reliability
        .as_deref()
        .filter(|r| *r != "no-fault-detected");
    let quality = if flags.out_of_service {
        debt("out-of-service")
    } else if let Some(name) = unreliable {
        debt(&format!("reliability: {name}"))
    } else if flags.fault {
        debt("fault")
    } else if flags.in_alarm {
        debt("in-alarm")
    } else {
        match value {
            Ok(v) if v.is_finite() => Quality::Good { value: v },
            Ok(v) => debt(&format!("not finite: {v}")),
            Err(why) => debt(&why),
        }
    };
    Reading {
        raw,
        quality,
        device_time_ms: None,
        received_ms: now_ms(),
    }
}

fn debt(reason: &str) -> Quality {
    Quality::Debt {
        reason: reason.to_owned(),
    }
}

/// Whether the device did not answer at all (every retry unanswered: the client's
/// transaction state machine gives up with a local TSM-timeout abort).
pub fn unanswered(error: &Error) -> bool {
    matches!(
        error,
        Error::Timeout(_)
            | Error::Transport(_)
            | Error::Remote(RemoteError::Abort {
                reason: AbortReason::TSM_TIMEOUT
            })
    )
}

/// Whether the device does not provide the service asked for (a Reject
/// `unrecognized-service`, or an Error of class `services`): not a failure of the
/// object, so another service may read it.
pub fn no_such_service(error: &Error) -> bool {
    match error {
        Error::Remote(RemoteError::Reject { reason }) => {
            *reason == RejectReason::UNRECOGNIZED_SERVICE
        }
        Error::Remote(RemoteError::Error { class, .. }) => *class == ErrorClass::SERVICES,
        _ => false,
    }
}

/// A failed request as a debt reason: Error, Reject and Abort PDUs by name, `timeout`.
pub fn failure(error: &Error) -> String {
    match error {
        Error::Timeout(_)
        | Error::Remote(RemoteError::Abort {
            reason: AbortReason::TSM_TIMEOUT,
        }) => "timeout".to_owned(),
        Error::Remote(RemoteError::Error { .. }) | Error::Structured { .. } => {
            let text = error.to_string();
            text.strip_prefix("BACnet ").unwrap_or(&text).to_owned()
        }
        Error::Remote(RemoteError::Reject { reason }) => format!(
            "reject: {}",
            name_or_number(RejectReason::name(*reason), reason.to_raw())
        ),
        Error::Remote(RemoteError::Abort { reason }) => format!(
            "abort: {}",
            name_or_number(AbortReason::name(*reason), reason.to_raw())
        ),
        other => other.to_string(),
    }
}

fn name_or_number(name: Option<&str>, raw: u8) -> String {
    name.map_or_else(|| raw.to_string(), bacnet_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bacnet_types::enums::ErrorCode;
    use std::time::Duration;

    const REAL_21_5: [u8; 5] = [0x44, 0x41, 0xAC, 0x00, 0x00];
    /// BIT STRING, 4 unused bits, in-alarm … out-of-service as given.
    fn flags(bits: u8) -> Vec<u8> {
        vec![0x82, 0x04, bits << 4]
    }

    fn observed(value: &[u8], bits: u8, reliability: &str) -> Observed {
        Observed {
            present_value: Some(value.to_vec()),
            status_flags: Some(status_flags(&flags(bits)).unwrap()),
            reliability: Some(reliability.to_owned()),
        }
    }

    fn quality(o: &Observed, t: BacnetObjectType) -> Quality {
        reading(t, o).quality
    }

    #[test]
    fn a_good_value_is_projected_and_status_is_debt_by_name() {
        let analog = BacnetObjectType::AnalogInput;
        let good = observed(&REAL_21_5, 0, "no-fault-detected");
        assert_eq!(quality(&good, analog), Quality::Good { value: 21.5 });
        assert_eq!(reading(analog, &good).raw, Raw::Float(21.5));
        assert_eq!(
            quality(&observed(&REAL_21_5, 0b1000, "no-fault-detected"), analog),
            debt("in-alarm")
        );
        assert_eq!(
            quality(&observed(&REAL_21_5, 0b0100, "no-fault-detected"), analog),
            debt("fault")
        );
        assert_eq!(
            quality(&observed(&REAL_21_5, 0b0001, "over-range"), analog),
            debt("out-of-service")
        );
        assert_eq!(
            quality(&observed(&REAL_21_5, 0b0100, "over-range"), analog),
            debt("reliability: over-range")
        );
        // Overridden alone is not debt: the value is still the object's.
        assert_eq!(
            quality(&observed(&REAL_21_5, 0b0010, "no-fault-detected"), analog),
            Quality::Good { value: 21.5 }
        );
        // A COV notification carries no reliability: the flags decide.
        let mut cov = observed(&REAL_21_5, 0, "");
        cov.reliability = None;
        assert_eq!(quality(&cov, analog), Quality::Good { value: 21.5 });
    }

    #[test]
    fn binary_values_are_one_and_zero_and_non_finite_values_are_debt() {
        let binary = BacnetObjectType::BinaryInput;
        let active = observed(&[0x91, 0x01], 0, "no-fault-detected");
        assert_eq!(quality(&active, binary), Quality::Good { value: 1.0 });
        assert_eq!(reading(binary, &active).raw, Raw::Bool(true));
        let inactive = observed(&[0x91, 0x00], 0, "no-fault-detected");
        assert_eq!(quality(&inactive, binary), Quality::Good { value: 0.0 });
        let nan = observed(&[0x44, 0x7F, 0xC0, 0x00, 0x00], 0, "no-fault-detected");
        assert!(
            matches!(quality(&nan, BacnetObjectType::AnalogValue), Quality::Debt { reason } if reason == "not finite: NaN")
        );
        let inf = observed(&[0x44, 0xFF, 0x80, 0x00, 0x00], 0, "no-fault-detected");
        assert!(
            matches!(quality(&inf, BacnetObjectType::AnalogValue), Quality::Debt { reason } if reason == "not finite: -inf")
        );
        let state = observed(&[0x21, 0x03], 0, "no-fault-detected");
        assert_eq!(
            quality(&state, BacnetObjectType::MultiStateValue),
            Quality::Good { value: 3.0 }
        );
        assert_eq!(reliability(&[0x91, 0x02]).unwrap(), "over-range");
    }

    #[test]
    fn failures_are_named() {
        assert_eq!(failure(&Error::Timeout(Duration::from_secs(1))), "timeout");
        let unknown = Error::Remote(RemoteError::Error {
            class: ErrorClass::OBJECT,
            code: ErrorCode::UNKNOWN_OBJECT,
        });
        assert_eq!(failure(&unknown), "error: object / unknown-object");
        let reject = Error::Remote(RemoteError::Reject {
            reason: RejectReason::UNRECOGNIZED_SERVICE,
        });
        assert_eq!(failure(&reject), "reject: unrecognized-service");
        assert!(no_such_service(&reject) && !no_such_service(&unknown));
        let abort = Error::Remote(RemoteError::Abort {
            reason: AbortReason::SEGMENTATION_NOT_SUPPORTED,
        });
        assert_eq!(failure(&abort), "abort: segmentation-not-supported");
        let unanswered = Error::Remote(RemoteError::Abort {
            reason: AbortReason::TSM_TIMEOUT,
        });
        assert_eq!(failure(&unanswered), "timeout");
        assert!(super::unanswered(&unanswered) && !super::unanswered(&abort));
    }
}
