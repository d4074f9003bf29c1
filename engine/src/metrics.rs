//! Metrics of one gridd process (ground floor: imports nothing of the crate). The
//! rooms count what happens as it happens — operations answered, batches applied,
//! receipts recorded, push retries, fsync latency — into the process-wide series here;
//! the composition root adds what the rooms hold right now (outstanding values, grant
//! units, runs, authority term and leader) when a scrape asks, and serves the text on
//! the host's loopback `metrics=` address (see `docs/observability.md`).
//!
//! Counted series are the process's: hosts packed into one gridd add into the same
//! series. Held series are the serving host's.

use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A series' labels, as (name, value) pairs.
pub type Labels = Vec<(&'static str, String)>;

/// The smallest fsync bucket, in seconds (100 µs); each next one doubles it.
const FSYNC_BUCKET_FIRST_SECONDS: f64 = 0.000_1;
/// Buckets of the fsync histogram: 100 µs to ~3.3 s.
const FSYNC_BUCKETS: u16 = 16;

/// The smallest bucket of the tag latency histograms, in seconds (100 µs).
const TAG_LATENCY_BUCKET_FIRST_SECONDS: f64 = 0.000_1;
/// Each next tag latency bucket is this factor wider: fine enough for a p99.
const TAG_LATENCY_BUCKET_FACTOR: f64 = 1.25;
/// Buckets of the tag latency histograms: 100 µs to ~2 minutes.
const TAG_LATENCY_BUCKETS: u16 = 64;

/// The process-wide counted series.
struct Counted {
    tag_entries: Family<Labels, Counter>,
    tag_device_to_durable_seconds: Histogram,
    tag_received_to_durable_seconds: Histogram,
    operations: Family<Labels, Counter>,
    batches_applied: Counter,
    receipts: Counter,
    push_retries: Counter,
    checkpoint_purged: Counter,
    archived: Counter,
    fsync_seconds: Histogram,
    owner_requests: Family<Labels, Counter>,
    control_inspections: Family<Labels, Counter>,
}

static COUNTED: LazyLock<Counted> = LazyLock::new(|| Counted {
    tag_entries: Family::default(),
    tag_device_to_durable_seconds: Histogram::new(exponential_buckets(
        TAG_LATENCY_BUCKET_FIRST_SECONDS,
        TAG_LATENCY_BUCKET_FACTOR,
        TAG_LATENCY_BUCKETS,
    )),
    tag_received_to_durable_seconds: Histogram::new(exponential_buckets(
        TAG_LATENCY_BUCKET_FIRST_SECONDS,
        TAG_LATENCY_BUCKET_FACTOR,
        TAG_LATENCY_BUCKETS,
    )),
    operations: Family::default(),
    batches_applied: Counter::default(),
    receipts: Counter::default(),
    push_retries: Counter::default(),
    checkpoint_purged: Counter::default(),
    archived: Counter::default(),
    owner_requests: Family::default(),
    control_inspections: Family::default(),
    fsync_seconds: Histogram::new(exponential_buckets(
        FSYNC_BUCKET_FIRST_SECONDS,
        2.0,
        FSYNC_BUCKETS,
    )),
});

/// An operation answered for the first time (a re-sent id's retained answer is not
/// counted again): `kind` as [`crate::protocol::Request::kind`], `outcome`
/// `succeeded` or `failed`.
pub fn operation_answered(kind: &'static str, outcome: &'static str) {
    COUNTED
        .operations
        .get_or_create(&vec![
            ("kind", kind.to_owned()),
            ("outcome", outcome.to_owned()),
        ])
        .inc();
}

/// One input batch applied to a model (an operation's, a route's or a tag's).
pub fn batch_applied() {
    COUNTED.batches_applied.inc();
}

/// Entries a checkpoint covered, purged durably.
pub fn checkpoint_purged(entries: u64) {
    COUNTED.checkpoint_purged.inc_by(entries);
}

/// Answers moved from the hot store to the archive, durably.
pub fn archived(answers: u64) {
    COUNTED.archived.inc_by(answers);
}

/// The count of control calls an owner (`host`) took `via` its Unix socket
/// (`socket`), a peer's `POST /control` (`transport`) or its own control plane
/// (`local`): looked up once by its holder, then one atomic add a call (the socket's
/// calls are a hot path). Opening a control-plane panel moves no host's count; only an
/// explicit inspection does.
pub fn owner_requests(host: &str, via: &'static str) -> Counter {
    COUNTED
        .owner_requests
        .get_or_create(&vec![("host", host.to_owned()), ("via", via.to_owned())])
        .clone()
}

/// One explicit inspection by `host`'s control plane of `owner` ended, leaving it
/// `state` (`retained`, `uncertain`, `unreachable`).
pub fn control_inspection(host: &str, owner: &str, state: &'static str) {
    COUNTED
        .control_inspections
        .get_or_create(&vec![
            ("host", host.to_owned()),
            ("owner", owner.to_owned()),
            ("state", state.to_owned()),
        ])
        .inc();
}

/// One destination's receipt recorded at its publisher.
pub fn receipt_recorded() {
    COUNTED.receipts.inc();
}

/// One push that did not get a receipt and will be sent again.
pub fn push_retried() {
    COUNTED.push_retries.inc();
}

/// A tag observation journaled durably: its quality (`good`, `debt`, `refused`), and
/// the seconds from the device's timestamp (when the protocol has one) and from the
/// host's receipt to the end of the fsync that made it durable.
pub fn tag_journaled(
    quality: &'static str,
    device_to_durable: Option<f64>,
    received_to_durable: f64,
) {
    COUNTED
        .tag_entries
        .get_or_create(&vec![("quality", quality.to_owned())])
        .inc();
    if let Some(seconds) = device_to_durable {
        COUNTED
            .tag_device_to_durable_seconds
            .observe(seconds.max(0.0));
    }
    COUNTED
        .tag_received_to_durable_seconds
        .observe(received_to_durable.max(0.0));
}

/// Runs `sync` (an fsync of a store) and observes how long it took.
pub fn fsync<T>(sync: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = sync();
    COUNTED
        .fsync_seconds
        .observe(started.elapsed().as_secs_f64());
    result
}

/// Series filled at scrape time from what a host holds now.
#[derive(Default)]
pub struct Held {
    registry: Registry,
}

impl Held {
    /// A family of gauges `name` (units last), one per label set given.
    pub fn gauges(&mut self, name: &str, help: &str, values: Vec<(Labels, i64)>) {
        let family = Family::<Labels, Gauge>::default();
        for (labels, value) in values {
            family.get_or_create(&labels).set(value);
        }
        self.registry.register(name, help, family);
    }

    /// One gauge `name` (units last) without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: i64) {
        let gauge = Gauge::<i64>::default();
        gauge.set(value);
        self.registry.register(name, help, gauge);
    }

    /// A family of counters `name` (`_total` is added) whose totals the host keeps
    /// durably (they survive a restart).
    pub fn totals(&mut self, name: &str, help: &str, values: Vec<(Labels, u64)>) {
        let family = Family::<Labels, Counter>::default();
        for (labels, value) in values {
            family.get_or_create(&labels).inc_by(value);
        }
        self.registry.register(name, help, family);
    }
}

