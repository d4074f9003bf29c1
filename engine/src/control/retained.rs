//! What the control plane knows of each owner (pure: no IO, no clock of its own).
//!
//! Opening a panel reads this and nothing else. Only an explicit inspection changes it:
//! [`Retained::begin`] when an operator asks, [`Retained::finish`] with the owner's
//! reply (or why none came), and [`Retained::abandon`] when the panel that asked is
//! closed first — then whatever arrives later is kept as `uncertain`, never shown as
//! what the owner holds now, until the next explicit inspection.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// How much is known of an owner's observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// Nobody asked the owner since this host started.
    Never,
    /// The owner's reply to the last explicit inspection, as old as its time says.
    Retained,
    /// A reply (or a failure) arrived after the panel that asked was closed: what it
    /// says is kept but not vouched for until the next explicit inspection.
    Uncertain,
    /// The last explicit inspection got no reply: the owner may hold anything now.
    Unreachable { reason: String },
    /// An answer retained before this host restarted, read back from its signed record
    /// (`control::kept`): as old as its time says.
    Kept,
    /// The record kept before this host restarted was refused (changed, another's,
    /// unreadable): nothing of it is shown.
    Damaged { reason: String },
}

impl Known {
    /// The word a page and a test read (`data-state`).
    pub fn word(&self) -> &'static str {
        match self {
            Known::Never => "never",
            Known::Retained => "retained",
            Known::Uncertain => "uncertain",
            Known::Unreachable { .. } => "unreachable",
            Known::Kept => "kept",
            Known::Damaged { .. } => "damaged",
        }
    }
}

/// One owner's entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The last observation an inspection brought back (kept through later failures,
    /// shown then only as old and not current).
    pub observation: Option<serde_json::Value>,
    /// When that observation arrived.
    pub at: Option<SystemTime>,
    pub known: Known,
    /// The inspection under way: its ticket and when it was asked.
    pub pending: Option<(u64, SystemTime)>,
    /// The panel that asked the pending inspection was closed.
    abandoned: bool,
    /// Explicit inspections asked of this owner since this host started.
    pub inspections: u64,
}

impl Entry {
    /// What a record kept before a restart says (`control::kept`).
    pub(super) fn kept(
        observation: Option<serde_json::Value>,
        at: Option<SystemTime>,
        known: Known,
    ) -> Entry {
        Entry {
            observation,
            at,
            known,
            ..Entry::new()
        }
    }

    /// A kept record refused, and why.
    pub(super) fn damaged(reason: String) -> Entry {
        Entry {
            known: Known::Damaged { reason },
            ..Entry::new()
        }
    }

    fn new() -> Entry {
        Entry {
            observation: None,
            at: None,
            known: Known::Never,
            pending: None,
            abandoned: false,
            inspections: 0,
        }
    }
}

/// What an inspection of an owner asks it for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `observe`: what the owner holds (every panel but storage).
    Observation,
    /// `storage`: what its stores hold on disk (the storage panel).
    Storage,
    /// One request id, as this host's processes room holds it (the Processes panel;
    /// this host only: a peer's `POST /control` takes no process call).
    Run,
}

impl Part {
    /// The form's `part` field, and the word a message uses.
    pub fn word(self) -> &'static str {
        match self {
            Part::Observation => "observation",
            Part::Storage => "storage",
            Part::Run => "run",
        }
    }

    /// What `Retained` keeps `owner`'s answer to this part under (`:` is in no name,
    /// so no owner is called so).
    pub fn subject(self, owner: &str) -> String {
        match self {
            Part::Observation => owner.to_owned(),
            Part::Storage => format!("storage:{owner}"),
            Part::Run => format!("run:{owner}"),
        }
    }
}

/// What a membership's read barrier is kept under, beside the owners (`:` is in no
/// name, so no owner is called so).
pub fn barrier_subject(membership: &str) -> String {
    format!("barrier:{membership}")
}

/// What the last surrender of a grant at `owner` (its issuer) asked from this plane is
/// kept under: its signed receipt, or why there is none (`:` is in no name).
pub fn surrender_subject(owner: &str) -> String {
    format!("surrender:{owner}")
}

/// Why an inspection was not begun.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotBegun {
    #[error("`{0}` is no owner this control plane reaches")]
    UnknownOwner(String),
    #[error("an inspection of `{0}` is already under way: wait for it, then ask again")]
    UnderWay(String),
}

/// Every owner's entry, by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Retained {
    owners: BTreeMap<String, Entry>,
    next_ticket: u64,
}

