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
//! [`SegmentRecord`]); `meta` `archive-next-segment`. With the index in a table
//! ([`RemoteIndex`], `index.rs`): `archive-ids` (a 16-byte digest per key archived)
//! and `archive-unpublished` (seq BE + key: index entries not yet put in the table).
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

mod index;
mod moving;
mod shelving;
mod verify;
use super::high_water::Signer;
use super::{Durable, fatal};
pub use index::RemoteIndex;
pub use moving::{IndexMoveRefused, move_index};
pub use shelving::{publish, release, shelve, shelve_room};
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
    /// Where the segments live (`DIR/archive`, `s3://BUCKET/PREFIX`).
    pub place: String,
    /// Why the walk of a remote archive waits (it did not answer): nothing is
    /// archived until it does.
    pub waiting: Option<String>,
    /// The last segment written, Unix ms (since gridd started).
    pub last_upload_ms: Option<u64>,
    /// Where the index by id lives when it is not this store (`dynamodb://TABLE`).
    pub index: Option<String>,
    /// Index entries committed here and not yet put in that table.
    pub index_waiting: u64,
    /// The last refusal of a segment since the last one written: when, and why.
    pub last_error: Option<(u64, String)>,
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
    /// [`archive_room`] on this installation's shelf; nothing without one.
    pub fn archive_room(
        &self,
        room: Room<'_>,
        pass: (u64, bool, usize),
        sign: &Signer,
        before_index: impl Fn(),
    ) -> Result<Gathered, String> {
        match &self.shelf {
            Some(shelf) => archive_room(shelf, room, pass, sign, before_index),
            None => Ok(Gathered::default()),
        }
    }

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

/// A room whose entries are shelved as it holds them, keyed `prefix` + id: what
/// [`archive_room`] needs of it.
pub struct Room<'a> {
    pub database: &'a Durable,
    pub host: &'a str,
    pub dir: &'a Path,
    pub prefix: &'a str,
    /// The room's hot keyspace and its listing by answer time.
    pub keyspaces: [&'a Keyspace; 2],
    /// What its entries are, as a storage failure names them.
    pub what: &'a str,
}

/// Moves `room`'s entries answered before `cutoff` to `shelf`, unchanged, in at most
/// `segments_max` segments signed by `sign` ([`gather`], [`shelve_room`]; `patient`
/// as there), `before_index` run before each segment's index (a failpoint). A storage
/// failure stops the process; an archive that refuses a segment refuses the pass.
pub fn archive_room(
    shelf: &Shared,
    room: Room<'_>,
    (cutoff, patient, segments_max): (u64, bool, usize),
    sign: &Signer,
    before_index: impl Fn(),
) -> Result<Gathered, String> {
    let [hot, by_time] = room.keyspaces;
    let candidates =
        answered_before(by_time, hot, cutoff, room.dir, room.what).map(|entry| Entry {
            key: format!("{}{}", room.prefix, entry.key),
            ..entry
        });
    gather(candidates, cutoff, patient, segments_max, |entries| {
        shelve_room(
            shelf,
            room.database,
            room.host,
            (&entries, room.prefix),
            sign,
            &before_index,
            room.keyspaces,
            |_| {},
        )
    })
}

/// An installation's shelf.
pub struct Shelf {
    blobs: Box<dyn Blobs>,
    index: Keyspace,
    /// With the index in a table: the digests of the keys archived there, and the
    /// entries waiting to be put there.
    ids: Keyspace,
    unpublished: Keyspace,
    remote_index: Option<RemoteIndex>,
    /// Entries in `unpublished` (counted at open, kept by every write).
    waiting: u64,
    segments: Keyspace,
    meta: Keyspace,
    totals: Totals,
    /// The installation (`DIR`).
    dir: PathBuf,
    /// Where the segments live, as messages name it (`DIR/archive`, `s3://…`).
    place: String,
    /// The segments are on another server (which may not answer).
    remote: bool,
    /// The walk of the archive against the store's records waits for the server to
    /// answer (why it did not, last time).
    unwalked: Option<String>,
    /// The last segment written, and the last refusal of a write (Unix ms, why).
    last_upload_ms: Option<u64>,
    last_error: Option<(u64, String)>,
    /// Taken by every writer of the shared shelf first ([`Shelf::writer`],
    /// `shelving.rs`).
    writing: std::sync::Arc<std::sync::Mutex<()>>,
}

