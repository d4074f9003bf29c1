//! `gridctl process run|resolve|cancel` and `gridctl inspect process|grants|processes`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use grid_engine::processes::api::{
    GrantView, ProcessCall, ProcessReply, RunCounts, RunOutcome, RunRequest, RunView,
};
use grid_reconciler::processes::{call, run_call};
use serde::Serialize;

use crate::Output;
use crate::report::{NotDone, Report, emit};

#[derive(Subcommand, Debug)]
pub enum ProcessCli {
    /// Run PROCESS at HOST once as the calling host CALLER (profile `processes`), under
    /// the request id ID: HOST journals the request, reserves one execution unit of
    /// CALLER's grant, runs it, journals its outcome. Re-running the same id returns the
    /// original outcome and never runs it again; a lost reply is recovered by running
    /// the same id again. Exit 0 succeeded, 1 failed, 3 unknown (ask again with the
    /// same id; a run left unknown by a crash stays so until `process resolve`),
    /// 4 refused.
    #[command(mut_arg("json", |a| a.help(
        "One JSON object {\"request\", \"outcome\", \"result\", …}"
    )))]
    Run {
        /// The receiving host.
        host: String,
        /// The Process, e.g. `demo.count` or `model.eval`.
        process: String,
        /// The calling host (it keeps the wait journal).
        #[arg(long = "as", value_name = "CALLER")]
        caller: String,
        /// The request id.
        #[arg(long, value_name = "ID")]
        op: String,
        /// Through an encrypted mailbox at HOST instead of directly: `mailbox:HOST`; or
        /// charged to HOST's own mission allocation, run with no peer asked (the
        /// authority may be unreachable): `mission:NAME` (then HOST and CALLER are the
        /// mission's host).
        #[arg(long, value_name = "mailbox:HOST|mission:NAME")]
        via: Option<String>,
        /// The membership the call travels through (the TLS identity between the
        /// hosts), by default the first they share. A grant declared with
        /// `membership=M` charges only runs that reach its issuer through M.
        #[arg(long, value_name = "M")]
        membership: Option<String>,
        /// An argument (repeatable): NAME=VALUE.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// How long to wait for the outcome before answering unknown (the caller's
        /// wait goes on).
        #[arg(long, value_name = "MS")]
        wait_ms: Option<u64>,
        #[command(flatten)]
        output: Output,
    },
    /// Close a run left `unknown` at its receiving host HOST (that host's operator):
    /// succeeded consumes its unit, failed releases it. Exit 0 resolved, 4 refused.
    Resolve {
        /// The request id.
        id: String,
        #[arg(long, value_parser = ["succeeded", "failed"])]
        outcome: String,
        /// The receiving host.
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// Close the calling host HOST's stopped wait ID (one whose outcome it never
    /// learned) with its receiver's signed proof that the request was never
    /// dispatched: HOST asks the receiver directly; a receiver that never journaled
    /// the request bars it (it will never run, nothing is charged) and signs the proof,
    /// fsynced, and HOST journals both and closes the wait. A request the receiver
    /// dispatched is not cancelled: its finalized outcome is learned and returned (a
    /// pending ledger amount it holds stays the Ledger's), and one with no outcome
    /// there yet refuses (its receiver's operator resolves it). Exit 0 the wait is
    /// closed (`cancelled` true: proof of no dispatch; false: its original outcome),
    /// 3 unknown (the cancel's reply was lost: cancel again with the same id), 4
    /// refused (nothing changed).
    #[command(mut_arg("json", |a| a.help(
        "One JSON object {\"request\", \"host\", \"receiver\", \"cancelled\", \"outcome\", \"units\", \"proof\", \"detail\"}"
    )))]
    Cancel {
        /// The request id.
        id: String,
        /// The calling host (it keeps the wait).
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
}

fn outcome_code(outcome: RunOutcome) -> u8 {
    match outcome {
        RunOutcome::Succeeded => 0,
        RunOutcome::Failed => 1,
        RunOutcome::Unknown => 3,
    }
}

/// Nothing was run, or nothing resolved: the JSON answer on stdout, the reason on
/// stderr. Exit 4.
fn refused(json: bool, id: serde_json::Value, detail: &str) -> ExitCode {
    not_done(json, id, "refused", detail, 4)
}

/// The outcome of `id` is `outcome` (refused or unknown): the JSON answer on stdout,
/// the reason on stderr, exit `code`.
fn not_done(
    json: bool,
    id: serde_json::Value,
    outcome: &'static str,
    detail: &str,
    code: u8,
) -> ExitCode {
    let answer = NotDone {
        id,
        outcome,
        detail: detail.to_owned(),
    };
    emit(&answer, json);
    eprintln!("gridctl: {outcome}: {detail}");
    ExitCode::from(code)
}

