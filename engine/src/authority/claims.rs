//! The authority's state machine for claims (SPEC C3): who owns what, at which epoch.
//! Pure and deterministic — no IO, no clock, no randomness — so every voter that applies
//! the same log reaches the same state and the same answers. openraft drives it (issue
//! 5); this module is its logic.
//!
//! Invariants (checked by the tests of this file):
//! - a claim's epoch only grows; at one epoch a claim has at most one owner;
//! - a handoff fences the current owner — the epoch grows — in the same transition that
//!   makes the enrolled successor the owner;
//! - every operation id keeps its original answer: re-applying the same id with the same
//!   command returns it, identical, and changes nothing; the same id with another
//!   command is refused and changes nothing;
//! - answers are retained for the last `ANSWERS_RETAINED_MAX` operations; an older id is
//!   refused as expired, never executed again.
//!
//! The claims themselves are held here; the original answers live behind [`Answers`]
//! (`answers.rs`: in memory, or in the authority's database — not in memory).

use super::answers::Answers;
use crate::limits::{ANSWERS_RETAINED_MAX, CLAIM_NAME_LENGTH_MAX};
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Command {
    Acquire {
        claim: String,
        caller: String,
    },
    EnrollSuccessor {
        claim: String,
        caller: String,
        successor: String,
    },
    Handoff {
        claim: String,
        caller: String,
    },
    Release {
        claim: String,
        caller: String,
    },
}

impl Command {
    pub fn claim(&self) -> &str {
        match self {
            Command::Acquire { claim, .. }
            | Command::EnrollSuccessor { claim, .. }
            | Command::Handoff { claim, .. }
            | Command::Release { claim, .. } => claim,
        }
    }

    pub fn caller(&self) -> &str {
        match self {
            Command::Acquire { caller, .. }
            | Command::EnrollSuccessor { caller, .. }
            | Command::Handoff { caller, .. }
            | Command::Release { caller, .. } => caller,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimState {
    Held,
    Released,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub name: String,
    /// The owner at `epoch` (the last one, when released).
    pub owner: String,
    pub epoch: u64,
    pub successor: Option<String>,
    pub state: ClaimState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Succeeded,
    Failed,
}

/// The original answer of one operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub op: String,
    pub outcome: Outcome,
    pub claim: String,
    /// The claim's owner and epoch after the command (as they were, when it failed).
    pub owner: Option<String>,
    pub epoch: u64,
    pub detail: String,
}

/// What applying an operation produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A new or a retained answer.
    Answer(Answer),
    /// Nothing changed: the id was used for another command, or it is malformed, or
    /// its answer is no longer retained.
    Refused(String),
}

/// The claims in memory — every claim, held or released, or (where the authority keeps
/// a database) the held ones and the released ones an apply touched, until it ends —
/// and how many released claims are kept only elsewhere.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    claims: BTreeMap<String, Claim>,
    /// Released claims not in `claims` (kept in the authority's database).
    #[serde(default)]
    elsewhere: u64,
}

