//! A snapshot read into this voter: whole into memory (a voter without a database),
//! or into its store in bounded batches under the `installing` mark.

use std::collections::BTreeMap;

use serde::Serialize;

use super::super::answers::{Answers, MemoryAnswers, Retained};
use super::super::claims::{Answer, Claim, ClaimState, Claims, Command};
use super::super::snapshot::{self, Heading, Sink, SnapshotData};
use super::super::types::{LogId, StorageError, StoredMembership};
use super::{AnswersHome, INSTALLING, MachineState, Store, store_err};
use crate::limits::SNAPSHOT_INSTALL_BATCH_RECORDS_MAX;

/// A snapshot read whole into memory (a voter without a database; the tests).
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct SnapshotState {
    pub(super) last_applied: Option<LogId>,
    pub(super) last_membership: StoredMembership,
    pub(super) claims: BTreeMap<String, Claim>,
    pub(super) answers: MemoryAnswers,
}

impl Sink for SnapshotState {
    fn claim(&mut self, claim: Claim) -> Result<(), String> {
        self.claims.insert(claim.name.clone(), claim);
        Ok(())
    }

    fn answer(&mut self, op: String, command: Command, answer: Answer) -> Result<(), String> {
        self.answers.retain(&op, &command, &answer);
        Ok(())
    }

    fn forgotten(&mut self, digest: u64) -> Result<(), String> {
        self.answers.insert_forgotten(digest);
        Ok(())
    }
}

impl SnapshotState {
    /// The snapshot in `data`, read whole.
    pub(super) fn read(data: &SnapshotData) -> Result<(Heading, SnapshotState), String> {
        let mut state = SnapshotState::default();
        let heading = snapshot::read(data, &mut state)?;
        state.last_applied = heading.last_applied;
        state.last_membership = heading.last_membership.clone();
        Ok((heading, state))
    }

    pub(super) fn in_memory(self) -> MachineState {
        MachineState {
            last_applied: self.last_applied,
            last_membership: self.last_membership,
            claims: Claims::from_claims(self.claims.into_values()),
            answers: AnswersHome::Memory(self.answers),
        }
    }
}

/// A snapshot's records, read only to check them (counts, digest, every line decoded).
pub(super) struct Checking;

impl Sink for Checking {
    fn claim(&mut self, _: Claim) -> Result<(), String> {
        Ok(())
    }

    fn answer(&mut self, _: String, _: Command, _: Answer) -> Result<(), String> {
        Ok(())
    }

    fn forgotten(&mut self, _: u64) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: `(records a batch, batches after which the install stops)`.
    pub(super) static INSTALL_TRIAL: std::cell::Cell<Option<(usize, usize)>> =
        const { std::cell::Cell::new(None) };
}

/// A snapshot being installed into a store as it is read, in batches of at most
/// `SNAPSHOT_INSTALL_BATCH_RECORDS_MAX` records (so in bounded memory): first
/// `installing` — the snapshot file's name — is written to `sm-meta` and fsynced, then
/// what was stored is removed, then the snapshot's records written, then the state's
/// place written and the mark removed, fsynced. A start that finds the mark installs
/// the named file again before anything else (`Machine::open`): a store a stop left
/// part-way is never taken for a whole one.
struct Installing<'a> {
    store: &'a Store,
    batch: fjall::OwnedWriteBatch,
    in_batch: usize,
    batches: usize,
    held: Vec<Claim>,
    released: u64,
    answers: u64,
}

