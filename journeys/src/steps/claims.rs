//! The coordination authority's steps (SPEC C3).
//!
//! - `claim VERB CLAIM [SUCCESSOR] op="ID" as="HOST" [membership="M"] [expect=OUTCOME]
//!   [owner="HOST"] [epoch=N]` — one `gridctl claim VERB …`; VERB is `acquire`,
//!   `enroll-successor` (with SUCCESSOR), `handoff` or `release`. Its answer is
//!   recorded for `expect-answers-unchanged`.
//! - `claim-stream M callers="A B …" ops=N claims=K seed=S [kill-leader-after=J]` —
//!   every caller sends N acquire/release commands (seeded) on K claims at once, one
//!   thread per caller; after J commands have been answered, the confirmed leader of
//!   M's authority is SIGKILLed mid-stream. Every answer is recorded.
//! - `expect-answers-unchanged M` — re-sends every recorded op id with its original
//!   command: an answer seen before must come back identical; an `unknown` one must
//!   now be definite (the original answer, or its first application). Then: never two
//!   owners of one claim at one epoch, across every answer.
//!
//! The claim steps of the read side — `expect-claim`, `expect-authority`,
//! `authority-snapshot`, `kill-leader`, `restart-stopped` — are in `authority.rs`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::authority::confirmed_leader;
use super::gridctl::{QUIET_COMMAND_TIMEOUT, Quiet};
use super::{Outcome, Step, check_outcome, journal};
use crate::context::Context;
use crate::error::Failure;
use crate::limits::STREAM_OPS_MAX;
use crate::oracles::answers_unchanged;
use crate::oracles::one_owner::{self, Owned};
use crate::process::quote_output;
use crate::seeded::Seeded;
use crate::step::{Node, ParseError};

/// The file in the work directory where claim answers are recorded.
const ANSWERS_FILE: &str = "claim-answers.jsonl";

/// One claim command and what it answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Record {
    op: String,
    caller: String,
    membership: Option<String>,
    verb: String,
    claim: String,
    successor: Option<String>,
    outcome: String,
    owner: Option<String>,
    epoch: Option<u64>,
    detail: String,
}

impl Record {
    /// gridctl's arguments (without `--state`, which `Context::gridctl` and `Quiet` add).
    fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "claim".into(),
            self.verb.clone().into(),
            self.claim.clone().into(),
        ];
        if let Some(s) = &self.successor {
            args.push(s.into());
        }
        args.extend([
            "--op".into(),
            self.op.clone().into(),
            "--as".into(),
            self.caller.clone().into(),
            "--json".into(),
        ]);
        if let Some(m) = &self.membership {
            args.extend(["--membership".into(), m.into()]);
        }
        args
    }

    /// Fills in the answer from gridctl's JSON.
    fn answered(&mut self, json: &serde_json::Value) {
        let text = |k: &str| json.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        self.outcome = text("outcome").unwrap_or_else(|| "no-answer".to_owned());
        self.owner = text("owner");
        self.epoch = json.get("epoch").and_then(|v| v.as_u64());
        self.detail = text("detail").unwrap_or_default();
    }

    /// An answer the authority gave (not `unknown`, not a refusal to send).
    fn definite(&self) -> bool {
        matches!(self.outcome.as_str(), "succeeded" | "failed")
    }
}

impl answers_unchanged::Answer for Record {
    /// Definite for the oracle: an answer the authority gave, or a refusal (re-sent, it
    /// must be refused the same way).
    fn definite(&self) -> bool {
        Record::definite(self) || self.outcome == "refused"
    }

    /// Every field: the op's command and all of its answer.
    fn same(&self, other: &Record) -> bool {
        self == other
    }

    fn show(&self) -> String {
        format!("{self:?}")
    }
}

fn read_records(cx: &Context<'_>) -> Result<Vec<Record>, Failure> {
    journal::read(cx.work_dir(), ANSWERS_FILE)
}

fn write_records(cx: &Context<'_>, records: &[Record]) -> Result<(), Failure> {
    journal::rewrite(cx.work_dir(), ANSWERS_FILE, records)
}

