//! Value delivery (SPEC C4): publishing, crash cycles, and what must hold afterwards.
//!
//! - `publish ROUTE value=X as=HOST [expect=OUTCOME]` — `gridctl publish ROUTE X --as
//!   HOST --json`; the outcome must be `expect` (default `succeeded`). Every publish
//!   sent is recorded in `$WORK/published.jsonl` (value, position when acknowledged).
//! - `publish-cycles ROUTE publisher=P recipient=R cycles=N seed=S` — N cycles: values
//!   are published one after another (each a distinct number) while, after a seeded
//!   random moment, the publisher or the recipient (seeded) is SIGKILLed; it is
//!   restarted and the next cycle begins. Publishes that fail or whose reply is lost
//!   are recorded as such and never re-sent.
//! - `expect-delivered ROUTE [duplicates=0]` — waits (bounded) until every destination's
//!   receipt covers the publisher's last position, then: each destination's inbox
//!   equals the publisher's sequence exactly (Ordered; Latest: its newest value), the
//!   sequence is gap-free from 1; when the journey's own steps published on the route
//!   (distinct values), no value is in it twice, every acknowledged publish is at its
//!   position, and nothing is in it that no step sent.
//! - `expect-receipts ROUTE verified=#true` — `gridctl inspect receipts ROUTE --verify`:
//!   every signature verifies offline with the recipients' public keys and nothing is
//!   outstanding.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kdl::KdlValue;
use serde_json::Value;

use super::claims::next;
use super::{Outcome, Step, check_outcome};
use crate::error::Failure;
use crate::parse::{Node, ParseError, kind};
use crate::process::run_bounded;
use crate::runner::Context;

/// The most cycles one `publish-cycles` step runs.
pub const PUBLISH_CYCLES_MAX: u64 = 1_000;
/// How long `expect-delivered` and `expect-receipts` wait for receipts to cover
/// everything published.
pub const DELIVERY_SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one quiet `gridctl publish` may take.
const PUBLISH_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

fn published_path(work: &Path) -> PathBuf {
    work.join("published.jsonl")
}

fn record(work: &Path, entry: &Value) -> Result<(), Failure> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(published_path(work))
        .map_err(|e| Failure::new("the publish record written", e.to_string()))?;
    writeln!(file, "{entry}").map_err(|e| Failure::new("the publish record written", e.to_string()))
}

fn recorded(work: &Path, route: &str) -> Vec<Value> {
    std::fs::read_to_string(published_path(work))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["route"] == route)
        .collect()
}

// ---- publish ----------------------------------------------------------------------

struct Publish {
    route: String,
    value: String,
    host: String,
    expect: Outcome,
    detail: Option<String>,
}

pub fn parse_publish(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let route = node.argument("a route name")?;
    let value = match node.property("value")? {
        Some(entry) => super::number_text(entry.value()).ok_or_else(|| {
            node.entry_error(
                entry,
                format!("`value` must be a number, found {}", kind(entry.value())),
            )
        })?,
        None => return Err(node.error("`publish` needs value=NUMBER")),
    };
    let host = node
        .string("as")?
        .ok_or_else(|| node.error("`publish` needs as=\"HOST\" (the route's publisher)"))?;
    let expect = Outcome::expected(node)?;
    let detail = node.string("detail")?;
    Ok(Box::new(Publish {
        route,
        value,
        host,
        expect,
        detail,
    }))
}

impl Step for Publish {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let args: Vec<OsString> = vec![
            "publish".into(),
            self.route.clone().into(),
            self.value.clone().into(),
            "--as".into(),
            self.host.clone().into(),
            "--json".into(),
        ];
        let output = cx.gridctl(&args)?;
        let json = check_outcome(cx, &output, self.expect)?;
        if let Some(detail) = &self.detail {
            let said = json["detail"].as_str().unwrap_or_default();
            if !said.contains(detail.as_str()) {
                return Err(Failure::new(
                    format!("the answer to say {detail:?}"),
                    format!("{json}"),
                ));
            }
        }
        let work = cx.work_dir().to_owned();
        record(
            &work,
            &serde_json::json!({
                "route": self.route,
                "value": self.value.parse::<f64>().ok(),
                "outcome": json["outcome"],
                "position": json.get("position"),
            }),
        )
    }
}

