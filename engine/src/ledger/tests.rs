//! The ledger machine under random interleavings (proptest): transfers posted and
//! pending, posts whole and partial, voids, expiries as time advances, ids repeated
//! with the same and with another body, retirements, and restarts that rebuild the
//! machine from its journal (encoded and decoded as the service stores it). After
//! every step: balances conserved (debits = credits, pending and posted), the posted
//! entries only ever grow by appending, every id answers as it first did, posted
//! balances equal the sum of the succeeded answers, no balance flag is violated, and a
//! replay of the journal is the same machine.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::api::{AccountDefinition, LedgerAnswer, LedgerOp, LedgerOutcome};
use super::codec::{self, Record};
use super::machine::{Machine, Posted};

const ACCOUNTS: [&str; 4] = ["a", "b", "debits-capped", "credits-capped"];

fn definitions() -> Vec<AccountDefinition> {
    ACCOUNTS
        .iter()
        .map(|name| AccountDefinition {
            name: (*name).to_owned(),
            currency: "EUR".to_owned(),
            owner: None,
            debits_must_not_exceed_credits: *name == "debits-capped",
            credits_must_not_exceed_debits: *name == "credits-capped",
            retired: false,
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Step {
    /// A batch of operations (ids from a small set, so they repeat).
    Batch(Vec<Gen>),
    /// Time passes (milliseconds).
    Advance(u64),
    /// The host restarts: the machine is rebuilt from the journal.
    Restart,
    /// An account is retired.
    Retire(usize),
}

#[derive(Debug, Clone)]
enum Gen {
    Transfer {
        id: u8,
        debit: usize,
        credit: usize,
        amount: u128,
        currency_other: bool,
        pending: bool,
        timeout_s: Option<u64>,
    },
    Post {
        id: u8,
        pending: u8,
        amount: Option<u128>,
    },
    Void {
        id: u8,
        pending: u8,
    },
}

fn amount() -> impl Strategy<Value = u128> {
    prop_oneof![
        8 => 0u128..50,
        1 => Just(u128::MAX),
        1 => Just(u128::MAX / 2 + 1),
    ]
}

fn operation() -> impl Strategy<Value = Gen> {
    let id = 0u8..24;
    let account = 0..ACCOUNTS.len();
    prop_oneof![
        5 => (id.clone(), account.clone(), account, amount(), prop::bool::weighted(0.05),
              any::<bool>(), prop::option::of(0u64..4))
            .prop_map(|(id, debit, credit, amount, currency_other, pending, timeout_s)| Gen::Transfer {
                id, debit, credit, amount, currency_other, pending, timeout_s,
            }),
        3 => (id.clone(), 0u8..24, prop::option::of(0u128..60))
            .prop_map(|(id, pending, amount)| Gen::Post { id, pending, amount }),
        2 => (id, 0u8..24).prop_map(|(id, pending)| Gen::Void { id, pending }),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => prop::collection::vec(operation(), 1..5).prop_map(Step::Batch),
        2 => (0u64..2_500).prop_map(Step::Advance),
        1 => Just(Step::Restart),
        1 => (0..ACCOUNTS.len()).prop_map(Step::Retire),
    ]
}

fn op(g: &Gen) -> LedgerOp {
    let name = |i: u8| format!("op-{i}");
    match g {
        Gen::Transfer {
            id,
            debit,
            credit,
            amount,
            currency_other,
            pending,
            timeout_s,
        } => LedgerOp::Transfer {
            id: name(*id),
            debit: ACCOUNTS[*debit].to_owned(),
            credit: ACCOUNTS[*credit].to_owned(),
            amount: *amount,
            currency: if *currency_other { "USD" } else { "EUR" }.to_owned(),
            pending: *pending,
            timeout_s: *timeout_s,
        },
        Gen::Post {
            id,
            pending,
            amount,
        } => LedgerOp::Post {
            id: name(*id),
            pending_id: name(*pending),
            amount: *amount,
        },
        Gen::Void { id, pending } => LedgerOp::Void {
            id: name(*id),
            pending_id: name(*pending),
        },
    }
}

/// Rebuilds a machine from the journal's bytes, as the service's open does.
fn replay(journal: &[Vec<u8>]) -> Machine {
    let mut machine = Machine::default();
    for bytes in journal {
        match codec::decode(bytes).expect("records decode") {
            Record::Install(definition) => {
                for account in &definition.accounts {
                    machine.open(account).unwrap();
                }
            }
            Record::Open(account) => machine.open(&account).unwrap(),
            Record::Retire(account) => {
                machine.retire(&account).unwrap();
            }
            Record::Batch { now_ms, ops } => {
                machine.apply(now_ms, &ops);
            }
        }
    }
    machine
}

fn check_invariants(
    machine: &Machine,
    before: &[Posted],
    first: &BTreeMap<String, (LedgerOp, LedgerAnswer)>,
) {
    let accounts = machine.accounts();
    // Conservation (sums in u128 may only overflow on both sides alike: compare as
    // wrapping sums then).
    let wrapping = |f: fn(&super::machine::Account) -> u128| -> u128 {
        accounts.iter().fold(0u128, |s, a| s.wrapping_add(f(a)))
    };
    assert_eq!(
        wrapping(|a| a.debits_posted),
        wrapping(|a| a.credits_posted),
        "posted debits equal posted credits"
    );
    assert_eq!(
        wrapping(|a| a.debits_pending),
        wrapping(|a| a.credits_pending),
        "pending debits equal pending credits"
    );
    // Posted entries are append-only.
    let posted = machine.posted();
    assert!(posted.len() >= before.len());
    assert_eq!(&posted[..before.len()], before, "a posted entry changed");
    // Posted balances are the sum of the posted entries.
    for (index, account) in accounts.iter().enumerate() {
        let index = index as u32;
        let debits: u128 = posted
            .iter()
            .filter(|p| p.debit == index)
            .map(|p| p.amount)
            .sum();
        let credits: u128 = posted
            .iter()
            .filter(|p| p.credit == index)
            .map(|p| p.amount)
            .sum();
        assert_eq!(account.debits_posted, debits);
        assert_eq!(account.credits_posted, credits);
        let definition = &account.definition;
        if definition.debits_must_not_exceed_credits {
            assert!(account.debits_pending + account.debits_posted <= account.credits_posted);
        }
        if definition.credits_must_not_exceed_debits {
            assert!(account.credits_pending + account.credits_posted <= account.debits_posted);
        }
    }
    // Each posted entry is a succeeded answer's amount, and each succeeded posted
    // transfer or post has its entry.
    let mut entries: BTreeMap<&str, u128> = BTreeMap::new();
    for p in posted {
        assert!(
            entries.insert(&p.id, p.amount).is_none(),
            "one entry per id"
        );
    }
    for (id, (op, answer)) in first {
        let expected = match (op, answer.outcome) {
            (_, LedgerOutcome::Refused) => None,
            (LedgerOp::Transfer { pending: true, .. }, _) | (LedgerOp::Void { .. }, _) => None,
            (_, LedgerOutcome::Succeeded) => answer.amount,
        };
        assert_eq!(
            entries.get(id.as_str()).copied(),
            expected,
            "entry of `{id}`"
        );
        assert_eq!(
            machine.answer(id).as_ref(),
            Some(answer),
            "`{id}` keeps its original answer"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn balances_conserve_posted_entries_never_change_and_ids_answer_once(
        steps in prop::collection::vec(step(), 1..60)
    ) {
        let definition = super::api::LedgerDefinition {
            name: "l".to_owned(),
            accounts: definitions(),
        };
        let mut journal = vec![codec::encode(&Record::Install(definition.clone()))];
        let mut machine = replay(&journal);
        let mut now_ms = 1_000_000u64;
        let mut first: BTreeMap<String, (LedgerOp, LedgerAnswer)> = BTreeMap::new();
        for step in steps {
            let before = machine.posted().to_vec();
            match step {
                Step::Batch(gens) => {
                    let ops: Vec<LedgerOp> = gens.iter().map(op).collect();
                    let answers = machine.apply(now_ms, &ops);
                    journal.push(codec::encode_batch(now_ms, &ops));
                    prop_assert_eq!(answers.len(), ops.len());
                    for (op, answer) in ops.into_iter().zip(answers) {
                        prop_assert_eq!(answer.id.as_str(), op.id());
                        match first.get(op.id()) {
                            Some((original, original_answer)) if *original == op => {
                                prop_assert_eq!(&answer, original_answer, "same id, same body: the original answer");
                            }
                            Some(_) => {
                                prop_assert_eq!(answer.outcome, LedgerOutcome::Refused);
                                prop_assert!(answer.reason.as_deref().unwrap_or("").contains("exists with a different body"));
                            }
                            None => {
                                first.insert(op.id().to_owned(), (op, answer));
                            }
                        }
                    }
                }
                Step::Advance(ms) => now_ms += ms,
                Step::Restart => {
                    let replayed = replay(&journal);
                    prop_assert!(replayed == machine, "replay gives the same machine");
                    machine = replayed;
                }
                Step::Retire(index) => {
                    machine.retire(ACCOUNTS[index]).unwrap();
                    journal.push(codec::encode(&Record::Retire(ACCOUNTS[index].to_owned())));
                }
            }
            check_invariants(&machine, &before, &first);
        }
        prop_assert!(replay(&journal) == machine, "replay gives the same machine");
    }
}

fn eur(name: &str) -> AccountDefinition {
    AccountDefinition {
        name: name.to_owned(),
        currency: "EUR".to_owned(),
        owner: None,
        debits_must_not_exceed_credits: false,
        credits_must_not_exceed_debits: false,
        retired: false,
    }
}

fn transfer(id: &str, amount: u128, pending: bool, timeout_s: Option<u64>) -> LedgerOp {
    LedgerOp::Transfer {
        id: id.to_owned(),
        debit: "a".to_owned(),
        credit: "b".to_owned(),
        amount,
        currency: "EUR".to_owned(),
        pending,
        timeout_s,
    }
}

fn reason(answer: &LedgerAnswer) -> &str {
    assert_eq!(answer.outcome, LedgerOutcome::Refused, "{answer:?}");
    answer.reason.as_deref().unwrap()
}

#[test]
fn two_phase_transfers_post_partially_void_and_expire() {
    let mut m = Machine::default();
    m.open(&eur("a")).unwrap();
    m.open(&eur("b")).unwrap();
    let answers = m.apply(
        0,
        &[
            transfer("p1", 100, true, None),
            LedgerOp::Post {
                id: "post1".into(),
                pending_id: "p1".into(),
                amount: Some(40),
            },
            transfer("p2", 7, true, None),
            LedgerOp::Void {
                id: "void2".into(),
                pending_id: "p2".into(),
            },
            transfer("p3", 5, true, Some(1)),
        ],
    );
    assert!(
        answers
            .iter()
            .all(|a| a.outcome == LedgerOutcome::Succeeded)
    );
    assert_eq!(answers[1].amount, Some(40));
    assert_eq!(answers[3].amount, Some(7));
    let a = m.account("a").unwrap();
    assert_eq!((a.debits_pending, a.debits_posted), (5, 40));
    // One second later the third expires: its post is refused, naming it.
    let later = m.apply(
        1_000,
        &[
            LedgerOp::Post {
                id: "post3".into(),
                pending_id: "p3".into(),
                amount: None,
            },
            LedgerOp::Post {
                id: "post1-again".into(),
                pending_id: "p1".into(),
                amount: None,
            },
            LedgerOp::Post {
                id: "post2".into(),
                pending_id: "p2".into(),
                amount: None,
            },
        ],
    );
    assert!(reason(&later[0]).contains("`p3` expired"));
    assert!(reason(&later[1]).contains("`p1` was already posted (by `post1`)"));
    assert!(reason(&later[2]).contains("`p2` was voided (by `void2`)"));
    let a = m.account("a").unwrap();
    assert_eq!((a.debits_pending, a.debits_posted), (0, 40));
    assert_eq!(m.counts().expired, 1);
}

#[test]
fn refusals_name_what_is_wrong_and_change_nothing() {
    let mut m = Machine::default();
    m.open(&eur("a")).unwrap();
    m.open(&eur("b")).unwrap();
    m.open(&AccountDefinition {
        currency: "USD".into(),
        ..eur("usd")
    })
    .unwrap();
    m.open(&AccountDefinition {
        debits_must_not_exceed_credits: true,
        ..eur("capped")
    })
    .unwrap();
    let with = |id: &str, debit: &str, credit: &str, amount: u128| LedgerOp::Transfer {
        id: id.into(),
        debit: debit.into(),
        credit: credit.into(),
        amount,
        currency: "EUR".into(),
        pending: false,
        timeout_s: None,
    };
    let before = m.clone();
    let answers = m.apply(
        0,
        &[
            with("t0", "a", "b", 0),
            with("t1", "a", "a", 1),
            with("t2", "nope", "b", 1),
            with("t3", "a", "usd", 1),
            with("t4", "capped", "a", 1),
            transfer("t5", 1, false, Some(3)),
        ],
    );
    assert!(reason(&answers[0]).contains("amount 0"));
    assert!(reason(&answers[1]).contains("`a` is on both sides"));
    assert!(reason(&answers[2]).contains("unknown debit account `nope`"));
    assert!(reason(&answers[3]).contains("does not match account `usd` (USD)"));
    assert!(reason(&answers[4]).contains("debits-must-not-exceed-credits"));
    assert!(reason(&answers[5]).contains("only for a pending transfer"));
    assert_eq!(m.accounts(), before.accounts());
    // Overflow is refused, checked.
    let big = m.apply(
        0,
        &[with("big1", "a", "b", u128::MAX), with("big2", "a", "b", 1)],
    );
    assert_eq!(big[0].outcome, LedgerOutcome::Succeeded);
    assert!(reason(&big[1]).contains("overflow"));
    // A retired account is closed to new transfers; a post of what is pending on it
    // still goes through.
    let mut m = Machine::default();
    m.open(&eur("a")).unwrap();
    m.open(&eur("b")).unwrap();
    m.apply(0, &[transfer("held", 3, true, None)]);
    m.retire("a").unwrap();
    let after = m.apply(
        0,
        &[
            transfer("new", 1, false, None),
            LedgerOp::Post {
                id: "post".into(),
                pending_id: "held".into(),
                amount: None,
            },
        ],
    );
    assert!(reason(&after[0]).contains("debit account `a` is retired"));
    assert_eq!(after[1].outcome, LedgerOutcome::Succeeded);
}

#[test]
fn amounts_above_u64_round_trip_as_strings() {
    let op = LedgerOp::Transfer {
        id: "t".into(),
        debit: "a".into(),
        credit: "b".into(),
        amount: u128::from(u64::MAX) * 3,
        currency: "EUR".into(),
        pending: false,
        timeout_s: None,
    };
    let json = serde_json::to_string(&op).unwrap();
    assert!(
        json.contains("\"amount\":\"55340232221128654845\""),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<LedgerOp>(&json).unwrap(), op);
    // A JSON number is accepted up to u64::MAX; a negative or fractional one is not.
    let number = r#"{"op":"transfer","id":"t","debit":"a","credit":"b","amount":18446744073709551615,"currency":"EUR"}"#;
    match serde_json::from_str::<LedgerOp>(number).unwrap() {
        LedgerOp::Transfer { amount, .. } => assert_eq!(amount, u128::from(u64::MAX)),
        other => panic!("{other:?}"),
    }
    for bad in ["-1", "1.5", "\"1e3\"", "\"\""] {
        let text = number.replace("18446744073709551615", bad);
        assert!(serde_json::from_str::<LedgerOp>(&text).is_err(), "{bad}");
    }
}

/// A machine that settles its ids into an index at checkpoints (encoded as the service
/// stores them) and is given them back before each batch.
struct Checkpointed {
    machine: Machine,
    answers: BTreeMap<String, Vec<u8>>,
    closed: BTreeMap<String, Vec<u8>>,
}

impl Checkpointed {
    fn recall(&mut self, ops: &[LedgerOp]) {
        let missing = self.machine.missing(ops);
        for id in &missing.answers {
            if let Some(bytes) = self.answers.get(id) {
                self.machine
                    .recall_answer(id, codec::decode_entry(bytes).unwrap());
            }
        }
        for id in &missing.closed {
            if let Some(bytes) = self.closed.get(id) {
                self.machine
                    .recall_closed(id, serde_json::from_slice(bytes).unwrap());
            }
        }
    }

    /// A checkpoint and an open from it: the state through JSON, the ids settled.
    fn checkpoint(&mut self) {
        let state = serde_json::to_vec(&self.machine.state()).unwrap();
        let settled = self.machine.settle();
        for (id, entry) in settled.answers {
            self.answers.insert(id.into(), codec::encode_entry(&entry));
        }
        for (id, pending) in settled.closed {
            self.closed
                .insert(id.into(), serde_json::to_vec(&pending).unwrap());
        }
        self.machine = Machine::restore(serde_json::from_slice(&state).unwrap()).unwrap();
    }

    fn answer(&self, id: &str) -> Option<LedgerAnswer> {
        self.machine.answer(id).or_else(|| {
            self.answers
                .get(id)
                .map(|bytes| super::machine::answer(id, &codec::decode_entry(bytes).unwrap()))
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Checkpoints at random points (the `Restart` steps): every batch is answered as
    /// by a machine never checkpointed, balances, counts and held transfers stay the
    /// same, every id keeps its answer, and memory keeps no settled id.
    #[test]
    fn a_checkpointed_machine_answers_as_one_never_checkpointed(
        steps in prop::collection::vec(step(), 1..60)
    ) {
        let mut plain = Machine::default();
        for account in &definitions() {
            plain.open(account).unwrap();
        }
        let mut kept = Checkpointed {
            machine: plain.clone(),
            answers: BTreeMap::new(),
            closed: BTreeMap::new(),
        };
        let mut now_ms = 1_000_000u64;
        let mut ids: Vec<String> = Vec::new();
        for step in steps {
            match step {
                Step::Batch(gens) => {
                    let ops: Vec<LedgerOp> = gens.iter().map(op).collect();
                    kept.recall(&ops);
                    let answers = kept.machine.apply(now_ms, &ops);
                    prop_assert_eq!(&answers, &plain.apply(now_ms, &ops));
                    ids.extend(ops.iter().map(|o| o.id().to_owned()));
                }
                Step::Advance(ms) => now_ms += ms,
                Step::Restart => {
                    kept.checkpoint();
                    for id in &ids {
                        prop_assert!(kept.machine.answer(id).is_none(), "`{}` settled", id);
                    }
                }
                Step::Retire(index) => {
                    plain.retire(ACCOUNTS[index]).unwrap();
                    kept.machine.retire(ACCOUNTS[index]).unwrap();
                }
            }
            prop_assert_eq!(kept.machine.accounts(), plain.accounts());
            prop_assert_eq!(kept.machine.counts(), plain.counts());
            prop_assert_eq!(
                kept.machine.pending_views(None, usize::MAX),
                plain.pending_views(None, usize::MAX)
            );
            prop_assert_eq!(kept.machine.next_expiry_ms(), plain.next_expiry_ms());
            for id in &ids {
                prop_assert_eq!(kept.answer(id), plain.answer(id), "`{}`", id);
            }
        }
    }
}

#[test]
fn a_checkpoint_state_that_does_not_add_up_is_refused() {
    let mut machine = Machine::default();
    for account in &definitions() {
        machine.open(account).unwrap();
    }
    machine.apply(1_000, &[transfer("p", 40, true, Some(60))]);
    let state = machine.state();
    let json = serde_json::to_value(&state).unwrap();
    assert_eq!(
        Machine::restore(serde_json::from_value(json.clone()).unwrap())
            .unwrap()
            .state(),
        state
    );
    // A held transfer dropped: the pending balances no longer add up.
    let mut dropped = json.clone();
    dropped["held"] = serde_json::json!([]);
    let why = Machine::restore(serde_json::from_value(dropped).unwrap()).unwrap_err();
    assert!(why.contains("pending balances"), "{why}");
    // An account twice.
    let mut twice = json.clone();
    let first = twice["accounts"][0].clone();
    twice["accounts"][1] = first;
    assert!(Machine::restore(serde_json::from_value(twice).unwrap()).is_err());
    // A held transfer on an account that does not exist.
    let mut outside = json;
    outside["held"][0][1]["debit"] = serde_json::json!(99);
    let why = Machine::restore(serde_json::from_value(outside).unwrap()).unwrap_err();
    assert!(why.contains("does not fit"), "{why}");
}

#[test]
fn an_id_index_entry_decodes_as_encoded_and_a_cut_or_longer_one_is_refused() {
    use super::machine::Entry;
    for entry in [
        Entry::new(
            super::machine::body(&transfer("t", u128::MAX, false, None)).into(),
            None,
            Some(u128::MAX),
        ),
        Entry::new(
            b"\x03\x01\x00p".to_vec().into(),
            Some("no such".into()),
            None,
        ),
    ] {
        let bytes = codec::encode_entry(&entry);
        assert_eq!(codec::decode_entry(&bytes).unwrap(), entry);
        for cut in 0..bytes.len() {
            assert!(codec::decode_entry(&bytes[..cut]).is_err(), "{cut} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(codec::decode_entry(&longer).is_err());
    }
}
