//! Sparkplug ingest: the edge node publishes NDATA through mosquitto; Grid's host
//! journals and projects it while `mosquitto_sub` counts the same stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use grid_benches::measure::CpuMeter;
use grid_benches::procs::Result;
use grid_benches::report::{Table, ratio};

use crate::broker::{Mosquitto, Subscriber};
use crate::edge::{self, EdgeNode};
use crate::grid::{Fsyncs, GridHost, Histogram, Scrape, bucket_ms};

pub const TAG: &str = "line-speed";
pub const MODEL: &str = "line";
/// How often the poller scrapes the host's counters during a run.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// A count that has not moved for this long is done.
const QUIET: Duration = Duration::from_millis(500);
/// How long the host may take to be online with the birth's value.
const ONLINE_TIMEOUT: Duration = Duration::from_secs(30);

/// The tag and model of `edge`, reading the node's metric through the broker.
pub fn topology(broker_port: u16) -> String {
    format!(
        "tag {TAG} host=edge {{\n    sparkplug \"mqtt://127.0.0.1:{broker_port}\" group=\"{}\" node=\"{}\" metric=\"{}\"\n}}\n\
         model {MODEL} host=edge {{\n    input speed from=\"tag:{TAG}\" default=0\n    cell rpm \"speed * 60\"\n}}\n",
        edge::GROUP,
        edge::NODE,
        edge::METRIC
    )
}

/// One run's figures.
#[derive(Debug, Clone)]
pub struct Run {
    pub label: String,
    pub published: edge::Published,
    /// Messages `mosquitto_sub` received, and per second from the first NDATA to its last.
    pub sub: Option<(u64, f64)>,
    pub grid: Option<GridRun>,
    /// CPU of mosquitto and of mosquitto_sub over the run and its drain.
    pub broker_cpu: Duration,
    pub sub_cpu: Duration,
}

#[derive(Debug, Clone)]
pub struct GridRun {
    /// Good entries of NDATA (good entries less the NBIRTHs answered in the run).
    pub good_data: u64,
    /// Entries journaled (every quality), per second from the first NDATA to the last.
    pub journaled: u64,
    pub journaled_per_second: f64,
    /// Model batches applied, per second from the first NDATA to the last.
    pub projected: u64,
    pub projected_per_second: f64,
    /// Whether projection caught up with the journal within the drain bound.
    pub projection_complete: bool,
    pub debt: u64,
    /// Data ignored while awaiting a birth whose debt repeated the last reason.
    pub repeats: u64,
    pub rebirths: u64,
    pub device_to_durable: Histogram,
    /// The host's store fsyncs over the run and its drain (group commits).
    pub fsyncs: Fsyncs,
    pub gridd_cpu: Duration,
}

impl GridRun {
    /// NDATA published that the host never journaled: not delivered to it (QoS 0).
    pub fn lost(&self, published: u64) -> i64 {
        published as i64 - (self.good_data + self.debt + self.repeats) as i64
    }
}

/// Waits until the host's tag is online with a good value, answering rebirths.
pub fn wait_online(
    grid: &mut GridHost,
    node: &mut EdgeNode,
    runtime: &tokio::runtime::Runtime,
) -> Result<()> {
    let started = Instant::now();
    loop {
        runtime.block_on(node.idle(Duration::from_millis(100), 0.0))?;
        let tag = grid.tag(TAG)?;
        let online = tag.connection.as_ref().is_some_and(|c| c.state == "online");
        if online && tag.last_good.is_some() {
            return Ok(());
        }
        grid.hosts.procs.check_running()?;
        if started.elapsed() > ONLINE_TIMEOUT {
            return Err(format!(
                "tag {TAG} was not online with a value within {ONLINE_TIMEOUT:?}: {:?}",
                tag.connection
            )
            .into());
        }
    }
}

/// The times the host's counters last moved, seen by a polling thread.
struct Poller {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Instant, u64, u64)>>,
}

impl Poller {
    fn start(metrics_port: u16) -> Poller {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(s) = crate::grid::scrape_port(metrics_port) {
                        let entries = s.entries("good") + s.entries("debt") + s.entries("refused");
                        seen.push((Instant::now(), entries, s.batches()));
                    }
                    std::thread::sleep(POLL_INTERVAL);
                }
                seen
            })
        };
        Poller { stop, thread }
    }

    fn stop(self) -> Vec<(Instant, u64, u64)> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

