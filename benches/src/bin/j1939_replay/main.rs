//! Passive CAN/J1939 log replay (issue 17; BENCHMARKS.md, "J1939 log replay"): a
//! generated candump log replayed as fast as possible through a real `gridd`, frames
//! decoded and journaled per second, beside the decoder alone in the same run.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo run --release -p grid-benches --no-default-features --bin j1939_replay \
//!     [-- --frames 1000000 --drain-seconds 600 --keep]
//! ```
//!
//! **The log.** `--frames` EEC1 frames (PGN 61444, source address 0, identifier
//! 0CF00400) 1 ms apart in the candump format (`(SECONDS.MICROS) can0 0CF00400#…`),
//! engine speed (SPN 190) 600 to 2,599.875 rpm, stepping by 0.125 rpm: every frame a
//! good value.
//!
//! **The decoder alone.** In this process: the whole log parsed with `socketcan::dump`
//! and fed to `grid_adapters::j1939::decoder::Decoder` (one tag's decoder, as the
//! adapter runs it), frames per second; then the frames already parsed, decoded only.
//!
//! **Through gridd.** One host `edge` (`profiles sources`, `metrics=` on loopback) with
//! one `j1939 log=… pgn=61444 spn=190` tag feeding a one-cell model. `gridd` runs with
//! `GRID_BENCH_J1939_UNPACED` (the benchmark's switch: the replay does not wait for the
//! recorded pace; no topology can ask for it). The rate is journaled good entries
//! (`grid_tag_entries_total{quality="good"}`, scraped every 50 ms) over the time from
//! the first scrape that saw one to the first that saw them all; the model's applied
//! batches and the store's fsyncs are counted over the same span.
//!
//! Every child process is SIGKILLed at the end, on an error or while a panic unwinds;
//! the work directory is removed unless `--keep`.

#[path = "../sources_compare/grid.rs"]
#[allow(dead_code)]
mod grid;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;

use grid_adapters::Event;
use grid_adapters::j1939::decoder::Decoder;
use grid_benches::bringup::exit_on_error;
use grid_benches::procs::{Result, WorkDir, cpu_time, grid_bin_dir, machine, report_gridd};
use grid_benches::report::Table;

/// The first frame's capture time, Unix µs.
const T0_US: u64 = 1_700_000_000_000_000;
/// How often the host's metrics are scraped.
const SCRAPE_EVERY: Duration = Duration::from_millis(50);

/// J1939 log replay through gridd beside the decoder alone.
#[derive(Parser)]
#[command(name = "j1939_replay")]
struct Args {
    /// Frames in the generated log.
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = frames)]
    frames: u64,
    /// The most seconds to wait for gridd to journal every frame.
    #[arg(long, value_name = "S", default_value = "600", value_parser = grid_benches::cli::window_seconds)]
    drain_seconds: f64,
    /// Keep the work directory (the log, the store, the logs).
    #[arg(long)]
    keep: bool,
}

fn frames(text: &str) -> std::result::Result<u64, String> {
    use grid_benches::limits::J1939_REPLAY_FRAMES_MAX;
    match text.parse::<u64>() {
        Ok(n) if (1..=J1939_REPLAY_FRAMES_MAX).contains(&n) => Ok(n),
        _ => Err(format!(
            "a frame count from 1 to J1939_REPLAY_FRAMES_MAX ({J1939_REPLAY_FRAMES_MAX})"
        )),
    }
}

fn main() {
    exit_on_error("j1939_replay", run());
}

fn run() -> Result<()> {
    let args = Args::parse();
    let bin_dir = grid_bin_dir()?;
    println!("j1939_replay: a candump log through gridd beside the decoder alone");
    println!("machine: {}", machine());
    report_gridd(&bin_dir)?;
    let work = WorkDir::new("gjr", args.keep)?;
    let log = work.path.join("engine.log");
    let started = Instant::now();
    let bytes = write_log(&log, args.frames)?;
    println!(
        "log: {} frames, {:.1} MB, written in {:.1} s",
        args.frames,
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );

    let alone = decoder_alone(&log, args.frames)?;
    let through = through_gridd(&bin_dir, &work.path, &log, &args)?;

    let mut table = Table::new(&["what", "frames", "seconds", "frames/s", "note"], "lrrrl");
    table.row(vec![
        "decoder alone: parse + decode".to_owned(),
        alone.frames.to_string(),
        format!("{:.2}", alone.parse_and_decode.as_secs_f64()),
        rate(alone.frames, alone.parse_and_decode),
        "socketcan::dump + Decoder, one thread".to_owned(),
    ]);
    table.row(vec![
        "decoder alone: decode".to_owned(),
        alone.frames.to_string(),
        format!("{:.3}", alone.decode.as_secs_f64()),
        rate(alone.frames, alone.decode),
        "frames already parsed".to_owned(),
    ]);
    table.row(vec![
        "gridd: replayed, journaled, projected".to_owned(),
        through.entries.to_string(),
        format!("{:.2}", through.span.as_secs_f64()),
        rate(through.entries, through.span),
        format!(
            "{} batches applied, {} fsyncs, gridd CPU {:.1} s",
            through.batches,
            through.fsyncs.text(),
            through.cpu.as_secs_f64()
        ),
    ]);
    table.print();
    println!(
        "gridd journaled {:.1}% of the decoder's parse + decode rate",
        100.0 * (through.entries as f64 / through.span.as_secs_f64())
            / (alone.frames as f64 / alone.parse_and_decode.as_secs_f64())
    );
    println!("tag connection at the end: {}", through.connection);
    println!("whole run: {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn rate(n: u64, span: Duration) -> String {
    format!("{:.0}", n as f64 / span.as_secs_f64().max(1e-9))
}

/// Writes the log; its size in bytes.
fn write_log(path: &Path, frames: u64) -> Result<u64> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut line = String::with_capacity(64);
    let mut bytes = 0;
    for i in 0..frames {
        let t_us = T0_US + i * 1_000;
        // 600 rpm = 4800 raw; 16,000 steps of 0.125 rpm.
        let raw = 4_800 + (i % 16_000) as u16;
        let [lo, hi] = raw.to_le_bytes();
        line.clear();
        let _ = writeln!(
            line,
            "({}.{:06}) can0 0CF00400#F07D7D{lo:02X}{hi:02X}00FFFF",
            t_us / 1_000_000,
            t_us % 1_000_000
        );
        out.write_all(line.as_bytes())?;
        bytes += line.len() as u64;
    }
    out.flush()?;
    Ok(bytes)
}

