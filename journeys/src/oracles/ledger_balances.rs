//! **Ledger balances are the sum of the answers**: every account's posted debits and
//! credits equal the sum of the succeeded posted transfers and posts that name it, and
//! its pending debits and credits the sum of the succeeded pending transfers no
//! succeeded post or void closed — one effect per operation id, whatever was re-sent,
//! lost or crashed around (SPEC C6, §1.2).
//!
//! Unknown: an operation whose every answer so far is `unknown` (a lost reply, a crash
//! before the reply) has no known effect, so balances cannot be predicted: the oracle
//! refuses to judge them rather than take it as absent. A refused operation has no
//! effect. A refusal without the ledger's `reason` (the host refused before anything was
//! journaled — `storage full`) is no answer of the ledger's: a later answer to the same
//! id is its answer. Pending transfers that may expire are not predicted (journeys using this
//! oracle give pending transfers no timeout).
//!
//! On failure: expected "account A: debits_posted N, …, from the answers", observed the
//! balances the ledger reports. Used by `expect-ledger … from-answers=#true`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Failure;

/// One answer a `ledger` step recorded, with the operation it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    pub ledger: String,
    /// The host that keeps the ledger (none in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub op: String,
    /// `transfer`, `post`, `void`.
    pub kind: String,
    #[serde(default)]
    pub debit: Option<String>,
    #[serde(default)]
    pub credit: Option<String>,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub pending_id: Option<String>,
    /// `succeeded`, `refused`, `unknown`.
    pub outcome: String,
    /// What moved (the answer's amount), as a decimal string.
    #[serde(default)]
    pub amount: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// Balances of one account: debits pending, debits posted, credits pending, credits
/// posted.
pub type Balances = [u128; 4];

/// The balances the recorded answers of `ledger` imply, per account.
pub fn expected(records: &[Recorded], ledger: &str) -> Result<BTreeMap<String, Balances>, Failure> {
    // The first definite answer of each id is its answer.
    let mut answers: BTreeMap<&str, &Recorded> = BTreeMap::new();
    let mut unknown: Vec<&str> = Vec::new();
    for r in records.iter().filter(|r| r.ledger == ledger) {
        if r.outcome == "unknown" {
            unknown.push(&r.op);
            continue;
        }
        if r.outcome == "refused" && r.reason.is_none() {
            continue;
        }
        answers.entry(&r.op).or_insert(r);
    }
    if let Some(op) = unknown.iter().find(|op| !answers.contains_key(**op)) {
        return Err(Failure::new(
            format!("a definite answer of {op} before balances are predicted from the answers"),
            format!("{op} is unknown: its effect is not known"),
        ));
    }
    let amount = |r: &Recorded| -> Result<u128, Failure> {
        r.amount.as_deref().unwrap_or("").parse().map_err(|_| {
            Failure::new(
                format!("an amount in the answer of {}", r.op),
                format!("{:?}", r.amount),
            )
        })
    };
    let mut balances: BTreeMap<String, Balances> = BTreeMap::new();
    let mut held: BTreeMap<&str, (&str, &str, u128)> = BTreeMap::new();
    // Transfers first (a post names its pending transfer, answered earlier).
    for r in answers.values().filter(|r| r.outcome == "succeeded") {
        if r.kind != "transfer" {
            continue;
        }
        let (Some(debit), Some(credit)) = (&r.debit, &r.credit) else {
            continue;
        };
        let a = amount(r)?;
        let (d, c) = if r.pending { (0, 2) } else { (1, 3) };
        balances.entry(debit.clone()).or_default()[d] += a;
        balances.entry(credit.clone()).or_default()[c] += a;
        if r.pending {
            held.insert(&r.op, (debit.as_str(), credit.as_str(), a));
        }
    }
    for r in answers.values().filter(|r| r.outcome == "succeeded") {
        if r.kind == "transfer" {
            continue;
        }
        let pending = r.pending_id.as_deref().unwrap_or("");
        let Some((debit, credit, a)) = held.get(pending).copied() else {
            return Err(Failure::new(
                format!(
                    "the pending transfer {pending} that {} closed among the answers",
                    r.op
                ),
                "no succeeded pending transfer of that id was recorded",
            ));
        };
        let d = balances.entry(debit.to_owned()).or_default();
        d[0] -= a;
        let c = balances.entry(credit.to_owned()).or_default();
        c[2] -= a;
        if r.kind == "post" {
            let posted = amount(r)?;
            balances.entry(debit.to_owned()).or_default()[1] += posted;
            balances.entry(credit.to_owned()).or_default()[3] += posted;
        }
    }
    Ok(balances)
}

/// Checks `observed` (each account's balances as the ledger reports them) against the
/// answers: every account named by a succeeded answer, and every other account at 0.
pub fn check(
    records: &[Recorded],
    ledger: &str,
    observed: &BTreeMap<String, Balances>,
) -> Result<String, Failure> {
    let expected = expected(records, ledger)?;
    for (account, balances) in observed {
        let want = expected.get(account).copied().unwrap_or_default();
        if want != *balances {
            return Err(Failure::new(
                format!(
                    "account {account}: debits pending {} posted {}, credits pending {} posted {}, from the answers",
                    want[0], want[1], want[2], want[3]
                ),
                format!(
                    "debits pending {} posted {}, credits pending {} posted {}",
                    balances[0], balances[1], balances[2], balances[3]
                ),
            ));
        }
    }
    if let Some(account) = expected.keys().find(|a| !observed.contains_key(*a)) {
        return Err(Failure::new(
            format!("account {account} in the ledger"),
            "not reported",
        ));
    }
    Ok(format!(
        "{} account(s) hold exactly the sum of {} succeeded answer(s)",
        observed.len(),
        records
            .iter()
            .filter(|r| r.ledger == ledger && r.outcome == "succeeded")
            .count()
    ))
}
