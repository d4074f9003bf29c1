//! Wallet steps (issue 18 §3, docs/wallet.md), and one for any `gridctl` command
//! whose answer is JSON:
//!
//! - `wallet VERB [args="ARG …"] [exit=N] [expect="PATH=VALUE …"] [length="PATH=N …"]
//!   [mention="TEXT"] [within=S]` — `gridctl wallet VERB ARG… --json`;
//! - `gridctl args="ARG …" [exit=N] [expect=…] [length=…] [mention=…] [within=S]` —
//!   `gridctl ARG… --json` (a Process run with arguments the `run-process` step does
//!   not check, say);
//! - `wallet-edit file="NAME" from="TEXT" to="TEXT"` — replaces the first occurrence
//!   of TEXT (which must be present) in `$WORK/NAME`: tampering with an archive.
//!
//! The exit status is N (default 0). Each PATH is a dotted path into the JSON answer
//! (a number picks an array element: `money.0.credits_posted`); VALUE matches a string
//! as text, a number exactly (or a decimal-string amount as text), `true`/`false` a
//! boolean, `null` a null or missing value. `length` checks an array's length;
//! `mention` that stdout or stderr contains TEXT. With `within`, the command is
//! repeated until everything holds or S seconds pass.

use std::ffi::OsString;
use std::time::Duration;

use serde_json::Value;

use super::{repeat_within, shorten, within};
use crate::context::Context;
use crate::error::Failure;
use crate::process::describe_status;
use crate::process::quote_output;
use crate::step::Step;
use crate::step::{Node, ParseError};

struct Command {
    args: Vec<String>,
    exit: i32,
    expect: Vec<(String, String)>,
    length: Vec<(String, usize)>,
    mention: Option<String>,
    within: Option<Duration>,
}

fn pairs(node: &Node<'_>, key: &str, text: &str) -> Result<Vec<(String, String)>, ParseError> {
    text.split_whitespace()
        .map(|item| match item.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
            _ => Err(node.error(format!(
                "`{key}` is a list of PATH=VALUE separated by spaces; `{item}` is not"
            ))),
        })
        .collect()
}

fn parse_checks(node: &mut Node<'_>, mut args: Vec<String>) -> Result<Box<dyn Step>, ParseError> {
    if let Some(text) = node.string("args")? {
        args.extend(text.split_whitespace().map(str::to_owned));
    }
    let exit = match node.count("exit")? {
        Some(n) if n <= 255 => n as i32,
        Some(_) => return Err(node.error("`exit` is an exit status, 0 to 255")),
        None => 0,
    };
    let expect = match node.string("expect")? {
        Some(text) => pairs(node, "expect", &text)?,
        None => Vec::new(),
    };
    let mut length = Vec::new();
    if let Some(text) = node.string("length")? {
        for (path, n) in pairs(node, "length", &text)? {
            let Ok(n) = n.parse() else {
                return Err(node.error(format!("`length` {path}={n}: N is a whole number")));
            };
            length.push((path, n));
        }
    }
    let mention = node.string("mention")?;
    let within = within(node)?;
    Ok(Box::new(Command {
        args,
        exit,
        expect,
        length,
        mention,
        within,
    }))
}

pub fn parse_wallet(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let verb = node.argument("show, propose, surrender, archive, verify or open")?;
    parse_checks(node, vec!["wallet".to_owned(), verb])
}

pub fn parse_gridctl(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let step = parse_checks(node, Vec::new())?;
    Ok(step)
}

/// The value at a dotted path (a number picks an array element).
fn at<'v>(json: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.')
        .try_fold(json, |v, key| match key.parse::<usize>() {
            Ok(i) if v.is_array() => v.get(i),
            _ => v.get(key),
        })
}

fn matches(found: Option<&Value>, expected: &str) -> bool {
    if expected == "null" {
        return found.is_none_or(Value::is_null);
    }
    let Some(value) = found else {
        return false;
    };
    match expected.parse::<f64>() {
        Ok(x) => value.as_str() == Some(expected) || value.as_f64() == Some(x),
        Err(_) => {
            value.as_str() == Some(expected)
                || value.as_bool().is_some_and(|b| b.to_string() == expected)
        }
    }
}

impl Command {
    fn once(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        // `$TOPOLOGY`: the current topology file (as `plan` and `reconcile` read it).
        let topology = match self.args.iter().any(|a| a == "$TOPOLOGY") {
            true => Some(cx.topology()?),
            false => None,
        };
        let mut args: Vec<OsString> = self
            .args
            .iter()
            .map(|a| match (&topology, a.as_str()) {
                (Some(path), "$TOPOLOGY") => path.clone().into_os_string(),
                _ => OsString::from(a),
            })
            .collect();
        args.push("--json".into());
        let output = cx.gridctl(&args)?;
        let status = describe_status(&output.status);
        let json: Value = serde_json::from_str(output.stdout.trim()).unwrap_or(Value::Null);
        cx.say(format_args!(
            "→ {status}: {}",
            shorten(&json.to_string(), 600)
        ));
        if output.status.code() != Some(self.exit) {
            return Err(Failure::new(
                format!("exit status {}", self.exit),
                format!(
                    "{status}; stdout: {}; stderr: {}",
                    quote_output(&output.stdout),
                    quote_output(&output.stderr)
                ),
            ));
        }
        for (path, expected) in &self.expect {
            let found = at(&json, path);
            if !matches(found, expected) {
                return Err(Failure::new(
                    format!("{path}={expected}"),
                    format!(
                        "{path} is {}",
                        found.map_or("absent".to_owned(), |v| shorten(&v.to_string(), 300))
                    ),
                ));
            }
        }
        for (path, n) in &self.length {
            let found = at(&json, path).and_then(Value::as_array).map(Vec::len);
            if found != Some(*n) {
                return Err(Failure::new(
                    format!("{path} holding {n} element(s)"),
                    format!("{path}: {found:?} ({})", shorten(&json.to_string(), 600)),
                ));
            }
        }
        if let Some(text) = &self.mention
            && !output.stdout.contains(text.as_str())
            && !output.stderr.contains(text.as_str())
        {
            return Err(Failure::new(
                format!("the answer mentioning {text:?}"),
                format!(
                    "stdout: {}; stderr: {}",
                    quote_output(&output.stdout),
                    quote_output(&output.stderr)
                ),
            ));
        }
        Ok(())
    }
}

impl Step for Command {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        repeat_within(cx, self.within, |cx| self.once(cx))
    }
}

// ---- wallet-edit ---------------------------------------------------------------------

struct Edit {
    file: String,
    from: String,
    to: String,
}

pub fn parse_edit(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let file = node.required("file", "NAME")?;
    if file.starts_with('/') || file.split('/').any(|c| c == "..") {
        return Err(node.error(format!("`{file}` must stay inside the work directory")));
    }
    let from = node.required("from", "TEXT")?;
    let to = node.required("to", "TEXT")?;
    Ok(Box::new(Edit { file, from, to }))
}

impl Step for Edit {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let path = cx.work_dir().join(&self.file);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Failure::new(format!("to read {}", self.file), e.to_string()))?;
        if !text.contains(self.from.as_str()) {
            return Err(Failure::new(
                format!("{} to contain {:?}", self.file, self.from),
                "it does not",
            ));
        }
        std::fs::write(&path, text.replacen(self.from.as_str(), &self.to, 1))
            .map_err(|e| Failure::new(format!("to write {}", self.file), e.to_string()))?;
        cx.say(format_args!(
            "$WORK/{}: {:?} replaced by {:?}",
            self.file, self.from, self.to
        ));
        Ok(())
    }
}
