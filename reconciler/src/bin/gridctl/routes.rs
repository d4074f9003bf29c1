//! `gridctl publish` and `gridctl inspect routes|inbox|receipts|receipted`: values on routes,
//! at their publishers and destinations.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::bail;
use grid_engine::delivery::api::{DeliveryCall, DeliveryReply, HeldValue, RouteView};
use grid_reconciler::observe;
use serde::Serialize;

use crate::Output;
use crate::report::{NotDone, Rendered, Report, emit};

/// A value published: its position at the publisher.
#[derive(Serialize)]
struct Published {
    route: String,
    position: u64,
    value: f64,
    host: String,
    outcome: &'static str,
}

impl Report for Published {
    fn text(&self) -> String {
        format!(
            "published {} on {} at position {}\n",
            self.value, self.route, self.position
        )
    }
}

/// `gridctl publish ROUTE VALUE --as HOST`.
pub fn publish(
    route: String,
    value: &str,
    host: &str,
    output: &Output,
) -> anyhow::Result<ExitCode> {
    let json = output.json;
    let not_done = |outcome, detail: String| NotDone {
        id: serde_json::json!({ "route": route }),
        outcome,
        detail,
    };
    let number: f64 = match value.trim().parse() {
        Ok(v) if f64::is_finite(v) => v,
        _ => {
            let detail = format!(
                "value `{}` is not a finite number; refused before capture, nothing was published",
                grid_spec::diagnostic::quoted(value)
            );
            emit(&not_done("refused", detail.clone()), json);
            eprintln!("gridctl: {detail}");
            return Ok(ExitCode::from(4));
        }
    };
    let call = DeliveryCall::Publish {
        route: route.clone(),
        value: number,
    };
    match grid_reconciler::routes::call(&output.state, host, call) {
        Ok(DeliveryReply::Published { route, position }) => {
            let published = Published {
                route,
                position,
                value: number,
                host: host.to_owned(),
                outcome: "succeeded",
            };
            emit(&published, json);
            Ok(ExitCode::SUCCESS)
        }
        Ok(DeliveryReply::Refused { reason }) => {
            emit(&not_done("refused", reason.clone()), json);
            eprintln!("gridctl: publish refused: {reason}");
            Ok(ExitCode::from(4))
        }
        Ok(other) => bail!("the host answered {other:?}"),
        Err(e) if e.contains("lost") => {
            emit(&not_done("unknown", e.clone()), json);
            eprintln!(
                "gridctl: {e}\n  whether the value was published is unknown; `gridctl inspect inbox {route} --host {host}` shows what the publisher holds (nothing is re-sent)"
            );
            Ok(ExitCode::from(3))
        }
        Err(e) => {
            emit(&not_done("refused", format!("{e}; nothing was sent")), json);
            eprintln!("gridctl: {e}; nothing was published");
            Ok(ExitCode::from(4))
        }
    }
}

/// The routes some hosts take part in, one entry per (host, route).
#[derive(Serialize)]
#[serde(transparent)]
struct Routes(Vec<RouteLine>);

#[derive(Serialize)]
struct RouteLine {
    host: String,
    route: String,
    membership: String,
    class: &'static str,
    encrypted: bool,
    /// A mapping: the geometry of the matrices it carries (issue 34).
    #[serde(skip_serializing_if = "Option::is_none")]
    matrix: Option<grid_engine::delivery::api::Geometry>,
    role: String,
    publisher: String,
    destinations: Vec<DestinationLine>,
    published: u64,
    receipted: BTreeMap<String, u64>,
    outstanding: BTreeMap<String, u64>,
    held: u64,
    /// The lowest position the host's journal of the route holds (below: purged).
    held_from: u64,
    /// Publisher of an Ordered route: its membership's Ordered pool on the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    ordered_pool: Option<grid_engine::delivery::api::OrderedPool>,
    /// Publisher: publications waiting for the route's capacity (a model serving
    /// several memberships), not yet given a position.
    deferred: u64,
    /// Publisher: the key generations each destination is sealed to and verified
    /// with now (rotated keys learned through the membership included).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    destination_keys: BTreeMap<String, grid_engine::delivery::api::KeyGenerations>,
}

#[derive(Serialize)]
struct DestinationLine {
    host: String,
    retired: bool,
}

impl RouteLine {
    fn of(host: String, r: RouteView) -> Self {
        RouteLine {
            host,
            class: r.route.class.name(),
            encrypted: r.route.encrypted,
            matrix: r.route.matrix,
            role: r.role,
            publisher: r.route.publisher,
            destinations: r
                .route
                .destinations
                .into_iter()
                .map(|d| DestinationLine {
                    host: d.host,
                    retired: d.retired,
                })
                .collect(),
            route: r.route.name,
            membership: r.route.membership,
            published: r.published,
            receipted: r.receipted,
            outstanding: r.outstanding,
            held: r.held,
            held_from: r.held_from,
            ordered_pool: r.ordered_pool,
            deferred: r.deferred,
            destination_keys: r.destination_keys,
        }
    }

    /// `, purged below N` when the host's journal of the route no longer starts at 1.
    fn purged(&self) -> String {
        if self.held_from > 1 {
            format!(", purged below {}", self.held_from)
        } else {
            String::new()
        }
    }