impl Retained {
    /// Nothing known of any of `owners`.
    pub fn new<'a>(owners: impl IntoIterator<Item = &'a str>) -> Retained {
        Retained {
            owners: owners
                .into_iter()
                .map(|o| (o.to_owned(), Entry::new()))
                .collect(),
            next_ticket: 1,
        }
    }

    pub fn entry(&self, owner: &str) -> Option<&Entry> {
        self.owners.get(owner)
    }

    /// What was kept of `owner` before this host restarted, at its start (no
    /// inspection is under way yet): ignored for a subject this plane does not have.
    pub fn restore(&mut self, owner: &str, kept: Entry) {
        if let Some(entry) = self.owners.get_mut(owner)
            && entry.pending.is_none()
        {
            *entry = kept;
        }
    }

    /// Every subject, by name.
    pub fn subjects(&self) -> impl Iterator<Item = &str> {
        self.owners.keys().map(String::as_str)
    }

    /// An operator asked to inspect `owner` now: one inspection at a time per owner.
    pub fn begin(&mut self, owner: &str, now: SystemTime) -> Result<u64, NotBegun> {
        let entry = self
            .owners
            .get_mut(owner)
            .ok_or_else(|| NotBegun::UnknownOwner(owner.to_owned()))?;
        if entry.pending.is_some() {
            return Err(NotBegun::UnderWay(owner.to_owned()));
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        entry.pending = Some((ticket, now));
        entry.abandoned = false;
        entry.inspections += 1;
        Ok(ticket)
    }

    /// The panel that asked inspection `ticket` of `owner` was closed before its reply.
    pub fn abandon(&mut self, owner: &str, ticket: u64) {
        if let Some(entry) = self.owners.get_mut(owner)
            && entry.pending.map(|(t, _)| t) == Some(ticket)
        {
            entry.abandoned = true;
        }
    }

    /// Inspection `ticket` of `owner` ended: the owner's observation, or why none came.
    /// Returns what is now known (`None`: no such inspection is under way).
    pub fn finish(
        &mut self,
        owner: &str,
        ticket: u64,
        reply: Result<serde_json::Value, String>,
        now: SystemTime,
    ) -> Option<Known> {
        let entry = self.owners.get_mut(owner)?;
        if entry.pending.map(|(t, _)| t) != Some(ticket) {
            return None;
        }
        entry.pending = None;
        let abandoned = std::mem::take(&mut entry.abandoned);
        entry.known = match reply {
            Ok(observation) => {
                entry.observation = Some(observation);
                entry.at = Some(now);
                if abandoned {
                    Known::Uncertain
                } else {
                    Known::Retained
                }
            }
            Err(_) if abandoned => Known::Uncertain,
            Err(reason) => Known::Unreachable { reason },
        };
        Some(entry.known.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn only_an_inspection_changes_what_is_known() {
        let mut r = Retained::new(["hq", "plant"]);
        assert_eq!(r.entry("plant").unwrap().known, Known::Never);
        let t = r.begin("plant", at(1)).unwrap();
        assert_eq!(
            r.begin("plant", at(2)),
            Err(NotBegun::UnderWay("plant".into()))
        );
        assert_eq!(
            r.begin("nobody", at(2)),
            Err(NotBegun::UnknownOwner("nobody".into()))
        );
        let known = r.finish("plant", t, Ok(serde_json::json!({"models": []})), at(3));
        assert_eq!(known, Some(Known::Retained));
        let e = r.entry("plant").unwrap();
        assert_eq!((e.at, e.inspections, e.pending), (Some(at(3)), 1, None));
        // A stale ticket changes nothing.
        assert_eq!(r.finish("plant", t, Err("late".into()), at(4)), None);
        assert_eq!(r.entry("plant").unwrap().known, Known::Retained);
        assert_eq!(r.entry("hq").unwrap().known, Known::Never);
    }

    #[test]
    fn a_reply_after_the_panel_closed_is_uncertain_until_the_next_inspection() {
        let mut r = Retained::new(["plant"]);
        let t = r.begin("plant", at(1)).unwrap();
        r.abandon("plant", t);
        let known = r.finish("plant", t, Ok(serde_json::json!({"n": 2})), at(5));
        assert_eq!(known, Some(Known::Uncertain));
        assert_eq!(
            r.entry("plant").unwrap().observation,
            Some(serde_json::json!({"n": 2}))
        );
        // A failure after the panel closed is uncertain too (not "unreachable": nobody
        // was there to be told).
        let t = r.begin("plant", at(6)).unwrap();
        r.abandon("plant", t);
        assert_eq!(
            r.finish("plant", t, Err("timed out".into()), at(7)),
            Some(Known::Uncertain)
        );
        // The next explicit inspection answered while its panel is open: retained.
        let t = r.begin("plant", at(8)).unwrap();
        let known = r.finish("plant", t, Ok(serde_json::json!({"n": 3})), at(9));
        assert_eq!(known, Some(Known::Retained));
    }

    #[test]
    fn a_failed_inspection_keeps_the_old_value_but_never_as_current() {
        let mut r = Retained::new(["plant"]);
        let t = r.begin("plant", at(1)).unwrap();
        r.finish("plant", t, Ok(serde_json::json!({"n": 1})), at(2));
        let t = r.begin("plant", at(3)).unwrap();
        // Abandoning another ticket does not touch this one.
        r.abandon("plant", t + 1);
        let known = r.finish("plant", t, Err("connection refused".into()), at(4));
        assert_eq!(
            known,
            Some(Known::Unreachable {
                reason: "connection refused".into()
            })
        );
        let e = r.entry("plant").unwrap();
        assert_eq!(e.at, Some(at(2)));
        assert_eq!(e.known.word(), "unreachable");
    }
}
