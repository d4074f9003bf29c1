//! One SPN's value out of its message's bytes (J1939-71 §5.1.3): `raw × resolution +
//! offset`, unless the raw value is in the "error indicator" or "not available" range
//! of its length.

use grid_spec::j1939::Spn;

use crate::{Quality, Raw};

/// What the bytes say about `row`: the raw number and its quality.
pub fn decode(row: &Spn, data: &[u8]) -> (Raw, Quality) {
    let first = usize::from(row.start_byte - 1) * 8 + usize::from(row.start_bit - 1);
    let bits = usize::from(row.bits);
    if first + bits > data.len() * 8 {
        let debt = Quality::Debt {
            reason: format!(
                "message too short: SPN {} needs {} bytes, the message has {}",
                row.spn,
                (first + bits).div_ceil(8),
                data.len()
            ),
        };
        return (Raw::None, debt);
    }
    let mut raw = 0u64;
    for bit in 0..bits {
        let at = first + bit;
        if data[at / 8] >> (at % 8) & 1 == 1 {
            raw |= 1 << bit;
        }
    }
    let quality = match range(raw, row.bits) {
        Range::Valid => Quality::Good {
            value: raw as f64 * row.resolution + row.offset,
        },
        Range::Reserved => Quality::Debt {
            reason: "outside the valid range".to_owned(),
        },
        Range::Error => Quality::Debt {
            reason: "error indicator".to_owned(),
        },
        Range::NotAvailable => Quality::Debt {
            reason: "not available".to_owned(),
        },
    };
    (Raw::UInt(raw), quality)
}

#[derive(Debug, PartialEq, Eq)]
enum Range {
    Valid,
    Reserved,
    Error,
    NotAvailable,
}

/// J1939-71's ranges: a parameter of whole bytes is valid up to 0xFA in its most
/// significant byte (0x00–0xFA, 0x0000–0xFAFF, 0x00000000–0xFAFFFFFF), 0xFB–0xFD there
/// is reserved, 0xFE an error indicator, 0xFF not available; a parameter of fewer
/// than 8 bits is not available when all ones and an error indicator one below.
fn range(raw: u64, bits: u8) -> Range {
    if bits < 8 {
        let ones = (1u64 << bits) - 1;
        return match raw {
            r if r == ones => Range::NotAvailable,
            r if bits >= 2 && r == ones - 1 => Range::Error,
            _ => Range::Valid,
        };
    }
    match raw >> (bits - 8) {
        0xFF => Range::NotAvailable,
        0xFE => Range::Error,
        0xFB..=0xFD => Range::Reserved,
        _ => Range::Valid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grid_spec::j1939::find;

    fn good(pgn: u32, spn: u32, data: &[u8]) -> f64 {
        match decode(find(pgn, spn).unwrap(), data) {
            (_, Quality::Good { value }) => value,
            other => panic!("SPN {spn}: {other:?}"),
        }
    }

    fn debt(pgn: u32, spn: u32, data: &[u8]) -> String {
        match decode(find(pgn, spn).unwrap(), data) {
            (_, Quality::Debt { reason }) => reason,
            other => panic!("SPN {spn}: {other:?}"),
        }
    }

    #[test]
    fn every_spn_decodes_with_its_resolution_and_offset() {
        // Coolant 0x7D = 125 → 85 °C; oil temp 0x2E40 = 11840 × 0.03125 − 273 = 97 °C.
        let et1 = [0x7D, 0xFF, 0x40, 0x2E, 0xFF, 0xFF, 0xFF, 0xFF];
        assert_eq!(good(65262, 110, &et1), 85.0);
        assert_eq!(good(65262, 175, &et1), 97.0);
        // Engine speed bytes 4–5: 0x3E80 = 16000 × 0.125 = 2000 rpm.
        let eec1 = [0xFF, 0xFF, 0xFF, 0x80, 0x3E, 0xFF, 0xFF, 0xFF];
        assert_eq!(good(61444, 190, &eec1), 2000.0);
        // Wheel speed bytes 2–3: 0x5000 = 20480 / 256 = 80 km/h.
        assert_eq!(good(65265, 84, &[0xFF, 0x00, 0x50, 0, 0, 0, 0, 0]), 80.0);
        // Fuel level byte 2: 200 × 0.4 = 80 %.
        assert_eq!(good(65276, 96, &[0xFF, 200, 0, 0, 0, 0, 0, 0]), 80.0);
        // Oil pressure byte 4: 100 × 4 = 400 kPa.
        assert_eq!(
            good(65263, 100, &[0xFF, 0xFF, 0xFF, 100, 0, 0, 0, 0]),
            400.0
        );
        // Engine hours bytes 1–4: 200000 × 0.05 = 10000 h.
        let hours = 200_000u32.to_le_bytes();
        assert_eq!(
            good(
                65253,
                247,
                &[
                    hours[0], hours[1], hours[2], hours[3], 0xFF, 0xFF, 0xFF, 0xFF
                ]
            ),
            10000.0
        );
        // Accelerator pedal byte 2: 125 × 0.4 = 50 %.
        assert_eq!(good(61443, 91, &[0xFF, 125, 0, 0, 0, 0, 0, 0]), 50.0);
        // EC1 (39 bytes): idle speed bytes 1–2 0x1900 = 6400 × 0.125 = 800 rpm; torque
        // at idle byte 3: 135 − 125 = 10 %.
        let mut ec1 = vec![0xFF; 39];
        ec1[..3].copy_from_slice(&[0x00, 0x19, 135]);
        assert_eq!(good(65251, 188, &ec1), 800.0);
        assert_eq!(good(65251, 539, &ec1), 10.0);
    }

    #[test]
    fn not_available_and_error_ranges_are_debt() {
        assert_eq!(debt(65262, 110, &[0xFF; 8]), "not available");
        assert_eq!(
            debt(65262, 110, &[0xFE, 0, 0, 0, 0, 0, 0, 0]),
            "error indicator"
        );
        assert_eq!(
            debt(65262, 110, &[0xFB, 0, 0, 0, 0, 0, 0, 0]),
            "outside the valid range"
        );
        assert_eq!(good(65262, 110, &[0xFA, 0, 0, 0, 0, 0, 0, 0]), 210.0);
        let speed = |lo: u8, hi: u8| [0xFF, 0xFF, 0xFF, lo, hi, 0xFF, 0xFF, 0xFF];
        assert_eq!(debt(61444, 190, &speed(0x00, 0xFF)), "not available");
        assert_eq!(debt(61444, 190, &speed(0x12, 0xFE)), "error indicator");
        assert_eq!(good(61444, 190, &speed(0xFF, 0xFA)), 0xFAFF as f64 * 0.125);
        assert_eq!(
            debt(65253, 247, &[0, 0, 0, 0xFF, 0, 0, 0, 0]),
            "not available"
        );
        assert_eq!(
            debt(65253, 247, &[1, 2, 3, 0xFE, 0, 0, 0, 0]),
            "error indicator"
        );
        // Short parameters: all ones n/a, one below an error.
        assert_eq!(range(0b11, 2), Range::NotAvailable);
        assert_eq!(range(0b10, 2), Range::Error);
        assert_eq!(range(0b01, 2), Range::Valid);
    }

    #[test]
    fn a_short_message_is_debt_naming_what_it_lacks() {
        let reason = debt(61444, 190, &[0xFF, 0xFF, 0xFF, 0x80]);
        assert_eq!(
            reason,
            "message too short: SPN 190 needs 5 bytes, the message has 4"
        );
    }
}