/// One owner per claim and epoch across every definite answer (the `one_owner` oracle).
fn check_epochs(records: &[Record]) -> Result<(), Failure> {
    one_owner::check(records.iter().filter(|r| r.definite()).filter_map(|r| {
        Some(Owned {
            op: &r.op,
            claim: &r.claim,
            owner: r.owner.as_deref()?,
            epoch: r.epoch?,
        })
    }))
}

// ---- claim ---------------------------------------------------------------------------

struct ClaimStep {
    record: Record,
    expect: Outcome,
    owner: Option<String>,
    epoch: Option<u64>,
}

pub fn parse_claim(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let verb = node.argument("a verb: acquire, enroll-successor, handoff or release")?;
    if !["acquire", "enroll-successor", "handoff", "release"].contains(&verb.as_str()) {
        return Err(node
            .error(format!("`claim {verb}`: no such command"))
            .with_help("one of acquire, enroll-successor, handoff, release"));
    }
    let claim = node.argument("a claim name")?;
    let successor = if verb == "enroll-successor" {
        Some(node.argument("the successor's name")?)
    } else {
        None
    };
    let op = node.required("op", "ID")?;
    let caller = node
        .string("as")?
        .ok_or_else(|| node.error("`claim` needs as=\"HOST\" (the calling host)"))?;
    let membership = node.string("membership")?;
    let owner = node.string("owner")?;
    let epoch = node.count("epoch")?;
    let expect = Outcome::expected(node)?;
    Ok(Box::new(ClaimStep {
        record: Record {
            op,
            caller,
            membership,
            verb,
            claim,
            successor,
            outcome: String::new(),
            owner: None,
            epoch: None,
            detail: String::new(),
        },
        expect,
        owner,
        epoch,
    }))
}

impl Step for ClaimStep {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let output = cx.gridctl(&self.record.args())?;
        let json = check_outcome(cx, &output, self.expect)?;
        let mut record = self.record.clone();
        record.answered(&json);
        if let Some(owner) = &self.owner
            && record.owner.as_ref() != Some(owner)
        {
            return Err(Failure::new(format!("owner {owner}"), json.to_string()));
        }
        if let Some(epoch) = self.epoch
            && record.epoch != Some(epoch)
        {
            return Err(Failure::new(format!("epoch {epoch}"), json.to_string()));
        }
        let mut records = read_records(cx)?;
        records.push(record);
        write_records(cx, &records)
    }
}

// ---- claim-stream --------------------------------------------------------------------

struct Stream {
    membership: String,
    callers: Vec<String>,
    ops: u64,
    claims: u64,
    seed: u64,
    kill_after: Option<u64>,
}

pub fn parse_stream(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let membership = node.argument("a membership")?;
    let callers: Vec<String> = node
        .required("callers", "A B …")?
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let ops = node
        .count("ops")?
        .ok_or_else(|| node.error("`claim-stream` needs ops=N (per caller)"))?;
    if ops == 0 || ops * callers.len() as u64 > STREAM_OPS_MAX {
        return Err(node.error(format!(
            "`claim-stream` sends 1 to STREAM_OPS_MAX ({STREAM_OPS_MAX}) commands in all"
        )));
    }
    let claims = node.count("claims")?.unwrap_or(4).max(1);
    let seed = node.count("seed")?.unwrap_or(1);
    let kill_after = node.count("kill-leader-after")?;
    Ok(Box::new(Stream {
        membership,
        callers,
        ops,
        claims,
        seed,
        kill_after,
    }))
}

