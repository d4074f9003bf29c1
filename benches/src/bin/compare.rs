//! Grid beside IronCalc on the reference model, side by side, as one table of ratios.
//!
//! ```text
//! cargo run --release -p grid-benches --bin compare [-- SECONDS_PER_MEASUREMENT]
//! ```
//!
//! The same three scenarios as `benches/model_eval.rs` (criterion, for rigour); this
//! binary times them with `std::time::Instant` over many iterations. For each
//! scenario it calibrates, per engine, a batch of operations lasting about 20 ms, then
//! alternates one Grid batch and one IronCalc batch until each engine has run for the
//! given seconds (2 by default, at least 15 batches each). Alternating matters on a
//! shared machine: both engines see the same background load. It reports the median
//! and the fastest batch's time per operation; the ratio uses the medians, the fastest
//! batches show how much noise the medians carry.

use std::hint::black_box;
use std::time::{Duration, Instant};

use clap::Parser;

use grid_benches::limits::COMPARE_BATCHES_MIN;
use grid_benches::report::human_ns as human;
use grid_benches::{FREE_INPUT, Setup, grid_slot};

const BATCH_TARGET: Duration = Duration::from_millis(20);

/// Time per operation: median and fastest over batches.
struct Timing {
    median_ns: f64,
    fastest_ns: f64,
    operations: u64,
}

/// Warms `operation` up and returns how many runs of it fill a batch.
fn calibrate(operation: &mut impl FnMut()) -> u64 {
    let calibration = Instant::now();
    let mut calibrated: u64 = 0;
    while calibration.elapsed() < BATCH_TARGET * 5 {
        operation();
        calibrated += 1;
    }
    let per_operation = calibration.elapsed().as_secs_f64() / calibrated as f64;
    ((BATCH_TARGET.as_secs_f64() / per_operation) as u64).max(1)
}

/// Time per operation of one batch of `size` runs, in ns.
fn run_batch(operation: &mut impl FnMut(), size: u64) -> f64 {
    let at = Instant::now();
    for _ in 0..size {
        operation();
    }
    at.elapsed().as_secs_f64() * 1e9 / size as f64
}

fn timing(mut per_batch: Vec<f64>, size: u64) -> Timing {
    per_batch.sort_by(f64::total_cmp);
    Timing {
        median_ns: per_batch[per_batch.len() / 2],
        fastest_ns: per_batch[0],
        operations: size * per_batch.len() as u64,
    }
}

/// Times Grid's and IronCalc's operation of one scenario, alternating their batches.
fn measure_pair(
    seconds: f64,
    mut grid: impl FnMut(),
    mut ironcalc: impl FnMut(),
) -> (Timing, Timing) {
    let grid_size = calibrate(&mut grid);
    let ironcalc_size = calibrate(&mut ironcalc);
    let budget = Duration::from_secs_f64(seconds * 2.0);
    let started = Instant::now();
    let (mut grid_batches, mut ironcalc_batches) = (Vec::new(), Vec::new());
    while grid_batches.len() < COMPARE_BATCHES_MIN || started.elapsed() < budget {
        grid_batches.push(run_batch(&mut grid, grid_size));
        ironcalc_batches.push(run_batch(&mut ironcalc, ironcalc_size));
    }
    (
        timing(grid_batches, grid_size),
        timing(ironcalc_batches, ironcalc_size),
    )
}

/// Alternates between two values, so every edit really changes the input.
fn toggle(value: f64) -> impl FnMut() -> f64 {
    let values = [value + 0.125, value];
    let mut next = 0;
    move || {
        let value = values[next];
        next ^= 1;
        value
    }
}

/// Grid beside IronCalc on the reference model.
#[derive(Parser)]
#[command(name = "compare")]
struct Args {
    /// Seconds each engine runs per scenario (at least 15 batches each).
    #[arg(value_name = "SECONDS_PER_MEASUREMENT", default_value_t = 2.0)]
    seconds: f64,
}

