//! What a mission's offline allocation costs beside an online grant, in paired samples
//! (BENCHMARKS.md, "Missions: offline allocation vs online grant"; issue 19's "Must
//! show"): the same Process, `demo.count`, run once under the online grant and once on
//! the mission allocation per sample, in alternating order.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo build --release -p grid-benches --no-default-features --bin mission_compare
//! target/release/mission_compare [--samples 40 --attempts 200 --warmup-runs 5 --keep]
//! ```
//!
//! It brings up two Grid hosts on loopback (`grid.rs`): `edge`, the mission's host and
//! the grant's caller, and `site`, the grant's issuer and receiver and the mission's
//! issuer; both vote in the authority (two voters). `gridctl reconcile` issues the
//! grant and reserves the mission (units for every run the benchmark may make). Then,
//! over one control connection to `edge`, one call at a time:
//!
//! - **online grant**: `edge` sends the run to `site` (HTTPS, mutual TLS 1.3), journals
//!   its wait; `site` journals the run, charges the grant, executes, journals the
//!   outcome, signs and answers. Contacts `site`.
//! - **mission allocation**: `edge` runs it on itself, charged to its mission
//!   allocation: journals the run, charges the allocation, executes, journals the
//!   outcome, signs. Contacts no peer — the same code path `journeys/mission-offline.kdl`
//!   runs with `edge` cut away by a network-namespace partition.
//!
//! Each run's wall time is the control call alone; its CPU is the time on a CPU of both
//! gridds' threads (`/proc/PID/task/*/schedstat`, nanoseconds) read right before and
//! right after it. A sample is the pair (online first in even attempts, mission first
//! in odd ones); it is **invalid** — counted, its reason printed — when either run did
//! not succeed, took longer than `MISSION_COMPARE_RUN_MS_MAX`, or shows a CPU delta that
//! is not positive. Every succeeded run's receipt (the receiver's signature) must verify
//! with the receiver's public keys, else the benchmark fails. Samples are taken until
//! `--samples` are valid or `--attempts` were made; fewer valid samples fail the run.
//!
//! Afterwards it checks what the hosts hold (each succeeded run executed once, charged
//! once), then SIGKILLs `site` — the issuer and, of two voters, the authority's
//! majority — and makes `MISSION_COMPARE_OFFLINE_RUNS` mission runs, each of which must
//! succeed, while an online run must not. Every gridd is SIGKILLed at the end (also on
//! an error or a panic); the work directory is removed unless `--keep`.

mod grid;
mod samples;

use std::time::Duration;

use clap::Parser;

use grid_benches::bringup::exit_on_error;
use grid_benches::limits::{
    MISSION_COMPARE_ATTEMPTS_MAX, MISSION_COMPARE_OFFLINE_RUNS, MISSION_COMPARE_RUN_MS_MAX,
    MISSION_COMPARE_SAMPLES_VALID, MISSION_COMPARE_SETTLE_MS_MAX, MISSION_COMPARE_WARMUP_RUNS_MAX,
};
use grid_benches::measure::Failures;
use grid_benches::procs::{Result, WorkDir, grid_bin_dir, on_cpu_ns};
use grid_benches::report::{Table, ms, print_header};
use grid_engine::processes::grants::UNITS_PER_RUN;

use grid::{GridMission, Mode, Runner};
use samples::{GRIDDS, Measured, Order, Sample, Spread};

/// A mission's offline allocation beside an online grant, in paired samples.
#[derive(Parser)]
#[command(name = "mission_compare")]
struct Args {
    /// Valid paired samples to collect (1 to the attempts; issue 19 asks for 40).
    #[arg(long, value_name = "N", default_value_t = MISSION_COMPARE_SAMPLES_VALID)]
    samples: usize,
    /// The most paired samples attempted before the run fails (at most 200).
    #[arg(long, value_name = "N", default_value_t = MISSION_COMPARE_ATTEMPTS_MAX)]
    attempts: usize,
    /// Runs of each way before the samples, not recorded (0 to 50).
    #[arg(long, value_name = "N", default_value_t = 20)]
    warmup_runs: usize,
    /// The pause after every run's answer, before the next run (0 to 1,000 ms): what
    /// the run left behind (and the hosts' background work) falls in it, not into the
    /// next run; the gridds' CPU over it is reported apart. 0: runs back to back.
    #[arg(long, value_name = "MS", default_value_t = 10)]
    settle_ms: u64,
    /// Keep the work directory (stores, certificates, logs) instead of removing it.
    #[arg(long)]
    keep: bool,
}

