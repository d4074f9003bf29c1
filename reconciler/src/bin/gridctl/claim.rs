//! `gridctl claim …` and `gridctl authority snapshot`: claims at a membership's
//! authority, sent once as one of its hosts, and the operator's snapshot.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use grid_engine::authority::claims::{Claim, ClaimState};
use grid_engine::authority::service::{ClaimCommand, ClaimOutcome};
use grid_reconciler::authority;
use serde::Serialize;

use crate::Output;
use crate::report::{Rendered, Report, emit, emit_failure};

/// Options every claim command takes.
#[derive(Args, Debug)]
pub struct ClaimTarget {
    /// The operation id: re-sending it returns the original answer, never acts twice.
    #[arg(long, value_name = "ID")]
    op: String,
    /// The calling host: a host of the membership installed under the state that
    /// selects the `authority` profile (a voter or a learner).
    #[arg(long = "as", value_name = "HOST")]
    caller: String,
    /// The membership (default: the only one the host is enrolled in).
    #[arg(long, value_name = "M")]
    membership: Option<String>,
    #[command(flatten)]
    output: Output,
}

#[derive(Subcommand, Debug)]
pub enum ClaimCli {
    /// Own CLAIM (a new epoch), if nobody holds it.
    Acquire {
        claim: String,
        #[command(flatten)]
        target: ClaimTarget,
    },
    /// Name PARTICIPANT as the successor of CLAIM (the owner only).
    EnrollSuccessor {
        claim: String,
        participant: String,
        #[command(flatten)]
        target: ClaimTarget,
    },
    /// Hand CLAIM to its enrolled successor: the owner is fenced (the epoch grows).
    Handoff {
        claim: String,
        #[command(flatten)]
        target: ClaimTarget,
    },
    /// Release CLAIM (the owner only).
    Release {
        claim: String,
        #[command(flatten)]
        target: ClaimTarget,
    },
    /// CLAIM as the authority holds it, read after a linearizable barrier.
    Show {
        claim: String,
        #[arg(long, value_name = "M")]
        membership: Option<String>,
        #[command(flatten)]
        output: Output,
    },
}

#[derive(Subcommand, Debug)]
pub enum AuthorityCli {
    /// Build a snapshot at voter HOST now; the log it covers is purged and older
    /// snapshot generations are deleted.
    Snapshot {
        membership: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        // A snapshot prints no JSON: it takes `--state` alone.
        #[arg(long, value_name = "DIR", default_value = "grid-state", env = "GRID_STATE",
              value_parser = crate::common::state_dir)]
        state: PathBuf,
    },
}

pub fn claim(command: ClaimCli) -> anyhow::Result<ExitCode> {
    let (verb, target, command) = match command {
        ClaimCli::Show {
            claim,
            membership,
            output,
        } => return show(&claim, membership.as_deref(), &output),
        ClaimCli::Acquire { claim, target } => ("acquire", target, ClaimCommand::Acquire { claim }),
        ClaimCli::EnrollSuccessor {
            claim,
            participant,
            target,
        } => (
            "enroll-successor",
            target,
            ClaimCommand::EnrollSuccessor {
                claim,
                successor: participant,
            },
        ),
        ClaimCli::Handoff { claim, target } => ("handoff", target, ClaimCommand::Handoff { claim }),
        ClaimCli::Release { claim, target } => ("release", target, ClaimCommand::Release { claim }),
    };
    let resend = format!(
        "gridctl claim {verb} {} --op {} --as {}",
        match &command {
            ClaimCommand::Acquire { claim }
            | ClaimCommand::Handoff { claim }
            | ClaimCommand::Release { claim } => claim.clone(),
            ClaimCommand::EnrollSuccessor { claim, successor } => format!("{claim} {successor}"),
        },
        target.op,
        target.caller
    );
    let result = authority::claim(
        &target.output.state,
        target.membership.as_deref(),
        &target.caller,
        &target.op,
        command,
    )
    .map_err(anyhow::Error::msg)?;
    let unknown = result.outcome == ClaimOutcome::Unknown;
    let mut json = result.to_json();
    let mut text = format!(
        "{verb} {} (op {}) as {}: {}{}\n",
        result.claim,
        result.op,
        result.caller,
        result.outcome_name(),
        if result.detail.is_empty() {
            String::new()
        } else {
            format!(" — {}", result.detail)
        }
    );
    if unknown {
        json["resend"] = serde_json::Value::from(resend.clone());
        text += &format!(
            "nothing was retried; to learn the outcome re-send the same op id: {resend}\n"
        );
    }
    emit(&Rendered::new(json, text), target.output.json);
    Ok(ExitCode::from(result.exit_code()))
}

