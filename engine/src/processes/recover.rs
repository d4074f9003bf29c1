//! Recovery at a receiver's restart: a run left `unknown` (admitted, no outcome
//! journaled) whose Process's own durable record proves its outcome
//! (`Process::recover`) gets that outcome journaled — never by running it again.
//! Every other unknown run stays as it is, its unit held, for the operator.

use super::grants;
use super::receiver::RunRecord;
use super::runs::RunUnits;
use super::service::{Invocation, Processes, Recovered};

impl Processes {
    /// Asks the Process of every unresolved `unknown` run for its outcome and journals
    /// what it proves (fsynced before this returns). Called by the composition root
    /// once the Processes are registered and the rooms they ask (the ledger) have
    /// replayed their journals, before anything is served; also on every later start,
    /// so a crash in the middle only asks again. Answers how many runs it closed.
    pub fn recover(&self) -> Result<usize, String> {
        let mut unknown = Vec::new();
        // Only the runs not finished can be unknown (`open.rs`).
        for guard in self.ks.open.iter() {
            let key = guard.key().map_err(|e| e.to_string())?;
            let Some(bytes) = self.ks.runs.get(&key).map_err(|e| e.to_string())? else {
                continue;
            };
            let record: RunRecord = serde_json::from_slice(&bytes)
                .map_err(|e| format!("a run record does not decode: {e}"))?;
            if record.view.units == RunUnits::Unknown && !record.resolved {
                unknown.push(record);
            }
        }
        let mut closed = 0;
        for mut record in unknown {
            let Some(process) = self
                .registry
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&record.view.process)
                .cloned()
            else {
                continue;
            };
            let recovered = process.recover(&Invocation {
                request: &record.view.request,
                caller: &record.view.caller,
                arguments: &record.view.arguments,
                grant: record.view.grant.as_deref(),
            });
            let Recovered::Outcome(outcome) = recovered else {
                continue;
            };
            let mut state = self.lock();
            let mut run = record.run();
            let moved = run.recovered(outcome.is_ok()).map_err(|e| e.to_string())?;
            let grant_name = record.view.grant.clone().unwrap_or_default();
            let grant = state.grants.get_mut(&grant_name).ok_or_else(|| {
                format!(
                    "run `{}` holds a unit of grant `{grant_name}`, which this host does not hold",
                    record.view.request
                )
            })?;
            grants::apply(grant, moved).map_err(|e| e.to_string())?;
            record.set(run);
            const RECOVERED: &str = "recovered at the receiver's restart from the Process's own durable record; never run again";
            match outcome {
                Ok(value) => {
                    record.view.result = Some(value);
                    record.view.detail = RECOVERED.to_owned();
                }
                Err(failed) => {
                    record.view.result = failed.result;
                    record.view.detail = format!("{} ({RECOVERED})", failed.reason);
                }
            }
            self.close_unknown(
                &mut state,
                &grant_name,
                &mut record,
                "journaling a recovered outcome",
            );
            tracing::info!(
                request = record.view.request,
                process = record.view.process,
                outcome = record.view.outcome.name(),
                "an unknown run recovered its outcome"
            );
            closed += 1;
        }
        Ok(closed)
    }
}
