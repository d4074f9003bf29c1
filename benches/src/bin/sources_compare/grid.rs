//! Grid's side: one host `edge` (`profiles sources`, `metrics=` on loopback) brought up
//! as the journeys do it (`grid_benches::bringup`), its tags and models from a topology
//! the benchmark writes; its metrics scraped over plain HTTP and its tags inspected over
//! the control socket.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply, TagReport};

use grid_benches::bringup::{GridHosts, one_gridd_per_host};
use grid_benches::procs::{Result, free_ports};

pub const HOST: &str = "edge";
/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The host, its ports and its control connection.
pub struct GridHost {
    pub hosts: GridHosts,
    pub metrics_port: u16,
    client: Client,
}

impl GridHost {
    /// Brings `edge` up under `work/NAME` with `body` (tags and models) after the host.
    pub fn start(bin_dir: &Path, work: &Path, name: &str, body: &str) -> Result<GridHost> {
        let ports = free_ports(2)?;
        let topology = format!(
            "grid version=1\n\n// Written by benches sources_compare.\n\
             host {HOST} listen=\"127.0.0.1:{}\" metrics=\"127.0.0.1:{}\" {{\n    profiles sources\n}}\n{body}",
            ports[0], ports[1]
        );
        let hosts = GridHosts::start(
            bin_dir,
            &work.join(name),
            "topology.kdl",
            &topology,
            &one_gridd_per_host(&[HOST]),
        )?;
        let client = Client::connect(&hosts.host_dir(HOST))?;
        Ok(GridHost {
            hosts,
            metrics_port: ports[1],
            client,
        })
    }

    pub fn pid(&self) -> u32 {
        self.hosts.procs.pids()[0]
    }

    /// `gridctl inspect tag NAME --json`'s report (the control call it makes).
    pub fn tag(&mut self, name: &str) -> Result<TagReport> {
        match self.client.call(&Call::Tag {
            name: name.to_owned(),
        })? {
            Reply::Tag(report) => Ok(*report),
            other => Err(format!("inspect tag {name}: {other:?}").into()),
        }
    }

    /// One scrape of the host's metrics.
    pub fn scrape(&self) -> Result<Scrape> {
        scrape_port(self.metrics_port)
    }
}

/// One scrape of the metrics served on 127.0.0.1:`port` (HTTP/1.0: the whole body,
/// then the connection closes).
pub fn scrape_port(port: u16) -> Result<Scrape> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(SCRAPE_TIMEOUT))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .ok_or("a metrics answer without a body")?;
    Ok(Scrape::parse(body))
}

/// The series of one scrape: `name{labels}` → value, as printed.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    series: BTreeMap<String, f64>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let series = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (key, value) = l.rsplit_once(' ')?;
                Some((key.to_owned(), value.parse().ok()?))
            })
            .collect();
        Scrape { series }
    }

    /// A series' value (0 when absent).
    pub fn get(&self, key: &str) -> f64 {
        self.series.get(key).copied().unwrap_or(0.0)
    }

    /// `grid_tag_entries_total{quality="Q"}`.
    pub fn entries(&self, quality: &str) -> u64 {
        self.get(&format!("grid_tag_entries_total{{quality=\"{quality}\"}}")) as u64
    }

    pub fn batches(&self) -> u64 {
        self.get("grid_batches_applied_total") as u64
    }

    /// Store fsyncs so far, and the seconds they took (`grid_fsync_seconds`).
    pub fn fsyncs(&self) -> (u64, f64) {
        (
            self.get("grid_fsync_seconds_count") as u64,
            self.get("grid_fsync_seconds_sum"),
        )
    }

    /// A histogram's cumulative buckets: (upper bound, count), ascending.
    pub fn buckets(&self, name: &str) -> Vec<(f64, u64)> {
        let prefix = format!("{name}_bucket{{le=\"");
        let mut buckets: Vec<(f64, u64)> = self
            .series
            .iter()
            .filter_map(|(key, value)| {
                let le = key.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((bound, *value as u64))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        buckets
    }
}

/// A histogram's observations between two scrapes.
#[derive(Debug, Clone)]
pub struct Histogram {
    /// (upper bound in seconds, cumulative count), ascending.
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    pub fn between(before: &Scrape, after: &Scrape, name: &str) -> Histogram {
        let earlier: BTreeMap<u64, u64> = before
            .buckets(name)
            .into_iter()
            .map(|(b, c)| (b.to_bits(), c))
            .collect();
        Histogram {
            buckets: after
                .buckets(name)
                .into_iter()
                .map(|(b, c)| (b, c - earlier.get(&b.to_bits()).copied().unwrap_or(0)))
                .collect(),
        }
    }

    pub fn count(&self) -> u64 {
        self.buckets.last().map_or(0, |&(_, c)| c)
    }

    /// The upper bound of the bucket that holds the nearest-rank `p` percentile, and
    /// the bound below it (the bucket is `(lower, upper]`); `None` without observations.
    pub fn percentile(&self, p: f64) -> Option<(f64, f64)> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = ((p * count as f64).ceil() as u64).max(1);
        let mut lower = 0.0;
        for &(bound, cumulative) in &self.buckets {
            if cumulative >= rank {
                return Some((lower, bound));
            }
            lower = bound;
        }
        None
    }
}

/// Fsyncs between two scrapes: how many, and their mean duration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fsyncs {
    pub count: u64,
    pub mean: Duration,
}

impl Fsyncs {
    pub fn between(before: &Scrape, after: &Scrape) -> Fsyncs {
        let ((n0, s0), (n1, s1)) = (before.fsyncs(), after.fsyncs());
        let count = n1 - n0;
        Fsyncs {
            count,
            mean: if count == 0 {
                Duration::ZERO
            } else {
                Duration::from_secs_f64((s1 - s0).max(0.0) / count as f64)
            },
        }
    }

    /// `N (mean X ms)`.
    pub fn text(&self) -> String {
        format!(
            "{} (mean {})",
            self.count,
            grid_benches::report::ms(self.mean)
        )
    }
}

/// `(lower, upper]` in ms, e.g. `(1.16, 1.45] ms`, or `–`.
pub fn bucket_ms(bucket: Option<(f64, f64)>) -> String {
    match bucket {
        Some((lower, upper)) if upper.is_finite() => {
            format!("({:.2}, {:.2}] ms", lower * 1e3, upper * 1e3)
        }
        Some((lower, _)) => format!("> {:.0} ms", lower * 1e3),
        None => "–".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_bucket_differences() {
        let before = Scrape::parse(
            "h_bucket{le=\"0.001\"} 1\nh_bucket{le=\"0.002\"} 1\nh_bucket{le=\"+Inf\"} 1\n",
        );
        let after = Scrape::parse(
            "# HELP h x\nh_bucket{le=\"0.001\"} 51\nh_bucket{le=\"0.002\"} 100\nh_bucket{le=\"+Inf\"} 101\n",
        );
        let h = Histogram::between(&before, &after, "h");
        assert_eq!(h.count(), 100);
        assert_eq!(h.percentile(0.5), Some((0.0, 0.001)));
        assert_eq!(h.percentile(0.99), Some((0.001, 0.002)));
        assert_eq!(h.percentile(1.0).map(|b| b.1), Some(f64::INFINITY));
        assert_eq!(bucket_ms(h.percentile(0.99)), "(1.00, 2.00] ms");
    }
}
