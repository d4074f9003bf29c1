//! The control plane's first render (issue 36, BENCHMARKS.md "Control plane"): each
//! panel of a host's page drawn right after one explicit inspection of an owner holding
//! 1,000 routes and 10,000 retained runs, beside `gridctl inspect routes --json` of the
//! same routes, in one run on the same machine. The target: each panel ≤ 2× the
//! `gridctl` read and under 200 ms.
//!
//! Two hosts in `ops`: `edge` publishes R routes to `peer` and received K `demo.count`
//! runs from it; `peer` serves the page (`control listen=`) and inspects `edge` once
//! (`POST /inspect`, timed). Then every panel is fetched once (its first render), the
//! Routes panel 20 times more (median), and `gridctl inspect routes --json` run 10
//! times (median) — a whole process each time, as an operator runs it.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl
//! cargo run --release -p grid-benches --bin control_render [-- --routes 1000 --runs 10000 --keep]
//! ```

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;

use grid_engine::control::page::PANELS;
use grid_engine::processes::api::Peer;

use grid_benches::bringup::{GridHosts, exit_on_error, one_gridd_per_host};
use grid_benches::processes::{history_topology, retain_runs};
use grid_benches::procs::{Result, WorkDir, free_ports, grid_bin_dir};
use grid_benches::report::{Table, print_header};

const HOSTS: [&str; 2] = ["edge", "peer"];
/// Renders of the Routes panel after the first, for its median.
const RENDERS: usize = 20;
/// Runs of `gridctl inspect routes --json`, for its median.
const INSPECTS: usize = 10;

#[derive(Parser)]
#[command(name = "control_render")]
struct Args {
    /// Routes `edge` publishes to `peer`.
    #[arg(long, default_value = "1000")]
    routes: usize,
    /// Runs `edge` retains (called by `peer`).
    #[arg(long, default_value = "10000")]
    runs: usize,
    /// Keep the work directory.
    #[arg(long)]
    keep: bool,
}

fn topology(ports: &[u16], control: u16, routes: usize, runs: usize) -> String {
    let control = format!("    control listen=\"127.0.0.1:{control}\"\n");
    history_topology(
        "control_render",
        ports,
        (routes, runs),
        "",
        (" control", &control),
    )
}

/// One plain HTTP/1.1 exchange on loopback: the status code and the body.
fn http(address: &str, request: &str) -> Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status from {address}"))?;
    Ok((code, body.to_owned()))
}

fn get(address: &str, path: &str) -> Result<(Duration, usize)> {
    let started = Instant::now();
    let (code, body) = http(
        address,
        &format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
    )?;
    let elapsed = started.elapsed();
    if code != 200 {
        return Err(format!("GET {path}: {code}").into());
    }
    Ok((elapsed, body.len()))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn main() {
    exit_on_error("control_render", run(Args::parse()));
}

fn run(args: Args) -> Result<()> {
    let bin_dir = grid_bin_dir()?;
    print_header(
        "Control plane: each panel's first render beside gridctl inspect --json",
        Some(&bin_dir),
    )?;
    let work = WorkDir::new("control-render", args.keep)?;
    let ports = free_ports(HOSTS.len() + 1)?;
    let started = Instant::now();
    let hosts = GridHosts::start(
        &bin_dir,
        &work.path,
        "topology.kdl",
        &topology(&ports, ports[2], args.routes, args.runs),
        &one_gridd_per_host(&HOSTS),
    )?;
    println!(
        "{} routes: converged in {:.1} s",
        args.routes,
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
    retain_runs(&hosts.host_dir("peer"), &receiver, args.runs)?;
    println!(
        "{} runs retained in {:.1} s",
        args.runs,
        started.elapsed().as_secs_f64()
    );
    let page = format!("127.0.0.1:{}", ports[2]);

    // One explicit inspection of edge and of peer itself.
    let (_, overview) = http(
        &page,
        &format!("GET /panel/overview HTTP/1.1\r\nHost: {page}\r\nConnection: close\r\n\r\n"),
    )?;
    let token = overview
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .ok_or("no CSRF token on the page")?
        .to_owned();
    let mut inspections = Vec::new();
    for owner in ["edge", "peer"] {
        let form = format!("csrf={token}&owner={owner}&back=%2Fpanel%2Foverview");
        let started = Instant::now();
        let (code, _) = http(
            &page,
            &format!(
                "POST /inspect HTTP/1.1\r\nHost: {page}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
                form.len()
            ),
        )?;
        if code != 303 {
            return Err(format!("POST /inspect {owner}: {code}").into());
        }
        inspections.push((owner, started.elapsed()));
    }

    let mut table = Table::new(&["panel", "first render (ms)", "bytes"], "lrr");
    let mut slowest = Duration::ZERO;
    for panel in PANELS {
        let (elapsed, bytes) = get(&page, &format!("/panel/{}", panel.slug))?;
        slowest = slowest.max(elapsed);
        table.row(vec![panel.slug.to_owned(), ms(elapsed), bytes.to_string()]);
    }
    let mut renders = Vec::new();
    for _ in 0..RENDERS {
        renders.push(get(&page, "/panel/routes?owner=edge")?.0);
    }
    let state = work.path.join("state");
    let mut inspects = Vec::new();
    let mut json_bytes = 0;
    for _ in 0..INSPECTS {
        let started = Instant::now();
        let output = Command::new(bin_dir.join("gridctl"))
            .args(["inspect", "routes", "--host", "edge", "--json", "--state"])
            .arg(&state)
            .output()?;
        inspects.push(started.elapsed());
        if !output.status.success() {
            return Err(format!(
                "gridctl inspect routes: {}",
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        json_bytes = output.stdout.len();
    }
    for (owner, elapsed) in &inspections {
        println!("inspect {owner} now (POST /inspect): {} ms", ms(*elapsed));
    }
    table.print();
    let (render, inspect) = (median(renders), median(inspects));
    println!(
        "\nRoutes panel of edge, median of {RENDERS}: {} ms; gridctl inspect routes --host edge --json, median of {INSPECTS}: {} ms ({json_bytes} bytes)",
        ms(render),
        ms(inspect)
    );
    println!(
        "ratio (panel / gridctl): {:.2}× (target ≤ 2×); slowest first render {} ms (target < 200 ms)",
        render.as_secs_f64() / inspect.as_secs_f64(),
        ms(slowest)
    );
    drop(hosts);
    Ok(())
}
