//! The journey steps, one module per step family, found by node name through
//! [`REGISTRY`].
//!
//! Adding a step: write a module with a type implementing [`Step`] (`crate::step`) and
//! a `parse` function reading its node through [`Node`], then add one line to
//! [`REGISTRY`]. The parser and the runner never change. A step that can be placed
//! inside `expect-refused` asks [`Node::expects_refusal`] while parsing and adapts its
//! expectation; one that never asks is rejected there. A step that checks an invariant
//! calls its oracle (`crate::oracles`) rather than writing the check again.
//!
//! Shared by the steps: [`gridctl`] (commands whose answer is JSON, told or quiet),
//! [`journal`] (answers recorded in the work directory), and, here, [`Outcome`] and
//! [`check_outcome`].

mod answers;
mod authority;
mod claims;
mod custody;
mod delivered;
mod delivery;
mod disk;
mod evaluated;
pub(crate) mod gridctl;
mod hosts;
mod input;
pub(crate) mod journal;
mod ledger;
mod locks;
mod matrices;
mod objects;
mod partition;
mod peers;
mod plan;
mod processes;
mod reconcile;
mod records;
mod refused;
mod replace;
mod sources;
mod storage;
mod stored;
mod tamper;
mod tls;
mod topology;
mod transfer;
mod values;
mod wallet;

#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use crate::context::Context;
use crate::error::Failure;
use crate::limits::WITHIN_SECONDS_MAX;
use crate::process::quote_output;
use crate::process::{CommandOutput, describe_status};
use crate::step::{Node, ParseError};
pub use crate::step::{ParseStep, Step};

/// Every step, by node name.
pub const REGISTRY: &[(&str, ParseStep)] = &[
    ("topology", topology::parse),
    ("plan", plan::parse_plan),
    ("expect-plan-empty", plan::parse_expect_plan_empty),
    ("reconcile", reconcile::parse),
    ("start", hosts::parse_start),
    ("start-packed", hosts::parse_start_packed),
    ("kill", hosts::parse_kill),
    ("lose-reply", hosts::parse_lose_reply),
    ("fail-fsync", hosts::parse_fail_fsync),
    ("restart", hosts::parse_restart),
    ("advance-clock", hosts::parse_advance_clock),
    ("input", input::parse),
    ("expect-values", values::parse),
    ("expect-model-evaluated", evaluated::parse),
    ("expect-refused", refused::parse),
    ("chmod", tamper::parse_chmod),
    ("s3-object", objects::parse_s3_object),
    ("s3-objects", objects::parse_s3_objects),
    ("ddb-record", records::parse_ddb_record),
    ("ddb-records", records::parse_ddb_records),
    ("replace-key", tamper::parse_replace_key),
    ("remove", tamper::parse_remove),
    ("edit", tamper::parse_edit),
    ("place", tamper::parse_place),
    ("call", tls::parse_call),
    ("occupy", tls::parse_occupy),
    ("claim", claims::parse_claim),
    ("claim-stream", claims::parse_stream),
    ("expect-answers-unchanged", claims::parse_unchanged),
    ("expect-claim", authority::parse_expect_claim),
    ("expect-authority", authority::parse_expect_authority),
    ("authority-snapshot", authority::parse_snapshot),
    ("kill-leader", authority::parse_kill_leader),
    ("restart-stopped", authority::parse_restart_stopped),
    ("partition", partition::parse_partition),
    ("heal", partition::parse_heal),
    ("publish", delivery::parse_publish),
    ("publish-cycles", delivery::parse_cycles),
    ("publish-many", delivery::parse_many),
    ("expect-delivered", delivered::parse_expect_delivered),
    ("expect-receipts", delivered::parse_expect_receipts),
    ("expect-plaintext", stored::parse_plaintext),
    ("publish-matrix", matrices::parse_publish),
    ("expect-staged", matrices::parse_expect_staged),
    ("push-matrix", matrices::parse_push),
    ("run-process", processes::parse_run),
    ("expect-process", processes::parse_expect_process),
    ("resolve-process", processes::parse_resolve),
    ("expect-grants", processes::parse_expect_grants),
    ("expect-processes", processes::parse_expect_processes),
    ("expect-stored-text", stored::parse_stored_text),
    ("edit-topology", topology::parse_edit_topology),
    ("rotate-key", custody::parse_rotate_key),
    ("expire-certificate", custody::parse_expire_certificate),
    ("renew", custody::parse_renew),
    ("revoke", custody::parse_revoke),
    ("transfer", transfer::parse),
    ("replace-storage", replace::parse),
    ("lock", locks::parse_lock),
    ("unlock", locks::parse_unlock),
    ("expect-answer", answers::parse),
    ("process-cycles", processes::parse_cycles),
    ("expect-tag-journal", sources::parse),
    ("expect-tag", sources::parse_expect_tag),
    ("peer", peers::parse_peer),
    ("device", peers::parse_device),
    ("ledger", ledger::parse),
    ("expect-ledger", ledger::parse_expect),
    ("cancel-process", processes::parse_cancel),
    ("wallet", wallet::parse_wallet),
    ("gridctl", wallet::parse_gridctl),
    ("wallet-edit", wallet::parse_edit),
    ("small-disk", disk::parse_small_disk),
    ("fill-disk", disk::parse_fill_disk),
    ("free-disk", disk::parse_free_disk),
    ("save", storage::parse_save),
    ("restore", storage::parse_restore),
    ("truncate", storage::parse_truncate),
    ("remove-files", storage::parse_remove_files),
    ("damage", storage::parse_damage),
    ("expect-inputs-unchanged", storage::parse_inputs_unchanged),
];

