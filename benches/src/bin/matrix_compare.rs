//! Matrices end to end (BENCHMARKS.md, "Matrices on a mapping"): 16,384-cell GRDX
//! matrices on an encrypted mapping beside the same bytes as 16,384 scalars on an
//! encrypted Ordered route, in one run, on the same two hosts: `hq` publishes (and holds
//! the membership's authority), `edge` receives.
//!
//! Measured, for each side, while `--callers` threads publish at hq as fast as their
//! answers come: cells acknowledged end to end per second (edge's signed receipt, back
//! at hq, covering them) — a matrix counts its 16,384 cells, a scalar one; and one matrix
//! at a time, from the publish call to edge's receipt covering it (p50, p99), beside
//! 16,384 scalars published by the same callers and receipted.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl
//! cargo run --release -p grid-benches --bin matrix_compare [-- --seconds 5 --warmup 1 --callers 8 --matrices 20 --keep]
//! ```

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;

use grid_engine::grdx::Matrix;

use grid_benches::bringup::{exit_on_error, start_bench};
use grid_benches::procs::Result;
use grid_benches::publisher::Publisher;
use grid_benches::report::{Table, ms, percentile};

const HOSTS: [&str; 2] = ["hq", "edge"];
const MAPPING: &str = "table";
const ROUTE: &str = "cells";
const SIDE: u32 = 128;
const CELLS: u64 = (SIDE * SIDE) as u64;
/// How long a publication may take to reach edge's receipt before the run fails.
const RECEIPT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Parser)]
#[command(name = "matrix_compare")]
struct Args {
    /// Seconds each throughput measurement records.
    #[arg(long, default_value = "5")]
    seconds: f64,
    /// Seconds of publishing before each throughput window.
    #[arg(long, default_value = "1")]
    warmup: f64,
    /// Threads publishing at hq, on each side.
    #[arg(long, default_value = "8")]
    callers: usize,
    /// Matrices (and as many 16,384-scalar rounds) for the one-at-a-time latency.
    #[arg(long, default_value = "20")]
    matrices: u64,
    /// Keep the work directory.
    #[arg(long)]
    keep: bool,
}

fn topology(ports: &[u16]) -> String {
    format!(
        r#"grid version=1
// Written by benches matrix_compare.
membership ops {{
    authority voters=1
}}
host hq listen="127.0.0.1:{}" {{
    member ops
    profiles transport authority delivery
}}
host edge listen="127.0.0.1:{}" {{
    member ops
    profiles transport delivery
}}
mapping {MAPPING} membership=ops format="grdx" rows={SIDE} cols={SIDE} {{
    publisher hq
    destination edge
}}
route {ROUTE} membership=ops class=ordered encrypted=#true {{
    publisher hq
    destination edge
}}
"#,
        ports[0], ports[1]
    )
}

fn main() {
    exit_on_error("matrix_compare", run(Args::parse()));
}

/// The hex of a 128 × 128 GRDX matrix whose cells depend on `seed` (every cell distinct).
fn matrix_hex(seed: u64) -> String {
    let cells = (0..CELLS)
        .map(|i| seed as f64 * 1e6 + i as f64 + 0.25)
        .collect();
    hex::encode(
        Matrix::new(SIDE, SIDE, cells)
            .expect("a valid matrix")
            .encode(),
    )
}

fn run(args: Args) -> Result<()> {
    let (_work, hosts) = start_bench(
        "Matrices on an encrypted mapping beside the same bytes as scalars on an encrypted Ordered route",
        "matrix-compare",
        args.keep,
        &HOSTS,
        topology,
    )?;
    let hq = hosts.host_dir("hq");
    let window = Duration::from_secs_f64(args.seconds);
    let warmup = Duration::from_secs_f64(args.warmup);
    let callers = args.callers.max(1);

    let matrices_rate = throughput(&hq, Side::Matrices, callers, warmup, window)?;
    let scalars_rate = throughput(&hq, Side::Scalars, callers, warmup, window)?;
    let matrix_latency = latencies(&hq, Side::Matrices, callers, args.matrices)?;
    let scalar_latency = latencies(&hq, Side::Scalars, callers, args.matrices.min(5))?;

    let mut table = Table::new(
        &[
            "hq → edge",
            "cells/s end to end",
            "128 × 128 tables/s",
            "one table p50",
            "p99",
        ],
        "lrrrr",
    );
    for (name, rate, sorted) in [
        ("matrices on the mapping", matrices_rate, &matrix_latency),
        (
            "scalars on the Ordered route",
            scalars_rate,
            &scalar_latency,
        ),
    ] {
        table.row(vec![
            name.to_owned(),
            format!("{rate:.0}"),
            format!("{:.2}", rate / CELLS as f64),
            ms(percentile(sorted, 0.50)),
            ms(percentile(sorted, 0.99)),
        ]);
    }
    println!(
        "\nCells acknowledged by edge per second ({callers} callers at hq, {:.0} s window); one table at a time ({} matrices; {} rounds of 16,384 scalars by the same callers):",
        args.seconds,
        args.matrices,
        args.matrices.min(5)
    );
    table.print();
    println!(
        "\nmapping / Ordered route, cells per second: {:.1}",
        matrices_rate / scalars_rate.max(1e-9)
    );
    let state = hq
        .parent()
        .and_then(Path::parent)
        .ok_or("no state directory")?
        .to_path_buf();
    let staged = grid_reconciler::mappings::held(&state, MAPPING, "edge")?;
    println!(
        "evidence: edge staged {MAPPING} up to version {} (the newest {} listed, each opened and checked whole again by its host)",
        staged.versions.last().map_or(0, |v| v.position),
        staged.versions.len()
    );
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Matrices,
    Scalars,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Matrices => MAPPING,
            Side::Scalars => ROUTE,
        }
    }

    fn cells(self) -> u64 {
        match self {
            Side::Matrices => CELLS,
            Side::Scalars => 1,
        }
    }
}

