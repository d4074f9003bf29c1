//! The reconciler at scale (BENCHMARKS.md, "Scale"): `check` and the whole plan of
//! generated topologies of 1,000, 10,000 and 100,000 objects, and the plan against
//! running hosts that already hold everything, with the growth per 10× objects.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo run --release -p grid-benches --no-default-features --bin scale \
//!     [-- --objects 1000,10000,100000 --repeat 3 --running-hosts 20 \
//!         --running-models 4000 --only check|empty|running --keep]
//! ```
//!
//! Topologies (`generate.rs`): one host per 50 models, five routes per host (each to
//! the next host, fed by one of its models and read by one on the destination), one
//! membership with a three-voter authority that every host replicates. For each size:
//!
//! - **check**: `grid_spec::load` of the generated file (read, parse, validate), as
//!   `gridctl check` does;
//! - **plan, empty state**: [`plan`] of the loaded topology on an empty state
//!   directory (nothing installed: every host is observed as missing), with the time
//!   spent observing the hosts beside it.
//!
//! Then **plan, running**: a topology of `--running-hosts` hosts holding
//! `--running-models` models is brought up as the journeys do it (`gridctl reconcile`,
//! one `gridd` per host, reconcile until the plan is empty), and [`plan`] is timed
//! against the running hosts, which already hold everything (the plan is empty), with
//! the time observing them (one `observe` call each) beside it.
//!
//! Each figure is the median of `--repeat` runs (the minimum beside it). The growth
//! factor per 10× objects is `(t₂ / t₁)^(1 / log₁₀(n₂ / n₁))`: 10 is linear, 100
//! quadratic. The work directory (`$TMPDIR/gsc-PID`) is removed unless `--keep`.

mod generate;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;

use generate::Shape;
use grid_benches::bringup::{GridHosts, exit_on_error, one_gridd_per_host};
use grid_benches::limits::{SCALE_OBJECTS_MAX, SCALE_REPEATS_MAX};
use grid_benches::procs::{Result, WorkDir, free_ports, grid_bin_dir};
use grid_benches::report::{Table, ms, print_header};
use grid_reconciler::plan::Plan;

/// The reconciler's `check` and whole plan at 1,000 to 100,000 objects.
#[derive(Parser)]
#[command(name = "scale")]
struct Args {
    /// Sizes of the generated topologies, in objects (hosts, models, routes).
    #[arg(long, value_name = "N,N", default_value = "1000,10000,100000", value_parser = objects)]
    objects: Sizes,
    /// Runs of each measurement; the median is reported (1 to 50).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=SCALE_REPEATS_MAX as i64))]
    repeat: u32,
    /// Hosts of the running topology (one `gridd` each; 0 skips it).
    #[arg(long, value_name = "N", default_value_t = 20)]
    running_hosts: usize,
    /// Models the running hosts hold together.
    #[arg(long, value_name = "N", default_value_t = 4_000)]
    running_models: usize,
    /// Measure one part only.
    #[arg(long, value_parser = ["check", "empty", "running"])]
    only: Option<String>,
    /// Keep the work directory (topologies, state, logs).
    #[arg(long)]
    keep: bool,
}

#[derive(Debug, Clone)]
struct Sizes(Vec<usize>);

