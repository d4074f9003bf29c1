//! A store fenced at an authority (`storage authority="M"`, docs/transfer.md, "Fenced
//! at the authority"): the store's generation is the claim `store:HOST` at M's
//! authority. What the store records of it, and the pure judgement of a start: the
//! store's record against the claim as the authority shows it after a read barrier.
//! The composition root (`root/store_claim.rs`) asks the authority and acts.
//!
//! The store's `meta` keyspace holds:
//! - `storage-claim`: `G E` — at storage generation G this store confirmed holding the
//!   claim at epoch E;
//! - `storage-claim-intent`: `G NONCE ADVANCE` — written and synced before a start
//!   takes the claim for generation G, with the operation ids it sends
//!   (`store:HOST:gG:NONCE:release|acquire`); a start that finds it sends the same ids
//!   again, so a stop between the authority's answer and the record takes the claim
//!   once.
//!
//! Invariants, stated as absences: no store serves whose record is below the
//! authority's epoch (a replaced store that comes back, custody and all); no store of
//! generation 1 that never confirmed the claim takes it from one that did; nothing is
//! inferred from a missing claim where the store recorded one (the authority's state
//! was lost: refused, never re-acquired); no operation id is ever sent for another
//! command.

use crate::authority::claims::{Claim, ClaimState};

use super::{Host, HostError};

/// The store's record of the claim it holds.
pub const CLAIM_KEY: &str = "storage-claim";
/// A start taking the claim, before the authority answered and the record is written.
pub const INTENT_KEY: &str = "storage-claim-intent";

/// The claim a host's store generation is.
pub fn claim_of(host: &str) -> String {
    format!("store:{host}")
}

/// `storage-claim`: the generation and the epoch this store confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub generation: u64,
    pub epoch: u64,
}

/// `storage-claim-intent`: a taking of the claim under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub generation: u64,
    pub nonce: String,
    /// Release first (the claim was held: the epoch grows past it), then acquire.
    pub advance: bool,
}

impl Intent {
    /// The operation ids it sends: release (when advancing), then acquire.
    pub fn ops(&self, host: &str) -> (String, String) {
        let base = format!("store:{host}:g{}:{}", self.generation, self.nonce);
        (format!("{base}:release"), format!("{base}:acquire"))
    }

    fn text(&self) -> String {
        format!("{} {} {}", self.generation, self.nonce, self.advance)
    }

    fn parse(text: &str) -> Option<Intent> {
        let mut words = text.split(' ');
        let generation = words.next()?.parse().ok()?;
        let nonce = words.next()?.to_owned();
        let advance = words.next()?.parse().ok()?;
        let hex = !nonce.is_empty() && nonce.len() <= 32;
        (hex && nonce.bytes().all(|b| b.is_ascii_hexdigit()) && words.next().is_none()).then_some(
            Intent {
                generation,
                nonce,
                advance,
            },
        )
    }
}

/// What a start does, given the store and the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The store holds the claim at the authority's epoch: it serves.
    Holds { epoch: u64 },
    /// The store takes the claim for its generation: acquire it, or (`advance`)
    /// release it and acquire it again, so its epoch grows past every earlier store.
    Take { advance: bool },
    /// Nothing is served; why.
    Refused(String),
}

