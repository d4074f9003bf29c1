//! The wallet's view of one participant (issue 18 §3): what its original owners hold
//! for it, assembled from their answers — pure, no IO. `gridctl wallet show` asks the
//! owners (reconciler/src/wallet.rs) and `wallet.observe` asks what its host reaches;
//! both give their answers to [`assemble`].
//!
//! Nothing here is guessed: an owner that did not answer is listed in `unobserved`
//! with its reason, and contributes no number (not a zero). Issuer settlement is a
//! record of its own at the issuer; none is held today, so every grant says
//! `settlement: "unobserved"` — never derived from the grant's totals.

use serde::{Deserialize, Serialize};

use crate::custody::Manifest;
use crate::ledger::api::LedgerView;
use crate::processes::api::{GrantView, RunView};

/// The interface the archive wallet's Processes implement.
pub const INTERFACE: &str = "wallet@1.1.0";

/// Money: one ledger account whose `owner` is the wallet's participant, with its exact
/// balances as the ledger's keeper answered them (integer minor units, decimal strings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Money {
    pub ledger: String,
    /// The host that keeps the ledger (its original owner).
    pub keeper: String,
    pub account: String,
    pub currency: String,
    #[serde(with = "crate::ledger::api::amount")]
    pub debits_pending: u128,
    #[serde(with = "crate::ledger::api::amount")]
    pub debits_posted: u128,
    #[serde(with = "crate::ledger::api::amount")]
    pub credits_pending: u128,
    #[serde(with = "crate::ledger::api::amount")]
    pub credits_posted: u128,
    pub retired: bool,
}

/// An execution grant whose caller is the wallet's participant, as its issuer holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantHolding {
    pub grant: String,
    pub issuer: String,
    pub allocated: u64,
    pub reserved: u64,
    pub consumed: u64,
    pub surrendered: u64,
    pub unknown: u64,
    pub available: u64,
    pub retired: bool,
    /// Signed issues the issuer holds, and whether every one verifies with the issuer's
    /// public manifest and their units sum to `allocated`.
    pub issues: usize,
    pub issues_verified: bool,
    /// `settled`: the issuer's signed settlement verifies with its manifest and states
    /// the account it holds; `unverified`: it holds one that does not; `unobserved`:
    /// it holds no settlement record for this grant.
    pub settlement: String,
    pub settlement_detail: String,
}

/// A run the participant called and has no terminal outcome of: `unknown` at the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenWait {
    pub request: String,
    pub process: String,
    pub receiver: String,
    pub via: String,
    pub outcome: String,
}

/// An owner that did not answer: nothing of it is shown, nothing guessed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unobserved {
    pub owner: String,
    /// What it would have told: `ledgers`, `grants`, `waits`, `ledger L`.
    pub holds: Vec<String>,
    pub reason: String,
}

/// The wallet of `host`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalletView {
    pub host: String,
    pub money: Vec<Money>,
    pub grants: Vec<GrantHolding>,
    pub open_waits: Vec<OpenWait>,
    pub unobserved: Vec<Unobserved>,
}

impl WalletView {
    /// Every owner answered.
    pub fn complete(&self) -> bool {
        self.unobserved.is_empty()
    }
}

/// What one owner answered for the wallet.
#[derive(Debug, Clone)]
pub enum OwnerAnswer {
    Answered {
        /// Its ledgers, as inspected (each account with its definition and balances).
        ledgers: Vec<LedgerView>,
        /// The grants it issued.
        grants: Vec<GrantView>,
        /// Its public custody manifest (to verify signed issues); none: unreadable.
        manifest: Option<Manifest>,
    },
    Unobserved {
        holds: Vec<String>,
        reason: String,
    },
}

#[derive(Debug, Clone)]
pub struct Observed {
    pub owner: String,
    pub answer: OwnerAnswer,
}

