//! The built-in Process `ledger.transfer`, wired here because it joins two rooms: the
//! Processes service runs it under the caller's execution grant, the host's
//! [`Ledgers`] applies its one transfer.
//!
//! The transfer's id is derived from the run: `process:CALLER:REQUEST`
//! ([`transfer_id`]). The receiver keys runs by request id and refuses an id used by
//! another caller, so the id names one run; the caller's name in it keeps transfers of
//! different callers apart in the ledger's id space. A run submits it once (a run
//! never executes twice); a run left `unknown` by a crash asks the ledger for the
//! retained answer of that id ([`Process::recover`]) — never submits it again.
//!
//! The run's result is the **joined outcome** ([`joined`]): the Process outcome, the
//! ledger's answer and the grant charge, journaled and signed as the run's outcome.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::ledger::api::{LedgerAnswer, LedgerOp, LedgerOutcome};
use crate::ledger::service::Ledgers;
use crate::limits::REQUEST_ID_LENGTH_MAX;
use crate::processes::service::{Failed, Invocation, Process, Recovered};
use crate::store::{Failpoint, Failpoints};

/// The arguments a `ledger.transfer` run takes.
const ARGUMENTS: [&str; 7] = [
    "ledger",
    "debit",
    "credit",
    "amount",
    "currency",
    "pending",
    "timeout_s",
];

/// `ledger.transfer`: one ledger transfer per run, its answer joined with the run's.
pub struct LedgerTransfer {
    pub ledgers: Ledgers,
    pub failpoints: Mutex<Failpoints>,
}

/// The ledger and the transfer a run asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub ledger: String,
    pub op: LedgerOp,
}

/// The id of the one ledger transfer of run `request` from `caller`.
pub fn transfer_id(caller: &str, request: &str) -> String {
    format!("process:{caller}:{request}")
}

/// The transfer a run's arguments ask for; an error names the offending argument and
/// nothing is submitted.
pub fn asked(
    caller: &str,
    request: &str,
    arguments: &BTreeMap<String, String>,
) -> Result<Asked, String> {
    if let Some(other) = arguments.keys().find(|k| !ARGUMENTS.contains(&k.as_str())) {
        return Err(format!(
            "ledger.transfer takes no argument `{other}` (it takes: {})",
            ARGUMENTS.join(", ")
        ));
    }
    let required = |name: &str| {
        arguments
            .get(name)
            .cloned()
            .ok_or_else(|| format!("ledger.transfer needs the argument `{name}`"))
    };
    let ledger = required("ledger")?;
    let text = required("amount")?;
    let amount: u128 = text
        .parse()
        .ok()
        .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            format!("argument `amount`: `{text}` is not a whole number of minor units (u128)")
        })?;
    let pending = match arguments.get("pending").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(format!(
                "argument `pending`: `{other}` is not true or false"
            ));
        }
    };
    let timeout_s = match arguments.get("timeout_s") {
        None => None,
        Some(text) => Some(text.parse::<u64>().map_err(|_| {
            format!("argument `timeout_s`: `{text}` is not a whole number of seconds")
        })?),
    };
    let id = transfer_id(caller, request);
    if id.len() > REQUEST_ID_LENGTH_MAX {
        return Err(format!(
            "the transfer id `{id}` is longer than REQUEST_ID_LENGTH_MAX ({REQUEST_ID_LENGTH_MAX}); use a shorter request id"
        ));
    }
    Ok(Asked {
        ledger,
        op: LedgerOp::Transfer {
            id,
            debit: required("debit")?,
            credit: required("credit")?,
            amount,
            currency: required("currency")?,
            pending,
            timeout_s,
        },
    })
}

