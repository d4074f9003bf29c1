//! The authority's state machine (claims and original answers) and its snapshots.
//!
//! The state is written through to fjall — keyspaces `sm-claims`, `sm-meta` and the
//! answers' `sm-answers`, `sm-answer-order`, `sm-forgotten` (`answers.rs`) of the
//! authority's database, beside the log — in one batch per `apply` call, with the last
//! applied log id; openraft re-applies the committed entries after it at start. Those
//! batches are not fsynced on their own: the log entries they come from are, and every
//! later fsync of the shared journal (the next append, the vote, a purge) covers them in
//! order. Before a log prefix is purged, the state covering it is made durable. The
//! held claims are also held in memory (reads are served from there); released claims
//! and the answers are not — a start reads the held claims (`sm-held`) and where the
//! answers stand, not the rest. A command naming a released claim takes it back into
//! memory until its apply ends.
//!
//! A snapshot (for a voter that needs one, and to purge the log) is a file in
//! `DIR/authority/M/snapshots/`, written to a temporary name, fsynced, renamed and its
//! directory fsynced; only then are older generations deleted (files really removed).

// openraft's storage traits fix the error type (`StorageError`, ~224 bytes).
#![allow(clippy::result_large_err)]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};

use super::answers::{AnswerKeyspaces, MemoryAnswers, Retained, StoredAnswers};
use super::claims::{Applied, Claim, ClaimState, Claims};
use super::snapshot::{self, Heading, SnapshotData, Writer};

use super::types::{
    Decision, Decisions, Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership,
    TypeConfig,
};

/// The snapshot files' extension.
const SNAPSHOT_EXTENSION: &str = "snapshot";

/// Where a voter's original answers are: in memory (no database), or stored.
#[derive(Debug, Clone)]
pub enum AnswersHome {
    Memory(MemoryAnswers),
    Stored(Retained),
}

impl Default for AnswersHome {
    fn default() -> Self {
        AnswersHome::Memory(MemoryAnswers::default())
    }
}

/// Everything the state machine holds in memory.
#[derive(Debug, Clone, Default)]
pub struct MachineState {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership,
    pub claims: Claims,
    pub answers: AnswersHome,
}

mod install;
use install::{Checking, SnapshotState, install_into};

/// The state machine's keyspaces in the authority's fjall database.
#[derive(Clone)]
struct Store {
    database: fjall::Database,
    /// Every claim, held or released, by name.
    claims: fjall::Keyspace,
    /// The names of the held claims (the ones a start reads back).
    held: fjall::Keyspace,
    answers: AnswerKeyspaces,
    meta: fjall::Keyspace,
}

const LAST_APPLIED: &str = "last-applied";
const MEMBERSHIP: &str = "membership";
/// Where the stored answers stand ([`Retained`]); absent in a store written before
/// `sm-answer-order` existed.
const RETAINED: &str = "answers-retained";
/// How many released claims `sm-claims` holds (they are not in memory); absent in a
/// store written before `sm-held` existed.
const RELEASED: &str = "claims-released";
/// Present while a snapshot replaces the store: the snapshot file's name.
const INSTALLING: &str = "installing";

fn json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

fn store_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(&std::io::Error::other(e.to_string())).into()
}

impl Store {
    fn open(database: fjall::Database) -> Result<Store, fjall::Error> {
        let [claims, answers, forgotten, meta, order, held] = crate::store::open_keyspaces(
            &database,
            [
                "sm-claims",
                "sm-answers",
                "sm-forgotten",
                "sm-meta",
                "sm-answer-order",
                "sm-held",
            ],
        )?;
        Ok(Store {
            claims,
            held,
            answers: AnswerKeyspaces {
                answers,
                order,
                forgotten,
            },
            meta,
            database,
        })
    }

