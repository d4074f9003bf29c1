//! The host control API's wire types (an API boundary: these types are serialized, so
//! fields are only ever added). One JSON [`Call`] per line from the caller, one JSON
//! [`Reply`] per line from the host, over the host's Unix socket `DIR/control.sock`
//! (documented in `docs/control-api.md`).
//!
//! Every change a host makes is an *operation* with a caller-chosen id. The host
//! retains the original [`Answer`] of every id it received, durably with the change
//! itself: re-sending the id returns that answer, identical, and never acts again; the
//! same id with a different request is refused. A caller that saw an answer
//! acknowledges it; answers never acknowledged are reported by `observe`, so an
//! operator can learn the outcome of a reply that was lost.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One request to a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum Call {
    /// What the host holds: its models and its unacknowledged answers. Changes nothing.
    Observe,
    /// Perform an operation once.
    Submit { op: String, request: Request },
    /// The retained answer of `op`, if the host ever received it. Changes nothing.
    Answer { op: String },
    /// The caller has seen the answer of `op`.
    Acknowledge { op: String },
    /// The current values of a model. Changes nothing.
    Values { model: String },
    /// Wire observation counters (profile `wire-observation`). Changes nothing.
    Wire,
    /// What the installation's stores hold on disk. Changes nothing: no write, flush
    /// or compaction.
    Storage,
    /// Read back every archived segment and verify it (size, sequence, checksum,
    /// signature); name any changed, missing or unknown. Changes nothing. Handled
    /// outside the host's lock.
    VerifyArchive,
    /// A call to the authority of `membership` (the only one this host runs when
    /// `None`); profile `authority`. Handled outside the host's lock.
    Authority {
        #[serde(default)]
        membership: Option<String>,
        request: crate::authority::service::AuthorityCall,
    },
    /// A call to the host's `delivery` profile (publish, routes, held values,
    /// receipts). Handled outside the host's lock.
    Delivery {
        request: crate::delivery::api::DeliveryCall,
    },
    /// A call to the host's `processes` profile (run as the caller, inspect, resolve,
    /// grants). Handled outside the host's lock.
    Process {
        request: crate::processes::api::ProcessCall,
    },
    /// A simulated tag's journal (profile `sources`): its observations and the
    /// position fed to each model. Changes nothing.
    Tag { name: String },
    /// A call to the host's `ledger` profile (submit a batch, look up answers,
    /// inspect). Handled outside the host's lock.
    Ledger {
        request: crate::ledger::api::LedgerCall,
    },
    /// A call to the host's wallet (its open waits; profile `archive-wallet`: an
    /// archive snapshot, opening a foreign archive). Handled outside the host's lock.
    Wallet {
        request: crate::wallet::api::WalletCall,
    },
    /// A call to the host's `missions` profile (reserve, return, never-issued
    /// recovery, inspect). Handled outside the host's lock.
    Mission {
        request: crate::missions::api::MissionCall,
    },
    /// A call to the host's `exports` profile (a disclosure it signed, an export it
    /// runs with its mappings). Changes nothing.
    Export {
        request: crate::exports::api::ExportCall,
    },
    /// A call to the host's `decisions` profile (open, cast a ballot or gate, apply,
    /// show). Handled outside the host's lock.
    Decision {
        request: crate::decisions::api::DecisionCall,
    },
    /// What this host still owes in `membership` — what a leave waits for
    /// (docs/memberships.md, "Leaving"): values on its routes there not yet receipted,
    /// waiting for capacity or not yet taken by its models; of the `grants` named
    /// (those binding it there), units reserved or unknown; its own calls there with no
    /// outcome. Changes nothing.
    Obligations {
        membership: String,
        #[serde(default)]
        grants: Vec<String>,
    },
    /// The control plane's inspection of this host (docs/control-plane.md): its
    /// observation with what its rooms hold for an operator to see — each authority
    /// voter's status as it reports itself, its Processes' unfinished runs and open
    /// waits, its routes' positions and newest receipts (signatures checked), the
    /// records of the decisions it keeps (signatures checked). Changes nothing.
    /// Handled outside the host's lock.
    Inspect,
    /// Locking or unlocking the host's custody (docs/custody.md, "Locked custody").
    /// Taken on the host's control socket only; the passphrase is never journaled,
    /// logged or answered back.
    Custody { request: CustodyCall },
}

