//! A ledger's checkpoints (room `ledger` of `store::checkpoint`) and its id index: what
//! keeps an open's replay and a ledger's memory independent of its history.
//!
//! ```text
//! checkpoints  ledger \0 LEDGER \0 installed   json(Checkpointed) at journal record N
//! ledger-ids   LEDGER \0 answer \0 ID          the id's body and answer (codec::encode_entry)
//!              LEDGER \0 closed \0 ID          json(Pending): a pending transfer closed
//! ledger-ids-by-time  at_ms(be64) LEDGER \0 answer|closed \0 ID   empty: by settle time
//! ```
//!
//! Past the host's hot window (`retain hot-days`, or `gridctl storage archive`) the
//! host's archive pass moves settled answers to the installation's shelf (key
//! `ledger\0` + their index key), removing them from the index in the same write; a
//! lookup or a recall that misses the index asks the shelf, so an archived id answers
//! as it did (marked `archived`), one past `retain archive-days` is refused as
//! expired and one that does not read refuses — never applied again. Closed pending
//! transfers move the same way. A pass that releases a segment first checkpoints every
//! ledger, so no record an open replays names an id whose segment is gone.
//!
//! A checkpoint of ledger L at its journal record N records L's accounts with their
//! balances, the pending transfers still held and the counters (`machine::State`).
//! The answers given since the last checkpoint, and the pending transfers closed since,
//! move to the id index (`machine::settle`) as sorted tables written and fsynced by
//! fjall's ingestion just before the write that installs the record, listed by the
//! checkpoint's own time (later than any listed before); then the journal records at
//! or below N are purged. A stop between the ingestion and the install leaves the
//! checkpoint staged: the open removes the entries listed at its time
//! ([`unindex_interrupted`]) before replaying the records after the installed one —
//! else those records would find their own ids settled and apply nothing. The book's
//! lock is held throughout, so no batch applies between the state and the settle: the
//! index holds exactly the ids answered up to the installed checkpoint.
//!
//! Before a batch applies — live, and when an open replays the records after N — the
//! machine is given back what the index holds for the batch's ids and for the pending
//! transfers it posts or voids (`recall`): a settled id answers as it did and a closed
//! transfer is refused as it was. An index that does not read refuses the batch with
//! nothing applied — never "not found, so do it".
//!
//! Invariants, stated as absences: no answer leaves memory before the write installing
//! the checkpoint that covers it; no journal record is purged before that write is
//! fsynced; no batch applies without the index's answers for its ids.

use fjall::Keyspace;
use serde::{Deserialize, Serialize};

use super::api::{LedgerAnswer, LedgerOp};
use super::codec;
use super::machine::{self, Entry, Machine, Pending, State};
use super::service::{Book, Ledgers};
use crate::limits::{
    CHECKPOINT_PURGE_ENTRIES_MAX, LEDGER_CHECKPOINT_BYTES_MAX, LEDGER_CHECKPOINT_IDS_MAX,
    LEDGER_CHECKPOINT_RECORDS_MAX,
};
use crate::store::Failpoint;
use crate::store::checkpoint::{Checkpoint, Checkpoints};
use crate::store::high_water::Signer;
use crate::store::keys::Key;
use crate::store::shelf::{self, Gathered, Retention, time_key};
use crate::store::usage::JournalView;

/// The id index's keyspace.
pub(super) const IDS: &str = "ledger-ids";
/// The settled answers by settle time (what the archive pass reads).
pub(super) const IDS_BY_TIME: &str = "ledger-ids-by-time";
/// A ledger answer's key on the installation's shelf: this + its index key.
const SHELF_PREFIX: &str = "ledger\u{0}";

/// Where a host's ledgers find a settled id: the index, else the shelf.
#[derive(Clone, Copy)]
pub(super) struct IdIndex<'a> {
    pub(super) ids: &'a Keyspace,
    pub(super) retention: &'a Retention,
    pub(super) host: &'a str,
}
/// The room's name in the checkpoints keyspace.
pub(super) const ROOM: &str = "ledger";

