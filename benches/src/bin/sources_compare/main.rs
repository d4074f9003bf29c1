//! Grid's industrial sources (issue 16; BENCHMARKS.md, "Industrial sources"): Sparkplug
//! B ingest beside `mosquitto_sub` on the same stream in the same run, and Modbus TCP
//! polling at scale.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo run --release -p grid-benches --no-default-features --bin sources_compare \
//!     [-- --seconds 20 --warmup 2 --messages 200000 --rates 2000,max --drain-seconds 30 \
//!         --parts sparkplug,modbus --modbus-tags 1000 --modbus-interval-ms 500 \
//!         --modbus-seconds 30 --only grid|mosquitto_sub --keep]
//! ```
//!
//! **Sparkplug ingest.** Debian's `mosquitto` on a free loopback port (a config the
//! benchmark writes); one host `edge` (`profiles sources`, `metrics=` on loopback) with
//! one `sparkplug` tag feeding a model (`input speed from="tag:line-speed"`, one
//! cell); an edge node in this process ([`edge`]: rumqttc and the adapters' payload
//! types) that publishes NBIRTH (`bdSeq`, the metric with alias 1, Double), answers
//! every NCMD Rebirth with a new NBIRTH, and publishes NDATA by alias, `seq` + 1 mod
//! 256, the metric's timestamp now (ms), QoS 0. Per rate (`--rates`: messages per
//! second, or `max`: as fast as the client and the broker take them) a warm-up of
//! `--warmup` seconds (not recorded), then a run of `--messages` NDATA or `--seconds`,
//! whichever ends first, with a fresh `mosquitto_sub` on the NDATA topic counting what
//! the broker delivers to it. After the run the benchmark waits (at most
//! `--drain-seconds`) until the host's and mosquitto_sub's counts stop moving and the
//! model has every journaled observation. Rates are over the time from the run's first
//! NDATA to the last message each consumer got (the host's: the last change of
//! `grid_tag_entries_total`, scraped every 50 ms); latency is the host's histogram
//! `grid_tag_device_to_durable_seconds` over the run (bucketed, each bucket 25 % wider
//! than the one below: the bucket is reported).
//!
//! **Modbus at scale.** The pymodbus peer (`adapters/peers/modbus_device.py`) on a free
//! loopback port, holding registers 0..N set; N `modbus` tags (u16, `interval-ms`) at
//! `edge` feeding N/100 models (100 inputs, one SUM cell each); after the warm-up (and
//! every tag journaled once) a window of `--modbus-seconds`: readings journaled per
//! second, the device's read requests (its `stats`: coalescing), model batches, and
//! `grid_tag_received_to_durable_seconds` (receipt at the host to the fsync that
//! journaled the reading with its model batch).
//!
//! Every child process (mosquitto, mosquitto_sub, gridd, the Python device) is
//! SIGKILLed at the end, on an error or while a panic unwinds, and started with
//! `PR_SET_PDEATHSIG = SIGKILL`; the work directory is removed unless `--keep`.

mod broker;
mod edge;
mod grid;
mod modbus;
mod sparkplug;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;

use grid_benches::bringup::{OtherBin, Sides, exit_on_error};
use grid_benches::cli::{self, Defaults, Measurement};
use grid_benches::procs::Result;

/// Industrial sources: Sparkplug ingest beside mosquitto_sub, Modbus at scale.
#[derive(Parser)]
#[command(name = "sources_compare")]
pub struct Args {
    #[command(flatten)]
    pub measurement: Measurement,
    /// Which parts run: `sparkplug`, `modbus`, or both.
    #[arg(long, value_name = "PART,PART", default_value = "sparkplug,modbus", value_parser = parts)]
    parts: Parts,
    /// NDATA per Sparkplug run (at most the run's `--seconds`).
    #[arg(long, value_name = "N", default_value = "200000", value_parser = messages)]
    messages: u64,
    /// Sparkplug runs: messages per second, or `max` (as fast as the broker takes them).
    #[arg(long, value_name = "R,max", default_value = "2000,max", value_parser = rates)]
    rates: Rates,
    /// The most seconds a run waits after its last NDATA for the counts to settle.
    #[arg(long, value_name = "S", default_value = "30", value_parser = cli::window_seconds)]
    drain_seconds: f64,
    /// Modbus tags (holding registers 0..N), 100 to a model.
    #[arg(long, value_name = "N", default_value = "1000", value_parser = modbus_tags)]
    modbus_tags: usize,
    /// Their poll interval.
    #[arg(long, value_name = "MS", default_value = "500", value_parser = modbus_interval)]
    modbus_interval_ms: u32,
    /// Seconds of the Modbus window, after the warm-up.
    #[arg(long, value_name = "S", default_value = "30", value_parser = cli::window_seconds)]
    modbus_seconds: f64,
}

