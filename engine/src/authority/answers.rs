//! The authority's original answers: each operation id's command and answer, the last
//! `ANSWERS_RETAINED_MAX` retained in the order they were answered, and the 8-byte
//! digests of the ids forgotten past that (refused as expired, never executed again).
//!
//! Two homes behind one trait: [`MemoryAnswers`] (a voter without a database, the
//! tests, and a snapshot file's contents) and [`StoredAnswers`] (the authority's
//! database). A voter with a database holds none of its answers in memory — only where
//! they stand ([`Retained`]) — so its memory and its start do not grow with them:
//! `sm-answers` (op id → [`StoredAnswer`]), `sm-answer-order` (retention position `u64`
//! BE → op id) and `sm-forgotten` (digest `u64` BE → empty), written in the batch of
//! the `apply` that answered, with [`Retained`] in `sm-meta`.
//!
//! Invariants, stated as absences: no id is answered twice, whether its answer is
//! retained or forgotten; no stored answer is read as "not found" when the store fails
//! to read (the error stops the state machine, never executes the id).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use fjall::{Keyspace, OwnedWriteBatch, Readable};
use serde::{Deserialize, Serialize};

use super::claims::{Answer, Command, digest};

/// Where original answers are retained.
pub trait Answers {
    /// The answer retained for `op`, with the command it answered.
    fn get(&self, op: &str) -> Result<Option<(Command, Answer)>, String>;
    /// Whether an id with this digest was answered and forgotten past retention.
    fn is_forgotten(&self, digest: u64) -> Result<bool, String>;
    /// Retains `op`'s answer as the newest.
    fn retain(&mut self, op: &str, command: &Command, answer: &Answer);
    /// How many answers are retained.
    fn retained(&self) -> u64;
    /// Forgets the oldest retained answer; its id's digest is kept.
    fn forget_oldest(&mut self) -> Result<(), String>;
}

/// Answers held in memory. Serialized, it is the answers part of a snapshot file
/// (`answers`: op → [command, answer]; `order`: oldest first; `forgotten`: digests).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryAnswers {
    answers: BTreeMap<String, (Command, Answer)>,
    order: VecDeque<String>,
    forgotten: BTreeSet<u64>,
}

impl MemoryAnswers {
    /// The retained answers, oldest first.
    pub fn oldest_first(&self) -> impl Iterator<Item = (&String, &Command, &Answer)> {
        self.order
            .iter()
            .filter_map(|op| self.answers.get(op).map(|(c, a)| (op, c, a)))
    }

    /// The digests of the forgotten ids.
    pub fn forgotten(&self) -> impl Iterator<Item = u64> + '_ {
        self.forgotten.iter().copied()
    }

    /// Notes a forgotten id's digest (reading a store or a snapshot).
    pub fn insert_forgotten(&mut self, digest: u64) {
        self.forgotten.insert(digest);
    }

    /// The retained answer of `op`, if any.
    pub fn answer(&self, op: &str) -> Option<&Answer> {
        self.answers.get(op).map(|(_, a)| a)
    }
}

impl Answers for MemoryAnswers {
    fn get(&self, op: &str) -> Result<Option<(Command, Answer)>, String> {
        Ok(self.answers.get(op).cloned())
    }

    fn is_forgotten(&self, digest: u64) -> Result<bool, String> {
        Ok(self.forgotten.contains(&digest))
    }

    fn retain(&mut self, op: &str, command: &Command, answer: &Answer) {
        self.answers
            .insert(op.to_owned(), (command.clone(), answer.clone()));
        self.order.push_back(op.to_owned());
    }

    fn retained(&self) -> u64 {
        self.order.len() as u64
    }

    fn forget_oldest(&mut self) -> Result<(), String> {
        if let Some(old) = self.order.pop_front() {
            self.answers.remove(&old);
            self.forgotten.insert(digest(&old));
        }
        Ok(())
    }
}

/// A retained answer as stored: `seq` is its retention position (log index × 2,048 +
/// position in the entry; a snapshot's answers take 0, 1, 2, … below every later one).
#[derive(Serialize, Deserialize)]
pub struct StoredAnswer {
    pub seq: u64,
    pub command: Command,
    pub answer: Answer,
}

