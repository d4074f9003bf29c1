//! Modbus at scale: the pymodbus peer (`adapters/peers/modbus_device.py`) with
//! holding registers 0..N, N tags polled at one host feeding models of
//! [`INPUTS_PER_MODEL`] inputs and one SUM cell each; readings journaled per second,
//! Modbus requests the device served (coalescing), and receipt → durable latency.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use grid_benches::measure::CpuMeter;
use grid_benches::procs::{Result, die_with_parent};
use grid_benches::report::Table;

use crate::grid::{Fsyncs, GridHost, Histogram, Scrape, bucket_ms};

/// Tag inputs per model (a SUM over them counts 2 operations: far below the default
/// ceiling).
pub const INPUTS_PER_MODEL: usize = 100;
/// How long the device may take to print `ready`, and the host to journal every tag once.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the device may take to answer one request of its control protocol.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The pymodbus device, driven over its stdin/stdout control protocol; killed on drop.
pub struct Device {
    child: Child,
    stdin: ChildStdin,
    /// Its stdout's lines, read by a thread (so an answer can time out).
    lines: mpsc::Receiver<String>,
    pub port: u16,
}

impl Device {
    pub fn start(script: &Path, log: &Path) -> Result<Device> {
        let mut command = Command::new("python3");
        command
            .arg(script)
            .args(["--port", "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?);
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| format!("starting {}: {e}", script.display()))?;
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
        let mut device = Device {
            child,
            stdin,
            lines,
            port: 0,
        };
        let ready = device.line()?;
        device.port = ready["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| format!("the device's first line is not ready: {ready}"))?;
        Ok(device)
    }

    fn line(&mut self) -> Result<serde_json::Value> {
        let line = self.lines.recv_timeout(ANSWER_TIMEOUT).map_err(|e| {
            format!("no line from the Modbus device within {ANSWER_TIMEOUT:?}: {e}")
        })?;
        Ok(serde_json::from_str(&line)?)
    }

    /// One request of the control protocol; its answer (refusals are errors).
    pub fn ask(&mut self, request: serde_json::Value) -> Result<serde_json::Value> {
        writeln!(self.stdin, "{request}")?;
        self.stdin.flush()?;
        let answer = self.line()?;
        if answer["ok"] != serde_json::json!(true) {
            return Err(format!("the device refused {request}: {answer}").into());
        }
        Ok(answer)
    }

    /// Read requests the device has received.
    pub fn reads(&mut self) -> Result<u64> {
        self.ask(serde_json::json!({"op": "stats"}))?["reads"]
            .as_u64()
            .ok_or_else(|| "stats without reads".into())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tags` u16 holding registers at addresses 0.. polled every `interval_ms`, feeding
/// models of [`INPUTS_PER_MODEL`] inputs with a SUM cell each.
pub fn topology(device_port: u16, tags: usize, interval_ms: u32) -> String {
    let mut text = String::new();
    for n in 0..tags {
        text.push_str(&format!(
            "tag r{n:04} host=edge {{\n    modbus \"127.0.0.1:{device_port}\" unit=1 register=holding address={n} type=u16 interval-ms={interval_ms}\n}}\n"
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
                "    input t{n:04} from=\"tag:r{n:04}\" default=0\n"
            ));
        }
        let (first, last) = (chunk[0], chunk[chunk.len() - 1]);
        text.push_str(&format!(
            "    cell total \"SUM(t{first:04}:t{last:04})\"\n}}\n"
        ));
    }
    text
}

/// One window's figures.
#[derive(Debug, Clone)]
pub struct Run {
    pub tags: usize,
    pub interval_ms: u32,
    pub window: Duration,
    pub journaled: u64,
    pub debt: u64,
    pub batches: u64,
    pub reads: u64,
    pub received_to_durable: Histogram,
    pub fsyncs: Fsyncs,
    pub gridd_cpu: Duration,
}

fn total(s: &Scrape) -> u64 {
    s.entries("good") + s.entries("debt") + s.entries("refused")
}

/// Waits until every tag was journaled once (after `warmup`), then measures `window`.
pub fn measure(
    grid: &mut GridHost,
    device: &mut Device,
    tags: usize,
    interval_ms: u32,
    warmup: Duration,
    window: Duration,
) -> Result<Run> {
    let started = Instant::now();
    while total(&grid.scrape()?) < tags as u64 || started.elapsed() < warmup {
        grid.hosts.procs.check_running()?;
        if started.elapsed() > READY_TIMEOUT + warmup {
            return Err(
                format!("the host did not journal {tags} readings in {READY_TIMEOUT:?}").into(),
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = grid.scrape()?;
    let reads_before = device.reads()?;
    let cpu = CpuMeter::start(vec![grid.pid()]);
    let from = Instant::now();
    while from.elapsed() < window {
        grid.hosts.procs.check_running()?;
        std::thread::sleep(Duration::from_millis(100).min(window.saturating_sub(from.elapsed())));
    }
    let after = grid.scrape()?;
    let reads = device.reads()? - reads_before;
    let window = from.elapsed();
    Ok(Run {
        tags,
        interval_ms,
        window,
        journaled: total(&after) - total(&before),
        debt: after.entries("debt") - before.entries("debt"),
        batches: after.batches() - before.batches(),
        reads,
        received_to_durable: Histogram::between(
            &before,
            &after,
            "grid_tag_received_to_durable_seconds",
        ),
        fsyncs: Fsyncs::between(&before, &after),
        gridd_cpu: cpu.stop().server,
    })
}

pub fn print_table(runs: &[Run]) {
    let mut table = Table::new(
        &[
            "tags × interval",
            "window",
            "readings journaled/s",
            "expected/s",
            "debt entries",
            "model batches/s",
            "Modbus requests/s",
            "registers per request",
            "received → durable + batch p50 (bucket)",
            "p99 (bucket)",
            "fsyncs",
            "gridd CPU / reading",
        ],
        "lrrrrrrrllll",
    );
    for r in runs {
        let s = r.window.as_secs_f64();
        table.row(vec![
            format!("{} × {} ms", r.tags, r.interval_ms),
            format!("{s:.1} s"),
            format!("{:.0}", r.journaled as f64 / s),
            format!("{:.0}", r.tags as f64 * 1e3 / f64::from(r.interval_ms)),
            r.debt.to_string(),
            format!("{:.0}", r.batches as f64 / s),
            format!("{:.1}", r.reads as f64 / s),
            if r.reads == 0 {
                "–".to_owned()
            } else {
                format!("{:.1}", r.journaled as f64 / r.reads as f64)
            },
            bucket_ms(r.received_to_durable.percentile(0.50)),
            bucket_ms(r.received_to_durable.percentile(0.99)),
            r.fsyncs.text(),
            grid_benches::report::per_operation(r.gridd_cpu, r.journaled),
        ]);
    }
    table.print();
}
