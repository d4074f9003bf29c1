//! Grid's Ledger beside TigerBeetle and PostgreSQL, in one run (BENCHMARKS.md, "Ledger
//! beside TigerBeetle and PostgreSQL"): two-phase transfers per second — a pending
//! transfer, then its post, counted once — with their latency and the servers' CPU.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo run --release -p grid-benches --bin ledger_compare \
//!     [-- --seconds 5 --warmup 1 --connections 1,8 --pg-clients 64 --batch 8189 \
//!         --accounts 1000 --only grid|tigerbeetle|postgres --keep]
//! ```
//!
//! - **Grid**: one `gridd` host with profile `ledger`, brought up from a topology with
//!   `ledger bench host=ledger { account a0001 … }` by `gridctl reconcile`; each of N
//!   connections (one thread, one control socket each) submits `Call::Ledger { Submit }`
//!   batches back to back: a batch of pending transfers, then a batch of their posts.
//! - **TigerBeetle**: one replica (`tigerbeetle format` + `start`, the executable built
//!   from source), driven by `benches/tigerbeetle/two_phase.js` (the official Node
//!   client) with N clients: `create_transfers` with `flags.pending`, then with
//!   `flags.post_pending_transfer` and `pending_id`.
//! - **PostgreSQL**: its own cluster (`initdb` in the work directory, `fsync=on`,
//!   `synchronous_commit=on`), `pgbench` with `benches/postgres/two_phase.sql` from
//!   `--pg-clients` clients: the pending transaction, then the post transaction.
//!
//! A system whose prerequisite is missing is skipped with the reason printed; nothing
//! is installed at run time. Each measurement runs a warm-up (not recorded), then
//! records every unit (a pending batch and its post batch; one pgbench script for
//! PostgreSQL) that starts within the window. Every server is SIGKILLed at the end,
//! also on an error (and, by `PR_SET_PDEATHSIG`, if this process dies); the work
//! directory is removed unless `--keep`.

mod grid;
mod postgres;
mod rows;
mod tigerbeetle;

use std::time::Instant;

use clap::Parser;

use grid_benches::bringup::{Sides, exit_on_error};
use grid_benches::cli::{self, Counts, Defaults, Measurement};
use grid_benches::limits::{
    LEDGER_COMPARE_ACCOUNTS_MAX, LEDGER_COMPARE_BATCH_MAX, LEDGER_COMPARE_PG_CLIENTS_MAX,
};
use grid_benches::procs::Result;

use rows::{Cell, print_tables, report};

/// Grid's Ledger beside TigerBeetle and PostgreSQL.
#[derive(Parser)]
#[command(name = "ledger_compare")]
struct Args {
    #[command(flatten)]
    measurement: Measurement,
    /// Numbers of concurrent client connections to Grid and to TigerBeetle, one
    /// measurement each (each 1 to 64).
    #[arg(long, value_name = "N,N", default_value = "1,8", value_parser = cli::counts)]
    connections: Counts,
    /// PostgreSQL clients (`pgbench -c`).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = pg_clients)]
    pg_clients: usize,
    /// Transfers per batch (Grid and TigerBeetle), at most 8,189.
    #[arg(long, value_name = "N", default_value_t = LEDGER_COMPARE_BATCH_MAX, value_parser = batch)]
    batch: usize,
    /// Accounts in each system (2 to 4,096); every transfer picks two at random.
    #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = accounts)]
    accounts: usize,
}

const DEFAULTS: Defaults = Defaults {
    seconds: "5",
    warmup: "1",
    other: "tigerbeetle",
};

fn bounded(text: &str, min: usize, max: usize, limit: &str) -> std::result::Result<usize, String> {
    let n: usize = text.parse().map_err(|e| format!("{e}"))?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{min} to {max} ({limit})"))
    }
}

fn pg_clients(text: &str) -> std::result::Result<usize, String> {
    bounded(
        text,
        1,
        LEDGER_COMPARE_PG_CLIENTS_MAX,
        "LEDGER_COMPARE_PG_CLIENTS_MAX",
    )
}

fn batch(text: &str) -> std::result::Result<usize, String> {
    bounded(
        text,
        1,
        LEDGER_COMPARE_BATCH_MAX,
        "LEDGER_COMPARE_BATCH_MAX",
    )
}

