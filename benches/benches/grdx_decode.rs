//! GRDX decoding beside a plain copy (issue 34, docs/grdx.md), in one run:
//!
//! ```text
//! cargo bench -p grid-benches --bench grdx_decode
//! ```
//!
//! - `grid`: `Matrix::decode` of a 128 × 128 (16,384-cell, `GRDX_CELLS_MAX`) GRDX value:
//!   its header checked, its length checked, every cell read and checked finite.
//! - `copy`: the same 131,072 body bytes read into a `Vec<f64>` with
//!   `f64::from_le_bytes`, nothing checked — the alternative a decoder is measured
//!   against (issue 34's target: at least half its speed).
//!
//! After criterion's report a line prints both estimates and the ratio copy / Grid.

use std::hint::black_box;
use std::time::SystemTime;

use criterion::Criterion;
use grid_benches::report::human_ns as human;
use grid_benches::report::{criterion_directory, criterion_estimate_ns};
use grid_engine::grdx::{HEADER_BYTES, Matrix};
use grid_engine::limits::GRDX_CELLS_MAX;

const GROUP: &str = "grdx_decode_16384";

fn copy(body: &[u8]) -> Vec<f64> {
    body.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

fn main() {
    let started = SystemTime::now();
    let directory = criterion_directory();
    let mut criterion = Criterion::default()
        .output_directory(&directory)
        .without_plots()
        .configure_from_args();
    // Cells of every magnitude and sign, none repeated in a row.
    let cells: Vec<f64> = (0..GRDX_CELLS_MAX)
        .map(|i| (i as f64 * 0.618_034).sin() * 10f64.powi((i % 17) as i32 - 8))
        .collect();
    let bytes = Matrix::new(128, 128, cells.clone())
        .expect("a valid matrix")
        .encode();
    // Both read the same values before anything is measured.
    assert_eq!(Matrix::decode(&bytes).expect("decodes").cells(), &cells[..]);
    assert_eq!(copy(&bytes[HEADER_BYTES..]), cells);
    let mut group = criterion.benchmark_group(GROUP);
    group.bench_function("grid", |b| {
        b.iter(|| Matrix::decode(black_box(&bytes)).expect("decodes"))
    });
    group.bench_function("copy", |b| {
        b.iter(|| copy(black_box(&bytes[HEADER_BYTES..])))
    });
    group.finish();
    criterion.final_summary();
    match (
        criterion_estimate_ns(&directory, GROUP, "grid", started),
        criterion_estimate_ns(&directory, GROUP, "copy", started),
    ) {
        (Some(grid), Some(copy)) => println!(
            "\n16,384-cell GRDX: decode and validate {} (Grid), plain copy {}: Grid runs at {:.2}× the copy's speed (target ≥ 0.5×)",
            human(grid),
            human(copy),
            copy / grid
        ),
        _ => println!("\n(not measured in this run)"),
    }
}
