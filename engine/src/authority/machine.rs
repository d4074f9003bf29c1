//! The authority's state machine (claims and original answers) and its snapshots.
//!
//! The state is written through to fjall — keyspaces `sm-claims`, `sm-answers`,
//! `sm-forgotten`, `sm-meta` of the authority's database, beside the log — in one
//! batch per `apply` call, with the last applied log id; it is read back at start, and
//! openraft re-applies the committed entries after it. Those batches are not fsynced on
//! their own: the log entries they come from are, and every later fsync of the shared
//! journal (the next append, the vote, a purge) covers them in order. Before a log
//! prefix is purged, the state covering it is made durable. Reads are served from the
//! copy in memory.
//!
//! A snapshot (for a voter that needs one, and to purge the log) is a file in
//! `DIR/authority/M/snapshots/`, written to a temporary name, fsynced, renamed and its
//! directory fsynced; only then are older generations deleted (files really removed).

// openraft's storage traits fix the error type (`StorageError`, ~224 bytes).
#![allow(clippy::result_large_err)]

use std::io::{Cursor, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};

use super::claims::{Applied, Claim, Claims, ClaimsParts, Command};
use super::types::{
    Decision, Decisions, Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership,
    TypeConfig,
};

/// The snapshot files' extension.
const SNAPSHOT_EXTENSION: &str = "snapshot";

/// Everything the state machine holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MachineState {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership,
    pub claims: Claims,
}

/// A snapshot file: its meta and the state it captured.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta,
    state: MachineState,
}

/// The state machine's keyspaces in the authority's fjall database.
#[derive(Clone)]
struct Store {
    database: fjall::Database,
    claims: fjall::Keyspace,
    answers: fjall::Keyspace,
    forgotten: fjall::Keyspace,
    meta: fjall::Keyspace,
}

/// A retained answer as stored: `seq` orders retention (log index × 2,048 + position in
/// the entry; a snapshot's answers take 0, 1, 2, … below every later one).
#[derive(Serialize, Deserialize)]
struct StoredAnswer {
    seq: u64,
    command: Command,
    answer: super::claims::Answer,
}

const LAST_APPLIED: &str = "last-applied";

fn json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}
const MEMBERSHIP: &str = "membership";

fn store_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(&std::io::Error::other(e.to_string())).into()
}

impl Store {
    fn open(database: fjall::Database) -> Result<Store, fjall::Error> {
        let [claims, answers, forgotten, meta] = crate::store::open_keyspaces(
            &database,
            ["sm-claims", "sm-answers", "sm-forgotten", "sm-meta"],
        )?;
        Ok(Store {
            claims,
            answers,
            forgotten,
            meta,
            database,
        })
    }

