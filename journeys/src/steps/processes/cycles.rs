//! `process-cycles receiver="R" caller="C" mailbox="M" cycles=N seed=S
//! [marker="TEXT"]` — N seeded cycles (≤ [`PROCESS_CYCLES_MAX`], within
//! [`PROCESS_CYCLES_TIMEOUT`]), each one run of `demo.count` at R for C under an op id
//! of its own, one of:
//! - `direct` — must succeed;
//! - `mailbox` — through `mailbox:M`, its arguments carrying `marker=TEXT`: succeeded,
//!   or unknown while it travels;
//! - `receiver-kill` — `delay_ms` seeded (≤ [`CYCLE_DELAY_MS_MAX`], 250 ms), R SIGKILLed at a seeded moment
//!   and restarted;
//! - `caller-kill` — the same, C SIGKILLed;
//! - `lost-reply` — R restarted with `process-reply=drop-reply`: the run is `unknown`,
//!   the same op asked again is terminal.
//!
//! Then, within [`PROCESS_SETTLE_TIMEOUT`], every op not terminal is asked again until
//! it is, or until R holds it `unknown` (its unit held); every op is asked once more:
//! an outcome never changes once terminal (identical result), an `unknown` one at R
//! stays `unknown` (nothing retried it). With U the runs R holds unknown, R's grant
//! for C must hold U units `unknown`, and k = demo.count's increase − the runs R
//! holds succeeded must be 0 ≤ k ≤ U (no run executed twice). k unknown runs are
//! resolved succeeded and the rest failed; then the counter's increase equals the
//! runs succeeded at R, which the grant consumed, and nothing is reserved or unknown.
//!
//! The invariants are the oracles': `answers_unchanged` (every answer of every op),
//! `runs_once` (the counter against the runs succeeded and unknown) and
//! `units_conserved` (the grant's units, while runs are held unknown and after).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{RunAnswer, ask, is_terminal, run_args};
use crate::context::Context;
use crate::error::Failure;
use crate::limits::{CYCLE_DELAY_MS_MAX, CYCLE_MAILBOX_WAIT_MS, PROCESS_CYCLES_MAX};
use crate::oracles::answers_unchanged;
use crate::oracles::runs_once::{self, Runs};
use crate::oracles::units_conserved::{self, Units};
use crate::seeded::Seeded;
use crate::step::Step;
use crate::step::{Node, ParseError};
use crate::steps::gridctl::Quiet;
use crate::steps::shorten;

/// How long the cycles of one `process-cycles` step may take in all.
pub const PROCESS_CYCLES_TIMEOUT: Duration = Duration::from_secs(900);
/// How long `process-cycles` asks again for runs whose outcome is not settled yet
/// (mailbox runs still travelling, waits a restarted caller resumes).
pub const PROCESS_SETTLE_TIMEOUT: Duration = Duration::from_secs(90);

struct Cycles {
    receiver: String,
    caller: String,
    mailbox: String,
    cycles: u64,
    seed: u64,
    marker: String,
}