// ---- publish-cycles -------------------------------------------------------------------

struct Cycles {
    route: String,
    publisher: String,
    recipient: String,
    cycles: u64,
    seed: u64,
}

pub fn parse_cycles(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let route = node.argument("a route name")?;
    let publisher = node
        .string("publisher")?
        .ok_or_else(|| node.error("`publish-cycles` needs publisher=\"HOST\""))?;
    let recipient = node
        .string("recipient")?
        .ok_or_else(|| node.error("`publish-cycles` needs recipient=\"HOST\""))?;
    let cycles = node.count("cycles")?.unwrap_or(10);
    if cycles == 0 || cycles > PUBLISH_CYCLES_MAX {
        return Err(node.error(format!(
            "cycles must be 1 to PUBLISH_CYCLES_MAX ({PUBLISH_CYCLES_MAX})"
        )));
    }
    let seed = node.count("seed")?.unwrap_or(1);
    Ok(Box::new(Cycles {
        route,
        publisher,
        recipient,
        cycles,
        seed,
    }))
}

/// One quiet `gridctl publish`: (outcome, position).
fn publish_quiet(
    gridctl: &Path,
    work: &Path,
    state: &Path,
    route: &str,
    host: &str,
    value: f64,
    tag: &str,
) -> (String, Option<u64>) {
    let logs = work.join("quiet");
    let _ = std::fs::create_dir_all(&logs);
    let mut command = Command::new(gridctl);
    command
        .args([
            "publish",
            route,
            &value.to_string(),
            "--as",
            host,
            "--json",
            "--state",
        ])
        .arg(state)
        .current_dir(work);
    match run_bounded(
        command,
        &logs.join(format!("{tag}.out")),
        &logs.join(format!("{tag}.err")),
        PUBLISH_COMMAND_TIMEOUT,
    ) {
        Ok(output) => match serde_json::from_str::<Value>(output.stdout.trim()) {
            Ok(json) => (
                json["outcome"].as_str().unwrap_or("no-answer").to_owned(),
                json["position"].as_u64(),
            ),
            Err(_) => ("no-answer".to_owned(), None),
        },
        Err(_) => ("no-answer".to_owned(), None),
    }
}

impl Step for Cycles {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let gridctl = cx.gridctl_path().to_owned();
        let work = cx.work_dir().to_owned();
        let state = cx.state_dir().to_owned();
        let mut rng = self.seed;
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut kills: BTreeMap<String, u64> = BTreeMap::new();
        cx.say(format_args!(
            "{} cycles on {} (seed {}): publish from {} while SIGKILLing {} or {} at seeded moments",
            self.cycles, self.route, self.seed, self.publisher, self.publisher, self.recipient
        ));
        for cycle in 0..self.cycles {
            let victim = if next(&mut rng).is_multiple_of(2) {
                self.publisher.clone()
            } else {
                self.recipient.clone()
            };
            let delay = Duration::from_millis(next(&mut rng) % 150);
            let stop = Arc::new(AtomicBool::new(false));
            let thread = {
                let (gridctl, work, state, stop) =
                    (gridctl.clone(), work.clone(), state.clone(), stop.clone());
                let (route, host, seed) = (self.route.clone(), self.publisher.clone(), self.seed);
                std::thread::spawn(move || {
                    let mut sent = Vec::new();
                    for j in 0..64u64 {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        // Distinct values: cycle and index, never repeated; a third
                        // keeps every mantissa bit busy (no byte pattern by chance).
                        let value = (cycle * 100 + j) as f64 + 1.0 / 3.0;
                        let tag = format!("cycle{seed}-{cycle}-{j}");
                        let (outcome, position) =
                            publish_quiet(&gridctl, &work, &state, &route, &host, value, &tag);
                        sent.push((value, outcome, position));
                    }
                    sent
                })
            };
            std::thread::sleep(delay);
            cx.kill_host(&victim)?;
            stop.store(true, Ordering::SeqCst);
            let sent = thread
                .join()
                .map_err(|_| Failure::new("the publishing thread to finish", "it panicked"))?;
            for (value, outcome, position) in sent {
                *counts.entry(outcome.clone()).or_default() += 1;
                record(
                    &work,
                    &serde_json::json!({
                        "route": self.route,
                        "value": value,
                        "outcome": outcome,
                        "position": position,
                    }),
                )?;
            }
            *kills.entry(victim.clone()).or_default() += 1;
            cx.start_host(&victim, None)?;
        }
        cx.say(format_args!(
            "cycles done: SIGKILLs {kills:?}; publishes by outcome {counts:?}"
        ));
        Ok(())
    }
}

