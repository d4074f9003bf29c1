//! Writing a segment to a shelf the rooms share ([`Shared`]), and releasing one,
//! without keeping their finds waiting: the remote calls of a write — the segment's
//! put, the index entries' puts to their table, a released segment's delete — run
//! under the shelf's *read* lock, beside every find; the write lock is taken only for
//! what changes the shelf in this store (the segment's index commit, a segment marked
//! expired, the counters). Writers take turns on the shelf's own
//! [`Shelf::writer`] lock first, so no two writes interleave and no writer ever waits
//! for the write lock while another holds a read guard across a remote call (std's
//! `RwLock` would then queue new finds behind it).
//!
//! Why a find between the phases is still right: until the index commit the entries
//! are in their room's hot keyspaces (the commit removes them, in the same write); a
//! segment put and not yet indexed is served to nobody (a crash there leaves it
//! unrecorded, removed at open); index entries put in their table stay in this store
//! until the write that drops them, after the table answered; a segment being
//! released is marked expired first, and a find of its ids answers "expired" from the
//! index (the window that released it) without reading its blob.
//!
//! One remote call is still made with the shelf held: the walk of a remote archive
//! that did not answer when gridd started, at the first write after (it compares the
//! listing with the store's records, which must not change meanwhile).
//!
//! Invariants, stated as absences: no find waits for a segment's upload, an index
//! entry's put or a released segment's delete; no two writers of one shelf run at once.

use std::sync::{Arc, Mutex};

use super::archive::{self, Encoded, Entry};
use super::{Durable, NEXT_SEGMENT_KEY, SegmentRecord, Shared, Shelf, Signer, fatal, next_segment};

/// Reads the shared shelf (a poisoned lock is still the shelf).
fn read(shelf: &Shared) -> std::sync::RwLockReadGuard<'_, Shelf> {
    shelf.read().unwrap_or_else(|p| p.into_inner())
}

/// Changes the shared shelf.
fn write(shelf: &Shared) -> std::sync::RwLockWriteGuard<'_, Shelf> {
    shelf.write().unwrap_or_else(|p| p.into_inner())
}

impl Shelf {
    /// The lock every writer of the shared shelf takes first (a segment's write, the
    /// index entries' puts, a release, a verification that must see no write half
    /// done), held for the whole of it.
    pub fn writer(&self) -> Arc<Mutex<()>> {
        self.writing.clone()
    }

    /// Before a segment is written to an archive whose walk was deferred: the walk,
    /// now (its refusal kept as the last error).
    fn walked_or_failed(&mut self) -> Result<(), String> {
        self.walked().inspect_err(|e| {
            self.last_error = Some((crate::store::now_ms(), e.clone()));
        })
    }

    /// `entries` encoded and signed as the next segment: its sequence number and
    /// encoding.
    fn encode(
        &self,
        host: &str,
        entries: &[Entry],
        sign: &Signer,
    ) -> Result<(u64, Encoded), String> {
        let seq = next_segment(&self.meta)
            .unwrap_or_else(|e| fatal(&self.dir, "reading the archive's next segment", e));
        Ok((seq, archive::encode(host, seq, entries, sign)?))
    }

    /// Writes segment `seq` to the archive (a remote call for a remote one), or says
    /// why the archive refused it.
    fn upload(&self, seq: u64, encoded: &Encoded) -> Result<(), String> {
        let name = archive::segment_name(seq);
        match self.blobs.put_if_absent(&name, &encoded.bytes) {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "archive segment {name} exists already; the store's next segment is {seq}: the archive is not the one this store wrote"
            )),
            Err(e) => Err(format!("the archive refuses a segment: {e}")),
        }
    }

    /// Keeps when a segment was last written, or why the last could not be.
    fn uploaded<T>(&mut self, upload: &Result<T, String>) {
        match upload {
            Ok(_) => {
                self.last_upload_ms = Some(crate::store::now_ms());
                self.last_error = None;
            }
            Err(e) => self.last_error = Some((crate::store::now_ms(), e.clone())),
        }
    }

    /// Commits segment `seq`'s index entries, its record, the next sequence number
    /// and what `also` adds in one synced write (a storage failure stops the process),
    /// and counts it. Answers its record.
    fn index_segment(
        &mut self,
        database: &Durable,
        seq: u64,
        entries: &[Entry],
        encoded: &Encoded,
        also: impl FnOnce(&mut fjall::OwnedWriteBatch),
    ) -> SegmentRecord {
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
            if self.remote_index.is_some() {
                write.insert(&self.ids, super::index::id_digest(key), []);
                write.insert(&self.unpublished, super::index::marker(seq, key), []);
            }
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
        if self.remote_index.is_some() {
            self.waiting += entries.len() as u64;
        }
        record
    }
}

impl Shelf {
    /// The segments due for release (not released, their newest entry `past` the
    /// window), oldest first up to the first that is not, and the highest sequence
    /// number released before among them (out of order).
    fn due(&self, past: impl Fn(u64) -> bool) -> (Vec<(u64, SegmentRecord)>, u64) {
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
        (due, through)
    }

