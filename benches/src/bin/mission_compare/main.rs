//! What a mission's offline allocation costs beside an online grant, in paired samples
//! (BENCHMARKS.md, "Missions: offline allocation vs online grant"; issue 19's "Must
//! show"): the same Process, `demo.count`, run once under the online grant and once on
//! the mission allocation per sample, in alternating order.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo build --release -p grid-benches --no-default-features --bin mission_compare
//! target/release/mission_compare [--samples 40 --attempts 200 --warmup-runs 20 --settle-ms 10 --keep]
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
//! right after it; then a pause (`--settle-ms`) before the next run, over which the
//! gridds' CPU is read apart (what the run left behind). A sample is the pair (online first in even attempts, mission first
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

mod checks;
mod grid;
mod samples;
mod tables;

use std::time::{Duration, Instant};

use clap::Parser;

use grid_benches::bringup::exit_on_error;
use grid_benches::limits::{
    MISSION_COMPARE_ATTEMPTS_MAX, MISSION_COMPARE_OFFLINE_RUNS, MISSION_COMPARE_RUN_MS_MAX,
    MISSION_COMPARE_SAMPLES_VALID, MISSION_COMPARE_SETTLE_MS_MAX, MISSION_COMPARE_WARMUP_RUNS_MAX,
};
use grid_benches::measure::Failures;
use grid_benches::procs::{Result, WorkDir, grid_bin_dir, on_cpu_ns};
use grid_benches::report::print_header;
use grid_engine::processes::grants::UNITS_PER_RUN;

use checks::Succeeded;
use grid::{GridMission, Mode, Runner};
use samples::{GRIDDS, Measured, Order, Sample};
use tables::{load_average, print_samples, print_summary, times};

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

fn delta(before: [u64; 2], after: [u64; 2]) -> [i128; 2] {
    [
        after[0] as i128 - before[0] as i128,
        after[1] as i128 - before[1] as i128,
    ]
}

/// The runs of the benchmark, one at a time through one control connection to `edge`.
struct Bench {
    runner: Runner,
    gridds: Gridds,
    settle: Duration,
    succeeded: Succeeded,
}

/// The valid samples, the invalid ones' reasons, and the attempts made.
struct Taken {
    valid: Vec<Sample>,
    invalid: Failures,
    attempts: usize,
}

