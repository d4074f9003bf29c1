//! Ledger steps (profile `ledger`):
//!
//! - `ledger transfer LEDGER host=H op=ID debit=A credit=B amount=N currency=CUR
//!   [pending=#true] [timeout-s=S]`, `ledger post LEDGER host=H op=ID pending-id=P
//!   [amount=N]`, `ledger void LEDGER host=H op=ID pending-id=P` — one operation through
//!   `gridctl ledger …`, with `[expect=succeeded|refused|unknown]` (default
//!   succeeded), `[reason="TEXT"]` (the refusal's reason contains TEXT) and
//!   `[same-as=OP]` (the answer is identical to OP's first definite answer: re-sending
//!   an id). Every answer is recorded in `$WORK/ledger-answers.jsonl`.
//! - `expect-ledger LEDGER host=H [account=A] [debits-posted=N] [debits-pending=N]
//!   [credits-posted=N] [credits-pending=N] [pending-open=N] [answered=N] [refused=N]
//!   [posted-transfers=N] [pending-transfers=N] [sequence=N] [from-answers=#true]` —
//!   `gridctl inspect ledger`: the account's balances exactly, the pending transfers
//!   held, the ledger's counts (ids answered, refused, transfers posted at once, pending
//!   transfers made), its journal records (`sequence`: batches and definition
//!   changes, so a re-submission shows), and with `from-answers` every account against the recorded
//!   answers (the `ledger_balances` oracle); `[within=S]` polls until it holds (an expiry).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use kdl::KdlValue;
use serde_json::Value;

use super::journal;
use crate::context::Context;
use crate::error::Failure;
use crate::oracles::answers_unchanged::{self, Answer};
use crate::oracles::ledger_balances::{self, Balances, Recorded};
use crate::oracles::refused_or_same::Retained;
use crate::step::Step;
use crate::step::{Node, ParseError};
use crate::steps::gridctl::{Quiet, gridctl_json};
use crate::steps::{Outcome, check_outcome};

const ANSWERS: &str = "ledger-answers.jsonl";

struct LedgerStep {
    kind: String,
    ledger: String,
    host: String,
    op: String,
    /// `--flag value` pairs after the ledger.
    flags: Vec<(String, String)>,
    pending: bool,
    expect: Outcome,
    reason: Option<String>,
    same_as: Option<String>,
}

/// An integer or a decimal string (amounts up to u128).
fn amount(node: &mut Node<'_>, key: &str) -> Result<Option<String>, ParseError> {
    let Some(entry) = node.property(key)? else {
        return Ok(None);
    };
    match entry.value() {
        KdlValue::Integer(n) if *n > 0 => Ok(Some(n.to_string())),
        KdlValue::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(Some(s.clone()))
        }
        _ => Err(node.entry_error(
            entry,
            format!("`{key}` is an integer of minor units above 0 (or a decimal string)"),
        )),
    }
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let kind = node.argument("transfer, post or void")?;
    if !["transfer", "post", "void"].contains(&kind.as_str()) {
        return Err(node.error(format!(
            "`ledger` is followed by transfer, post or void, not `{kind}`"
        )));
    }
    let ledger = node.argument("a ledger name")?;
    let host = node.required_host("host")?;
    let op = node.required("op", "ID")?;
    let mut flags = Vec::new();
    let mut pending = false;
    match kind.as_str() {
        "transfer" => {
            for key in ["debit", "credit", "currency"] {
                flags.push((key.to_owned(), node.required(key, "NAME")?));
            }
            let Some(a) = amount(node, "amount")? else {
                return Err(node.error("`ledger transfer` needs amount=N"));
            };
            flags.push(("amount".to_owned(), a));
            pending = node.flag("pending")?.unwrap_or(false);
            if let Some(s) = node.count("timeout-s")? {
                flags.push(("timeout-s".to_owned(), s.to_string()));
            }
        }
        _ => {
            flags.push(("pending-id".to_owned(), node.required("pending-id", "ID")?));
            if kind == "post"
                && let Some(a) = amount(node, "amount")?
            {
                flags.push(("amount".to_owned(), a));
            }
        }
    }
    let reason = node.string("reason")?;
    let same_as = node.string("same-as")?;
    let expect = Outcome::expected(node)?;
    Ok(Box::new(LedgerStep {
        kind,
        ledger,
        host,
        op,
        flags,
        pending,
        expect,
        reason,
        same_as,
    }))
}

fn flag<'a>(flags: &'a [(String, String)], key: &str) -> Option<&'a String> {
    flags.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// An answer as `answers_unchanged` compares it: outcome, reason and amount.
