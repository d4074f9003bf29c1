//! A host: the original owner of the models installed on it and of every operation it
//! was sent (SPEC §1.2). `gridd --dir DIR` runs one; `gridctl` talks to it through the
//! control API (`crate::protocol`, served by `control`).
//!
//! Installation directory (created by `gridctl reconcile`):
//! ```text
//! DIR/              0700
//!   host.toml       0600  name, listen address, selected profiles
//!   store/          0700  fjall: operations, models, batches (docs/host-store.md)
//!   control.sock    0600  the local control API, while gridd runs
//! ```
//!
//! Invariants:
//! - an operation's effect and its answer are committed in one fjall batch, synced
//!   before the reply: there is no effect without a retained answer, nor the reverse;
//! - a retained answer is returned for its id forever, identical, and the operation
//!   never runs again; the same id with another request is refused;
//! - recovery replays the store; it never re-executes an operation.

pub use crate::config;
mod archive;
mod checkpoint;
pub mod control;
mod feeder;
mod generations;
mod ingest;
mod keys;
mod leave;
mod matrices;
use matrices::Change;
mod observations;
mod open;
pub mod pid;
mod purge;
pub mod replace;
mod retained;
mod rooms;
pub mod store_claim;
mod submit;
mod tags;

use crate::limits::{OBSERVE_UNACKNOWLEDGED_MAX, OPERATION_ID_LENGTH_MAX};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fjall::Keyspace;
use serde::{Deserialize, Serialize};

use crate::journal::{JournalError, encode_batch};
use crate::model::{Runtime, Value};
use crate::protocol::{
    Answer, Call, KeysState, ModelState, Observation, Outcome, Reply, Request, RetainedOperation,
    ValueText,
};
use crate::store::keys::Key;
use crate::store::{Failpoints, fatal};
use config::HostConfig;

/// What the `store/meta` keyspace's `format` key holds.
pub const HOST_STORE_FORMAT: &str = "grid-host-store/1";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error(transparent)]
    Installation(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Private(#[from] crate::store::PrivateDirError),
    #[error("key custody refuses: {0}")]
    Custody(#[from] crate::custody::CustodyError),
    #[error("{path}: the host store failed: {}", crate::store::describe(.source))]
    Storage { path: PathBuf, source: fjall::Error },
    #[error(
        "{}: another gridd{} serves this installation (it holds the lock of its store); stop that gridd first, or talk to it through {}",
        .path.display(),
        .pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        control::socket_path(.path).display()
    )]
    Served { path: PathBuf, pid: Option<u32> },
    #[error(transparent)]
    Mark(#[from] crate::store::mark::MarkError),
    #[error(transparent)]
    HighWater(#[from] crate::store::high_water::HighWaterError),
    #[error("{path}: the host store is damaged: {detail}")]
    Damaged { path: PathBuf, detail: String },
    #[error(
        "{path} holds store format `{found}`, which this gridd does not read (it reads `{HOST_STORE_FORMAT}`)"
    )]
    UnsupportedFormat { path: PathBuf, found: String },
}

/// What the store keeps per operation id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OperationRecord {
    request: Request,
    answer: Answer,
    acknowledged: bool,
    /// When the answer was given, Unix milliseconds (0: before this was recorded).
    #[serde(default)]
    answered_ms: u64,
}

/// What the store keeps per model name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ModelRecord {
    /// Canonical KDL text of the current generation.
    model: String,
    retired: bool,
    generation: u32,
    /// The memberships the model was admitted to (`serve M`): beside the definition,
    /// so admitting it to one more is no new generation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    serves: Vec<String>,
}

struct Installed {
    record: ModelRecord,
    runtime: Runtime,
    batches: u64,
    /// The inputs a batch of this generation set (a carried input counts): they keep
    /// their values in the next generation; every other input takes its new default.
    set: BTreeSet<String>,
    /// `output CELL route=R`: (cell, route), published on each batch that changes it.
    outputs: RouteLinks,
    /// `input NAME from="route:R"`: (input, route), fed from this host's inbox.
    fed: RouteLinks,
    /// `input NAME from="tag:T"`: (input, tag), fed from this host's source journal.
    tag_fed: RouteLinks,
    /// The batch its installed checkpoint covers (0: none in this generation).
    checkpointed: u64,
    /// `matrix NAME from="mapping:M"`: matrix → mapping.
    matrix_sources: BTreeMap<String, String>,
    /// Matrix → the version of its mapping applied to it (none: never applied).
    applied: BTreeMap<String, u64>,
    /// The matrices declared `apply="on-receipt"`.
    on_receipt: BTreeSet<String>,
}

