//! Tags (profile `sources`, docs/sources.md): plan transitions installing tags at their
//! hosts (simulated, Modbus, Sparkplug B), and `gridctl inspect tag` (a tag's journal:
//! a simulated one checked against the deterministic sequence its definition
//! generates; an adapter's with its connection, counts by quality and outstanding debt).

use std::path::Path;

use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply, Request, TagReport};
use grid_engine::sources::Simulation;
use grid_spec::{Profile, Topology};

use crate::observe::{self, HostStatus, World};
use crate::transition::Draft;
use crate::transition::{Action, Op};

fn line(op: Op, tag: &str, host: &str, detail: String, action: Action) -> Draft {
    Draft::new(op, "tag", tag, host, detail, action)
}

/// `+ tag T @ H` (install, or reinstate a retired one), `~` (its definition
/// changed), `-` (`retired=#true`: stop reading and release what the tag holds at its
/// device — `(cancel COV subscription)` for a confirmed COV subscription), `!` for a
/// host without the `sources` profile, a source this build does not provide, and a tag
/// a host holds that no file declares there (unmanaged: nothing is released, a COV
/// subscription is left to lapse). Hosts that do not answer are reported by their own
/// lines; nothing is planned for their tags.
pub fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for tag in &topology.tags {
        let Some(host) = topology.host(&tag.host) else {
            continue;
        };
        if tag.retired {
            let held = world
                .running(&tag.host)
                .and_then(|o| o.tags.iter().find(|t| t.name == tag.name));
            if let Some(held) = held.filter(|t| !t.retired) {
                let release = if holds_cov_subscription(&held.tag) {
                    "cancel COV subscription"
                } else {
                    "stop reading"
                };
                out.push(
                    line(
                        Op::Retire,
                        &tag.name,
                        &tag.host,
                        format!("retired=#true in the files ({release})"),
                        Action::Submit {
                            request: Request::RetireTag {
                                name: tag.name.clone(),
                            },
                        },
                    )
                    .key(format!("tag:{}:{}", tag.host, tag.name)),
                );
            }
            continue;
        }
        if !host.profiles.contains(&Profile::Sources) {
            out.push(line(
                Op::Attention,
                &tag.name,
                &tag.host,
                format!(
                    "host `{}` does not select the `sources` profile: add `sources` to its `profiles` line",
                    tag.host
                ),
                Action::None,
            ));
            continue;
        }
        let Some(canonical) = grid_spec::canonical::tag(tag) else {
            out.push(line(
                Op::Attention,
                &tag.name,
                &tag.host,
                format!(
                    "tag `{}` reads {}, which this build does not provide; refusing rather than run without it",
                    tag.name,
                    tag.source.kind()
                ),
                Action::None,
            ));
            continue;
        };
        let install = Action::Submit {
            request: Request::InstallTag {
                name: tag.name.clone(),
                tag: canonical.clone(),
            },
        };
        let create = || {
            line(
                Op::Create,
                &tag.name,
                &tag.host,
                canonical_source(&canonical),
                install.clone(),
            )
            .key(format!("tag:{}:{}", tag.host, tag.name))
            .after([format!("host:{}", tag.host)])
        };
        if world.missing(&tag.host) {
            out.push(create()); // a host this plan creates holds no tag yet
            continue;
        }
        let Some(observed) = world.running(&tag.host) else {
            continue;
        };
        match observed.tags.iter().find(|t| t.name == tag.name) {
            None => out.push(create()),
            Some(held) if held.retired => out.push(
                line(
                    Op::Create,
                    &tag.name,
                    &tag.host,
                    format!("reinstate a retired tag: {}", canonical_source(&canonical)),
                    install,
                )
                .key(format!("tag:{}:{}", tag.host, tag.name)),
            ),
            Some(held) if held.tag != canonical => {
                let changes = crate::changes::tag(&held.tag, &canonical);
                let detail = crate::transition::diff(&held.tag, &canonical);
                out.push(
                    line(Op::Change, &tag.name, &tag.host, detail, install)
                        .key(format!("tag:{}:{}", tag.host, tag.name))
                        .changes(changes),
                );
            }
            Some(_) => {}
        }
    }
    for observation in &world.hosts {
        let HostStatus::Running(observed) = &observation.status else {
            continue;
        };
        for held in observed.tags.iter().filter(|t| !t.retired) {
            let declared = topology
                .tags
                .iter()
                .any(|t| t.name == held.name && t.host == observation.name);
            if !declared {
                let cov = if holds_cov_subscription(&held.tag) {
                    "; its COV subscription is not cancelled (it lapses by its lifetime once nothing renews it): mark the tag retired=#true to cancel it"
                } else {
                    ""
                };
                out.push(line(
                    Op::Attention,
                    &held.name,
                    &observation.name,
                    format!(
                        "unmanaged: the host holds it ({} observation(s) journaled) but no file declares it here{cov}",
                        held.observations
                    ),
                    Action::None,
                ));
            }
        }
    }
    out
}