impl Bench {
    /// One run, measured, then the pause `settle`; a succeeded run must show its
    /// receiver, its charge and a receipt that verifies (else an error).
    fn measure(&mut self, id: String, mode: Mode) -> Result<Measured> {
        let before = self.gridds.on_cpu()?;
        let timed = self.runner.run(id, mode);
        let after = self.gridds.on_cpu()?;
        std::thread::sleep(self.settle);
        let settled = self.gridds.on_cpu()?;
        let outcome = match timed.outcome {
            Ok(run) => {
                self.runner.check(mode, &run)?;
                self.succeeded.count(mode);
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

    /// `runs` of each way, alternating, not recorded; their failures.
    fn warm_up(&mut self, runs: usize) -> Result<Failures> {
        let mut failures = Failures::default();
        for i in 0..runs {
            for mode in [Mode::Online, Mode::Mission] {
                if let Err(reason) = self.measure(format!("w{}-{i}", mode.tag()), mode)?.outcome {
                    failures.note(false, &format!("{}: {reason}", mode.name()));
                }
            }
        }
        Ok(failures)
    }

    /// Paired samples until `wanted` are valid or `attempts_max` were made.
    fn take(&mut self, wanted: usize, attempts_max: usize) -> Result<Taken> {
        let mut taken = Taken {
            valid: Vec::with_capacity(wanted),
            invalid: Failures::default(),
            attempts: 0,
        };
        while taken.valid.len() < wanted && taken.attempts < attempts_max {
            let attempt = taken.attempts;
            taken.attempts += 1;
            let order = Order::of_attempt(attempt);
            let (online, mission) = match order {
                Order::OnlineFirst => {
                    let online = self.measure(format!("on-{attempt}"), Mode::Online)?;
                    (
                        online,
                        self.measure(format!("mi-{attempt}"), Mode::Mission)?,
                    )
                }
                Order::MissionFirst => {
                    let mission = self.measure(format!("mi-{attempt}"), Mode::Mission)?;
                    (
                        self.measure(format!("on-{attempt}"), Mode::Online)?,
                        mission,
                    )
                }
            };
            match Sample::judge(attempt, order, online, mission) {
                Ok(sample) => taken.valid.push(sample),
                Err(reason) => {
                    println!("  attempt {attempt}: INVALID: {reason}");
                    taken.invalid.note(true, &reason);
                }
            }
        }
        Ok(taken)
    }
}

/// What each way contacts, and the settings, before any figure.
fn print_setup(args: &Args, grid: &GridMission, units: u64, up_after: Duration) {
    println!(
        "Grid: hosts edge, site up after {:.1} s on 127.0.0.1 ports {:?} ({} reconcile rounds after start); \
         grant {} and mission {} of {units} units each; authority voters=2 (edge, site)",
        up_after.as_secs_f64(),
        grid.ports,
        grid.hosts.rounds,
        grid::GRANT,
        grid::MISSION,
    );
    println!(
        "online grant: edge → site over HTTPS (mutual TLS 1.3); site journals, charges grant {}, runs {}, answers: contacts site",
        grid::GRANT,
        grid::PROCESS
    );
    println!(
        "mission allocation: edge runs {} on itself, charged to mission:{}: contacts no peer (journeys/mission-offline.kdl runs it partitioned)",
        grid::PROCESS,
        grid::MISSION
    );
    println!(
        "{} valid samples wanted, at most {} attempts, {} warm-up runs of each way, {} ms pause after every run; a run over {MISSION_COMPARE_RUN_MS_MAX} ms invalidates its sample",
        args.samples, args.attempts, args.warmup_runs, args.settle_ms
    );
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
    let started = Instant::now();
    let mut grid = GridMission::start(&bin_dir, &work.path, units, units)?;
    print_setup(&args, &grid, units, started.elapsed());
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
        let run = grid.first_run(&mut runner, mode)?;
        runner.check(mode, &run)?;
        succeeded.count(mode);
    }
    let mut bench = Bench {
        runner,
        gridds,
        settle: args.settle(),
        succeeded,
    };
    let warmup_failures = bench.warm_up(args.warmup_runs)?;
    let taken = bench.take(args.samples, args.attempts)?;
    grid.hosts.procs.check_running()?;

    print_samples(&taken.valid);
    let summary = print_summary(&taken.valid, args.settle());
    println!();
    println!(
        "attempts {}: {} valid, {} invalid",
        taken.attempts,
        taken.valid.len(),
        taken.invalid.recorded
    );
    for (reason, n) in &taken.invalid.reasons {
        println!("  - {n} × {reason}");
    }
    if !warmup_failures.is_empty() {
        println!("warm-up runs that did not succeed:");
        for (reason, n) in &warmup_failures.reasons {
            println!("  - {n} × {reason}");
        }
    }

    checks::holdings(&grid, &bench.succeeded)?;
    checks::offline(&mut grid, &mut bench.runner, &mut bench.succeeded)?;

    println!();
    if taken.valid.len() < args.samples {
        return Err(format!(
            "only {} valid samples of the {} wanted in {} attempts (MISSION_COMPARE_ATTEMPTS_MAX {MISSION_COMPARE_ATTEMPTS_MAX}); the reasons are above",
            taken.valid.len(),
            args.samples,
            taken.attempts
        )
        .into());
    }
    if let Some((time, cpu)) = summary {
        println!(
            "summary: mission / online over {} valid paired samples ({} invalid of {}): \
             time {} (p10–p90 {}–{}), gridd CPU {} (p10–p90 {}–{})",
            taken.valid.len(),
            taken.invalid.recorded,
            taken.attempts,
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
    // Drop order: the connection, the gridds, then the work directory.
    drop(bench);
    drop(grid);
    drop(work);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> Args {
        let mut all = vec!["mission_compare"];
        all.extend_from_slice(argv);
        Args::try_parse_from(all).expect("parses")
    }

    #[test]
    fn the_arguments_are_bounded_by_the_limits() {
        let defaults = args(&[]);
        assert!(defaults.check().is_ok());
        assert_eq!(defaults.samples, MISSION_COMPARE_SAMPLES_VALID);
        assert_eq!(defaults.attempts, MISSION_COMPARE_ATTEMPTS_MAX);
        // One unit per run: the first check, 20 warm-up runs, 200 attempts, 10 offline.
        assert_eq!(defaults.runs_max(), 231);
        assert!(args(&["--attempts", "201"]).check().is_err());
        assert!(args(&["--samples", "0"]).check().is_err());
        assert!(
            args(&["--samples", "41", "--attempts", "40"])
                .check()
                .is_err()
        );
        assert!(args(&["--warmup-runs", "51"]).check().is_err());
        assert!(args(&["--settle-ms", "1001"]).check().is_err());
        assert!(args(&["--settle-ms", "0"]).check().is_ok());
    }
}
