//! `Decisions`: the room of one host (profile `decisions`). As a decision's host it
//! keeps the installed policies (`decision-policies`) and each decision's record
//! (`decisions`, one key per id, fsynced before it is answered), admits ballots and
//! the gate through the pure [`machine`](super::machine) after verifying their
//! signatures, and applies the effect once as a Process under the request id
//! `decision:ID` through the processes room's caller path. As a roster member or gate
//! operator it signs what it is asked once per op id (`decision-cast`) and sends it
//! as a Process to the decision's host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fjall::{Keyspace, OwnedWriteBatch};

use super::api::*;
use super::machine;
use crate::custody::{Custody, Signed};
use crate::limits::{DECISION_ID_LENGTH_MAX, DECISION_PROVENANCE_MAX, DECISIONS_OPEN_MAX};
use crate::processes::api::{Peer, ProcessCall, ProcessReply, RunOutcome, RunRequest, RunView};
use crate::processes::service::Processes;
use crate::store::shelf::{Retention, time_key};
use crate::store::{Durable, Failpoints, fatal, open_keyspaces};
use grid_spec::diagnostic::quoted;

const RECORDS: &str = "decisions";
const POLICIES: &str = "decision-policies";
const CAST: &str = "decision-cast";
const RECORDS_BY_TIME: &str = "decisions-by-time";
const CAST_BY_TIME: &str = "decision-cast-by-time";
/// The shelf keys of an archived decision record and of an archived signed document.
pub(super) const RECORD_PREFIX: &str = "decision\u{0}";
pub(super) const CAST_PREFIX: &str = "decision-cast\u{0}";

/// What a member or operator keeps per op id: the signed document and its run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct CastRecord {
    cast: Cast,
    request: String,
}

pub struct Decisions {
    pub(super) host: String,
    pub(super) dir: PathBuf,
    pub(super) database: Durable,
    pub(super) records: Keyspace,
    policies: Keyspace,
    pub(super) cast: Keyspace,
    /// Closed decisions and kept documents by the time they closed or were signed:
    /// what the archive pass reads, oldest first.
    pub(super) records_by_time: Keyspace,
    pub(super) cast_by_time: Keyspace,
    custody: Custody,
    processes: Arc<Processes>,
    /// The installation's shelf and retention clock (also the expiry clock, shifted
    /// by gridd's `GRID_RETENTION_CLOCK_OFFSET_S`).
    pub(super) retention: Retention,
    pub(super) failpoints: Failpoints,
    /// Serializes each record's read, check and write.
    pub(super) lock: Mutex<()>,
    /// One apply run asked at a time.
    applying: Mutex<()>,
}

impl Decisions {
    pub fn open(
        database: &Durable,
        dir: &Path,
        host: &str,
        custody: Custody,
        processes: Arc<Processes>,
        (retention, failpoints): (Retention, Failpoints),
    ) -> Result<Arc<Decisions>, String> {
        let [records, policies, cast, records_by_time, cast_by_time] = open_keyspaces(
            database,
            [RECORDS, POLICIES, CAST, RECORDS_BY_TIME, CAST_BY_TIME],
        )
        .map_err(|e| format!("decisions keyspaces: {e}"))?;
        Ok(Arc::new(Decisions {
            host: host.to_owned(),
            dir: dir.to_owned(),
            database: database.clone(),
            records,
            policies,
            cast,
            records_by_time,
            cast_by_time,
            custody,
            processes,
            retention,
            failpoints,
            lock: Mutex::new(()),
            applying: Mutex::new(()),
        }))
    }

    pub(super) fn now(&self) -> u64 {
        self.retention.now()
    }

