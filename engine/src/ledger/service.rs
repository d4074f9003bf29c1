//! The `ledger` profile of one host: every ledger it keeps, served from memory and
//! journaled in the host's store.
//!
//! ```text
//! ledger-journal   LEDGER \0 SEQ(be64)   one record (codec.rs): a batch, or a definition change
//! ledger-ids       the id index (checkpoint.rs): answers and closed transfers settled
//! ledger-ids-by-time  the settled answers by settle time (what the archive pass reads)
//! ```
//!
//! A batch is applied to the machine in memory under its ledger's lock, which also
//! appends its record (the time and the operations, one write) so that the journal's
//! order is the order of application; the lock is released and the caller waits for an
//! fsync that began after the write (group commit: one fsync for every batch waiting,
//! from any number of clients). No answer, lookup or inspection leaves before that
//! fsync. Open takes each ledger's installed checkpoint and replays the records after
//! it in order (checkpoint.rs): answers are recomputed, identically.
//! Expiry is evaluated at each batch's journaled time, and the sweeper journals an
//! empty batch when a pending transfer falls due, so an expiry is journaled before
//! anything observes it. Definition changes (reconcile's `install-ledger`,
//! `open-account`, `retire-account`) are journal records too, staged into the host's
//! own write with the operation's answer, under a lock that keeps batches out until
//! the host's commit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockWriteGuard};

use fjall::{Keyspace, OwnedWriteBatch};

use super::api::{
    AccountDefinition, LedgerAnswer, LedgerCall, LedgerDefinition, LedgerOp, LedgerReply,
    LedgerView,
};
use super::checkpoint::{IDS, IDS_BY_TIME, IdIndex, ROOM, recall, restored};
use super::codec::{self, Record};
use super::machine::{Machine, check_definition};
use crate::limits::{
    LEDGER_ACCOUNTS_MAX, LEDGER_BATCH_TRANSFERS_MAX, LEDGER_EXPIRY_SWEEP_INTERVAL,
    LEDGER_INSPECT_PENDING_MAX, LEDGERS_PER_HOST_MAX, NAME_LENGTH_MAX, REQUEST_ID_LENGTH_MAX,
};
use crate::store::checkpoint::{CHECKPOINTS_KEYSPACE, Checkpoints};
use crate::store::keys::Key;
use crate::store::shelf::Retention;
use crate::store::{Failpoint, Failpoints, Syncer, fatal, open_keyspaces};

const JOURNAL: &str = "ledger-journal";

/// Why a whole call was refused; it changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    #[error("host `{host}` keeps no ledger `{ledger}`")]
    NoLedger { host: String, ledger: String },
    #[error(
        "a batch holds {count} operations, above LEDGER_BATCH_TRANSFERS_MAX ({LEDGER_BATCH_TRANSFERS_MAX})"
    )]
    BatchTooLarge { count: usize },
    #[error("a batch holds at least one operation")]
    EmptyBatch,
    #[error("operation {index}: {what} must be 1 to {limit} ({max}) printable bytes")]
    InvalidField {
        index: usize,
        what: &'static str,
        limit: &'static str,
        max: usize,
    },
    #[error("the ledger profile has not started")]
    NotStarted,
    /// A full disk: the batch was refused and nothing journaled (docs/storage.md).
    #[error("{0}")]
    StorageFull(String),
    /// The id index did not read: nothing was applied (never "not found, so do it").
    #[error("{0}; nothing was applied")]
    Unreadable(String),
}

/// One ledger: its machine, the last journal sequence applied, the newest batch time,
/// the record its installed checkpoint covers (0: none) and the journal bytes since.
pub(super) struct Book {
    pub(super) machine: Machine,
    pub(super) sequence: u64,
    pub(super) now_ms: u64,
    pub(super) checkpointed: u64,
    pub(super) since_bytes: u64,
}

pub(super) struct Inner {
    pub(super) host: String,
    pub(super) dir: PathBuf,
    pub(super) database: crate::store::Durable,
    pub(super) journal: Keyspace,
    pub(super) ids: Keyspace,
    pub(super) ids_by_time: Keyspace,
    /// The host's `retain` and the installation's shelf (settled answers past the
    /// hot window).
    pub(super) retention: Retention,
    pub(super) checkpoints: Checkpoints,
    syncer: Syncer,
    runtime: Mutex<Option<tokio::runtime::Handle>>,
    pub(super) failpoints: Mutex<Failpoints>,
    books: RwLock<BTreeMap<String, Mutex<Book>>>,
}

