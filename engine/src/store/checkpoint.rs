//! Checkpoints, one mechanism for every room: a room's whole state for one of its
//! objects (a model, a ledger, …) at position N of its journal, so that opening reads
//! the checkpoint and replays only the entries after N, and the entries at or below N
//! that no obligation still needs can be purged.
//!
//! A checkpoint is taken in three steps, each its own fsynced write, with a failpoint
//! before each (`checkpoint-before-write`, `checkpoint-before-install`,
//! `checkpoint-before-purge`):
//! 1. **write**: the record is staged (`…\0staged`);
//! 2. **install**: in one write the staged record becomes the installed one
//!    (`…\0installed`) and the staged key is removed — opening uses only installed
//!    records, so a stop before this step leaves the previous checkpoint in force;
//! 3. **purge**: the room removes its entries covered by the installed record (a stop
//!    before it leaves them; opening skips them, the next checkpoint purges them).
//!
//! Each record carries a SHA-256 checksum of its bytes: a damaged one is refused by
//! name at open, never read past (the room's entries it covered may be gone).
//! Invariants, stated as absences: no record is used that was not installed; no entry
//! is purged before a record covering it is installed and fsynced.

use fjall::{Keyspace, OwnedWriteBatch};
use sha2::{Digest, Sha256};

use super::keys::Key;

/// The keyspace of the host's store holding every room's checkpoints.
pub const CHECKPOINTS_KEYSPACE: &str = "checkpoints";

const MAGIC: &[u8; 8] = b"GRIDCP01";
/// Magic, position, unix milliseconds, state length.
const HEADER: usize = 8 + 8 + 8 + 4;

/// One room's state for one object at a position of its journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The journal position the state includes (entries at or below it are covered).
    pub position: u64,
    /// When it was taken, Unix milliseconds.
    pub at_ms: u64,
    /// The room's own encoding of its state.
    pub state: Vec<u8>,
}

/// A checkpoint as `inspect storage` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointView {
    /// The room: `model`, ….
    pub room: String,
    /// The object within it: a model's name, ….
    pub name: String,
    pub position: u64,
    pub at_ms: u64,
    /// The bytes of its record.
    pub bytes: u64,
}

pub fn encode(checkpoint: &Checkpoint) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + checkpoint.state.len() + 32);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&checkpoint.position.to_be_bytes());
    bytes.extend_from_slice(&checkpoint.at_ms.to_be_bytes());
    let length = u32::try_from(checkpoint.state.len()).expect("a state under 4 GiB");
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend_from_slice(&checkpoint.state);
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum);
    bytes
}

/// Decodes a record; why not, when its checksum, length or magic is wrong.
pub fn decode(bytes: &[u8]) -> Result<Checkpoint, String> {
    let Some(body_length) = bytes.len().checked_sub(32) else {
        return Err(format!("{} bytes: shorter than a checksum", bytes.len()));
    };
    let (body, sum) = bytes.split_at(body_length);
    if Sha256::digest(body).as_slice() != sum {
        return Err("its checksum does not match its bytes".to_owned());
    }
    if body.len() < HEADER || &body[..8] != MAGIC {
        return Err("not a checkpoint record".to_owned());
    }
    let word = |at: usize| u64::from_be_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let length = u32::from_be_bytes(body[24..28].try_into().expect("4 bytes")) as usize;
    if body.len() != HEADER + length {
        return Err(format!(
            "it says {length} bytes of state and holds {}",
            body.len() - HEADER
        ));
    }
    Ok(Checkpoint {
        position: word(8),
        at_ms: word(16),
        state: body[HEADER..].to_vec(),
    })
}

fn key(room: &str, name: &str, which: &str) -> Vec<u8> {
    Key::text(room).then(name).then(which).bytes()
}

/// The checkpoints keyspace of a store.
#[derive(Clone)]
pub struct Checkpoints {
    keyspace: Keyspace,
}

impl Checkpoints {
    pub fn new(keyspace: Keyspace) -> Checkpoints {
        Checkpoints { keyspace }
    }

    /// The installed checkpoint of `name` in `room`, if any; a damaged one is an error
    /// naming it.
    pub fn installed(&self, room: &str, name: &str) -> Result<Option<Checkpoint>, String> {
        self.read(
            room,
            name,
            ["installed", "checkpoint"],
            "the entries it covered may be purged, so it is never read past",
        )
    }