fn accounts(text: &str) -> std::result::Result<usize, String> {
    bounded(
        text,
        2,
        LEDGER_COMPARE_ACCOUNTS_MAX,
        "LEDGER_COMPARE_ACCOUNTS_MAX",
    )
}

/// Which systems run: `--only` one of them, or all.
fn runs(m: &Measurement, system: &str) -> bool {
    m.only.as_deref().is_none_or(|only| only == system)
}

fn main() {
    exit_on_error("ledger_compare", run());
}

fn run() -> Result<()> {
    let args: Args = cli::parse_among(&DEFAULTS, &["tigerbeetle", "postgres"]);
    let m = &args.measurement;
    let sides = Sides::start(
        "ledger_compare: two-phase transfers, Grid's Ledger beside TigerBeetle and PostgreSQL",
        m,
        "glc",
        None,
    )?;
    println!(
        "{} s per measurement after {} s of warm-up; connections {:?} (Grid, TigerBeetle); \
         PostgreSQL clients {}; {} transfers per batch; {} accounts; \
         a two-phase transfer (pending, then its post) counts once",
        m.seconds, m.warmup, args.connections.0, args.pg_clients, args.batch, args.accounts
    );
    let t0 = Instant::now();
    let mut cells: Vec<Cell> = Vec::new();
    let mut checks: Vec<String> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();

    if let Some(bins) = &sides.grid_bins {
        let mut ledger = grid::GridLedger::start(bins, &sides.work.path, args.accounts)?;
        println!(
            "Grid: host {} up after {:.1} s on 127.0.0.1:{} ({} reconcile rounds after start)",
            grid::HOST,
            t0.elapsed().as_secs_f64(),
            ledger.port,
            ledger.hosts.rounds
        );
        for (index, &n) in args.connections.0.iter().enumerate() {
            let cell = ledger.measure(m, args.batch, n, index, t0)?;
            report(&cell);
            cells.push(cell);
        }
        checks.push(ledger.check()?);
    }
    if runs(m, "tigerbeetle") {
        match tigerbeetle::Prerequisites::find() {
            Err(reason) => skipped.push(format!("TigerBeetle: {reason}")),
            Ok(found) => {
                let started = Instant::now();
                let mut replica = tigerbeetle::Replica::start(found, &sides.work.path)?;
                println!(
                    "TigerBeetle: {} ({}), one replica up after {:.1} s on 127.0.0.1:{}; client: {}",
                    replica.found.tigerbeetle.display(),
                    replica.found.version,
                    started.elapsed().as_secs_f64(),
                    replica.port,
                    replica.found.client,
                );
                for (index, &n) in args.connections.0.iter().enumerate() {
                    let cell = replica.measure(m, &args, n, index)?;
                    report(&cell);
                    cells.push(cell);
                }
                checks.push(replica.check());
            }
        }
    }
    if runs(m, "postgres") {
        match postgres::Prerequisites::find() {
            Err(reason) => skipped.push(format!("PostgreSQL: {reason}")),
            Ok(found) => {
                let started = Instant::now();
                let mut cluster = postgres::Cluster::start(found, &sides.work.path, &args)?;
                println!(
                    "PostgreSQL: {} ({}), a cluster of its own up after {:.1} s on 127.0.0.1:{} \
                     (fsync=on, synchronous_commit=on)",
                    cluster.found.bin_dir.display(),
                    cluster.found.version,
                    started.elapsed().as_secs_f64(),
                    cluster.port,
                );
                let cell = cluster.measure(m, &args)?;
                report(&cell);
                cells.push(cell);
                checks.push(cluster.check()?);
            }
        }
    }
    print_tables(&cells, args.pg_clients);
    println!();
    println!("At the end, every system's own balances (warm-ups included):");
    for check in &checks {
        println!("- {check}");
    }
    if !skipped.is_empty() {
        println!();
        println!("Skipped (nothing measured, no number shown):");
        for reason in &skipped {
            println!("- {reason}");
        }
    }
    println!();
    println!(
        "whole run: {:.0} s; every server is SIGKILLed now",
        t0.elapsed().as_secs_f64()
    );
    drop(sides);
    Ok(())
}
