//! `gridctl decision open|ballot|gate|apply` and `gridctl inspect decision`
//! (docs/decisions.md).

use std::process::ExitCode;

use clap::Subcommand;
use grid_engine::decisions::api::{DecisionCall, DecisionReply, DecisionView};
use grid_engine::processes::api::RunOutcome;
use grid_reconciler::decisions::{Verified, Vote, ask, call, find, provenance, show, verify};
use serde::Serialize;

use crate::Output;
use crate::report::{NotDone, Report, emit, emit_failure};

#[derive(Subcommand, Debug)]
pub enum DecisionCli {
    /// Open a decision of NAME at its host with the proposed VALUE (a finite number
    /// for an `input` effect, whole minor units for `ledger.transfer`). ID is the
    /// decision's id: the host signs one Open record — the policy as installed, the
    /// value, what the opener saw of the effect's model (its generation, batch and
    /// values, read from the owner when its installation answers here) — and the same
    /// ID again returns it. Exit 0 opened, 3 unknown (send the same ID again), 4
    /// refused.
    #[command(mut_arg("json", |a| a.help(
        "The decision as `inspect decision --id` prints it, or {\"decision\", \"outcome\", \"detail\"}"
    )))]
    Open {
        name: String,
        #[arg(long, value_name = "VALUE", allow_hyphen_values = true)]
        value: String,
        #[arg(long, value_name = "ID")]
        op: String,
        /// The decision's host (found among the installed hosts when omitted).
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Cast roster member MEMBER's ballot on decision D: MEMBER's host signs `yes` or
    /// `no` on the Open record as its host holds it now (its digest), once under ID,
    /// and sends it as the Process `decision.ballot` to the decision's host under the
    /// grant that host issued MEMBER. The same ID again re-sends the same ballot and
    /// gets the original answer. Exit 0 counted, 3 unknown, 4 refused (not on the
    /// roster, a second ballot, closed or expired: the reason is named).
    #[command(mut_arg("json", |a| a.help(
        "{\"op\", \"cast\": {\"document\": \"ballot\", …}, \"outcome\", \"detail\", \"run\"}"
    )))]
    Ballot {
        name: String,
        #[arg(long, value_name = "D")]
        decision: String,
        #[arg(long = "as", value_name = "MEMBER")]
        member: String,
        /// `yes` or `no`.
        #[arg(value_parser = ["yes", "no"])]
        vote: String,
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// The human gate of decision D: the gate operator's host signs its approval (or
    /// `--reject`) of the Open record and the ballots its host holds now, once under
    /// ID, and sends it (a Process `decision.gate` under the grant the decision's host
    /// issued it, or recorded directly when the operator is the decision's host).
    /// Refused before the threshold. Once approved, the decision's host applies the
    /// effect exactly once. Exit 0 recorded, 3 unknown, 4 refused.
    #[command(mut_arg("json", |a| a.help(
        "{\"op\", \"cast\": {\"document\": \"gate\", …}, \"outcome\", \"detail\", \"run\"}"
    )))]
    Gate {
        name: String,
        #[arg(long, value_name = "D")]
        decision: String,
        #[arg(long, conflicts_with = "reject", required_unless_present = "reject")]
        approve: bool,
        #[arg(long)]
        reject: bool,
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Ask the effect's owner again for the outcome of approved decision D's one
    /// apply run (request `decision:D`), starting it if it never started — never a
    /// second run. An outcome `unknown` stays held until the owner's operator
    /// resolves the run (`gridctl process resolve`). Exit 0 applied or failed with its
    /// receipt, 3 still unknown, 4 refused.
    Apply {
        name: String,
        #[arg(long, value_name = "D")]
        decision: String,
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
}

/// A decision as `inspect decision` and the decision commands print it.
#[derive(Serialize)]
pub struct Shown<'a> {
    #[serde(flatten)]
    pub decision: &'a DecisionView,
    pub verified: Vec<Verified>,
    /// Whether each document names the ones before it (the ballots the Open, the
    /// gate the Open and the ballots, the receipt all of them and the outcome).
    pub chain: bool,
}

