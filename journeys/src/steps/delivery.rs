//! Value delivery (SPEC C4): publishing and crash cycles; what must hold afterwards is
//! checked by the steps of `delivered.rs`.
//!
//! - `publish ROUTE value=X as=HOST [expect=OUTCOME]` — `gridctl publish ROUTE X --as
//!   HOST --json`; the outcome must be `expect` (default `succeeded`). Every publish
//!   sent is recorded in `$WORK/published.jsonl` (value, position when acknowledged).
//! - `publish-cycles ROUTE publisher=P recipient=R cycles=N seed=S` — N cycles: values
//!   are published one after another (each a distinct number) while, after a seeded
//!   random moment, the publisher or the recipient (seeded) is SIGKILLed; it is
//!   restarted and the next cycle begins. Publishes that fail or whose reply is lost
//!   are recorded as such and never re-sent.
//! - `publish-many ROUTE as=HOST count=N [during=ROUTE2 during-count=M] [start=V]` —
//!   N distinct values published one after another (and M on ROUTE2 at the same time);
//!   every publish must succeed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::gridctl::Quiet;
use super::{Outcome, Step, check_outcome, journal};
use crate::context::Context;
use crate::error::Failure;
use crate::limits::{PUBLISH_CYCLES_MAX, PUBLISH_MANY_MAX};
use crate::oracles::delivered_once::Published;
use crate::seeded::Seeded;
use crate::step::{Node, ParseError, kind};

/// The file in the work directory where every publish sent is recorded.
const PUBLISHED_FILE: &str = "published.jsonl";

fn record(work: &Path, published: &Published) -> Result<(), Failure> {
    journal::append(work, PUBLISHED_FILE, published)
}

/// Every publish the journey's steps sent on `route`.
pub(super) fn recorded(work: &Path, route: &str) -> Result<Vec<Published>, Failure> {
    let all: Vec<Published> = journal::read(work, PUBLISHED_FILE)?;
    Ok(all.into_iter().filter(|p| p.route == route).collect())
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
        super::check_detail(&json, self.detail.as_deref())?;
        let work = cx.work_dir().to_owned();
        record(
            &work,
            &Published {
                route: self.route.clone(),
                value: self.value.parse::<f64>().ok(),
                outcome: json["outcome"].as_str().unwrap_or_default().to_owned(),
                position: json["position"].as_u64(),
            },
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
    let publisher = node.required_host("publisher")?;
    let recipient = node.required_host("recipient")?;
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
    quiet: &Quiet,
    route: &str,
    host: &str,
    value: f64,
    tag: &str,
) -> (String, Option<u64>) {
    let args: Vec<OsString> = ["publish", route, &value.to_string(), "--as", host, "--json"]
        .iter()
        .map(OsString::from)
        .collect();
    match quiet.output(&args, tag) {
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
        let quiet = Quiet::new(cx);
        let work = cx.work_dir().to_owned();
        let mut rng = Seeded::new(self.seed);
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let mut kills: BTreeMap<String, u64> = BTreeMap::new();
        cx.say(format_args!(
            "{} cycles on {} (seed {}): publish from {} while SIGKILLing {} or {} at seeded moments",
            self.cycles, self.route, self.seed, self.publisher, self.publisher, self.recipient
        ));
        for cycle in 0..self.cycles {
            let victim = if rng.one_in(2) {
                self.publisher.clone()
            } else {
                self.recipient.clone()
            };
            let delay = Duration::from_millis(rng.below(150));
            let stop = Arc::new(AtomicBool::new(false));
            let thread = {
                let (quiet, stop) = (quiet.clone(), stop.clone());
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
                        let (outcome, position) = publish_quiet(&quiet, &route, &host, value, &tag);
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
                    &Published {
                        route: self.route.clone(),
                        value: Some(value),
                        outcome,
                        position,
                    },
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
        let quiet = Quiet::new(cx);
        let work = cx.work_dir().to_owned();
        let started = Instant::now();
        let threads: Vec<_> = self
            .streams
            .iter()
            .enumerate()
            .map(|(index, (route, count))| {
                let quiet = quiet.clone();
                let (route, count, host) = (route.clone(), *count, self.host.clone());
                // Distinct values per stream: start + index offset + j.
                let base = self.start + (index as f64) * 100_000.0;
                std::thread::spawn(move || {
                    let mut sent = Vec::new();
                    for j in 0..count {
                        let value = base + j as f64 + 0.5;
                        let tag = format!("many-{route}-{}-{j}", base as u64).replace('/', "_");
                        let (outcome, position) = publish_quiet(&quiet, &route, &host, value, &tag);
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
                    &Published {
                        route: route.clone(),
                        value: Some(*value),
                        outcome: outcome.clone(),
                        position: *position,
                    },
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
