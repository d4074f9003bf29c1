//! Answers past the hot window (docs/storage.md, "Archive"): acknowledged operation
//! records older than `retain hot-days` (or than `gridctl storage archive
//! --older-than-seconds N`) move from the `operations` keyspace onto the installation's
//! shelf (`store::shelf`: signed segments in `DIR/archive`, an index by id in the
//! store); a re-sent id found there gets its original answer with `archived: true`.
//! With `retain archive-days`, an id answered longer ago than that is refused as
//! expired, and whole segments past it are released.
//!
//! Keyspace: `operations-by-time` (answer time `u64` BE, op → empty: what a pass reads,
//! oldest first); the shelf keeps `archive-index` and `archive-segments`.
//!
//! The periodic pass waits for company: it writes a segment of fewer than
//! `ARCHIVE_SEGMENT_ENTRIES_MIN` answers only once the oldest has waited
//! `ARCHIVE_SEGMENT_WAIT_MAX` past the window, so a quiet host makes at most one
//! segment an hour, not one a minute.
//!
//! Invariants, stated as absences: no answer leaves the hot store before the segment
//! holding it is synced and the index naming it is committed in the same synced write
//! that removes it; no unacknowledged answer is archived; no id found in the index is
//! ever executed again — an unreadable archive answers `unknown`.

use super::*;
use crate::limits::{ARCHIVE_SEGMENTS_PER_PASS_MAX, RETAIN_DAY_MS};
use crate::store::archive;
use crate::store::shelf::{Found, Shared, Shelf, ShelfError};

/// The archive of a host: the installation's shelf (segments and their index, on the
/// ground floor) and the keyspace that finds answers past the hot window.
pub(super) struct Archive {
    pub(super) shelf: Shared,
    pub(super) by_time: Keyspace,
}

/// Where an operation id's record was found.
pub(super) enum Lookup {
    Hot(OperationRecord),
    Archived(OperationRecord),
    /// In the index, answered at `at_ms`, past the `archive-days` window.
    Expired {
        at_ms: u64,
        days: u32,
    },
    /// In the index, but its segment cannot be read: never "not found".
    Unreadable(String),
    Absent,
}

/// What one archive pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ArchivePass {
    pub answers: u64,
    pub segments: u64,
    /// Answers old enough but not acknowledged by their caller: kept hot.
    pub unacknowledged: u64,
    /// A receiver's finished runs archived (in `segments`, with the answers).
    pub runs: u64,
    /// A caller's closed waits archived (in `segments`).
    pub waits: u64,
    /// Ledger answers settled by a checkpoint, archived (in `segments`).
    pub ledger_ids: u64,
    /// `publish-matrix` answers archived (in `segments`).
    pub matrix_ops: u64,
    /// Closed decisions and the ballots and gates this host signed, archived (in
    /// `segments`).
    pub decisions: u64,
    pub casts: u64,
    /// Finished runs old enough whose outcome is still owed to a mailbox caller, or
    /// charged to a mission's allocation not settled: kept hot.
    pub owed: u64,
    /// Segments released past `archive-days`.
    pub released: u64,
    /// More old answers wait for the next pass (ARCHIVE_SEGMENTS_PER_PASS_MAX).
    pub more: bool,
}