impl Args {
    fn check(&self) -> Result<()> {
        if self.attempts == 0 || self.attempts > MISSION_COMPARE_ATTEMPTS_MAX {
            return Err(format!(
                "--attempts {}: 1 to MISSION_COMPARE_ATTEMPTS_MAX ({MISSION_COMPARE_ATTEMPTS_MAX})",
                self.attempts
            )
            .into());
        }
        if self.samples == 0 || self.samples > self.attempts {
            return Err(format!(
                "--samples {}: 1 to --attempts ({})",
                self.samples, self.attempts
            )
            .into());
        }
        if self.warmup_runs > MISSION_COMPARE_WARMUP_RUNS_MAX {
            return Err(format!(
                "--warmup-runs {}: 0 to MISSION_COMPARE_WARMUP_RUNS_MAX ({MISSION_COMPARE_WARMUP_RUNS_MAX})",
                self.warmup_runs
            )
            .into());
        }
        if self.settle_ms > MISSION_COMPARE_SETTLE_MS_MAX {
            return Err(format!(
                "--settle-ms {}: 0 to MISSION_COMPARE_SETTLE_MS_MAX ({MISSION_COMPARE_SETTLE_MS_MAX})",
                self.settle_ms
            )
            .into());
        }
        Ok(())
    }

    fn settle(&self) -> Duration {
        Duration::from_millis(self.settle_ms)
    }

    /// Runs of each way the benchmark may make: the first check, the warm-up, every
    /// attempt, and the runs after `site` is killed (online ones fail there, which
    /// releases their unit).
    fn runs_max(&self) -> u64 {
        (1 + self.warmup_runs + self.attempts + MISSION_COMPARE_OFFLINE_RUNS) as u64
    }
}

fn main() {
    exit_on_error("mission_compare", run());
}

/// The gridds' pids, in the order of [`GRIDDS`].
struct Gridds([u32; 2]);

impl Gridds {
    fn on_cpu(&self) -> Result<[u64; 2]> {
        let mut ns = [0; 2];
        for (i, pid) in self.0.iter().enumerate() {
            ns[i] = on_cpu_ns(*pid)
                .ok_or_else(|| format!("gridd {} (pid {pid}) is gone", GRIDDS[i]))?;
        }
        Ok(ns)
    }
}

/// Runs of each way that succeeded (checks, warm-up and invalid samples included):
/// what the receivers must hold at the end.
#[derive(Default)]
struct Succeeded {
    online: u64,
    mission: u64,
}

impl Succeeded {
    fn count(&mut self, mode: Mode) {
        match mode {
            Mode::Online => self.online += 1,
            Mode::Mission => self.mission += 1,
        }
    }
}

fn delta(before: [u64; 2], after: [u64; 2]) -> [i128; 2] {
    [
        after[0] as i128 - before[0] as i128,
        after[1] as i128 - before[1] as i128,
    ]
}

/// One run, measured, then the pause `settle`; a succeeded run must show its receiver,
/// its charge and a receipt that verifies (else an error).
fn measure(
    runner: &mut Runner,
    gridds: &Gridds,
    settle: Duration,
    succeeded: &mut Succeeded,
    id: String,
    mode: Mode,
) -> Result<Measured> {
    let before = gridds.on_cpu()?;
    let timed = runner.run(id.clone(), mode);
    let after = gridds.on_cpu()?;
    std::thread::sleep(settle);
    let settled = gridds.on_cpu()?;
    let outcome = match timed.outcome {
        Ok(run) => {
            runner.check(mode, &run)?;
            succeeded.count(mode);
            Ok(())
        }
        Err(reason) => Err(reason),
    };
    Ok(Measured {
        wall: timed.wall,
        cpu_ns: delta(before, after),
        cpu_after_ns: delta(after, settled),
        outcome,
    })
}

/// The machine's load averages over 1, 5 and 15 minutes (`/proc/loadavg`): others'
/// work on the same CPUs shows in every figure.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

fn us(ns: f64) -> String {
    format!("{:.0} µs", ns / 1e3)
}

fn times(x: f64) -> String {
    format!("{x:.2}×")
}