#[derive(Debug, Clone)]
struct Said(Value);

impl answers_unchanged::Answer for Said {
    fn definite(&self) -> bool {
        self.0["outcome"] != "unknown"
    }
    fn same(&self, other: &Self) -> bool {
        ["id", "outcome", "reason", "amount"]
            .iter()
            .all(|k| self.0.get(k) == other.0.get(k))
    }
    fn show(&self) -> String {
        self.0.to_string()
    }
}

impl Step for LedgerStep {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let mut args: Vec<OsString> = vec![
            "ledger".into(),
            self.kind.as_str().into(),
            self.ledger.as_str().into(),
            "--host".into(),
            self.host.as_str().into(),
            "--op".into(),
            self.op.as_str().into(),
        ];
        for (key, value) in &self.flags {
            args.push(format!("--{key}").into());
            args.push(value.into());
        }
        if self.pending {
            args.push("--pending".into());
        }
        args.push("--json".into());
        let output = cx.gridctl(&args)?;
        let answer = check_outcome(cx, &output, self.expect)?;
        let work = cx.work_dir().to_owned();
        let records: Vec<Recorded> = journal::read(&work, ANSWERS)?;
        let record = Recorded {
            ledger: self.ledger.clone(),
            host: Some(self.host.clone()),
            op: self.op.clone(),
            kind: self.kind.clone(),
            debit: flag(&self.flags, "debit").cloned(),
            credit: flag(&self.flags, "credit").cloned(),
            pending: self.pending,
            pending_id: flag(&self.flags, "pending-id").cloned(),
            outcome: answer["outcome"].as_str().unwrap_or("").to_owned(),
            amount: answer["amount"].as_str().map(str::to_owned),
            reason: answer["reason"].as_str().map(str::to_owned),
        };
        journal::append(&work, ANSWERS, &record)?;
        if let Some(text) = &self.reason {
            let reason = answer["reason"]
                .as_str()
                .or(answer["detail"].as_str())
                .unwrap_or("");
            if !reason.contains(text.as_str()) {
                return Err(Failure::new(
                    format!("a reason containing {text:?}"),
                    answer.to_string(),
                ));
            }
        }
        if let Some(op) = &self.same_as {
            // The first definite answer of `op` an earlier step recorded.
            if !records
                .iter()
                .any(|r| r.op == *op && r.outcome != "unknown")
            {
                return Err(Failure::new(
                    format!("a definite answer of {op} recorded by an earlier `ledger` step"),
                    "none recorded",
                ));
            }
            let first = records
                .iter()
                .find(|r| r.op == *op && r.outcome != "unknown")
                .expect("just checked");
            let mut original = Some(Said(serde_json::json!({
                "id": first.op,
                "outcome": first.outcome,
                "reason": first.reason,
                "amount": first.amount,
            })));
            let now = Said(serde_json::json!({
                "id": answer["id"],
                "outcome": answer["outcome"],
                "reason": answer["reason"],
                "amount": answer["amount"],
            }));
            answers_unchanged::check(
                op,
                &mut original,
                &now,
                &format!("asked again as {}", self.op),
            )?;
            cx.say(format_args!("identical to the first answer of {op}"));
        }
        Ok(())
    }
}

struct ExpectLedger {
    ledger: String,
    host: String,
    account: Option<String>,
    /// (JSON field, expected decimal).
    balances: Vec<(&'static str, String)>,
    pending_open: Option<u64>,
    /// `counts` fields checked exactly (`answered`, `refused`, …).
    counts: Vec<(&'static str, u64)>,
    /// The ledger's journal records so far (batches and definition changes): a second
    /// submission of an id would append one more.
    sequence: Option<u64>,
    from_answers: bool,
    within: Option<std::time::Duration>,
}

pub fn parse_expect(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let ledger = node.argument("a ledger name")?;
    let host = node.required_host("host")?;
    let account = node.string("account")?;
    let mut balances = Vec::new();
    for (key, field) in [
        ("debits-pending", "debits_pending"),
        ("debits-posted", "debits_posted"),
        ("credits-pending", "credits_pending"),
        ("credits-posted", "credits_posted"),
    ] {
        if let Some(n) = node.count(key)? {
            balances.push((field, n.to_string()));
        }
    }
    if !balances.is_empty() && account.is_none() {
        return Err(node.error("balances are checked for one account: add account=NAME"));
    }
    let pending_open = node.count("pending-open")?;
    let mut counts = Vec::new();
    for (key, field) in [
        ("answered", "answered"),
        ("refused", "refused"),
        ("posted-transfers", "posted_transfers"),
        ("pending-transfers", "pending_transfers"),
    ] {
        if let Some(n) = node.count(key)? {
            counts.push((field, n));
        }
    }
    let sequence = node.count("sequence")?;
    let from_answers = node.flag("from-answers")?.unwrap_or(false);
    let within = crate::steps::within(node)?;
    Ok(Box::new(ExpectLedger {
        within,
        ledger,
        host,
        account,
        balances,
        pending_open,
        counts,
        sequence,
        from_answers,
    }))
}

fn decimal(v: &Value) -> Result<u128, Failure> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Failure::new("a balance as a decimal string", v.to_string()))
}

