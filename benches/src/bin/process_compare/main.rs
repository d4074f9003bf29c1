//! Grid's remote Processes beside their floor, side by side in one run (BENCHMARKS.md,
//! "Remote Processes"): durable direct invocations per second and their p50/p99
//! latency at 1 and 64 concurrent callers, and the mailbox round trip, beside a plain
//! HTTPS request/response without journaling — what durability costs.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo run --release -p grid-benches --bin process_compare \
//!     [-- --seconds 5 --warmup 1 --concurrency 1,64 --mailbox-concurrency 1,16 \
//!         --only grid|floor --no-reconnect --keep]
//! ```
//!
//! It brings up, on loopback and at the same time, three Grid hosts (`receiver`,
//! `caller`, `mailbox`; profiles `transport processes`; a grant of 100,000,000 units
//! from `receiver` to `caller` with `mailbox` as its mailbox) and the floor's server (a
//! separate process: this executable with `--serve-floor`). Then, per row and number of
//! concurrent callers:
//!
//! - **direct**: Grid: `Call::Process { Run }` of `demo.count` at `receiver` over the
//!   caller host's control socket (one connection per caller thread, each sending runs
//!   back to back, every request id new); `caller` sends the request to `receiver` over
//!   HTTPS (mutual TLS 1.3); `receiver` journals it, charges the grant, executes,
//!   journals the outcome and answers; a call counts when the caller host answers
//!   `Ran { outcome: succeeded }`. The floor: one mutual-TLS 1.3 connection per caller
//!   task, `POST /run` with the same small JSON request and a small JSON reply, nothing
//!   journaled.
//! - **direct, new TLS connection per call** (the floor only, beside Grid's direct
//!   figures; `--no-reconnect` skips it): each call opens its own connection (TCP, the
//!   TLS 1.3 handshake with client certificate), calls once and closes it — as Grid's
//!   caller host connects to the receiver anew for every run.
//! - **mailbox**: the same Grid call with `via: mailbox` (the request sealed for
//!   `receiver` and deposited at `mailbox`, the outcome deposited back), beside the
//!   same floor at the same concurrency.
//!
//! Each measurement runs a warm-up (not recorded), then records every call that starts
//! within the window; throughput = succeeded calls over the time from the window's
//! start to the last recorded completion; p50/p99 nearest-rank. Every server is
//! SIGKILLed at the end, also on an error or a panic (and, by `PR_SET_PDEATHSIG`, if
//! this process dies); the work directory is removed unless `--keep`.

mod floor;
mod grid;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use grid_benches::procs::{
    Result, WorkDir, cpu_time, cpu_time_of, grid_bin_dir, machine, report_gridd,
};
use grid_engine::host::control::CONTROL_CONNECTIONS_MAX;

struct Args {
    seconds: f64,
    warmup: f64,
    concurrency: Vec<usize>,
    mailbox_concurrency: Vec<usize>,
    only: Option<String>,
    /// Also measure the floor with a new TLS connection per call.
    reconnect: bool,
    keep: bool,
}

const USAGE: &str = "usage: process_compare [--seconds 5] [--warmup 1] [--concurrency 1,64] \
                     [--mailbox-concurrency 1,16 (0: skip)] [--only grid|floor] [--no-reconnect] [--keep]";

fn parse_list(text: &str) -> Result<Vec<usize>> {
    if text.trim() == "0" {
        return Ok(Vec::new());
    }
    Ok(text
        .split(',')
        .map(|c| c.trim().parse::<usize>())
        .collect::<std::result::Result<_, _>>()?)
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        seconds: 5.0,
        warmup: 1.0,
        concurrency: vec![1, 64],
        mailbox_concurrency: vec![1, 16],
        only: None,
        reconnect: true,
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--seconds" => args.seconds = value()?.parse()?,
            "--warmup" => args.warmup = value()?.parse()?,
            "--concurrency" => args.concurrency = parse_list(&value()?)?,
            "--mailbox-concurrency" => args.mailbox_concurrency = parse_list(&value()?)?,
            "--only" => {
                let only = value()?;
                if only != "grid" && only != "floor" {
                    return Err("--only grid|floor".into());
                }
                args.only = Some(only);
            }
            "--no-reconnect" => args.reconnect = false,
            "--keep" => args.keep = true,
            other => return Err(format!("unknown argument {other}; {USAGE}").into()),
        }
    }
    if args
        .concurrency
        .iter()
        .chain(&args.mailbox_concurrency)
        .any(|&c| c == 0 || c > CONTROL_CONNECTIONS_MAX)
    {
        // A host serves at most CONTROL_CONNECTIONS_MAX (64) control connections.
        return Err(format!(
            "--concurrency, --mailbox-concurrency: each between 1 and {CONTROL_CONNECTIONS_MAX}"
        )
        .into());
    }
    if !(args.seconds > 0.0 && args.seconds <= 600.0 && (0.0..=60.0).contains(&args.warmup)) {
        return Err("--seconds: more than 0 and at most 600; --warmup: 0 to 60".into());
    }
    Ok(args)
}

