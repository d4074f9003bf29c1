//! A durable model instance (SPEC C1): every applied input batch is journaled in fjall
//! and synced to disk (fsync) before it is acknowledged; opening the directory again —
//! also after `kill -9` in the middle of a batch — replays exactly a whole prefix of
//! the acknowledged batches.
//!
//! The disk format is described in `docs/model-journal.md`. Invariants:
//! - a batch is one fjall key, so it is in the journal whole or not at all;
//! - batch numbers are 1, 2, 3… without gap; a gap refuses to open;
//! - the directory holds one model definition; another definition refuses to open;
//! - the directory and everything in it is private (directories 0700, files 0600);
//!   weaker permissions refuse to open.

use crate::store::ensure_private_dir;
use std::fmt;

use std::path::{Path, PathBuf};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use grid_spec::{Item, Model};

use crate::grdx::Matrix;
use crate::model::{AdmissionError, BatchError, Runtime};

/// What the `meta` keyspace's `format` key holds for this version of the format.
pub const JOURNAL_FORMAT: &str = "grid-model-journal/1";

const BATCH_ENCODING_VERSION: u8 = 1;
/// The first byte of a batch that applies one matrix's whole value.
const MATRIX_BATCH_ENCODING_VERSION: u8 = 2;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    #[error("{path}: the model journal storage failed: {}", crate::store::describe(.source))]
    Storage { path: PathBuf, source: fjall::Error },
    #[error(
        "{path} holds journal format `{found}`, which this Grid does not read (it reads `{JOURNAL_FORMAT}`)"
    )]
    UnsupportedFormat { path: PathBuf, found: String },
    #[error(
        "{path} holds model `{held}` with another definition ({difference}); refusing to replay its batches into `{wanted}`"
    )]
    OtherModel {
        path: PathBuf,
        held: String,
        wanted: String,
        difference: String,
    },
    #[error("{path}: the journal is damaged: {detail}")]
    Damaged { path: PathBuf, detail: String },
    #[error(
        "{path} is not a model instance directory: {reason}; give a new or empty directory (it is created 0700) or one a model ran in"
    )]
    NotAnInstance { path: PathBuf, reason: &'static str },
    #[error(transparent)]
    Private(#[from] crate::store::PrivateDirError),
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(
        "{path}: an earlier batch could not be made durable; this instance refuses further batches (reopen the directory)"
    )]
    Poisoned { path: PathBuf },
}

/// One model instance whose applied batches survive crashes.
pub struct DurableModel {
    dir: PathBuf,
    database: Database,
    batches: Keyspace,
    runtime: Runtime,
    batches_applied: u64,
    poisoned: bool,
}

impl fmt::Debug for DurableModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableModel")
            .field("dir", &self.dir)
            .field("batches_applied", &self.batches_applied)
            .finish_non_exhaustive()
    }
}

/// A canonical text of a model's definition: what the journal's batches mean.
pub fn definition(model: &Model) -> String {
    let mut out = format!(
        "model {} ceiling={} scalar={}\n",
        model.name,
        model.ceiling(),
        model.scalar
    );
    for item in &model.items {
        match item {
            Item::Input(input) => match input.default {
                Some(d) => out.push_str(&format!("input {} default={:?}\n", input.name, d)),
                None => out.push_str(&format!("input {}\n", input.name)),
            },
            Item::Cell(cell) => out.push_str(&format!("cell {} {:?}\n", cell.name, cell.formula)),
            Item::Matrix(m) => out.push_str(&format!(
                "matrix {} rows={} cols={}\n",
                m.name, m.rows, m.cols
            )),
        }
    }
    out
}

fn first_difference(held: &str, wanted: &str) -> String {
    for (a, b) in held.lines().zip(wanted.lines()) {
        if a != b {
            return format!("held `{a}`, file says `{b}`");
        }
    }
    match held.lines().count().cmp(&wanted.lines().count()) {
        std::cmp::Ordering::Less => "the file declares more inputs or cells".to_owned(),
        _ => "the file declares fewer inputs or cells".to_owned(),
    }
}

/// Encodes one batch (format in `docs/model-journal.md`).
pub fn encode_batch(batch: &[(&str, f64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + batch.len() * 24);
    out.push(BATCH_ENCODING_VERSION);
    out.extend_from_slice(&(batch.len() as u32).to_le_bytes());
    for (name, value) in batch {
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&value.to_bits().to_le_bytes());
    }
    out
}

/// Encodes a batch that applies the whole value of matrix `name` (format in
/// `docs/model-journal.md`): version 2, the name, the version of the mapping's value it
/// is (0: none, a file given to `gridctl model run`), then the matrix in GRDX.
pub fn encode_matrix_batch(name: &str, version: u64, matrix: &Matrix) -> Vec<u8> {
    let grdx = matrix.encode();
    let mut out = Vec::with_capacity(11 + name.len() + grdx.len());
    out.push(MATRIX_BATCH_ENCODING_VERSION);
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&grdx);
    out
}