// ---- publish-many ---------------------------------------------------------------------

/// The most values one `publish-many` stream publishes.
pub const PUBLISH_MANY_MAX: u64 = 5_000;

struct Many {
    streams: Vec<(String, u64)>,
    host: String,
    start: f64,
}

pub fn parse_many(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let route = node.argument("a route name")?;
    let host = node
        .string("as")?
        .ok_or_else(|| node.error("`publish-many` needs as=\"HOST\" (the publisher)"))?;
    let count = node
        .count("count")?
        .ok_or_else(|| node.error("`publish-many` needs count=N"))?;
    let mut streams = vec![(route, count)];
    if let Some(other) = node.string("during")? {
        let n = node
            .count("during-count")?
            .ok_or_else(|| node.error("`during` needs during-count=N"))?;
        streams.push((other, n));
    }
    if streams
        .iter()
        .any(|(_, n)| *n == 0 || *n > PUBLISH_MANY_MAX)
    {
        return Err(node.error(format!(
            "counts are 1 to PUBLISH_MANY_MAX ({PUBLISH_MANY_MAX})"
        )));
    }
    let start = node.count("start")?.unwrap_or(1_000_000) as f64;
    Ok(Box::new(Many {
        streams,
        host,
        start,
    }))
}

impl Step for Many {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let gridctl = cx.gridctl_path().to_owned();
        let work = cx.work_dir().to_owned();
        let state = cx.state_dir().to_owned();
        let started = Instant::now();
        let threads: Vec<_> = self
            .streams
            .iter()
            .enumerate()
            .map(|(index, (route, count))| {
                let (gridctl, work, state) = (gridctl.clone(), work.clone(), state.clone());
                let (route, count, host) = (route.clone(), *count, self.host.clone());
                // Distinct values per stream: start + index offset + j.
                let base = self.start + (index as f64) * 100_000.0;
                std::thread::spawn(move || {
                    let mut sent = Vec::new();
                    for j in 0..count {
                        let value = base + j as f64 + 0.5;
                        let tag = format!("many-{route}-{}-{j}", base as u64).replace('/', "_");
                        let (outcome, position) =
                            publish_quiet(&gridctl, &work, &state, &route, &host, value, &tag);
                        sent.push((route.clone(), value, outcome, position));
                    }
                    (route, sent, Instant::now())
                })
            })
            .collect();
        for thread in threads {
            let (route, sent, done) = thread
                .join()
                .map_err(|_| Failure::new("every publishing thread to finish", "one panicked"))?;
            let mut counts: BTreeMap<String, u64> = BTreeMap::new();
            for (route, value, outcome, position) in &sent {
                *counts.entry(outcome.clone()).or_default() += 1;
                record(
                    &work,
                    &serde_json::json!({
                        "route": route,
                        "value": value,
                        "outcome": outcome,
                        "position": position,
                    }),
                )?;
            }
            cx.say(format_args!(
                "{route}: {} publishes in {} ms, by outcome {counts:?}",
                sent.len(),
                done.duration_since(started).as_millis()
            ));
            if counts.keys().any(|o| o != "succeeded") {
                return Err(Failure::new(
                    format!("every publish on {route} to succeed"),
                    format!("{counts:?}"),
                ));
            }
        }
        Ok(())
    }
}

// ---- expect-delivered -----------------------------------------------------------------

struct ExpectDelivered {
    route: String,
    within: Duration,
}

pub fn parse_expect_delivered(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let route = node.argument("a route name")?;
    if let Some(d) = node.count("duplicates")?
        && d != 0
    {
        return Err(node.error("only duplicates=0 can be expected"));
    }
    let within = match node.count("within")? {
        Some(s) if Duration::from_secs(s) > DELIVERY_SETTLE_TIMEOUT => {
            return Err(node.error(format!(
                "`within` is at most DELIVERY_SETTLE_TIMEOUT ({} s)",
                DELIVERY_SETTLE_TIMEOUT.as_secs()
            )));
        }
        Some(s) => Duration::from_secs(s),
        None => DELIVERY_SETTLE_TIMEOUT,
    };
    Ok(Box::new(ExpectDelivered { route, within }))
}

