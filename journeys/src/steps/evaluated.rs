//! `expect-model-evaluated MODEL [within=S]` — every value the model's host holds
//! (`gridctl inspect model MODEL --json`) equals, bit for bit, what its definition in the
//! current topology computes from the inputs the host holds (`gridctl model eval TOPOLOGY
//! --model MODEL --set INPUT=VALUE… --json`, in memory, no host): every cell checked,
//! whatever batches, crashes and recoveries led there. With `within=S` (at most 60) the
//! check is repeated until it holds or S seconds pass.

use std::ffi::OsString;

use serde_json::{Map, Value};

use super::{Step, repeat_within, within};
use crate::context::Context;
use crate::error::Failure;
use crate::process::{describe_status, quote_output};
use crate::step::{Node, ParseError};

/// Mismatches a failure lists at most.
const MISMATCHES_SHOWN: usize = 8;

struct ExpectEvaluated {
    model: String,
    within: Option<std::time::Duration>,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let model = node.argument("a model name")?;
    let within = within(node)?;
    Ok(Box::new(ExpectEvaluated { model, within }))
}

impl Step for ExpectEvaluated {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        repeat_within(cx, self.within, |cx| self.check(cx))
    }
}

/// `gridctl ARGS --json`'s JSON object, or why not.
fn object(
    cx: &mut Context<'_>,
    args: Vec<OsString>,
    what: &str,
) -> Result<Map<String, Value>, Failure> {
    let output = cx.gridctl(&args)?;
    if !output.status.success() {
        return Err(Failure::new(
            format!("{what} to answer"),
            format!(
                "{}: {}",
                describe_status(&output.status),
                quote_output(&output.stderr)
            ),
        ));
    }
    match serde_json::from_str::<Value>(output.stdout.trim()) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(Failure::new(
            format!("{what}: a JSON object of values"),
            quote_output(&output.stdout),
        )),
    }
}

impl ExpectEvaluated {
    fn check(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let topology = cx.topology()?;
        let definition = grid_spec::load(std::slice::from_ref(&topology))
            .map_err(|e| Failure::new("the current topology to load", e.to_string()))?;
        let model = definition
            .models
            .iter()
            .find(|m| m.name == self.model)
            .ok_or_else(|| {
                Failure::new(
                    format!("model `{}` in the current topology", self.model),
                    "not declared there",
                )
            })?;
        let inputs: Vec<String> = model.inputs().map(|i| i.name.clone()).collect();
        let held = object(
            cx,
            vec![
                "inspect".into(),
                "model".into(),
                self.model.clone().into(),
                "--json".into(),
            ],
            "the host's values",
        )?;
        let mut args: Vec<OsString> = vec![
            "model".into(),
            "eval".into(),
            topology.into_os_string(),
            "--model".into(),
            self.model.clone().into(),
            "--json".into(),
        ];
        for input in &inputs {
            let Some(value) = held.get(input).and_then(Value::as_f64) else {
                return Err(Failure::new(
                    format!("the host to hold a number for input `{input}`"),
                    format!("{:?}", held.get(input)),
                ));
            };
            args.push("--set".into());
            args.push(format!("{input}={value}").into());
        }
        let computed = object(cx, args, "the definition's evaluation")?;
        let mut mismatches = Vec::new();
        for (name, want) in &computed {
            match held.get(name) {
                Some(got) if same(got, want) => {}
                got => mismatches.push(format!("`{name}`: held {got:?}, computed {want}")),
            }
        }
        for name in held.keys().filter(|n| !computed.contains_key(*n)) {
            mismatches.push(format!(
                "`{name}`: held, but the definition has no such item"
            ));
        }
        if !mismatches.is_empty() {
            let count = mismatches.len();
            mismatches.truncate(MISMATCHES_SHOWN);
            return Err(Failure::new(
                format!(
                    "every value of model `{}` to equal its definition's evaluation",
                    self.model
                ),
                format!("{count} differ: {}", mismatches.join("; ")),
            ));
        }
        cx.say(format_args!(
            "→ all {} values of {} equal the definition's evaluation of the {} inputs held",
            computed.len(),
            self.model,
            inputs.len()
        ));
        Ok(())
    }
}

/// The same number (bit for bit) or the same error text.
fn same(got: &Value, want: &Value) -> bool {
    match (got.as_f64(), want.as_f64()) {
        (Some(a), Some(b)) => a.to_bits() == b.to_bits(),
        _ => got == want,
    }
}
