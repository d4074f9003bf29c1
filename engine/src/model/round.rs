//! `ROUND(x, digits)`: half away from zero, in decimal, as the user reads the number.
//!
//! Naive `(x * 10^d).round() / 10^d` gets `ROUND(2.675, 2)` wrong (2.675 is stored as
//! 2.67499999…). Grid rounds the *shortest round-trip decimal representation* of `x`
//! — the digits Rust prints, and the digits the user typed — so `ROUND(2.675, 2)` is
//! 2.68 and `ROUND(0.285, 2)` is 0.29, then converts the rounded decimal back to the
//! nearest `f64`.

use std::fmt::Write;

use grid_spec::limits::ROUND_DIGITS_MAX;

use super::value::NUM;

/// `ROUND(x, digits)` on encoded values: an error operand (left first) propagates;
/// `digits` is truncated toward zero; `|digits| > ROUND_DIGITS_MAX` is `#NUM!`.
pub(crate) fn round(x: f64, digits: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if digits.is_nan() {
        return digits;
    }
    let digits = digits.trunc();
    if digits.abs() > f64::from(ROUND_DIGITS_MAX) {
        return NUM;
    }
    round_decimal(x, digits as i32)
}

/// A fixed buffer `format!` can write into without allocating.
struct Buffer {
    bytes: [u8; 40],
    len: usize,
}

impl Write for Buffer {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(std::fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// 2^53: every integer up to it is exact in an `f64`.
const EXACT_INTEGER_BOUND: u64 = 1 << 53;

fn round_decimal(x: f64, digits: i32) -> f64 {
    // `{:e}` prints the shortest round-trip digits: `2.675e0`, `-2.5e0`, `1.2345e3`.
    let mut buffer = Buffer {
        bytes: [0; 40],
        len: 0,
    };
    if write!(buffer, "{:e}", x.abs()).is_err() {
        return x;
    }
    let text = &buffer.bytes[..buffer.len];
    let Some(e_at) = text.iter().position(|&c| c == b'e') else {
        return x;
    };
    let Some(exponent) = std::str::from_utf8(&text[e_at + 1..])
        .ok()
        .and_then(|e| e.parse::<i32>().ok())
    else {
        return x;
    };
    // Mantissa digits d1 d2 … dn of d1.d2…dn × 10^exponent; digit i (from 1) has the
    // place value 10^(exponent - i + 1). ROUND keeps the digits whose place value is at
    // least 10^-digits: the first `keep` of them.
    let mut mantissa = [0u8; 20];
    let mut n = 0;
    for &c in &text[..e_at] {
        if c.is_ascii_digit() {
            mantissa[n] = c - b'0';
            n += 1;
        }
    }
    let keep = exponent + digits + 1;
    if keep >= n as i32 {
        return x; // Nothing beyond the kept place: already round.
    }
    let mut kept: u64 = 0;
    for &d in &mantissa[..keep.max(0) as usize] {
        kept = kept * 10 + u64::from(d);
    }
    // Half away from zero on the magnitude: the first dropped digit decides.
    if keep >= 0 && mantissa[keep as usize] >= 5 {
        kept += 1;
    }
    if kept == 0 {
        return 0.0;
    }
    // The result is kept × 10^-digits; one correctly rounded operation on exact
    // operands gives the nearest f64, like parsing the decimal text would.
    let magnitude = if kept <= EXACT_INTEGER_BOUND {
        let kept = kept as f64;
        let scale = 10f64.powi(digits.abs()); // exact: 10^15 < 2^53
        if digits >= 0 {
            kept / scale
        } else {
            kept * scale
        }
    } else {
        let mut buffer = Buffer {
            bytes: [0; 40],
            len: 0,
        };
        if write!(buffer, "{kept}e{}", -digits).is_err() {
            return x;
        }
        match std::str::from_utf8(&buffer.bytes[..buffer.len])
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
        {
            Some(m) => m,
            None => return x,
        }
    };
    if x < 0.0 { -magnitude } else { magnitude }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::value::{DIV_ZERO, decode};
    use crate::model::{ErrorValue, Value};

    fn r(x: f64, d: f64) -> f64 {
        round(x, d)
    }

    #[test]
    fn half_away_from_zero_in_decimal() {
        let cases: [(f64, f64, f64); 31] = [
            (2.675, 2.0, 2.68),
            (-2.5, 0.0, -3.0),
            (2.5, 0.0, 3.0),
            (1234.5, -2.0, 1200.0),
            (1250.0, -2.0, 1300.0),
            (-1250.0, -2.0, -1300.0),
            (0.285, 2.0, 0.29),
            (1.005, 2.0, 1.01),
            (-1.005, 2.0, -1.01),
            (0.1 + 0.2, 1.0, 0.3),
            (0.1 + 0.2, 15.0, 0.3),
            (9.995, 2.0, 10.0),
            (99.5, 0.0, 100.0),
            (0.4, 0.0, 0.0),
            (0.5, 0.0, 1.0),
            (0.05, 1.0, 0.1),
            (0.0049, 2.0, 0.0),
            (0.005, 2.0, 0.01),
            (123.456, 1.9, 123.5), // digits truncate toward zero
            (123.456, -1.9, 120.0),
            (123.456, 5.0, 123.456),
            (0.0, 3.0, 0.0),
            (0.0, -3.0, 0.0),
            (4.0, -1.0, 0.0),
            (5.0, -1.0, 10.0),
            (499.0, -3.0, 0.0),
            (500.0, -3.0, 1000.0),
            (1e300, 2.0, 1e300),
            (1.5e-10, 10.0, 2e-10),
            (12345678901234567.0, -15.0, 1.2e16),
            (0.123_456_789_012_345_68, 15.0, 0.123456789012346),
        ];
        for (x, d, expected) in cases {
            let got = r(x, d);
            assert_eq!(
                got.to_bits(),
                expected.to_bits(),
                "ROUND({x}, {d}) = {got}, expected {expected}"
            );
        }
        // Rounding a negative number to zero gives 0, not -0.
        assert_eq!(r(-0.4, 0.0).to_bits(), 0.0f64.to_bits());
    }

    #[test]
    fn digits_limit_and_errors() {
        assert_eq!(decode(r(1.0, 16.0)), Value::Error(ErrorValue::Num));
        assert_eq!(decode(r(1.0, -16.0)), Value::Error(ErrorValue::Num));
        assert_eq!(decode(r(1.0, 15.99)), Value::Number(1.0));
        assert_eq!(decode(r(1.0, 1e300)), Value::Error(ErrorValue::Num));
        assert_eq!(decode(r(DIV_ZERO, 2.0)), Value::Error(ErrorValue::DivZero));
        assert_eq!(decode(r(1.0, DIV_ZERO)), Value::Error(ErrorValue::DivZero));
        assert_eq!(decode(r(DIV_ZERO, NUM)), Value::Error(ErrorValue::DivZero));
    }
}