impl<'a> Installing<'a> {
    /// Marks `store` as being replaced by the snapshot file `name`, durably, then
    /// removes what it holds.
    /// `part`: the `snapshot-install-part` failpoint, as armed (it aborts once the
    /// claims are removed, the rest of the store still there).
    fn begin(
        store: &'a Store,
        name: &str,
        part: Option<crate::store::failpoints::Action>,
    ) -> Result<Installing<'a>, String> {
        let e = |e: fjall::Error| e.to_string();
        store.meta.insert(INSTALLING, name).map_err(e)?;
        store
            .database
            .persist(fjall::PersistMode::SyncAll)
            .map_err(e)?;
        let mut installing = Installing {
            store,
            batch: store.database.batch(),
            in_batch: 0,
            batches: 0,
            held: Vec::new(),
            released: 0,
            answers: 0,
        };
        for keyspace in [
            &store.claims,
            &store.held,
            &store.answers.answers,
            &store.answers.order,
            &store.answers.forgotten,
        ] {
            for guard in keyspace.iter() {
                installing.batch.remove(keyspace, guard.key().map_err(e)?);
                installing.counted()?;
            }
            if part == Some(crate::store::failpoints::Action::Abort) {
                installing.flush()?;
                eprintln!("gridd: failpoint snapshot-install-part: aborting");
                std::process::abort();
            }
        }
        for guard in store.meta.iter() {
            let key = guard.key().map_err(e)?;
            if &*key != INSTALLING.as_bytes() {
                installing.batch.remove(&store.meta, key);
                installing.counted()?;
            }
        }
        Ok(installing)
    }

    /// Counts one record written into the batch; commits the batch once full.
    fn counted(&mut self) -> Result<(), String> {
        #[cfg(not(test))]
        let (records, stop) = (SNAPSHOT_INSTALL_BATCH_RECORDS_MAX, usize::MAX);
        #[cfg(test)]
        let (records, stop) = INSTALL_TRIAL
            .get()
            .unwrap_or((SNAPSHOT_INSTALL_BATCH_RECORDS_MAX, usize::MAX));
        self.in_batch += 1;
        if self.in_batch < records {
            return Ok(());
        }
        self.flush()?;
        if self.batches == stop {
            return Err(format!("stopped after {stop} batches (a trial)"));
        }
        Ok(())
    }

    /// Commits the batch written so far.
    fn flush(&mut self) -> Result<(), String> {
        let full = std::mem::replace(&mut self.batch, self.store.database.batch());
        full.commit().map_err(|e| e.to_string())?;
        self.in_batch = 0;
        self.batches += 1;
        Ok(())
    }

    /// Writes where the state stands and removes the mark, durably; the state in
    /// memory it leaves: the held claims, the answers where the store holds them.
    fn commit(mut self, heading: &Heading) -> Result<MachineState, StorageError> {
        let retained = Retained {
            len: self.answers,
            oldest: 0,
        };
        self.store.put_meta(
            &mut self.batch,
            heading.last_applied,
            &heading.last_membership,
            retained,
            self.released,
        )?;
        self.batch.remove(&self.store.meta, INSTALLING);
        self.batch.commit().map_err(store_err)?;
        self.store
            .database
            .persist(fjall::PersistMode::SyncAll)
            .map_err(store_err)?;
        Ok(MachineState {
            last_applied: heading.last_applied,
            last_membership: heading.last_membership.clone(),
            claims: Claims::from_parts(self.held, self.released),
            answers: AnswersHome::Stored(retained),
        })
    }
}

/// Replaces what `store` holds with the snapshot `data` — the file `name` of the
/// snapshots directory, checked already — in batches (see [`Installing`]); `part` is
/// the `snapshot-install-part` failpoint, as armed.
pub(super) fn install_into(
    store: &Store,
    data: &SnapshotData,
    name: &str,
    part: Option<crate::store::failpoints::Action>,
) -> Result<MachineState, String> {
    let mut installing = Installing::begin(store, name, part)?;
    let heading = snapshot::read(data, &mut installing)?;
    installing.commit(&heading).map_err(|e| e.to_string())
}

impl Sink for Installing<'_> {
    fn claim(&mut self, claim: Claim) -> Result<(), String> {
        self.store.put_claim(&mut self.batch, &claim)?;
        match claim.state {
            ClaimState::Held => self.held.push(claim),
            ClaimState::Released => self.released += 1,
        }
        self.counted()
    }

    fn answer(&mut self, op: String, command: Command, answer: Answer) -> Result<(), String> {
        self.store
            .answers
            .put(&mut self.batch, self.answers, &op, command, answer)?;
        self.answers += 1;
        self.counted()
    }

    fn forgotten(&mut self, digest: u64) -> Result<(), String> {
        self.batch
            .insert(&self.store.answers.forgotten, digest.to_be_bytes(), []);
        self.counted()
    }
}
