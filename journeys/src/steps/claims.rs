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
//! - `expect-claim CLAIM [membership="M"] owner="HOST" epoch=N` — `gridctl claim show`
//!   after a barrier; or `barrier="unknown"` when no barrier can pass.
//! - `expect-authority M [barrier="ok"|"unknown"] [voters=N] [agree=#true]
//!   [snapshot-files=N] [purged=#true] [not-leader="HOST"] [installed="HOST=N"]` —
//!   `gridctl inspect authority M --json`; `installed`: snapshots HOST installed from a
//!   leader since it started; `purged`: every running voter's log is purged through
//!   its snapshot (waited for, bounded: a leader postpones a purge while a replication
//!   request in flight uses the logs). `agree` waits (bounded) until every voter has applied the same
//!   index in the same term; `snapshot-files` and `purged` hold at every voter.
//! - `authority-snapshot M host="HOST"` — builds a snapshot at HOST now.
//! - `kill-leader M` — SIGKILLs the host the read barrier confirms as leader.
//! - `restart-stopped` — starts again every installed host that is not running.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Outcome, Step, check_outcome};
use crate::error::Failure;
use crate::parse::{Node, ParseError};
use crate::process::{describe_status, run_bounded};
use crate::runner::{Context, quote_output};

/// The file in the work directory where claim answers are recorded.
const ANSWERS_FILE: &str = "claim-answers.jsonl";
/// The longest one claim command may take (its write timeout, a forward, a start).
const CLAIM_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The most commands one `claim-stream` sends.
const STREAM_OPS_MAX: u64 = 2_000;
/// How long `expect-authority … agree=#true` waits for the voters to agree.
const AGREE_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// gridctl's arguments; `state` when run quietly (`Context::gridctl` adds it).
    fn args(&self, state: Option<&Path>) -> Vec<OsString> {
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
        if let Some(state) = state {
            args.extend(["--state".into(), state.as_os_str().to_owned()]);
        }
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

fn answers_path(cx: &Context<'_>) -> PathBuf {
    cx.work_dir().join(ANSWERS_FILE)
}

fn read_records(cx: &Context<'_>) -> Result<Vec<Record>, Failure> {
    let text = std::fs::read_to_string(answers_path(cx)).unwrap_or_default();
    text.lines()
        .map(|l| {
            serde_json::from_str(l)
                .map_err(|e| Failure::new("readable recorded answers", e.to_string()))
        })
        .collect()
}

fn write_records(cx: &Context<'_>, records: &[Record]) -> Result<(), Failure> {
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).expect("records serialize"));
        text.push('\n');
    }
    std::fs::write(answers_path(cx), text)
        .map_err(|e| Failure::new("recorded answers written", e.to_string()))
}

