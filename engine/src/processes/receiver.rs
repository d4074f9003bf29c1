//! The receiver: grants issued and surrendered, admit / execute / resolve / status, the run journal.

use crate::limits::RUN_WAIT_MAX;
use std::sync::{Arc, MutexGuard};

use fjall::OwnedWriteBatch;
use tokio::sync::watch;

use super::allocations::{is_allocation, not_a_grant, now_ms};
use super::api::{
    GrantIssue, GrantView, ProcessReply, RunOutcome, RunRequest, RunView, ServiceReply,
    SignedGrant, StatusQuery,
};
use super::grant_records::{grant_record, signed_key};
use super::grants;
use super::runs::{Resolution, Run, RunError, RunUnits};

use super::service::{Invocation, Process, Processes, State, check_request};
use crate::store::{Failpoint, fatal};

/// What the receiver keeps per request id.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct RunRecord {
    pub(super) view: RunView,
    /// Closed by the operator (`resolve`).
    #[serde(default)]
    pub(super) resolved: bool,
    /// Barred before dispatch by its caller's cancel: the receiver's signed proof.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) no_dispatch: Option<super::cancel::NoDispatch>,
    /// When its outcome became terminal, Unix ms (`archive.rs`: past the hot window it
    /// moves to the archive). None: not finished, or finished before this was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) answered_ms: Option<u64>,
}

impl RunRecord {
    /// Where the run stands, for the run machine.
    pub(super) fn run(&self) -> Run {
        Run {
            outcome: self.view.outcome,
            units: self.view.units,
            resolved: self.resolved,
        }
    }

    /// Takes the run machine's step into the record.
    pub(super) fn set(&mut self, run: Run) {
        step(&mut self.view, run);
        self.resolved = run.resolved;
    }
}

/// Takes a step of the run machine into a view (its outcome and units).
fn step(view: &mut RunView, run: Run) {
    view.outcome = run.outcome;
    view.units = run.units;
}

/// What admitting a request produced.
pub(super) enum Admitted {
    /// The id's record (a retained outcome, or a refusal journaled before dispatch).
    Done(RunView),
    /// Running now under another call: wait for it.
    Running(watch::Receiver<bool>),
    /// Journaled and reserved: run it.
    Dispatch(RunView, Arc<dyn Process>, watch::Sender<bool>),
}

impl Processes {
    // ---- grants (operations through the host's submit) ----

