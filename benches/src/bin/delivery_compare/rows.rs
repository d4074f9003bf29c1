//! The Ordered and Latest rows: publishers publish back to back through the window;
//! a publication counts when the publisher acknowledges it (durable at the publisher)
//! and again when the destination's cumulative acknowledgement covering it has come
//! back (end to end). After the window the publishers stop and the run waits (bounded)
//! until the last publication is acknowledged end to end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grid_benches::limits::CALLERS_MAX;
use grid_benches::measure::{
    Cpu, Failures, Record, Tally, Window, on_tasks, on_threads_then, since,
};
use grid_benches::procs::Result;
use grid_benches::report::{Table, ms, per_operation, percentile, ratio};

use crate::{Args, grid, jetstream};

/// How long the end-to-end acknowledgements may take to catch up after a window.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
/// How often Grid's receipts are polled at the publisher by publishers that share the
/// duty (64 publishers: no control connection is left for a poller).
const POLL_INTERVAL: Duration = Duration::from_millis(1);
/// How long one `receipted` call of the dedicated poller waits at most (it answers as
/// soon as a receipt covers the position asked).
const RECEIPTED_WAIT_MS: u64 = 200;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Row {
    Ordered,
    Latest,
}

impl Row {
    pub fn name(self) -> &'static str {
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

/// The end-to-end acknowledgements as they were seen: `(position, ns since t0)` each
/// time the highest cumulatively acknowledged position rose.
#[derive(Default)]
struct Advances {
    seen: Mutex<Vec<(u64, u64)>>,
    highest: AtomicU64,
    last_poll_ns: AtomicU64,
    errors: Mutex<Failures>,
}

impl Advances {
    /// Polls Grid's publisher once for the receipted position of `route`.
    fn poll(&self, publisher: &mut grid::Publisher, route: &str, t0: Instant) {
        match publisher.receipted(route, grid::DESTINATION) {
            Ok(position) => self.record(position, t0),
            Err(e) => self.failed(format!("(receipt poll) {e}")),
        }
    }

    /// Records that receipts cover `position` now, when that is higher than before.
    fn record(&self, position: u64, t0: Instant) {
        let now = since(t0);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.last().is_none_or(|&(p, _)| position > p) {
            seen.push((position, now));
            self.highest.store(position, Ordering::SeqCst);
        }
    }

    fn failed(&self, reason: String) {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reason(reason);
    }