    fn text(&self) -> String {
        let h = &self.host;
        let class = self.class;
        let sealed = if self.encrypted { " encrypted" } else { "" };
        if self.role != "publisher" {
            return format!(
                "{h}: receives {} ({class}{sealed}, {}) from {}, holds through {}{}\n",
                self.route,
                self.membership,
                self.publisher,
                self.held,
                self.purged()
            );
        }
        let mut text = format!(
            "{h}: publishes {} ({class}{sealed}, {}) to {} destination(s), published through {}{}\n",
            self.route,
            self.membership,
            self.destinations.len(),
            self.published,
            self.purged()
        );
        for d in &self.destinations {
            let keys = self
                .destination_keys
                .get(&d.host)
                .map(|k| format!(" (keys: signing {}, mail {})", k.signing, k.mail))
                .unwrap_or_default();
            text += &format!(
                "    {}{}: receipted through {}, {} outstanding{keys}\n",
                d.host,
                if d.retired { " (retired)" } else { "" },
                self.receipted.get(&d.host).copied().unwrap_or(0),
                self.outstanding.get(&d.host).copied().unwrap_or(0)
            );
        }
        if let Some(pool) = &self.ordered_pool {
            text += &format!(
                "    {}'s Ordered pool on {h}: {} of {} retained (ordered-per-host)\n",
                pool.membership, pool.retained, pool.capacity
            );
        }
        if self.deferred > 0 {
            text += &format!(
                "    {} publication(s) wait for capacity (deferred, not yet positioned)\n",
                self.deferred
            );
        }
        text
    }
}

impl Report for Routes {
    fn text(&self) -> String {
        self.0.iter().map(RouteLine::text).collect()
    }
}

/// `gridctl inspect routes [--host NAME]`.
pub fn inspect_routes(host: Option<String>, output: &Output) -> anyhow::Result<ExitCode> {
    let hosts = match host {
        Some(h) => vec![h],
        None => observe::installed_hosts(&output.state),
    };
    let mut all = Vec::new();
    for h in &hosts {
        match grid_reconciler::routes::call(&output.state, h, DeliveryCall::Routes) {
            Ok(DeliveryReply::Routes { routes, .. }) => {
                all.extend(routes.into_iter().map(|r| RouteLine::of(h.clone(), r)))
            }
            Ok(other) => bail!("{h} answered {other:?}"),
            Err(e) if hosts.len() == 1 => bail!("{h}: {e}"),
            Err(_) => {}
        }
    }
    emit(&Routes(all), output.json);
    Ok(ExitCode::SUCCESS)
}

/// What a host holds of a route, from a position on.
#[derive(Serialize)]
#[serde(transparent)]
struct Held(Vec<HeldValue>);

impl Report for Held {
    fn text(&self) -> String {
        self.0
            .iter()
            .map(|v| format!("{} {}\n", v.position, v.value))
            .collect()
    }
}

/// `gridctl inspect inbox ROUTE --host NAME [--from POSITION]`.
pub fn inspect_inbox(
    route: &str,
    host: &str,
    from: u64,
    output: &Output,
) -> anyhow::Result<ExitCode> {
    let values = grid_reconciler::routes::held(&output.state, route, host, from)
        .map_err(anyhow::Error::msg)?;
    emit(&Held(values), output.json);
    Ok(ExitCode::SUCCESS)
}

/// `gridctl inspect receipts ROUTE [--verify]`; exit 1 when a signature fails.
pub fn inspect_receipts(route: &str, verify: bool, output: &Output) -> anyhow::Result<ExitCode> {
    let receipts = grid_reconciler::routes::receipts(&output.state, route, verify)
        .map_err(anyhow::Error::msg)?;
    emit(
        &Rendered::new(receipts.to_json(), receipts.render()),
        output.json,
    );
    Ok(if receipts.verified() == Some(false) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `gridctl inspect receipted`: whether every destination's receipt covers a position.
pub fn inspect_receipted(
    route: &str,
    position: u64,
    wait_ms: u64,
    output: &Output,
) -> anyhow::Result<ExitCode> {
    let host =
        grid_reconciler::routes::publisher_of(&output.state, route).map_err(anyhow::Error::msg)?;
    let call = DeliveryCall::Receipted {
        route: route.to_owned(),
        position,
        wait_ms,
    };
    let refused = |reason: String| {
        let detail = format!("inspect receipted refused: {reason}");
        emit(
            &NotDone {
                id: serde_json::json!({ "route": route, "position": position }),
                outcome: "refused",
                detail: detail.clone(),
            },
            output.json,
        );
        eprintln!("gridctl: {detail}");
        Ok(ExitCode::from(4))
    };
    let reply = match grid_reconciler::routes::call(&output.state, &host, call) {
        Ok(reply) => reply,
        Err(e) => return refused(e),
    };
    let DeliveryReply::Receipted {
        published,
        complete,
        covered,
        cohort,
        awaiting,
        missing,
        ..
    } = reply
    else {
        return match reply {
            DeliveryReply::Refused { reason } => refused(reason),
            other => bail!("the host answered {other:?}"),
        };
    };
    let text = if complete {
        format!(
            "{route} at {host}: position {position} is receipted by every destination of its cohort ({cohort}); receipts cover through {covered}"
        )
    } else if position > published {
        format!(
            "{route} at {host}: position {position} is not published yet (published: {published})"
        )
    } else {
        let more = (awaiting as usize).saturating_sub(missing.len());
        format!(
            "{route} at {host}: position {position} awaits the receipts of {awaiting} of {cohort} destinations ({}{}); receipts cover through {covered}",
            missing.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )
    };
    let json = serde_json::json!({
        "route": route,
        "host": host,
        "position": position,
        "published": published,
        "complete": complete,
        "covered": covered,
        "cohort": cohort,
        "awaiting": awaiting,
        "missing": missing,
    });
    emit(&Rendered::new(json, text), output.json);
    Ok(if complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
