//! `run-process`, `expect-process` and `resolve-process`: one run, what a host holds
//! of it, and the receiver's operator closing an `unknown` one (see the module's
//! header for their syntax).

use std::ffi::OsString;

use super::{
    RunAnswer, first_terminal, inspect_run, pairs, record, result_value, run_args, value_matches,
};
use crate::context::Context;
use crate::error::Failure;
use crate::oracles::answers_unchanged;
use crate::process::describe_status;
use crate::step::Step;
use crate::step::{Node, ParseError};
use crate::steps::gridctl::json_of;
use crate::steps::{Outcome, check_outcome, shorten};

// ---- run-process ---------------------------------------------------------------------

struct RunProcess {
    host: String,
    process: String,
    caller: String,
    op: String,
    via: Option<String>,
    args: Vec<(String, String)>,
    expect: Outcome,
    same_as: Option<String>,
    result: Vec<(String, String)>,
    wait_ms: Option<u64>,
}

pub fn parse_run(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the receiving host")?;
    let process = node.argument("a Process name, e.g. \"demo.count\"")?;
    let caller = node.required("as", "CALLER")?;
    let op = node.required("op", "ID")?;
    let via = node.string("via")?;
    if let Some(via) = &via
        && !via.starts_with("mailbox:")
        && !via.starts_with("mission:")
    {
        return Err(node.error(format!(
            "`via` is \"mailbox:HOST\" or \"mission:NAME\" (or absent: direct), not `{via}`"
        )));
    }
    let args = match node.string("args")? {
        Some(text) => pairs(node, "args", &text)?,
        None => Vec::new(),
    };
    let result = match node.string("result")? {
        Some(text) => pairs(node, "result", &text)?,
        None => Vec::new(),
    };
    let same_as = node.string("same-as")?;
    let wait_ms = node.count("wait-ms")?;
    let expect = Outcome::expected(node)?;
    Ok(Box::new(RunProcess {
        host,
        process,
        caller,
        op,
        via,
        args,
        expect,
        same_as,
        result,
        wait_ms,
    }))
}

impl Step for RunProcess {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let args = run_args(
            &self.host,
            &self.process,
            &self.caller,
            &self.op,
            self.via.as_deref(),
            &self.args,
            self.wait_ms,
        );
        let output = cx.gridctl(&args)?;
        let answer = check_outcome(cx, &output, self.expect)?;
        let work = cx.work_dir().to_owned();
        // The earlier terminal answer, read before this one is recorded.
        let earlier = match &self.same_as {
            Some(op) => Some((op, first_terminal(&work, op)?)),
            None => None,
        };
        record(&work, &self.op, &answer)?;
        if self.expect != Outcome::Refused && answer["request"] != self.op.as_str() {
            return Err(Failure::new(
                format!("the answer to name request {:?}", self.op),
                answer.to_string(),
            ));
        }
        if !answer["result"].is_null() {
            cx.say(format_args!(
                "result {}",
                shorten(&answer["result"].to_string(), 300)
            ));
        }
        if let Some((op, earlier)) = earlier {
            let Some(earlier) = earlier else {
                return Err(Failure::new(
                    format!("a terminal answer of {op:?} recorded by an earlier run-process"),
                    "none recorded",
                ));
            };
            let (outcome, result) = (earlier.outcome.clone(), earlier.result.clone());
            let now = RunAnswer::of(&output);
            let when = format!("asked again as {}", self.op);
            answers_unchanged::check(op, &mut Some(earlier), &now, &when)?;
            cx.say(format_args!(
                "identical to the first terminal answer of {op}: {outcome:?} {result}"
            ));
        }
        for (name, expected) in &self.result {
            let found = result_value(&answer["result"], name);
            if !found.is_some_and(|v| value_matches(v, expected)) {
                return Err(Failure::new(
                    format!("{name}={expected} in the run's result"),
                    format!("result {}", answer["result"]),
                ));
            }
        }
        Ok(())
    }
}

// ---- expect-process ------------------------------------------------------------------

struct ExpectProcess {
    op: String,
    host: String,
    outcome: Option<String>,
    units: Option<String>,
    caller: Option<String>,
    /// Read back from the host's archive (`"archived": true`), or from its hot store.
    archived: Option<bool>,
}

pub fn parse_expect_process(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let op = node.argument("a request id")?;
    let host = node.required_host("host")?;
    let outcome = node.string("outcome")?;
    if let Some(o) = &outcome
        && !["succeeded", "failed", "unknown", "absent"].contains(&o.as_str())
    {
        return Err(node.error(format!(
            "`outcome` is succeeded, failed, unknown or absent, not `{o}`"
        )));
    }
    let units = node.string("units")?;
    if let Some(u) = &units
        && !["reserved", "consumed", "released", "unknown", "none"].contains(&u.as_str())
    {
        return Err(node.error(format!(
            "`units` is reserved, consumed, released, unknown or none, not `{u}`"
        )));
    }
    let caller = node.string("caller")?;
    let archived = node.flag("archived")?;
    Ok(Box::new(ExpectProcess {
        op,
        host,
        outcome,
        units,
        caller,
        archived,
    }))
}