fn main() {
    let seconds = Args::parse().seconds;

    let started = Instant::now();
    let mut setup = Setup::new();
    let (compared, largest) =
        grid_benches::check_agreement(&setup.model, &setup.runtime, &setup.workbook)
            .expect("Setup::new checked the agreement");
    println!(
        "Reference model: {} items ({} formula cells) + {FREE_INPUT}; busiest input {} \
         ({} dependent cells). Grid and IronCalc agree on all {compared} values (largest \
         relative difference {largest:e}, tolerance {:e}); setup took {:.1} s.",
        setup.model.items.len() - 1,
        setup.cell_count(),
        setup.busy_input,
        setup.busy_dependents,
        grid_benches::AGREEMENT_TOLERANCE,
        started.elapsed().as_secs_f64()
    );

    let busy_slot = grid_slot(&setup.runtime, &setup.busy_input);
    let free_slot = grid_slot(&setup.runtime, FREE_INPUT);
    let busy_position = setup.workbook.position(&setup.busy_input);
    let free_position = setup.workbook.position(FREE_INPUT);
    let (busy_default, free_default) = (setup.busy_default, setup.free_default);

    let mut rows: Vec<(&str, Timing, Timing)> = Vec::new();

    let (grid, ironcalc) = measure_pair(
        seconds,
        || setup.runtime.evaluate_all(),
        || setup.workbook.evaluate(),
    );
    rows.push(("full evaluation", grid, ironcalc));

    let mut grid_value = toggle(busy_default);
    let mut ironcalc_value = toggle(busy_default);
    let (grid, ironcalc) = measure_pair(
        seconds,
        || {
            setup
                .runtime
                .apply_slots(&[(busy_slot, black_box(grid_value()))])
                .expect("Grid applies a batch");
        },
        || {
            setup
                .workbook
                .set_number(busy_position, black_box(ironcalc_value()));
            setup.workbook.evaluate();
        },
    );
    rows.push(("input with dependents", grid, ironcalc));

    let mut grid_value = toggle(free_default);
    let mut ironcalc_value = toggle(free_default);
    let (grid, ironcalc) = measure_pair(
        seconds,
        || {
            setup
                .runtime
                .apply_slots(&[(free_slot, black_box(grid_value()))])
                .expect("Grid applies a batch");
        },
        || {
            setup
                .workbook
                .set_number(free_position, black_box(ironcalc_value()));
            setup.workbook.evaluate();
        },
    );
    rows.push(("input without dependents", grid, ironcalc));

    // Both engines must still agree after every edit the measurements made. The
    // toggles stopped at different values, so set both inputs alike first.
    // Grid reports how many cells each edit recomputed.
    let mut recomputed = Vec::new();
    for (slot, position, value) in [
        (busy_slot, busy_position, busy_default + 0.25),
        (free_slot, free_position, free_default + 0.25),
    ] {
        setup
            .runtime
            .apply_slots(&[(slot, value)])
            .expect("Grid applies a batch");
        recomputed.push(setup.runtime.last_recomputed());
        setup.workbook.set_number(position, value);
    }
    setup.workbook.evaluate();
    if let Err(problem) =
        grid_benches::check_agreement(&setup.model, &setup.runtime, &setup.workbook)
    {
        panic!("Grid and IronCalc disagree after the measurements: {problem}");
    }
    setup.runtime.evaluate_all();
    setup.workbook.evaluate();
    if let Err(problem) =
        grid_benches::check_agreement(&setup.model, &setup.runtime, &setup.workbook)
    {
        panic!("Grid and IronCalc disagree after the measurements: {problem}");
    }

    println!();
    println!(
        "| {:<24} | {:>12} | {:>12} | {:>15} | {:>12} | {:>13} |",
        "scenario (median)", "Grid", "IronCalc", "IronCalc / Grid", "Grid best", "IronCalc best"
    );
    println!(
        "|{}|{}:|{}:|{}:|{}:|{}:|",
        "-".repeat(26),
        "-".repeat(13),
        "-".repeat(13),
        "-".repeat(16),
        "-".repeat(13),
        "-".repeat(14)
    );
    for (scenario, grid, ironcalc) in &rows {
        println!(
            "| {:<24} | {:>12} | {:>12} | {:>14.1}x | {:>12} | {:>13} |",
            scenario,
            human(grid.median_ns),
            human(ironcalc.median_ns),
            ironcalc.median_ns / grid.median_ns,
            human(grid.fastest_ns),
            human(ironcalc.fastest_ns),
        );
    }
    println!();
    println!(
        "cells recomputed per edit: Grid {} (input with dependents), {} (without); \
         IronCalc evaluates all {} formula cells on every edit",
        recomputed[0],
        recomputed[1],
        setup.cell_count()
    );
    for (scenario, grid, ironcalc) in &rows {
        println!(
            "{scenario}: {} Grid operations, {} IronCalc operations timed",
            grid.operations, ironcalc.operations
        );
    }

    let full = &rows[0];
    let free = &rows[2];
    let ratio = full.2.median_ns / full.1.median_ns;
    println!();
    println!(
        "target: Grid full evaluation >= 20x faster than IronCalc's: {:.1}x — {}",
        ratio,
        if ratio >= 20.0 { "met" } else { "NOT met" }
    );
    println!(
        "target: Grid edit with no dependents < 1 µs: {} — {}",
        human(free.1.median_ns),
        if free.1.median_ns < 1e3 {
            "met"
        } else {
            "NOT met"
        }
    );
}
