//! Plan: the files' desired state against what the original owners retain, as one
//! line per transition. Planning changes nothing.
//!
//! A plan is a pure function of one observation: [`plan`] observes every owner once
//! ([`crate::observe::observe`]), then [`from_world`] diffs without further IO
//! ([`crate::diff`]). The plan is **whole**: a transition whose owner does not exist
//! yet or does not run yet is listed with what it comes `after` and what it
//! `waits_for`, never guessed and never applied early.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use grid_spec::Topology;
use sha2::{Digest, Sha256};

use crate::observe::{self, World, hex};
pub use crate::transition::{
    Action, MEMBERSHIP_OWNER_PREFIX, Op, Transition, Wait, WaitReason, diff,
};
use crate::transition::{Draft, Index};

#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub owner: String,
    pub fingerprint: String,
    pub summary: String,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub state: PathBuf,
    pub files: Vec<PathBuf>,
    /// What was observed of each owner.
    pub observed: Vec<Observed>,
    pub transitions: Vec<Transition>,
}

impl Plan {
    /// A digest of the whole plan's inputs: what was observed and what is desired.
    pub fn fingerprint(&self) -> String {
        let mut hasher = Sha256::new();
        for observed in &self.observed {
            hasher.update(observed.owner.as_bytes());
            hasher.update(observed.fingerprint.as_bytes());
        }
        for t in &self.transitions {
            hasher.update(t.op.symbol().as_bytes());
            hasher.update(t.kind.as_bytes());
            hasher.update(t.name.as_bytes());
            hasher.update(t.detail.as_bytes());
            hasher.update(format!("{:?}", t.action).as_bytes());
        }
        hex(&hasher.finalize()[..16])
    }

    pub fn count(&self, op: Op) -> usize {
        self.transitions.iter().filter(|t| t.op == op).count()
    }

    pub fn is_empty(&self) -> bool {
        self.transitions.is_empty()
    }

    /// The transitions waiting for something outside this plan, directly or through
    /// one they come after.
    pub fn waiting(&self) -> Vec<&Transition> {
        let mut waits: BTreeMap<&str, bool> = BTreeMap::new();
        let mut out = Vec::new();
        for t in &self.transitions {
            let waiting = t.waits_for.is_some()
                || t.after
                    .iter()
                    .any(|a| waits.get(a.as_str()).copied().unwrap_or(false));
            waits.insert(&t.id, waiting);
            if waiting {
                out.push(t);
            }
        }
        out
    }

    /// The hosts some transition waits for to run, sorted.
    pub fn hosts_to_start(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .transitions
            .iter()
            .filter_map(|t| t.waits_for.as_ref())
            .filter(|w| w.reason == WaitReason::HostNotRunning)
            .flat_map(|w| w.hosts.iter().cloned())
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// The `(after + host edge-a; edge-a must be running)` note of each line, in
    /// order. A transition named through another one it comes after is left out
    /// (`+ route … (after + claim …)`, not also the claim's own `after`).
    pub fn notes(&self) -> Vec<String> {
        let index: std::collections::HashMap<&str, &Transition> = self
            .transitions
            .iter()
            .map(|t| (t.id.as_str(), t))
            .collect();
        self.transitions
            .iter()
            .map(|t| {
                let implied: std::collections::HashSet<&str> = t
                    .after
                    .iter()
                    .filter_map(|id| index.get(id.as_str()))
                    .flat_map(|o| o.after.iter().map(String::as_str))
                    .collect();
                let direct: Vec<&String> = t
                    .after
                    .iter()
                    .filter(|id| !implied.contains(id.as_str()))
                    .collect();
                let mut parts = Vec::new();
                if !direct.is_empty() {
                    let shown = grid_spec::limits::PLAN_AFTER_SHOWN_MAX;
                    let titles: Vec<String> = direct
                        .iter()
                        .take(shown)
                        .map(|id| {
                            index
                                .get(id.as_str())
                                .map_or_else(|| (*id).clone(), |d| d.short())
                        })
                        .collect();
                    let mut text = format!("after {}", titles.join(", "));
                    let more = direct.len().saturating_sub(shown);
                    if more > 0 {
                        let _ = write!(text, " and {more} more");
                    }
                    parts.push(text);
                }
                if let Some(wait) = &t.waits_for {
                    parts.push(wait.describe());
                }
                if parts.is_empty() {
                    String::new()
                } else {
                    format!("   ({})", parts.join("; "))
                }
            })
            .collect()
    }

    pub fn render(&self) -> String {
        self.render_with(&crate::changes::Paint::new(false))
    }

    pub fn render_with(&self, paint: &crate::changes::Paint) -> String {
        let mut out = String::new();
        for (t, note) in self.transitions.iter().zip(self.notes()) {
            // A `~` line with field-level changes shows them in place of its line diff
            // (which `detail` keeps for JSON readers), and keeps its parenthesized notes.
            let detail: String = if t.changes.is_empty() {
                t.detail.clone()
            } else {
                t.detail
                    .lines()
                    .filter(|l| l.starts_with('('))
                    .map(|l| format!("\n{l}"))
                    .collect()
            };
            let mut lines = detail.lines();
            let first = lines.next().unwrap_or_default();
            let _ = write!(
                out,
                "{} {} {} @ {}",
                paint.op(t.op.symbol()),
                t.kind,
                t.name,
                t.host
            );
            if !first.is_empty() {
                let _ = write!(out, ": {first}");
            }
            let _ = writeln!(out, "{note}");
            for change in &t.changes {
                let _ = writeln!(out, "    {}", crate::changes::render(change));
            }
            for line in lines {
                let _ = writeln!(out, "    {line}");
            }
        }
        let _ = writeln!(
            out,
            "plan: {} to create, {} to change, {} to retire, {} needing attention",
            self.count(Op::Create),
            self.count(Op::Change),
            self.count(Op::Retire),
            self.count(Op::Attention)
        );
        let waiting = self.waiting().len();
        if waiting > 0 {
            let hosts = self.hosts_to_start();
            let _ = writeln!(
                out,
                "{waiting} of them wait{}: reconcile applies the rest, then says what to start",
                if hosts.is_empty() {
                    String::new()
                } else {
                    format!(
                        " for {} to run",
                        shown(&hosts, grid_spec::limits::PLAN_HOSTS_SHOWN_MAX)
                    )
                }
            );
        }
        out
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "fingerprint": self.fingerprint(),
            "transitions": self.transitions.iter().map(|t| serde_json::json!({
                "op": t.op.symbol(),
                "kind": t.kind,
                "name": t.name,
                "host": t.host,
                "detail": t.detail,
                "id": t.id,
                "after": t.after,
                "waits_for": t.waits_for.as_ref().map(|w| w.reason.name()),
                "waits_for_hosts": t.waits_for.as_ref().map(|w| &w.hosts),
                "changes": t.changes,
            })).collect::<Vec<_>>(),
            "counts": {
                "+": self.count(Op::Create),
                "~": self.count(Op::Change),
                "-": self.count(Op::Retire),
                "!": self.count(Op::Attention),
            },
            "waiting": self.waiting().len(),
        })
    }
}

