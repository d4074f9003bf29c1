//! The issuer's side of a mission: what it signs — the allocation of a reservation
//! the authority shows, the settlement of a returned consumption record, the
//! never-issued closure — each decided by `machine`, journaled and fsynced before it
//! is answered, one decision at a time.

use super::api::{
    Allocation, CloseQuery, Closure, IssueQuery, IssuerReply, ReturnQuery, Settlement, claim_of,
};
use super::machine::{self, Decision, IssuerRecord};
use super::service::{Missions, deadline_ms};
use crate::authority::api::AuthorityReply;
use crate::custody::Signed;
use crate::limits::MISSIONS_MAX;
use crate::processes::allocations::now_ms;
use crate::store::Failpoint;

impl Missions {
    // ---- the issuer ----

    /// Whether the authority shows `claim` held by `host` at `epoch` (after a read
    /// barrier): the reservation the issuer acts on. Its successor, when enrolled.
    async fn reservation(
        &self,
        membership: &str,
        claim: &str,
        host: &str,
        epoch: u64,
    ) -> Result<Option<String>, String> {
        match self.show(membership, claim).await? {
            AuthorityReply::Shown { claim: Some(c), .. }
                if c.owner == host
                    && c.epoch == epoch
                    && c.state == crate::authority::claims::ClaimState::Held =>
            {
                Ok(c.successor)
            }
            AuthorityReply::Shown { claim: Some(c), .. } => Err(format!(
                "the authority shows `{claim}` {} by `{}` at epoch {}, not held by `{host}` at epoch {epoch}",
                match c.state {
                    crate::authority::claims::ClaimState::Held => "held",
                    crate::authority::claims::ClaimState::Released => "released",
                },
                c.owner,
                c.epoch
            )),
            AuthorityReply::Shown { claim: None, .. } => {
                Err(format!("the authority holds no reservation `{claim}`"))
            }
            AuthorityReply::Unknown { reason } => Err(format!(
                "the authority cannot confirm the reservation now ({reason}); nothing was signed"
            )),
            other => Err(format!("the authority answered {other:?}")),
        }
    }

    fn issuer_record(&self, mission: &str) -> Option<IssuerRecord> {
        self.get(&self.issued, mission)
    }

    fn save_issued(&self, mission: &str, record: &IssuerRecord) {
        self.put(
            &self.issued,
            mission,
            record,
            "journaling an issuer's mission",
        );
    }

    /// What this host signed as issuer, by mission.
    pub fn issued(&self) -> Vec<(String, IssuerRecord)> {
        self.issued
            .iter()
            .filter_map(|g| g.into_inner().ok())
            .filter_map(|(k, v)| {
                Some((
                    String::from_utf8_lossy(&k).into_owned(),
                    serde_json::from_slice(&v).ok()?,
                ))
            })
            .collect()
    }

    /// `POST /mission/M/issue` from `peer`: its allocation, once. `None`: the reply is
    /// lost (failpoint).
    pub async fn serve_issue(&self, peer: &str, query: IssueQuery) -> Option<IssuerReply> {
        let refused = |reason: String| Some(IssuerReply::Refused { reason });
        let terms = &query.terms;
        if terms.issuer != self.host {
            return refused(format!(
                "mission `{}` names `{}` as its issuer, not `{}`",
                terms.name, terms.issuer, self.host
            ));
        }
        if terms.host != peer {
            return refused(format!(
                "mission `{}` is `{}`'s, not `{peer}`'s: a host reserves its own missions only",
                terms.name, terms.host
            ));
        }
        let claim = claim_of(&terms.name);
        if let Err(reason) = self
            .reservation(&terms.membership, &claim, peer, query.epoch)
            .await
        {
            return refused(format!("mission `{}`: {reason}", terms.name));
        }
        let _deciding = self.deciding.lock().await;
        let mut record = self.issuer_record(&terms.name).unwrap_or_default();
        let allocation = match machine::issue(&record, &query) {
            Decision::Same(allocation) => allocation,
            Decision::Refuse(reason) => return refused(reason),
            Decision::Sign => {
                match deadline_ms(&terms.deadline) {
                    Err(e) => return refused(e),
                    Ok(at) if now_ms() >= at => {
                        return refused(format!(
                            "mission `{}`: its deadline {} has passed; nothing issued",
                            terms.name, terms.deadline
                        ));
                    }
                    Ok(_) => {}
                }
                // Only missions still open count (issued, neither settled nor closed).
                let open = self
                    .issued()
                    .iter()
                    .filter(|(_, r)| super::machine::issuer_holds(r))
                    .count();
                if open >= MISSIONS_MAX {
                    return refused(format!(
                        "issuer `{}` holds MISSIONS_MAX ({MISSIONS_MAX}) missions neither settled nor closed",
                        self.host
                    ));
                }
                // A full disk issues nothing new; an allocation issued before is
                // still answered (`Decision::Same` above).
                if let Some(reason) = crate::store::usage::full(&self.dir) {
                    return refused(format!("mission `{}`: {reason}", terms.name));
                }
                let mut allocation = Allocation {
                    terms: query.terms.clone(),
                    claim,
                    epoch: query.epoch,
                    reservation: query.reservation.clone(),
                    generation: 0,
                    signature: String::new(),
                };
                (allocation.generation, allocation.signature) =
                    self.custody.sign_hex(&allocation.signed_bytes());
                record.allocation = Some(allocation.clone());
                self.save_issued(&terms.name, &record);
                allocation
            }
        };
        if self
            .failpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reach(Failpoint::MissionIssueReply)
        {
            return None;
        }
        Some(IssuerReply::Issued { allocation })
    }

