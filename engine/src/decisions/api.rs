//! The decisions room's wire types: the installed policy, the four signed documents
//! (Open, Ballot, Gate, Applied — each a [`Signed`] with a fixed versioned text), the
//! record a decision's host keeps, its view, and the control calls.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::custody::{Manifest, Signed};
use crate::processes::api::{Peer, RunView};
use grid_spec::diagnostic::quoted;

/// The Process a roster member's ballot runs at the decision's host.
pub const BALLOT_PROCESS: &str = "decision.ballot";
/// The Process the gate operator's approval runs at the decision's host.
pub const GATE_PROCESS: &str = "decision.gate";
/// The Process an `input` effect runs at the model's host.
pub const INPUT_PROCESS: &str = "model.input";
/// The one argument of a ballot or gate Process: the signed document, as JSON.
pub const DOCUMENT_ARGUMENT: &str = "document";

/// What a decision applies once approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Effect {
    /// The decided value into `model`'s input `input` (`model.input` at its host).
    Input { model: String, input: String },
    /// One transfer of the decided amount (`ledger.transfer` at the ledger's host).
    LedgerTransfer {
        ledger: String,
        debit: String,
        credit: String,
        currency: String,
    },
}

impl Effect {
    /// One line, as the signed texts and people read it.
    pub fn text(&self) -> String {
        match self {
            Effect::Input { model, input } => format!("input {model}.{input}"),
            Effect::LedgerTransfer {
                ledger,
                debit,
                credit,
                currency,
            } => format!("ledger.transfer {ledger} {debit}->{credit} {currency}"),
        }
    }

    /// The Process its owner runs.
    pub fn process(&self) -> &'static str {
        match self {
            Effect::Input { .. } => INPUT_PROCESS,
            Effect::LedgerTransfer { .. } => "ledger.transfer",
        }
    }

    /// The Process's arguments for the decided `value`.
    pub fn arguments(&self, value: &str) -> BTreeMap<String, String> {
        let pairs: Vec<(&str, &str)> = match self {
            Effect::Input { model, input } => {
                vec![("model", model), ("input", input), ("value", value)]
            }
            Effect::LedgerTransfer {
                ledger,
                debit,
                credit,
                currency,
            } => vec![
                ("ledger", ledger),
                ("debit", debit),
                ("credit", credit),
                ("currency", currency),
                ("amount", value),
            ],
        };
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// Whether `value` is one this effect can apply: a finite number for an input, a
    /// whole number of minor units for a transfer. The refusal names it.
    pub fn check_value(&self, value: &str) -> Result<(), String> {
        match self {
            Effect::Input { .. } => value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .map(|_| ())
                .ok_or_else(|| format!("`{}` is not a finite number", quoted(value))),
            Effect::LedgerTransfer { .. } => (!value.is_empty()
                && value.bytes().all(|b| b.is_ascii_digit())
                && value.parse::<u128>().is_ok())
            .then_some(())
            .ok_or_else(|| format!("`{}` is not a whole number of minor units", quoted(value))),
        }
    }
}

/// The policy a decision fixes when it opens: what the files said then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub name: String,
    pub host: String,
    pub roster: Vec<String>,
    pub threshold: u32,
    pub gate: String,
    pub effect: Effect,
    pub expires_after_hours: u32,
    /// The host that applies the effect (the model's or the ledger's).
    pub owner: String,
}

impl Policy {
    fn text(&self) -> String {
        format!(
            "name {}\nhost {}\nroster {}\nthreshold {}\ngate {}\neffect {}\nowner {}\nexpires-after-hours {}\n",
            self.name,
            self.host,
            self.roster.join(" "),
            self.threshold,
            self.gate,
            self.effect.text(),
            self.owner,
            self.expires_after_hours
        )
    }
}

/// A decision as its host installs it (`+ decision NAME @ HOST`): its policy, and
/// what the host needs to reach the effect's owner and check ballots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionInstall {
    pub policy: Policy,
    /// The effect's owner: its address and public keys.
    pub owner: Peer,
    /// The membership the host and the owner share (the apply run's transport).
    pub membership: String,
    /// The public keys of each roster member and of the gate operator, as installed
    /// (a rotation since is read from the membership's key book).
    pub keys: BTreeMap<String, Manifest>,
}

/// What the opener saw: an owner's object at a position, with its values then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    pub owner: String,
    /// `model:NAME` or `ledger:NAME`.
    pub object: String,
    /// The model's generation (0 for a ledger).
    pub generation: u32,
    /// Batches applied to that generation (a model), or journal records applied (a
    /// ledger), when it was read.
    pub batch: u64,
    /// Name → value as text (a ledger's: `ACCOUNT:debits_posted`, `…:debits_pending`,
    /// `…:credits_posted`, `…:credits_pending` of the transfer's two accounts).
    pub values: BTreeMap<String, String>,
}

impl Provenance {
    fn text(&self) -> String {
        let values: Vec<String> = self
            .values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "provenance {} {} generation {} batch {} {}\n",
            self.owner,
            self.object,
            self.generation,
            self.batch,
            values.join(",")
        )
    }
}