struct Alone {
    frames: u64,
    parse_and_decode: Duration,
    decode: Duration,
}

/// The log parsed and decoded in this process, then decoded again from memory.
fn decoder_alone(log: &Path, expected: u64) -> Result<Alone> {
    let mut decoder = Decoder::new(61444, 190, Some(0)).ok_or("SPN 190 decodes")?;
    let mut events = Vec::with_capacity(4);
    let mut parsed: Vec<(u64, u32, [u8; 8])> = Vec::with_capacity(expected as usize);
    let mut good = 0u64;
    let started = Instant::now();
    for record in socketcan::dump::Reader::from_file(log)? {
        let record = record?;
        let socketcan::CanAnyFrame::Normal(frame) = record.frame else {
            continue;
        };
        let socketcan::Id::Extended(id) = socketcan::EmbeddedFrame::id(&frame) else {
            continue;
        };
        let data = socketcan::EmbeddedFrame::data(&frame);
        decoder.frame(record.t_us, id.as_raw(), true, data, 0, &mut events);
        good += count_good(&mut events);
        let mut bytes = [0; 8];
        bytes[..data.len()].copy_from_slice(data);
        parsed.push((record.t_us, id.as_raw(), bytes));
    }
    let parse_and_decode = started.elapsed();
    if good != expected {
        return Err(format!("the decoder read {good} good values of {expected}").into());
    }
    let mut decoder = Decoder::new(61444, 190, Some(0)).ok_or("SPN 190 decodes")?;
    let started = Instant::now();
    let mut again = 0u64;
    for (t_us, id, data) in &parsed {
        decoder.frame(*t_us, *id, true, data, 0, &mut events);
        again += count_good(&mut events);
    }
    let decode = started.elapsed();
    assert_eq!(again, expected);
    Ok(Alone {
        frames: expected,
        parse_and_decode,
        decode,
    })
}

fn count_good(events: &mut Vec<Event>) -> u64 {
    let n = events
        .iter()
        .filter(|e| matches!(e, Event::Reading(r) if r.quality.name() == "good"))
        .count() as u64;
    events.clear();
    n
}

struct Through {
    entries: u64,
    span: Duration,
    batches: u64,
    fsyncs: grid::Fsyncs,
    cpu: Duration,
    connection: String,
}

/// The log replayed by a real gridd, unpaced, until every frame is journaled.
fn through_gridd(bin_dir: &Path, work: &Path, log: &Path, args: &Args) -> Result<Through> {
    // SAFETY: set before this process starts any gridd, and read by nothing here: only
    // the gridd children inherit it (the runtime's threads never read the environment).
    unsafe { std::env::set_var("GRID_BENCH_J1939_UNPACED", "1") };
    let body = format!(
        "tag engine host={} {{\n    j1939 log=\"{}\" pgn=61444 spn=190 source-address=0\n}}\n\
         model engine host={} {{\n    input rpm from=\"tag:engine\" default=0\n    cell rps \"rpm / 60\"\n}}\n",
        grid::HOST,
        log.display(),
        grid::HOST
    );
    let mut host = grid::GridHost::start(bin_dir, work, "grid", &body)?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.drain_seconds);
    let mut first: Option<(Instant, grid::Scrape)> = None;
    loop {
        let now = Instant::now();
        let scrape = host.scrape()?;
        let good = scrape.entries("good");
        if good > 0 && first.is_none() {
            first = Some((now, scrape.clone()));
        }
        if good >= args.frames {
            let (at, before) = first.expect("seen before");
            // The span starts at the first scrape that saw entries: what was journaled
            // before it is not counted.
            let entries = good - before.entries("good");
            let report = host.tag("engine")?;
            let connection = serde_json::to_string(&report.connection)?;
            return Ok(Through {
                entries,
                span: now - at,
                batches: scrape.batches() - before.batches(),
                fsyncs: grid::Fsyncs::between(&before, &scrape),
                cpu: cpu_time(Some(host.pid())),
                connection,
            });
        }
        if now > deadline {
            return Err(format!(
                "gridd journaled {good} of {} frames within {} s",
                args.frames, args.drain_seconds
            )
            .into());
        }
        host.hosts.procs.check_running()?;
        std::thread::sleep(SCRAPE_EVERY);
    }
}