/// Where the stored answers stand: how many are retained, and the lowest retention
/// position that may still hold one (every position below it was forgotten).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retained {
    pub len: u64,
    pub oldest: u64,
}

/// The answers' keyspaces in the authority's database.
#[derive(Clone)]
pub struct AnswerKeyspaces {
    pub answers: Keyspace,
    pub order: Keyspace,
    pub forgotten: Keyspace,
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{what} does not decode: {e}"))
}

impl AnswerKeyspaces {
    /// The answer stored for `op` in `view` (the database, or a snapshot of it).
    pub fn read(
        &self,
        view: &impl Readable,
        op: &str,
    ) -> Result<Option<(Command, Answer)>, String> {
        let Some(bytes) = view.get(&self.answers, op).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let stored: StoredAnswer = decode(&bytes, "a stored answer")?;
        Ok(Some((stored.command, stored.answer)))
    }

    /// Copies everything stored, as `view` shows it, into a snapshot being written:
    /// the retained answers oldest first (from position `retained.oldest` on, each
    /// as stored) and the forgotten digests.
    pub fn copy_into(
        &self,
        view: &impl Readable,
        retained: Retained,
        writer: &mut super::snapshot::Writer,
    ) -> Result<(), String> {
        let mut copied = 0;
        for guard in view.range(&self.order, retained.oldest.to_be_bytes()..) {
            let (_, op) = guard.into_inner().map_err(|e| e.to_string())?;
            let op = std::str::from_utf8(&op).map_err(|e| e.to_string())?;
            let stored = view
                .get(&self.answers, op)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!("the retained answers' order names `{op}`, which has no answer")
                })?;
            writer.answer_json(op, &stored).map_err(|e| e.to_string())?;
            copied += 1;
        }
        if copied != retained.len {
            return Err(format!(
                "{} answers are retained, {copied} are stored",
                retained.len
            ));
        }
        for guard in view.iter(&self.forgotten) {
            let key = guard.key().map_err(|e| e.to_string())?;
            let bytes: [u8; 8] = key
                .as_ref()
                .try_into()
                .map_err(|_| "a forgotten digest is not 8 bytes")?;
            writer
                .forgotten(u64::from_be_bytes(bytes))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Writes one retained answer at position `seq` into `batch` (installing a
    /// snapshot: positions 0, 1, 2, … oldest first).
    pub fn put(
        &self,
        batch: &mut OwnedWriteBatch,
        seq: u64,
        op: &str,
        command: Command,
        answer: Answer,
    ) -> Result<(), String> {
        let stored = StoredAnswer {
            seq,
            command,
            answer,
        };
        let bytes = serde_json::to_vec(&stored).map_err(|e| e.to_string())?;
        batch.insert(&self.answers, op, bytes);
        batch.insert(&self.order, seq.to_be_bytes(), op);
        Ok(())
    }

    /// Where a store written before `sm-answer-order` existed stands, its order
    /// written into `batch` from each answer's own position (read once, at the first
    /// start of this version).
    pub fn index_once(&self, batch: &mut OwnedWriteBatch) -> Result<Retained, String> {
        let mut retained = Retained {
            len: 0,
            oldest: u64::MAX,
        };
        for guard in self.answers.iter() {
            let (op, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
            let stored: StoredAnswer = decode(&bytes, "a stored answer")?;
            batch.insert(&self.order, stored.seq.to_be_bytes(), op);
            retained.len += 1;
            retained.oldest = retained.oldest.min(stored.seq);
        }
        if retained.len == 0 {
            retained.oldest = 0;
        }
        Ok(retained)
    }
}

/// The stored answers during one `apply`: reads go to the database, writes into the
/// apply's batch, and what this apply wrote is read back from here (the batch commits
/// only at its end).
pub struct StoredAnswers<'a> {
    keyspaces: &'a AnswerKeyspaces,
    batch: OwnedWriteBatch,
    retained: Retained,
    /// The retention position of the next answer retained (set per proposal).
    pub seq: u64,
    added: BTreeMap<String, (Command, Answer)>,
    added_order: BTreeMap<u64, String>,
    removed: BTreeSet<String>,
    forgotten: BTreeSet<u64>,
}

impl<'a> StoredAnswers<'a> {
    pub fn new(
        keyspaces: &'a AnswerKeyspaces,
        batch: OwnedWriteBatch,
        retained: Retained,
    ) -> StoredAnswers<'a> {
        StoredAnswers {
            keyspaces,
            batch,
            retained,
            seq: 0,
            added: BTreeMap::new(),
            added_order: BTreeMap::new(),
            removed: BTreeSet::new(),
            forgotten: BTreeSet::new(),
        }
    }

    /// The batch, for what else the apply writes.
    pub fn batch(&mut self) -> &mut OwnedWriteBatch {
        &mut self.batch
    }

    /// The batch to commit and where the answers stand after it.
    pub fn finish(self) -> (OwnedWriteBatch, Retained) {
        (self.batch, self.retained)
    }

    /// The oldest retained `(position, op)`: stored ones come before those this apply
    /// added (lower log indexes), but the lower of the two is taken either way.
    fn oldest(&self) -> Result<Option<(u64, String)>, String> {
        let stored = match self
            .keyspaces
            .order
            .range(self.retained.oldest.to_be_bytes()..)
            .next()
        {
            Some(guard) => {
                let (key, op) = guard.into_inner().map_err(|e| e.to_string())?;
                let seq: [u8; 8] = key
                    .as_ref()
                    .try_into()
                    .map_err(|_| "a retention position is not 8 bytes")?;
                Some((
                    u64::from_be_bytes(seq),
                    String::from_utf8(op.to_vec()).map_err(|e| e.to_string())?,
                ))
            }
            None => None,
        };
        let added = self
            .added_order
            .first_key_value()
            .map(|(s, op)| (*s, op.clone()));
        Ok(match (stored, added) {
            (Some(s), Some(a)) => Some(if s.0 < a.0 { s } else { a }),
            (s, a) => s.or(a),
        })
    }
}

