//! Cross-domain exports (BENCHMARKS.md, "Cross-domain exports"): one value stream from
//! plant-ops into utility, carried by Grid's export gateway beside the alternative, two
//! plain Ordered routes chained by a script that republishes — in one run, on the same
//! three hosts: `edge` (plant-ops) publishes, `gw` (a member of both) carries, `util`
//! (utility) receives.
//!
//! - **gateway**: `meter-ops` (edge → gw) carried onto `meter-utility` (gw → util) by the
//!   export `meter-to-utility`: each value crosses with a signed mapping in the write
//!   that publishes it, under the publisher's disclosure and gw's publication right.
//! - **chained pair**: `chain-a` (edge → gw) and `chain-b` (gw → util), and a script at
//!   gw — here a thread on gw's control socket, the calls `gridctl inspect inbox` and
//!   `gridctl publish` make, with no process start per value: it reads what gw's inbox
//!   of `chain-a` holds past what it republished and publishes each value on `chain-b`,
//!   one at a time. It keeps no mapping: after a crash it cannot tell what it republished.
//!
//! Measured: values acknowledged end to end per second (util's signed receipt of the
//! value on the utility route, back at gw), one publisher at edge publishing as fast as
//! its answers come; and the latency of one value at a time, from the publish call at
//! edge to util's receipt covering it at gw (p50, p99). Target: gateway ≥ 1.5× the
//! chained pair's throughput.
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl
//! cargo run --release -p grid-benches --bin export_compare [-- --seconds 5 --warmup 1 --values 500 --keep]
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;

use grid_engine::delivery::api::{DeliveryCall, DeliveryReply};
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply};

use grid_benches::bringup::{exit_on_error, start_bench};
use grid_benches::procs::Result;
use grid_benches::publisher::Publisher;
use grid_benches::report::{Table, ms, percentile};

const HOSTS: [&str; 3] = ["edge", "gw", "util"];
/// (route at edge, route at gw) of each side.
const GATEWAY: (&str, &str) = ("meter-ops", "meter-utility");
const CHAIN: (&str, &str) = ("chain-a", "chain-b");
/// How long a value may take to reach util's receipt before the run fails.
const VALUE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the script waits when gw's inbox holds nothing new.
const SCRIPT_IDLE: Duration = Duration::from_micros(200);

#[derive(Parser)]
#[command(name = "export_compare")]
struct Args {
    /// Seconds each throughput measurement records.
    #[arg(long, default_value = "5")]
    seconds: f64,
    /// Seconds of publishing before each throughput window.
    #[arg(long, default_value = "1")]
    warmup: f64,
    /// Values per latency measurement (one at a time).
    #[arg(long, default_value = "500")]
    values: u64,
    /// Keep the work directory.
    #[arg(long)]
    keep: bool,
}

fn topology(ports: &[u16]) -> String {
    format!(
        r#"grid version=1
// Written by benches export_compare.
membership plant-ops {{
    authority voters=1
}}
membership utility {{
    authority voters=1
}}
host edge listen="127.0.0.1:{}" {{
    member plant-ops
    profiles transport authority delivery exports
}}
host util listen="127.0.0.1:{}" {{
    member utility
    profiles transport authority delivery
}}
host gw listen="127.0.0.1:{}" {{
    member plant-ops
    member utility
    profiles transport authority delivery exports
}}
route meter-ops membership=plant-ops class=ordered encrypted=#true {{
    publisher edge
    destination gw
}}
route meter-utility membership=utility class=ordered encrypted=#true {{
    publisher gw
    destination util
}}
export meter-to-utility gateway=gw from=meter-ops to=meter-utility {{
    disclosure issuer=edge
    publication
}}
route chain-a membership=plant-ops class=ordered encrypted=#true {{
    publisher edge
    destination gw
}}
route chain-b membership=utility class=ordered encrypted=#true {{
    publisher gw
    destination util
}}
"#,
        ports[0], ports[1], ports[2]
    )
}

fn main() {
    exit_on_error("export_compare", run(Args::parse()));
}

fn run(args: Args) -> Result<()> {
    let (_work, hosts) = start_bench(
        "Cross-domain exports: gateway beside two Ordered routes chained by a script",
        "export-compare",
        args.keep,
        &HOSTS,
        topology,
    )?;
    let edge = hosts.host_dir("edge");
    let gw = hosts.host_dir("gw");
    let window = Duration::from_secs_f64(args.seconds);
    let warmup = Duration::from_secs_f64(args.warmup);

    let mut rows = Vec::new();
    let mut republished = 0;
    for (name, side) in [
        ("gateway (export)", GATEWAY),
        ("chained pair + script", CHAIN),
    ] {
        // The script runs only while the chained pair is measured.
        let stop = Arc::new(AtomicBool::new(false));
        let script = (side == CHAIN).then(|| {
            let (stop, gw) = (stop.clone(), gw.clone());
            std::thread::spawn(move || republish(&gw, &stop).map_err(|e| e.to_string()))
        });
        let measured = throughput(&edge, &gw, side, warmup, window)
            .and_then(|rate| Ok((rate, latencies(&edge, &gw, side, args.values)?)));
        stop.store(true, Ordering::Relaxed);
        if let Some(script) = script {
            republished = script
                .join()
                .map_err(|_| "the script thread panicked")?
                .map_err(|e| format!("the script failed: {e}"))?;
        }
        let (rate, latencies) = measured?;
        rows.push((name, rate, latencies));
    }

    let mut table = Table::new(
        &["edge → util", "values/s end to end", "p50", "p99"],
        "lrrr",
    );
    for (name, rate, sorted) in &rows {
        table.row(vec![
            (*name).to_owned(),
            format!("{rate:.0}"),
            ms(percentile(sorted, 0.50)),
            ms(percentile(sorted, 0.99)),
        ]);
    }
    println!(
        "\nOrdered values acknowledged by util per second (one publisher at edge, {:.0} s window), and one value at a time ({} values):",
        args.seconds, args.values
    );
    table.print();
    println!(
        "\ngateway / chained pair throughput: {:.2} (target ≥ 1.5)",
        rows[0].1 / rows[1].1.max(1e-9)
    );
    let state = gw
        .parent()
        .and_then(Path::parent)
        .ok_or("no state directory")?
        .to_path_buf();
    let inspected = grid_reconciler::exports::inspect(&state, "meter-to-utility", "gw")?;
    println!(
        "evidence: the gateway journaled {} signed mappings (all verify: {}; disclosure verifies: {}; {} receipted on both sides); the script republished {republished} values and kept no mapping",
        inspected.export.crossed,
        inspected.mappings_verified,
        inspected.disclosure_verified,
        inspected.receipted_both_sides
    );
    Ok(())
}

