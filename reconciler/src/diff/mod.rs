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

/// The files' hosts and models by name, built once per plan: the diff looks them up
/// for every object, and a linear search would make a plan quadratic.
pub struct Index<'t> {
    pub hosts: std::collections::HashMap<&'t str, &'t grid_spec::Host>,
    /// Each host's models, in file order.
    pub models: std::collections::HashMap<&'t str, Vec<&'t grid_spec::Model>>,
}

impl<'t> Index<'t> {
    pub fn of(topology: &'t Topology) -> Index<'t> {
        let mut models: std::collections::HashMap<&str, Vec<&grid_spec::Model>> =
            std::collections::HashMap::new();
        for m in &topology.models {
            models.entry(m.host.as_str()).or_default().push(m);
        }
        Index {
            hosts: topology
                .hosts
                .iter()
                .map(|h| (h.name.as_str(), h))
                .collect(),
            models,
        }
    }

    pub fn host(&self, name: &str) -> Option<&'t grid_spec::Host> {
        self.hosts.get(name).copied()
    }

    pub fn models(&self, host: &str) -> &[&'t grid_spec::Model] {
        self.models.get(host).map_or(&[][..], Vec::as_slice)
    }
}

/// Every transition the files call for against `world`, in an order they apply in.
pub fn diff(topology: &Topology, world: &World) -> Vec<Draft> {
    let index = Index::of(topology);
    let mut out = memberships::memberships(topology, world);
    for observation in &world.hosts {
        let desired = index.host(&observation.name);
        out.extend(hosts::transitions(&index, desired, observation));
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
    out.extend(crate::routes::transitions(topology, &index, world));
    out.extend(crate::processes::transitions(topology, world));
    out.extend(crate::sources::transitions(topology, world));
    out.extend(crate::ledger::transitions(topology, world));
    out.extend(crate::missions::transitions(topology, world));
    out
}