/// Nanoseconds since the run's origin: every time below is on this one clock.
fn since(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// When a measurement's warm-up ends and its window closes.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    end: Instant,
    from_ns: u64,
    end_ns: u64,
}

impl Window {
    fn starting_now(args: &Args, t0: Instant) -> Window {
        let measure_from = Instant::now() + Duration::from_secs_f64(args.warmup);
        let end = measure_from + Duration::from_secs_f64(args.seconds);
        Window {
            measure_from,
            end,
            from_ns: (measure_from - t0).as_nanos() as u64,
            end_ns: (end - t0).as_nanos() as u64,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Row {
    Direct,
    /// The floor only: a new TLS connection for every call (as Grid's caller host
    /// opens one to the receiver for every run); beside Grid's direct figures.
    Reconnect,
    Mailbox,
}

impl Row {
    fn name(self) -> &'static str {
        match self {
            Row::Direct => "direct",
            Row::Reconnect => "direct, new TLS connection per call",
            Row::Mailbox => "mailbox",
        }
    }

    /// The request ids' prefix (with the concurrency, unique per measurement).
    fn tag(self) -> &'static str {
        match self {
            Row::Direct => "d",
            Row::Reconnect => "r",
            Row::Mailbox => "m",
        }
    }
}

const GRID: &str = "Grid";
const FLOOR: &str = "HTTPS floor";

/// What one caller recorded (warm-up included; the cell filters).
#[derive(Default)]
struct Record {
    /// `(start, end)` of every call that succeeded, in ns since t0.
    calls: Vec<(u64, u64)>,
    failed: u64,
    warmup_failed: u64,
    failures: BTreeMap<String, u64>,
}

impl Record {
    fn note(
        &mut self,
        window: &Window,
        start_ns: u64,
        t0: Instant,
        outcome: std::result::Result<(), String>,
    ) {
        match outcome {
            Ok(()) => self.calls.push((start_ns, since(t0))),
            Err(reason) => {
                let recorded = start_ns >= window.from_ns;
                if recorded {
                    self.failed += 1;
                } else {
                    self.warmup_failed += 1;
                }
                let reason: String = reason.chars().take(200).collect();
                let reason = if recorded {
                    reason
                } else {
                    format!("(warm-up) {reason}")
                };
                *self.failures.entry(reason).or_default() += 1;
            }
        }
    }
}

/// One measurement of one row.
struct Cell {
    row: Row,
    system: &'static str,
    concurrency: usize,
    succeeded: u64,
    failed: u64,
    warmup_failed: u64,
    failures: BTreeMap<String, u64>,
    /// From the window's start to the last recorded completion.
    elapsed: Duration,
    latency_ns: Vec<u64>,
    server_cpu: Duration,
    client_cpu: Duration,
}

impl Cell {
    fn new(
        row: Row,
        system: &'static str,
        concurrency: usize,
        window: &Window,
        records: Vec<Record>,
        (server_cpu, client_cpu): (Duration, Duration),
    ) -> Cell {
        let mut cell = Cell {
            row,
            system,
            concurrency,
            succeeded: 0,
            failed: 0,
            warmup_failed: 0,
            failures: BTreeMap::new(),
            elapsed: Duration::ZERO,
            latency_ns: Vec::new(),
            server_cpu,
            client_cpu,
        };
        let mut last = window.end_ns;
        for r in records {
            cell.failed += r.failed;
            cell.warmup_failed += r.warmup_failed;
            for (reason, n) in r.failures {
                *cell.failures.entry(reason).or_default() += n;
            }
            for (start, end) in r.calls {
                if start < window.from_ns || start >= window.end_ns {
                    continue;
                }
                cell.succeeded += 1;
                cell.latency_ns.push(end - start);
                last = last.max(end);
            }
        }
        cell.elapsed = Duration::from_nanos(last - window.from_ns);
        cell.latency_ns.sort_unstable();
        cell
    }

