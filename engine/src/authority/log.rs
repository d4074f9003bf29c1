//! The Raft log and hard state of one membership's authority, in fjall
//! (`DIR/authority/M/log`).
//!
//! Durability: an appended entry is reported flushed to openraft only after an fsync
//! (`PersistMode::SyncAll`) that covers it. The vote is fsynced before `save_vote`
//! returns. Nothing is acknowledged from memory only.
//!
//! The append fsyncs in place, on the raft core's task: openraft 0.9 awaits each
//! append's flush before it runs its next command (replication to the followers
//! included), so one append at most ever waits for a flush — a flusher thread would
//! gather nothing and add two thread switches to every write (~50–90 µs here, issue
//! 37). The group commit is one level up: many claim commands per entry
//! (`service/commit.rs`).

// openraft's storage traits fix the error type (`StorageError`, ~224 bytes).
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fjall::{Database, Keyspace, PersistMode};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError};

use super::types::{Entry, LogId, StorageError, TypeConfig, Vote};

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const PURGED: &str = "purged";

/// The log store; clones share the same database.
#[derive(Clone)]
pub struct LogStore {
    database: Database,
    logs: Keyspace,
    meta: Keyspace,
    /// Bytes of entries appended since this process opened the log (the snapshot
    /// policy's measure, `service.rs`).
    appended: Arc<AtomicU64>,
}

fn key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn read_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::read_logs(&e).into()
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    pub fn open(dir: &Path) -> Result<LogStore, fjall::Error> {
        let database = Database::builder(dir).worker_threads(1).open()?;
        let [logs, meta] = crate::store::open_keyspaces(&database, ["logs", "meta"])?;
        Ok(LogStore {
            database,
            logs,
            meta,
            appended: Arc::default(),
        })
    }

    fn get_meta<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<T>, StorageError> {
        match self.meta.get(name).map_err(read_err)? {
            Some(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(read_err)?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: serde::Serialize>(&self, name: &str, value: &T) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(value).map_err(write_err)?;
        self.meta.insert(name, bytes).map_err(write_err)
    }

    fn sync(&self) -> Result<(), StorageError> {
        crate::metrics::fsync(|| self.database.persist(PersistMode::SyncAll)).map_err(write_err)
    }

    /// Removes every entry with an index in `from..=to`.
    fn remove_range(&self, from: u64, to: u64) -> Result<(), StorageError> {
        let keys: Vec<_> = self
            .logs
            .range(key(from)..=key(to))
            .map(|guard| guard.key().map_err(read_err))
            .collect::<Result<_, _>>()?;
        let mut batch = self.database.batch();
        for k in keys {
            batch.remove(&self.logs, k);
        }
        batch.commit().map_err(write_err)
    }

    /// The authority's fjall database (the state machine keeps its keyspaces there, so
    /// every fsync of the log's journal also covers the state written before it).
    pub fn database(&self) -> Database {
        self.database.clone()
    }

    /// Bytes of entries appended since the log was opened.
    pub fn appended_bytes(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
    }

    /// The purged prefix's last log id, for inspection.
    pub fn purged(&self) -> Option<LogId> {
        self.get_meta(PURGED).ok().flatten()
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x + 1,
            Bound::Unbounded => 0,
        };
        let mut entries = Vec::new();
        for guard in self.logs.range(key(start)..) {
            let (k, v) = guard.into_inner().map_err(read_err)?;
            let index = u64::from_be_bytes(
                k.as_ref()
                    .try_into()
                    .map_err(|_| read_err(std::io::Error::other("a log key is not 8 bytes")))?,
            );
            if !range.contains(&index) {
                break;
            }
            let entry: Entry = serde_json::from_slice(&v).map_err(read_err)?;
            assert_eq!(
                entry.log_id.index, index,
                "a log entry stored under another index"
            );
            entries.push(entry);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.get_meta(PURGED)?;
        let last = match self.logs.last_key_value() {
            Some(guard) => {
                let (_, v) = guard.into_inner().map_err(read_err)?;
                let entry: Entry = serde_json::from_slice(&v).map_err(read_err)?;
                Some(entry.log_id)
            }
            None => None,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last.or(last_purged_log_id),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.put_meta(VOTE, vote)?;
        self.sync()
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.get_meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not fsynced: a lost committed index is learned again from the leader; it only
        // lets a restarted voter re-apply its committed entries at once.
        self.put_meta(COMMITTED, &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get_meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = self.database.batch();
        let mut appended = 0;
        for entry in entries {
            let bytes = serde_json::to_vec(&entry).map_err(write_err)?;
            appended += bytes.len() as u64;
            batch.insert(&self.logs, key(entry.log_id.index), bytes);
        }
        self.appended.fetch_add(appended, Ordering::Relaxed);
        batch.commit().map_err(write_err)?;
        let flushed = crate::metrics::fsync(|| self.database.persist(PersistMode::SyncAll))
            .map_err(|e| std::io::Error::other(e.to_string()));
        callback.log_io_completed(flushed);
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.remove_range(log_id.index, u64::MAX)?;
        self.sync()
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // The purged id first: a crash between the two leaves entries below it, which
        // are ignored, never a log that claims entries it no longer has.
        self.put_meta(PURGED, &log_id)?;
        self.sync()?;
        self.remove_range(0, log_id.index)
    }
}
