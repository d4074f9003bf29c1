//! The `missions` profile of one host: as a mission's host, its records (quiesce,
//! reserve, return, never-issued recovery); as an issuer, what it signed. Both live in
//! the host's store (fjall), each change fsynced before it is answered:
//!
//! ```text
//! missions         NAME   HostRecord (JSON)     (the mission's host)
//! mission-issuer   NAME   IssuerRecord (JSON)   (its issuer)
//! ```
//!
//! The host's steps are serialized (one at a time); so are the issuer's decisions.
//! Every step a host takes toward its authority or its issuer carries an id derived
//! from the operator's op id (`OP/claim`, `OP/successor`, `OP/release`,
//! `OP/handoff`), so re-sending the op re-sends the same steps and gets their
//! original answers; nothing here re-sends on its own.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fjall::Keyspace;

use super::api::{
    Allocation, CloseQuery, Closure, ConsumedRun, Consumption, IssueQuery, IssuerReply,
    MissionCall, MissionReply, MissionState, MissionTerms, MissionUnits, MissionView, ReturnQuery,
    Settlement, claim_of,
};
use super::machine;
use crate::authority::api::{AuthorityReply, ClaimCommand, ClaimOutcome};
use crate::authority::claims::digest;
use crate::authority::service::{Authorities, AuthorityCall};
use crate::custody::{Custody, Signed};
use crate::limits::{
    MISSION_CALL_TIMEOUT, MISSION_OP_LENGTH_MAX, MISSION_RETURN_QUIET_WAIT, MISSIONS_MAX,
};
use crate::processes::allocations::now_ms;
use crate::processes::api::{RunOutcome, RunView};
use crate::processes::service::Processes;
use crate::store::{Failpoints, fatal, open_keyspaces};
use crate::transport::{PeerClient, PeerError};

const RECORDS: &str = "missions";
const ISSUED: &str = "mission-issuer";

/// What a mission's host keeps per mission.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct HostRecord {
    terms: MissionTerms,
    reservation: String,
    state: MissionState,
    /// The claim's epoch once acquired with the successor enrolled.
    epoch: Option<u64>,
    allocation: Option<Allocation>,
    consumption: Option<Consumption>,
    settlement: Option<Settlement>,
    closure: Option<Closure>,
    return_op: Option<String>,
    recover_op: Option<String>,
    recovered: Vec<(String, u64)>,
    /// The host's other claims in the mission's membership (its routes' publishing
    /// rights) on which the successor was enrolled at departure.
    #[serde(default)]
    departing: Vec<String>,
    detail: String,
}

/// Tells the host whether its models are quiesced, and why.
pub type QuiesceHook = Box<dyn Fn(Option<String>) + Send + Sync>;

/// The claims the host's other rooms hold as owner, by membership: `(membership,
/// claim)` — the publishing rights of the routes it publishes.
pub type OwnedClaims = Box<dyn Fn() -> Vec<(String, String)> + Send + Sync>;

pub struct Missions {
    pub(super) host: String,
    pub(super) dir: PathBuf,
    pub(super) database: crate::store::Durable,
    pub(super) records: Keyspace,
    pub(super) issued: Keyspace,
    pub(super) custody: Custody,
    pub(super) processes: Arc<Processes>,
    pub(super) authorities: Authorities,
    pub(super) failpoints: Mutex<Failpoints>,
    pub(super) runtime: tokio::runtime::Handle,
    /// One host step at a time.
    pub(super) steps: tokio::sync::Mutex<()>,
    /// One issuer decision at a time.
    pub(super) deciding: tokio::sync::Mutex<()>,
    pub(super) quiesce: Mutex<Option<QuiesceHook>>,
    pub(super) owned: Mutex<Option<OwnedClaims>>,
}

/// Why a step stopped.
pub(super) enum Stop {
    Refused(String),
    Unknown(String),
}

pub(super) type Step<T> = Result<T, Stop>;

