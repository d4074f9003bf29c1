//! The shelf: an installation's archive segments (`store::archive`, in `DIR/archive`)
//! and, in its store, where each archived entry lives — the part of the archive every
//! room that archives its ids shares (docs/storage.md, "Archive"). A room picks the
//! entries past its hot window and removes them from its own keyspaces; the shelf
//! writes and syncs their segment, then commits the index entries, the segment's record
//! and the room's removals in **one** synced write; it finds an id's entry again,
//! checked against the digest it recorded; it releases whole segments past an archive
//! window, in sequence order.
//!
//! Keyspaces: `archive-index` (key → [`Located`], kept after its segment is released: an
//! expired id is still known), `archive-segments` (seq `u64` BE → JSON
//! [`SegmentRecord`]); `meta` `archive-next-segment`.
//!
//! Invariants, stated as absences: no entry leaves a room's hot keyspaces before the
//! segment holding it is synced and the index naming it is committed in the same synced
//! write; no segment the store does not record is served (one a crash left before its
//! index is removed at open, never acknowledged); no id found in the index is answered
//! "absent" — an entry that cannot be read is [`Found::Unreadable`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fjall::Keyspace;
use serde::{Deserialize, Serialize};

use super::archive::{self, ArchiveError, Blobs, Entry, Located};

mod verify;
use super::high_water::Signer;
use super::{Durable, fatal};
pub use verify::{SegmentProblem, Verification};

/// The `meta` key of the next segment's sequence number (`u64` BE; absent: 1).
const NEXT_SEGMENT_KEY: &str = "archive-next-segment";

/// Why a shelf does not open.
#[derive(Debug, thiserror::Error)]
pub enum ShelfError {
    /// The store failed reading or opening the shelf's keyspaces.
    #[error(transparent)]
    Storage(#[from] fjall::Error),
    /// The archive is not the one the store recorded: refused, with what failed.
    #[error("{0}")]
    Refused(String),
    /// The store's own record of the archive is damaged.
    #[error("{0}")]
    StoreDamaged(String),
}

/// What the shelf holds, counted at open and kept by every write and release.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Totals {
    /// Segments held (not released), with their entries and bytes.
    segments: u64,
    entries: u64,
    bytes: u64,
    /// Segments released past an archive window.
    released: u64,
    /// Every segment up to this one is released (0: none): a release looks after it.
    released_through: u64,
    /// The newest entry time of any segment held.
    last_ms: Option<u64>,
}

impl Totals {
    fn hold(&mut self, record: &SegmentRecord) {
        self.segments += 1;
        self.entries += u64::from(record.entries);
        self.bytes += record.bytes;
        self.last_ms = self.last_ms.max(Some(record.last_ms));
    }

    fn release(&mut self, record: &SegmentRecord) {
        self.segments -= 1;
        self.entries -= u64::from(record.entries);
        self.bytes -= record.bytes;
        self.released += 1;
        if self.segments == 0 {
            self.last_ms = None;
        }
    }
}

/// What the store keeps per segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentRecord {
    pub entries: u32,
    pub bytes: u64,
    /// The oldest and newest entry time it holds, Unix milliseconds.
    pub first_ms: u64,
    pub last_ms: u64,
    /// Released: every entry in it is past the archive window; the blob is deleted and
    /// its ids answer `expired`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
}

/// Where a key was found.
pub enum Found {
    /// Not in the index: never archived.
    Absent,
    /// Its entry, read back and checked, from segment `segment`.
    Held {
        at_ms: u64,
        value: Vec<u8>,
        segment: String,
    },
    /// In the index, at `at_ms`, past the window the caller named.
    Expired { at_ms: u64 },
    /// In the index, but its entry cannot be read: never "not found".
    Unreadable(String),
}

/// What the shelf holds, for `inspect storage` and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    pub segments: u64,
    pub released_segments: u64,
    pub entries: u64,
    pub bytes: u64,
    /// The span of the segments held: their oldest and newest entry, Unix ms.
    pub first_ms: Option<u64>,
    pub last_ms: Option<u64>,
}

