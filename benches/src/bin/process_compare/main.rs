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

use std::time::Instant;

use clap::Parser;

use grid_benches::bringup::{Sides, exit_on_error};
use grid_benches::cli::{self, Counts, Defaults, Measurement};
use grid_benches::measure::{Cpu, Tally, Window, on_tasks, on_threads};
use grid_benches::procs::Result;
use grid_benches::report::{Table, ms, per_operation, print_failures, ratio};

/// Remote Processes, Grid beside a plain HTTPS floor.
#[derive(Parser)]
#[command(name = "process_compare")]
struct Args {
    #[command(flatten)]
    measurement: Measurement,
    /// Numbers of concurrent direct callers, one measurement each (each 1 to 64).
    #[arg(long, value_name = "N,N", default_value = "1,64", value_parser = cli::counts)]
    concurrency: Counts,
    /// Numbers of concurrent mailbox callers (each 1 to 64; 0: skip the row).
    #[arg(long, value_name = "N,N", default_value = "1,16", value_parser = cli::counts_or_none)]
    mailbox_concurrency: Counts,
    /// Skip the floor's row with a new TLS connection per call.
    #[arg(long = "no-reconnect", action = clap::ArgAction::SetFalse)]
    reconnect: bool,
}

const DEFAULTS: Defaults = Defaults {
    seconds: "5",
    warmup: "1",
    other: "floor",
};

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

/// One measurement of one row.
struct Cell {
    row: Row,
    system: &'static str,
    concurrency: usize,
    tally: Tally,
    cpu: Cpu,
}