/// A run's outcome as the caller learned it.
#[derive(Serialize)]
struct Ran<'a> {
    request: &'a str,
    process: &'a str,
    host: &'a str,
    caller: &'a str,
    via: &'a str,
    outcome: &'static str,
    result: &'a Option<serde_json::Value>,
    detail: &'a str,
}

impl<'a> Ran<'a> {
    fn of(run: &'a RunView, host: &'a str) -> Self {
        Ran {
            request: &run.request,
            process: &run.process,
            host,
            caller: &run.caller,
            via: &run.via,
            outcome: run.outcome.name(),
            result: &run.result,
            detail: &run.detail,
        }
    }
}

impl Report for Ran<'_> {
    fn text(&self) -> String {
        format!(
            "{} {} at {} ({}): {}{}{}\n",
            self.request,
            self.process,
            self.host,
            self.via,
            self.outcome,
            self.result
                .as_ref()
                .map(|r| format!(" {r}"))
                .unwrap_or_default(),
            if self.detail.is_empty() {
                String::new()
            } else {
                format!(" — {}", self.detail)
            }
        )
    }
}

/// A run closed by its receiving host's operator.
#[derive(Serialize)]
struct Resolved<'a> {
    host: &'a str,
    run: &'a RunView,
    #[serde(skip)]
    id: &'a str,
}

impl Report for Resolved<'_> {
    fn text(&self) -> String {
        format!(
            "{} at {}: resolved {} (unit {})\n",
            self.id,
            self.host,
            self.run.outcome.name(),
            self.run.units
        )
    }
}

pub fn process(command: ProcessCli) -> anyhow::Result<ExitCode> {
    match command {
        ProcessCli::Run {
            host,
            process,
            caller,
            op,
            via,
            membership,
            args,
            wait_ms,
            output,
        } => {
            let (state, json) = (&output.state, output.json);
            let id = serde_json::json!({"request": op, "process": process, "host": host, "caller": caller});
            let mut arguments = BTreeMap::new();
            for arg in &args {
                let Some((name, value)) = arg.split_once('=') else {
                    return Ok(refused(
                        json,
                        id,
                        &format!("argument `{arg}` is not NAME=VALUE; nothing was sent"),
                    ));
                };
                arguments.insert(name.to_owned(), value.to_owned());
            }
            let mission = via
                .as_deref()
                .and_then(|v| v.strip_prefix("mission:"))
                .map(str::to_owned);
            let via = match via.as_deref().map(|v| v.strip_prefix("mailbox:")) {
                None => None,
                Some(_) if mission.as_deref().is_some_and(|m| !m.is_empty()) => None,
                Some(Some(m)) if !m.is_empty() => Some(m.to_owned()),
                Some(_) => {
                    return Ok(refused(
                        json,
                        id,
                        "--via takes mailbox:HOST or mission:NAME; nothing was sent",
                    ));
                }
            };
            let request = RunRequest {
                request: op.clone(),
                process,
                arguments,
            };
            let call_of = run_call(
                state,
                &host,
                &caller,
                via.as_deref(),
                membership.as_deref(),
                request,
                wait_ms,
            )
            .map(|call| with_mission(call, mission));
            let reply = match call_of.and_then(|c| call(state, &caller, c)) {
                Ok(reply) => reply,
                Err(reason) => {
                    // The caller's host may have journaled the wait: the outcome is
                    // unknown unless the call certainly never arrived.
                    if reason.starts_with("cannot reach")
                        || reason.starts_with("no host")
                        || reason.contains("share no enrolled membership")
                        || reason.contains("nothing was sent")
                    {
                        return Ok(refused(json, id, &reason));
                    }
                    return Ok(not_done(json, id, "unknown", &reason, 3));
                }
            };
            match reply {
                ProcessReply::Ran { run } => {
                    emit(&Ran::of(&run, &host), json);
                    Ok(ExitCode::from(outcome_code(run.outcome)))
                }
                ProcessReply::Refused { reason } => Ok(refused(json, id, &reason)),
                other => bail!("the host answered {other:?}"),
            }
        }
        ProcessCli::Resolve {
            id,
            outcome,
            host,
            output,
        } => {
            let outcome = if outcome == "succeeded" {
                RunOutcome::Succeeded
            } else {
                RunOutcome::Failed
            };
            let resolve = ProcessCall::Resolve {
                request: id.clone(),
                outcome,
            };
            match call(&output.state, &host, resolve) {
                Ok(ProcessReply::Resolved { run }) => {
                    let resolved = Resolved {
                        host: &host,
                        run: &run,
                        id: &id,
                    };
                    emit(&resolved, output.json);
                    Ok(ExitCode::SUCCESS)
                }
                Ok(ProcessReply::Refused { reason }) | Err(reason) => Ok(refused(
                    output.json,
                    serde_json::json!({"host": host, "request": id}),
                    &reason,
                )),
                Ok(other) => bail!("the host answered {other:?}"),
            }
        }
        ProcessCli::Cancel { id, host, output } => {
            let cancel = ProcessCall::Cancel {
                request: id.clone(),
            };
            match call(&output.state, &host, cancel) {
                Ok(ProcessReply::Cancelled { run, proof }) => {
                    let answer = Cancelled {
                        request: &run.request,
                        host: &host,
                        receiver: &run.receiver,
                        process: &run.process,
                        cancelled: proof.is_some(),
                        outcome: run.outcome.name(),
                        units: run.units.to_string(),
                        proof: &proof,
                        detail: &run.detail,
                    };
                    emit(&answer, output.json);
                    Ok(if run.outcome == RunOutcome::Unknown {
                        ExitCode::from(3)
                    } else {
                        ExitCode::SUCCESS
                    })
                }
                Ok(ProcessReply::Refused { reason }) | Err(reason) => Ok(refused(
                    output.json,
                    serde_json::json!({"host": host, "request": id}),
                    &reason,
                )),
                Ok(other) => bail!("the host answered {other:?}"),
            }
        }
    }
}

