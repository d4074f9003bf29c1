//! The ledger's wire types (an API boundary: fields are only ever added): control
//! calls (`Call::Ledger`), their replies, operations and answers, account and ledger
//! definitions as reconcile sends them (`Request::InstallLedger`, …) and as `observe`
//! reports them.
//!
//! Amounts are integer minor units (`u128`). They travel as decimal strings
//! (`"amount": "1250"`), because a JSON number above `u64::MAX` does not survive
//! every JSON reader (nor serde's internally tagged enums); a JSON number up to
//! `u64::MAX` is accepted on input too.

use serde::{Deserialize, Serialize};

/// One operation of a batch. Every operation has its own id, unique in its ledger
/// across transfers, posts and voids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum LedgerOp {
    /// Move `amount` from `debit` to `credit`: posted at once, or held `pending`
    /// (two-phase) until posted, voided or — with `timeout_s` — expired.
    Transfer {
        id: String,
        debit: String,
        credit: String,
        #[serde(with = "amount")]
        amount: u128,
        currency: String,
        #[serde(default)]
        pending: bool,
        /// Seconds until a pending transfer expires (only with `pending`; none: never).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_s: Option<u64>,
    },
    /// Post a pending transfer: all of it (`amount` none) or part (the rest released).
    Post {
        id: String,
        pending_id: String,
        #[serde(
            default,
            with = "amount_option",
            skip_serializing_if = "Option::is_none"
        )]
        amount: Option<u128>,
    },
    /// Void a pending transfer: its whole amount released.
    Void { id: String, pending_id: String },
}

impl LedgerOp {
    pub fn id(&self) -> &str {
        match self {
            LedgerOp::Transfer { id, .. }
            | LedgerOp::Post { id, .. }
            | LedgerOp::Void { id, .. } => id,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LedgerOutcome {
    Succeeded,
    Refused,
}

/// The original answer of one operation, retained under its id forever: re-sending the
/// id with the same body returns it, identical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerAnswer {
    pub id: String,
    pub outcome: LedgerOutcome,
    /// Why it was refused, naming the offending account, transfer or limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What moved: a transfer's amount, the amount a post posted, the amount a void
    /// released.
    #[serde(
        default,
        with = "amount_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub amount: Option<u128>,
    /// Read back from the host's archive (settled past its hot window): the same
    /// answer. Not in a batch's answers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
}

/// An account as the topology declares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountDefinition {
    pub name: String,
    pub currency: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default)]
    pub debits_must_not_exceed_credits: bool,
    #[serde(default)]
    pub credits_must_not_exceed_debits: bool,
    #[serde(default)]
    pub retired: bool,
}

/// A ledger and its accounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerDefinition {
    pub name: String,
    pub accounts: Vec<AccountDefinition>,
}

/// A control call to the host's `ledger` profile (`Call::Ledger`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum LedgerCall {
    /// Apply a batch (at most `LEDGER_BATCH_TRANSFERS_MAX` operations); answered after
    /// the batch is fsynced, one answer per operation in order.
    Submit { ledger: String, ops: Vec<LedgerOp> },
    /// The retained answers of `ids` (none for an id never submitted). Changes nothing.
    Lookup { ledger: String, ids: Vec<String> },
    /// Accounts with balances, pending transfers, counts. Changes nothing.
    Inspect {
        ledger: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        account: Option<String>,
    },
}

/// Tagged `result` (it travels inside `Reply`, which is tagged `reply`, beside fields
/// named `ledger`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum LedgerReply {
    Answers {
        ledger: String,
        answers: Vec<LedgerAnswer>,
    },
    /// `lookup`: one entry per id asked, in order.
    Retained {
        ledger: String,
        answers: Vec<Option<LedgerAnswer>>,
    },
    Inspected(Box<LedgerView>),
    /// The whole call was refused and changed nothing (no such ledger, a batch over
    /// its limit, an invalid id).
    Refused {
        reason: String,
    },
}

/// `inspect ledger`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerView {
    pub host: String,
    pub ledger: String,
    pub accounts: Vec<AccountView>,
    /// Pending transfers still held (touching `account` when one was asked), oldest
    /// first, at most `LEDGER_INSPECT_PENDING_MAX`.
    pub pending: Vec<PendingView>,
    pub counts: LedgerCounts,
    /// Journal records applied (batches and definitions).
    pub sequence: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountView {
    #[serde(flatten)]
    pub definition: AccountDefinition,
    #[serde(with = "amount")]
    pub debits_pending: u128,
    #[serde(with = "amount")]
    pub debits_posted: u128,
    #[serde(with = "amount")]
    pub credits_pending: u128,
    #[serde(with = "amount")]
    pub credits_posted: u128,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingView {
    pub id: String,
    pub debit: String,
    pub credit: String,
    #[serde(with = "amount")]
    pub amount: u128,
    pub currency: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

/// Operations answered, by what became of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerCounts {
    /// Ids answered (succeeded and refused).
    pub answered: u64,
    pub refused: u64,
    /// Transfers posted at once.
    pub posted_transfers: u64,
    /// Pending transfers made, and what became of them.
    pub pending_transfers: u64,
    pub posts: u64,
    pub voids: u64,
    pub expired: u64,
    /// Pending transfers still held.
    pub pending_open: u64,
    /// Posted entries (append-only): posted transfers and posts.
    pub posted_entries: u64,
}

/// `u128` as a decimal string; a JSON number up to `u64::MAX` accepted too.
pub mod amount {
    use serde::{Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(value: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        d.deserialize_any(Visitor)
    }

    pub(super) struct Visitor;

    impl de::Visitor<'_> for Visitor {
        type Value = u128;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an amount in integer minor units (a decimal string, or a JSON integer up to u64::MAX)")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u128, E> {
            Ok(v.into())
        }

        fn visit_u128<E: de::Error>(self, v: u128) -> Result<u128, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u128, E> {
            u128::try_from(v).map_err(|_| E::custom(format!("amount {v} is negative")))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u128, E> {
            Err(E::custom(format!(
                "amount {v} is not an integer of minor units (amounts above u64::MAX travel as decimal strings)"
            )))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<u128, E> {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(E::custom(format!(
                    "amount `{v}` is not a decimal integer of minor units"
                )));
            }
            v.parse()
                .map_err(|_| E::custom(format!("amount `{v}` exceeds u128")))
        }
    }
}

/// `Option<u128>` as [`amount`] does.
pub mod amount_option {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<u128>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => s.collect_str(v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u128>, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Option<u128>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an amount or null")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Option<u128>, E> {
                Ok(None)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Option<u128>, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<u128>, D::Error> {
                super::amount::deserialize(d).map(Some)
            }
        }
        d.deserialize_option(Visitor)
    }
}
