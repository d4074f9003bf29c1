//! The diff: the files against one observation ([`World`]), as transitions. Pure —
//! no IO — so each kind's transitions are tested as data (`tests.rs`: an observation
//! and files in, plan lines out).
//!
//! Each transition carries a `key` (`host:edge-a`, `enroll:edge-a:plant-ops`, …) and
//! the keys it comes `after`; [`crate::plan::from_world`] turns them into operation
//! ids, keeping only keys this plan holds (what the owners hold already needs no
//! transition). The order of the list is an order in which they can apply.

use grid_spec::Topology;

use crate::observe::World;
use crate::plan::{Action, Op, Transition, Wait};

pub mod authority;
pub mod hosts;
pub mod memberships;
#[cfg(test)]
mod tests;

/// One transition as the diff makes it.
#[derive(Debug, Clone)]
pub struct Draft {
    pub transition: Transition,
    /// What other transitions name it by (empty for lines nothing comes after).
    pub key: String,
    /// Keys of the transitions it comes after.
    pub after: Vec<String>,
}

impl Draft {
    pub fn new(
        op: Op,
        kind: &str,
        name: &str,
        host: &str,
        detail: String,
        action: Action,
    ) -> Draft {
        Draft {
            transition: Transition {
                op,
                kind: kind.to_owned(),
                name: name.to_owned(),
                host: host.to_owned(),
                detail,
                changes: Vec::new(),
                id: String::new(),
                action,
                after: Vec::new(),
                waits_for: None,
            },
            key: String::new(),
            after: Vec::new(),
        }
    }

    pub fn attention(kind: &str, name: &str, host: &str, detail: String) -> Draft {
        Draft::new(Op::Attention, kind, name, host, detail, Action::None)
    }

    pub fn key(mut self, key: String) -> Draft {
        self.key = key;
        self
    }

    pub fn after(mut self, keys: impl IntoIterator<Item = String>) -> Draft {
        self.after.extend(keys);
        self
    }

    pub fn waits(mut self, wait: Option<Wait>) -> Draft {
        self.transition.waits_for = wait;
        self
    }

    pub fn id(mut self, id: String) -> Draft {
        self.transition.id = id;
        self
    }

    pub fn changes(mut self, changes: Vec<crate::changes::Change>) -> Draft {
        self.transition.changes = changes;
        self
    }
}

/// The keys of the transitions that create a host's installation and custody:
/// whatever needs its files comes after these.
pub fn installed(host: &str) -> [String; 2] {
    [format!("host:{host}"), format!("keys:{host}")]
}

pub fn enrolled(host: &str, membership: &str) -> String {
    format!("enroll:{host}:{membership}")
}

/// Every transition the files call for against `world`, in an order they apply in.
pub fn diff(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = memberships::memberships(topology, world);
    for observation in &world.hosts {
        let desired = topology.host(&observation.name);
        out.extend(hosts::transitions(topology, desired, observation));
        if let Some(desired) = desired {
            out.extend(memberships::enrollments(
                topology,
                world,
                desired,
                observation,
            ));
        }
    }
    out.extend(authority::transitions(topology, world));
    out.extend(crate::routes::transitions(topology, world));
    out.extend(crate::processes::transitions(topology, world));
    out.extend(crate::sources::transitions(topology, world));
    out
}