const DEFAULTS: Defaults = Defaults {
    seconds: "20",
    warmup: "2",
    other: "mosquitto_sub",
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parts {
    sparkplug: bool,
    modbus: bool,
}

fn parts(text: &str) -> std::result::Result<Parts, String> {
    let mut parts = Parts {
        sparkplug: false,
        modbus: false,
    };
    for part in text.split(',').map(str::trim) {
        match part {
            "sparkplug" => parts.sparkplug = true,
            "modbus" => parts.modbus = true,
            other => return Err(format!("{other}: a part is `sparkplug` or `modbus`")),
        }
    }
    Ok(parts)
}

/// Sparkplug runs, each a rate (`None`: as fast as the broker takes them).
#[derive(Debug, Clone, PartialEq)]
struct Rates(Vec<Option<f64>>);

fn rates(text: &str) -> std::result::Result<Rates, String> {
    use grid_benches::limits::SOURCES_RATE_PER_SECOND_MAX;
    text.split(',')
        .map(str::trim)
        .map(|r| match r {
            "max" => Ok(None),
            r => match r.parse::<f64>() {
                Ok(v) if v > 0.0 && v <= SOURCES_RATE_PER_SECOND_MAX => Ok(Some(v)),
                _ => Err(format!(
                    "{r}: a rate is `max` or more than 0 and at most {SOURCES_RATE_PER_SECOND_MAX}"
                )),
            },
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Rates)
}

fn messages(text: &str) -> std::result::Result<u64, String> {
    use grid_benches::limits::SOURCES_MESSAGES_MAX;
    match text.parse::<u64>() {
        Ok(n) if (1..=SOURCES_MESSAGES_MAX).contains(&n) => Ok(n),
        _ => Err(format!("1 to {SOURCES_MESSAGES_MAX}")),
    }
}

fn modbus_tags(text: &str) -> std::result::Result<usize, String> {
    use grid_benches::limits::MODBUS_TAGS_MAX;
    match text.parse::<usize>() {
        Ok(n) if (1..=MODBUS_TAGS_MAX).contains(&n) => Ok(n),
        _ => Err(format!("1 to {MODBUS_TAGS_MAX}")),
    }
}

fn modbus_interval(text: &str) -> std::result::Result<u32, String> {
    use grid_spec::limits::{MODBUS_INTERVAL_MS_MAX, MODBUS_INTERVAL_MS_MIN};
    match text.parse::<u32>() {
        Ok(n) if (MODBUS_INTERVAL_MS_MIN..=MODBUS_INTERVAL_MS_MAX).contains(&n) => Ok(n),
        _ => Err(format!(
            "{MODBUS_INTERVAL_MS_MIN} to {MODBUS_INTERVAL_MS_MAX} (the tag's own limits)"
        )),
    }
}

fn rate_label(rate: Option<f64>) -> String {
    rate.map_or("flat out".to_owned(), |r| format!("{r:.0}/s paced"))
}

fn main() {
    exit_on_error("sources_compare", run());
}

/// `mosquitto_sub` beside `mosquitto`, else on PATH.
fn locate_sub() -> Result<PathBuf> {
    let debian = Path::new("/usr/bin/mosquitto_sub");
    if debian.is_file() {
        return Ok(debian.to_owned());
    }
    grid_benches::bringup::locate(
        "MOSQUITTO_SUB_BIN",
        "",
        "mosquitto_sub",
        "apt-get install mosquitto-clients",
    )
}

fn run() -> Result<()> {
    let args: Args = cli::parse(&DEFAULTS);
    let m = &args.measurement;
    let sides = Sides::start(
        "sources_compare: industrial sources — Sparkplug ingest beside mosquitto_sub, Modbus at scale",
        m,
        "gsc",
        Some(OtherBin {
            label: "mosquitto_sub",
            locate: locate_sub,
        }),
    )?;
    let t0 = Instant::now();
    let mut sparkplug_runs = Vec::new();
    if args.parts.sparkplug {
        let mosquitto = broker::locate_mosquitto()?;
        println!(
            "mosquitto: {} ({}); runs {:?}, each {} NDATA or {} s after {} s of warm-up",
            mosquitto.display(),
            mosquitto_version(&mosquitto),
            args.rates
                .0
                .iter()
                .map(|r| rate_label(*r))
                .collect::<Vec<_>>(),
            args.messages,
            m.seconds,
            m.warmup
        );
        sparkplug_runs = run_sparkplug(&args, &sides, &mosquitto, t0)?;
        sparkplug::print_tables(&sparkplug_runs);
    }
    if args.parts.modbus
        && let Some(bin_dir) = &sides.grid_bins
    {
        let run = run_modbus(&args, bin_dir, &sides.work.path)?;
        modbus::print_table(&[run]);
    }
    println!();
    println!(
        "whole run: {:.0} s; every child process is SIGKILLed now",
        t0.elapsed().as_secs_f64()
    );
    drop(sparkplug_runs);
    drop(sides);
    Ok(())
}

fn mosquitto_version(bin: &Path) -> String {
    // `mosquitto -h` prints its version on the first line (and exits 3).
    std::process::Command::new(bin)
        .arg("-h")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

fn run_sparkplug(
    args: &Args,
    sides: &Sides,
    mosquitto: &Path,
    t0: Instant,
) -> Result<Vec<sparkplug::Run>> {
    let m = &args.measurement;
    let work = &sides.work.path;
    let runtime = &sides.runtime;
    let broker = broker::Mosquitto::start(mosquitto, &work.join("mosquitto"))?;
    let mut node = runtime.block_on(edge::EdgeNode::connect(broker.port))?;
    let mut grid = match &sides.grid_bins {
        Some(dir) => Some(grid::GridHost::start(
            dir,
            work,
            "grid-sparkplug",
            &sparkplug::topology(broker.port),
        )?),
        None => None,
    };
    if let Some(g) = &mut grid {
        sparkplug::wait_online(g, &mut node, runtime)?;
        println!(
            "Grid: host edge online (tag {} with the birth's value) after {:.1} s; mosquitto on 127.0.0.1:{}",
            sparkplug::TAG,
            t0.elapsed().as_secs_f64(),
            broker.port
        );
    }
    let drain = Duration::from_secs_f64(args.drain_seconds);
    let mut runs = Vec::new();
    let mut value = 1.0;
    for &rate in &args.rates.0 {
        let label = rate_label(rate);
        if m.warmup > 0.0 {
            let warmup = sparkplug::Plan {
                label: format!("{label} warm-up"),
                messages: args.messages,
                rate,
                bound: Duration::from_secs_f64(m.warmup),
                drain,
                first_value: value,
            };
            let w = sparkplug::run(
                &warmup,
                &mut node,
                &broker,
                None,
                grid.as_mut(),
                runtime,
                work,
            )?;
            value += w.published.messages as f64;
        }
        let plan = sparkplug::Plan {
            label,
            messages: args.messages,
            rate,
            bound: Duration::from_secs_f64(m.seconds),
            drain,
            first_value: value,
        };
        let run = sparkplug::run(
            &plan,
            &mut node,
            &broker,
            sides.other_bin.as_deref(),
            grid.as_mut(),
            runtime,
            work,
        )?;
        value += run.published.messages as f64;
        sparkplug::report(&run);
        runs.push(run);
    }
    println!(
        "edge node: {} NBIRTH in all, {} rebirth requests, {} connection errors; mosquitto logged {} lines about dropped messages",
        node.births(),
        node.rebirths(),
        node.connection_errors(),
        broker.dropped_notes(&work.join("mosquitto"))
    );
    drop(node);
    drop(grid);
    drop(broker);
    Ok(runs)
}

fn run_modbus(args: &Args, bin_dir: &Path, work: &Path) -> Result<modbus::Run> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/peers/modbus_device.py");
    std::fs::create_dir_all(work.join("modbus"))?;
    let mut device = modbus::Device::start(&script, &work.join("modbus/device.log"))?;
    let values: Vec<u64> = (0..args.modbus_tags as u64).collect();
    device.ask(serde_json::json!({
        "op": "set", "unit": 1, "register": "holding", "address": 0, "values": values
    }))?;
    let started = Instant::now();
    let mut grid = grid::GridHost::start(
        bin_dir,
        work,
        "grid-modbus",
        &modbus::topology(device.port, args.modbus_tags, args.modbus_interval_ms),
    )?;
    println!();
    println!(
        "Modbus: pymodbus device on 127.0.0.1:{} (pid {}), {} tags and {} models installed at edge in {:.1} s",
        device.port,
        device.pid(),
        args.modbus_tags,
        args.modbus_tags.div_ceil(modbus::INPUTS_PER_MODEL),
        started.elapsed().as_secs_f64()
    );
    let run = modbus::measure(
        &mut grid,
        &mut device,
        args.modbus_tags,
        args.modbus_interval_ms,
        Duration::from_secs_f64(args.measurement.warmup),
        Duration::from_secs_f64(args.modbus_seconds),
    )?;
    drop(grid);
    drop(device);
    Ok(run)
}