/// A ledger's state as its checkpoint holds it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Checkpointed {
    /// The newest batch time applied (expiry never runs backwards).
    now_ms: u64,
    machine: State,
}

/// One ledger checkpointed (or its covered records purged): the record it covers and
/// the records purged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub ledger: String,
    pub position: u64,
    pub purged: usize,
}

impl Taken {
    /// How `gridctl storage checkpoint` reports it.
    pub fn describe(&self) -> String {
        format!(
            "ledger {} at record {} ({} records purged)",
            self.ledger, self.position, self.purged
        )
    }
}

fn answer_key(ledger: &str, id: &str) -> Vec<u8> {
    Key::text(ledger).then("answer").then(id).bytes()
}

/// An index key (`answer`, `closed`) as text (ledger names and ids are printable): the
/// by-time index's id.
fn index_key_text(ledger: &str, kind: &str, id: &str) -> String {
    format!("{ledger}\u{0}{kind}\u{0}{id}")
}

fn closed_key(ledger: &str, id: &str) -> Vec<u8> {
    Key::text(ledger).then("closed").then(id).bytes()
}

/// What the index holds at `key` (`what` names it), decoded; an entry that does not
/// read or decode is an error naming it.
fn read<T>(
    ids: &Keyspace,
    key: &[u8],
    what: impl Fn() -> String,
    decode: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Result<Option<T>, String> {
    let Some(bytes) = ids
        .get(key)
        .map_err(|e| format!("the ledger id index does not read {}: {e}", what()))?
    else {
        return Ok(None);
    };
    decode(&bytes)
        .map(Some)
        .map_err(|e| format!("the ledger id index holds {} damaged: {e}", what()))
}

/// Removes from the id index what an interrupted checkpoint of `ledger` wrote (its
/// checkpoint staged, not installed: the entries listed at its time), in one synced
/// write, before the open replays the records after the installed checkpoint; nothing
/// when none was interrupted. Answers how many ids it removed.
pub(super) fn unindex_interrupted(
    database: &crate::store::Durable,
    checkpoints: &Checkpoints,
    [ids, by_time]: [&Keyspace; 2],
    ledger: &str,
) -> Result<usize, String> {
    let Some(staged) = checkpoints.staged(ROOM, ledger)? else {
        return Ok(0);
    };
    let mut write = database.batch();
    let mut removed = 0;
    let (start, end) = (
        time_key(staged.at_ms, ""),
        time_key(staged.at_ms.saturating_add(1), ""),
    );
    for guard in by_time.range(start..end) {
        let key = guard
            .key()
            .map_err(|e| format!("the ledger ids by time do not read: {e}"))?;
        let Some((_, id_key)) = key.split_first_chunk::<8>() else {
            continue;
        };
        // `LEDGER \0 kind \0 ID`: only this ledger's.
        if id_key
            .strip_prefix(ledger.as_bytes())
            .is_some_and(|rest| rest.first() == Some(&0))
        {
            write.remove(ids, id_key.to_vec());
            write.remove(by_time, key.to_vec());
            removed += 1;
        }
    }
    if removed > 0 {
        write
            .commit()
            .and_then(|()| database.persist())
            .map_err(|e| format!("removing the index entries of an interrupted checkpoint of ledger `{ledger}`: {e}"))?;
    }
    Ok(removed)
}

/// Writes `entries` into `keyspace` as a sorted table, fsynced before this returns
/// (fjall's ingestion: no journal, no memtable); nothing when there are none. Keys are
/// unique (a settled id is listed once); were one given twice, one of its values is
/// kept (fjall's ingestion takes each key once, in order).
fn ingest(
    keyspace: &fjall::Keyspace,
    mut entries: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<(), fjall::Error> {
    if entries.is_empty() {
        return Ok(());
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
    let mut ingestion = keyspace.start_ingestion()?;
    for (key, value) in entries {
        ingestion.write(key, value)?;
    }
    ingestion.finish()
}

/// Gives `machine` back what the id index holds for `ops` (see the module's doc).
pub(super) fn recall(
    index: IdIndex<'_>,
    ledger: &str,
    machine: &mut Machine,
    ops: &[LedgerOp],
) -> Result<(), String> {
    let ids = index.ids;
    let missing = machine.missing(ops);
    for id in &missing.answers {
        if let Some((entry, _)) = read_answer(index, ledger, id)? {
            machine.recall_answer(id, entry);
        }
    }
    for id in &missing.closed {
        let what = || format!("the closed transfer `{id}` of ledger `{ledger}`");
        let json =
            |bytes: &[u8]| serde_json::from_slice::<Pending>(bytes).map_err(|e| e.to_string());
        let mut pending = read(ids, &closed_key(ledger, id), what, json)?;
        if pending.is_none() {
            let key = format!("{SHELF_PREFIX}{}", index_key_text(ledger, "closed", id));
            let what = format!("ledger `{ledger}` closed pending transfer");
            pending = index.retention.find(
                index.host,
                &key,
                [&what, id, "posted or voided again"],
                json,
            )?;
        }
        if let Some(pending) = pending {
            machine.recall_closed(id, pending);
        }
    }
    Ok(())
}

/// The retained answer of `id`: from memory, else from the id index, else from the
/// shelf (marked `archived`); nothing is taken back into memory: a read grows nothing.
pub(super) fn answer(
    index: IdIndex<'_>,
    ledger: &str,
    machine: &Machine,
    id: &str,
) -> Result<Option<LedgerAnswer>, String> {
    if let Some(answer) = machine.answer(id) {
        return Ok(Some(answer));
    }
    Ok(
        read_answer(index, ledger, id)?.map(|(entry, archived)| LedgerAnswer {
            archived,
            ..machine::answer(id, &entry)
        }),
    )
}

/// The settled answer of `id` in the index, else on the shelf (`true`), if any. `Err`:
/// the id is known and cannot be answered (damaged, or past `archive-days`).
fn read_answer(
    index: IdIndex<'_>,
    ledger: &str,
    id: &str,
) -> Result<Option<(Entry, bool)>, String> {
    let what = || format!("the answer of `{id}` in ledger `{ledger}`");
    if let Some(entry) = read(
        index.ids,
        &answer_key(ledger, id),
        what,
        codec::decode_entry,
    )? {
        return Ok(Some((entry, false)));
    }
    let key = format!("{SHELF_PREFIX}{}", index_key_text(ledger, "answer", id));
    let what = format!("ledger `{ledger}` operation");
    let found = index.retention.find(
        index.host,
        &key,
        [&what, id, "applied again"],
        codec::decode_entry,
    )?;
    Ok(found.map(|entry| (entry, true)))
}

/// The book of `ledger` its installed checkpoint describes, if it has one; a damaged or
/// inconsistent one is an error naming it.
pub(super) fn restored(checkpoints: &Checkpoints, ledger: &str) -> Result<Option<Book>, String> {
    let Some(checkpoint) = checkpoints.installed(ROOM, ledger)? else {
        return Ok(None);
    };
    let refused = |why: String| {
        format!(
            "the checkpoint of ledger `{ledger}` at record {} does not hold a ledger's state ({why}); the records it covered may be purged, so it is never read past",
            checkpoint.position
        )
    };
    let state: Checkpointed =
        serde_json::from_slice(&checkpoint.state).map_err(|e| refused(e.to_string()))?;
    let machine = Machine::restore(state.machine).map_err(refused)?;
    Ok(Some(Book {
        machine,
        sequence: checkpoint.position,
        now_ms: state.now_ms,
        checkpointed: checkpoint.position,
        since_bytes: 0,
    }))
}

impl Ledgers {
    /// Checkpoints every ledger with at least `at_least` (≥ 1) records past its last
    /// checkpoint, or past `LEDGER_CHECKPOINT_BYTES_MAX` bytes or
    /// `LEDGER_CHECKPOINT_IDS_MAX` answers held in memory, then purges what each
    /// covers; with `purge_covered`, also purges what an earlier checkpoint covers and
    /// a stop left. A storage failure stops the host.
    pub fn checkpoint(&self, at_least: u64, purge_covered: bool) -> Vec<Taken> {
        let names: Vec<String> = self.books().keys().cloned().collect();
        let mut taken = Vec::new();
        for name in names {
            let books = self.books();
            let Some(book) = books.get(&name) else {
                continue;
            };
            let mut book = book.lock().unwrap_or_else(|p| p.into_inner());
            if book.sequence >= book.checkpointed.saturating_add(at_least.max(1))
                || book.since_bytes >= LEDGER_CHECKPOINT_BYTES_MAX
                || book.machine.unsettled() >= LEDGER_CHECKPOINT_IDS_MAX
            {
                taken.push(self.checkpoint_book(&name, &mut book));
            } else if purge_covered && book.checkpointed > 0 {
                let purged = self.purge(&name, book.checkpointed);
                if purged > 0 {
                    taken.push(Taken {
                        ledger: name,
                        position: book.checkpointed,
                        purged,
                    });
                }
            }
        }
        taken
    }

    /// [`Ledgers::checkpoint`] at the cadence the limits name (the checkpointer's).
    pub fn checkpoint_due(&self) -> Vec<Taken> {
        self.checkpoint(LEDGER_CHECKPOINT_RECORDS_MAX, false)
    }

    fn reach(&self, point: Failpoint) {
        self.0
            .failpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reach(point);
    }

    fn checkpoint_book(&self, ledger: &str, book: &mut Book) -> Taken {
        let inner = &self.0;
        let position = book.sequence;
        let state = Checkpointed {
            now_ms: book.now_ms,
            machine: book.machine.state(),
        };
        // The index entries this checkpoint writes are listed at its own time, later
        // than every entry listed before: an open that finds it staged, not
        // installed, removes exactly those (`unindex_interrupted`).
        let newest = inner
            .ids_by_time
            .last_key_value()
            .and_then(|g| g.key().ok())
            .and_then(|k| k.first_chunk::<8>().map(|at| u64::from_be_bytes(*at)));
        let at_ms = newest.map_or(0, |at| at + 1).max(crate::store::now_ms());
        let checkpoint = Checkpoint {
            position,
            at_ms,
            state: serde_json::to_vec(&state).expect("a ledger state encodes"),
        };
        self.reach(Failpoint::CheckpointBeforeWrite);
        let mut write = inner.database.batch();
        inner
            .checkpoints
            .stage(&mut write, ROOM, ledger, &checkpoint);
        inner
            .database
            .commit_or_stop(write, &inner.dir, "staging a ledger checkpoint");
        self.reach(Failpoint::CheckpointBeforeInstall);
        let mut write = inner.database.batch();
        if let Err(reason) = inner.checkpoints.install(&mut write, ROOM, ledger) {
            crate::store::fatal(&inner.dir, "installing a ledger checkpoint", reason);
        }
        let settled = book.machine.settle();
        let mut ids: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut by_time: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (id, entry) in &settled.answers {
            ids.push((answer_key(ledger, id), codec::encode_entry(entry)));
            let key = time_key(at_ms, &index_key_text(ledger, "answer", id));
            by_time.push((key, Vec::new()));
        }
        for (id, pending) in &settled.closed {
            let bytes = serde_json::to_vec(pending).expect("a transfer encodes");
            ids.push((closed_key(ledger, id), bytes));
            let key = time_key(at_ms, &index_key_text(ledger, "closed", id));
            by_time.push((key, Vec::new()));
        }
        // The settled ids go into the index as sorted tables, written and fsynced
        // before the write that installs the checkpoint — not one memtable insert
        // each, which cost more than the ledger's own work (BENCHMARKS.md §10). A stop
        // before the install leaves them there with the checkpoint staged: the open
        // removes them (`unindex_interrupted`) before it replays the records they came
        // from, which would otherwise find their own ids settled and apply nothing.
        for (keyspace, entries) in [(&inner.ids, ids), (&inner.ids_by_time, by_time)] {
            ingest(keyspace, entries).unwrap_or_else(|e| {
                crate::store::fatal(&inner.dir, "indexing a ledger checkpoint", e)
            });
        }
        self.reach(Failpoint::CheckpointAfterIndex);
        inner
            .database
            .commit_or_stop(write, &inner.dir, "installing a ledger checkpoint");
        book.checkpointed = position;
        book.since_bytes = 0;
        self.reach(Failpoint::CheckpointBeforePurge);
        let purged = self.purge(ledger, position);
        Taken {
            ledger: ledger.to_owned(),
            position,
            purged,
        }
    }

    /// Removes (at most `CHECKPOINT_PURGE_ENTRIES_MAX`) records of `ledger` at or below
    /// `position`, which an installed checkpoint covers.
    fn purge(&self, ledger: &str, position: u64) -> usize {
        let inner = &self.0;
        let prefix = Key::text(ledger).sep().bytes();
        let mut write = inner.database.batch();
        let mut purged = 0;
        for guard in inner.journal.prefix(&prefix) {
            if purged == CHECKPOINT_PURGE_ENTRIES_MAX {
                break;
            }
            let Ok(key) = guard.key() else {
                break;
            };
            match crate::store::keys::trailing_u64(&key) {
                Some(sequence) if key.len() == prefix.len() + 8 && sequence <= position => {
                    write.remove(&inner.journal, key.to_vec());
                    purged += 1;
                }
                _ => break, // keys sort by sequence
            }
        }
        if purged > 0 {
            inner.database.commit_or_stop(
                write,
                &inner.dir,
                "purging ledger records a checkpoint covers",
            );
            crate::metrics::checkpoint_purged(purged as u64);
        }
        purged
    }

    /// Moves the answers and closed transfers settled before `cutoff` to the shelf
    /// (an open replaying a record that names one reads it there), in at most
    /// `segments_max` segments signed by `sign` (the host's archive pass calls it, with
    /// the same cutoff as its answers); each leaves the index in the write that indexes
    /// its segment. A storage failure stops the host; an archive that refuses a segment
    /// refuses the pass and changes nothing.
    pub fn archive(
        &self,
        cutoff: u64,
        patient: bool,
        segments_max: usize,
        sign: &Signer,
    ) -> Result<Gathered, String> {
        let inner = &self.0;
        let room = shelf::Room {
            database: &inner.database,
            host: &inner.host,
            dir: &inner.dir,
            prefix: SHELF_PREFIX,
            keyspaces: [&inner.ids, &inner.ids_by_time],
            what: "ledger ids",
        };
        let pass = (cutoff, patient, segments_max);
        inner.retention.archive_room(room, pass, sign, || {
            self.reach(Failpoint::ArchiveBeforeIndex)
        })
    }

    /// Every ledger's journal as `inspect storage` lists it: the records held, and how
    /// many a checkpoint now would purge (all of them: a checkpoint covers every record).
    pub fn journal_views(&self) -> Vec<JournalView> {
        let mut views = Vec::new();
        for (name, book) in self.books().iter() {
            let newest = book.lock().unwrap_or_else(|p| p.into_inner()).sequence;
            let prefix = Key::text(name).sep().bytes();
            let oldest = self
                .0
                .journal
                .prefix(&prefix)
                .next()
                .and_then(|guard| guard.key().ok())
                .and_then(|key| crate::store::keys::trailing_u64(&key));
            views.push(JournalView::held(
                "ledger-journal",
                name,
                (oldest.unwrap_or(newest + 1), newest),
                newest,
                None,
            ));
        }
        views
    }
}
