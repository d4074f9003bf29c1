//! `input MODEL NAME=VALUE… op="ID" [fence="CLAIM:EPOCH"] [expect=OUTCOME]` — one input
//! batch through `gridctl input MODEL NAME=VALUE… --op ID [--fence CLAIM:EPOCH]`, sent to
//! the model's owner. Every property except `op`, `fence` and `expect` is an input; values are numbers (`n=1`, `x=-2.5`) or strings
//! passed as written (`x="1e3"`). The outcome must be `expect` (default `succeeded`;
//! `refused` inside `expect-refused`). Every answer is recorded in
//! `$WORK/input-answers.jsonl` ([`InputAnswer`]): `expect-inputs-unchanged` and `damage`
//! re-send the ones with a definite answer.

use std::ffi::OsString;

use serde::{Deserialize, Serialize};

use super::{Outcome, Step, check_outcome, journal};
use crate::context::Context;
use crate::error::Failure;
use crate::oracles::answers_unchanged;
use crate::step::{Node, ParseError, kind};

/// Where input answers are recorded.
pub(super) const ANSWERS_FILE: &str = "input-answers.jsonl";

/// An input batch and one answer to it, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct InputAnswer {
    pub op: String,
    pub model: String,
    /// `NAME=VALUE`, as sent.
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<String>,
    pub outcome: String,
    #[serde(default)]
    pub detail: String,
    /// The answer says it is the one first given (`"replayed": true`).
    #[serde(default)]
    pub replayed: bool,
}

impl InputAnswer {
    /// An answer to the same input as `self`, from `json`.
    pub(super) fn again(&self, json: &serde_json::Value) -> Self {
        let text = |key: &str| json.get(key).and_then(|v| v.as_str()).unwrap_or_default();
        InputAnswer {
            op: self.op.clone(),
            model: self.model.clone(),
            values: self.values.clone(),
            fence: self.fence.clone(),
            outcome: text("outcome").to_owned(),
            detail: text("detail").to_owned(),
            replayed: json.get("replayed").and_then(|v| v.as_bool()) == Some(true),
        }
    }

    /// `gridctl input MODEL NAME=VALUE… --op ID --json`.
    pub(super) fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["input".into(), self.model.clone().into()];
        args.extend(self.values.iter().map(OsString::from));
        args.extend(["--op".into(), self.op.clone().into(), "--json".into()]);
        if let Some(fence) = &self.fence {
            args.extend(["--fence".into(), fence.into()]);
        }
        args
    }

    /// Every op's first definite answer, in the order first sent.
    pub(super) fn originals(work: &std::path::Path) -> Result<Vec<InputAnswer>, Failure> {
        let mut originals: Vec<InputAnswer> = Vec::new();
        for record in journal::read::<InputAnswer>(work, ANSWERS_FILE)? {
            if answers_unchanged::Answer::definite(&record)
                && !originals.iter().any(|o| o.op == record.op)
            {
                originals.push(record);
            }
        }
        Ok(originals)
    }
}

impl answers_unchanged::Answer for InputAnswer {
    /// The model's owner decided it: a refusal is not retained (nothing was journaled;
    /// re-sent later, it may be taken).
    fn definite(&self) -> bool {
        matches!(self.outcome.as_str(), "succeeded" | "failed")
    }

    /// The same batch, model and outcome: the detail names the batch.
    fn same(&self, other: &InputAnswer) -> bool {
        (&self.op, &self.model, &self.outcome, &self.detail)
            == (&other.op, &other.model, &other.outcome, &other.detail)
    }

    fn show(&self) -> String {
        format!("{}: {}", self.outcome, self.detail)
    }
}

struct Input {
    model: String,
    op: String,
    /// `NAME=VALUE` arguments, in file order.
    values: Vec<String>,
    fence: Option<String>,
    expect: Outcome,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let model = node.argument("a model name")?;
    let op = node.string("op")?.ok_or_else(|| {
        node.error("`input` needs an operation id: op=\"ID\"")
            .with_help("re-sending the same op returns the original answer")
    })?;
    let expect = Outcome::expected(node)?;
    let fence = node.string("fence")?;
    let mut values = Vec::new();
    for (name, entry) in node.remaining_properties()? {
        let Some(text) = super::number_text(entry.value()) else {
            return Err(node.entry_error(
                entry,
                format!(
                    "input `{name}` must be a number, found {}",
                    kind(entry.value())
                ),
            ));
        };
        values.push(format!("{name}={text}"));
    }
    if values.is_empty() {
        return Err(node
            .error("`input` needs at least one NAME=VALUE")
            .with_help("write e.g. `input counter n=1 op=\"b1\"`"));
    }
    Ok(Box::new(Input {
        model,
        op,
        values,
        fence,
        expect,
    }))
}

impl Input {
    /// The input as sent, before any answer.
    fn sent(&self) -> InputAnswer {
        InputAnswer {
            op: self.op.clone(),
            model: self.model.clone(),
            values: self.values.clone(),
            fence: self.fence.clone(),
            outcome: String::new(),
            detail: String::new(),
            replayed: false,
        }
    }
}

impl Step for Input {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let output = cx.gridctl(&self.sent().args())?;
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(output.stdout.trim()) {
            let answer = self.sent().again(&json);
            journal::append(cx.work_dir(), ANSWERS_FILE, &answer)?;
        }
        let json = check_outcome(cx, &output, self.expect)?;
        if let Some(op) = json.get("op").and_then(|op| op.as_str())
            && op != self.op
        {
            return Err(Failure::new(
                format!("the answer for op {:?}", self.op),
                format!("an answer for op {op:?}: {json}"),
            ));
        }
        Ok(())
    }
}