    /// The state as stored — the claims and where the answers stand, not the answers —
    /// or `None` when nothing was ever applied here.
    fn load(&self) -> Result<Option<MachineState>, String> {
        let Some(last) = self.meta.get(LAST_APPLIED).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let last_applied: Option<LogId> = json(&last)?;
        let last_membership: StoredMembership =
            match self.meta.get(MEMBERSHIP).map_err(|e| e.to_string())? {
                Some(bytes) => json(&bytes)?,
                None => StoredMembership::default(),
            };
        let claims = self.held_claims()?;
        let retained = match self.meta.get(RETAINED).map_err(|e| e.to_string())? {
            Some(bytes) => json(&bytes)?,
            None => {
                let mut batch = self.database.batch();
                let retained = self.answers.index_once(&mut batch)?;
                batch.insert(
                    &self.meta,
                    RETAINED,
                    serde_json::to_vec(&retained).map_err(|e| e.to_string())?,
                );
                batch.commit().map_err(|e| e.to_string())?;
                self.database
                    .persist(fjall::PersistMode::SyncAll)
                    .map_err(|e| e.to_string())?;
                retained
            }
        };
        Ok(Some(MachineState {
            last_applied,
            last_membership,
            claims,
            answers: AnswersHome::Stored(retained),
        }))
    }

    /// The held claims (read through `sm-held`) and how many released ones are kept.
    /// A store written before `sm-held` existed is indexed once, here.
    fn held_claims(&self) -> Result<Claims, String> {
        if let Some(bytes) = self.meta.get(RELEASED).map_err(|e| e.to_string())? {
            let released: u64 = json(&bytes)?;
            let mut held = Vec::new();
            for guard in self.held.iter() {
                let name = guard.key().map_err(|e| e.to_string())?;
                let claim = self.read_claim(&name)?.ok_or_else(|| {
                    format!(
                        "sm-held names claim `{}`, which sm-claims does not hold",
                        String::from_utf8_lossy(&name)
                    )
                })?;
                held.push(claim);
            }
            return Ok(Claims::from_parts(held, released));
        }
        let mut batch = self.database.batch();
        let mut all = Vec::new();
        for guard in self.claims.iter() {
            let (_, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let claim = json::<Claim>(&v)?;
            if claim.state == ClaimState::Held {
                batch.insert(&self.held, claim.name.as_str(), []);
            }
            all.push(claim);
        }
        let mut claims = Claims::from_claims(all);
        claims.evict_released();
        batch.insert(
            &self.meta,
            RELEASED,
            serde_json::to_vec(&claims.elsewhere()).map_err(|e| e.to_string())?,
        );
        batch.commit().map_err(|e| e.to_string())?;
        self.database
            .persist(fjall::PersistMode::SyncAll)
            .map_err(|e| e.to_string())?;
        Ok(claims)
    }

    /// The snapshot file a stop left replacing this store, if any.
    fn installing(&self) -> Result<Option<String>, String> {
        self.meta
            .get(INSTALLING)
            .map_err(|e| e.to_string())?
            .map(|name| String::from_utf8(name.to_vec()).map_err(|e| e.to_string()))
            .transpose()
    }

    /// One claim as stored (held or released).
    fn read_claim(&self, name: &[u8]) -> Result<Option<Claim>, String> {
        self.claims
            .get(name)
            .map_err(|e| e.to_string())?
            .map(|v| json::<Claim>(&v))
            .transpose()
    }

    /// Writes `claim` and its place in the held index into `batch`.
    fn put_claim(&self, batch: &mut fjall::OwnedWriteBatch, claim: &Claim) -> Result<(), String> {
        batch.insert(
            &self.claims,
            claim.name.as_str(),
            serde_json::to_vec(claim).map_err(|e| e.to_string())?,
        );
        match claim.state {
            ClaimState::Held => batch.insert(&self.held, claim.name.as_str(), []),
            ClaimState::Released => batch.remove(&self.held, claim.name.as_str()),
        }
        Ok(())
    }

    fn put_meta(
        &self,
        batch: &mut fjall::OwnedWriteBatch,
        last_applied: Option<LogId>,
        membership: &StoredMembership,
        retained: Retained,
        released: u64,
    ) -> Result<(), StorageError> {
        batch.insert(
            &self.meta,
            LAST_APPLIED,
            serde_json::to_vec(&last_applied).map_err(store_err)?,
        );
        batch.insert(
            &self.meta,
            MEMBERSHIP,
            serde_json::to_vec(membership).map_err(store_err)?,
        );
        batch.insert(
            &self.meta,
            RETAINED,
            serde_json::to_vec(&retained).map_err(store_err)?,
        );
        batch.insert(
            &self.meta,
            RELEASED,
            serde_json::to_vec(&released).map_err(store_err)?,
        );
        Ok(())
    }

    /// Writes the whole state as `view` (a snapshot of the database) shows it into
    /// `writer`: every claim and the answers as stored, copied without decoding.
    fn write_snapshot(
        &self,
        view: &fjall::Snapshot,
        retained: Retained,
        writer: &mut Writer,
    ) -> Result<(), String> {
        for guard in fjall::Readable::iter(view, &self.claims) {
            let (_, v) = guard.into_inner().map_err(|e| e.to_string())?;
            writer.claim_json(&v).map_err(|e| e.to_string())?;
        }
        self.answers.copy_into(view, retained, writer)
    }
}

/// The state machine; clones share the state (readers use it between applies).
#[derive(Clone)]
pub struct Machine {
    store: Option<Store>,
    pub state: Arc<RwLock<MachineState>>,
    snapshots: PathBuf,
    /// Snapshots received from a leader and installed since this process started.
    pub installed: Arc<std::sync::atomic::AtomicU64>,
    /// Set (under the state's write lock) while a snapshot replaces the store: no
    /// released claim is read from it meanwhile.
    installing: Arc<std::sync::atomic::AtomicBool>,
    /// Held while a snapshot replaces the store: a build takes its view only outside.
    install_lock: Arc<std::sync::Mutex<()>>,
    /// The newest snapshot file's size in bytes (0: none): read at open, set by `keep`.
    newest_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// The `snapshot-install` failpoint, as armed.
    install_failpoint: Option<crate::store::failpoints::Action>,
    /// The `snapshot-install-part` failpoint, as armed.
    part_failpoint: Option<crate::store::failpoints::Action>,
    /// How many answers are retained (`ANSWERS_RETAINED_MAX`; less in tests).
    answers_max: u64,
    /// `snapshots "s3://…"`: every snapshot built is also put there.
    remote: Option<Arc<super::remote::RemoteSnapshots>>,
}

fn snapshot_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_snapshot(None, &e).into()
}