    /// Waits at Grid's publisher for the next acknowledged position of `route` (one
    /// `receipted` call, answered as the receipt is applied) and records how far
    /// receipts then cover.
    fn wait_next(&self, publisher: &mut grid::Publisher, route: &str, t0: Instant) {
        let next = self.highest.load(Ordering::SeqCst) + 1;
        match publisher.await_receipted(route, next, RECEIPTED_WAIT_MS) {
            Ok((covered, _)) => self.record(covered, t0),
            Err(e) => {
                self.failed(format!("(receipted) {e}"));
                std::thread::sleep(POLL_INTERVAL);
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
pub struct Cell {
    pub row: Row,
    pub system: &'static str,
    pub publishers: usize,
    /// The recorded publications the publisher acknowledged (durable at the
    /// publisher), with their positions; refusals and failures in its `failures`.
    pub publish: Tally<u64>,
    /// Of those, the ones acknowledged end to end.
    acked: u64,
    e2e_elapsed: Duration,
    e2e_ns: Vec<u64>,
    /// How often the end-to-end acknowledged position rose during the measurement
    /// (Grid: receipts applied at the publisher; JetStream: confirmed cumulative acks).
    advances: u64,
    cpu: Cpu,
}

impl Cell {
    fn new(
        (row, system, publishers): (Row, &'static str, usize),
        window: &Window,
        records: Vec<Record<u64>>,
        advances: &[(u64, u64)],
        cpu: Cpu,
    ) -> Cell {
        let publish = Tally::new(window, records);
        let (mut acked, mut e2e_ns) = (0, Vec::new());
        let mut last_e2e = window.end_ns;
        for call in &publish.calls {
            // The first cumulative acknowledgement that covers the position.
            let i = advances.partition_point(|&(position, _)| position < call.value);
            if let Some(&(_, seen)) = advances.get(i) {
                acked += 1;
                e2e_ns.push(seen.saturating_sub(call.start_ns));
                last_e2e = last_e2e.max(seen);
            }
        }
        e2e_ns.sort_unstable();
        Cell {
            row,
            system,
            publishers,
            publish,
            acked,
            e2e_elapsed: Duration::from_nanos(last_e2e - window.from_ns),
            e2e_ns,
            advances: advances
                .iter()
                .filter(|&&(_, seen)| seen >= window.from_ns && seen <= last_e2e)
                .count() as u64,
            cpu,
        }
    }

    fn acked_per_second(&self) -> f64 {
        self.acked as f64 / self.e2e_elapsed.as_secs_f64()
    }

    /// The row's headline: Ordered values acknowledged end to end per second; Latest
    /// updates (durably published) per second.
    fn rate(&self) -> f64 {
        match self.row {
            Row::Ordered => self.acked_per_second(),
            Row::Latest => self.publish.per_second(),
        }
    }

    fn per_value(&self, cpu: Duration) -> String {
        per_operation(cpu, self.publish.succeeded())
    }

    fn e2e(&self, p: f64) -> Duration {
        percentile(&self.e2e_ns, p)
    }

    /// Notes that the end-to-end acknowledgements reached `highest` of `last` only.
    fn note_drain(&mut self, what: &str, highest: u64, last: u64) {
        if highest < last {
            self.publish.failures.reason(format!(
                "(drain) {what} reached {highest} of {last} within {DRAIN_TIMEOUT:?}"
            ));
        }
    }
}

/// When the end-to-end wait of a measurement ends: once the publishers have stopped and
/// the last publication is covered, or at the deadline (bounded even if the publishers
/// never finish; set closer once they have).
#[derive(Clone)]
struct Drain {
    stop: Arc<AtomicBool>,
    target: Arc<AtomicU64>,
    deadline: Arc<AtomicU64>,
}

impl Drain {
    fn new(window: &Window) -> Drain {
        Drain {
            stop: Arc::new(AtomicBool::new(false)),
            target: Arc::new(AtomicU64::new(u64::MAX)),
            deadline: Arc::new(AtomicU64::new(
                window.end_ns + 2 * DRAIN_TIMEOUT.as_nanos() as u64,
            )),
        }
    }

    /// The publishers have stopped; the last of them was acknowledged `last`.
    fn publishers_done(&self, last: u64, t0: Instant) {
        self.target.store(last, Ordering::SeqCst);
        self.deadline.store(
            since(t0) + DRAIN_TIMEOUT.as_nanos() as u64,
            Ordering::SeqCst,
        );
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The highest position (sequence) the publishers were acknowledged.
fn last_position(records: &[Record<u64>]) -> u64 {
    records
        .iter()
        .flat_map(|r| r.calls.iter().map(|c| c.value))
        .max()
        .unwrap_or(0)
}

/// Finite and distinct per publisher: publisher `i`'s `seq`-th value.
fn value_of(i: usize, seq: u64) -> f64 {
    (i as u64 * 1_000_000_000 + seq) as f64
}

/// Waits until `advances` reaches the drain's target or deadline, asking `publisher`
/// for each next acknowledged position (`receipted`, which waits for the receipt).
fn drain_grid(
    advances: &Advances,
    publisher: &mut grid::Publisher,
    route: &str,
    t0: Instant,
    drain: &Drain,
) {
    loop {
        advances.wait_next(publisher, route, t0);
        let done = drain.stop.load(Ordering::SeqCst)
            && advances.highest.load(Ordering::SeqCst) >= drain.target.load(Ordering::SeqCst);
        if done || since(t0) > drain.deadline.load(Ordering::SeqCst) {
            return;
        }
    }
}

pub fn measure_grid(
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
    let shared_polling = publishers >= CALLERS_MAX;
    let mut poller_conn = if shared_polling {
        None
    } else {
        Some(grid::Publisher::connect(host_dir.clone())?)
    };
    let advances = Arc::new(Advances::default());
    let pids = pair.hosts.procs.pids();
    let m = &args.measurement;
    let window = Window::of(m.warmup, m.seconds, t0);
    let drain = Drain::new(&window);
    let poller = {
        let (advances, drain) = (advances.clone(), drain.clone());
        std::thread::spawn(move || -> Result<()> {
            if poller_conn.is_none() {
                while !drain.stop.load(Ordering::SeqCst) {
                    if since(t0) > drain.deadline.load(Ordering::SeqCst) {
                        return Err("the Grid publishers did not finish".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                poller_conn = Some(grid::Publisher::connect(host_dir)?);
            }
            let conn = poller_conn.as_mut().expect("connected above");
            drain_grid(&advances, conn, route, t0, &drain);
            Ok(())
        })
    };
    // A publisher that shares the polling polls between the end of one publication
    // and the start of the next, outside its timing.
    let poll_turns = advances.clone();
    let (records, meter) = on_threads_then(
        conns,
        window,
        t0,
        pids,
        move |conn, i, seq| conn.publish(route, value_of(i, seq)),
        move |conn| {
            if shared_polling && poll_turns.due(t0) {
                poll_turns.poll(conn, route, t0);
            }
        },
    )?;
    let last = last_position(&records);
    drain.publishers_done(last, t0);
    poller
        .join()
        .map_err(|_| "the Grid receipt poller panicked")??;
    let cpu = meter.stop();
    pair.hosts.procs.check_running()?;
    let seen = advances
        .seen
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut cell = Cell::new((row, "Grid", publishers), &window, records, &seen, cpu);
    let errors = std::mem::take(&mut *advances.errors.lock().unwrap_or_else(|p| p.into_inner()));
    cell.publish.failures.merge(errors);
    cell.note_drain("receipts", advances.highest.load(Ordering::SeqCst), last);
    Ok(cell)
}

pub async fn measure_jetstream(
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
    let m = &args.measurement;
    let window = Window::of(m.warmup, m.seconds, t0);
    let drain = Drain::new(&window);
    let consumer_task = tokio::spawn(jetstream::consume_cumulative(
        consumer,
        t0,
        drain.stop.clone(),
        drain.target.clone(),
        drain.deadline.clone(),
    ));
    let publish_subject = subject.clone();
    let publishing = on_tasks(
        contexts,
        window,
        t0,
        server.procs.pids(),
        move |context, i, seq| {
            let subject = publish_subject.clone();
            async move {
                let outcome = jetstream::publish(&context, &subject, value_of(i, seq)).await;
                (context, outcome)
            }
        },
    );
    let (records, meter) = publishing.await?;
    let last = last_position(&records);
    drain.publishers_done(last, t0);
    let coverage = consumer_task
        .await
        .map_err(|e| format!("the JetStream consumer failed: {e}"))?;
    // The drain is metered too, as Grid's poller's is.
    let cpu = meter.stop();
    server.procs.check_running()?;
    let mut cell = Cell::new(
        (row, "JetStream", publishers),
        &window,
        records,
        &coverage.advances,
        cpu,
    );
    for e in coverage.errors {
        cell.publish.failures.reason(format!("(consumer) {e}"));
    }
    let highest = coverage.advances.last().map_or(0, |&(p, _)| p);
    cell.note_drain("acknowledgements", highest, last);
    // Its files go; the next measurement starts on a fresh stream.
    destination.delete_stream(&name).await?;
    Ok(cell)
}

/// One line per measurement as it finishes (the tables come at the end).
pub fn report(c: &Cell) {
    println!(
        "  {:<7} {:>2} publishers  {:<9} {:>7.0} acked e2e/s  e2e p50 {:>9}  p99 {:>9}  {:>7.0} published/s  publish p50 {:>9}  p99 {:>9}  acked position rose {}×  refused {}",
        c.row.name(),
        c.publishers,
        c.system,
        c.acked_per_second(),
        ms(c.e2e(0.50)),
        ms(c.e2e(0.99)),
        c.publish.per_second(),
        ms(c.publish.p(0.50)),
        ms(c.publish.p(0.99)),
        c.advances,
        c.publish.failures.recorded
    );
}

pub fn print_tables(cells: &[Cell]) {
    let mut table = Table::new(
        &[
            "row",
            "publishers",
            "system",
            "acked end to end/s",
            "end-to-end p50",
            "end-to-end p99",
            "published/s",
            "publish p50",
            "publish p99",
            "published",
            "acked end to end",
            "acked position rose",
            "refused",
            "server CPU / value",
            "client CPU / value",
        ],
        "lrlrrrrrrrrrrrr",
    );
    for c in cells {
        table.row(vec![
            c.row.name().to_owned(),
            c.publishers.to_string(),
            c.system.to_owned(),
            format!("{:.0}", c.acked_per_second()),
            ms(c.e2e(0.50)),
            ms(c.e2e(0.99)),
            format!("{:.0}", c.publish.per_second()),
            ms(c.publish.p(0.50)),
            ms(c.publish.p(0.99)),
            c.publish.succeeded().to_string(),
            c.acked.to_string(),
            c.advances.to_string(),
            c.publish.failures.recorded.to_string(),
            c.per_value(c.cpu.server),
            c.per_value(c.cpu.client),
        ]);
    }
    table.print();
    let find = |system: &str, row: Row, n: usize| {
        cells
            .iter()
            .find(|c| c.system == system && c.row == row && c.publishers == n)
    };
    let mut keys: Vec<(Row, usize)> = cells.iter().map(|c| (c.row, c.publishers)).collect();
    keys.sort();
    keys.dedup();
    let mut ratios = Table::new(
        &[
            "row",
            "publishers",
            "measure",
            "Grid",
            "JetStream",
            "Grid / JetStream",
            "end-to-end p50, Grid / JetStream",
            "end-to-end p99, Grid / JetStream",
        ],
        "lrlrrrrr",
    );
    for (row, n) in keys {
        let (grid, js) = (find("Grid", row, n), find("JetStream", row, n));
        let show = |c: Option<&Cell>| c.map_or("–".to_owned(), |c| format!("{:.0}", c.rate()));
        let of = |f: &dyn Fn(&Cell) -> f64| ratio(grid.map(f), js.map(f));
        ratios.row(vec![
            row.name().to_owned(),
            n.to_string(),
            match row {
                Row::Ordered => "values acknowledged end to end / s",
                Row::Latest => "updates (durably published) / s",
            }
            .to_owned(),
            show(grid),
            show(js),
            format!("**{}**", of(&|c| c.rate())),
            of(&|c| c.e2e(0.50).as_secs_f64()),
            of(&|c| c.e2e(0.99).as_secs_f64()),
        ]);
    }
    ratios.print();
}
