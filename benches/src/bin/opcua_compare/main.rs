//! OPC UA subscriptions (issue 17; BENCHMARKS.md §9): value changes per second from N
//! monitored items into Grid's journal, beside what a plain `asyncua` client
//! subscription of the same N items receives from the same server in the same run, and
//! the p99 of source timestamp → durable journal.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo run --release -p grid-benches --no-default-features --bin opcua_compare \
//!     [-- --tags 1000 --period-ms 1000 --publishing-ms 500 --seconds 20 --warmup 5 \
//!         --ready-seconds 300 --port 14871 --keep]
//! ```
//!
//! **The server.** `benches/opcua_load.py serve` (asyncua, security none, 127.0.0.1:
//! `--port`): N Double nodes `ns=2;s=v0000..`, every one written with a new value every
//! `--period-ms` (its source and server timestamps the write's time): N × 1000 /
//! period changes per second offered.
//!
//! **The plain client** (`opcua_load.py client`, its own Python process, first): ONE
//! subscription (`--publishing-ms`) of N monitored items; the changes it receives in
//! `--seconds` after `--warmup`.
//!
//! **Grid** (then, alone with the server): one host `edge` (`profiles sources`,
//! `metrics=` on loopback) with N `opcua … security=none publishing-ms=…` tags (one
//! session, one subscription, one monitored item each: the adapter's design) feeding
//! N/100 models of 100 inputs and one SUM cell. Once every tag has journaled a reading
//! (2 N entries journaled, at most `--ready-seconds`) and after `--warmup`, a window of `--seconds`: journaled
//! good entries per second (`grid_tag_entries_total{quality="good"}`), debt entries,
//! and the p99 bucket of `grid_tag_device_to_durable_seconds` (device time = the source
//! timestamp) over the window.
//!
//! Every child process is SIGKILLed at the end, on an error or while a panic unwinds;
//! the work directory is removed unless `--keep`.

#[path = "../sources_compare/grid.rs"]
#[allow(dead_code)]
mod grid;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Parser;

use grid_benches::bringup::exit_on_error;
use grid_benches::measure::CpuMeter;
use grid_benches::procs::{
    Result, WorkDir, cpu_time_of, die_with_parent, grid_bin_dir, machine, report_gridd,
};
use grid_benches::report::{Table, per_operation};

/// Tag inputs per model.
const INPUTS_PER_MODEL: usize = 100;
/// How long the server may take to print `ready`.
const SERVER_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the host's metrics are scraped while the tags come up.
const SCRAPE_EVERY: Duration = Duration::from_millis(250);

/// OPC UA: Grid's N tags beside one plain asyncua subscription of N items.
#[derive(Parser)]
#[command(name = "opcua_compare")]
struct Args {
    /// Nodes on the server: monitored items of the plain client, tags at Grid.
    #[arg(long, value_name = "N", default_value = "1000", value_parser = tags)]
    tags: usize,
    /// Every node changes this often.
    #[arg(long, value_name = "MS", default_value = "1000", value_parser = period)]
    period_ms: u32,
    /// The publishing interval of the client's subscription and of every tag.
    #[arg(long, value_name = "MS", default_value = "500", value_parser = publishing)]
    publishing_ms: u32,
    /// Seconds of each window.
    #[arg(long, value_name = "S", default_value = "20", value_parser = grid_benches::cli::window_seconds)]
    seconds: f64,
    /// Seconds before each window, not recorded.
    #[arg(long, value_name = "S", default_value = "5", value_parser = grid_benches::cli::warmup_seconds)]
    warmup: f64,
    /// The most seconds Grid's tags may take to journal their first readings.
    #[arg(long, value_name = "S", default_value = "300", value_parser = grid_benches::cli::window_seconds)]
    ready_seconds: f64,
    /// The server's port on 127.0.0.1.
    #[arg(long, value_name = "PORT", default_value = "14871")]
    port: u16,
    /// Keep the work directory (logs, the store).
    #[arg(long)]
    keep: bool,
}

fn tags(text: &str) -> std::result::Result<usize, String> {
    use grid_benches::limits::OPCUA_COMPARE_TAGS_MAX;
    match text.parse::<usize>() {
        Ok(n) if (1..=OPCUA_COMPARE_TAGS_MAX).contains(&n) => Ok(n),
        _ => Err(format!("1 to {OPCUA_COMPARE_TAGS_MAX}")),
    }
}

fn period(text: &str) -> std::result::Result<u32, String> {
    use grid_benches::limits::{OPCUA_COMPARE_PERIOD_MS_MAX, OPCUA_COMPARE_PERIOD_MS_MIN};
    match text.parse::<u32>() {
        Ok(n) if (OPCUA_COMPARE_PERIOD_MS_MIN..=OPCUA_COMPARE_PERIOD_MS_MAX).contains(&n) => Ok(n),
        _ => Err(format!(
            "{OPCUA_COMPARE_PERIOD_MS_MIN} to {OPCUA_COMPARE_PERIOD_MS_MAX}"
        )),
    }
}

