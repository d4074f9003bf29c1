//! Shared memberships, isolation (BENCHMARKS.md, "Shared memberships: isolation"): one
//! host `edge` in two independently certified memberships (each its own authority, on
//! edge), publishing an Ordered route in each — `to-site` (plant-ops, to `site`) and
//! `to-util` (utility, to `gw`) — and running the model `boiler`, which serves both
//! and publishes its output on both routes. In one run:
//!
//! 1. **Throughput**: each membership's Ordered values acknowledged end to end per second
//!    (the destination's signed receipt back at the publisher), one publisher per
//!    membership: each alone, then both at the same time. Target: both ≥ 0.9 × alone.
//! 2. **Writer latency**: input batches into `boiler` (each changes its output, so each
//!    publishes on both routes), one at a time: the time from `gridctl input`'s call
//!    to its durable answer, undisturbed, then with gw SIGKILLed — utility's pool
//!    (`capacity membership=utility ordered-per-host=256`) fills and its publications
//!    wait, journaled (`deferred`), while plant-ops's go out. Target: p99 within 1.2×.
//!
//! Beside each throughput window it prints where the CPU went: the cores each `gridd`
//! and this benchmark's publishers used, how busy the machine was (`/proc/stat`), the
//! CPU of all of them per value acknowledged, and what that allows on this machine's
//! cores — so a ratio below target says whether the machine, not the host, ran out.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl
//! cargo run --release -p grid-benches --bin membership_isolation [-- --seconds 5 --warmup 1 --inputs 2000 --keep]
//! ```

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;

use grid_engine::delivery::api::{DeliveryCall, DeliveryReply};
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Outcome, Reply, Request};

use grid_benches::bringup::{GridHosts, exit_on_error, one_gridd_per_host};
use grid_benches::procs::{Result, WorkDir, cpu_time, free_ports, grid_bin_dir};
use grid_benches::publisher::Publisher;
use grid_benches::report::{Table, ms, percentile, print_header};

const HOSTS: [&str; 3] = ["edge", "site", "gw"];
const SITE: (&str, &str) = ("to-site", "site");
const UTIL: (&str, &str) = ("to-util", "gw");
/// How long the routes may take to receipt what was published after a window.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Parser)]
#[command(name = "membership_isolation")]
struct Args {
    /// Seconds each throughput measurement records.
    #[arg(long, default_value = "5")]
    seconds: f64,
    /// Seconds of publishing before each throughput window.
    #[arg(long, default_value = "1")]
    warmup: f64,
    /// Input batches per latency measurement.
    #[arg(long, default_value = "2000")]
    inputs: u64,
    /// Keep the work directory.
    #[arg(long)]
    keep: bool,
}

fn topology(ports: &[u16]) -> String {
    format!(
        r#"grid version=1
// Written by benches membership_isolation.
membership plant-ops {{
    authority voters=1
}}
membership utility {{
    authority voters=1
}}
host edge listen="127.0.0.1:{}" {{
    member plant-ops
    member utility
    profiles transport authority delivery shared-memberships
    capacity membership=utility ordered-per-host=256
}}
host site listen="127.0.0.1:{}" {{
    member plant-ops
    profiles transport delivery
}}
host gw listen="127.0.0.1:{}" {{
    member utility
    profiles transport delivery
}}
model boiler host=edge {{
    serve plant-ops
    serve utility
    input bias default=0
    cell out "bias * 2"
    output out route=to-site
    output out route=to-util
}}
route to-site membership=plant-ops class=ordered encrypted=#true {{
    publisher edge
    destination site
}}
route to-util membership=utility class=ordered encrypted=#true {{
    publisher edge
    destination gw
}}
"#,
        ports[0], ports[1], ports[2]
    )
}

fn main() {
    exit_on_error("membership_isolation", run(Args::parse()));
}