/// Judges a start of `host`'s store at storage `generation` with `recorded`, the
/// claim being `claim` at the authority of `membership` (after a read barrier).
pub fn judge(
    host: &str,
    membership: &str,
    generation: u64,
    recorded: Option<Recorded>,
    claim: Option<&Claim>,
) -> Verdict {
    let name = claim_of(host);
    let at = format!("the authority of `{membership}`");
    let confirmed = recorded.filter(|r| r.generation == generation);
    match (claim, confirmed) {
        (None, None) if recorded.is_none() => Verdict::Take { advance: false },
        (None, _) => {
            let r = recorded.expect("recorded");
            Verdict::Refused(format!(
                "{at} holds no claim `{name}`, which this store held at epoch {} (generation {}): the authority's state is not the one this store knew (lost or replaced); nothing is served",
                r.epoch, r.generation
            ))
        }
        (Some(c), _) if c.state == ClaimState::Held && c.owner != host => {
            Verdict::Refused(format!(
                "{at} shows `{name}` held by `{}` at epoch {}: only `{host}` holds its own store's claim; nothing is served",
                c.owner, c.epoch
            ))
        }
        (Some(c), _) if c.state == ClaimState::Released => Verdict::Refused(format!(
            "{at} shows `{name}` released at epoch {}: another start of this installation is taking it over (a replaced store's first start); nothing is served",
            c.epoch
        )),
        (Some(c), Some(r)) if r.epoch == c.epoch => Verdict::Holds { epoch: c.epoch },
        (Some(c), Some(r)) if r.epoch < c.epoch => Verdict::Refused(format!(
            "fenced: storage generation {generation} was replaced: {at} holds `{name}` at epoch {}, this store held it at epoch {} — a later store took it; this one is never served again",
            c.epoch, r.epoch
        )),
        (Some(c), Some(r)) => Verdict::Refused(format!(
            "{at} holds `{name}` at epoch {}, below the epoch {} this store held: the authority's state went back; nothing is served",
            c.epoch, r.epoch
        )),
        // Held by this host; the store never confirmed its generation.
        (Some(_), None) if generation > 1 => Verdict::Take { advance: true },
        (Some(c), None) => Verdict::Refused(format!(
            "fenced: {at} holds `{name}` at epoch {}, and this store of generation 1 never confirmed holding it — a copy of the installation from before its first confirmed start; nothing is served",
            c.epoch
        )),
    }
}

impl Host {
    /// The store's generation, its record of the claim and an intent under way.
    pub fn storage_claim_held(&self) -> Result<(u64, Option<Recorded>, Option<Intent>), HostError> {
        let read = |key: &str| -> Result<Option<String>, HostError> {
            let held = self.meta.get(key).map_err(|e| HostError::Damaged {
                path: self.dir.join("store"),
                detail: crate::store::describe(&e),
            })?;
            Ok(held.map(|v| String::from_utf8_lossy(&v).into_owned()))
        };
        let damaged = |key: &str, text: &str| HostError::Damaged {
            path: self.dir.join("store"),
            detail: format!(
                "its `{key}` record `{}` does not read",
                grid_spec::diagnostic::quoted(text)
            ),
        };
        let generation = match read(crate::store::replace::GENERATION_KEY)? {
            Some(text) => text
                .parse()
                .map_err(|_| damaged(crate::store::replace::GENERATION_KEY, &text))?,
            None => 1,
        };
        let recorded = match read(CLAIM_KEY)? {
            Some(text) => {
                let parsed = text
                    .split_once(' ')
                    .and_then(|(g, e)| Some((g.parse().ok()?, e.parse().ok()?)));
                let (generation, epoch) = parsed.ok_or_else(|| damaged(CLAIM_KEY, &text))?;
                Some(Recorded { generation, epoch })
            }
            None => None,
        };
        let intent = match read(INTENT_KEY)? {
            Some(text) => Some(Intent::parse(&text).ok_or_else(|| damaged(INTENT_KEY, &text))?),
            None => None,
        };
        Ok((generation, recorded, intent))
    }