fn publishing(text: &str) -> std::result::Result<u32, String> {
    use grid_spec::limits::{OPCUA_PUBLISHING_MS_MAX, OPCUA_PUBLISHING_MS_MIN};
    match text.parse::<u32>() {
        Ok(n) if (OPCUA_PUBLISHING_MS_MIN..=OPCUA_PUBLISHING_MS_MAX).contains(&n) => Ok(n),
        _ => Err(format!(
            "{OPCUA_PUBLISHING_MS_MIN} to {OPCUA_PUBLISHING_MS_MAX} (the tag's own limits)"
        )),
    }
}

fn main() {
    exit_on_error("opcua_compare", run());
}

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("opcua_load.py")
}

/// The load server; it stops when its stdin closes (on drop) and is killed then.
struct Server {
    child: Child,
    _stdin: ChildStdin,
}

impl Server {
    fn start(args: &Args, log: &Path) -> Result<Server> {
        // Its own bound: both sides' warm-ups, windows and the tags' bring-up, and a margin.
        let bound = 2.0 * (args.warmup + args.seconds) + args.ready_seconds + 120.0;
        let mut command = Command::new("python3");
        command
            .arg(script())
            .arg("serve")
            .args(["--port", &args.port.to_string()])
            .args(["--nodes", &args.tags.to_string()])
            .args(["--period-ms", &args.period_ms.to_string()])
            .args(["--seconds", &format!("{bound:.0}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?);
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", script().display()))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let ready = lines.recv_timeout(SERVER_READY_TIMEOUT).map_err(|e| {
            format!(
                "the OPC UA server did not start: {e}; see {}",
                log.display()
            )
        })?;
        if !ready.contains("\"ready\": true") {
            return Err(format!("the OPC UA server's first line: {ready}").into());
        }
        Ok(Server {
            child,
            _stdin: stdin,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The plain asyncua client's window: changes received, seconds, and the server's CPU
/// time over the client's whole run (`server_pid`).
fn plain_client(args: &Args, log: &Path, server_pid: u32) -> Result<(u64, f64, Duration)> {
    let mut command = Command::new("timeout");
    // The client's own bound: its warm-up and window, its connection and N items' setup.
    let bound = args.warmup + args.seconds + 120.0;
    command
        .arg(format!("{bound:.0}"))
        .arg("python3")
        .arg(script())
        .arg("client")
        .args(["--port", &args.port.to_string()])
        .args(["--nodes", &args.tags.to_string()])
        .args(["--publishing-ms", &args.publishing_ms.to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(log)?);
    die_with_parent(&mut command);
    let cpu_before = cpu_time_of(&[server_pid]);
    let out = command.output()?;
    let server_cpu = cpu_time_of(&[server_pid]).saturating_sub(cpu_before);
    let text = String::from_utf8_lossy(&out.stdout);
    let answer: serde_json::Value = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            format!(
                "the plain client printed no figures ({}); see {}",
                out.status,
                log.display()
            )
        })?;
    Ok((
        answer["changes"].as_u64().ok_or("no changes")?,
        answer["seconds"].as_f64().ok_or("no seconds")?,
        server_cpu,
    ))
}

fn topology(port: u16, tags: usize, publishing_ms: u32) -> String {
    let mut text = String::new();
    for n in 0..tags {
        text.push_str(&format!(
            "tag t{n:04} host=edge {{\n    opcua \"opc.tcp://127.0.0.1:{port}/grid/\" node=\"ns=2;s=v{n:04}\" security=none publishing-ms={publishing_ms}\n}}\n"
        ));
    }
    for (m, chunk) in (0..tags)
        .collect::<Vec<_>>()
        .chunks(INPUTS_PER_MODEL)
        .enumerate()
    {
        text.push_str(&format!("model m{m:02} host=edge {{\n"));
        for n in chunk {
            text.push_str(&format!(
                "    input i{n:04} from=\"tag:t{n:04}\" default=0\n"
            ));
        }
        let (first, last) = (chunk[0], chunk[chunk.len() - 1]);
        text.push_str(&format!(
            "    cell total \"SUM(i{first:04}:i{last:04})\"\n}}\n"
        ));
    }
    text
}

struct GridRun {
    ready: Duration,
    window: Duration,
    good: u64,
    debt: u64,
    device_to_durable: grid::Histogram,
    fsyncs: grid::Fsyncs,
    cpu: Duration,
    /// The server's CPU time over the window.
    server_cpu: Duration,
}

fn total(s: &grid::Scrape) -> u64 {
    s.entries("good") + s.entries("debt") + s.entries("refused")
}

fn through_gridd(args: &Args, bin_dir: &Path, work: &Path, server_pid: u32) -> Result<GridRun> {
    let started = Instant::now();
    let mut host = grid::GridHost::start(
        bin_dir,
        work,
        "grid",
        &topology(args.port, args.tags, args.publishing_ms),
    )?;
    let deadline = started + Duration::from_secs_f64(args.ready_seconds);
    // Up once 2 N entries are journaled: as many as every tag's first reading and one
    // change each (a tag journals nothing before its session is up; the window below
    // counts whatever tags are up, and its rate shows any that are not).
    loop {
        let scrape = host.scrape()?;
        if total(&scrape) >= 2 * args.tags as u64 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "gridd journaled {} entries of {} tags within {} s",
                total(&scrape),
                args.tags,
                args.ready_seconds
            )
            .into());
        }
        host.hosts.procs.check_running()?;
        std::thread::sleep(SCRAPE_EVERY);
    }
    let ready = started.elapsed();
    std::thread::sleep(Duration::from_secs_f64(args.warmup));
    let before = host.scrape()?;
    let cpu = CpuMeter::start(vec![host.pid()]);
    let server_cpu = cpu_time_of(&[server_pid]);
    let from = Instant::now();
    let window = Duration::from_secs_f64(args.seconds);
    while from.elapsed() < window {
        host.hosts.procs.check_running()?;
        std::thread::sleep(Duration::from_millis(100).min(window.saturating_sub(from.elapsed())));
    }
    let after = host.scrape()?;
    let window = from.elapsed();
    Ok(GridRun {
        ready,
        window,
        good: after.entries("good") - before.entries("good"),
        debt: after.entries("debt") - before.entries("debt"),
        device_to_durable: grid::Histogram::between(
            &before,
            &after,
            "grid_tag_device_to_durable_seconds",
        ),
        fsyncs: grid::Fsyncs::between(&before, &after),
        cpu: cpu.stop().server,
        server_cpu: cpu_time_of(&[server_pid]).saturating_sub(server_cpu),
    })
}

fn run() -> Result<()> {
    let args = Args::parse();
    let bin_dir = grid_bin_dir()?;
    println!("opcua_compare: OPC UA subscriptions — Grid's tags beside a plain asyncua client");
    println!("machine: {}", machine());
    report_gridd(&bin_dir)?;
    let work = WorkDir::new("goc", args.keep)?;
    let t0 = Instant::now();
    let offered = args.tags as f64 * 1e3 / f64::from(args.period_ms);
    let server = Server::start(&args, &work.path.join("server.log"))?;
    println!(
        "server: asyncua on 127.0.0.1:{}, {} Double nodes each changing every {} ms ({offered:.0} changes/s offered); publishing interval {} ms; windows of {} s after {} s",
        args.port, args.tags, args.period_ms, args.publishing_ms, args.seconds, args.warmup
    );
    let (changes, seconds, client_server_cpu) =
        plain_client(&args, &work.path.join("client.log"), server.child.id())?;
    let client_rate = changes as f64 / seconds;
    println!("plain client: {changes} changes in {seconds:.1} s");
    let grid = through_gridd(&args, &bin_dir, &work.path, server.child.id())?;
    let grid_rate = grid.good as f64 / grid.window.as_secs_f64();
    println!(
        "Grid: {} tags journaling after {:.1} s",
        args.tags,
        grid.ready.as_secs_f64()
    );
    let mut table = Table::new(
        &[
            "receiver",
            "sessions / subscriptions / items",
            "window",
            "changes/s",
            "of offered",
            "debt entries",
            "source time → durable p50 (bucket)",
            "p99 (bucket)",
            "fsyncs",
            "gridd CPU / change",
            "server CPU",
        ],
        "llrrrrlllll",
    );
    table.row(vec![
        "plain asyncua client".to_owned(),
        format!("1 / 1 / {}", args.tags),
        format!("{seconds:.1} s"),
        format!("{client_rate:.0}"),
        format!("{:.1}%", 100.0 * client_rate / offered),
        "–".to_owned(),
        "–".to_owned(),
        "–".to_owned(),
        "–".to_owned(),
        "–".to_owned(),
        format!(
            "{:.0}% (whole client run, {:.1} s)",
            100.0 * client_server_cpu.as_secs_f64() / (args.warmup + seconds),
            client_server_cpu.as_secs_f64()
        ),
    ]);
    table.row(vec![
        "Grid (journaled good)".to_owned(),
        format!("{0} / {0} / {0}", args.tags),
        format!("{:.1} s", grid.window.as_secs_f64()),
        format!("{grid_rate:.0}"),
        format!("{:.1}%", 100.0 * grid_rate / offered),
        grid.debt.to_string(),
        grid::bucket_ms(grid.device_to_durable.percentile(0.50)),
        grid::bucket_ms(grid.device_to_durable.percentile(0.99)),
        grid.fsyncs.text(),
        per_operation(grid.cpu, grid.good),
        format!(
            "{:.0}% of a core",
            100.0 * grid.server_cpu.as_secs_f64() / grid.window.as_secs_f64()
        ),
    ]);
    table.print();
    println!(
        "Grid / plain client: {:.2}",
        grid_rate / client_rate.max(1e-9)
    );
    println!("whole run: {:.0} s", t0.elapsed().as_secs_f64());
    drop(server);
    Ok(())
}
