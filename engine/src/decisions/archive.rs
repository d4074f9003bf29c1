//! Storage lasts (issue 28) for decisions: a closed decision (applied or failed with
//! its receipt, declined, rejected, expired) and each ballot or gate a host signed
//! move to the installation's shelf past `retain hot-days`, with the host's answers;
//! read back from there whole (`inspect decision --id`, a re-sent open, ballot or
//! gate op answers the original), never opened, counted or applied again. A decision
//! not closed never leaves the hot store.

use super::api::{DecisionRecord, DecisionState};
use super::machine;
use super::service::{CAST_PREFIX, Decisions, RECORD_PREFIX};
use crate::store::Failpoint;
use crate::store::high_water::Signer;
use crate::store::shelf::{Gathered, Room, time_key};

/// When `record` closed, if it has: what lists it for the archive (a time it keeps,
/// so listing it again is the same key).
pub(super) fn closed_at(record: &DecisionRecord, now: u64) -> Option<u64> {
    if let Some(applied) = &record.applied {
        return Some(applied.applied_ms);
    }
    match machine::state(record, now) {
        DecisionState::Declined => record.gate.as_ref().map(|g| g.gated_ms),
        DecisionState::Expired => Some(record.opened.expires_ms),
        DecisionState::Rejected => Some(
            record
                .ballots
                .iter()
                .map(|b| b.cast_ms)
                .max()
                .unwrap_or(record.opened.opened_ms),
        ),
        _ => None,
    }
}

impl Decisions {
    /// Moves the decisions closed before `cutoff`, then the documents signed before
    /// it, to the shelf, in at most `segments_max` segments signed by `sign` (the
    /// host's archive pass). A decision that expired closed with no write: it is listed
    /// here first, at its expiry.
    pub fn archive(
        &self,
        cutoff: u64,
        patient: bool,
        segments_max: usize,
        sign: &Signer,
    ) -> Result<(Gathered, Gathered), String> {
        {
            let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            let now = self.now();
            let mut write = self.database.batch();
            let mut any = false;
            for guard in self.records.iter() {
                let (key, value) = guard
                    .into_inner()
                    .unwrap_or_else(|e| crate::store::fatal(&self.dir, "reading decisions", e));
                let record: DecisionRecord = serde_json::from_slice(&value)
                    .unwrap_or_else(|e| crate::store::fatal(&self.dir, "decoding a decision", e));
                let listed = time_key(record.opened.expires_ms, &String::from_utf8_lossy(&key));
                let known = self
                    .records_by_time
                    .contains_key(&listed)
                    .unwrap_or_else(|e| crate::store::fatal(&self.dir, "reading decisions", e));
                if !known && machine::state(&record, now) == DecisionState::Expired {
                    write.insert(&self.records_by_time, listed, []);
                    any = true;
                }
            }
            if any {
                self.database
                    .commit_or_stop(write, &self.dir, "listing expired decisions");
            }
        }
        let before_index = || {
            self.failpoints
                .abort_if_armed(Failpoint::ArchiveBeforeIndex)
        };
        let room = |prefix, keyspaces, what| Room {
            database: &self.database,
            host: &self.host,
            dir: &self.dir,
            prefix,
            keyspaces,
            what,
        };
        let records = [&self.records, &self.records_by_time];
        let closed = self.retention.archive_room(
            room(RECORD_PREFIX, records, "decisions"),
            (cutoff, patient, segments_max),
            sign,
            before_index,
        )?;
        let left = segments_max.saturating_sub(closed.segments as usize);
        let cast = [&self.cast, &self.cast_by_time];
        let casts = self.retention.archive_room(
            room(CAST_PREFIX, cast, "signed ballots and gates"),
            (cutoff, patient, left),
            sign,
            before_index,
        )?;
        Ok((closed, casts))
    }
}