    /// The grants this host issued.
    pub fn grants(&self) -> Vec<GrantView> {
        self.lock()
            .grants
            .values()
            .filter(|g| !is_allocation(&g.name))
            .cloned()
            .collect()
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
        if !current.issued.is_empty() && current.membership != issue.membership {
            return Err(format!(
                "grant `{}` serves {}, not {}; a grant never changes its membership",
                issue.name,
                grants::serves(current.membership.as_deref()),
                grants::serves(issue.membership.as_deref())
            ));
        }
        if let (Some(membership), Some(mailbox)) = (&issue.membership, &issue.mailbox)
            && mailbox.membership != *membership
        {
            return Err(format!(
                "grant `{}` serves membership `{membership}`, but its mailbox `{}` is reached in `{}`",
                issue.name, mailbox.host, mailbox.membership
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
            membership: issue.membership.clone(),
            generation: 0,
            signature: String::new(),
        };
        (signed.generation, signed.signature) = self.custody.sign_hex(&signed.signed_bytes());
        let mut grant = current;
        grant.allocated = allocated;
        grant.mailbox = issue.mailbox.as_ref().map(|m| m.host.clone());
        grant.membership = issue.membership.clone();
        grant.issued.push(signed.clone());
        write.insert(
            &self.ks.signed_grants,
            signed_key(&grant.name, signed.serial),
            serde_json::to_vec(&signed).expect("issues serialize"),
        );
        let record = grant_record(&mut grant);
        write.insert(&self.ks.grants, grant.name.as_str(), record);
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
        state.issues.insert(grant.name.clone(), issue.clone());
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
        not_a_grant(name)?;
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
        write.insert(&self.ks.grants, name, grant_record(grant));
        Ok(format!(
            "surrendered {unused} unused unit(s) of grant {name}; {} reserved and {} unknown stay held until their runs close",
            grant.reserved, grant.unknown
        ))
    }

    /// Settles the retired grant `name` (nothing reserved or unknown): signs its final
    /// account once into `write`; settling it again answers the same settlement.
    pub fn settle(
        &self,
        state: &mut State,
        name: &str,
        write: &mut OwnedWriteBatch,
    ) -> Result<String, String> {
        not_a_grant(name)?;
        let grant = state
            .grants
            .get_mut(name)
            .ok_or_else(|| format!("host `{}` holds no grant `{name}`", self.host))?;
        let describe = |s: &super::api::GrantSettlement| {
            format!(
                "settled grant {name}: {} allocated = {} consumed + {} surrendered over {} signed issue(s)",
                s.allocated, s.consumed, s.surrendered, s.issues
            )
        };
        if let Some(settled) = &grant.settlement {
            return Ok(describe(settled));
        }
        grants::settleable(grant).map_err(|e| e.to_string())?;
        let mut settlement = super::api::GrantSettlement {
            grant: grant.name.clone(),
            issuer: self.host.clone(),
            caller: grant.caller.clone(),
            allocated: grant.allocated,
            consumed: grant.consumed,
            surrendered: grant.surrendered,
            issues: grant.issued.len() as u32,
            generation: 0,
            signature: String::new(),
        };
        (settlement.generation, settlement.signature) =
            self.custody.sign_hex(&settlement.signed_bytes());
        let detail = describe(&settlement);
        grant.settlement = Some(settlement);
        write.insert(&self.ks.grants, name, grant_record(grant));
        Ok(detail)
    }

    /// The stored issue of the caller's grant (its keys, its mailbox).
    pub(super) fn issue_of_caller(&self, caller: &str) -> Option<GrantIssue> {
        self.lock()
            .issues
            .values()
            .find(|i| i.caller == caller)
            .cloned()
    }

    // ---- the receiver ----

    /// Admits `caller`'s run that reached this host through `membership` (`via` a
    /// direct call, a mailbox or a mission's allocation): journaled once.
    pub(super) fn admit(
        &self,
        caller: &str,
        membership: &str,
        via: &str,
        request: &RunRequest,
    ) -> Result<Admitted, String> {
        check_request(request)?;
        let mut state = self.lock();
        if let Some(record) = self.record(&request.request)? {
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
        // A full disk refuses a new run before anything is journaled; the caller
        // learns it refused.
        if let Some(reason) = crate::store::usage::full(&self.dir) {
            return Err(reason);
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
            units: RunUnits::None,
            signature: None,
            archived: false,
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
                step(&mut view, Run::refused());
                view.detail = format!(
                    "host `{}` serves no Process `{}` (it serves: {}); refused before dispatch, nothing charged",
                    self.host,
                    request.process,
                    served.join(", ")
                );
                None
            }
            Some(process) => {
                match state.reserve_unit(&self.host, membership, via, caller, now_ms()) {
                    Err(e) => {
                        step(&mut view, Run::refused());
                        view.detail = e;
                        None
                    }
                    Ok(grant) => {
                        view.grant = Some(grant.clone());
                        step(&mut view, Run::dispatched());
                        view.detail = "dispatched; no outcome journaled yet".to_owned();
                        let g = state.grants.get_mut(&grant).expect("the grant reserved");
                        write.insert(&self.ks.grants, grant.as_str(), grant_record(g));
                        Some(process)
                    }
                }
            }
        };
        if admitted.is_none() {
            self.sign(&mut view);
        }
        let mut record = RunRecord {
            view: view.clone(),
            resolved: false,
            no_dispatch: None,
            answered_ms: None,
        };
        self.journal_run(&mut state, &mut write, &mut record);
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
    pub(super) async fn execute(
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
        let grant = view.grant.clone();
        let invocation = Invocation {
            request: &request,
            caller: &caller,
            arguments: &arguments,
            grant: grant.as_deref(),
        };
        let result = if process.blocks(&invocation) {
            tokio::task::spawn_blocking(move || {
                process.run_outcome(&Invocation {
                    request: &request,
                    caller: &caller,
                    arguments: &arguments,
                    grant: grant.as_deref(),
                })
            })
            .await
            .unwrap_or_else(|e| Err(format!("the Process panicked: {e}").into()))
        } else {
            // A quick Process: a panic is caught here as on a blocking thread.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                process.run_outcome(&invocation)
            }))
            .unwrap_or_else(|_| Err("the Process panicked".to_owned().into()))
        };
        self.failpoint(Failpoint::ProcessBeforeOutcome);
        // The outcome, signed and encoded before the state is locked: it depends on
        // the run alone (only the grant's units need the lock).
        let grant_name = view.grant.clone().expect("a dispatched run holds a grant");
        let mut run = Run::dispatched();
        let moved = run
            .finish(result.is_ok())
            .expect("a dispatched run finishes once");
        step(&mut view, run);
        match result {
            Ok(value) => {
                view.result = Some(value);
                view.detail = String::new();
            }
            Err(failed) => {
                view.result = failed.result;
                view.detail = failed.reason;
            }
        }
        self.sign(&mut view);
        let mut record = RunRecord {
            view: view.clone(),
            resolved: false,
            no_dispatch: None,
            answered_ms: None,
        };
        {
            let mut state = self.lock();
            let grant = state
                .grants
                .get_mut(&grant_name)
                .expect("a run's grant is held");
            grants::apply(grant, moved).unwrap_or_else(|e| panic!("{e}"));
            let mut write = self.database.batch();
            write.insert(&self.ks.grants, grant_name.as_str(), grant_record(grant));
            self.journal_run(&mut state, &mut write, &mut record);
            self.owe_deposit(&view, &mut write);
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "journaling an outcome", e));
            state.running.remove(&view.request);
            state.counts.running -= 1;
        }
        self.sync("syncing an outcome").await;
        let _ = done.send(true);
        view
    }

    /// A run request from `caller` (certified by the transport in `membership`, or
    /// verified from a signed mailbox request): its original outcome, once.
    pub async fn serve_run(
        self: &Arc<Self>,
        caller: &str,
        membership: &str,
        via: &str,
        request: RunRequest,
    ) -> ServiceReply {
        let admitted = match self.admit(caller, membership, via, &request) {
            Ok(a) => a,
            Err(reason) => return ServiceReply::Refused { reason },
        };
        self.sync("journaling a run").await;
        let view = match admitted {
            Admitted::Done(view) => view,
            Admitted::Running(mut watching) => {
                let _ = tokio::time::timeout(RUN_WAIT_MAX, watching.wait_for(|d| *d)).await;
                match self.record(&request.request) {
                    Ok(Some(record)) => record.view,
                    Ok(None) => {
                        return ServiceReply::Refused {
                            reason: "the run's record vanished".to_owned(),
                        };
                    }
                    Err(reason) => return ServiceReply::Refused { reason },
                }
            }
            Admitted::Dispatch(view, process, done) => self.execute(view, process, done).await,
        };
        ServiceReply::Run { run: view }
    }

    /// Whether the reply to a run must be lost (failpoint `process-reply`).
    pub fn drop_reply(&self) -> bool {
        self.failpoint(Failpoint::ProcessReply)
    }

    /// `status`: what the receiver holds of a request from `caller`. Changes nothing.
    pub fn status(&self, caller: &str, query: &StatusQuery) -> ServiceReply {
        match self.record(&query.request) {
            Ok(Some(record)) if record.view.caller == caller => {
                ServiceReply::Run { run: record.view }
            }
            Ok(Some(_)) => ServiceReply::Refused {
                reason: format!("request `{}` is not `{caller}`'s", query.request),
            },
            Ok(None) => ServiceReply::Absent {
                request: query.request.clone(),
            },
            Err(reason) => ServiceReply::Refused { reason },
        }
    }

    /// Closes an `unknown` run: its unit consumed (succeeded) or released (failed).
    pub(super) fn resolve(self: &Arc<Self>, request: &str, outcome: RunOutcome) -> ProcessReply {
        let refused = |reason: String| ProcessReply::Refused { reason };
        if outcome == RunOutcome::Unknown {
            return refused(RunError::NotAnOutcome.to_string());
        }
        let view = {
            let mut state = self.lock();
            let mut record = match self.record(request) {
                Ok(Some(record)) => record,
                Ok(None) => {
                    return refused(format!("host `{}` holds no run `{request}`", self.host));
                }
                Err(reason) => return refused(reason),
            };
            let mut run = record.run();
            let moved = match run.resolve(outcome) {
                Ok(Resolution::Already) => return ProcessReply::Resolved { run: record.view },
                Ok(Resolution::Moved(moved)) => moved,
                Err(RunError::AlreadyResolved(stands)) => {
                    return refused(format!(
                        "run `{request}` was already resolved {}; that stands",
                        stands.name()
                    ));
                }
                Err(RunError::NotUnknown { outcome, units }) => {
                    return refused(format!(
                        "run `{request}` is {} (units {units}), not unknown: only its outcome's owner decides it",
                        outcome.name(),
                    ));
                }
                Err(e) => return refused(e.to_string()),
            };
            let grant_name = record.view.grant.clone().unwrap_or_default();
            let Some(grant) = state.grants.get_mut(&grant_name) else {
                return refused(format!("the run's grant `{grant_name}` is not held here"));
            };
            if let Err(e) = grants::apply(grant, moved) {
                return refused(e.to_string());
            }
            record.set(run);
            record.view.detail = format!(
                "resolved {} by the operator of `{}` after the run was left unknown",
                outcome.name(),
                self.host
            );
            self.close_unknown(&mut state, &grant_name, &mut record, "resolving a run");
            record.view
        };
        // A mailbox caller learns it from its mailbox (the outbox's next pass).
        ProcessReply::Resolved { run: view }
    }
}

impl Processes {
    /// Journals the terminal outcome of a run that was `unknown` (resolved by the
    /// operator, or recovered from its Process's own record): signed once, written with
    /// its grant's units and the deposit owed to a mailbox caller in one write, fsynced;
    /// then counted. `doing` names the step if the storage fails.
    pub(super) fn close_unknown(
        &self,
        state: &mut State,
        grant_name: &str,
        record: &mut RunRecord,
        doing: &str,
    ) {
        self.sign(&mut record.view);
        let mut write = self.database.batch();
        let grant = state
            .grants
            .get_mut(grant_name)
            .expect("the run's grant is held");
        write.insert(&self.ks.grants, grant_name, grant_record(grant));
        self.journal_run(state, &mut write, record);
        self.owe_deposit(&record.view, &mut write);
        self.database.commit_or_stop(write, &self.dir, doing);
        state.counts.unknown -= 1;
    }
}
