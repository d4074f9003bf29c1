//! The five Processes of the interface `wallet@1.1.0`, served by a host selecting
//! `archive-wallet`: `wallet.observe`, `wallet.history`, `wallet.propose`,
//! `wallet.submit`, `wallet.surrender`. Each runs under its caller's execution grant
//! at this host like any Process (once per request id; its outcome journaled, signed).
//!
//! With `archive=HOST`, a Process works on the foreign archive of HOST opened here:
//! `observe` and `history` read it; `propose`, `submit` and `surrender` refuse — an
//! archive copy cannot spend.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::api::{Event, Proposal, request_of};
use super::service::{Wallet, now_ms};
use super::view::INTERFACE;
use crate::custody::Manifest;
use crate::limits::{REQUEST_ID_LENGTH_MAX, WALLET_OWNER_WAIT, WALLET_PROPOSALS_MAX};
use crate::processes::api::{Peer, ProcessCall, ProcessReply, RunOutcome, RunRequest};
use crate::processes::service::{Failed, Invocation, Process};

/// What an archive copy answers to any spending operation.
pub const COPY_CANNOT_SPEND: &str = "an archive copy cannot spend: its manifest grants no rights";

/// The operations, by Process name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Observe,
    History,
    Propose,
    Submit,
    Surrender,
}

impl Op {
    pub const ALL: [Op; 5] = [
        Op::Observe,
        Op::History,
        Op::Propose,
        Op::Submit,
        Op::Surrender,
    ];

    pub fn process(self) -> &'static str {
        match self {
            Op::Observe => "wallet.observe",
            Op::History => "wallet.history",
            Op::Propose => "wallet.propose",
            Op::Submit => "wallet.submit",
            Op::Surrender => "wallet.surrender",
        }
    }

    fn arguments(self) -> &'static [&'static str] {
        match self {
            Op::Observe | Op::History => &["archive"],
            Op::Propose => &[
                "archive",
                "ledger",
                "keeper",
                "keeper_address",
                "keeper_keys",
                "membership",
                "debit",
                "credit",
                "amount",
                "currency",
                "pending",
            ],
            Op::Submit => &["archive", "proposal"],
            Op::Surrender => &[
                "archive",
                "grant",
                "issuer",
                "issuer_address",
                "issuer_keys",
                "membership",
            ],
        }
    }
}

/// One wallet operation as a Process.
pub struct WalletProcess {
    pub wallet: Arc<Wallet>,
    pub op: Op,
}

fn required<'a>(
    arguments: &'a BTreeMap<String, String>,
    name: &str,
    op: Op,
) -> Result<&'a str, String> {
    arguments
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("{} needs the argument `{name}`", op.process()))
}

fn keys(arguments: &BTreeMap<String, String>, name: &str, op: Op) -> Result<Manifest, String> {
    serde_json::from_str(required(arguments, name, op)?)
        .map_err(|e| format!("argument `{name}`: not a custody manifest (JSON): {e}"))
}

impl Process for WalletProcess {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        self.run_outcome(invocation).map_err(|f| f.reason)
    }

    fn run_outcome(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, Failed> {
        let op = self.op;
        if let Some(other) = invocation
            .arguments
            .keys()
            .find(|k| !op.arguments().contains(&k.as_str()))
        {
            return Err(Failed::from(format!(
                "{} takes no argument `{other}` (it takes: {})",
                op.process(),
                op.arguments().join(", ")
            )));
        }
        if let Some(copy) = invocation.arguments.get("archive") {
            return self.on_copy(copy).map_err(Failed::from);
        }
        match op {
            Op::Observe => Ok(serde_json::json!({
                "interface": INTERFACE,
                "wallet": self.wallet.observe(),
            })),
            Op::History => {
                let journal = self.wallet.journal();
                Ok(serde_json::json!({
                    "interface": INTERFACE,
                    "host": self.wallet.host,
                    "position": journal.position(),
                    "entries": journal.entries(),
                }))
            }
            Op::Propose => self.propose(invocation).map_err(Failed::from),
            Op::Submit => self.submit(invocation),
            Op::Surrender => self.surrender(invocation).map_err(Failed::from),
        }
    }
}

