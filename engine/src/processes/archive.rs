//! Finished runs and closed waits past the hot window (docs/storage.md, "Archive";
//! docs/processes.md). At the receiver, a run whose outcome is terminal — refused,
//! succeeded, failed, cancelled before dispatch, or an unknown run resolved — carries
//! the time it was answered and is listed by that time; at the caller, so does a wait
//! once it holds the receiver's terminal outcome (learned, or closed by a proof of no
//! dispatch). The host's archive pass moves those past `retain hot-days` onto the
//! installation's shelf, where a re-sent request id still finds its original, signed
//! outcome (`"archived": true`). A run whose outcome is still owed to a mailbox caller,
//! or that is charged to a mission's allocation not yet settled, stays hot until that
//! obligation closes (a settled mission's signed consumption record holds every run
//! charged to it; the run leaves `process-allocation-runs` in the write that shelves
//! it); a run `unknown` or running, and an open wait, are never listed.
//!
//! Keyspaces: `process-runs-by-time` and `process-waits-by-time` (answer time `u64` BE,
//! request → empty), `process-archived` (`runs` → [`ArchivedCounts`] JSON: the outcomes
//! archived, counted into the host's run counts at open). On the shelf a run's key is
//! [`RUN_PREFIX`] + its request id, a wait's [`WAIT_PREFIX`] + its request id (no
//! operation id holds a control character).
//!
//! Invariants, stated as absences: no run leaves `process-runs` before the segment
//! holding it is synced and indexed in the same synced write that removes it; no
//! request id found on the shelf is admitted again — one whose entry cannot be read is
//! refused naming why (its caller's wait stays open), never run; no archived run
//! drops out of the counts.

use fjall::OwnedWriteBatch;
use serde::{Deserialize, Serialize};

use super::allocations::is_allocation;
use super::caller::WaitRecord;
use super::receiver::RunRecord;
use super::service::{Processes, State};
use crate::store::archive::Entry;
use crate::store::fatal;
use crate::store::high_water::Signer;
use crate::store::shelf::{self, Gathered, time_key};

/// A run's key on the installation's shelf: this + its request id.
pub(super) const RUN_PREFIX: &str = "process-run\u{0}";
/// A caller's wait's key on the installation's shelf: this + its request id.
pub(super) const WAIT_PREFIX: &str = "process-wait\u{0}";
/// The `process-archived` key of the counts of the runs archived.
const COUNTS_KEY: &str = "runs";
/// The `process-archived` key of the counts of every run finished, hot or archived
/// (`open.rs`: the room's run counts at open).
pub(super) const FINISHED_KEY: &str = "finished";

/// The outcomes of runs finished: those archived (`runs`), or all (`finished`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ArchivedCounts {
    pub(super) succeeded: u64,
    pub(super) failed: u64,
}

/// How the receiver's runs are retained: the host's `retain` and its shelf.
pub type RunRetention = shelf::Retention;

/// What a pass over the runs and waits did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunsPass {
    pub runs: Gathered,
    pub waits: Gathered,
    /// Finished runs past the window kept hot: an outcome owed to a mailbox, or a
    /// mission's allocation charged.
    pub owed: u64,
}

/// Whether a run's outcome is terminal: nothing changes it again.
fn finished(record: &RunRecord) -> bool {
    !record.run().is_running() && record.view.units != super::runs::RunUnits::Unknown
}

pub(super) fn read_counts(keyspace: &fjall::Keyspace) -> Result<ArchivedCounts, String> {
    match keyspace.get(COUNTS_KEY).map_err(|e| e.to_string())? {
        None => Ok(ArchivedCounts::default()),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| format!("the counts of archived runs do not decode: {e}")),
    }
}

/// A record the room archives once it is closed: a receiver's run, a caller's wait.
pub(super) trait Answered: Serialize {
    fn id(&self) -> &str;
    /// Closed: its outcome terminal, nothing changes it again.
    fn closed(&self) -> bool;
    /// Open: listed in the room's open index (`open.rs`) — not finished.
    fn open(&self) -> bool {
        !self.closed()
    }
    fn answered_ms(&mut self) -> &mut Option<u64>;
}

impl Answered for RunRecord {
    fn id(&self) -> &str {
        &self.view.request
    }
    fn closed(&self) -> bool {
        finished(self)
    }
    fn answered_ms(&mut self) -> &mut Option<u64> {
        &mut self.answered_ms
    }
}