/// The ledgers of one host: cheap to clone, shared by the control socket, the host (for
/// definition changes and `observe`) and, through the composition root, other rooms.
#[derive(Clone)]
pub struct Ledgers(pub(super) Arc<Inner>);

fn journal_key(ledger: &str, sequence: u64) -> Vec<u8> {
    Key::text(ledger).sep().u64(sequence).bytes()
}

fn clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn printable(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control)
}

/// Checks a batch's shape before anything is applied.
pub fn check_batch(ops: &[LedgerOp]) -> Result<(), LedgerError> {
    if ops.is_empty() {
        return Err(LedgerError::EmptyBatch);
    }
    if ops.len() > LEDGER_BATCH_TRANSFERS_MAX {
        return Err(LedgerError::BatchTooLarge { count: ops.len() });
    }
    for (index, op) in ops.iter().enumerate() {
        let bad = |what: &'static str| {
            let (limit, max) = if what == "id" || what == "pending_id" {
                ("REQUEST_ID_LENGTH_MAX", REQUEST_ID_LENGTH_MAX)
            } else {
                ("NAME_LENGTH_MAX", NAME_LENGTH_MAX)
            };
            Err(LedgerError::InvalidField {
                index,
                what,
                limit,
                max,
            })
        };
        if !printable(op.id(), REQUEST_ID_LENGTH_MAX) {
            return bad("id");
        }
        match op {
            LedgerOp::Transfer {
                debit,
                credit,
                currency,
                ..
            } => {
                if !printable(debit, NAME_LENGTH_MAX) {
                    return bad("debit");
                }
                if !printable(credit, NAME_LENGTH_MAX) {
                    return bad("credit");
                }
                if !printable(currency, NAME_LENGTH_MAX) {
                    return bad("currency");
                }
            }
            LedgerOp::Post { pending_id, .. } | LedgerOp::Void { pending_id, .. } => {
                if !printable(pending_id, REQUEST_ID_LENGTH_MAX) {
                    return bad("pending_id");
                }
            }
        }
    }
    Ok(())
}

fn replay(book: &mut Book, record: Record) -> Result<(), String> {
    match record {
        Record::Batch { now_ms, ops } => {
            book.machine.apply(now_ms, &ops);
            book.now_ms = book.now_ms.max(now_ms);
        }
        Record::Install(_) => return Err("a ledger is installed twice".to_owned()),
        Record::Open(account) => book.machine.open(&account)?,
        Record::Retire(account) => {
            book.machine.retire(&account)?;
        }
    }
    Ok(())
}

fn installed(definition: &LedgerDefinition) -> Result<Book, String> {
    let mut machine = Machine::default();
    for account in &definition.accounts {
        machine.open(account)?;
    }
    Ok(Book {
        machine,
        sequence: 1,
        now_ms: 0,
        checkpointed: 0,
        since_bytes: 0,
    })
}

