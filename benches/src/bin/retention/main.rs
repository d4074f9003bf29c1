//! Retention (issue 28; BENCHMARKS.md, "Retention"): one host fed at 1,000
//! observations/s into a routed model (`--workload tags`, the default) or at 2,000
//! ledger transfers/s (`--workload ledger`, ledger.rs), with its checkpoints on and —
//! the same workload, in the same run — off. At each mark (minutes since the feed
//! began) the host is SIGKILLed and started again: the time until it answers, its
//! resident memory once it does, and the bytes of its store.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo run --release -p grid-benches --no-default-features --bin retention \
//!     [-- --minutes 1,5,10 --workload tags|ledger --keep]
//! ```
//!
//! **The workload.** Host `src` (`transport authority delivery sources`) samples ten
//! simulated tags every 10 ms (`SIMULATE_INTERVAL_MS_MIN`): 1,000 observations/s, each
//! journaled and fed to model `m` (ten inputs, their sum routed on an Ordered route to
//! host `dst`, which feeds its own model from it). `src` is also the membership's one
//! authority voter.
//!
//! **Off.** `gridd` runs with `GRID_BENCH_CHECKPOINTS_OFF` (the benchmark's switch; no
//! topology can ask for it): the host never checkpoints a model, purges a tag's journal
//! or archives an answer — the path before issue 28.
//!
//! **A restart.** `gridd src` SIGKILLed, started again; the time from the spawn to the
//! first `values` answer for model `m` (every model recovered, the control socket
//! served); then its `VmRSS`; the store's bytes walked from disk before the kill.
//!
//! Every child process is SIGKILLed at the end, on an error or while a panic unwinds;
//! the work directories are removed unless `--keep`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;

use grid_benches::bringup::{
    GridHosts, exit_on_error, host_node, one_gridd_per_host, values_answered,
};
use grid_benches::procs::{Result, WorkDir, free_ports, grid_bin_dir, machine, report_gridd};
use grid_benches::report::Table;
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply};

mod ledger;

/// The benchmark's switch gridd reads (checkpoints, purges and the archive off).
const OFF_ENV: &str = "GRID_BENCH_CHECKPOINTS_OFF";
/// Tags sampled by `src`, each every `INTERVAL_MS`.
const TAGS: usize = 10;
const INTERVAL_MS: u32 = 10;
/// How long a restarted host may take to answer.
const RESTART_TIMEOUT: Duration = Duration::from_secs(600);
/// How often a restarting host is asked whether it answers.
const RESTART_POLL: Duration = Duration::from_millis(5);

/// Retention: restart time, memory and disk with checkpoints on and off.
#[derive(Parser)]
#[command(name = "retention")]
struct Args {
    /// The marks, minutes since the feed began, each a restart (ascending).
    #[arg(long, value_name = "M,M,…", default_value = "1,5,10", value_parser = marks)]
    minutes: Marks,
    /// What feeds the host: simulated tags into a routed model, or ledger transfers.
    #[arg(long, value_enum, default_value = "tags")]
    workload: Workload,
    /// Keep the work directories (stores and logs).
    #[arg(long)]
    keep: bool,
}

/// One workload run: checkpoints `off` or on, a restart at each mark.
type Run = fn(&Path, bool, &Args) -> Result<Vec<Restart>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    Tags,
    Ledger,
}

#[derive(Clone, Debug)]
struct Marks(Vec<u64>);

fn marks(text: &str) -> std::result::Result<Marks, String> {
    use grid_benches::limits::RETENTION_MINUTES_MAX;
    let marks: Vec<u64> = text
        .split(',')
        .map(|m| m.trim().parse::<u64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| format!("minutes, comma-separated: {e}"))?;
    let ascending = marks.windows(2).all(|w| w[0] < w[1]);
    match marks.last() {
        Some(&last) if ascending && marks[0] > 0 && last <= RETENTION_MINUTES_MAX => {
            Ok(Marks(marks))
        }
        _ => Err(format!(
            "ascending minutes from 1 to RETENTION_MINUTES_MAX ({RETENTION_MINUTES_MAX})"
        )),
    }
}

/// What one restart measured.
struct Restart {
    minute: u64,
    observations: u64,
    store_bytes: u64,
    restart: Duration,
    rss_kib: u64,
}