/// Where a shelf keeps its segments: a [`Blobs`], how messages name it, and whether it
/// is another server's.
pub struct Adapter {
    pub blobs: Box<dyn Blobs>,
    pub place: String,
    pub remote: bool,
    /// The table the index by id is kept in (none: this store).
    pub index: Option<RemoteIndex>,
}

impl Adapter {
    /// Segments in the installation's own files.
    pub fn files(blobs: archive::LocalFiles, place: String) -> Adapter {
        Adapter {
            blobs: Box::new(blobs),
            place,
            remote: false,
            index: None,
        }
    }
}

/// How a refusal begins when a remote archive does not answer (the rest says why).
const UNREACHABLE: &str = "the archive store does not answer";

impl Shelf {
    /// Opens the shelf of the installation at `dir` in `database`, its segments in the
    /// installation's own `DIR/archive` (`archive "file"`).
    pub fn open(
        dir: &Path,
        database: &fjall::Database,
        meta: &Keyspace,
    ) -> Result<Shelf, ShelfError> {
        let blobs = archive::LocalFiles::open(dir).map_err(refused)?;
        let place = dir.join(archive::ARCHIVE_DIR).display().to_string();
        Shelf::open_on(dir, database, meta, Adapter::files(blobs, place))
    }

    /// Opens the shelf of the installation at `dir` in `database` on `adapter`: every
    /// segment the store names must be there at its recorded size (refused by name
    /// otherwise); a segment the store does not name is what a write left before its
    /// index was committed (failpoint `archive-before-index`), never acknowledged:
    /// removed. The same walk counts what the shelf holds. A remote adapter that does
    /// not answer defers the walk to the first segment written (until then nothing is
    /// shelved, and a find whose segment does not answer is unreadable, never absent).
    pub fn open_on(
        dir: &Path,
        database: &fjall::Database,
        meta: &Keyspace,
        adapter: Adapter,
    ) -> Result<Shelf, ShelfError> {
        let [index, segments, ids, unpublished] = super::open_keyspaces(
            database,
            [
                "archive-index",
                "archive-segments",
                "archive-ids",
                "archive-unpublished",
            ],
        )?;
        let waiting = unpublished.len()? as u64;
        let mut shelf = Shelf {
            blobs: adapter.blobs,
            index,
            ids,
            unpublished,
            remote_index: adapter.index,
            waiting,
            segments,
            meta: meta.clone(),
            totals: Totals::default(),
            dir: dir.to_owned(),
            place: adapter.place,
            remote: adapter.remote,
            unwalked: None,
            last_upload_ms: None,
            last_error: None,
            writing: Default::default(),
        };
        match shelf.walk() {
            Ok(()) => {}
            Err(ShelfError::Refused(detail)) if shelf.remote && detail.starts_with(UNREACHABLE) => {
                tracing::warn!(archive = shelf.place, %detail, "archive store does not answer: gridd starts, and archives nothing until it does");
                shelf.totals = shelf.records(|_, _| Ok(()))?;
                shelf.unwalked = Some(detail.clone());
                shelf.last_error = Some((super::now_ms(), detail));
            }
            Err(e) => return Err(e),
        }
        Ok(shelf)
    }

    /// Every segment record of the store, oldest first, handed to `each`; answers what
    /// they count.
    fn records(
        &self,
        mut each: impl FnMut(u64, &SegmentRecord) -> Result<(), ShelfError>,
    ) -> Result<Totals, ShelfError> {
        let mut totals = Totals::default();
        let mut released_prefix = true;
        for guard in self.segments.iter() {
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
            each(seq, &record)?;
        }
        Ok(totals)
    }

    /// The walk of [`Shelf::open_on`]: the archive's listing against the store's
    /// records (one pass over them, which also counts them), orphans removed.
    fn walk(&mut self) -> Result<(), ShelfError> {
        let blobs = &self.blobs;
        let refused = |e: ArchiveError| match e {
            ArchiveError::Remote { .. } => ShelfError::Refused(format!("{UNREACHABLE}: {e}")),
            e => refused(e),
        };
        blobs.check().map_err(refused)?;
        let next = next_segment(&self.meta)?;
        let mut listed: BTreeMap<u64, u64> = BTreeMap::new();
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
        let totals = self.records(|seq, record| {
            let name = archive::segment_name(seq);
            match listed.remove(&seq) {
                // Released, its blob deleted or (a stop in between) about to be.
                Some(_) if record.expired => blobs.delete(&name).map_err(refused),
                None if record.expired => Ok(()),
                None => Err(refused(ArchiveError::Missing { name })),
                Some(size) if size != record.bytes => Err(refused(ArchiveError::Damaged {
                    detail: format!("it holds {size} bytes, the store recorded {}", record.bytes),
                    name,
                })),
                Some(_) => Ok(()),
            }
        })?;
        if let Some((seq, _)) = listed.into_iter().next() {
            return Err(refused(ArchiveError::Damaged {
                name: archive::segment_name(seq),
                detail: "the store has no record of it (released, or from another installation)"
                    .to_owned(),
            }));
        }
        self.totals = totals;
        Ok(())
    }

