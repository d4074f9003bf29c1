//! The `processes` profile of one host: the receiver's run journal and grants, the
//! caller's wait journal, the mailbox it keeps for others, and the built-in Processes —
//! all in the host's store (keyspaces `process-*`, `mailbox*`).
//!
//! ```text
//! process-runs     ID                     RunRecord (JSON)           (receiver)
//! process-grants   NAME                   GrantView (JSON)           (receiver = issuer)
//! process-issues   NAME                   newest GrantIssue (JSON): caller keys, mailbox
//! process-waits    ID                     WaitRecord (JSON)          (caller)
//! process-demo     "count"                be64                       (demo.count)
//! process-cursor   MAILBOX                be64 fetched-through       (receiver)
//! process-outbox   ID                     MAILBOX: outcome to deposit (receiver)
//! mailbox          TO \0 KIND \0 SEQ(be64)  Held (JSON, sealed)      (mailbox host)
//! mailbox-index    TO \0 KIND \0 FROM \0 ID  SEQ(be64)               (mailbox host)
//! ```
//!
//! A run at its receiver: **admit** — the request and the reservation of its unit in
//! one write, fsynced (group commit) — is the dispatch point; the Process runs; its
//! outcome and the unit consumed (succeeded) or released (failed) are one more fsynced
//! write, signed once. A request id already journaled returns its record and never
//! runs again. A receiver that restarts with a run admitted and no outcome marks it
//! `unknown`, its unit held, and never runs it again; only `resolve` closes it. So no
//! reservation exists without its dispatch, and there is no unused reservation for a
//! stopped wait to close.

use crate::limits::{
    ARGUMENT_BYTES_MAX, DEMO_DELAY_MS_MAX, MAILBOX_FETCH_MAX, OUTBOX_PASS_MAX,
    REQUEST_ID_LENGTH_MAX, RUN_ARGUMENTS_MAX, RUN_WAIT_MAX, WAIT_POLL_MAX, WAITS_PASS_MAX,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use tokio::sync::watch;

use super::api::{
    Collect, Deposit, DepositKind, Fetch, GrantIssue, GrantView, Held, MailboxReply, Peer,
    ProcessCall, ProcessReply, RunCounts, RunOutcome, RunRequest, RunView, ServiceReply,
    SignedGrant, SignedRequest, StatusQuery,
};
use super::grants::{self, Held as Holding};
use crate::transport::{PeerClient, PeerError};

use crate::custody::Custody;
use crate::custody::seal::{self, Sealed};

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

const REQUEST_INFO: &[u8] = b"grid/process/request/v1";
const OUTCOME_INFO: &[u8] = b"grid/process/outcome/v1";

/// What a Process is given.
pub struct Invocation<'a> {
    pub request: &'a str,
    pub caller: &'a str,
    pub arguments: &'a BTreeMap<String, String>,
}

/// A Process a host serves. It runs at most once per request id; the engine journals
/// the request before and the outcome after. Its own effects are its own to make
/// durable (a crash after them and before the outcome's journal leaves the run
/// `unknown`, for the operator to resolve).
pub trait Process: Send + Sync {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String>;
}

/// What the receiver keeps per request id.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct RunRecord {
    view: RunView,
    /// Closed by the operator (`resolve`).
    #[serde(default)]
    resolved: bool,
}

/// What the caller keeps per request id it sent.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct WaitRecord {
    request: RunRequest,
    receiver: Peer,
    via: Option<Peer>,
    membership: String,
    /// The receiver's signed terminal outcome, once learned.
    run: Option<RunView>,
}

impl WaitRecord {
    fn via(&self) -> String {
        self.via
            .as_ref()
            .map_or("direct".to_owned(), |m| format!("mailbox:{}", m.name))
    }

    fn view(&self, host: &str, detail: &str) -> RunView {
        match &self.run {
            Some(run) => RunView {
                role: "caller".to_owned(),
                ..run.clone()
            },
            None => RunView {
                request: self.request.request.clone(),
                process: self.request.process.clone(),
                arguments: self.request.arguments.clone(),
                caller: host.to_owned(),
                receiver: self.receiver.name.clone(),
                via: self.via(),
                role: "caller".to_owned(),
                outcome: RunOutcome::Unknown,
                result: None,
                detail: detail.to_owned(),
                grant: None,
                units: String::new(),
                signature: None,
            },
        }
    }
}

struct Keyspaces {
    runs: Keyspace,
    grants: Keyspace,
    issues: Keyspace,
    waits: Keyspace,
    demo: Keyspace,
    cursor: Keyspace,
    outbox: Keyspace,
    mailbox: Keyspace,
    mailbox_index: Keyspace,
}

/// Memory of the receiver's grants and runs in flight (serialized writes: whoever
/// holds it commits).
pub struct State {
    grants: BTreeMap<String, GrantView>,
    /// Runs admitted in this incarnation and not finished: duplicates wait on these.
    running: BTreeMap<String, watch::Receiver<bool>>,
    counts: RunCounts,
    /// The mailbox's next sequence number.
    next_sequence: u64,
}

/// The `processes` profile of one host.
pub struct Processes {
    host: String,
    dir: PathBuf,
    database: Database,
    ks: Keyspaces,
    custody: Custody,
    failpoints: Mutex<Failpoints>,
    syncer: Syncer,
    state: Mutex<State>,
    waits: Mutex<()>,
    registry: RwLock<BTreeMap<String, Arc<dyn Process>>>,
    runtime: Mutex<Option<tokio::runtime::Handle>>,
    /// One client (its connection pool) per (membership, peer, address).
    peers: Mutex<BTreeMap<(String, String, String), PeerClient>>,
    /// Outcomes being deposited right now by the task that ran them: the outbox pass
    /// leaves them alone.
    depositing: Mutex<std::collections::BTreeSet<String>>,
    /// Request ids of the caller's waits without a terminal outcome.
    open_waits: Mutex<std::collections::BTreeSet<String>>,
}

/// What admitting a request produced.
enum Admitted {
    /// The id's record (a retained outcome, or a refusal journaled before dispatch).
    Done(RunView),
    /// Running now under another call: wait for it.
    Running(watch::Receiver<bool>),
    /// Journaled and reserved: run it.
    Dispatch(RunView, Arc<dyn Process>, watch::Sender<bool>),
}