/// FNV-1a: a digest every voter computes identically. Storage keeps the digests of
/// forgotten ids under it.
pub fn digest(op: &str) -> u64 {
    op.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Claims {
    pub fn claim(&self, name: &str) -> Option<&Claim> {
        self.claims.get(name)
    }

    /// How many claims exist (held or released, in memory or elsewhere).
    pub fn len(&self) -> usize {
        self.claims.len() + self.elsewhere as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many released claims are kept only elsewhere.
    pub fn elsewhere(&self) -> u64 {
        self.elsewhere
    }

    /// Every claim in memory, by name.
    pub fn all(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values()
    }

    /// The claims `all` listed.
    pub fn from_claims(claims: impl IntoIterator<Item = Claim>) -> Claims {
        Claims::from_parts(claims, 0)
    }

    /// `claims` in memory, `elsewhere` released claims kept elsewhere.
    pub fn from_parts(claims: impl IntoIterator<Item = Claim>, elsewhere: u64) -> Claims {
        Claims {
            claims: claims.into_iter().map(|c| (c.name.clone(), c)).collect(),
            elsewhere,
        }
    }

    /// Takes back into memory a released claim kept elsewhere (before a command on it
    /// is applied). A name already in memory is left as it is.
    pub fn admit(&mut self, claim: Claim) {
        if self.claims.contains_key(&claim.name) {
            return;
        }
        self.elsewhere = self.elsewhere.saturating_sub(1);
        self.claims.insert(claim.name.clone(), claim);
    }

    /// Drops the released claims from memory (they are kept elsewhere); how many.
    pub fn evict_released(&mut self) -> u64 {
        let before = self.claims.len();
        self.claims.retain(|_, c| c.state == ClaimState::Held);
        let evicted = (before - self.claims.len()) as u64;
        self.elsewhere += evicted;
        evicted
    }

    /// Drops from memory the released claims among `names` (those an apply named:
    /// outside an apply memory holds held claims only, so nothing else can be
    /// released) — without looking at every held claim; how many.
    pub fn evict_released_among<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) -> u64 {
        let mut evicted = 0;
        for name in names {
            if self
                .claims
                .get(name)
                .is_some_and(|c| c.state == ClaimState::Released)
            {
                self.claims.remove(name);
                evicted += 1;
            }
        }
        self.elsewhere += evicted;
        evicted
    }

    /// Applies one operation (a committed log entry), its answer retained in `answers`.
    /// An answer store that cannot be read is an error — never "not found, so do it".
    pub fn apply(
        &mut self,
        answers: &mut dyn Answers,
        op: &str,
        command: Command,
    ) -> Result<Applied, String> {
        self.apply_retaining(answers, op, command, ANSWERS_RETAINED_MAX as u64)
    }

    pub(super) fn apply_retaining(
        &mut self,
        answers: &mut dyn Answers,
        op: &str,
        command: Command,
        retained: u64,
    ) -> Result<Applied, String> {
        if op.is_empty() || op.len() > 128 {
            return Ok(Applied::Refused(
                "operation ids are 1 to 128 bytes".to_owned(),
            ));
        }
        if let Some((original, answer)) = answers.get(op)? {
            return Ok(if original == command {
                Applied::Answer(answer)
            } else {
                Applied::Refused(format!(
                    "operation `{op}` was already used for another command on claim `{}`; its original answer stands",
                    original.claim()
                ))
            });
        }
        if answers.is_forgotten(digest(op))? {
            return Ok(Applied::Refused(format!(
                "operation `{op}` is older than the retained answers (ANSWERS_RETAINED_MAX = {ANSWERS_RETAINED_MAX}); it is never executed again"
            )));
        }
        if command.claim().is_empty() || command.claim().len() > CLAIM_NAME_LENGTH_MAX {
            return Ok(Applied::Refused(format!(
                "claim names are 1 to CLAIM_NAME_LENGTH_MAX ({CLAIM_NAME_LENGTH_MAX}) bytes"
            )));
        }
        let answer = self.execute(op, &command);
        answers.retain(op, &command, &answer);
        while answers.retained() > retained {
            answers.forget_oldest()?;
        }
        Ok(Applied::Answer(answer))
    }

    fn execute(&mut self, op: &str, command: &Command) -> Answer {
        let name = command.claim().to_owned();
        let caller = command.caller().to_owned();
        let current = self.claims.get(&name).cloned();
        let answer = |outcome, claim: Option<&Claim>, detail: String| Answer {
            op: op.to_owned(),
            outcome,
            claim: name.clone(),
            owner: claim.map(|c| c.owner.clone()),
            epoch: claim.map_or(0, |c| c.epoch),
            detail,
        };
        let held_by_caller = current
            .as_ref()
            .is_some_and(|c| c.state == ClaimState::Held && c.owner == caller);
        match command {
            Command::Acquire { .. } => match &current {
                Some(c) if c.state == ClaimState::Held && c.owner == caller => answer(
                    Outcome::Succeeded,
                    Some(c),
                    format!("`{caller}` already owns it at epoch {}", c.epoch),
                ),
                Some(c) if c.state == ClaimState::Held => answer(
                    Outcome::Failed,
                    Some(c),
                    format!("held by `{}` at epoch {}", c.owner, c.epoch),
                ),
                _ => {
                    let epoch = current.as_ref().map_or(0, |c| c.epoch) + 1;
                    let claim = Claim {
                        name: name.clone(),
                        owner: caller.clone(),
                        epoch,
                        successor: None,
                        state: ClaimState::Held,
                    };
                    let a = answer(
                        Outcome::Succeeded,
                        Some(&claim),
                        format!("`{caller}` owns it at epoch {epoch}"),
                    );
                    self.claims.insert(name.clone(), claim);
                    a
                }
            },
            _ if !held_by_caller => answer(
                Outcome::Failed,
                current.as_ref(),
                match &current {
                    Some(c) if c.state == ClaimState::Held => {
                        format!(
                            "`{caller}` does not own it (`{}` does, at epoch {})",
                            c.owner, c.epoch
                        )
                    }
                    Some(_) => "the claim is released".to_owned(),
                    None => "no such claim".to_owned(),
                },
            ),
            Command::EnrollSuccessor { successor, .. } => {
                let mut claim = current.expect("held by the caller");
                if *successor == caller {
                    return answer(
                        Outcome::Failed,
                        Some(&claim),
                        "the owner cannot be its own successor".to_owned(),
                    );
                }
                claim.successor = Some(successor.clone());
                let a = answer(
                    Outcome::Succeeded,
                    Some(&claim),
                    format!("`{successor}` enrolled as successor"),
                );
                self.claims.insert(name.clone(), claim);
                a
            }
            Command::Handoff { .. } => {
                let mut claim = current.expect("held by the caller");
                let Some(successor) = claim.successor.take() else {
                    return answer(
                        Outcome::Failed,
                        Some(&claim),
                        "no successor is enrolled".to_owned(),
                    );
                };
                // Fencing: the epoch grows, so every write stamped with the old epoch is
                // refused from now on — in the same transition that hands ownership on.
                claim.epoch += 1;
                claim.owner = successor.clone();
                let a = answer(
                    Outcome::Succeeded,
                    Some(&claim),
                    format!(
                        "`{caller}` fenced; `{successor}` owns it at epoch {}",
                        claim.epoch
                    ),
                );
                self.claims.insert(name.clone(), claim);
                a
            }
            Command::Release { .. } => {
                let mut claim = current.expect("held by the caller");
                claim.state = ClaimState::Released;
                claim.successor = None;
                let a = answer(
                    Outcome::Succeeded,
                    Some(&claim),
                    format!("released at epoch {}", claim.epoch),
                );
                self.claims.insert(name.clone(), claim);
                a
            }
        }
    }
}

/// The fencing rule every component applies to writes stamped `(claim, epoch)`: once a
/// newer epoch of a claim has been seen, older ones are refused. Kept by each
/// component (delivery, missions, storage replacement) for the claims it serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    seen: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("claim `{claim}`: epoch {epoch} is fenced (epoch {seen} has been seen)")]
pub struct Fenced {
    pub claim: String,
    pub epoch: u64,
    pub seen: u64,
}

impl Fence {
    /// Admits a write stamped `(claim, epoch)` and remembers the epoch, or refuses it.
    pub fn admit(&mut self, claim: &str, epoch: u64) -> Result<(), Fenced> {
        let seen = self.seen.entry(claim.to_owned()).or_insert(0);
        if epoch < *seen {
            return Err(Fenced {
                claim: claim.to_owned(),
                epoch,
                seen: *seen,
            });
        }
        *seen = epoch;
        Ok(())
    }
}

/// A seeded xorshift sequence (tests).
#[cfg(test)]
pub(super) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// A random command on one of `claims` from caller a, b or c (tests).
#[cfg(test)]
pub(super) fn random_command(next: &mut impl FnMut() -> u64, claims: &[&str]) -> Command {
    let callers = ["a", "b", "c"];
    let claim = claims[(next() % claims.len() as u64) as usize].to_owned();
    let caller = callers[(next() % 3) as usize].to_owned();
    match next() % 4 {
        0 => Command::Acquire { claim, caller },
        1 => Command::EnrollSuccessor {
            claim,
            caller,
            successor: callers[(next() % 3) as usize].to_owned(),
        },
        2 => Command::Handoff { claim, caller },
        _ => Command::Release { claim, caller },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::answers::MemoryAnswers;

    /// A voter's claims and answers, in memory.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    struct Voter {
        claims: Claims,
        answers: MemoryAnswers,
    }

    impl Voter {
        fn apply(&mut self, op: &str, command: Command) -> Applied {
            self.claims.apply(&mut self.answers, op, command).unwrap()
        }

        fn apply_retaining(&mut self, op: &str, command: Command, retained: u64) -> Applied {
            self.claims
                .apply_retaining(&mut self.answers, op, command, retained)
                .unwrap()
        }

        fn claim(&self, name: &str) -> Option<&Claim> {
            self.claims.claim(name)
        }

        fn answer(&self, op: &str) -> Option<&Answer> {
            self.answers.answer(op)
        }
    }

    fn acquire(claim: &str, caller: &str) -> Command {
        Command::Acquire {
            claim: claim.to_owned(),
            caller: caller.to_owned(),
        }
    }

    fn answer(applied: Applied) -> Answer {
        match applied {
            Applied::Answer(a) => a,
            Applied::Refused(r) => panic!("refused: {r}"),
        }
    }

    #[test]
    fn evicting_the_named_claims_leaves_what_evicting_all_leaves() {
        let mut s = Voter::default();
        for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
            answer(s.apply(&format!("h{i}"), acquire(name, "x")));
        }
        s.claims.evict_released();
        let release = |claim: &str| Command::Release {
            claim: claim.into(),
            caller: "x".into(),
        };
        // One apply names b (released), c (released, acquired again) and d (held).
        answer(s.apply("r1", release("b")));
        answer(s.apply("r2", release("c")));
        answer(s.apply("r3", acquire("c", "y")));
        answer(s.apply("r4", acquire("d", "x")));
        let mut all = s.claims.clone();
        assert_eq!(all.evict_released(), 1);
        assert_eq!(
            s.claims
                .evict_released_among(["b", "c", "d", "b", "nobody"].into_iter()),
            1
        );
        assert_eq!(s.claims, all);
        assert_eq!(s.claims.elsewhere(), 1);
        assert!(s.claim("b").is_none());
        assert_eq!(s.claim("c").map(|c| c.owner.as_str()), Some("y"));
        assert_eq!(s.claims.len(), 4);
    }

    #[test]
    fn handoff_fences_the_owner_and_answers_are_original() {
        let mut s = Voter::default();
        let a1 = answer(s.apply("o1", acquire("pump", "a")));
        assert_eq!(
            (a1.outcome, a1.owner.as_deref(), a1.epoch),
            (Outcome::Succeeded, Some("a"), 1)
        );
        let b1 = answer(s.apply("o2", acquire("pump", "b")));
        assert_eq!(b1.outcome, Outcome::Failed);
        answer(s.apply(
            "o3",
            Command::EnrollSuccessor {
                claim: "pump".into(),
                caller: "a".into(),
                successor: "b".into(),
            },
        ));
        let h = answer(s.apply(
            "o4",
            Command::Handoff {
                claim: "pump".into(),
                caller: "a".into(),
            },
        ));
        assert_eq!((h.owner.as_deref(), h.epoch), (Some("b"), 2));
        // The fenced predecessor cannot act any more.
        let r = answer(s.apply(
            "o5",
            Command::Release {
                claim: "pump".into(),
                caller: "a".into(),
            },
        ));
        assert_eq!(r.outcome, Outcome::Failed);
        // Re-sending an id returns its original answer, even though the state moved on.
        assert_eq!(answer(s.apply("o1", acquire("pump", "a"))), a1);
        assert_eq!(answer(s.apply("o2", acquire("pump", "b"))), b1);
        // The same id with another command is refused and changes nothing.
        let before = s.clone();
        assert!(matches!(
            s.apply("o1", acquire("pump", "c")),
            Applied::Refused(_)
        ));
        assert_eq!(s, before);
        // Released, then acquired again: the epoch keeps growing.
        answer(s.apply(
            "o6",
            Command::Release {
                claim: "pump".into(),
                caller: "b".into(),
            },
        ));
        assert_eq!(answer(s.apply("o7", acquire("pump", "a"))).epoch, 3);
    }

    #[test]
    fn an_id_past_retention_is_refused_never_executed_again() {
        let mut s = Voter::default();
        answer(s.apply_retaining("o1", acquire("pump", "a"), 2));
        answer(s.apply_retaining(
            "o2",
            Command::Release {
                claim: "pump".into(),
                caller: "a".into(),
            },
            2,
        ));
        answer(s.apply_retaining("o3", acquire("valve", "b"), 2));
        assert!(s.answer("o1").is_none(), "o1 is past retention");
        let before = s.clone();
        assert!(matches!(
            s.apply_retaining("o1", acquire("pump", "a"), 2),
            Applied::Refused(r) if r.contains("never executed again")
        ));
        assert_eq!(s, before, "the expired id acquired nothing");
    }

    #[test]
    fn fence_refuses_older_epochs() {
        let mut fence = Fence::default();
        fence.admit("pump", 1).unwrap();
        fence.admit("pump", 2).unwrap();
        fence.admit("pump", 2).unwrap();
        assert_eq!(
            fence.admit("pump", 1),
            Err(Fenced {
                claim: "pump".into(),
                epoch: 1,
                seen: 2
            })
        );
        fence.admit("valve", 1).unwrap();
    }

    /// Random commands from several callers, with re-sent ids: epochs only grow, one
    /// owner per (claim, epoch), re-sent ids return identical answers, and two voters
    /// applying the same log agree.
    #[test]
    fn random_logs_keep_the_invariants() {
        let mut next = xorshift(0x5eed);
        let mut log: Vec<(String, Command)> = Vec::new();
        for i in 0..5_000 {
            let command = random_command(&mut next, &["x", "y"]);
            // One in five entries re-sends an earlier id with its earlier command.
            if i > 0 && next().is_multiple_of(5) {
                let earlier = log[(next() % log.len() as u64) as usize].clone();
                log.push(earlier);
            } else {
                log.push((format!("op{i}"), command));
            }
        }
        let mut voter_one = Voter::default();
        let mut owners: BTreeMap<(String, u64), String> = BTreeMap::new();
        let mut epochs: BTreeMap<String, u64> = BTreeMap::new();
        let mut first_answers: BTreeMap<String, Answer> = BTreeMap::new();
        for (op, command) in &log {
            let a = answer(voter_one.apply(op, command.clone()));
            if let Some(first) = first_answers.get(op) {
                assert_eq!(&a, first, "re-sent {op} changed its answer");
            }
            first_answers.entry(op.clone()).or_insert(a.clone());
            if let Some(c) = voter_one.claim(command.claim()) {
                let seen = epochs.entry(c.name.clone()).or_insert(0);
                assert!(c.epoch >= *seen, "epoch went down");
                *seen = c.epoch;
                let owner = owners
                    .entry((c.name.clone(), c.epoch))
                    .or_insert(c.owner.clone());
                assert_eq!(owner, &c.owner, "two owners at one epoch");
            }
        }
        let mut voter_two = Voter::default();
        for (op, command) in &log {
            voter_two.apply(op, command.clone());
        }
        assert_eq!(voter_one, voter_two, "voters applying one log disagree");
    }
}
