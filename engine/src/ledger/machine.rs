//! One ledger's state machine: accounts and their balances, two-phase transfers,
//! posted entries and the original answer of every id — in memory those since the last
//! checkpoint, the rest settled into the ledger's id index and given back before a
//! batch names them (`settle`, `missing`, `recall_*`; checkpoint.rs). Pure: no IO, no
//! clock (the batch's time `now_ms` is an argument, journaled with the batch), so
//! replaying the journal gives the same state and the same answers.
//!
//! | operation | refused when | effect |
//! |---|---|---|
//! | transfer (posted) | amount 0, same account both sides, unknown or retired account, currency mismatch, overflow, balance flag | debit's `debits_posted` and credit's `credits_posted` += amount; a posted entry |
//! | transfer (pending) | as above; `timeout_s` 0 or over `LEDGER_TIMEOUT_S_MAX` | `*_pending` += amount; held until post, void or expiry |
//! | post | no such pending transfer; already posted, voided or expired; amount 0 or above the pending amount; overflow | `*_pending` -= pending amount, `*_posted` += amount (the rest released); a posted entry |
//! | void | no such pending transfer; already posted, voided or expired | `*_pending` -= pending amount |
//! | expiry (`now_ms` ≥ expiry) | — | as void |
//!
//! Retired accounts refuse new transfers; a post or void of a transfer already pending
//! on them is allowed, so retirement never strands a held amount. Every id's answer is
//! retained — refusals too: the same id with the same body returns it, another body is
//! refused (`exists with a different body`) without changing the original, so a
//! refused operation is retried under a new id.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::api::{
    AccountDefinition, AccountView, LedgerAnswer, LedgerCounts, LedgerOp, LedgerOutcome,
    PendingView,
};
use crate::limits::LEDGER_TIMEOUT_S_MAX;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Account {
    pub definition: AccountDefinition,
    pub debits_pending: u128,
    pub debits_posted: u128,
    pub credits_pending: u128,
    pub credits_posted: u128,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum PendingState {
    Pending,
    Posted { by: Box<str>, amount: u128 },
    Voided { by: Box<str> },
    Expired { at_ms: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pending {
    pub debit: u32,
    pub credit: u32,
    pub amount: u128,
    pub expires_at_ms: Option<u64>,
    pub state: PendingState,
    /// The order it was made in (its place among the pending transfers held).
    order: u64,
}

/// A posted entry: never changed once appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// The transfer's id, or the post's.
    pub id: Box<str>,
    pub debit: u32,
    pub credit: u32,
    pub amount: u128,
}

/// The retained answer of one id and the body it answered (in the id index:
/// `codec::encode_entry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    body: Box<[u8]>,
    refused: Option<Box<str>>,
    amount: Option<u128>,
}

impl Entry {
    pub fn new(body: Box<[u8]>, refused: Option<Box<str>>, amount: Option<u128>) -> Entry {
        Entry {
            body,
            refused,
            amount,
        }
    }

    /// The body it answered, its refusal, the amount it moved.
    pub fn parts(&self) -> (&[u8], Option<&str>, Option<u128>) {
        (&self.body, self.refused.as_deref(), self.amount)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    accounts: Vec<Account>,
    index: HashMap<String, u32>,
    entries: HashMap<Box<str>, Entry>,
    pendings: HashMap<Box<str>, Pending>,
    /// Pending transfers with an expiry, still pending: (expires_at_ms, id).
    due: BTreeSet<(u64, Box<str>)>,
    /// Pending transfers still held, in the order they were made.
    open: BTreeSet<(u64, Box<str>)>,
    made: u64,
    posted: Vec<Posted>,
    counts: LedgerCounts,
    /// Answers taken back from the id index (or the archive): already settled, never
    /// settled again (the index keeps them where they are).
    recalled: HashSet<Box<str>>,
    /// Closed pending transfers taken back the same way (apart: a recalled answer's id
    /// may be a transfer still pending here, whose close must be settled).
    recalled_closed: HashSet<Box<str>>,
}

/// A definition change the machine refuses (reconcile's requests).
pub type DefinitionError = String;

fn refuse(reason: String) -> Result<Effect, String> {
    Err(reason)
}

/// What an accepted operation does, applied only after every check passed.
enum Effect {
    Transfer {
        debit: u32,
        credit: u32,
        amount: u128,
        pending: Option<Option<u64>>,
    },
    Post {
        pending: Box<str>,
        amount: u128,
    },
    Void {
        pending: Box<str>,
    },
}

impl Machine {
    pub fn accounts(&self) -> &[Account] {
        &self.accounts
    }

    pub fn posted(&self) -> &[Posted] {
        &self.posted
    }

    pub fn counts(&self) -> &LedgerCounts {
        &self.counts
    }

    pub fn account(&self, name: &str) -> Option<&Account> {
        self.index.get(name).map(|&i| &self.accounts[i as usize])
    }

    pub fn pending(&self, id: &str) -> Option<&Pending> {
        self.pendings.get(id)
    }

    /// The earliest expiry of a pending transfer still held.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.due.first().map(|(at, _)| *at)
    }

    /// Opens an account (a new name; its currency a valid code).
    pub fn open(&mut self, definition: &AccountDefinition) -> Result<(), DefinitionError> {
        if self.index.contains_key(&definition.name) {
            return Err(format!("account `{}` already exists", definition.name));
        }
        check_definition(definition)?;
        if self.accounts.len() >= crate::limits::LEDGER_ACCOUNTS_MAX {
            return Err(format!(
                "the ledger holds LEDGER_ACCOUNTS_MAX ({}) accounts already",
                crate::limits::LEDGER_ACCOUNTS_MAX
            ));
        }
        let index = u32::try_from(self.accounts.len()).expect("bounded by LEDGER_ACCOUNTS_MAX");
        self.index.insert(definition.name.clone(), index);
        self.accounts.push(Account {
            definition: definition.clone(),
            debits_pending: 0,
            debits_posted: 0,
            credits_pending: 0,
            credits_posted: 0,
        });
        Ok(())
    }

    /// Retires an account: closed to new transfers, kept with its balances.
    pub fn retire(&mut self, name: &str) -> Result<bool, DefinitionError> {
        let index = *self
            .index
            .get(name)
            .ok_or_else(|| format!("no account `{name}`"))?;
        let account = &mut self.accounts[index as usize];
        let was = account.definition.retired;
        account.definition.retired = true;
        Ok(!was)
    }

    /// Expires every pending transfer due at `now_ms`; returns how many.
    pub fn expire(&mut self, now_ms: u64) -> u64 {
        let mut expired = 0;
        while let Some((at, _)) = self.due.first()
            && *at <= now_ms
        {
            let (at, id) = self.due.pop_first().expect("just seen");
            let pending = self
                .pendings
                .get_mut(&id)
                .expect("due transfers are pending");
            debug_assert_eq!(pending.state, PendingState::Pending);
            pending.state = PendingState::Expired { at_ms: at };
            let (debit, credit, amount) = (pending.debit, pending.credit, pending.amount);
            self.release(debit, credit, amount);
            self.close(&id);
            self.counts.expired += 1;
            expired += 1;
        }
        expired
    }

    /// Applies one batch at `now_ms`: due pending transfers expire first, then each
    /// operation in order; one answer per operation.
    pub fn apply(&mut self, now_ms: u64, ops: &[LedgerOp]) -> Vec<LedgerAnswer> {
        self.expire(now_ms);
        ops.iter().map(|op| self.operation(now_ms, op)).collect()
    }

    /// The retained answer of `id`.
    pub fn answer(&self, id: &str) -> Option<LedgerAnswer> {
        self.entries.get(id).map(|e| answer(id, e))
    }

    /// The answer `op` would get as a re-sent operation — its id held with the same
    /// body — without applying anything; none for a new id or another body.
    pub fn replayed(&self, op: &LedgerOp) -> Option<LedgerAnswer> {
        let id = op.id();
        self.entries
            .get(id)
            .filter(|entry| *entry.body == *body(op))
            .map(|entry| answer(id, entry))
    }

    fn operation(&mut self, now_ms: u64, op: &LedgerOp) -> LedgerAnswer {
        let id = op.id();
        let body = body(op);
        if let Some(entry) = self.entries.get(id) {
            if *entry.body == *body {
                return answer(id, entry);
            }
            return LedgerAnswer {
                id: id.to_owned(),
                outcome: LedgerOutcome::Refused,
                reason: Some(format!(
                    "operation `{id}` exists with a different body; its original answer stands"
                )),
                amount: None,
                archived: false,
            };
        }
        let checked = self.check(now_ms, op);
        let entry = match checked {
            Err(reason) => {
                self.counts.refused += 1;
                Entry {
                    body: body.into(),
                    refused: Some(reason.into()),
                    amount: None,
                }
            }
            Ok(effect) => {
                let amount = self.effect(id, effect);
                Entry {
                    body: body.into(),
                    refused: None,
                    amount: Some(amount),
                }
            }
        };
        self.counts.answered += 1;
        let answer = answer(id, &entry);
        self.entries.insert(id.into(), entry);
        answer
    }

    fn named(&self, name: &str, side: &str) -> Result<u32, String> {
        let index = *self
            .index
            .get(name)
            .ok_or_else(|| format!("unknown {side} account `{name}`"))?;
        if self.accounts[index as usize].definition.retired {
            return Err(format!(
                "{side} account `{name}` is retired: closed to new transfers"
            ));
        }
        Ok(index)
    }

    fn check(&self, now_ms: u64, op: &LedgerOp) -> Result<Effect, String> {
        match op {
            LedgerOp::Transfer {
                debit,
                credit,
                amount,
                currency,
                pending,
                timeout_s,
                ..
            } => {
                if *amount == 0 {
                    return refuse("amount 0: a transfer moves at least one minor unit".into());
                }
                if debit == credit {
                    return refuse(format!("account `{debit}` is on both sides"));
                }
                let d = self.named(debit, "debit")?;
                let c = self.named(credit, "credit")?;
                let (da, ca) = (&self.accounts[d as usize], &self.accounts[c as usize]);
                for account in [da, ca] {
                    if account.definition.currency != *currency {
                        return refuse(format!(
                            "currency `{currency}` does not match account `{}` ({})",
                            account.definition.name, account.definition.currency
                        ));
                    }
                }
                let expiry = match (pending, timeout_s) {
                    (false, Some(_)) => {
                        return refuse("timeout_s is only for a pending transfer".into());
                    }
                    (true, Some(0)) => {
                        return refuse(
                            "timeout_s 0: omit it for a pending transfer that never expires".into(),
                        );
                    }
                    (true, Some(s)) if *s > LEDGER_TIMEOUT_S_MAX => {
                        return refuse(format!(
                            "timeout_s {s} is above LEDGER_TIMEOUT_S_MAX ({LEDGER_TIMEOUT_S_MAX})"
                        ));
                    }
                    (true, Some(s)) => Some(now_ms.saturating_add(s * 1000)),
                    _ => None,
                };
                let overflow = |name: &str, which: &str| {
                    format!("overflow: the {which} balances of account `{name}` would exceed u128")
                };
                let debits = da
                    .debits_pending
                    .checked_add(da.debits_posted)
                    .and_then(|s| s.checked_add(*amount))
                    .ok_or_else(|| overflow(debit, "debit"))?;
                let credits = ca
                    .credits_pending
                    .checked_add(ca.credits_posted)
                    .and_then(|s| s.checked_add(*amount))
                    .ok_or_else(|| overflow(credit, "credit"))?;
                if da.definition.debits_must_not_exceed_credits && debits > da.credits_posted {
                    return refuse(format!(
                        "account `{debit}` has debits-must-not-exceed-credits: debits {debits} (pending and posted, with this transfer) would exceed credits posted {}",
                        da.credits_posted
                    ));
                }
                if ca.definition.credits_must_not_exceed_debits && credits > ca.debits_posted {
                    return refuse(format!(
                        "account `{credit}` has credits-must-not-exceed-debits: credits {credits} (pending and posted, with this transfer) would exceed debits posted {}",
                        ca.debits_posted
                    ));
                }
                Ok(Effect::Transfer {
                    debit: d,
                    credit: c,
                    amount: *amount,
                    pending: pending.then_some(expiry),
                })
            }
            LedgerOp::Post {
                pending_id, amount, ..
            } => {
                let pending = self.held(pending_id)?;
                let posted = match amount {
                    None => pending.amount,
                    Some(0) => {
                        return refuse("amount 0: a post posts at least one minor unit".into());
                    }
                    Some(a) if *a > pending.amount => {
                        return refuse(format!(
                            "amount {a} exceeds the pending amount {} of transfer `{pending_id}`",
                            pending.amount
                        ));
                    }
                    Some(a) => *a,
                };
                let (da, ca) = (
                    &self.accounts[pending.debit as usize],
                    &self.accounts[pending.credit as usize],
                );
                if da.debits_posted.checked_add(posted).is_none()
                    || ca.credits_posted.checked_add(posted).is_none()
                {
                    return refuse(format!(
                        "overflow: posting `{pending_id}` would exceed u128 in account `{}` or `{}`",
                        da.definition.name, ca.definition.name
                    ));
                }
                Ok(Effect::Post {
                    pending: pending_id.as_str().into(),
                    amount: posted,
                })
            }
            LedgerOp::Void { pending_id, .. } => {
                self.held(pending_id)?;
                Ok(Effect::Void {
                    pending: pending_id.as_str().into(),
                })
            }
        }
    }

    /// The pending transfer `id`, still held.
    fn held(&self, id: &str) -> Result<&Pending, String> {
        let Some(pending) = self.pendings.get(id) else {
            return Err(match self.entries.get(id) {
                Some(e) if e.refused.is_some() => {
                    format!("transfer `{id}` was refused: nothing is pending under it")
                }
                Some(_) => format!("`{id}` is not a pending transfer"),
                None => format!("no pending transfer `{id}`"),
            });
        };
        match &pending.state {
            PendingState::Pending => Ok(pending),
            PendingState::Posted { by, .. } => Err(format!(
                "pending transfer `{id}` was already posted (by `{by}`)"
            )),
            PendingState::Voided { by } => {
                Err(format!("pending transfer `{id}` was voided (by `{by}`)"))
            }
            PendingState::Expired { at_ms } => {
                Err(format!("pending transfer `{id}` expired (at {at_ms} ms)"))
            }
        }
    }

    /// Applies a checked effect; returns the amount moved.
    fn effect(&mut self, id: &str, effect: Effect) -> u128 {
        match effect {
            Effect::Transfer {
                debit,
                credit,
                amount,
                pending: None,
            } => {
                self.accounts[debit as usize].debits_posted += amount;
                self.accounts[credit as usize].credits_posted += amount;
                self.posted.push(Posted {
                    id: id.into(),
                    debit,
                    credit,
                    amount,
                });
                self.counts.posted_transfers += 1;
                self.counts.posted_entries += 1;
                amount
            }
            Effect::Transfer {
                debit,
                credit,
                amount,
                pending: Some(expires_at_ms),
            } => {
                self.accounts[debit as usize].debits_pending += amount;
                self.accounts[credit as usize].credits_pending += amount;
                if let Some(at) = expires_at_ms {
                    self.due.insert((at, id.into()));
                }
                self.open.insert((self.made, id.into()));
                self.made += 1;
                self.pendings.insert(
                    id.into(),
                    Pending {
                        debit,
                        credit,
                        amount,
                        expires_at_ms,
                        state: PendingState::Pending,
                        order: self.made - 1,
                    },
                );
                self.counts.pending_transfers += 1;
                self.counts.pending_open += 1;
                amount
            }
            Effect::Post { pending, amount } => {
                let p = self.pendings.get_mut(&pending).expect("checked");
                p.state = PendingState::Posted {
                    by: id.into(),
                    amount,
                };
                let (debit, credit, held, expiry) = (p.debit, p.credit, p.amount, p.expires_at_ms);
                if let Some(at) = expiry {
                    self.due.remove(&(at, pending.clone()));
                }
                self.release(debit, credit, held);
                self.accounts[debit as usize].debits_posted += amount;
                self.accounts[credit as usize].credits_posted += amount;
                self.posted.push(Posted {
                    id: id.into(),
                    debit,
                    credit,
                    amount,
                });
                self.close(&pending);
                self.counts.posts += 1;
                self.counts.posted_entries += 1;
                amount
            }
            Effect::Void { pending } => {
                let p = self.pendings.get_mut(&pending).expect("checked");
                p.state = PendingState::Voided { by: id.into() };
                let (debit, credit, held, expiry) = (p.debit, p.credit, p.amount, p.expires_at_ms);
                if let Some(at) = expiry {
                    self.due.remove(&(at, pending.clone()));
                }
                self.release(debit, credit, held);
                self.close(&pending);
                self.counts.voids += 1;
                held
            }
        }
    }

    fn release(&mut self, debit: u32, credit: u32, amount: u128) {
        self.accounts[debit as usize].debits_pending -= amount;
        self.accounts[credit as usize].credits_pending -= amount;
    }

    fn close(&mut self, id: &str) {
        let order = self.pendings[id].order;
        let removed = self.open.remove(&(order, Box::<str>::from(id)));
        assert!(removed, "a pending transfer closes once");
        self.counts.pending_open -= 1;
    }

    /// Accounts as `inspect` shows them.
    pub fn account_views(&self, only: Option<&str>) -> Vec<AccountView> {
        self.accounts
            .iter()
            .filter(|a| only.is_none_or(|o| a.definition.name == o))
            .map(|a| AccountView {
                definition: a.definition.clone(),
                debits_pending: a.debits_pending,
                debits_posted: a.debits_posted,
                credits_pending: a.credits_pending,
                credits_posted: a.credits_posted,
            })
            .collect()
    }

    /// Pending transfers still held, oldest first, at most `max` (touching `only`).
    pub fn pending_views(&self, only: Option<&str>, max: usize) -> Vec<PendingView> {
        let name = |i: u32| self.accounts[i as usize].definition.name.clone();
        self.open
            .iter()
            .filter_map(|(_, id)| {
                let p = &self.pendings[id];
                let (debit, credit) = (name(p.debit), name(p.credit));
                only.is_none_or(|o| debit == o || credit == o)
                    .then(|| PendingView {
                        id: id.to_string(),
                        currency: self.accounts[p.debit as usize].definition.currency.clone(),
                        debit,
                        credit,
                        amount: p.amount,
                        expires_at_ms: p.expires_at_ms,
                    })
            })
            .take(max)
            .collect()
    }
}

/// What a checkpoint's record keeps of one ledger: its accounts with their balances,
/// the pending transfers still held (in the order they were made) and the counters.
/// Every id's answer and every pending transfer closed go to the id index instead
/// ([`Machine::settle`]), so the record's size follows the accounts and what is held,
/// never the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub accounts: Vec<Account>,
    pub held: Vec<(Box<str>, Pending)>,
    pub made: u64,
    pub counts: LedgerCounts,
}