/// The shelf of an installation as its rooms share it: finds read it together, a
/// segment's write and a release hold it alone.
pub type Shared = std::sync::Arc<std::sync::RwLock<Shelf>>;

/// How a room's answers are retained: the installation's shelf and the host's
/// `retain` (cheap to clone).
#[derive(Clone, Default)]
pub struct Retention {
    /// The installation's shelf (none: nothing is archived — a host without one).
    pub shelf: Option<Shared>,
    /// `retain archive-days`: an id archived longer ago is refused as expired.
    pub archive_days: Option<u32>,
    /// The retention clock's shift (`Failpoints::with_retention_clock_offset`).
    pub clock_offset_ms: i64,
}

impl Retention {
    /// Now, as the retention windows read it.
    pub fn now(&self) -> u64 {
        super::now_ms().saturating_add_signed(self.clock_offset_ms)
    }

    /// What host `host`'s shelf holds at `key` for `what` `id` (`again`: what is never
    /// done to it, e.g. "run again"), decoded by `decode`. `Err`: the id is known and
    /// cannot be answered — past `archive-days`, or its entry does not read or decode
    /// — never "not found".
    pub fn find<T>(
        &self,
        host: &str,
        key: &str,
        [what, id, again]: [&str; 3],
        decode: impl FnOnce(&[u8]) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        let Some(shelf) = &self.shelf else {
            return Ok(None);
        };
        let quoted = grid_spec::diagnostic::quoted(id);
        let now = self.now();
        let days = self.archive_days;
        let expired = |at_ms: u64| {
            days.is_some_and(|days| {
                at_ms.saturating_add(u64::from(days) * crate::limits::RETAIN_DAY_MS) < now
            })
        };
        let found = shelf
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .find(key, &quoted, expired);
        match found {
            Found::Absent => Ok(None),
            Found::Expired { at_ms } => Err(format!(
                "expired: {what} `{quoted}` was answered at {}, past host `{host}`'s archive window of {days} days (retain archive-days={days}); its answer is no longer kept, and it is never {again}",
                super::rfc3339_ms(at_ms),
                days = days.unwrap_or_default()
            )),
            Found::Unreadable(reason) => Err(format!(
                "{what} `{quoted}` was answered and archived, but its answer cannot be read: {reason}; it is never {again}"
            )),
            Found::Held { value, segment, .. } => decode(&value).map(Some).map_err(|e| {
                format!(
                    "{what} `{quoted}` was answered and archived, but archive segment {segment} does not decode it ({e}); it is never {again}"
                )
            }),
        }
    }
}

/// The by-time key of `id` answered at `at_ms` (a room's `…-by-time` keyspace: what a
/// pass reads, oldest first).
pub fn time_key(at_ms: u64, id: &str) -> Vec<u8> {
    let mut key = at_ms.to_be_bytes().to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

/// A room's entries answered before `cutoff`, oldest first: each id its `by_time`
/// keyspace lists, with its value in `hot` (an id no longer there is skipped). A
/// snapshot: what a segment's write removes meanwhile does not disturb it. A storage
/// failure stops the process (`what` names the room's entries).
pub fn answered_before<'a>(
    by_time: &'a Keyspace,
    hot: &'a Keyspace,
    cutoff: u64,
    dir: &'a Path,
    what: &'a str,
) -> impl Iterator<Item = Entry> + 'a {
    by_time
        .range(..time_key(cutoff, ""))
        .filter_map(move |guard| {
            let key = guard
                .key()
                .unwrap_or_else(|e| fatal(dir, &format!("reading {what} by time"), e));
            let (at, id) = key.split_first_chunk::<8>()?;
            let id = String::from_utf8_lossy(id).into_owned();
            let value = hot
                .get(&id)
                .unwrap_or_else(|e| fatal(dir, &format!("reading {what}"), e))?;
            Some(Entry {
                key: id,
                at_ms: u64::from_be_bytes(*at),
                value: value.to_vec(),
            })
        })
}

