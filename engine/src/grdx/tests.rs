//! The GRDX codec against every malformed input it must refuse, and fuzzed: round trips
//! of valid matrices, arbitrary bytes (never a panic; accepted only when they are a
//! matrix's exact encoding) and mutations of valid encodings. `GRID_FUZZ_CASES` raises
//! the case count (the suite runs 2,048 per property; e.g. `GRID_FUZZ_CASES=1000000
//! cargo test --release -p grid-engine --lib grdx`).

use proptest::prelude::*;

use super::*;

fn cases() -> u32 {
    std::env::var("GRID_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_048)
}

fn two_by_three() -> Matrix {
    Matrix::new(2, 3, vec![1.0, -2.5, 0.0, 3e300, -0.0, 7.25]).unwrap()
}

/// A valid matrix: dimensions whose product is within `GRDX_CELLS_MAX`, finite cells.
fn matrix() -> impl Strategy<Value = Matrix> {
    (1u32..=160, 1u32..=160)
        .prop_filter("within GRDX_CELLS_MAX", |(r, c)| {
            (*r as usize) * (*c as usize) <= GRDX_CELLS_MAX
        })
        .prop_flat_map(|(rows, cols)| {
            let finite = any::<f64>().prop_filter("finite", |v| v.is_finite());
            proptest::collection::vec(finite, (rows * cols) as usize)
                .prop_map(move |cells| Matrix::new(rows, cols, cells).expect("valid"))
        })
}

#[test]
fn a_matrix_encodes_as_the_format_says() {
    let m = two_by_three();
    let bytes = m.encode();
    assert_eq!(&bytes[0..4], b"GRDX");
    assert_eq!(bytes[4..8], [1, 2, 0, 0]);
    assert_eq!(bytes[8..12], 2u32.to_le_bytes());
    assert_eq!(bytes[12..16], 3u32.to_le_bytes());
    assert_eq!(bytes.len(), 16 + 6 * 8);
    // Row-major: row 1, column 0 is the fourth cell.
    assert_eq!(bytes[16 + 3 * 8..16 + 4 * 8], 3e300f64.to_le_bytes());
    assert_eq!(m.get(1, 0), Some(3e300));
    assert_eq!(m.get(2, 0), None);
    assert_eq!(m.get(0, 3), None);
    assert_eq!(Matrix::decode(&bytes), Ok(m));
}

#[test]
fn every_malformed_header_is_refused_by_name() {
    let good = two_by_three().encode();
    let with = |at: usize, value: &[u8]| {
        let mut b = good.clone();
        b[at..at + value.len()].copy_from_slice(value);
        Matrix::decode(&b)
    };
    assert_eq!(
        Matrix::decode(&good[..15]),
        Err(GrdxError::ShortHeader { found: 15 })
    );
    assert_eq!(
        Matrix::decode(&[]),
        Err(GrdxError::ShortHeader { found: 0 })
    );
    assert_eq!(with(0, b"GRDZ"), Err(GrdxError::Magic { found: *b"GRDZ" }));
    assert_eq!(with(4, &[2]), Err(GrdxError::Version { found: 2 }));
    assert_eq!(with(4, &[0]), Err(GrdxError::Version { found: 0 }));
    assert_eq!(with(5, &[3]), Err(GrdxError::Dimensions { found: 3 }));
    assert_eq!(with(5, &[1]), Err(GrdxError::Dimensions { found: 1 }));
    assert_eq!(with(6, &[0, 1]), Err(GrdxError::Reserved { found: 256 }));
    assert_eq!(
        with(8, &0u32.to_le_bytes()),
        Err(GrdxError::Empty { rows: 0, cols: 3 })
    );
    assert_eq!(
        with(12, &0u32.to_le_bytes()),
        Err(GrdxError::Empty { rows: 2, cols: 0 })
    );
    // Oversized, also where the product overflows 32 bits: never an allocation.
    let mut huge = good.clone();
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Matrix::decode(&huge),
        Err(GrdxError::TooLarge {
            rows: 4294967295,
            cols: 4294967295,
            ..
        })
    ));
    let mut over = good.clone();
    over[8..12].copy_from_slice(&128u32.to_le_bytes());
    over[12..16].copy_from_slice(&129u32.to_le_bytes());
    assert_eq!(
        Matrix::decode(&over),
        Err(GrdxError::TooLarge {
            rows: 128,
            cols: 129,
            cells: 16_512
        })
    );
    let text = GrdxError::TooLarge {
        rows: 128,
        cols: 129,
        cells: 16_512,
    }
    .to_string();
    assert!(text.contains("GRDX_CELLS_MAX (16384)"), "{text}");
}