/// A call on the host's custody.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum CustodyCall {
    /// Encrypt the signing and mail keys at rest under `passphrase` (again: change
    /// it). The running keys stay in use.
    Lock { passphrase: Passphrase },
    /// Decrypt them with `passphrase`: a gridd that started locked starts its rooms.
    Unlock { passphrase: Passphrase },
}

/// A custody passphrase on its way over the control socket: never shown by `Debug`,
/// zeroed when dropped.
#[derive(Clone, PartialEq)]
pub struct Passphrase(zeroize::Zeroizing<String>);

impl Serialize for Passphrase {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Passphrase {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Passphrase, D::Error> {
        String::deserialize(deserializer).map(Passphrase::new)
    }
}

impl Passphrase {
    pub fn new(text: String) -> Passphrase {
        Passphrase(zeroize::Zeroizing::new(text))
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Passphrase(..)")
    }
}

/// What an operation asks a host to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Request {
    /// Install a model, or change an installed one, to the canonical KDL text `model`
    /// (see `grid_spec::canonical::model`). Values a batch set carry over to inputs the
    /// new definition still has; inputs no batch set take the new default; a new
    /// generation recomputes once (its batch 1) and publishes the outputs that changed.
    ///
    /// `serves`: the memberships the topology admits the model to (`serve M`), kept in
    /// the model's record beside its definition: a change of them alone is no new
    /// generation.
    ///
    /// `ceilings`: the `models ceiling` of each membership in `serves` as the topology
    /// declares it (`grid_spec::serving::serve_ceilings`); the host admits the model to
    /// each only within it, `MEMBERSHIP_MODELS_CEILING_DEFAULT` for one not named.
    InstallModel {
        name: String,
        model: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        serves: Vec<String>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        ceilings: BTreeMap<String, u32>,
    },
    /// Install a tag read at this host, or change an installed one, to the canonical
    /// KDL text `tag` (see `grid_spec::canonical::tag`); profile `sources`. Only
    /// `simulate` sources run in this build; any other source is refused by name.
    InstallTag { name: String, tag: String },
    /// Retire an installed model: it stops serving and its state is kept.
    RetireModel { name: String },
    /// Retire an installed tag (`retired=#true`): it stops reading and releases what
    /// it holds at its device (a confirmed COV subscription is cancelled, the answer
    /// saying whether the device confirmed); its journal is kept. Installing it again
    /// reinstates it.
    RetireTag { name: String },
    /// Rotate the host's signing key to `generation` (only ever higher); the old key
    /// stays in the custody manifest as retired, verify-only.
    RotateKeys { generation: u32 },
    /// Rotate the host's mail (X25519) key to `generation` (only ever higher); the old
    /// secret stays, open-only: values sealed to it still open.
    RotateMailKey { generation: u32 },
    /// Rotate the host's TLS key to `generation` (only ever higher); the old key keeps
    /// serving until every membership certifies the new one (`+ enrollment` after it).
    RotateTlsKey { generation: u32 },
    /// One atomic input batch; with `fence`, a write stamped `(claim, epoch)` that the
    /// host refuses once it has seen a newer epoch of that claim (SPEC C3 fencing).
    Input {
        model: String,
        values: Vec<(String, f64)>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<FenceStamp>,
    },
    /// Apply version `version` of the mapping matrix `matrix` of `model` reads — a
    /// matrix staged at this host — as one batch (issue 34, docs/grdx.md).
    ApplyMatrix {
        model: String,
        matrix: String,
        version: u64,
    },
    /// Install a route at its publisher or a destination (profile `delivery`), or
    /// update its destinations and their keys.
    InstallRoute {
        route: crate::delivery::api::RouteInstall,
    },
    /// Issue execution units of a grant to its caller (profile `processes`): the first
    /// signed issue, or a raise by the difference.
    IssueGrant {
        grant: crate::processes::api::GrantIssue,
    },
    /// Surrender a grant's unused units and retire it (profile `processes`).
    SurrenderGrant { name: String },
    /// Install a ledger with its accounts (profile `ledger`).
    InstallLedger {
        ledger: crate::ledger::api::LedgerDefinition,
    },
    /// Open an account in an installed ledger (profile `ledger`).
    OpenAccount {
        ledger: String,
        account: crate::ledger::api::AccountDefinition,
    },
    /// Retire an account: closed to new transfers, never deleted (profile `ledger`).
    RetireAccount { ledger: String, account: String },
    /// Settle a surrendered grant whose runs have all closed (profile `processes`):
    /// the issuer signs its final account once.
    SettleGrant { name: String },
    /// Checkpoint every model and published route of the host now and purge what the
    /// checkpoints cover, tag journals and Ordered inboxes below what their models took
    /// (`gridctl storage checkpoint`; docs/storage.md). Re-sent, it returns its
    /// first answer; a new id checkpoints again at the models' current positions.
    Checkpoint {},
    /// Move the acknowledged answers older than `older_than_seconds` to the host's
    /// archive now, whatever `retain hot-days` says (`gridctl storage archive`;
    /// docs/storage.md). Re-sent, it returns its first answer.
    Archive { older_than_seconds: u64 },
    /// Leave `membership` (`member M leave=#true`; docs/memberships.md, "Leaving"):
    /// failed, changing nothing, while an obligation there is open (`Call::Obligations`
    /// with the same `grants`); otherwise the models admitted to it no longer serve it,
    /// and the host's certificate of it is set aside (`DIR/memberships-left/M-SERIAL`):
    /// from then on it neither serves nor admits the membership's participants. A host
    /// not enrolled in it has nothing to leave.
    LeaveMembership {
        membership: String,
        #[serde(default)]
        grants: Vec<String>,
    },
    /// At the publisher of an export's `from` (profile `exports`, docs/exports.md):
    /// sign the disclosure of `terms`, from the route's next position on. The same
    /// terms again: already disclosed; other terms under the name: refused.
    Disclose {
        terms: crate::exports::api::DisclosureTerms,
    },
    /// At the issuer: withdraw the disclosure of `export` (kept, never given again).
    WithdrawDisclosure { export: String },
    /// At the gateway: run an export under its signed disclosure (checked against the
    /// issuer's public keys and the routes installed here).
    InstallExport {
        export: crate::exports::api::ExportInstall,
    },
    /// At the gateway: retire an export — nothing crosses from its commit on; its
    /// mappings are kept.
    RetireExport { export: String },
    /// At a decision's host (profile `decisions`): install or change a decision's
    /// policy; decisions opened after fix it, open ones keep theirs.
    InstallDecision {
        decision: Box<crate::decisions::api::DecisionInstall>,
    },
}

