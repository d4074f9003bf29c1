//! The `processes` profile of one host: the receiver's run journal and grants, the
//! caller's wait journal, the mailbox it keeps for others, and the built-in Processes —
//! all in the host's store (keyspaces `process-*`, `mailbox*`).
//!
//! ```text
//! process-runs     ID                     RunRecord (JSON)           (receiver)
//! process-grants   NAME                   GrantView (JSON) without its signed issues
//!                                         (receiver = issuer)
//! process-signed-grants NAME \0 SERIAL(be32)  SignedGrant (JSON): each signed issue,
//!                                         written once (receiver; `grant_records.rs`)
//! process-issues   NAME                   newest GrantIssue (JSON): caller keys, mailbox
//! process-waits    ID                     WaitRecord (JSON)          (caller)
//! process-demo     "count"                be64                       (demo.count)
//! process-cursor   MAILBOX                be64 fetched-through       (receiver)
//! process-outbox   ID                     MAILBOX: outcome to deposit (receiver)
//! mailbox          TO \0 KIND \0 SEQ(be64)  Held (JSON, sealed)      (mailbox host)
//! mailbox-index    TO \0 KIND \0 FROM \0 ID  SEQ(be64)               (mailbox host)
//! process-allocations mission:NAME      AllocationLimits (JSON)    (a mission's host)
//! process-runs-by-time  at_ms(be64) ID     empty: finished runs by answer time (receiver)
//! process-archived "runs", "finished"     ArchivedCounts (JSON)      (receiver)
//! process-waits-by-time at_ms(be64) ID    empty: closed waits by answer time (caller)
//! process-called   RECEIVER              Called (JSON): the peer and membership (caller)
//! process-forget   MAILBOX \0 RECEIVER \0 ID  Called (JSON) of the mailbox: an outcome
//!                                         journaled, its deposit to be dropped (caller)
//! process-open     ID                     empty: a run not finished (receiver)
//! process-open-waits ID                   empty: a wait without an answer (caller)
//! process-allocation-runs mission:NAME \0 ID  empty: a run charged to an allocation
//! ```
//!
//! `process-archived` also holds "finished" (the outcomes of every run finished);
//! with `process-open` and `process-open-waits` it is what a restart reads
//! (`open.rs`), never a walk of every run and wait.
//!
//! Finished runs and closed waits past the hot window move to the installation's
//! archive (`archive.rs`).
//!
//! A run at its receiver: **admit** — the request and the reservation of its unit in
//! one write, fsynced (group commit) — is the dispatch point; the Process runs; its
//! outcome and the unit consumed (succeeded) or released (failed) are one more fsynced
//! write, signed once. A request id already journaled returns its record and never
//! runs again. A receiver that restarts with a run admitted and no outcome marks it
//! `unknown`, its unit held, and never runs it again; only `resolve` closes it. So no
//! reservation exists without its dispatch, and there is no unused reservation for a
//! stopped wait to close.

use crate::limits::{ARGUMENT_BYTES_MAX, REQUEST_ID_LENGTH_MAX, RUN_ARGUMENTS_MAX, RUN_WAIT_MAX};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use fjall::Keyspace;
use tokio::sync::watch;

use super::api::{GrantView, Held, ProcessCall, ProcessReply, RunCounts, RunRequest, RunView};
use super::runs::RunUnits;
use crate::transport::{PeerClient, PeerError};

use crate::custody::Custody;

use super::builtins::DemoCount;
use crate::store::{Failpoint, Failpoints, Syncer, fatal};

/// How long a caller's `run` waits for the outcome when the call does not say.
pub const RUN_WAIT_DEFAULT: Duration = Duration::from_secs(30);
/// How often a receiver fetches its mailboxes, and a caller with open waits asks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

const RUNS: &str = "process-runs";
const GRANTS: &str = "process-grants";
const ISSUES: &str = "process-issues";
const WAITS: &str = "process-waits";
const DEMO: &str = "process-demo";
const CURSOR: &str = "process-cursor";
const OUTBOX: &str = "process-outbox";
const MAILBOX: &str = "mailbox";
const MAILBOX_INDEX: &str = "mailbox-index";
const ALLOCATIONS: &str = "process-allocations";
const RUNS_BY_TIME: &str = "process-runs-by-time";
const ARCHIVED: &str = "process-archived";
const WAITS_BY_TIME: &str = "process-waits-by-time";
const CALLED: &str = "process-called";
const FORGET: &str = "process-forget";
const OPEN: &str = "process-open";
const OPEN_WAITS: &str = "process-open-waits";
const ALLOCATION_RUNS: &str = "process-allocation-runs";
const SIGNED_GRANTS: &str = "process-signed-grants";

