//! The `processes` profile's wire types: control calls (`Call::Process`), grant
//! requests (operations with ids, `Request::IssueGrant` / `Request::SurrenderGrant`),
//! the direct service (`POST /process/M/run|status`) and the mailbox (`POST
//! /mailbox/M/deposit|fetch|collect`). Fields are only ever added.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::custody::Manifest;
use crate::custody::seal::Sealed;

/// Another host as a caller names it: its listen address and public keys (its custody
/// manifest), read by the operator from its installation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub name: String,
    pub address: String,
    pub keys: Manifest,
}

/// How a run ended, or where it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunOutcome {
    Succeeded,
    Failed,
    /// The receiver stopped between dispatch and the outcome's journal, or the caller
    /// has not learned the outcome: its units stay reserved until its owner resolves it.
    Unknown,
}

impl RunOutcome {
    pub fn name(self) -> &'static str {
        match self {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "failed",
            RunOutcome::Unknown => "unknown",
        }
    }
}

/// What a caller asks a receiver to run, once per `request` id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRequest {
    pub request: String,
    pub process: String,
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
}

/// A run as its owner (the receiver) or its caller holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub request: String,
    pub process: String,
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
    pub caller: String,
    pub receiver: String,
    /// `direct` or `mailbox:HOST`.
    pub via: String,
    /// `receiver` (the original owner) or `caller` (its wait journal).
    pub role: String,
    pub outcome: RunOutcome,
    /// The Process's result (succeeded), or null.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    /// For people: the failure, how an unknown run came to be, who resolved it.
    #[serde(default)]
    pub detail: String,
    /// The grant charged (receiver side), and what the run holds of it:
    /// `reserved`, `consumed`, `released`, `unknown`, or `none` (refused before
    /// dispatch).
    #[serde(default)]
    pub grant: Option<String>,
    #[serde(default)]
    pub units: super::runs::RunUnits,
    /// The receiver's signature over [`RunView::signed_bytes`] of a terminal outcome,
    /// made once when it was journaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<crate::custody::AnswerSignature>,
    /// Read back from the host's archive (past its hot window): the same outcome, the
    /// same signature. Not signed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
}

impl RunView {
    /// What a receiver signs of a terminal outcome.
    pub fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-process-outcome/1\nreceiver {}\ncaller {}\nrequest {}\nprocess {}\narguments {}\noutcome {}\nresult {}\ndetail {}\n",
            self.receiver,
            self.caller,
            self.request,
            self.process,
            serde_json::to_string(&self.arguments).expect("arguments serialize"),
            self.outcome.name(),
            serde_json::to_string(&self.result).expect("results serialize"),
            self.detail,
        )
        .into_bytes()
    }

    /// Verifies the receiver's signature with its custody manifest.
    pub fn verify(&self, receiver_keys: &Manifest) -> bool {
        self.signature.as_ref().is_some_and(|s| {
            s.host == self.receiver
                && crate::custody::verify_hex_signature(
                    receiver_keys,
                    s.generation,
                    &self.signed_bytes(),
                    &s.signature,
                )
        })
    }
}

/// A control call to the host's `processes` profile (`Call::Process`).
// One per call, moved once: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum ProcessCall {
    /// As the caller: run `process` at `receiver` once under `request`, directly or
    /// through the mailbox `via`. A request id this host already waits on is not
    /// submitted again: its outcome is asked for (the receiver answers the original).
    Run {
        request: RunRequest,
        receiver: Peer,
        #[serde(default)]
        via: Option<Peer>,
        /// The membership both hosts are certified in (the transport's identity).
        membership: String,
        /// How long this call waits for the outcome before answering `unknown` (the
        /// wait goes on in the host's wait journal).
        #[serde(default)]
        wait_ms: Option<u64>,
        /// Charged to this host's own mission allocation `mission:NAME` instead of a
        /// grant (`--via mission:NAME`): the receiver must be this host, and no peer
        /// is asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mission: Option<String>,
    },
    /// What this host holds of `request`: as its receiver, or as its caller.
    Inspect { request: String },
    /// As the receiver's operator: close an `unknown` run, consuming its units
    /// (succeeded) or releasing them (failed).
    Resolve {
        request: String,
        outcome: RunOutcome,
    },
    /// Every grant this host issued, with its units.
    Grants,
    /// The Processes this host serves, its runs by outcome and the `demo.count` counter.
    Processes,
    /// As the caller: close the stopped wait `request` with its receiver's signed proof
    /// of no dispatch (the receiver bars the request), or learn its finalized outcome;
    /// refused while it is dispatched and not finalized.
    Cancel { request: String },
}