/// The settlement text when the issuer holds no settlement record.
pub const SETTLEMENT_UNOBSERVED: &str = "unobserved";
/// The settlement text when the issuer's signed settlement verifies.
pub const SETTLEMENT_SETTLED: &str = "settled";
/// The settlement text when the issuer holds a settlement that does not verify.
pub const SETTLEMENT_UNVERIFIED: &str = "unverified";

/// The issuer's settlement of `grant` as the wallet shows it: (settlement, detail).
fn settlement(issuer: &str, grant: &GrantView, manifest: Option<&Manifest>) -> (String, String) {
    let Some(s) = &grant.settlement else {
        return (
            SETTLEMENT_UNOBSERVED.to_owned(),
            format!(
                "{issuer} holds no settlement record for grant {}: not derived from its totals",
                grant.name
            ),
        );
    };
    let states_the_account = s.issuer == issuer
        && s.grant == grant.name
        && s.caller == grant.caller
        && s.allocated == grant.allocated
        && s.consumed == grant.consumed
        && s.surrendered == grant.surrendered;
    if states_the_account && manifest.is_some_and(|m| s.verify(m)) {
        (
            SETTLEMENT_SETTLED.to_owned(),
            format!(
                "{issuer} signed the final account: {} allocated = {} consumed + {} surrendered",
                s.allocated, s.consumed, s.surrendered
            ),
        )
    } else {
        (
            SETTLEMENT_UNVERIFIED.to_owned(),
            format!(
                "{issuer} holds a settlement of grant {} that does not verify with its manifest or does not state the account it holds",
                grant.name
            ),
        )
    }
}

fn holding(issuer: &str, grant: &GrantView, manifest: Option<&Manifest>) -> GrantHolding {
    let (settlement, settlement_detail) = settlement(issuer, grant, manifest);
    let issued: u64 = grant.issued.iter().map(|i| i.units).sum();
    let verified = manifest.is_some_and(|m| {
        !grant.issued.is_empty()
            && issued == grant.allocated
            && grant.issued.iter().all(|i| {
                i.issuer == issuer
                    && i.caller == grant.caller
                    && i.grant == grant.name
                    && i.verify(m)
            })
    });
    GrantHolding {
        grant: grant.name.clone(),
        issuer: issuer.to_owned(),
        allocated: grant.allocated,
        reserved: grant.reserved,
        consumed: grant.consumed,
        surrendered: grant.surrendered,
        unknown: grant.unknown,
        available: grant.available(),
        retired: grant.retired,
        issues: grant.issued.len(),
        issues_verified: verified,
        settlement,
        settlement_detail,
    }
}

/// The wallet of `host` from its owners' answers and its own open waits (`waits`:
/// `Err` when the host itself did not answer).
pub fn assemble(
    host: &str,
    owners: &[Observed],
    waits: Result<Vec<RunView>, String>,
) -> WalletView {
    let mut view = WalletView {
        host: host.to_owned(),
        money: Vec::new(),
        grants: Vec::new(),
        open_waits: Vec::new(),
        unobserved: Vec::new(),
    };
    for owner in owners {
        match &owner.answer {
            OwnerAnswer::Answered {
                ledgers,
                grants,
                manifest,
            } => {
                for ledger in ledgers {
                    for account in &ledger.accounts {
                        if account.definition.owner.as_deref() != Some(host) {
                            continue;
                        }
                        view.money.push(Money {
                            ledger: ledger.ledger.clone(),
                            keeper: owner.owner.clone(),
                            account: account.definition.name.clone(),
                            currency: account.definition.currency.clone(),
                            debits_pending: account.debits_pending,
                            debits_posted: account.debits_posted,
                            credits_pending: account.credits_pending,
                            credits_posted: account.credits_posted,
                            retired: account.definition.retired,
                        });
                    }
                }
                for grant in grants.iter().filter(|g| g.caller == host) {
                    view.grants
                        .push(holding(&owner.owner, grant, manifest.as_ref()));
                }
            }
            OwnerAnswer::Unobserved { holds, reason } => view.unobserved.push(Unobserved {
                owner: owner.owner.clone(),
                holds: holds.clone(),
                reason: reason.clone(),
            }),
        }
    }
    match waits {
        Ok(waits) => {
            for wait in waits.iter().filter(|w| {
                w.caller == host && w.outcome == crate::processes::api::RunOutcome::Unknown
            }) {
                view.open_waits.push(OpenWait {
                    request: wait.request.clone(),
                    process: wait.process.clone(),
                    receiver: wait.receiver.clone(),
                    via: wait.via.clone(),
                    outcome: wait.outcome.name().to_owned(),
                });
            }
        }
        Err(reason) => view.unobserved.push(Unobserved {
            owner: host.to_owned(),
            holds: vec!["waits".to_owned()],
            reason,
        }),
    }
    view.money
        .sort_by(|a, b| (&a.ledger, &a.account).cmp(&(&b.ledger, &b.account)));
    view.grants
        .sort_by(|a, b| (&a.issuer, &a.grant).cmp(&(&b.issuer, &b.grant)));
    view.open_waits.sort_by(|a, b| a.request.cmp(&b.request));
    view.unobserved.sort_by(|a, b| a.owner.cmp(&b.owner));
    view
}