/// What [`Machine::settle`] moves out of memory, for the id index.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    /// Every id answered since the last settle (or recalled since), with its answer.
    pub answers: Vec<(Box<str>, Entry)>,
    /// Every pending transfer closed (posted, voided, expired) held in memory.
    pub closed: Vec<(Box<str>, Pending)>,
}

/// What the machine must be given back from the id index before a batch applies:
/// the answers of ids it does not hold, and the pending transfers named by a post or
/// a void that it does not hold (closed ones).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Missing {
    pub answers: BTreeSet<String>,
    pub closed: BTreeSet<String>,
}

impl Missing {
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty() && self.closed.is_empty()
    }
}

impl Machine {
    /// The ids of `ops` (and the pending transfers they post or void) this machine does
    /// not hold in memory: what the id index is asked for before `apply`, so that a
    /// settled id answers as it did and a closed transfer is refused as it was.
    pub fn missing(&self, ops: &[LedgerOp]) -> Missing {
        let mut missing = Missing::default();
        let answer = |id: &str, missing: &mut Missing| {
            if !self.entries.contains_key(id) {
                missing.answers.insert(id.to_owned());
            }
        };
        for op in ops {
            answer(op.id(), &mut missing);
            if let LedgerOp::Post { pending_id, .. } | LedgerOp::Void { pending_id, .. } = op
                && !self.pendings.contains_key(pending_id.as_str())
            {
                answer(pending_id, &mut missing);
                missing.closed.insert(pending_id.clone());
            }
        }
        missing
    }