fn main() {
    exit_on_error("retention", run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    let bin_dir = grid_bin_dir()?;
    let (fed, run): (_, Run) = match args.workload {
        Workload::Tags => {
            println!(
                "retention: {TAGS} tags × {} observations/s into a routed model, checkpoints on and off",
                1_000 / INTERVAL_MS
            );
            ("observations", workload)
        }
        Workload::Ledger => {
            println!(
                "retention: {} ledger transfers/s, each a new id, checkpoints on and off",
                grid_benches::limits::RETENTION_LEDGER_TRANSFERS_PER_S
            );
            ("transfers", ledger::workload)
        }
    };
    println!("machine: {}", machine());
    report_gridd(&bin_dir)?;
    let started = Instant::now();
    let on = run(&bin_dir, false, &args)?;
    let off = run(&bin_dir, true, &args)?;
    let mut table = Table::new(
        &[
            "minute",
            fed,
            "store MB on",
            "store MB off",
            "restart on",
            "restart off",
            "off / on",
            "RSS MiB on",
            "RSS MiB off",
        ],
        "rrrrrrrrr",
    );
    for (a, b) in on.iter().zip(&off) {
        table.row(vec![
            a.minute.to_string(),
            format!("{} / {}", a.observations, b.observations),
            format!("{:.1}", a.store_bytes as f64 / 1e6),
            format!("{:.1}", b.store_bytes as f64 / 1e6),
            format!("{:.0} ms", a.restart.as_secs_f64() * 1e3),
            format!("{:.0} ms", b.restart.as_secs_f64() * 1e3),
            format!(
                "{:.2}×",
                b.restart.as_secs_f64() / a.restart.as_secs_f64().max(1e-9)
            ),
            format!("{:.1}", a.rss_kib as f64 / 1024.0),
            format!("{:.1}", b.rss_kib as f64 / 1024.0),
        ]);
    }
    table.print();
    println!("whole run: {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The topology: `src` sampling the tags into `m`, routed to `dst`.
fn topology(ports: &[u16]) -> String {
    let mut text = String::from("grid version=1\nmembership ops {\n    authority voters=1\n}\n");
    text += &host_node(
        "src",
        ports[0],
        "ops",
        "transport authority delivery sources",
    );
    text += &host_node("dst", ports[1], "ops", "transport delivery");
    let mut inputs = String::new();
    let mut sum = Vec::new();
    for i in 0..TAGS {
        text += &format!(
            "tag t{i} host=src {{\n    simulate wave=sine period-s=7 min=0 max=100 seed={} interval-ms={INTERVAL_MS}\n}}\n",
            i + 1
        );
        inputs += &format!("    input x{i} from=\"tag:t{i}\" default=0\n");
        sum.push(format!("x{i}"));
    }
    text += &format!(
        "model m host=src {{\n{inputs}    cell s \"{}\"\n    output s route=\"dst/s\"\n}}\n",
        sum.join(" + ")
    );
    text +=
        "model r host=dst {\n    input s from=\"route:dst/s\" default=0\n    cell h \"s / 2\"\n}\n";
    text += "route \"dst/s\" membership=ops class=ordered {\n    publisher src\n    destination dst\n}\n";
    text
}

/// Runs the workload once (checkpoints `off` or on), restarting `src` at each mark.
fn workload(bin_dir: &Path, off: bool, args: &Args) -> Result<Vec<Restart>> {
    let name = if off { "off" } else { "on" };
    let work = WorkDir::new(&format!("grt-{name}"), args.keep)?;
    switch(off);
    let ports = free_ports(2)?;
    let mut hosts = GridHosts::start(
        bin_dir,
        &work.path,
        "retention.kdl",
        &topology(&ports),
        &one_gridd_per_host(&["src", "dst"]),
    )?;
    let fed = Instant::now();
    let src = hosts.host_dir("src");
    let mut out = Vec::new();
    for &minute in &args.minutes.0 {
        let due = Duration::from_secs(minute * 60);
        while fed.elapsed() < due {
            hosts.procs.check_running()?;
            std::thread::sleep(Duration::from_millis(500).min(due - fed.elapsed()));
        }
        let observations = observed(&src)?;
        hosts.procs.kill_and_forget("gridd src")?;
        let store_bytes = walk(&src.join("store"));
        let mut command = Command::new(bin_dir.join("gridd"));
        command.arg("--dir").arg(&src).current_dir(&work.path);
        let log = work.path.join(format!("logs/gridd-src-{minute}.log"));
        let spawned = Instant::now();
        let pid = hosts.procs.spawn("gridd src", command, &log)?;
        let restart = values_answered(&src, "m", spawned, (RESTART_POLL, RESTART_TIMEOUT))?;
        let rss_kib = rss_kib(pid);
        println!(
            "[{name}] minute {minute}: {observations} observations, store {:.1} MB, restart {:.0} ms, RSS {:.1} MiB",
            store_bytes as f64 / 1e6,
            restart.as_secs_f64() * 1e3,
            rss_kib as f64 / 1024.0
        );
        out.push(Restart {
            minute,
            observations,
            store_bytes,
            restart,
            rss_kib,
        });
    }
    Ok(out)
}

/// Sets the switch the gridd processes started next inherit: checkpoints `off` or on.
fn switch(off: bool) {
    // SAFETY: the bench is single-threaded here (it starts no thread before); nothing
    // else reads the environment concurrently.
    unsafe {
        if off {
            std::env::set_var(OFF_ENV, "1");
        } else {
            std::env::remove_var(OFF_ENV);
        }
    }
}

/// Observations journaled by the ten tags (their last indexes).
fn observed(host: &Path) -> Result<u64> {
    let mut client = Client::connect(host)?;
    let mut total = 0;
    for i in 0..TAGS {
        match client.call(&Call::Tag {
            name: format!("t{i}"),
        })? {
            Reply::Tag(report) => total += report.last_index,
            other => return Err(format!("tag t{i}: {other:?}").into()),
        }
    }
    Ok(total)
}

/// `VmRSS` of `pid`, KiB (0 when unreadable).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Bytes of the files under `path` (links not followed).
fn walk(path: &Path) -> u64 {
    let mut bytes = 0;
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        match entry.path().symlink_metadata() {
            Ok(m) if m.is_dir() => bytes += walk(&entry.path()),
            Ok(m) if m.is_file() => bytes += m.len(),
            _ => {}
        }
    }
    bytes
}