impl Cell {
    fn per_call(&self, cpu: std::time::Duration) -> String {
        per_operation(cpu, self.tally.succeeded())
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
    let m = &args.measurement;
    let window = Window::of(m.warmup, m.seconds, t0);
    let (records, meter) = on_threads(
        callers,
        window,
        t0,
        grid.hosts.procs.pids(),
        move |caller, i, seq| {
            caller.run(format!("{}{concurrency}-{i}-{seq}", row.tag()), via_mailbox)
        },
    )?;
    let cpu = meter.stop();
    grid.hosts.procs.check_running()?;
    Ok(Cell {
        row,
        system: GRID,
        concurrency,
        tally: Tally::new(&window, records),
        cpu,
    })
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
    let m = &args.measurement;
    let window = Window::of(m.warmup, m.seconds, t0);
    let (records, meter) = on_tasks(
        clients,
        window,
        t0,
        server.procs.pids(),
        move |mut client, i, seq| {
            let connector = connector.clone();
            async move {
                let id = format!("{}{concurrency}-{i}-{seq}", row.tag());
                let outcome = match &mut client {
                    Some(client) => client.run(&id).await,
                    // Connect (TCP, TLS 1.3 handshake), call once, close.
                    None => match connector.connect().await {
                        Ok(mut fresh) => fresh.run(&id).await,
                        Err(e) => Err(format!("connecting: {e}")),
                    },
                };
                (client, outcome)
            }
        },
    )
    .await?;
    let cpu = meter.stop();
    server.procs.check_running()?;
    Ok(Cell {
        row,
        system: FLOOR,
        concurrency,
        tally: Tally::new(&window, records),
        cpu,
    })
}

/// One line per measurement as it finishes (the tables come at the end).
fn report(c: &Cell) {
    let t = &c.tally;
    println!(
        "  {:<7} {:>2} callers  {:<11} {:>7.0} calls/s  p50 {:>9}  p90 {:>9}  p99 {:>9}  max {:>9}  mean {:>9}  succeeded {:>6}  failed {}  server CPU/call {}  client CPU/call {}",
        c.row.name(),
        c.concurrency,
        c.system,
        t.per_second(),
        ms(t.p(0.50)),
        ms(t.p(0.90)),
        ms(t.p(0.99)),
        ms(t.p(1.0)),
        ms(t.mean()),
        t.succeeded(),
        t.failures.recorded,
        c.per_call(c.cpu.server),
        c.per_call(c.cpu.client),
    );
}

fn print_tables(cells: &[Cell]) {
    let mut table = Table::new(
        &[
            "row",
            "callers",
            "system",
            "calls/s",
            "p50",
            "p99",
            "mean",
            "succeeded",
            "failed",
            "server CPU / call",
            "client CPU / call",
        ],
        "lrlrrrrrrrr",
    );
    for c in cells {
        let t = &c.tally;
        table.row(vec![
            c.row.name().to_owned(),
            c.concurrency.to_string(),
            c.system.to_owned(),
            format!("{:.0}", t.per_second()),
            ms(t.p(0.50)),
            ms(t.p(0.99)),
            ms(t.mean()),
            t.succeeded().to_string(),
            t.failures.recorded.to_string(),
            c.per_call(c.cpu.server),
            c.per_call(c.cpu.client),
        ]);
    }
    table.print();
    let find = |system: &str, row: Row, n: usize| {
        cells
            .iter()
            .find(|c| c.system == system && c.row == row && c.concurrency == n)
    };
    let mut keys: Vec<(Row, usize)> = cells.iter().map(|c| (c.row, c.concurrency)).collect();
    keys.sort();
    keys.dedup();
    let mut ratios = Table::new(
        &[
            "row",
            "callers",
            "Grid calls/s",
            "floor calls/s",
            "floor / Grid (throughput)",
            "p50 Grid / floor",
            "p99 Grid / floor",
        ],
        "lrrrrrr",
    );
    for (row, n) in keys {
        // The reconnecting floor stands beside Grid's direct runs.
        let grid_row = if row == Row::Reconnect {
            Row::Direct
        } else {
            row
        };
        let (g, f) = (find(GRID, grid_row, n), find(FLOOR, row, n));
        let rate = |c: Option<&Cell>| c.map(|c| c.tally.per_second());
        let show = |c: Option<&Cell>| rate(c).map_or("–".to_owned(), |r| format!("{r:.0}"));
        let latency = |c: Option<&Cell>, p: f64| c.map(|c| c.tally.p(p).as_secs_f64());
        ratios.row(vec![
            row.name().to_owned(),
            n.to_string(),
            show(g),
            show(f),
            format!("**{}**", ratio(rate(f), rate(g))),
            ratio(latency(g, 0.50), latency(f, 0.50)),
            ratio(latency(g, 0.99), latency(f, 0.99)),
        ]);
    }
    ratios.print();
    print_failures(
        "Failures",
        "",
        cells.iter().map(|c| {
            (
                format!(
                    "{} {} callers, {}: {} failed (+{} in warm-up)",
                    c.row.name(),
                    c.concurrency,
                    c.system,
                    c.tally.failures.recorded,
                    c.tally.failures.warmup
                ),
                &c.tally.failures,
            )
        }),
    );
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
    exit_on_error("process_compare", result);
}

fn run() -> Result<()> {
    let args: Args = cli::parse(&DEFAULTS);
    let m = &args.measurement;
    let sides = Sides::start(
        "process_compare: remote Processes, Grid beside a plain HTTPS floor",
        m,
        "gpc",
        None,
    )?;
    println!(
        "{} s per measurement after {} s of warm-up; direct callers {:?}; mailbox callers {:?}",
        m.seconds, m.warmup, args.concurrency.0, args.mailbox_concurrency.0
    );
    let runtime = &sides.runtime;
    let t0 = Instant::now();
    // Both systems run for the whole benchmark (the idle one waits).
    let mut grid = match &sides.grid_bins {
        Some(dir) => Some(grid::GridProcesses::start(dir, &sides.work.path)?),
        None => None,
    };
    if let Some(grid) = &grid {
        println!(
            "Grid: hosts receiver, caller, mailbox up after {:.1} s on 127.0.0.1 ports {:?} ({} reconcile rounds after start)",
            t0.elapsed().as_secs_f64(),
            grid.ports,
            grid.hosts.rounds
        );
    }
    let floor_started = Instant::now();
    let mut floor = if m.runs_other() {
        Some(runtime.block_on(floor::FloorServer::start(&sides.work.path))?)
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
        for &n in &concurrencies.0 {
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
            .map(|c| c.tally.succeeded())
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
    drop(sides);
    Ok(())
}