    /// How many answers and closed pending transfers memory holds: what the next
    /// [`Machine::settle`] moves to the id index.
    pub fn unsettled(&self) -> usize {
        self.entries.len() + self.pendings.len() - self.open.len()
    }

    /// Takes back the answer of `id` from the id index.
    pub fn recall_answer(&mut self, id: &str, entry: Entry) {
        if !self.entries.contains_key(id) {
            self.entries.insert(id.into(), entry);
            self.recalled.insert(id.into());
        }
    }

    /// Takes back the closed pending transfer `id` from the id index.
    pub fn recall_closed(&mut self, id: &str, pending: Pending) {
        assert!(
            pending.state != PendingState::Pending,
            "the id index holds closed transfers only"
        );
        if !self.pendings.contains_key(id) {
            self.pendings.insert(id.into(), pending);
            self.recalled_closed.insert(id.into());
        }
    }

    /// The state a checkpoint records.
    pub fn state(&self) -> State {
        State {
            accounts: self.accounts.clone(),
            held: self
                .open
                .iter()
                .map(|(_, id)| (id.clone(), self.pendings[id].clone()))
                .collect(),
            made: self.made,
            counts: self.counts.clone(),
        }
    }

    /// Moves every answer and every closed pending transfer out of memory (into the
    /// id index, just before the checkpoint's install write; an answer recalled from
    /// the index is dropped from memory, not settled again); the posted entries kept
    /// in memory since the last settle are dropped (each is in its id's answer and
    /// body).
    pub fn settle(&mut self) -> Settled {
        let recalled = std::mem::take(&mut self.recalled);
        let answers = self
            .entries
            .drain()
            .filter(|(id, _)| !recalled.contains(id))
            .collect();
        let recalled_closed = std::mem::take(&mut self.recalled_closed);
        let mut closed = Vec::new();
        self.pendings.retain(|id, pending| {
            let open = pending.state == PendingState::Pending;
            if !open && !recalled_closed.contains(id) {
                closed.push((id.clone(), pending.clone()));
            }
            open
        });
        self.posted.clear();
        Settled { answers, closed }
    }