/// What one room's pass gathered into segments.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Gathered {
    pub entries: u64,
    pub segments: u64,
    /// More entries wait for the next pass (`segments_max` was reached).
    pub more: bool,
}

/// Gathers a room's `candidates` — oldest first, each past its hot window at `cutoff`,
/// each one the room may let go — into segments of at most
/// `ARCHIVE_SEGMENT_ENTRIES_MAX` entries and `ARCHIVE_SEGMENT_BYTES_MAX` bytes, at most
/// `segments_max` of them, each handed to `write` (which shelves it). `patient` (a
/// periodic pass): a last segment of fewer than `ARCHIVE_SEGMENT_ENTRIES_MIN` entries
/// waits until its oldest is `ARCHIVE_SEGMENT_WAIT_MAX` past `cutoff`, so a quiet host
/// makes at most one segment an hour, not one a minute.
pub fn gather(
    candidates: impl IntoIterator<Item = Entry>,
    cutoff: u64,
    patient: bool,
    segments_max: usize,
    mut write: impl FnMut(Vec<Entry>) -> Result<(), String>,
) -> Result<Gathered, String> {
    use crate::limits::{
        ARCHIVE_SEGMENT_BYTES_MAX, ARCHIVE_SEGMENT_ENTRIES_MAX, ARCHIVE_SEGMENT_ENTRIES_MIN,
        ARCHIVE_SEGMENT_WAIT_MAX,
    };
    let mut gathered = Gathered::default();
    let mut batch: Vec<Entry> = Vec::new();
    let mut bytes = 0;
    let mut shelve = |batch: Vec<Entry>, gathered: &mut Gathered| {
        if gathered.segments as usize >= segments_max {
            gathered.more = true;
            return Ok(());
        }
        let entries = batch.len() as u64;
        write(batch)?;
        gathered.entries += entries;
        gathered.segments += 1;
        Ok::<(), String>(())
    };
    for entry in candidates {
        bytes += entry.value.len();
        batch.push(entry);
        if batch.len() >= ARCHIVE_SEGMENT_ENTRIES_MAX || bytes >= ARCHIVE_SEGMENT_BYTES_MAX {
            shelve(std::mem::take(&mut batch), &mut gathered)?;
            bytes = 0;
            if gathered.more {
                return Ok(gathered);
            }
        }
    }
    let young = batch.len() < ARCHIVE_SEGMENT_ENTRIES_MIN
        && batch.first().is_some_and(|oldest| {
            oldest
                .at_ms
                .saturating_add(ARCHIVE_SEGMENT_WAIT_MAX.as_millis() as u64)
                >= cutoff
        });
    if patient && young {
        tracing::info!(
            entries = batch.len(),
            "archive pass: entries past the hot window wait for company (ARCHIVE_SEGMENT_ENTRIES_MIN, ARCHIVE_SEGMENT_WAIT_MAX)"
        );
    } else if !batch.is_empty() {
        shelve(batch, &mut gathered)?;
    }
    Ok(gathered)
}

/// A room's entries shelved whole: `entries` (keys `prefix` + the room's id) in one
/// segment of `host`'s, signed by `sign`, synced, `before_index` run (a failpoint),
/// then indexed in the write that removes each from the room's `hot` keyspace and its
/// `by_time` one, with what `also` adds; counted in the metrics.
#[allow(clippy::too_many_arguments)]
pub fn shelve_room(
    shelf: &Shared,
    database: &Durable,
    host: &str,
    (entries, prefix): (&[Entry], &str),
    sign: &Signer,
    before_index: impl FnOnce(),
    [hot, by_time]: [&Keyspace; 2],
    also: impl FnOnce(&mut fjall::OwnedWriteBatch),
) -> Result<(), String> {
    shelf.write().unwrap_or_else(|p| p.into_inner()).shelve(
        database,
        host,
        entries,
        sign,
        before_index,
        |write| {
            for entry in entries {
                let id = &entry.key[prefix.len()..];
                write.remove(hot, id);
                write.remove(by_time, time_key(entry.at_ms, id));
            }
            also(write);
        },
    )?;
    crate::metrics::archived(entries.len() as u64);
    Ok(())
}