pub(super) const REQUEST_INFO: &[u8] = b"grid/process/request/v1";
pub(super) const OUTCOME_INFO: &[u8] = b"grid/process/outcome/v1";

/// What a Process is given.
pub struct Invocation<'a> {
    pub request: &'a str,
    pub caller: &'a str,
    pub arguments: &'a BTreeMap<String, String>,
    /// The grant whose unit the run holds (none: a run not charged).
    pub grant: Option<&'a str>,
}

/// A failed run's outcome: why, and optionally a result journaled with it (a
/// `ledger.transfer` refused by its ledger keeps the joined outcome).
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub reason: String,
    pub result: Option<serde_json::Value>,
}

impl From<String> for Failed {
    fn from(reason: String) -> Failed {
        Failed {
            reason,
            result: None,
        }
    }
}

/// What a Process learned, at its receiver's restart, of a run left `unknown` (its
/// outcome never journaled): see [`Process::recover`].
#[derive(Debug, Clone, PartialEq)]
pub enum Recovered {
    /// Nothing proves an outcome: the run stays `unknown`, its unit held, for the
    /// operator to resolve.
    Unknown,
    /// The Process's own durable record proves this outcome (succeeded: the unit is
    /// consumed; failed: released). It is journaled as the run's outcome.
    Outcome(Result<serde_json::Value, Failed>),
}

/// A Process a host serves. It runs at most once per request id; the engine journals
/// the request before and the outcome after. Its own effects are its own to make
/// durable (a crash after them and before the outcome's journal leaves the run
/// `unknown`, for the operator to resolve).
pub trait Process: Send + Sync {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String>;

    /// Whether this run may block (sleep, wait for IO or a lock held long): then it
    /// runs on a blocking thread, else on the task that admitted it, without the hop.
    fn blocks(&self, _invocation: &Invocation<'_>) -> bool {
        true
    }