/// A write's fencing stamp: the claim its writer holds and the epoch it holds it at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceStamp {
    pub claim: String,
    pub epoch: u64,
}

impl Request {
    /// A short description for operators, e.g. `install model boiler`.
    pub fn describe(&self) -> String {
        match self {
            Request::InstallModel { name, .. } => format!("install model {name}"),
            Request::InstallTag { name, .. } => format!("install tag {name}"),
            Request::RetireModel { name } => format!("retire model {name}"),
            Request::RetireTag { name } => format!("retire tag {name}"),
            Request::RotateKeys { generation } => {
                format!("rotate signing keys to generation {generation}")
            }
            Request::RotateMailKey { generation } => {
                format!("rotate the mail key to generation {generation}")
            }
            Request::RotateTlsKey { generation } => {
                format!("rotate the TLS key to generation {generation}")
            }
            Request::Input {
                model,
                values,
                fence,
            } => {
                let sets: Vec<String> = values.iter().map(|(n, v)| format!("{n}={v}")).collect();
                let stamp = fence
                    .as_ref()
                    .map(|f| format!(" stamped {}:{}", f.claim, f.epoch))
                    .unwrap_or_default();
                format!("input {model} {}{stamp}", sets.join(" "))
            }
            Request::ApplyMatrix {
                model,
                matrix,
                version,
            } => format!("apply version {version} to matrix {matrix} of model {model}"),
            Request::InstallRoute { route } => format!("install route {}", route.name),
            Request::IssueGrant { grant } => format!(
                "issue {} unit(s) of grant {} to {}",
                grant.units, grant.name, grant.caller
            ),
            Request::SurrenderGrant { name } => format!("surrender grant {name}"),
            Request::InstallLedger { ledger } => format!(
                "install ledger {} with {} account(s)",
                ledger.name,
                ledger.accounts.len()
            ),
            Request::OpenAccount { ledger, account } => {
                format!("open account {} in ledger {ledger}", account.name)
            }
            Request::RetireAccount { ledger, account } => {
                format!("retire account {account} of ledger {ledger}")
            }
            Request::SettleGrant { name } => format!("settle grant {name}"),
            Request::Checkpoint {} => "checkpoint".to_owned(),
            Request::Archive { older_than_seconds } => {
                format!("archive answers older than {older_than_seconds} s")
            }
            Request::LeaveMembership { membership, .. } => format!("leave membership {membership}"),
            Request::Disclose { terms } => format!(
                "disclose route {} to gateway {} (export {})",
                terms.from, terms.gateway, terms.export
            ),
            Request::WithdrawDisclosure { export } => {
                format!("withdraw the disclosure of export {export}")
            }
            Request::InstallExport { export } => format!("install export {}", export.name()),
            Request::RetireExport { export } => format!("retire export {export}"),
            Request::InstallDecision { decision } => {
                format!("install decision {}", decision.policy.name)
            }
        }
    }