/// How an operation ended, as `gridctl` reports it (`"outcome"` in its JSON and its
/// exit status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Unknown,
    Refused,
    /// `reconcile` applied what it could; some transitions wait for hosts to run.
    Waiting,
    /// `reconcile` applied everything; lines needing attention remain.
    Attention,
}

impl Outcome {
    pub const ALL: [Outcome; 6] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Unknown,
        Outcome::Refused,
        Outcome::Waiting,
        Outcome::Attention,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Unknown => "unknown",
            Outcome::Refused => "refused",
            Outcome::Waiting => "waiting",
            Outcome::Attention => "attention",
        }
    }

    /// gridctl's exit status for the outcome.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Succeeded => 0,
            Outcome::Failed => 1,
            Outcome::Unknown => 3,
            Outcome::Refused => 4,
            Outcome::Waiting => 5,
            Outcome::Attention => 6,
        }
    }

    pub fn from_name(name: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.name() == name)
    }

    /// The expected outcome of an outcome-reporting step: its `expect=` property
    /// (default `succeeded`), or `refused` inside `expect-refused`.
    pub fn expected(node: &mut Node<'_>) -> Result<Outcome, ParseError> {
        let entry = node.property("expect")?;
        let refused = node.expects_refusal();
        let Some(entry) = entry else {
            return Ok(if refused {
                Outcome::Refused
            } else {
                Outcome::Succeeded
            });
        };
        let named = match entry.value() {
            kdl::KdlValue::String(text) => Outcome::from_name(text),
            _ => None,
        };
        let Some(outcome) = named else {
            return Err(node
                .entry_error(
                    entry,
                    "`expect` must be one of \"succeeded\", \"failed\", \"unknown\", \"refused\"",
                )
                .with_help("write e.g. expect=\"unknown\" (or bare: expect=unknown)"));
        };
        if refused && outcome != Outcome::Refused {
            return Err(node.entry_error(
                entry,
                format!(
                    "inside `expect-refused` the outcome is `refused`, not `{}`",
                    outcome.name()
                ),
            ));
        }
        Ok(outcome)
    }
}

/// Checks an outcome-reporting `gridctl` command (`reconcile`, `input`): its JSON
/// `"outcome"` must be `expected` and its exit status must match that outcome. Returns
/// the JSON.
/// The answer's `detail` says `detail`, when one is expected.
pub fn check_detail(json: &serde_json::Value, detail: Option<&str>) -> Result<(), Failure> {
    match detail {
        Some(detail) if !json["detail"].as_str().unwrap_or_default().contains(detail) => Err(
            Failure::new(format!("the answer to say {detail:?}"), json.to_string()),
        ),
        _ => Ok(()),
    }
}

pub fn check_outcome(
    cx: &mut Context<'_>,
    output: &CommandOutput,
    expected: Outcome,
) -> Result<serde_json::Value, Failure> {
    let expectation = format!(
        "outcome {} (exit {})",
        expected.name(),
        expected.exit_code()
    );
    let status = describe_status(&output.status);
    let json: Option<serde_json::Value> = serde_json::from_str(output.stdout.trim()).ok();
    let outcome_text = json
        .as_ref()
        .and_then(|json| json.get("outcome"))
        .and_then(|o| o.as_str())
        .map(str::to_string);
    let Some(outcome_text) = outcome_text else {
        return Err(Failure::new(
            expectation,
            format!(
                "{status} and no JSON \"outcome\" on stdout; stdout: {}; stderr: {}",
                quote_output(&output.stdout),
                quote_output(&output.stderr)
            ),
        ));
    };
    let json = json.expect("outcome came from it");
    let message = describe_answer(&json, &output.stderr);
    cx.say(format_args!("→ {outcome_text} ({status}){message}"));
    let Some(outcome) = Outcome::from_name(&outcome_text) else {
        return Err(Failure::new(
            expectation,
            format!("an outcome gridctl should not report: {outcome_text:?} ({status})"),
        ));
    };
    if outcome != expected {
        return Err(Failure::new(
            expectation,
            format!("outcome {outcome_text} ({status}){message}"),
        ));
    }
    if output.status.code() != Some(expected.exit_code()) {
        return Err(Failure::new(
            expectation,
            format!(
                "outcome {outcome_text} but {status} (gridctl exits {} for {outcome_text})",
                expected.exit_code()
            ),
        ));
    }
    Ok(json)
}

