//! The built-in Process `model.input`, wired here because it joins two rooms: the
//! Processes service runs it under the caller's grant, the host's model owner applies
//! one input batch as the operation `process:CALLER:REQUEST` — once (the host keeps
//! each operation's answer), and a run left `unknown` by a restart asks the host for
//! that answer ([`Process::recover`]) instead of applying again. A decision's effect
//! `input` runs it (docs/decisions.md); it is served only on a host selecting
//! `decisions` (opt-in).

use std::sync::{Mutex, Weak};

use crate::host::{Handled, Host};
use crate::processes::service::{Failed, Invocation, Process, Recovered};
use crate::protocol::{Answer, Call, Outcome, Reply, Request};

/// The arguments a `model.input` run takes.
const ARGUMENTS: [&str; 3] = ["model", "input", "value"];

pub struct ModelInput {
    pub host: Weak<Mutex<Host>>,
}

/// The host operation of run `request` from `caller`.
fn operation(caller: &str, request: &str) -> String {
    format!("process:{caller}:{request}")
}

/// The run's outcome from the host's answer: succeeded exactly when the batch was
/// applied.
fn joined(answer: &Answer) -> Result<serde_json::Value, Failed> {
    let result = serde_json::json!({
        "op": answer.op,
        "outcome": answer.outcome.name(),
        "detail": answer.detail,
    });
    match answer.outcome {
        Outcome::Succeeded => Ok(result),
        Outcome::Failed => Err(Failed {
            reason: format!("the model owner refused the input: {}", answer.detail),
            result: Some(result),
        }),
    }
}

impl ModelInput {
    fn request(invocation: &Invocation<'_>) -> Result<Request, String> {
        if let Some(other) = invocation
            .arguments
            .keys()
            .find(|k| !ARGUMENTS.contains(&k.as_str()))
        {
            return Err(format!(
                "model.input takes no argument `{other}` (it takes: {})",
                ARGUMENTS.join(", ")
            ));
        }
        let required = |name: &str| {
            invocation
                .arguments
                .get(name)
                .cloned()
                .ok_or_else(|| format!("model.input needs the argument `{name}`"))
        };
        let text = required("value")?;
        let value: f64 = text
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| format!("argument `value`: `{text}` is not a finite number"))?;
        Ok(Request::Input {
            model: required("model")?,
            values: vec![(required("input")?, value)],
            fence: None,
        })
    }

    fn call(&self, call: Call) -> Result<Handled, String> {
        let host = self.host.upgrade().ok_or("the host is stopping")?;
        let handled = host.lock().unwrap_or_else(|p| p.into_inner()).handle(call);
        Ok(handled)
    }
}

impl Process for ModelInput {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        self.run_outcome(invocation).map_err(|f| f.reason)
    }

    fn run_outcome(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, Failed> {
        let request = Self::request(invocation)?;
        let op = operation(invocation.caller, invocation.request);
        let submitted = self.call(Call::Submit {
            op: op.clone(),
            request,
        })?;
        // A dropped reply (a failpoint) left the answer durable: read it back.
        let reply = match submitted {
            Handled::Reply(reply) => reply,
            Handled::DropReply => match self.call(Call::Answer { op: op.clone() })? {
                Handled::Reply(reply) => reply,
                Handled::DropReply => return Err(Failed::from("no answer read back".to_owned())),
            },
        };
        match reply {
            Reply::Answer(answer) => joined(&answer),
            Reply::Refused { reason } => Err(Failed::from(format!(
                "the model owner refused the input: {reason}"
            ))),
            other => Err(Failed::from(format!("the model owner answered {other:?}"))),
        }
    }

    fn recover(&self, invocation: &Invocation<'_>) -> Recovered {
        let op = operation(invocation.caller, invocation.request);
        match self.call(Call::Answer { op }) {
            Ok(Handled::Reply(Reply::Answer(answer))) => Recovered::Outcome(joined(&answer)),
            _ => Recovered::Unknown,
        }
    }
}
