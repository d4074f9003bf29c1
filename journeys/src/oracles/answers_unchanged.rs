//! **Answers unchanged**: an operation id's first definite answer is its original
//! answer, and every later answer to the same id — re-sent after a crash, a lost reply, a
//! restart or a resolution — is identical to it (Grid's retained answers, SPEC §1.3).
//!
//! Unknown: an answer that is not definite (`unknown`, a reply that never came, no
//! answer at all) says nothing about the operation. Before the original it is kept as
//! unknown — never as absent or failed — and a later definite answer becomes the
//! original; after the original, an answer that is not definite is a change.
//!
//! On failure: expected "op ID to keep its original answer ORIGINAL (WHEN)", observed
//! the answer given. Used by `expect-answers-unchanged` (claims), `run-process …
//! same-as=` and `process-cycles` (every answer of every cycle).

use crate::error::Failure;

/// An answer as the oracle compares it.
pub trait Answer: Clone {
    /// Decided: from now on every answer to the operation must be [`Answer::same`].
    fn definite(&self) -> bool;
    /// Identical in everything the original answer fixes.
    fn same(&self, other: &Self) -> bool;
    /// The answer for a failure report.
    fn show(&self) -> String;
}

/// Checks `again`, an answer to `op` given `when`, against `original` (its first
/// definite answer, `None` while every answer so far was unknown); a first definite
/// answer becomes the original.
pub fn check<A: Answer>(
    op: &str,
    original: &mut Option<A>,
    again: &A,
    when: &str,
) -> Result<(), Failure> {
    match original {
        Some(first) if !first.same(again) => Err(Failure::new(
            format!(
                "op {op} to keep its original answer {} ({when})",
                first.show()
            ),
            again.show(),
        )),
        Some(_) => Ok(()),
        None => {
            if again.definite() {
                *original = Some(again.clone());
            }
            Ok(())
        }
    }
}