/// The interesting parts of an answer for the story: its `reason` and `detail`, one
/// line per transition it reports (reconcile), and stderr when there is any.
fn describe_answer(json: &serde_json::Value, stderr: &str) -> String {
    let mut text = String::new();
    for key in ["reason", "detail"] {
        match json.get(key) {
            Some(serde_json::Value::String(s)) if !s.is_empty() => {
                text.push_str(&format!(": {s}"));
            }
            Some(serde_json::Value::Null) | None => {}
            Some(other) => text.push_str(&format!(": {}", shorten(&other.to_string(), 300))),
        }
    }
    if let Some(transitions) = json.get("transitions").and_then(|t| t.as_array()) {
        for transition in transitions {
            let field = |key: &str| match transition.get(key) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            let status = field("status");
            let detail = field("detail");
            text.push_str(&format!(
                "\n  {} {} {}{}{}",
                field("op"),
                field("kind"),
                field("name"),
                if status.is_empty() {
                    String::new()
                } else {
                    format!(" [{status}]")
                },
                if detail.is_empty() {
                    String::new()
                } else {
                    format!(": {}", shorten(&detail, 300).replace('\n', "\n    "))
                },
            ));
        }
    }
    let stderr = stderr.trim();
    if !stderr.is_empty() {
        text.push_str(&format!("\nstderr: {}", shorten(stderr, 600)));
    }
    text
}

/// A number (or a string passed as written) of a step's property, as gridctl takes it
/// on its command line; `None` for other kinds of values.
pub fn number_text(value: &kdl::KdlValue) -> Option<String> {
    match value {
        kdl::KdlValue::Integer(n) => Some(n.to_string()),
        kdl::KdlValue::Float(x) => Some(x.to_string()),
        kdl::KdlValue::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// A `within=S` property (at most [`WITHIN_SECONDS_MAX`]): how long a check may be
/// repeated until it holds.
pub fn within(node: &mut Node<'_>) -> Result<Option<Duration>, ParseError> {
    match node.count("within")? {
        Some(s) if s > WITHIN_SECONDS_MAX => {
            Err(node.error(format!("`within` is at most {WITHIN_SECONDS_MAX} seconds")))
        }
        Some(s) => Ok(Some(Duration::from_secs(s))),
        None => Ok(None),
    }
}

/// How often a polling check is tried again.
pub const POLL_AGAIN: Duration = Duration::from_millis(250);

/// Runs `check` until it holds or `within` has passed (once without `within`); the
/// last failure is the step's. Told as [`poll`] tells it.
pub fn repeat_within(
    cx: &mut Context<'_>,
    within: Option<Duration>,
    mut check: impl FnMut(&mut Context<'_>) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let Some(within) = within else {
        return check(cx);
    };
    poll(cx, within, |cx| {
        Ok(match check(cx) {
            Ok(()) => Attempt::Done(()),
            Err(failure) => Attempt::Again(failure),
        })
    })
}

/// What one try of a polling check found.
pub enum Attempt<T> {
    /// It holds: the check is over.
    Done(T),
    /// Not yet: tried again until the time is up, then this is the step's failure.
    Again(Failure),
}

/// Tries `attempt` every [`POLL_AGAIN`] until it is done or `within` has passed; an
/// `Err` ends the polling at once. The story tells the first try in full (its command
/// and what it observed); later tries are held back, and at the end the last try's
/// observations — not its commands again — are told with the number of tries.
pub fn poll<T>(
    cx: &mut Context<'_>,
    within: Duration,
    mut attempt: impl FnMut(&mut Context<'_>) -> Result<Attempt<T>, Failure>,
) -> Result<T, Failure> {
    let started = Instant::now();
    let mut tries = 0u32;
    loop {
        tries += 1;
        if tries == 2 {
            cx.hush();
        }
        let result = attempt(cx);
        let again = matches!(result, Ok(Attempt::Again(_))) && started.elapsed() < within;
        if again {
            cx.take_hushed();
            std::thread::sleep(POLL_AGAIN);
            continue;
        }
        if tries > 1 {
            for line in cx.unhush() {
                if !line.starts_with("$ ") {
                    cx.say(line);
                }
            }
            let ended = if matches!(result, Ok(Attempt::Done(_))) {
                "held"
            } else {
                "did not hold"
            };
            cx.say(format_args!(
                "({ended} after {tries} tries in {:.1} s; the command above, repeated)",
                started.elapsed().as_secs_f64()
            ));
        }
        return match result? {
            Attempt::Done(value) => Ok(value),
            Attempt::Again(failure) => Err(failure),
        };
    }
}

/// `text`, cut to about `max` bytes.
pub fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