impl Installed {
    /// A model installed from its definition: what it publishes and what feeds it.
    fn new(
        record: ModelRecord,
        runtime: Runtime,
        batches: u64,
        set: BTreeSet<String>,
        model: &grid_spec::Model,
    ) -> Installed {
        let (outputs, fed) = routes_of(model);
        Installed {
            record,
            runtime,
            batches,
            set,
            outputs,
            fed,
            tag_fed: tags_of(model),
            checkpointed: 0,
            matrix_sources: model
                .matrices()
                .map(|m| (m.name.clone(), m.mapping.clone()))
                .collect(),
            applied: BTreeMap::new(),
            on_receipt: model
                .matrices()
                .filter(|m| m.apply == grid_spec::MatrixApply::OnReceipt)
                .map(|m| m.name.clone())
                .collect(),
        }
    }
}

/// What the store keeps per tag name (keyspace `tags`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TagRecord {
    /// Canonical KDL text of the current definition.
    tag: String,
    /// Retired (`Request::RetireTag`): read no more, journal kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    retired: bool,
}

/// A tag this host reads: simulated (generated here) or through an adapter.
struct TagRuntime {
    record: TagRecord,
    reader: TagReader,
    /// The last observation index journaled (0: none yet).
    last: u64,
    /// Counts by quality and the last good entry, as journaled.
    summary: observations::Summary,
    /// The reason of the last entry when it is debt or a refusal: a reading that
    /// repeats it is not journaled again (docs/sources.md).
    last_reason: Option<String>,
    /// Readings not journaled because they repeated the last entry's reason (since
    /// this process started).
    repeats: u64,
}

impl TagRuntime {
    /// The kind of source the tag reads (`simulate`, `modbus`, …).
    fn source_kind(&self) -> &'static str {
        match &self.reader {
            TagReader::Simulated { .. } => "simulate",
            TagReader::Adapter { tag, .. } => tag.source.kind(),
            TagReader::Retired { source } => source,
        }
    }

    /// The entries journaled since the last good one (outstanding debt).
    fn outstanding(&self) -> u64 {
        self.since_good()
            .saturating_sub(self.summary.completions_since_good)
    }

    /// How many entries were journaled after the newest good one (debt, refusals
    /// and passive receive completions).
    fn since_good(&self) -> u64 {
        self.last
            .saturating_sub(self.summary.last_good.map_or(0, |(n, _)| n))
    }
}