fn read_snapshot_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_snapshot(None, &e).into()
}

/// `(generation, path)` of every snapshot file, oldest first.
fn generations(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some(SNAPSHOT_EXTENSION) {
            continue;
        }
        let generation = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.split('-').next())
            .and_then(|g| g.parse::<u64>().ok());
        if let Some(g) = generation {
            found.push((g, path));
        }
    }
    found.sort();
    Ok(found)
}

impl Machine {
    /// Opens the state machine: its state from `database` (the authority's fjall
    /// database) — or, with none, from the newest snapshot in `snapshots` (created
    /// 0700).
    pub fn open(
        snapshots: &Path,
        database: Option<fjall::Database>,
        install_failpoint: Option<crate::store::failpoints::Action>,
    ) -> std::io::Result<Machine> {
        crate::store::ensure_private_dir(snapshots)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let store = database
            .map(Store::open)
            .transpose()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // A snapshot a stop left part-way into the store: installed again, first.
        if let Some(store) = &store
            && let Some(name) = store.installing().map_err(std::io::Error::other)?
        {
            let path = snapshots.join(&name);
            let refused = |e: String| std::io::Error::other(format!("{}: {e}", path.display()));
            if name.contains('/') || !path.is_file() {
                return Err(refused(format!(
                    "the authority's store was being replaced by snapshot `{}`, which is not there: the store is part-way and cannot be used (restore the file, or remove the membership's authority directory so the voter joins again as a new one)",
                    grid_spec::diagnostic::quoted(&name)
                )));
            }
            let data = SnapshotData::open(&path)?;
            snapshot::read(&data, &mut Checking).map_err(refused)?;
            install_into(store, &data, &name, None).map_err(refused)?;
        }
        let stored = match &store {
            Some(store) => store.load().map_err(std::io::Error::other)?,
            None => None,
        };
        let state = match (stored, generations(snapshots)?.last()) {
            (Some(state), _) => state,
            (None, Some((_, path))) => {
                let refused = |e: String| std::io::Error::other(format!("{}: {e}", path.display()));
                let data = SnapshotData::open(path)?;
                match &store {
                    // A database that holds nothing yet takes the snapshot's state.
                    Some(store) => {
                        snapshot::read(&data, &mut Checking).map_err(refused)?;
                        let name = path
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        install_into(store, &data, &name, None).map_err(refused)?
                    }
                    None => SnapshotState::read(&data).map_err(refused)?.1.in_memory(),
                }
            }
            (None, None) => MachineState {
                answers: match store {
                    Some(_) => AnswersHome::Stored(Retained::default()),
                    None => AnswersHome::default(),
                },
                ..MachineState::default()
            },
        };
        // Temporary files of an interrupted write are not snapshots.
        for entry in std::fs::read_dir(snapshots)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("tmp") {
                std::fs::remove_file(path)?;
            }
        }
        let newest_bytes = generations(snapshots)?
            .last()
            .map_or(Ok(0), |(_, p)| std::fs::metadata(p).map(|m| m.len()))?;
        Ok(Machine {
            newest_bytes: Arc::new(newest_bytes.into()),
            store,
            state: Arc::new(RwLock::new(state)),
            snapshots: snapshots.to_owned(),
            installed: Arc::default(),
            installing: Arc::default(),
            install_lock: Arc::default(),
            install_failpoint,
            part_failpoint: None,
            answers_max: crate::limits::ANSWERS_RETAINED_MAX as u64,
            remote: None,
        })
    }

    /// Arms `snapshot-install-part` (an install stops once its store is marked and
    /// its claims removed).
    pub fn with_part_failpoint(
        mut self,
        action: Option<crate::store::failpoints::Action>,
    ) -> Machine {
        self.part_failpoint = action;
        self
    }

    /// Puts every snapshot built from now on in `remote` as well.
    pub fn with_remote(mut self, remote: Arc<super::remote::RemoteSnapshots>) -> Machine {
        self.remote = Some(remote);
        self
    }

    /// The snapshot files on disk now: `(generation, file name)`.
    pub fn snapshot_files(&self) -> Vec<String> {
        generations(&self.snapshots)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, p)| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect()
    }

    /// The newest snapshot file's size in bytes (0: none).
    pub fn snapshot_bytes(&self) -> u64 {
        self.newest_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, MachineState> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, MachineState> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A new temporary file's path in the snapshots directory (`*.tmp`: removed at
    /// the next open if it is never kept).
    fn temporary(&self, what: &str) -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.snapshots
            .join(format!("{what}-{}-{n}.tmp", std::process::id()))
    }

    /// Keeps the complete, fsynced snapshot file `temporary` (in the snapshots
    /// directory) as the newest generation: renamed into place, the directory
    /// fsynced, then every older generation deleted. Its path.
    fn keep(&self, meta: &SnapshotMeta, temporary: &Path) -> Result<PathBuf, StorageError> {
        let generation = generations(&self.snapshots)
            .map_err(snapshot_err)?
            .last()
            .map_or(1, |(g, _)| g + 1);
        let last = meta.last_log_id.map_or(0, |l| l.index);
        let name = format!("{generation:012}-{last}");
        let path = self.snapshots.join(format!("{name}.{SNAPSHOT_EXTENSION}"));
        std::fs::rename(temporary, &path).map_err(snapshot_err)?;
        crate::store::sync_dir(&self.snapshots).map_err(snapshot_err)?;
        let bytes = std::fs::metadata(&path).map_err(snapshot_err)?.len();
        self.newest_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
        for (g, old) in generations(&self.snapshots).map_err(snapshot_err)? {
            if g < generation {
                std::fs::remove_file(old).map_err(snapshot_err)?;
            }
        }
        Ok(path)
    }

    /// A snapshot received whole (`bytes`), written to a temporary file and fsynced,
    /// for `install_snapshot` to read and keep.
    pub fn receive(&self, bytes: &[u8]) -> std::io::Result<SnapshotData> {
        let path = self.temporary("receiving");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        SnapshotData::open(&path)
    }

    /// The claim `name` as this voter has applied it: from memory, or (a released one)
    /// from the database — read under the state's lock, so never between an apply's
    /// eviction and its commit.
    pub fn claim(&self, name: &str) -> Result<Option<Claim>, String> {
        let state = self.read();
        match (state.claims.claim(name), &self.store) {
            (Some(claim), _) => Ok(Some(claim.clone())),
            (None, Some(_)) if self.installing.load(std::sync::atomic::Ordering::SeqCst) => Err(
                "a snapshot is being installed here: a claim not held is not read until it is"
                    .to_owned(),
            ),
            (None, Some(store)) => store.read_claim(name.as_bytes()),
            (None, None) => Ok(None),
        }
    }

    /// The retained answer of `op` (tests).
    #[cfg(test)]
    fn answer(&self, op: &str) -> Option<super::claims::Answer> {
        let state = self.read();
        match (&state.answers, &self.store) {
            (AnswersHome::Memory(m), _) => m.answer(op).cloned(),
            (AnswersHome::Stored(_), Some(store)) => store
                .answers
                .read(&store.database.snapshot(), op)
                .unwrap()
                .map(|(_, a)| a),
            (AnswersHome::Stored(_), None) => None,
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Machine {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // Everything on a blocking thread, so applying goes on meanwhile.
        let machine = self.clone();
        let (meta, data) = tokio::task::spawn_blocking(move || {
            // A copy of the state and a view of the database, taken together under the
            // state's lock — never while a snapshot is being installed here (an install
            // holds `install_lock` throughout; this waits for it: a build's error would
            // stop openraft's core). A view is a fixed point: an install or an apply
            // after it changes nothing this build reads.
            let (state, view) = {
                let _no_install = machine
                    .install_lock
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                let state = machine.read();
                let view = machine.store.as_ref().map(|s| s.database.snapshot());
                (state.clone(), view)
            };
            // The stored state is made durable first: the log this snapshot covers is
            // purged after it.
            if let Some(store) = &machine.store {
                store
                    .database
                    .persist(fjall::PersistMode::SyncAll)
                    .map_err(store_err)?;
            }
            let meta = SnapshotMeta {
                last_log_id: state.last_applied,
                last_membership: state.last_membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    state.last_applied.map_or(0, |l| l.leader_id.term),
                    state.last_applied.map_or(0, |l| l.index)
                ),
            };
            // Written as it is read: no whole snapshot in memory.
            let temporary = machine.temporary("building");
            let heading = Heading {
                meta: meta.clone(),
                last_applied: state.last_applied,
                last_membership: state.last_membership.clone(),
            };
            let write = || {
                let mut writer = Writer::create(&temporary, &heading).map_err(|e| e.to_string())?;
                match (&state.answers, &machine.store, &view) {
                    (AnswersHome::Stored(retained), Some(store), Some(view)) => {
                        store.write_snapshot(view, *retained, &mut writer)
                    }
                    (AnswersHome::Memory(answers), ..) => {
                        write_memory(&state, answers, &mut writer)
                    }
                    _ => Err("stored answers without a database".to_owned()),
                }?;
                writer.finish().map_err(|e| e.to_string())
            };
            if let Err(e) = write() {
                // No half-written file is left to fill the disk.
                let _ = std::fs::remove_file(&temporary);
                return Err(snapshot_err(std::io::Error::other(e)));
            }
            let path = machine.keep(&meta, &temporary)?;
            let data = SnapshotData::open(&path).map_err(snapshot_err)?;
            // The bucket's copy is not what the log's purge relies on (the file is):
            // a put that fails is shown by `inspect authority` and made again when a
            // voter needs this snapshot.
            if let Some(remote) = &machine.remote {
                let (term, index) = meta
                    .last_log_id
                    .map_or((0, 0), |l| (l.leader_id.term, l.index));
                let put = data
                    .bytes()
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| remote.put(term, index, &bytes));
                if let Err(e) = put {
                    tracing::warn!(error = e, "authority snapshot not put in its store");
                }
            }
            Ok::<_, StorageError>((meta, data))
        })
        .await
        .map_err(snapshot_err)??;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(data),
        })
    }
}