/// The hex SHA-256 of a signed document: its text and its signature.
fn digest_of(signed: &impl Signed) -> String {
    let (generation, signature) = signed.signature();
    let mut hash = Sha256::new();
    hash.update(signed.signed_bytes());
    hash.update(format!("generation {generation}\nsignature {signature}\n"));
    hex::encode(hash.finalize())
}

/// 1. Open: the policy fixed, the proposed value and its provenance, signed by the
///    decision's host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Opened {
    pub decision: String,
    pub policy: Policy,
    pub value: String,
    #[serde(default)]
    pub provenance: Vec<Provenance>,
    pub opened_ms: u64,
    pub expires_ms: u64,
    pub generation: u32,
    pub signature: String,
}

impl Signed for Opened {
    fn signed_bytes(&self) -> Vec<u8> {
        let provenance: String = self.provenance.iter().map(Provenance::text).collect();
        format!(
            "grid-decision-open/1\ndecision {}\n{}value {}\nopened-ms {}\nexpires-ms {}\n{provenance}",
            self.decision,
            self.policy.text(),
            self.value,
            self.opened_ms,
            self.expires_ms
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

impl Opened {
    pub fn digest(&self) -> String {
        digest_of(self)
    }
}

/// 2. Ballot: one roster member's vote on what it saw (the Open's digest), signed by
///    the member's own key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ballot {
    pub decision: String,
    pub name: String,
    pub host: String,
    pub member: String,
    /// The digest of the Open record the member voted on.
    pub open: String,
    pub yes: bool,
    pub cast_ms: u64,
    pub generation: u32,
    pub signature: String,
}

impl Signed for Ballot {
    fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-decision-ballot/1\nname {}\nhost {}\ndecision {}\nopen {}\nmember {}\nvote {}\ncast-ms {}\n",
            self.name,
            self.host,
            self.decision,
            self.open,
            self.member,
            if self.yes { "yes" } else { "no" },
            self.cast_ms
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

impl Ballot {
    pub fn digest(&self) -> String {
        digest_of(self)
    }
}

/// 3. Gate: the human approval (or rejection) after the ballots, naming the ballots
///    it saw, signed by the gate operator host's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    pub decision: String,
    pub name: String,
    pub host: String,
    pub operator: String,
    pub open: String,
    /// The digest of the ballots it saw, in the decision's order ([`ballots_digest`]).
    pub ballots: String,
    pub approve: bool,
    pub gated_ms: u64,
    pub generation: u32,
    pub signature: String,
}

impl Signed for Gate {
    fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-decision-gate/1\nname {}\nhost {}\ndecision {}\nopen {}\nballots {}\noperator {}\n{}\ngated-ms {}\n",
            self.name,
            self.host,
            self.decision,
            self.open,
            self.ballots,
            self.operator,
            if self.approve { "approve" } else { "reject" },
            self.gated_ms
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

impl Gate {
    pub fn digest(&self) -> String {
        digest_of(self)
    }
}

/// One digest of the ballots in order: what a gate names.
pub fn ballots_digest(ballots: &[Ballot]) -> String {
    let mut hash = Sha256::new();
    for ballot in ballots {
        hash.update(ballot.digest());
        hash.update(b"\n");
    }
    hex::encode(hash.finalize())
}

/// Where the one apply run stands at the decision's host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApplyState {
    /// Journaled before the run is sent: asked again under the same request id.
    Applying,
    /// Sent, no outcome learned: held, asked again under the same id — never a
    /// second run.
    Unknown,
    Succeeded,
    Failed,
}

impl ApplyState {
    pub fn name(self) -> &'static str {
        match self {
            ApplyState::Applying => "applying",
            ApplyState::Unknown => "unknown",
            ApplyState::Succeeded => "succeeded",
            ApplyState::Failed => "failed",
        }
    }
}

/// The one apply run: its request id (`decision:ID`), where it went, what is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Apply {
    pub request: String,
    pub receiver: String,
    pub state: ApplyState,
    /// The receiver's signed outcome, once learned.
    #[serde(default)]
    pub run: Option<RunView>,
    #[serde(default)]
    pub detail: String,
}

/// 4. Applied: the receipt joining Open, ballots, gate and the effect's outcome (the
///    owner's signed run), signed by the decision's host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub decision: String,
    pub name: String,
    pub host: String,
    pub open: String,
    pub ballots: Vec<String>,
    pub gate: String,
    pub request: String,
    pub receiver: String,
    /// `succeeded` or `failed`: the owner's signed outcome.
    pub outcome: String,
    /// The hex SHA-256 of the owner's signed outcome text and signature.
    pub run: String,
    pub applied_ms: u64,
    pub generation: u32,
    pub signature: String,
}

