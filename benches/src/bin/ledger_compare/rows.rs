//! One measurement of one system ([`Cell`]), made from its recorded units, and the
//! tables at the end: figures per system, then the ratios Grid / TigerBeetle (at the
//! same number of connections) and Grid / PostgreSQL.
//!
//! A unit is what one connection does back to back: a batch of pending transfers and
//! then the batch of their posts (Grid, TigerBeetle), or one pgbench script — the
//! pending transaction, then the post transaction (PostgreSQL). Throughput counts a
//! two-phase transfer once, when its post succeeded, over the units that started in
//! the window, divided by the time from the window's start to the last recorded
//! completion. Latencies are per batch (Grid, TigerBeetle: pending and post batches
//! together) or per two-phase transfer (PostgreSQL: both transactions).

use std::time::Duration;

use grid_benches::measure::{Cpu, Failures, Record, Tally, Window};
use grid_benches::report::{Table, ms, percentile, print_failures, ratio};

pub const GRID: &str = "Grid";
pub const TIGERBEETLE: &str = "TigerBeetle";
pub const POSTGRES: &str = "PostgreSQL";

/// The target ratios of issue 18, printed beside the measured ones.
const TARGET_OF_TIGERBEETLE: f64 = 0.25;
const TARGET_OF_POSTGRES: f64 = 20.0;

/// What one unit did, beside its start and end (which the [`Record`] holds).
#[derive(Clone, Debug, Default)]
pub struct Unit {
    /// Latencies of its batches (Grid, TigerBeetle: two; PostgreSQL: none, the unit's
    /// own latency is the transfer's).
    pub batch_ns: Vec<u64>,
    /// Two-phase transfers whose post succeeded.
    pub posted: u64,
    /// Their amounts, as the system answered them (Grid; the others check their own).
    pub posted_amount: u128,
    /// Operations refused inside the unit, by reason (a unit with some refused
    /// operations still counts the rest).
    pub refused: Vec<(String, u64)>,
}

/// One measurement of one system.
pub struct Cell {
    pub system: &'static str,
    /// Connections (Grid, TigerBeetle) or clients (PostgreSQL).
    pub connections: usize,
    /// Units per connection and window: batches (two per unit) or transactions.
    pub per_batch: bool,
    pub units: u64,
    pub posted: u64,
    pub elapsed: Duration,
    /// Sorted latencies: per batch, or per two-phase transfer.
    pub latency_ns: Vec<u64>,
    pub failures: Failures,
    pub cpu: Cpu,
}

impl Cell {
    /// From what the connections recorded: the units that started in `window`.
    pub fn new(
        system: &'static str,
        connections: usize,
        per_batch: bool,
        window: &Window,
        records: Vec<Record<Unit>>,
        cpu: Cpu,
    ) -> Cell {
        // Refusals inside warm-up units are counted too (the tally keeps only the
        // window's units).
        let mut warmup = Failures::default();
        for record in &records {
            for call in record.calls.iter().filter(|c| !window.holds(c.start_ns)) {
                for (reason, n) in &call.value.refused {
                    warmup.warmup += n;
                    warmup.reasons_n(format!("(warm-up) {reason}"), *n);
                }
            }
        }
        let tally = Tally::new(window, records);
        let mut failures = tally.failures;
        failures.merge(warmup);
        let mut latency_ns = Vec::new();
        let mut posted = 0;
        for call in &tally.calls {
            posted += call.value.posted;
            if per_batch {
                latency_ns.extend_from_slice(&call.value.batch_ns);
            }
            for (reason, n) in &call.value.refused {
                failures.recorded += n;
                failures.reasons_n(reason, *n);
            }
        }
        if per_batch {
            latency_ns.sort_unstable();
        } else {
            latency_ns = tally.latency_ns;
        }
        Cell {
            system,
            connections,
            per_batch,
            units: tally.calls.len() as u64,
            posted,
            elapsed: tally.elapsed,
            latency_ns,
            failures,
            cpu,
        }
    }

    /// Two-phase transfers per second.
    pub fn per_second(&self) -> f64 {
        if self.elapsed.is_zero() {
            return 0.0;
        }
        self.posted as f64 / self.elapsed.as_secs_f64()
    }

    pub fn p(&self, p: f64) -> Duration {
        percentile(&self.latency_ns, p)
    }

    fn latency_of(&self) -> &'static str {
        if self.per_batch { "batch" } else { "transfer" }
    }

    /// CPU per two-phase transfer, in µs with two decimals (batches make it small).
    fn per_transfer(&self, cpu: Duration) -> String {
        if self.posted == 0 {
            return "–".to_owned();
        }
        format!("{:.2} µs", cpu.as_secs_f64() * 1e6 / self.posted as f64)
    }

    fn who(&self) -> String {
        let noun = if self.system == POSTGRES {
            "clients"
        } else {
            "connections"
        };
        format!("{} {} {noun}", self.system, self.connections)
    }
}

/// One line per measurement as it finishes (the tables come at the end).
pub fn report(c: &Cell) {
    println!(
        "  {:<26} {:>9.0} two-phase transfers/s  per {} p50 {:>9}  p99 {:>9}  max {:>9}  \
         units {:>5}  posted {:>8}  failed {}  server CPU/transfer {}  client CPU/transfer {}",
        c.who(),
        c.per_second(),
        c.latency_of(),
        ms(c.p(0.50)),
        ms(c.p(0.99)),
        ms(c.p(1.0)),
        c.units,
        c.posted,
        c.failures.recorded,
        c.per_transfer(c.cpu.server),
        c.per_transfer(c.cpu.client),
    );
}

