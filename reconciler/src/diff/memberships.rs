//! Membership authorities (in the operator's state), revocations, and each host's
//! enrollment in the memberships its `member` lines name: their transitions (pure)
//! and their apply (the authority's files, each host's certificate and revocation
//! list), each with whether it took effect.

use std::path::Path;

use grid_engine::custody::membership;
use grid_spec::Topology;

use crate::observe::{HostObservation, Keys, World};
use crate::transition::{Action, Effect, MEMBERSHIP_OWNER_PREFIX, Op, Status, Wait, WaitReason};
use crate::transition::{Draft, enrolled, installed};

fn owner(membership: &str) -> String {
    format!("{MEMBERSHIP_OWNER_PREFIX}{membership}")
}

pub fn memberships(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for observed in &world.memberships {
        let name = &observed.name;
        let Some(desired) = topology.memberships.iter().find(|m| m.name == *name) else {
            out.push(Draft::attention(
                "membership",
                name,
                &owner(name),
                "unmanaged: its authority exists in the state directory but no file declares it"
                    .to_owned(),
            ));
            continue;
        };
        let dir = grid_engine::custody::membership::authority_dir(&world.state, name);
        if observed.record.is_none() {
            out.push(
                Draft::new(
                    Op::Create,
                    "membership",
                    name,
                    &owner(name),
                    format!("certificate authority in {}", dir.display()),
                    Action::CreateAuthority {
                        membership: name.clone(),
                    },
                )
                .key(format!("membership:{name}")),
            );
        }
        for participant in &desired.revoked {
            let done = observed
                .record
                .as_ref()
                .is_some_and(|r| r.revoked.contains(participant));
            if !done {
                out.push(Draft::new(
                    Op::Retire,
                    "participant",
                    participant,
                    &owner(name),
                    format!("revoke `{participant}` in membership {name}: every certificate it holds, in a new revocation list"),
                    Action::Revoke {
                        membership: name.clone(),
                        participant: participant.clone(),
                    },
                )
                .key(format!("revoke:{name}:{participant}"))
                .after([format!("membership:{name}")]));
            }
        }
    }
    out
}

pub fn enrollments(
    topology: &Topology,
    world: &World,
    desired: &grid_spec::Host,
    observation: &HostObservation,
) -> Vec<Draft> {
    let mut out = Vec::new();
    let name = &observation.name;
    // The installation and its keys come first: planned by this plan when the
    // installation does not exist yet, or exists without custody.
    let creating = observation.config.is_none() || observation.keys == Keys::Absent;
    if observation.config.is_some() && observation.keys.manifest().is_none() && !creating {
        return out; // unreadable custody: its `!` line says so
    }
    if observation.config.is_none() && !world.missing(name) {
        return out; // unreadable installation
    }
    for m in &desired.memberships {
        let Some(membership_spec) = topology.memberships.iter().find(|x| x.name == *m) else {
            continue;
        };
        let record = world.membership(m).and_then(|o| o.record.as_ref());
        if membership_spec.revoked.contains(name)
            || record.is_some_and(|r| r.revoked.contains(name))
        {
            out.push(Draft::attention(
                "enrollment",
                &format!("{name} in {m}"),
                name,
                format!("`{name}` is revoked in {m}; its `member {m}` line no longer admits it and it is never enrolled again"),
            ));
            continue;
        }
        let held = observation
            .enrollments
            .get(m)
            .and_then(|e| e.enrollment.as_ref());
        let tls = observation.keys.manifest().map(|k| &k.tls);
        // A TLS rotation this plan makes: every membership certifies the new key after.
        let rotating_tls = observation
            .keys
            .manifest()
            .is_some_and(|k| desired.tls_key_generation.unwrap_or(1) > k.tls_generation)
            && matches!(observation.status, crate::observe::HostStatus::Running(_));
        let reason = match (held, record) {
            _ if creating => Some("certificate for its TLS key".to_owned()),
            (Some(_), _) if rotating_tls => Some("certificate for its rotated TLS key".to_owned()),
            (None, _) => Some("certificate for its TLS key".to_owned()),
            (Some(e), Some(r)) if e.authority != r.fingerprint => {
                Some("its certificate is from another authority".to_owned())
            }
            (Some(e), _) if Some(&e.tls) != tls => {
                Some("its certificate names another TLS key".to_owned())
            }
            _ => None,
        };
        if let Some(reason) = reason {
            out.push(
                Draft::new(
                    Op::Create,
                    "enrollment",
                    &format!("{name} in {m}"),
                    name,
                    reason,
                    Action::Enroll {
                        membership: m.clone(),
                        valid_days: membership_spec.certificate_valid_days,
                    },
                )
                .key(enrolled(name, m))
                .after(installed(name))
                .after([format!("membership:{m}"), format!("rotate-tls:{name}")]),
            );
            // Enrollment copies the authority's revocation list, after this plan's
            // revocations (which come first).
            continue;
        }
        if let Some(held) = held
            && let Some(due) = renewal_due(held, membership_spec.renew_before_days)
        {
            out.push(
                Draft::new(
                    Op::Change,
                    "enrollment",
                    &format!("{name} in {m}"),
                    name,
                    format!("renew ({due})"),
                    Action::Renew {
                        membership: m.clone(),
                        serial: held.serial,
                        valid_days: membership_spec.certificate_valid_days,
                    },
                )
                .key(format!("renew:{name}:{m}")),
            );
        }
        let revoking: Vec<String> = membership_spec
            .revoked
            .iter()
            .filter(|p| !record.is_some_and(|r| r.revoked.contains(p)))
            .map(|p| format!("revoke:{m}:{p}"))
            .collect();
        let current = observation
            .enrollments
            .get(m)
            .is_some_and(|e| e.revocations_current);
        if !revoking.is_empty() || !current {
            out.push(revocations(name, m).after(revoking));
        }
    }
    for m in observation
        .custody
        .1
        .iter()
        .filter(|m| desired.leaving.contains(m))
    {
        out.push(leave(topology, name, m, observation));
    }
    for m in &observation.custody.1 {
        if desired.leaving.contains(m) {
            continue;
        }
        let revoked = world
            .membership(m)
            .and_then(|o| o.record.as_ref())
            .is_some_and(|r| r.revoked.contains(name));
        if !desired.memberships.contains(m) && !revoked {
            out.push(Draft::attention(
                "enrollment",
                &format!("{name} in {m}"),
                name,
                format!("unmanaged: the files no longer list `member {m}`; nothing is revoked until a `revoke {name}` line says so"),
            ));
        }
    }
    out
}

