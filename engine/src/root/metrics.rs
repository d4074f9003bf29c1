//! The host's `metrics=` endpoint: `GET /metrics` answers Prometheus (OpenMetrics)
//! text on plain HTTP, on a loopback address only — the process's counted series
//! (`crate::metrics`) and what this host's rooms hold right now.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response};

use super::Started;
use crate::delivery::api::{DeliveryCall, DeliveryReply};
use crate::metrics::{Held, Labels};
use crate::processes::api::{ProcessCall, ProcessReply};

/// The metrics address of a host's configuration, refused unless it is a loopback
/// IP:PORT (the owner checks again what `gridctl check` checked).
pub fn address(metrics: &str) -> Result<SocketAddr, String> {
    match metrics.parse::<SocketAddr>() {
        Ok(address) if address.ip().is_loopback() => Ok(address),
        Ok(_) => Err(format!(
            "metrics = \"{metrics}\" is not a loopback address: metrics are served on plain HTTP, to this machine only"
        )),
        Err(_) => Err(format!("metrics = \"{metrics}\" is not IP:PORT")),
    }
}

/// Binds `address` (refusing the start when taken) and serves scrapes on `runtime`.
pub fn serve(
    address: SocketAddr,
    started: Started,
    runtime: &tokio::runtime::Handle,
) -> Result<(), String> {
    let started = Arc::new(started);
    crate::transport::plain::serve(address, "metrics", None, runtime, move |request| {
        scrape(request, started.clone())
    })?;
    tracing::info!(%address, "metrics served");
    Ok(())
}

async fn scrape(
    request: Request<hyper::body::Incoming>,
    started: Arc<Started>,
) -> Response<Full<Bytes>> {
    if request.method() != hyper::Method::GET || request.uri().path() != "/metrics" {
        return Response::builder()
            .status(404)
            .body(Full::new(Bytes::from_static(
                b"only GET /metrics is served\n",
            )))
            .expect("a static response");
    }
    // The rooms' control reads block: off the runtime's workers.
    let text = tokio::task::spawn_blocking(move || crate::metrics::render(held(&started)))
        .await
        .unwrap_or_default();
    Response::builder()
        .header("content-type", crate::metrics::CONTENT_TYPE)
        .body(Full::new(Bytes::from(text)))
        .expect("a valid content type")
}

fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