impl Answered for WaitRecord {
    fn id(&self) -> &str {
        &self.request.request
    }
    fn closed(&self) -> bool {
        self.run
            .as_ref()
            .is_some_and(|run| run.outcome != super::api::RunOutcome::Unknown)
    }
    /// Without an answer from its receiver yet (what the caller asks again).
    fn open(&self) -> bool {
        self.run.is_none()
    }
    fn answered_ms(&mut self) -> &mut Option<u64> {
        &mut self.answered_ms
    }
}

/// Journals `record` into `write` at its id in `hot`, listed in `open` while it is
/// open; once closed, it is stamped with its answer time (once) and listed by it in
/// `by_time`, in the same write. Answers whether this write closed it.
pub(super) fn journal(
    write: &mut OwnedWriteBatch,
    [hot, by_time, open]: [&fjall::Keyspace; 3],
    record: &mut impl Answered,
) -> bool {
    let closing = record.closed() && record.answered_ms().is_none();
    if closing {
        let at = crate::store::now_ms();
        *record.answered_ms() = Some(at);
        write.insert(by_time, time_key(at, record.id()), []);
    }
    if record.open() {
        write.insert(open, record.id(), []);
    } else {
        write.remove(open, record.id());
    }
    write.insert(
        hot,
        record.id(),
        serde_json::to_vec(&*record).expect("records serialize"),
    );
    closing
}

impl Processes {
    /// Journals `record` into `write` (under the state's lock): a finished run also
    /// gets its answer time and its place among the runs by time, and is counted —
    /// in `state` and in the counts written with it (the write must commit or the
    /// host stops).
    pub(super) fn journal_run(
        &self,
        state: &mut State,
        write: &mut OwnedWriteBatch,
        record: &mut RunRecord,
    ) {
        let ks = &self.ks;
        super::open::note_allocation(ks, write, record);
        if journal(write, [&ks.runs, &ks.runs_by_time, &ks.open], record) {
            match record.view.outcome {
                super::api::RunOutcome::Succeeded => state.counts.succeeded += 1,
                _ => state.counts.failed += 1,
            }
            super::open::write_finished(ks, write, &state.counts);
        }
    }

    /// Journals the caller's `record` into `write` (under the waits' lock): a wait
    /// closed with a terminal outcome also gets its answer time and its place among the
    /// waits by time.
    pub(super) fn journal_wait(&self, write: &mut OwnedWriteBatch, record: &mut WaitRecord) {
        let ks = &self.ks;
        journal(
            write,
            [&ks.waits, &ks.waits_by_time, &ks.open_waits],
            record,
        );
    }

    /// The receiver's record of `request`: hot, else on the shelf (marked `archived`).
    /// `Err`: the id is known and cannot be answered — past `archive-days`, or its
    /// entry does not read — never "not found".
    pub(super) fn record(&self, request: &str) -> Result<Option<RunRecord>, String> {
        if let Some(record) = self.stored(&self.ks.runs, request, "run") {
            return Ok(Some(record));
        }
        let mut record = self.shelved::<RunRecord>(RUN_PREFIX, request, "run")?;
        if let Some(record) = &mut record {
            record.view.archived = true;
        }
        Ok(record)
    }

    /// The caller's wait of `request`: hot, else on the shelf (its outcome marked
    /// `archived`). `Err` as for [`Processes::record`].
    pub(super) fn wait_record(&self, request: &str) -> Result<Option<WaitRecord>, String> {
        if let Some(record) = self.hot_wait(request) {
            return Ok(Some(record));
        }
        let mut record = self.shelved::<WaitRecord>(WAIT_PREFIX, request, "wait")?;
        if let Some(run) = record.as_mut().and_then(|w| w.run.as_mut()) {
            run.archived = true;
        }
        Ok(record)
    }

    /// The caller's wait of `request` in the hot store (an open wait is always there).
    pub(super) fn hot_wait(&self, request: &str) -> Option<WaitRecord> {
        self.stored(&self.ks.waits, request, "wait")
    }

    /// `what` (`run`, `wait`) `request` on the shelf, under `prefix`.
    fn shelved<T: serde::de::DeserializeOwned>(
        &self,
        prefix: &str,
        request: &str,
        what: &str,
    ) -> Result<Option<T>, String> {
        let again = if what == "wait" {
            "sent again"
        } else {
            "run again"
        };
        self.retention.find(
            &self.host,
            &format!("{prefix}{request}"),
            [what, request, again],
            |value| serde_json::from_slice::<T>(value).map_err(|e| e.to_string()),
        )
    }

