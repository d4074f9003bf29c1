//! `input MODEL NAME=VALUE… op="ID" [fence="CLAIM:EPOCH"] [expect=OUTCOME]` — one input
//! batch through `gridctl input MODEL NAME=VALUE… --op ID [--fence CLAIM:EPOCH]`, sent to
//! the model's owner. Every property except `op`, `fence` and `expect` is an input; values are numbers (`n=1`, `x=-2.5`) or strings
//! passed as written (`x="1e3"`). The outcome must be `expect` (default `succeeded`;
//! `refused` inside `expect-refused`).

use std::ffi::OsString;

use super::{Outcome, Step, check_outcome};
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError, kind};

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

impl Step for Input {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let mut args: Vec<OsString> = vec!["input".into(), self.model.clone().into()];
        args.extend(self.values.iter().map(OsString::from));
        args.extend(["--op".into(), self.op.clone().into(), "--json".into()]);
        if let Some(fence) = &self.fence {
            args.extend(["--fence".into(), fence.into()]);
        }
        let output = cx.gridctl(&args)?;
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
