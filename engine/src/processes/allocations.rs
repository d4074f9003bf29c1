//! Allocations: execution units a host holds for its own runs without a grant — a
//! mission's signed allocation (docs/missions.md), opened by the `missions` room once
//! its issuer's signature verified. Its units account is a [`GrantView`] named
//! `mission:NAME` (caller: the host itself) beside the grants, moved by the same run
//! machine; what a grant does not have — a deadline, and new work stopped on return —
//! is its [`AllocationLimits`]. A run charges it only when it names it
//! (`--via mission:NAME`); no grant lookup ever picks it.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::api::{GrantView, RunView};
use super::grants::UNITS_PER_RUN;
use super::receiver::RunRecord;
use super::service::{Processes, State};

/// The prefix of an allocation's name (and of a run's `via`).
pub const ALLOCATION_PREFIX: &str = "mission:";

/// Whether a units account is an allocation rather than a grant.
pub fn is_allocation(name: &str) -> bool {
    name.starts_with(ALLOCATION_PREFIX)
}

/// What bounds an allocation besides its units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationLimits {
    /// RFC 3339, as signed.
    pub deadline: String,
    /// The deadline in milliseconds since the Unix epoch: no run is admitted at or
    /// after it.
    pub deadline_ms: i64,
    /// Why new work stopped for good (returned, closed), if it did.
    #[serde(default)]
    pub stopped: Option<String>,
    /// The mission's return was settled by its issuer: the consumption record signed
    /// and settled holds every run charged here, so they may leave the hot store past
    /// the window like any finished run.
    #[serde(default)]
    pub settled: bool,
}

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The refusal of a grant's surrender or settlement for an allocation.
pub(super) fn not_a_grant(name: &str) -> Result<(), String> {
    if is_allocation(name) {
        return Err(format!(
            "`{name}` is a mission's allocation, not a grant: it closes by the mission's return"
        ));
    }
    Ok(())
}

impl State {
    /// Reserves one unit for a run of `caller` that came `via`, through `membership`:
    /// of the allocation it names (`mission:NAME`), else of a grant to `caller`
    /// serving that membership (never an allocation). The account charged, or why
    /// none is.
    pub(super) fn reserve_unit(
        &mut self,
        host: &str,
        membership: &str,
        via: &str,
        caller: &str,
        now_ms: i64,
    ) -> Result<String, String> {
        if is_allocation(via) {
            return self.reserve_allocation(host, via, caller, now_ms);
        }
        let grants = self.grants.values_mut().filter(|g| !is_allocation(&g.name));
        super::grants::reserve(grants, caller, membership).map_err(|e| e.to_string())
    }

    /// Reserves one unit of allocation `name` for a run of `caller`, or names the
    /// signed limit that stops it.
    fn reserve_allocation(
        &mut self,
        host: &str,
        name: &str,
        caller: &str,
        now_ms: i64,
    ) -> Result<String, String> {
        if caller != host {
            return Err(format!(
                "allocation `{name}` is consumed by its own host `{host}` only, not `{caller}`; refused before dispatch, nothing charged"
            ));
        }
        let (Some(limits), Some(account)) = (self.limits.get(name), self.grants.get_mut(name))
        else {
            return Err(format!(
                "host `{host}` holds no active allocation `{name}` (no signed allocation received); refused before dispatch, nothing charged"
            ));
        };
        if let Some(stopped) = &limits.stopped {
            return Err(format!(
                "allocation `{name}`: new work stopped ({stopped}); refused before dispatch, nothing charged"
            ));
        }
        if now_ms >= limits.deadline_ms {
            return Err(format!(
                "allocation `{name}`: its signed deadline {} has passed (limit `deadline`); new work stops, refused before dispatch, nothing charged",
                limits.deadline
            ));
        }
        if account.available() < UNITS_PER_RUN {
            return Err(format!(
                "allocation `{name}`: its {} signed units are consumed, reserved or unknown ({} consumed, {} reserved, {} unknown; limit `units`); new work stops, refused before dispatch, nothing charged",
                account.allocated, account.consumed, account.reserved, account.unknown
            ));
        }
        account.reserved += UNITS_PER_RUN;
        Ok(name.to_owned())
    }
}