    fn get<T: serde::de::DeserializeOwned>(&self, keyspace: &Keyspace, key: &str) -> Option<T> {
        keyspace
            .get(key)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a decision", e))
            .map(|bytes| {
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| fatal(&self.dir, "decoding a decision", e))
            })
    }

    /// Writes `value` under `key`, listed by time at `dated` (`(by_time, at)`) in the
    /// same synced write when given.
    fn put<T: serde::Serialize>(
        &self,
        (keyspace, key): (&Keyspace, &str),
        value: &T,
        dated: Option<(&Keyspace, u64)>,
        doing: &str,
    ) {
        let mut write = self.database.batch();
        write.insert(
            keyspace,
            key,
            serde_json::to_vec(value).expect("decisions serialize"),
        );
        if let Some((by_time, at)) = dated {
            write.insert(by_time, time_key(at, key), []);
        }
        self.database.commit_or_stop(write, &self.dir, doing);
    }

    /// What `keyspace` holds at `key`, or the archive under `prefix` + `key` once it
    /// moved there (`what`: as a refusal names it). `Err`: archived and unreadable or
    /// past `archive-days` — never "not found".
    fn kept<T: serde::de::DeserializeOwned>(
        &self,
        (keyspace, prefix): (&Keyspace, &str),
        key: &str,
        what: [&str; 3],
    ) -> Result<Option<T>, String> {
        if let Some(value) = self.get(keyspace, key) {
            return Ok(Some(value));
        }
        self.retention
            .find(&self.host, &format!("{prefix}{key}"), what, |bytes| {
                serde_json::from_slice(bytes).map_err(|e| e.to_string())
            })
    }

    fn all<T: serde::de::DeserializeOwned>(&self, keyspace: &Keyspace) -> Vec<T> {
        keyspace
            .iter()
            .map(|g| {
                let (_, v) = g
                    .into_inner()
                    .unwrap_or_else(|e| fatal(&self.dir, "reading decisions", e));
                serde_json::from_slice(&v)
                    .unwrap_or_else(|e| fatal(&self.dir, "decoding a decision", e))
            })
            .collect()
    }

    /// The policies installed here, for the host's observation.
    pub fn installed(&self) -> Vec<DecisionInstall> {
        self.all(&self.policies)
    }

    /// `Request::InstallDecision`: the policy staged into the host's write (committed
    /// with the operation's answer). New decisions fix it; open ones keep theirs.
    pub fn prepare_install(
        &self,
        install: &DecisionInstall,
        write: &mut OwnedWriteBatch,
    ) -> Result<String, String> {
        let policy = &install.policy;
        if policy.host != self.host {
            return Err(format!(
                "decision `{}` is kept at `{}`, not at this host `{}`",
                policy.name, policy.host, self.host
            ));
        }
        if install.owner.name != policy.owner {
            return Err(format!(
                "decision `{}`: its effect's owner is `{}`, but the install reaches `{}`",
                policy.name, policy.owner, install.owner.name
            ));
        }
        let before: Option<DecisionInstall> = self.get(&self.policies, &policy.name);
        write.insert(
            &self.policies,
            policy.name.as_str(),
            serde_json::to_vec(install).expect("decisions serialize"),
        );
        Ok(match before {
            None => format!(
                "installed decision {} (roster {}, threshold {}, gate {}, effect {} at {})",
                policy.name,
                policy.roster.join(" "),
                policy.threshold,
                policy.gate,
                policy.effect.text(),
                policy.owner
            ),
            Some(_) => format!(
                "changed decision {}: decisions opened from now on fix the new policy; open ones keep theirs",
                policy.name
            ),
        })
    }

    /// A control call from this host's operator (blocking; never on a runtime thread).
    pub fn handle_local(self: &Arc<Self>, call: DecisionCall) -> DecisionReply {
        let refused = |reason: String| DecisionReply::Refused { reason };
        match call {
            DecisionCall::Open {
                name,
                value,
                op,
                provenance,
            } => match self.open_decision(&name, &value, &op, provenance) {
                Ok(view) => DecisionReply::Decision(Box::new(view)),
                Err(reason) => refused(reason),
            },
            DecisionCall::Cast {
                op,
                host,
                membership,
                ask,
            } => self.cast(&op, host, &membership, ask),
            DecisionCall::Apply { decision } => match self.apply(&decision) {
                Ok(view) => DecisionReply::Decision(Box::new(view)),
                Err(reason) => refused(reason),
            },
            DecisionCall::Show { name, decision } => {
                let decisions: Vec<DecisionView> = match &decision {
                    // One: also from the archive.
                    Some(id) => match self.record(id) {
                        Ok(r) if r.opened.policy.name == name => vec![self.view(r)],
                        Ok(_) => {
                            return refused(format!(
                                "`{}` holds no decision `{}` of `{name}`",
                                self.host,
                                quoted(id)
                            ));
                        }
                        Err(reason) => return refused(reason),
                    },
                    // All those still in the hot store.
                    None => self
                        .all::<DecisionRecord>(&self.records)
                        .into_iter()
                        .filter(|r| r.opened.policy.name == name)
                        .map(|r| self.view(r))
                        .collect(),
                };
                DecisionReply::Decisions {
                    host: self.host.clone(),
                    name,
                    decisions,
                }
            }
        }
    }

    fn view(&self, record: DecisionRecord) -> DecisionView {
        let now = self.now();
        let (yes, no) = machine::tally(&record);
        DecisionView {
            id: record.opened.decision.clone(),
            name: record.opened.policy.name.clone(),
            host: record.opened.policy.host.clone(),
            state: machine::state(&record, now),
            yes,
            no,
            expired: now >= record.opened.expires_ms,
            record,
        }
    }

    /// Decision `id`, from the hot store or the archive.
    pub(super) fn record(&self, id: &str) -> Result<DecisionRecord, String> {
        self.kept(
            (&self.records, RECORD_PREFIX),
            id,
            ["decision", id, "applied again"],
        )?
        .ok_or_else(|| format!("`{}` holds no decision `{}`", self.host, quoted(id)))
    }

    /// Synced; a closed decision is listed by the time it closed (for the archive).
    fn save(&self, record: &DecisionRecord) {
        let closed = super::archive::closed_at(record, self.now());
        self.put(
            (&self.records, &record.opened.decision),
            record,
            closed.map(|at| (&self.records_by_time, at)),
            "journaling a decision",
        );
    }

    /// Open: the policy fixed, the value and provenance signed, once per id.
    fn open_decision(
        &self,
        name: &str,
        value: &str,
        op: &str,
        provenance: Vec<Provenance>,
    ) -> Result<DecisionView, String> {
        if op.is_empty()
            || op.len() > DECISION_ID_LENGTH_MAX
            || !op
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(format!(
                "a decision's id (its open --op) is 1 to DECISION_ID_LENGTH_MAX ({DECISION_ID_LENGTH_MAX}) letters, digits, `-`, `_` or `.`; `{}` is not",
                quoted(op)
            ));
        }
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let earlier: Option<DecisionRecord> = self.kept(
            (&self.records, RECORD_PREFIX),
            op,
            ["decision", op, "opened again"],
        )?;
        if let Some(record) = earlier {
            // The provenance read for a re-sent id may be newer: the original stands.
            let same = record.opened.policy.name == name && record.opened.value == value;
            if same {
                return Ok(self.view(record));
            }
            return Err(format!(
                "op `{op}` already opened decision `{op}` of `{}` with value {}: its original answer stands",
                record.opened.policy.name, record.opened.value
            ));
        }
        let install: DecisionInstall = self.get(&self.policies, name).ok_or_else(|| {
            format!(
                "no decision `{}` is installed at `{}`: reconcile the files that declare it first",
                quoted(name),
                self.host
            )
        })?;
        let policy = install.policy;
        policy
            .effect
            .check_value(value)
            .map_err(|e| format!("decision `{name}` cannot open: the value {e}"))?;
        if provenance.len() > DECISION_PROVENANCE_MAX {
            return Err(format!(
                "{} provenance entries: DECISION_PROVENANCE_MAX is {DECISION_PROVENANCE_MAX}",
                provenance.len()
            ));
        }
        if let Some(reason) = crate::store::usage::full(&self.dir) {
            return Err(reason);
        }
        let now = self.now();
        let open = self
            .all::<DecisionRecord>(&self.records)
            .iter()
            .filter(|r| {
                !matches!(
                    machine::state(r, now),
                    DecisionState::Applied
                        | DecisionState::Failed
                        | DecisionState::Rejected
                        | DecisionState::Expired
                        | DecisionState::Declined
                )
            })
            .count();
        if open >= DECISIONS_OPEN_MAX {
            return Err(format!(
                "`{}` holds {open} decisions not closed: DECISIONS_OPEN_MAX is {DECISIONS_OPEN_MAX}",
                self.host
            ));
        }
        let hours = u64::from(policy.expires_after_hours);
        let mut opened = Opened {
            decision: op.to_owned(),
            policy,
            value: value.to_owned(),
            provenance,
            opened_ms: now,
            expires_ms: now.saturating_add(hours * 3_600_000),
            generation: 0,
            signature: String::new(),
        };
        (opened.generation, opened.signature) = self.custody.sign_hex(&opened.signed_bytes());
        let record = DecisionRecord {
            opened,
            ballots: Vec::new(),
            gate: None,
            apply: None,
            applied: None,
        };
        self.save(&record);
        tracing::info!(decision = op, name, "decision opened");
        Ok(self.view(record))
    }

    /// As a roster member or the gate operator: the document signed once under `op`,
    /// sent as a Process to the decision's host (or recorded here when it is this
    /// host).
    fn cast(self: &Arc<Self>, op: &str, host: Peer, membership: &str, ask: Ask) -> DecisionReply {
        let refused = |reason: String| DecisionReply::Refused { reason };
        let request = match &ask {
            Ask::Ballot { .. } => format!("decision-ballot:{op}"),
            Ask::Gate { .. } => format!("decision-gate:{op}"),
        };
        if op.is_empty()
            || request.len() > crate::limits::REQUEST_ID_LENGTH_MAX
            || op.chars().any(char::is_control)
        {
            return refused(format!(
                "op `{}` is empty, has control characters or makes the request id longer than REQUEST_ID_LENGTH_MAX",
                quoted(op)
            ));
        }
        let cast = {
            let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            let earlier: Result<Option<CastRecord>, String> = self.kept(
                (&self.cast, CAST_PREFIX),
                op,
                ["signed ballot or gate", op, "signed again"],
            );
            match earlier {
                Err(reason) => return refused(reason),
                Ok(Some(kept)) => {
                    if kept.cast.ask() != ask || kept.cast.host() != host.name {
                        return refused(format!(
                            "op `{op}` was already used to sign another {} (decision `{}`): its original answer stands",
                            kept.cast.process(),
                            kept.cast.decision()
                        ));
                    }
                    kept.cast
                }
                Ok(None) => {
                    if let Some(reason) = crate::store::usage::full(&self.dir) {
                        return refused(reason);
                    }
                    let cast = self.sign(&host.name, ask);
                    self.put(
                        (&self.cast, op),
                        &CastRecord {
                            cast: cast.clone(),
                            request: request.clone(),
                        },
                        Some((&self.cast_by_time, self.now())),
                        "journaling a signed ballot or gate",
                    );
                    cast
                }
            }
        };
        if host.name == self.host {
            let (outcome, detail) = match self.receive(&self.host, &cast) {
                Ok(_) => (RunOutcome::Succeeded, "recorded at this host".to_owned()),
                Err(reason) => (RunOutcome::Failed, reason),
            };
            return DecisionReply::Cast {
                op: op.to_owned(),
                cast,
                outcome,
                detail,
                run: None,
            };
        }
        let call = ProcessCall::Run {
            request: RunRequest {
                request,
                process: cast.process().to_owned(),
                arguments: BTreeMap::from([(
                    DOCUMENT_ARGUMENT.to_owned(),
                    serde_json::to_string(&cast).expect("documents serialize"),
                )]),
            },
            receiver: host,
            via: None,
            membership: membership.to_owned(),
            wait_ms: None,
            mission: None,
        };
        match self.processes.handle_local(call) {
            ProcessReply::Ran { run } => DecisionReply::Cast {
                op: op.to_owned(),
                cast,
                outcome: run.outcome,
                detail: run.detail.clone(),
                run: Some(Box::new(run)),
            },
            ProcessReply::Refused { reason } => refused(format!(
                "the {} was signed and kept under op `{op}`, but this host's caller refused to send it: {reason}; send the same op again",
                cast.process()
            )),
            other => refused(format!("the caller answered {other:?}")),
        }
    }

    fn sign(&self, host: &str, ask: Ask) -> Cast {
        let now = self.now();
        match ask {
            Ask::Ballot {
                name,
                decision,
                open,
                yes,
            } => {
                let mut ballot = Ballot {
                    decision,
                    name,
                    host: host.to_owned(),
                    member: self.host.clone(),
                    open,
                    yes,
                    cast_ms: now,
                    generation: 0,
                    signature: String::new(),
                };
                (ballot.generation, ballot.signature) =
                    self.custody.sign_hex(&ballot.signed_bytes());
                Cast::Ballot(ballot)
            }
            Ask::Gate {
                name,
                decision,
                open,
                ballots,
                approve,
            } => {
                let mut gate = Gate {
                    decision,
                    name,
                    host: host.to_owned(),
                    operator: self.host.clone(),
                    open,
                    ballots,
                    approve,
                    gated_ms: now,
                    generation: 0,
                    signature: String::new(),
                };
                (gate.generation, gate.signature) = self.custody.sign_hex(&gate.signed_bytes());
                Cast::Gate(gate)
            }
        }
    }

    /// `view`'s signatures and chain checked with the keys this host holds of each
    /// signer: its own, the roster's and the gate operator's its policy installed and
    /// the effect owner's (each as rotated since, from the key book) — what the control
    /// plane shows. A signer it holds no keys of is not verified.
    pub fn verified(&self, view: &DecisionView) -> (Vec<super::verify::Verified>, bool) {
        let install: Option<DecisionInstall> = self.get(&self.policies, &view.name);
        let keys = |party: &str| match &install {
            Some(i) if party == i.owner.name && party != self.host => {
                Some(self.custody.peer_keys(party, &i.owner.keys))
            }
            _ => self.keys_of(&view.name, party),
        };
        super::verify::verify(view, &keys)
    }

    /// The public keys of `party` as this host should use them now: its own, or those
    /// the decision's installed policy recorded (a rotation read from the key book).
    fn keys_of(&self, name: &str, party: &str) -> Option<crate::custody::Manifest> {
        if party == self.host {
            return Some(self.custody.manifest());
        }
        let install: DecisionInstall = self.get(&self.policies, name)?;
        let embedded = install.keys.get(party)?;
        Some(self.custody.peer_keys(party, embedded))
    }

    /// As the decision's host: a ballot or gate from `caller` (the transport's
    /// identity, or this host), admitted once, its signature verified, fsynced.
    pub fn receive(
        self: &Arc<Self>,
        caller: &str,
        cast: &Cast,
    ) -> Result<serde_json::Value, String> {
        let (view, approved) = {
            let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            let mut record = self.record(cast.decision())?;
            let now = self.now();
            let (signer, name) = match cast {
                Cast::Ballot(b) => (&b.member, &b.name),
                Cast::Gate(g) => (&g.operator, &g.name),
            };
            if signer != caller {
                return Err(format!(
                    "the document is signed as `{signer}` but was sent by `{caller}`: each party sends its own"
                ));
            }
            // Already recorded (a re-sent document): the same answer.
            let held = match cast {
                Cast::Ballot(b) => record.ballots.contains(b),
                Cast::Gate(g) => record.gate.as_ref() == Some(g),
            };
            if !held {
                // Authenticated first: a party's document that its key did not sign
                // is refused as such, whatever it says.
                if let Some(keys) = self.keys_of(name, signer) {
                    let verified = match cast {
                        Cast::Ballot(b) => b.verify(&keys),
                        Cast::Gate(g) => g.verify(&keys),
                    };
                    if !verified {
                        return Err(format!(
                            "the signature of `{signer}`'s {} does not verify with its public keys: not counted",
                            cast.process()
                        ));
                    }
                }
                // A signer without keys here is no party: the machine says why.
                match cast {
                    Cast::Ballot(b) => machine::admit_ballot(&record, b, now)?,
                    Cast::Gate(g) => machine::admit_gate(&record, g, now)?,
                }
                match cast {
                    Cast::Ballot(b) => record.ballots.push(b.clone()),
                    Cast::Gate(g) => record.gate = Some(g.clone()),
                }
                self.save(&record);
                tracing::info!(
                    decision = record.opened.decision,
                    signer,
                    "{} recorded",
                    cast.process()
                );
            }
            let view = self.view(record);
            let approved =
                matches!(cast, Cast::Gate(g) if g.approve) && view.state == DecisionState::Applying;
            (view, approved)
        };
        if approved {
            // Applied on its own thread: the gate's run answers now; the one apply
            // run is asked under its own request id.
            let me = self.clone();
            let id = view.id.clone();
            std::thread::Builder::new()
                .name("decision-apply".to_owned())
                .spawn(move || {
                    if let Err(e) = me.apply(&id) {
                        tracing::warn!(decision = id, "apply: {e}");
                    }
                })
                .map_err(|e| format!("cannot start the apply: {e}"))?;
        }
        Ok(serde_json::json!({
            "decision": view.id,
            "name": view.name,
            "state": view.state.name(),
            "yes": view.yes,
            "no": view.no,
        }))
    }

    /// Whether `cast` is recorded in its decision (a run left unknown at a restart).
    pub fn holds(&self, cast: &Cast) -> Option<bool> {
        let record = self.record(cast.decision()).ok()?;
        Some(match cast {
            Cast::Ballot(b) => record.ballots.contains(b),
            Cast::Gate(g) => record.gate.as_ref() == Some(g),
        })
    }

    /// The one apply run: journaled before it is sent, asked under the same request
    /// id each time (the caller's wait journal and the receiver's run journal answer
    /// the original) — never a second run. Its signed outcome closes the decision
    /// with the applied receipt; `unknown` is held.
    pub fn apply(&self, id: &str) -> Result<DecisionView, String> {
        let _one = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        let (record, install) = {
            let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            let mut record = self.record(id)?;
            if record.applied.is_some() {
                return Ok(self.view(record));
            }
            if !machine::may_apply(&record) {
                let state = machine::state(&record, self.now());
                return Err(format!(
                    "decision `{id}` is {}: only an approved decision applies its effect",
                    state.name()
                ));
            }
            let install: DecisionInstall = self
                .get(&self.policies, &record.opened.policy.name)
                .filter(|i: &DecisionInstall| i.owner.name == record.opened.policy.owner)
                .ok_or_else(|| {
                    format!(
                        "decision `{id}`'s effect is applied at `{}`, which the installed policy no longer reaches: install it again",
                        record.opened.policy.owner
                    )
                })?;
            if record.apply.is_none() {
                record.apply = Some(Apply {
                    request: format!("decision:{id}"),
                    receiver: record.opened.policy.owner.clone(),
                    state: ApplyState::Applying,
                    run: None,
                    detail: "journaled; the run is being sent".to_owned(),
                });
                self.save(&record);
            }
            (record, install)
        };
        let apply = record.apply.clone().expect("set above");
        let opened = &record.opened;
        let mut owner = install.owner.clone();
        owner.keys = self.custody.peer_keys(&owner.name, &owner.keys);
        let call = ProcessCall::Run {
            request: RunRequest {
                request: apply.request.clone(),
                process: opened.policy.effect.process().to_owned(),
                arguments: opened.policy.effect.arguments(&opened.value),
            },
            receiver: owner.clone(),
            via: None,
            membership: install.membership.clone(),
            wait_ms: None,
            mission: None,
        };
        let learned: Result<RunView, String> = match self.processes.handle_local(call) {
            ProcessReply::Ran { run } => Ok(run),
            ProcessReply::Refused { reason } => Err(reason),
            other => Err(format!("the caller answered {other:?}")),
        };
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut record = self.record(id)?;
        let slot = record.apply.as_mut().expect("journaled above");
        match learned {
            Ok(run) if run.outcome != RunOutcome::Unknown && run.verify(&owner.keys) => {
                slot.state = match run.outcome {
                    RunOutcome::Succeeded => ApplyState::Succeeded,
                    _ => ApplyState::Failed,
                };
                slot.detail = run.detail.clone();
                let mut applied = Applied {
                    decision: id.to_owned(),
                    name: record.opened.policy.name.clone(),
                    host: self.host.clone(),
                    open: record.opened.digest(),
                    ballots: record.ballots.iter().map(Ballot::digest).collect(),
                    gate: record.gate.as_ref().map(Gate::digest).unwrap_or_default(),
                    request: slot.request.clone(),
                    receiver: slot.receiver.clone(),
                    outcome: run.outcome.name().to_owned(),
                    run: run_digest(&run),
                    applied_ms: self.now(),
                    generation: 0,
                    signature: String::new(),
                };
                (applied.generation, applied.signature) =
                    self.custody.sign_hex(&applied.signed_bytes());
                slot.run = Some(run);
                record.applied = Some(applied);
                tracing::info!(
                    decision = id,
                    outcome = slot.state.name(),
                    "decision applied"
                );
            }
            Ok(run) if run.outcome != RunOutcome::Unknown => {
                slot.state = ApplyState::Unknown;
                slot.detail = format!(
                    "`{}` answered {}, but its signature does not verify with its public keys: held unknown",
                    run.receiver,
                    run.outcome.name()
                );
            }
            Ok(run) => {
                slot.state = ApplyState::Unknown;
                slot.detail = format!(
                    "unknown: {} — held, asked again under `{}` (gridctl decision apply), never run twice",
                    run.detail, slot.request
                );
            }
            Err(reason) => {
                slot.state = ApplyState::Unknown;
                slot.detail = format!(
                    "not answered ({reason}): held, asked again under `{}` (gridctl decision apply), never run twice",
                    slot.request
                );
            }
        }
        self.save(&record);
        Ok(self.view(record))
    }

    /// At a start: each approved decision without its receipt asks its one run again
    /// (on its own thread, once the processes room serves).
    pub fn resume(self: &Arc<Self>) {
        let pending: Vec<String> = self
            .all::<DecisionRecord>(&self.records)
            .into_iter()
            .filter(machine::may_apply)
            .map(|r| r.opened.decision)
            .collect();
        if pending.is_empty() {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("decision-apply".to_owned())
            .spawn(move || {
                for id in pending {
                    match me.apply(&id) {
                        Ok(view) => tracing::info!(
                            decision = id,
                            state = view.state.name(),
                            "decision apply asked again"
                        ),
                        Err(e) => tracing::warn!(decision = id, "apply: {e}"),
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot ask the pending applies again: {e}");
        }
    }
}