impl Report for Shown<'_> {
    fn text(&self) -> String {
        let d = self.decision;
        let r = &d.record;
        let o = &r.opened;
        let mut out = format!(
            "decision {} of {} @ {}: {} ({} yes, {} no of {}; threshold {})\n  value {} → {} at {}; opened {}, expires {}\n",
            d.id,
            d.name,
            d.host,
            d.state.name(),
            d.yes,
            d.no,
            o.policy.roster.len(),
            o.policy.threshold,
            o.value,
            o.policy.effect.text(),
            o.policy.owner,
            grid_engine::store::rfc3339_ms(o.opened_ms),
            grid_engine::store::rfc3339_ms(o.expires_ms),
        );
        for p in &o.provenance {
            let values: Vec<String> = p.values.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!(
                "  saw {} at {} (generation {}, batch {}): {}\n",
                p.object,
                p.owner,
                p.generation,
                p.batch,
                values.join(" ")
            ));
        }
        for b in &r.ballots {
            out.push_str(&format!(
                "  ballot {}: {}\n",
                b.member,
                if b.yes { "yes" } else { "no" }
            ));
        }
        if let Some(g) = &r.gate {
            out.push_str(&format!(
                "  gate {}: {}\n",
                g.operator,
                if g.approve { "approved" } else { "rejected" }
            ));
        }
        if let Some(a) = &r.apply {
            out.push_str(&format!(
                "  apply {} at {}: {}{}\n",
                a.request,
                a.receiver,
                a.state.name(),
                if a.detail.is_empty() {
                    String::new()
                } else {
                    format!(" — {}", a.detail)
                }
            ));
        }
        for v in &self.verified {
            out.push_str(&format!(
                "  {} ({}): {}\n",
                v.document,
                v.signer,
                if v.verified {
                    "verifies"
                } else {
                    "DOES NOT VERIFY"
                }
            ));
        }
        out.push_str(&format!(
            "  chain: {}\n",
            if self.chain {
                "each document names the ones before it"
            } else {
                "BROKEN"
            }
        ));
        out
    }
}

#[derive(Serialize)]
struct Listed<'a> {
    host: &'a str,
    name: &'a str,
    decisions: Vec<Shown<'a>>,
}

impl Report for Listed<'_> {
    fn text(&self) -> String {
        if self.decisions.is_empty() {
            return format!("decision {} @ {}: none opened\n", self.name, self.host);
        }
        self.decisions.iter().map(Shown::text).collect()
    }
}

fn shown<'a>(output: &Output, view: &'a DecisionView) -> Shown<'a> {
    let (verified, chain) = verify(&output.state, view);
    Shown {
        decision: view,
        verified,
        chain,
    }
}

fn not_done(
    output: &Output,
    name: &str,
    outcome: &'static str,
    detail: &str,
    code: u8,
) -> ExitCode {
    emit_failure(
        &NotDone {
            id: serde_json::json!({ "decision": name }),
            outcome,
            detail: detail.to_owned(),
        },
        output.json,
    );
    eprintln!("decision {name}: {outcome}: {detail}");
    ExitCode::from(code)
}