    /// The state as stored, or `None` when nothing was ever applied here.
    #[allow(clippy::type_complexity)]
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
        let mut claims = Vec::new();
        for guard in self.claims.iter() {
            let (_, v) = guard.into_inner().map_err(|e| e.to_string())?;
            claims.push(json(&v)?);
        }
        let mut answers: Vec<(u64, String, Command, super::claims::Answer)> = Vec::new();
        for guard in self.answers.iter() {
            let (k, v) = guard.into_inner().map_err(|e| e.to_string())?;
            let stored: StoredAnswer = json(&v)?;
            let op = String::from_utf8(k.to_vec()).map_err(|e| e.to_string())?;
            answers.push((stored.seq, op, stored.command, stored.answer));
        }
        answers.sort_by_key(|a| a.0);
        let mut forgotten = Vec::new();
        for guard in self.forgotten.iter() {
            let k = guard.key().map_err(|e| e.to_string())?;
            let bytes: [u8; 8] = k
                .as_ref()
                .try_into()
                .map_err(|_| "a forgotten digest is not 8 bytes")?;
            forgotten.push(u64::from_be_bytes(bytes));
        }
        Ok(Some(MachineState {
            last_applied,
            last_membership,
            claims: Claims::from_parts(ClaimsParts {
                claims,
                answers: answers
                    .into_iter()
                    .map(|(_, op, c, a)| (op, c, a))
                    .collect(),
                forgotten,
            }),
        }))
    }

    /// Replaces everything stored with `state` (installing a snapshot), durably.
    fn replace(&self, state: &MachineState) -> Result<(), StorageError> {
        let mut batch = self.database.batch();
        for keyspace in [&self.claims, &self.answers, &self.forgotten, &self.meta] {
            for guard in keyspace.iter() {
                batch.remove(keyspace, guard.key().map_err(store_err)?);
            }
        }
        let parts = state.claims.to_parts();
        for claim in &parts.claims {
            batch.insert(
                &self.claims,
                claim.name.as_str(),
                serde_json::to_vec(claim).map_err(store_err)?,
            );
        }
        for (seq, (op, command, answer)) in parts.answers.into_iter().enumerate() {
            let stored = StoredAnswer {
                seq: seq as u64,
                command,
                answer,
            };
            batch.insert(
                &self.answers,
                op.as_str(),
                serde_json::to_vec(&stored).map_err(store_err)?,
            );
        }
        for digest in parts.forgotten {
            batch.insert(&self.forgotten, digest.to_be_bytes(), []);
        }
        self.put_meta(&mut batch, state)?;
        batch.commit().map_err(store_err)?;
        self.database
            .persist(fjall::PersistMode::SyncAll)
            .map_err(store_err)
    }

    fn put_meta(
        &self,
        batch: &mut fjall::OwnedWriteBatch,
        state: &MachineState,
    ) -> Result<(), StorageError> {
        batch.insert(
            &self.meta,
            LAST_APPLIED,
            serde_json::to_vec(&state.last_applied).map_err(store_err)?,
        );
        batch.insert(
            &self.meta,
            MEMBERSHIP,
            serde_json::to_vec(&state.last_membership).map_err(store_err)?,
        );
        Ok(())
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
    /// The `snapshot-install` failpoint, as armed.
    install_failpoint: Option<crate::store::failpoints::Action>,
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
        let stored = match &store {
            Some(store) => store.load().map_err(std::io::Error::other)?,
            None => None,
        };
        let state = match (stored, generations(snapshots)?.last()) {
            (Some(state), _) => state,
            (None, Some((_, path))) => {
                let file: SnapshotFile = serde_json::from_slice(&std::fs::read(path)?)
                    .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
                file.state
            }
            (None, None) => MachineState::default(),
        };
        // Temporary files of an interrupted write are not snapshots.
        for entry in std::fs::read_dir(snapshots)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("tmp") {
                std::fs::remove_file(path)?;
            }
        }
        Ok(Machine {
            store,
            state: Arc::new(RwLock::new(state)),
            snapshots: snapshots.to_owned(),
            installed: Arc::default(),
            install_failpoint,
        })
    }

    /// The snapshot files on disk now: `(generation, file name)`.
    pub fn snapshot_files(&self) -> Vec<String> {
        generations(&self.snapshots)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, p)| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, MachineState> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, MachineState> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes a snapshot file durably, then deletes every older generation.
    fn persist(&self, meta: &SnapshotMeta, bytes: &[u8]) -> Result<(), StorageError> {
        let generation = generations(&self.snapshots)
            .map_err(snapshot_err)?
            .last()
            .map_or(1, |(g, _)| g + 1);
        let last = meta.last_log_id.map_or(0, |l| l.index);
        let name = format!("{generation:012}-{last}");
        let temporary = self.snapshots.join(format!("{name}.tmp"));
        let path = self.snapshots.join(format!("{name}.{SNAPSHOT_EXTENSION}"));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .map_err(snapshot_err)?;
        file.write_all(bytes).map_err(snapshot_err)?;
        file.sync_all().map_err(snapshot_err)?;
        std::fs::rename(&temporary, &path).map_err(snapshot_err)?;
        std::fs::File::open(&self.snapshots)
            .and_then(|d| d.sync_all())
            .map_err(snapshot_err)?;
        for (g, old) in generations(&self.snapshots).map_err(snapshot_err)? {
            if g < generation {
                std::fs::remove_file(old).map_err(snapshot_err)?;
            }
        }
        Ok(())
    }

    fn encode(meta: &SnapshotMeta, state: &MachineState) -> Result<Vec<u8>, StorageError> {
        serde_json::to_vec(&SnapshotFile {
            meta: meta.clone(),
            state: state.clone(),
        })
        .map_err(snapshot_err)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Machine {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // A copy taken under the lock; encoding and the synced write happen on a
        // blocking thread, so applying goes on meanwhile. The stored state is made
        // durable first: the log this snapshot covers is purged after it.
        let state = self.read().clone();
        if let Some(store) = self.store.clone() {
            tokio::task::spawn_blocking(move || {
                store.database.persist(fjall::PersistMode::SyncAll)
            })
            .await
            .map_err(snapshot_err)?
            .map_err(store_err)?;
        }
        let machine = self.clone();
        let (meta, bytes) = tokio::task::spawn_blocking(move || {
            let meta = SnapshotMeta {
                last_log_id: state.last_applied,
                last_membership: state.last_membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    state.last_applied.map_or(0, |l| l.leader_id.term),
                    state.last_applied.map_or(0, |l| l.index)
                ),
            };
            let bytes = Machine::encode(&meta, &state)?;
            machine.persist(&meta, &bytes)?;
            Ok::<_, StorageError>((meta, bytes))
        })
        .await
        .map_err(snapshot_err)??;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
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
        let mut state = self.write();
        let mut decisions = Vec::new();
        let mut batch = self.store.as_ref().map(|s| s.database.batch());
        for entry in entries {
            state.last_applied = Some(entry.log_id);
            decisions.push(match entry.payload {
                EntryPayload::Blank => Decisions(Vec::new()),
                EntryPayload::Normal(proposals) => {
                    let mut decided = Vec::with_capacity(proposals.0.len());
                    for (i, p) in proposals.0.into_iter().enumerate() {
                        let known = state.claims.retained(&p.op).is_some();
                        let name = p.command.claim().to_owned();
                        let op = p.op.clone();
                        decided.push(match state.claims.apply(&p.op, p.command) {
                            Applied::Answer(answer) => Decision::Answer(answer),
                            Applied::Refused(reason) => Decision::Refused { reason },
                        });
                        if let (Some(batch), Some(store)) = (batch.as_mut(), self.store.as_ref()) {
                            if !known && let Some((command, answer)) = state.claims.retained(&op) {
                                let stored = StoredAnswer {
                                    seq: entry.log_id.index * 2_048 + i as u64,
                                    command: command.clone(),
                                    answer: answer.clone(),
                                };
                                batch.insert(
                                    &store.answers,
                                    op.as_str(),
                                    serde_json::to_vec(&stored).map_err(store_err)?,
                                );
                            }
                            if let Some(claim) = state.claims.claim(&name) {
                                batch.insert(
                                    &store.claims,
                                    name.as_str(),
                                    serde_json::to_vec::<Claim>(claim).map_err(store_err)?,
                                );
                            }
                            for old in state.claims.take_forgotten() {
                                batch.remove(&store.answers, old.as_str());
                                batch.insert(
                                    &store.forgotten,
                                    super::claims::digest(&old).to_be_bytes(),
                                    [],
                                );
                            }
                        }
                    }
                    Decisions(decided)
                }
                EntryPayload::Membership(membership) => {
                    state.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                    Decisions(Vec::new())
                }
            });
        }
        if let (Some(mut batch), Some(store)) = (batch, self.store.as_ref()) {
            store.put_meta(&mut batch, &state)?;
            batch.commit().map_err(store_err)?;
        }
        Ok(decisions)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
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
        let bytes = snapshot.into_inner();
        let file: SnapshotFile = serde_json::from_slice(&bytes).map_err(read_snapshot_err)?;
        if file.meta.last_log_id != meta.last_log_id {
            return Err(read_snapshot_err(std::io::Error::other(
                "the snapshot's contents do not match its meta",
            )));
        }
        self.persist(meta, &bytes)?;
        if let Some(store) = &self.store {
            store.replace(&file.state)?;
        }
        *self.write() = file.state;
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
        let bytes = std::fs::read(&path).map_err(read_snapshot_err)?;
        let file: SnapshotFile = serde_json::from_slice(&bytes).map_err(read_snapshot_err)?;
        Ok(Some(Snapshot {
            meta: file.meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::claims::Command;
    use crate::authority::types::{Proposal, Proposals};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-machine-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn entry(index: u64, op: &str, claim: &str) -> Entry {
        Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Proposals(vec![Proposal {
                op: op.to_owned(),
                command: Command::Acquire {
                    claim: claim.to_owned(),
                    caller: "a".to_owned(),
                },
            }])),
        }
    }

    #[test]
    fn a_new_generation_replaces_the_old_one_and_reopening_loads_it() {
        let dir = scratch("generations");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut machine = Machine::open(&dir, None, None).unwrap();
            machine.apply(vec![entry(1, "o1", "x")]).await.unwrap();
            machine.build_snapshot().await.unwrap();
            assert_eq!(machine.snapshot_files(), vec!["000000000001-1.snapshot"]);
            machine
                .apply(vec![entry(2, "o2", "y"), entry(3, "o3", "z")])
                .await
                .unwrap();
            machine.build_snapshot().await.unwrap();
            // The older generation's file is really gone.
            assert_eq!(machine.snapshot_files(), vec!["000000000002-3.snapshot"]);
            assert!(!dir.join("000000000001-1.snapshot").exists());
        });
        // A temporary file of an interrupted write is not a snapshot and is removed.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join("000000000003-9.tmp"))
            .and_then(|mut f| f.write_all(b"partial"))
            .unwrap();
        let reopened = Machine::open(&dir, None, None).unwrap();
        assert!(!dir.join("000000000003-9.tmp").exists());
        let state = reopened.state.read().unwrap();
        assert_eq!(state.last_applied.map(|l| l.index), Some(3));
        assert_eq!(state.claims.len(), 3);
        assert_eq!(state.claims.answer("o2").map(|a| a.epoch), Some(1));
        drop(state);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_state_written_through_to_fjall_is_read_back_whole() {
        let dir = scratch("store");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let log = crate::authority::log::LogStore::open(&dir.join("log")).unwrap();
        let before = runtime.block_on(async {
            let mut machine =
                Machine::open(&dir.join("snapshots"), Some(log.database()), None).unwrap();
            machine
                .apply(vec![
                    entry(1, "o1", "x"),
                    entry(2, "o2", "x"),
                    entry(3, "o3", "y"),
                ])
                .await
                .unwrap();
            machine.state.read().unwrap().clone()
        });
        log.database().persist(fjall::PersistMode::SyncAll).unwrap();
        // No snapshot file exists: everything comes from the keyspaces.
        let reopened = Machine::open(&dir.join("snapshots"), Some(log.database()), None).unwrap();
        assert!(reopened.snapshot_files().is_empty());
        let after = reopened.state.read().unwrap().clone();
        assert_eq!(after.last_applied, before.last_applied);
        assert_eq!(after.claims.to_parts(), before.claims.to_parts());
        assert_eq!(
            after.claims.answer("o2").map(|a| a.outcome),
            Some(crate::authority::claims::Outcome::Succeeded)
        );
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
