//! The Processes `decision.ballot` and `decision.gate` a decision's host serves: the
//! signed document in one argument, admitted by the room under the caller's grant
//! (the caller is the transport's identity, and must be the document's signer).

use std::sync::Arc;

use super::api::{Cast, DOCUMENT_ARGUMENT};
use super::service::Decisions;
use crate::processes::service::{Failed, Invocation, Process, Recovered};
use grid_spec::diagnostic::quoted;

pub struct CastProcess {
    pub decisions: Arc<Decisions>,
    /// `decision.ballot` or `decision.gate`.
    pub process: &'static str,
}

impl CastProcess {
    fn document(&self, invocation: &Invocation<'_>) -> Result<Cast, String> {
        if let Some(other) = invocation
            .arguments
            .keys()
            .find(|k| k.as_str() != DOCUMENT_ARGUMENT)
        {
            return Err(format!(
                "{} takes one argument `{DOCUMENT_ARGUMENT}`, not `{}`",
                self.process,
                quoted(other)
            ));
        }
        let text = invocation
            .arguments
            .get(DOCUMENT_ARGUMENT)
            .ok_or_else(|| format!("{} needs the argument `{DOCUMENT_ARGUMENT}`", self.process))?;
        let cast: Cast = serde_json::from_str(text).map_err(|e| {
            format!(
                "the argument `{DOCUMENT_ARGUMENT}` is not a signed ballot or gate: {}",
                quoted(&e.to_string())
            )
        })?;
        if cast.process() != self.process {
            return Err(format!(
                "{} takes a {}, not a {}",
                self.process,
                self.process,
                cast.process()
            ));
        }
        Ok(cast)
    }
}

impl Process for CastProcess {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        let cast = self.document(invocation)?;
        self.decisions.receive(invocation.caller, &cast)
    }

    /// A run left unknown by a restart: the decision's record says whether the
    /// document was recorded (fsynced before the outcome) — never admitted again.
    fn recover(&self, invocation: &Invocation<'_>) -> Recovered {
        let Ok(cast) = self.document(invocation) else {
            return Recovered::Unknown;
        };
        match self.decisions.holds(&cast) {
            Some(true) => Recovered::Outcome(Ok(serde_json::json!({
                "decision": cast.decision(),
                "recorded": true,
            }))),
            Some(false) => Recovered::Outcome(Err(Failed::from(format!(
                "the {} was not recorded before the host stopped: cast again under a new op",
                self.process
            )))),
            None => Recovered::Unknown,
        }
    }
}