/// The wallet as text for people.
pub fn render(view: &WalletView) -> String {
    let mut out = format!("wallet of {}\n", view.host);
    for m in &view.money {
        out.push_str(&format!(
            "money {}:{} @ {} {}{}: debits {} posted + {} pending, credits {} posted + {} pending\n",
            m.ledger,
            m.account,
            m.keeper,
            m.currency,
            if m.retired { " (retired)" } else { "" },
            m.debits_posted,
            m.debits_pending,
            m.credits_posted,
            m.credits_pending
        ));
    }
    for g in &view.grants {
        out.push_str(&format!(
            "grant {} @ {}: allocated {} available {} reserved {} consumed {} surrendered {} unknown {}; {} signed issue(s) {}; settlement {}\n",
            g.grant,
            g.issuer,
            g.allocated,
            g.available,
            g.reserved,
            g.consumed,
            g.surrendered,
            g.unknown,
            g.issues,
            if g.issues_verified { "verified" } else { "NOT verified" },
            g.settlement
        ));
    }
    for w in &view.open_waits {
        out.push_str(&format!(
            "open wait {} {} at {} ({}): {}\n",
            w.request, w.process, w.receiver, w.via, w.outcome
        ));
    }
    for u in &view.unobserved {
        out.push_str(&format!(
            "unobserved {} ({}): {}\n",
            u.owner,
            u.holds.join(", "),
            u.reason
        ));
    }
    out
}

/// Why a recipient's surrender at `issuer` must not be sent while these open waits of
/// the wallet's host at `issuer` (their request ids) are unresolved, or `None`. The
/// guard of `wallet.surrender` and of the control plane's surrender, asked before the
/// issuer is.
pub fn waits_refusal(issuer: &str, open_waits: &[String]) -> Option<String> {
    (!open_waits.is_empty()).then(|| {
        format!(
            "refused: the wallet has unresolved effects at {issuer}: open waits {} (unknown here); nothing was surrendered",
            open_waits.join(", ")
        )
    })
}

/// Why `host`'s surrender of `grant` must not be sent, given what its issuer answered
/// just now (`held`: the issuer's grant of that name, if any), or `None`: the grant must
/// be `host`'s, and hold no unit `reserved` or `unknown` (unresolved effects).
pub fn grant_refusal(
    host: &str,
    issuer: &str,
    grant: &str,
    held: Option<&GrantView>,
) -> Option<String> {
    let Some(view) = held else {
        return Some(format!(
            "{issuer} holds no grant `{grant}`; nothing was surrendered"
        ));
    };
    if view.caller != host {
        return Some(format!(
            "grant `{grant}` at {issuer} is {}'s, not this wallet's; nothing was surrendered",
            view.caller
        ));
    }
    (view.unknown > 0 || view.reserved > 0).then(|| {
        format!(
            "refused: the wallet has unresolved effects under grant {grant}: {} unknown and {} reserved unit(s) at {issuer}; resolve them first, nothing was surrendered",
            view.unknown, view.reserved
        )
    })
}