    /// Before a segment is written to an archive whose walk was deferred: the walk,
    /// now. Until it succeeds nothing is shelved.
    fn walked(&mut self) -> Result<(), String> {
        if self.unwalked.is_none() {
            return Ok(());
        }
        match self.walk() {
            Ok(()) => {
                tracing::info!(
                    archive = self.place,
                    "archive store answers: its segments match the store's records"
                );
                self.unwalked = None;
                Ok(())
            }
            Err(e) => {
                let detail = e.to_string();
                self.unwalked = Some(detail.clone());
                Err(detail)
            }
        }
    }

    /// Finds `key`'s entry: read back (one ranged read) and checked against the digest
    /// its index entry recorded — in this store, or (an id this host archived there) in
    /// the table of a [`RemoteIndex`]. `expired` says whether an entry at that time is
    /// past the caller's archive window (then it is not read). `quoted` names the key
    /// in a message.
    pub fn find(&self, key: &str, quoted: &str, expired: impl Fn(u64) -> bool) -> Found {
        let located = self
            .index
            .get(key)
            .unwrap_or_else(|e| fatal(&self.dir, "reading the archive index", e));
        let at = match located {
            Some(located) => match Located::from_bytes(&located) {
                Some(at) => at,
                None => {
                    return Found::Unreadable(format!(
                        "the archive index entry of `{quoted}` does not decode"
                    ));
                }
            },
            None => match self.find_remote(key, quoted) {
                Ok(Some(at)) => at,
                Ok(None) => return Found::Absent,
                Err(why) => return Found::Unreadable(why),
            },
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
            Ok(entry) if entry.key == key => Found::Held {
                at_ms: entry.at_ms,
                value: entry.value,
                segment: name,
            },
            Ok(_) => Found::Unreadable(format!(
                "its index entry points to another answer's entry in {}/{name}",
                self.place
            )),
            Err(e) => Found::Unreadable(format!("{e} ({}/{name})", self.place)),
        }
    }

    /// Why the shelf archives nothing now: its remote store has not answered since
    /// gridd started, or its last segment was refused (none: it keeps up).
    pub fn failing(&self) -> Option<String> {
        self.unwalked
            .clone()
            .or(self.last_error.as_ref().map(|(_, why)| why.clone()))
            .or_else(|| self.index_waits())
    }

    /// Why archiving waits while index entries wait for their table (none wait: it
    /// does not) — at a start that found some, until the table takes them.
    fn index_waits(&self) -> Option<String> {
        let index = self.remote_index.as_ref().filter(|_| self.waiting > 0)?;
        Some(format!(
            "{} archive index entries wait for {}",
            self.waiting,
            index.place()
        ))
    }

    /// When the archive last refused a segment (or, remote, did not answer at start),
    /// Unix ms, while it has not taken one since.
    pub fn failed_at(&self) -> Option<u64> {
        self.last_error.as_ref().map(|(at, _)| *at)
    }

    /// Where the segments live, and the index's table when it has one, as messages
    /// name them.
    pub fn place(&self) -> String {
        match &self.remote_index {
            Some(index) => format!("{} (indexed in {})", self.place, index.place()),
            None => self.place.clone(),
        }
    }

    /// Whether [`release`] with `past` would release a segment now.
    pub fn releasable(&self, past: impl Fn(u64) -> bool) -> bool {
        let mut due = false;
        self.after_released(|_, record| {
            due |= !record.expired && past(record.last_ms);
            false
        })
        .unwrap_or_else(|e| fatal(&self.dir, "reading archive segments", e));
        due
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
            place: self.place.clone(),
            waiting: self.unwalked.clone().or_else(|| self.index_waits()),
            last_upload_ms: self.last_upload_ms,
            last_error: self.last_error.clone(),
            index: self.remote_index.as_ref().map(|r| r.place().to_owned()),
            index_waiting: self.waiting,
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
mod tests;