/// One publication on `side` by caller `caller`: a matrix, or one scalar.
fn publish_one(
    publisher: &mut Publisher,
    side: Side,
    seed: u64,
) -> std::result::Result<u64, String> {
    match side {
        Side::Matrices => publisher.publish_matrix(MAPPING, &matrix_hex(seed)),
        Side::Scalars => publisher.publish(ROUTE, seed as f64 + 0.25),
    }
}

/// Cells edge receipted on `side` per second while `callers` threads publish at hq.
fn throughput(
    hq: &Path,
    side: Side,
    callers: usize,
    warmup: Duration,
    window: Duration,
) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let seeds = Arc::new(AtomicU64::new(1 << 32));
    let mut threads = Vec::new();
    for _ in 0..callers {
        let (stop, seeds, dir) = (stop.clone(), seeds.clone(), hq.to_owned());
        threads.push(std::thread::spawn(
            move || -> std::result::Result<u64, String> {
                let mut publisher = Publisher::connect(dir).map_err(|e| e.to_string())?;
                let mut last = 0;
                while !stop.load(Ordering::Relaxed) {
                    let seed = seeds.fetch_add(1, Ordering::Relaxed);
                    match publish_one(&mut publisher, side, seed) {
                        Ok(position) => last = last.max(position),
                        // Pushed back: nothing was published; publish again once receipts
                        // free capacity (what a real publisher does).
                        Err(reason) if reason.contains("capacity exhausted") => {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(reason) => return Err(reason),
                    }
                }
                Ok(last)
            },
        ));
    }
    let mut poller = Publisher::connect(hq.to_owned())?;
    std::thread::sleep(warmup);
    let first = poller.receipted(side.name(), "edge")?;
    let started = Instant::now();
    std::thread::sleep(window);
    let last = poller.receipted(side.name(), "edge")?;
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut published = 0;
    for t in threads {
        let last = t
            .join()
            .map_err(|_| "a publisher thread panicked")?
            .map_err(|e| format!("a publish was refused: {e}"))?;
        published = published.max(last);
    }
    drained(hq, side.name(), published)?;
    Ok((last - first) as f64 * side.cells() as f64 / elapsed)
}

/// Waits (bounded) until edge's receipt on `route` covers `position`.
fn drained(hq: &Path, route: &str, position: u64) -> Result<()> {
    let mut poller = Publisher::connect(hq.to_owned())?;
    let started = Instant::now();
    while poller.receipted(route, "edge")? < position {
        if started.elapsed() > RECEIPT_TIMEOUT {
            return Err(format!(
                "edge did not receipt position {position} of {route} within {RECEIPT_TIMEOUT:?}"
            )
            .into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// `count` tables one at a time, in nanoseconds, sorted: a matrix from its publish call
/// to edge's receipt covering it; or 16,384 scalars published by `callers` threads
/// from the first call to edge's receipt covering the last.
fn latencies(hq: &Path, side: Side, callers: usize, count: u64) -> Result<Vec<u64>> {
    let mut poller = Publisher::connect(hq.to_owned())?;
    let mut out = Vec::with_capacity(count as usize);
    let mut publishers: Vec<Publisher> = (0..callers)
        .map(|_| Publisher::connect(hq.to_owned()))
        .collect::<Result<_>>()?;
    for round in 0..count {
        let started = Instant::now();
        let highest = match side {
            Side::Matrices => publish_one(&mut publishers[0], side, round)?,
            Side::Scalars => {
                let next = Arc::new(AtomicU64::new(0));
                let mut highest = 0;
                std::thread::scope(|scope| -> std::result::Result<(), String> {
                    let handles: Vec<_> = publishers
                        .iter_mut()
                        .map(|p| {
                            let next = next.clone();
                            scope.spawn(move || -> std::result::Result<u64, String> {
                                let mut last = 0;
                                loop {
                                    let i = next.fetch_add(1, Ordering::Relaxed);
                                    if i >= CELLS {
                                        return Ok(last);
                                    }
                                    last = last.max(publish_one(p, side, round * CELLS + i)?);
                                }
                            })
                        })
                        .collect();
                    for h in handles {
                        highest = highest.max(h.join().map_err(|_| "a publisher panicked")??);
                    }
                    Ok(())
                })?;
                highest
            }
        };
        while poller.receipted(side.name(), "edge")? < highest {
            if started.elapsed() > RECEIPT_TIMEOUT {
                return Err(format!("round {round} on {} not receipted", side.name()).into());
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        out.push(started.elapsed().as_nanos() as u64);
    }
    out.sort_unstable();
    Ok(out)
}
