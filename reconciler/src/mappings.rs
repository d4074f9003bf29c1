//! Mappings (issue 34, docs/grdx.md): their transitions are a route's (`routes.rs`
//! plans both: a mapping is an Ordered, encrypted route whose values are whole GRDX
//! matrices, its right to publish the claim `mapping:NAME`); here the version a matrix
//! pins (`~ matrix MODEL.MATRIX @ HOST: apply version N`) and the operator's calls:
//! `gridctl publish-matrix` and `gridctl inspect mapping`.

use std::path::Path;

use grid_engine::delivery::api::{DeliveryCall, DeliveryReply, RefusedMatrix, StagedMatrix};
use grid_engine::grdx::Matrix;
use grid_engine::protocol::Request;
use grid_spec::Topology;

use crate::observe::World;
use crate::transition::{Action, Draft, Op, installed};

/// `~ matrix MODEL.MATRIX @ HOST` for every matrix whose `version=N` is not the version
/// its host applied: the host applies staged version N as one batch (once, under the
/// transition's id). A host that does not run has its own line. A version the host
/// says it has not staged yet, or has purged, is `!` (nothing applied); a host that
/// does not say (older) fails the line at reconcile, changing nothing.
pub fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for model in topology.models.iter().filter(|m| !m.retired) {
        let host = model.host.as_str();
        if world.running(host).is_none() && !world.missing(host) {
            continue;
        }
        let held = world
            .running(host)
            .and_then(|o| o.models.iter().find(|m| m.name == model.name));
        for matrix in model.matrices() {
            let Some(version) = matrix.version else {
                continue;
            };
            let applied = held.and_then(|m| m.matrices.get(&matrix.name)).copied();
            if applied == Some(version) {
                continue;
            }
            let name = format!("{}.{}", model.name, matrix.name);
            let staged = world
                .running(host)
                .and_then(|o| o.staged.get(&matrix.mapping))
                .copied();
            if let Some((from, newest)) = staged
                && !(from..=newest).contains(&version)
            {
                let why = if version > newest {
                    format!(
                        "version {version} of mapping {} is not staged at {host} yet (it holds {}): applied once it is",
                        matrix.mapping,
                        holds(from, newest)
                    )
                } else {
                    format!(
                        "version {version} of mapping {} was purged at {host} (it holds {}: a destination keeps the newest MAPPING_STAGED_KEPT_MAX ({}) staged versions); pin one it holds",
                        matrix.mapping,
                        holds(from, newest),
                        grid_engine::limits::MAPPING_STAGED_KEPT_MAX
                    )
                };
                out.push(Draft::attention("matrix", &name, host, why));
                continue;
            }
            let detail = format!(
                "apply version {version} of mapping {} ({})",
                matrix.mapping,
                match applied {
                    Some(v) => format!("version {v} applied now"),
                    None => "none applied yet".to_owned(),
                }
            );
            let request = Request::ApplyMatrix {
                model: model.name.clone(),
                matrix: matrix.name.clone(),
                version,
            };
            out.push(
                Draft::new(
                    Op::Change,
                    "matrix",
                    &name,
                    host,
                    detail,
                    Action::Submit { request },
                )
                .after([format!("model:{host}:{}", model.name)])
                .after(installed(host)),
            );
        }
    }
    out
}

/// `versions 3 to 18`, `nothing yet`.
fn holds(from: u64, newest: u64) -> String {
    if newest < from {
        "nothing yet".to_owned()
    } else {
        format!("versions {from} to {newest}")
    }
}

/// `gridctl publish-matrix MAPPING --as HOST --file FILE`: the matrix in FILE (checked
/// whole first) published at HOST, the mapping's publisher; its position (the version).
/// Under `op` it publishes once: asking again with the same id answers the same
/// position. `Err(Refused)`: nothing was published; `Err(Unknown)`: the reply was lost.
pub fn publish(
    state: &Path,
    mapping: &str,
    host: &str,
    matrix: &Matrix,
    op: Option<&str>,
) -> Result<u64, Failure> {
    let call = DeliveryCall::PublishMatrix {
        route: mapping.to_owned(),
        grdx: hex::encode(matrix.encode()),
        op: op.map(str::to_owned),
    };
    match crate::routes::call(state, host, call) {
        Ok(DeliveryReply::Published { position, .. }) => Ok(position),
        Ok(DeliveryReply::Refused { reason }) => Err(Failure::Refused(reason)),
        Ok(other) => Err(Failure::Refused(format!("unexpected reply {other:?}"))),
        Err(e) if e.contains("lost") => Err(Failure::Unknown(e)),
        Err(e) => Err(Failure::Refused(format!("{e}; nothing was sent"))),
    }
}

/// Why a publication did not answer a position.
#[derive(Debug)]
pub enum Failure {
    Refused(String),
    Unknown(String),
}

/// What `host` holds of `mapping` (`gridctl inspect mapping`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Held {
    pub mapping: String,
    pub host: String,
    /// `publisher` or `destination`.
    pub role: String,
    pub versions: Vec<StagedMatrix>,
    pub held_from: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<RefusedMatrix>,
}

impl Held {
    pub fn render(&self) -> String {
        let what = if self.role == "publisher" {
            "published"
        } else {
            "staged"
        };
        let count = match self.versions.len() {
            1 => "1 matrix".to_owned(),
            n => format!("{n} matrices"),
        };
        let purged = if self.held_from > 1 {
            format!(" (held from version {}: older ones purged)", self.held_from)
        } else {
            String::new()
        };
        let mut out = format!(
            "mapping {} at {} ({}): {count} {what}{purged}\n",
            self.mapping, self.host, self.role
        );
        for v in &self.versions {
            out += &format!(
                "  version {}  {} × {}  sha256 {}\n",
                v.position, v.rows, v.cols, v.sha256
            );
        }
        if let Some(r) = &self.refused {
            out += &format!("  refused: {}\n", r.reason);
        }
        out
    }
}

/// `gridctl inspect mapping MAPPING --host HOST`.
pub fn held(state: &Path, mapping: &str, host: &str) -> Result<Held, String> {
    let call = DeliveryCall::Staged {
        route: mapping.to_owned(),
    };
    match crate::routes::call(state, host, call)? {
        DeliveryReply::Staged {
            route,
            role,
            versions,
            held_from,
            refused,
        } => Ok(Held {
            mapping: route,
            host: host.to_owned(),
            role,
            versions,
            held_from,
            refused,
        }),
        DeliveryReply::Refused { reason } => Err(reason),
        other => Err(format!("unexpected reply {other:?}")),
    }
}