    /// The staged checkpoint of `name` in `room` — one whose install a stop
    /// interrupted — if any.
    pub fn staged(&self, room: &str, name: &str) -> Result<Option<Checkpoint>, String> {
        self.read(
            room,
            name,
            ["staged", "staged checkpoint"],
            "it was never installed",
        )
    }

    /// The `which` (installed, staged) checkpoint of `name`, called `label` in an
    /// error; damaged: an error naming it and `consequence`.
    fn read(
        &self,
        room: &str,
        name: &str,
        [which, label]: [&str; 2],
        consequence: &str,
    ) -> Result<Option<Checkpoint>, String> {
        let held = self
            .keyspace
            .get(key(room, name, which))
            .map_err(|e| format!("the {label} of {room} `{name}` does not read: {e}"))?;
        held.map(|bytes| {
            decode(&bytes).map_err(|why| {
                format!("the {label} of {room} `{name}` is damaged ({why}); {consequence}")
            })
        })
        .transpose()
    }

    /// Step 1: stages `checkpoint` in `write`.
    pub fn stage(
        &self,
        write: &mut OwnedWriteBatch,
        room: &str,
        name: &str,
        checkpoint: &Checkpoint,
    ) {
        write.insert(
            &self.keyspace,
            key(room, name, "staged"),
            encode(checkpoint),
        );
    }

    /// Step 2: installs the staged checkpoint of `name` in `write` (it must be
    /// staged and fsynced before); its staged key is removed.
    pub fn install(
        &self,
        write: &mut OwnedWriteBatch,
        room: &str,
        name: &str,
    ) -> Result<Checkpoint, String> {
        let staged = self
            .keyspace
            .get(key(room, name, "staged"))
            .map_err(|e| format!("the staged checkpoint of {room} `{name}` does not read: {e}"))?
            .ok_or_else(|| format!("no staged checkpoint of {room} `{name}`"))?;
        let checkpoint = decode(&staged)
            .map_err(|why| format!("the staged checkpoint of {room} `{name}`: {why}"))?;
        write.insert(
            &self.keyspace,
            key(room, name, "installed"),
            staged.to_vec(),
        );
        write.remove(&self.keyspace, key(room, name, "staged"));
        Ok(checkpoint)
    }

    /// The names of `room`'s objects with an installed checkpoint, damaged ones too (a
    /// room whose journal a checkpoint covered whole finds its objects here; opening
    /// each through [`Checkpoints::installed`] names a damaged one).
    pub fn names(&self, room: &str) -> Result<Vec<String>, String> {
        let prefix = Key::text(room).sep().bytes();
        let mut names = Vec::new();
        for guard in self.keyspace.prefix(&prefix) {
            let key = guard
                .key()
                .map_err(|e| format!("the checkpoints of room {room} do not read: {e}"))?;
            if let Some(name) = key[prefix.len()..].strip_suffix(b"\0installed") {
                names.push(String::from_utf8_lossy(name).into_owned());
            }
        }
        Ok(names)
    }

    /// Every installed checkpoint, by room and name (damaged ones are left out: opening
    /// names them).
    pub fn list(&self) -> Vec<CheckpointView> {
        let mut all = Vec::new();
        for guard in self.keyspace.iter() {
            let Ok((key, value)) = guard.into_inner() else {
                continue;
            };
            let mut parts = key.split(|b| *b == 0);
            let (Some(room), Some(name), Some(b"installed")) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if let Ok(checkpoint) = decode(&value) {
                all.push(CheckpointView {
                    room: String::from_utf8_lossy(room).into_owned(),
                    name: String::from_utf8_lossy(name).into_owned(),
                    position: checkpoint.position,
                    at_ms: checkpoint.at_ms,
                    bytes: value.len() as u64,
                });
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_decodes_as_encoded_and_any_damage_is_refused() {
        let checkpoint = Checkpoint {
            position: 12,
            at_ms: 1_700_000_000_000,
            state: b"{\"inputs\":[]}".to_vec(),
        };
        let bytes = encode(&checkpoint);
        assert_eq!(decode(&bytes).unwrap(), checkpoint);
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert!(decode(&flipped).is_err(), "a flipped byte at {at} decoded");
        }
        for length in 0..bytes.len() {
            assert!(decode(&bytes[..length]).is_err(), "{length} bytes decoded");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }
}
