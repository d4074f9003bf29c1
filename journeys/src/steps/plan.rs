//! `plan [out="NAME"] [expect-transitions=N] [expect-create=N] [expect-change=N]
//! [expect-retire=N] [expect-attention=N] [expect-waiting=N] [expect-mention="TEXT"]` and
//! `expect-plan-empty` — `gridctl plan --json` of the current topology.
//!
//! `out` saves the plan for a later `reconcile plan="NAME"`. The counts compare with the
//! plan's transitions (all of them, or those with op `+`, `~`, `-`, `!`);
//! `expect-mention` requires some transition's line (op, kind, name, host, detail) to
//! contain TEXT; `expect-waiting` counts the transitions that wait for something
//! outside the plan (a host to run), directly or through one they come after. Inside `expect-refused`, `plan` must exit non-zero (invalid files).

use std::ffi::OsString;

use serde_json::Value;

use super::{Step, shorten};
use crate::context::Context;
use crate::error::Failure;
use crate::process::describe_status;
use crate::process::quote_output;
use crate::step::{Node, ParseError};

/// The transition ops and their names in properties.
const OPS: [(&str, &str); 4] = [
    ("+", "expect-create"),
    ("~", "expect-change"),
    ("-", "expect-retire"),
    ("!", "expect-attention"),
];

struct Plan {
    out: Option<String>,
    total: Option<u64>,
    /// Expected count per op, in the order of [`OPS`].
    per_op: [Option<u64>; 4],
    mention: Option<String>,
    waiting: Option<u64>,
    refused: bool,
}

pub fn parse_plan(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let out = node.string("out")?;
    if let Some(name) = &out {
        check_plan_name(node, name)?;
    }
    let total = node.count("expect-transitions")?;
    let mut per_op = [None; 4];
    for (slot, (_, key)) in per_op.iter_mut().zip(OPS) {
        *slot = node.count(key)?;
    }
    let mention = node.string("expect-mention")?;
    let waiting = node.count("expect-waiting")?;
    let refused = node.expects_refusal();
    if refused && (out.is_some() || total.is_some() || per_op.iter().any(Option::is_some)) {
        return Err(node.error("a refused `plan` has no transitions to save or count"));
    }
    Ok(Box::new(Plan {
        out,
        total,
        per_op,
        mention,
        waiting,
        refused,
    }))
}

pub fn parse_expect_plan_empty(_node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(Plan {
        out: None,
        total: Some(0),
        per_op: [None; 4],
        mention: None,
        waiting: None,
        refused: false,
    }))
}

/// Saved plan names become file names.
pub fn check_plan_name(node: &Node<'_>, name: &str) -> Result<(), ParseError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        || name.starts_with('.')
    {
        return Err(node.error(format!(
            "plan name `{name}` must use letters, digits, `-`, `_` and `.`"
        )));
    }
    Ok(())
}

impl Step for Plan {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let topology = cx.topology()?;
        let mut args: Vec<OsString> = vec!["plan".into(), topology.into(), "--json".into()];
        if let Some(name) = &self.out {
            args.push("--out".into());
            args.push(cx.plan_path(name).into());
        }
        let output = cx.gridctl(&args)?;
        let status = describe_status(&output.status);
        if self.refused {
            if output.status.success() {
                return Err(Failure::new(
                    "plan to be refused (a non-zero exit)",
                    format!("{status}; stdout: {}", quote_output(&output.stdout)),
                ));
            }
            cx.say(format_args!(
                "→ {status}: {}",
                shorten(output.stderr.trim(), 600)
            ));
            return Ok(());
        }
        if !output.status.success() {
            return Err(Failure::new(
                "plan to succeed (exit 0)",
                format!("{status}; stderr: {}", quote_output(&output.stderr)),
            ));
        }
        let transitions = transitions(&output.stdout)?;
        let mut counts = [0u64; 4];
        for transition in &transitions {
            if let Some(index) = OPS.iter().position(|(op, _)| *op == transition.op) {
                counts[index] += 1;
            }
        }
        let lines: Vec<String> = transitions.iter().map(Transition::line).collect();
        let footer = OPS
            .iter()
            .zip(counts)
            .map(|((op, _), n)| format!("{op}{n}"))
            .collect::<Vec<_>>()
            .join(" ");
        cx.say(format_args!(
            "→ {} transition{} ({footer})",
            transitions.len(),
            if transitions.len() == 1 { "" } else { "s" }
        ));
        for line in &lines {
            cx.say(format_args!("  {line}"));
        }
        if let Some(name) = &self.out {
            let path = cx.plan_path(name);
            if !path.is_file() {
                return Err(Failure::new(
                    format!("the plan saved to {}", cx.show_path(&path)),
                    "gridctl plan --out exited 0 but wrote no file",
                ));
            }
            let shown = cx.show_path(&path);
            cx.say(format_args!("saved as `{name}` ({shown})"));
        }