fn gridctl_json(cx: &mut Context<'_>, args: &[&str]) -> Result<Value, Failure> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let output = cx.gridctl(&args)?;
    serde_json::from_str(output.stdout.trim()).map_err(|_| {
        Failure::new(
            format!(
                "JSON from gridctl {}",
                args.join(" ".as_ref()).to_string_lossy()
            ),
            format!("stdout {:?}, stderr {:?}", output.stdout, output.stderr),
        )
    })
}

/// The publisher's view of the route: (publisher, published, receipted per destination,
/// class).
fn route_view(
    cx: &mut Context<'_>,
    route: &str,
) -> Result<(String, u64, BTreeMap<String, u64>, String), Failure> {
    let all = gridctl_json(cx, &["inspect", "routes", "--json"])?;
    let view = all
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|r| r["route"] == route && r["role"] == "publisher")
        })
        .cloned()
        .ok_or_else(|| {
            Failure::new(
                format!("a running publisher of route {route}"),
                all.to_string(),
            )
        })?;
    let destinations: Vec<String> = view["destinations"]
        .as_array()
        .map(|d| {
            d.iter()
                .filter_map(|x| x["host"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let receipted = destinations
        .into_iter()
        .map(|d| {
            let n = view["receipted"][&d].as_u64().unwrap_or(0);
            (d, n)
        })
        .collect();
    Ok((
        view["host"].as_str().unwrap_or_default().to_owned(),
        view["published"].as_u64().unwrap_or(0),
        receipted,
        view["class"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Waits until every destination's receipt covers the last published position.
fn settle(
    cx: &mut Context<'_>,
    route: &str,
    within: Duration,
) -> Result<(String, u64, BTreeMap<String, u64>, String), Failure> {
    let started = Instant::now();
    loop {
        let view = route_view(cx, route)?;
        if view.2.values().all(|&r| r == view.1) {
            cx.say(format_args!(
                "route {route}: every receipt covers position {} (after {} ms)",
                view.1,
                started.elapsed().as_millis()
            ));
            return Ok(view);
        }
        if started.elapsed() > within {
            return Err(Failure::new(
                format!(
                    "every destination's receipt to cover position {} within {} s",
                    view.1,
                    within.as_secs()
                ),
                format!("receipted {:?}", view.2),
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn held(cx: &mut Context<'_>, route: &str, host: &str) -> Result<Vec<(u64, f64)>, Failure> {
    let json = gridctl_json(cx, &["inspect", "inbox", route, "--host", host, "--json"])?;
    Ok(json
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| Some((v["position"].as_u64()?, v["value"].as_f64()?)))
                .collect()
        })
        .unwrap_or_default())
}

impl Step for ExpectDelivered {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let route = &self.route;
        let (publisher, published, receipted, class) = settle(cx, route, self.within)?;
        let sequence = held(cx, route, &publisher)?;
        // Gap-free from 1, each position once.
        for (i, (position, _)) in sequence.iter().enumerate() {
            if *position != i as u64 + 1 {
                return Err(Failure::new(
                    format!("the publisher's sequence of {route} to be gap-free from 1"),
                    format!("position {position} at index {i}"),
                ));
            }
        }
        if sequence.len() as u64 != published {
            return Err(Failure::new(
                format!("{published} publications held by the publisher"),
                format!("{}", sequence.len()),
            ));
        }
        // Values published by this journey's steps (distinct by construction): none
        // twice, none that no step sent. (A route fed by a model has no such record.)
        let work = cx.work_dir().to_owned();
        let sent = recorded(&work, route);
        let mut seen = BTreeSet::new();
        for (position, value) in sequence.iter().filter(|_| !sent.is_empty()) {
            if !seen.insert(value.to_bits()) {
                return Err(Failure::new(
                    format!("no value published twice on {route}"),
                    format!("{value} again at position {position}"),
                ));
            }
        }
        // Every acknowledged publish at its position; nothing no step sent.
        let by_position: BTreeMap<u64, f64> = sequence.iter().copied().collect();
        let mut acknowledged = 0;
        for entry in &sent {
            if entry["outcome"] == "succeeded" {
                acknowledged += 1;
                let position = entry["position"].as_u64().unwrap_or(0);
                let value = entry["value"].as_f64();
                if by_position.get(&position).copied() != value {
                    return Err(Failure::new(
                        format!("acknowledged publish {entry} in the publisher's sequence"),
                        format!("position {position} holds {:?}", by_position.get(&position)),
                    ));
                }
            }
        }
        let refused: BTreeSet<u64> = sent
            .iter()
            .filter(|e| e["outcome"] == "refused")
            .filter_map(|e| e["value"].as_f64().map(f64::to_bits))
            .collect();
        if let Some((position, value)) = sequence
            .iter()
            .find(|(_, v)| refused.contains(&v.to_bits()))
        {
            return Err(Failure::new(
                format!("no refused publish on {route} to be published"),
                format!("{value} at position {position}"),
            ));
        }
        let sent_values: BTreeSet<u64> = sent
            .iter()
            .filter_map(|e| e["value"].as_f64().map(f64::to_bits))
            .collect();
        if let Some((position, value)) = sequence
            .iter()
            .filter(|_| !sent.is_empty())
            .find(|(_, v)| !sent_values.contains(&v.to_bits()))
        {
            return Err(Failure::new(
                format!("only values the journey sent on {route}"),
                format!("{value} at position {position}, which no step published"),
            ));
        }
        for destination in receipted.keys() {
            let inbox = held(cx, route, destination)?;
            let expected: Vec<(u64, f64)> = if class == "latest" {
                sequence.last().copied().into_iter().collect()
            } else {
                sequence.clone()
            };
            if inbox != expected {
                let first = inbox
                    .iter()
                    .zip(&expected)
                    .position(|(a, b)| a != b)
                    .unwrap_or(inbox.len().min(expected.len()));
                return Err(Failure::new(
                    format!(
                        "{destination}'s inbox of {route} to equal the publisher's sequence ({} values)",
                        expected.len()
                    ),
                    format!(
                        "{} values; first difference at index {first}: {:?} vs {:?}",
                        inbox.len(),
                        inbox.get(first),
                        expected.get(first)
                    ),
                ));
            }
        }
        cx.say(format_args!(
            "route {route}: {} destination inbox(es) equal the publisher's {} values ({class}); {} publishes sent, {acknowledged} acknowledged, none twice, none lost",
            receipted.len(),
            sequence.len(),
            sent.len()
        ));
        Ok(())
    }
}

// ---- expect-receipts ------------------------------------------------------------------

struct ExpectReceipts {
    route: String,
}

pub fn parse_expect_receipts(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let route = node.argument("a route name")?;
    match node.property("verified")?.map(|e| e.value().clone()) {
        Some(KdlValue::Bool(true)) | None => {}
        _ => return Err(node.error("only verified=#true can be expected")),
    }
    Ok(Box::new(ExpectReceipts { route }))
}

impl Step for ExpectReceipts {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        settle(cx, &self.route, DELIVERY_SETTLE_TIMEOUT)?;
        let args: Vec<OsString> = ["inspect", "receipts", &self.route, "--verify", "--json"]
            .iter()
            .map(OsString::from)
            .collect();
        let output = cx.gridctl(&args)?;
        let json: Value = serde_json::from_str(output.stdout.trim()).map_err(|_| {
            Failure::new(
                "JSON receipts",
                format!("{:?} {:?}", output.stdout, output.stderr),
            )
        })?;
        let count = json["receipts"].as_array().map_or(0, Vec::len);
        if json["verified"] != true || output.status.code() != Some(0) || count == 0 {
            return Err(Failure::new(
                format!("every receipt of {} to verify offline", self.route),
                json.to_string(),
            ));
        }
        if json["outstanding"]
            .as_object()
            .is_some_and(|o| !o.is_empty())
        {
            return Err(Failure::new(
                format!("nothing outstanding on {}", self.route),
                json["outstanding"].to_string(),
            ));
        }
        cx.say(format_args!(
            "route {}: {count} receipt(s), every signature verified with the recipients' public keys",
            self.route
        ));
        Ok(())
    }
}

// ---- expect-plaintext -----------------------------------------------------------------

/// `expect-plaintext HOST route="R" present=#false|#true` — every value of R's
/// sequence (read at its publisher) is searched for in every file under HOST's store,
/// as its 8 big-endian bytes (the form a plain route stores): with `present=#false` none
/// may be found (an encrypted route's recipient journals sealed values only); with
/// `present=#true` the newest must be (the check's own control, on a plain route).
/// Only values whose 8 bytes hold at most two zero bytes are searched: a value like
/// 2.25 (`40 02 00 00 00 00 00 00`) also reads as a small integer in any binary file.
struct Plaintext {
    host: String,
    route: String,
    present: bool,
}

pub fn parse_plaintext(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.argument("a host name")?;
    let route = node
        .string("route")?
        .ok_or_else(|| node.error("`expect-plaintext` needs route=\"R\""))?;
    let present = match node.property("present")?.map(|e| e.value().clone()) {
        Some(KdlValue::Bool(b)) => b,
        _ => return Err(node.error("`expect-plaintext` needs present=#true or #false")),
    };
    Ok(Box::new(Plaintext {
        host,
        route,
        present,
    }))
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files_under(&path, out);
            } else {
                out.push(path);
            }
        }
    }
}

impl Step for Plaintext {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let (publisher, ..) = route_view(cx, &self.route)?;
        let sequence = held(cx, &self.route, &publisher)?;
        let mut files = Vec::new();
        files_under(&cx.host_dir(&self.host).join("store"), &mut files);
        let contents: Vec<(PathBuf, Vec<u8>)> = files
            .into_iter()
            .filter_map(|f| std::fs::read(&f).ok().map(|b| (f, b)))
            .collect();
        // One pass over each file: every 8-byte window looked up among the values'
        // big-endian encodings (sorted; a first-byte table skips most windows).
        let search = |values: &[f64]| -> Option<(f64, PathBuf)> {
            let mut needles: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
            needles.sort_unstable();
            let mut first = [false; 256];
            for n in &needles {
                first[(n >> 56) as usize] = true;
            }
            for (file, bytes) in &contents {
                for w in bytes.windows(8) {
                    if !first[w[0] as usize] {
                        continue;
                    }
                    let bits = u64::from_be_bytes(<[u8; 8]>::try_from(w).expect("8 bytes"));
                    if needles.binary_search(&bits).is_ok() {
                        return Some((f64::from_bits(bits), file.clone()));
                    }
                }
            }
            None
        };
        let distinctive = |v: &f64| v.to_be_bytes().iter().filter(|b| **b == 0).count() <= 2;
        if self.present {
            let Some((position, value)) = sequence.last().filter(|(_, v)| distinctive(v)) else {
                return Err(Failure::new("a value published on the route", "none"));
            };
            if search(&[*value]).is_none() {
                return Err(Failure::new(
                    format!(
                        "{value} (position {position}) in {}'s store files",
                        self.host
                    ),
                    format!("not found in {} files", contents.len()),
                ));
            }
            cx.say(format_args!(
                "{}: the newest value {value} is readable in its store (a plain route)",
                self.host
            ));
            return Ok(());
        }
        let checked: Vec<&(u64, f64)> = sequence.iter().filter(|(_, v)| distinctive(v)).collect();
        if checked.is_empty() {
            return Err(Failure::new(
                format!(
                    "values of route {} distinctive enough to search for",
                    self.route
                ),
                "none (publish values with a busy mantissa, e.g. 1/3)",
            ));
        }
        let values: Vec<f64> = checked.iter().map(|(_, v)| *v).collect();
        if let Some((value, file)) = search(&values) {
            let position = checked
                .iter()
                .find(|(_, v)| *v == value)
                .map_or(0, |(p, _)| *p);
            return Err(Failure::new(
                format!(
                    "no plaintext of route {} in {}'s store files",
                    self.route, self.host
                ),
                format!("{value} (position {position}) in {}", cx.show_path(&file)),
            ));
        }
        cx.say(format_args!(
            "{}: none of {} values of {} (of {}) is readable in its {} store files",
            self.host,
            checked.len(),
            self.route,
            sequence.len(),
            contents.len()
        ));
        Ok(())
    }
}
