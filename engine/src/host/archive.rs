//! Answers past the hot window (docs/storage.md, "Archive"): acknowledged operation
//! records older than `retain hot-days` (or than `gridctl storage archive
//! --older-than-seconds N`) move from the `operations` keyspace into signed segments
//! of the installation's archive (`store::archive`); a re-sent id found there gets its
//! original answer with `archived: true`. With `retain archive-days`, an id answered
//! longer ago than that is refused as expired, and whole segments past it are released.
//!
//! Keyspaces: `operations-by-time` (answer time `u64` BE, op → empty: what a pass
//! reads, oldest first), `archive-index` (op → `store::archive::Located`, kept after
//! its segment is released: an expired id is still known), `archive-segments` (seq
//! `u64` BE → JSON [`SegmentRecord`]); `meta` `archive-next-segment`.
//!
//! The periodic pass waits for company: it writes a segment of fewer than
//! `ARCHIVE_SEGMENT_ENTRIES_MIN` answers only once the oldest has waited
//! `ARCHIVE_SEGMENT_WAIT_MAX` past the window, so a quiet host makes at most one
//! segment an hour, not one a minute. Segments are released in sequence order. What
//! the archive holds is counted at open (which checks every segment anyway) and kept
//! up to date by each pass: `inspect storage` and a metrics scrape read no segment
//! record but the oldest held.
//!
//! Invariants, stated as absences: no answer leaves the hot store before the segment
//! holding it is synced and the index naming it is committed in the same synced write
//! that removes it; no unacknowledged answer is archived; no id found in the index is
//! ever executed again — an unreadable archive answers `unknown`.

use super::*;
use crate::limits::{
    ARCHIVE_SEGMENT_BYTES_MAX, ARCHIVE_SEGMENT_ENTRIES_MAX, ARCHIVE_SEGMENT_ENTRIES_MIN,
    ARCHIVE_SEGMENT_WAIT_MAX, ARCHIVE_SEGMENTS_PER_PASS_MAX, RETAIN_DAY_MS,
};
use crate::store::archive::{self, ArchiveError, Blobs, Entry, Located};

/// The `meta` key of the next segment's sequence number (`u64` BE; absent: 1).
const NEXT_SEGMENT_KEY: &str = "archive-next-segment";

/// The archive of a host: its blobs and the keyspaces that find answers in them.
pub(super) struct Archive {
    blobs: Box<dyn Blobs>,
    pub(super) by_time: Keyspace,
    index: Keyspace,
    segments: Keyspace,
    totals: Totals,
}

/// What the archive holds, counted at open and kept by every pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Totals {
    /// Segments held (not released), with their answers and bytes.
    segments: u64,
    answers: u64,
    bytes: u64,
    /// Segments released past `archive-days`.
    released: u64,
    /// Every segment up to this one is released (0: none): a pass looks after it.
    released_through: u64,
    /// The newest answer time of any segment held.
    last_ms: Option<u64>,
}

impl Totals {
    fn hold(&mut self, record: &SegmentRecord) {
        self.segments += 1;
        self.answers += u64::from(record.entries);
        self.bytes += record.bytes;
        self.last_ms = self.last_ms.max(Some(record.last_ms));
    }

    fn release(&mut self, record: &SegmentRecord) {
        self.segments -= 1;
        self.answers -= u64::from(record.entries);
        self.bytes -= record.bytes;
        self.released += 1;
        if self.segments == 0 {
            self.last_ms = None;
        }
    }
}

