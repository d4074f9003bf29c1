//! Records in DynamoDB (issue 29; BENCHMARKS.md, "Records in DynamoDB"): the answers
//! index's lookups and first-write puts through Grid's `DynamoRecords` beside raw
//! `GetItem` / `PutItem` requests by the same client library (ureq, the same agent
//! settings, the same SigV4 signer — without Grid's JSON building, condition, answer
//! parsing and base64), in one run, against a real `dynalite` (npm 4.0.0, in memory) on
//! loopback that the benchmark starts.
//!
//! ```text
//! cargo run --release -p grid-benches --no-default-features --bin records_compare \
//!     [-- --records 2000 --lookups 4000]
//! ```
//!
//! Puts: `--records` index entries (an operation id → a 48-byte value, as an archive
//! index entry) by each path into its own table, alternating in blocks of 100. Lookups:
//! `--lookups` ids spread over them, alternating in blocks of 100. Reported: operations/s,
//! p50/p99 per path, and Grid / raw. Then archived answers found by id through the index
//! in DynamoDB (`archive "dynamodb://…"`): the record read and its tag checked, the entry
//! read from its segment in local files and checked, beside the same raw GetItem.

use std::time::{Duration, Instant};

use clap::Parser;

use grid_benches::procs::{Result, machine};
use grid_benches::report::Table;
use grid_engine::store::dynamodb::{DynamoRecords, dynalite};
use grid_engine::store::records::{First, Records};

#[derive(Parser, Debug)]
struct Args {
    /// Records each path puts.
    #[arg(long, default_value_t = 2_000)]
    records: usize,
    /// Lookups per path.
    #[arg(long, default_value_t = 4_000)]
    lookups: usize,
}

fn id(i: usize) -> String {
    format!("op-{i:08}-bench")
}

fn value(i: usize) -> Vec<u8> {
    let mut v = (i as u64).to_be_bytes().to_vec();
    v.resize(48, 0xab);
    v
}

/// One raw signed request (`operation`, JSON `body`, signed as the store signs) through
/// `agent`: its status and body bytes, unparsed.
fn raw(
    agent: &ureq::Agent,
    table: &DynamoRecords,
    operation: &str,
    body: &str,
) -> Result<(u16, Vec<u8>)> {
    let request = table.request(operation, body.as_bytes().to_vec())?;
    let mut response = agent.run(request).map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let bytes = response
        .body_mut()
        .read_to_vec()
        .map_err(|e| e.to_string())?;
    Ok((status, bytes))
}

struct Path {
    times: Vec<Duration>,
    elapsed: Duration,
}

fn report(what: &str, count: usize, paths: &mut [Path; 2]) {
    println!("{what}: {count} per path");
    let mut table = Table::new(
        &["path", "ops/s", "p50 ms", "p99 ms", "rate / raw"],
        "lrrrr",
    );
    let rate = |p: &Path| count as f64 / p.elapsed.as_secs_f64();
    let raw_rate = rate(&paths[0]);
    for (p, name) in ["raw", "Grid"].iter().enumerate() {
        let path = &mut paths[p];
        path.times.sort();
        let q = |q: f64| path.times[((path.times.len() - 1) as f64 * q) as usize];
        table.row(vec![
            (*name).to_owned(),
            format!("{:.0}", rate(path)),
            format!("{:.2}", q(0.5).as_secs_f64() * 1e3),
            format!("{:.2}", q(0.99).as_secs_f64() * 1e3),
            format!("{:.2}×", rate(path) / raw_rate),
        ]);
    }
    table.print();
}