/// Runs gridctl without telling the story (many commands at once), bounded.
fn run_quiet(
    gridctl: &Path,
    work: &Path,
    args: &[OsString],
    tag: &str,
) -> Result<(Option<i32>, String), String> {
    let logs = work.join("quiet");
    let _ = std::fs::create_dir_all(&logs);
    let mut command = Command::new(gridctl);
    command.args(args).current_dir(work);
    let out = logs.join(format!("{tag}.out"));
    let err = logs.join(format!("{tag}.err"));
    match run_bounded(command, &out, &err, CLAIM_COMMAND_TIMEOUT) {
        Ok(output) => Ok((output.status.code(), output.stdout)),
        Err(e) => Err(format!("{e:?}")),
    }
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
    let op = node
        .string("op")?
        .ok_or_else(|| node.error("`claim` needs op=\"ID\""))?;
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
        let output = cx.gridctl(&self.record.args(None))?;
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
        .string("callers")?
        .ok_or_else(|| node.error("`claim-stream` needs callers=\"A B …\""))?
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

/// splitmix64: a seeded sequence, the same on every machine.
pub(crate) fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Step for Stream {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let gridctl = cx.gridctl_path().to_owned();
        let work = cx.work_dir().to_owned();
        let state = cx.state_dir().to_owned();
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
            let (gridctl, work, state, answered) = (
                gridctl.clone(),
                work.clone(),
                state.clone(),
                answered.clone(),
            );
            let caller = caller.clone();
            let membership = self.membership.clone();
            let (ops, claims, seed) = (self.ops, self.claims, self.seed);
            let mut rng = self.seed ^ ((index as u64 + 1) << 32);
            threads.push(std::thread::spawn(move || {
                let mut records = Vec::new();
                for j in 0..ops {
                    let claim = format!("stream-{}", next(&mut rng) % claims);
                    let verb = if next(&mut rng).is_multiple_of(3) {
                        "release"
                    } else {
                        "acquire"
                    };
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
                    match run_quiet(&gridctl, &work, &record.args(Some(&state)), &record.op) {
                        Ok((_, stdout)) => match serde_json::from_str(stdout.trim()) {
                            Ok(json) => record.answered(&json),
                            Err(_) => record.outcome = "no-answer".to_owned(),
                        },
                        Err(e) => {
                            record.outcome = "no-answer".to_owned();
                            record.detail = e;
                        }
                    }
                    records.push(record);
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                records
            }));
        }
        if let Some(after) = self.kill_after {
            let deadline = Instant::now() + CLAIM_COMMAND_TIMEOUT * self.ops as u32;
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

/// Never two owners of one claim at one epoch, across every definite answer.
fn check_epochs(records: &[Record]) -> Result<(), Failure> {
    let mut owners: BTreeMap<(String, u64), (String, String)> = BTreeMap::new();
    for r in records.iter().filter(|r| r.definite()) {
        let (Some(owner), Some(epoch)) = (&r.owner, r.epoch) else {
            continue;
        };
        if epoch == 0 {
            continue;
        }
        match owners.get(&(r.claim.clone(), epoch)) {
            Some((seen, by)) if seen != owner => {
                return Err(Failure::new(
                    format!("one owner of `{}` at epoch {epoch}", r.claim),
                    format!(
                        "`{seen}` (answer to {by}) and `{owner}` (answer to {})",
                        r.op
                    ),
                ));
            }
            Some(_) => {}
            None => {
                owners.insert((r.claim.clone(), epoch), (owner.clone(), r.op.clone()));
            }
        }
    }
    Ok(())
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
        let gridctl = cx.gridctl_path().to_owned();
        let work = cx.work_dir().to_owned();
        let state = cx.state_dir().to_owned();
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
            let (_, stdout) = run_quiet(&gridctl, &work, &record.args(Some(&state)), &tag)
                .map_err(|e| Failure::new(format!("an answer to {}", record.op), e))?;
            let json: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|_| {
                Failure::new(
                    format!("an answer to re-sent op {}", record.op),
                    format!("stdout: {}", quote_output(&stdout)),
                )
            })?;
            let mut again = record.clone();
            again.answered(&json);
            if record.definite() || record.outcome == "refused" {
                if again != *record {
                    return Err(Failure::new(
                        format!("the original answer of op {}: {record:?}", record.op),
                        format!("{again:?}"),
                    ));
                }
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

// ---- expect-claim --------------------------------------------------------------------

struct ExpectClaim {
    claim: String,
    membership: Option<String>,
    owner: Option<String>,
    epoch: Option<u64>,
    barrier: String,
}

pub fn parse_expect_claim(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(ExpectClaim {
        claim: node.argument("a claim name")?,
        membership: node.string("membership")?,
        owner: node.string("owner")?,
        epoch: node.count("epoch")?,
        barrier: node.string("barrier")?.unwrap_or_else(|| "ok".to_owned()),
    }))
}

impl Step for ExpectClaim {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let mut args: Vec<OsString> = vec![
            "claim".into(),
            "show".into(),
            self.claim.clone().into(),
            "--json".into(),
        ];
        if let Some(m) = &self.membership {
            args.extend(["--membership".into(), m.into()]);
        }
        let output = cx.gridctl(&args)?;
        let json: serde_json::Value = serde_json::from_str(output.stdout.trim()).map_err(|_| {
            Failure::new(
                "claim show JSON",
                format!(
                    "{}; stdout: {}; stderr: {}",
                    describe_status(&output.status),
                    quote_output(&output.stdout),
                    quote_output(&output.stderr)
                ),
            )
        })?;
        cx.say(format_args!("→ {json}"));
        let barrier = json.get("barrier").and_then(|b| b.as_str()).unwrap_or("");
        if barrier != self.barrier {
            return Err(Failure::new(
                format!("barrier {}", self.barrier),
                json.to_string(),
            ));
        }
        if let Some(owner) = &self.owner
            && json.get("owner").and_then(|o| o.as_str()) != Some(owner)
        {
            return Err(Failure::new(format!("owner {owner}"), json.to_string()));
        }
        if let Some(epoch) = self.epoch
            && json.get("epoch").and_then(|o| o.as_u64()) != Some(epoch)
        {
            return Err(Failure::new(format!("epoch {epoch}"), json.to_string()));
        }
        Ok(())
    }
}

// ---- expect-authority ----------------------------------------------------------------

struct ExpectAuthority {
    membership: String,
    barrier: Option<String>,
    voters: Option<u64>,
    agree: bool,
    snapshot_files: Option<u64>,
    purged: bool,
    not_leader: Option<String>,
    /// `(host, n)`: snapshots host installed from a leader since it started.
    installed: Option<(String, u64)>,
}

pub fn parse_expect_authority(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let membership = node.argument("a membership")?;
    let flag = |node: &mut Node<'_>, key: &str| -> Result<bool, ParseError> {
        match node.property(key)? {
            None => Ok(false),
            Some(entry) => match entry.value() {
                kdl::KdlValue::Bool(b) => Ok(*b),
                _ => Err(node.entry_error(entry, format!("`{key}` is #true or #false"))),
            },
        }
    };
    Ok(Box::new(ExpectAuthority {
        membership,
        barrier: node.string("barrier")?,
        voters: node.count("voters")?,
        agree: flag(node, "agree")?,
        snapshot_files: node.count("snapshot-files")?,
        purged: flag(node, "purged")?,
        not_leader: node.string("not-leader")?,
        installed: match node.string("installed")? {
            None => None,
            Some(text) => {
                let parsed = text
                    .split_once('=')
                    .and_then(|(h, n)| Some((h.to_owned(), n.parse::<u64>().ok()?)));
                Some(parsed.ok_or_else(|| node.error("`installed` is \"HOST=N\""))?)
            }
        },
    }))
}

fn inspect(
    cx: &mut Context<'_>,
    membership: &str,
    quiet: bool,
) -> Result<serde_json::Value, Failure> {
    let args: Vec<OsString> = vec![
        "inspect".into(),
        "authority".into(),
        membership.into(),
        "--json".into(),
    ];
    let output = if quiet {
        let state = cx.state_dir().to_owned();
        let mut args = args;
        args.extend(["--state".into(), state.into_os_string()]);
        let gridctl = cx.gridctl_path().to_owned();
        let work = cx.work_dir().to_owned();
        let (_, stdout) = run_quiet(&gridctl, &work, &args, "inspect")
            .map_err(|e| Failure::new("gridctl inspect authority to finish", e))?;
        stdout
    } else {
        cx.gridctl(&args)?.stdout
    };
    serde_json::from_str(output.trim()).map_err(|_| {
        Failure::new(
            "inspect authority JSON",
            format!("stdout: {}", quote_output(&output)),
        )
    })
}

/// A member whose log is purged through its snapshot.
fn purged_through_snapshot(member: &serde_json::Value) -> bool {
    let index = |k: &str| member.get(k).and_then(|v| v.as_u64());
    matches!((index("purged"), index("snapshot")), (Some(p), Some(s)) if p >= s)
}

fn members(json: &serde_json::Value) -> Vec<&serde_json::Value> {
    json.get("members")
        .and_then(|m| m.as_array())
        .map(|m| m.iter().collect())
        .unwrap_or_default()
}

impl Step for ExpectAuthority {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let mut json = inspect(cx, &self.membership, false)?;
        // `barrier="ok"` waits (bounded) for an election to end: a leader is elected
        // within a few election timeouts after a voter died.
        if self.barrier.as_deref() == Some("ok") {
            let started = Instant::now();
            while json.get("barrier").and_then(|b| b.as_str()) != Some("ok")
                && started.elapsed() < AGREE_TIMEOUT
            {
                std::thread::sleep(Duration::from_millis(200));
                json = inspect(cx, &self.membership, true)?;
            }
            if started.elapsed() > Duration::from_millis(100) {
                cx.say(format_args!(
                    "the barrier passed after {:.1} s (an election)",
                    started.elapsed().as_secs_f64()
                ));
            }
        }
        if self.agree {
            let deadline = Instant::now() + AGREE_TIMEOUT;
            loop {
                let views: Vec<(Option<u64>, Option<u64>)> = members(&json)
                    .iter()
                    .map(|m| {
                        (
                            m.get("term").and_then(|t| t.as_u64()),
                            m.get("last_applied").and_then(|t| t.as_u64()),
                        )
                    })
                    .collect();
                let agreed = !views.is_empty()
                    && views
                        .iter()
                        .all(|v| v.0.is_some() && v.1.is_some() && *v == views[0]);
                if agreed {
                    cx.say(format_args!(
                        "every voter applied through {} in term {}",
                        views[0].1.unwrap_or(0),
                        views[0].0.unwrap_or(0)
                    ));
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Failure::new(
                        format!(
                            "every voter to agree within AGREE_TIMEOUT ({} s)",
                            AGREE_TIMEOUT.as_secs()
                        ),
                        format!("(term, applied) per voter: {views:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
                json = inspect(cx, &self.membership, true)?;
            }
        }
        // `purged` waits (bounded) for every running voter to purge through its
        // snapshot: a leader postpones purging while a replication request in flight
        // still uses the logs (e.g. to a voter that just died).
        if self.purged {
            let deadline = Instant::now() + AGREE_TIMEOUT;
            while !members(&json)
                .iter()
                .all(|m| m.get("unreachable").is_some() || purged_through_snapshot(m))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(200));
                json = inspect(cx, &self.membership, true)?;
            }
        }
        let field = |k: &str| json.get(k).cloned().unwrap_or(serde_json::Value::Null);
        cx.say(format_args!(
            "→ barrier {}, leader {}, voters {}, term {}",
            field("barrier"),
            field("leader"),
            field("voters"),
            field("term")
        ));
        if let Some(barrier) = &self.barrier
            && field("barrier").as_str() != Some(barrier)
        {
            return Err(Failure::new(
                format!("barrier {barrier}"),
                format!("{} ({})", field("barrier"), field("barrier_detail")),
            ));
        }
        if self.barrier.as_deref() == Some("unknown") && !field("leader").is_null() {
            return Err(Failure::new(
                "no leader shown when the barrier is unknown",
                format!("leader {}", field("leader")),
            ));
        }
        if let Some(n) = self.voters {
            let count = field("voters").as_array().map_or(0, |v| v.len()) as u64;
            if count != n {
                return Err(Failure::new(
                    format!("{n} voters"),
                    field("voters").to_string(),
                ));
            }
        }
        if let Some(host) = &self.not_leader
            && field("leader").as_str() == Some(host)
        {
            return Err(Failure::new(
                format!("a leader other than {host}"),
                field("leader").to_string(),
            ));
        }
        for m in members(&json) {
            let name = m.get("participant").cloned().unwrap_or_default();
            if let Some(n) = self.snapshot_files {
                let files = m
                    .get("snapshot_files")
                    .and_then(|f| f.as_array())
                    .map_or(0, |f| f.len()) as u64;
                if files != n {
                    return Err(Failure::new(
                        format!("{n} snapshot file(s) at {name}"),
                        m.get("snapshot_files")
                            .cloned()
                            .unwrap_or_default()
                            .to_string(),
                    ));
                }
            }
            if self.purged && m.get("unreachable").is_none() && !purged_through_snapshot(m) {
                return Err(Failure::new(
                    format!("a log purged through the snapshot at {name}"),
                    m.to_string(),
                ));
            }
        }
        if let Some((host, n)) = &self.installed {
            let member = members(&json)
                .into_iter()
                .find(|m| m.get("participant").and_then(|p| p.as_str()) == Some(host));
            let count = member
                .and_then(|m| m.get("snapshots_installed"))
                .and_then(|c| c.as_u64());
            cx.say(format_args!(
                "  {host} installed {count:?} snapshot(s) from the leader"
            ));
            if count != Some(*n) {
                return Err(Failure::new(
                    format!("{host} installed exactly {n} snapshot(s) since it started"),
                    format!("{count:?}"),
                ));
            }
        }
        if self.snapshot_files.is_some() || self.purged {
            for m in members(&json) {
                cx.say(format_args!(
                    "  {}: snapshot {} purged {} files {}",
                    m.get("participant").cloned().unwrap_or_default(),
                    m.get("snapshot").cloned().unwrap_or_default(),
                    m.get("purged").cloned().unwrap_or_default(),
                    m.get("snapshot_files").cloned().unwrap_or_default()
                ));
            }
        }
        Ok(())
    }
}

// ---- authority-snapshot, kill-leader, restart-stopped -------------------------------

struct Snapshot {
    membership: String,
    host: String,
}

pub fn parse_snapshot(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let membership = node.argument("a membership")?;
    let host = node
        .string("host")?
        .ok_or_else(|| node.error("`authority-snapshot` needs host=\"HOST\""))?;
    Ok(Box::new(Snapshot { membership, host }))
}

impl Step for Snapshot {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let args: Vec<OsString> = vec![
            "authority".into(),
            "snapshot".into(),
            self.membership.clone().into(),
            "--host".into(),
            self.host.clone().into(),
        ];
        let output = cx.gridctl(&args)?;
        cx.say(format_args!("→ {}", output.stdout.trim()));
        if !output.status.success() {
            return Err(Failure::new(
                "a snapshot",
                format!(
                    "{}; stderr: {}",
                    describe_status(&output.status),
                    quote_output(&output.stderr)
                ),
            ));
        }
        Ok(())
    }
}