/// `a, b, c and 9 more`: at most `max` names.
pub fn shown(names: &[String], max: usize) -> String {
    let mut text = names
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > max {
        let _ = write!(text, " and {} more", names.len() - max);
    }
    text
}

/// Where a topology host's installation is.
pub fn host_dir(state: &Path, host: &grid_spec::Host) -> PathBuf {
    observe::host_dir(state, &host.name)
}

/// Observes every owner once, then diffs. `state` is the operator's state directory.
pub fn plan(topology: &Topology, files: &[PathBuf], state: &Path) -> Plan {
    let world = observe::observe(topology, state);
    from_world(topology, files, &world)
}

/// The plan of `topology` against one observation: no IO.
pub fn from_world(topology: &Topology, files: &[PathBuf], world: &World) -> Plan {
    let drafts = transitions(topology, world);
    let mut observed: Vec<Observed> = world
        .hosts
        .iter()
        .map(|o| Observed {
            owner: o.name.clone(),
            fingerprint: o.fingerprint(),
            summary: o.summary(),
        })
        .collect();
    for m in &world.memberships {
        observed.push(Observed {
            owner: format!("{MEMBERSHIP_OWNER_PREFIX}{}", m.name),
            fingerprint: m.fingerprint.clone(),
            summary: match &m.record {
                Some(r) => format!(
                    "authority with {} enrollment(s), revoked [{}]",
                    r.enrolled.len(),
                    r.revoked.join(" ")
                ),
                None => "no authority".to_owned(),
            },
        });
    }
    let mut plan = Plan {
        state: world.state.clone(),
        files: files.to_owned(),
        observed,
        transitions: drafts.iter().map(|d| d.transition.clone()).collect(),
    };
    // Operation ids derive from the plan: the same plan sends the same ids.
    let fingerprint = plan.fingerprint();
    let mut ids: BTreeMap<&str, String> = BTreeMap::new();
    for (index, (t, draft)) in plan.transitions.iter_mut().zip(&drafts).enumerate() {
        if t.id.is_empty() {
            t.id = format!("plan-{fingerprint}-{index}");
        }
        // `after` names only transitions of this plan, and only earlier ones: apply
        // goes in order.
        t.after = draft
            .after
            .iter()
            .filter_map(|key| ids.get(key.as_str()).cloned())
            .collect();
        t.after.dedup();
        if !draft.key.is_empty() {
            ids.insert(&draft.key, t.id.clone());
        }
        if t.waits_for.is_none()
            && t.action.needs_running_owner()
            && world.running(&t.host).is_none()
        {
            t.waits_for = Some(Wait::running([t.host.clone()]));
        }
    }
    plan
}

/// Every transition the files call for against `world`, in an order they apply in:
/// each capability drafts its own (this is the one place that calls them all).
fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let index = Index::of(topology);
    let mut out = crate::diff::memberships::memberships(topology, world);
    for observation in &world.hosts {
        let desired = index.host(&observation.name);
        out.extend(crate::diff::hosts::transitions(
            &index,
            desired,
            observation,
        ));
        if let Some(desired) = desired {
            out.extend(crate::diff::memberships::enrollments(
                topology,
                world,
                desired,
                observation,
            ));
            out.extend(crate::diff::snapshots::transitions(topology, observation));
        }
    }
    // After every host's own transitions: a member learns keys its peers rotate in
    // this plan, after they rotate.
    for observation in &world.hosts {
        if let Some(desired) = index.host(&observation.name) {
            out.extend(crate::diff::peer_keys::transitions(
                &index,
                world,
                desired,
                observation,
            ));
        }
    }
    out.extend(crate::diff::authority::transitions(topology, world));
    out.extend(crate::routes::transitions(topology, &index, world));
    out.extend(crate::exports::transitions(topology, world));
    out.extend(crate::mappings::transitions(topology, world));
    out.extend(crate::processes::transitions(topology, world));
    out.extend(crate::sources::transitions(topology, world));
    out.extend(crate::ledger::transitions(topology, world));
    out.extend(crate::missions::transitions(topology, world));
    out.extend(crate::decisions::transitions(topology, world));
    out
}