/// When a series of (time, value) reached its final value.
fn settled_at(series: &[(Instant, u64)]) -> Option<Instant> {
    let last = series.last()?.1;
    series.iter().find(|(_, v)| *v == last).map(|(t, _)| *t)
}

/// The arguments of one run.
pub struct Plan {
    pub label: String,
    pub messages: u64,
    pub rate: Option<f64>,
    pub bound: Duration,
    pub drain: Duration,
    pub first_value: f64,
}

/// Publishes one run and measures it.
pub fn run(
    plan: &Plan,
    node: &mut EdgeNode,
    broker: &Mosquitto,
    sub_bin: Option<&std::path::Path>,
    grid: Option<&mut GridHost>,
    runtime: &tokio::runtime::Runtime,
    log_dir: &std::path::Path,
) -> Result<Run> {
    let sub = match sub_bin {
        Some(bin) => Some(Subscriber::start(
            bin,
            broker.port,
            &edge::topic("NDATA"),
            &log_dir.join(format!(
                "mosquitto_sub-{}.log",
                plan.label.replace([' ', '/'], "-")
            )),
        )?),
        None => None,
    };
    let mut grid = grid;
    let before = match grid.as_deref_mut() {
        Some(g) => Some((
            g.scrape()?,
            g.tag(TAG)?.repeats,
            CpuMeter::start(vec![g.pid()]),
        )),
        None => None,
    };
    let poller = grid.as_deref().map(|g| Poller::start(g.metrics_port));
    let rebirths_before = node.rebirths();
    let broker_cpu = CpuMeter::start(vec![broker.pid()]);
    let sub_cpu = CpuMeter::start(sub.iter().map(Subscriber::pid).collect());
    let started = Instant::now();
    let published =
        runtime.block_on(node.publish(plan.messages, plan.rate, plan.first_value, plan.bound))?;
    // Drain: until what the host and mosquitto_sub count stops moving (and the model
    // has every journaled observation), bounded; rebirths are answered meanwhile.
    let drain_end = Instant::now() + plan.drain;
    let mut last_moved = Instant::now();
    let mut last_seen = (u64::MAX, u64::MAX, u64::MAX);
    while Instant::now() < drain_end {
        runtime.block_on(node.idle(Duration::from_millis(100), plan.first_value))?;
        let subscribed = sub.as_ref().map_or(0, |s| s.received().messages);
        let (journaled, batches, complete) = match grid.as_deref() {
            Some(g) => {
                let s = g.scrape()?;
                let b = before.as_ref().expect("with the grid");
                let journaled = total(&s) - total(&b.0);
                let good = s.entries("good") - b.0.entries("good");
                let batches = s.batches() - b.0.batches();
                (journaled, batches, batches >= good)
            }
            None => (0, 0, true),
        };
        let now = (subscribed, journaled, batches);
        if now != last_seen {
            last_seen = now;
            last_moved = Instant::now();
        } else if last_moved.elapsed() >= QUIET && complete {
            break;
        }
    }
    let (broker_cpu, sub_cpu) = (broker_cpu.stop().server, sub_cpu.stop().server);
    let sub = sub.map(|s| {
        let r = s.received();
        let elapsed = r.last.map_or(Duration::ZERO, |l| l - started);
        (r.messages, per_second(r.messages, elapsed))
    });
    let grid = match (grid, before, poller) {
        (Some(g), Some((scrape_before, repeats_before, cpu)), Some(poller)) => {
            let seen = poller.stop();
            let cpu = cpu.stop();
            let after = g.scrape()?;
            let tag = g.tag(TAG)?;
            let journaled = total(&after) - total(&scrape_before);
            let good = after.entries("good") - scrape_before.entries("good");
            let projected = after.batches() - scrape_before.batches();
            let journal_done =
                settled_at(&seen.iter().map(|(t, e, _)| (*t, *e)).collect::<Vec<_>>());
            let projection_done =
                settled_at(&seen.iter().map(|(t, _, b)| (*t, *b)).collect::<Vec<_>>());
            let over = |done: Option<Instant>| done.map_or(Duration::ZERO, |d| d - started);
            Some(GridRun {
                good_data: good.saturating_sub(published.births),
                journaled,
                journaled_per_second: per_second(journaled, over(journal_done)),
                projected,
                projected_per_second: per_second(projected, over(projection_done)),
                projection_complete: projected >= good,
                debt: after.entries("debt") - scrape_before.entries("debt"),
                repeats: tag.repeats - repeats_before,
                rebirths: node.rebirths() - rebirths_before,
                device_to_durable: Histogram::between(
                    &scrape_before,
                    &after,
                    "grid_tag_device_to_durable_seconds",
                ),
                fsyncs: Fsyncs::between(&scrape_before, &after),
                gridd_cpu: cpu.server,
            })
        }
        _ => None,
    };
    Ok(Run {
        label: plan.label.clone(),
        published,
        sub,
        grid,
        broker_cpu,
        sub_cpu,
    })
}

