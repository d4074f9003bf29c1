//! `gridctl process run|resolve` and `gridctl inspect process|grants|processes`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use grid_engine::processes::api::{ProcessCall, ProcessReply, RunOutcome, RunRequest, RunView};
use grid_reconciler::processes::{call, run_call};

#[derive(Subcommand, Debug)]
pub enum ProcessCli {
    /// Run PROCESS at HOST once as the calling host CALLER (profile `processes`), under
    /// the request id ID: HOST journals the request, reserves one execution unit of
    /// CALLER's grant, runs it, journals its outcome. Re-running the same id returns the
    /// original outcome and never runs it again; a lost reply is recovered by running
    /// the same id again. Exit 0 succeeded, 1 failed, 3 unknown (ask again with the
    /// same id; a run left unknown by a crash stays so until `process resolve`),
    /// 4 refused.
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
        /// Through an encrypted mailbox at HOST instead of directly: `mailbox:HOST`.
        #[arg(long, value_name = "mailbox:HOST")]
        via: Option<String>,
        /// An argument (repeatable): NAME=VALUE.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// How long to wait for the outcome before answering unknown (the caller's
        /// wait goes on).
        #[arg(long, value_name = "MS")]
        wait_ms: Option<u64>,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// One JSON object {"request", "outcome", "result", …}.
        #[arg(long)]
        json: bool,
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
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

fn run_json(run: &RunView, host: &str) -> serde_json::Value {
    serde_json::json!({
        "request": run.request,
        "process": run.process,
        "host": host,
        "caller": run.caller,
        "via": run.via,
        "outcome": run.outcome.name(),
        "result": run.result,
        "detail": run.detail,
    })
}

fn outcome_code(outcome: RunOutcome) -> u8 {
    match outcome {
        RunOutcome::Succeeded => 0,
        RunOutcome::Failed => 1,
        RunOutcome::Unknown => 3,
    }
}

fn refused(json: bool, what: serde_json::Value, detail: &str) -> ExitCode {
    if json {
        let mut what = what;
        what["outcome"] = "refused".into();
        what["detail"] = detail.into();
        println!("{what}");
    }
    eprintln!("gridctl: refused: {detail}");
    ExitCode::from(4)
}

pub fn process(command: ProcessCli) -> anyhow::Result<ExitCode> {
    match command {
        ProcessCli::Run {
            host,
            process,
            caller,
            op,
            via,
            args,
            wait_ms,
            state,
            json,
        } => {
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
            let via = match via.as_deref().map(|v| v.strip_prefix("mailbox:")) {
                None => None,
                Some(Some(m)) if !m.is_empty() => Some(m.to_owned()),
                Some(_) => {
                    return Ok(refused(
                        json,
                        id,
                        "--via takes mailbox:HOST; nothing was sent",
                    ));
                }
            };
            let request = RunRequest {
                request: op.clone(),
                process,
                arguments,
            };
            let call_of = run_call(&state, &host, &caller, via.as_deref(), request, wait_ms);
            let reply = match call_of.and_then(|c| call(&state, &caller, c)) {
                Ok(reply) => reply,
                Err(reason) => {
                    // The caller's host may have journaled the wait: the outcome is
                    // unknown unless the call certainly never arrived.
                    if reason.starts_with("cannot reach")
                        || reason.starts_with("no host")
                        || reason.contains("share no enrolled membership")
                    {
                        return Ok(refused(json, id, &reason));
                    }
                    if json {
                        let mut id = id;
                        id["outcome"] = "unknown".into();
                        id["detail"] = reason.clone().into();
                        println!("{id}");
                    }
                    eprintln!("gridctl: unknown: {reason}");
                    return Ok(ExitCode::from(3));
                }
            };
            match reply {
                ProcessReply::Ran { run } => {
                    if json {
                        println!("{}", run_json(&run, &host));
                    } else {
                        println!(
                            "{} {} at {} ({}): {}{}{}",
                            run.request,
                            run.process,
                            host,
                            run.via,
                            run.outcome.name(),
                            run.result
                                .as_ref()
                                .map(|r| format!(" {r}"))
                                .unwrap_or_default(),
                            if run.detail.is_empty() {
                                String::new()
                            } else {
                                format!(" — {}", run.detail)
                            }
                        );
                    }
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
            state,
            json,
        } => {
            let outcome = if outcome == "succeeded" {
                RunOutcome::Succeeded
            } else {
                RunOutcome::Failed
            };
            match call(
                &state,
                &host,
                ProcessCall::Resolve {
                    request: id.clone(),
                    outcome,
                },
            ) {
                Ok(ProcessReply::Resolved { run }) => {
                    if json {
                        println!("{}", serde_json::json!({"host": host, "run": run}));
                    } else {
                        println!(
                            "{id} at {host}: resolved {} (unit {})",
                            run.outcome.name(),
                            run.units
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Ok(ProcessReply::Refused { reason }) | Err(reason) => Ok(refused(
                    json,
                    serde_json::json!({"host": host, "request": id}),
                    &reason,
                )),
                Ok(other) => bail!("the host answered {other:?}"),
            }
        }
    }
}

/// `gridctl inspect process ID --host NAME`.
pub fn inspect_process(state: &Path, id: &str, host: &str, json: bool) -> anyhow::Result<ExitCode> {
    let reply = call(
        state,
        host,
        ProcessCall::Inspect {
            request: id.to_owned(),
        },
    )
    .map_err(anyhow::Error::msg)?;
    let ProcessReply::Inspected { run } = reply else {
        bail!("the host answered {reply:?}");
    };
    if json {
        println!("{}", serde_json::json!({"host": host, "run": run}));
    } else {
        match run {
            None => println!("{host} holds no run or wait `{id}`"),
            Some(run) => {
                println!(
                    "{} ({} at {host}) {} from {} to {} ({})",
                    run.request, run.role, run.process, run.caller, run.receiver, run.via
                );
                println!("  outcome {}", run.outcome.name());
                if let Some(result) = &run.result {
                    println!("  result {result}");
                }
                if let Some(grant) = &run.grant {
                    println!("  grant {grant}: unit {}", run.units);
                }
                if !run.detail.is_empty() {
                    println!("  {}", run.detail);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `gridctl inspect grants --host NAME`.
pub fn inspect_grants(state: &Path, host: &str, json: bool) -> anyhow::Result<ExitCode> {
    let reply = call(state, host, ProcessCall::Grants).map_err(anyhow::Error::msg)?;
    let ProcessReply::Grants { grants, .. } = reply else {
        bail!("the host answered {reply:?}");
    };
    let total = |f: fn(&grid_engine::processes::api::GrantView) -> u64| -> u64 {
        grants.iter().map(f).sum()
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "host": host,
                "allocated": total(|g| g.allocated),
                "reserved": total(|g| g.reserved),
                "consumed": total(|g| g.consumed),
                "surrendered": total(|g| g.surrendered),
                "unknown": total(|g| g.unknown),
                "available": total(|g| g.available()),
                "grants": grants,
            })
        );
    } else if grants.is_empty() {
        println!("{host} issued no grants");
    } else {
        for g in &grants {
            println!(
                "{} for {}{}: allocated {} reserved {} consumed {} surrendered {} unknown {} available {} ({} signed issue(s))",
                g.name,
                g.caller,
                if g.retired { " (retired)" } else { "" },
                g.allocated,
                g.reserved,
                g.consumed,
                g.surrendered,
                g.unknown,
                g.available(),
                g.issued.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `gridctl inspect processes --host NAME`.
pub fn inspect_processes(state: &Path, host: &str, json: bool) -> anyhow::Result<ExitCode> {
    let reply = call(state, host, ProcessCall::Processes).map_err(anyhow::Error::msg)?;
    let ProcessReply::Processes {
        processes,
        runs,
        demo_count,
        ..
    } = reply
    else {
        bail!("the host answered {reply:?}");
    };
    if json {
        println!(
            "{}",
            serde_json::json!({"host": host, "processes": processes, "runs": runs, "demo_count": demo_count})
        );
    } else {
        println!("{host} serves {}", processes.join(", "));
        println!(
            "  runs: {} succeeded, {} failed, {} unknown, {} running",
            runs.succeeded, runs.failed, runs.unknown, runs.running
        );
        println!("  demo.count counter: {demo_count}");
    }
    Ok(ExitCode::SUCCESS)
}