/// The joined outcome of a run: succeeded (its unit consumed) exactly when the ledger
/// answered its transfer succeeded; failed (its unit released) when the ledger refused
/// it or nothing was submitted (`answer` none: `reason` says why). The result, on
/// either side:
/// `{"outcome", "ledger", "transfer": {"id", "outcome", "reason", "amount", "pending"}
/// or null, "charge": {"grant", "unit"}}` — amounts as decimal strings.
pub fn joined(
    ledger: &str,
    pending: bool,
    answer: Option<&LedgerAnswer>,
    grant: Option<&str>,
    reason: Option<String>,
) -> Result<serde_json::Value, Failed> {
    let succeeded = answer.is_some_and(|a| a.outcome == LedgerOutcome::Succeeded);
    let transfer = answer.map(|a| {
        serde_json::json!({
            "id": a.id,
            "outcome": match a.outcome {
                LedgerOutcome::Succeeded => "succeeded",
                LedgerOutcome::Refused => "refused",
            },
            "reason": a.reason,
            "amount": a.amount.map(|n| n.to_string()),
            "pending": pending,
        })
    });
    let result = serde_json::json!({
        "outcome": if succeeded { "succeeded" } else { "failed" },
        "ledger": ledger,
        "transfer": transfer,
        "charge": {
            "grant": grant,
            "unit": if succeeded { "consumed" } else { "released" },
        },
    });
    if succeeded {
        return Ok(result);
    }
    let reason = match (answer, reason) {
        (_, Some(reason)) => reason,
        (Some(a), None) => format!(
            "the ledger refused transfer `{}`: {}",
            a.id,
            a.reason.as_deref().unwrap_or("no reason given")
        ),
        (None, None) => "nothing was submitted to the ledger".to_owned(),
    };
    Err(Failed {
        reason,
        result: Some(result),
    })
}

impl LedgerTransfer {
    fn reach(&self, point: Failpoint) {
        self.failpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reach(point);
    }
}