impl Ledgers {
    /// Opens the profile's keyspaces in the host's database; each ledger is its
    /// installed checkpoint (if any) and the journal records after it, replayed.
    pub fn open(
        database: &crate::store::Durable,
        dir: &Path,
        host: &str,
        failpoints: Failpoints,
        retention: Retention,
    ) -> Result<Ledgers, String> {
        let [journal, ids, ids_by_time, checkpoints] =
            open_keyspaces(database, [JOURNAL, IDS, IDS_BY_TIME, CHECKPOINTS_KEYSPACE])
                .map_err(|e| format!("ledger keyspace: {e}"))?;
        // A record after the checkpoint was applied while its ids were answerable:
        // replayed, an archived one is read whatever the window says (the archive pass
        // checkpoints every ledger before it releases a segment, so the tail never
        // names an id whose segment is gone).
        let replaying = Retention {
            archive_days: None,
            ..retention.clone()
        };
        let index = IdIndex {
            ids: &ids,
            retention: &replaying,
            host,
        };
        let checkpoints = Checkpoints::new(checkpoints);
        let syncer = Syncer::start(
            {
                let d = database.clone();
                move || d.persist()
            },
            "ledger-fsync",
        )
        .map_err(|e| format!("cannot start the ledger fsync thread: {e}"))?;
        let mut books: BTreeMap<String, Mutex<Book>> = BTreeMap::new();
        let mut current: Option<(String, Book)> = None;
        for guard in journal.iter() {
            let (key, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
            let at = key.len().saturating_sub(9);
            let (name, sequence) = (
                String::from_utf8_lossy(&key[..at]).into_owned(),
                crate::store::keys::trailing_u64(&key).unwrap_or(0),
            );
            if current.as_ref().is_none_or(|(n, _)| *n != name) {
                if let Some((n, b)) = current.take() {
                    books.insert(n, Mutex::new(b));
                }
                // Before any of its records replays: what a checkpoint a stop
                // interrupted wrote into the index goes (see `unindex_interrupted`).
                super::checkpoint::unindex_interrupted(
                    database,
                    &checkpoints,
                    [&ids, &ids_by_time],
                    &name,
                )?;
                if let Some(book) = restored(&checkpoints, &name)? {
                    current = Some((name.clone(), book));
                }
            }
            if let Some((_, book)) = current.as_ref()
                && sequence <= book.checkpointed
            {
                continue; // covered by the checkpoint; a stop left it before its purge
            }
            let record = codec::decode(&bytes)
                .map_err(|e| format!("ledger `{name}` record {sequence}: {e}"))?;
            let Some((_, book)) = current.as_mut() else {
                let Record::Install(definition) = record else {
                    return Err(format!(
                        "ledger `{name}`: its journal does not start with its installation (and no checkpoint covers its start)"
                    ));
                };
                current = Some((name, installed(&definition)?));
                continue;
            };
            if sequence != book.sequence + 1 {
                return Err(format!(
                    "ledger `{name}`: record {sequence} follows record {}",
                    book.sequence
                ));
            }
            if let Record::Batch { ops, .. } = &record {
                recall(index, &name, &mut book.machine, ops)?;
            }
            book.since_bytes += bytes.len() as u64;
            replay(book, record).map_err(|e| format!("ledger `{name}` record {sequence}: {e}"))?;
            book.sequence = sequence;
        }
        if let Some((n, b)) = current.take() {
            books.insert(n, Mutex::new(b));
        }
        // A ledger whose every record a checkpoint covered and purged.
        for name in checkpoints.names(ROOM)? {
            if let std::collections::btree_map::Entry::Vacant(vacant) = books.entry(name) {
                let name = vacant.key();
                let book = restored(&checkpoints, name)?.ok_or_else(|| {
                    format!("the checkpoint of ledger `{name}` vanished while opening")
                })?;
                vacant.insert(Mutex::new(book));
            }
        }
        Ok(Ledgers(Arc::new(Inner {
            host: host.to_owned(),
            dir: dir.to_owned(),
            database: database.clone(),
            journal,
            ids,
            ids_by_time,
            retention,
            checkpoints,
            syncer,
            runtime: Mutex::new(None),
            failpoints: Mutex::new(failpoints),
            books: RwLock::new(books),
        })))
    }

    /// Where the ledgers find a settled id.
    fn index(&self) -> IdIndex<'_> {
        IdIndex {
            ids: &self.0.ids,
            retention: &self.0.retention,
            host: &self.0.host,
        }
    }