    /// Runs it and answers its outcome, a failure with a result of its own if it has
    /// one. The default is [`Process::run`], a failure carrying no result.
    fn run_outcome(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, Failed> {
        self.run(invocation).map_err(Failed::from)
    }

    /// A run of it left `unknown` at a restart (admitted, no outcome journaled): asks
    /// its own durable record, never running it again. The default proves nothing
    /// (the run stays `unknown` until resolved); `ledger.transfer` asks its ledger for
    /// the retained answer of its transfer id.
    fn recover(&self, _invocation: &Invocation<'_>) -> Recovered {
        Recovered::Unknown
    }
}

pub(super) struct Keyspaces {
    pub(super) runs: Keyspace,
    pub(super) grants: Keyspace,
    pub(super) issues: Keyspace,
    pub(super) waits: Keyspace,
    pub(super) demo: Keyspace,
    pub(super) cursor: Keyspace,
    pub(super) outbox: Keyspace,
    pub(super) mailbox: Keyspace,
    pub(super) mailbox_index: Keyspace,
    pub(super) allocations: Keyspace,
    pub(super) runs_by_time: Keyspace,
    pub(super) archived: Keyspace,
    pub(super) waits_by_time: Keyspace,
    pub(super) called: Keyspace,
    pub(super) forget: Keyspace,
    pub(super) open: Keyspace,
    pub(super) open_waits: Keyspace,
    pub(super) allocation_runs: Keyspace,
    pub(super) signed_grants: Keyspace,
}

/// Memory of the receiver's grants and runs in flight (serialized writes: whoever
/// holds it commits).
pub struct State {
    pub(super) grants: BTreeMap<String, GrantView>,
    /// The newest issue of each grant this host issued (its caller's keys, its
    /// mailbox), as in `process-issues`: read per mailbox run without a scan.
    pub(super) issues: BTreeMap<String, super::api::GrantIssue>,
    /// The limits of each allocation (`mission:NAME`, its units account among
    /// `grants`): deadline and whether new work stopped.
    pub(super) limits: BTreeMap<String, super::allocations::AllocationLimits>,
    /// Runs admitted in this incarnation and not finished: duplicates wait on these.
    pub(super) running: BTreeMap<String, watch::Receiver<bool>>,
    pub(super) counts: RunCounts,
    /// The mailbox's next sequence number.
    pub(super) next_sequence: u64,
    /// Deposits the mailbox holds (not dropped yet).
    pub(super) deposits_held: u64,
}

/// The `processes` profile of one host.
pub struct Processes {
    pub(super) host: String,
    pub(super) dir: PathBuf,
    pub(super) database: crate::store::Durable,
    pub(super) ks: Keyspaces,
    pub(super) custody: Custody,
    pub(super) failpoints: Mutex<Failpoints>,
    pub(super) syncer: Syncer,
    pub(super) state: Mutex<State>,
    pub(super) waits: Mutex<()>,
    pub(super) registry: RwLock<BTreeMap<String, Arc<dyn Process>>>,
    pub(super) runtime: Mutex<Option<tokio::runtime::Handle>>,
    /// One client (its connection pool) per (membership, peer, address).
    pub(super) peers: Mutex<BTreeMap<(String, String, String), PeerClient>>,
    /// Outcomes being deposited right now by the task that ran them: the outbox pass
    /// leaves them alone.
    pub(super) depositing: Mutex<std::collections::BTreeSet<String>>,
    /// Request ids of the caller's waits without a terminal outcome.
    pub(super) open_waits: Mutex<std::collections::BTreeSet<String>>,
    /// Counts the deposits made at this mailbox host: held long polls wake on it.
    pub(super) deposits: watch::Sender<u64>,
    /// Long polls held right now (at most `MAILBOX_HELD_MAX`).
    pub(super) held: std::sync::atomic::AtomicUsize,
    /// Mailboxes the receiver's fetcher has a long-poll task for.
    pub(super) fetching: Mutex<std::collections::BTreeSet<String>>,
    /// The host's `retain` and its shelf: where finished runs go past the hot window.
    pub(super) retention: super::archive::RunRetention,
}

impl Keyspaces {
    /// The profile's keyspaces in the host's database (opened in this order).
    pub(super) fn open(database: &fjall::Database) -> Result<Keyspaces, String> {
        let keyspace = |name: &str| {
            database
                .keyspace(name, crate::store::keyspace_options)
                .map_err(|e| format!("processes keyspace `{name}`: {e}"))
        };
        Ok(Keyspaces {
            runs: keyspace(RUNS)?,
            grants: keyspace(GRANTS)?,
            issues: keyspace(ISSUES)?,
            waits: keyspace(WAITS)?,
            demo: keyspace(DEMO)?,
            cursor: keyspace(CURSOR)?,
            outbox: keyspace(OUTBOX)?,
            mailbox: keyspace(MAILBOX)?,
            mailbox_index: keyspace(MAILBOX_INDEX)?,
            allocations: keyspace(ALLOCATIONS)?,
            runs_by_time: keyspace(RUNS_BY_TIME)?,
            archived: keyspace(ARCHIVED)?,
            waits_by_time: keyspace(WAITS_BY_TIME)?,
            called: keyspace(CALLED)?,
            forget: keyspace(FORGET)?,
            open: keyspace(OPEN)?,
            open_waits: keyspace(OPEN_WAITS)?,
            allocation_runs: keyspace(ALLOCATION_RUNS)?,
            signed_grants: keyspace(SIGNED_GRANTS)?,
        })
    }
}

pub(super) fn check_request(request: &RunRequest) -> Result<(), String> {
    let id = &request.request;
    if id.is_empty() || id.len() > REQUEST_ID_LENGTH_MAX || id.chars().any(char::is_control) {
        return Err(format!(
            "request ids are 1 to REQUEST_ID_LENGTH_MAX ({REQUEST_ID_LENGTH_MAX}) printable bytes"
        ));
    }
    if request.process.is_empty() || request.process.len() > ARGUMENT_BYTES_MAX {
        return Err("a Process name is 1 to ARGUMENT_BYTES_MAX bytes".to_owned());
    }
    if request.arguments.len() > RUN_ARGUMENTS_MAX {
        return Err(format!(
            "a run carries at most RUN_ARGUMENTS_MAX ({RUN_ARGUMENTS_MAX}) arguments"
        ));
    }
    if let Some((name, _)) = request
        .arguments
        .iter()
        .find(|(n, v)| n.is_empty() || n.len() > ARGUMENT_BYTES_MAX || v.len() > ARGUMENT_BYTES_MAX)
    {
        return Err(format!(
            "argument `{name}`: names are 1 to ARGUMENT_BYTES_MAX ({ARGUMENT_BYTES_MAX}) bytes, values at most that"
        ));
    }
    Ok(())
}

pub(super) fn be64(bytes: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(bytes).ok().map(u64::from_be_bytes)
}

impl Processes {
    /// Opens the profile's keyspaces in the host's database; a run admitted and not
    /// finished before a stop becomes `unknown` here, its unit held.
    pub fn open(
        database: &crate::store::Durable,
        dir: &Path,
        host: &str,
        custody: Custody,
        failpoints: Failpoints,
        retention: super::archive::RunRetention,
    ) -> Result<Arc<Processes>, String> {
        let ks = Keyspaces::open(database)?;
        let syncer = Syncer::start_gathering(
            {
                let database = database.clone();
                move || database.persist()
            },
            "processes-fsync",
            crate::limits::PROCESSES_FSYNC_GATHER,
        )
        .map_err(|e| format!("cannot start the processes fsync thread: {e}"))?;
        // Grants and their issues are keyed by the grant's name.
        let mut grants: BTreeMap<String, GrantView> =
            crate::store::decode_all(&ks.grants, "grant record")?;
        super::grant_records::attach_signed(
            database,
            &ks.grants,
            &ks.signed_grants,
            host,
            &mut grants,
        )?;
        let issues = crate::store::decode_all(&ks.issues, "grant issue record")?;
        let limits = crate::store::decode_all(&ks.allocations, "allocation limits record")?;
        let mut next_sequence = ks
            .mailbox_index
            .get(super::mailbox::NEXT_SEQUENCE_KEY)
            .map_err(|e| e.to_string())?
            .and_then(|b| be64(&b))
            .unwrap_or(1);
        let mut deposits_held = 0;
        for guard in ks.mailbox.iter() {
            let (_, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
            let held: Held = serde_json::from_slice(&bytes)
                .map_err(|e| format!("a mailbox deposit does not decode: {e}"))?;
            next_sequence = next_sequence.max(held.sequence + 1);
            deposits_held += 1;
        }
        // Runs admitted before the stop without an outcome: unknown, never run again.
        let super::open::Reopened { counts, open_waits } =
            super::open::reopen(database, &ks, &mut grants)?;
        let processes = Arc::new(Processes {
            host: host.to_owned(),
            dir: dir.to_owned(),
            database: database.clone(),
            custody,
            failpoints: Mutex::new(failpoints),
            syncer,
            state: Mutex::new(State {
                grants,
                issues,
                limits,
                running: BTreeMap::new(),
                counts,
                next_sequence,
                deposits_held,
            }),
            waits: Mutex::new(()),
            registry: RwLock::new(BTreeMap::new()),
            runtime: Mutex::new(None),
            peers: Mutex::new(BTreeMap::new()),
            depositing: Mutex::new(std::collections::BTreeSet::new()),
            open_waits: Mutex::new(open_waits),
            deposits: watch::channel(0).0,
            held: std::sync::atomic::AtomicUsize::new(0),
            fetching: Mutex::new(std::collections::BTreeSet::new()),
            retention,
            ks,
        });
        processes.serve(
            "demo.count",
            Arc::new(DemoCount {
                keyspace: processes.ks.demo.clone(),
                dir: dir.to_owned(),
                incrementing: Mutex::new(()),
            }),
        );
        Ok(processes)
    }

    /// Serves `process` under `name` (an embedder's own Processes join the built-ins).
    pub fn serve(&self, name: &str, process: Arc<dyn Process>) {
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), process);
    }