/// Why `held` is due for renewal — `expires in N days` within `renew_before_days`
/// of its end, or `expired at T` — or `None`. An unreadable `not_after` is due: a
/// certificate whose end is unknown is renewed rather than trusted.
fn renewal_due(held: &membership::Enrollment, renew_before_days: u32) -> Option<String> {
    let format = &time::format_description::well_known::Rfc3339;
    let Ok(end) = time::OffsetDateTime::parse(&held.not_after, format) else {
        return Some(format!("its end `{}` is unreadable", held.not_after));
    };
    let left = end - time::OffsetDateTime::now_utc();
    if left <= time::Duration::ZERO {
        Some(format!("expired at {}", held.not_after))
    } else if left < time::Duration::days(i64::from(renew_before_days)) {
        Some(format!(
            "expires in {} days, at {}",
            left.whole_days(),
            held.not_after
        ))
    } else {
        None
    }
}

/// The key of the transition by which `host` leaves `membership`.
pub fn left(membership: &str, host: &str) -> String {
    format!("leave:{membership}:{host}")
}

/// `- membership M @ H (leave …)`: `member M leave=#true` while H is still enrolled in
/// M. It waits for H to run, and for every obligation H still has there to close.
fn leave(
    topology: &Topology,
    host: &str,
    membership: &str,
    observation: &HostObservation,
) -> Draft {
    let grants = crate::observe::leave_grants(topology, host, membership);
    let (detail, wait) = match observation.obligations.get(membership) {
        None => (
            "leave (its obligations there are asked once it runs)".to_owned(),
            Some(Wait::running([host.to_owned()])),
        ),
        Some(Err(e)) => (
            format!("leave (its obligations there could not be read: {e})"),
            Some(Wait::running([host.to_owned()])),
        ),
        Some(Ok(open)) if open.is_empty() => (
            "leave: nothing is open there; its models stop serving it and its certificate is set aside".to_owned(),
            None,
        ),
        Some(Ok(open)) => {
            let shown = grid_engine::limits::LEAVE_OBLIGATIONS_SHOWN_MAX;
            let mut list = open.iter().take(shown).cloned().collect::<Vec<_>>().join("; ");
            if open.len() > shown {
                list += &format!("; and {} more", open.len() - shown);
            }
            (
                format!("leave, waiting for: {list}"),
                Some(Wait {
                    reason: WaitReason::ObligationsOpen,
                    hosts: vec![host.to_owned()],
                }),
            )
        }
    };
    Draft::new(
        Op::Retire,
        "membership",
        membership,
        host,
        detail,
        Action::Submit {
            request: grid_engine::protocol::Request::LeaveMembership {
                membership: membership.to_owned(),
                grants,
            },
        },
    )
    .key(left(membership, host))
    .waits(wait)
}

fn revocations(host: &str, membership: &str) -> Draft {
    Draft::new(
        Op::Change,
        "revocations",
        &format!("{membership} at {host}"),
        host,
        "load the membership's current revocation list".to_owned(),
        Action::DistributeRevocations {
            membership: membership.to_owned(),
        },
    )
    .key(format!("revocations:{host}:{membership}"))
}

// Applying: the authority's files in the operator's state, and each host's copy of
// its certificate and revocation list.

/// Creates the certificate authority of `name` in the operator's state.
pub fn create_authority(state: &Path, name: &str) -> Effect {
    Effect::local(
        membership::create_authority(&membership::authority_dir(state, name), name)
            .map(|r| format!("authority {}", r.fingerprint))
            .map_err(|e| e.to_string()),
    )
}