    /// Writes and syncs the intent to take the claim for `generation`, before
    /// anything is sent.
    pub fn storage_claim_intend(
        &mut self,
        generation: u64,
        advance: bool,
    ) -> Result<Intent, HostError> {
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| HostError::Damaged {
            path: self.dir.join("store"),
            detail: format!("no randomness for the claim's operation ids: {e}"),
        })?;
        let intent = Intent {
            generation,
            nonce: hex::encode(nonce),
            advance,
        };
        let mut write = self.database.batch();
        write.insert(&self.meta, INTENT_KEY, intent.text());
        self.commit_durably(write, "the intent to take the store's claim");
        Ok(intent)
    }

    /// Records (synced) that this store holds the claim at `epoch` for `generation`,
    /// and closes the intent.
    pub fn storage_claim_record(&mut self, generation: u64, epoch: u64) {
        let mut write = self.database.batch();
        write.insert(&self.meta, CLAIM_KEY, format!("{generation} {epoch}"));
        write.remove(&self.meta, INTENT_KEY);
        self.commit_durably(write, "the store's claim");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(owner: &str, epoch: u64, state: ClaimState) -> Claim {
        Claim {
            name: claim_of("edge"),
            owner: owner.to_owned(),
            epoch,
            successor: None,
            state,
        }
    }

    fn at(generation: u64, epoch: u64) -> Option<Recorded> {
        Some(Recorded { generation, epoch })
    }

    fn judged(generation: u64, recorded: Option<Recorded>, claim: Option<&Claim>) -> Verdict {
        judge("edge", "ops", generation, recorded, claim)
    }

    fn refused(verdict: Verdict, because: &str) {
        match verdict {
            Verdict::Refused(reason) => assert!(reason.contains(because), "{reason}"),
            other => panic!("expected a refusal ({because}), got {other:?}"),
        }
    }

    #[test]
    fn a_first_start_takes_the_claim_and_a_restart_holds_it() {
        assert_eq!(judged(1, None, None), Verdict::Take { advance: false });
        let held = claim("edge", 1, ClaimState::Held);
        assert_eq!(
            judged(1, at(1, 1), Some(&held)),
            Verdict::Holds { epoch: 1 }
        );
        // Enabled after replacements: a store of generation 3 takes it the first time.
        assert_eq!(judged(3, None, None), Verdict::Take { advance: false });
    }

    #[test]
    fn a_replaced_store_advances_and_the_one_it_replaced_is_fenced() {
        let before = claim("edge", 4, ClaimState::Held);
        // The copy carries the record of generation 1; its generation is 2.
        assert_eq!(
            judged(2, at(1, 4), Some(&before)),
            Verdict::Take { advance: true }
        );
        assert_eq!(
            judged(2, None, Some(&before)),
            Verdict::Take { advance: true }
        );
        let after = claim("edge", 5, ClaimState::Held);
        refused(
            judged(1, at(1, 4), Some(&after)),
            "fenced: storage generation 1 was replaced",
        );
        // A copy of generation 1 from before the first confirmed start.
        refused(judged(1, None, Some(&after)), "never confirmed holding it");
    }

    #[test]
    fn absence_and_regression_at_the_authority_are_refused() {
        refused(judged(1, at(1, 2), None), "holds no claim `store:edge`");
        refused(judged(2, at(1, 2), None), "holds no claim `store:edge`");
        let back = claim("edge", 1, ClaimState::Held);
        refused(
            judged(1, at(1, 2), Some(&back)),
            "the authority's state went back",
        );
        let other = claim("intruder", 3, ClaimState::Held);
        refused(judged(1, at(1, 3), Some(&other)), "held by `intruder`");
        let released = claim("edge", 3, ClaimState::Released);
        refused(judged(1, at(1, 3), Some(&released)), "released at epoch 3");
        refused(judged(2, None, Some(&released)), "released at epoch 3");
    }

    #[test]
    fn intents_read_back_and_name_their_ops() {
        let intent = Intent {
            generation: 2,
            nonce: "00ff".to_owned(),
            advance: true,
        };
        assert_eq!(Intent::parse(&intent.text()), Some(intent.clone()));
        assert_eq!(
            intent.ops("edge"),
            (
                "store:edge:g2:00ff:release".to_owned(),
                "store:edge:g2:00ff:acquire".to_owned()
            )
        );
        for bad in [
            "",
            "2",
            "2 zz true",
            "x 00 true",
            "2 00 maybe",
            "2 00 true extra",
        ] {
            assert_eq!(Intent::parse(bad), None, "{bad}");
        }
    }
}
