//! Missions (SPEC C7, docs/missions.md): plan a mission's reservation (`+ mission N @
//! H`: H quiesces its models and reserves through the authority and its issuer) and
//! its return (`~ mission N @ H: return`, from `returned=#true`); show what needs the
//! operator (`!`: a reservation or return whose answer was not received, terms that
//! differ from the signed ones, a profile missing); and the operator's calls:
//! `gridctl mission reserve|return|recover`, `gridctl inspect mission`.

use std::path::Path;

use grid_engine::custody::Signed;
use grid_engine::missions::api::{
    MissionCall, MissionReply, MissionState, MissionTerms, MissionView,
};
use grid_engine::protocol::{Call, Reply};
use grid_spec::{Profile, Topology};

use crate::diff;
use crate::diff::authority::{bootstrapped, joined};
use crate::observe::{self, HostStatus, World};
use crate::transition::{Action, Effect, Op, Status, Wait};
use crate::transition::{Draft, enrolled};

pub use crate::transition::MissionStep as Step;

fn line(op: Op, name: &str, host: &str, detail: String, step: Step) -> Draft {
    Draft::new(op, "mission", name, host, detail, Action::Mission { step })
}

/// The membership the mission's host and issuer share with an authority, per the
/// files.
fn membership(topology: &Topology, mission: &grid_spec::Mission) -> Option<String> {
    let of = |h: &str| {
        topology
            .host(h)
            .map(|h| h.memberships.clone())
            .unwrap_or_default()
    };
    let issuer = of(&mission.issuer);
    of(&mission.host).into_iter().find(|m| {
        issuer.contains(m)
            && topology
                .memberships
                .iter()
                .any(|d| &d.name == m && d.authority_voters.is_some())
    })
}

/// What the files lack for a mission to run, naming it.
fn unfit(topology: &Topology, mission: &grid_spec::Mission) -> Option<String> {
    let needs = |host: &str, profiles: &[Profile]| -> Option<String> {
        let h = topology.host(host)?;
        profiles
            .iter()
            .find(|p| !h.profiles.contains(p))
            .map(|p| format!("host `{host}` does not select profile `{}`", p.name()))
    };
    needs(
        &mission.host,
        &[Profile::Missions, Profile::Processes, Profile::Authority],
    )
    .or_else(|| needs(&mission.issuer, &[Profile::Missions, Profile::Authority]))
    .or_else(|| {
        membership(topology, mission).is_none().then(|| {
            format!(
                "`{}` and its issuer `{}` share no membership with an authority",
                mission.host, mission.issuer
            )
        })
    })
}