pub fn parse_cycles(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let receiver = node.required_host("receiver")?;
    let caller = node.required_host("caller")?;
    let mailbox = node.required_host("mailbox")?;
    let cycles = node.count("cycles")?.unwrap_or(10);
    if cycles == 0 || cycles > PROCESS_CYCLES_MAX {
        return Err(node.error(format!(
            "cycles must be 1 to PROCESS_CYCLES_MAX ({PROCESS_CYCLES_MAX})"
        )));
    }
    let seed = node.count("seed")?.unwrap_or(1);
    let marker = node
        .string("marker")?
        .unwrap_or_else(|| "grid-cycles-secret-marker".to_owned());
    if marker.is_empty() || marker.contains(char::is_whitespace) || marker.contains('=') {
        return Err(node.error("`marker` is one word without `=`"));
    }
    Ok(Box::new(Cycles {
        receiver,
        caller,
        mailbox,
        cycles,
        seed,
        marker,
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Direct,
    Mailbox,
    ReceiverKill,
    CallerKill,
    LostReply,
    /// Through the mailbox, with the receiver or the mailbox host SIGKILLed.
    MailboxKill,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Mailbox => "mailbox",
            Kind::ReceiverKill => "receiver-kill",
            Kind::CallerKill => "caller-kill",
            Kind::LostReply => "lost-reply",
            Kind::MailboxKill => "mailbox-kill",
        }
    }
}

struct CycleOp {
    op: String,
    kind: Kind,
    args: Vec<OsString>,
    answers: Vec<RunAnswer>,
    /// The first terminal answer: the original every later one must equal.
    terminal: Option<RunAnswer>,
}

/// Records an answer for `op`, checking that a terminal outcome never changes.
fn take_answer(op: &mut CycleOp, answer: RunAnswer, when: &str) -> Result<(), Failure> {
    if answer.mismatch {
        return Err(Failure::new(
            format!(
                "gridctl's exit status to match its outcome ({when}, op {})",
                op.op
            ),
            answer.show(),
        ));
    }
    // Only gridctl finding the caller down (its SIGKILL landed before gridctl
    // connected) refuses: nothing was submitted.
    if answer.outcome == "refused" && !(op.kind == Kind::CallerKill && op.answers.is_empty()) {
        return Err(Failure::new(
            format!("no run of the cycles refused ({when}, op {})", op.op),
            answer.show(),
        ));
    }
    let named = format!("{} ({})", op.op, op.kind.name());
    answers_unchanged::check(&named, &mut op.terminal, &answer, when)?;
    op.answers.push(answer);
    Ok(())
}

impl Cycles {
    fn args(&self, op: &str, kind: Kind, delay_ms: u64) -> Vec<OsString> {
        let mut args = Vec::new();
        let mut via = None;
        match kind {
            Kind::Mailbox => {
                via = Some(format!("mailbox:{}", self.mailbox));
                args.push(("marker".to_owned(), self.marker.clone()));
            }
            Kind::MailboxKill => {
                via = Some(format!("mailbox:{}", self.mailbox));
                args.push(("marker".to_owned(), self.marker.clone()));
                args.push(("delay_ms".to_owned(), delay_ms.to_string()));
            }
            Kind::ReceiverKill | Kind::CallerKill => {
                args.push(("delay_ms".to_owned(), delay_ms.to_string()));
            }
            Kind::Direct | Kind::LostReply => {}
        }
        let mut out = run_args(
            &self.receiver,
            "demo.count",
            &self.caller,
            op,
            via.as_deref(),
            &args,
            None,
        );
        if via.is_some() {
            out.push("--wait-ms".into());
            out.push(CYCLE_MAILBOX_WAIT_MS.to_string().into());
        }
        out
    }

    fn check_elapsed(&self, started: Instant, cycle: u64) -> Result<(), Failure> {
        if started.elapsed() > PROCESS_CYCLES_TIMEOUT {
            return Err(Failure::new(
                format!(
                    "{} cycles within PROCESS_CYCLES_TIMEOUT ({} s)",
                    self.cycles,
                    PROCESS_CYCLES_TIMEOUT.as_secs()
                ),
                format!("{cycle} done"),
            ));
        }
        Ok(())
    }

    /// The receiver's numbers: (demo.count counter, runs, the caller's grant).
    fn receiver_view(&self, quiet: &Quiet, tag: &str) -> Result<(u64, Value, Value), Failure> {
        let processes = quiet.json(
            &["inspect", "processes", "--host", &self.receiver, "--json"],
            &format!("{tag}-processes"),
        )?;
        let grants = quiet.json(
            &["inspect", "grants", "--host", &self.receiver, "--json"],
            &format!("{tag}-grants"),
        )?;
        let mine: Vec<&Value> = grants["grants"]
            .as_array()
            .map(|g| {
                g.iter()
                    .filter(|g| g["caller"] == self.caller.as_str() && g["retired"] != true)
                    .collect()
            })
            .unwrap_or_default();
        let [grant] = mine.as_slice() else {
            return Err(Failure::new(
                format!(
                    "exactly one grant of {} for {} (not retired)",
                    self.receiver, self.caller
                ),
                shorten(&grants.to_string(), 600),
            ));
        };
        Ok((
            processes["demo_count"].as_u64().unwrap_or(0),
            processes["runs"].clone(),
            (*grant).clone(),
        ))
    }

    fn run_cycles(
        &self,
        cx: &mut Context<'_>,
        quiet: &Quiet,
        ops: &mut Vec<CycleOp>,
    ) -> Result<BTreeMap<(Kind, String), u64>, Failure> {
        let started = Instant::now();
        let mut rng = Seeded::new(self.seed);
        let mut tally: BTreeMap<(Kind, String), u64> = BTreeMap::new();
        for cycle in 0..self.cycles {
            self.check_elapsed(started, cycle)?;
            let kind = match rng.below(6) {
                0 => Kind::Direct,
                1 => Kind::Mailbox,
                2 => Kind::ReceiverKill,
                3 => Kind::CallerKill,
                4 => Kind::MailboxKill,
                _ => Kind::LostReply,
            };
            let mailbox_victim = rng.one_in(2);
            let delay_ms = rng.below(CYCLE_DELAY_MS_MAX + 1);
            let kill_after = Duration::from_millis(rng.below(delay_ms + 100));
            let op_id = format!("pc{}-{cycle:04}", self.seed);
            let args = self.args(&op_id, kind, delay_ms);
            let mut op = CycleOp {
                op: op_id.clone(),
                kind,
                args: args.clone(),
                answers: Vec::new(),
                terminal: None,
            };
            let when = format!("cycle {cycle}, {}", kind.name());
            let tag = format!("{op_id}-1");
            let first = match kind {
                Kind::Direct | Kind::Mailbox => ask(quiet, &args, &tag),
                Kind::LostReply => {
                    cx.kill_host(&self.receiver)?;
                    cx.start_host(&self.receiver, Some("process-reply=drop-reply"))?;
                    ask(quiet, &args, &tag)
                }
                Kind::ReceiverKill | Kind::CallerKill | Kind::MailboxKill => {
                    let victim = match kind {
                        Kind::ReceiverKill => &self.receiver,
                        Kind::CallerKill => &self.caller,
                        _ if mailbox_victim => &self.mailbox,
                        _ => &self.receiver,
                    };
                    let thread = {
                        let (quiet, args, tag) = (quiet.clone(), args.clone(), tag.clone());
                        std::thread::spawn(move || ask(&quiet, &args, &tag))
                    };
                    std::thread::sleep(kill_after);
                    cx.kill_host(victim)?;
                    // Started again at once: the run's caller may be waiting on it.
                    cx.start_host(victim, None)?;
                    thread
                        .join()
                        .map_err(|_| Failure::new("the run's thread to finish", "it panicked"))?
                }
            };
            let outcome = first.outcome.clone();
            let allowed: &[&str] = match kind {
                Kind::Direct => &["succeeded"],
                Kind::Mailbox => &["succeeded", "unknown"],
                Kind::ReceiverKill => &["succeeded", "failed", "unknown"],
                // `refused`: the caller was down before gridctl reached it.
                Kind::CallerKill => &["succeeded", "failed", "unknown", "no-answer", "refused"],
                Kind::LostReply => &["unknown"],
                Kind::MailboxKill => &["succeeded", "failed", "unknown"],
            };
            if !allowed.contains(&outcome.as_str()) {
                return Err(Failure::new(
                    format!("{} for {op_id} ({when})", allowed.join(" or ")),
                    first.show(),
                ));
            }
            take_answer(&mut op, first, &when)?;
            *tally.entry((kind, outcome)).or_default() += 1;
            if kind == Kind::LostReply {
                // The reply was lost once; asked again, the receiver answers the
                // original outcome.
                let again = ask(quiet, &args, &format!("{op_id}-2"));
                if !is_terminal(&again.outcome) {
                    return Err(Failure::new(
                        format!("{op_id} asked again after its lost reply to be terminal"),
                        again.show(),
                    ));
                }
                take_answer(&mut op, again, &format!("{when}, asked again"))?;
            }
            ops.push(op);
        }
        Ok(tally)
    }

    /// Asks again, until every op is terminal or held unknown at the receiver.
    /// Returns the ops the receiver holds unknown.
    fn settle(&self, quiet: &Quiet, ops: &mut [CycleOp]) -> Result<Vec<usize>, Failure> {
        let started = Instant::now();
        let mut held: Vec<usize> = Vec::new();
        for round in 1.. {
            let open: Vec<usize> = (0..ops.len())
                .filter(|i| ops[*i].terminal.is_none() && !held.contains(i))
                .collect();
            if open.is_empty() {
                break;
            }
            for &i in &open {
                let tag = format!("{}-settle{round}", ops[i].op);
                let answer = ask(quiet, &ops[i].args, &tag);
                take_answer(&mut ops[i], answer, &format!("asked again, round {round}"))?;
                if ops[i].terminal.is_some() {
                    continue;
                }
                let run = quiet.json(
                    &[
                        "inspect",
                        "process",
                        &ops[i].op,
                        "--host",
                        &self.receiver,
                        "--json",
                    ],
                    &format!("{tag}-inspect"),
                )?;
                if run["run"]["outcome"] == "unknown" && run["run"]["units"] == "unknown" {
                    held.push(i);
                }
            }
            let still_open =
                (0..ops.len()).any(|i| ops[i].terminal.is_none() && !held.contains(&i));
            if still_open && started.elapsed() > PROCESS_SETTLE_TIMEOUT {
                let open: Vec<String> = (0..ops.len())
                    .filter(|i| ops[*i].terminal.is_none() && !held.contains(i))
                    .map(|i| {
                        format!(
                            "{} ({}): {}",
                            ops[i].op,
                            ops[i].kind.name(),
                            ops[i].answers.last().map_or(String::new(), RunAnswer::show)
                        )
                    })
                    .collect();
                return Err(Failure::new(
                    format!(
                        "every op terminal or held unknown at {} within PROCESS_SETTLE_TIMEOUT ({} s)",
                        self.receiver,
                        PROCESS_SETTLE_TIMEOUT.as_secs()
                    ),
                    format!("{} still open:\n{}", open.len(), open.join("\n")),
                ));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        held.sort_unstable();
        Ok(held)
    }
}

impl Step for Cycles {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let quiet = Quiet::new(cx);
        let (count0, runs0, grant0) = self.receiver_view(&quiet, "cycles-before")?;
        let grant_name = grant0["name"].as_str().unwrap_or_default().to_owned();
        let before = Units::of(&grant0);
        cx.say(format_args!(
            "{} cycles (seed {}): {} runs demo.count at {} directly, through mailbox {}, with {} or {} SIGKILLed at seeded moments, or its reply lost; grant {grant_name}: {}; counter {count0}",
            self.cycles,
            self.seed,
            self.caller,
            self.receiver,
            self.mailbox,
            self.receiver,
            self.caller,
            before.describe()
        ));
        let mut ops = Vec::new();
        let tally = self.run_cycles(cx, &quiet, &mut ops)?;
        let tally_text = tally
            .iter()
            .map(|((kind, outcome), n)| format!("{} {outcome} {n}", kind.name()))
            .collect::<Vec<_>>()
            .join(", ");
        cx.say(format_args!("cycles done; first answers: {tally_text}"));

        // Settle: every op terminal, or unknown at the receiver.
        let held = self.settle(&quiet, &mut ops)?;
        // Every op asked once more: a terminal outcome never changes, an unknown one
        // stays unknown (nothing retried it).
        for (i, op) in ops.iter_mut().enumerate() {
            let answer = ask(&quiet, &op.args, &format!("{}-final", op.op));
            let when = "asked once more after the cycles";
            if held.contains(&i) && answer.outcome != "unknown" {
                return Err(Failure::new(
                    format!(
                        "{} (held unknown at {}) to stay unknown",
                        op.op, self.receiver
                    ),
                    answer.show(),
                ));
            }
            take_answer(op, answer, when)?;
        }
        // The receiver's view of every op.
        let mut at_receiver: Vec<Value> = Vec::new();
        for op in &ops {
            let json = quiet.json(
                &[
                    "inspect",
                    "process",
                    &op.op,
                    "--host",
                    &self.receiver,
                    "--json",
                ],
                &format!("{}-receiver", op.op),
            )?;
            at_receiver.push(json["run"].clone());
        }
        let outcome_at = |run: &Value| run["outcome"].as_str().unwrap_or("absent").to_owned();
        for (op, run) in ops.iter().zip(&at_receiver) {
            let outcome = op
                .terminal
                .as_ref()
                .map_or("unknown", |t| t.outcome.as_str());
            let receiver = outcome_at(run);
            let consistent = match (outcome, receiver.as_str()) {
                (a, b) if a == b => true,
                // Never dispatched (refused before dispatch, or the receiver was down):
                // failed at the caller, nothing at the receiver.
                ("failed", "absent") => true,
                _ => false,
            };
            let units = run["units"].as_str().unwrap_or_default();
            let units_ok = match receiver.as_str() {
                "succeeded" => units == "consumed",
                "failed" => units == "released" || units == "none",
                "unknown" => units == "unknown",
                _ => true,
            };
            if !consistent || !units_ok {
                return Err(Failure::new(
                    format!(
                        "op {} ({}): the caller's outcome {outcome} and the receiver's run to agree, with units to match",
                        op.op,
                        op.kind.name()
                    ),
                    format!("receiver: {}", shorten(&run.to_string(), 600)),
                ));
            }
        }
        let unknown = held.len() as u64;
        let succeeded = at_receiver
            .iter()
            .filter(|r| outcome_at(r) == "succeeded")
            .count() as u64;
        let (count1, runs1, grant1) = self.receiver_view(&quiet, "cycles-after")?;
        let during = Units::of(&grant1);
        let runs = Runs {
            counter_before: count0,
            counter_after: count1,
            succeeded,
            unknown,
        };
        let counted = runs.counted()?;
        let summary = format!(
            "{} ops: {succeeded} succeeded at {}, {unknown} held unknown, {} failed (or never dispatched); counter +{counted}; runs {runs1} (before {runs0}); grant {}",
            ops.len(),
            self.receiver,
            ops.len() as u64 - succeeded - unknown,
            during.describe()
        );
        cx.say(&summary);
        if runs1["running"].as_u64().unwrap_or(0) != 0 {
            return Err(Failure::new(
                format!("no run still running at {}", self.receiver),
                summary,
            ));
        }
        units_conserved::check_held(&grant_name, &before, &during, unknown, &summary)?;
        let k = runs_once::check(&runs)?;
        cx.say(format_args!(
            "{k} of the {unknown} unknown runs executed before their receiver died: resolving {k} succeeded, {} failed",
            unknown - k
        ));
        for (n, &i) in held.iter().enumerate() {
            let outcome = if (n as u64) < k {
                "succeeded"
            } else {
                "failed"
            };
            let op = ops[i].op.clone();
            let json = quiet.json(
                &[
                    "process",
                    "resolve",
                    &op,
                    "--outcome",
                    outcome,
                    "--host",
                    &self.receiver,
                    "--json",
                ],
                &format!("{op}-resolve"),
            )?;
            let expected_units = if outcome == "succeeded" {
                "consumed"
            } else {
                "released"
            };
            if json["run"]["outcome"] != outcome || json["run"]["units"] != expected_units {
                return Err(Failure::new(
                    format!("{op} resolved {outcome}, its unit {expected_units}"),
                    shorten(&json.to_string(), 600),
                ));
            }
            // Now terminal at the caller too, and stays so.
            for round in 1..=2 {
                let answer = ask(&quiet, &ops[i].args, &format!("{op}-resolved{round}"));
                if answer.outcome != outcome {
                    return Err(Failure::new(
                        format!("{op}, resolved {outcome} at the receiver, to answer {outcome}"),
                        answer.show(),
                    ));
                }
                take_answer(&mut ops[i], answer, "after its resolution")?;
            }
        }
        let (count2, runs2, grant2) = self.receiver_view(&quiet, "cycles-resolved")?;
        let after = Units::of(&grant2);
        let succeeded = succeeded + k;
        let counted = count2.saturating_sub(count0);
        let summary = format!(
            "after resolving: {succeeded} runs succeeded at {}; counter +{counted}; runs {runs2}; grant {grant_name}: {}",
            self.receiver,
            after.describe()
        );
        cx.say(&summary);
        units_conserved::check_settled(&before, &after, counted, succeeded, &summary)?;
        cx.say(format_args!(
            "no run executed twice, no terminal outcome changed; {} units available of {} allocated",
            after.available, after.allocated
        ));
        Ok(())
    }
}