    /// `POST /mission/M/return` from `peer`: the settlement of its consumption record.
    pub async fn serve_return(&self, peer: &str, query: ReturnQuery) -> IssuerReply {
        let refused = |reason: String| IssuerReply::Refused { reason };
        let consumption = &query.consumption;
        let Some(record) = self.issuer_record(&consumption.mission) else {
            return refused(format!(
                "issuer `{}` never issued mission `{}`",
                self.host, consumption.mission
            ));
        };
        let Some(allocation) = record.allocation.clone() else {
            return refused(format!(
                "mission `{}` was never issued: there is nothing to return",
                consumption.mission
            ));
        };
        if allocation.terms.host != peer {
            return refused(format!(
                "mission `{}` is `{}`'s: only its host returns it",
                consumption.mission, allocation.terms.host
            ));
        }
        // The host's keys as its membership last published them: a rotation since
        // the allocation is learned, never a replaced identity.
        let keys = &self
            .custody
            .peer_keys(&allocation.terms.host, &allocation.terms.host_keys);
        let verified = consumption.verify(keys)
            && consumption.runs.iter().all(|r| {
                r.run.verify(keys)
                    && r.run.request == r.request
                    && r.run.outcome.name() == r.outcome
                    && r.run.caller == peer
                    && r.run.receiver == peer
                    && r.run.grant.as_deref() == Some(allocation.claim.as_str())
            });
        if record.settlement.is_none() {
            // The authority joins: the reservation still stands, unfenced.
            if let Err(reason) = self
                .reservation(
                    &allocation.terms.membership,
                    &allocation.claim,
                    peer,
                    allocation.epoch,
                )
                .await
            {
                return refused(format!("mission `{}`: {reason}", consumption.mission));
            }
        }
        let _deciding = self.deciding.lock().await;
        let mut record = self.issuer_record(&consumption.mission).unwrap_or(record);
        match machine::settle(&record, consumption, verified) {
            Decision::Same(settlement) => IssuerReply::Settled { settlement },
            Decision::Refuse(reason) => refused(reason),
            Decision::Sign => {
                let mut settlement = Settlement {
                    mission: consumption.mission.clone(),
                    host: peer.to_owned(),
                    issuer: self.host.clone(),
                    epoch: allocation.epoch,
                    allocated: allocation.terms.units,
                    consumed: consumption.consumed,
                    released: consumption.released,
                    unused: allocation.terms.units - consumption.consumed,
                    consumption: consumption.signature.clone(),
                    generation: 0,
                    signature: String::new(),
                };
                (settlement.generation, settlement.signature) =
                    self.custody.sign_hex(&settlement.signed_bytes());
                record.settlement = Some(settlement.clone());
                self.save_issued(&consumption.mission, &record);
                IssuerReply::Settled { settlement }
            }
        }
    }

    /// `POST /mission/M/close` from `peer`: never-issued recovery, once.
    pub async fn serve_close(
        &self,
        peer: &str,
        membership: &str,
        query: CloseQuery,
    ) -> IssuerReply {
        let refused = |reason: String| IssuerReply::Refused { reason };
        let claim = claim_of(&query.mission);
        let successor = match self
            .reservation(membership, &claim, peer, query.epoch)
            .await
        {
            Ok(Some(successor)) => successor,
            Ok(None) => {
                return refused(format!(
                    "mission `{}`: no successor was enrolled at departure",
                    query.mission
                ));
            }
            Err(reason) => {
                return refused(format!(
                    "mission `{}`: {reason}: a missing reservation cannot use never-issued recovery",
                    query.mission
                ));
            }
        };
        let _deciding = self.deciding.lock().await;
        let mut record = self.issuer_record(&query.mission).unwrap_or_default();
        match machine::close(&record, &query, &self.host) {
            Decision::Same(closure) => IssuerReply::Closed { closure },
            Decision::Refuse(reason) => refused(reason),
            Decision::Sign => {
                let mut closure = Closure {
                    mission: query.mission.clone(),
                    host: peer.to_owned(),
                    issuer: self.host.clone(),
                    successor,
                    epoch: query.epoch,
                    reservation: query.reservation.clone(),
                    generation: 0,
                    signature: String::new(),
                };
                (closure.generation, closure.signature) =
                    self.custody.sign_hex(&closure.signed_bytes());
                record.closure = Some(closure.clone());
                self.save_issued(&query.mission, &record);
                IssuerReply::Closed { closure }
            }
        }
    }
}