impl Process for LedgerTransfer {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        self.run_outcome(invocation).map_err(|f| f.reason)
    }

    fn run_outcome(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, Failed> {
        let ledger = invocation
            .arguments
            .get("ledger")
            .cloned()
            .unwrap_or_default();
        let asked = match asked(invocation.caller, invocation.request, invocation.arguments) {
            Ok(asked) => asked,
            Err(reason) => return joined(&ledger, false, None, invocation.grant, Some(reason)),
        };
        let pending = matches!(asked.op, LedgerOp::Transfer { pending: true, .. });
        self.reach(Failpoint::TransferBeforeSubmit);
        // Submitted once: this run never executes again, and recovery only asks.
        let answers = match self
            .ledgers
            .submit(&asked.ledger, std::slice::from_ref(&asked.op))
        {
            Ok(answers) => answers,
            // Refused as a whole before anything was applied (no such ledger, a bad
            // batch): nothing of it is in the ledger.
            Err(e) => {
                return joined(
                    &asked.ledger,
                    pending,
                    None,
                    invocation.grant,
                    Some(format!("the ledger refused the call: {e}")),
                );
            }
        };
        self.reach(Failpoint::TransferAfterAnswer);
        joined(
            &asked.ledger,
            pending,
            answers.first(),
            invocation.grant,
            None,
        )
    }

    /// Asks the ledger (replayed before this is called) for the retained answer of
    /// the run's transfer id: an answer is the outcome; none means the ledger never
    /// applied it (its batch is fsynced before any answer) — the run stays `unknown`,
    /// its unit held, for the operator (`gridctl process resolve`). Never submits.
    fn recover(&self, invocation: &Invocation<'_>) -> Recovered {
        let Ok(asked) = asked(invocation.caller, invocation.request, invocation.arguments) else {
            return Recovered::Unknown;
        };
        let pending = matches!(asked.op, LedgerOp::Transfer { pending: true, .. });
        match self
            .ledgers
            .lookup(&asked.ledger, &[asked.op.id().to_owned()])
        {
            Ok(answers) => match answers.into_iter().next().flatten() {
                Some(answer) => Recovered::Outcome(joined(
                    &asked.ledger,
                    pending,
                    Some(&answer),
                    invocation.grant,
                    None,
                )),
                None => Recovered::Unknown,
            },
            Err(e) => {
                tracing::warn!(
                    request = invocation.request,
                    "ledger.transfer cannot ask its ledger at recovery ({e}); the run stays unknown"
                );
                Recovered::Unknown
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processes::runs::{Run, RunUnits, UnitMove};
    use proptest::prelude::*;

    fn arguments(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_transfer_id_is_derived_from_the_caller_and_the_request() {
        let args = arguments(&[
            ("ledger", "l"),
            ("debit", "a"),
            ("credit", "b"),
            ("amount", "340282366920938463463374607431768211455"),
            ("currency", "EUR"),
            ("pending", "true"),
            ("timeout_s", "60"),
        ]);
        let asked = asked("hq", "t1", &args).unwrap();
        assert_eq!(asked.op.id(), "process:hq:t1");
        assert_eq!(asked, super::asked("hq", "t1", &args).unwrap());
        let LedgerOp::Transfer {
            amount,
            pending,
            timeout_s,
            ..
        } = asked.op
        else {
            panic!("a transfer")
        };
        assert_eq!((amount, pending, timeout_s), (u128::MAX, true, Some(60)));
        for (bad, named) in [
            (("amount", "1.5"), "amount"),
            (("amount", "+3"), "amount"),
            (("pending", "yes"), "pending"),
            (("colour", "red"), "colour"),
        ] {
            let mut args = args.clone();
            args.insert(bad.0.to_owned(), bad.1.to_owned());
            let e = super::asked("hq", "t1", &args).unwrap_err();
            assert!(e.contains(&format!("`{named}`")), "{e}");
        }
        let mut missing = args.clone();
        missing.remove("debit");
        assert!(
            super::asked("hq", "t1", &missing)
                .unwrap_err()
                .contains("`debit`")
        );
        let long = "r".repeat(REQUEST_ID_LENGTH_MAX);
        assert!(
            super::asked("hq", &long, &args)
                .unwrap_err()
                .contains("REQUEST_ID_LENGTH_MAX")
        );
    }

    proptest! {
        /// For every ledger answer (or none): the joined outcome succeeds exactly when
        /// the ledger's answer did, its charge names the unit move the run machine
        /// makes for that outcome, and the ledger's answer is carried unchanged.
        #[test]
        fn the_joined_outcome_follows_the_ledger_answer(
            answered in proptest::option::of((any::<bool>(), proptest::option::of(any::<u128>()), proptest::option::of("[a-z ]{0,12}"))),
            pending in any::<bool>(),
            grant in proptest::option::of("[a-z-]{1,12}"),
        ) {
            let answer = answered.clone().map(|(ok, amount, reason)| LedgerAnswer {
                id: "process:hq:t".to_owned(),
                outcome: if ok { LedgerOutcome::Succeeded } else { LedgerOutcome::Refused },
                reason,
                amount,
                archived: false,
            });
            let joined = joined("l", pending, answer.as_ref(), grant.as_deref(), None);
            let succeeded = answered.as_ref().is_some_and(|(ok, _, _)| *ok);
            prop_assert_eq!(joined.is_ok(), succeeded);
            let result = match &joined {
                Ok(v) => v.clone(),
                Err(f) => {
                    prop_assert!(!f.reason.is_empty());
                    f.result.clone().expect("a failed transfer keeps its joined result")
                }
            };
            prop_assert_eq!(&result["outcome"], if succeeded { "succeeded" } else { "failed" });
            prop_assert_eq!(&result["ledger"], "l");
            prop_assert_eq!(result["charge"]["grant"].as_str(), grant.as_deref());
            // The unit the result names is the one the run machine moves.
            let mut run = Run::dispatched();
            let moved = run.finish(joined.is_ok()).unwrap();
            let unit = result["charge"]["unit"].as_str().unwrap();
            prop_assert_eq!(unit, run.units.name());
            prop_assert_eq!(matches!(moved, UnitMove::Consume(_)), unit == RunUnits::Consumed.name());
            match &answer {
                None => prop_assert!(result["transfer"].is_null()),
                Some(a) => {
                    let t = &result["transfer"];
                    prop_assert_eq!(&t["id"], a.id.as_str());
                    prop_assert_eq!(&t["outcome"], if a.outcome == LedgerOutcome::Succeeded { "succeeded" } else { "refused" });
                    prop_assert_eq!(t["amount"].as_str().map(str::to_owned), a.amount.map(|n| n.to_string()));
                    prop_assert_eq!(t["reason"].as_str(), a.reason.as_deref());
                    prop_assert_eq!(&t["pending"], pending);
                }
            }
            // Deterministic: a recovery from the same answer journals the same result.
            let again = super::joined("l", pending, answer.as_ref(), grant.as_deref(), None);
            prop_assert_eq!(joined, again);
        }
    }
}