#[test]
fn a_body_cut_short_or_followed_by_bytes_and_a_non_finite_cell_are_refused() {
    let good = two_by_three().encode();
    for cut in 16..good.len() {
        assert_eq!(
            Matrix::decode(&good[..cut]),
            Err(GrdxError::Length {
                rows: 2,
                cols: 3,
                expected: 48,
                found: cut - 16
            }),
            "cut at {cut}"
        );
    }
    let mut longer = good.clone();
    longer.push(0);
    let refused = Matrix::decode(&longer).unwrap_err();
    assert!(refused.to_string().contains("trailing bytes"), "{refused}");
    for (at, value) in [(0, f64::NAN), (4, f64::INFINITY), (5, f64::NEG_INFINITY)] {
        let mut b = good.clone();
        b[16 + at * 8..16 + at * 8 + 8].copy_from_slice(&value.to_le_bytes());
        match Matrix::decode(&b) {
            Err(GrdxError::NotFinite { row, col, .. }) => {
                assert_eq!((row as usize, col as usize), (at / 3, at % 3))
            }
            other => panic!("{value} at {at}: {other:?}"),
        }
    }
    // A largest matrix is accepted; one more cell is not.
    let largest = Matrix::new(128, 128, vec![0.5; GRDX_CELLS_MAX]).unwrap();
    assert_eq!(Matrix::decode(&largest.encode()).unwrap(), largest);
    assert!(matches!(
        Matrix::new(1, GRDX_CELLS_MAX as u32 + 1, vec![0.0; GRDX_CELLS_MAX + 1]),
        Err(GrdxError::TooLarge { .. })
    ));
    assert!(matches!(
        Matrix::new(2, 2, vec![0.0; 3]),
        Err(GrdxError::Cells { cells: 3, .. })
    ));
    assert!(matches!(
        Matrix::new(1, 2, vec![0.0, f64::NAN]),
        Err(GrdxError::NotFinite { row: 0, col: 1, .. })
    ));
}

#[test]
fn tables_read_as_csv() {
    let m = Matrix::from_csv("1, 2.5, -3\n\n4,5e2,6\n").unwrap();
    assert_eq!((m.rows(), m.cols()), (2, 3));
    assert_eq!(m.cells(), &[1.0, 2.5, -3.0, 4.0, 500.0, 6.0]);
    let refused = |text: &str, because: &str| {
        let e = Matrix::from_csv(text).unwrap_err().to_string();
        assert!(e.contains(because), "{text:?}: {e}");
    };
    refused("1,2\n3\n", "line 2: 1 cells in this row, 2 in the first");
    refused("1,NaN\n", "line 1: `NaN` is not a finite number");
    refused("1,inf\n", "not a finite number");
    refused("1,1e400\n", "not a finite number");
    refused("1,x\n", "`x` is not a number");
    refused("1,,2\n", "`` is not a number");
    refused("", "0 × 0");
    refused("\n \n", "0 × 0");
    let wide = vec!["0"; GRDX_CELLS_MAX + 1].join(",");
    refused(&wide, "more than GRDX_CELLS_MAX (16384) cells");
    let long = format!("1,{}\n", "9".repeat(5_000));
    let e = Matrix::from_csv(&long.replace('9', "z"))
        .unwrap_err()
        .to_string();
    assert!(
        e.len() < 1_000,
        "the quoted field is capped: {} bytes",
        e.len()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn valid_matrices_round_trip(m in matrix()) {
        let bytes = m.encode();
        prop_assert_eq!(bytes.len(), HEADER_BYTES + m.cells().len() * 8);
        prop_assert_eq!(Matrix::decode(&bytes).unwrap(), m);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_are_accepted_only_exactly(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        if let Ok(m) = Matrix::decode(&bytes) {
            prop_assert_eq!(m.encode(), bytes);
        }
    }

    #[test]
    fn any_header_with_any_body_is_judged_before_anything_is_allocated(
        version in 0u8..3,
        dimensions in 0u8..4,
        reserved in prop_oneof![Just(0u16), any::<u16>()],
        rows in prop_oneof![0u32..200, any::<u32>()],
        cols in prop_oneof![0u32..200, any::<u32>()],
        body in proptest::collection::vec(any::<u8>(), 0..1_024),
    ) {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&[version, dimensions]);
        bytes.extend_from_slice(&reserved.to_le_bytes());
        bytes.extend_from_slice(&rows.to_le_bytes());
        bytes.extend_from_slice(&cols.to_le_bytes());
        bytes.extend_from_slice(&body);
        match Matrix::decode(&bytes) {
            Ok(m) => {
                prop_assert!(version == VERSION && dimensions == DIMENSIONS && reserved == 0);
                prop_assert_eq!((m.rows(), m.cols()), (rows, cols));
                prop_assert_eq!(body.len(), rows as usize * cols as usize * 8);
                prop_assert!(m.cells().iter().all(|v| v.is_finite()));
                prop_assert_eq!(m.encode(), bytes);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn headers_of_valid_encodings_with_any_body_are_judged_whole(
        m in matrix(),
        cut in 0usize..64,
        extra in proptest::collection::vec(any::<u8>(), 0..24),
        poison in (0usize..16_384, prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)]),
    ) {
        let good = m.encode();
        // Cut short: refused, whatever the cut.
        let cut = cut.min(good.len() - 1);
        prop_assert!(Matrix::decode(&good[..good.len() - 1 - cut]).is_err());
        // Followed by anything: refused.
        if !extra.is_empty() {
            let mut longer = good.clone();
            longer.extend_from_slice(&extra);
            let refused = Matrix::decode(&longer);
            let is_length = matches!(refused, Err(GrdxError::Length { .. }));
            prop_assert!(is_length);
        }
        // One non-finite cell anywhere: refused, naming it.
        let (at, value) = poison;
        let at = at % m.cells().len();
        let mut bad = good.clone();
        bad[HEADER_BYTES + at * 8..HEADER_BYTES + at * 8 + 8].copy_from_slice(&value.to_le_bytes());
        let cols = m.cols() as usize;
        let named = matches!(
            Matrix::decode(&bad),
            Err(GrdxError::NotFinite { row, col, .. }) if (row as usize, col as usize) == (at / cols, at % cols)
        );
        prop_assert!(named);
    }
}
