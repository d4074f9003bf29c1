//! Values of inputs and cells, and their compact internal encoding.

use std::fmt;

/// The value of an input or a cell: a finite number or an error value.
///
/// Numbers are always finite (SPEC §1.7): an operation that would produce NaN or ±∞
/// yields [`ErrorValue::Num`] instead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Number(f64),
    Error(ErrorValue),
}

/// An error value; it travels through every cell that reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorValue {
    /// `#DIV/0!`: a division by zero, or zero raised to a negative power, or the
    /// average of nothing.
    DivZero,
    /// `#NUM!`: a result that is not a finite number (overflow, the square root of a
    /// negative number, a negative number raised to a fractional power) or `ROUND`
    /// with too many digits.
    Num,
    /// `#N/A`: an input that has no value yet (declared without `default` and not
    /// set by any batch), or a matrix no value was applied to yet.
    NotAvailable,
    /// `#REF!`: a matrix read `m[row, col]` whose row or column is not an integer or
    /// lies outside the matrix.
    Ref,
}

impl ErrorValue {
    pub const ALL: [ErrorValue; 4] = [
        ErrorValue::DivZero,
        ErrorValue::Num,
        ErrorValue::NotAvailable,
        ErrorValue::Ref,
    ];

    /// The text users read: `#DIV/0!`, `#NUM!`, `#N/A` or `#REF!`.
    pub fn text(self) -> &'static str {
        match self {
            ErrorValue::DivZero => "#DIV/0!",
            ErrorValue::Num => "#NUM!",
            ErrorValue::NotAvailable => "#N/A",
            ErrorValue::Ref => "#REF!",
        }
    }

    /// The inverse of [`ErrorValue::text`].
    pub fn from_text(text: &str) -> Option<ErrorValue> {
        ErrorValue::ALL.into_iter().find(|e| e.text() == text)
    }
}

impl fmt::Display for ErrorValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl Value {
    /// The number, unless this is an error value.
    pub fn as_number(self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(n),
            Value::Error(_) => None,
        }
    }

    /// The error, unless this is a number.
    pub fn as_error(self) -> Option<ErrorValue> {
        match self {
            Value::Number(_) => None,
            Value::Error(e) => Some(e),
        }
    }

    pub fn is_error(self) -> bool {
        matches!(self, Value::Error(_))
    }

    /// Whether both values are the same error, or numbers with the same bits.
    pub fn identical(self, other: Value) -> bool {
        match (self, other) {
            (Value::Number(a), Value::Number(b)) => a.to_bits() == b.to_bits(),
            (Value::Error(a), Value::Error(b)) => a == b,
            _ => false,
        }
    }
}

impl From<ErrorValue> for Value {
    fn from(error: ErrorValue) -> Value {
        Value::Error(error)
    }
}

/// Prints a number as [`number_text`] does and an error value as its text
/// (`#DIV/0!`).
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Number(n) => f.write_str(&number_text(*n)),
            Value::Error(e) => e.fmt(f),
        }
    }
}

/// A number as people read it, in the fewest digits that read back to the same `f64`
/// (shortest round trip): plain between 1e-5 and 1e16 (`2.68`, `1200`, `-3`, `0.1`),
/// in exponent form outside (`1e308`, `1.5e-7`), never hundreds of digits. Negative
/// zero prints as `0`.
pub fn number_text(n: f64) -> String {
    let magnitude = n.abs();
    if n == 0.0 {
        "0".to_owned()
    } else if (1e-5..1e16).contains(&magnitude) {
        format!("{n}")
    } else {
        format!("{n:e}")
    }
}

// Internally a value is one `f64`: a finite number is itself, and an error value is a
// quiet NaN whose payload names the error. Since numbers are always finite, every NaN
// is an error, and the evaluator's fast path is a single `is_finite` check of each
// result. The sign bit of an error is ignored when decoding.

const QUIET_NAN: u64 = 0x7ff8_0000_0000_0000;
const SIGN: u64 = 0x8000_0000_0000_0000;

