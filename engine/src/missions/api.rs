//! The `missions` profile's wire types: the terms a reservation carries, the four
//! signed documents (allocation, consumption record, settlement, never-issued
//! closure), a mission as its host holds it, control calls (`Call::Mission`) and the
//! issuer's service (`POST /mission/M/issue|return|close`). Fields are only ever added.

use serde::{Deserialize, Serialize};

use crate::custody::{Manifest, Signed};

/// The claim a mission's reservation holds at the authority.
pub fn claim_of(mission: &str) -> String {
    format!("mission:{mission}")
}

/// What the files say of a mission, with what its host needs to reach its issuer:
/// reconcile sends it with the reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissionTerms {
    pub name: String,
    pub host: String,
    pub units: u64,
    /// RFC 3339, as the file wrote it.
    pub deadline: String,
    pub successor: String,
    pub issuer: String,
    /// The issuer's listen address.
    pub issuer_address: String,
    /// The membership the host, its issuer and their authority share.
    pub membership: String,
    /// The issuer's public keys: the allocation, settlement and closure verify with
    /// them.
    pub issuer_keys: Manifest,
    /// The host's public keys: its consumption record and run outcomes verify with
    /// them.
    pub host_keys: Manifest,
}

impl MissionTerms {
    /// The terms without the keys and address, as documents sign them.
    fn text(&self) -> String {
        format!(
            "mission {}\nhost {}\nissuer {}\nunits {}\ndeadline {}\nsuccessor {}\nmembership {}\n",
            self.name,
            self.host,
            self.issuer,
            self.units,
            self.deadline,
            self.successor,
            self.membership
        )
    }
}

/// The issuer's signed allocation: `units` execution units for `host`'s own runs
/// until `deadline`, fencing the reservation's claim at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    pub terms: MissionTerms,
    /// `mission:NAME` and the epoch the host holds it at.
    pub claim: String,
    pub epoch: u64,
    /// The reservation's operation id.
    pub reservation: String,
    pub generation: u32,
    pub signature: String,
}

impl Signed for Allocation {
    fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-mission-allocation/1\n{}claim {}\nepoch {}\nreservation {}\n",
            self.terms.text(),
            self.claim,
            self.epoch,
            self.reservation
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

/// One run charged to a mission, as its consumption record lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumedRun {
    pub request: String,
    pub process: String,
    /// `succeeded` (its unit consumed) or `failed` (released).
    pub outcome: String,
    /// The run's outcome as its receiver (the mission's host) signed it.
    pub run: crate::processes::api::RunView,
}

/// The host's signed consumption record, sent on return: every run charged to the
/// allocation with its signed outcome, none unknown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Consumption {
    pub mission: String,
    pub host: String,
    pub epoch: u64,
    /// The allocation's signature, binding the record to it.
    pub allocation: String,
    pub consumed: u64,
    pub released: u64,
    pub runs: Vec<ConsumedRun>,
    pub generation: u32,
    pub signature: String,
}

impl Signed for Consumption {
    fn signed_bytes(&self) -> Vec<u8> {
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|r| {
                format!(
                    "run {} {} {} {}\n",
                    r.request,
                    r.process,
                    r.outcome,
                    r.run
                        .signature
                        .as_ref()
                        .map_or("-", |s| s.signature.as_str())
                )
            })
            .collect();
        format!(
            "grid-mission-consumption/1\nmission {}\nhost {}\nepoch {}\nallocation {}\nconsumed {}\nreleased {}\n{}",
            self.mission,
            self.host,
            self.epoch,
            self.allocation,
            self.consumed,
            self.released,
            runs.concat()
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

/// The issuer's signed settlement of a returned mission: allocated = consumed +
/// unused, the consumption record it joined named by its signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    pub mission: String,
    pub host: String,
    pub issuer: String,
    pub epoch: u64,
    pub allocated: u64,
    pub consumed: u64,
    /// Runs that failed: their units released.
    pub released: u64,
    /// Units never consumed: they return to nobody (a mission never reopens).
    pub unused: u64,
    /// The consumption record's signature.
    pub consumption: String,
    pub generation: u32,
    pub signature: String,
}

impl Signed for Settlement {
    fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-mission-settlement/1\nmission {}\nhost {}\nissuer {}\nepoch {}\nallocated {}\nconsumed {}\nreleased {}\nunused {}\nconsumption {}\n",
            self.mission,
            self.host,
            self.issuer,
            self.epoch,
            self.allocated,
            self.consumed,
            self.released,
            self.unused,
            self.consumption
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

/// The issuer's signed proof that a reservation never received execution rights: it
/// issued no allocation for it, and never will.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Closure {
    pub mission: String,
    pub host: String,
    pub issuer: String,
    pub successor: String,
    pub epoch: u64,
    pub reservation: String,
    pub generation: u32,
    pub signature: String,
}

impl Signed for Closure {
    fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-mission-never-issued/1\nmission {}\nhost {}\nissuer {}\nsuccessor {}\nepoch {}\nreservation {}\n",
            self.mission, self.host, self.issuer, self.successor, self.epoch, self.reservation
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

/// Where a mission stands at its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissionState {
    /// Quiesced; the reservation is sent and its allocation not received.
    Reserving,
    /// The signed allocation is held: runs consume it offline.
    Active,
    /// Active, and new work stops at a signed limit (units or deadline).
    Exhausted,
    /// Returned: new work stopped, the consumption record sent, not settled yet.
    Returning,
    /// The issuer settled it and the reservation is released: the model is released
    /// from quiescence.
    Settled,
    /// The issuer proved it never issued the allocation; the installation's claims
    /// are recovered into the successor.
    ClosedNeverIssued,
    /// The authority refused the reservation (its claim is another's): nothing was
    /// reserved, and the models are released again.
    Refused,
}

impl MissionState {
    pub fn name(self) -> &'static str {
        match self {
            MissionState::Reserving => "reserving",
            MissionState::Active => "active",
            MissionState::Exhausted => "exhausted",
            MissionState::Returning => "returning",
            MissionState::Settled => "settled",
            MissionState::ClosedNeverIssued => "closed-never-issued",
            MissionState::Refused => "refused",
        }
    }
}