/// The leader a read barrier confirms (waiting a few elections for one).
fn confirmed_leader(cx: &mut Context<'_>, membership: &str) -> Result<String, Failure> {
    let deadline = Instant::now() + AGREE_TIMEOUT;
    loop {
        let json = inspect(cx, membership, true)?;
        if let Some(leader) = json.get("leader").and_then(|l| l.as_str()) {
            return Ok(leader.to_owned());
        }
        if Instant::now() > deadline {
            return Err(Failure::new(
                "a leader confirmed by a read barrier",
                format!("{} ({})", json["barrier"], json["barrier_detail"]),
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct KillLeader {
    membership: String,
}

pub fn parse_kill_leader(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(KillLeader {
        membership: node.argument("a membership")?,
    }))
}

impl Step for KillLeader {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let leader = confirmed_leader(cx, &self.membership)?;
        cx.say(format_args!("the leader is `{leader}`: SIGKILL"));
        cx.kill_host(&leader)?;
        Ok(())
    }
}

struct RestartStopped;

pub fn parse_restart_stopped(_node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(RestartStopped))
}

impl Step for RestartStopped {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let hosts = std::fs::read_dir(cx.state_dir().join("hosts"))
            .map(|entries| {
                let mut names: Vec<String> = entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect();
                names.sort();
                names
            })
            .unwrap_or_default();
        for host in hosts {
            if !cx.host_running(&host) {
                cx.say(format_args!("start `{host}` again"));
                cx.start_host(&host, None)?;
            }
        }
        Ok(())
    }
}
