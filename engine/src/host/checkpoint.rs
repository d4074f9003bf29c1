//! The model runtime's checkpoints (room `model` of `store::checkpoint`): a model's
//! cells are pure functions of its inputs, so its state at batch N is its generation
//! and the value of every input a batch of that generation set, and of every matrix a
//! version was applied to (issue 34). Opening applies that state and replays only the
//! batches after N; the batches at or below N,
//! and every batch of an earlier generation, are then purged — nothing else reads
//! them (publications, fed positions and answers are kept elsewhere).

use super::*;
use crate::limits::{
    CHECKPOINT_PURGE_ENTRIES_MAX, DELIVERY_CHECKPOINT_POSITIONS_MAX, INBOX_HOT_ENTRIES_MAX,
    MODEL_CHECKPOINT_BATCHES_MAX,
};
use crate::store::Failpoint;
use crate::store::checkpoint::Checkpoint;

/// The room's name in the checkpoints keyspace.
pub(super) const ROOM: &str = "model";

/// A model's state at a batch, as its checkpoint holds it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ModelState {
    pub generation: u32,
    /// Every input a batch of this generation set (a carried value included), with
    /// its value after the checkpoint's batch.
    pub inputs: Vec<(String, f64)>,
    /// Every matrix a version of its mapping was applied to, with that value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matrices: Vec<super::matrices::CheckpointedMatrix>,
}

/// One model checkpointed: its name, the batch it covers and the batches purged.
pub(super) struct Taken {
    pub model: String,
    pub position: u64,
    pub purged: usize,
}

impl Host {
    /// Checkpoints every model with at least `at_least` (≥ 1) batches past its last
    /// checkpoint, then purges what each covers; with `purge_covered`, also purges
    /// what an earlier checkpoint covers and a stop left (reported at that
    /// checkpoint's position). A storage failure stops the host (`commit_durably`); a
    /// model whose state cannot be written is left to replay.
    pub(super) fn checkpoint_models(&mut self, at_least: u64, purge_covered: bool) -> Vec<Taken> {
        let names: Vec<String> = self.models.keys().cloned().collect();
        let mut taken = Vec::new();
        for name in names {
            let Some(m) = self.models.get(&name) else {
                continue;
            };
            let (generation, checkpointed) = (m.record.generation, m.checkpointed);
            if m.batches >= checkpointed.saturating_add(at_least.max(1)) {
                taken.extend(self.checkpoint_model(&name));
            } else if purge_covered && checkpointed > 0 {
                let purged = self.purge_batches(&name, generation, checkpointed);
                if purged > 0 {
                    taken.push(Taken {
                        model: name,
                        position: checkpointed,
                        purged,
                    });
                }
            }
        }
        taken
    }

    /// Called by the composition root every `CHECKPOINT_CHECK_INTERVAL`.
    pub fn checkpoint_due(&mut self) {
        self.purge_tags_due();
        for bounded in
            self.bound_deliveries(DELIVERY_CHECKPOINT_POSITIONS_MAX, INBOX_HOT_ENTRIES_MAX)
        {
            tracing::info!(
                route = bounded.route,
                checkpoint = bounded.checkpoint,
                purged = bounded.purged,
                held_from = bounded.held_from,
                "route journal bounded"
            );
        }
        for taken in self.checkpoint_models(MODEL_CHECKPOINT_BATCHES_MAX, false) {
            tracing::info!(
                model = taken.model,
                batch = taken.position,
                purged = taken.purged,
                "model checkpointed"
            );
        }
    }

    fn checkpoint_model(&mut self, name: &str) -> Option<Taken> {
        let installed = self.models.get(name)?;
        let position = installed.batches;
        let mut inputs = Vec::with_capacity(installed.set.len());
        for input in &installed.set {
            match installed.runtime.value(input) {
                Some(Value::Number(x)) => inputs.push((input.clone(), x)),
                other => {
                    tracing::warn!(model = name, input, value = ?other, "no checkpoint: a set input holds no number");
                    return None;
                }
            }
        }
        let state = ModelState {
            generation: installed.record.generation,
            inputs,
            matrices: Host::checkpointed_matrices(installed),
        };
        let checkpoint = Checkpoint {
            position,
            at_ms: crate::store::now_ms(),
            state: serde_json::to_vec(&state).expect("a model state encodes"),
        };
        self.failpoints.reach(Failpoint::CheckpointBeforeWrite);
        let mut write = self.database.batch();
        self.checkpoints.stage(&mut write, ROOM, name, &checkpoint);
        self.commit_durably(write, "staging a model checkpoint");
        self.failpoints.reach(Failpoint::CheckpointBeforeInstall);
        let mut write = self.database.batch();
        if let Err(reason) = self.checkpoints.install(&mut write, ROOM, name) {
            fatal(&self.dir, "installing a model checkpoint", reason);
        }
        self.commit_durably(write, "installing a model checkpoint");
        if let Some(installed) = self.models.get_mut(name) {
            installed.checkpointed = position;
        }
        self.failpoints.reach(Failpoint::CheckpointBeforePurge);
        let purged = self.purge_batches(name, state.generation, position);
        Some(Taken {
            model: name.to_owned(),
            position,
            purged,
        })
    }

    /// Removes (at most `CHECKPOINT_PURGE_ENTRIES_MAX`) batches of `name` an installed
    /// checkpoint at `position` of `generation` covers: the generation's batches up to
    /// `position` and every batch of an earlier generation.
    fn purge_batches(&self, name: &str, generation: u32, position: u64) -> usize {
        let prefix = Key::text(name).sep().bytes();
        let mut write = self.database.batch();
        let mut purged = 0;
        for guard in self.batches.prefix(&prefix) {
            if purged == CHECKPOINT_PURGE_ENTRIES_MAX {
                break;
            }
            let Ok(key) = guard.key() else {
                break;
            };
            let Some((held, number)) = batch_position(&key[prefix.len()..]) else {
                continue;
            };
            if held > generation || (held == generation && number > position) {
                break; // keys sort by generation, then number
            }
            write.remove(&self.batches, key.to_vec());
            purged += 1;
        }
        if purged > 0 {
            self.commit_durably(write, "purging batches a checkpoint covers");
            crate::metrics::checkpoint_purged(purged as u64);
        }
        purged
    }
}

/// `(generation, number)` of a batch key's tail (after `model\0`).
pub(super) fn batch_position(tail: &[u8]) -> Option<(u32, u64)> {
    let generation = u32::from_be_bytes(tail.get(..4)?.try_into().ok()?);
    let number = u64::from_be_bytes(tail.get(4..12)?.try_into().ok()?);
    (tail.len() == 12).then_some((generation, number))
}