/// A grant as its owner (the issuing, receiving host) holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct GrantView {
    pub name: String,
    pub caller: String,
    pub allocated: u64,
    pub reserved: u64,
    pub consumed: u64,
    pub surrendered: u64,
    pub unknown: u64,
    pub retired: bool,
    /// The mailbox host this issuer fetches the caller's requests from.
    #[serde(default)]
    pub mailbox: Option<String>,
    /// The membership the grant serves (`grant … membership=M`): only runs that reach
    /// the issuer through it are charged to it. None: any membership.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership: Option<String>,
    /// Every signed issue, in order: their units sum to `allocated`.
    #[serde(default)]
    pub issued: Vec<SignedGrant>,
    /// The issuer's signed settlement of the retired grant, once nothing is held: its
    /// final account. Absent: not settled (never inferred from the totals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settlement: Option<GrantSettlement>,
}

/// The issuer's settlement of a retired grant (`settle-grant`): every allocated unit
/// consumed or surrendered, nothing reserved or unknown — signed once, retained, and
/// verifiable offline with the issuer's custody manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantSettlement {
    pub grant: String,
    pub issuer: String,
    pub caller: String,
    pub allocated: u64,
    pub consumed: u64,
    pub surrendered: u64,
    /// The signed issues it settles (their serials run 1..=issues).
    pub issues: u32,
    pub generation: u32,
    pub signature: String,
}

impl GrantSettlement {
    pub fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-grant-settlement/1\nissuer {}\ncaller {}\ngrant {}\nissues {}\nallocated {}\nconsumed {}\nsurrendered {}\n",
            self.issuer,
            self.caller,
            self.grant,
            self.issues,
            self.allocated,
            self.consumed,
            self.surrendered
        )
        .into_bytes()
    }

    pub fn verify(&self, issuer_keys: &Manifest) -> bool {
        crate::custody::verify_hex_signature(
            issuer_keys,
            self.generation,
            &self.signed_bytes(),
            &self.signature,
        )
    }
}

impl GrantView {
    /// Units the caller may still reserve.
    pub fn available(&self) -> u64 {
        self.allocated
            .saturating_sub(self.reserved + self.consumed + self.surrendered + self.unknown)
    }
}

/// One signed issue of execution units (the first grant, or a raise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedGrant {
    pub grant: String,
    pub issuer: String,
    pub caller: String,
    /// 1 for the first issue, then 2, 3, … per raise.
    pub serial: u32,
    pub units: u64,
    /// The membership the grant serves, signed with the units (absent: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership: Option<String>,
    /// The issuer's signing-key generation and its signature (hex) over
    /// [`SignedGrant::signed_bytes`].
    pub generation: u32,
    pub signature: String,
}

impl SignedGrant {
    /// A grant serving one membership signs it as a last line; one serving any has
    /// none (the form issued before grants named memberships).
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut text = format!(
            "grid-grant/1\nissuer {}\ncaller {}\ngrant {}\nserial {}\nunits {}\n",
            self.issuer, self.caller, self.grant, self.serial, self.units
        );
        if let Some(membership) = &self.membership {
            text.push_str(&format!("membership {membership}\n"));
        }
        text.into_bytes()
    }

    pub fn verify(&self, issuer_keys: &Manifest) -> bool {
        crate::custody::verify_hex_signature(
            issuer_keys,
            self.generation,
            &self.signed_bytes(),
            &self.signature,
        )
    }
}

/// Counts of the runs a host received, by where they stand.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCounts {
    pub succeeded: u64,
    pub failed: u64,
    pub unknown: u64,
    pub running: u64,
}

/// Tagged `process` (it travels inside `Reply`, which is tagged `reply`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "process", rename_all = "kebab-case")]
pub enum ProcessReply {
    /// A run's outcome (or `unknown`) as the caller learned it.
    Ran {
        run: RunView,
    },
    /// What the host holds of a request id (none: it never received or sent it).
    Inspected {
        run: Option<RunView>,
    },
    Resolved {
        run: RunView,
    },
    Grants {
        host: String,
        grants: Vec<GrantView>,
    },
    Processes {
        host: String,
        processes: Vec<String>,
        runs: RunCounts,
        demo_count: u64,
        /// Deposits the mailbox this host keeps for others holds now (requests not
        /// fetched yet, outcomes not collected yet).
        #[serde(default)]
        mailbox_deposits: u64,
    },
    Refused {
        reason: String,
    },
    /// `process cancel`: the wait's record — closed with the receiver's proof of no
    /// dispatch (`proof`), or with its finalized outcome (`proof` null), or still open
    /// (`outcome` unknown: the cancel's reply was lost).
    Cancelled {
        run: RunView,
        proof: Option<super::cancel::NoDispatch>,
    },
}