    /// Marks segment `seq` expired in one synced write (a storage failure stops the
    /// process) and counts it released.
    fn expire(&mut self, database: &Durable, seq: u64, mut record: SegmentRecord) {
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
    }

    /// Deletes expired segment `seq`'s blob (a remote call for a remote archive).
    fn delete_segment(&self, seq: u64) -> Result<(), String> {
        let name = archive::segment_name(seq);
        self.blobs
            .delete(&name)
            .map_err(|e| format!("the archive refuses to release {name}: {e}"))
    }
}

/// Releases the segments whose newest entry is `past` the archive window, in sequence
/// order (a segment waits for every earlier one): its record is marked expired
/// (synced) before its blob is deleted; the index keeps the ids. Answers how many were
/// released. Each blob's delete runs under the read lock: a find of an id in a segment
/// being released answers "expired" from the index, reading no blob.
pub fn release(
    shelf: &Shared,
    database: &Durable,
    past: impl Fn(u64) -> bool,
) -> Result<u64, String> {
    let writer = read(shelf).writer();
    let _alone = writer.lock().unwrap_or_else(|p| p.into_inner());
    let (due, through) = read(shelf).due(past);
    let mut released = 0;
    for (seq, record) in due {
        write(shelf).expire(database, seq, record);
        read(shelf).delete_segment(seq)?;
        released += 1;
    }
    let mut shelf = write(shelf);
    shelf.totals.released_through = shelf.totals.released_through.max(through);
    Ok(released)
}

/// A room's entries shelved whole: `entries` (keys `prefix` + the room's id) in one
/// segment of `host`'s, signed by `sign` ([`shelve`]), indexed in the write that
/// removes each from the room's `hot` keyspace and its `by_time` one, with what `also`
/// adds; counted in the metrics.
#[allow(clippy::too_many_arguments)]
pub fn shelve_room(
    shelf: &Shared,
    database: &Durable,
    host: &str,
    (entries, prefix): (&[Entry], &str),
    sign: &Signer,
    before_index: impl FnOnce(),
    [hot, by_time]: [&fjall::Keyspace; 2],
    also: impl FnOnce(&mut fjall::OwnedWriteBatch),
) -> Result<(), String> {
    shelve(
        shelf,
        database,
        host,
        entries,
        sign,
        before_index,
        |write| {
            for entry in entries {
                let id = &entry.key[prefix.len()..];
                write.remove(hot, id);
                write.remove(by_time, super::time_key(entry.at_ms, id));
            }
            also(write);
        },
    )?;
    crate::metrics::archived(entries.len() as u64);
    Ok(())
}

/// Shelves `entries` in one segment of `host`'s, signed by `sign`: index entries
/// waiting for their table are put first (while it does not answer, nothing more
/// leaves the hot store); the segment is written and synced, `before_index` runs (a
/// failpoint), then the index entries, the segment's record and what `also` adds (the
/// room's removals of those entries) are committed in one synced write. A storage
/// failure stops the process; an archive that refuses the segment changes nothing.
/// Answers the segment's record. Its remote calls run under the read lock (module
/// docs).
pub fn shelve(
    shelf: &Shared,
    database: &Durable,
    host: &str,
    entries: &[Entry],
    sign: &Signer,
    before_index: impl FnOnce(),
    also: impl FnOnce(&mut fjall::OwnedWriteBatch),
) -> Result<SegmentRecord, String> {
    let writer = read(shelf).writer();
    let _alone = writer.lock().unwrap_or_else(|p| p.into_inner());
    publish_alone(shelf, database)?;
    if read(shelf).unwalked.is_some() {
        write(shelf).walked_or_failed()?;
    }
    let (seq, encoded) = read(shelf).encode(host, entries, sign)?;
    let uploaded = read(shelf).upload(seq, &encoded);
    write(shelf).uploaded(&uploaded);
    uploaded?;
    before_index();
    let record = write(shelf).index_segment(database, seq, entries, &encoded, also);
    // Archived either way: index entries the table does not take now wait in this
    // store, and the next pass puts them first.
    if read(shelf).remote_index.is_some()
        && let Err(why) = publish_alone(shelf, database)
    {
        tracing::warn!(archive = read(shelf).place, %why, "archive index entries wait for their table");
    }
    Ok(record)
}

/// Puts the index entries waiting in this store into the index's table (an archive
/// indexed in DynamoDB; nothing otherwise), then drops those it took from this store
/// in one synced write; its puts under the read lock. Refused (kept as the last error)
/// when the table does not answer or holds another entry for a key; what it took
/// before stays taken. Answers how many it put.
pub fn publish(shelf: &Shared, database: &Durable) -> Result<u64, String> {
    let writer = read(shelf).writer();
    let _alone = writer.lock().unwrap_or_else(|p| p.into_inner());
    publish_alone(shelf, database)
}

/// [`publish`], its caller holding the writer lock.
fn publish_alone(shelf: &Shared, database: &Durable) -> Result<u64, String> {
    let (put, failed) = read(shelf).put_waiting_now(database);
    write(shelf).published(put, failed)
}