impl Processes {
    /// Opens allocation `name` of `units` until `deadline` for this host's own runs,
    /// durably (fsynced) before it returns; opening it again changes nothing.
    pub fn open_allocation(&self, name: &str, units: u64, deadline: &str, deadline_ms: i64) {
        assert!(is_allocation(name), "`{name}` is not an allocation name");
        let mut state = self.lock();
        if state.grants.contains_key(name) {
            return;
        }
        let mut account = GrantView {
            name: name.to_owned(),
            caller: self.host.clone(),
            allocated: units,
            ..GrantView::default()
        };
        let limits = AllocationLimits {
            deadline: deadline.to_owned(),
            deadline_ms,
            stopped: None,
            settled: false,
        };
        let mut write = self.database.batch();
        write.insert(
            &self.ks.grants,
            name,
            super::grant_records::grant_record(&mut account),
        );
        write.insert(
            &self.ks.allocations,
            name,
            serde_json::to_vec(&limits).expect("limits serialize"),
        );
        self.commit_synced(write, "opening an allocation");
        state.grants.insert(name.to_owned(), account);
        state.limits.insert(name.to_owned(), limits);
    }

    /// Stops new work under allocation `name` for good (`why`), durably; runs already
    /// admitted finish and are charged as before.
    pub fn stop_allocation(&self, name: &str, why: &str) {
        let mut state = self.lock();
        let Some(limits) = state.limits.get_mut(name) else {
            return;
        };
        if limits.stopped.is_some() {
            return;
        }
        limits.stopped = Some(why.to_owned());
        let bytes = serde_json::to_vec(&*limits).expect("limits serialize");
        let mut write = self.database.batch();
        write.insert(&self.ks.allocations, name, bytes);
        self.commit_synced(write, "stopping an allocation");
    }

    /// Marks allocation `name` settled (its mission's return settled by the issuer),
    /// durably: its runs are archived past the window from now on. New work stays
    /// stopped; settling it again, or an allocation never opened, changes nothing.
    pub fn settle_allocation(&self, name: &str) {
        let mut state = self.lock();
        let Some(limits) = state.limits.get_mut(name) else {
            return;
        };
        if limits.settled {
            return;
        }
        limits.settled = true;
        limits
            .stopped
            .get_or_insert_with(|| "its mission's return is settled".to_owned());
        let bytes = serde_json::to_vec(&*limits).expect("limits serialize");
        let mut write = self.database.batch();
        write.insert(&self.ks.allocations, name, bytes);
        self.commit_synced(write, "settling an allocation");
    }

    /// The units account and limits of allocation `name`.
    pub fn allocation(&self, name: &str) -> Option<(GrantView, AllocationLimits)> {
        let state = self.lock();
        Some((
            state.grants.get(name)?.clone(),
            state.limits.get(name)?.clone(),
        ))
    }

    /// Every run charged to allocation `name`, as the run journal holds it (its runs
    /// stay hot until the allocation is settled; the archive pass leaves them).
    pub fn allocation_runs(&self, name: &str) -> Vec<RunView> {
        self.ks
            .allocation_runs
            .prefix(super::open::allocation_key(name, ""))
            .filter_map(|g| g.key().ok())
            .filter_map(|key| {
                let request = &key[name.len() + 1..];
                self.ks.runs.get(request).ok().flatten()
            })
            .filter_map(|v| serde_json::from_slice::<RunRecord>(&v).ok())
            .map(|r| r.view)
            .collect()
    }

    fn commit_synced(&self, write: fjall::OwnedWriteBatch, doing: &str) {
        self.database.commit_or_stop(write, &self.dir, doing);
    }

    /// Runs `request` here, charged to this host's allocation `name` (`--via
    /// mission:NAME`): no peer is asked, so it runs with the authority unreachable.
    pub async fn run_on_allocation(
        self: &std::sync::Arc<Self>,
        name: &str,
        request: super::api::RunRequest,
    ) -> super::api::ProcessReply {
        use super::api::{ProcessReply, ServiceReply};
        let via = format!(
            "{ALLOCATION_PREFIX}{}",
            name.trim_start_matches(ALLOCATION_PREFIX)
        );
        // The host's own run reaches it through no membership; an allocation is
        // charged without one.
        match self.serve_run(&self.host.clone(), "", &via, request).await {
            ServiceReply::Run { run } => ProcessReply::Ran { run },
            ServiceReply::Refused { reason } => ProcessReply::Refused { reason },
            other => ProcessReply::Refused {
                reason: format!("unexpected answer {other:?}"),
            },
        }
    }
}
