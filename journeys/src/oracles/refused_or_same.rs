//! **Refused or the same**: a host whose storage was damaged (a flipped byte, a file cut
//! short) either refuses to start, naming its directory, or starts holding everything
//! it acknowledged — every re-sent id answered as first given and marked as such
//! (`replayed`: nothing ran again; a lookup runs nothing), every model's values and
//! every ledger's view unchanged (SPEC principle 2, docs/storage.md "A damaged
//! store"). Never a panic, never a different answer.
//!
//! Unknown: an answer the host cannot read back (an archive entry whose bytes no longer
//! match their digest) may be `unknown` — never "not found, so do it" — but only naming
//! the damaged file: an `unknown` that does not say what failed is a change like any
//! other. A refusal must come with a message naming the installation (the store's or
//! archive's directory or the file).
//!
//! On failure: expected "a refusal naming …" (observed what gridd printed), "op ID to
//! keep its original answer …" (observed the answer), or "model M's values unchanged"
//! (or "ledger L's …"; observed both). Used by `damage`.

use super::answers_unchanged::Answer;
use crate::error::Failure;
use crate::process::quote_output;

/// An answer that can say it is the one first given, or that it cannot be read.
pub trait Retained: Answer {
    /// The answer says it is the original (`"replayed": true`): nothing ran again.
    fn replayed(&self) -> bool;
    /// `Some(detail)` when the answer is `unknown`.
    fn unknown(&self) -> Option<&str>;
}

/// What a start of the damaged host showed.
pub enum Found<'a, A> {
    /// gridd exited with this output instead of starting.
    Refused { output: &'a str },
    /// gridd started: each recorded original with the answer its id got again, and
    /// each model's values (or ledger's view), named `model M` (`ledger L`), before
    /// the damage and now.
    Started {
        answers: Vec<(&'a A, A)>,
        values: Vec<(&'a str, &'a serde_json::Value, serde_json::Value)>,
    },
}

/// What a trial came to, for the story.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Refused,
    /// Started; this many answers were `unknown` naming the damaged file.
    Same {
        unknown: usize,
    },
}

/// Checks one trial. `damaged` is the damaged file's name (its last path component);
/// `names` the paths a refusal may name (the host's directory, the damaged one).
pub fn check<A: Retained>(
    op_of: impl Fn(&A) -> &str,
    damaged: &str,
    names: &[String],
    found: Found<'_, A>,
) -> Result<Verdict, Failure> {
    match found {
        Found::Refused { output } => {
            if output.contains("panicked") {
                return Err(Failure::new(
                    "a refusal, never a panic",
                    quote_output(output),
                ));
            }
            if !names.iter().any(|name| output.contains(name.as_str())) {
                return Err(Failure::new(
                    format!("a refusal naming one of {}", names.join(", ")),
                    format!("a refusal naming none: {}", quote_output(output)),
                ));
            }
            Ok(Verdict::Refused)
        }
        Found::Started { answers, values } => {
            let mut unknown = 0;
            for (original, again) in answers {
                let op = op_of(original);
                match again.unknown() {
                    Some(detail) if detail.contains(damaged) => {
                        unknown += 1;
                        continue;
                    }
                    _ => {}
                }
                if !again.replayed() || !original.same(&again) {
                    return Err(Failure::new(
                        format!(
                            "op {op} to keep its original answer {} (replayed), or `unknown` naming {damaged}",
                            original.show()
                        ),
                        format!(
                            "{}{}",
                            again.show(),
                            if again.replayed() {
                                ""
                            } else {
                                " (not marked replayed)"
                            }
                        ),
                    ));
                }
            }
            for (model, before, now) in values {
                if before != &now {
                    return Err(Failure::new(
                        format!("{model}'s values unchanged: {before}"),
                        now.to_string(),
                    ));
                }
            }
            Ok(Verdict::Same { unknown })
        }
    }
}