/// Prints one decision; exit 0 when everything verifies, 1 when something does not.
fn print(output: &Output, view: &DecisionView) -> ExitCode {
    let shown = shown(output, view);
    let fine = shown.chain && shown.verified.iter().all(|v| v.verified);
    emit(&shown, output.json);
    if fine {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[derive(Serialize)]
struct CastShown {
    #[serde(flatten)]
    reply: serde_json::Value,
}

impl Report for CastShown {
    fn text(&self) -> String {
        let r = &self.reply;
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let cast = &r["cast"];
        let signer = cast["member"].as_str().or(cast["operator"].as_str());
        let mut out = format!(
            "{} {} by {} on decision {}: {}",
            text(&cast["document"]),
            text(&r["op"]),
            signer.unwrap_or("?"),
            text(&cast["decision"]),
            text(&r["outcome"])
        );
        let result = &r["run"]["result"];
        if let Some(state) = result["state"].as_str() {
            out += &format!(
                " (the decision is {state}: {} yes, {} no)",
                result["yes"], result["no"]
            );
        }
        let detail = text(&r["detail"]);
        if !detail.is_empty() && r["outcome"] != "succeeded" {
            out += &format!(" — {detail}");
        }
        out + "\n"
    }
}

fn reply(output: &Output, name: &str, answered: Result<DecisionReply, String>) -> ExitCode {
    match answered {
        Ok(DecisionReply::Decision(view)) => {
            let code = print(output, &view);
            match view.record.apply.as_ref().map(|a| a.state) {
                Some(grid_engine::decisions::api::ApplyState::Unknown) => ExitCode::from(3),
                _ => code,
            }
        }
        Ok(cast @ DecisionReply::Cast { .. }) => {
            let json = serde_json::to_value(&cast).expect("replies serialize");
            let DecisionReply::Cast {
                outcome, detail, ..
            } = cast
            else {
                unreachable!("matched above")
            };
            emit(&CastShown { reply: json }, output.json);
            match outcome {
                RunOutcome::Succeeded => ExitCode::SUCCESS,
                RunOutcome::Failed => {
                    eprintln!("decision {name}: refused: {detail}");
                    ExitCode::from(4)
                }
                RunOutcome::Unknown => ExitCode::from(3),
            }
        }
        Ok(DecisionReply::Refused { reason }) => not_done(output, name, "refused", &reason, 4),
        Ok(other) => not_done(
            output,
            name,
            "refused",
            &format!("unexpected reply {other:?}"),
            4,
        ),
        Err(e) => not_done(output, name, "unknown", &e, 3),
    }
}

pub fn decision(command: DecisionCli) -> anyhow::Result<ExitCode> {
    Ok(match command {
        DecisionCli::Open {
            name,
            value,
            op,
            host,
            output,
        } => {
            let (host, policy) = match find(&output.state, &name, host.as_deref()) {
                Ok(found) => found,
                Err(e) => return Ok(not_done(&output, &name, "refused", &e, 4)),
            };
            let provenance = provenance(&output.state, &policy);
            let answered = call(
                &output.state,
                &host,
                DecisionCall::Open {
                    name: name.clone(),
                    value,
                    op,
                    provenance,
                },
            );
            reply(&output, &name, answered)
        }
        DecisionCli::Ballot {
            name,
            decision,
            member,
            vote,
            op,
            host,
            output,
        } => cast(&output, &name, &decision, host.as_deref(), &op, |_| {
            (member.clone(), Vote::Ballot(vote == "yes"))
        }),
        DecisionCli::Gate {
            name,
            decision,
            approve,
            reject: _,
            op,
            host,
            output,
        } => cast(&output, &name, &decision, host.as_deref(), &op, |view| {
            (view.record.opened.policy.gate.clone(), Vote::Gate(approve))
        }),
        DecisionCli::Apply {
            name,
            decision,
            host,
            output,
        } => {
            let host = match find(&output.state, &name, host.as_deref()) {
                Ok((host, _)) => host,
                Err(e) => return Ok(not_done(&output, &name, "refused", &e, 4)),
            };
            reply(
                &output,
                &name,
                call(&output.state, &host, DecisionCall::Apply { decision }),
            )
        }
    })
}

/// A ballot or gate: signed at the caster's host on the decision as its host holds
/// it now, sent there once under `op`.
fn cast(
    output: &Output,
    name: &str,
    decision: &str,
    host: Option<&str>,
    op: &str,
    who: impl FnOnce(&DecisionView) -> (String, Vote),
) -> ExitCode {
    let host = match find(&output.state, name, host) {
        Ok((host, _)) => host,
        Err(e) => return not_done(output, name, "refused", &e, 4),
    };
    let view = match show(&output.state, &host, name, decision) {
        Ok(view) => view,
        Err(e) => return not_done(output, name, "refused", &e, 4),
    };
    let (caster, vote) = who(&view);
    let peer = match grid_reconciler::processes::peer(&output.state, &host) {
        Ok(peer) => peer,
        Err(e) => return not_done(output, name, "refused", &e, 4),
    };
    let membership = if caster == host {
        String::new()
    } else {
        match grid_reconciler::observe::common_membership(&output.state, &[&caster, &host]) {
            Some(m) => m,
            None => {
                return not_done(
                    output,
                    name,
                    "refused",
                    &format!(
                        "`{caster}` and `{host}` share no enrolled membership; nothing was sent"
                    ),
                    4,
                );
            }
        }
    };
    let answered = call(
        &output.state,
        &caster,
        DecisionCall::Cast {
            op: op.to_owned(),
            host: peer,
            membership,
            ask: ask(&view, vote),
        },
    );
    reply(output, name, answered)
}

/// `gridctl inspect decision NAME [--id D] [--host H]`: exit 0 when every signature
/// verifies and the chain holds, 1 when not, 4 when no host keeps the decision.
pub fn inspect(name: &str, id: Option<String>, host: Option<&str>, output: &Output) -> ExitCode {
    let host = match find(&output.state, name, host) {
        Ok((host, _)) => host,
        Err(e) => return not_done(output, name, "refused", &e, 4),
    };
    match call(
        &output.state,
        &host,
        DecisionCall::Show {
            name: name.to_owned(),
            decision: id.clone(),
        },
    ) {
        Ok(DecisionReply::Decisions {
            host, decisions, ..
        }) => {
            if id.is_some()
                && let Some(view) = decisions.first()
            {
                return print(output, view);
            }
            let listed = Listed {
                host: &host,
                name,
                decisions: decisions.iter().map(|v| shown(output, v)).collect(),
            };
            let fine = listed
                .decisions
                .iter()
                .all(|s| s.chain && s.verified.iter().all(|v| v.verified));
            emit(&listed, output.json);
            if fine {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        other => reply(output, name, other),
    }
}
