//! Remote Processes under execution grants (SPEC C5, C6): runs, their outcomes at the
//! receiver, the grant's units, crash cycles, and what must hold afterwards.
//!
//! - `run-process HOST PROCESS as="CALLER" op="ID" [via="mailbox:BOX"]
//!   [args="NAME=VALUE …"] [expect=OUTCOME] [same-as="OP"] [result="NAME=VALUE …"]` —
//!   `gridctl process run HOST PROCESS --as CALLER --op ID [--via …] [--arg NAME=VALUE]…
//!   --json`: CALLER's host runs PROCESS at HOST once under ID. The outcome must be
//!   `expect` (default `succeeded`); every answer is recorded in
//!   `$WORK/process-runs.jsonl`. `same-as` requires the answer's outcome and result to
//!   be identical to the first terminal answer recorded for OP; `result` requires each
//!   named value of the result (a number, or text) to be as given.
//! - `expect-process OP host="H" [outcome=…] [units=…] [caller="C"]` — `gridctl inspect
//!   process OP --host H --json`: H holds a run of OP (`outcome="absent"`: it holds
//!   none) with that outcome and units (`reserved`, `consumed`, `released`, `unknown`,
//!   `none`).
//! - `resolve-process OP host="H" outcome=succeeded|failed` — `gridctl process resolve`:
//!   the receiver's operator closes an `unknown` run. Inside `expect-refused` it must be
//!   refused (exit 4), e.g. for a run that is not `unknown`.
//! - `expect-grants HOST [grant="NAME"] [allocated=N] [reserved=N] [consumed=N]
//!   [surrendered=N] [unknown=N] [available=N] [issued=N] [retired=#true|#false]` —
//!   `gridctl inspect grants --host HOST --json`: the totals over HOST's grants, or one
//!   grant's numbers. `available` is allocated − reserved − consumed − surrendered −
//!   unknown; `issued` the number of signed issues.
//! - `expect-processes HOST [demo-count=N] [succeeded=N] [failed=N] [unknown=N]
//!   [running=N]` — `gridctl inspect processes --host HOST --json`.
//! - `expect-stored-text HOST text="TEXT" present=#true|#false` — searches every file
//!   under HOST's `store/` for TEXT's bytes.
//! - `edit-topology from="TEXT" to="TEXT" [all=#true]` — the operator edits the files:
//!   a copy of the current topology file with the first (or every) TEXT replaced is
//!   written to `$WORK/topologies/` and becomes the current topology.
//! - `process-cycles receiver="R" caller="C" mailbox="M" cycles=N seed=S
//!   [marker="TEXT"]` — see [`Cycles`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kdl::KdlValue;
use serde_json::{Value, json};

use super::claims::next;
use super::{Outcome, Step, check_outcome, shorten};
use crate::error::Failure;
use crate::parse::{Node, ParseError};
use crate::process::{CommandOutput, describe_status, run_bounded};
use crate::runner::{Context, quote_output};

/// The file in the work directory where `run-process` answers are recorded.
const RUNS_FILE: &str = "process-runs.jsonl";
/// The most cycles one `process-cycles` step runs.
pub const PROCESS_CYCLES_MAX: u64 = 1_000;
/// How long the cycles of one `process-cycles` step may take in all.
pub const PROCESS_CYCLES_TIMEOUT: Duration = Duration::from_secs(900);
/// How long `process-cycles` asks again for runs whose outcome is not settled yet
/// (mailbox runs still travelling, waits a restarted caller resumes).
pub const PROCESS_SETTLE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long one quiet `gridctl process …` command may take.
const PROCESS_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `delay_ms` a cycle gives `demo.count`.
const CYCLE_DELAY_MAX_MS: u64 = 250;
/// How long a cycle's mailbox run waits for its outcome (`--wait-ms`): a run whose
/// receiver died stays unknown, and asking it again must not cost the default wait.
const CYCLE_MAILBOX_WAIT_MS: u64 = 3_000;

// ---- shared --------------------------------------------------------------------------

fn runs_path(work: &Path) -> PathBuf {
    work.join(RUNS_FILE)
}

fn record(work: &Path, entry: &Value) -> Result<(), Failure> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(runs_path(work))
        .map_err(|e| Failure::new("the process run record written", e.to_string()))?;
    writeln!(file, "{entry}")
        .map_err(|e| Failure::new("the process run record written", e.to_string()))
}

/// The first terminal answer recorded for `op`.
fn first_terminal(work: &Path, op: &str) -> Option<Value> {
    std::fs::read_to_string(runs_path(work))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["op"] == op)
        .map(|v| v["answer"].clone())
        .find(|a| is_terminal(a["outcome"].as_str().unwrap_or_default()))
}

fn is_terminal(outcome: &str) -> bool {
    outcome == "succeeded" || outcome == "failed"
}

/// `NAME=VALUE NAME=VALUE …` → pairs.
fn pairs(node: &Node<'_>, key: &str, text: &str) -> Result<Vec<(String, String)>, ParseError> {
    text.split_whitespace()
        .map(|item| match item.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
            _ => Err(node.error(format!(
                "`{key}` is a list of NAME=VALUE separated by spaces; `{item}` is not"
            ))),
        })
        .collect()
}

fn required(node: &mut Node<'_>, key: &str, help: &str) -> Result<String, ParseError> {
    let value = node.string(key)?;
    value.ok_or_else(|| node.error(format!("`{}` needs {key}=\"{help}\"", node.name())))
}

fn boolean(node: &mut Node<'_>, key: &str) -> Result<Option<bool>, ParseError> {
    let Some(entry) = node.property(key)? else {
        return Ok(None);
    };
    match entry.value() {
        KdlValue::Bool(b) => Ok(Some(*b)),
        _ => Err(node.entry_error(entry, format!("`{key}` is #true or #false"))),
    }
}