impl ArchivePass {
    /// `archived 120 answers in 1 segment (3 unacknowledged kept hot)`.
    pub fn describe(&self) -> String {
        let plural =
            |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let rooms: Vec<String> = [
            (self.runs, "run", "runs"),
            (self.waits, "wait", "waits"),
            (self.ledger_ids, "ledger answer", "ledger answers"),
            (
                self.matrix_ops,
                "publish-matrix answer",
                "publish-matrix answers",
            ),
            (self.decisions, "decision", "decisions"),
            (
                self.casts,
                "signed ballot or gate",
                "signed ballots and gates",
            ),
        ]
        .into_iter()
        .filter(|(n, ..)| *n > 0)
        .map(|(n, one, many)| format!(" and {}", plural(n, one, many)))
        .collect();
        let runs = rooms.concat();
        let mut text = format!(
            "archived {}{runs} in {}",
            plural(self.answers, "answer", "answers"),
            plural(self.segments, "segment", "segments")
        );
        if self.unacknowledged > 0 {
            text += &format!(
                "; {} kept hot until their callers acknowledge them",
                plural(self.unacknowledged, "answer", "answers")
            );
        }
        if self.owed > 0 {
            text += &format!(
                "; {} kept hot (an outcome owed to a mailbox, or a mission's allocation not settled)",
                plural(self.owed, "run", "runs")
            );
        }
        if self.released > 0 {
            text += &format!(
                "; released {} past the archive window",
                plural(self.released, "segment", "segments")
            );
        }
        if self.more {
            text += "; more answers wait for the next pass";
        }
        text
    }
}

impl Archive {
    /// Opens the archive of the installation at `dir` in `database` on the adapter
    /// `config` names (the shelf refuses an archive that is not the one the store
    /// recorded, by name).
    pub(super) fn open(
        dir: &Path,
        database: &fjall::Database,
        meta: &Keyspace,
        config: &HostConfig,
        failpoints: &crate::store::Failpoints,
    ) -> Result<Archive, HostError> {
        let store = dir.join("store");
        let [by_time] =
            crate::store::open_keyspaces(database, ["operations-by-time"]).map_err(|source| {
                HostError::Storage {
                    path: store.clone(),
                    source,
                }
            })?;
        leave_bucket(dir, database, meta, config, failpoints)?;
        leave_table(dir, database, meta, config, failpoints)?;
        let indexed = index_went(dir, meta, config)?;
        let shelf = match &config.archive {
            None => Shelf::open(dir, database, meta),
            Some(table) if table.table().is_some() => Shelf::open_on(
                dir,
                database,
                meta,
                table_adapter(dir, database, meta, (config, table), (indexed, failpoints))?,
            ),
            Some(s3) => Shelf::open_on(
                dir,
                database,
                meta,
                remote_adapter(dir, database, meta, s3, failpoints)?,
            ),
        };
        let shelf = shelf.map_err(|e| match e {
            ShelfError::Storage(source) => HostError::Storage {
                path: store.clone(),
                source,
            },
            ShelfError::StoreDamaged(detail) => HostError::Damaged {
                path: store.clone(),
                detail,
            },
            ShelfError::Refused(detail) => HostError::Damaged {
                path: match &config.archive {
                    None => dir.join(archive::ARCHIVE_DIR),
                    Some(s3) => PathBuf::from(&s3.url),
                },
                detail,
            },
        })?;
        Ok(Archive {
            shelf: std::sync::Arc::new(std::sync::RwLock::new(shelf)),
            by_time,
        })
    }
}

impl Archive {
    /// The shelf, read (finds, views): shared with other readers.
    pub(super) fn shelf(&self) -> std::sync::RwLockReadGuard<'_, Shelf> {
        self.shelf.read().unwrap_or_else(|p| p.into_inner())
    }
}

mod adapters;
use adapters::{index_went, leave_bucket, leave_table, remote_adapter, table_adapter};

/// The `operations-by-time` key of an operation answered at a time.
pub(super) use crate::store::shelf::time_key;

impl Host {
    /// Now, as the retention windows read it (shifted by
    /// `Failpoints::with_retention_clock_offset`).
    pub(super) fn retention_now(&self) -> u64 {
        crate::store::now_ms().saturating_add_signed(self.retention_offset_ms)
    }