/// RFC 3339 → milliseconds since the Unix epoch.
pub fn deadline_ms(deadline: &str) -> Result<i64, String> {
    let at = time::OffsetDateTime::parse(deadline, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("deadline `{deadline}` is not an RFC 3339 timestamp: {e}"))?;
    Ok((at.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// The missions a store no host serves holds still reserved (not settled, closed or
/// refused), by name and state: a storage replacement's copy is refused while one is
/// (store/replace.rs).
pub fn held_in(database: &fjall::Database) -> Result<Vec<(String, &'static str)>, String> {
    let [records] =
        open_keyspaces(database, [RECORDS]).map_err(|e| format!("missions keyspace: {e}"))?;
    let mut held = Vec::new();
    for entry in records.iter() {
        let (_, value) = entry
            .into_inner()
            .map_err(|e| format!("reading a mission: {e}"))?;
        let record: HostRecord = serde_json::from_slice(&value)
            .map_err(|e| format!("a mission record does not decode: {e}"))?;
        if machine::held(record.state) {
            held.push((record.terms.name.clone(), record.state.name()));
        }
    }
    Ok(held)
}

impl Missions {
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        database: &crate::store::Durable,
        dir: &Path,
        host: &str,
        custody: Custody,
        processes: Arc<Processes>,
        authorities: Authorities,
        failpoints: Failpoints,
        runtime: tokio::runtime::Handle,
    ) -> Result<Arc<Missions>, String> {
        let [records, issued] = open_keyspaces(database, [RECORDS, ISSUED])
            .map_err(|e| format!("missions keyspaces: {e}"))?;
        let missions = Arc::new(Missions {
            host: host.to_owned(),
            dir: dir.to_owned(),
            database: database.clone(),
            records,
            issued,
            custody,
            processes,
            authorities,
            failpoints: Mutex::new(failpoints),
            runtime,
            steps: tokio::sync::Mutex::new(()),
            deciding: tokio::sync::Mutex::new(()),
            quiesce: Mutex::new(None),
            owned: Mutex::new(None),
        });
        // A stop between a settlement's save and its allocation's: settled again here
        // (changes nothing when it was).
        for record in missions.all() {
            if record.state == MissionState::Settled {
                missions
                    .processes
                    .settle_allocation(&claim_of(&record.terms.name));
            }
        }
        Ok(missions)
    }

    /// Why this host's models are quiesced now (a mission not settled), if they are.
    pub fn quiesced(&self) -> Option<String> {
        let held: Vec<String> = self
            .all()
            .into_iter()
            .filter(|r| !matches!(r.state, MissionState::Settled | MissionState::Refused))
            .map(|r| format!("mission `{}` is {}", r.terms.name, r.state.name()))
            .collect();
        (!held.is_empty()).then(|| {
            format!(
                "{}: the model owner takes no batch from outside until the mission's return settles",
                held.join(", ")
            )
        })
    }

    /// Installs the hook that quiesces the host's models, and tells it now.
    pub fn on_quiesce(&self, hook: QuiesceHook) {
        hook(self.quiesced());
        *self.quiesce.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    /// Installs what tells the missions room the host's other claims.
    pub fn on_owned_claims(&self, owned: OwnedClaims) {
        *self.owned.lock().unwrap_or_else(|p| p.into_inner()) = Some(owned);
    }

    fn owned_claims(&self, membership: &str) -> Vec<String> {
        let owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        let mut claims: Vec<String> = owned
            .as_ref()
            .map(|f| f())
            .unwrap_or_default()
            .into_iter()
            .filter(|(m, _)| m == membership)
            .map(|(_, c)| c)
            .collect();
        claims.sort();
        claims.dedup();
        claims
    }

    /// `claim` as this host's authority of `membership` shows it after a read barrier.
    pub(super) async fn show(
        &self,
        membership: &str,
        claim: &str,
    ) -> Result<AuthorityReply, String> {
        let authority = self.authorities.pick(Some(membership))?;
        Ok(authority
            .handle(
                AuthorityCall::Show {
                    claim: claim.to_owned(),
                },
                None,
            )
            .await)
    }

    /// Whether the authority shows `claim` held by this host now (after a barrier).
    async fn holds(&self, membership: &str, claim: &str) -> Step<bool> {
        match self.show(membership, claim).await.map_err(Stop::Refused)? {
            AuthorityReply::Shown { claim: c, .. } => Ok(c.is_some_and(|c| {
                c.owner == self.host && c.state == crate::authority::claims::ClaimState::Held
            })),
            AuthorityReply::Unknown { reason } => Err(Stop::Unknown(format!(
                "the authority cannot confirm `{claim}` now ({reason}); re-send the same op id"
            ))),
            other => Err(Stop::Refused(format!("the authority answered {other:?}"))),
        }
    }

    pub(super) fn tell_quiesce(&self) {
        if let Some(hook) = &*self.quiesce.lock().unwrap_or_else(|p| p.into_inner()) {
            hook(self.quiesced());
        }
    }

    fn all(&self) -> Vec<HostRecord> {
        self.records
            .iter()
            .filter_map(|g| g.into_inner().ok())
            .filter_map(|(_, v)| serde_json::from_slice(&v).ok())
            .collect()
    }

    pub(super) fn get<T: serde::de::DeserializeOwned>(
        &self,
        keyspace: &Keyspace,
        name: &str,
    ) -> Option<T> {
        keyspace
            .get(name)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a mission", e))
            .map(|bytes| {
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| fatal(&self.dir, "decoding a mission", e))
            })
    }

    pub(super) fn put<T: serde::Serialize>(
        &self,
        keyspace: &Keyspace,
        name: &str,
        value: &T,
        doing: &str,
    ) {
        let mut write = self.database.batch();
        write.insert(
            keyspace,
            name,
            serde_json::to_vec(value).expect("missions serialize"),
        );
        self.database.commit_or_stop(write, &self.dir, doing);
    }

    fn save(&self, record: &HostRecord) {
        self.put(
            &self.records,
            &record.terms.name,
            record,
            "journaling a mission",
        );
    }

    fn units(&self, record: &HostRecord) -> (MissionUnits, Option<String>) {
        let claim = claim_of(&record.terms.name);
        let Some((account, limits)) = self.processes.allocation(&claim) else {
            return (MissionUnits::default(), None);
        };
        // Once returned, the signed consumption record counts the runs released (no
        // run is charged after it); a settled allocation's runs leave the hot store.
        let released = match &record.consumption {
            Some(consumption) => consumption.released,
            None => self
                .processes
                .allocation_runs(&claim)
                .iter()
                .filter(|r| r.outcome == RunOutcome::Failed)
                .count() as u64,
        };
        let units = MissionUnits {
            allocated: account.allocated,
            consumed: account.consumed,
            reserved: account.reserved,
            unknown: account.unknown,
            released,
            available: account.available(),
        };
        let limit = if let Some(stopped) = limits.stopped {
            Some(stopped)
        } else if now_ms() >= limits.deadline_ms {
            Some(format!("deadline: {} has passed", limits.deadline))
        } else if units.available == 0 {
            Some(format!(
                "units: all {} signed units are used",
                units.allocated
            ))
        } else {
            None
        };
        (units, limit)
    }

    fn view(&self, record: &HostRecord) -> MissionView {
        let (units, limit) = self.units(record);
        let state = machine::shown(record.state, &units, limit.is_some());
        MissionView {
            name: record.terms.name.clone(),
            host: record.terms.host.clone(),
            state,
            units,
            deadline: record.terms.deadline.clone(),
            expired: deadline_ms(&record.terms.deadline).is_ok_and(|at| now_ms() >= at),
            successor: record.terms.successor.clone(),
            issuer: record.terms.issuer.clone(),
            quiesced: !matches!(record.state, MissionState::Settled | MissionState::Refused),
            claim: claim_of(&record.terms.name),
            epoch: record.epoch,
            reservation: record.reservation.clone(),
            return_op: record.return_op.clone(),
            recover_op: record.recover_op.clone(),
            limit: if record.state == MissionState::Active {
                limit
            } else {
                None
            },
            allocation: record.allocation.clone(),
            consumption: record.consumption.clone(),
            settlement: record.settlement.clone(),
            closure: record.closure.clone(),
            recovered: record.recovered.clone(),
            detail: record.detail.clone(),
            terms: record.terms.clone(),
        }
    }

    fn reply(&self, record: &HostRecord, stopped: Step<()>) -> MissionReply {
        match stopped {
            Ok(()) => MissionReply::Mission {
                mission: Box::new(self.view(record)),
            },
            Err(Stop::Refused(reason)) => MissionReply::Refused { reason },
            Err(Stop::Unknown(reason)) => MissionReply::Unknown {
                mission: Box::new(self.view(record)),
                reason,
            },
        }
    }

    /// The end of a return or a recovery: an uncertain step is journaled as the
    /// record's detail (a refused one changed nothing), quiescence follows the records,
    /// and the answer.
    fn finish(&self, record: &mut HostRecord, stopped: Step<()>) -> MissionReply {
        if let Err(Stop::Unknown(reason)) = &stopped {
            record.detail = reason.clone();
            self.save(record);
        }
        self.tell_quiesce();
        self.reply(record, stopped)
    }

    // ---- control calls ----

    /// Handles a control call from this host's operator (blocking; never on a runtime
    /// thread): the steps run as a task on the runtime.
    pub fn handle_local(self: &Arc<Self>, call: MissionCall) -> MissionReply {
        let me = self.clone();
        match self
            .runtime
            .block_on(self.runtime.spawn(async move { me.handle(call).await }))
        {
            Ok(reply) => reply,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a mission call was cancelled: {e}"),
        }
    }

    async fn handle(self: &Arc<Self>, call: MissionCall) -> MissionReply {
        if let MissionCall::Reserve { op, .. }
        | MissionCall::Return { op, .. }
        | MissionCall::Recover { op, .. } = &call
            && (op.is_empty()
                || op.len() > MISSION_OP_LENGTH_MAX
                || op.chars().any(char::is_control))
        {
            return MissionReply::Refused {
                reason: format!(
                    "a mission step's op id is 1 to MISSION_OP_LENGTH_MAX ({MISSION_OP_LENGTH_MAX}) printable bytes"
                ),
            };
        }
        match call {
            MissionCall::Reserve { op, mission, terms } => self.reserve(&op, &mission, terms).await,
            MissionCall::Return { op, mission } => self.return_mission(&op, &mission).await,
            MissionCall::Recover { op, mission } => self.recover(&op, &mission).await,
            MissionCall::Inspect { mission } => {
                match self.get::<HostRecord>(&self.records, &mission) {
                    Some(record) => self.reply(&record, Ok(())),
                    None => MissionReply::Refused {
                        reason: format!("host `{}` holds no mission `{mission}`", self.host),
                    },
                }
            }
            MissionCall::List => MissionReply::Missions {
                host: self.host.clone(),
                missions: self.views(),
            },
        }
    }

    /// Every mission this host holds, as `inspect mission` shows it (no step waits).
    pub fn views(&self) -> Vec<MissionView> {
        self.all().iter().map(|r| self.view(r)).collect()
    }

    fn issuer_client(&self, terms: &MissionTerms) -> Result<PeerClient, String> {
        PeerClient::new(
            &self.dir,
            &terms.membership,
            &terms.issuer,
            &terms.issuer_address,
        )
        .map_err(|e| format!("cannot reach the issuer `{}`: {e}", terms.issuer))
    }

    async fn ask_issuer<Q: serde::Serialize>(
        &self,
        terms: &MissionTerms,
        what: &str,
        query: &Q,
    ) -> Step<IssuerReply> {
        let client = self.issuer_client(terms).map_err(Stop::Unknown)?;
        match client
            .post(
                &format!("/mission/{}/{what}", terms.membership),
                query,
                MISSION_CALL_TIMEOUT,
            )
            .await
        {
            Ok(reply) => Ok(reply),
            Err(PeerError::NotSent(e)) => Err(Stop::Unknown(format!(
                "the {what} was not sent to the issuer `{}` ({e}); nothing changed there — re-send the same op id",
                terms.issuer
            ))),
            Err(PeerError::Lost(e)) => Err(Stop::Unknown(format!(
                "the issuer `{}`'s answer to the {what} was lost ({e}); it may have acted — re-send the same op id (never a new one) to get its original answer",
                terms.issuer
            ))),
        }
    }

    /// A claim command of this host at the mission's authority, with id `op`.
    pub(super) async fn claim(
        &self,
        membership: &str,
        op: String,
        command: ClaimCommand,
    ) -> Step<u64> {
        let authority = self
            .authorities
            .pick(Some(membership))
            .map_err(Stop::Refused)?;
        match authority
            .handle(AuthorityCall::Claim { op, command }, None)
            .await
        {
            AuthorityReply::Claim {
                outcome: ClaimOutcome::Succeeded,
                epoch,
                ..
            } => Ok(epoch),
            AuthorityReply::Claim {
                outcome: ClaimOutcome::Unknown,
                detail,
                ..
            } => Err(Stop::Unknown(format!(
                "the authority's answer is unknown ({detail}); re-send the same op id"
            ))),
            AuthorityReply::Claim { detail, .. } => {
                Err(Stop::Refused(format!("the authority refused: {detail}")))
            }
            AuthorityReply::Unknown { reason } => Err(Stop::Unknown(format!(
                "the authority's answer is unknown ({reason}); re-send the same op id"
            ))),
            AuthorityReply::Refused { reason } => Err(Stop::Refused(reason)),
            other => Err(Stop::Refused(format!("the authority answered {other:?}"))),
        }
    }

    // ---- the mission's host ----

    async fn reserve(
        self: &Arc<Self>,
        op: &str,
        mission: &str,
        terms: Option<MissionTerms>,
    ) -> MissionReply {
        let _step = self.steps.lock().await;
        let refused = |reason: String| MissionReply::Refused { reason };
        let mut record = match self.get::<HostRecord>(&self.records, mission) {
            Some(record) => {
                if record.reservation != op {
                    return refused(format!(
                        "mission `{mission}` was reserved under op `{}`: a mission has one reservation; re-send that id",
                        record.reservation
                    ));
                }
                if terms.as_ref().is_some_and(|t| *t != record.terms) {
                    return refused(format!(
                        "mission `{mission}` was reserved with other terms; a mission's signed terms never change"
                    ));
                }
                if record.state == MissionState::Refused {
                    return refused(record.detail.clone());
                }
                if record.state != MissionState::Reserving {
                    return self.reply(&record, Ok(()));
                }
                record
            }
            None => {
                let Some(terms) = terms else {
                    return refused(format!(
                        "host `{}` holds no mission `{mission}` to re-send; reserve it from the files",
                        self.host
                    ));
                };
                if terms.name != mission || terms.host != self.host {
                    return refused(format!(
                        "the terms are of mission `{}` at `{}`, not `{mission}` at `{}`",
                        terms.name, terms.host, self.host
                    ));
                }
                if terms.issuer == self.host {
                    return refused(format!(
                        "mission `{mission}`: host `{}` cannot issue its own allocation",
                        self.host
                    ));
                }
                match deadline_ms(&terms.deadline) {
                    Err(e) => return refused(e),
                    Ok(at) if now_ms() >= at => {
                        return refused(format!(
                            "mission `{mission}`: its deadline {} has passed; nothing reserved, nothing quiesced",
                            terms.deadline
                        ));
                    }
                    Ok(_) => {}
                }
                // Only missions still held count: a finished one's record is kept, its
                // reservation answered again, but it holds nothing.
                let held = self.all().iter().filter(|r| machine::held(r.state)).count();
                if held >= MISSIONS_MAX {
                    return refused(format!(
                        "host `{}` holds MISSIONS_MAX ({MISSIONS_MAX}) missions not yet settled or closed",
                        self.host
                    ));
                }
                // A full disk takes no new reservation; one held before is re-sent
                // above, and returns and recoveries (obligations closing) go on.
                if let Some(reason) = crate::store::usage::full(&self.dir) {
                    return refused(format!("mission `{mission}`: {reason}"));
                }
                let record = HostRecord {
                    terms,
                    reservation: op.to_owned(),
                    state: MissionState::Reserving,
                    epoch: None,
                    allocation: None,
                    consumption: None,
                    settlement: None,
                    closure: None,
                    return_op: None,
                    recover_op: None,
                    recovered: Vec::new(),
                    departing: Vec::new(),
                    detail: "quiesced; reserving at the authority".to_owned(),
                };
                // Quiesced before anything is asked of the authority.
                self.save(&record);
                self.tell_quiesce();
                record
            }
        };
        let stopped = self.reserve_steps(op, &mut record).await;
        if let Err(Stop::Refused(reason) | Stop::Unknown(reason)) = &stopped {
            record.detail = reason.clone();
            self.save(&record);
        }
        self.tell_quiesce();
        self.reply(&record, stopped)
    }

    async fn reserve_steps(&self, op: &str, record: &mut HostRecord) -> Step<()> {
        let terms = record.terms.clone();
        let claim = claim_of(&terms.name);
        let epoch = match record.epoch {
            Some(epoch) => epoch,
            None => {
                let acquired = self
                    .claim(
                        &terms.membership,
                        format!("{op}/claim"),
                        ClaimCommand::Acquire {
                            claim: claim.clone(),
                        },
                    )
                    .await;
                let epoch = match acquired {
                    Ok(epoch) => epoch,
                    // Definitive: nothing is reserved, so nothing stays quiesced.
                    Err(Stop::Refused(reason)) => {
                        record.state = MissionState::Refused;
                        return Err(Stop::Refused(format!(
                            "the reservation of `{claim}` was refused ({reason}); nothing is reserved and the models are released"
                        )));
                    }
                    Err(unknown) => return Err(unknown),
                };
                // The successor named at departure, enrolled on the reservation's claim.
                self.claim(
                    &terms.membership,
                    format!("{op}/successor"),
                    ClaimCommand::EnrollSuccessor {
                        claim: claim.clone(),
                        successor: terms.successor.clone(),
                    },
                )
                .await?;
                // Departure: the successor is enrolled on the host's other claims too,
                // so never-issued recovery can hand over its complete original owners.
                let mut departing = Vec::new();
                for other in self.owned_claims(&terms.membership) {
                    if !self.holds(&terms.membership, &other).await? {
                        continue;
                    }
                    self.claim(
                        &terms.membership,
                        format!("{op}/successor/{:016x}", digest(&other)),
                        ClaimCommand::EnrollSuccessor {
                            claim: other.clone(),
                            successor: terms.successor.clone(),
                        },
                    )
                    .await?;
                    departing.push(other);
                }
                record.departing = departing;
                record.epoch = Some(epoch);
                record.detail = format!(
                    "reserved at the authority: `{claim}` at epoch {epoch}, successor `{}` enrolled; asking the issuer `{}`",
                    terms.successor, terms.issuer
                );
                self.save(record);
                epoch
            }
        };
        let query = IssueQuery {
            terms: terms.clone(),
            epoch,
            reservation: op.to_owned(),
        };
        let allocation = match self.ask_issuer(&terms, "issue", &query).await? {
            IssuerReply::Issued { allocation } => allocation,
            IssuerReply::Refused { reason } => {
                return Err(Stop::Refused(format!("the issuer refused: {reason}")));
            }
            other => {
                return Err(Stop::Refused(format!("the issuer answered {other:?}")));
            }
        };
        if !allocation.verify(&self.custody.peer_keys(&terms.issuer, &terms.issuer_keys))
            || allocation.terms != terms
            || allocation.epoch != epoch
            || allocation.reservation != op
        {
            return Err(Stop::Refused(format!(
                "the allocation from `{}` does not verify with its keys or is not of this reservation; nothing is held",
                terms.issuer
            )));
        }
        let at = deadline_ms(&terms.deadline).map_err(Stop::Refused)?;
        self.processes
            .open_allocation(&claim, terms.units, &terms.deadline, at);
        record.allocation = Some(allocation);
        record.state = MissionState::Active;
        record.detail = format!(
            "active: {} units until {}, consumed offline with `--via {claim}`",
            terms.units, terms.deadline
        );
        self.save(record);
        Ok(())
    }

    async fn return_mission(self: &Arc<Self>, op: &str, mission: &str) -> MissionReply {
        let _step = self.steps.lock().await;
        let Some(mut record) = self.get::<HostRecord>(&self.records, mission) else {
            return MissionReply::Refused {
                reason: format!("host `{}` holds no mission `{mission}`", self.host),
            };
        };
        if let Some(earlier) = &record.return_op
            && earlier != op
        {
            return MissionReply::Refused {
                reason: format!(
                    "mission `{mission}` was returned under op `{earlier}`; re-send that id"
                ),
            };
        }
        if record.state == MissionState::Settled {
            return self.reply(&record, Ok(()));
        }
        let stopped = self.return_steps(op, &mut record).await;
        self.finish(&mut record, stopped)
    }

    async fn return_steps(&self, op: &str, record: &mut HostRecord) -> Step<()> {
        let terms = record.terms.clone();
        let claim = claim_of(&terms.name);
        if record.state != MissionState::Returning {
            let (units, _) = self.units(record);
            machine::returnable(record.state, &units)
                .map_err(|e| Stop::Refused(format!("mission `{}`: {e}", terms.name)))?;
            // New work stops; runs admitted already finish first (bounded).
            self.processes
                .stop_allocation(&claim, &format!("returned under op `{op}`"));
            let quiet = tokio::time::Instant::now() + MISSION_RETURN_QUIET_WAIT;
            loop {
                let (units, _) = self.units(record);
                if units.reserved == 0 {
                    machine::returnable(record.state, &units).map_err(|e| {
                        Stop::Refused(format!(
                            "mission `{}`: {e} (new work stays stopped)",
                            terms.name
                        ))
                    })?;
                    break;
                }
                if tokio::time::Instant::now() >= quiet {
                    return Err(Stop::Refused(format!(
                        "mission `{}`: {} run(s) still running after MISSION_RETURN_QUIET_WAIT ({:?}); new work stays stopped — return again with the same op id",
                        terms.name, units.reserved, MISSION_RETURN_QUIET_WAIT
                    )));
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let allocation = record
                .allocation
                .clone()
                .expect("an active mission holds its allocation");
            let runs: Vec<ConsumedRun> = self
                .processes
                .allocation_runs(&claim)
                .into_iter()
                .map(|run: RunView| ConsumedRun {
                    request: run.request.clone(),
                    process: run.process.clone(),
                    outcome: run.outcome.name().to_owned(),
                    run,
                })
                .collect();
            let mut consumption = Consumption {
                mission: terms.name.clone(),
                host: self.host.clone(),
                epoch: allocation.epoch,
                allocation: allocation.signature.clone(),
                consumed: runs.iter().filter(|r| r.outcome == "succeeded").count() as u64,
                released: runs.iter().filter(|r| r.outcome == "failed").count() as u64,
                runs,
                generation: 0,
                signature: String::new(),
            };
            (consumption.generation, consumption.signature) =
                self.custody.sign_hex(&consumption.signed_bytes());
            record.consumption = Some(consumption);
            record.state = MissionState::Returning;
            record.return_op = Some(op.to_owned());
            record.detail = format!(
                "returning: the signed consumption record is sent to the issuer `{}`",
                terms.issuer
            );
            self.save(record);
        }
        let consumption = record
            .consumption
            .clone()
            .expect("a returning mission holds its record");
        if record.settlement.is_none() {
            let query = ReturnQuery {
                consumption: consumption.clone(),
            };
            let settlement = match self.ask_issuer(&terms, "return", &query).await? {
                IssuerReply::Settled { settlement } => settlement,
                IssuerReply::Refused { reason } => {
                    return Err(Stop::Refused(format!(
                        "the issuer refused the return: {reason} (new work stays stopped)"
                    )));
                }
                other => return Err(Stop::Refused(format!("the issuer answered {other:?}"))),
            };
            if !settlement.verify(&self.custody.peer_keys(&terms.issuer, &terms.issuer_keys))
                || settlement.consumption != consumption.signature
                || settlement.mission != terms.name
            {
                return Err(Stop::Refused(format!(
                    "the settlement from `{}` does not verify or is not of this consumption record",
                    terms.issuer
                )));
            }
            record.settlement = Some(settlement);
            record.detail = "settled by the issuer; releasing the reservation".to_owned();
            self.save(record);
        }
        self.claim(
            &terms.membership,
            format!("{op}/release"),
            ClaimCommand::Release { claim },
        )
        .await?;
        record.state = MissionState::Settled;
        record.detail =
            "settled: the reservation is released and the models take batches from outside again"
                .to_owned();
        self.save(record);
        self.processes.settle_allocation(&claim_of(&terms.name));
        Ok(())
    }

    async fn recover(self: &Arc<Self>, op: &str, mission: &str) -> MissionReply {
        let _step = self.steps.lock().await;
        let Some(mut record) = self.get::<HostRecord>(&self.records, mission) else {
            return MissionReply::Refused {
                reason: format!(
                    "host `{}` holds no mission `{mission}`: a missing reservation cannot use never-issued recovery",
                    self.host
                ),
            };
        };
        if let Some(earlier) = &record.recover_op
            && earlier != op
        {
            return MissionReply::Refused {
                reason: format!(
                    "mission `{mission}` was recovered under op `{earlier}`; re-send that id"
                ),
            };
        }
        let stopped = self.recover_steps(op, &mut record).await;
        self.finish(&mut record, stopped)
    }

    async fn recover_steps(&self, op: &str, record: &mut HostRecord) -> Step<()> {
        let terms = record.terms.clone();
        let claim = claim_of(&terms.name);
        let epoch = machine::recoverable(record.state, record.epoch)
            .map_err(|e| Stop::Refused(format!("mission `{}`: {e}", terms.name)))?;
        if record.closure.is_none() {
            let query = CloseQuery {
                mission: terms.name.clone(),
                epoch,
                reservation: record.reservation.clone(),
                issuer: terms.issuer.clone(),
            };
            let closure = match self.ask_issuer(&terms, "close", &query).await? {
                IssuerReply::Closed { closure } => closure,
                IssuerReply::Refused { reason } => {
                    return Err(Stop::Refused(format!("the issuer refused: {reason}")));
                }
                other => return Err(Stop::Refused(format!("the issuer answered {other:?}"))),
            };
            if !closure.verify(&self.custody.peer_keys(&terms.issuer, &terms.issuer_keys))
                || closure.mission != terms.name
                || closure.host != self.host
                || closure.epoch != epoch
                || closure.successor != terms.successor
            {
                return Err(Stop::Refused(format!(
                    "the closure from `{}` does not verify or is not of this reservation",
                    terms.issuer
                )));
            }
            record.closure = Some(closure);
            record.state = MissionState::ClosedNeverIssued;
            record.recover_op = Some(op.to_owned());
            record.detail = format!(
                "closed as never issued; recovering `{claim}` into the successor `{}`",
                terms.successor
            );
            self.save(record);
        }
        if record.recovered.is_empty() {
            // The successor enrolled at departure takes the reservation's claim: this
            // host is fenced (its epoch is older), also after the deadline.
            let new_epoch = self
                .claim(
                    &terms.membership,
                    format!("{op}/handoff"),
                    ClaimCommand::Handoff {
                        claim: claim.clone(),
                    },
                )
                .await?;
            record.recovered.push((claim.clone(), new_epoch));
            self.save(record);
        }
        // Then every claim the successor was enrolled on at departure, in order.
        for other in record.departing.clone() {
            if record.recovered.iter().any(|(c, _)| *c == other) {
                continue;
            }
            let new_epoch = self
                .claim(
                    &terms.membership,
                    format!("{op}/handoff/{:016x}", digest(&other)),
                    ClaimCommand::Handoff {
                        claim: other.clone(),
                    },
                )
                .await?;
            record.recovered.push((other, new_epoch));
            self.save(record);
        }
        let moved: Vec<String> = record
            .recovered
            .iter()
            .map(|(c, e)| format!("`{c}` at epoch {e}"))
            .collect();
        record.detail = format!(
            "closed as never issued: {} recovered into `{}`; this installation stays quiesced, its earlier obligations stay with their original owners",
            moved.join(", "),
            terms.successor
        );
        self.save(record);
        Ok(())
    }
}