/// A decoded matrix batch: the matrix's name, the version applied, its value.
pub type MatrixBatch = (String, u64, Matrix);

/// Decodes a matrix batch; `None` for anything else or a matrix GRDX refuses.
pub fn decode_matrix_batch(bytes: &[u8]) -> Option<MatrixBatch> {
    let (&version, rest) = bytes.split_first()?;
    if version != MATRIX_BATCH_ENCODING_VERSION {
        return None;
    }
    let (len, rest) = rest.split_at_checked(2)?;
    let len = u16::from_le_bytes(len.try_into().ok()?) as usize;
    let (name, rest) = rest.split_at_checked(len)?;
    let name = std::str::from_utf8(name).ok()?.to_owned();
    let (applied, grdx) = rest.split_at_checked(8)?;
    let applied = u64::from_le_bytes(applied.try_into().ok()?);
    Some((name, applied, Matrix::decode(grdx).ok()?))
}

/// What a replayed batch changed: the inputs it set, or the matrix it gave a value
/// (and that value's version).
pub enum Recorded {
    Inputs(Vec<String>),
    Matrix { name: String, version: u64 },
}

/// Why a recorded batch could not be replayed.
pub enum Unreplayable {
    Undecodable,
    Refused(BatchError),
}

/// Applies one recorded batch — inputs (record 1) or a matrix (record 2) — to
/// `runtime`, as a durable instance and a host replay their journals.
pub fn replay_batch(runtime: &mut Runtime, bytes: &[u8]) -> Result<Recorded, Unreplayable> {
    if let Some((name, version, matrix)) = decode_matrix_batch(bytes) {
        runtime
            .apply_matrix(&name, &matrix)
            .map_err(Unreplayable::Refused)?;
        return Ok(Recorded::Matrix { name, version });
    }
    let batch = decode_batch(bytes).ok_or(Unreplayable::Undecodable)?;
    let named: Vec<(&str, f64)> = batch.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    runtime.apply(&named).map_err(Unreplayable::Refused)?;
    Ok(Recorded::Inputs(
        batch.into_iter().map(|(input, _)| input).collect(),
    ))
}

/// Decodes one batch; `None` for anything short, long or malformed.
pub fn decode_batch(bytes: &[u8]) -> Option<Vec<(String, f64)>> {
    let (&version, mut rest) = bytes.split_first()?;
    if version != BATCH_ENCODING_VERSION {
        return None;
    }
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let mut batch = Vec::with_capacity(count.min(grid_spec::limits::BATCH_INPUTS_MAX));
    for _ in 0..count {
        let len = u16::from_le_bytes(take(2)?.try_into().ok()?) as usize;
        let name = std::str::from_utf8(take(len)?).ok()?.to_owned();
        let value = f64::from_bits(u64::from_le_bytes(take(8)?.try_into().ok()?));
        batch.push((name, value));
    }
    rest.is_empty().then_some(batch)
}

impl DurableModel {
    /// Opens (creating if absent) the instance of `model` in `dir` and replays every
    /// journaled batch in order.
    pub fn open(dir: &Path, model: &Model) -> Result<DurableModel, JournalError> {
        // Something that is not an instance is named as such before its permissions
        // are judged (`--dir /etc/passwd` is not "too open", it is not an instance).
        let not = |reason| JournalError::NotAnInstance {
            path: dir.to_owned(),
            reason,
        };
        match std::fs::metadata(dir) {
            Ok(m) if !m.is_dir() => return Err(not("it is not a directory")),
            Ok(_) if !dir.join("journal").exists() => {
                let empty = std::fs::read_dir(dir)
                    .map(|mut entries| entries.next().is_none())
                    .unwrap_or(false);
                if !empty {
                    return Err(not("it holds other files and no `journal`"));
                }
            }
            _ => {}
        }
        ensure_private_dir(dir)?;
        let journal_dir = dir.join("journal");
        let storage = |source| JournalError::Storage {
            path: journal_dir.clone(),
            source,
        };
        let database = Database::builder(&journal_dir)
            .worker_threads(1)
            .open()
            .map_err(storage)?;
        let meta = database
            .keyspace("meta", KeyspaceCreateOptions::default)
            .map_err(storage)?;
        let batches = database
            .keyspace("batches", KeyspaceCreateOptions::default)
            .map_err(storage)?;
        let wanted = definition(model);
        match meta.get("format").map_err(storage)? {
            Some(format) if format.as_ref() != JOURNAL_FORMAT.as_bytes() => {
                return Err(JournalError::UnsupportedFormat {
                    path: journal_dir,
                    found: String::from_utf8_lossy(&format).into_owned(),
                });
            }
            Some(_) => {
                let held =
                    meta.get("model")
                        .map_err(storage)?
                        .ok_or_else(|| JournalError::Damaged {
                            path: journal_dir.clone(),
                            detail: "it names a format but no model".to_owned(),
                        })?;
                let held = String::from_utf8_lossy(&held).into_owned();
                if held != wanted {
                    return Err(JournalError::OtherModel {
                        path: dir.to_owned(),
                        held: held.split_whitespace().nth(1).unwrap_or("?").to_owned(),
                        wanted: model.name.clone(),
                        difference: first_difference(&held, &wanted),
                    });
                }
            }
            None => {
                // A new instance: record what its batches will mean, durably, first.
                let mut batch = database.batch();
                batch.insert(&meta, "format", JOURNAL_FORMAT);
                batch.insert(&meta, "model", wanted.as_str());
                batch.commit().map_err(storage)?;
                database.persist(PersistMode::SyncAll).map_err(storage)?;
            }
        }
        let mut runtime = Runtime::new(model)?;
        let mut batches_applied = 0;
        for guard in batches.iter() {
            let (key, value) = guard.into_inner().map_err(storage)?;
            let damaged = |detail: String| JournalError::Damaged {
                path: journal_dir.clone(),
                detail,
            };
            let number = <[u8; 8]>::try_from(key.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| damaged(format!("a batch key of {} bytes", key.len())))?;
            if number != batches_applied + 1 {
                return Err(damaged(format!(
                    "batch {number} follows batch {batches_applied}"
                )));
            }
            replay_batch(&mut runtime, &value).map_err(|e| match e {
                Unreplayable::Undecodable => damaged(format!("batch {number} does not decode")),
                Unreplayable::Refused(e) => {
                    damaged(format!("batch {number} no longer applies: {e}"))
                }
            })?;
            batches_applied = number;
        }
        Ok(DurableModel {
            dir: dir.to_owned(),
            database,
            batches,
            runtime,
            batches_applied,
            poisoned: false,
        })
    }