    /// The record of `op`: in the hot store, else in the archive.
    pub(super) fn lookup(&self, op: &str) -> Lookup {
        if let Some(record) = self.retained(op) {
            return Lookup::Hot(record);
        }
        let archive_days = self.config.retain.archive_days;
        let now = self.retention_now();
        let expired = |at_ms: u64| {
            archive_days
                .is_some_and(|days| at_ms.saturating_add(u64::from(days) * RETAIN_DAY_MS) < now)
        };
        let quoted = grid_spec::diagnostic::quoted(op);
        let found = self.archive.shelf().find(op, &quoted, expired);
        match found {
            Found::Absent => Lookup::Absent,
            Found::Expired { at_ms } => Lookup::Expired {
                at_ms,
                days: archive_days.unwrap_or_default(),
            },
            Found::Unreadable(reason) => Lookup::Unreadable(reason),
            Found::Held { value, segment, .. } => {
                match serde_json::from_slice::<OperationRecord>(&value) {
                    Ok(record) => Lookup::Archived(record),
                    Err(e) => Lookup::Unreadable(format!(
                        "archive segment {segment}: the record does not decode ({e})"
                    )),
                }
            }
        }
    }

    /// The reply for an id whose record is expired or unreadable: never "not found".
    pub(super) fn not_answered(&self, op: &str, lookup: Lookup) -> Reply {
        let quoted = grid_spec::diagnostic::quoted(op);
        match lookup {
            Lookup::Expired { at_ms, days } => {
                tracing::warn!(op = %quoted, "operation refused: expired");
                Reply::Refused {
                    reason: format!(
                        "expired: operation `{quoted}` was answered at {}, past host `{}`'s archive window of {days} days (retain archive-days={days}); its answer is no longer kept, and it is never executed again",
                        crate::store::rfc3339_ms(at_ms),
                        self.config.name
                    ),
                }
            }
            Lookup::Unreadable(reason) => {
                tracing::warn!(op = %quoted, reason, "archived answer unreadable");
                Reply::Unknown {
                    op: op.to_owned(),
                    reason: format!(
                        "operation `{quoted}` was answered and archived, but its answer cannot be read: {reason}; it is not executed again"
                    ),
                }
            }
            Lookup::Hot(record) | Lookup::Archived(record) => Reply::Answer(record.answer),
            Lookup::Absent => Reply::NoAnswer { op: op.to_owned() },
        }
    }

