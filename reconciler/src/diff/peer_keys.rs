//! Peers learn rotated keys through their membership (docs/custody.md): when a member
//! host's signing or mail key has rotated since others recorded it, each fellow member
//! gets the rotated host's public manifest in its installation
//! (`DIR/memberships/M/keys/P.toml`, `custody::book`), so its routes, grants and
//! missions use the new keys without a new grant, route or restart.
//!
//! `~ peer-keys M at H: learn the rotated keys of P (signing generation 3, mail
//! generation 2)` — planned for H when its copy of a rotated member's manifest differs
//! from the member's custody, or when this plan rotates a member (after that rotation;
//! the keys written are read when it applies).

use std::path::Path;

use grid_engine::custody::{Manifest, book};

use crate::observe::{HostObservation, World, host_dir};
use crate::transition::{Action, Draft, Effect, Index, Op};

/// Whether `manifest` names keys other than the first generation's.
fn rotated(manifest: &Manifest) -> bool {
    manifest.generation > 1 || manifest.mail_generation > 1 || manifest.tls_generation > 1
}

pub fn transitions(
    index: &Index,
    world: &World,
    desired: &grid_spec::Host,
    observation: &HostObservation,
) -> Vec<Draft> {
    let mut out = Vec::new();
    let name = &observation.name;
    for (m, held) in &observation.enrollments {
        if held.enrollment.is_none() || !desired.memberships.contains(m) {
            continue;
        }
        let mut stale = Vec::new();
        let mut after = Vec::new();
        for peer in &world.hosts {
            let member = peer
                .enrollments
                .get(m)
                .is_some_and(|e| e.enrollment.is_some());
            if peer.name == *name || !member {
                continue;
            }
            let Some(manifest) = peer.keys.manifest() else {
                continue;
            };
            let wanted = index.host(&peer.name);
            let pending = wanted.is_some_and(|w| {
                w.key_generation.unwrap_or(1) > manifest.generation
                    || w.mail_key_generation.unwrap_or(1) > manifest.mail_generation
                    || w.tls_key_generation.unwrap_or(1) > manifest.tls_generation
            });
            let known = held.peer_keys.get(&peer.name);
            if pending || (rotated(manifest) && known != Some(manifest)) {
                let (signing, mail) =
                    wanted.map_or((manifest.generation, manifest.mail_generation), |w| {
                        (
                            w.key_generation.unwrap_or(1).max(manifest.generation),
                            w.mail_key_generation
                                .unwrap_or(1)
                                .max(manifest.mail_generation),
                        )
                    });
                stale.push((peer.name.clone(), signing, mail));
                if pending {
                    after.push(format!("rotate:{}", peer.name));
                    after.push(format!("rotate-mail:{}", peer.name));
                    after.push(format!("rotate-tls:{}", peer.name));
                }
            }
        }
        if stale.is_empty() {
            continue;
        }
        let detail = stale
            .iter()
            .map(|(p, s, mail)| format!("{p} (signing generation {s}, mail generation {mail})"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(
            Draft::new(
                Op::Change,
                "peer-keys",
                &format!("{m} at {name}"),
                name,
                format!("learn the rotated keys of {detail}"),
                Action::PublishKeys {
                    membership: m.clone(),
                    members: stale.into_iter().map(|(p, _, _)| p).collect(),
                },
            )
            .key(format!("peer-keys:{name}:{m}"))
            .after(after),
        );
    }
    out
}

/// Writes each of `members`' current public manifest into the installation at `dir`
/// for `membership`.
pub fn publish(state: &Path, dir: &Path, membership: &str, members: &[String]) -> Effect {
    let mut written = Vec::new();
    for member in members {
        let result = grid_engine::custody::manifest(&host_dir(state, member)).and_then(|keys| {
            book::write(dir, membership, member, &keys)?;
            Ok(keys)
        });
        match result {
            Ok(keys) => written.push(format!(
                "{member} (signing generation {}, mail generation {})",
                keys.generation, keys.mail_generation
            )),
            Err(e) => return Effect::local(Err(format!("{member}'s keys: {e}"))),
        }
    }
    Effect::local(Ok(format!("learned the keys of {}", written.join(", "))))
}

/// Whether the installation at `dir` holds each of `members`' current manifest.
pub fn published(state: &Path, dir: &Path, membership: &str, members: &[String]) -> bool {
    members.iter().all(|member| {
        let current = grid_engine::custody::manifest(&host_dir(state, member)).ok();
        current.is_some() && book::read(dir, membership, member).ok().flatten() == current
    })
}