    /// When the oldest finished run or closed wait still hot was answered (`inspect
    /// storage`).
    pub fn oldest_finished_ms(&self) -> Option<u64> {
        let oldest = |by_time: &fjall::Keyspace| {
            let guard = by_time.first_key_value()?;
            let key = guard
                .key()
                .unwrap_or_else(|e| fatal(&self.dir, "reading runs by time", e));
            key.first_chunk::<8>().map(|at| u64::from_be_bytes(*at))
        };
        [
            oldest(&self.ks.runs_by_time),
            oldest(&self.ks.waits_by_time),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves the finished runs and closed waits answered before `cutoff` to the
    /// shelf, in at most `segments_max` segments signed by `sign` (the host's archive
    /// pass calls it, with the same cutoff as its answers). A run whose outcome is owed
    /// to a mailbox, or that is charged to an allocation not settled, stays hot. A
    /// storage failure stops the host; an archive that refuses a segment refuses the
    /// pass and changes nothing.
    pub fn archive(
        &self,
        cutoff: u64,
        patient: bool,
        segments_max: usize,
        sign: &Signer,
    ) -> Result<RunsPass, String> {
        let Some(shelf) = &self.retention.shelf else {
            return Ok(RunsPass::default());
        };
        let mut owed = 0;
        let dir = &self.dir;
        let ks = &self.ks;
        let settled: std::collections::BTreeSet<String> = self
            .lock()
            .limits
            .iter()
            .filter(|(_, limits)| limits.settled)
            .map(|(name, _)| name.clone())
            .collect();
        // Charged to an allocation whose mission's return is not settled.
        let held = |record: &RunRecord| {
            record
                .view
                .grant
                .as_deref()
                .is_some_and(|g| is_allocation(g) && !settled.contains(g))
        };
        let candidates = shelf::answered_before(&ks.runs_by_time, &ks.runs, cutoff, dir, "runs")
            .filter_map(|entry| {
                let record: RunRecord = serde_json::from_slice(&entry.value)
                    .unwrap_or_else(|e| fatal(dir, "decoding a run", e));
                let owes = ks
                    .outbox
                    .get(&entry.key)
                    .unwrap_or_else(|e| fatal(dir, "reading the outbox", e))
                    .is_some();
                if owes || held(&record) {
                    owed += 1;
                    return None;
                }
                Some(Entry {
                    key: format!("{RUN_PREFIX}{}", entry.key),
                    ..entry
                })
            });
        let runs = shelf::gather(candidates, cutoff, patient, segments_max, |entries| {
            let mut counts = read_counts(&ks.archived)
                .unwrap_or_else(|e| fatal(dir, "reading the counts of archived runs", e));
            let mut charged = Vec::new();
            for entry in &entries {
                let record: RunRecord = serde_json::from_slice(&entry.value)
                    .unwrap_or_else(|e| fatal(dir, "decoding a run", e));
                match record.view.outcome {
                    super::api::RunOutcome::Succeeded => counts.succeeded += 1,
                    _ => counts.failed += 1,
                }
                if let Some(allocation) = record.view.grant.as_deref().filter(|g| is_allocation(g))
                {
                    charged.push(super::open::allocation_key(
                        allocation,
                        &record.view.request,
                    ));
                }
            }
            self.shelve(
                shelf,
                sign,
                &entries,
                RUN_PREFIX,
                [&ks.runs, &ks.runs_by_time],
                |write| {
                    write.insert(
                        &ks.archived,
                        COUNTS_KEY,
                        serde_json::to_vec(&counts).expect("counts serialize"),
                    );
                    for key in charged {
                        write.remove(&ks.allocation_runs, key);
                    }
                },
            )
        })?;
        let left = segments_max.saturating_sub(runs.segments as usize);
        let room = shelf::Room {
            database: &self.database,
            host: &self.host,
            dir,
            prefix: WAIT_PREFIX,
            keyspaces: [&ks.waits, &ks.waits_by_time],
            what: "waits",
        };
        let waits = shelf::archive_room(shelf, room, (cutoff, patient, left), sign, || {
            self.failpoint(crate::store::Failpoint::ArchiveBeforeIndex);
        })?;
        Ok(RunsPass { runs, waits, owed })
    }

    /// One segment of `entries` (keys `prefix` + request id): synced, then indexed in
    /// the write that removes them from their hot keyspace and its by-time one (and
    /// what `also` adds).
    fn shelve(
        &self,
        shelf: &shelf::Shared,
        sign: &Signer,
        entries: &[Entry],
        prefix: &str,
        [hot, by_time]: [&fjall::Keyspace; 2],
        also: impl FnOnce(&mut OwnedWriteBatch),
    ) -> Result<(), String> {
        shelf::shelve_room(
            shelf,
            &self.database,
            &self.host,
            (entries, prefix),
            sign,
            || {
                self.failpoint(crate::store::Failpoint::ArchiveBeforeIndex);
            },
            [hot, by_time],
            also,
        )
    }
}