fn total(s: &Scrape) -> u64 {
    s.entries("good") + s.entries("debt") + s.entries("refused")
}

fn per_second(n: u64, over: Duration) -> f64 {
    if over.is_zero() {
        0.0
    } else {
        n as f64 / over.as_secs_f64()
    }
}

/// Prints one run as it ends.
pub fn report(run: &Run) {
    let p = &run.published;
    let bound = if p.timed_out {
        ", stopped at the time bound"
    } else {
        ""
    };
    let gridd = run.grid.as_ref().map_or(String::new(), |g| {
        format!(", gridd {:.2} s", g.gridd_cpu.as_secs_f64())
    });
    println!(
        "{}: {} NDATA published in {:.2} s ({:.0}/s{bound}), {} NBIRTH in answer to rebirths; \
         CPU over the run and its drain: mosquitto {:.2} s, mosquitto_sub {:.2} s{gridd}",
        run.label,
        p.messages,
        p.elapsed.as_secs_f64(),
        per_second(p.messages, p.elapsed),
        p.births,
        run.broker_cpu.as_secs_f64(),
        run.sub_cpu.as_secs_f64(),
    );
}

/// The tables of every run.
pub fn print_tables(runs: &[Run]) {
    let mut table = Table::new(
        &[
            "run",
            "published",
            "published/s",
            "mosquitto_sub received",
            "mosquitto_sub/s",
            "Grid journaled",
            "journaled/s",
            "projected (batches)",
            "projected/s",
            "Grid / mosquitto_sub",
        ],
        "lrrrrrrrrr",
    );
    for run in runs {
        let p = &run.published;
        let (sub_n, sub_rate) = run
            .sub
            .map_or(("–".to_owned(), None), |(n, r)| (n.to_string(), Some(r)));
        let g = run.grid.as_ref();
        table.row(vec![
            run.label.clone(),
            p.messages.to_string(),
            format!("{:.0}", per_second(p.messages, p.elapsed)),
            sub_n,
            sub_rate.map_or("–".to_owned(), |r| format!("{r:.0}")),
            g.map_or("–".to_owned(), |g| g.journaled.to_string()),
            g.map_or("–".to_owned(), |g| {
                format!("{:.0}", g.journaled_per_second)
            }),
            g.map_or("–".to_owned(), |g| {
                format!(
                    "{}{}",
                    g.projected,
                    if g.projection_complete {
                        ""
                    } else {
                        " (incomplete)"
                    }
                )
            }),
            g.map_or("–".to_owned(), |g| {
                format!("{:.0}", g.projected_per_second)
            }),
            ratio(g.map(|g| g.journaled_per_second), sub_rate),
        ]);
    }
    table.print();
    let mut table = Table::new(
        &[
            "run",
            "NDATA journaled good",
            "debt entries",
            "awaiting-birth repeats",
            "rebirths asked",
            "not delivered to Grid (QoS 0)",
            "device → durable p50 (bucket)",
            "p99 (bucket)",
            "fsyncs",
            "gridd CPU / entry",
        ],
        "lrrrrrllll",
    );
    for run in runs {
        let Some(g) = &run.grid else { continue };
        table.row(vec![
            run.label.clone(),
            g.good_data.to_string(),
            g.debt.to_string(),
            g.repeats.to_string(),
            g.rebirths.to_string(),
            g.lost(run.published.messages).to_string(),
            bucket_ms(g.device_to_durable.percentile(0.50)),
            bucket_ms(g.device_to_durable.percentile(0.99)),
            g.fsyncs.text(),
            grid_benches::report::per_operation(g.gridd_cpu, g.journaled),
        ]);
    }
    table.print();
}