    /// The request's kind as logs and metrics name it, e.g. `install-model`.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::InstallModel { .. } => "install-model",
            Request::InstallTag { .. } => "install-tag",
            Request::RetireModel { .. } => "retire-model",
            Request::RetireTag { .. } => "retire-tag",
            Request::RotateKeys { .. } => "rotate-keys",
            Request::RotateMailKey { .. } => "rotate-mail-key",
            Request::RotateTlsKey { .. } => "rotate-tls-key",
            Request::Input { .. } => "input",
            Request::ApplyMatrix { .. } => "apply-matrix",
            Request::InstallRoute { .. } => "install-route",
            Request::IssueGrant { .. } => "issue-grant",
            Request::SurrenderGrant { .. } => "surrender-grant",
            Request::InstallLedger { .. } => "install-ledger",
            Request::OpenAccount { .. } => "open-account",
            Request::RetireAccount { .. } => "retire-account",
            Request::SettleGrant { .. } => "settle-grant",
            Request::Checkpoint {} => "checkpoint",
            Request::Archive { .. } => "archive",
            Request::LeaveMembership { .. } => "leave-membership",
            Request::Disclose { .. } => "disclose",
            Request::WithdrawDisclosure { .. } => "withdraw-disclosure",
            Request::InstallExport { .. } => "install-export",
            Request::RetireExport { .. } => "retire-export",
            Request::InstallDecision { .. } => "install-decision",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Succeeded,
    Failed,
}

impl Outcome {
    /// `succeeded` or `failed`, as logs and metrics name it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
        }
    }
}

/// The original answer of one operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub op: String,
    pub outcome: Outcome,
    /// What happened, for people: `installed generation 2`, the refusal reason, …
    pub detail: String,
    /// The owner's Ed25519 signature over [`Answer::signed_bytes`], made when the
    /// answer was first given and retained with it: it verifies offline with the
    /// owner's public key of that generation, also after rotation or revocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<AnswerSignature>,
    /// The request this answers, so the answer verifies on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Request>,
    /// Set on a reply, never retained or signed: the id was used before and this is
    /// the answer given then — nothing was applied again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Set on a reply, never retained or signed: the answer came from the host's
    /// archive (it was older than the hot window), unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
}

pub use crate::custody::AnswerSignature;

impl Answer {
    /// Verifies the owner's signature with its custody manifest (public keys only):
    /// `Some(generation)` when it verifies.
    pub fn verify(&self, manifest: &crate::custody::Manifest) -> Option<u32> {
        let signature = self.signature.as_ref()?;
        let request = self.request.as_ref()?;
        crate::custody::verify_hex_signature(
            manifest,
            signature.generation,
            &self.signed_bytes(&signature.host, request),
            &signature.signature,
        )
        .then_some(signature.generation)
    }

