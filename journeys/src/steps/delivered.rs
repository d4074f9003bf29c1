//! What must hold after values were published (SPEC C4), through the oracles
//! `delivered_once` and `receipts_verify`.
//!
//! - `expect-delivered ROUTE [duplicates=0] [within=S]` — waits (bounded) until every
//!   destination's receipt covers the publisher's last position, then: each
//!   destination's inbox equals the publisher's sequence exactly (Ordered; Latest: its
//!   newest value), the sequence is gap-free from 1; when the journey's own steps
//!   published on the route (distinct values), no value is in it twice, every
//!   acknowledged publish is at its position, and nothing is in it that no step sent.
//! - `expect-receipts ROUTE verified=#true` — `gridctl inspect receipts ROUTE --verify`:
//!   every signature verifies offline with the recipients' public keys and nothing is
//!   outstanding.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use kdl::KdlValue;

use super::delivery::recorded;
use super::gridctl::{gridctl_json, json_of};
use super::{Attempt, Step, poll};
use crate::context::Context;
use crate::error::Failure;
use crate::oracles::delivered_once::{self, Held};
use crate::oracles::receipts_verify;
use crate::step::{Node, ParseError};

/// How long `expect-delivered` and `expect-receipts` wait for receipts to cover
/// everything published.
pub const DELIVERY_SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

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

/// The publisher's view of the route: (publisher, published, receipted per destination,
/// class).
pub(super) fn route_view(
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
    let view = poll(cx, within, |cx| {
        let view = route_view(cx, route)?;
        Ok(if view.2.values().all(|&r| r == view.1) {
            Attempt::Done(view)
        } else {
            Attempt::Again(Failure::new(
                format!(
                    "every destination's receipt to cover position {} within {} s",
                    view.1,
                    within.as_secs()
                ),
                format!("receipted {:?}", view.2),
            ))
        })
    })?;
    cx.say(format_args!(
        "route {route}: every receipt covers position {} (after {} ms)",
        view.1,
        started.elapsed().as_millis()
    ));
    Ok(view)
}

/// The lowest position each host's journal of `route` holds (`held_from` of `inspect
/// routes`), by host.
fn held_from(cx: &mut Context<'_>, route: &str) -> Result<BTreeMap<String, u64>, Failure> {
    let all = gridctl_json(cx, &["inspect", "routes", "--json"])?;
    Ok(all
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|r| r["route"] == route)
                .filter_map(|r| Some((r["host"].as_str()?.to_owned(), r["held_from"].as_u64()?)))
                .collect()
        })
        .unwrap_or_default())
}

pub(super) fn held(cx: &mut Context<'_>, route: &str, host: &str) -> Result<Vec<Held>, Failure> {
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
        let sent = recorded(cx.work_dir(), route)?;
        let mut inboxes = Vec::new();
        for destination in receipted.keys() {
            inboxes.push((destination.clone(), held(cx, route, destination)?));
        }
        let held_from = held_from(cx, route)?;
        let acknowledged = delivered_once::check(&delivered_once::Route {
            name: route,
            class: &class,
            published,
            sequence: &sequence,
            sent: &sent,
            inboxes: &inboxes,
            held_from: &held_from,
            publisher: &publisher,
        })?;
        let purged = match held_from.get(&publisher).copied().unwrap_or(1) {
            1 => String::new(),
            from => format!(" (held from position {from}; below it, purged once receipted)"),
        };
        cx.say(format_args!(
            "route {route}: {} destination inbox(es) equal the publisher's {} values{purged} ({class}); {} publishes sent, {acknowledged} acknowledged, none twice, none lost",
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
        let json = json_of(&output, "gridctl inspect receipts")?;
        let count = receipts_verify::check(&self.route, &json, output.status.code())?;
        cx.say(format_args!(
            "route {}: {count} receipt(s), every signature verified with the recipients' public keys",
            self.route
        ));
        Ok(())
    }
}
