//! Grid beside IronCalc on the 4,096-cell reference model, in one run.
//!
//! ```text
//! cargo bench -p grid-benches --bench model_eval
//! ```
//!
//! Three scenarios, each measured for both engines (see BENCHMARKS.md):
//! - `full_evaluation`: recompute every cell from the current inputs.
//! - `input_with_dependents`: set the input most cells depend on (to a value different
//!   from the one it holds) and recompute. Grid recomputes what depends on it; IronCalc
//!   evaluates the whole workbook, which is its design.
//! - `input_without_dependents`: set `in_free`, an input no cell reads, and recompute.
//!
//! The setup checks that both engines hold the same value in every cell before any
//! measurement. After criterion's own report, a table prints criterion's estimate of each
//! benchmark and the ratio IronCalc / Grid.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, SystemTime};

use criterion::Criterion;
use grid_benches::report::human_ns as human;
use grid_benches::report::{
    criterion_directory as output_directory, criterion_estimate_ns as estimate_ns,
};
use grid_benches::{FREE_INPUT, Setup, grid_slot};

const SCENARIOS: [(&str, &str); 3] = [
    ("full_evaluation", "full evaluation of every cell"),
    (
        "input_with_dependents",
        "one input changed, its dependents recomputed",
    ),
    ("input_without_dependents", "one input nothing depends on"),
];

/// Alternates between two values, so every edit really changes the input.
struct Toggle {
    values: [f64; 2],
    next: usize,
}

impl Toggle {
    fn around(value: f64) -> Toggle {
        Toggle {
            values: [value + 0.125, value],
            next: 0,
        }
    }

    fn next(&mut self) -> f64 {
        let value = self.values[self.next];
        self.next ^= 1;
        value
    }
}

fn benches(c: &mut Criterion, setup: &mut Setup) {
    let busy_slot = grid_slot(&setup.runtime, &setup.busy_input);
    let free_slot = grid_slot(&setup.runtime, FREE_INPUT);
    let busy_position = setup.workbook.position(&setup.busy_input);
    let free_position = setup.workbook.position(FREE_INPUT);

    {
        let mut group = c.benchmark_group("full_evaluation");
        group.sample_size(50);
        group.measurement_time(Duration::from_secs(8));
        group.bench_function("grid", |b| {
            b.iter(|| setup.runtime.evaluate_all());
        });
        group.bench_function("ironcalc", |b| {
            b.iter(|| setup.workbook.evaluate());
        });
        group.finish();
    }
    {
        let mut group = c.benchmark_group("input_with_dependents");
        group.sample_size(50);
        group.measurement_time(Duration::from_secs(8));
        let mut toggle = Toggle::around(setup.busy_default);
        group.bench_function("grid", |b| {
            b.iter(|| {
                setup
                    .runtime
                    .apply_slots(&[(busy_slot, black_box(toggle.next()))])
                    .expect("Grid applies a batch");
            });
        });
        let mut toggle = Toggle::around(setup.busy_default);
        group.bench_function("ironcalc", |b| {
            b.iter(|| {
                setup
                    .workbook
                    .set_number(busy_position, black_box(toggle.next()));
                setup.workbook.evaluate();
            });
        });
        group.finish();
    }
    {
        let mut group = c.benchmark_group("input_without_dependents");
        group.sample_size(50);
        group.measurement_time(Duration::from_secs(8));
        let mut toggle = Toggle::around(setup.free_default);
        group.bench_function("grid", |b| {
            b.iter(|| {
                setup
                    .runtime
                    .apply_slots(&[(free_slot, black_box(toggle.next()))])
                    .expect("Grid applies a batch");
            });
        });
        let mut toggle = Toggle::around(setup.free_default);
        group.bench_function("ironcalc", |b| {
            b.iter(|| {
                setup
                    .workbook
                    .set_number(free_position, black_box(toggle.next()));
                setup.workbook.evaluate();
            });
        });
        group.finish();
    }
}

fn summary(directory: &Path, started: SystemTime, setup: &Setup) {
    println!();
    println!(
        "Reference model: {} items ({} formula cells); busiest input {} ({} dependent cells)",
        setup.model.items.len(),
        setup.cell_count(),
        setup.busy_input,
        setup.busy_dependents
    );
    println!(
        "{:<26} {:>14} {:>14} {:>16}",
        "scenario (criterion time)", "Grid", "IronCalc", "IronCalc / Grid"
    );
    for (group, description) in SCENARIOS {
        match (
            estimate_ns(directory, group, "grid", started),
            estimate_ns(directory, group, "ironcalc", started),
        ) {
            (Some(grid), Some(ironcalc)) => println!(
                "{group:<26} {:>14} {:>14} {:>15.1}x   ({description})",
                human(grid),
                human(ironcalc),
                ironcalc / grid
            ),
            _ => println!("{group:<26} (not measured in this run)"),
        }
    }
}

fn main() {
    let started = SystemTime::now();
    let directory = output_directory();
    let mut criterion = Criterion::default()
        .output_directory(&directory)
        .without_plots()
        .configure_from_args();
    let mut setup = Setup::new();
    benches(&mut criterion, &mut setup);
    criterion.final_summary();
    summary(&directory, started, &setup);
}