fn objects(text: &str) -> std::result::Result<Sizes, String> {
    let sizes = text
        .split(',')
        .map(|n| n.trim().parse::<usize>().map_err(|e| format!("{n}: {e}")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if sizes.iter().any(|&n| n == 0 || n > SCALE_OBJECTS_MAX) {
        return Err(format!("each between 1 and {SCALE_OBJECTS_MAX}"));
    }
    Ok(Sizes(sizes))
}

/// The whole plan of `topology` against the owners under `state`: the one call to the
/// planner, so a change of its signature is made here alone.
fn plan(topology: &grid_spec::Topology, files: &[PathBuf], state: &Path) -> Plan {
    grid_reconciler::plan::plan(topology, files, state)
}

/// Observing every host of `topology` under `state`, as the plan does first.
/// One observation of every owner, as a plan makes it (hosts in parallel).
fn observe_all(topology: &grid_spec::Topology, state: &Path) {
    std::hint::black_box(grid_reconciler::observe::observe(topology, state));
}

/// Median and minimum of `repeat` runs of `run`, and its last result.
fn timed<T>(repeat: u32, mut run: impl FnMut() -> Result<T>) -> Result<(Duration, Duration, T)> {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..repeat {
        let started = Instant::now();
        let value = run()?;
        times.push(started.elapsed());
        last = Some(value);
    }
    times.sort();
    let value = last.expect("at least one run");
    Ok((times[times.len() / 2], times[0], value))
}

/// `median (min)`.
fn figure(median: Duration, min: Duration) -> String {
    format!("{} ({})", ms(median), ms(min))
}

/// The growth per 10× objects between two sizes.
fn growth(n1: usize, t1: Duration, n2: usize, t2: Duration) -> String {
    let (n1, n2) = (n1 as f64, n2 as f64);
    let (t1, t2) = (t1.as_secs_f64(), t2.as_secs_f64());
    if n2 <= n1 || t1 <= 0.0 {
        return "–".to_owned();
    }
    format!("{:.1}×", (t2 / t1).powf(1.0 / (n2 / n1).log10()))
}

fn load(path: &Path) -> Result<grid_spec::Topology> {
    grid_spec::load(&[path.to_owned()]).map_err(|d| format!("{}: {d}", path.display()).into())
}

struct Row {
    shape: Shape,
    check: Option<(Duration, Duration)>,
    plan: Option<(Duration, Duration, usize)>,
    observe: Option<Duration>,
}

fn sizes(args: &Args, work: &Path) -> Result<Vec<Row>> {
    let part = |p: &str| args.only.as_deref().is_none_or(|only| only == p);
    let mut rows = Vec::new();
    for &objects in &args.objects.0 {
        let shape = Shape::for_objects(objects);
        let text = generate::topology(&shape, &generate::planned_ports(shape.hosts));
        let file = work.join(format!("scale-{objects}.kdl"));
        std::fs::write(&file, &text)?;
        eprintln!(
            "{} objects ({} hosts, {} models, {} routes), {} KB",
            shape.objects(),
            shape.hosts,
            shape.models(),
            shape.routes(),
            text.len() / 1024
        );
        let mut row = Row {
            shape,
            check: None,
            plan: None,
            observe: None,
        };
        if part("check") {
            let (median, min, _) = timed(args.repeat, || load(&file))?;
            row.check = Some((median, min));
        }
        if part("empty") {
            let topology = load(&file)?;
            let state = work.join(format!("empty-{objects}"));
            std::fs::create_dir_all(&state)?;
            let files = vec![file.clone()];
            let (median, min, plan) = timed(args.repeat, || Ok(plan(&topology, &files, &state)))?;
            let (observe, _, ()) = timed(args.repeat, || {
                observe_all(&topology, &state);
                Ok(())
            })?;
            row.plan = Some((median, min, plan.transitions.len()));
            row.observe = Some(observe);
        }
        rows.push(row);
    }
    Ok(rows)
}

fn print_sizes(rows: &[Row]) {
    let mut table = Table::new(
        &[
            "objects",
            "hosts / models / routes",
            "check",
            "growth per 10×",
            "plan, empty state",
            "of it observing",
            "transitions",
            "growth per 10×",
        ],
        "rlrrrrrr",
    );
    for (i, row) in rows.iter().enumerate() {
        let previous = i.checked_sub(1).map(|p| &rows[p]);
        let grew = |now: Option<Duration>, then: Option<Duration>| match (previous, now, then) {
            (Some(p), Some(now), Some(then)) => {
                growth(p.shape.objects(), then, row.shape.objects(), now)
            }
            _ => "–".to_owned(),
        };
        let dash = || "–".to_owned();
        table.row(vec![
            format!("{}", row.shape.objects()),
            format!(
                "{} / {} / {}",
                row.shape.hosts,
                row.shape.models(),
                row.shape.routes()
            ),
            row.check.map_or_else(dash, |(m, n)| figure(m, n)),
            grew(
                row.check.map(|c| c.0),
                previous.and_then(|p| p.check.map(|c| c.0)),
            ),
            row.plan.map_or_else(dash, |(m, n, _)| figure(m, n)),
            row.observe.map_or_else(dash, ms),
            row.plan.map_or_else(dash, |(_, _, t)| t.to_string()),
            grew(
                row.plan.map(|p| p.0),
                previous.and_then(|p| p.plan.map(|c| c.0)),
            ),
        ]);
    }
    table.print();
}

/// The plan against running hosts that hold everything.
fn running(args: &Args, bin_dir: &Path, work: &Path) -> Result<()> {
    let shape = Shape::running(args.running_hosts, args.running_models);
    let ports = free_ports(shape.hosts)?;
    let text = generate::topology(&shape, &ports);
    let names: Vec<String> = (0..shape.hosts).map(|h| format!("h{h}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let dir = work.join("running");
    std::fs::create_dir_all(&dir)?;
    eprintln!(
        "bringing up {} hosts holding {} models and {} routes",
        shape.hosts,
        shape.models(),
        shape.routes()
    );
    let started = Instant::now();
    let mut hosts = GridHosts::start(
        bin_dir,
        &dir,
        "scale.kdl",
        &text,
        &one_gridd_per_host(&names),
    )?;
    let bringup = started.elapsed();
    let file = dir.join("scale.kdl");
    let topology = load(&file)?;
    let state = dir.join("state");
    let files = vec![file];
    let (median, min, plan) = timed(args.repeat, || {
        hosts.procs.check_running()?;
        Ok(plan(&topology, &files, &state))
    })?;
    let (observe, _, ()) = timed(args.repeat, || {
        observe_all(&topology, &state);
        Ok(())
    })?;
    // The diff alone: the plan of one observation, without IO.
    let world = grid_reconciler::observe::observe(&topology, &state);
    let (routes, _, _) = timed(args.repeat, || {
        Ok(grid_reconciler::plan::from_world(&topology, &files, &world))
    })?;
    println!();
    println!(
        "running: {} gridd, {} objects ({} models, {} routes), brought up in {:.0} s ({} reconcile rounds after the hosts started)",
        shape.hosts,
        shape.objects(),
        shape.models(),
        shape.routes(),
        bringup.as_secs_f64(),
        hosts.rounds
    );
    let mut table = Table::new(
        &[
            "plan, running hosts",
            "of it observing (claims included)",
            "of it diffing",
            "transitions",
        ],
        "rrrr",
    );
    table.row(vec![
        figure(median, min),
        ms(observe),
        ms(routes),
        plan.transitions.len().to_string(),
    ]);
    table.print();
    for t in plan.transitions.iter().take(5) {
        println!(
            "  {} {} {} @ {}: {}",
            t.op.symbol(),
            t.kind,
            t.name,
            t.host,
            t.detail
        );
    }
    Ok(())
}

fn run() -> Result<()> {
    let args = Args::parse();
    let part = |p: &str| args.only.as_deref().is_none_or(|only| only == p);
    let bin_dir = if part("running") && args.running_hosts > 0 {
        Some(grid_bin_dir()?)
    } else {
        None
    };
    print_header(
        "The reconciler at scale: check, the whole plan on an empty state, the plan against running hosts",
        bin_dir.as_deref(),
    )?;
    let work = WorkDir::new("gsc", args.keep)?;
    if part("check") || part("empty") {
        let rows = sizes(&args, &work.path)?;
        println!("repeat: {} (median, minimum in parentheses)", args.repeat);
        print_sizes(&rows);
    }
    if let Some(bin_dir) = &bin_dir {
        running(&args, bin_dir, &work.path)?;
    }
    Ok(())
}

fn main() {
    exit_on_error("scale", run());
}