impl Signed for Applied {
    fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-decision-applied/1\nname {}\nhost {}\ndecision {}\nopen {}\nballots {}\ngate {}\nrequest {}\nreceiver {}\noutcome {}\nrun {}\napplied-ms {}\n",
            self.name,
            self.host,
            self.decision,
            self.open,
            self.ballots.join(" "),
            self.gate,
            self.request,
            self.receiver,
            self.outcome,
            self.run,
            self.applied_ms
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

/// The hex SHA-256 of an owner's signed run outcome (what an Applied receipt names).
pub fn run_digest(run: &RunView) -> String {
    let mut hash = Sha256::new();
    hash.update(run.signed_bytes());
    if let Some(signature) = &run.signature {
        hash.update(serde_json::to_vec(signature).expect("a signature serializes"));
    }
    hex::encode(hash.finalize())
}

/// A decision as its host keeps it (one key per decision id, fsynced each change).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub opened: Opened,
    /// In the order they were recorded; one per roster member.
    #[serde(default)]
    pub ballots: Vec<Ballot>,
    #[serde(default)]
    pub gate: Option<Gate>,
    #[serde(default)]
    pub apply: Option<Apply>,
    #[serde(default)]
    pub applied: Option<Applied>,
}

/// Where a decision stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DecisionState {
    /// Taking ballots.
    Open,
    /// Enough ballots in favour: waiting for the gate.
    Passed,
    /// Too many against for the threshold to be reached: closed.
    Rejected,
    /// Past its expiry before the gate: closed.
    Expired,
    /// The gate refused its approval: closed.
    Declined,
    /// Approved; the one apply run is under way or unknown.
    Applying,
    /// Closed with the owner's outcome and the applied receipt.
    Applied,
    /// Closed: the apply run failed (nothing applied), with the receipt.
    Failed,
}

impl DecisionState {
    pub fn name(self) -> &'static str {
        match self {
            DecisionState::Open => "open",
            DecisionState::Passed => "passed",
            DecisionState::Rejected => "rejected",
            DecisionState::Expired => "expired",
            DecisionState::Declined => "declined",
            DecisionState::Applying => "applying",
            DecisionState::Applied => "applied",
            DecisionState::Failed => "failed",
        }
    }
}

/// A decision as `inspect decision` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionView {
    pub id: String,
    pub name: String,
    pub host: String,
    pub state: DecisionState,
    pub yes: u32,
    pub no: u32,
    pub expired: bool,
    pub record: DecisionRecord,
}

/// A signed document a member or the gate operator cast (kept under its op id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "document", rename_all = "kebab-case")]
pub enum Cast {
    Ballot(Ballot),
    Gate(Gate),
}

impl Cast {
    pub fn process(&self) -> &'static str {
        match self {
            Cast::Ballot(_) => BALLOT_PROCESS,
            Cast::Gate(_) => GATE_PROCESS,
        }
    }

    pub fn decision(&self) -> &str {
        match self {
            Cast::Ballot(b) => &b.decision,
            Cast::Gate(g) => &g.decision,
        }
    }

    /// The decision's host it was signed for.
    pub fn host(&self) -> &str {
        match self {
            Cast::Ballot(b) => &b.host,
            Cast::Gate(g) => &g.host,
        }
    }

    /// What was asked of its signer (its time and signature aside): the same ask under
    /// the same op re-sends it; another is refused.
    pub fn ask(&self) -> Ask {
        match self.clone() {
            Cast::Ballot(b) => Ask::Ballot {
                name: b.name,
                decision: b.decision,
                open: b.open,
                yes: b.yes,
            },
            Cast::Gate(g) => Ask::Gate {
                name: g.name,
                decision: g.decision,
                open: g.open,
                ballots: g.ballots,
                approve: g.approve,
            },
        }
    }
}

// One per call, moved once: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum DecisionCall {
    /// At the decision's host: open a decision of `name` under id `op` (its id) with
    /// the proposed value and what the opener saw.
    Open {
        name: String,
        value: String,
        op: String,
        #[serde(default)]
        provenance: Vec<Provenance>,
    },
    /// At a roster member, or at the gate operator: sign what is asked once under
    /// `op` and send it as a Process to the decision's host (`host`) over
    /// `membership`; the same op again re-sends the same document.
    Cast {
        op: String,
        host: Peer,
        membership: String,
        ask: Ask,
    },
    /// At the decision's host: ask the owner for the outcome of the one apply run
    /// (starting it if the gate approved and it never started) — never a second run.
    Apply { decision: String },
    /// At the decision's host: the decisions of `name` (one with `decision`).
    Show {
        name: String,
        #[serde(default)]
        decision: Option<String>,
    },
}

/// What a member or the gate operator is asked to sign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ask", rename_all = "kebab-case")]
pub enum Ask {
    Ballot {
        name: String,
        decision: String,
        open: String,
        yes: bool,
    },
    Gate {
        name: String,
        decision: String,
        open: String,
        ballots: String,
        approve: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum DecisionReply {
    Decision(Box<DecisionView>),
    Decisions {
        host: String,
        name: String,
        decisions: Vec<DecisionView>,
    },
    /// As the caster: the signed document and the Process's outcome at the host.
    Cast {
        op: String,
        cast: Cast,
        outcome: crate::processes::api::RunOutcome,
        detail: String,
        /// The decision host's signed run outcome (none: recorded at this host).
        #[serde(default)]
        run: Option<Box<RunView>>,
    },
    Refused {
        reason: String,
    },
}