    /// What the owner signs: the answer and the request it answers, canonically.
    pub fn signed_bytes(&self, host: &str, request: &Request) -> Vec<u8> {
        let outcome = match self.outcome {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
        };
        format!(
            "grid-answer/1\nhost {host}\nop {}\noutcome {outcome}\ndetail {}\nrequest {}\n",
            self.op,
            self.detail,
            serde_json::to_string(request).expect("requests serialize")
        )
        .into_bytes()
    }
}

/// A host's reply to one [`Call`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum Reply {
    Observation(Observation),
    /// The original answer of an operation (new or retained).
    Answer(Answer),
    /// `answer` for an id the host never received.
    NoAnswer {
        op: String,
    },
    /// The host answered `op` once, but cannot read that answer now (an archive
    /// segment damaged or missing): the outcome is unknown to the caller, and the
    /// operation is never executed again.
    Unknown {
        op: String,
        reason: String,
    },
    Acknowledged {
        op: String,
    },
    Values {
        model: String,
        values: Vec<(String, ValueText)>,
    },
    /// Bytes this host's sockets wrote per peer (`None`: unavailable).
    Wire {
        peers: Vec<WirePeer>,
    },
    /// What the installation's stores hold on disk (`Call::Storage`).
    Storage(Box<crate::store::usage::StorageView>),
    /// What reading back the archive found (`Call::VerifyArchive`).
    ArchiveVerified(Box<crate::store::shelf::Verification>),
    /// What the authority answered.
    Authority(crate::authority::service::AuthorityReply),
    /// The control plane's inspection (`Call::Inspect`): the observation's fields and
    /// the rooms' parts beside them, as the page draws them.
    Inspection {
        inspection: serde_json::Value,
    },
    /// What the delivery profile answered.
    Delivery(Box<crate::delivery::api::DeliveryReply>),
    /// What the processes profile answered.
    Process(Box<crate::processes::api::ProcessReply>),
    /// A simulated tag's journal (`Call::Tag`).
    Tag(Box<TagReport>),
    /// The call was refused and changed nothing (an id reused for another request, a
    /// malformed call, an unknown model for `values`). A refusal of a retry does not
    /// make an earlier outcome known.
    Refused {
        reason: String,
    },
    /// What the ledger profile answered.
    Ledger(Box<crate::ledger::api::LedgerReply>),
    /// What the wallet answered.
    Wallet(Box<crate::wallet::api::WalletReply>),
    /// What the missions profile answered.
    Mission(Box<crate::missions::api::MissionReply>),
    /// What the host still owes in `membership` (`Call::Obligations`; empty: nothing,
    /// a leave may complete).
    Obligations {
        membership: String,
        open: Vec<String>,
    },
    /// What the exports profile answered.
    Export(Box<crate::exports::api::ExportReply>),
    /// What the decisions profile answered.
    Decision(Box<crate::decisions::api::DecisionReply>),
    /// What a custody call did (`Call::Custody`): whether the keys are encrypted at
    /// rest, whether gridd still waits for them to be unlocked, and what was done.
    Custody {
        encrypted: bool,
        locked: bool,
        said: String,
    },
}

/// A value as it crosses the wire: a finite number or an error value's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ValueText {
    Number(f64),
    Error(String),
}