/// A mission's units as its host's run journal holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissionUnits {
    pub allocated: u64,
    pub consumed: u64,
    pub reserved: u64,
    pub unknown: u64,
    /// Released by failed runs (they may be reserved again while active).
    pub released: u64,
    pub available: u64,
}

/// A mission as its host holds it (`gridctl inspect mission`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MissionView {
    pub name: String,
    pub host: String,
    pub state: MissionState,
    pub units: MissionUnits,
    pub deadline: String,
    /// The deadline has passed (now, at the host): no new work, ever; it reopens
    /// nothing.
    #[serde(default)]
    pub expired: bool,
    pub successor: String,
    pub issuer: String,
    /// The models of the host stay quiesced (no batch from outside) while true.
    pub quiesced: bool,
    /// The reservation's claim and the epoch it was acquired at.
    pub claim: String,
    pub epoch: Option<u64>,
    pub reservation: String,
    #[serde(default)]
    pub return_op: Option<String>,
    #[serde(default)]
    pub recover_op: Option<String>,
    /// Why new work stops, when it does.
    #[serde(default)]
    pub limit: Option<String>,
    pub allocation: Option<Allocation>,
    pub consumption: Option<Consumption>,
    pub settlement: Option<Settlement>,
    pub closure: Option<Closure>,
    /// Claims handed to the successor by never-issued recovery, with their new epochs.
    #[serde(default)]
    pub recovered: Vec<(String, u64)>,
    /// For people: the last step and what it waits for.
    pub detail: String,
    /// The terms as reserved (with the keys the documents verify with).
    pub terms: MissionTerms,
}

/// A control call to the host's `missions` profile (`Call::Mission`).
// One per call, moved once: its size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "kebab-case")]
pub enum MissionCall {
    /// Quiesce and reserve (`+ mission`): the terms, or none to re-send the stored
    /// reservation of `mission` with its id.
    Reserve {
        op: String,
        mission: String,
        #[serde(default)]
        terms: Option<MissionTerms>,
    },
    /// Return an active mission: its signed consumption record to the issuer, then
    /// the reservation released.
    Return {
        op: String,
        mission: String,
    },
    /// Never-issued recovery: the issuer's proof that no allocation was issued, then
    /// the reservation's claim handed to the successor.
    Recover {
        op: String,
        mission: String,
    },
    Inspect {
        mission: String,
    },
    List,
}

/// How a mission call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum MissionReply {
    /// The mission as it stands after the call.
    Mission {
        mission: Box<MissionView>,
    },
    Missions {
        host: String,
        missions: Vec<MissionView>,
    },
    /// Not known whether the step was taken: re-send the same op id.
    Unknown {
        mission: Box<MissionView>,
        reason: String,
    },
    Refused {
        reason: String,
    },
}

/// `POST /mission/M/issue`: the host asks its issuer for the allocation of the
/// reservation it holds at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssueQuery {
    pub terms: MissionTerms,
    pub epoch: u64,
    pub reservation: String,
}

/// `POST /mission/M/return`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReturnQuery {
    pub consumption: Consumption,
}

/// `POST /mission/M/close`: never-issued recovery of the reservation at `epoch`, asked
/// of `issuer`, the issuer the terms name (any other host refuses: it issued nothing
/// and proves nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseQuery {
    pub mission: String,
    pub epoch: u64,
    pub reservation: String,
    pub issuer: String,
}

/// The issuer's replies.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum IssuerReply {
    Issued { allocation: Allocation },
    Settled { settlement: Settlement },
    Closed { closure: Closure },
    Refused { reason: String },
}