/// Where a tag's observations come from.
enum TagReader {
    /// Generated here, observation `n` a pure function of the definition.
    Simulated {
        simulation: crate::sources::Simulation,
        /// When observation `last + 1` is due.
        next_due: std::time::Instant,
    },
    /// Reported by an adapter (`grid_adapters`) of this generation; `connection` is
    /// its latest report (not journaled).
    Adapter {
        tag: Box<grid_spec::Tag>,
        generation: u64,
        connection: Option<grid_adapters::Connection>,
    },
    /// Retired: nothing reads it; its journal and fed positions stay.
    Retired { source: &'static str },
}

/// What feeds a model from tags: (input, tag) for each `input … from="tag:T"`.
fn tags_of(model: &grid_spec::Model) -> RouteLinks {
    model
        .inputs()
        .filter_map(|i| match &i.from {
            Some(grid_spec::InputSource::Tag(t)) => Some((i.name.clone(), t.clone())),
            _ => None,
        })
        .collect()
}

/// The `source-journal` key of observation `n` of `tag`.
fn observation_key(tag: &str, n: u64) -> Vec<u8> {
    Key::text(tag).sep().u64(n).bytes()
}

fn observation_prefix(tag: &str) -> Vec<u8> {
    Key::text(tag).sep().bytes()
}

/// The meta key of the last observation index of `tag` fed to `model`.
fn tag_fed_key(model: &str, tag: &str) -> Vec<u8> {
    Key::text("tag-fed").then(model).then(tag).bytes()
}

/// (a model's cell or input, a route).
type RouteLinks = Vec<(String, String)>;

/// What a model publishes and what feeds it, from its definition.
fn routes_of(model: &grid_spec::Model) -> (RouteLinks, RouteLinks) {
    let outputs = model
        .outputs
        .iter()
        .map(|o| (o.cell.clone(), o.route.clone()))
        .collect();
    let fed = model
        .inputs()
        .filter_map(|i| match &i.from {
            Some(grid_spec::InputSource::Route(r)) => Some((i.name.clone(), r.clone())),
            _ => None,
        })
        .collect();
    (outputs, fed)
}

/// The meta key of the last position of `route` fed to `model`'s input.
fn fed_key(model: &str, route: &str) -> Vec<u8> {
    Key::text("fed").then(model).then(route).bytes()
}

/// One host, open on its directory.
pub struct Host {
    dir: PathBuf,
    config: HostConfig,
    /// Set when the host runs with `wire-observation`.
    wire: Option<std::sync::Arc<crate::transport::WireCounters>>,
    custody: crate::custody::Custody,
    database: crate::store::Durable,
    operations: Keyspace,
    /// Ids of answers no caller acknowledged yet: `observe` reads only these, so it
    /// costs what is pending, not everything ever answered.
    unacknowledged: Keyspace,
    models_keyspace: Keyspace,
    batches: Keyspace,
    /// Every room's checkpoints in this store (`store::checkpoint`; models: `checkpoint.rs`).
    checkpoints: crate::store::checkpoint::Checkpoints,
    /// Tag definitions (profile `sources`).
    tags_keyspace: Keyspace,
    /// Journaled observations: tag \0 index(be64) → an entry (`observations::Entry`).
    source_journal: Keyspace,
    /// What each fed observation produced: tag \0 index(be64) \0 model → `Effect`.
    tag_effects: Keyspace,
    /// Purged debt and refusals, counted per reason and window (`purge.rs`).
    tag_debt: Keyspace,
    tags: BTreeMap<String, TagRuntime>,
    /// The running adapters (profile `sources`, attached by the composition root).
    adapters: Option<grid_adapters::Adapters>,
    /// The generation the next adapter start gets (reports of older ones are dropped).
    adapter_generation: u64,
    /// The `tag-fed…` positions read so far (`Host::tag_fed`).
    tag_fed_cache: std::cell::RefCell<std::collections::HashMap<Vec<u8>, u64>>,
    models: BTreeMap<String, Installed>,
    failpoints: Failpoints,
    meta: Keyspace,
    /// The newest epoch of each claim this host has seen on stamped writes.
    fence: crate::authority::claims::Fence,
    /// The `delivery` profile, when selected: its routes live in this store.
    delivery: Option<std::sync::Arc<crate::delivery::service::Delivery>>,
    /// The `processes` profile, when selected: its runs, waits, grants and mailbox
    /// live in this store.
    processes: Option<std::sync::Arc<crate::processes::service::Processes>>,
    /// The `ledger` profile, when selected: its journal lives in this store.
    ledgers: Option<crate::ledger::service::Ledgers>,
    /// The `exports` profile, when selected: its disclosures, exports and mappings
    /// live in this store.
    exports: Option<std::sync::Arc<crate::exports::service::Exports>>,
    /// The `decisions` profile, when selected: its policies and records.
    decisions: Option<std::sync::Arc<crate::decisions::service::Decisions>>,
    /// Why the models take no batch from outside now (a mission not settled).
    quiesced: Option<String>,
    /// Answers past the hot window (`archive.rs`).
    archive: archive::Archive,
    /// How far the retention clock is shifted (`GRID_RETENTION_CLOCK_OFFSET_S`).
    retention_offset_ms: i64,
    /// The memberships this host left (`leave.rs`), shared with its transport.
    left: crate::transport::LeftMemberships,
}

/// Where the host keeps its fence (in the `meta` keyspace).
const FENCE_KEY: &str = "fence";
/// The store's `meta` key naming the host the installation belongs to (recorded at the
/// first start that finds none).
const HOST_NAME_KEY: &str = "host";

/// What an operation changes in memory once its effect is durable.
type AfterCommit = Box<dyn FnOnce(&mut Host)>;

/// What handling a call produced: a reply, or (at a failpoint) none.
// One per call, moved once into the reply: its size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Handled {
    Reply(Reply),
    DropReply,
}