        let listing = if lines.is_empty() {
            "no transitions".to_string()
        } else {
            lines.join("\n")
        };
        if let Some(total) = self.total
            && transitions.len() as u64 != total
        {
            let expected = if total == 0 {
                "an empty plan (no transitions)".to_string()
            } else {
                format!("{total} transition(s)")
            };
            return Err(Failure::new(
                expected,
                format!("{} transition(s):\n{listing}", transitions.len()),
            ));
        }
        for (((op, key), expected), observed) in OPS.iter().zip(self.per_op).zip(counts) {
            if let Some(expected) = expected
                && expected != observed
            {
                return Err(Failure::new(
                    format!("{expected} `{op}` transition(s) ({key})"),
                    format!("{observed} `{op}`:\n{listing}"),
                ));
            }
        }
        if let Some(expected) = self.waiting {
            let observed = serde_json::from_str::<Value>(output.stdout.trim())
                .ok()
                .and_then(|j| j["waiting"].as_u64());
            if observed != Some(expected) {
                return Err(Failure::new(
                    format!("{expected} waiting transition(s) (expect-waiting)"),
                    format!("{observed:?} waiting:\n{listing}"),
                ));
            }
        }
        if let Some(text) = &self.mention
            && !lines.iter().any(|line| line.contains(text.as_str()))
        {
            return Err(Failure::new(
                format!("a transition mentioning {text:?}"),
                listing,
            ));
        }
        Ok(())
    }
}

/// One line of a plan, as `gridctl plan --json` lists it.
struct Transition {
    op: String,
    kind: String,
    name: String,
    host: Option<String>,
    detail: String,
}

impl Transition {
    fn line(&self) -> String {
        let host = self
            .host
            .as_ref()
            .filter(|host| **host != self.name)
            .map_or(String::new(), |host| format!(" on {host}"));
        let detail = if self.detail.is_empty() {
            String::new()
        } else {
            format!(": {}", self.detail.replace('\n', "\n    "))
        };
        format!("{} {} {}{host}{detail}", self.op, self.kind, self.name)
    }
}

/// The plan's transitions; the JSON must have the documented shape, and its `counts`
/// (when present) must agree with the list.
fn transitions(stdout: &str) -> Result<Vec<Transition>, Failure> {
    let shape =
        r#"plan JSON {"transitions": [{"op", "kind", "name", "detail", …}], "counts": {…}}"#;
    let json: Value = serde_json::from_str(stdout.trim())
        .map_err(|e| Failure::new(shape, format!("not JSON ({e}): {}", quote_output(stdout))))?;
    let Some(list) = json.get("transitions").and_then(Value::as_array) else {
        return Err(Failure::new(
            shape,
            format!("no \"transitions\" list: {}", shorten(stdout.trim(), 600)),
        ));
    };
    let text = |value: &Value, key: &str| -> Option<String> {
        match value.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        }
    };
    let mut transitions = Vec::new();
    for item in list {
        let (Some(op), Some(kind), Some(name)) =
            (text(item, "op"), text(item, "kind"), text(item, "name"))
        else {
            return Err(Failure::new(
                shape,
                format!("a transition without op, kind or name: {item}"),
            ));
        };
        if !OPS.iter().any(|(known, _)| *known == op) {
            return Err(Failure::new(
                shape,
                format!("a transition with op {op:?}: {item}"),
            ));
        }
        transitions.push(Transition {
            op,
            kind,
            name,
            host: text(item, "host"),
            detail: text(item, "detail").unwrap_or_default(),
        });
    }
    if let Some(counts) = json.get("counts").and_then(Value::as_object) {
        for (op, _) in OPS {
            let listed = transitions.iter().filter(|t| t.op == op).count() as u64;
            let counted = counts.get(op).and_then(Value::as_u64).unwrap_or(0);
            if listed != counted {
                return Err(Failure::new(
                    "the plan's counts to agree with its transitions",
                    format!(
                        "counts say {counted} `{op}`, the list has {listed}: {}",
                        json["counts"]
                    ),
                ));
            }
        }
    }
    Ok(transitions)
}