/// What the store keeps per segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct SegmentRecord {
    pub entries: u32,
    pub bytes: u64,
    /// The oldest and newest answer time it holds, Unix milliseconds.
    pub first_ms: u64,
    pub last_ms: u64,
    /// Released: every answer in it is past `archive-days`; the blob is deleted and its
    /// ids answer `expired`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
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
        let mut text = format!(
            "archived {} in {}",
            plural(self.answers, "answer", "answers"),
            plural(self.segments, "segment", "segments")
        );
        if self.unacknowledged > 0 {
            text += &format!(
                "; {} kept hot until their callers acknowledge them",
                plural(self.unacknowledged, "answer", "answers")
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
    /// Opens the archive of the installation at `dir` in `database`: every segment the
    /// store names must be there at its recorded size (refused by name otherwise); a
    /// segment the store does not name is what a pass wrote before its index was
    /// committed (failpoint `archive-before-index`), never acknowledged: removed.
    pub(super) fn open(
        dir: &Path,
        database: &fjall::Database,
        meta: &Keyspace,
    ) -> Result<Archive, HostError> {
        let store = dir.join("store");
        let storage = |source| HostError::Storage {
            path: store.clone(),
            source,
        };
        let [by_time, index, segments] = crate::store::open_keyspaces(
            database,
            ["operations-by-time", "archive-index", "archive-segments"],
        )
        .map_err(storage)?;
        let blobs = archive::LocalFiles::open(dir).map_err(|e| Self::refused(dir, e))?;
        let next = next_segment(meta).map_err(storage)?;
        let mut listed: BTreeMap<u64, u64> = BTreeMap::new();
        let mut totals = Totals::default();
        let mut released_prefix = true;
        for (name, size) in blobs
            .list(archive::SEGMENTS_PREFIX)
            .map_err(|e| Self::refused(dir, e))?
        {
            match archive::segment_seq(&name) {
                Some(seq) if seq >= next => {
                    tracing::warn!(
                        segment = name,
                        "archive segment written by a pass that never committed its index: removed"
                    );
                    blobs.delete(&name).map_err(|e| Self::refused(dir, e))?;
                }
                Some(seq) => {
                    listed.insert(seq, size);
                }
                None => {
                    return Err(Self::refused(
                        dir,
                        ArchiveError::Damaged {
                            name,
                            detail: "a file the archive never writes".to_owned(),
                        },
                    ));
                }
            }
        }
        for guard in segments.iter() {
            let (key, value) = guard.into_inner().map_err(storage)?;
            let (seq, record) = decode_segment(&key, &value).ok_or_else(|| HostError::Damaged {
                path: store.clone(),
                detail: "an archive segment record does not decode".to_owned(),
            })?;
            if record.expired {
                totals.released += 1;
                if released_prefix {
                    totals.released_through = seq;
                }
            } else {
                released_prefix = false;
                totals.hold(&record);
            }
            let name = archive::segment_name(seq);
            match listed.remove(&seq) {
                // Released, its blob deleted or (a stop in between) about to be.
                Some(_) if record.expired => {
                    blobs.delete(&name).map_err(|e| Self::refused(dir, e))?;
                }
                None if record.expired => {}
                None => {
                    return Err(Self::refused(dir, ArchiveError::Missing { name }));
                }
                Some(size) if size != record.bytes => {
                    return Err(Self::refused(
                        dir,
                        ArchiveError::Damaged {
                            detail: format!(
                                "it holds {size} bytes, the store recorded {}",
                                record.bytes
                            ),
                            name,
                        },
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some((seq, _)) = listed.into_iter().next() {
            let name = archive::segment_name(seq);
            return Err(Self::refused(
                dir,
                ArchiveError::Damaged {
                    name,
                    detail:
                        "the store has no record of it (released, or from another installation)"
                            .to_owned(),
                },
            ));
        }
        Ok(Archive {
            blobs: Box::new(blobs),
            by_time,
            index,
            segments,
            totals,
        })
    }

    fn refused(dir: &Path, e: ArchiveError) -> HostError {
        HostError::Damaged {
            path: dir.join(archive::ARCHIVE_DIR),
            detail: format!(
                "{e}. gridd does not start without the answers it archived, which would run their ids again; put back the archive this installation wrote"
            ),
        }
    }

    /// The segment records after the released prefix, oldest first, as `each` takes
    /// them until it says stop.
    fn after_released(
        &self,
        mut each: impl FnMut(u64, SegmentRecord) -> bool,
    ) -> Result<(), fjall::Error> {
        let from = self.totals.released_through.saturating_add(1);
        for guard in self.segments.range(from.to_be_bytes()..) {
            let (key, value) = guard.into_inner()?;
            if let Some((seq, record)) = decode_segment(&key, &value)
                && !each(seq, record)
            {
                break;
            }
        }
        Ok(())
    }
}

fn next_segment(meta: &Keyspace) -> Result<u64, fjall::Error> {
    Ok(meta
        .get(NEXT_SEGMENT_KEY)?
        .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
        .map_or(1, u64::from_be_bytes))
}

fn decode_segment(key: &[u8], value: &[u8]) -> Option<(u64, SegmentRecord)> {
    let seq = u64::from_be_bytes(key.try_into().ok()?);
    Some((seq, serde_json::from_slice(value).ok()?))
}

/// The `operations-by-time` key of `op` answered at `at_ms`.
pub(super) fn time_key(at_ms: u64, op: &str) -> Vec<u8> {
    let mut key = at_ms.to_be_bytes().to_vec();
    key.extend_from_slice(op.as_bytes());
    key
}

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
        let located = self
            .archive
            .index
            .get(op)
            .unwrap_or_else(|e| fatal(&self.dir, "reading the archive index", e));
        let Some(located) = located else {
            return Lookup::Absent;
        };
        let Some(at) = Located::from_bytes(&located) else {
            return Lookup::Unreadable(format!(
                "the archive index entry of `{}` does not decode",
                grid_spec::diagnostic::quoted(op)
            ));
        };
        if let Some(days) = self.config.retain.archive_days
            && at.at_ms.saturating_add(u64::from(days) * RETAIN_DAY_MS) < self.retention_now()
        {
            return Lookup::Expired {
                at_ms: at.at_ms,
                days,
            };
        }
        let name = archive::segment_name(at.seq);
        let read = self
            .archive
            .blobs
            .get_range(&name, at.offset, at.len)
            .and_then(|bytes| {
                let bytes = bytes.ok_or(ArchiveError::Missing { name: name.clone() })?;
                archive::entry(&name, &at, &bytes)
            });
        match read.map(|e| serde_json::from_slice::<OperationRecord>(&e.value)) {
            Ok(Ok(record)) => Lookup::Archived(record),
            Ok(Err(e)) => Lookup::Unreadable(format!(
                "archive segment {name}: the record does not decode ({e})"
            )),
            Err(e) => Lookup::Unreadable(format!(
                "{e} ({})",
                self.dir.join(archive::ARCHIVE_DIR).join(&name).display()
            )),
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
        let now = self.retention_now();
        let cutoff = now.saturating_sub(age_ms);
        let mut pass = ArchivePass::default();
        let mut batch: Vec<Entry> = Vec::new();
        let mut bytes = 0;
        // A snapshot: what each segment's write removes does not disturb it.
        let candidates = self.archive.by_time.range(..time_key(cutoff, ""));
        for guard in candidates {
            let key = guard
                .key()
                .unwrap_or_else(|e| fatal(&self.dir, "reading operations by time", e));
            let Some((at, op)) = key.split_first_chunk::<8>() else {
                continue;
            };
            let op = String::from_utf8_lossy(op).into_owned();
            let value = self
                .operations
                .get(&op)
                .unwrap_or_else(|e| fatal(&self.dir, "reading an operation", e));
            let Some(value) = value else { continue };
            let record: OperationRecord = serde_json::from_slice(&value)
                .unwrap_or_else(|e| fatal(&self.dir, "decoding an operation", e));
            if !record.acknowledged {
                pass.unacknowledged += 1;
                continue;
            }
            bytes += value.len();
            batch.push(Entry {
                key: op,
                at_ms: u64::from_be_bytes(*at),
                value: value.to_vec(),
            });
            if batch.len() >= ARCHIVE_SEGMENT_ENTRIES_MAX || bytes >= ARCHIVE_SEGMENT_BYTES_MAX {
                if pass.segments as usize >= ARCHIVE_SEGMENTS_PER_PASS_MAX {
                    pass.more = true;
                    batch.clear();
                    break;
                }
                self.write_segment(std::mem::take(&mut batch), &mut pass)?;
                bytes = 0;
            }
        }
        let young = |batch: &[Entry]| {
            batch.len() < ARCHIVE_SEGMENT_ENTRIES_MIN
                && batch.first().is_some_and(|oldest| {
                    oldest
                        .at_ms
                        .saturating_add(ARCHIVE_SEGMENT_WAIT_MAX.as_millis() as u64)
                        >= cutoff
                })
        };
        if patient && young(&batch) {
            tracing::info!(
                answers = batch.len(),
                "archive pass: answers past the hot window wait for company (ARCHIVE_SEGMENT_ENTRIES_MIN, ARCHIVE_SEGMENT_WAIT_MAX)"
            );
        } else if !batch.is_empty() {
            if pass.segments as usize >= ARCHIVE_SEGMENTS_PER_PASS_MAX {
                pass.more = true;
            } else {
                self.write_segment(batch, &mut pass)?;
            }
        }
        pass.released = self.release_expired(now)?;
        if pass.segments > 0 || pass.released > 0 {
            tracing::info!(
                answers = pass.answers,
                segments = pass.segments,
                released = pass.released,
                "answers archived"
            );
        }
        Ok(pass)
    }

    /// One segment: written and synced, then its index committed with the removal of
    /// its answers from the hot store, in one synced write.
    fn write_segment(&mut self, entries: Vec<Entry>, pass: &mut ArchivePass) -> Result<(), String> {
        let seq = next_segment(&self.meta)
            .unwrap_or_else(|e| fatal(&self.dir, "reading the archive's next segment", e));
        let encoded = archive::encode(
            &self.config.name,
            seq,
            &entries,
            &Self::signer(&self.custody),
        );
        let name = archive::segment_name(seq);
        match self.archive.blobs.put_if_absent(&name, &encoded.bytes) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "archive segment {name} exists already; the store's next segment is {seq}: the archive is not the one this store wrote"
                ));
            }
            Err(e) => return Err(format!("the archive refuses a segment: {e}")),
        }
        self.failpoints
            .reach(crate::store::Failpoint::ArchiveBeforeIndex);
        let record = SegmentRecord {
            entries: entries.len() as u32,
            bytes: encoded.bytes.len() as u64,
            first_ms: entries.iter().map(|e| e.at_ms).min().unwrap_or(0),
            last_ms: entries.iter().map(|e| e.at_ms).max().unwrap_or(0),
            expired: false,
        };
        let mut write = self.database.batch();
        for (entry, (op, located)) in entries.iter().zip(&encoded.located) {
            debug_assert_eq!(&entry.key, op);
            write.insert(&self.archive.index, op.as_str(), located.to_bytes());
            write.remove(&self.operations, op.as_str());
            write.remove(&self.archive.by_time, time_key(entry.at_ms, op));
        }
        write.insert(
            &self.archive.segments,
            seq.to_be_bytes(),
            serde_json::to_vec(&record).expect("records serialize"),
        );
        write.insert(&self.meta, NEXT_SEGMENT_KEY, (seq + 1).to_be_bytes());
        self.commit_durably(write, "indexing an archive segment");
        self.archive.totals.hold(&record);
        pass.answers += u64::from(record.entries);
        pass.segments += 1;
        crate::metrics::archived(u64::from(record.entries));
        Ok(())
    }

    /// Releases the segments whose newest answer is past `archive-days`, in sequence
    /// order (a segment waits for every earlier one): its record is marked expired
    /// (synced) before its blob is deleted; the index keeps the ids.
    fn release_expired(&mut self, now: u64) -> Result<u64, String> {
        let Some(days) = self.config.retain.archive_days else {
            return Ok(0);
        };
        let window = u64::from(days) * RETAIN_DAY_MS;
        let mut due = Vec::new();
        let mut through = self.archive.totals.released_through;
        self.archive
            .after_released(|seq, record| {
                if !record.expired && record.last_ms.saturating_add(window) >= now {
                    return false;
                }
                if record.expired {
                    through = seq; // released before, out of order
                } else {
                    due.push((seq, record));
                }
                true
            })
            .unwrap_or_else(|e| fatal(&self.dir, "reading archive segments", e));
        let mut released = 0;
        for (seq, mut record) in due {
            record.expired = true;
            let mut write = self.database.batch();
            write.insert(
                &self.archive.segments,
                seq.to_be_bytes(),
                serde_json::to_vec(&record).expect("records serialize"),
            );
            self.commit_durably(write, "releasing an archive segment");
            self.archive.totals.release(&record);
            self.archive.totals.released_through = seq;
            let name = archive::segment_name(seq);
            self.archive
                .blobs
                .delete(&name)
                .map_err(|e| format!("the archive refuses to release {name}: {e}"))?;
            released += 1;
        }
        self.archive.totals.released_through = self.archive.totals.released_through.max(through);
        Ok(released)
    }

    /// What the archive holds and how far it is behind (`inspect storage`, metrics).
    pub(super) fn archive_view(&self) -> crate::store::usage::ArchiveView {
        let totals = &self.archive.totals;
        let mut first_ms = None;
        self.archive
            .after_released(|_, record| {
                if record.expired {
                    return true;
                }
                first_ms = Some(record.first_ms);
                false
            })
            .unwrap_or_else(|e| fatal(&self.dir, "reading archive segments", e));
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
        let hot_days = self.config.retain.hot_days();
        let window = u64::from(hot_days) * RETAIN_DAY_MS;
        crate::store::usage::ArchiveView {
            hot_days,
            archive_days: self.config.retain.archive_days,
            segments: totals.segments,
            released_segments: totals.released,
            answers: totals.answers,
            bytes: totals.bytes,
            first_ms,
            last_ms: totals.last_ms,
            oldest_hot_ms,
            lag_seconds: oldest_hot_ms.map_or(0, |oldest| {
                self.retention_now()
                    .saturating_sub(window)
                    .saturating_sub(oldest)
                    / 1_000
            }),
        }
    }

    /// The periodic pass: answers past `retain hot-days`.
    pub fn archive_due(&mut self) {
        let age = u64::from(self.config.retain.hot_days()) * RETAIN_DAY_MS;
        if let Err(reason) = self.archive_older_than(age, true) {
            tracing::warn!(reason, "archive pass refused");
        }
    }
}
