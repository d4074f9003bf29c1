//! `gridctl mission reserve|return|recover` and `gridctl inspect mission`
//! (docs/missions.md).

use std::process::ExitCode;

use clap::Subcommand;
use grid_engine::missions::api::{MissionCall, MissionReply, MissionView};
use grid_reconciler::missions::{call, find, verify};
use serde::Serialize;

use crate::Output;
use crate::report::{NotDone, Report, emit, emit_failure};

#[derive(Subcommand, Debug)]
pub enum MissionCli {
    /// Reserve mission NAME as FILES declare it under the id ID (reconcile plans the
    /// same as `+ mission` with a plan's id), or, without FILES, re-send the stored
    /// reservation with its original id (after a lost reply or an unreachable
    /// issuer): the host re-sends the same steps under the same ids and gets their
    /// original answers — one allocation, never two. Exit 0 reserved
    /// (the mission as it stands), 3 unknown (re-send the same id), 4 refused.
    #[command(mut_arg("json", |a| a.help(
        "The mission as `inspect mission` prints it, or {\"mission\", \"outcome\", \"detail\"}"
    )))]
    Reserve {
        name: String,
        /// Topology files: reserve NAME as they declare it, under the operator's own
        /// id ID instead of a plan's (without them: re-send the stored reservation).
        files: Vec<std::path::PathBuf>,
        /// The reservation's id (required with FILES; without them, by default the id
        /// the host stored with the reservation).
        #[arg(long, value_name = "ID")]
        op: Option<String>,
        /// The mission's host (found among the installed hosts when omitted).
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Return mission NAME (as `returned=#true` plans it): new work stops, the host
    /// signs its consumption record — every run charged to the allocation with its
    /// signed outcome — and sends it to the issuer, which verifies it against the
    /// allocation and the standing reservation and signs the settlement; then the
    /// reservation is released and the models take batches from outside again.
    /// Refused while a run is unknown (its owner resolves it first). Exit 0 settled,
    /// 3 unknown (re-send the same id), 4 refused.
    #[command(mut_arg("json", |a| a.help(
        "The mission as `inspect mission` prints it, or {\"mission\", \"outcome\", \"detail\"}"
    )))]
    Return {
        name: String,
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Never-issued recovery of mission NAME: its host asks the issuer to prove it
    /// never issued the allocation; the issuer closes the reservation once and signs
    /// the closure (refused if it issued one, or if no reservation stands at the
    /// authority); the host journals it and hands the reservation's claim to the
    /// successor named at departure. The installation stays quiesced; its earlier
    /// uncertain effects stay with their original owners. Exit 0 closed and
    /// recovered, 3 unknown, 4 refused.
    #[command(mut_arg("json", |a| a.help(
        "The mission as `inspect mission` prints it, or {\"mission\", \"outcome\", \"detail\"}"
    )))]
    Recover {
        name: String,
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
}

/// A mission as `inspect mission` and the mission commands print it: its view and
/// whether each signed document verifies offline.
#[derive(Serialize)]
pub struct Shown<'a> {
    #[serde(flatten)]
    pub mission: &'a MissionView,
    pub verified: Vec<Verified>,
}

#[derive(Serialize)]
pub struct Verified {
    pub document: String,
    pub keys: String,
    pub verified: bool,
}

impl Report for Shown<'_> {
    fn text(&self) -> String {
        let m = self.mission;
        let mut out = format!(
            "mission {} @ {}: {}{}\n  units: {} allocated, {} consumed, {} reserved, {} unknown, {} released, {} available\n  deadline {}, issuer {}, successor {}, quiesced {}\n  reservation `{}` ({} at epoch {})\n",
            m.name,
            m.host,
            m.state.name(),
            m.limit
                .as_ref()
                .map(|l| format!(" — new work stops ({l})"))
                .unwrap_or_default(),
            m.units.allocated,
            m.units.consumed,
            m.units.reserved,
            m.units.unknown,
            m.units.released,
            m.units.available,
            m.deadline,
            m.issuer,
            m.successor,
            m.quiesced,
            m.reservation,
            m.claim,
            m.epoch.map_or("-".to_owned(), |e| e.to_string()),
        );
        for (claim, epoch) in &m.recovered {
            out.push_str(&format!(
                "  recovered {claim} into {} at epoch {epoch}\n",
                m.successor
            ));
        }
        for v in &self.verified {
            out.push_str(&format!(
                "  {}: {} ({})\n",
                v.document,
                if v.verified {
                    "verifies"
                } else {
                    "DOES NOT VERIFY"
                },
                v.keys
            ));
        }
        out.push_str(&format!("  {}\n", m.detail));
        out
    }
}

