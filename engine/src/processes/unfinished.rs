//! What an operator's view (the control plane, docs/control-plane.md) reads of this
//! host's Processes: the runs it received that have not finished. Read-only; nothing
//! here changes a journal.

use super::api::RunView;
use super::runs::RunUnits;
use super::service::Processes;

impl Processes {
    /// The runs this host received with no terminal outcome — dispatched and running,
    /// or `unknown` (its units held until `gridctl process resolve`) — from the
    /// `process-open` index, at most `max` of them in request-id order, and how many
    /// there are in all.
    pub fn unfinished_runs(&self, max: usize) -> Result<(Vec<RunView>, usize), String> {
        let mut runs = Vec::new();
        let mut count = 0;
        for guard in self.ks.open.iter() {
            let (key, _) = guard.into_inner().map_err(|e| e.to_string())?;
            count += 1;
            if runs.len() >= max {
                continue;
            }
            let request = String::from_utf8_lossy(&key).into_owned();
            if let Some(record) = self.record(&request)? {
                let mut view = record.view;
                if view.units == RunUnits::Reserved {
                    view.detail = "running: dispatched, no outcome journaled yet".to_owned();
                }
                runs.push(view);
            }
        }
        Ok((runs, count))
    }
}