/// A wait closed (or not) by `process cancel`.
#[derive(Serialize)]
struct Cancelled<'a> {
    request: &'a str,
    host: &'a str,
    receiver: &'a str,
    process: &'a str,
    /// Closed with the receiver's proof of no dispatch.
    cancelled: bool,
    outcome: &'static str,
    units: String,
    proof: &'a Option<grid_engine::processes::cancel::NoDispatch>,
    detail: &'a str,
}

impl Report for Cancelled<'_> {
    fn text(&self) -> String {
        let how = match (self.cancelled, self.outcome) {
            (true, _) => format!(
                "cancelled: {} signed that it never dispatched it (nothing charged; it will never run)",
                self.receiver
            ),
            (false, "unknown") => "not closed: its outcome is unknown".to_owned(),
            (false, outcome) => format!(
                "not cancelled: it was dispatched at {} and finalized {outcome} (unit {}); that outcome stands",
                self.receiver, self.units
            ),
        };
        format!(
            "{} ({}) at {}: {how}{}\n",
            self.request,
            self.process,
            self.host,
            if self.detail.is_empty() {
                String::new()
            } else {
                format!(" — {}", self.detail)
            }
        )
    }
}

/// A run as one host holds it (`None`: it holds no run or wait of that id).
#[derive(Serialize)]
struct Inspected<'a> {
    host: &'a str,
    run: Option<RunView>,
    #[serde(skip)]
    id: &'a str,
}

impl Report for Inspected<'_> {
    fn text(&self) -> String {
        let host = self.host;
        let Some(run) = &self.run else {
            return format!("{host} holds no run or wait `{}`\n", self.id);
        };
        let mut text = format!(
            "{} ({} at {host}) {} from {} to {} ({})\n",
            run.request, run.role, run.process, run.caller, run.receiver, run.via
        );
        text += &format!(
            "  outcome {}{}\n",
            run.outcome.name(),
            if run.archived {
                " (read from the host's archive)"
            } else {
                ""
            }
        );
        if let Some(result) = &run.result {
            text += &format!("  result {result}\n");
        }
        if let Some(grant) = &run.grant {
            text += &format!("  grant {grant}: unit {}\n", run.units);
        }
        if !run.detail.is_empty() {
            text += &format!("  {}\n", run.detail);
        }
        text
    }
}

/// `gridctl inspect process ID --host NAME`.
pub fn inspect_process(id: &str, host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let inspect = ProcessCall::Inspect {
        request: id.to_owned(),
    };
    let reply = call(&output.state, host, inspect).map_err(anyhow::Error::msg)?;
    let run = match reply {
        ProcessReply::Inspected { run } => run,
        // Known and not answerable: archived past `archive-days`, or unreadable.
        ProcessReply::Refused { reason } => {
            let id = serde_json::json!({"request": id, "host": host});
            return Ok(refused(output.json, id, &reason));
        }
        other => bail!("the host answered {other:?}"),
    };
    emit(&Inspected { host, run, id }, output.json);
    Ok(ExitCode::SUCCESS)
}

/// The grants a host issued: totals of their units, then each grant.
#[derive(Serialize)]
struct Grants<'a> {
    host: &'a str,
    allocated: u64,
    reserved: u64,
    consumed: u64,
    surrendered: u64,
    unknown: u64,
    available: u64,
    grants: Vec<GrantView>,
}