fn check_request(request: &RunRequest) -> Result<(), String> {
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

fn binding(kind: DepositKind, to: &str, id: &str) -> Vec<u8> {
    let kind = match kind {
        DepositKind::Request => "request",
        DepositKind::Outcome => "outcome",
    };
    let mut out = Vec::new();
    for part in [kind, to, id] {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out
}

fn kind_name(kind: DepositKind) -> &'static str {
    match kind {
        DepositKind::Request => "request",
        DepositKind::Outcome => "outcome",
    }
}

fn mailbox_prefix(to: &str, kind: DepositKind) -> Vec<u8> {
    let mut k = to.as_bytes().to_vec();
    k.push(0);
    k.extend_from_slice(kind_name(kind).as_bytes());
    k.push(0);
    k
}

fn index_key(to: &str, kind: DepositKind, from: &str, id: &str) -> Vec<u8> {
    let mut k = mailbox_prefix(to, kind);
    k.extend_from_slice(from.as_bytes());
    k.push(0);
    k.extend_from_slice(id.as_bytes());
    k
}

fn be64(bytes: &[u8]) -> Option<u64> {
    <[u8; 8]>::try_from(bytes).ok().map(u64::from_be_bytes)
}

impl Processes {
    /// Opens the profile's keyspaces in the host's database; a run admitted and not
    /// finished before a stop becomes `unknown` here, its unit held.
    pub fn open(
        database: &Database,
        dir: &Path,
        host: &str,
        custody: Custody,
        failpoints: Failpoints,
    ) -> Result<Arc<Processes>, String> {
        let keyspace = |name: &str| {
            database
                .keyspace(name, KeyspaceCreateOptions::default)
                .map_err(|e| format!("processes keyspace {name}: {e}"))
        };
        let ks = Keyspaces {
            runs: keyspace(RUNS)?,
            grants: keyspace(GRANTS)?,
            issues: keyspace(ISSUES)?,
            waits: keyspace(WAITS)?,
            demo: keyspace(DEMO)?,
            cursor: keyspace(CURSOR)?,
            outbox: keyspace(OUTBOX)?,
            mailbox: keyspace(MAILBOX)?,
            mailbox_index: keyspace(MAILBOX_INDEX)?,
        };
        let syncer = Syncer::start(database.clone(), "processes-fsync")
            .map_err(|e| format!("cannot start the processes fsync thread: {e}"))?;
        let mut grants = BTreeMap::new();
        for guard in ks.grants.iter() {
            let (_, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
            let grant: GrantView = serde_json::from_slice(&bytes)
                .map_err(|e| format!("a grant record does not decode: {e}"))?;
            grants.insert(grant.name.clone(), grant);
        }
        let mut next_sequence = 1;
        for guard in ks.mailbox.iter() {
            let (_, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
            let held: Held = serde_json::from_slice(&bytes)
                .map_err(|e| format!("a mailbox deposit does not decode: {e}"))?;
            next_sequence = next_sequence.max(held.sequence + 1);
        }
        // Runs admitted before the stop without an outcome: unknown, never run again.
        let mut write = database.batch();
        let mut counts = RunCounts::default();
        let mut changed = false;
        for guard in ks.runs.iter() {
            let (key, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
            let mut record: RunRecord = serde_json::from_slice(&bytes)
                .map_err(|e| format!("a run record does not decode: {e}"))?;
            if record.view.units == "reserved" {
                let grant_name = record.view.grant.clone().unwrap_or_default();
                let grant = grants.get_mut(&grant_name).ok_or_else(|| {
                    format!(
                        "run `{}` holds a unit of grant `{grant_name}`, which this host does not hold",
                        record.view.request
                    )
                })?;
                grants::to_unknown(grant).map_err(|e| e.to_string())?;
                record.view.units = "unknown".to_owned();
                record.view.outcome = RunOutcome::Unknown;
                record.view.detail = "the receiver stopped after dispatching the run and before journaling its outcome; nothing runs it again; its unit is held until `gridctl process resolve`".to_owned();
                write.insert(
                    &ks.runs,
                    key,
                    serde_json::to_vec(&record).expect("records serialize"),
                );
                write.insert(
                    &ks.grants,
                    grant.name.as_str(),
                    serde_json::to_vec(&*grant).expect("grants serialize"),
                );
                changed = true;
            }
            match record.view.outcome {
                RunOutcome::Succeeded => counts.succeeded += 1,
                RunOutcome::Failed => counts.failed += 1,
                RunOutcome::Unknown => counts.unknown += 1,
            }
        }
        if changed {
            write
                .commit()
                .and_then(|()| database.persist(PersistMode::SyncAll))
                .map_err(|e| format!("marking interrupted runs unknown: {e}"))?;
        }
        let mut open_waits = std::collections::BTreeSet::new();
        for guard in ks.waits.iter() {
            let (key, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
            let record: WaitRecord = serde_json::from_slice(&bytes)
                .map_err(|e| format!("a wait record does not decode: {e}"))?;
            if record.run.is_none() {
                open_waits.insert(String::from_utf8_lossy(&key).into_owned());
            }
        }
        let processes = Arc::new(Processes {
            host: host.to_owned(),
            dir: dir.to_owned(),
            database: database.clone(),
            custody,
            failpoints: Mutex::new(failpoints),
            syncer,
            state: Mutex::new(State {
                grants,
                running: BTreeMap::new(),
                counts,
                next_sequence,
            }),
            waits: Mutex::new(()),
            registry: RwLock::new(BTreeMap::new()),
            runtime: Mutex::new(None),
            peers: Mutex::new(BTreeMap::new()),
            depositing: Mutex::new(std::collections::BTreeSet::new()),
            open_waits: Mutex::new(open_waits),
            ks,
        });
        processes.serve(
            "demo.count",
            Arc::new(DemoCount {
                database: database.clone(),
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

    /// Starts serving: `model.eval` over the host's models, the receiver's mailbox
    /// fetcher, and the caller's open waits.
    pub fn start(self: &Arc<Self>, runtime: tokio::runtime::Handle) {
        *self.runtime.lock().unwrap_or_else(|p| p.into_inner()) = Some(runtime.clone());
        let me = self.clone();
        runtime.spawn(async move { me.fetch_loop().await });
        let me = self.clone();
        runtime.spawn(async move { me.resume_waits().await });
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn failpoint(&self, point: Failpoint) -> bool {
        self.failpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reach(point)
    }

    fn sign(&self, view: &mut RunView) {
        view.signature = Some(self.custody.sign_answer(&self.host, &view.signed_bytes()));
    }

    async fn sync(&self, what: &str) {
        if let Err(e) = self.syncer.sync().await {
            fatal(&self.dir, what, e);
        }
    }

    // ---- grants (operations through the host's submit) ----

    /// The grants this host issued.
    pub fn grants(&self) -> Vec<GrantView> {
        self.lock().grants.values().cloned().collect()
    }

    /// Holds the grants while an issue or surrender is staged and committed by the
    /// host: no run's reservation is written in between.
    pub fn lock_grants(&self) -> MutexGuard<'_, State> {
        self.lock()
    }

    /// Issues `issue.units` more units (a new signed issue) into `write`, in memory
    /// under `state` (committed by the caller before `state` is released).
    pub fn issue(
        &self,
        state: &mut State,
        issue: &GrantIssue,
        write: &mut OwnedWriteBatch,
    ) -> Result<String, String> {
        if issue.units == 0 {
            return Err("a grant issues at least 1 unit".to_owned());
        }
        if issue.caller == self.host {
            return Err(format!("host `{}` cannot grant units to itself", self.host));
        }
        let current = state.grants.get(&issue.name).cloned().unwrap_or(GrantView {
            name: issue.name.clone(),
            caller: issue.caller.clone(),
            ..GrantView::default()
        });
        if current.caller != issue.caller {
            return Err(format!(
                "grant `{}` was issued to `{}`, not `{}`; a grant never changes its caller",
                issue.name, current.caller, issue.caller
            ));
        }
        if current.retired {
            return Err(format!(
                "grant `{}` was surrendered; it issues nothing more",
                issue.name
            ));
        }
        if current.allocated != issue.allocated_before {
            return Err(format!(
                "grant `{}` holds {} allocated units, not the {} this issue was planned against; nothing issued (plan again)",
                issue.name, current.allocated, issue.allocated_before
            ));
        }
        let allocated = current
            .allocated
            .checked_add(issue.units)
            .ok_or_else(|| format!("grant `{}` would exceed {} units", issue.name, u64::MAX))?;
        let mut signed = SignedGrant {
            grant: issue.name.clone(),
            issuer: self.host.clone(),
            caller: issue.caller.clone(),
            serial: current.issued.len() as u32 + 1,
            units: issue.units,
            generation: 0,
            signature: String::new(),
        };
        (signed.generation, signed.signature) = self.custody.sign_hex(&signed.signed_bytes());
        let mut grant = current;
        grant.allocated = allocated;
        grant.mailbox = issue.mailbox.as_ref().map(|m| m.host.clone());
        grant.issued.push(signed.clone());
        write.insert(
            &self.ks.grants,
            grant.name.as_str(),
            serde_json::to_vec(&grant).expect("grants serialize"),
        );
        // The caller's keys and the mailbox, for mailbox runs.
        write.insert(
            &self.ks.issues,
            grant.name.as_str(),
            serde_json::to_vec(issue).expect("issues serialize"),
        );
        let detail = format!(
            "issued grant {} #{}: {} units for {} (allocated {})",
            grant.name, signed.serial, issue.units, issue.caller, grant.allocated
        );
        state.grants.insert(grant.name.clone(), grant);
        Ok(detail)
    }

    /// Surrenders the unused units of grant `name` and retires it.
    pub fn surrender(
        &self,
        state: &mut State,
        name: &str,
        write: &mut OwnedWriteBatch,
    ) -> Result<String, String> {
        let grant = state
            .grants
            .get_mut(name)
            .ok_or_else(|| format!("host `{}` holds no grant `{name}`", self.host))?;
        if grant.retired {
            return Ok(format!(
                "grant {name} already surrendered ({} units)",
                grant.surrendered
            ));
        }
        let unused = grants::surrender(grant);
        write.insert(
            &self.ks.grants,
            name,
            serde_json::to_vec(&*grant).expect("grants serialize"),
        );
        Ok(format!(
            "surrendered {unused} unused unit(s) of grant {name}; {} reserved and {} unknown stay held until their runs close",
            grant.reserved, grant.unknown
        ))
    }

    /// The stored issue of the caller's grant (its keys, its mailbox).
    fn issue_of_caller(&self, caller: &str) -> Option<GrantIssue> {
        self.ks
            .issues
            .iter()
            .filter_map(|g| g.into_inner().ok())
            .filter_map(|(_, v)| serde_json::from_slice::<GrantIssue>(&v).ok())
            .find(|i| i.caller == caller)
    }

    // ---- the receiver ----

    fn admit(&self, caller: &str, via: &str, request: &RunRequest) -> Result<Admitted, String> {
        check_request(request)?;
        let mut state = self.lock();
        let stored = self
            .ks
            .runs
            .get(&request.request)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a run", e));
        if let Some(bytes) = stored {
            let record: RunRecord = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| fatal(&self.dir, "decoding a run", e));
            let view = record.view;
            if view.caller != caller
                || view.process != request.process
                || view.arguments != request.arguments
            {
                return Err(format!(
                    "request id `{}` was already used by `{}` for {} with other arguments; its original outcome stands",
                    request.request, view.caller, view.process
                ));
            }
            if let Some(running) = state.running.get(&request.request) {
                return Ok(Admitted::Running(running.clone()));
            }
            return Ok(Admitted::Done(view));
        }
        let mut view = RunView {
            request: request.request.clone(),
            process: request.process.clone(),
            arguments: request.arguments.clone(),
            caller: caller.to_owned(),
            receiver: self.host.clone(),
            via: via.to_owned(),
            role: "receiver".to_owned(),
            outcome: RunOutcome::Unknown,
            result: None,
            detail: String::new(),
            grant: None,
            units: "none".to_owned(),
            signature: None,
        };
        let process = self
            .registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&request.process)
            .cloned();
        let mut write = self.database.batch();
        let admitted = match process {
            None => {
                let served: Vec<String> = self
                    .registry
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .keys()
                    .cloned()
                    .collect();
                view.outcome = RunOutcome::Failed;
                view.detail = format!(
                    "host `{}` serves no Process `{}` (it serves: {}); refused before dispatch, nothing charged",
                    self.host,
                    request.process,
                    served.join(", ")
                );
                None
            }
            Some(process) => match grants::reserve(state.grants.values_mut(), caller) {
                Err(e) => {
                    view.outcome = RunOutcome::Failed;
                    view.detail = e.to_string();
                    None
                }
                Ok(grant) => {
                    view.grant = Some(grant.clone());
                    view.units = "reserved".to_owned();
                    view.detail = "dispatched; no outcome journaled yet".to_owned();
                    let g = &state.grants[&grant];
                    write.insert(
                        &self.ks.grants,
                        grant.as_str(),
                        serde_json::to_vec(g).expect("grants serialize"),
                    );
                    Some(process)
                }
            },
        };
        if admitted.is_none() {
            self.sign(&mut view);
            state.counts.failed += 1;
        }
        let record = RunRecord {
            view: view.clone(),
            resolved: false,
        };
        write.insert(
            &self.ks.runs,
            request.request.as_str(),
            serde_json::to_vec(&record).expect("records serialize"),
        );
        write
            .commit()
            .unwrap_or_else(|e| fatal(&self.dir, "journaling a run", e));
        Ok(match admitted {
            None => Admitted::Done(view),
            Some(process) => {
                let (done, watching) = watch::channel(false);
                state.running.insert(request.request.clone(), watching);
                state.counts.running += 1;
                Admitted::Dispatch(view, process, done)
            }
        })
    }

    /// Runs a dispatched request and journals its outcome.
    async fn execute(
        self: &Arc<Self>,
        mut view: RunView,
        process: Arc<dyn Process>,
        done: watch::Sender<bool>,
    ) -> RunView {
        self.failpoint(Failpoint::ProcessAfterDispatch);
        let (request, caller, arguments) = (
            view.request.clone(),
            view.caller.clone(),
            view.arguments.clone(),
        );
        let result = tokio::task::spawn_blocking(move || {
            process.run(&Invocation {
                request: &request,
                caller: &caller,
                arguments: &arguments,
            })
        })
        .await
        .unwrap_or_else(|e| Err(format!("the Process panicked: {e}")));
        self.failpoint(Failpoint::ProcessBeforeOutcome);
        {
            let mut state = self.lock();
            let grant_name = view.grant.clone().expect("a dispatched run holds a grant");
            let grant = state
                .grants
                .get_mut(&grant_name)
                .expect("a run's grant is held");
            match result {
                Ok(value) => {
                    grants::consume(grant, Holding::Reserved).unwrap_or_else(|e| panic!("{e}"));
                    view.outcome = RunOutcome::Succeeded;
                    view.result = Some(value);
                    view.units = "consumed".to_owned();
                    view.detail = String::new();
                }
                Err(reason) => {
                    grants::release(grant, Holding::Reserved).unwrap_or_else(|e| panic!("{e}"));
                    view.outcome = RunOutcome::Failed;
                    view.units = "released".to_owned();
                    view.detail = reason;
                }
            }
            self.sign(&mut view);
            let mut write = self.database.batch();
            write.insert(
                &self.ks.grants,
                grant_name.as_str(),
                serde_json::to_vec(&*grant).expect("grants serialize"),
            );
            write.insert(
                &self.ks.runs,
                view.request.as_str(),
                serde_json::to_vec(&RunRecord {
                    view: view.clone(),
                    resolved: false,
                })
                .expect("records serialize"),
            );
            self.owe_deposit(&view, &mut write);
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "journaling an outcome", e));
            state.running.remove(&view.request);
            state.counts.running -= 1;
            match view.outcome {
                RunOutcome::Succeeded => state.counts.succeeded += 1,
                _ => state.counts.failed += 1,
            }
        }
        self.sync("syncing an outcome").await;
        let _ = done.send(true);
        view
    }

    /// A run request from `caller` (certified by the transport, or verified from a
    /// signed mailbox request): its original outcome, once.
    pub async fn serve_run(
        self: &Arc<Self>,
        caller: &str,
        via: &str,
        request: RunRequest,
    ) -> ServiceReply {
        let admitted = match self.admit(caller, via, &request) {
            Ok(a) => a,
            Err(reason) => return ServiceReply::Refused { reason },
        };
        self.sync("journaling a run").await;
        let view = match admitted {
            Admitted::Done(view) => view,
            Admitted::Running(mut watching) => {
                let _ = tokio::time::timeout(RUN_WAIT_MAX, watching.wait_for(|d| *d)).await;
                match self.record(&request.request) {
                    Some(record) => record.view,
                    None => {
                        return ServiceReply::Refused {
                            reason: "the run's record vanished".to_owned(),
                        };
                    }
                }
            }
            Admitted::Dispatch(view, process, done) => self.execute(view, process, done).await,
        };
        ServiceReply::Run { run: view }
    }

    fn record(&self, request: &str) -> Option<RunRecord> {
        self.ks
            .runs
            .get(request)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a run", e))
            .map(|bytes| {
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| fatal(&self.dir, "decoding a run", e))
            })
    }

    /// Whether the reply to a run must be lost (failpoint `process-reply`).
    pub fn drop_reply(&self) -> bool {
        self.failpoint(Failpoint::ProcessReply)
    }

    /// `status`: what the receiver holds of a request from `caller`. Changes nothing.
    pub fn status(&self, caller: &str, query: &StatusQuery) -> ServiceReply {
        match self.record(&query.request) {
            Some(record) if record.view.caller == caller => ServiceReply::Run { run: record.view },
            Some(_) => ServiceReply::Refused {
                reason: format!("request `{}` is not `{caller}`'s", query.request),
            },
            None => ServiceReply::Absent {
                request: query.request.clone(),
            },
        }
    }

    /// Closes an `unknown` run: its unit consumed (succeeded) or released (failed).
    fn resolve(self: &Arc<Self>, request: &str, outcome: RunOutcome) -> ProcessReply {
        let refused = |reason: String| ProcessReply::Refused { reason };
        if outcome == RunOutcome::Unknown {
            return refused("a run resolves to succeeded or failed".to_owned());
        }
        let view = {
            let mut state = self.lock();
            let Some(mut record) = self.record(request) else {
                return refused(format!("host `{}` holds no run `{request}`", self.host));
            };
            if record.resolved {
                if record.view.outcome == outcome {
                    return ProcessReply::Resolved { run: record.view };
                }
                return refused(format!(
                    "run `{request}` was already resolved {}; that stands",
                    record.view.outcome.name()
                ));
            }
            if record.view.units != "unknown" {
                return refused(format!(
                    "run `{request}` is {} (units {}), not unknown: only its outcome's owner decides it",
                    record.view.outcome.name(),
                    record.view.units
                ));
            }
            let grant_name = record.view.grant.clone().unwrap_or_default();
            let Some(grant) = state.grants.get_mut(&grant_name) else {
                return refused(format!("the run's grant `{grant_name}` is not held here"));
            };
            let moved = if outcome == RunOutcome::Succeeded {
                grants::consume(grant, Holding::Unknown)
            } else {
                grants::release(grant, Holding::Unknown)
            };
            if let Err(e) = moved {
                return refused(e.to_string());
            }
            let grant = grant.clone();
            record.view.outcome = outcome;
            record.view.units = if outcome == RunOutcome::Succeeded {
                "consumed"
            } else {
                "released"
            }
            .to_owned();
            record.view.detail = format!(
                "resolved {} by the operator of `{}` after the run was left unknown",
                outcome.name(),
                self.host
            );
            record.resolved = true;
            self.sign(&mut record.view);
            let mut write = self.database.batch();
            write.insert(
                &self.ks.grants,
                grant_name.as_str(),
                serde_json::to_vec(&grant).expect("grants serialize"),
            );
            write.insert(
                &self.ks.runs,
                request,
                serde_json::to_vec(&record).expect("records serialize"),
            );
            self.owe_deposit(&record.view, &mut write);
            write
                .commit()
                .and_then(|()| self.database.persist(PersistMode::SyncAll))
                .unwrap_or_else(|e| fatal(&self.dir, "resolving a run", e));
            state.counts.unknown -= 1;
            match outcome {
                RunOutcome::Succeeded => state.counts.succeeded += 1,
                _ => state.counts.failed += 1,
            }
            record.view
        };
        // A mailbox caller learns it from its mailbox (the outbox's next pass).
        ProcessReply::Resolved { run: view }
    }

    fn handle(&self) -> Option<tokio::runtime::Handle> {
        self.runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    // ---- the receiver's mailboxes ----

    /// Fetches requests from every mailbox a grant names, runs them, deposits their
    /// outcomes sealed to their callers.
    async fn fetch_loop(self: Arc<Self>) {
        loop {
            tokio::time::sleep(POLL_INTERVAL).await;
            let mailboxes: BTreeMap<String, super::api::MailboxAt> = self
                .ks
                .issues
                .iter()
                .filter_map(|g| g.into_inner().ok())
                .filter_map(|(_, v)| serde_json::from_slice::<GrantIssue>(&v).ok())
                .filter_map(|i| i.mailbox)
                .map(|m| (m.host.clone(), m))
                .collect();
            for (name, at) in mailboxes {
                let Ok(client) = self.client(&at.membership, &name, &at.address) else {
                    continue;
                };
                if let Err(PeerError::NotSent(_)) = self.fetch_from(&client, &at).await {
                    self.forget(&at.membership, &name);
                }
            }
            self.flush_outbox().await;
        }
    }

    /// A terminal outcome of a mailbox run is owed to its caller's mailbox until a
    /// deposit is acknowledged: recorded in the outcome's own write, so neither a
    /// crash nor an unreachable mailbox loses it.
    fn owe_deposit(&self, view: &RunView, write: &mut OwnedWriteBatch) {
        if let Some(mailbox) = view.via.strip_prefix("mailbox:")
            && view.outcome != RunOutcome::Unknown
        {
            write.insert(&self.ks.outbox, view.request.as_str(), mailbox);
        }
    }

    fn deposited(&self, request: &str) {
        // Lazily durable: a lost removal only deposits again, answered "already".
        self.ks
            .outbox
            .remove(request)
            .unwrap_or_else(|e| fatal(&self.dir, "clearing a deposited outcome", e));
    }

    /// Deposits owed outcomes (a bounded number per pass).
    async fn flush_outbox(&self) {
        let owed: Vec<(String, String)> = self
            .ks
            .outbox
            .iter()
            .filter_map(|g| g.into_inner().ok())
            .take(OUTBOX_PASS_MAX)
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect();
        for (request, mailbox) in owed {
            if self
                .depositing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&request)
            {
                continue;
            }
            if let Some(record) = self.record(&request)
                && self.deposit_outcome(&mailbox, &record.view).await
            {
                self.deposited(&request);
            }
        }
    }

    /// The client of a peer, kept with its connections for the next call.
    fn client(&self, membership: &str, name: &str, address: &str) -> Result<PeerClient, PeerError> {
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
    fn forget(&self, membership: &str, name: &str) {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(m, n, _), _| m != membership || n != name);
    }

    async fn fetch_from(
        self: &Arc<Self>,
        client: &PeerClient,
        at: &super::api::MailboxAt,
    ) -> Result<(), PeerError> {
        let after = self
            .ks
            .cursor
            .get(&at.host)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a mailbox cursor", e))
            .and_then(|b| be64(&b))
            .unwrap_or(0);
        let reply: MailboxReply = client
            .post(
                &format!("/mailbox/{}/fetch", at.membership),
                &Fetch {
                    kind: DepositKind::Request,
                    after,
                },
                Duration::from_secs(10),
            )
            .await?;
        let MailboxReply::Fetched { deposits } = reply else {
            return Ok(());
        };
        let mut last = after;
        for held in deposits {
            last = last.max(held.sequence);
            match self.open_request(&held, &at.host) {
                Ok(signed) => {
                    let via = format!("mailbox:{}", at.host);
                    match self.admit(&signed.caller, &via, &signed.request) {
                        Err(reason) => {
                            eprintln!(
                                "gridd: mailbox {}: request `{}` refused: {reason}",
                                at.host, held.id
                            );
                        }
                        Ok(admitted) => {
                            self.sync("journaling a run").await;
                            let me = self.clone();
                            let mailbox = at.host.clone();
                            tokio::spawn(async move {
                                let view = match admitted {
                                    Admitted::Done(view) => view,
                                    Admitted::Running(mut w) => {
                                        let _ = w.wait_for(|d| *d).await;
                                        match me.record(&signed.request.request) {
                                            Some(r) => r.view,
                                            None => return,
                                        }
                                    }
                                    Admitted::Dispatch(view, process, done) => {
                                        me.execute(view, process, done).await
                                    }
                                };
                                if view.outcome != RunOutcome::Unknown {
                                    me.depositing
                                        .lock()
                                        .unwrap_or_else(|p| p.into_inner())
                                        .insert(view.request.clone());
                                    if me.deposit_outcome(&mailbox, &view).await {
                                        me.deposited(&view.request);
                                    }
                                    me.depositing
                                        .lock()
                                        .unwrap_or_else(|p| p.into_inner())
                                        .remove(&view.request);
                                }
                            });
                        }
                    }
                }
                Err(reason) => eprintln!(
                    "gridd: mailbox {}: deposit {} from `{}` refused: {reason}",
                    at.host, held.id, held.from
                ),
            }
        }
        if last > after {
            // Every fetched request is journaled (or refused): lazily durable, a lost
            // cursor only fetches them again, answered from the journal.
            self.ks
                .cursor
                .insert(&at.host, last.to_be_bytes())
                .unwrap_or_else(|e| fatal(&self.dir, "recording a mailbox cursor", e));
        }
        Ok(())
    }

    /// Opens a sealed request and checks its caller's signature with the keys its
    /// grant recorded; the depositor must be the caller.
    fn open_request(&self, held: &Held, mailbox: &str) -> Result<SignedRequest, String> {
        let plain = seal::open(
            self.custody.mail_secret(),
            REQUEST_INFO,
            &binding(DepositKind::Request, &self.host, &held.id),
            &held.sealed,
        )
        .map_err(|e| e.to_string())?;
        let signed: SignedRequest =
            serde_json::from_slice(&plain).map_err(|e| format!("does not decode: {e}"))?;
        if signed.caller != held.from
            || signed.receiver != self.host
            || signed.request.request != held.id
        {
            return Err("its signed caller, receiver or id does not match the deposit".to_owned());
        }
        if signed.mailbox != mailbox {
            return Err(format!("it names mailbox `{}`", signed.mailbox));
        }
        let issue = self
            .issue_of_caller(&signed.caller)
            .ok_or_else(|| format!("no grant of this host names `{}`", signed.caller))?;
        if !crate::custody::verify_hex_signature(
            &issue.caller_keys,
            signed.generation,
            &SignedRequest::signed_bytes(
                &signed.caller,
                &signed.receiver,
                &signed.mailbox,
                &signed.request,
            ),
            &signed.signature,
        ) {
            return Err("the caller's signature does not verify".to_owned());
        }
        Ok(signed)
    }

    /// One attempt to deposit a run's signed outcome, sealed to its caller, at
    /// `mailbox`: true once the mailbox holds it.
    async fn deposit_outcome(&self, mailbox: &str, view: &RunView) -> bool {
        let Some(issue) = self.issue_of_caller(&view.caller) else {
            return false;
        };
        let Some(at) = issue.mailbox.filter(|m| m.host == mailbox) else {
            return false;
        };
        let Some(key) = crate::custody::mail_key_of(&issue.caller_keys) else {
            return false;
        };
        let plain = serde_json::to_vec(view).expect("runs serialize");
        let Ok(sealed) = seal::seal(
            &key,
            OUTCOME_INFO,
            &binding(DepositKind::Outcome, &view.caller, &view.request),
            &plain,
        ) else {
            return false;
        };
        let deposit = Deposit {
            to: view.caller.clone(),
            kind: DepositKind::Outcome,
            id: view.request.clone(),
            sealed,
        };
        let Ok(client) = self.client(&at.membership, &at.host, &at.address) else {
            return false;
        };
        match client
            .post::<_, MailboxReply>(
                &format!("/mailbox/{}/deposit", at.membership),
                &deposit,
                Duration::from_secs(10),
            )
            .await
        {
            Ok(MailboxReply::Deposited { .. }) => true,
            Err(PeerError::NotSent(_)) => {
                self.forget(&at.membership, &at.host);
                false
            }
            _ => false,
        }
    }

    // ---- the mailbox host ----

    /// `deposit` from `from`: kept once, fsynced before the answer.
    pub async fn deposit(&self, from: &str, deposit: Deposit) -> MailboxReply {
        let refused = |reason: String| MailboxReply::Refused { reason };
        if deposit.id.is_empty() || deposit.id.len() > REQUEST_ID_LENGTH_MAX {
            return refused(format!(
                "deposit ids are 1 to REQUEST_ID_LENGTH_MAX ({REQUEST_ID_LENGTH_MAX}) bytes"
            ));
        }
        let index = index_key(&deposit.to, deposit.kind, from, &deposit.id);
        let sequence = {
            let mut state = self.lock();
            if let Some(seq) = self
                .ks
                .mailbox_index
                .get(&index)
                .unwrap_or_else(|e| fatal(&self.dir, "reading the mailbox", e))
                .and_then(|b| be64(&b))
            {
                drop(state);
                self.sync("syncing the mailbox").await;
                return MailboxReply::Deposited {
                    sequence: seq,
                    already: true,
                };
            }
            let sequence = state.next_sequence;
            state.next_sequence += 1;
            let held = Held {
                sequence,
                from: from.to_owned(),
                id: deposit.id.clone(),
                sealed: deposit.sealed,
            };
            let mut key = mailbox_prefix(&deposit.to, deposit.kind);
            key.extend_from_slice(&sequence.to_be_bytes());
            let mut write = self.database.batch();
            write.insert(
                &self.ks.mailbox,
                key,
                serde_json::to_vec(&held).expect("deposits serialize"),
            );
            write.insert(&self.ks.mailbox_index, index, sequence.to_be_bytes());
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "storing a deposit", e));
            sequence
        };
        self.sync("syncing a deposit").await;
        MailboxReply::Deposited {
            sequence,
            already: false,
        }
    }

    /// `fetch` by `to`: its deposits of a kind after a sequence number.
    pub fn fetch(&self, to: &str, fetch: &Fetch) -> MailboxReply {
        let prefix = mailbox_prefix(to, fetch.kind);
        let mut start = prefix.clone();
        start.extend_from_slice(&(fetch.after.saturating_add(1)).to_be_bytes());
        let mut end = prefix.clone();
        end.extend_from_slice(&u64::MAX.to_be_bytes());
        let deposits = self
            .ks
            .mailbox
            .range(start..=end)
            .take(MAILBOX_FETCH_MAX)
            .filter_map(|g| g.into_inner().ok())
            .filter_map(|(_, v)| serde_json::from_slice::<Held>(&v).ok())
            .collect();
        MailboxReply::Fetched { deposits }
    }

    /// `collect` by `to`: one deposit of a kind from `from` with an id.
    pub fn collect(&self, to: &str, collect: &Collect) -> MailboxReply {
        let index = index_key(to, collect.kind, &collect.from, &collect.id);
        let deposit = self
            .ks
            .mailbox_index
            .get(&index)
            .unwrap_or_else(|e| fatal(&self.dir, "reading the mailbox", e))
            .and_then(|b| be64(&b))
            .and_then(|seq| {
                let mut key = mailbox_prefix(to, collect.kind);
                key.extend_from_slice(&seq.to_be_bytes());
                self.ks.mailbox.get(key).ok().flatten()
            })
            .and_then(|v| serde_json::from_slice::<Held>(&v).ok());
        MailboxReply::Collected { deposit }
    }

    // ---- the caller ----

    fn wait_record(&self, request: &str) -> Option<WaitRecord> {
        self.ks
            .waits
            .get(request)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a wait", e))
            .map(|b| {
                serde_json::from_slice(&b)
                    .unwrap_or_else(|e| fatal(&self.dir, "decoding a wait", e))
            })
    }

    /// Journals the receiver's terminal outcome in the wait journal (once).
    async fn learned(&self, request: &str, run: &RunView) {
        {
            let _waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
            let Some(mut record) = self.wait_record(request) else {
                return;
            };
            if record.run.is_some() {
                return;
            }
            record.run = Some(run.clone());
            self.ks
                .waits
                .insert(
                    request,
                    serde_json::to_vec(&record).expect("waits serialize"),
                )
                .unwrap_or_else(|e| fatal(&self.dir, "journaling an outcome learned", e));
        }
        self.sync("syncing a wait").await;
    }

    /// Checks a receiver's answer: it is the run asked for, and a terminal outcome
    /// carries the receiver's signature.
    fn check_answer(record: &WaitRecord, caller: &str, run: &RunView) -> Result<(), String> {
        if run.request != record.request.request
            || run.process != record.request.process
            || run.arguments != record.request.arguments
            || run.caller != caller
            || run.receiver != record.receiver.name
        {
            return Err("the receiver's answer is about another request".to_owned());
        }
        if run.outcome != RunOutcome::Unknown && !run.verify(&record.receiver.keys) {
            return Err("the receiver's signature on the outcome does not verify".to_owned());
        }
        Ok(())
    }

    /// One attempt to learn the outcome: direct (`run`, or `status` when `ask_only`),
    /// or through the mailbox (deposit once, then collect).
    async fn ask(
        &self,
        record: &WaitRecord,
        ask_only: bool,
        wait: Duration,
    ) -> Result<RunView, String> {
        match &record.via {
            None => {
                let client = self
                    .client(
                        &record.membership,
                        &record.receiver.name,
                        &record.receiver.address,
                    )
                    .map_err(|e| e.to_string())?;
                let reply: ServiceReply = if ask_only {
                    client
                        .post(
                            &format!("/process/{}/status", record.membership),
                            &StatusQuery {
                                request: record.request.request.clone(),
                            },
                            Duration::from_secs(10),
                        )
                        .await
                } else {
                    client
                        .post(
                            &format!("/process/{}/run", record.membership),
                            &record.request,
                            wait,
                        )
                        .await
                }
                .map_err(|e| match e {
                    PeerError::NotSent(e) => {
                        self.forget(&record.membership, &record.receiver.name);
                        format!("the request was not sent: {e}")
                    }
                    PeerError::Lost(e) => format!("the reply was lost ({e})"),
                })?;
                match reply {
                    ServiceReply::Run { run } => {
                        Self::check_answer(record, &self.host, &run)?;
                        Ok(run)
                    }
                    ServiceReply::Absent { .. } => {
                        Err("the receiver holds no such request yet".to_owned())
                    }
                    ServiceReply::Refused { reason } => Err(format!("refused: {reason}")),
                }
            }
            Some(mailbox) => {
                let client = self
                    .client(&record.membership, &mailbox.name, &mailbox.address)
                    .map_err(|e| e.to_string())?;
                if !ask_only {
                    let deposit = self.seal_request(record, &mailbox.name)?;
                    let reply: MailboxReply = client
                        .post(
                            &format!("/mailbox/{}/deposit", record.membership),
                            &deposit,
                            Duration::from_secs(10),
                        )
                        .await
                        .map_err(|e| format!("depositing the request: {e}"))?;
                    if let MailboxReply::Refused { reason } = reply {
                        return Err(format!("the mailbox refused the request: {reason}"));
                    }
                }
                let deadline = Instant::now() + wait;
                let mut pause = POLL_INTERVAL / 4;
                loop {
                    let reply: Result<MailboxReply, _> = client
                        .post(
                            &format!("/mailbox/{}/collect", record.membership),
                            &Collect {
                                kind: DepositKind::Outcome,
                                from: record.receiver.name.clone(),
                                id: record.request.request.clone(),
                            },
                            Duration::from_secs(10),
                        )
                        .await;
                    if let Ok(MailboxReply::Collected {
                        deposit: Some(held),
                    }) = reply
                    {
                        let plain = seal::open(
                            self.custody.mail_secret(),
                            OUTCOME_INFO,
                            &binding(DepositKind::Outcome, &self.host, &held.id),
                            &held.sealed,
                        )
                        .map_err(|e| format!("the outcome does not open: {e}"))?;
                        let run: RunView = serde_json::from_slice(&plain)
                            .map_err(|e| format!("the outcome does not decode: {e}"))?;
                        Self::check_answer(record, &self.host, &run)?;
                        return Ok(run);
                    }
                    if Instant::now() + pause > deadline {
                        return Err("no outcome in the mailbox yet".to_owned());
                    }
                    tokio::time::sleep(pause).await;
                    // While the user waits, the mailbox is asked at least every
                    // POLL_INTERVAL (the receiver fetches as often).
                    pause = (pause * 2).min(POLL_INTERVAL);
                }
            }
        }
    }

    fn seal_request(&self, record: &WaitRecord, mailbox: &str) -> Result<Deposit, String> {
        let bytes = SignedRequest::signed_bytes(
            &self.host,
            &record.receiver.name,
            mailbox,
            &record.request,
        );
        let (generation, signature) = self.custody.sign_hex(&bytes);
        let signed = SignedRequest {
            caller: self.host.clone(),
            receiver: record.receiver.name.clone(),
            mailbox: mailbox.to_owned(),
            request: record.request.clone(),
            generation,
            signature,
        };
        let key = crate::custody::mail_key_of(&record.receiver.keys)
            .ok_or_else(|| format!("`{}` names no mail key", record.receiver.name))?;
        let sealed: Sealed = seal::seal(
            &key,
            REQUEST_INFO,
            &binding(
                DepositKind::Request,
                &record.receiver.name,
                &record.request.request,
            ),
            &serde_json::to_vec(&signed).expect("requests serialize"),
        )
        .map_err(|e| e.to_string())?;
        Ok(Deposit {
            to: record.receiver.name.clone(),
            kind: DepositKind::Request,
            id: record.request.request.clone(),
            sealed,
        })
    }

    /// `run` as the caller: journal the wait, send (or ask again), journal the outcome.
    async fn run(
        &self,
        request: RunRequest,
        receiver: Peer,
        via: Option<Peer>,
        membership: String,
        wait: Duration,
    ) -> ProcessReply {
        if let Err(reason) = check_request(&request) {
            return ProcessReply::Refused { reason };
        }
        if receiver.name == self.host {
            return ProcessReply::Refused {
                reason: format!("host `{}` cannot call itself", self.host),
            };
        }
        let fresh = WaitRecord {
            request,
            receiver,
            via,
            membership,
            run: None,
        };
        let (record, first) = {
            let _waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
            match self.wait_record(&fresh.request.request) {
                Some(held) => {
                    if held.request != fresh.request
                        || held.receiver.name != fresh.receiver.name
                        || held.via.as_ref().map(|v| &v.name) != fresh.via.as_ref().map(|v| &v.name)
                    {
                        return ProcessReply::Refused {
                            reason: format!(
                                "request id `{}` was already used for {} at `{}` ({}); its original outcome stands",
                                held.request.request,
                                held.request.process,
                                held.receiver.name,
                                held.via()
                            ),
                        };
                    }
                    (held, false)
                }
                None => {
                    self.ks
                        .waits
                        .insert(
                            fresh.request.request.as_str(),
                            serde_json::to_vec(&fresh).expect("waits serialize"),
                        )
                        .unwrap_or_else(|e| fatal(&self.dir, "journaling a wait", e));
                    self.open_waits
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(fresh.request.request.clone());
                    (fresh, true)
                }
            }
        };
        if let Some(run) = &record.run {
            return ProcessReply::Ran {
                run: RunView {
                    role: "caller".to_owned(),
                    ..run.clone()
                },
            };
        }
        if first {
            self.sync("journaling a wait").await;
            // Armed `abort`, the caller dies with its wait journaled, nothing sent.
            self.failpoint(Failpoint::WaitAfterJournal);
        }
        // Asking again with the same id is the only recovery: the receiver answers
        // the original outcome, or takes the request if it never journaled it.
        match self.ask(&record, false, wait).await {
            Ok(run) => {
                if run.outcome != RunOutcome::Unknown {
                    self.learned(&record.request.request, &run).await;
                }
                ProcessReply::Ran {
                    run: RunView {
                        role: "caller".to_owned(),
                        ..run
                    },
                }
            }
            Err(reason) => ProcessReply::Ran {
                run: record.view(
                    &self.host,
                    &format!("{reason}; the outcome is unknown to the caller; the wait stays open: ask again with the same id"),
                ),
            },
        }
    }

    /// After a restart, and while waits are open: asks each open wait's receiver (or
    /// mailbox) for its outcome without sending the request again.
    async fn resume_waits(self: Arc<Self>) {
        let mut pause = POLL_INTERVAL;
        // Open waits are asked WAITS_PASS_MAX at a time, round the set.
        let mut after = String::new();
        loop {
            tokio::time::sleep(pause).await;
            let ids: Vec<String> = {
                let open = self.open_waits.lock().unwrap_or_else(|p| p.into_inner());
                let mut ids: Vec<String> = open
                    .range::<String, _>((
                        std::ops::Bound::Excluded(&after),
                        std::ops::Bound::Unbounded,
                    ))
                    .take(WAITS_PASS_MAX)
                    .cloned()
                    .collect();
                for id in open.iter() {
                    if ids.len() >= WAITS_PASS_MAX {
                        break;
                    }
                    if !ids.contains(id) {
                        ids.push(id.clone());
                    }
                }
                ids
            };
            after = ids.last().cloned().unwrap_or_default();
            let open: Vec<WaitRecord> = ids
                .iter()
                .filter_map(|id| self.wait_record(id))
                .filter(|r| r.run.is_none())
                .collect();
            if open.is_empty() {
                pause = WAIT_POLL_MAX;
                continue;
            }
            for record in open {
                if let Ok(run) = self.ask(&record, true, Duration::ZERO).await
                    && run.outcome != RunOutcome::Unknown
                {
                    self.learned(&record.request.request, &run).await;
                }
            }
            pause = (pause * 2).min(WAIT_POLL_MAX);
        }
    }

    // ---- control calls ----

    /// Handles a control call from this host's operator (blocking; never on a runtime
    /// thread).
    pub fn handle_local(self: &Arc<Self>, call: ProcessCall) -> ProcessReply {
        match self.handle() {
            Some(runtime) => runtime.block_on(self.handle_call(call)),
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
                via,
                membership,
                wait_ms,
            } => {
                let wait = wait_ms
                    .map(Duration::from_millis)
                    .unwrap_or(RUN_WAIT_DEFAULT)
                    .min(RUN_WAIT_MAX);
                self.run(request, receiver, via, membership, wait).await
            }
            ProcessCall::Inspect { request } => ProcessReply::Inspected {
                run: match self.record(&request) {
                    Some(record) => {
                        let mut view = record.view;
                        if view.units == "reserved" {
                            view.detail =
                                "running: dispatched, no outcome journaled yet".to_owned();
                        }
                        Some(view)
                    }
                    None => self.wait_record(&request).map(|w| {
                        w.view(
                            &self.host,
                            "waiting: no outcome learned from the receiver yet",
                        )
                    }),
                },
            },
            ProcessCall::Resolve { request, outcome } => self.resolve(&request, outcome),
            ProcessCall::Grants => ProcessReply::Grants {
                host: self.host.clone(),
                grants: self.grants(),
            },
            ProcessCall::Processes => {
                let counts = self.lock().counts.clone();
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
                }
            }
        }
    }
}