fn batch_key(model: &str, generation: u32, number: u64) -> Vec<u8> {
    Key::text(model).sep().u32(generation).u64(number).bytes()
}

fn batch_prefix(model: &str, generation: u32) -> Vec<u8> {
    Key::text(model).sep().u32(generation).bytes()
}

fn succeeded(op: &str, detail: impl Into<String>) -> Answer {
    Answer {
        op: op.to_owned(),
        outcome: Outcome::Succeeded,
        detail: detail.into(),
        signature: None,
        request: None,
        replayed: false,
        archived: false,
    }
}

fn failed(op: &str, detail: impl Into<String>) -> Answer {
    Answer {
        op: op.to_owned(),
        outcome: Outcome::Failed,
        detail: detail.into(),
        signature: None,
        request: None,
        replayed: false,
        archived: false,
    }
}

impl Host {
    /// `(model, input, source)` for every input of an active model that `links` names
    /// a source of (a route or a tag).
    fn feeds(&self, links: impl Fn(&Installed) -> &RouteLinks) -> Vec<(String, String, String)> {
        self.models
            .iter()
            .filter(|(_, m)| !m.record.retired)
            .flat_map(|(name, m)| {
                links(m)
                    .iter()
                    .map(|(input, source)| (name.clone(), input.clone(), source.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Commits `write` and fsyncs the store; a failure stops the process (memory may be
    /// ahead of the disk), naming `what` was being made durable.
    fn commit_durably(&self, write: fjall::OwnedWriteBatch, what: &str) {
        self.database.commit_or_stop(write, &self.dir, what);
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// Attaches the transport's wire counters (profile `wire-observation`).
    pub fn observe_wire(&mut self, counters: std::sync::Arc<crate::transport::WireCounters>) {
        self.wire = Some(counters);
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Evaluates `model` on a copy with `inputs` applied: nothing is journaled or
    /// changed (the `model.eval` Process).
    pub fn evaluate(
        &self,
        model: &str,
        inputs: &[(String, f64)],
    ) -> Result<Vec<(String, ValueText)>, String> {
        let installed = self
            .models
            .get(model)
            .filter(|m| !m.record.retired)
            .ok_or_else(|| format!("host `{}` serves no model `{model}`", self.config.name))?;
        let mut runtime = installed.runtime.clone();
        let named: Vec<(&str, f64)> = inputs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        runtime.apply(&named).map_err(|e| e.to_string())?;
        Ok(runtime
            .values()
            .map(|(n, v)| {
                let v = match v {
                    Value::Number(x) => ValueText::Number(x),
                    Value::Error(e) => ValueText::Error(e.to_string()),
                };
                (n.to_owned(), v)
            })
            .collect())
    }

    fn damaged(&self, detail: String) -> HostError {
        HostError::Damaged {
            path: self.dir.join("store"),
            detail,
        }
    }

    /// Every (name, JSON record) of a keyspace keyed by object name (`what`: model,
    /// tag), in name order; an undecodable one is damage naming it.
    fn named_records<T: serde::de::DeserializeOwned>(
        &self,
        keyspace: &Keyspace,
        what: &str,
    ) -> Result<Vec<(String, T)>, HostError> {
        let mut records = Vec::new();
        for guard in keyspace.iter() {
            let (key, value) = guard.into_inner().map_err(|source| HostError::Storage {
                path: self.dir.join("store"),
                source,
            })?;
            let name = String::from_utf8(key.to_vec())
                .map_err(|_| self.damaged(format!("a {what} name is not UTF-8")))?;
            let record = serde_json::from_slice(&value)
                .map_err(|e| self.damaged(format!("{what} `{name}`: {e}")))?;
            records.push((name, record));
        }
        Ok(records)
    }

    /// Loads a canonical text of one object (`what`) as if declared beside this host.
    fn load_own(&self, what: &str, text: &str) -> Result<grid_spec::Topology, String> {
        let wrapped = format!(
            "grid version=1\nhost {} listen={}\n{text}",
            grid_spec::canonical::quote(&self.config.name),
            grid_spec::canonical::quote(&self.config.listen)
        );
        let options = grid_spec::Options {
            references: false,
            ..grid_spec::Options::default()
        };
        grid_spec::load_str_with(what, &wrapped, options).map_err(|d| {
            d.iter()
                .map(|d| d.message.clone())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// Parses a canonical model text as this host's own model; refuses what the host
    /// cannot run (inputs from tags without `sources`, from routes or outputs without
    /// `delivery`).
    fn parse_model(&self, text: &str) -> Result<grid_spec::Model, String> {
        let topology = self.load_own("model", text)?;
        let [model] = <[grid_spec::Model; 1]>::try_from(topology.models)
            .map_err(|_| "the text must hold exactly one model".to_owned())?;
        if model.host != self.config.name {
            return Err(format!(
                "model `{}` belongs to host `{}`, not `{}`",
                model.name, model.host, self.config.name
            ));
        }
        let delivery = self.config.selects(grid_spec::Profile::Delivery);
        let sources = self.config.selects(grid_spec::Profile::Sources);
        for input in model.inputs() {
            let refused = match &input.from {
                Some(grid_spec::InputSource::Tag(t)) if !sources => {
                    Some((format!("tag:{t}"), "sources"))
                }
                Some(grid_spec::InputSource::Route(r)) if !delivery => {
                    Some((format!("route:{r}"), "delivery"))
                }
                _ => None,
            };
            if let Some((source, profile)) = refused {
                return Err(format!(
                    "input `{}` is fed from {source}, which needs the `{profile}` profile; this host cannot run it",
                    input.name
                ));
            }
        }
        if let Some(output) = model.outputs.first()
            && !delivery
        {
            return Err(format!(
                "output `{}` publishes on route `{}`, which needs the `delivery` profile; this host does not select it",
                output.cell, output.route
            ));
        }
        Ok(model)
    }

    /// Applies one input batch to `model` and adds it to `write`: journaled as its next
    /// batch, with a publication of every output the batch changes (staged in the same
    /// write, so a model batch and its publications are durable together or not at
    /// all). Memory moves ahead of the disk until `write` commits (a failed commit
    /// stops the process). Refused, changing nothing, when the batch or a publication
    /// is refused. Returns the batch number and the staged (route, position)s.
    fn batch(
        &mut self,
        model: &str,
        named: &[(&str, f64)],
        write: &mut fjall::OwnedWriteBatch,
    ) -> Result<(u64, Vec<(String, u64)>), String> {
        self.change(model, Change::Inputs(named), write)
    }

    /// [`Host::batch`] of any [`Change`]: a matrix's value is applied, journaled and
    /// published the same way, as one batch.
    fn change(
        &mut self,
        model: &str,
        change: Change<'_>,
        write: &mut fjall::OwnedWriteBatch,
    ) -> Result<(u64, Vec<(String, u64)>), String> {
        let delivery = self.delivery.clone();
        let installed = self
            .models
            .get(model)
            .ok_or_else(|| format!("host `{}` holds no model `{model}`", self.config.name))?;
        // Only routes of the memberships it serves carry its outputs.
        for (cell, route) in &installed.outputs {
            if let Some(reason) = self.unserved(model, route) {
                return Err(format!(
                    "output `{cell}` cannot publish on route `{route}`: {reason}; nothing applied"
                ));
            }
        }
        // The publishing right of every output route, confirmed before anything moves.
        let mut epochs = Vec::new();
        for (cell, route) in &installed.outputs {
            let Some(delivery) = &delivery else {
                return Err(format!("output `{cell}` needs the `delivery` profile"));
            };
            let epoch = delivery.check_right_blocking(route).map_err(|reason| {
                format!(
                    "output `{cell}` cannot publish on route `{route}`: {reason}; nothing applied"
                )
            })?;
            epochs.push(epoch);
        }
        let installed = self.models.get_mut(model).expect("found above");
        // A model serving several memberships never waits on one membership's capacity
        // for the other's publications (docs/memberships.md, "One writer").
        let isolate = installed.record.serves.len() > 1;
        let before: Vec<Option<Value>> = installed
            .outputs
            .iter()
            .map(|(cell, _)| installed.runtime.value(cell))
            .collect();
        let backup = (!installed.outputs.is_empty()).then(|| installed.runtime.clone());
        match change {
            Change::Inputs(named) => installed.runtime.apply(named),
            Change::Matrix { name, matrix, .. } => installed.runtime.apply_matrix(name, matrix),
        }
        .map_err(|e| e.to_string())?;
        let mut publications = Vec::new();
        for (((cell, route), was), epoch) in installed.outputs.iter().zip(&before).zip(&epochs) {
            match installed.runtime.value(cell) {
                Some(Value::Number(now)) if !matches!(was, Some(Value::Number(w)) if w.to_bits() == now.to_bits()) =>
                {
                    publications.push((route.clone(), now, *epoch));
                }
                _ => {}
            }
        }
        let mut published = Vec::new();
        if !publications.is_empty() {
            let delivery = delivery
                .as_ref()
                .expect("outputs need delivery, checked above");
            match delivery.stage_all(&publications, isolate, write) {
                Ok(staged) => published = at_positions(&publications, staged),
                Err(reason) => {
                    installed.runtime = backup.expect("kept for a model with outputs");
                    return Err(format!("{reason}; nothing applied"));
                }
            }
        }
        let number = installed.batches + 1;
        installed.batches = number;
        crate::metrics::batch_applied();
        let encoded = match change {
            Change::Inputs(named) => {
                for (input, _) in named {
                    if !installed.set.contains(*input) {
                        installed.set.insert((*input).to_owned());
                    }
                }
                encode_batch(named)
            }
            Change::Matrix {
                name,
                version,
                matrix,
            } => {
                installed.applied.insert(name.to_owned(), version);
                crate::journal::encode_matrix_batch(name, version, matrix)
            }
        };
        write.insert(
            &self.batches,
            batch_key(model, installed.record.generation, number),
            encoded,
        );
        Ok((number, published))
    }

    /// Why `route` may not feed or carry `model` — it is of a membership the model does
    /// not serve (a model admitted to none serves its host's one membership) — or None.
    fn unserved(&self, model: &str, route: &str) -> Option<String> {
        let serves = &self.models.get(model)?.record.serves;
        let membership = self.delivery.as_ref()?.membership_of(route)?;
        (!serves.is_empty() && !serves.contains(&membership)).then(|| {
            format!("route `{route}` is of membership `{membership}`, which model `{model}` does not serve")
        })
    }

    /// Publications staged by model batches are durable: they may be pushed.
    fn settle(&self, published: Vec<(String, u64)>) {
        if let Some(delivery) = &self.delivery {
            for (route, position) in published {
                delivery.settle(&route, position);
            }
        }
    }

    /// Handles one call. Storage failures after an effect began are fatal: the
    /// process must stop rather than answer from memory the disk does not hold.
    pub fn handle(&mut self, call: Call) -> Handled {
        match call {
            Call::Observe => Handled::Reply(Reply::Observation(self.observe())),
            Call::Answer { op } => Handled::Reply(match self.lookup(&op) {
                archive::Lookup::Archived(record) => {
                    let mut answer = record.answer;
                    answer.archived = true;
                    Reply::Answer(answer)
                }
                lookup => self.not_answered(&op, lookup),
            }),
            Call::Acknowledge { op } => Handled::Reply(self.acknowledge(op)),
            Call::Values { model } => Handled::Reply(match self.models.get(&model) {
                Some(installed) if !installed.record.retired => Reply::Values {
                    model,
                    values: installed
                        .runtime
                        .values()
                        .map(|(n, v)| {
                            let v = match v {
                                Value::Number(x) => ValueText::Number(x),
                                Value::Error(e) => ValueText::Error(e.to_string()),
                            };
                            (n.to_owned(), v)
                        })
                        .collect(),
                },
                Some(_) => Reply::Refused {
                    reason: format!("model `{model}` is retired on host `{}`", self.config.name),
                },
                None => Reply::Refused {
                    reason: format!("host `{}` holds no model `{model}`", self.config.name),
                },
            }),
            Call::Submit { op, request } => self.submit(op, request),
            Call::Tag { name } => Handled::Reply(self.tag_report(&name)),
            Call::Obligations { membership, grants } => Handled::Reply(Reply::Obligations {
                open: self.obligations(&membership, &grants, None),
                membership,
            }),
            // Only this host's operator (the control socket) acts as this host at the
            // authority; a remote participant calls `/authority/M/forward` as itself.
            Call::Authority { .. } => Handled::Reply(Reply::Refused {
                reason: "authority calls are taken on the host's control socket only".to_owned(),
            }),
            Call::Delivery { .. } => Handled::Reply(Reply::Refused {
                reason: "delivery calls are taken on the host's control socket only".to_owned(),
            }),
            Call::Process { .. } => Handled::Reply(Reply::Refused {
                reason: "process calls are taken on the host's control socket only".to_owned(),
            }),
            Call::Ledger { .. } => Handled::Reply(Reply::Refused {
                reason: "ledger calls are taken on the host's control socket only".to_owned(),
            }),
            Call::Wallet { .. } | Call::Mission { .. } | Call::Export { .. }
            | Call::Decision { .. } | Call::Inspect => {
                Handled::Reply(Reply::Refused {
                    reason:
                        "wallet, mission, export, decision and inspect calls are taken by the host's rooms, outside its lock"
                            .to_owned(),
                })
            }
            Call::Custody { .. } => Handled::Reply(Reply::Refused {
                reason: "custody calls are taken on the host's control socket only".to_owned(),
            }),
            Call::VerifyArchive => Handled::Reply(Reply::Refused {
                reason: "archive verification is taken on the host's control socket only"
                    .to_owned(),
            }),
            Call::Storage => {
                let mut view = crate::store::usage::usage(&self.database, &self.dir);
                view.checkpoints = self.checkpoints.list();
                view.archive = Some(self.archive_view());
                view.journals = self.journal_views();
                Handled::Reply(Reply::Storage(Box::new(view)))
            }
            Call::Wire => Handled::Reply(match &self.wire {
                Some(wire) => Reply::Wire {
                    peers: wire
                        .snapshot()
                        .into_iter()
                        .map(|(peer, direction, bytes)| crate::protocol::WirePeer {
                            peer,
                            direction: direction.name().to_owned(),
                            bytes,
                        })
                        .collect(),
                },
                None => Reply::Refused {
                    reason: format!(
                        "host `{}` does not run the `wire-observation` profile",
                        self.config.name
                    ),
                },
            }),
        }
    }

    fn retained(&self, op: &str) -> Option<OperationRecord> {
        let bytes = self
            .operations
            .get(op)
            .unwrap_or_else(|e| fatal(&self.dir, "reading an operation", e));
        bytes.map(|b| {
            serde_json::from_slice(&b)
                .unwrap_or_else(|e| fatal(&self.dir, "decoding an operation", e))
        })
    }

    fn acknowledge(&mut self, op: String) -> Reply {
        let mut record = match self.lookup(&op) {
            archive::Lookup::Hot(record) => record,
            // An archived answer was acknowledged before it left the hot store.
            archive::Lookup::Archived(_) => return Reply::Acknowledged { op },
            _ => {
                return Reply::Refused {
                    reason: format!(
                        "host `{}` never received operation `{op}`",
                        self.config.name
                    ),
                };
            }
        };
        if !record.acknowledged {
            record.acknowledged = true;
            // Losing an acknowledgement only shows the answer once more: no fsync needed.
            let bytes = serde_json::to_vec(&record).expect("records serialize");
            let mut write = self.database.batch();
            write.insert(&self.operations, op.as_str(), bytes);
            write.remove(&self.unacknowledged, op.as_str());
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "acknowledging", e));
        }
        Reply::Acknowledged { op }
    }

    fn observe(&self) -> Observation {
        let mut unacknowledged = Vec::new();
        for guard in self.unacknowledged.iter().take(OBSERVE_UNACKNOWLEDGED_MAX) {
            let key = guard
                .key()
                .unwrap_or_else(|e| fatal(&self.dir, "reading unacknowledged answers", e));
            let op = String::from_utf8_lossy(&key).into_owned();
            let Some(record) = self.retained(&op) else {
                fatal(&self.dir, "an unacknowledged answer has no record", &op);
            };
            unacknowledged.push(RetainedOperation {
                request: record.request,
                answer: record.answer,
            });
        }
        Observation {
            keys: Some({
                let manifest = self.custody.manifest();
                KeysState {
                    generation: manifest.generation,
                    signing: manifest.signing.clone(),
                    retired: manifest.retired.iter().map(|r| r.generation).collect(),
                    mail_generation: manifest.mail_generation,
                    retired_mail: manifest.retired_mail.iter().map(|r| r.generation).collect(),
                    tls_generation: manifest.tls_generation,
                    encrypted: self.custody.is_encrypted(),
                    locked: self.custody.is_locked(),
                }
            }),
            host: self.config.name.clone(),
            models: self
                .models
                .iter()
                .map(|(name, installed)| ModelState {
                    name: name.clone(),
                    model: installed.record.model.clone(),
                    retired: installed.record.retired,
                    generation: installed.record.generation,
                    batches: installed.batches,
                    serves: installed.record.serves.clone(),
                    matrices: installed.applied.clone(),
                })
                .collect(),
            unacknowledged,
            routes: self
                .delivery
                .as_ref()
                .map(|d| d.installed())
                .unwrap_or_default(),
            grants: self
                .processes
                .as_ref()
                .map(|p| p.grants())
                .unwrap_or_default(),
            tags: self.tag_states(),
            ledgers: self
                .ledgers
                .as_ref()
                .map(|l| l.definitions())
                .unwrap_or_default(),
            missions: Vec::new(),
            exports: self
                .exports
                .as_ref()
                .map(|e| e.states())
                .unwrap_or_default(),
            decisions: self
                .decisions
                .as_ref()
                .map(|d| d.installed())
                .unwrap_or_default(),
            profiles: Some(self.config.profiles.clone()),
            staged: self
                .delivery
                .as_ref()
                .map(|d| d.staged_ranges())
                .unwrap_or_default(),
        }
    }

    /// The store's gauges for the metrics (cheap: no directory walk).
    pub fn store_gauges(&self) -> crate::store::usage::StoreGauges {
        let mut gauges = crate::store::usage::gauges(&self.database, &self.checkpoints);
        gauges.archive = Some(self.archive_view());
        gauges
    }

    /// Every tag this host holds: definition, last index, outstanding debt and the
    /// adapter's connection state (for `observe`, the live view and the metrics).
    pub fn tag_states(&self) -> Vec<crate::protocol::TagState> {
        self.tags
            .iter()
            .map(|(name, t)| crate::protocol::TagState {
                name: name.clone(),
                tag: t.record.tag.clone(),
                observations: t.last,
                debt: t.outstanding(),
                connection: match &t.reader {
                    TagReader::Adapter { connection, .. } => {
                        connection.as_ref().map(|c| c.state.clone())
                    }
                    TagReader::Simulated { .. } | TagReader::Retired { .. } => None,
                },
                retired: t.record.retired,
            })
            .collect()
    }

    fn no_processes(&self) -> String {
        format!(
            "host `{}` does not run the `processes` profile; it holds no grants",
            self.config.name
        )
    }
}

#[cfg(test)]
mod tests;

/// The (route, position)s of the publications staged now (deferred ones get theirs
/// when the feeder stages them).
fn at_positions(
    publications: &[(String, f64, u64)],
    staged: Vec<crate::delivery::service::Staged>,
) -> Vec<(String, u64)> {
    publications
        .iter()
        .zip(staged)
        .filter_map(|((route, _, _), s)| match s {
            crate::delivery::service::Staged::At(position) => Some((route.clone(), position)),
            crate::delivery::service::Staged::Deferred => None,
        })
        .collect()
}