/// Writes a voter's state held in memory (no database) into `writer`.
fn write_memory(
    state: &MachineState,
    answers: &MemoryAnswers,
    writer: &mut Writer,
) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    for claim in state.claims.all() {
        writer.claim(claim).map_err(io)?;
    }
    for (op, command, answer) in answers.oldest_first() {
        writer.answer(op, command, answer).map_err(io)?;
    }
    for digest in answers.forgotten() {
        writer.forgotten(digest).map_err(io)?;
    }
    Ok(())
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let state = self.read();
        Ok((state.last_applied, state.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Decisions>, StorageError>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut guard = self.write();
        let MachineState {
            last_applied,
            last_membership,
            claims,
            answers,
        } = &mut *guard;
        let mut decisions = Vec::new();
        // The claims this apply names: the only ones it can take back into memory or
        // release, so the only ones to evict at its end.
        let mut named: Vec<String> = Vec::new();
        let mut session = match (&*answers, &self.store) {
            (AnswersHome::Stored(retained), Some(store)) => Some(StoredAnswers::new(
                &store.answers,
                store.database.batch(),
                *retained,
            )),
            _ => None,
        };
        for entry in entries {
            *last_applied = Some(entry.log_id);
            decisions.push(match entry.payload {
                EntryPayload::Blank => Decisions(Vec::new()),
                EntryPayload::Normal(proposals) => {
                    let mut decided = Vec::with_capacity(proposals.0.len());
                    for (i, p) in proposals.0.into_iter().enumerate() {
                        let name = p.command.claim().to_owned();
                        // A released claim is kept in the database only: taken back
                        // into memory until this apply ends.
                        if let (Some(_), Some(store)) = (&session, &self.store)
                            && claims.claim(&name).is_none()
                            && let Some(claim) =
                                store.read_claim(name.as_bytes()).map_err(store_err)?
                        {
                            claims.admit(claim);
                        }
                        let applied = match (&mut session, &mut *answers) {
                            (Some(stored), _) => {
                                stored.seq = entry.log_id.index * 2_048 + i as u64;
                                claims.apply_retaining(stored, &p.op, p.command, self.answers_max)
                            }
                            (None, AnswersHome::Memory(memory)) => {
                                claims.apply_retaining(memory, &p.op, p.command, self.answers_max)
                            }
                            (None, AnswersHome::Stored(_)) => {
                                Err("stored answers without a database".to_owned())
                            }
                        }
                        .map_err(store_err)?;
                        decided.push(match applied {
                            Applied::Answer(answer) => Decision::Answer(answer),
                            Applied::Refused(reason) => Decision::Refused { reason },
                        });
                        if let (Some(stored), Some(store)) = (&mut session, &self.store)
                            && let Some(claim) = claims.claim(&name)
                        {
                            store.put_claim(stored.batch(), claim).map_err(store_err)?;
                        }
                        named.push(name);
                    }
                    Decisions(decided)
                }
                EntryPayload::Membership(membership) => {
                    *last_membership = StoredMembership::new(Some(entry.log_id), membership);
                    Decisions(Vec::new())
                }
            });
        }
        if let (Some(session), Some(store)) = (session, self.store.as_ref()) {
            let (mut batch, retained) = session.finish();
            claims.evict_released_among(named.iter().map(String::as_str));
            store.put_meta(
                &mut batch,
                *last_applied,
                last_membership,
                retained,
                claims.elsewhere(),
            )?;
            batch.commit().map_err(store_err)?;
            *answers = AnswersHome::Stored(retained);
        }
        Ok(decisions)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        // Snapshots arrive whole (`full_snapshot`, `Machine::receive`); openraft's
        // chunked path is not used. An empty file, should it ever be asked for.
        let data = self.receive(&[]).map_err(snapshot_err)?;
        Ok(Box::new(data))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        match self.install_failpoint {
            Some(crate::store::failpoints::Action::Slow) => {
                tokio::time::sleep(crate::store::failpoints::SLOW_DELAY).await;
            }
            Some(crate::store::failpoints::Action::Abort) => {
                eprintln!("gridd: failpoint snapshot-install: aborting");
                std::process::abort();
            }
            _ => {}
        }
        let machine = self.clone();
        let meta = meta.clone();
        let received = snapshot.path.clone();
        // Read (and so checked) whole before anything is kept or replaced; a store
        // takes it in one batch.
        let installed = tokio::task::spawn_blocking(move || {
            let refused = |e: String| read_snapshot_err(std::io::Error::other(e));
            let matches = |heading: &Heading| {
                if heading.meta.last_log_id != meta.last_log_id {
                    return Err(refused(
                        "the snapshot's contents do not match its meta".to_owned(),
                    ));
                }
                Ok(())
            };
            match &machine.store {
                Some(store) => {
                    let _no_build = machine
                        .install_lock
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    matches(&snapshot::read(&snapshot, &mut Checking).map_err(refused)?)?;
                    // No reader sees the store part-way: it looks at the mark under
                    // the state's lock, set and cleared under it here.
                    let installing = |on: bool| {
                        let _state = machine.write();
                        machine
                            .installing
                            .store(on, std::sync::atomic::Ordering::SeqCst);
                    };
                    installing(true);
                    let installed = machine.keep(&meta, &snapshot.path).and_then(|path| {
                        let name = path
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        install_into(store, &snapshot, &name, machine.part_failpoint)
                            .map_err(refused)
                    });
                    match installed {
                        Ok(state) => {
                            let mut held = machine.write();
                            *held = state;
                            machine
                                .installing
                                .store(false, std::sync::atomic::Ordering::SeqCst);
                            Ok(())
                        }
                        Err(e) => {
                            // A store left part-way (its mark written) stays refused
                            // to readers until a start installs it again.
                            if !matches!(store.installing(), Ok(Some(_))) {
                                installing(false);
                            }
                            Err(e)
                        }
                    }
                }
                None => {
                    let (heading, state) = SnapshotState::read(&snapshot).map_err(refused)?;
                    matches(&heading)?;
                    machine.keep(&meta, &snapshot.path)?;
                    *machine.write() = state.in_memory();
                    Ok(())
                }
            }
        })
        .await
        .map_err(snapshot_err)?;
        match installed {
            Ok(()) => {}
            Err(e) => {
                // A refused snapshot's file is not kept (openraft sends it again).
                if received.extension().is_some_and(|x| x == "tmp") {
                    let _ = std::fs::remove_file(&received);
                }
                return Err(e);
            }
        }
        self.installed
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let Some((_, path)) = generations(&self.snapshots)
            .map_err(read_snapshot_err)?
            .pop()
        else {
            return Ok(None);
        };
        let data = SnapshotData::open(&path).map_err(read_snapshot_err)?;
        let heading = snapshot::heading(&data).map_err(|e| {
            read_snapshot_err(std::io::Error::other(format!("{}: {e}", path.display())))
        })?;
        Ok(Some(Snapshot {
            meta: heading.meta,
            snapshot: Box::new(data),
        }))
    }
}

#[cfg(test)]
mod tests;
