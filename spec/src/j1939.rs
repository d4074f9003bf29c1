//! The J1939 parameters Grid decodes (docs/sources.md, "CAN/J1939"): one row per SPN,
//! its position as SAE J1939-71 writes it (1-based start byte and bit, little-endian
//! across bytes), its length, resolution, offset and unit.
//!
//! The parser refuses a `j1939` tag whose (PGN, SPN) pair is not a row here; the
//! adapter (`grid_adapters::j1939`) decodes with the same rows, so what parses is what
//! decodes.

/// One suspect parameter: `value = raw × resolution + offset`, in `unit`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spn {
    pub spn: u32,
    pub pgn: u32,
    pub name: &'static str,
    /// The byte the parameter starts in, 1-based.
    pub start_byte: u8,
    /// The bit of that byte it starts at, 1-based (1 is the least significant).
    pub start_bit: u8,
    /// Its length in bits: 8, 16 or 32 for the numeric parameters below.
    pub bits: u8,
    pub resolution: f64,
    pub offset: f64,
    pub unit: &'static str,
}

/// Every SPN Grid decodes, by SPN number.
pub const SPNS: &[Spn] = &[
    Spn {
        spn: 84,
        pgn: 65265,
        name: "wheel-based vehicle speed",
        start_byte: 2,
        start_bit: 1,
        bits: 16,
        resolution: 1.0 / 256.0,
        offset: 0.0,
        unit: "km/h",
    },
    Spn {
        spn: 91,
        pgn: 61443,
        name: "accelerator pedal position 1",
        start_byte: 2,
        start_bit: 1,
        bits: 8,
        resolution: 0.4,
        offset: 0.0,
        unit: "%",
    },
    Spn {
        spn: 96,
        pgn: 65276,
        name: "fuel level 1",
        start_byte: 2,
        start_bit: 1,
        bits: 8,
        resolution: 0.4,
        offset: 0.0,
        unit: "%",
    },
    Spn {
        spn: 100,
        pgn: 65263,
        name: "engine oil pressure",
        start_byte: 4,
        start_bit: 1,
        bits: 8,
        resolution: 4.0,
        offset: 0.0,
        unit: "kPa",
    },
    Spn {
        spn: 110,
        pgn: 65262,
        name: "engine coolant temperature",
        start_byte: 1,
        start_bit: 1,
        bits: 8,
        resolution: 1.0,
        offset: -40.0,
        unit: "°C",
    },
    Spn {
        spn: 175,
        pgn: 65262,
        name: "engine oil temperature 1",
        start_byte: 3,
        start_bit: 1,
        bits: 16,
        resolution: 0.03125,
        offset: -273.0,
        unit: "°C",
    },
    // Engine configuration 1 (EC1, PGN 65251) is 39 bytes: it only ever travels as a
    // multi-packet (TP.BAM) message.
    Spn {
        spn: 188,
        pgn: 65251,
        name: "engine speed at idle, point 1",
        start_byte: 1,
        start_bit: 1,
        bits: 16,
        resolution: 0.125,
        offset: 0.0,
        unit: "rpm",
    },
    Spn {
        spn: 190,
        pgn: 61444,
        name: "engine speed",
        start_byte: 4,
        start_bit: 1,
        bits: 16,
        resolution: 0.125,
        offset: 0.0,
        unit: "rpm",
    },
    Spn {
        spn: 247,
        pgn: 65253,
        name: "engine total hours of operation",
        start_byte: 1,
        start_bit: 1,
        bits: 32,
        resolution: 0.05,
        offset: 0.0,
        unit: "h",
    },
    Spn {
        spn: 539,
        pgn: 65251,
        name: "percent torque at idle, point 1",
        start_byte: 3,
        start_bit: 1,
        bits: 8,
        resolution: 1.0,
        offset: -125.0,
        unit: "%",
    },
];

/// The row of `spn`, whatever its PGN.
pub fn spn(spn: u32) -> Option<&'static Spn> {
    SPNS.iter().find(|row| row.spn == spn)
}

/// The row of `spn` when it is carried in `pgn`.
pub fn find(pgn: u32, spn: u32) -> Option<&'static Spn> {
    self::spn(spn).filter(|row| row.pgn == pgn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_sorted_unique_and_fit_their_pgn() {
        for pair in SPNS.windows(2) {
            assert!(
                pair[0].spn < pair[1].spn,
                "{} then {}",
                pair[0].spn,
                pair[1].spn
            );
        }
        for row in SPNS {
            assert!(matches!(row.bits, 1..=8 | 16 | 32), "{}", row.spn);
            assert!((1..=8).contains(&row.start_bit), "{}", row.spn);
            assert!(row.start_byte >= 1 && row.resolution > 0.0, "{}", row.spn);
            assert!(row.pgn <= crate::limits::J1939_PGN_MAX, "{}", row.spn);
            assert!(row.spn <= crate::limits::J1939_SPN_MAX, "{}", row.spn);
        }
        assert_eq!(find(61444, 190).map(|r| r.name), Some("engine speed"));
        assert_eq!(find(65262, 190), None);
    }
}