    fn per_second(&self) -> f64 {
        self.succeeded as f64 / self.elapsed.as_secs_f64()
    }

    fn p(&self, p: f64) -> Duration {
        percentile(&self.latency_ns, p)
    }

    fn mean(&self) -> Duration {
        if self.latency_ns.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.latency_ns.iter().sum::<u64>() / self.latency_ns.len() as u64)
    }

    fn per_call(&self, cpu: Duration) -> String {
        if self.succeeded == 0 {
            return "–".to_owned();
        }
        format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / self.succeeded as f64)
    }
}

/// Nearest-rank percentile of sorted nanoseconds.
fn percentile(sorted: &[u64], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).max(1);
    Duration::from_nanos(sorted[rank.min(sorted.len()) - 1])
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
    grid: &mut grid::GridProcesses,
    args: &Args,
    row: Row,
    concurrency: usize,
    t0: Instant,
) -> Result<Cell> {
    let mut callers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        callers.push(grid.caller()?);
    }
    let via_mailbox = row == Row::Mailbox;
    let pids = grid.procs.pids();
    let window = Window::starting_now(args, t0);
    let handles: Vec<_> = callers
        .into_iter()
        .enumerate()
        .map(|(i, mut caller)| {
            std::thread::spawn(move || {
                let mut record = Record::default();
                for seq in 0u64.. {
                    let start = Instant::now();
                    if start >= window.end {
                        break;
                    }
                    let start_ns = (start - t0).as_nanos() as u64;
                    let id = format!("{}{concurrency}-{i}-{seq}", row.tag());
                    let outcome = caller.run(id, via_mailbox);
                    let failed = outcome.is_err();
                    record.note(&window, start_ns, t0, outcome);
                    if failed {
                        // Refused or unknown: do not spin.
                        std::thread::sleep(Duration::from_millis(1));
                    }
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
    grid.procs.check_running()?;
    Ok(Cell::new(
        row,
        GRID,
        concurrency,
        &window,
        records,
        (
            server1.saturating_sub(server0),
            client1.saturating_sub(client0),
        ),
    ))
}

async fn measure_floor(
    server: &mut floor::FloorServer,
    args: &Args,
    row: Row,
    concurrency: usize,
    t0: Instant,
) -> Result<Cell> {
    let reconnect = row == Row::Reconnect;
    let mut clients = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        clients.push(if reconnect {
            None
        } else {
            Some(server.connect().await?)
        });
    }
    let connector = server.connector();
    let pids = server.procs.pids();
    let window = Window::starting_now(args, t0);
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, mut client)| {
            let connector = connector.clone();
            tokio::spawn(async move {
                let mut record = Record::default();
                for seq in 0u64.. {
                    let start = Instant::now();
                    if start >= window.end {
                        break;
                    }
                    let start_ns = (start - t0).as_nanos() as u64;
                    let id = format!("{}{concurrency}-{i}-{seq}", row.tag());
                    let outcome = match &mut client {
                        Some(client) => client.run(&id).await,
                        // Connect (TCP, TLS 1.3 handshake), call once, close.
                        None => match connector.connect().await {
                            Ok(mut fresh) => fresh.run(&id).await,
                            Err(e) => Err(format!("connecting: {e}")),
                        },
                    };
                    let failed = outcome.is_err();
                    record.note(&window, start_ns, t0, outcome);
                    if failed {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                record
            })
        })
        .collect();
    tokio::time::sleep_until(window.measure_from.into()).await;
    let (server0, client0) = (cpu_time_of(&pids), cpu_time(None));
    let mut records = Vec::with_capacity(concurrency);
    for task in tasks {
        records.push(
            task.await
                .map_err(|e| format!("a floor caller failed: {e}"))?,
        );
    }
    let (server1, client1) = (cpu_time_of(&pids), cpu_time(None));
    server.procs.check_running()?;
    Ok(Cell::new(
        row,
        FLOOR,
        concurrency,
        &window,
        records,
        (
            server1.saturating_sub(server0),
            client1.saturating_sub(client0),
        ),
    ))
}

/// One line per measurement as it finishes (the tables come at the end).
fn report(c: &Cell) {
    println!(
        "  {:<7} {:>2} callers  {:<11} {:>7.0} calls/s  p50 {:>9}  p90 {:>9}  p99 {:>9}  max {:>9}  mean {:>9}  succeeded {:>6}  failed {}  server CPU/call {}  client CPU/call {}",
        c.row.name(),
        c.concurrency,
        c.system,
        c.per_second(),
        ms(c.p(0.50)),
        ms(c.p(0.90)),
        ms(c.p(0.99)),
        ms(c.p(1.0)),
        ms(c.mean()),
        c.succeeded,
        c.failed,
        c.per_call(c.server_cpu),
        c.per_call(c.client_cpu),
    );
}

fn print_tables(cells: &[Cell]) {
    println!();
    println!(
        "| row | callers | system | calls/s | p50 | p99 | mean | succeeded | failed | server CPU / call | client CPU / call |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for c in cells {
        println!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            c.row.name(),
            c.concurrency,
            c.system,
            c.per_second(),
            ms(c.p(0.50)),
            ms(c.p(0.99)),
            ms(c.mean()),
            c.succeeded,
            c.failed,
            c.per_call(c.server_cpu),
            c.per_call(c.client_cpu),
        );
    }
    let find = |system: &str, row: Row, n: usize| {
        cells
            .iter()
            .find(|c| c.system == system && c.row == row && c.concurrency == n)
    };
    let mut keys: Vec<(Row, usize)> = cells.iter().map(|c| (c.row, c.concurrency)).collect();
    keys.sort();
    keys.dedup();
    println!();
    println!(
        "| row | callers | Grid calls/s | floor calls/s | floor / Grid (throughput) | p50 Grid / floor | p99 Grid / floor |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (row, n) in keys {
        // The reconnecting floor stands beside Grid's direct runs.
        let grid_row = if row == Row::Reconnect {
            Row::Direct
        } else {
            row
        };
        let (g, f) = (find(GRID, grid_row, n), find(FLOOR, row, n));
        let show =
            |c: Option<&Cell>| c.map_or("–".to_owned(), |c| format!("{:.0}", c.per_second()));
        let ratio = |num: &dyn Fn(&Cell) -> f64, den: &dyn Fn(&Cell) -> f64| match (g, f) {
            (Some(g), Some(f)) if den(f) > 0.0 => {
                format!("{:.2}×", num(g) / den(f))
            }
            _ => "–".to_owned(),
        };
        let floor_over_grid = match (g, f) {
            (Some(g), Some(f)) if g.per_second() > 0.0 => {
                format!("{:.2}×", f.per_second() / g.per_second())
            }
            _ => "–".to_owned(),
        };
        println!(
            "| {} | {n} | {} | {} | **{}** | {} | {} |",
            row.name(),
            show(g),
            show(f),
            floor_over_grid,
            ratio(&|c| c.p(0.50).as_secs_f64(), &|c| c.p(0.50).as_secs_f64()),
            ratio(&|c| c.p(0.99).as_secs_f64(), &|c| c.p(0.99).as_secs_f64()),
        );
    }
    let mut any = false;
    for c in cells {
        if c.failures.is_empty() {
            continue;
        }
        if !any {
            println!();
            println!("Failures:");
            any = true;
        }
        println!(
            "- {} {} callers, {}: {} failed (+{} in warm-up)",
            c.row.name(),
            c.concurrency,
            c.system,
            c.failed,
            c.warmup_failed
        );
        for (reason, n) in &c.failures {
            println!("    - {n} × {reason}");
        }
    }
    if !any {
        println!();
        println!("Failures: none.");
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let result = if argv.get(1).map(String::as_str) == Some(floor::SERVE_ARG) {
        // The floor's server process (started by the benchmark itself).
        match (argv.get(2), argv.get(3).and_then(|p| p.parse().ok())) {
            (Some(dir), Some(port)) => floor::serve(std::path::Path::new(dir), port),
            _ => Err(format!("{} DIR PORT", floor::SERVE_ARG).into()),
        }
    } else {
        run()
    };
    if let Err(e) = result {
        eprintln!("process_compare: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args = parse_args()?;
    let run_grid = args.only.as_deref() != Some("floor");
    let run_floor = args.only.as_deref() != Some("grid");
    let bin_dir = if run_grid {
        Some(grid_bin_dir()?)
    } else {
        None
    };
    println!("process_compare: remote Processes, Grid beside a plain HTTPS floor");
    println!("machine: {}", machine());
    if let Some(dir) = &bin_dir {
        report_gridd(dir)?;
    }
    println!(
        "{} s per measurement after {} s of warm-up; direct callers {:?}; mailbox callers {:?}",
        args.seconds, args.warmup, args.concurrency, args.mailbox_concurrency
    );

    let work = WorkDir::new("gpc", args.keep)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let t0 = Instant::now();
    // Both systems run for the whole benchmark (the idle one waits).
    let mut grid = match &bin_dir {
        Some(dir) => Some(grid::GridProcesses::start(dir, &work.path)?),
        None => None,
    };
    if let Some(grid) = &grid {
        println!(
            "Grid: hosts receiver, caller, mailbox up after {:.1} s on 127.0.0.1 ports {:?} ({} reconcile rounds after start)",
            t0.elapsed().as_secs_f64(),
            grid.ports,
            grid.rounds
        );
    }
    let floor_started = Instant::now();
    let mut floor = if run_floor {
        Some(runtime.block_on(floor::FloorServer::start(&work.path))?)
    } else {
        None
    };
    if let Some(floor) = &floor {
        println!(
            "floor: HTTPS server up after {:.1} s on 127.0.0.1:{} (mutual TLS 1.3, Ed25519, certificates in {})",
            floor_started.elapsed().as_secs_f64(),
            floor.port,
            floor.tls_dir().display()
        );
    }

    let mut cells = Vec::new();
    let rows = [
        (Row::Direct, &args.concurrency),
        (Row::Reconnect, &args.concurrency),
        (Row::Mailbox, &args.mailbox_concurrency),
    ];
    for (row, concurrencies) in rows {
        if row == Row::Reconnect && !args.reconnect {
            continue;
        }
        for &n in concurrencies {
            if let Some(grid) = &mut grid
                && row != Row::Reconnect
            {
                let cell = measure_grid(grid, &args, row, n, t0)?;
                report(&cell);
                cells.push(cell);
            }
            if let Some(floor) = &mut floor {
                let cell = runtime.block_on(measure_floor(floor, &args, row, n, t0))?;
                report(&cell);
                cells.push(cell);
            }
        }
    }
    print_tables(&cells);
    if let Some(grid) = &grid {
        let totals = grid.receiver_totals()?;
        let recorded: u64 = cells
            .iter()
            .filter(|c| c.system == GRID)
            .map(|c| c.succeeded)
            .sum();
        println!();
        println!(
            "Grid receiver at the end (warm-ups and checks included): runs succeeded {}, failed {}, unknown {}, running {}; \
             demo.count {}; {recorded} succeeded runs were recorded in the windows",
            totals.runs.succeeded,
            totals.runs.failed,
            totals.runs.unknown,
            totals.runs.running,
            totals.demo_count
        );
        match totals.grant {
            Some(g) => println!(
                "grant {}: allocated {}, reserved {}, consumed {}, unknown {}, available {}",
                g.name,
                g.allocated,
                g.reserved,
                g.consumed,
                g.unknown,
                g.available()
            ),
            None => println!("grant {}: not found at the receiver", grid::GRANT),
        }
    }
    println!();
    println!(
        "whole run: {:.0} s; every gridd and the floor server are SIGKILLed now",
        t0.elapsed().as_secs_f64()
    );
    // Drop order: the servers (their processes) first, then the work directory.
    drop(floor);
    drop(grid);
    drop(runtime);
    drop(work);
    Ok(())
}
