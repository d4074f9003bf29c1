//! `expect-values MODEL NAME=VALUE…` — `gridctl inspect model MODEL --json` must show
//! each named value: numbers compare exactly (`total=3`, `ratio=0.5`), error values as
//! strings (`ratio="#DIV/0!"`). Values not named are not checked. With `within=S` (at
//! most 60) the values may arrive later (a model fed from a route): the check is
//! repeated until it holds or S seconds pass.

use std::ffi::OsString;

use kdl::KdlValue;
use serde_json::Value;

use super::{Step, repeat_within, shorten, within};
use crate::context::Context;
use crate::error::Failure;
use crate::process::describe_status;
use crate::process::quote_output;
use crate::step::{Node, ParseError, kind};

#[derive(Debug, Clone, PartialEq)]
enum Expected {
    Number(f64),
    Text(String),
}

impl Expected {
    fn matches(&self, observed: &Value) -> bool {
        match (self, observed) {
            (Expected::Number(x), Value::Number(n)) => n.as_f64() == Some(*x),
            (Expected::Text(text), Value::String(s)) => text == s,
            (Expected::Text(text), Value::Number(n)) => text
                .parse::<f64>()
                .ok()
                .is_some_and(|x| n.as_f64() == Some(x)),
            _ => false,
        }
    }

    fn show(&self) -> String {
        match self {
            Expected::Number(x) => x.to_string(),
            Expected::Text(text) => format!("{text:?}"),
        }
    }
}

struct ExpectValues {
    model: String,
    values: Vec<(String, Expected)>,
    within: Option<std::time::Duration>,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let model = node.argument("a model name")?;
    let within = within(node)?;
    let mut values = Vec::new();
    for (name, entry) in node.remaining_properties()? {
        let expected = match entry.value() {
            KdlValue::Integer(n) => Expected::Number(*n as f64),
            KdlValue::Float(x) => Expected::Number(*x),
            KdlValue::String(s) => Expected::Text(s.clone()),
            other => {
                return Err(node.entry_error(
                    entry,
                    format!(
                        "value `{name}` must be a number or an error text, found {}",
                        kind(other)
                    ),
                ));
            }
        };
        values.push((name, expected));
    }
    if values.is_empty() {
        return Err(node
            .error("`expect-values` needs at least one NAME=VALUE")
            .with_help("write e.g. `expect-values counter n=3 total=3`"));
    }
    Ok(Box::new(ExpectValues {
        model,
        values,
        within,
    }))
}

impl Step for ExpectValues {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        repeat_within(cx, self.within, |cx| self.check(cx))
    }
}

impl ExpectValues {
    fn check(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let wanted = self
            .values
            .iter()
            .map(|(name, value)| format!("{name}={}", value.show()))
            .collect::<Vec<_>>()
            .join(" ");
        let expected = format!("model `{}` to hold {wanted}", self.model);
        let args: Vec<OsString> = vec![
            "inspect".into(),
            "model".into(),
            self.model.clone().into(),
            "--json".into(),
        ];
        let output = cx.gridctl(&args)?;
        if !output.status.success() {
            return Err(Failure::new(
                expected,
                format!(
                    "inspect failed ({}): {}",
                    describe_status(&output.status),
                    quote_output(&output.stderr)
                ),
            ));
        }
        let object = match serde_json::from_str::<Value>(output.stdout.trim()) {
            Ok(Value::Object(object)) => object,
            _ => {
                return Err(Failure::new(
                    expected,
                    format!(
                        "not a JSON object of values: {}",
                        quote_output(&output.stdout)
                    ),
                ));
            }
        };
        let all = object
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" ");
        cx.say(format_args!("→ {}", shorten(&all, 600)));
        let mismatches: Vec<String> = self
            .values
            .iter()
            .filter_map(|(name, want)| match object.get(name) {
                None => Some(format!("`{name}` is missing")),
                Some(got) if !want.matches(got) => {
                    Some(format!("{name}={got} (expected {})", want.show()))
                }
                Some(_) => None,
            })
            .collect();
        if mismatches.is_empty() {
            Ok(())
        } else {
            Err(Failure::new(
                expected,
                format!(
                    "{}; all values: {}",
                    mismatches.join(", "),
                    shorten(&all, 600)
                ),
            ))
        }
    }
}