    /// Starts the background work: the receiver's mailbox fetcher and the caller's
    /// open waits. (`model.eval` is registered by the composition root with
    /// [`Processes::serve`].)
    pub fn start(self: &Arc<Self>, runtime: tokio::runtime::Handle) {
        *self.runtime.lock().unwrap_or_else(|p| p.into_inner()) = Some(runtime.clone());
        let me = self.clone();
        runtime.spawn(async move { me.fetch_loop().await });
        let me = self.clone();
        runtime.spawn(async move { me.resume_waits().await });
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn failpoint(&self, point: Failpoint) -> bool {
        self.failpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reach(point)
    }

    pub(super) fn sign(&self, view: &mut RunView) {
        view.signature = Some(self.custody.sign_answer(&self.host, &view.signed_bytes()));
    }

    /// The JSON record at `key` (a `what`: "run", "wait"); storage failures are fatal.
    pub(super) fn stored<T: serde::de::DeserializeOwned>(
        &self,
        keyspace: &Keyspace,
        key: &str,
        what: &str,
    ) -> Option<T> {
        keyspace
            .get(key)
            .unwrap_or_else(|e| fatal(&self.dir, &format!("reading a {what}"), e))
            .map(|bytes| {
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| fatal(&self.dir, &format!("decoding a {what}"), e))
            })
    }