/// A grant issue as reconcile sends it to the issuer (`Request::IssueGrant`): `units`
/// more for `caller`, valid only while the grant's allocation is `allocated_before`
/// (a plan made against another state is refused, never applied on top of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantIssue {
    pub name: String,
    pub caller: String,
    pub units: u64,
    pub allocated_before: u64,
    /// The caller's public keys: mailbox requests are verified and outcomes sealed
    /// with them.
    pub caller_keys: Manifest,
    /// The mailbox host through which the caller may reach this issuer.
    #[serde(default)]
    pub mailbox: Option<MailboxAt>,
    /// The one membership the grant serves (`grant … membership=M`); fixed by the
    /// first issue. None: runs through any membership the parties share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership: Option<String>,
}

/// A mailbox host and the membership this issuer reaches it in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxAt {
    pub host: String,
    pub address: String,
    pub membership: String,
}

/// `POST /process/M/run` replies, and `POST /process/M/status`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum ServiceReply {
    Run {
        run: RunView,
    },
    /// `status` of an id the receiver never journaled.
    Absent {
        request: String,
    },
    Refused {
        reason: String,
    },
    /// `POST /process/M/cancel` of a request never dispatched: barred, with the
    /// receiver's signed proof.
    Cancelled {
        run: RunView,
        proof: super::cancel::NoDispatch,
    },
    /// `POST /process/M/surrender`: the recipient's grant as it stands after its
    /// surrender, with the issuer's signed receipt.
    Surrendered {
        grant: GrantView,
        receipt: super::surrender::SurrenderReceipt,
    },
}

/// `POST /process/M/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusQuery {
    pub request: String,
}

/// What a mailbox holds: requests for a receiver, outcomes for a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DepositKind {
    Request,
    Outcome,
}

/// `POST /mailbox/M/deposit`: sealed bytes for `to`; the depositor is the certificate's
/// participant. The first deposit of (to, kind, from, id) is kept; later ones are
/// answered as already held and change nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deposit {
    pub to: String,
    pub kind: DepositKind,
    pub id: String,
    pub sealed: Sealed,
}

/// `POST /mailbox/M/fetch`: deposits of `kind` for the certificate's participant after
/// sequence number `after`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fetch {
    pub kind: DepositKind,
    pub after: u64,
    /// A long poll: when nothing is there yet, the mailbox holds the call until a
    /// deposit arrives or this many milliseconds pass (at most
    /// `MAILBOX_LONG_POLL_WAIT`); absent, it answers at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// `POST /mailbox/M/collect`: the deposit of `kind` from `from` with id `id` for the
/// certificate's participant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collect {
    pub kind: DepositKind,
    pub from: String,
    pub id: String,
    /// A long poll, as [`Fetch::wait_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// `POST /mailbox/M/forget`: the certificate's participant journaled these deposits
/// of `kind` (durably): the mailbox drops them. At most `MAILBOX_FORGET_MAX`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forget {
    pub kind: DepositKind,
    pub deposits: Vec<DepositRef>,
}

/// One deposit, by its depositor and id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DepositRef {
    pub from: String,
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub sequence: u64,
    pub from: String,
    pub id: String,
    pub sealed: Sealed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum MailboxReply {
    Deposited {
        sequence: u64,
        already: bool,
    },
    Fetched {
        deposits: Vec<Held>,
    },
    Collected {
        deposit: Option<Held>,
    },
    /// How many of the deposits a `forget` named were held (and are dropped now).
    Forgotten {
        deposits: u64,
    },
    Refused {
        reason: String,
    },
}

/// The plaintext of a sealed mailbox request: the request, signed by its caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedRequest {
    pub caller: String,
    pub receiver: String,
    /// The mailbox the outcome goes back through.
    pub mailbox: String,
    pub request: RunRequest,
    pub generation: u32,
    pub signature: String,
}

impl SignedRequest {
    pub fn signed_bytes(
        caller: &str,
        receiver: &str,
        mailbox: &str,
        request: &RunRequest,
    ) -> Vec<u8> {
        format!(
            "grid-process-request/1\ncaller {caller}\nreceiver {receiver}\nmailbox {mailbox}\nrequest {}\n",
            serde_json::to_string(request).expect("requests serialize")
        )
        .into_bytes()
    }
}
