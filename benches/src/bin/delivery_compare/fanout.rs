//! The fan-out row: one publication at a time to every destination; the time from
//! publish to the last acknowledgement (Grid: every destination's receipt applied at
//! the publisher; JetStream: every consumer's confirmed ack).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use grid_benches::limits::FANOUT_PUBLICATIONS_MAX;
use grid_benches::measure::{FAILURE_PAUSE, Failures, Window, since};
use grid_benches::procs::Result;
use grid_benches::report::{Table, ms, percentile};

use crate::{Args, grid, jetstream};

/// How long one fan-out publication may wait for its last acknowledgement.
const FANOUT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one `receipted` call waits at Grid's publisher for the 1,024 receipts
/// (it answers as soon as they all cover the publication).
const FANOUT_RECEIPTED_WAIT_MS: u64 = 5_000;
/// Consumers per NATS connection in the fan-out row.
const FANOUT_CONSUMERS_PER_CONNECTION: usize = 64;

/// One system's fan-out measurement.
pub struct Fanout {
    pub system: &'static str,
    destinations: usize,
    /// Publish to last acknowledgement, per recorded publication, sorted.
    latencies_ns: Vec<u64>,
    setup: Duration,
    pub incomplete: u64,
    pub failures: Failures,
    /// How it ran, or why it was skipped.
    note: String,
    skipped: bool,
}

impl Fanout {
    fn new(system: &'static str, destinations: usize, setup: Duration, note: String) -> Fanout {
        Fanout {
            system,
            destinations,
            latencies_ns: Vec::new(),
            setup,
            incomplete: 0,
            failures: Failures::default(),
            note,
            skipped: false,
        }
    }

    pub fn skipped(system: &'static str, destinations: usize, reason: String) -> Fanout {
        Fanout {
            skipped: true,
            ..Fanout::new(system, destinations, Duration::ZERO, reason)
        }
    }

    fn p(&self, p: f64) -> Duration {
        percentile(&self.latencies_ns, p)
    }
}

pub fn measure_grid(
    f: &mut grid::GridFanout,
    args: &Args,
    t0: Instant,
    setup: Duration,
) -> Result<Fanout> {
    let host_dir = f.host_dir(grid::FANOUT_PUBLISHER);
    let mut publisher = grid::Publisher::connect(host_dir.clone())?;
    let mut poller = grid::Publisher::connect(host_dir)?;
    let window = Window::of(args.measurement.warmup, args.fanout_seconds, t0);
    let mut asks = 0u64;
    let mut fanout = Fanout::new("Grid", f.destinations, setup, String::new());
    for n in 0..FANOUT_PUBLICATIONS_MAX {
        let start = Instant::now();
        if start >= window.end {
            break;
        }
        let start_ns = since(t0);
        let position = match publisher.publish(grid::FANOUT_ROUTE, n as f64) {
            Ok(p) => p,
            Err(e) => {
                fanout.failures.reason(e);
                std::thread::sleep(FAILURE_PAUSE);
                continue;
            }
        };
        let mut done = None;
        while start.elapsed() < FANOUT_TIMEOUT {
            let receipted =
                poller.await_receipted(grid::FANOUT_ROUTE, position, FANOUT_RECEIPTED_WAIT_MS);
            asks += 1;
            match receipted {
                Ok((_, true)) => {
                    done = Some(since(t0));
                    break;
                }
                Ok((_, false)) => {}
                Err(e) => {
                    fanout.failures.reason(format!("(receipted) {e}"));
                    std::thread::sleep(FAILURE_PAUSE);
                }
            }
        }
        if start < window.measure_from {
            continue;
        }
        match done {
            Some(at) => fanout.latencies_ns.push(at - start_ns),
            None => {
                fanout.incomplete += 1;
                fanout.failures.reason(format!(
                    "receipts of {} destinations not all in after {FANOUT_TIMEOUT:?}",
                    f.destinations
                ));
            }
        }
    }
    f.hosts.procs.check_running()?;
    fanout.latencies_ns.sort_unstable();
    fanout.note = format!(
        "{} destination hosts in {} gridd processes ({} per process) + the publisher's; completion awaited at \
         the publisher (`receipted`, answered when the last receipt is applied): {asks} calls",
        f.destinations,
        f.processes - 1,
        grid::FANOUT_HOSTS_PER_PROCESS,
    );
    Ok(fanout)
}

