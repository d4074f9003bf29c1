//! Operations sent to a host with the plan's id (`Call::Submit`), and retained answers
//! asked for again (`Call::Answer`): the path every capability whose owner is a host's
//! engine (models, tags, routes, grants, keys, ledgers) applies its transitions by.
//! Never retried: a lost reply is `unknown`.

use std::path::Path;

use grid_engine::host::control::{CallError, Client};
use grid_engine::protocol::{Call, Outcome, Reply, Request};

use crate::resolve::Template;
use crate::transition::{Effect, Status};

/// Sends one call (a submit, or a recovery of a retained answer) and acknowledges the
/// answer it receives; `replayed` when the owner returned its original answer to a
/// re-sent id.
pub fn send(dir: &Path, call: Call) -> Effect {
    let mut client = match Client::connect(dir) {
        Ok(c) => c,
        // Nothing was sent: the owner cannot have acted.
        Err(e) => return Effect::new(Status::Failed, e.to_string()),
    };
    let reply = client.call(&call);
    let replayed = matches!(&reply, Ok(Reply::Answer(a)) if a.replayed);
    let archived = matches!(&reply, Ok(Reply::Answer(a)) if a.archived);
    let (status, detail) = match reply {
        Ok(Reply::Answer(answer)) => {
            // Losing the acknowledgement only makes the answer show once more.
            let _ = client.call(&Call::Acknowledge {
                op: answer.op.clone(),
            });
            let status = match answer.outcome {
                Outcome::Succeeded => Status::Succeeded,
                Outcome::Failed => Status::Failed,
            };
            (status, answer.detail)
        }
        Ok(Reply::NoAnswer { op }) => (
            Status::Failed,
            format!("the owner never received operation {op}"),
        ),
        Ok(Reply::Refused { reason }) => (Status::Refused, reason),
        // The owner answered once and cannot read that answer now: never done again.
        Ok(Reply::Unknown { reason, .. }) => (Status::Unknown, reason),
        Ok(other) => (Status::Failed, format!("unexpected reply {other:?}")),
        Err(CallError::Lost { detail }) => (Status::Unknown, detail),
        Err(e @ CallError::Unreachable { .. }) => (Status::Failed, e.to_string()),
    };
    Effect {
        status,
        detail,
        replayed,
        archived,
    }
}

/// Submits `request` to the host at `dir` under operation id `op`.
pub fn submit(dir: &Path, op: &str, request: Request) -> Effect {
    send(
        dir,
        Call::Submit {
            op: op.to_owned(),
            request,
        },
    )
}

/// Submits a request whose template names values known only after earlier
/// transitions applied: completed from the installations, then submitted to the host
/// at `dir` under `op`. A template that cannot be completed sends nothing.
pub fn resolve_and_submit(state: &Path, dir: &Path, op: &str, template: &Template) -> Effect {
    match template.resolve(state) {
        Ok(request) => submit(dir, op, request),
        Err(e) => Effect::new(Status::Failed, e),
    }
}

/// Asks the host at `dir` again for the retained answer of `op` and acknowledges it.
pub fn recover(dir: &Path, op: &str) -> Effect {
    Effect {
        replayed: false,
        ..send(dir, Call::Answer { op: op.to_owned() })
    }
}

/// What the host at `dir` retains for operation `op`, if it answers.
pub fn retained(dir: &Path, op: &str) -> Option<Reply> {
    Client::connect(dir)
        .ok()?
        .call(&Call::Answer { op: op.to_owned() })
        .ok()
}

/// Whether the host at `dir` holds an answer to `op` (it took effect, or failed there
/// once and for all).
pub fn answered(dir: &Path, op: &str) -> bool {
    matches!(retained(dir, op), Some(Reply::Answer(_)))
}

/// One call to a room of `host` (its control socket), its reply taken by `pick`.
/// Nothing sent (no installation, no gridd answering) and a host that refuses the call
/// (it does not run the room's profile) are `Ok(refused(reason))`: the outcome is
/// known, nothing was done. Only a call sent whose reply was lost, or is not the
/// room's, is `Err` (unknown).
pub fn room_call<T>(
    (state, host): (&Path, &str),
    call: Call,
    pick: impl FnOnce(Reply) -> Result<T, Box<Reply>>,
    refused: impl Fn(String) -> T,
) -> Result<T, String> {
    let dir = match crate::observe::installed(state, host) {
        Ok(dir) => dir,
        Err(e) => return Ok(refused(format!("{e}; nothing was sent"))),
    };
    let mut client = match Client::connect(&dir) {
        Ok(client) => client,
        Err(e) => return Ok(refused(format!("host `{host}`: {e}; nothing was sent"))),
    };
    match client.call(&call) {
        Ok(Reply::Refused { reason }) => Ok(refused(format!("host `{host}`: {reason}"))),
        Ok(reply) => pick(reply).map_err(|other| format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}
