//! `expect-tag-journal TAG host=H model=M [at-least=N] [within=S]` — `gridctl inspect
//! tag TAG --host H --json` must show a source journal that is exactly the
//! deterministic sequence of the tag's definition, indexes 1..=count with none missing
//! and none twice, at least N observations, and model M fed every one of them once:
//! its fed position equals the count and its batches equal the observations fed (M is
//! fed by this tag only). With `within=S` (at most 60) the check repeats until it
//! holds or S seconds pass (the sampler keeps journaling meanwhile).
//!
//! `expect-tag TAG host=H [within=S] [connection="online"] [stale=#true|#false]
//! [last-good=X] [good-at-least=N] [debt-at-least=N] [refused-at-least=N] [good=N]
//! [debt=N] [completions=N] [outstanding-debt=N] [reason="TEXT"] [reason-seen="TEXT"] [consecutive=#true] [fed-all=#true]
//! [retired=#true|#false]` — an industrial tag's source (Modbus, Sparkplug, J1939): the
//! same `gridctl inspect tag` must meet every stated
//! condition (the `tag_source` oracle), repeated like `expect-tag-journal` with
//! `within`. A failure shows what the last try observed.

use std::ffi::OsString;

use serde_json::Value;

use super::{Step, repeat_within, within};
use crate::context::Context;
use crate::error::Failure;
use crate::oracles::tag_source::{self, TagExpect};
use crate::process::describe_status;
use crate::process::quote_output;
use crate::step::{Node, ParseError, kind};

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
            "tag `{}` at `{}`: the deterministic sequence 1..=n (n >= {}; a purged prefix reported as purged), each fed once to model `{}`",
            self.tag, self.host, self.at_least, self.model
        );
        let json = inspect_tag(cx, &self.tag, &self.host, &expected)?;
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
        // Entries below `held_from` were purged by rule once the models projected them
        // (docs/storage.md): the journal holds held_from..=count.
        let held_from = json["held_from"].as_u64().unwrap_or(1);
        if listed != (count + 1).saturating_sub(held_from)
            || (count > 0 && first != Some(held_from))
        {
            problems.push(format!(
                "the journal lists {listed} observation(s) from {first:?}, not {held_from}..={count}"
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

/// `gridctl inspect tag TAG --host HOST --json`: its JSON, exit status 0 (else a
/// failure of `expected`).
fn inspect_tag(
    cx: &mut Context<'_>,
    tag: &str,
    host: &str,
    expected: &str,
) -> Result<Value, Failure> {
    let args: Vec<OsString> = vec![
        "inspect".into(),
        "tag".into(),
        tag.into(),
        "--host".into(),
        host.into(),
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
    serde_json::from_str::<Value>(output.stdout.trim()).map_err(|_| {
        Failure::new(
            expected,
            format!("not JSON: {}", quote_output(&output.stdout)),
        )
    })
}

#[derive(Debug)]
pub(super) struct ExpectTag {
    pub(super) tag: String,
    pub(super) host: String,
    pub(super) expect: TagExpect,
    pub(super) within: Option<std::time::Duration>,
}

pub fn parse_expect_tag(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(read_expect_tag(node)?))
}

const EXPECT_TAG_EXAMPLE: &str =
    "write e.g. `expect-tag boiler-temp host=edge connection=\"online\" good-at-least=3`";

pub(super) fn read_expect_tag(node: &mut Node<'_>) -> Result<ExpectTag, ParseError> {
    let tag = node.argument("a tag name")?;
    let Some(host) = node.host_property("host")? else {
        return Err(node
            .error("`expect-tag` needs host=HOST")
            .with_help(EXPECT_TAG_EXAMPLE));
    };
    let within = within(node)?;
    let last_good = match node.property("last-good")? {
        None => None,
        Some(entry) => {
            Some(match entry.value() {
                kdl::KdlValue::Integer(n) => Value::from(*n as f64),
                kdl::KdlValue::Float(x) if x.is_finite() => Value::from(*x),
                kdl::KdlValue::String(s) => Value::from(s.clone()),
                kdl::KdlValue::Bool(b) => Value::from(*b),
                kdl::KdlValue::Null => Value::Null,
                other => {
                    return Err(node.entry_error(
                    entry,
                    format!("`last-good` must be a finite number, a text, a boolean or #null, found {}", kind(other)),
                ));
                }
            })
        }
    };
    let expect = TagExpect {
        connection: node.string("connection")?,
        stale: node.flag("stale")?,
        last_good,
        good_at_least: node.count("good-at-least")?,
        debt_at_least: node.count("debt-at-least")?,
        good: node.count("good")?,
        debt: node.count("debt")?,
        completions: node.count("completions")?,
        refused_at_least: node.count("refused-at-least")?,
        outstanding_debt: node.count("outstanding-debt")?,
        reason: node.string("reason")?,
        reason_seen: node.string("reason-seen")?,
        consecutive: node.flag("consecutive")?,
        fed_all: node.flag("fed-all")?,
        retired: node.flag("retired")?,
    };
    if expect.is_empty() {
        return Err(node
            .error("`expect-tag` needs at least one condition (connection=, stale=, last-good=, good-at-least=, …)")
            .with_help(EXPECT_TAG_EXAMPLE));
    }
    Ok(ExpectTag {
        tag,
        host,
        expect,
        within,
    })
}

impl Step for ExpectTag {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        repeat_within(cx, self.within, |cx| {
            let expected = format!(
                "tag `{}` at `{}`: {}",
                self.tag,
                self.host,
                self.expect.describe()
            );
            let json = inspect_tag(cx, &self.tag, &self.host, &expected)?;
            cx.say(format_args!("→ {}", tag_source::summary(&json)));
            tag_source::check(&self.tag, &self.host, &self.expect, &json).map(|_| ())
        })
    }
}