fn delivery(client: &mut Client, request: DeliveryCall) -> Result<DeliveryReply> {
    match client.call(&Call::Delivery { request })? {
        Reply::Delivery(reply) => Ok(*reply),
        other => Err(format!("{other:?}").into()),
    }
}

/// The script of the chained pair, at gw: what gw's inbox of `chain-a` holds past what
/// it republished, published on `chain-b` one value at a time, until `stop`. The
/// number of values republished.
fn republish(gw: &Path, stop: &AtomicBool) -> Result<u64> {
    let mut client = Client::connect(gw)?;
    let mut next = 1;
    let mut count = 0;
    while !stop.load(Ordering::Relaxed) {
        let values = match delivery(
            &mut client,
            DeliveryCall::Held {
                route: CHAIN.0.to_owned(),
                from: next,
            },
        )? {
            DeliveryReply::Held { values, .. } => values,
            other => return Err(format!("held: {other:?}").into()),
        };
        if values.is_empty() {
            std::thread::sleep(SCRIPT_IDLE);
            continue;
        }
        for v in values {
            match delivery(
                &mut client,
                DeliveryCall::Publish {
                    route: CHAIN.1.to_owned(),
                    value: v.value,
                },
            )? {
                DeliveryReply::Published { .. } => {}
                other => return Err(format!("publish: {other:?}").into()),
            }
            next = v.position + 1;
            count += 1;
        }
    }
    Ok(count)
}

/// Values util receipted on `side.1` per second while one thread publishes on `side.0`
/// at edge as fast as its answers come.
fn throughput(
    edge: &Path,
    gw: &Path,
    side: (&str, &str),
    warmup: Duration,
    window: Duration,
) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let (stop, route, dir) = (stop.clone(), side.0.to_owned(), edge.to_owned());
        std::thread::spawn(move || -> std::result::Result<u64, String> {
            let mut publisher = Publisher::connect(dir).map_err(|e| e.to_string())?;
            let mut last = 0;
            let mut value = 0.0;
            while !stop.load(Ordering::Relaxed) {
                value += 1.0;
                last = publisher.publish(&route, value)?;
            }
            Ok(last)
        })
    };
    let mut poller = Publisher::connect(gw.to_owned())?;
    std::thread::sleep(warmup);
    let first = poller.receipted(side.1, "util")?;
    let started = Instant::now();
    std::thread::sleep(window);
    let last = poller.receipted(side.1, "util")?;
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let published = publisher
        .join()
        .map_err(|_| "the publisher thread panicked")?
        .map_err(|e| format!("a publish was refused: {e}"))?;
    drained(gw, side.1, published)?;
    Ok((last - first) as f64 / elapsed)
}

/// Waits (bounded) until util's receipt on `route` at gw covers `position`.
fn drained(gw: &Path, route: &str, position: u64) -> Result<()> {
    let mut poller = Publisher::connect(gw.to_owned())?;
    let started = Instant::now();
    while poller.receipted(route, "util")? < position {
        if started.elapsed() > VALUE_TIMEOUT {
            return Err(format!(
                "util did not receipt position {position} of {route} within {VALUE_TIMEOUT:?}"
            )
            .into());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    Ok(())
}

/// `count` values, one at a time: from the publish call at edge to util's receipt
/// covering it at gw, in nanoseconds, sorted.
fn latencies(edge: &Path, gw: &Path, side: (&str, &str), count: u64) -> Result<Vec<u64>> {
    let mut publisher = Publisher::connect(edge.to_owned())?;
    let gw: PathBuf = gw.to_owned();
    let mut poller = Publisher::connect(gw.clone())?;
    let mut position = poller.receipted(side.1, "util")?;
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count {
        let started = Instant::now();
        publisher.publish(side.0, 1e6 + i as f64)?;
        position += 1;
        while poller.receipted(side.1, "util")? < position {
            if started.elapsed() > VALUE_TIMEOUT {
                return Err(format!("value {i} on {} not receipted", side.1).into());
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        out.push(started.elapsed().as_nanos() as u64);
    }
    out.sort_unstable();
    Ok(out)
}
