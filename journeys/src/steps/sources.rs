//! `expect-tag-journal TAG host=H model=M [at-least=N] [within=S]` — `gridctl inspect
//! tag TAG --host H --json` must show a source journal that is exactly the
//! deterministic sequence of the tag's definition, indexes 1..=count with none missing
//! and none twice, at least N observations, and model M fed every one of them once:
//! its fed position equals the count and its batches equal the observations fed (M is
//! fed by this tag only). With `within=S` (at most 60) the check repeats until it
//! holds or S seconds pass (the sampler keeps journaling meanwhile).

use std::ffi::OsString;

use serde_json::Value;

use super::{Step, repeat_within, within};
use crate::error::Failure;
use crate::parse::{Node, ParseError};
use crate::process::describe_status;
use crate::runner::{Context, quote_output};

struct ExpectTagJournal {
    tag: String,
    host: String,
    model: String,
    at_least: u64,
    within: Option<std::time::Duration>,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let tag = node.argument("a tag name")?;
    let Some(host) = node.host_property("host")? else {
        return Err(node
            .error("`expect-tag-journal` needs host=HOST")
            .with_help("write e.g. `expect-tag-journal boiler-temp host=edge model=boiler`"));
    };
    let Some(model) = node.string("model")? else {
        return Err(node
            .error("`expect-tag-journal` needs model=MODEL")
            .with_help("write e.g. `expect-tag-journal boiler-temp host=edge model=boiler`"));
    };
    let at_least = node.count("at-least")?.unwrap_or(1);
    let within = within(node)?;
    Ok(Box::new(ExpectTagJournal {
        tag,
        host,
        model,
        at_least,
        within,
    }))
}

impl Step for ExpectTagJournal {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        repeat_within(cx, self.within, |cx| self.check(cx))
    }
}

impl ExpectTagJournal {
    fn check(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let expected = format!(
            "tag `{}` at `{}`: the deterministic sequence 1..=n (n >= {}), each fed once to model `{}`",
            self.tag, self.host, self.at_least, self.model
        );
        let args: Vec<OsString> = vec![
            "inspect".into(),
            "tag".into(),
            self.tag.clone().into(),
            "--host".into(),
            self.host.clone().into(),
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
        let Ok(json) = serde_json::from_str::<Value>(output.stdout.trim()) else {
            return Err(Failure::new(
                expected,
                format!("not JSON: {}", quote_output(&output.stdout)),
            ));
        };
        let count = json["count"].as_u64().unwrap_or(0);
        let listed = json["observations"].as_array().map_or(0, Vec::len) as u64;
        let first = json["observations"][0]["index"].as_u64();
        let deterministic = json["deterministic"].as_bool() == Some(true);
        let consecutive = json["consecutive"].as_bool() == Some(true);
        let fed = json["fed"]
            .as_array()
            .and_then(|f| {
                f.iter()
                    .find(|f| f["model"].as_str() == Some(self.model.as_str()))
            })
            .cloned();
        let (position, batches) = fed.as_ref().map_or((0, 0), |f| {
            (
                f["position"].as_u64().unwrap_or(0),
                f["batches"].as_u64().unwrap_or(0),
            )
        });
        cx.say(format_args!(
            "→ {count} observation(s) journaled, deterministic={deterministic} consecutive={consecutive}; model {} fed up to {position} in {batches} batch(es)",
            self.model
        ));
        let mut problems = Vec::new();
        if count < self.at_least {
            problems.push(format!("only {count} observation(s)"));
        }
        if listed != count || (count > 0 && first != Some(1)) {
            problems.push(format!(
                "the journal lists {listed} observation(s) from {first:?}, not 1..={count}"
            ));
        }
        if !deterministic {
            problems.push(format!(
                "observations differ from the sequence: {}",
                json["mismatched"]
            ));
        }
        if !consecutive {
            problems.push("indexes are not consecutive".to_owned());
        }
        if fed.is_none() {
            problems.push(format!("model `{}` is not fed from the tag", self.model));
        } else if position != count || batches != position {
            problems.push(format!(
                "model fed up to {position} in {batches} batch(es), journal holds {count}"
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Failure::new(expected, problems.join("; ")))
        }
    }
}