    /// The machine a checkpoint's state describes, checked whole: accounts unique and
    /// within `LEDGER_ACCOUNTS_MAX`, every held transfer pending, on existing accounts,
    /// made before `made`, and every account's pending balances the sum of what is held
    /// on it — a state that does not add up is refused, never used.
    pub fn restore(state: State) -> Result<Machine, String> {
        let State {
            accounts,
            held,
            made,
            counts,
        } = state;
        if accounts.len() > crate::limits::LEDGER_ACCOUNTS_MAX {
            return Err(format!(
                "{} accounts, above LEDGER_ACCOUNTS_MAX",
                accounts.len()
            ));
        }
        let mut machine = Machine {
            made,
            ..Machine::default()
        };
        for (i, account) in accounts.iter().enumerate() {
            let index = u32::try_from(i).expect("bounded by LEDGER_ACCOUNTS_MAX");
            if machine
                .index
                .insert(account.definition.name.clone(), index)
                .is_some()
            {
                return Err(format!(
                    "account `{}` appears twice",
                    account.definition.name
                ));
            }
        }
        let mut sums = vec![(0u128, 0u128); accounts.len()];
        for (id, pending) in held {
            let (d, c) = (pending.debit as usize, pending.credit as usize);
            if pending.state != PendingState::Pending
                || d >= accounts.len()
                || c >= accounts.len()
                || pending.order >= made
            {
                return Err(format!("held transfer `{id}` does not fit the state"));
            }
            let add = |sum: u128| {
                sum.checked_add(pending.amount)
                    .ok_or_else(|| format!("held transfer `{id}` overflows its account"))
            };
            sums[d].0 = add(sums[d].0)?;
            sums[c].1 = add(sums[c].1)?;
            if !machine.open.insert((pending.order, id.clone())) {
                return Err(format!("held transfer `{id}` appears twice"));
            }
            if let Some(at) = pending.expires_at_ms {
                machine.due.insert((at, id.clone()));
            }
            if machine.pendings.insert(id.clone(), pending).is_some() {
                return Err(format!("held transfer `{id}` appears twice"));
            }
        }
        for (account, (debits, credits)) in accounts.iter().zip(sums) {
            if account.debits_pending != debits || account.credits_pending != credits {
                return Err(format!(
                    "account `{}`: its pending balances are not the sum of the transfers held on it",
                    account.definition.name
                ));
            }
        }
        if counts.pending_open != machine.open.len() as u64 {
            return Err("its count of held transfers is not what it holds".to_owned());
        }
        machine.accounts = accounts;
        machine.counts = counts;
        Ok(machine)
    }
}

