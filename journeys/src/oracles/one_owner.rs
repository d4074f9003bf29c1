//! **One owner per epoch**: never two owners of one claim at one epoch, across every
//! definite answer the journey recorded (SPEC C3's fencing).
//!
//! Unknown: answers that are not definite (`unknown`, refused, no answer) name no owner
//! and are left out — an `unknown` acquire may or may not have taken the claim, so it
//! is neither counted as an owner nor as proof there was none. Epoch 0 (never owned) is
//! left out too.
//!
//! On failure: expected "one owner of `CLAIM` at epoch N", observed both owners and the
//! op ids whose answers named them. Used by `claim-stream` and
//! `expect-answers-unchanged`.

use std::collections::BTreeMap;

use crate::error::Failure;

/// A definite answer naming a claim's owner.
#[derive(Debug, Clone, Copy)]
pub struct Owned<'a> {
    pub op: &'a str,
    pub claim: &'a str,
    pub owner: &'a str,
    pub epoch: u64,
}

/// Checks that no two answers name different owners of one claim at one epoch.
pub fn check<'a>(answers: impl IntoIterator<Item = Owned<'a>>) -> Result<(), Failure> {
    let mut owners: BTreeMap<(&str, u64), (&str, &str)> = BTreeMap::new();
    for answer in answers {
        if answer.epoch == 0 {
            continue;
        }
        match owners.get(&(answer.claim, answer.epoch)) {
            Some((seen, by)) if *seen != answer.owner => {
                return Err(Failure::new(
                    format!("one owner of `{}` at epoch {}", answer.claim, answer.epoch),
                    format!(
                        "`{seen}` (answer to {by}) and `{}` (answer to {})",
                        answer.owner, answer.op
                    ),
                ));
            }
            Some(_) => {}
            None => {
                owners.insert((answer.claim, answer.epoch), (answer.owner, answer.op));
            }
        }
    }
    Ok(())
}