/// Whether a held tag's canonical text reads through a confirmed COV subscription
/// (a `bacnet` source with `cov=#true`), which retiring it cancels.
pub(crate) fn holds_cov_subscription(canonical: &str) -> bool {
    let source = canonical.lines().nth(1).unwrap_or_default().trim();
    source.starts_with("bacnet ") && source.split_whitespace().any(|w| w == "cov=#true")
}

/// What a `+ tag` line says of a canonical tag text: `simulated, wave=…` for a
/// simulated tag, else its source line (`modbus "127.0.0.1:5020" unit=1 …`).
fn canonical_source(canonical: &str) -> String {
    let source = canonical.lines().nth(1).unwrap_or_default().trim();
    match source.strip_prefix("simulate ") {
        Some(rest) => format!("simulated, {rest}"),
        None => source.to_owned(),
    }
}

/// A tag's journal at `host`, with each observation checked against the sequence its
/// definition generates.
#[derive(Debug, Clone)]
pub struct Inspection {
    pub report: TagReport,
    /// Indexes whose journaled value differs from the deterministic sequence.
    pub mismatched: Vec<u64>,
    /// The listed indexes run consecutively up to `count` (no gap, none twice).
    pub consecutive: bool,
}

impl Inspection {
    pub fn to_json(&self) -> serde_json::Value {
        let r = &self.report;
        serde_json::json!({
            "host": r.host,
            "tag": r.name,
            "definition": r.tag,
            "count": r.count,
            "last": r.observations.last().map(|(n, v)| serde_json::json!({"index": n, "value": v})),
            "observations": r.observations.iter().map(|(n, v)| serde_json::json!({"index": n, "value": v})).collect::<Vec<_>>(),
            "fed": r.fed.iter().map(|f| serde_json::json!({
                "model": f.model,
                "input": f.input,
                "position": f.position,
                "batches": f.batches,
                "stale": f.stale,
            })).collect::<Vec<_>>(),
            "deterministic": (r.source == "simulate").then_some(self.mismatched.is_empty()),
            "mismatched": self.mismatched,
            "consecutive": self.consecutive,
            "name": r.name,
            "source": r.source,
            "connection": r.connection,
            "last_index": r.last_index,
            "last_good": r.last_good,
            "counts": r.counts,
            "debt": r.debt,
            "entries": r.entries,
            "repeats": r.repeats,
            "retired": r.retired,
            "held_from": r.held_from,
            "debt_windows": r.debt_windows,
        })
    }

    pub fn render(&self) -> String {
        let r = &self.report;
        let mut out = format!(
            "tag {} @ {}: {} observation(s) journaled",
            r.name, r.host, r.count
        );
        match r.observations.last() {
            Some((n, v)) => out.push_str(&format!("; last {n} = {v}\n")),
            None => out.push('\n'),
        }
        if r.retired {
            out.push_str("  retired: nothing reads it any more; its journal is kept\n");
        }
        if r.held_from > 1 {
            out.push_str(&format!(
                "  journal holds {}..={}: the entries before were projected by every model fed by the tag and purged (counts kept)\n",
                r.held_from, r.last_index
            ));
        }
        for w in &r.debt_windows {
            out.push_str(&format!(
                "  purged {} in the hour from {}: {} × {} (indexes {}..={})\n",
                w.quality,
                grid_engine::store::rfc3339_ms(w.window_ms),
                w.count,
                w.reason,
                w.first,
                w.last
            ));
        }
        if r.source != "simulate" {
            return self.render_read(out);
        }
        out.push_str(&format!(
            "  sequence: {}{}\n",
            if self.mismatched.is_empty() {
                "equals the deterministic sequence of its definition"
            } else {
                "DIFFERS from the deterministic sequence"
            },
            if self.consecutive {
                ", indexes consecutive"
            } else {
                ", indexes NOT consecutive"
            }
        ));
        for f in &r.fed {
            out.push_str(&format!(
                "  fed to model {} input {}: position {} ({} batch(es))\n",
                f.model, f.input, f.position, f.batches
            ));
        }
        out
    }
}