impl Step for ExpectLedger {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        crate::steps::repeat_within(cx, self.within, |cx| self.check(cx))
    }
}

impl ExpectLedger {
    fn check(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let mut args = vec![
            "inspect",
            "ledger",
            self.ledger.as_str(),
            "--host",
            self.host.as_str(),
            "--json",
        ];
        if let Some(account) = &self.account {
            args.extend(["--account", account.as_str()]);
        }
        let view = gridctl_json(cx, &args)?;
        let accounts = view["accounts"].as_array().cloned().unwrap_or_default();
        if let Some(name) = &self.account {
            let Some(account) = accounts.iter().find(|a| a["name"] == name.as_str()) else {
                return Err(Failure::new(
                    format!("account {name} in ledger {}", self.ledger),
                    view.to_string(),
                ));
            };
            for (field, expected) in &self.balances {
                if account[*field].as_str() != Some(expected.as_str()) {
                    return Err(Failure::new(
                        format!("account {name}: {field} {expected}"),
                        account.to_string(),
                    ));
                }
            }
            cx.say(format_args!(
                "account {name}: debits {} posted + {} pending, credits {} posted + {} pending",
                account["debits_posted"],
                account["debits_pending"],
                account["credits_posted"],
                account["credits_pending"]
            ));
        }
        if let Some(open) = self.pending_open
            && view["counts"]["pending_open"].as_u64() != Some(open)
        {
            return Err(Failure::new(
                format!("{open} pending transfer(s) held"),
                view["counts"].to_string(),
            ));
        }
        for (field, expected) in &self.counts {
            if view["counts"][*field].as_u64() != Some(*expected) {
                return Err(Failure::new(
                    format!("ledger {}: {field} {expected}", self.ledger),
                    view["counts"].to_string(),
                ));
            }
        }
        if let Some(expected) = self.sequence {
            if view["sequence"].as_u64() != Some(expected) {
                return Err(Failure::new(
                    format!("ledger {}: {expected} journal record(s)", self.ledger),
                    format!("sequence {}", view["sequence"]),
                ));
            }
            cx.say(format_args!(
                "ledger {}: {expected} journal record(s)",
                self.ledger
            ));
        }
        if !self.counts.is_empty() {
            cx.say(format_args!(
                "ledger {} counts {}",
                self.ledger, view["counts"]
            ));
        }
        if self.from_answers {
            let mut observed: BTreeMap<String, Balances> = BTreeMap::new();
            for a in &accounts {
                observed.insert(
                    a["name"].as_str().unwrap_or("").to_owned(),
                    [
                        decimal(&a["debits_pending"])?,
                        decimal(&a["debits_posted"])?,
                        decimal(&a["credits_pending"])?,
                        decimal(&a["credits_posted"])?,
                    ],
                );
            }
            let records: Vec<Recorded> = journal::read(cx.work_dir(), ANSWERS)?;
            let found = ledger_balances::check(&records, &self.ledger, &observed)?;
            cx.say(found);
        }
        Ok(())
    }
}

/// The first definite answer of every ledger operation recorded at `host`, by ledger
/// (for `damage`: what the host must still answer after its store is damaged).
pub(super) fn kept_at(work: &Path, host: &str) -> Result<BTreeMap<String, Vec<Looked>>, Failure> {
    let records: Vec<Recorded> = journal::read(work, ANSWERS)?;
    let mut kept: BTreeMap<String, BTreeMap<String, Looked>> = BTreeMap::new();
    for r in records
        .into_iter()
        .filter(|r| r.host.as_deref() == Some(host))
    {
        let looked = Looked {
            op: r.op,
            outcome: r.outcome,
            amount: r.amount,
            reason: r.reason,
        };
        // A refusal without the ledger's reason journaled nothing: no answer of its.
        if looked.definite() && (looked.outcome != "refused" || looked.reason.is_some()) {
            kept.entry(r.ledger)
                .or_default()
                .entry(looked.op.clone())
                .or_insert(looked);
        }
    }
    Ok(kept
        .into_iter()
        .map(|(ledger, ops)| (ledger, ops.into_values().collect()))
        .collect())
}