fn main() -> Result<()> {
    let args = Args::parse();
    let server = dynalite::Server::start()?;
    let endpoint = server.endpoint();
    let grid = server.table("grid-bench", &endpoint)?;
    let raw_table = server.table("raw-bench", &endpoint)?;
    // The engine's own agent settings (its remote stores' timeouts).
    let agent = grid_engine::store::s3::remote_agent();
    println!("{}", machine());
    let new_path = || Path {
        times: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let mut puts = [new_path(), new_path()];
    for block in (0..args.records).step_by(100) {
        let end = (block + 100).min(args.records);
        let at = Instant::now();
        for i in block..end {
            let t = Instant::now();
            let body = serde_json::json!({
                "TableName": "raw-bench",
                "Item": {"k": {"S": id(i)}, "v": {"B": b64_value(i)}},
            })
            .to_string();
            let (status, _) = raw(&agent, &raw_table, "PutItem", &body)?;
            if status != 200 {
                return Err(format!("raw PutItem: HTTP {status}").into());
            }
            puts[0].times.push(t.elapsed());
        }
        puts[0].elapsed += at.elapsed();
        let at = Instant::now();
        for i in block..end {
            let t = Instant::now();
            if grid.put_first(&id(i), &value(i))? != First::Ours {
                return Err(format!("{} was not ours", id(i)).into());
            }
            puts[1].times.push(t.elapsed());
        }
        puts[1].elapsed += at.elapsed();
    }
    report(
        "first-write puts (Grid: conditional PutItem)",
        args.records,
        &mut puts,
    );
    let pick = |n: usize| (n * 7_919 + 13) % args.records;
    let mut gets = alternate(
        args.lookups,
        |n| raw_get(&agent, &raw_table, pick(n)),
        |n| {
            let i = pick(n);
            match grid.get(&id(i))?.as_deref() == Some(value(i).as_slice()) {
                true => Ok(()),
                false => Err(format!("{} read back otherwise", id(i)).into()),
            }
        },
    )?;
    report(
        "lookups by id (consistent GetItem)",
        args.lookups,
        &mut gets,
    );
    archived_lookups(&args, &server, &agent, &raw_table)
}

/// An archived answer found again through the index in DynamoDB (`archive
/// "dynamodb://…"`), as `Shelf::find` does past the ids' digests: the record read
/// (`RemoteIndex::get`: a consistent GetItem, its HMAC tag checked), then the entry
/// read from its segment in the host's files and checked against the digest the
/// record holds — beside the same raw GetItem as above.
fn archived_lookups(
    args: &Args,
    server: &dynalite::Server,
    agent: &ureq::Agent,
    raw_table: &DynamoRecords,
) -> Result<()> {
    use ed25519_dalek::{Signer as _, SigningKey};
    use grid_engine::store::archive::{self, Blobs, Entry, LocalFiles};
    use grid_engine::store::shelf::RemoteIndex;
    let dir = std::env::temp_dir().join(format!("grid-records-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let files = LocalFiles::open(&dir)?;
    let key = SigningKey::from_bytes(&[5; 32]);
    let sign: grid_engine::store::high_water::Signer =
        std::sync::Arc::new(move |m: &[u8]| Ok((1, key.sign(m).to_bytes())));
    let entries: Vec<Entry> = (0..args.records)
        .map(|i| Entry {
            key: id(i),
            at_ms: 1_764_900_000_000 + i as u64,
            value: format!(
                r#"{{"op":"{}","outcome":"succeeded","batch":{i},"detail":"inputs set: target={}"}}"#,
                id(i),
                i % 97
            )
            .into_bytes(),
        })
        .collect();
    let encoded = archive::encode("bench", 1, &entries, &sign).map_err(std::io::Error::other)?;
    let name = archive::segment_name(1);
    files.put_if_absent(&name, &encoded.bytes)?;
    let table = server.table("index-bench", &server.endpoint())?;
    let index = RemoteIndex::new(Box::new(table), "dynamodb://index-bench", "bench", [7; 32]);
    for (key, at) in &encoded.located {
        index.put(key, at)?;
    }
    let pick = |n: usize| (n * 7_919 + 13) % args.records;
    let mut gets = alternate(
        args.lookups,
        |n| raw_get(agent, raw_table, pick(n)),
        |n| {
            let i = pick(n);
            let located = index
                .get(&id(i), &id(i))?
                .ok_or_else(|| format!("{} has no record", id(i)))?;
            let bytes = files
                .get_range(&name, located.offset, located.len)?
                .ok_or("the segment is gone")?;
            match archive::entry(&name, &located, &bytes)?.value == entries[i].value {
                true => Ok(()),
                false => Err(format!("{} read back otherwise", id(i)).into()),
            }
        },
    )?;
    report(
        "archived answers found by id (Grid: the record's tag checked, then the entry read from DIR/archive and checked)",
        args.lookups,
        &mut gets,
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `count` operations by each path — `raw(n)`, then `grid(n)` — alternating in blocks
/// of 100, each timed.
fn alternate(
    count: usize,
    mut raw: impl FnMut(usize) -> Result<()>,
    mut grid: impl FnMut(usize) -> Result<()>,
) -> Result<[Path; 2]> {
    let new_path = || Path {
        times: Vec::new(),
        elapsed: Duration::ZERO,
    };
    let mut paths = [new_path(), new_path()];
    for block in (0..count).step_by(100) {
        let end = (block + 100).min(count);
        for (path, op) in paths
            .iter_mut()
            .zip([&mut raw as &mut dyn FnMut(usize) -> Result<()>, &mut grid])
        {
            let at = Instant::now();
            for n in block..end {
                let t = Instant::now();
                op(n)?;
                path.times.push(t.elapsed());
            }
            path.elapsed += at.elapsed();
        }
    }
    Ok(paths)
}

/// A raw consistent GetItem of record `i` in the raw table, its answer unparsed.
fn raw_get(agent: &ureq::Agent, raw_table: &DynamoRecords, i: usize) -> Result<()> {
    let body = format!(
        r#"{{"TableName":"raw-bench","Key":{{"k":{{"S":"{}"}}}},"ConsistentRead":true}}"#,
        id(i)
    );
    match raw(agent, raw_table, "GetItem", &body)? {
        (200, bytes) if bytes.len() >= 20 => Ok(()),
        (status, _) => Err(format!("raw GetItem: HTTP {status}").into()),
    }
}

/// The raw path's value: the same 48 bytes, as the same binary attribute.
fn b64_value(i: usize) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(value(i))
}