/// Whether the authority of `name` exists.
pub fn authority_created(state: &Path, name: &str) -> bool {
    membership::read_authority(&membership::authority_dir(state, name)).is_ok()
}

/// Enrolls once: a host already holding a current certificate of this authority for
/// its current TLS key is answered "already enrolled", never issued a second one.
pub fn enroll(state: &Path, dir: &Path, name: &str, participant: &str, valid_days: u32) -> Effect {
    let authority = membership::authority_dir(state, name);
    let record = match membership::read_authority(&authority) {
        Ok(r) => r,
        Err(e) => return Effect::new(Status::Failed, e.to_string()),
    };
    let tls = grid_engine::custody::manifest(dir).map(|m| m.tls).ok();
    if let Ok(Some(held)) = membership::read_enrollment(dir, name)
        && held.authority == record.fingerprint
        && Some(&held.tls) == tls.as_ref()
    {
        return Effect::new(
            Status::Succeeded,
            format!("already enrolled (serial {})", held.serial),
        );
    }
    Effect::local(
        membership::enroll_for(&authority, dir, participant, valid_days)
            .map(|e| {
                format!(
                    "certificate serial {} valid until {}{}",
                    e.serial,
                    e.not_after,
                    forget_retired_tls(dir)
                )
            })
            .map_err(|e| e.to_string()),
    )
}

/// After a certificate is issued: the retired TLS secrets no membership's certificate
/// names any more are removed (never offered again), as `; retired TLS key … removed`.
fn forget_retired_tls(dir: &Path) -> String {
    let certified: Vec<String> = membership::enrolled_memberships(dir)
        .iter()
        .filter_map(|m| membership::read_enrollment(dir, m).ok().flatten())
        .map(|e| e.tls)
        .collect();
    match grid_engine::custody::forget_retired_tls(dir, &certified) {
        Ok(removed) if removed.is_empty() => String::new(),
        Ok(removed) => format!("; retired TLS key {} removed", removed.join(", ")),
        Err(e) => format!("; a retired TLS key could not be removed: {e}"),
    }
}

/// Renews the certificate of `serial` once: when the installation holds another
/// serial already, it was renewed ("already renewed"), never issued a second one.
pub fn renew(
    state: &Path,
    dir: &Path,
    name: &str,
    participant: &str,
    serial: u64,
    valid_days: u32,
) -> Effect {
    match membership::read_enrollment(dir, name) {
        Ok(Some(held)) if held.serial != serial => {
            return Effect::new(
                Status::Succeeded,
                format!(
                    "already renewed (serial {} valid until {})",
                    held.serial, held.not_after
                ),
            );
        }
        Ok(Some(_)) => {}
        Ok(None) => {
            return Effect::new(
                Status::Failed,
                format!("`{participant}` holds no certificate of `{name}` to renew"),
            );
        }
        Err(e) => return Effect::new(Status::Failed, e.to_string()),
    }
    Effect::local(
        membership::enroll_for(&membership::authority_dir(state, name), dir, participant, valid_days)
            .map(|e| {
                format!(
                    "renewed: certificate serial {} (was {serial}) valid until {}; the same participant, key and history{}",
                    e.serial,
                    e.not_after,
                    forget_retired_tls(dir)
                )
            })
            .map_err(|e| e.to_string()),
    )
}

/// Whether the installation at `dir` holds a certificate of `name` other than `serial`.
pub fn renewed(dir: &Path, name: &str, serial: u64) -> bool {
    membership::read_enrollment(dir, name).is_ok_and(|e| e.is_some_and(|e| e.serial != serial))
}

/// Whether the installation at `dir` holds a certificate of `name`.
pub fn enrolled_in(dir: &Path, name: &str) -> bool {
    membership::read_enrollment(dir, name).is_ok_and(|e| e.is_some())
}

/// Revokes `participant` in a new revocation list of `name`; once.
pub fn revoke(state: &Path, name: &str, participant: &str) -> Effect {
    if revoked(state, name, participant) {
        return Effect::new(
            Status::Succeeded,
            format!("`{participant}` already revoked"),
        );
    }
    Effect::local(
        membership::revoke(&membership::authority_dir(state, name), participant)
            .map(|r| format!("revocation list {} issued", r.crl_number))
            .map_err(|e| e.to_string()),
    )
}

/// Whether `name`'s authority lists `participant` as revoked.
pub fn revoked(state: &Path, name: &str, participant: &str) -> bool {
    membership::read_authority(&membership::authority_dir(state, name))
        .is_ok_and(|r| r.revoked.iter().any(|p| p == participant))
}

/// Copies `name`'s current revocation list into the installation at `dir`.
pub fn distribute_revocations(state: &Path, dir: &Path, name: &str) -> Effect {
    Effect::local(
        membership::distribute_revocations(&membership::authority_dir(state, name), dir, name)
            .map(|()| "revocation list loaded".to_owned())
            .map_err(|e| e.to_string()),
    )
}

/// Whether the installation at `dir` holds `name`'s current revocation list.
pub fn revocations_distributed(state: &Path, dir: &Path, name: &str) -> bool {
    membership::revocations_current(&membership::authority_dir(state, name), dir, name)
}