fn run(args: Args) -> Result<()> {
    let bin_dir = grid_bin_dir()?;
    print_header(
        "Shared memberships: isolation of one host's two memberships",
        Some(&bin_dir),
    )?;
    let work = WorkDir::new("membership-isolation", args.keep)?;
    let ports = free_ports(HOSTS.len())?;
    let mut hosts = GridHosts::start(
        &bin_dir,
        &work.path,
        "topology.kdl",
        &topology(&ports),
        &one_gridd_per_host(&HOSTS),
    )?;
    let edge = hosts.host_dir("edge");
    let window = Duration::from_secs_f64(args.seconds);
    let warmup = Duration::from_secs_f64(args.warmup);

    let pids = HOSTS
        .iter()
        .map(|h| {
            hosts
                .procs
                .pid(&format!("gridd {h}"))
                .ok_or_else(|| format!("no pid of gridd {h}"))
        })
        .collect::<std::result::Result<Vec<u32>, String>>()?;
    let (site_alone, site_cpu) = rates(&edge, &[SITE], warmup, window, &pids)?;
    let (util_alone, util_cpu) = rates(&edge, &[UTIL], warmup, window, &pids)?;
    let (both, both_cpu) = rates(&edge, &[SITE, UTIL], warmup, window, &pids)?;
    let (site_alone, util_alone) = (site_alone[0], util_alone[0]);
    let mut table = Table::new(
        &[
            "membership (route)",
            "alone, values/s",
            "both loaded, values/s",
            "both / alone",
        ],
        "lrrr",
    );
    for ((name, alone), loaded) in [
        ("plant-ops (to-site)", site_alone),
        ("utility (to-util)", util_alone),
    ]
    .into_iter()
    .zip(both.iter().copied())
    {
        table.row(vec![
            name.to_owned(),
            format!("{alone:.0}"),
            format!("{loaded:.0}"),
            format!("{:.2}", loaded / alone),
        ]);
    }
    println!(
        "\nOrdered values acknowledged end to end per second, one publisher per membership, {:.0} s window:",
        args.seconds
    );
    table.print();
    print_cpu(
        &[
            ("plant-ops alone", &site_cpu, site_alone),
            ("utility alone", &util_cpu, util_alone),
            ("both loaded", &both_cpu, both.iter().sum()),
        ],
        0.9 * (site_alone + util_alone),
    );

    let undisturbed = input_latencies(&edge, 0, args.inputs)?;
    drained(&edge, &[SITE, UTIL])?;
    hosts.procs.kill("gridd gw")?;
    let disturbed = input_latencies(&edge, args.inputs, args.inputs)?;
    drained(&edge, &[SITE])?;
    let deferred = deferred_on(&edge, UTIL.0)?;
    let mut table = Table::new(&["boiler's input batches", "p50", "p99"], "lrr");
    for (name, sorted) in [
        ("undisturbed", &undisturbed),
        ("gw down, utility's pool full", &disturbed),
    ] {
        table.row(vec![
            name.to_owned(),
            ms(percentile(sorted, 0.50)),
            ms(percentile(sorted, 0.99)),
        ]);
    }
    println!(
        "\nInput batch latency (call to durable answer, each publishing on both routes), {} batches each:",
        args.inputs
    );
    table.print();
    let ratio = percentile(&disturbed, 0.99).as_secs_f64()
        / percentile(&undisturbed, 0.99).as_secs_f64().max(1e-9);
    println!(
        "\np99 disturbed / undisturbed: {ratio:.2}; to-util publications waiting for capacity at the end: {deferred}; to-site receipted everything"
    );
    Ok(())
}

/// Ordered values acknowledged end to end per second on each of `routes` (route,
/// destination), one publisher thread per route publishing as fast as its answers
/// come, all at the same time: receipts counted over `window` after `warmup`.
/// The CPU used over one throughput window: by each `gridd` (in [`HOSTS`] order) and
/// by this process (the publishers and the poller), in cores; the machine's busy share.
struct CpuUse {
    hosts: Vec<f64>,
    bench: f64,
    machine_busy: f64,
    cores: usize,
}

/// The machine's busy and total ticks so far (`/proc/stat`'s first line: idle and
/// iowait are not busy).
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// The CPU time so far of each `gridd` and of this process, and the machine's
/// (busy, total) ticks.
struct CpuReading {
    hosts: Vec<Duration>,
    bench: Duration,
    machine: (u64, u64),
}

