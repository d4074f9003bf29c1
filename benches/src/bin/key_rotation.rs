//! Key rotation at scale (BENCHMARKS.md, "Key rotation"): rotating a host's signing,
//! mail and TLS keys — one `gridctl reconcile` of files raising all three generations —
//! on a host holding little beside one holding many routes and retained runs, in one
//! run, on the same machine: the time it takes and what it sends. The claim it checks:
//! the work of a rotation does not grow with the routes or the retained history (no
//! route is reinstalled, no grant raised, no run touched; peers learn the keys through
//! the membership).
//!
//! Two hosts in `ops` (authority at `edge`): `edge` publishes R Ordered routes to
//! `peer` and receives K `demo.count` runs from it under a grant, then rotates.
//! Measured per scale: the reconcile's wall time, its transitions by kind, and the
//! operations it sent to a host (each `~ keys` is one; an enrollment or a `~ peer-keys`
//! writes files in the operator's reach, no message).
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl
//! cargo run --release -p grid-benches --bin key_rotation [-- --routes 1000 --runs 10000 --keep]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;

use grid_engine::processes::api::Peer;

use grid_benches::bringup::{GridHosts, exit_on_error, one_gridd_per_host};
use grid_benches::processes::{history_topology, retain_runs};
use grid_benches::procs::{Result, WorkDir, free_ports, grid_bin_dir};
use grid_benches::report::{Table, print_header};

const HOSTS: [&str; 2] = ["edge", "peer"];

#[derive(Parser)]
#[command(name = "key_rotation")]
struct Args {
    /// Routes `edge` publishes at the large scale (the small one has 1).
    #[arg(long, default_value = "1000")]
    routes: usize,
    /// Runs `edge` retains at the large scale (the small one has 0).
    #[arg(long, default_value = "10000")]
    runs: usize,
    /// Keep the work directories.
    #[arg(long)]
    keep: bool,
}

fn topology(ports: &[u16], routes: usize, runs: usize, rotated: bool) -> String {
    let keys = if rotated {
        "    keys generation=2 mail-generation=2 tls-generation=2\n"
    } else {
        ""
    };
    history_topology("key_rotation", ports, (routes, runs), keys, ("", ""))
}

/// What one rotation took.
struct Rotation {
    elapsed: Duration,
    /// A `gridctl plan` of the files before (nothing to do): observing every owner,
    /// what any reconcile of this installation costs before it applies anything.
    observing: Duration,
    by_kind: BTreeMap<String, usize>,
    /// Operations sent to a host (`~ keys`, and anything else the reconcile submits).
    sent: usize,
}

fn main() {
    exit_on_error("key_rotation", run(Args::parse()));
}

fn run(args: Args) -> Result<()> {
    let bin_dir = grid_bin_dir()?;
    print_header(
        "Key rotation: all three keys of a host, with little and with much history",
        Some(&bin_dir),
    )?;
    let mut table = Table::new(
        &[
            "routes",
            "retained runs",
            "rotation (s)",
            "plan alone (s)",
            "transitions",
            "operations sent",
            "routes reinstalled",
        ],
        "rrrrrrr",
    );
    let mut times = Vec::new();
    for (routes, runs) in [(1, 0), (args.routes, args.runs)] {
        let rotation = scale(&bin_dir, routes, runs, args.keep)?;
        let kinds: Vec<String> = rotation
            .by_kind
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        println!(
            "{routes} routes, {runs} runs: rotated in {:.3} s — {}",
            rotation.elapsed.as_secs_f64(),
            kinds.join(", ")
        );
        table.row(vec![
            routes.to_string(),
            runs.to_string(),
            format!("{:.3}", rotation.elapsed.as_secs_f64()),
            format!("{:.3}", rotation.observing.as_secs_f64()),
            rotation.by_kind.values().sum::<usize>().to_string(),
            rotation.sent.to_string(),
            rotation
                .by_kind
                .get("route")
                .copied()
                .unwrap_or(0)
                .to_string(),
        ]);
        times.push((rotation.elapsed, rotation.observing));
    }
    table.print();
    let beyond = |(all, observing): (Duration, Duration)| all.saturating_sub(observing);
    println!(
        "\nratio (large / small): {:.2}× the reconcile's time; beyond observing (reconcile − plan alone): {:.1} ms and {:.1} ms; operations sent: the same",
        times[1].0.as_secs_f64() / times[0].0.as_secs_f64(),
        beyond(times[0]).as_secs_f64() * 1e3,
        beyond(times[1]).as_secs_f64() * 1e3
    );
    Ok(())
}