/// A claim read after a barrier (`None`: no such claim).
#[derive(Serialize)]
struct Shown<'a> {
    claim: &'a str,
    membership: &'a str,
    barrier: &'static str,
    read_index: u64,
    owner: Option<&'a str>,
    epoch: Option<u64>,
    successor: Option<&'a str>,
    state: Option<ClaimState>,
    /// The voter the barrier passed through.
    #[serde(skip)]
    via: &'a str,
}

impl Report for Shown<'_> {
    fn text(&self) -> String {
        let (claim, via, read_index) = (self.claim, self.via, self.read_index);
        match (self.owner, self.epoch, self.state) {
            (Some(owner), Some(epoch), Some(state)) => format!(
                "{claim}: {} by {owner} at epoch {epoch}{} (read after a barrier through {via}, index {read_index})\n",
                serde_json::to_value(state)
                    .expect("states serialize")
                    .as_str()
                    .unwrap_or("?"),
                self.successor
                    .map(|s| format!(", successor {s}"))
                    .unwrap_or_default()
            ),
            _ => format!(
                "{claim}: no such claim (read after a barrier through {via}, index {read_index})\n"
            ),
        }
    }
}

impl<'a> Shown<'a> {
    fn of(
        claim: &'a str,
        membership: &'a str,
        found: Option<&'a Claim>,
        read_index: u64,
        via: &'a str,
    ) -> Self {
        Shown {
            claim,
            membership,
            barrier: "ok",
            read_index,
            owner: found.map(|c| c.owner.as_str()),
            epoch: found.map(|c| c.epoch),
            successor: found.and_then(|c| c.successor.as_deref()),
            state: found.map(|c| c.state),
            via,
        }
    }
}

/// No quorum confirmed the read barrier.
#[derive(Serialize)]
struct BarrierUnknown<'a> {
    claim: &'a str,
    membership: &'a str,
    barrier: &'static str,
    detail: String,
}

impl Report for BarrierUnknown<'_> {
    fn text(&self) -> String {
        format!("{}\n", self.detail)
    }
}

/// `gridctl claim show CLAIM`.
fn show(claim: &str, membership: Option<&str>, output: &Output) -> anyhow::Result<ExitCode> {
    let membership =
        authority::membership_of(&output.state, membership).map_err(anyhow::Error::msg)?;
    match authority::show(&output.state, &membership, claim) {
        Ok((found, read_index, via)) => {
            let shown = Shown::of(claim, &membership, found.as_ref(), read_index, &via);
            emit(&shown, output.json);
            Ok(ExitCode::SUCCESS)
        }
        Err(detail) => {
            let unknown = BarrierUnknown {
                claim,
                membership: &membership,
                barrier: "unknown",
                detail,
            };
            emit_failure(&unknown, output.json);
            Ok(ExitCode::from(3))
        }
    }
}

pub fn authority(command: AuthorityCli) -> anyhow::Result<ExitCode> {
    let AuthorityCli::Snapshot {
        membership,
        host,
        state,
    } = command;
    let detail = authority::snapshot(&state, &membership, &host).map_err(anyhow::Error::msg)?;
    println!("{host}: {detail}");
    Ok(ExitCode::SUCCESS)
}
