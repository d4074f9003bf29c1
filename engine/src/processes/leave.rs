//! What this host still owes in one membership as the `processes` profile sees it — a
//! leave waits for it (docs/memberships.md, "Leaving"): the grants it issued to a
//! caller there with units reserved (runs in flight) or unknown (runs left unknown:
//! their units held until resolved), and its own calls there with no terminal
//! outcome yet.

use super::service::{Processes, State};

impl Processes {
    /// The open obligations of the grants named (those binding this host in the
    /// membership) and of this host's waits in `membership`; read under the grants'
    /// lock `state`, so no run reserves a unit while a leave is decided.
    pub fn obligations(&self, state: &State, membership: &str, grants: &[String]) -> Vec<String> {
        let mut open = Vec::new();
        for name in grants {
            let Some(grant) = state.grants.get(name) else {
                continue;
            };
            if grant.reserved > 0 {
                open.push(format!(
                    "grant `{name}` (caller `{}`): {} unit(s) reserved by runs in flight",
                    grant.caller, grant.reserved
                ));
            }
            if grant.unknown > 0 {
                open.push(format!(
                    "grant `{name}` (caller `{}`): {} unit(s) held by runs left unknown — resolve them (`gridctl process resolve`)",
                    grant.caller, grant.unknown
                ));
            }
        }
        for wait in self.open_wait_records() {
            if wait.membership == membership {
                open.push(format!(
                    "run `{}` of `{}` at `{}`: this host's call has no outcome yet",
                    wait.request.request, wait.request.process, wait.receiver.name
                ));
            }
        }
        open
    }

    /// The caller's journaled waits with no terminal outcome learned.
    pub(super) fn open_wait_records(&self) -> Vec<super::caller::WaitRecord> {
        let ids: Vec<String> = self
            .open_waits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        ids.iter()
            .filter_map(|id| self.hot_wait(id))
            .filter(|w| w.run.is_none())
            .collect()
    }
}