impl Inspection {
    /// The rest of the text of a tag an adapter reads.
    fn render_read(&self, mut out: String) -> String {
        let r = &self.report;
        let connection = r
            .connection
            .as_ref()
            .map_or("not reported yet".to_owned(), |c| match &c.detail {
                Some(d) => format!("{} ({d})", c.state),
                None => c.state.clone(),
            });
        out.push_str(&format!(
            "  source: {}, connection {connection}\n",
            r.source
        ));
        out.push_str(&format!(
            "  journal: {} good, {} debt, {} refused{}{}\n",
            r.counts.good,
            r.counts.debt,
            r.counts.refused,
            match r.counts.completions {
                0 => String::new(),
                n => format!(", {n} multi-packet message(s) received whole"),
            },
            if self.consecutive {
                ", indexes consecutive"
            } else {
                ", indexes NOT consecutive"
            }
        ));
        match &r.last_good {
            Some(g) => out.push_str(&format!("  last good: {} = {}\n", g.index, g.value)),
            None => out.push_str("  last good: none\n"),
        }
        if r.debt.is_empty() {
            out.push_str("  outstanding debt: none\n");
        } else {
            out.push_str(&format!(
                "  outstanding debt: {} entr{} since the last good value\n",
                r.debt.len(),
                if r.debt.len() == 1 { "y" } else { "ies" }
            ));
            for d in &r.debt {
                out.push_str(&format!("    {} {}: {}\n", d.index, d.quality, d.reason));
            }
        }
        for f in &r.fed {
            out.push_str(&format!(
                "  fed to model {} input {}: position {} ({} batch(es)){}\n",
                f.model,
                f.input,
                f.position,
                f.batches,
                if f.stale {
                    ", STALE (keeps its last good value)"
                } else {
                    ""
                }
            ));
        }
        out
    }
}

/// `gridctl inspect tag T --host H`.
pub fn inspect(state: &Path, tag: &str, host: &str) -> Result<Inspection, String> {
    let dir = observe::installed(state, host)?;
    let mut client = Client::connect(&dir).map_err(|e| e.to_string())?;
    let report = match client.call(&Call::Tag {
        name: tag.to_owned(),
    }) {
        Ok(Reply::Tag(report)) => *report,
        Ok(Reply::Refused { reason }) => return Err(reason),
        Ok(other) => return Err(format!("unexpected reply {other:?}")),
        Err(e) => return Err(e.to_string()),
    };
    if report.source != "simulate" {
        let consecutive = report.consecutive;
        return Ok(Inspection {
            report,
            mismatched: Vec::new(),
            consecutive,
        });
    }
    let simulation = simulation_of(&report)?;
    let mismatched = report
        .observations
        .iter()
        .filter(|(n, v)| wire(simulation.observation(*n)).to_bits() != v.to_bits())
        .map(|(n, _)| *n)
        .collect();
    let first = report.observations.first().map_or(1, |(n, _)| *n);
    let consecutive = report
        .observations
        .iter()
        .enumerate()
        .all(|(i, (n, _))| *n == first + i as u64)
        && report.observations.last().map_or(0, |(n, _)| *n) == report.count;
    Ok(Inspection {
        report,
        mismatched,
        consecutive,
    })
}

/// A value as it arrives through the control API's JSON (serde_json's number
/// parsing may differ from the sent `f64` in its last bit): the expected value takes
/// the same path, so the comparison is exact.
fn wire(value: f64) -> f64 {
    serde_json::to_string(&value)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(value)
}

/// The simulation a report's canonical definition describes.
fn simulation_of(report: &TagReport) -> Result<Simulation, String> {
    let text = format!(
        "grid version=1\nhost {} listen=\"127.0.0.1:1\"\n{}",
        grid_spec::canonical::quote(&report.host),
        report.tag
    );
    let options = grid_spec::Options {
        references: false,
        ..grid_spec::Options::default()
    };
    let topology = grid_spec::load_str_with("tag", &text, options)
        .map_err(|_| format!("tag `{}`: its definition does not read", report.name))?;
    topology
        .tags
        .first()
        .and_then(|t| Simulation::of(&t.source))
        .ok_or_else(|| format!("tag `{}` is not simulated", report.name))
}