    /// Moves acknowledged answers older than `age_ms` to the archive, at most
    /// ARCHIVE_SEGMENTS_PER_PASS_MAX segments, and releases segments past
    /// `archive-days`. A storage failure stops the host (`fatal`); an archive that
    /// cannot be written refuses the pass and changes nothing.
    /// `patient` (the periodic pass): a last segment of fewer than
    /// `ARCHIVE_SEGMENT_ENTRIES_MIN` answers waits until its oldest is
    /// `ARCHIVE_SEGMENT_WAIT_MAX` past the cutoff.
    pub fn archive_older_than(
        &mut self,
        age_ms: u64,
        patient: bool,
    ) -> Result<ArchivePass, String> {
        // Index entries waiting for their table first (an archive indexed in DynamoDB):
        // while it does not answer, nothing more leaves the hot store.
        crate::store::shelf::publish(&self.archive.shelf, &self.database)?;
        let now = self.retention_now();
        let cutoff = now.saturating_sub(age_ms);
        let mut pass = ArchivePass::default();
        let signer = Self::signer(&self.custody);
        let dir = &self.dir;
        let operations = &self.operations;
        let unacknowledged = &mut pass.unacknowledged;
        let candidates = crate::store::shelf::answered_before(
            &self.archive.by_time,
            operations,
            cutoff,
            dir,
            "operations",
        )
        .filter(|entry| {
            let record: OperationRecord = serde_json::from_slice(&entry.value)
                .unwrap_or_else(|e| fatal(dir, "decoding an operation", e));
            if !record.acknowledged {
                *unacknowledged += 1;
            }
            record.acknowledged
        });
        let (shelf, database, host) = (&self.archive.shelf, &self.database, &self.config.name);
        let (failpoints, by_time) = (&mut self.failpoints, &self.archive.by_time);
        let answers = crate::store::shelf::gather(
            candidates,
            cutoff,
            patient,
            ARCHIVE_SEGMENTS_PER_PASS_MAX,
            |entries| {
                crate::store::shelf::shelve_room(
                    shelf,
                    database,
                    host,
                    (&entries, ""),
                    &signer,
                    || {
                        failpoints.reach(crate::store::Failpoint::ArchiveBeforeIndex);
                    },
                    [operations, by_time],
                    |_| {},
                )
            },
        )?;
        pass.answers = answers.entries;
        pass.segments = answers.segments;
        pass.more = answers.more;
        // The rooms' own answers (a receiver's finished runs, a caller's closed
        // waits), in the segments left.
        // Each room in the segments the ones before left; its entries counted.
        let left = |pass: &ArchivePass| {
            ARCHIVE_SEGMENTS_PER_PASS_MAX.saturating_sub(pass.segments as usize)
        };
        let add = |pass: &mut ArchivePass, gathered: crate::store::shelf::Gathered| {
            pass.segments += gathered.segments;
            pass.more |= gathered.more;
            gathered.entries
        };
        if let Some(processes) = &self.processes {
            let rooms = processes.archive(cutoff, patient, left(&pass), &signer)?;
            pass.runs = add(&mut pass, rooms.runs);
            pass.waits = add(&mut pass, rooms.waits);
            pass.owed = rooms.owed;
        }
        if let Some(ledgers) = &self.ledgers {
            let ids = ledgers.archive(cutoff, patient, left(&pass), &signer)?;
            pass.ledger_ids = add(&mut pass, ids);
        }
        if let Some(delivery) = &self.delivery {
            let ops = delivery.archive(cutoff, patient, left(&pass), &signer)?;
            pass.matrix_ops = add(&mut pass, ops);
        }
        if let Some(decisions) = &self.decisions {
            let (closed, casts) = decisions.archive(cutoff, patient, left(&pass), &signer)?;
            pass.decisions = add(&mut pass, closed);
            pass.casts = add(&mut pass, casts);
        }
        pass.released = self.release_expired(now)?;
        if pass.segments > 0 || pass.released > 0 {
            tracing::info!(
                answers = pass.answers,
                runs = pass.runs,
                segments = pass.segments,
                released = pass.released,
                "answers archived"
            );
        }
        Ok(pass)
    }

    /// Releases the segments whose newest answer is past `archive-days`, in sequence
    /// order; the index keeps the ids. Before a segment is released, every ledger with
    /// a record past its checkpoint is checkpointed, so no record an open replays names
    /// an id whose segment is gone (every id in a segment due is expired: no batch
    /// naming one is journaled meanwhile).
    fn release_expired(&mut self, now: u64) -> Result<u64, String> {
        let Some(days) = self.config.retain.archive_days else {
            return Ok(0);
        };
        let window = u64::from(days) * RETAIN_DAY_MS;
        let past = |last_ms: u64| last_ms.saturating_add(window) < now;
        let shelf = &self.archive.shelf;
        if !shelf
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .releasable(past)
        {
            return Ok(0);
        }
        if let Some(ledgers) = &self.ledgers {
            ledgers.checkpoint(1, false);
        }
        crate::store::shelf::release(shelf, &self.database, past)
    }

    /// What the archive holds and how far it is behind (`inspect storage`, metrics).
    /// Verifying the archive, to run without the host's lock: it holds the shelf's
    /// writer lock and read lock while it reads every segment (an archive pass waits
    /// for it, and it sees no segment half written).
    pub fn verify_archive(
        &self,
    ) -> impl FnOnce() -> crate::store::shelf::Verification + Send + use<> {
        let shelf = self.archive.shelf.clone();
        let host = self.config.name.clone();
        let check = Self::verifier(&self.custody);
        move || {
            let writer = shelf.read().unwrap_or_else(|p| p.into_inner()).writer();
            let _alone = writer.lock().unwrap_or_else(|p| p.into_inner());
            shelf
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .verify(&host, &check)
        }
    }