/// Brings up `edge` with `routes` routes and `runs` retained runs, then rotates its
/// three keys.
fn scale(bin_dir: &Path, routes: usize, runs: usize, keep: bool) -> Result<Rotation> {
    let work = WorkDir::new(&format!("key-rotation-{routes}"), keep)?;
    let ports = free_ports(HOSTS.len())?;
    let started = Instant::now();
    let hosts = GridHosts::start(
        bin_dir,
        &work.path,
        "topology.kdl",
        &topology(&ports, routes, runs, false),
        &one_gridd_per_host(&HOSTS),
    )?;
    println!(
        "{routes} routes: converged in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let edge = hosts.host_dir("edge");
    let receiver = Peer {
        name: "edge".to_owned(),
        address: format!("127.0.0.1:{}", ports[0]),
        keys: grid_engine::custody::manifest(&edge)
            .map_err(|e| format!("the custody manifest of edge: {e}"))?,
    };
    let started = Instant::now();
    retain_runs(&hosts.host_dir("peer"), &receiver, runs)?;
    if runs > 0 {
        println!(
            "{runs} runs retained in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    let state = edge
        .parent()
        .and_then(Path::parent)
        .ok_or("the state directory")?
        .to_owned();
    let observing = empty_plan(bin_dir, &state, &work.path.join("topology.kdl"))?;
    let file = work.path.join("rotated.kdl");
    std::fs::write(&file, topology(&ports, routes, runs, true))?;
    let mut rotation = reconcile(bin_dir, &state, &file)?;
    rotation.observing = observing;
    empty_plan(bin_dir, &state, &file)?;
    drop(hosts);
    Ok(rotation)
}

/// A `gridctl plan` of `file` that must find nothing to do: its time.
fn empty_plan(bin_dir: &Path, state: &Path, file: &Path) -> Result<Duration> {
    let started = Instant::now();
    let plan = Command::new(bin_dir.join("gridctl"))
        .arg("plan")
        .arg(file)
        .arg("--state")
        .arg(state)
        .output()?;
    let elapsed = started.elapsed();
    let plan = String::from_utf8_lossy(&plan.stdout);
    if !plan.contains("0 to create, 0 to change, 0 to retire, 0 needing attention") {
        return Err(format!("the plan of {} is not empty:\n{plan}", file.display()).into());
    }
    Ok(elapsed)
}

/// One `gridctl reconcile FILE --json`, timed, with its transitions by kind.
fn reconcile(bin_dir: &Path, state: &Path, file: &PathBuf) -> Result<Rotation> {
    let started = Instant::now();
    let output = Command::new(bin_dir.join("gridctl"))
        .arg("reconcile")
        .arg(file)
        .arg("--state")
        .arg(state)
        .arg("--json")
        .output()?;
    let elapsed = started.elapsed();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "gridctl reconcile --json: {e}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    if json["outcome"] != "succeeded" {
        return Err(format!("the rotation's reconcile: {json}").into());
    }
    let mut by_kind = BTreeMap::new();
    let mut sent = 0;
    for t in json["transitions"].as_array().into_iter().flatten() {
        let kind = t["kind"].as_str().unwrap_or("?").to_owned();
        // Enrollments and peer keys are files the operator writes; everything else a
        // reconcile applies here is an operation sent to a host.
        if kind != "enrollment" && kind != "peer-keys" {
            sent += 1;
        }
        *by_kind.entry(kind).or_insert(0) += 1;
    }
    Ok(Rotation {
        elapsed,
        observing: Duration::ZERO,
        by_kind,
        sent,
    })
}