/// What each process and the machine used between two readings `seconds` apart.
fn cpu_between(before: &CpuReading, after: &CpuReading, seconds: f64) -> CpuUse {
    let cores = |a: Duration, b: Duration| b.saturating_sub(a).as_secs_f64() / seconds;
    let (busy, total) = (
        after.machine.0.saturating_sub(before.machine.0),
        after.machine.1.saturating_sub(before.machine.1),
    );
    CpuUse {
        hosts: before
            .hosts
            .iter()
            .zip(&after.hosts)
            .map(|(a, b)| cores(*a, *b))
            .collect(),
        bench: cores(before.bench, after.bench),
        machine_busy: busy as f64 / total.max(1) as f64,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

fn cpu_reading(pids: &[u32]) -> CpuReading {
    CpuReading {
        hosts: pids.iter().map(|&pid| cpu_time(Some(pid))).collect(),
        bench: cpu_time(None),
        machine: machine_ticks(),
    }
}

/// The CPU table: per phase, the cores each process used, the machine's busy share and
/// the CPU of all of them per value acknowledged; then what the both-loaded CPU per
/// value allows on this machine against what the target needs.
fn print_cpu(phases: &[(&str, &CpuUse, f64)], target: f64) {
    let mut table = Table::new(
        &[
            "window",
            "edge, cores",
            "site, cores",
            "gw, cores",
            "publishers, cores",
            "machine busy",
            "CPU per value",
        ],
        "lrrrrrr",
    );
    let per_value =
        |cpu: &CpuUse, rate: f64| (cpu.hosts.iter().sum::<f64>() + cpu.bench) * 1e6 / rate.max(1.0);
    for (name, cpu, rate) in phases {
        let mut row = vec![(*name).to_owned()];
        row.extend(cpu.hosts.iter().map(|c| format!("{c:.2}")));
        row.push(format!("{:.2}", cpu.bench));
        row.push(format!("{:.0} %", cpu.machine_busy * 100.0));
        row.push(format!("{:.0} µs", per_value(cpu, *rate)));
        table.row(row);
    }
    println!("\nWhere the CPU went in each window (all processes' CPU per value acknowledged):");
    table.print();
    if let Some((_, cpu, rate)) = phases.last() {
        let ceiling = cpu.cores as f64 * 1e6 / per_value(cpu, *rate);
        println!(
            "At the both-loaded CPU per value, {} cores carry at most {ceiling:.0} values/s together; both at 0.9 of alone needs {target:.0}/s.",
            cpu.cores
        );
    }
}

fn rates(
    edge: &Path,
    routes: &[(&str, &str)],
    warmup: Duration,
    window: Duration,
    pids: &[u32],
) -> Result<(Vec<f64>, CpuUse)> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (route, _) in routes {
        let (stop, route, dir) = (stop.clone(), (*route).to_owned(), edge.to_owned());
        threads.push(std::thread::spawn(
            move || -> std::result::Result<u64, String> {
                let mut publisher = Publisher::connect(dir).map_err(|e| e.to_string())?;
                let mut last = 0;
                let mut value = 0.0;
                while !stop.load(Ordering::Relaxed) {
                    value += 1.0;
                    last = publisher.publish(&route, value)?;
                }
                Ok(last)
            },
        ));
    }
    let mut poller = Publisher::connect(edge.to_owned())?;
    std::thread::sleep(warmup);
    let first: Vec<u64> = routes
        .iter()
        .map(|(r, d)| poller.receipted(r, d))
        .collect::<Result<_>>()?;
    let started = Instant::now();
    let cpu_before = cpu_reading(pids);
    std::thread::sleep(window);
    let last: Vec<u64> = routes
        .iter()
        .map(|(r, d)| poller.receipted(r, d))
        .collect::<Result<_>>()?;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_between(&cpu_before, &cpu_reading(pids), elapsed);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread
            .join()
            .map_err(|_| "a publisher thread panicked")?
            .map_err(|e| format!("a publish was refused: {e}"))?;
    }
    drained(edge, routes)?;
    let rates = first
        .iter()
        .zip(&last)
        .map(|(a, b)| (b - a) as f64 / elapsed)
        .collect();
    Ok((rates, cpu))
}

/// Waits (bounded) until each route's destination has receipted everything published.
fn drained(edge: &Path, routes: &[(&str, &str)]) -> Result<()> {
    let started = Instant::now();
    let mut poller = Publisher::connect(edge.to_owned())?;
    for (route, destination) in routes {
        let published = published_on(edge, route)?;
        while poller.receipted(route, destination)? < published {
            if started.elapsed() > DRAIN_TIMEOUT {
                return Err(format!("{route}: {destination} did not receipt position {published} within {DRAIN_TIMEOUT:?}").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}

fn route_view(edge: &Path, route: &str) -> Result<grid_engine::delivery::api::RouteView> {
    let mut client = Client::connect(edge)?;
    match client.call(&Call::Delivery {
        request: DeliveryCall::Routes,
    })? {
        Reply::Delivery(reply) => match *reply {
            DeliveryReply::Routes { routes, .. } => routes
                .into_iter()
                .find(|r| r.route.name == route && r.role == "publisher")
                .ok_or_else(|| format!("edge publishes no route {route}").into()),
            other => Err(format!("routes: {other:?}").into()),
        },
        other => Err(format!("routes: {other:?}").into()),
    }
}

fn published_on(edge: &Path, route: &str) -> Result<u64> {
    Ok(route_view(edge, route)?.published)
}

fn deferred_on(edge: &Path, route: &str) -> Result<u64> {
    Ok(route_view(edge, route)?.deferred)
}

/// `count` input batches into `boiler`, one at a time (ids from `first`): each one's
/// latency in nanoseconds, sorted. Every batch must succeed.
fn input_latencies(edge: &Path, first: u64, count: u64) -> Result<Vec<u64>> {
    let mut client = Client::connect(edge)?;
    let mut latencies = Vec::with_capacity(count as usize);
    for i in first..first + count {
        let started = Instant::now();
        let reply = client.call(&Call::Submit {
            op: format!("bias-{i}"),
            request: Request::Input {
                model: "boiler".to_owned(),
                values: vec![("bias".to_owned(), (i + 1) as f64)],
                fence: None,
            },
        })?;
        let elapsed = started.elapsed();
        match reply {
            Reply::Answer(answer) if answer.outcome == Outcome::Succeeded => {}
            other => return Err(format!("input bias-{i}: {other:?}").into()),
        }
        latencies.push(elapsed.as_nanos() as u64);
    }
    latencies.sort_unstable();
    Ok(latencies)
}
