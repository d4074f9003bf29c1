//! `gridctl ledger transfer|post|void|lookup` and `gridctl inspect ledger` (profile
//! `ledger`).

use std::process::ExitCode;

use clap::Subcommand;
use grid_engine::ledger::api::{
    LedgerAnswer, LedgerCall, LedgerOp, LedgerOutcome, LedgerReply, LedgerView,
};
use grid_reconciler::ledger::{Failure, call, keeper};
use serde::Serialize;

use crate::Output;
use crate::report::{NotDone, Report, emit};

#[derive(Subcommand, Debug)]
pub enum LedgerCli {
    /// Move AMOUNT (integer minor units) from account DEBIT to account CREDIT of
    /// LEDGER at HOST, once, under the operation id ID: posted at once, or held with
    /// --pending until posted, voided or expired (--timeout-s). Answered after the
    /// ledger's journal is fsynced. Re-sending the same id and body returns the
    /// original answer; the same id with another body is refused. Exit 0 succeeded,
    /// 4 refused, 3 unknown (the reply was lost: re-send the same id), 1 error.
    #[command(mut_arg("json", |a| a.help(
        "One JSON object {\"ledger\", \"host\", \"id\", \"outcome\", \"reason\", \"amount\"}"
    )))]
    Transfer {
        ledger: String,
        /// The host that keeps the ledger.
        #[arg(long, value_name = "NAME")]
        host: String,
        /// The operation id.
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "ACCOUNT")]
        debit: String,
        #[arg(long, value_name = "ACCOUNT")]
        credit: String,
        /// Integer minor units (up to u128).
        #[arg(long, value_name = "N")]
        amount: u128,
        #[arg(long, value_name = "CUR")]
        currency: String,
        /// Hold the amount (two-phase) until a post, a void or the timeout.
        #[arg(long)]
        pending: bool,
        /// Seconds until a pending transfer expires (with --pending; none: never).
        #[arg(long, value_name = "S")]
        timeout_s: Option<u64>,
        #[command(flatten)]
        output: Output,
    },
    /// Post the pending transfer PENDING: all of it, or --amount N of it (the rest is
    /// released). Exit codes as `transfer`.
    Post {
        ledger: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "PENDING")]
        pending_id: String,
        #[arg(long, value_name = "N")]
        amount: Option<u128>,
        #[command(flatten)]
        output: Output,
    },
    /// Void the pending transfer PENDING: its whole amount released. Exit codes as
    /// `transfer`.
    Void {
        ledger: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "PENDING")]
        pending_id: String,
        #[command(flatten)]
        output: Output,
    },
    /// The retained answer of each ID in LEDGER at HOST — from memory or, past a
    /// checkpoint, from the ledger's id index — without sending any operation: nothing
    /// is applied, whatever the ids. An id never submitted has no answer (`null`).
    /// Exit 0 answered, 4 refused (nothing read: an id index that does not read says
    /// so, never "no answer"), 1 error.
    #[command(mut_arg("json", |a| a.help(
        "One JSON object {\"ledger\", \"host\", \"answers\": [{\"id\", \"answer\": {\"outcome\", \"reason\", \"amount\"} | null}]}"
    )))]
    Lookup {
        ledger: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        /// Operation ids (at most LEDGER_BATCH_TRANSFERS_MAX).
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
        #[command(flatten)]
        output: Output,
    },
}

/// `gridctl ledger lookup`'s answer.
#[derive(Serialize)]
struct LookedUp<'a> {
    ledger: &'a str,
    host: &'a str,
    answers: Vec<Retained>,
}

#[derive(Serialize)]
struct Retained {
    id: String,
    answer: Option<LedgerAnswer>,
}

impl Report for LookedUp<'_> {
    fn text(&self) -> String {
        self.answers
            .iter()
            .map(|r| match &r.answer {
                None => format!(
                    "{}: no answer (never submitted to ledger {})\n",
                    r.id, self.ledger
                ),
                Some(a) => Answered {
                    ledger: self.ledger,
                    host: self.host,
                    answer: a,
                }
                .text(),
            })
            .collect()
    }
}

fn lookup(
    ledger: String,
    host: String,
    ids: Vec<String>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let (_, dir) =
        keeper(&output.state, &ledger, Some(host.as_str())).map_err(anyhow::Error::msg)?;
    let request = LedgerCall::Lookup {
        ledger: ledger.clone(),
        ids: ids.clone(),
    };
    match call(&dir, request) {
        Ok(LedgerReply::Retained { answers, .. }) if answers.len() == ids.len() => {
            let answers = ids
                .into_iter()
                .zip(answers)
                .map(|(id, answer)| Retained { id, answer })
                .collect();
            emit(
                &LookedUp {
                    ledger: &ledger,
                    host: &host,
                    answers,
                },
                output.json,
            );
            Ok(ExitCode::SUCCESS)
        }
        Ok(other) => anyhow::bail!("the host answered {other:?}"),
        Err(Failure::Refused(reason)) => {
            eprintln!("gridctl: refused: {reason}");
            Ok(ExitCode::from(4))
        }
        Err(Failure::Unknown(reason) | Failure::Unreachable(reason)) => anyhow::bail!("{reason}"),
    }
}

/// One operation's answer as `gridctl ledger …` prints it.
#[derive(Serialize)]
struct Answered<'a> {
    ledger: &'a str,
    host: &'a str,
    #[serde(flatten)]
    answer: &'a LedgerAnswer,
}