pub fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for mission in &topology.missions {
        let Some(host) = world.host(&mission.host) else {
            continue;
        };
        let attention =
            |detail: String| Draft::attention("mission", &mission.name, &mission.host, detail);
        if let Some(why) = unfit(topology, mission) {
            out.push(attention(format!("{why}: the mission is not reserved")));
            continue;
        }
        let membership = membership(topology, mission).expect("checked by unfit");
        let held = match &host.status {
            HostStatus::Running(observed) => {
                observed.missions.iter().find(|m| m.name == mission.name)
            }
            HostStatus::Missing => None,
            // Installed and not answering: its own line says so; nothing is guessed.
            // Locked: its own line says so; its rooms are not observed.
            HostStatus::Unreachable { .. } | HostStatus::Locked(_) => continue,
        };
        let key = format!("mission:{}:{}", mission.host, mission.name);
        let Some(held) = held else {
            if mission.returned {
                out.push(attention(
                    "returned=#true, but the host holds no such mission: nothing to return"
                        .to_owned(),
                ));
                continue;
            }
            let stopped: Vec<String> = [&mission.host, &mission.issuer]
                .into_iter()
                .filter(|h| world.running(h).is_none())
                .cloned()
                .collect();
            let mut after: Vec<String> = Vec::new();
            for h in [&mission.host, &mission.issuer] {
                after.extend(diff::installed(h));
                after.push(enrolled(h, &membership));
                after.extend(joined(&membership, h));
            }
            after.push(bootstrapped(&membership));
            out.push(
                line(
                    Op::Create,
                    &mission.name,
                    &mission.host,
                    format!(
                        "quiesce `{}`'s models and reserve {} unit(s) until {} through the authority of {membership}; `{}` signs the allocation; successor `{}`",
                        mission.host, mission.units, mission.deadline, mission.issuer, mission.successor
                    ),
                    Step::Reserve {
                        name: mission.name.clone(),
                        host: mission.host.clone(),
                        units: mission.units,
                        deadline: mission.deadline.clone(),
                        successor: mission.successor.clone(),
                        issuer: mission.issuer.clone(),
                        membership,
                    },
                )
                .key(key)
                .after(after)
                .waits((!stopped.is_empty()).then(|| Wait::running(stopped))),
            );
            continue;
        };
        let terms = &held.terms;
        if terms.units != mission.units
            || terms.deadline != mission.deadline
            || terms.successor != mission.successor
            || terms.issuer != mission.issuer
        {
            out.push(attention(format!(
                "the files say {} unit(s) until {} (issuer `{}`, successor `{}`), the reservation holds {} until {} (issuer `{}`, successor `{}`): a mission's signed terms never change",
                mission.units,
                mission.deadline,
                mission.issuer,
                mission.successor,
                terms.units,
                terms.deadline,
                terms.issuer,
                terms.successor
            )));
            continue;
        }
        match held.state {
            MissionState::Reserving => out.push(attention(format!(
                "reserving under op `{}`: no allocation received ({}); re-send it with `gridctl mission reserve {} --host {} --op {}`, or if its issuer never issued it, `gridctl mission recover {} --host {} --op ID`",
                held.reservation,
                held.detail,
                mission.name,
                mission.host,
                held.reservation,
                mission.name,
                mission.host
            ))),
            MissionState::Active | MissionState::Exhausted if mission.returned => {
                if held.units.unknown > 0 || held.units.reserved > 0 {
                    out.push(attention(format!(
                        "returned=#true, but {} run(s) are unknown and {} running: unknown outcomes are reconciled by their owner first (`gridctl process resolve ID --outcome succeeded|failed --host {}`)",
                        held.units.unknown, held.units.reserved, mission.host
                    )));
                    continue;
                }
                out.push(line(
                    Op::Change,
                    &mission.name,
                    &mission.host,
                    format!(
                        "return: new work stops; the signed consumption record ({} consumed, {} released of {}) to `{}`, which settles it; the reservation is released and the models take batches from outside again",
                        held.units.consumed, held.units.released, held.units.allocated, mission.issuer
                    ),
                    Step::Return {
                        name: mission.name.clone(),
                    },
                ));
            }
            MissionState::Refused => out.push(attention(format!(
                "its reservation under op `{}` was refused ({}); nothing is reserved — a mission has one reservation: declare a new mission",
                held.reservation, held.detail
            ))),
            MissionState::Returning => out.push(attention(format!(
                "returning under op `{}`: not settled ({}); re-send it with `gridctl mission return {} --host {} --op {}`",
                held.return_op.as_deref().unwrap_or("?"),
                held.detail,
                mission.name,
                mission.host,
                held.return_op.as_deref().unwrap_or("?")
            ))),
            _ => {}
        }
    }
    // Missions a host holds that no file declares: unmanaged, never returned.
    for o in &world.hosts {
        if let HostStatus::Running(observed) = &o.status {
            for held in &observed.missions {
                if !topology
                    .missions
                    .iter()
                    .any(|m| m.name == held.name && m.host == o.name)
                {
                    out.push(Draft::attention(
                        "mission",
                        &held.name,
                        &o.name,
                        format!(
                            "unmanaged ({}): the host holds it but no file declares it; nothing is returned",
                            held.state.name()
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// The reservation of mission `name` as the files state it: its host and step.
pub fn from_files(topology: &Topology, name: &str) -> Result<(String, Step), String> {
    let mission = topology
        .missions
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| format!("the files declare no mission `{name}`"))?;
    if let Some(why) = unfit(topology, mission) {
        return Err(format!("{why}: nothing was sent"));
    }
    Ok((
        mission.host.clone(),
        Step::Reserve {
            name: mission.name.clone(),
            host: mission.host.clone(),
            units: mission.units,
            deadline: mission.deadline.clone(),
            successor: mission.successor.clone(),
            issuer: mission.issuer.clone(),
            membership: membership(topology, mission).expect("checked by unfit"),
        },
    ))
}

/// The terms of a reservation, with the issuer's address and both hosts' public keys
/// read from their installations now.
pub fn terms(state: &Path, step: &Step) -> Result<Option<MissionTerms>, String> {
    let Step::Reserve {
        name,
        host,
        units,
        deadline,
        successor,
        issuer,
        membership,
    } = step
    else {
        return Ok(None);
    };
    let issuer_peer = crate::processes::peer(state, issuer)?;
    let host_peer = crate::processes::peer(state, host)?;
    Ok(Some(MissionTerms {
        name: name.clone(),
        host: host.clone(),
        units: *units,
        deadline: deadline.clone(),
        successor: successor.clone(),
        issuer: issuer.clone(),
        issuer_address: issuer_peer.address,
        membership: membership.clone(),
        issuer_keys: issuer_peer.keys,
        host_keys: host_peer.keys,
    }))
}

/// One missions call to `host` (its control socket; refusals and unknowns as
/// [`crate::operation::room_call`] tells them apart).
pub fn call(state: &Path, host: &str, request: MissionCall) -> Result<MissionReply, String> {
    crate::operation::room_call(
        (state, host),
        Call::Mission { request },
        |reply| match reply {
            Reply::Mission(reply) => Ok(*reply),
            other => Err(Box::new(other)),
        },
        |reason| MissionReply::Refused { reason },
    )
}

/// The host holding mission `name`: `host` when given, else the one installed host
/// that answers holding it.
pub fn find(state: &Path, name: &str, host: Option<&str>) -> Result<String, String> {
    if let Some(host) = host {
        return Ok(host.to_owned());
    }
    if !state.join("hosts").is_dir() {
        return Err(format!(
            "{}: no host is installed here",
            state.join("hosts").display()
        ));
    }
    // Every host asked at once (a state may hold many).
    let mut found: Vec<String> = observe::each_installed(state, |candidate| {
        let inspect = MissionCall::Inspect {
            mission: name.to_owned(),
        };
        matches!(
            call(state, candidate, inspect),
            Ok(MissionReply::Mission { .. })
        )
    })
    .into_iter()
    .filter_map(|(candidate, holds)| holds.then_some(candidate))
    .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "no running host holds mission `{name}` (name it with --host)"
        )),
        _ => Err(format!(
            "hosts {} hold a mission `{name}`: name one with --host",
            found.join(", ")
        )),
    }
}

/// Each signed document of a mission and whether it verifies offline with the
/// signer's public keys: the manifest in the signer's installation when present
/// (else the keys the reservation's terms carry, said so).
pub fn verify(state: &Path, view: &MissionView) -> Vec<(String, String, bool)> {
    let keys = |host: &str, carried: &grid_engine::custody::Manifest| match observe::installed(
        state, host,
    )
    .and_then(|d| grid_engine::custody::manifest(&d).map_err(|e| e.to_string()))
    {
        Ok(m) => (m, format!("{host}'s installed manifest")),
        Err(_) => (
            carried.clone(),
            format!("{host}'s keys as the terms carry them"),
        ),
    };
    let (issuer_keys, issuer_from) = keys(&view.issuer, &view.terms.issuer_keys);
    let (host_keys, host_from) = keys(&view.host, &view.terms.host_keys);
    let mut out = Vec::new();
    if let Some(a) = &view.allocation {
        out.push((
            "allocation".to_owned(),
            issuer_from.clone(),
            a.verify(&issuer_keys),
        ));
    }
    if let Some(c) = &view.consumption {
        let runs = c.runs.iter().all(|r| r.run.verify(&host_keys));
        out.push((
            "consumption".to_owned(),
            host_from.clone(),
            c.verify(&host_keys) && runs,
        ));
    }
    if let Some(s) = &view.settlement {
        out.push((
            "settlement".to_owned(),
            issuer_from.clone(),
            s.verify(&issuer_keys),
        ));
    }
    if let Some(c) = &view.closure {
        out.push(("closure".to_owned(), issuer_from, c.verify(&issuer_keys)));
    }
    out
}

/// Applies a mission step: sent to its host once, with the transition's id. The host
/// answers a re-sent id from its record, so whether it took effect is always asked.
pub fn apply(state: &Path, host: &str, op: &str, step: &Step) -> Effect {
    let request = match step {
        Step::Reserve { name, .. } => match terms(state, step) {
            Ok(terms) => MissionCall::Reserve {
                op: op.to_owned(),
                mission: name.clone(),
                terms,
            },
            Err(e) => return Effect::new(Status::Refused, format!("{e}; nothing was sent")),
        },
        Step::Return { name } => MissionCall::Return {
            op: op.to_owned(),
            mission: name.clone(),
        },
    };
    match call(state, host, request) {
        Ok(MissionReply::Mission { mission }) => {
            Effect::new(Status::Succeeded, mission.detail.clone())
        }
        Ok(MissionReply::Unknown { reason, .. }) => Effect::new(Status::Unknown, reason),
        Ok(MissionReply::Refused { reason }) => Effect::new(Status::Refused, reason),
        Ok(other) => Effect::new(Status::Failed, format!("unexpected reply {other:?}")),
        Err(e) => Effect::new(Status::Unknown, e),
    }
}
