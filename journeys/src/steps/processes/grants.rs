//! `expect-grants` and `expect-processes`: a receiver's execution grants (their units,
//! read through the `units_conserved` oracle's [`Units`]) and its runs (see the
//! module's header for their syntax).

use serde_json::Value;

use crate::context::Context;
use crate::error::Failure;
use crate::oracles::units_conserved::{GRANT_NUMBERS, Units};
use crate::step::Step;
use crate::step::{Node, ParseError};
use crate::steps::gridctl::gridctl_json;
use crate::steps::shorten;

// ---- expect-grants -------------------------------------------------------------------

struct ExpectGrants {
    host: String,
    grant: Option<String>,
    /// Expected numbers by name, in the order of [`GRANT_NUMBERS`].
    numbers: Vec<(&'static str, u64)>,
    issued: Option<u64>,
    retired: Option<bool>,
    settled: Option<bool>,
}

pub fn parse_expect_grants(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the issuing (receiving) host")?;
    let grant = node.string("grant")?;
    let mut numbers = Vec::new();
    for key in GRANT_NUMBERS {
        if let Some(n) = node.count(key)? {
            numbers.push((key, n));
        }
    }
    let issued = node.count("issued")?;
    let retired = node.flag("retired")?;
    if grant.is_none() && retired.is_some() {
        return Err(node.error("`retired` is a grant's: name it with grant=\"NAME\""));
    }
    let settled = node.flag("settled")?;
    if grant.is_none() && settled.is_some() {
        return Err(node.error("`settled` is a grant's: name it with grant=\"NAME\""));
    }
    Ok(Box::new(ExpectGrants {
        host,
        grant,
        numbers,
        issued,
        retired,
        settled,
    }))
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
        let numbers = Units::of(&view);
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
            numbers.describe(),
            issues.len(),
            match view.get("retired") {
                Some(Value::Bool(true)) => ", retired",
                _ => "",
            }
        ));
        for (key, expected) in &self.numbers {
            if numbers.number(key) != *expected {
                return Err(Failure::new(
                    format!("{key} {expected} for {what}"),
                    numbers.describe(),
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
        if let Some(settled) = self.settled {
            let settlement = &view["settlement"];
            // A settlement states the grant's whole account as the issuer holds it.
            let whole = settlement["allocated"] == view["allocated"]
                && settlement["consumed"] == view["consumed"]
                && settlement["surrendered"] == view["surrendered"]
                && settlement["signature"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty());
            if settled == settlement.is_null() || (settled && !whole) {
                return Err(Failure::new(
                    format!("{what} settled={settled} (a signed settlement of its whole account)"),
                    format!("settlement {}", shorten(&settlement.to_string(), 400)),
                ));
            }
        }
        Ok(())
    }
}

// ---- expect-processes ----------------------------------------------------------------

struct ExpectProcesses {
    host: String,
    demo_count: Option<u64>,
    runs: Vec<(&'static str, u64)>,
    /// Deposits its mailbox holds.
    mailbox_deposits: Option<u64>,
    within: Option<std::time::Duration>,
}

pub fn parse_expect_processes(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let demo_count = node.count("demo-count")?;
    let mut runs = Vec::new();
    for key in ["succeeded", "failed", "unknown", "running"] {
        if let Some(n) = node.count(key)? {
            runs.push((key, n));
        }
    }
    let mailbox_deposits = node.count("mailbox-deposits")?;
    let within = crate::steps::within(node)?;
    Ok(Box::new(ExpectProcesses {
        host,
        demo_count,
        runs,
        mailbox_deposits,
        within,
    }))
}

impl Step for ExpectProcesses {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        crate::steps::repeat_within(cx, self.within, |cx| self.check(cx))
    }
}

impl ExpectProcesses {
    fn check(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
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
        if let Some(expected) = self.mailbox_deposits {
            let held = json["mailbox_deposits"].as_u64();
            if held != Some(expected) {
                return Err(Failure::new(
                    format!("{expected} deposit(s) held by {}'s mailbox", self.host),
                    format!("{}", json["mailbox_deposits"]),
                ));
            }
            cx.say(format_args!("its mailbox holds {expected} deposit(s)"));
        }
        Ok(())
    }
}