impl Step for Stream {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let quiet = Quiet::new(cx);
        let answered = Arc::new(AtomicUsize::new(0));
        cx.say(format_args!(
            "{} callers send {} acquire/release commands each on {} claims (seed {})",
            self.callers.len(),
            self.ops,
            self.claims,
            self.seed
        ));
        let mut threads = Vec::new();
        for (index, caller) in self.callers.iter().enumerate() {
            let (quiet, answered) = (quiet.clone(), answered.clone());
            let caller = caller.clone();
            let membership = self.membership.clone();
            let (ops, claims, seed) = (self.ops, self.claims, self.seed);
            let mut rng = Seeded::new(self.seed ^ ((index as u64 + 1) << 32));
            threads.push(std::thread::spawn(move || {
                let mut records = Vec::new();
                for j in 0..ops {
                    let claim = format!("stream-{}", rng.below(claims));
                    let verb = if rng.one_in(3) { "release" } else { "acquire" };
                    let mut record = Record {
                        op: format!("stream{seed}-{caller}-{j}", seed = seed),
                        caller: caller.clone(),
                        membership: Some(membership.clone()),
                        verb: verb.to_owned(),
                        claim,
                        successor: None,
                        outcome: String::new(),
                        owner: None,
                        epoch: None,
                        detail: String::new(),
                    };
                    match quiet.output(&record.args(), &record.op) {
                        Ok(output) => match serde_json::from_str(output.stdout.trim()) {
                            Ok(json) => record.answered(&json),
                            Err(_) => record.outcome = "no-answer".to_owned(),
                        },
                        Err(e) => {
                            record.outcome = "no-answer".to_owned();
                            record.detail = format!("{e:?}");
                        }
                    }
                    records.push(record);
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                records
            }));
        }
        if let Some(after) = self.kill_after {
            let deadline = Instant::now() + QUIET_COMMAND_TIMEOUT * self.ops as u32;
            while answered.load(Ordering::SeqCst) < after as usize && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let leader = confirmed_leader(cx, &self.membership)?;
            cx.say(format_args!(
                "after {} answers: SIGKILL the leader `{leader}` mid-stream",
                answered.load(Ordering::SeqCst)
            ));
            cx.kill_host(&leader)?;
        }
        let mut all = read_records(cx)?;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for thread in threads {
            let records = thread
                .join()
                .map_err(|_| Failure::new("every caller thread to finish", "one panicked"))?;
            for r in records {
                *counts.entry(r.outcome.clone()).or_default() += 1;
                all.push(r);
            }
        }
        cx.say(format_args!(
            "answers: {}",
            counts
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        write_records(cx, &all)?;
        check_epochs(&all)
    }
}

// ---- expect-answers-unchanged --------------------------------------------------------

struct Unchanged {
    membership: String,
}

pub fn parse_unchanged(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(Unchanged {
        membership: node.argument("a membership")?,
    }))
}

impl Step for Unchanged {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let quiet = Quiet::new(cx);
        let mut records = read_records(cx)?;
        let (mut same, mut resolved, mut skipped) = (0, 0, 0);
        for (i, record) in records.iter_mut().enumerate() {
            if record
                .membership
                .as_deref()
                .is_some_and(|m| m != self.membership)
            {
                continue;
            }
            // Refused before sending (the caller's host was down): never sent, nothing
            // to compare.
            if record.outcome == "refused" && record.detail.contains("nothing was sent") {
                skipped += 1;
                continue;
            }
            let tag = format!("resend-{i}-{}", record.op);
            let stdout = quiet
                .output(&record.args(), &tag)
                .map_err(|e| Failure::new(format!("an answer to {}", record.op), format!("{e:?}")))?
                .stdout;
            let json: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|_| {
                Failure::new(
                    format!("an answer to re-sent op {}", record.op),
                    format!("stdout: {}", quote_output(&stdout)),
                )
            })?;
            let mut again = record.clone();
            again.answered(&json);
            let first_definite = answers_unchanged::Answer::definite(record);
            let mut original = first_definite.then(|| record.clone());
            answers_unchanged::check(&record.op, &mut original, &again, "re-sent")?;
            if first_definite {
                same += 1;
            } else {
                if !again.definite() {
                    return Err(Failure::new(
                        format!(
                            "a definite answer to re-sent op {} (first: {})",
                            record.op, record.outcome
                        ),
                        format!("{again:?}"),
                    ));
                }
                *record = again;
                resolved += 1;
            }
        }
        cx.say(format_args!(
            "re-sent every op id: {same} original answers unchanged, {resolved} unknown ones now definite, {skipped} never sent"
        ));
        write_records(cx, &records)?;
        check_epochs(&records)?;
        cx.say("never two owners of one claim at one epoch");
        Ok(())
    }
}