pub(crate) const DIV_ZERO: f64 = f64::from_bits(QUIET_NAN | 1);
pub(crate) const NUM: f64 = f64::from_bits(QUIET_NAN | 2);
pub(crate) const NOT_AVAILABLE: f64 = f64::from_bits(QUIET_NAN | 3);
pub(crate) const REF: f64 = f64::from_bits(QUIET_NAN | 4);

/// The encoding of a value.
#[cfg(test)]
pub(crate) fn encode(value: Value) -> f64 {
    match value {
        Value::Number(n) if n.is_finite() => n,
        Value::Number(_) => NUM,
        Value::Error(ErrorValue::DivZero) => DIV_ZERO,
        Value::Error(ErrorValue::Num) => NUM,
        Value::Error(ErrorValue::NotAvailable) => NOT_AVAILABLE,
        Value::Error(ErrorValue::Ref) => REF,
    }
}

/// The value an encoding stands for; any non-finite encoding that is not a known
/// error reads `#NUM!`.
#[inline]
pub(crate) fn decode(raw: f64) -> Value {
    if raw.is_finite() {
        return Value::Number(raw);
    }
    let bits = raw.to_bits() & !SIGN;
    Value::Error(if bits == DIV_ZERO.to_bits() {
        ErrorValue::DivZero
    } else if bits == NOT_AVAILABLE.to_bits() {
        ErrorValue::NotAvailable
    } else if bits == REF.to_bits() {
        ErrorValue::Ref
    } else {
        ErrorValue::Num
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_in_the_fewest_digits_that_read_back() {
        for (n, text) in [
            (0.0, "0"),
            (-0.0, "0"),
            (2.68, "2.68"),
            (1200.0, "1200"),
            (-3.0, "-3"),
            (0.1, "0.1"),
            (1e308, "1e308"),
            (-1.5e-7, "-1.5e-7"),
            (f64::MAX, "1.7976931348623157e308"),
            (9_007_199_254_740_992.0, "9007199254740992"),
            (1e16, "1e16"),
        ] {
            assert_eq!(number_text(n), text, "{n:?}");
        }
        for n in [1e308, 123.456, 1.5e-7, 1e16, 1e-5, f64::MIN_POSITIVE] {
            assert_eq!(number_text(n).parse::<f64>().unwrap(), n);
            assert!(number_text(n).len() <= 24, "{}", number_text(n));
        }
    }

    #[test]
    fn encoding_round_trips() {
        for value in [
            Value::Number(0.0),
            Value::Number(-1.5),
            Value::Number(f64::MAX),
            Value::Error(ErrorValue::DivZero),
            Value::Error(ErrorValue::Num),
            Value::Error(ErrorValue::NotAvailable),
            Value::Error(ErrorValue::Ref),
        ] {
            assert!(decode(encode(value)).identical(value), "{value:?}");
        }
        assert_eq!(decode(f64::INFINITY), Value::Error(ErrorValue::Num));
        assert_eq!(decode(-DIV_ZERO), Value::Error(ErrorValue::DivZero));
    }

    #[test]
    fn display() {
        assert_eq!(Value::Number(2.68).to_string(), "2.68");
        assert_eq!(Value::Number(1200.0).to_string(), "1200");
        assert_eq!(Value::Number(-3.0).to_string(), "-3");
        assert_eq!(Value::Number(-0.0).to_string(), "0");
        assert_eq!(Value::Number(0.1 + 0.2).to_string(), "0.30000000000000004");
        assert_eq!(Value::Error(ErrorValue::DivZero).to_string(), "#DIV/0!");
        assert_eq!(Value::Error(ErrorValue::Num).to_string(), "#NUM!");
        assert_eq!(Value::Error(ErrorValue::NotAvailable).to_string(), "#N/A");
        for e in ErrorValue::ALL {
            assert_eq!(ErrorValue::from_text(e.text()), Some(e));
        }
    }
}