/// `demo.count`: sleeps `delay_ms` (optional), then increments a durable counter
/// (fsynced) and returns `{"count": N}` — so users and tests can see how often work
/// really ran.
struct DemoCount {
    database: Database,
    keyspace: Keyspace,
    dir: PathBuf,
    /// One increment at a time (read, add one, write).
    incrementing: Mutex<()>,
}

impl DemoCount {
    fn read(keyspace: &Keyspace, dir: &Path) -> u64 {
        keyspace
            .get("count")
            .unwrap_or_else(|e| fatal(dir, "reading the demo counter", e))
            .and_then(|b| be64(&b))
            .unwrap_or(0)
    }
}

impl Process for DemoCount {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        if let Some(delay) = invocation.arguments.get("delay_ms") {
            let delay: u64 = delay
                .parse()
                .ok()
                .filter(|d| *d <= DEMO_DELAY_MS_MAX)
                .ok_or_else(|| {
                    format!("delay_ms `{delay}` is not a whole number of milliseconds up to DEMO_DELAY_MS_MAX ({DEMO_DELAY_MS_MAX})")
                })?;
            std::thread::sleep(Duration::from_millis(delay));
        }
        let count = {
            let _one = self.incrementing.lock().unwrap_or_else(|p| p.into_inner());
            let count = Self::read(&self.keyspace, &self.dir) + 1;
            self.keyspace
                .insert("count", count.to_be_bytes())
                .and_then(|()| self.database.persist(PersistMode::SyncAll))
                .unwrap_or_else(|e| fatal(&self.dir, "incrementing the demo counter", e));
            count
        };
        Ok(serde_json::json!({ "count": count }))
    }
}