impl Report for Answered<'_> {
    fn text(&self) -> String {
        let a = self.answer;
        match a.outcome {
            LedgerOutcome::Succeeded => format!(
                "{} succeeded: {} minor unit(s) in ledger {} @ {}\n",
                a.id,
                a.amount.unwrap_or(0),
                self.ledger,
                self.host
            ),
            LedgerOutcome::Refused => {
                format!("{} refused: {}\n", a.id, a.reason.as_deref().unwrap_or(""))
            }
        }
    }
}

pub fn ledger(command: LedgerCli) -> anyhow::Result<ExitCode> {
    let (ledger, host, op, output) = match command {
        LedgerCli::Lookup {
            ledger,
            host,
            ids,
            output,
        } => return lookup(ledger, host, ids, output),
        LedgerCli::Transfer {
            ledger,
            host,
            op,
            debit,
            credit,
            amount,
            currency,
            pending,
            timeout_s,
            output,
        } => (
            ledger,
            host,
            LedgerOp::Transfer {
                id: op,
                debit,
                credit,
                amount,
                currency,
                pending,
                timeout_s,
            },
            output,
        ),
        LedgerCli::Post {
            ledger,
            host,
            op,
            pending_id,
            amount,
            output,
        } => (
            ledger,
            host,
            LedgerOp::Post {
                id: op,
                pending_id,
                amount,
            },
            output,
        ),
        LedgerCli::Void {
            ledger,
            host,
            op,
            pending_id,
            output,
        } => (ledger, host, LedgerOp::Void { id: op, pending_id }, output),
    };
    let (_, dir) =
        keeper(&output.state, &ledger, Some(host.as_str())).map_err(anyhow::Error::msg)?;
    let id = serde_json::json!({"ledger": ledger, "host": host, "id": op.id()});
    // Not answered (refused whole, or unknown): the JSON answer on stdout, the reason
    // on stderr.
    let not_done = |outcome: &'static str, detail: String, code: u8| -> anyhow::Result<ExitCode> {
        emit(
            &NotDone {
                id: id.clone(),
                outcome,
                detail: detail.clone(),
            },
            output.json,
        );
        eprintln!("gridctl: {outcome}: {detail}");
        Ok(ExitCode::from(code))
    };
    let request = LedgerCall::Submit {
        ledger: ledger.clone(),
        ops: vec![op],
    };
    match call(&dir, request) {
        Ok(LedgerReply::Answers { answers, .. }) if answers.len() == 1 => {
            let answer = &answers[0];
            emit(
                &Answered {
                    ledger: &ledger,
                    host: &host,
                    answer,
                },
                output.json,
            );
            Ok(ExitCode::from(match answer.outcome {
                LedgerOutcome::Succeeded => 0,
                LedgerOutcome::Refused => 4,
            }))
        }
        Ok(other) => anyhow::bail!("the host answered {other:?}"),
        Err(Failure::Refused(reason)) => not_done("refused", reason, 4),
        Err(Failure::Unknown(reason)) => not_done(
            "unknown",
            format!("{reason}; re-send the same id (never a new one) to learn its answer"),
            3,
        ),
        Err(Failure::Unreachable(reason)) => anyhow::bail!("{reason}"),
    }
}

/// `gridctl inspect ledger`: the view as the host keeps it.
#[derive(Serialize)]
#[serde(transparent)]
struct Inspected(LedgerView);

impl Report for Inspected {
    fn text(&self) -> String {
        let v = &self.0;
        let mut out = format!(
            "ledger {} @ {}: {} account(s), {} answered ({} refused), {} pending held, {} posted entries\n",
            v.ledger,
            v.host,
            v.accounts.len(),
            v.counts.answered,
            v.counts.refused,
            v.counts.pending_open,
            v.counts.posted_entries
        );
        for a in &v.accounts {
            let d = &a.definition;
            out.push_str(&format!(
                "account {} {}{}: debits {} posted + {} pending, credits {} posted + {} pending\n",
                d.name,
                d.currency,
                if d.retired { " (retired)" } else { "" },
                a.debits_posted,
                a.debits_pending,
                a.credits_posted,
                a.credits_pending
            ));
        }
        for p in &v.pending {
            out.push_str(&format!(
                "pending {}: {} {} from {} to {}{}\n",
                p.id,
                p.amount,
                p.currency,
                p.debit,
                p.credit,
                p.expires_at_ms
                    .map(|at| format!(", expires at {at} ms"))
                    .unwrap_or_default()
            ));
        }
        out
    }
}

/// `gridctl inspect ledger LEDGER [--account A] [--host H]`.
pub fn inspect(
    ledger: &str,
    account: Option<String>,
    host: Option<&str>,
    output: &Output,
) -> anyhow::Result<ExitCode> {
    let (_, dir) = keeper(&output.state, ledger, host).map_err(anyhow::Error::msg)?;
    let request = LedgerCall::Inspect {
        ledger: ledger.to_owned(),
        account,
    };
    match call(&dir, request) {
        Ok(LedgerReply::Inspected(view)) => {
            emit(&Inspected(*view), output.json);
            Ok(ExitCode::SUCCESS)
        }
        Ok(other) => anyhow::bail!("the host answered {other:?}"),
        Err(Failure::Refused(reason) | Failure::Unknown(reason) | Failure::Unreachable(reason)) => {
            anyhow::bail!("{reason}")
        }
    }
}