fn print_samples(samples: &[Sample]) {
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
fn print_summary(samples: &[Sample], settle: Duration) -> Option<(Spread, Spread)> {
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

/// `what` must equal `expected`, else an error naming both.
fn expect_equal(what: &str, held: u64, expected: u64) -> Result<()> {
    if held == expected {
        println!("  {what}: {held} (as expected)");
        Ok(())
    } else {
        Err(format!("{what}: {held}, but {expected} runs succeeded").into())
    }
}

fn run() -> Result<()> {
    let args = Args::parse();
    args.check()?;
    let bin_dir = grid_bin_dir()?;
    print_header(
        "mission_compare: a mission's offline allocation beside an online grant, paired samples",
        Some(&bin_dir),
    )?;
    println!("load average at the start: {}", load_average());
    let work = WorkDir::new("gmc", args.keep)?;
    let units = args.runs_max() * UNITS_PER_RUN;
    let started = std::time::Instant::now();
    let mut grid = GridMission::start(&bin_dir, &work.path, units, units)?;
    println!(
        "Grid: hosts edge, site up after {:.1} s on 127.0.0.1 ports {:?} ({} reconcile rounds after start); \
         grant {} and mission {} of {units} units each; authority voters=2 (edge, site)",
        started.elapsed().as_secs_f64(),
        grid.ports,
        grid.hosts.rounds,
        grid::GRANT,
        grid::MISSION,
    );
    println!(
        "online grant: edge → site over HTTPS (mutual TLS 1.3), site journals, charges grant {}, runs {}, answers: contacts site",
        grid::GRANT,
        grid::PROCESS
    );
    println!(
        "mission allocation: edge runs {} on itself charged to mission:{}: contacts no peer (journeys/mission-offline.kdl runs it partitioned)",
        grid::PROCESS,
        grid::MISSION
    );
    println!(
        "{} valid samples wanted, at most {} attempts, {} warm-up runs of each way, {} ms pause after every run; a run over {MISSION_COMPARE_RUN_MS_MAX} ms invalidates its sample",
        args.samples, args.attempts, args.warmup_runs, args.settle_ms
    );
    let pid = |host: &str| {
        grid.hosts
            .procs
            .pid(&format!("gridd {host}"))
            .ok_or_else(|| format!("no gridd {host}"))
    };
    let gridds = Gridds([pid(GRIDDS[0])?, pid(GRIDDS[1])?]);
    let mut runner = grid.runner()?;
    let mut succeeded = Succeeded::default();
    for mode in [Mode::Online, Mode::Mission] {
        let first = grid.first_run(&mut runner, mode)?;
        let run = first.outcome.expect("first_run returns a success");
        runner.check(mode, &run)?;
        succeeded.count(mode);
    }

    let mut warmup_failures = Failures::default();
    for i in 0..args.warmup_runs {
        for mode in [Mode::Online, Mode::Mission] {
            let id = format!("w{}-{i}", mode.tag());
            let m = measure(
                &mut runner,
                &gridds,
                args.settle(),
                &mut succeeded,
                id,
                mode,
            )?;
            if let Err(reason) = m.outcome {
                warmup_failures.note(false, &format!("{}: {reason}", mode.name()));
            }
        }
    }

    let mut valid = Vec::with_capacity(args.samples);
    let mut invalid = Failures::default();
    let mut attempts = 0;
    while valid.len() < args.samples && attempts < args.attempts {
        let attempt = attempts;
        attempts += 1;
        let order = Order::of_attempt(attempt);
        let modes = match order {
            Order::OnlineFirst => [Mode::Online, Mode::Mission],
            Order::MissionFirst => [Mode::Mission, Mode::Online],
        };
        let mut online = None;
        let mut mission = None;
        for mode in modes {
            let id = format!("{}-{attempt}", mode.tag());
            let m = measure(
                &mut runner,
                &gridds,
                args.settle(),
                &mut succeeded,
                id,
                mode,
            )?;
            match mode {
                Mode::Online => online = Some(m),
                Mode::Mission => mission = Some(m),
            }
        }
        let (online, mission) = (online.expect("ran"), mission.expect("ran"));
        match Sample::judge(attempt, order, online, mission) {
            Ok(sample) => valid.push(sample),
            Err(reason) => {
                println!("  attempt {attempt}: INVALID: {reason}");
                invalid.note(true, &reason);
            }
        }
    }
    grid.hosts.procs.check_running()?;

    print_samples(&valid);
    let summary = print_summary(&valid, args.settle());
    println!();
    println!(
        "attempts {attempts}: {} valid, {} invalid",
        valid.len(),
        invalid.recorded
    );
    for (reason, n) in &invalid.reasons {
        println!("  - {n} × {reason}");
    }
    for (reason, n) in &warmup_failures.reasons {
        println!("  - {n} × {reason}");
    }

    // What the receivers hold: every succeeded run executed once and charged once.
    println!();
    println!("what the hosts hold after the samples:");
    let site = grid.totals(grid::SITE)?;
    expect_equal(
        "site: runs succeeded (as receiver)",
        site.runs.succeeded,
        succeeded.online,
    )?;
    expect_equal("site: demo.count", site.demo_count, succeeded.online)?;
    let grant = site
        .grant
        .ok_or_else(|| format!("grant {} not found at site", grid::GRANT))?;
    expect_equal(
        &format!("site: grant {} consumed", grid::GRANT),
        grant.consumed,
        succeeded.online * UNITS_PER_RUN,
    )?;
    let edge = grid.totals(grid::EDGE)?;
    expect_equal(
        "edge: runs succeeded (as receiver)",
        edge.runs.succeeded,
        succeeded.mission,
    )?;
    expect_equal("edge: demo.count", edge.demo_count, succeeded.mission)?;
    let mission = grid.mission()?;
    expect_equal(
        &format!("edge: mission {} units consumed", grid::MISSION),
        mission.units.consumed,
        succeeded.mission * UNITS_PER_RUN,
    )?;
    println!(
        "  unknown: site {}, edge {}; mission {} state {}, units allocated {}, available {}",
        site.runs.unknown,
        edge.runs.unknown,
        grid::MISSION,
        mission.state.name(),
        mission.units.allocated,
        mission.units.available
    );

    // The issuer and the authority's majority gone: mission runs still succeed.
    grid.hosts.procs.kill("gridd site")?;
    println!();
    println!(
        "gridd site SIGKILLed (the mission's issuer; the authority has no majority of its two voters):"
    );
    let mut offline = Vec::with_capacity(MISSION_COMPARE_OFFLINE_RUNS);
    for i in 0..MISSION_COMPARE_OFFLINE_RUNS {
        let timed = runner.run(format!("off-{i}"), Mode::Mission);
        match timed.outcome {
            Ok(run) => {
                runner.check(Mode::Mission, &run)?;
                succeeded.count(Mode::Mission);
                offline.push(timed.wall.as_nanos() as u64);
            }
            Err(reason) => {
                return Err(format!(
                    "offline mission run off-{i} did not succeed with site down: {reason}"
                )
                .into());
            }
        }
    }
    offline.sort_unstable();
    println!(
        "  {} of {MISSION_COMPARE_OFFLINE_RUNS} mission runs succeeded, their receipts verified; wall time p50 {}, max {}",
        offline.len(),
        ms(grid_benches::report::percentile(&offline, 0.5)),
        ms(grid_benches::report::percentile(&offline, 1.0)),
    );
    let online = runner.run("off-online".to_owned(), Mode::Online);
    match online.outcome {
        Ok(run) => {
            return Err(format!("an online run succeeded with site SIGKILLed: {run:?}").into());
        }
        Err(reason) => println!(
            "  an online run did not succeed, as it must not ({}): {reason}",
            ms(online.wall)
        ),
    }
    let mission = grid.mission()?;
    expect_equal(
        &format!("edge: mission {} units consumed", grid::MISSION),
        mission.units.consumed,
        succeeded.mission * UNITS_PER_RUN,
    )?;
    let edge = grid.totals(grid::EDGE)?;
    expect_equal("edge: demo.count", edge.demo_count, succeeded.mission)?;

    println!();
    if valid.len() < args.samples {
        return Err(format!(
            "only {} valid samples of the {} wanted in {attempts} attempts (MISSION_COMPARE_ATTEMPTS_MAX {MISSION_COMPARE_ATTEMPTS_MAX}); the reasons are above",
            valid.len(),
            args.samples
        )
        .into());
    }
    if let Some((time, cpu)) = summary {
        println!(
            "summary: mission / online over {} valid paired samples ({} invalid of {attempts}): \
             time {} (p10–p90 {}–{}), gridd CPU {} (p10–p90 {}–{})",
            valid.len(),
            invalid.recorded,
            times(time.median),
            times(time.p10),
            times(time.p90),
            times(cpu.median),
            times(cpu.p10),
            times(cpu.p90),
        );
    }
    println!(
        "whole run: {:.1} s; load average at the end: {}; every gridd is SIGKILLed now",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    drop(runner);
    drop(grid);
    drop(work);
    Ok(())
}