    /// Applies one batch atomically and returns its number once it is durable. A
    /// refused batch changes nothing, in memory or on disk.
    pub fn apply(&mut self, batch: &[(&str, f64)]) -> Result<u64, JournalError> {
        self.refuse_if_poisoned()?;
        // Validation happens inside `apply`, before anything changes.
        self.runtime.apply(batch)?;
        self.journal(encode_batch(batch))
    }

    /// Applies the whole value of matrix `name` as one batch and returns its number
    /// once it is durable: every cell of it lands at once, the cells reading it
    /// recompute once. Refused, changing nothing, for a name that is not a matrix of
    /// the model or another geometry.
    pub fn apply_matrix(&mut self, name: &str, matrix: &Matrix) -> Result<u64, JournalError> {
        self.refuse_if_poisoned()?;
        self.runtime.apply_matrix(name, matrix)?;
        self.journal(encode_matrix_batch(name, 0, matrix))
    }

    fn refuse_if_poisoned(&self) -> Result<(), JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned {
                path: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// Journals an applied batch as the next one, synced.
    fn journal(&mut self, encoded: Vec<u8>) -> Result<u64, JournalError> {
        let number = self.batches_applied + 1;
        let written = self
            .batches
            .insert(number.to_be_bytes(), encoded)
            .and_then(|()| self.database.persist(PersistMode::SyncAll));
        if let Err(source) = written {
            // Memory is now ahead of the disk: nothing more may be acknowledged.
            self.poisoned = true;
            return Err(JournalError::Storage {
                path: self.dir.join("journal"),
                source,
            });
        }
        self.batches_applied = number;
        Ok(number)
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// How many batches the instance holds (all durable).
    pub fn batches_applied(&self) -> u64 {
        self.batches_applied
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip() {
        let batch = [("a", 1.5), ("temp_c", -0.0), ("b", f64::MAX)];
        let decoded = decode_batch(&encode_batch(&batch)).unwrap();
        assert_eq!(decoded.len(), 3);
        for ((n1, v1), (n2, v2)) in batch.iter().zip(&decoded) {
            assert_eq!(*n1, n2);
            assert_eq!(v1.to_bits(), v2.to_bits());
        }
        let mut bytes = encode_batch(&batch);
        bytes.pop();
        assert!(decode_batch(&bytes).is_none(), "a torn batch never decodes");
        bytes = encode_batch(&batch);
        bytes.push(0);
        assert!(
            decode_batch(&bytes).is_none(),
            "trailing bytes never decode"
        );
    }

    #[test]
    fn what_is_not_an_instance_is_named_so_and_left_alone() {
        let topology = grid_spec::load_str(
            "t.kdl",
            "grid version=1\nmodel m host=h { input n default=0; }\nhost h listen=\"127.0.0.1:7999\"\n",
        )
        .unwrap();
        let model = &topology.models[0];
        for (path, why) in [
            ("/etc/passwd", "it is not a directory"),
            ("/etc", "it holds other files and no `journal`"),
        ] {
            let refused = DurableModel::open(Path::new(path), model).err().unwrap();
            assert!(
                matches!(&refused, JournalError::NotAnInstance { reason, .. } if *reason == why),
                "{path}: {refused}"
            );
        }
    }
}
