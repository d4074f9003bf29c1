//! A ledger's checkpoints (room `ledger` of `store::checkpoint`) and its id index: what
//! keeps an open's replay and a ledger's memory independent of its history.
//!
//! ```text
//! checkpoints  ledger \0 LEDGER \0 installed   json(Checkpointed) at journal record N
//! ledger-ids   LEDGER \0 answer \0 ID          the id's body and answer (codec::encode_entry)
//!              LEDGER \0 closed \0 ID          json(Pending): a pending transfer closed
//! ```
//!
//! A checkpoint of ledger L at its journal record N records L's accounts with their
//! balances, the pending transfers still held and the counters (`machine::State`).
//! The answers given since the last checkpoint, and the pending transfers closed since,
//! move to the id index in the same write that installs the record
//! (`machine::settle`); then the journal records at or below N are purged. The book's
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
use crate::store::keys::Key;
use crate::store::usage::JournalView;

/// The id index's keyspace.
pub(super) const IDS: &str = "ledger-ids";
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

/// Gives `machine` back what the id index holds for `ops` (see the module's doc).
pub(super) fn recall(
    ids: &Keyspace,
    ledger: &str,
    machine: &mut Machine,
    ops: &[LedgerOp],
) -> Result<(), String> {
    let missing = machine.missing(ops);
    for id in &missing.answers {
        if let Some(entry) = read_answer(ids, ledger, id)? {
            machine.recall_answer(id, entry);
        }
    }
    for id in &missing.closed {
        let what = || format!("the closed transfer `{id}` of ledger `{ledger}`");
        let json =
            |bytes: &[u8]| serde_json::from_slice::<Pending>(bytes).map_err(|e| e.to_string());
        if let Some(pending) = read(ids, &closed_key(ledger, id), what, json)? {
            machine.recall_closed(id, pending);
        }
    }
    Ok(())
}

/// The retained answer of `id`: from memory, else from the id index (nothing is taken
/// back into memory: a read grows nothing).
pub(super) fn answer(
    ids: &Keyspace,
    ledger: &str,
    machine: &Machine,
    id: &str,
) -> Result<Option<LedgerAnswer>, String> {
    if let Some(answer) = machine.answer(id) {
        return Ok(Some(answer));
    }
    Ok(read_answer(ids, ledger, id)?.map(|e| machine::answer(id, &e)))
}

/// The settled answer of `id` in the index, if any.
fn read_answer(ids: &Keyspace, ledger: &str, id: &str) -> Result<Option<Entry>, String> {
    let what = || format!("the answer of `{id}` in ledger `{ledger}`");
    read(ids, &answer_key(ledger, id), what, codec::decode_entry)
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
        let checkpoint = Checkpoint {
            position,
            at_ms: crate::store::now_ms(),
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
        for (id, entry) in &settled.answers {
            write.insert(
                &inner.ids,
                answer_key(ledger, id),
                codec::encode_entry(entry),
            );
        }
        for (id, pending) in &settled.closed {
            let bytes = serde_json::to_vec(pending).expect("a transfer encodes");
            write.insert(&inner.ids, closed_key(ledger, id), bytes);
        }
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