/// A ledger answer as `damage` compares it, from a recorded step or a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Looked {
    pub op: String,
    /// `succeeded`, `refused`, `unknown`; `none` when a lookup found no answer.
    pub outcome: String,
    pub amount: Option<String>,
    pub reason: Option<String>,
}

impl Answer for Looked {
    fn definite(&self) -> bool {
        self.outcome != "unknown"
    }

    fn same(&self, other: &Self) -> bool {
        self == other
    }

    fn show(&self) -> String {
        format!(
            "{} {}{}{}",
            self.op,
            self.outcome,
            self.amount
                .as_deref()
                .map(|a| format!(" amount {a}"))
                .unwrap_or_default(),
            self.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        )
    }
}

impl Retained for Looked {
    /// A lookup applies nothing: what it finds is the retained answer.
    fn replayed(&self) -> bool {
        true
    }

    /// A lookup refused for this id alone (an archived answer that does not read).
    fn unknown(&self) -> Option<&str> {
        (self.outcome == "unknown")
            .then_some(self.reason.as_deref())
            .flatten()
    }
}

/// The answers `ledger` at `host` holds now for `kept`'s ids (`gridctl ledger lookup`,
/// which applies nothing), quietly. A lookup refused (exit 4: an archived answer that
/// does not read) is asked again id by id; an id refused alone is `unknown` with the
/// refusal as its reason (what the damage oracle requires to name the damaged file).
pub(super) fn looked_up(
    quiet: &Quiet,
    host: &str,
    ledger: &str,
    kept: &[Looked],
    tag: &str,
) -> Result<Vec<Looked>, Failure> {
    // One lookup of `ids`: its JSON, or the refusal it printed (exit 4).
    type Looking = Result<Result<Value, String>, Failure>;
    let lookup = |ids: &[&str], tag: &str| -> Looking {
        let fixed = ["ledger", "lookup", ledger, "--host", host, "--json"];
        let args: Vec<OsString> = fixed.iter().chain(ids).map(Into::into).collect();
        let what = "gridctl ledger lookup";
        let output = quiet
            .output(&args, tag)
            .map_err(|e| Failure::new(format!("{what} to finish"), format!("{e:?}")))?;
        if output.status.code() == Some(4) {
            return Ok(Err(output.stderr.trim().to_owned()));
        }
        if !output.status.success() {
            return Err(Failure::new(
                format!("{what} to exit 0 or 4"),
                format!("{:?}; stderr: {}", output.status, output.stderr.trim()),
            ));
        }
        super::gridctl::json_of(&output, what).map(Ok)
    };
    let ids: Vec<&str> = kept.iter().map(|k| k.op.as_str()).collect();
    if let Ok(json) = lookup(&ids, tag)? {
        return Ok(answers(kept, &json));
    }
    let mut looked = Vec::new();
    for (n, k) in kept.iter().enumerate() {
        looked.extend(match lookup(&[k.op.as_str()], &format!("{tag}-{n}"))? {
            Err(reason) => vec![Looked {
                op: k.op.clone(),
                outcome: "unknown".to_owned(),
                amount: None,
                reason: Some(reason),
            }],
            Ok(json) => answers(std::slice::from_ref(k), &json),
        });
    }
    Ok(looked)
}

/// `kept`'s answers in a lookup's JSON (`none`: no answer).
fn answers(kept: &[Looked], json: &serde_json::Value) -> Vec<Looked> {
    let answers = json["answers"].as_array().cloned().unwrap_or_default();
    kept.iter()
        .map(|k| {
            let found = answers
                .iter()
                .find(|a| a["id"].as_str() == Some(k.op.as_str()))
                .map(|a| &a["answer"]);
            match found {
                Some(answer) if !answer.is_null() => Looked {
                    op: k.op.clone(),
                    outcome: answer["outcome"].as_str().unwrap_or("").to_owned(),
                    amount: answer["amount"].as_str().map(str::to_owned),
                    reason: answer["reason"].as_str().map(str::to_owned),
                },
                _ => Looked {
                    op: k.op.clone(),
                    outcome: "none".to_owned(),
                    amount: None,
                    reason: None,
                },
            }
        })
        .collect()
}