/// What this host's rooms hold now.
fn held(started: &Started) -> Held {
    let mut held = Held::default();
    // One lock of the host for everything it holds (never held across another call).
    let (tags, store) = {
        let host = started.host.lock().unwrap_or_else(|p| p.into_inner());
        (host.tag_states(), host.store_gauges())
    };
    held.gauge(
        "grid_store_acknowledged_writes",
        "Fsynced writes of the host's store, counted in the store and in its high-water mark",
        store.acknowledged_writes as i64,
    );
    held.gauge(
        "grid_store_journal_bytes",
        "Bytes of the host store's write-ahead journal",
        store.journal_bytes as i64,
    );
    held.gauges(
        "grid_store_table_bytes",
        "Bytes of each keyspace's tables in the host's store",
        store
            .keyspaces
            .iter()
            .map(|k| (labels([("keyspace", &k.name)]), k.table_bytes as i64))
            .collect(),
    );
    if let Some(archive) = &store.archive {
        held.gauge(
            "grid_archive_lag_seconds",
            "How far the oldest answer in the hot store is past the hot window (retain hot-days)",
            archive.lag_seconds as i64,
        );
        held.gauge(
            "grid_archive_bytes",
            "Bytes of the archive segments held",
            archive.bytes as i64,
        );
        held.gauge(
            "grid_archive_failing",
            "1 while the archive refuses segments (a remote store that does not answer), else 0",
            i64::from(archive.waiting.is_some() || archive.last_error.is_some()),
        );
    }
    if !store.checkpoints.is_empty() {
        let now_ms = crate::store::now_ms();
        held.gauges(
            "grid_checkpoint_position",
            "The journal position each installed checkpoint covers (a model's batch)",
            store
                .checkpoints
                .iter()
                .map(|c| {
                    (
                        labels([("room", &c.room), ("name", &c.name)]),
                        c.position as i64,
                    )
                })
                .collect(),
        );
        held.gauges(
            "grid_checkpoint_age_seconds",
            "Seconds since each installed checkpoint was taken",
            store
                .checkpoints
                .iter()
                .map(|c| {
                    (
                        labels([("room", &c.room), ("name", &c.name)]),
                        (now_ms.saturating_sub(c.at_ms) / 1_000) as i64,
                    )
                })
                .collect(),
        );
    }
    if !tags.is_empty() {
        held.gauges(
            "grid_tag_outstanding_debt",
            "Debt entries journaled since the tag's last good observation",
            tags.iter()
                .map(|t| (labels([("tag", &t.name)]), t.debt as i64))
                .collect(),
        );
        held.gauges(
            "grid_tag_connection",
            "1 for the state an adapter last reported for its tag (connecting, connected, online, offline, …)",
            tags.iter()
                .filter_map(|t| {
                    t.connection
                        .as_ref()
                        .map(|c| (labels([("tag", &t.name), ("state", c)]), 1))
                })
                .collect(),
        );
    }
    if let Some(delivery) = &started.delivery
        && let DeliveryReply::Routes { routes, .. } = delivery.handle_local(DeliveryCall::Routes)
    {
        let mut published = Vec::new();
        let mut outstanding = Vec::new();
        for view in routes.iter().filter(|v| v.role == "publisher") {
            published.push((labels([("route", &view.route.name)]), view.published));
            for (destination, values) in &view.outstanding {
                outstanding.push((
                    labels([("route", &view.route.name), ("destination", destination)]),
                    *values as i64,
                ));
            }
        }
        held.totals(
            "grid_publications",
            "Values published durably, by route (this host publishes)",
            published,
        );
        held.gauges(
            "grid_outstanding_values",
            "Values published and not receipted yet, by route and destination",
            outstanding,
        );
    }
    if let Some(processes) = &started.processes {
        if let ProcessReply::Processes { runs, .. } = processes.handle_local(ProcessCall::Processes)
        {
            let runs = [
                ("succeeded", runs.succeeded),
                ("failed", runs.failed),
                ("unknown", runs.unknown),
                ("running", runs.running),
            ];
            held.gauges(
                "grid_process_runs",
                "Runs this host received, by outcome",
                runs.iter()
                    .map(|(outcome, n)| (labels([("outcome", outcome)]), *n as i64))
                    .collect(),
            );
        }
        if let ProcessReply::Grants { grants, .. } = processes.handle_local(ProcessCall::Grants) {
            let mut units = Vec::new();
            for g in &grants {
                for (state, n) in [
                    ("allocated", g.allocated),
                    ("available", g.available()),
                    ("reserved", g.reserved),
                    ("consumed", g.consumed),
                    ("surrendered", g.surrendered),
                    ("unknown", g.unknown),
                ] {
                    units.push((labels([("grant", &g.name), ("state", state)]), n as i64));
                }
            }
            held.gauges(
                "grid_grant_units",
                "Execution units of the grants this host issued, by state",
                units,
            );
        }
    }
    if !started.authorities.by_membership.is_empty() {
        let (mut term, mut leader, mut applied) = (Vec::new(), Vec::new(), Vec::new());
        for (membership, authority) in &started.authorities.by_membership {
            let status = authority.status();
            let at = labels([("membership", membership)]);
            term.push((at.clone(), status.term as i64));
            let leads = status.leader.as_deref() == Some(status.participant.as_str());
            leader.push((at.clone(), i64::from(leads)));
            applied.push((at, status.last_applied.unwrap_or(0) as i64));
        }
        held.gauges(
            "grid_authority_term",
            "The Raft term this voter is in",
            term,
        );
        held.gauges(
            "grid_authority_leader",
            "1 while this voter is the leader of its membership's authority, else 0",
            leader,
        );
        held.gauges(
            "grid_authority_applied_index",
            "The last log index this voter applied",
            applied,
        );
    }
    held
}