/// The text a scrape answers: the process's counted series, then `held`.
pub fn render(held: Held) -> String {
    let mut registry = held.registry;
    let counted = &*COUNTED;
    registry.register(
        "grid_operations",
        "Operations answered, by request kind and outcome",
        counted.operations.clone(),
    );
    registry.register(
        "grid_tag_entries",
        "Tag observations journaled durably, by quality",
        counted.tag_entries.clone(),
    );
    registry.register(
        "grid_tag_device_to_durable_seconds",
        "From a tag observation's device timestamp to the fsync that journaled it",
        counted.tag_device_to_durable_seconds.clone(),
    );
    registry.register(
        "grid_tag_received_to_durable_seconds",
        "From a tag observation's receipt at this host to the fsync that journaled it",
        counted.tag_received_to_durable_seconds.clone(),
    );
    registry.register(
        "grid_batches_applied",
        "Input batches applied to models",
        counted.batches_applied.clone(),
    );
    registry.register(
        "grid_receipts",
        "Destination receipts recorded at their publisher",
        counted.receipts.clone(),
    );
    registry.register(
        "grid_push_retries",
        "Pushes sent again after a failure or a refusal",
        counted.push_retries.clone(),
    );
    registry.register(
        "grid_checkpoint_purged_entries",
        "Store entries a checkpoint covered, purged",
        counted.checkpoint_purged.clone(),
    );
    registry.register(
        "grid_archived_answers",
        "Answers moved from the hot store to the archive",
        counted.archived.clone(),
    );
    registry.register(
        "grid_owner_requests",
        "Control calls an owner took, by host and way in (socket, transport, local)",
        counted.owner_requests.clone(),
    );
    registry.register(
        "grid_control_inspections",
        "Explicit inspections a control plane made, by host, owner and the state they left",
        counted.control_inspections.clone(),
    );
    registry.register(
        "grid_fsync_seconds",
        "Latency of store fsyncs",
        counted.fsync_seconds.clone(),
    );
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_and_held_series_render_with_units_last() {
        operation_answered("input", "succeeded");
        fsync(|| ());
        let mut held = Held::default();
        held.gauges(
            "grid_outstanding_values",
            "Values not receipted yet",
            vec![(vec![("route", "r".into()), ("destination", "b".into())], 3)],
        );
        held.totals(
            "grid_publications",
            "Values published",
            vec![(vec![("route", "r".into())], 5)],
        );
        let text = render(held);
        assert!(
            text.contains("grid_operations_total{kind=\"input\",outcome=\"succeeded\"}"),
            "{text}"
        );
        assert!(
            text.contains("grid_outstanding_values{route=\"r\",destination=\"b\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("grid_publications_total{route=\"r\"} 5"),
            "{text}"
        );
        assert!(text.contains("grid_fsync_seconds_count"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