impl Step for ExpectProcess {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let run = inspect_run(cx, &self.op, &self.host)?;
        if self.outcome.as_deref() == Some("absent") {
            if !run.is_null() {
                return Err(Failure::new(
                    format!("{} to hold no run of {}", self.host, self.op),
                    run.to_string(),
                ));
            }
            cx.say(format_args!("{} holds no run of {}", self.host, self.op));
            return Ok(());
        }
        if run.is_null() {
            return Err(Failure::new(
                format!("{} to hold a run of {}", self.host, self.op),
                "none (run: null)",
            ));
        }
        let field = |key: &str| run[key].as_str().unwrap_or_default().to_owned();
        cx.say(format_args!(
            "{} holds {} as {}: {} via {}, outcome {}, units {} of grant {}{}",
            self.host,
            self.op,
            field("role"),
            field("process"),
            field("via"),
            field("outcome"),
            field("units"),
            run["grant"],
            match field("detail") {
                d if d.is_empty() => String::new(),
                d => format!(" ({})", shorten(&d, 200)),
            }
        ));
        for (key, expected) in [
            ("outcome", &self.outcome),
            ("units", &self.units),
            ("caller", &self.caller),
        ] {
            if let Some(expected) = expected
                && field(key) != *expected
            {
                return Err(Failure::new(
                    format!("{key} {expected} for run {} at {}", self.op, self.host),
                    format!(
                        "{key} {:?}; run {}",
                        field(key),
                        shorten(&run.to_string(), 600)
                    ),
                ));
            }
        }
        let archived = run["archived"].as_bool().unwrap_or(false);
        if let Some(expected) = self.archived {
            if archived != expected {
                return Err(Failure::new(
                    format!(
                        "run {} at {} read from its {}",
                        self.op,
                        self.host,
                        if expected { "archive" } else { "hot store" }
                    ),
                    format!(
                        "archived {archived}; run {}",
                        shorten(&run.to_string(), 600)
                    ),
                ));
            }
            cx.say(format_args!(
                "read from the {}",
                if archived { "archive" } else { "hot store" }
            ));
        }
        Ok(())
    }
}

// ---- resolve-process -----------------------------------------------------------------

struct ResolveProcess {
    op: String,
    host: String,
    outcome: String,
    refused: bool,
}

pub fn parse_resolve(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let op = node.argument("a request id")?;
    let host = node.required_host("host")?;
    let outcome = node.required("outcome", "succeeded|failed")?;
    if outcome != "succeeded" && outcome != "failed" {
        return Err(node.error("`outcome` is succeeded or failed"));
    }
    let refused = node.expects_refusal();
    Ok(Box::new(ResolveProcess {
        op,
        host,
        outcome,
        refused,
    }))
}

impl Step for ResolveProcess {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let args: Vec<OsString> = [
            "process",
            "resolve",
            &self.op,
            "--outcome",
            &self.outcome,
            "--host",
            &self.host,
            "--json",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let output = cx.gridctl(&args)?;
        let status = describe_status(&output.status);
        let said = format!(
            "{} {}",
            output.stdout.trim(),
            if output.stderr.trim().is_empty() {
                String::new()
            } else {
                format!("stderr: {}", output.stderr.trim())
            }
        );
        if self.refused {
            if output.status.code() != Some(Outcome::Refused.exit_code()) {
                return Err(Failure::new(
                    "the resolution to be refused (exit 4)",
                    format!("{status}: {}", shorten(&said, 600)),
                ));
            }
            cx.say(format_args!(
                "→ refused ({status}): {}",
                shorten(&said, 600)
            ));
            return Ok(());
        }
        if !output.status.success() {
            return Err(Failure::new(
                format!("{} resolved {} (exit 0)", self.op, self.outcome),
                format!("{status}: {}", shorten(&said, 600)),
            ));
        }
        let json = json_of(&output, "gridctl process resolve")?;
        let run = &json["run"];
        cx.say(format_args!(
            "→ {} at {}: outcome {}, units {}",
            self.op, self.host, run["outcome"], run["units"]
        ));
        if run["outcome"] != self.outcome.as_str() {
            return Err(Failure::new(
                format!("run {} now {}", self.op, self.outcome),
                shorten(&json.to_string(), 600),
            ));
        }
        Ok(())
    }
}