impl<'a> Grants<'a> {
    fn of(host: &'a str, grants: Vec<GrantView>) -> Self {
        let total = |f: fn(&GrantView) -> u64| -> u64 { grants.iter().map(f).sum() };
        Grants {
            host,
            allocated: total(|g| g.allocated),
            reserved: total(|g| g.reserved),
            consumed: total(|g| g.consumed),
            surrendered: total(|g| g.surrendered),
            unknown: total(|g| g.unknown),
            available: total(|g| g.available()),
            grants,
        }
    }
}

impl Report for Grants<'_> {
    fn text(&self) -> String {
        if self.grants.is_empty() {
            return format!("{} issued no grants\n", self.host);
        }
        self.grants
            .iter()
            .map(|g| {
                format!(
                    "{} for {}{}{}: allocated {} reserved {} consumed {} surrendered {} unknown {} available {} ({} signed issue(s)){}\n",
                    g.name,
                    g.caller,
                    g.membership
                        .as_ref()
                        .map(|m| format!(" through {m}"))
                        .unwrap_or_default(),
                    if g.retired { " (retired)" } else { "" },
                    g.allocated,
                    g.reserved,
                    g.consumed,
                    g.surrendered,
                    g.unknown,
                    g.available(),
                    g.issued.len(),
                    match &g.settlement {
                        Some(s) => format!(
                            "; settled by the issuer: {} consumed + {} surrendered",
                            s.consumed, s.surrendered
                        ),
                        None if g.retired => "; not settled".to_owned(),
                        None => String::new(),
                    }
                )
            })
            .collect()
    }
}

/// `gridctl inspect grants --host NAME`.
pub fn inspect_grants(host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let reply = call(&output.state, host, ProcessCall::Grants).map_err(anyhow::Error::msg)?;
    let ProcessReply::Grants { grants, .. } = reply else {
        bail!("the host answered {reply:?}");
    };
    emit(&Grants::of(host, grants), output.json);
    Ok(ExitCode::SUCCESS)
}

/// The Processes a host serves, its runs by outcome, and the `demo.count` counter.
#[derive(Serialize)]
struct Served<'a> {
    host: &'a str,
    processes: Vec<String>,
    runs: RunCounts,
    demo_count: u64,
    /// Deposits the mailbox this host keeps for others holds now.
    mailbox_deposits: u64,
    /// Interfaces the Processes implement, with their versions (`wallet@1.1.0`).
    interfaces: Vec<Interface>,
}

#[derive(Serialize)]
struct Interface {
    interface: String,
    processes: Vec<String>,
}

impl Report for Served<'_> {
    fn text(&self) -> String {
        let runs = &self.runs;
        let mut text = format!(
            "{} serves {}\n  runs: {} succeeded, {} failed, {} unknown, {} running\n  demo.count counter: {}\n  mailbox: {} deposits held\n",
            self.host,
            self.processes.join(", "),
            runs.succeeded,
            runs.failed,
            runs.unknown,
            runs.running,
            self.demo_count,
            self.mailbox_deposits
        );
        for i in &self.interfaces {
            text.push_str(&format!(
                "  interface {}: {}\n",
                i.interface,
                i.processes.join(", ")
            ));
        }
        text
    }
}

/// `gridctl inspect processes --host NAME`.
pub fn inspect_processes(host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let reply = call(&output.state, host, ProcessCall::Processes).map_err(anyhow::Error::msg)?;
    let ProcessReply::Processes {
        processes,
        runs,
        demo_count,
        mailbox_deposits,
        ..
    } = reply
    else {
        bail!("the host answered {reply:?}");
    };
    // The archive wallet's interface, when the host runs one.
    let interfaces = grid_reconciler::wallet::host_dir(&output.state, host)
        .and_then(|dir| {
            grid_reconciler::wallet::call(&dir, grid_engine::wallet::api::WalletCall::Interface)
        })
        .ok()
        .and_then(|reply| match reply {
            grid_engine::wallet::api::WalletReply::Interface {
                interface,
                processes,
            } => Some(Interface {
                interface,
                processes,
            }),
            _ => None,
        })
        .into_iter()
        .collect();
    let served = Served {
        host,
        processes,
        runs,
        demo_count,
        mailbox_deposits,
        interfaces,
    };
    emit(&served, output.json);
    Ok(ExitCode::SUCCESS)
}

/// A run call charged to the caller's own mission allocation `mission:NAME`.
fn with_mission(mut call: ProcessCall, name: Option<String>) -> ProcessCall {
    if let ProcessCall::Run { mission, .. } = &mut call {
        *mission = name;
    }
    call
}
