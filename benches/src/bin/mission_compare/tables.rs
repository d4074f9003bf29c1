//! What `mission_compare` prints: every valid sample, and the medians, paired ratios
//! and spreads of both ways.

use std::time::Duration;

use grid_benches::report::{Table, ms};

use crate::samples::{Measured, Sample, Spread};

/// The machine's load averages over 1, 5 and 15 minutes (`/proc/loadavg`): others'
/// work on the same CPUs shows in every figure.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

fn us(ns: f64) -> String {
    format!("{:.0} µs", ns / 1e3)
}

pub fn times(x: f64) -> String {
    format!("{x:.2}×")
}

pub fn print_samples(samples: &[Sample]) {
    let mut table = Table::new(
        &[
            "#",
            "attempt",
            "order",
            "online time",
            "online CPU edge + site",
            "mission time",
            "mission CPU edge + site",
            "time mission / online",
            "CPU mission / online",
        ],
        "rrlrrrrrr",
    );
    let cpu = |m: &Measured| {
        format!(
            "{} ({} + {})",
            us(m.cpu_total_ns() as f64),
            us(m.cpu_ns[0] as f64),
            us(m.cpu_ns[1] as f64)
        )
    };
    for (i, s) in samples.iter().enumerate() {
        table.row(vec![
            (i + 1).to_string(),
            s.attempt.to_string(),
            s.order.name().to_owned(),
            ms(s.online.wall),
            cpu(&s.online),
            ms(s.mission.wall),
            cpu(&s.mission),
            times(s.time_ratio()),
            times(s.cpu_ratio()),
        ]);
    }
    table.print();
}

/// The summary table; returns the median ratios (time, CPU).
pub fn print_summary(samples: &[Sample], settle: Duration) -> Option<(Spread, Spread)> {
    let spread = |f: &dyn Fn(&Sample) -> f64| Spread::of(samples.iter().map(f).collect());
    let online_time = spread(&|s| s.online.wall.as_secs_f64() * 1e9)?;
    let mission_time = spread(&|s| s.mission.wall.as_secs_f64() * 1e9)?;
    let online_cpu = spread(&|s| s.online.cpu_total_ns() as f64)?;
    let mission_cpu = spread(&|s| s.mission.cpu_total_ns() as f64)?;
    let online_site = spread(&|s| s.online.cpu_ns[1] as f64)?;
    let mission_site = spread(&|s| s.mission.cpu_ns[1] as f64)?;
    let after = |m: &Measured| m.cpu_after_ns.iter().sum::<i128>() as f64;
    let online_after = spread(&|s| after(&s.online))?;
    let mission_after = spread(&|s| after(&s.mission))?;
    let whole = |m: &Measured| m.cpu_total_ns() as f64 + after(m);
    let online_whole = spread(&|s| whole(&s.online))?;
    let mission_whole = spread(&|s| whole(&s.mission))?;
    let whole_ratio = spread(&|s| whole(&s.mission) / whole(&s.online))?;
    let time_ratio = spread(&|s| s.time_ratio())?;
    let cpu_ratio = spread(&|s| s.cpu_ratio())?;
    let mut table = Table::new(
        &[
            "per run",
            "online grant (median)",
            "mission allocation (median)",
            "mission / online, paired (median)",
            "p10–p90",
            "IQR (p25–p75)",
            "min–max",
        ],
        "lrrrrrr",
    );
    let ratio_cells = |r: &Spread| {
        vec![
            format!("**{}**", times(r.median)),
            format!("{}–{}", times(r.p10), times(r.p90)),
            format!("{}–{}", times(r.p25), times(r.p75)),
            format!("{}–{}", times(r.min), times(r.max)),
        ]
    };
    let duration = |ns: f64| ms(Duration::from_nanos(ns as u64));
    let mut row = vec![
        "wall time".to_owned(),
        duration(online_time.median),
        duration(mission_time.median),
    ];
    row.extend(ratio_cells(&time_ratio));
    table.row(row);
    let mut row = vec![
        "CPU of the gridds (edge + site)".to_owned(),
        us(online_cpu.median),
        us(mission_cpu.median),
    ];
    row.extend(ratio_cells(&cpu_ratio));
    table.row(row);
    let dashes = || vec!["–".to_owned(); 4];
    let with_max = |s: &Spread| format!("{} (max {})", us(s.median), us(s.max));
    let mut row = vec![
        "of which site's CPU".to_owned(),
        with_max(&online_site),
        with_max(&mission_site),
    ];
    row.extend(dashes());
    table.row(row);
    if settle.is_zero() {
        // Back to back: the next run's CPU holds what this one left behind.
        table.print();
        return Some((time_ratio, cpu_ratio));
    }
    let mut row = vec![
        format!(
            "gridds' CPU in the {} ms after the answer (not counted above)",
            settle.as_millis()
        ),
        with_max(&online_after),
        with_max(&mission_after),
    ];
    row.extend(dashes());
    table.row(row);
    let mut row = vec![
        format!(
            "CPU of the gridds and the {} ms after the answer",
            settle.as_millis()
        ),
        us(online_whole.median),
        us(mission_whole.median),
    ];
    row.extend(ratio_cells(&whole_ratio));
    table.row(row);
    table.print();
    Some((time_ratio, cpu_ratio))
}