/// Checks an account definition the owner is asked to open.
pub fn check_definition(definition: &AccountDefinition) -> Result<(), DefinitionError> {
    if !grid_spec::topology::is_currency(&definition.currency) {
        return Err(format!(
            "account `{}`: `{}` is not a currency code (LEDGER_CURRENCY_LENGTH_MIN to LEDGER_CURRENCY_LENGTH_MAX uppercase letters and digits)",
            definition.name, definition.currency
        ));
    }
    if definition.debits_must_not_exceed_credits && definition.credits_must_not_exceed_debits {
        return Err(format!(
            "account `{}` sets both debits-must-not-exceed-credits and credits-must-not-exceed-debits",
            definition.name
        ));
    }
    if definition.name.is_empty() || definition.name.len() > crate::limits::NAME_LENGTH_MAX {
        return Err(format!(
            "account names are 1 to NAME_LENGTH_MAX ({}) bytes",
            crate::limits::NAME_LENGTH_MAX
        ));
    }
    Ok(())
}

/// The answer `entry` holds for `id`.
pub fn answer(id: &str, entry: &Entry) -> LedgerAnswer {
    LedgerAnswer {
        id: id.to_owned(),
        outcome: match entry.refused {
            None => LedgerOutcome::Succeeded,
            Some(_) => LedgerOutcome::Refused,
        },
        reason: entry.refused.as_deref().map(str::to_owned),
        amount: entry.amount,
        archived: false,
    }
}

/// An operation's body (everything but its id), in the journal's encoding: what
/// "the same body" compares.
pub fn body(op: &LedgerOp) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    super::codec::put_body(&mut out, op);
    out
}