pub async fn measure_jetstream(
    server: &mut jetstream::NatsServer,
    args: &Args,
    destinations: usize,
    t0: Instant,
) -> Result<Fanout> {
    let setup_started = Instant::now();
    let name = "BENCH_FANOUT";
    let subject = "bench.fanout";
    let publisher = async_nats::jetstream::new(server.connect().await?);
    jetstream::create_stream(&publisher, name, subject, false, destinations).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let (acks_tx, mut acks) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::with_capacity(destinations);
    let mut connection = None;
    for i in 0..destinations {
        if i % FANOUT_CONSUMERS_PER_CONNECTION == 0 {
            let context = async_nats::jetstream::new(server.connect().await?);
            connection = Some(context.get_stream(name).await?);
        }
        let stream = connection.as_ref().expect("set at i = 0");
        let consumer =
            jetstream::create_consumer(stream, &format!("d{i}"), subject, false, false).await?;
        tasks.push(tokio::spawn(jetstream::consume_each(
            i,
            consumer,
            t0,
            stop.clone(),
            acks_tx.clone(),
        )));
    }
    drop(acks_tx);
    let setup = setup_started.elapsed();
    let window = Window::of(args.measurement.warmup, args.fanout_seconds, t0);
    let connections = destinations.div_ceil(FANOUT_CONSUMERS_PER_CONNECTION);
    let mut fanout = Fanout::new(
        "JetStream",
        destinations,
        setup,
        format!(
            "{destinations} durable pull consumers (explicit acks, each double-acked) on {connections} connections \
             ({FANOUT_CONSUMERS_PER_CONNECTION} per connection)"
        ),
    );
    for n in 0..FANOUT_PUBLICATIONS_MAX {
        let start = Instant::now();
        if start >= window.end {
            break;
        }
        let start_ns = since(t0);
        let sequence = match jetstream::publish(&publisher, subject, n as f64).await {
            Ok(s) => s,
            Err(e) => {
                fanout.failures.reason(e);
                tokio::time::sleep(FAILURE_PAUSE).await;
                continue;
            }
        };
        let mut acked = vec![false; destinations];
        let mut remaining = destinations;
        let mut last_ns = start_ns;
        let wait_until = tokio::time::Instant::now() + FANOUT_TIMEOUT;
        while remaining > 0 {
            match tokio::time::timeout_at(wait_until, acks.recv()).await {
                Ok(Some(Ok((index, seq, at)))) if seq == sequence && !acked[index] => {
                    acked[index] = true;
                    remaining -= 1;
                    last_ns = last_ns.max(at);
                }
                Ok(Some(Ok(_))) => {} // a late ack of an earlier publication
                Ok(Some(Err(e))) => fanout.failures.reason(e),
                Ok(None) | Err(_) => break,
            }
        }
        if start < window.measure_from {
            continue;
        }
        if remaining == 0 {
            fanout.latencies_ns.push(last_ns - start_ns);
        } else {
            fanout.incomplete += 1;
            fanout.failures.reason(format!(
                "{remaining} of {destinations} consumers did not ack within {FANOUT_TIMEOUT:?}"
            ));
        }
    }
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    }
    server.procs.check_running()?;
    publisher.delete_stream(name).await?;
    fanout.latencies_ns.sort_unstable();
    Ok(fanout)
}

/// One line per system as it finishes (the table comes at the end).
pub fn report(f: &Fanout) {
    if f.skipped {
        println!("  fan-out to {}: {} {}", f.destinations, f.system, f.note);
        return;
    }
    println!(
        "  fan-out to {}: {} {} publications, publish → last ack p50 {} p99 {} (setup {:.1} s; {})",
        f.destinations,
        f.system,
        f.latencies_ns.len(),
        ms(f.p(0.50)),
        ms(f.p(0.99)),
        f.setup.as_secs_f64(),
        f.note
    );
}

pub fn print_table(fanout: &[Fanout]) {
    let mut table = Table::new(
        &[
            "row",
            "system",
            "destinations",
            "publications",
            "publish → last ack p50",
            "p99",
            "max",
            "setup",
            "how",
        ],
        "llrrrrrrl",
    );
    for f in fanout {
        let mut row = vec![
            "fan-out".to_owned(),
            f.system.to_owned(),
            f.destinations.to_string(),
        ];
        if f.skipped {
            row.extend(["–"; 5].map(str::to_owned));
        } else {
            row.extend([
                f.latencies_ns.len().to_string(),
                ms(f.p(0.50)),
                ms(f.p(0.99)),
                ms(f.p(1.0)),
                format!("{:.1} s", f.setup.as_secs_f64()),
            ]);
        }
        row.push(f.note.clone());
        table.row(row);
    }
    table.print();
    let measured = |system: &str| {
        fanout
            .iter()
            .find(|f| f.system == system && !f.latencies_ns.is_empty())
    };
    if let (Some(g), Some(j)) = (measured("Grid"), measured("JetStream")) {
        println!();
        println!(
            "fan-out p99, Grid / JetStream: **{:.2}×** (below 1: Grid's last acknowledgement comes sooner)",
            g.p(0.99).as_secs_f64() / j.p(0.99).as_secs_f64()
        );
    }
}