    pub(super) async fn sync(&self, what: &str) {
        if let Err(e) = self.syncer.sync().await {
            fatal(&self.dir, what, e);
        }
    }

    pub(super) fn handle(&self) -> Option<tokio::runtime::Handle> {
        self.runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The client of a peer, kept with its connections for the next call.
    pub(super) fn client(
        &self,
        membership: &str,
        name: &str,
        address: &str,
    ) -> Result<PeerClient, PeerError> {
        let key = (membership.to_owned(), name.to_owned(), address.to_owned());
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = peers.get(&key) {
            return Ok(client.clone());
        }
        let client = PeerClient::new(&self.dir, membership, name, address)?;
        peers.insert(key, client.clone());
        Ok(client)
    }

    /// Drops a peer's client after a failed connection: the next call builds it anew
    /// (with the credentials as they are then).
    pub(super) fn forget(&self, membership: &str, name: &str) {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(m, n, _), _| m != membership || n != name);
    }

    // ---- control calls ----

    /// Handles a control call from this host's operator (blocking; never on a runtime
    /// thread).
    pub fn handle_local(self: &Arc<Self>, call: ProcessCall) -> ProcessReply {
        match self.handle() {
            // Run on the runtime's workers, not here: each await inside (the group
            // commit's fsyncs, the receiver's reply) then wakes a task on a worker
            // instead of parking and waking this thread; it waits once, for the end.
            Some(runtime) => {
                let me = self.clone();
                match runtime.block_on(runtime.spawn(async move { me.handle_call(call).await })) {
                    Ok(reply) => reply,
                    // As if it had panicked here: the connection closes, no reply.
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => panic!("a Processes call was cancelled: {e}"),
                }
            }
            None => ProcessReply::Refused {
                reason: "processes have not started (they need the `transport` profile)".to_owned(),
            },
        }
    }

    async fn handle_call(self: &Arc<Self>, call: ProcessCall) -> ProcessReply {
        match call {
            ProcessCall::Run {
                request,
                receiver,
                mission: Some(mission),
                ..
            } => {
                if receiver.name != self.host {
                    return ProcessReply::Refused {
                        reason: format!(
                            "a mission's allocation is consumed on its own host `{}`, not at `{}`; nothing was sent",
                            self.host, receiver.name
                        ),
                    };
                }
                self.run_on_allocation(&mission, request).await
            }
            ProcessCall::Run {
                request,
                receiver,
                via,
                membership,
                wait_ms,
                mission: None,
            } => {
                let wait = wait_ms
                    .map(Duration::from_millis)
                    .unwrap_or(RUN_WAIT_DEFAULT)
                    .min(RUN_WAIT_MAX);
                self.run(request, receiver, via, membership, wait).await
            }
            ProcessCall::Inspect { request } => ProcessReply::Inspected {
                run: match self.record(&request) {
                    Err(reason) => return ProcessReply::Refused { reason },
                    Ok(Some(record)) => {
                        let mut view = record.view;
                        if view.units == RunUnits::Reserved {
                            view.detail =
                                "running: dispatched, no outcome journaled yet".to_owned();
                        }
                        Some(view)
                    }
                    Ok(None) => match self.wait_record(&request) {
                        Err(reason) => return ProcessReply::Refused { reason },
                        Ok(wait) => wait.map(|w| {
                            w.view(
                                &self.host,
                                "waiting: no outcome learned from the receiver yet",
                            )
                        }),
                    },
                },
            },
            ProcessCall::Resolve { request, outcome } => self.resolve(&request, outcome),
            ProcessCall::Cancel { request } => self.cancel(&request).await,
            ProcessCall::Grants => ProcessReply::Grants {
                host: self.host.clone(),
                grants: self.grants(),
            },
            ProcessCall::Processes => {
                let (counts, mailbox_deposits) = {
                    let state = self.lock();
                    (state.counts.clone(), state.deposits_held)
                };
                ProcessReply::Processes {
                    host: self.host.clone(),
                    processes: self
                        .registry
                        .read()
                        .unwrap_or_else(|p| p.into_inner())
                        .keys()
                        .cloned()
                        .collect(),
                    runs: counts,
                    demo_count: DemoCount::read(&self.ks.demo, &self.dir),
                    mailbox_deposits,
                }
            }
        }
    }
}