fn shown(output: &Output, view: &MissionView) -> bool {
    let verified: Vec<Verified> = verify(&output.state, view)
        .into_iter()
        .map(|(document, keys, verified)| Verified {
            document,
            keys,
            verified,
        })
        .collect();
    let all = verified.iter().all(|v| v.verified);
    emit(
        &Shown {
            mission: view,
            verified,
        },
        output.json,
    );
    all
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
            id: serde_json::json!({ "mission": name }),
            outcome,
            detail: detail.to_owned(),
        },
        output.json,
    );
    eprintln!("mission {name}: {outcome}: {detail}");
    ExitCode::from(code)
}

fn answer(
    output: &Output,
    name: &str,
    host: Option<&str>,
    request: impl FnOnce() -> MissionCall,
) -> ExitCode {
    let host = match find(&output.state, name, host) {
        Ok(host) => host,
        Err(e) => return not_done(output, name, "refused", &e, 4),
    };
    match call(&output.state, &host, request()) {
        Ok(MissionReply::Mission { mission }) => {
            if shown(output, &mission) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Ok(MissionReply::Unknown { reason, .. }) => not_done(output, name, "unknown", &reason, 3),
        Ok(MissionReply::Refused { reason }) => not_done(output, name, "refused", &reason, 4),
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

pub fn mission(command: MissionCli) -> anyhow::Result<ExitCode> {
    Ok(match command {
        MissionCli::Reserve {
            name,
            files,
            op,
            host,
            output,
        } if !files.is_empty() => {
            let Some(topology) = crate::common::load(&files, grid_spec::Options::default()) else {
                return Ok(ExitCode::from(2));
            };
            let terms =
                grid_reconciler::missions::from_files(&topology, &name).and_then(|(at, step)| {
                    grid_reconciler::missions::terms(&output.state, &step).map(|t| (at, t))
                });
            let Some(op) = op else {
                return Ok(not_done(
                    &output,
                    &name,
                    "refused",
                    "a reservation from the files needs its id (--op ID); nothing was sent",
                    4,
                ));
            };
            match terms {
                Ok((at, terms)) => {
                    answer(&output, &name, Some(host.as_deref().unwrap_or(&at)), || {
                        MissionCall::Reserve {
                            op,
                            mission: name.clone(),
                            terms,
                        }
                    })
                }
                Err(e) => not_done(&output, &name, "refused", &e, 4),
            }
        }
        MissionCli::Reserve {
            name,
            op,
            host,
            output,
            ..
        } => {
            let op = match op {
                Some(op) => op,
                // The stored reservation's own id.
                None => match find(&output.state, &name, host.as_deref()).and_then(|h| {
                    call(
                        &output.state,
                        &h,
                        MissionCall::Inspect {
                            mission: name.clone(),
                        },
                    )
                }) {
                    Ok(MissionReply::Mission { mission }) => mission.reservation.clone(),
                    Ok(MissionReply::Refused { reason }) | Err(reason) => {
                        return Ok(not_done(&output, &name, "refused", &reason, 4));
                    }
                    Ok(other) => {
                        return Ok(not_done(
                            &output,
                            &name,
                            "refused",
                            &format!("unexpected reply {other:?}"),
                            4,
                        ));
                    }
                },
            };
            answer(&output, &name, host.as_deref(), || MissionCall::Reserve {
                op,
                mission: name.clone(),
                terms: None,
            })
        }
        MissionCli::Return {
            name,
            op,
            host,
            output,
        } => answer(&output, &name, host.as_deref(), || MissionCall::Return {
            op,
            mission: name.clone(),
        }),
        MissionCli::Recover {
            name,
            op,
            host,
            output,
        } => answer(&output, &name, host.as_deref(), || MissionCall::Recover {
            op,
            mission: name.clone(),
        }),
    })
}

/// `gridctl inspect mission NAME [--host H]`: exit 0 when every signed document
/// verifies, 1 when one does not, 4 when no host holds it.
pub fn inspect(name: &str, host: Option<&str>, output: &Output) -> ExitCode {
    answer(output, name, host, || MissionCall::Inspect {
        mission: name.to_owned(),
    })
}