    /// Starts the expiry sweeper (a thread) and keeps `runtime` for the blocking calls.
    pub fn start(&self, runtime: tokio::runtime::Handle) {
        *self.0.runtime.lock().unwrap_or_else(|p| p.into_inner()) = Some(runtime.clone());
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("ledger-expiry".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(LEDGER_EXPIRY_SWEEP_INTERVAL);
                    let names: Vec<String> = me.books().keys().cloned().collect();
                    let mut swept = false;
                    for name in names {
                        swept |= me.sweep(&name);
                    }
                    if swept {
                        runtime.block_on(me.sync("journaling expiries"));
                    }
                }
            });
        if let Err(e) = spawned {
            fatal(&self.0.dir, "starting the ledger expiry sweeper", e);
        }
    }

    pub(super) fn books(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Mutex<Book>>> {
        self.0.books.read().unwrap_or_else(|p| p.into_inner())
    }

    fn no_ledger(&self, ledger: &str) -> LedgerError {
        LedgerError::NoLedger {
            host: self.0.host.clone(),
            ledger: ledger.to_owned(),
        }
    }

    async fn sync(&self, what: &str) {
        if let Err(e) = self.0.syncer.sync().await {
            fatal(&self.0.dir, what, e);
        }
    }

    fn block_on<T>(&self, future: impl std::future::Future<Output = T>) -> Result<T, LedgerError> {
        let runtime = self
            .0
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(LedgerError::NotStarted)?;
        Ok(runtime.block_on(future))
    }

    /// Appends `record` as `book`'s next (under its lock: journal order is application
    /// order). Durable only after the next [`Ledgers::sync`].
    fn append(&self, ledger: &str, book: &mut Book, record: &[u8]) {
        book.sequence += 1;
        book.since_bytes += record.len() as u64;
        self.0
            .journal
            .insert(journal_key(ledger, book.sequence), record)
            .unwrap_or_else(|e| fatal(&self.0.dir, "journaling a ledger batch", e));
    }

    /// Journals an empty batch at the current time when a pending transfer of `ledger`
    /// is due (its expiry), true when it did; the caller syncs.
    fn sweep(&self, ledger: &str) -> bool {
        let books = self.books();
        let Some(book) = books.get(ledger) else {
            return false;
        };
        let mut book = book.lock().unwrap_or_else(|p| p.into_inner());
        let now = clock_ms().max(book.now_ms);
        if book.machine.next_expiry_ms().is_none_or(|at| at > now) {
            return false;
        }
        book.machine.apply(now, &[]);
        book.now_ms = now;
        let record = codec::encode(&Record::Batch {
            now_ms: now,
            ops: Vec::new(),
        });
        self.append(ledger, &mut book, &record);
        true
    }

    /// Applies a batch and answers once it is fsynced, one answer per operation.
    pub async fn submit_async(
        &self,
        ledger: &str,
        ops: &[LedgerOp],
    ) -> Result<Vec<LedgerAnswer>, LedgerError> {
        check_batch(ops)?;
        let (answers, journaled) = {
            let books = self.books();
            let book = books.get(ledger).ok_or_else(|| self.no_ledger(ledger))?;
            let mut book = book.lock().unwrap_or_else(|p| p.into_inner());
            recall(self.index(), ledger, &mut book.machine, ops)
                .map_err(LedgerError::Unreadable)?;
            // A full disk: a batch of operations all re-sent gets their answers, with
            // nothing journaled; any new one refuses the whole batch.
            if let Some(reason) = crate::store::usage::full(&self.0.dir) {
                let answered: Option<Vec<LedgerAnswer>> =
                    ops.iter().map(|op| book.machine.replayed(op)).collect();
                (answered.ok_or(LedgerError::StorageFull(reason))?, false)
            } else {
                let now = clock_ms().max(book.now_ms);
                let answers = book.machine.apply(now, ops);
                book.now_ms = now;
                let record = codec::encode_batch(now, ops);
                self.append(ledger, &mut book, &record);
                (answers, true)
            }
        };
        // Re-sent answers too: what they answer may not be fsynced yet.
        self.sync("committing a ledger batch").await;
        if journaled {
            crate::metrics::operation_answered("ledger-batch", "succeeded");
        }
        Ok(answers)
    }

    /// [`Ledgers::submit_async`] for a thread outside the runtime.
    pub fn submit(&self, ledger: &str, ops: &[LedgerOp]) -> Result<Vec<LedgerAnswer>, LedgerError> {
        self.block_on(self.submit_async(ledger, ops))?
    }

    /// The retained answers of `ids` (none for an id never submitted), once durable.
    /// Changes nothing.
    pub async fn lookup_async(
        &self,
        ledger: &str,
        ids: &[String],
    ) -> Result<Vec<Option<LedgerAnswer>>, LedgerError> {
        if ids.len() > LEDGER_BATCH_TRANSFERS_MAX {
            return Err(LedgerError::BatchTooLarge { count: ids.len() });
        }
        let answers = {
            let books = self.books();
            let book = books.get(ledger).ok_or_else(|| self.no_ledger(ledger))?;
            let book = book.lock().unwrap_or_else(|p| p.into_inner());
            ids.iter()
                .map(|id| super::checkpoint::answer(self.index(), ledger, &book.machine, id))
                .collect::<Result<Vec<_>, String>>()
                .map_err(LedgerError::Unreadable)?
        };
        // What was read may have been applied and not fsynced yet.
        self.sync("reading ledger answers").await;
        Ok(answers)
    }

    /// [`Ledgers::lookup_async`] for a thread outside the runtime.
    pub fn lookup(
        &self,
        ledger: &str,
        ids: &[String],
    ) -> Result<Vec<Option<LedgerAnswer>>, LedgerError> {
        self.block_on(self.lookup_async(ledger, ids))?
    }

    /// Accounts (all, or `account`), pending transfers and counts, once durable (due
    /// expiries journaled first). Changes nothing else.
    pub fn inspect(&self, ledger: &str, account: Option<&str>) -> Result<LedgerView, LedgerError> {
        self.sweep(ledger);
        let view = {
            let books = self.books();
            let book = books.get(ledger).ok_or_else(|| self.no_ledger(ledger))?;
            let book = book.lock().unwrap_or_else(|p| p.into_inner());
            LedgerView {
                host: self.0.host.clone(),
                ledger: ledger.to_owned(),
                accounts: book.machine.account_views(account),
                pending: book
                    .machine
                    .pending_views(account, LEDGER_INSPECT_PENDING_MAX),
                counts: book.machine.counts().clone(),
                sequence: book.sequence,
            }
        };
        self.block_on(self.sync("reading a ledger"))?;
        Ok(view)
    }

    /// Every ledger's definition as it stands (for `observe`).
    pub fn definitions(&self) -> Vec<LedgerDefinition> {
        self.books()
            .iter()
            .map(|(name, book)| {
                let book = book.lock().unwrap_or_else(|p| p.into_inner());
                LedgerDefinition {
                    name: name.clone(),
                    accounts: book
                        .machine
                        .accounts()
                        .iter()
                        .map(|a| a.definition.clone())
                        .collect(),
                }
            })
            .collect()
    }

    /// A control call (blocking; never on a runtime thread). True with the reply when
    /// the `ledger-reply` failpoint drops it.
    pub fn handle_local(&self, call: LedgerCall) -> (LedgerReply, bool) {
        let refused = |e: LedgerError| LedgerReply::Refused {
            reason: e.to_string(),
        };
        match call {
            LedgerCall::Submit { ledger, ops } => match self.submit(&ledger, &ops) {
                Err(e) => (refused(e), false),
                Ok(answers) => {
                    let dropped = self
                        .0
                        .failpoints
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .reach(Failpoint::LedgerReply);
                    (LedgerReply::Answers { ledger, answers }, dropped)
                }
            },
            LedgerCall::Lookup { ledger, ids } => match self.lookup(&ledger, &ids) {
                Err(e) => (refused(e), false),
                Ok(answers) => (LedgerReply::Retained { ledger, answers }, false),
            },
            LedgerCall::Inspect { ledger, account } => {
                match self.inspect(&ledger, account.as_deref()) {
                    Err(e) => (refused(e), false),
                    Ok(view) => (LedgerReply::Inspected(Box::new(view)), false),
                }
            }
        }
    }

    /// Holds every ledger for a definition change: no batch applies until it drops
    /// (after the host's commit).
    pub fn hold(&self) -> Held<'_> {
        Held {
            books: self.0.books.write().unwrap_or_else(|p| p.into_inner()),
            ledgers: self,
        }
    }
}