/// An installation's shelf.
pub struct Shelf {
    blobs: Box<dyn Blobs>,
    index: Keyspace,
    segments: Keyspace,
    meta: Keyspace,
    totals: Totals,
    /// The installation (`DIR`).
    dir: PathBuf,
}

impl Shelf {
    /// Opens the shelf of the installation at `dir` in `database`: every segment the
    /// store names must be there at its recorded size (refused by name otherwise); a
    /// segment the store does not name is what a write left before its index was
    /// committed (failpoint `archive-before-index`), never acknowledged: removed. The
    /// same walk counts what the shelf holds.
    pub fn open(
        dir: &Path,
        database: &fjall::Database,
        meta: &Keyspace,
    ) -> Result<Shelf, ShelfError> {
        let [index, segments] =
            super::open_keyspaces(database, ["archive-index", "archive-segments"])?;
        let blobs = archive::LocalFiles::open(dir).map_err(refused)?;
        let next = next_segment(meta)?;
        let mut listed: BTreeMap<u64, u64> = BTreeMap::new();
        let mut totals = Totals::default();
        let mut released_prefix = true;
        for (name, size) in blobs.list(archive::SEGMENTS_PREFIX).map_err(refused)? {
            match archive::segment_seq(&name) {
                Some(seq) if seq >= next => {
                    tracing::warn!(
                        segment = name,
                        "archive segment written by a pass that never committed its index: removed"
                    );
                    blobs.delete(&name).map_err(refused)?;
                }
                Some(seq) => {
                    listed.insert(seq, size);
                }
                None => {
                    return Err(refused(ArchiveError::Damaged {
                        name,
                        detail: "a file the archive never writes".to_owned(),
                    }));
                }
            }
        }
        for guard in segments.iter() {
            let (key, value) = guard.into_inner()?;
            let (seq, record) = decode_segment(&key, &value).ok_or_else(|| {
                ShelfError::StoreDamaged("an archive segment record does not decode".to_owned())
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
                Some(_) if record.expired => blobs.delete(&name).map_err(refused)?,
                None if record.expired => {}
                None => return Err(refused(ArchiveError::Missing { name })),
                Some(size) if size != record.bytes => {
                    return Err(refused(ArchiveError::Damaged {
                        detail: format!(
                            "it holds {size} bytes, the store recorded {}",
                            record.bytes
                        ),
                        name,
                    }));
                }
                Some(_) => {}
            }
        }
        if let Some((seq, _)) = listed.into_iter().next() {
            return Err(refused(ArchiveError::Damaged {
                name: archive::segment_name(seq),
                detail: "the store has no record of it (released, or from another installation)"
                    .to_owned(),
            }));
        }
        Ok(Shelf {
            blobs: Box::new(blobs),
            index,
            segments,
            meta: meta.clone(),
            totals,
            dir: dir.to_owned(),
        })
    }

    /// Finds `key`'s entry: read back (one ranged read) and checked against the digest
    /// its index entry recorded. `expired` says whether an entry at that time is past
    /// the caller's archive window (then it is not read). `quoted` names the key in a
    /// message.
    pub fn find(&self, key: &str, quoted: &str, expired: impl Fn(u64) -> bool) -> Found {
        let located = self
            .index
            .get(key)
            .unwrap_or_else(|e| fatal(&self.dir, "reading the archive index", e));
        let Some(located) = located else {
            return Found::Absent;
        };
        let Some(at) = Located::from_bytes(&located) else {
            return Found::Unreadable(format!(
                "the archive index entry of `{quoted}` does not decode"
            ));
        };
        if expired(at.at_ms) {
            return Found::Expired { at_ms: at.at_ms };
        }
        let name = archive::segment_name(at.seq);
        let read = self
            .blobs
            .get_range(&name, at.offset, at.len)
            .and_then(|bytes| {
                let bytes = bytes.ok_or(ArchiveError::Missing { name: name.clone() })?;
                archive::entry(&name, &at, &bytes)
            });
        match read {
            Ok(entry) => Found::Held {
                at_ms: entry.at_ms,
                value: entry.value,
                segment: name,
            },
            Err(e) => Found::Unreadable(format!(
                "{e} ({})",
                self.dir.join(archive::ARCHIVE_DIR).join(&name).display()
            )),
        }
    }

    /// Shelves `entries` in one segment of `host`'s, signed by `sign`: the segment is
    /// written and synced, `before_index` runs (a failpoint), then the index entries,
    /// the segment's record and what `also` adds (the room's removals of those entries)
    /// are committed in one synced write. A storage failure stops the process; an
    /// archive that refuses the segment changes nothing. Answers the segment's record.
    pub fn shelve(
        &mut self,
        database: &Durable,
        host: &str,
        entries: &[Entry],
        sign: &Signer,
        before_index: impl FnOnce(),
        also: impl FnOnce(&mut fjall::OwnedWriteBatch),
    ) -> Result<SegmentRecord, String> {
        let seq = next_segment(&self.meta)
            .unwrap_or_else(|e| fatal(&self.dir, "reading the archive's next segment", e));
        let encoded = archive::encode(host, seq, entries, sign);
        let name = archive::segment_name(seq);
        match self.blobs.put_if_absent(&name, &encoded.bytes) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "archive segment {name} exists already; the store's next segment is {seq}: the archive is not the one this store wrote"
                ));
            }
            Err(e) => return Err(format!("the archive refuses a segment: {e}")),
        }
        before_index();
        let record = SegmentRecord {
            entries: entries.len() as u32,
            bytes: encoded.bytes.len() as u64,
            first_ms: entries.iter().map(|e| e.at_ms).min().unwrap_or(0),
            last_ms: entries.iter().map(|e| e.at_ms).max().unwrap_or(0),
            expired: false,
        };
        let mut write = database.batch();
        for (entry, (key, located)) in entries.iter().zip(&encoded.located) {
            debug_assert_eq!(&entry.key, key);
            write.insert(&self.index, key.as_str(), located.to_bytes());
        }
        also(&mut write);
        write.insert(
            &self.segments,
            seq.to_be_bytes(),
            serde_json::to_vec(&record).expect("records serialize"),
        );
        write.insert(&self.meta, NEXT_SEGMENT_KEY, (seq + 1).to_be_bytes());
        database.commit_or_stop(write, &self.dir, "indexing an archive segment");
        self.totals.hold(&record);
        Ok(record)
    }

    /// Whether [`Shelf::release`] with `past` would release a segment now.
    pub fn releasable(&self, past: impl Fn(u64) -> bool) -> bool {
        let mut due = false;
        self.after_released(|_, record| {
            due |= !record.expired && past(record.last_ms);
            false
        })
        .unwrap_or_else(|e| fatal(&self.dir, "reading archive segments", e));
        due
    }

    /// Releases the segments whose newest entry is `past` the archive window, in
    /// sequence order (a segment waits for every earlier one): its record is marked
    /// expired (synced) before its blob is deleted; the index keeps the ids. Answers how
    /// many were released.
    pub fn release(
        &mut self,
        database: &Durable,
        past: impl Fn(u64) -> bool,
    ) -> Result<u64, String> {
        let mut due = Vec::new();
        let mut through = self.totals.released_through;
        self.after_released(|seq, record| {
            if !record.expired && !past(record.last_ms) {
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
            let mut write = database.batch();
            write.insert(
                &self.segments,
                seq.to_be_bytes(),
                serde_json::to_vec(&record).expect("records serialize"),
            );
            database.commit_or_stop(write, &self.dir, "releasing an archive segment");
            self.totals.release(&record);
            self.totals.released_through = seq;
            let name = archive::segment_name(seq);
            self.blobs
                .delete(&name)
                .map_err(|e| format!("the archive refuses to release {name}: {e}"))?;
            released += 1;
        }
        self.totals.released_through = self.totals.released_through.max(through);
        Ok(released)
    }

    /// What the shelf holds: its running totals and the span of the segments held (one
    /// segment record read: the oldest held).
    pub fn holding(&self) -> Holding {
        let mut first_ms = None;
        self.after_released(|_, record| {
            if record.expired {
                return true;
            }
            first_ms = Some(record.first_ms);
            false
        })
        .unwrap_or_else(|e| fatal(&self.dir, "reading archive segments", e));
        Holding {
            segments: self.totals.segments,
            released_segments: self.totals.released,
            entries: self.totals.entries,
            bytes: self.totals.bytes,
            first_ms,
            last_ms: self.totals.last_ms,
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

fn refused(e: ArchiveError) -> ShelfError {
    ShelfError::Refused(format!(
        "{e}. gridd does not start without the answers it archived, which would run their ids again; put back the archive this installation wrote"
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Failpoints;
    use crate::store::high_water::HighWater;
    use ed25519_dalek::{Signer as _, SigningKey};

    pub(super) fn sign() -> Signer {
        let key = SigningKey::from_bytes(&[9u8; 32]);
        std::sync::Arc::new(move |m: &[u8]| (1, key.sign(m).to_bytes()))
    }

    /// A store and its shelf in a fresh installation, with a keyspace a room keeps its
    /// hot entries in.
    pub(super) fn installation(name: &str) -> (PathBuf, Durable, Keyspace, Keyspace) {
        let dir = std::env::temp_dir().join(format!("grid-shelf-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let database = fjall::Database::builder(dir.join("store")).open().unwrap();
        let [meta, hot] = super::super::open_keyspaces(&database, ["meta", "hot"]).unwrap();
        let mark = HighWater::open(&dir, &"0".repeat(32), 0, None, sign()).unwrap();
        let durable = Durable::new(database, meta.clone(), 0, mark, Failpoints::default());
        (dir, durable, meta, hot)
    }

    pub(super) fn entry(key: &str, at_ms: u64) -> Entry {
        Entry {
            key: key.to_owned(),
            at_ms,
            value: format!("the answer of {key}").into_bytes(),
        }
    }

    #[test]
    fn shelved_entries_leave_the_room_in_the_same_write_are_found_and_released_whole() {
        let (dir, durable, meta, hot) = installation("whole");
        let mut shelf = Shelf::open(&dir, &durable, &meta).unwrap();
        let entries = [entry("a", 10), entry("b", 20), entry("c", 30)];
        for e in &entries {
            hot.insert(e.key.as_str(), e.value.as_slice()).unwrap();
        }
        let mut indexed = false;
        let record = shelf
            .shelve(
                &durable,
                "solo",
                &entries,
                &sign(),
                || indexed = true,
                |write| {
                    for e in &entries {
                        write.remove(&hot, e.key.as_str());
                    }
                },
            )
            .unwrap();
        assert!(indexed, "the failpoint hook runs between segment and index");
        assert_eq!(
            (record.entries, record.first_ms, record.last_ms),
            (3, 10, 30)
        );
        assert!(
            hot.get("b").unwrap().is_none(),
            "removed with the index write"
        );
        let never = |_: u64| false;
        match shelf.find("b", "b", never) {
            Found::Held { at_ms, value, .. } => {
                assert_eq!((at_ms, value), (20, b"the answer of b".to_vec()));
            }
            _ => panic!("b is on the shelf"),
        }
        assert!(matches!(shelf.find("z", "z", never), Found::Absent));
        assert!(matches!(
            shelf.find("a", "a", |at| at < 15),
            Found::Expired { at_ms: 10 }
        ));
        let held = shelf.holding();
        assert_eq!(
            (held.segments, held.entries, held.first_ms),
            (1, 3, Some(10))
        );
        // Reopened: the same totals, counted from the store's records.
        drop(shelf);
        let mut shelf = Shelf::open(&dir, &durable, &meta).unwrap();
        assert_eq!(shelf.holding(), held);
        // Released only once its newest entry is past the window: then whole.
        assert_eq!(shelf.release(&durable, |last| last < 30).unwrap(), 0);
        assert_eq!(shelf.release(&durable, |last| last < 31).unwrap(), 1);
        let released = shelf.holding();
        assert_eq!((released.segments, released.released_segments), (0, 1));
        // Its ids stay known: never "absent", whatever the caller's window says.
        assert!(!matches!(shelf.find("c", "c", never), Found::Absent));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_pass_gathers_full_segments_up_to_its_maximum_and_a_patient_one_waits_for_company() {
        use crate::limits::{ARCHIVE_SEGMENT_ENTRIES_MAX, ARCHIVE_SEGMENT_WAIT_MAX};
        let wait = ARCHIVE_SEGMENT_WAIT_MAX.as_millis() as u64;
        let entries = |n: usize, at_ms: u64| (0..n).map(move |i| entry(&format!("e{i}"), at_ms));
        let pass = |candidates: Vec<Entry>, cutoff: u64, patient: bool, max: usize| {
            let mut written = Vec::new();
            let gathered = gather(candidates, cutoff, patient, max, |segment| {
                written.push(segment.len());
                Ok(())
            })
            .unwrap();
            (gathered, written)
        };
        // A handful, young: the patient pass leaves them; the operator's writes them.
        let few: Vec<Entry> = entries(3, 10_000).collect();
        let (gathered, written) = pass(few.clone(), 10_000 + wait, true, 16);
        assert_eq!((gathered, written.len()), (Gathered::default(), 0));
        let (gathered, written) = pass(few.clone(), 10_000 + wait, false, 16);
        assert_eq!(
            (gathered.entries, gathered.segments, written),
            (3, 1, vec![3])
        );
        // Waited long enough past the cutoff: written by the patient pass too.
        let (gathered, _) = pass(few, 10_001 + wait, true, 16);
        assert_eq!(gathered.entries, 3);
        // Two full segments and a rest, at most two per pass: the rest waits (`more`).
        let many: Vec<Entry> = entries(2 * ARCHIVE_SEGMENT_ENTRIES_MAX + 1, 1).collect();
        let (gathered, written) = pass(many, 1, false, 2);
        assert_eq!(written, vec![ARCHIVE_SEGMENT_ENTRIES_MAX; 2]);
        assert!(gathered.more && gathered.segments == 2);
        // A refused segment refuses the pass.
        let refused = gather(entries(1, 1), 1, false, 16, |_| Err("no".to_owned()));
        assert_eq!(refused, Err("no".to_owned()));
    }

    #[test]
    fn a_segment_missing_cut_or_foreign_refuses_the_shelf_by_name() {
        let (dir, durable, meta, _) = installation("refused");
        let mut shelf = Shelf::open(&dir, &durable, &meta).unwrap();
        shelf
            .shelve(&durable, "solo", &[entry("a", 1)], &sign(), || {}, |_| {})
            .unwrap();
        drop(shelf);
        let segment = dir
            .join(archive::ARCHIVE_DIR)
            .join(archive::segment_name(1));
        let bytes = std::fs::read(&segment).unwrap();
        let refused = |what: &str| match Shelf::open(&dir, &durable, &meta) {
            Err(ShelfError::Refused(detail)) => detail,
            Err(other) => panic!("{what}: {other}"),
            Ok(_) => panic!("{what}: opened"),
        };
        std::fs::write(&segment, &bytes[..bytes.len() - 1]).unwrap();
        let cut = refused("cut");
        assert!(
            cut.contains("is damaged") && cut.contains("00000000000000000001.seg"),
            "{cut}"
        );
        std::fs::remove_file(&segment).unwrap();
        assert!(refused("missing").contains("is missing"));
        // Put back (private, as every file of an installation), it opens again.
        let private = |path: &Path, bytes: &[u8]| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(path, bytes).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
        };
        private(&segment, &bytes);
        Shelf::open(&dir, &durable, &meta).unwrap();
        let foreign = dir
            .join(archive::ARCHIVE_DIR)
            .join("segments/not-a-segment");
        private(&foreign, b"x");
        assert!(refused("foreign").contains("never writes"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