    pub(super) fn archive_view(&self) -> crate::store::usage::ArchiveView {
        let holding = self.archive.shelf().holding();
        let oldest_hot_ms = self.oldest_hot_ms();
        let hot_days = self.config.retain.hot_days();
        let window = u64::from(hot_days) * RETAIN_DAY_MS;
        crate::store::usage::ArchiveView {
            hot_days,
            archive_days: self.config.retain.archive_days,
            segments: holding.segments,
            released_segments: holding.released_segments,
            answers: holding.entries,
            bytes: holding.bytes,
            first_ms: holding.first_ms,
            last_ms: holding.last_ms,
            oldest_hot_ms,
            lag_seconds: oldest_hot_ms.map_or(0, |oldest| {
                self.retention_now()
                    .saturating_sub(window)
                    .saturating_sub(oldest)
                    / 1_000
            }),
            store: holding.place,
            waiting: holding.waiting,
            last_upload_ms: holding.last_upload_ms,
            last_error_ms: holding.last_error.as_ref().map(|(at, _)| *at),
            last_error: holding.last_error.map(|(_, why)| why),
            index: holding.index,
            index_waiting: holding.index_waiting,
        }
    }

    /// The oldest answer (or a receiver's finished run) in the hot store, Unix ms.
    fn oldest_hot_ms(&self) -> Option<u64> {
        let oldest_hot_ms = self
            .archive
            .by_time
            .first_key_value()
            .map(|guard| {
                guard
                    .key()
                    .unwrap_or_else(|e| fatal(&self.dir, "reading operations by time", e))
            })
            .and_then(|key| key.first_chunk::<8>().map(|at| u64::from_be_bytes(*at)));
        // A receiver's finished runs are answers too.
        let oldest_run_ms = self.processes.as_ref().and_then(|p| p.oldest_finished_ms());
        match (oldest_hot_ms, oldest_run_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The hot store's bound while the archive refuses segments: when an answer has
    /// waited `ARCHIVE_LAG_DAYS_MAX` past the hot window and the archive still does not
    /// take it, why new work is refused (none: it is taken).
    pub(super) fn archive_full(&self) -> Option<String> {
        use crate::limits::ARCHIVE_LAG_DAYS_MAX;
        let shelf = self.archive.shelf();
        let why = shelf.failing()?;
        let oldest = self.oldest_hot_ms()?;
        let hot_days = self.config.retain.hot_days();
        let bound = u64::from(hot_days + ARCHIVE_LAG_DAYS_MAX) * RETAIN_DAY_MS;
        if oldest.saturating_add(bound) >= self.retention_now() {
            return None;
        }
        Some(format!(
            "archive unreachable and the hot store is full: an answer of {} has waited more than ARCHIVE_LAG_DAYS_MAX ({ARCHIVE_LAG_DAYS_MAX}) days past the hot window ({hot_days} days) for archive {}, which refuses it ({}); new work is refused until a pass archives it (`gridctl storage archive`, or the next periodic pass once the store answers); re-sent ids are still answered",
            crate::store::rfc3339_ms(oldest),
            shelf.place(),
            grid_spec::diagnostic::quoted(&why)
        ))
    }

    /// The periodic pass: answers past `retain hot-days`. While the archive refuses
    /// segments it tries again only every `ARCHIVE_RETRY_INTERVAL` (the pass holds
    /// the host while it writes).
    pub fn archive_due(&mut self) {
        let failed_at = self.archive.shelf().failed_at();
        let retry = crate::limits::ARCHIVE_RETRY_INTERVAL.as_millis() as u64;
        if failed_at.is_some_and(|at| crate::store::now_ms() < at.saturating_add(retry)) {
            tracing::debug!(
                "archive pass waits: the archive refused a segment less than ARCHIVE_RETRY_INTERVAL ago"
            );
            return;
        }
        let age = u64::from(self.config.retain.hot_days()) * RETAIN_DAY_MS;
        if let Err(reason) = self.archive_older_than(age, true) {
            tracing::warn!(reason, "archive pass refused");
        }
    }
}