/// A definition change reconcile sends (`install-ledger`, `open-account`,
/// `retire-account`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<'a> {
    Install(&'a LedgerDefinition),
    Open {
        ledger: &'a str,
        account: &'a AccountDefinition,
    },
    Retire {
        ledger: &'a str,
        account: &'a str,
    },
}

/// A change staged into the host's write, to apply in memory after its commit.
pub struct Staged {
    ledger: String,
    record: Record,
}

/// Every ledger, held for one definition change.
pub struct Held<'a> {
    books: RwLockWriteGuard<'a, BTreeMap<String, Mutex<Book>>>,
    ledgers: &'a Ledgers,
}

fn lock(book: &Mutex<Book>) -> MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(|p| p.into_inner())
}

impl Held<'_> {
    /// Checks `change` and stages its journal record into `write`: the detail of the
    /// answer and what to apply after the commit (none when nothing changes).
    pub fn stage(
        &mut self,
        change: Change<'_>,
        write: &mut OwnedWriteBatch,
    ) -> Result<(String, Option<Staged>), String> {
        let journal = &self.ledgers.0.journal;
        let (ledger, record, sequence, detail) = match change {
            Change::Install(definition) => {
                let name = &definition.name;
                if let Some(book) = self.books.get(name) {
                    let book = lock(book);
                    let same = book.machine.accounts().len() == definition.accounts.len()
                        && definition.accounts.iter().all(|a| {
                            book.machine.account(&a.name).map(|h| &h.definition) == Some(a)
                        });
                    return if same {
                        Ok((format!("ledger {name} already installed"), None))
                    } else {
                        Err(format!(
                            "ledger `{name}` is installed already with other accounts: open or retire accounts instead"
                        ))
                    };
                }
                if name.is_empty() || name.len() > NAME_LENGTH_MAX || name.contains('\0') {
                    return Err(format!(
                        "ledger names are 1 to NAME_LENGTH_MAX ({NAME_LENGTH_MAX}) bytes"
                    ));
                }
                if self.books.len() >= LEDGERS_PER_HOST_MAX {
                    return Err(format!(
                        "host `{}` keeps LEDGERS_PER_HOST_MAX ({LEDGERS_PER_HOST_MAX}) ledgers already",
                        self.ledgers.0.host
                    ));
                }
                if definition.accounts.len() > LEDGER_ACCOUNTS_MAX {
                    return Err(format!(
                        "ledger `{name}` declares {} accounts, above LEDGER_ACCOUNTS_MAX ({LEDGER_ACCOUNTS_MAX})",
                        definition.accounts.len()
                    ));
                }
                installed(definition)?;
                (
                    name.clone(),
                    Record::Install(definition.clone()),
                    1,
                    format!(
                        "installed ledger {name} with {} account(s)",
                        definition.accounts.len()
                    ),
                )
            }
            Change::Open { ledger, account } => {
                let book = self.books.get(ledger).ok_or_else(|| {
                    format!("host `{}` keeps no ledger `{ledger}`", self.ledgers.0.host)
                })?;
                let book = lock(book);
                if let Some(held) = book.machine.account(&account.name) {
                    return if held.definition == *account {
                        Ok((format!("account {} already open", account.name), None))
                    } else {
                        Err(format!(
                            "account `{}` exists with another definition; an account never changes (retire it and open another)",
                            account.name
                        ))
                    };
                }
                check_definition(account)?;
                if book.machine.accounts().len() >= LEDGER_ACCOUNTS_MAX {
                    return Err(format!(
                        "ledger `{ledger}` holds LEDGER_ACCOUNTS_MAX ({LEDGER_ACCOUNTS_MAX}) accounts already"
                    ));
                }
                (
                    ledger.to_owned(),
                    Record::Open(account.clone()),
                    book.sequence + 1,
                    format!("opened account {} in ledger {ledger}", account.name),
                )
            }
            Change::Retire { ledger, account } => {
                let book = self.books.get(ledger).ok_or_else(|| {
                    format!("host `{}` keeps no ledger `{ledger}`", self.ledgers.0.host)
                })?;
                let book = lock(book);
                match book.machine.account(account) {
                    None => return Err(format!("ledger `{ledger}` holds no account `{account}`")),
                    Some(held) if held.definition.retired => {
                        return Ok((format!("account {account} already retired"), None));
                    }
                    Some(_) => {}
                }
                (
                    ledger.to_owned(),
                    Record::Retire(account.to_owned()),
                    book.sequence + 1,
                    format!("retired account {account}: closed to new transfers"),
                )
            }
        };
        write.insert(
            journal,
            journal_key(&ledger, sequence),
            codec::encode(&record),
        );
        Ok((detail, Some(Staged { ledger, record })))
    }

    /// Applies a staged change in memory, after the host committed it durably.
    pub fn apply(&mut self, staged: Staged) {
        let Staged { ledger, record } = staged;
        if let Record::Install(definition) = &record {
            let book = installed(definition).expect("checked when staged");
            self.books.insert(ledger, Mutex::new(book));
            return;
        }
        let book = self.books.get(&ledger).expect("checked when staged");
        let mut book = lock(book);
        replay(&mut book, record).expect("checked when staged");
        book.sequence += 1;
    }
}