pub fn print_tables(cells: &[Cell], pg_clients: usize) {
    let mut table = Table::new(
        &[
            "system",
            "connections",
            "two-phase transfers/s",
            "latency of",
            "p50",
            "p99",
            "units",
            "posted",
            "failed",
            "server CPU / transfer",
            "client CPU / transfer",
        ],
        "lrrlrrrrrrr",
    );
    for c in cells {
        table.row(vec![
            c.system.to_owned(),
            c.connections.to_string(),
            format!("{:.0}", c.per_second()),
            c.latency_of().to_owned(),
            ms(c.p(0.50)),
            ms(c.p(0.99)),
            c.units.to_string(),
            c.posted.to_string(),
            c.failures.recorded.to_string(),
            c.per_transfer(c.cpu.server),
            c.per_transfer(c.cpu.client),
        ]);
    }
    table.print();

    let find = |system: &str, n: Option<usize>| {
        cells
            .iter()
            .find(|c| c.system == system && n.is_none_or(|n| c.connections == n))
    };
    let rate = |c: Option<&Cell>| c.map(Cell::per_second);
    let show = |c: Option<&Cell>| rate(c).map_or("–".to_owned(), |r| format!("{r:.0}"));
    let postgres = find(POSTGRES, Some(pg_clients));
    let mut ratios = Table::new(
        &[
            "connections",
            "Grid transfers/s",
            "TigerBeetle transfers/s",
            &format!("PostgreSQL ({pg_clients} clients) transfers/s"),
            &format!(
                "Grid / TigerBeetle (target ≥ {:.0}%)",
                TARGET_OF_TIGERBEETLE * 100.0
            ),
            &format!("Grid / PostgreSQL (target ≥ {TARGET_OF_POSTGRES:.0}×)"),
        ],
        "rrrrrr",
    );
    let mut counts: Vec<usize> = cells
        .iter()
        .filter(|c| c.system != POSTGRES)
        .map(|c| c.connections)
        .collect();
    counts.sort_unstable();
    counts.dedup();
    for n in counts {
        let (grid, tigerbeetle) = (find(GRID, Some(n)), find(TIGERBEETLE, Some(n)));
        let of_tigerbeetle = match (rate(grid), rate(tigerbeetle)) {
            (Some(g), Some(t)) if t > 0.0 => {
                let met = if g / t >= TARGET_OF_TIGERBEETLE {
                    "met"
                } else {
                    "not met"
                };
                format!("**{:.0}%** ({met})", g / t * 100.0)
            }
            _ => "–".to_owned(),
        };
        let of_postgres = match (rate(grid), rate(postgres)) {
            (Some(g), Some(p)) if p > 0.0 => {
                let met = if g / p >= TARGET_OF_POSTGRES {
                    "met"
                } else {
                    "not met"
                };
                format!("**{}** ({met})", ratio(Some(g), Some(p)))
            }
            _ => "–".to_owned(),
        };
        ratios.row(vec![
            n.to_string(),
            show(grid),
            show(tigerbeetle),
            show(postgres),
            of_tigerbeetle,
            of_postgres,
        ]);
    }
    ratios.print();
    print_failures(
        "Failures",
        "",
        cells.iter().map(|c| {
            (
                format!(
                    "{}: {} failed (+{} in warm-up)",
                    c.who(),
                    c.failures.recorded,
                    c.failures.warmup
                ),
                &c.failures,
            )
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use grid_benches::measure::Call;
    use std::time::Instant;

    fn unit(posted: u64, refused: &[(&str, u64)]) -> Unit {
        Unit {
            batch_ns: vec![10, 30],
            posted,
            posted_amount: 0,
            refused: refused.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
        }
    }

    #[test]
    fn a_cell_counts_posts_of_the_window_and_every_refusal() {
        let t0 = Instant::now();
        let window = Window {
            measure_from: t0,
            end: t0,
            from_ns: 1_000,
            end_ns: 2_000,
        };
        let mut record = Record::default();
        for (start_ns, end_ns, value) in [
            (500, 900, unit(5, &[("early", 1)])),
            (1_000, 1_400, unit(7, &[])),
            (1_500, 3_000, unit(6, &[("exists", 2)])),
            (2_000, 2_100, unit(9, &[])),
        ] {
            record.calls.push(Call {
                start_ns,
                end_ns,
                value,
            });
        }
        let cell = Cell::new(GRID, 1, true, &window, vec![record], Cpu::default());
        assert_eq!((cell.units, cell.posted), (2, 13));
        // From the window's start to the last recorded completion: 2,000 ns.
        assert_eq!(cell.elapsed, Duration::from_nanos(2_000));
        assert_eq!(cell.latency_ns, vec![10, 10, 30, 30]);
        assert_eq!((cell.failures.recorded, cell.failures.warmup), (2, 1));
        assert_eq!(cell.failures.reasons["(warm-up) early"], 1);
        assert_eq!(cell.failures.reasons["exists"], 2);
    }
}