/// A gridctl command's stdout as JSON.
fn json_of(output: &CommandOutput, what: &str) -> Result<Value, Failure> {
    serde_json::from_str(output.stdout.trim()).map_err(|_| {
        Failure::new(
            format!("JSON from {what}"),
            format!(
                "{}; stdout: {}; stderr: {}",
                describe_status(&output.status),
                quote_output(&output.stdout),
                quote_output(&output.stderr)
            ),
        )
    })
}

fn gridctl_json(cx: &mut Context<'_>, args: &[&str]) -> Result<Value, Failure> {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let output = cx.gridctl(&args)?;
    let what = format!("gridctl {}", args.join(" ".as_ref()).to_string_lossy());
    let json = json_of(&output, &what)?;
    if !output.status.success() {
        return Err(Failure::new(
            format!("{what} to exit 0"),
            format!(
                "{}: {}; stderr: {}",
                describe_status(&output.status),
                shorten(&json.to_string(), 600),
                quote_output(&output.stderr)
            ),
        ));
    }
    Ok(json)
}

/// gridctl's arguments for one run (without `--state`).
fn run_args(
    host: &str,
    process: &str,
    caller: &str,
    op: &str,
    via: Option<&str>,
    args: &[(String, String)],
) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![
        "process".into(),
        "run".into(),
        host.into(),
        process.into(),
        "--as".into(),
        caller.into(),
        "--op".into(),
        op.into(),
    ];
    if let Some(via) = via {
        out.push("--via".into());
        out.push(via.into());
    }
    for (name, value) in args {
        out.push("--arg".into());
        out.push(format!("{name}={value}").into());
    }
    out.push("--json".into());
    out
}

/// A named value of a run's result: `result.NAME`, or `result.values.NAME`.
fn result_value<'v>(result: &'v Value, name: &str) -> Option<&'v Value> {
    result
        .get(name)
        .or_else(|| result.get("values").and_then(|v| v.get(name)))
}

fn value_matches(value: &Value, expected: &str) -> bool {
    match expected.parse::<f64>() {
        Ok(x) => value.as_f64() == Some(x),
        Err(_) => value.as_str() == Some(expected),
    }
}

/// The run a host holds of `op` (null: none).
fn inspect_run(cx: &mut Context<'_>, op: &str, host: &str) -> Result<Value, Failure> {
    let json = gridctl_json(cx, &["inspect", "process", op, "--host", host, "--json"])?;
    Ok(json["run"].clone())
}

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
}