/// The units of `grant` its issuer would give back now: neither reserved, consumed,
/// surrendered nor held by an unknown run.
pub fn available(grant: &GrantView) -> u64 {
    grant
        .allocated
        .saturating_sub(grant.reserved)
        .saturating_sub(grant.consumed)
        .saturating_sub(grant.surrendered)
        .saturating_sub(grant.unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::api::{AccountDefinition, AccountView, LedgerCounts};
    use crate::processes::api::{RunOutcome, SignedGrant};

    fn account(name: &str, owner: Option<&str>, debits_posted: u128) -> AccountView {
        AccountView {
            definition: AccountDefinition {
                name: name.to_owned(),
                currency: "EUR".to_owned(),
                owner: owner.map(str::to_owned),
                debits_must_not_exceed_credits: false,
                credits_must_not_exceed_debits: false,
                retired: false,
            },
            debits_pending: 0,
            debits_posted,
            credits_pending: 7,
            credits_posted: u128::MAX,
        }
    }

    fn ledger(accounts: Vec<AccountView>) -> LedgerView {
        LedgerView {
            host: "site".to_owned(),
            ledger: "plant".to_owned(),
            accounts,
            pending: Vec::new(),
            counts: LedgerCounts::default(),
            sequence: 1,
        }
    }

    fn grant(caller: &str, allocated: u64) -> GrantView {
        GrantView {
            name: format!("{caller}-g"),
            caller: caller.to_owned(),
            allocated,
            reserved: 1,
            consumed: 2,
            unknown: 1,
            ..GrantView::default()
        }
    }

    fn wait(caller: &str, request: &str, outcome: RunOutcome) -> RunView {
        RunView {
            request: request.to_owned(),
            process: "demo.count".to_owned(),
            arguments: Default::default(),
            caller: caller.to_owned(),
            receiver: "site".to_owned(),
            via: "direct".to_owned(),
            role: "caller".to_owned(),
            outcome,
            result: None,
            detail: String::new(),
            grant: None,
            units: Default::default(),
            signature: None,
            archived: false,
        }
    }

    #[test]
    fn a_surrender_is_refused_while_anything_of_it_is_unresolved() {
        assert!(waits_refusal("site", &[]).is_none());
        let open = waits_refusal("site", &["r2".to_owned()]).unwrap();
        assert!(
            open.contains("open waits r2") && open.contains("nothing was surrendered"),
            "{open}"
        );
        assert!(
            grant_refusal("hq", "site", "g", None)
                .unwrap()
                .contains("holds no grant `g`")
        );
        // reserved 1, consumed 2, unknown 1 of 10: refused, naming both.
        let held = grant("hq", 10);
        let refused = grant_refusal("hq", "site", "hq-g", Some(&held)).unwrap();
        assert!(refused.contains("1 unknown and 1 reserved"), "{refused}");
        assert!(
            grant_refusal("ops", "site", "hq-g", Some(&held))
                .unwrap()
                .contains("is hq's")
        );
        let settled = GrantView {
            reserved: 0,
            unknown: 0,
            surrendered: 3,
            ..held
        };
        assert!(grant_refusal("hq", "site", "hq-g", Some(&settled)).is_none());
        assert_eq!(available(&settled), 10 - 2 - 3);
        assert_eq!(available(&grant("hq", 1)), 0, "never below zero");
    }

    #[test]
    fn only_the_participants_accounts_grants_and_open_waits_are_its_wallet() {
        let owners = [Observed {
            owner: "site".to_owned(),
            answer: OwnerAnswer::Answered {
                ledgers: vec![ledger(vec![
                    account("hq-eur", Some("hq"), 12),
                    account("other", Some("x"), 5),
                    account("ops", None, 9),
                ])],
                grants: vec![grant("hq", 10), grant("x", 3)],
                manifest: None,
            },
        }];
        let view = assemble(
            "hq",
            &owners,
            Ok(vec![
                wait("hq", "r1", RunOutcome::Unknown),
                wait("hq", "r2", RunOutcome::Succeeded),
            ]),
        );
        assert!(view.complete());
        assert_eq!(view.money.len(), 1);
        assert_eq!(view.money[0].debits_posted, 12);
        assert_eq!(view.money[0].keeper, "site");
        // Amounts keep every digit, as decimal strings.
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(
            json["money"][0]["credits_posted"],
            u128::MAX.to_string().as_str()
        );
        assert_eq!(view.grants.len(), 1);
        let g = &view.grants[0];
        assert_eq!((g.allocated, g.available, g.unknown), (10, 6, 1));
        // No manifest: the issues cannot be verified, and nothing says they were.
        assert!(!g.issues_verified);
        assert_eq!(g.settlement, SETTLEMENT_UNOBSERVED);
        assert_eq!(view.open_waits.len(), 1);
        assert_eq!(view.open_waits[0].request, "r1");
    }

    #[test]
    fn an_owner_that_does_not_answer_is_unobserved_never_zero() {
        let owners = [Observed {
            owner: "site".to_owned(),
            answer: OwnerAnswer::Unobserved {
                holds: vec!["ledgers".to_owned(), "grants".to_owned()],
                reason: "its control socket does not answer".to_owned(),
            },
        }];
        let view = assemble("hq", &owners, Err("hq does not answer".to_owned()));
        assert!(!view.complete());
        assert!(view.money.is_empty() && view.grants.is_empty() && view.open_waits.is_empty());
        let owners: Vec<&str> = view.unobserved.iter().map(|u| u.owner.as_str()).collect();
        assert_eq!(owners, ["hq", "site"]);
    }

    proptest::proptest! {
        /// Whatever the owners answer: the wallet shows exactly the accounts owned by
        /// its participant and the grants it is the caller of, each from the owner
        /// that answered, with its numbers unchanged; every owner that did not answer
        /// is listed and contributes nothing; it is complete only when none is missing.
        #[test]
        fn the_wallet_is_exactly_what_the_answering_owners_hold_for_it(
            owners in proptest::collection::vec(
                (proptest::bool::ANY, proptest::collection::vec((0u8..3, proptest::num::u128::ANY), 0..4),
                 proptest::collection::vec((0u8..3, 0u64..50), 0..3)),
                0..5,
            ),
        ) {
            let callers = ["hq", "x", "y"];
            let observed: Vec<Observed> = owners
                .iter()
                .enumerate()
                .map(|(i, (answers, accounts, grants))| Observed {
                    owner: format!("owner-{i}"),
                    answer: if *answers {
                        OwnerAnswer::Answered {
                            ledgers: vec![ledger(
                                accounts
                                    .iter()
                                    .enumerate()
                                    .map(|(n, (who, posted))| account(&format!("a{n}"), Some(callers[*who as usize]), *posted))
                                    .collect(),
                            )],
                            grants: grants
                                .iter()
                                .map(|(who, units)| GrantView {
                                    name: format!("g-{i}-{who}-{units}"),
                                    caller: callers[*who as usize].to_owned(),
                                    allocated: *units,
                                    ..GrantView::default()
                                })
                                .collect(),
                            manifest: None,
                        }
                    } else {
                        OwnerAnswer::Unobserved { holds: vec!["ledgers".to_owned()], reason: "down".to_owned() }
                    },
                })
                .collect();
            let view = assemble("hq", &observed, Ok(Vec::new()));
            let mut money = 0;
            let mut grants = 0;
            let mut missing = 0;
            for (i, (answers, accounts, held)) in owners.iter().enumerate() {
                let owner = format!("owner-{i}");
                if !answers {
                    missing += 1;
                    proptest::prop_assert!(view.unobserved.iter().any(|u| u.owner == owner));
                    proptest::prop_assert!(!view.money.iter().any(|m| m.keeper == owner));
                    proptest::prop_assert!(!view.grants.iter().any(|g| g.issuer == owner));
                    continue;
                }
                for (n, (who, posted)) in accounts.iter().enumerate() {
                    let shown = view.money.iter().find(|m| m.keeper == owner && m.account == format!("a{n}"));
                    proptest::prop_assert_eq!(shown.is_some(), *who == 0);
                    if let Some(m) = shown {
                        proptest::prop_assert_eq!(m.debits_posted, *posted);
                        money += 1;
                    }
                }
                for (who, units) in held {
                    if *who == 0 {
                        let g = view.grants.iter().find(|g| g.issuer == owner && g.grant == format!("g-{i}-{who}-{units}"));
                        proptest::prop_assert!(g.is_some_and(|g| g.allocated == *units && g.available == *units && g.settlement == SETTLEMENT_UNOBSERVED));
                        grants += 1;
                    }
                }
            }
            proptest::prop_assert_eq!(view.money.len(), money);
            proptest::prop_assert_eq!(view.grants.len(), grants);
            proptest::prop_assert_eq!(view.unobserved.len(), missing);
            proptest::prop_assert_eq!(view.complete(), missing == 0);
        }
    }

    #[test]
    fn signed_issues_verify_against_the_issuers_manifest_only() {
        let dir = std::env::temp_dir().join(format!("grid-wallet-view-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        crate::custody::create(&dir).unwrap();
        let custody = crate::custody::verify(&dir).unwrap();
        let mut g = grant("hq", 10);
        let mut issue = SignedGrant {
            grant: g.name.clone(),
            issuer: "site".to_owned(),
            caller: "hq".to_owned(),
            serial: 1,
            units: 10,
            membership: None,
            generation: 0,
            signature: String::new(),
        };
        (issue.generation, issue.signature) = custody.sign_hex(&issue.signed_bytes());
        g.issued.push(issue);
        let m = custody.manifest();
        assert!(holding("site", &g, Some(&m)).issues_verified);
        // Another issuer's name, or units that do not sum to the allocation: not verified.
        assert!(!holding("elsewhere", &g, Some(&m)).issues_verified);
        let mut more = g.clone();
        more.allocated = 11;
        assert!(!holding("site", &more, Some(&m)).issues_verified);
        let mut tampered = g.clone();
        tampered.issued[0].units = 11;
        tampered.allocated = 11;
        assert!(!holding("site", &tampered, Some(&m)).issues_verified);

        // The issuer's settlement: shown settled only when it verifies and states the
        // account the issuer holds; absent, unobserved — never derived from totals.
        assert_eq!(
            holding("site", &g, Some(&m)).settlement,
            SETTLEMENT_UNOBSERVED
        );
        let mut settled = g.clone();
        (
            settled.reserved,
            settled.unknown,
            settled.surrendered,
            settled.retired,
        ) = (0, 0, 8, true);
        let mut s = crate::processes::api::GrantSettlement {
            grant: settled.name.clone(),
            issuer: "site".to_owned(),
            caller: "hq".to_owned(),
            allocated: 10,
            consumed: 2,
            surrendered: 8,
            issues: 1,
            generation: 0,
            signature: String::new(),
        };
        (s.generation, s.signature) = custody.sign_hex(&s.signed_bytes());
        settled.settlement = Some(s);
        assert_eq!(
            holding("site", &settled, Some(&m)).settlement,
            SETTLEMENT_SETTLED
        );
        assert_eq!(
            holding("site", &settled, None).settlement,
            SETTLEMENT_UNVERIFIED
        );
        let mut other_account = settled.clone();
        other_account.consumed = 3;
        other_account.surrendered = 7;
        assert_eq!(
            holding("site", &other_account, Some(&m)).settlement,
            SETTLEMENT_UNVERIFIED
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