impl From<crate::model::Value> for ValueText {
    fn from(value: crate::model::Value) -> ValueText {
        match value {
            crate::model::Value::Number(x) => ValueText::Number(x),
            crate::model::Value::Error(e) => ValueText::Error(e.to_string()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub host: String,
    /// The host's key custody, as its manifest says.
    #[serde(default)]
    pub keys: Option<KeysState>,
    pub models: Vec<ModelState>,
    /// Operations whose answer no caller acknowledged: their reply may have been lost.
    pub unacknowledged: Vec<RetainedOperation>,
    /// Routes installed at this host (profile `delivery`).
    #[serde(default)]
    pub routes: Vec<crate::delivery::api::RouteInstall>,
    /// Grants this host issued (profile `processes`).
    #[serde(default)]
    pub grants: Vec<crate::processes::api::GrantView>,
    /// Tags read at this host (profile `sources`).
    #[serde(default)]
    pub tags: Vec<TagState>,
    /// Ledgers kept at this host and their accounts (profile `ledger`).
    #[serde(default)]
    pub ledgers: Vec<crate::ledger::api::LedgerDefinition>,
    /// Missions this host holds as their host (profile `missions`).
    #[serde(default)]
    pub missions: Vec<crate::missions::api::MissionView>,
    /// Disclosures this host signed and exports it runs (profile `exports`).
    #[serde(default)]
    pub exports: Vec<crate::exports::api::ExportState>,
    /// Decision policies installed at this host (profile `decisions`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<crate::decisions::api::DecisionInstall>,
    /// The profiles this gridd runs: those `host.toml` selected when it started. A
    /// profile selected since takes effect only when gridd restarts, and the plan
    /// says so. `None` from a gridd older than this field.
    #[serde(default)]
    pub profiles: Option<Vec<String>>,
    /// Mapping → (lowest, highest) version staged here, for every mapping this host is
    /// a destination of (issue 34; empty from a gridd older than this field): a pinned
    /// version outside it is planned as `!`, not applied.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub staged: std::collections::BTreeMap<String, (u64, u64)>,
}

/// A tag a host holds, as `observe` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TagState {
    pub name: String,
    /// Canonical KDL text of the installed definition.
    pub tag: String,
    /// Observations journaled so far (the last index).
    pub observations: u64,
    /// Outstanding debt entries (since the last good one).
    #[serde(default)]
    pub debt: u64,
    /// The adapter's connection state (`None` for a simulated tag).
    #[serde(default)]
    pub connection: Option<String>,
    /// Retired (`Request::RetireTag`): nothing is read any more; the journal is kept.
    #[serde(default)]
    pub retired: bool,
}

/// A tag's journal (`Call::Tag`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TagReport {
    pub host: String,
    pub name: String,
    /// Canonical KDL text of the installed definition.
    pub tag: String,
    /// Observations journaled (the last index; indexes run 1..=count).
    pub count: u64,
    /// The journaled observations (index, value), oldest first: the newest
    /// `TAG_REPORT_OBSERVATIONS_MAX` of them.
    pub observations: Vec<(u64, f64)>,
    /// Each model input fed from this tag, with the last index fed to it.
    pub fed: Vec<TagFed>,
    /// `simulate`, `modbus`, `sparkplug`.
    #[serde(default)]
    pub source: String,
    /// The adapter's connection as it last reported it (`None` for a simulated tag,
    /// or before the adapter's first report).
    #[serde(default)]
    pub connection: Option<grid_adapters::Connection>,
    /// The last index journaled (the same as `count`).
    #[serde(default)]
    pub last_index: u64,
    /// The newest good entry.
    #[serde(default)]
    pub last_good: Option<LastGood>,
    /// Journaled entries by quality.
    #[serde(default)]
    pub counts: QualityCounts,
    /// Outstanding debt: the debt and refusal entries since the last good one, oldest
    /// first (at most `TAG_REPORT_DEBT_MAX`, the newest).
    #[serde(default)]
    pub debt: Vec<DebtEntry>,
    /// The newest entries, oldest first (at most `TAG_REPORT_ENTRIES_MAX`).
    #[serde(default)]
    pub entries: Vec<TagEntry>,
    /// Whether the journal holds exactly the indexes 1..=`last_index`.
    #[serde(default)]
    pub consecutive: bool,
    /// Readings not journaled because they repeated the last entry's debt (since the
    /// host started).
    #[serde(default)]
    pub repeats: u64,
    /// Retired (`Request::RetireTag`): nothing reads it any more; this is its kept
    /// journal.
    #[serde(default)]
    pub retired: bool,
    /// The lowest index the journal still holds: entries below it were projected by
    /// every model fed by the tag and purged (docs/storage.md); 1 when none was.
    #[serde(default = "first_index")]
    pub held_from: u64,
    /// Purged debt and refusals, counted per reason and `TAG_DEBT_WINDOW_MS` window
    /// (the newest `TAG_REPORT_DEBT_WINDOWS_MAX`, oldest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub debt_windows: Vec<DebtWindowView>,
}

fn first_index() -> u64 {
    1
}

/// Purged debt or refusals of one reason in one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebtWindowView {
    /// The window's start, Unix milliseconds (by the entries' receive time).
    pub window_ms: u64,
    pub reason: String,
    pub quality: String,
    pub count: u64,
    pub first: u64,
    pub last: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastGood {
    pub index: u64,
    pub value: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QualityCounts {
    pub good: u64,
    pub debt: u64,
    pub refused: u64,
    /// Passive receive completions (J1939 multi-packet messages), neither good nor
    /// debt.
    #[serde(default)]
    pub completions: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DebtEntry {
    pub index: u64,
    pub reason: String,
    /// `debt` or `refused`.
    pub quality: String,
    #[serde(default)]
    pub received_ms: Option<u64>,
}

/// One journaled observation as `inspect tag` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TagEntry {
    pub index: u64,
    /// `good`, `debt`, `refused` or `completion`.
    pub quality: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub raw: grid_adapters::Raw,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_time_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TagFed {
    pub model: String,
    pub input: String,
    /// The last observation index journaled with a batch of `model`.
    pub position: u64,
    /// The model's batches in its current generation.
    pub batches: u64,
    /// The last entry fed to it was debt or a refusal: the input keeps its last good
    /// value, stale, until a good entry follows.
    #[serde(default)]
    pub stale: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelState {
    pub name: String,
    /// Canonical KDL text of the installed definition.
    pub model: String,
    pub retired: bool,
    /// Definitions installed so far under this name (1 for the first).
    pub generation: u32,
    /// Batches applied to the current generation.
    pub batches: u64,
    /// The memberships the model was admitted to (`serve M`), as installed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serves: Vec<String>,
    /// Matrix → the version of its mapping applied to it (issue 34); a matrix no value
    /// was applied to is absent.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub matrices: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetainedOperation {
    pub request: Request,
    pub answer: Answer,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeysState {
    /// The current signing-key generation.
    pub generation: u32,
    /// `ed25519:<hex>` of the current signing key.
    pub signing: String,
    /// Generations of retired (verify-only) signing keys.
    pub retired: Vec<u32>,
    /// The current mail-key generation.
    #[serde(default = "first_generation")]
    pub mail_generation: u32,
    /// Generations of retired (open-only) mail keys.
    #[serde(default)]
    pub retired_mail: Vec<u32>,
    /// The current TLS-key generation.
    #[serde(default = "first_generation")]
    pub tls_generation: u32,
    /// The signing and mail keys are encrypted at rest (`gridctl custody lock`).
    #[serde(default)]
    pub encrypted: bool,
    /// gridd holds no signing or mail key: it started with an encrypted custody and
    /// serves reads only until `gridctl custody unlock`.
    #[serde(default)]
    pub locked: bool,
}

fn first_generation() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WirePeer {
    /// `participant in membership`, or `unauthenticated` for refused handshakes.
    pub peer: String,
    /// Whose writes: `server-to-client` (this host serving the peer) or
    /// `client-to-server` (this host calling the peer).
    pub direction: String,
    /// Bytes written, or none when the counter overflowed.
    pub bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_answer_verifies_and_an_altered_one_does_not() {
        let dir = std::env::temp_dir().join(format!("grid-answer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let manifest = crate::custody::create(&dir).unwrap();
        let custody = crate::custody::verify(&dir).unwrap();
        let request = Request::RetireModel {
            name: "m".to_owned(),
        };
        let mut answer = Answer {
            op: "o1".to_owned(),
            outcome: Outcome::Succeeded,
            detail: "retired".to_owned(),
            signature: None,
            request: Some(request.clone()),
            replayed: false,
            archived: false,
        };
        answer.signature = Some(custody.sign_answer("h", &answer.signed_bytes("h", &request)));
        assert_eq!(answer.verify(&manifest), Some(1));
        let mut altered = answer.clone();
        altered.outcome = Outcome::Failed;
        assert_eq!(altered.verify(&manifest), None);
        let mut altered = answer.clone();
        altered.request = Some(Request::RetireModel {
            name: "other".to_owned(),
        });
        assert_eq!(altered.verify(&manifest), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