impl Answers for StoredAnswers<'_> {
    fn get(&self, op: &str) -> Result<Option<(Command, Answer)>, String> {
        if self.removed.contains(op) {
            return Ok(None);
        }
        if let Some(found) = self.added.get(op) {
            return Ok(Some(found.clone()));
        }
        let Some(bytes) = self.keyspaces.answers.get(op).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let stored: StoredAnswer = decode(&bytes, "a stored answer")?;
        Ok(Some((stored.command, stored.answer)))
    }

    fn is_forgotten(&self, digest: u64) -> Result<bool, String> {
        if self.forgotten.contains(&digest) {
            return Ok(true);
        }
        self.keyspaces
            .forgotten
            .contains_key(digest.to_be_bytes())
            .map_err(|e| e.to_string())
    }

    fn retain(&mut self, op: &str, command: &Command, answer: &Answer) {
        let stored = StoredAnswer {
            seq: self.seq,
            command: command.clone(),
            answer: answer.clone(),
        };
        self.batch.insert(
            &self.keyspaces.answers,
            op,
            serde_json::to_vec(&stored).expect("answers serialize"),
        );
        self.batch
            .insert(&self.keyspaces.order, self.seq.to_be_bytes(), op);
        self.removed.remove(op);
        self.added
            .insert(op.to_owned(), (command.clone(), answer.clone()));
        self.added_order.insert(self.seq, op.to_owned());
        self.retained.len += 1;
    }

    fn retained(&self) -> u64 {
        self.retained.len
    }

    fn forget_oldest(&mut self) -> Result<(), String> {
        let Some((seq, op)) = self.oldest()? else {
            return Err(format!(
                "{} answers are retained but the retention order holds none from position {}",
                self.retained.len, self.retained.oldest
            ));
        };
        let digest = digest(&op);
        self.batch.remove(&self.keyspaces.answers, op.as_str());
        self.batch.remove(&self.keyspaces.order, seq.to_be_bytes());
        self.batch
            .insert(&self.keyspaces.forgotten, digest.to_be_bytes(), []);
        self.added.remove(&op);
        self.added_order.remove(&seq);
        self.removed.insert(op);
        self.forgotten.insert(digest);
        self.retained.oldest = seq + 1;
        self.retained.len -= 1;
        Ok(())
    }
}