pub fn parse_run(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.argument("the receiving host")?;
    let process = node.argument("a Process name, e.g. \"demo.count\"")?;
    let caller = required(node, "as", "CALLER")?;
    let op = required(node, "op", "ID")?;
    let via = node.string("via")?;
    if let Some(via) = &via
        && !via.starts_with("mailbox:")
    {
        return Err(node.error(format!(
            "`via` is \"mailbox:HOST\" (or absent: direct), not `{via}`"
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
        );
        let output = cx.gridctl(&args)?;
        let answer = check_outcome(cx, &output, self.expect)?;
        let work = cx.work_dir().to_owned();
        // The earlier terminal answer, read before this one is recorded.
        let earlier = self
            .same_as
            .as_ref()
            .map(|op| (op, first_terminal(&work, op)));
        record(&work, &json!({"op": self.op, "answer": answer}))?;
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
            if earlier["outcome"] != answer["outcome"] || earlier["result"] != answer["result"] {
                return Err(Failure::new(
                    format!(
                        "the same outcome and result as {op:?}: {} {}",
                        earlier["outcome"], earlier["result"]
                    ),
                    format!("{} {}", answer["outcome"], answer["result"]),
                ));
            }
            cx.say(format_args!(
                "identical to the first terminal answer of {op}: {} {}",
                earlier["outcome"], earlier["result"]
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
}

pub fn parse_expect_process(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let op = node.argument("a request id")?;
    let host = required(node, "host", "HOST")?;
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
    Ok(Box::new(ExpectProcess {
        op,
        host,
        outcome,
        units,
        caller,
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
    let host = required(node, "host", "HOST")?;
    let outcome = required(node, "outcome", "succeeded|failed")?;
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

// ---- expect-grants -------------------------------------------------------------------

const GRANT_NUMBERS: [&str; 6] = [
    "allocated",
    "reserved",
    "consumed",
    "surrendered",
    "unknown",
    "available",
];

struct ExpectGrants {
    host: String,
    grant: Option<String>,
    /// Expected numbers by name, in the order of [`GRANT_NUMBERS`].
    numbers: Vec<(&'static str, u64)>,
    issued: Option<u64>,
    retired: Option<bool>,
}

pub fn parse_expect_grants(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.argument("the issuing (receiving) host")?;
    let grant = node.string("grant")?;
    let mut numbers = Vec::new();
    for key in GRANT_NUMBERS {
        if let Some(n) = node.count(key)? {
            numbers.push((key, n));
        }
    }
    let issued = node.count("issued")?;
    let retired = boolean(node, "retired")?;
    if grant.is_none() && retired.is_some() {
        return Err(node.error("`retired` is a grant's: name it with grant=\"NAME\""));
    }
    Ok(Box::new(ExpectGrants {
        host,
        grant,
        numbers,
        issued,
        retired,
    }))
}

/// A grant's (or the totals') numbers, with `available` computed.
fn grant_numbers(view: &Value) -> BTreeMap<&'static str, u64> {
    let mut numbers: BTreeMap<&'static str, u64> = GRANT_NUMBERS[..5]
        .iter()
        .map(|k| (*k, view[*k].as_u64().unwrap_or(0)))
        .collect();
    let available = numbers["allocated"].saturating_sub(
        numbers["reserved"] + numbers["consumed"] + numbers["surrendered"] + numbers["unknown"],
    );
    numbers.insert("available", available);
    numbers
}

fn describe_numbers(numbers: &BTreeMap<&'static str, u64>) -> String {
    GRANT_NUMBERS
        .iter()
        .map(|k| format!("{k} {}", numbers[k]))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `inspect grants` of a host: (all of it, the named grant or the totals).
fn grants(
    cx: &mut Context<'_>,
    host: &str,
    grant: Option<&str>,
) -> Result<(Value, Value), Failure> {
    let json = gridctl_json(cx, &["inspect", "grants", "--host", host, "--json"])?;
    let view = match grant {
        None => json.clone(),
        Some(name) => json["grants"]
            .as_array()
            .and_then(|g| g.iter().find(|g| g["name"] == name))
            .cloned()
            .ok_or_else(|| {
                Failure::new(
                    format!("grant {name} at {host}"),
                    shorten(&json.to_string(), 600),
                )
            })?,
    };
    Ok((json, view))
}

impl Step for ExpectGrants {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let (all, view) = grants(cx, &self.host, self.grant.as_deref())?;
        let numbers = grant_numbers(&view);
        let issues: Vec<&Value> = match &self.grant {
            Some(_) => view["issued"].as_array().map(|a| a.iter().collect()),
            None => all["grants"].as_array().map(|g| {
                g.iter()
                    .filter_map(|g| g["issued"].as_array())
                    .flatten()
                    .collect()
            }),
        }
        .unwrap_or_default();
        let what = match &self.grant {
            Some(name) => format!("grant {name} at {}", self.host),
            None => format!(
                "{} grant(s) at {} (totals)",
                all["grants"].as_array().map_or(0, Vec::len),
                self.host
            ),
        };
        cx.say(format_args!(
            "{what}: {}; {} signed issue(s){}",
            describe_numbers(&numbers),
            issues.len(),
            match view.get("retired") {
                Some(Value::Bool(true)) => ", retired",
                _ => "",
            }
        ));
        for (key, expected) in &self.numbers {
            if numbers[key] != *expected {
                return Err(Failure::new(
                    format!("{key} {expected} for {what}"),
                    describe_numbers(&numbers),
                ));
            }
        }
        if let Some(expected) = self.issued
            && issues.len() as u64 != expected
        {
            return Err(Failure::new(
                format!("{expected} signed issue(s) of {what}"),
                format!("{}: {}", issues.len(), shorten(&view.to_string(), 600)),
            ));
        }
        if let Some(retired) = self.retired
            && view["retired"].as_bool() != Some(retired)
        {
            return Err(Failure::new(
                format!("{what} retired={retired}"),
                format!("retired {}", view["retired"]),
            ));
        }
        Ok(())
    }
}

// ---- expect-processes ----------------------------------------------------------------

struct ExpectProcesses {
    host: String,
    demo_count: Option<u64>,
    runs: Vec<(&'static str, u64)>,
}

pub fn parse_expect_processes(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.argument("a host name")?;
    let demo_count = node.count("demo-count")?;
    let mut runs = Vec::new();
    for key in ["succeeded", "failed", "unknown", "running"] {
        if let Some(n) = node.count(key)? {
            runs.push((key, n));
        }
    }
    Ok(Box::new(ExpectProcesses {
        host,
        demo_count,
        runs,
    }))
}

impl Step for ExpectProcesses {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let json = gridctl_json(
            cx,
            &["inspect", "processes", "--host", &self.host, "--json"],
        )?;
        cx.say(format_args!(
            "{} serves {}; runs {}; demo.count counter {}",
            self.host, json["processes"], json["runs"], json["demo_count"]
        ));
        if let Some(expected) = self.demo_count
            && json["demo_count"].as_u64() != Some(expected)
        {
            return Err(Failure::new(
                format!("demo.count's counter at {} to be {expected}", self.host),
                format!("{}", json["demo_count"]),
            ));
        }
        for (key, expected) in &self.runs {
            if json["runs"][key].as_u64() != Some(*expected) {
                return Err(Failure::new(
                    format!("{expected} {key} run(s) at {}", self.host),
                    format!("runs {}", json["runs"]),
                ));
            }
        }
        Ok(())
    }
}

// ---- expect-stored-text --------------------------------------------------------------

struct StoredText {
    host: String,
    text: String,
    present: bool,
}

pub fn parse_stored_text(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.argument("a host name")?;
    let text = required(node, "text", "TEXT")?;
    if text.len() < 8 {
        return Err(node.error(
            "`text` needs at least 8 bytes: a shorter one may be found in any binary file",
        ));
    }
    let present = boolean(node, "present")?
        .ok_or_else(|| node.error("`expect-stored-text` needs present=#true or #false"))?;
    Ok(Box::new(StoredText {
        host,
        text,
        present,
    }))
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files_under(&path, out);
            } else {
                out.push(path);
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, _)) = needle.split_first() else {
        return true;
    };
    haystack
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == first)
        .any(|(i, _)| haystack[i..].starts_with(needle))
}

impl Step for StoredText {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let store = cx.host_dir(&self.host).join("store");
        let mut files = Vec::new();
        files_under(&store, &mut files);
        files.sort();
        let mut bytes = 0usize;
        let mut found = Vec::new();
        for file in &files {
            let Ok(content) = std::fs::read(file) else {
                continue;
            };
            bytes += content.len();
            if contains(&content, self.text.as_bytes()) {
                found.push(cx.show_path(file));
            }
        }
        if files.is_empty() {
            return Err(Failure::new(
                format!("files under {}", cx.show_path(&store)),
                "none",
            ));
        }
        match (self.present, found.is_empty()) {
            (true, true) => Err(Failure::new(
                format!("{:?} in {}'s store files", self.text, self.host),
                format!("not found in {} files ({bytes} bytes)", files.len()),
            )),
            (false, false) => Err(Failure::new(
                format!("no {:?} in {}'s store files", self.text, self.host),
                format!("found in {}", found.join(", ")),
            )),
            (true, false) => {
                cx.say(format_args!(
                    "{}: {:?} is readable in {} of its {} store files",
                    self.host,
                    self.text,
                    found.len(),
                    files.len()
                ));
                Ok(())
            }
            (false, true) => {
                cx.say(format_args!(
                    "{}: {:?} is in none of its {} store files ({bytes} bytes)",
                    self.host,
                    self.text,
                    files.len()
                ));
                Ok(())
            }
        }
    }
}

// ---- edit-topology -------------------------------------------------------------------

struct EditTopology {
    from: String,
    to: String,
    all: bool,
}

pub fn parse_edit_topology(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let from = required(node, "from", "TEXT")?;
    let to = node
        .string("to")?
        .ok_or_else(|| node.error("`edit-topology` needs to=\"TEXT\""))?;
    if from.is_empty() {
        return Err(node.error("`from` must not be empty"));
    }
    let all = boolean(node, "all")?.unwrap_or(false);
    Ok(Box::new(EditTopology { from, to, all }))
}

impl Step for EditTopology {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let current = cx.topology()?;
        let text = std::fs::read_to_string(&current).map_err(|e| {
            Failure::new(
                "the current topology to be one file",
                format!("{}: {e}", cx.show_path(&current)),
            )
        })?;
        let count = text.matches(self.from.as_str()).count();
        if count == 0 {
            return Err(Failure::new(
                format!("{:?} in {}", self.from, cx.show_path(&current)),
                "not present",
            ));
        }
        let edited = if self.all {
            text.replace(self.from.as_str(), &self.to)
        } else {
            text.replacen(self.from.as_str(), &self.to, 1)
        };
        let dir = cx.work_dir().join("topologies");
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::new("the edited topology written", e.to_string()))?;
        let n = std::fs::read_dir(&dir).map_or(0, |d| d.count()) + 1;
        let name = current
            .file_name()
            .map_or("topology.kdl".into(), |n| n.to_string_lossy().into_owned());
        // An edited copy's name without its number: `02-processes.kdl`, not
        // `02-01-processes.kdl`.
        let name = match current.parent() == Some(dir.as_path()) {
            true => name
                .split_once('-')
                .map_or(name.clone(), |(_, rest)| rest.to_owned()),
            false => name,
        };
        let path = dir.join(format!("{n:02}-{name}"));
        std::fs::write(&path, edited)
            .map_err(|e| Failure::new("the edited topology written", e.to_string()))?;
        cx.say(format_args!(
            "{:?} -> {:?} ({} of {count}); the topology is now {}",
            self.from,
            self.to,
            if self.all { count } else { 1 },
            cx.show_path(&path)
        ));
        cx.set_topology(path);
        Ok(())
    }
}

// ---- process-cycles ------------------------------------------------------------------

/// `process-cycles receiver="R" caller="C" mailbox="M" cycles=N seed=S
/// [marker="TEXT"]` — N seeded cycles (≤ [`PROCESS_CYCLES_MAX`], within
/// [`PROCESS_CYCLES_TIMEOUT`]), each one run of `demo.count` at R for C under an op id
/// of its own, one of:
/// - `direct` — must succeed;
/// - `mailbox` — through `mailbox:M`, its arguments carrying `marker=TEXT`: succeeded,
///   or unknown while it travels;
/// - `receiver-kill` — `delay_ms` seeded (≤ 250 ms), R SIGKILLed at a seeded moment
///   and restarted;
/// - `caller-kill` — the same, C SIGKILLed;
/// - `lost-reply` — R restarted with `process-reply=drop-reply`: the run is `unknown`,
///   the same op asked again is terminal.
///
/// Then, within [`PROCESS_SETTLE_TIMEOUT`], every op not terminal is asked again until
/// it is, or until R holds it `unknown` (its unit held); every op is asked once more:
/// an outcome never changes once terminal (identical result), an `unknown` one at R
/// stays `unknown` (nothing retried it). With U the runs R holds unknown, R's grant
/// for C must hold U units `unknown`, and k = demo.count's increase − the runs R
/// holds succeeded must be 0 ≤ k ≤ U (no run executed twice). k unknown runs are
/// resolved succeeded and the rest failed; then the counter's increase equals the
/// runs succeeded at R, which the grant consumed, and nothing is reserved or unknown.
struct Cycles {
    receiver: String,
    caller: String,
    mailbox: String,
    cycles: u64,
    seed: u64,
    marker: String,
}

pub fn parse_cycles(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let receiver = required(node, "receiver", "HOST")?;
    let caller = required(node, "caller", "HOST")?;
    let mailbox = required(node, "mailbox", "HOST")?;
    let cycles = node.count("cycles")?.unwrap_or(10);
    if cycles == 0 || cycles > PROCESS_CYCLES_MAX {
        return Err(node.error(format!(
            "cycles must be 1 to PROCESS_CYCLES_MAX ({PROCESS_CYCLES_MAX})"
        )));
    }
    let seed = node.count("seed")?.unwrap_or(1);
    let marker = node
        .string("marker")?
        .unwrap_or_else(|| "grid-cycles-secret-marker".to_owned());
    if marker.is_empty() || marker.contains(char::is_whitespace) || marker.contains('=') {
        return Err(node.error("`marker` is one word without `=`"));
    }
    Ok(Box::new(Cycles {
        receiver,
        caller,
        mailbox,
        cycles,
        seed,
        marker,
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Direct,
    Mailbox,
    ReceiverKill,
    CallerKill,
    LostReply,
    /// Through the mailbox, with the receiver or the mailbox host SIGKILLed.
    MailboxKill,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Mailbox => "mailbox",
            Kind::ReceiverKill => "receiver-kill",
            Kind::CallerKill => "caller-kill",
            Kind::LostReply => "lost-reply",
            Kind::MailboxKill => "mailbox-kill",
        }
    }
}

/// One answer of `gridctl process run`, asked quietly.
#[derive(Debug, Clone)]
struct Answer {
    /// `succeeded`, `failed`, `unknown`, `refused`, or `no-answer` (no JSON).
    outcome: String,
    result: Value,
    json: Value,
    status: String,
    /// The exit status does not match the outcome.
    mismatch: bool,
}

impl Answer {
    fn show(&self) -> String {
        format!(
            "{} ({}) {}",
            self.outcome,
            self.status,
            shorten(&self.json.to_string(), 300)
        )
    }
}

struct CycleOp {
    op: String,
    kind: Kind,
    args: Vec<OsString>,
    answers: Vec<Answer>,
    /// The first terminal answer: (outcome, result).
    terminal: Option<(String, Value)>,
}

/// Runs `gridctl ARGS --state STATE` quietly (output in `$WORK/quiet/TAG.*`).
fn ask_quiet(gridctl: &Path, work: &Path, state: &Path, args: &[OsString], tag: &str) -> Answer {
    let logs = work.join("quiet");
    let _ = std::fs::create_dir_all(&logs);
    let mut command = Command::new(gridctl);
    command
        .args(args)
        .arg("--state")
        .arg(state)
        .current_dir(work)
        .env_remove(crate::runner::FAILPOINTS_ENV);
    let output = run_bounded(
        command,
        &logs.join(format!("{tag}.out")),
        &logs.join(format!("{tag}.err")),
        PROCESS_COMMAND_TIMEOUT,
    );
    match output {
        Ok(output) => {
            let status = describe_status(&output.status);
            match serde_json::from_str::<Value>(output.stdout.trim()) {
                Ok(json) if json["outcome"].is_string() => {
                    let outcome = json["outcome"].as_str().unwrap_or_default().to_owned();
                    let mismatch = Outcome::from_name(&outcome)
                        .is_none_or(|o| output.status.code() != Some(o.exit_code()));
                    Answer {
                        outcome,
                        result: json["result"].clone(),
                        json,
                        status,
                        mismatch,
                    }
                }
                _ => Answer {
                    outcome: "no-answer".into(),
                    result: Value::Null,
                    json: json!({"stdout": shorten(output.stdout.trim(), 300),
                                 "stderr": shorten(output.stderr.trim(), 300)}),
                    status,
                    mismatch: false,
                },
            }
        }
        Err(error) => Answer {
            outcome: "no-answer".into(),
            result: Value::Null,
            json: json!({"error": format!("{error:?}")}),
            status: format!(
                "not finished within {} s",
                PROCESS_COMMAND_TIMEOUT.as_secs()
            ),
            mismatch: false,
        },
    }
}

/// What the cycles need to reach gridctl from helper threads.
#[derive(Clone)]
struct Quiet {
    gridctl: PathBuf,
    work: PathBuf,
    state: PathBuf,
}

impl Quiet {
    fn ask(&self, args: &[OsString], tag: &str) -> Answer {
        ask_quiet(&self.gridctl, &self.work, &self.state, args, tag)
    }

    fn json(&self, args: &[&str], tag: &str) -> Result<Value, Failure> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let logs = self.work.join("quiet");
        let _ = std::fs::create_dir_all(&logs);
        let mut command = Command::new(&self.gridctl);
        command
            .args(&args)
            .arg("--state")
            .arg(&self.state)
            .current_dir(&self.work);
        let what = format!("gridctl {}", args.join(" ".as_ref()).to_string_lossy());
        let output = run_bounded(
            command,
            &logs.join(format!("{tag}.out")),
            &logs.join(format!("{tag}.err")),
            PROCESS_COMMAND_TIMEOUT,
        )
        .map_err(|e| Failure::new(format!("{what} to finish"), format!("{e:?}")))?;
        let json = json_of(&output, &what)?;
        if !output.status.success() {
            return Err(Failure::new(
                format!("{what} to exit 0"),
                format!(
                    "{}: {}",
                    describe_status(&output.status),
                    shorten(&json.to_string(), 600)
                ),
            ));
        }
        Ok(json)
    }
}

/// Records an answer for `op`, checking that a terminal outcome never changes.
fn take_answer(op: &mut CycleOp, answer: Answer, when: &str) -> Result<(), Failure> {
    if answer.mismatch {
        return Err(Failure::new(
            format!(
                "gridctl's exit status to match its outcome ({when}, op {})",
                op.op
            ),
            answer.show(),
        ));
    }
    // Only gridctl finding the caller down (its SIGKILL landed before gridctl
    // connected) refuses: nothing was submitted.
    if answer.outcome == "refused" && !(op.kind == Kind::CallerKill && op.answers.is_empty()) {
        return Err(Failure::new(
            format!("no run of the cycles refused ({when}, op {})", op.op),
            answer.show(),
        ));
    }
    if is_terminal(&answer.outcome) {
        match &op.terminal {
            Some((outcome, result)) => {
                if *outcome != answer.outcome || *result != answer.result {
                    return Err(Failure::new(
                        format!(
                            "op {} ({}) to keep its terminal outcome {outcome} {result} ({when})",
                            op.op,
                            op.kind.name()
                        ),
                        answer.show(),
                    ));
                }
            }
            None => op.terminal = Some((answer.outcome.clone(), answer.result.clone())),
        }
    } else if let Some((outcome, _)) = &op.terminal {
        return Err(Failure::new(
            format!(
                "op {} ({}) to keep its terminal outcome {outcome} ({when})",
                op.op,
                op.kind.name()
            ),
            answer.show(),
        ));
    }
    op.answers.push(answer);
    Ok(())
}

impl Cycles {
    fn args(&self, op: &str, kind: Kind, delay_ms: u64) -> Vec<OsString> {
        let mut args = Vec::new();
        let mut via = None;
        match kind {
            Kind::Mailbox => {
                via = Some(format!("mailbox:{}", self.mailbox));
                args.push(("marker".to_owned(), self.marker.clone()));
            }
            Kind::MailboxKill => {
                via = Some(format!("mailbox:{}", self.mailbox));
                args.push(("marker".to_owned(), self.marker.clone()));
                args.push(("delay_ms".to_owned(), delay_ms.to_string()));
            }
            Kind::ReceiverKill | Kind::CallerKill => {
                args.push(("delay_ms".to_owned(), delay_ms.to_string()));
            }
            Kind::Direct | Kind::LostReply => {}
        }
        let mut out = run_args(
            &self.receiver,
            "demo.count",
            &self.caller,
            op,
            via.as_deref(),
            &args,
        );
        if via.is_some() {
            out.push("--wait-ms".into());
            out.push(CYCLE_MAILBOX_WAIT_MS.to_string().into());
        }
        out
    }

    fn check_elapsed(&self, started: Instant, cycle: u64) -> Result<(), Failure> {
        if started.elapsed() > PROCESS_CYCLES_TIMEOUT {
            return Err(Failure::new(
                format!(
                    "{} cycles within PROCESS_CYCLES_TIMEOUT ({} s)",
                    self.cycles,
                    PROCESS_CYCLES_TIMEOUT.as_secs()
                ),
                format!("{cycle} done"),
            ));
        }
        Ok(())
    }

    /// The receiver's numbers: (demo.count counter, runs, the caller's grant).
    fn receiver_view(&self, quiet: &Quiet, tag: &str) -> Result<(u64, Value, Value), Failure> {
        let processes = quiet.json(
            &["inspect", "processes", "--host", &self.receiver, "--json"],
            &format!("{tag}-processes"),
        )?;
        let grants = quiet.json(
            &["inspect", "grants", "--host", &self.receiver, "--json"],
            &format!("{tag}-grants"),
        )?;
        let mine: Vec<&Value> = grants["grants"]
            .as_array()
            .map(|g| {
                g.iter()
                    .filter(|g| g["caller"] == self.caller.as_str() && g["retired"] != true)
                    .collect()
            })
            .unwrap_or_default();
        let [grant] = mine.as_slice() else {
            return Err(Failure::new(
                format!(
                    "exactly one grant of {} for {} (not retired)",
                    self.receiver, self.caller
                ),
                shorten(&grants.to_string(), 600),
            ));
        };
        Ok((
            processes["demo_count"].as_u64().unwrap_or(0),
            processes["runs"].clone(),
            (*grant).clone(),
        ))
    }

    fn run_cycles(
        &self,
        cx: &mut Context<'_>,
        quiet: &Quiet,
        ops: &mut Vec<CycleOp>,
    ) -> Result<BTreeMap<(Kind, String), u64>, Failure> {
        let started = Instant::now();
        let mut rng = self.seed;
        let mut tally: BTreeMap<(Kind, String), u64> = BTreeMap::new();
        for cycle in 0..self.cycles {
            self.check_elapsed(started, cycle)?;
            let kind = match next(&mut rng) % 6 {
                0 => Kind::Direct,
                1 => Kind::Mailbox,
                2 => Kind::ReceiverKill,
                3 => Kind::CallerKill,
                4 => Kind::MailboxKill,
                _ => Kind::LostReply,
            };
            let mailbox_victim = next(&mut rng).is_multiple_of(2);
            let delay_ms = next(&mut rng) % (CYCLE_DELAY_MAX_MS + 1);
            let kill_after = Duration::from_millis(next(&mut rng) % (delay_ms + 100));
            let op_id = format!("pc{}-{cycle:04}", self.seed);
            let args = self.args(&op_id, kind, delay_ms);
            let mut op = CycleOp {
                op: op_id.clone(),
                kind,
                args: args.clone(),
                answers: Vec::new(),
                terminal: None,
            };
            let when = format!("cycle {cycle}, {}", kind.name());
            let tag = format!("{op_id}-1");
            let first = match kind {
                Kind::Direct | Kind::Mailbox => quiet.ask(&args, &tag),
                Kind::LostReply => {
                    cx.kill_host(&self.receiver)?;
                    cx.start_host(&self.receiver, Some("process-reply=drop-reply"))?;
                    quiet.ask(&args, &tag)
                }
                Kind::ReceiverKill | Kind::CallerKill | Kind::MailboxKill => {
                    let victim = match kind {
                        Kind::ReceiverKill => &self.receiver,
                        Kind::CallerKill => &self.caller,
                        _ if mailbox_victim => &self.mailbox,
                        _ => &self.receiver,
                    };
                    let thread = {
                        let (quiet, args, tag) = (quiet.clone(), args.clone(), tag.clone());
                        std::thread::spawn(move || quiet.ask(&args, &tag))
                    };
                    std::thread::sleep(kill_after);
                    cx.kill_host(victim)?;
                    // Started again at once: the run's caller may be waiting on it.
                    cx.start_host(victim, None)?;
                    thread
                        .join()
                        .map_err(|_| Failure::new("the run's thread to finish", "it panicked"))?
                }
            };
            let outcome = first.outcome.clone();
            let allowed: &[&str] = match kind {
                Kind::Direct => &["succeeded"],
                Kind::Mailbox => &["succeeded", "unknown"],
                Kind::ReceiverKill => &["succeeded", "failed", "unknown"],
                // `refused`: the caller was down before gridctl reached it.
                Kind::CallerKill => &["succeeded", "failed", "unknown", "no-answer", "refused"],
                Kind::LostReply => &["unknown"],
                Kind::MailboxKill => &["succeeded", "failed", "unknown"],
            };
            if !allowed.contains(&outcome.as_str()) {
                return Err(Failure::new(
                    format!("{} for {op_id} ({when})", allowed.join(" or ")),
                    first.show(),
                ));
            }
            take_answer(&mut op, first, &when)?;
            *tally.entry((kind, outcome)).or_default() += 1;
            if kind == Kind::LostReply {
                // The reply was lost once; asked again, the receiver answers the
                // original outcome.
                let again = quiet.ask(&args, &format!("{op_id}-2"));
                if !is_terminal(&again.outcome) {
                    return Err(Failure::new(
                        format!("{op_id} asked again after its lost reply to be terminal"),
                        again.show(),
                    ));
                }
                take_answer(&mut op, again, &format!("{when}, asked again"))?;
            }
            ops.push(op);
        }
        Ok(tally)
    }

    /// Asks again, until every op is terminal or held unknown at the receiver.
    /// Returns the ops the receiver holds unknown.
    fn settle(&self, quiet: &Quiet, ops: &mut [CycleOp]) -> Result<Vec<usize>, Failure> {
        let started = Instant::now();
        let mut held: Vec<usize> = Vec::new();
        for round in 1.. {
            let open: Vec<usize> = (0..ops.len())
                .filter(|i| ops[*i].terminal.is_none() && !held.contains(i))
                .collect();
            if open.is_empty() {
                break;
            }
            for &i in &open {
                let tag = format!("{}-settle{round}", ops[i].op);
                let answer = quiet.ask(&ops[i].args, &tag);
                take_answer(&mut ops[i], answer, &format!("asked again, round {round}"))?;
                if ops[i].terminal.is_some() {
                    continue;
                }
                let run = quiet.json(
                    &[
                        "inspect",
                        "process",
                        &ops[i].op,
                        "--host",
                        &self.receiver,
                        "--json",
                    ],
                    &format!("{tag}-inspect"),
                )?;
                if run["run"]["outcome"] == "unknown" && run["run"]["units"] == "unknown" {
                    held.push(i);
                }
            }
            let still_open =
                (0..ops.len()).any(|i| ops[i].terminal.is_none() && !held.contains(&i));
            if still_open && started.elapsed() > PROCESS_SETTLE_TIMEOUT {
                let open: Vec<String> = (0..ops.len())
                    .filter(|i| ops[*i].terminal.is_none() && !held.contains(i))
                    .map(|i| {
                        format!(
                            "{} ({}): {}",
                            ops[i].op,
                            ops[i].kind.name(),
                            ops[i].answers.last().map_or(String::new(), Answer::show)
                        )
                    })
                    .collect();
                return Err(Failure::new(
                    format!(
                        "every op terminal or held unknown at {} within PROCESS_SETTLE_TIMEOUT ({} s)",
                        self.receiver,
                        PROCESS_SETTLE_TIMEOUT.as_secs()
                    ),
                    format!("{} still open:\n{}", open.len(), open.join("\n")),
                ));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        held.sort_unstable();
        Ok(held)
    }
}

impl Step for Cycles {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let quiet = Quiet {
            gridctl: cx.gridctl_path().to_owned(),
            work: cx.work_dir().to_owned(),
            state: cx.state_dir().to_owned(),
        };
        let (count0, runs0, grant0) = self.receiver_view(&quiet, "cycles-before")?;
        let grant_name = grant0["name"].as_str().unwrap_or_default().to_owned();
        let before = grant_numbers(&grant0);
        cx.say(format_args!(
            "{} cycles (seed {}): {} runs demo.count at {} directly, through mailbox {}, with {} or {} SIGKILLed at seeded moments, or its reply lost; grant {grant_name}: {}; counter {count0}",
            self.cycles,
            self.seed,
            self.caller,
            self.receiver,
            self.mailbox,
            self.receiver,
            self.caller,
            describe_numbers(&before)
        ));
        let mut ops = Vec::new();
        let tally = self.run_cycles(cx, &quiet, &mut ops)?;
        let tally_text = tally
            .iter()
            .map(|((kind, outcome), n)| format!("{} {outcome} {n}", kind.name()))
            .collect::<Vec<_>>()
            .join(", ");
        cx.say(format_args!("cycles done; first answers: {tally_text}"));

        // Settle: every op terminal, or unknown at the receiver.
        let held = self.settle(&quiet, &mut ops)?;
        // Every op asked once more: a terminal outcome never changes, an unknown one
        // stays unknown (nothing retried it).
        for (i, op) in ops.iter_mut().enumerate() {
            let answer = quiet.ask(&op.args, &format!("{}-final", op.op));
            let when = "asked once more after the cycles";
            if held.contains(&i) && answer.outcome != "unknown" {
                return Err(Failure::new(
                    format!(
                        "{} (held unknown at {}) to stay unknown",
                        op.op, self.receiver
                    ),
                    answer.show(),
                ));
            }
            take_answer(op, answer, when)?;
        }
        // The receiver's view of every op.
        let mut at_receiver: Vec<Value> = Vec::new();
        for op in &ops {
            let json = quiet.json(
                &[
                    "inspect",
                    "process",
                    &op.op,
                    "--host",
                    &self.receiver,
                    "--json",
                ],
                &format!("{}-receiver", op.op),
            )?;
            at_receiver.push(json["run"].clone());
        }
        let outcome_at = |run: &Value| run["outcome"].as_str().unwrap_or("absent").to_owned();
        for (op, run) in ops.iter().zip(&at_receiver) {
            let (outcome, _) = op
                .terminal
                .clone()
                .unwrap_or(("unknown".into(), Value::Null));
            let receiver = outcome_at(run);
            let consistent = match (outcome.as_str(), receiver.as_str()) {
                (a, b) if a == b => true,
                // Never dispatched (refused before dispatch, or the receiver was down):
                // failed at the caller, nothing at the receiver.
                ("failed", "absent") => true,
                _ => false,
            };
            let units = run["units"].as_str().unwrap_or_default();
            let units_ok = match receiver.as_str() {
                "succeeded" => units == "consumed",
                "failed" => units == "released" || units == "none",
                "unknown" => units == "unknown",
                _ => true,
            };
            if !consistent || !units_ok {
                return Err(Failure::new(
                    format!(
                        "op {} ({}): the caller's outcome {outcome} and the receiver's run to agree, with units to match",
                        op.op,
                        op.kind.name()
                    ),
                    format!("receiver: {}", shorten(&run.to_string(), 600)),
                ));
            }
        }
        let unknown = held.len() as u64;
        let succeeded = at_receiver
            .iter()
            .filter(|r| outcome_at(r) == "succeeded")
            .count() as u64;
        let (count1, runs1, grant1) = self.receiver_view(&quiet, "cycles-after")?;
        let during = grant_numbers(&grant1);
        let Some(counted) = count1.checked_sub(count0) else {
            return Err(Failure::new(
                "demo.count's counter never to go down",
                format!("{count0} before the cycles, {count1} after"),
            ));
        };
        let summary = format!(
            "{} ops: {succeeded} succeeded at {}, {unknown} held unknown, {} failed (or never dispatched); counter +{counted}; runs {runs1} (before {runs0}); grant {}",
            ops.len(),
            self.receiver,
            ops.len() as u64 - succeeded - unknown,
            describe_numbers(&during)
        );
        cx.say(&summary);
        if runs1["running"].as_u64().unwrap_or(0) != 0 {
            return Err(Failure::new(
                format!("no run still running at {}", self.receiver),
                summary,
            ));
        }
        if during["unknown"] != before["unknown"] + unknown {
            return Err(Failure::new(
                format!(
                    "grant {grant_name}'s units held unknown to grow by the {unknown} runs held unknown"
                ),
                summary,
            ));
        }
        let k = counted.checked_sub(succeeded).filter(|k| *k <= unknown);
        let Some(k) = k else {
            return Err(Failure::new(
                format!(
                    "0 ≤ counter increase − runs succeeded ≤ runs unknown ({unknown}): no run executed twice"
                ),
                summary,
            ));
        };
        cx.say(format_args!(
            "{k} of the {unknown} unknown runs executed before their receiver died: resolving {k} succeeded, {} failed",
            unknown - k
        ));
        for (n, &i) in held.iter().enumerate() {
            let outcome = if (n as u64) < k {
                "succeeded"
            } else {
                "failed"
            };
            let op = ops[i].op.clone();
            let json = quiet.json(
                &[
                    "process",
                    "resolve",
                    &op,
                    "--outcome",
                    outcome,
                    "--host",
                    &self.receiver,
                    "--json",
                ],
                &format!("{op}-resolve"),
            )?;
            let expected_units = if outcome == "succeeded" {
                "consumed"
            } else {
                "released"
            };
            if json["run"]["outcome"] != outcome || json["run"]["units"] != expected_units {
                return Err(Failure::new(
                    format!("{op} resolved {outcome}, its unit {expected_units}"),
                    shorten(&json.to_string(), 600),
                ));
            }
            // Now terminal at the caller too, and stays so.
            for round in 1..=2 {
                let answer = quiet.ask(&ops[i].args, &format!("{op}-resolved{round}"));
                if answer.outcome != outcome {
                    return Err(Failure::new(
                        format!("{op}, resolved {outcome} at the receiver, to answer {outcome}"),
                        answer.show(),
                    ));
                }
                take_answer(&mut ops[i], answer, "after its resolution")?;
            }
        }
        let (count2, runs2, grant2) = self.receiver_view(&quiet, "cycles-resolved")?;
        let after = grant_numbers(&grant2);
        let succeeded = succeeded + k;
        let counted = count2.saturating_sub(count0);
        let consumed = after["consumed"].saturating_sub(before["consumed"]);
        let summary = format!(
            "after resolving: {succeeded} runs succeeded at {}; counter +{counted}; runs {runs2}; grant {grant_name}: {}",
            self.receiver,
            describe_numbers(&after)
        );
        cx.say(&summary);
        let checks = [
            (
                counted == succeeded,
                "the counter to grow by the runs succeeded",
            ),
            (
                consumed == succeeded,
                "the grant to consume one unit per run succeeded",
            ),
            (
                after["reserved"] == before["reserved"],
                "no unit left reserved",
            ),
            (
                after["unknown"] == before["unknown"],
                "no unit left held unknown",
            ),
            (
                after["allocated"] == before["allocated"]
                    && after["surrendered"] == before["surrendered"],
                "the allocation unchanged",
            ),
            (
                after["available"] == before["available"] - succeeded.min(before["available"]),
                "the units available to fall by the runs succeeded, no more",
            ),
        ];
        for (holds, what) in checks {
            if !holds {
                return Err(Failure::new(what, summary));
            }
        }
        cx.say(format_args!(
            "no run executed twice, no terminal outcome changed; {} units available of {} allocated",
            after["available"], after["allocated"]
        ));
        Ok(())
    }
}