impl WalletProcess {
    /// Observed only: the foreign archive of `copy`.
    fn on_copy(&self, copy: &str) -> Result<serde_json::Value, String> {
        let Some((body, digest)) = self.wallet.foreign(copy) else {
            return Err(format!(
                "no archive of `{copy}` is open at {}",
                self.wallet.host
            ));
        };
        let archive = serde_json::json!({
            "host": body.metadata.host,
            "created_ms": body.metadata.created_ms,
            "installation": body.metadata.installation,
            "digest": digest,
            "opened_at": self.wallet.host,
            "observed_only": true,
        });
        match self.op {
            Op::Observe => Ok(serde_json::json!({
                "interface": INTERFACE,
                "archive": archive,
                "wallet": body.observation,
            })),
            Op::History => Ok(serde_json::json!({
                "interface": INTERFACE,
                "archive": archive,
                "host": body.metadata.host,
                "position": body.metadata.position,
                "entries": body.history,
            })),
            Op::Propose | Op::Submit | Op::Surrender => Err(COPY_CANNOT_SPEND.to_owned()),
        }
    }

    /// Signs and stores a proposal (fsynced); moves no money. Its id is this run's
    /// request id.
    fn propose(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        let a = invocation.arguments;
        let op = self.op;
        let text = required(a, "amount", op)?;
        let amount: u128 = text
            .parse()
            .ok()
            .filter(|n| *n > 0 && text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("argument `amount`: `{text}` is not a whole number of minor units above 0 (u128)"))?;
        let pending = match a.get("pending").map(String::as_str) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(format!(
                    "argument `pending`: `{other}` is not true or false"
                ));
            }
        };
        let keeper = required(a, "keeper", op)?.to_owned();
        if keeper == self.wallet.host {
            return Err(format!(
                "argument `keeper`: `{keeper}` is this wallet's host; a transfer runs under a grant of another host"
            ));
        }
        let id = invocation.request.to_owned();
        let transfer = crate::wallet::transfer_id(&self.wallet.host, &request_of(&id));
        if transfer.len() > REQUEST_ID_LENGTH_MAX {
            return Err(format!(
                "the transfer id `{transfer}` is longer than REQUEST_ID_LENGTH_MAX ({REQUEST_ID_LENGTH_MAX}); use a shorter request id"
            ));
        }
        let mut proposal = Proposal {
            id: id.clone(),
            host: self.wallet.host.clone(),
            ledger: required(a, "ledger", op)?.to_owned(),
            keeper: Peer {
                name: keeper,
                address: required(a, "keeper_address", op)?.to_owned(),
                keys: keys(a, "keeper_keys", op)?,
            },
            membership: required(a, "membership", op)?.to_owned(),
            debit: required(a, "debit", op)?.to_owned(),
            credit: required(a, "credit", op)?.to_owned(),
            amount,
            currency: required(a, "currency", op)?.to_owned(),
            pending,
            created_ms: now_ms(),
            generation: 0,
            signature: String::new(),
        };
        let mut journal = self.wallet.journal();
        if let Some(existing) = journal.proposal(&id) {
            return Ok(proposed(&existing));
        }
        if journal.proposals().len() >= WALLET_PROPOSALS_MAX {
            return Err(format!(
                "this wallet holds WALLET_PROPOSALS_MAX ({WALLET_PROPOSALS_MAX}) proposals"
            ));
        }
        (proposal.generation, proposal.signature) =
            self.wallet.custody.sign_hex(&proposal.signed_bytes());
        journal
            .append(
                Event::Proposed {
                    proposal: proposal.clone(),
                },
                now_ms(),
            )
            .map_err(|e| e.to_string())?;
        Ok(proposed(&proposal))
    }

    /// The proposal's ONE `ledger.transfer` run, through this host's caller path
    /// (its wait journal): the same proposal again asks for the same run.
    fn submit(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, Failed> {
        let id = required(invocation.arguments, "proposal", self.op)?.to_owned();
        let (proposal, first) = {
            let mut journal = self.wallet.journal();
            let Some(proposal) = journal.proposal(&id) else {
                return Err(Failed::from(format!(
                    "this wallet holds no proposal `{id}`"
                )));
            };
            if proposal.host != self.wallet.host
                || !proposal.verify(&self.wallet.custody.manifest())
            {
                return Err(Failed::from(format!(
                    "proposal `{id}` is not signed by this host's custody; nothing is submitted"
                )));
            }
            let request = proposal.request();
            let first = !journal
                .holds(|e| matches!(e, Event::Submitted { proposal, .. } if *proposal == id));
            if first {
                journal
                    .append(
                        Event::Submitted {
                            proposal: id.clone(),
                            request,
                        },
                        now_ms(),
                    )
                    .map_err(|e| Failed::from(e.to_string()))?;
            }
            (proposal, first)
        };
        let request = proposal.request();
        let call = ProcessCall::Run {
            request: RunRequest {
                request: request.clone(),
                process: "ledger.transfer".to_owned(),
                arguments: proposal.arguments(),
            },
            receiver: proposal.keeper.clone(),
            via: None,
            membership: proposal.membership.clone(),
            wait_ms: Some(WALLET_OWNER_WAIT.as_millis() as u64),
            mission: None,
        };
        let run = match self.wallet.processes.handle_local(call) {
            ProcessReply::Ran { run } => run,
            ProcessReply::Refused { reason } => {
                return Err(Failed::from(format!(
                    "the transfer of proposal `{id}` was refused by this host's caller: {reason}"
                )));
            }
            other => return Err(Failed::from(format!("the caller answered {other:?}"))),
        };
        if run.outcome != RunOutcome::Unknown {
            let mut journal = self.wallet.journal();
            if !journal.holds(|e| matches!(e, Event::Answered { proposal, .. } if *proposal == id))
            {
                journal
                    .append(
                        Event::Answered {
                            proposal: id.clone(),
                            request: request.clone(),
                            outcome: run.outcome.name().to_owned(),
                            result: run.result.clone(),
                        },
                        now_ms(),
                    )
                    .map_err(|e| Failed::from(e.to_string()))?;
            }
        }
        let result = serde_json::json!({
            "proposal": id,
            "request": request,
            "receiver": run.receiver,
            "first_submission": first,
            "outcome": run.outcome.name(),
            "transfer": run.result,
            "detail": run.detail,
        });
        match run.outcome {
            RunOutcome::Succeeded => Ok(result),
            RunOutcome::Failed => Err(Failed {
                reason: format!("the transfer of proposal `{id}` failed: {}", run.detail),
                result: Some(result),
            }),
            RunOutcome::Unknown => Err(Failed {
                reason: format!(
                    "the transfer of proposal `{id}` is unknown ({}); submit the same proposal again to ask — never a second transfer",
                    run.detail
                ),
                result: Some(result),
            }),
        }
    }

    /// Surrenders the grant's available units at its issuer (the original owner),
    /// refused while this wallet has unresolved effects under it.
    fn surrender(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        let a = invocation.arguments;
        let op = self.op;
        let grant = required(a, "grant", op)?.to_owned();
        let issuer = required(a, "issuer", op)?.to_owned();
        let address = required(a, "issuer_address", op)?.to_owned();
        let issuer_keys = keys(a, "issuer_keys", op)?;
        let membership = required(a, "membership", op)?.to_owned();
        let host = self.wallet.host.clone();
        let open: Vec<String> = self
            .wallet
            .processes
            .open_wait_views()
            .into_iter()
            .filter(|w| w.receiver == issuer)
            .map(|w| w.request)
            .collect();
        if let Some(refused) = super::view::waits_refusal(&issuer, &open) {
            return Err(refused);
        }
        let observed = self.wallet.owners.observe(&membership, &issuer, &address)?;
        let held = observed.grants.iter().find(|g| g.name == grant);
        if let Some(refused) = super::view::grant_refusal(&host, &issuer, &grant, held) {
            return Err(refused);
        }
        let op_id = format!("wallet-surrender:{host}:{grant}");
        let answer = self.wallet.owners.surrender(
            &membership,
            &issuer,
            &address,
            &op_id,
            &grant,
            &issuer_keys,
        )?;
        if !answer.succeeded {
            return Err(format!("{issuer} refused the surrender: {}", answer.detail));
        }
        self.wallet
            .record_surrender(&grant, &issuer, &answer.detail)
            .map_err(|e| e.to_string())?;
        Ok(serde_json::json!({
            "grant": grant,
            "issuer": issuer,
            "op": op_id,
            "outcome": "succeeded",
            "detail": answer.detail,
            "signature_verified": answer.verified,
        }))
    }
}

fn proposed(proposal: &Proposal) -> serde_json::Value {
    serde_json::json!({
        "proposal": proposal,
        "request": proposal.request(),
        "moved": "nothing: a proposal is not a payment",
    })
}
