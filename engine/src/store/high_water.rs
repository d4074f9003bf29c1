//! The store's high-water mark, kept outside it: how many fsynced writes the store had
//! when the host last acknowledged anything, in `DIR/keys/store.high-water`, signed
//! with the host's key. The store keeps the same count (its `meta` keyspace,
//! [`ACKNOWLEDGED_KEY`]), written before each fsync that may acknowledge. At open the
//! store must hold at least what the mark says it acknowledged: a store behind its
//! mark — a truncated or deleted journal, an older copy put back — is refused by
//! name, never served, because acknowledged operation ids would run again (SPEC
//! principle 2).
//!
//! The file holds two fixed slots written in turn, each a whole signed record: a write
//! torn by a crash spoils one slot and leaves the other, which is older and still
//! below what the store holds (the store is fsynced before the mark is written).
//! Invariants, stated as absences: no answer is given before the mark covering its
//! write is fsynced; no slot is read without its signature verifying.
//!
//! Signing is off the path of a write: once a record is fsynced, a thread of the mark
//! signs the record of the next count (a "spare"), so the next advance writes it
//! without an Ed25519 signature in between the store's fsync and the mark's. A spare
//! is used only for exactly its count and while younger than
//! [`HIGH_WATER_SPARE_AGE_MS_MAX`] (its time is when it was signed); else the advance
//! signs its own record, as without a spare. The record written is the same either
//! way: a spare changes when a record is signed, never what it says.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};

use crate::limits::HIGH_WATER_SPARE_AGE_MS_MAX;

/// The mark's file in the installation's custody directory.
pub const HIGH_WATER_FILE: &str = "store.high-water";
/// The store's own count of fsynced writes (in its `meta` keyspace), big-endian u64.
pub const ACKNOWLEDGED_KEY: &str = "acknowledged-writes";

const MAGIC: &[u8; 8] = b"GRIDHW01";
/// One slot: a whole record, zero-padded.
const SLOT: usize = 512;
/// Magic, writes, store id, unix milliseconds, key generation.
const SIGNED: usize = 8 + 8 + 16 + 8 + 4;
const RECORD: usize = SIGNED + 64;

/// Signs a record with the host's current signing key: its generation and signature,
/// or why it cannot (a locked custody signs nothing).
pub type Signer = std::sync::Arc<dyn Fn(&[u8]) -> Result<(u32, [u8; 64]), String> + Send + Sync>;
/// Verifies a record's signature by the host's signing key of a generation.
pub type Verifier<'a> = &'a dyn Fn(u32, &[u8], &[u8; 64]) -> bool;

/// One valid record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Writes of the store acknowledged so far.
    pub writes: u64,
    /// The store the writes were made in (its id, as `store.mark` names it).
    pub store: String,
    /// When the record was written, Unix milliseconds.
    pub at_ms: u64,
    /// Which of the file's two slots holds it (the next record goes to the other).
    pub slot: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum HighWaterError {
    #[error(
        "{store}: store rolled back: this installation acknowledged {acknowledged} writes in it (its high-water mark {mark}, written {at}), the store holds {found}: its newest {missing} acknowledged writes are gone (a truncated or deleted journal, or an older copy of the store put back). gridd does not serve it, which would run acknowledged operation ids again; put back the store this installation last served (a copy taken while gridd was stopped after its last answer)"
    )]
    RolledBack {
        store: PathBuf,
        mark: PathBuf,
        acknowledged: u64,
        found: u64,
        missing: u64,
        at: String,
    },
    #[error(
        "{store}: the store this installation acknowledged {acknowledged} writes in (store {id}, its high-water mark {mark}) is missing or was replaced (found store {found}). gridd never starts a store afresh, which would run acknowledged operation ids again; restore that store"
    )]
    OtherStore {
        store: PathBuf,
        mark: PathBuf,
        acknowledged: u64,
        id: String,
        found: String,
    },
    #[error(
        "{store}: the store this installation acknowledged {acknowledged} writes in (store {id}, its high-water mark {mark}) is missing. gridd never starts a store afresh, which would run acknowledged operation ids again; restore that store"
    )]
    Gone {
        store: PathBuf,
        mark: PathBuf,
        acknowledged: u64,
        id: String,
    },
    #[error(
        "{mark}: the store's high-water mark is missing, and the store says it acknowledged {found} writes: without the mark a store rolled back cannot be told from this one, so gridd does not start. Restore {mark} from the backup of this installation's keys"
    )]
    Missing { mark: PathBuf, found: u64 },
    #[error(
        "{mark}: the store's high-water mark does not read ({reason}); gridd does not start without it. Restore it from the backup of this installation's keys"
    )]
    Damaged { mark: PathBuf, reason: String },
    #[error("{mark}: {source}")]
    Io {
        mark: PathBuf,
        source: std::io::Error,
    },
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join("keys").join(HIGH_WATER_FILE)
}

fn encode(mark: &Mark, sign: &Signer) -> std::io::Result<[u8; SLOT]> {
    let mut slot = [0u8; SLOT];
    slot[..8].copy_from_slice(MAGIC);
    slot[8..16].copy_from_slice(&mark.writes.to_le_bytes());
    let mut id = [0u8; 16];
    // A store id is 32 hexadecimal digits (store::mark); anything else stays zero.
    let _ = hex::decode_to_slice(&mark.store, &mut id);
    slot[16..32].copy_from_slice(&id);
    slot[32..40].copy_from_slice(&mark.at_ms.to_le_bytes());
    let (generation, signature) = sign(&slot[..SIGNED - 4]).map_err(std::io::Error::other)?;
    slot[40..44].copy_from_slice(&generation.to_le_bytes());
    slot[SIGNED..RECORD].copy_from_slice(&signature);
    Ok(slot)
}

fn decode(slot: &[u8], at: usize, verify: Verifier) -> Option<Mark> {
    if slot.len() < RECORD || &slot[..8] != MAGIC {
        return None;
    }
    let word = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().expect("8 bytes"));
    let generation = u32::from_le_bytes(slot[40..44].try_into().expect("4 bytes"));
    let signature: [u8; 64] = slot[SIGNED..RECORD].try_into().expect("64 bytes");
    verify(generation, &slot[..SIGNED - 4], &signature).then(|| Mark {
        writes: word(8),
        store: hex::encode(&slot[16..32]),
        at_ms: word(32),
        slot: at,
    })
}

/// The newest valid record of the mark, `None` when there is no file.
pub fn read(dir: &Path, verify: Verifier) -> Result<Option<Mark>, HighWaterError> {
    let mark = path(dir);
    let bytes = match std::fs::read(&mark) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(HighWaterError::Io { mark, source }),
    };
    if bytes.len() != 2 * SLOT {
        return Err(HighWaterError::Damaged {
            mark,
            reason: format!("{} bytes, not {}", bytes.len(), 2 * SLOT),
        });
    }
    bytes
        .chunks(SLOT)
        .enumerate()
        .filter_map(|(at, slot)| decode(slot, at, verify))
        .max_by_key(|m| m.writes)
        .map(Some)
        .ok_or(HighWaterError::Damaged {
            mark,
            reason: "neither of its two records verifies with this host's signing keys".to_owned(),
        })
}

/// Compares the store (its id, and its count of writes: `None` when it never counted)
/// with the installation's mark; the count the store starts from.
pub fn judge(
    dir: &Path,
    store: &Path,
    id: &str,
    held: Option<u64>,
    mark: Option<Mark>,
) -> Result<u64, HighWaterError> {
    let found = held.unwrap_or(0);
    match mark {
        None if found == 0 => Ok(0),
        None => Err(HighWaterError::Missing {
            mark: path(dir),
            found,
        }),
        // A mark of another store that acknowledged nothing: a stop while the
        // installation was first created, before the store kept its id.
        Some(mark) if mark.store != id && mark.writes == 0 => Ok(found),
        Some(mark) if mark.store != id => Err(HighWaterError::OtherStore {
            store: store.to_owned(),
            mark: path(dir),
            acknowledged: mark.writes,
            id: mark.store,
            found: id.to_owned(),
        }),
        Some(mark) if found < mark.writes => Err(HighWaterError::RolledBack {
            store: store.to_owned(),
            mark: path(dir),
            acknowledged: mark.writes,
            found,
            missing: mark.writes - found,
            at: super::rfc3339_ms(mark.at_ms),
        }),
        Some(_) => Ok(found),
    }
}

/// Before a store is opened where there is none: refused when the installation's mark
/// says a store here acknowledged writes (opening would create one afresh).
pub fn before_open(dir: &Path, store: &Path, mark: Option<&Mark>) -> Result<(), HighWaterError> {
    match mark {
        Some(mark) if mark.writes > 0 && !store.is_dir() => Err(HighWaterError::Gone {
            store: store.to_owned(),
            mark: path(dir),
            acknowledged: mark.writes,
            id: mark.store.clone(),
        }),
        _ => Ok(()),
    }
}

/// A record signed ahead for a count not yet written.
struct Spare {
    writes: u64,
    at_ms: u64,
    record: [u8; SLOT],
}

/// The mark, open for writing.
pub struct HighWater {
    file: std::fs::File,
    path: PathBuf,
    store: String,
    /// The slot the next record goes to (the other holds the newest).
    next: u64,
    written: u64,
    sign: Signer,
    /// The record of the next count, signed by the thread behind `ahead`.
    spare: Arc<Mutex<Option<Spare>>>,
    /// Asks that thread to sign the record of a count (`None`: it did not start;
    /// every advance signs its own record).
    ahead: Option<mpsc::Sender<u64>>,
}

/// Starts the thread that signs records ahead: for each count asked (the newest of
/// those waiting), the record of `store` at that count, kept in `spare` unless one of
/// a higher count is there. It ends when its [`HighWater`] is dropped.
fn sign_ahead(
    store: String,
    sign: Signer,
    spare: Arc<Mutex<Option<Spare>>>,
) -> Option<mpsc::Sender<u64>> {
    let (ahead, asked) = mpsc::channel::<u64>();
    std::thread::Builder::new()
        .name("store-mark-sign".to_owned())
        .spawn(move || {
            while let Ok(first) = asked.recv() {
                let writes = asked.try_iter().fold(first, u64::max);
                let at_ms = super::now_ms();
                let mark = Mark {
                    writes,
                    store: store.clone(),
                    at_ms,
                    slot: 0,
                };
                // A locked custody signs nothing: the advance then says why.
                let Ok(record) = encode(&mark, &sign) else {
                    continue;
                };
                let mut spare = spare.lock().unwrap_or_else(|p| p.into_inner());
                if spare.as_ref().is_none_or(|s| s.writes < writes) {
                    *spare = Some(Spare {
                        writes,
                        at_ms,
                        record,
                    });
                }
            }
        })
        .ok()
        .map(|_| ahead)
}

impl HighWater {
    /// Opens the mark of store `store` at `writes` (what [`judge`] returned), given
    /// its newest record as [`read`] found it; creates it (0600, synced, its directory
    /// synced) when the installation has none, or one of another store that
    /// acknowledged nothing.
    pub fn open(
        dir: &Path,
        store: &str,
        writes: u64,
        existing: Option<Mark>,
        sign: Signer,
    ) -> Result<HighWater, HighWaterError> {
        let mark = path(dir);
        let io = |source| HighWaterError::Io {
            mark: mark.clone(),
            source,
        };
        let existing = existing.filter(|m| m.store == store);
        if existing.is_none() {
            let record = Mark {
                writes,
                store: store.to_owned(),
                at_ms: super::now_ms(),
                slot: 0,
            };
            let mut both = encode(&record, &sign).map_err(io)?.to_vec();
            both.extend_from_slice(&[0u8; SLOT]);
            super::write_private(&mark, &both).map_err(io)?;
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&mark)
            .map_err(io)?;
        let (newest, written) = existing.map_or((0, writes), |m| (m.slot, m.writes.min(writes)));
        let spare = Arc::new(Mutex::new(None));
        let ahead = sign_ahead(store.to_owned(), sign.clone(), spare.clone());
        let high_water = HighWater {
            file,
            path: mark,
            store: store.to_owned(),
            next: newest as u64 ^ 1,
            written,
            sign,
            spare,
            ahead,
        };
        high_water.ask_ahead(writes.max(written) + 1);
        Ok(high_water)
    }

    /// Asks for the record of `writes` to be signed ahead.
    fn ask_ahead(&self, writes: u64) {
        if let Some(ahead) = &self.ahead {
            let _ = ahead.send(writes);
        }
    }

    /// The spare record of exactly `writes`, if one was signed recently enough; a
    /// spare of a count already passed is dropped.
    fn take_spare(&self, writes: u64) -> Option<[u8; SLOT]> {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        match spare.as_ref() {
            Some(s)
                if s.writes == writes
                    && super::now_ms().saturating_sub(s.at_ms) <= HIGH_WATER_SPARE_AGE_MS_MAX =>
            {
                spare.take().map(|s| s.record)
            }
            Some(s) if s.writes <= writes => {
                *spare = None;
                None
            }
            _ => None,
        }
    }

    /// Records that `writes` writes are acknowledged: the record is written to the
    /// older slot and fsynced. A count at or below the last one written changes nothing.
    pub fn advance(&mut self, writes: u64) -> std::io::Result<()> {
        if writes <= self.written {
            return Ok(());
        }
        let record = match self.take_spare(writes) {
            Some(record) => record,
            None => encode(
                &Mark {
                    writes,
                    store: self.store.clone(),
                    at_ms: super::now_ms(),
                    slot: self.next as usize,
                },
                &self.sign,
            )?,
        };
        self.file.write_all_at(&record, self.next * SLOT as u64)?;
        crate::metrics::fsync(|| self.file.sync_data())?;
        self.next ^= 1;
        self.written = writes;
        self.ask_ahead(writes + 1);
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer as _, SigningKey, Verifier as _};

    fn keys() -> (Signer, impl Fn(u32, &[u8], &[u8; 64]) -> bool) {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let public = key.verifying_key();
        let sign: Signer = std::sync::Arc::new(move |m: &[u8]| Ok((1, key.sign(m).to_bytes())));
        let verify = move |g: u32, m: &[u8], s: &[u8; 64]| {
            g == 1
                && public
                    .verify(m, &ed25519_dalek::Signature::from_bytes(s))
                    .is_ok()
        };
        (sign, verify)
    }

    fn installation(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-hw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        dir
    }

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn the_newest_record_survives_a_torn_write_of_the_other() {
        let dir = installation("torn");
        let (sign, verify) = keys();
        let mut mark = HighWater::open(&dir, ID, 0, None, sign.clone()).unwrap();
        for writes in [3, 5, 9] {
            mark.advance(writes).unwrap();
        }
        mark.advance(4).unwrap(); // below: nothing written
        assert_eq!(read(&dir, &verify).unwrap().unwrap().writes, 9);
        // Tear the slot written next (the older one): the newest still reads.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path(&dir))
            .unwrap();
        file.write_all_at(&[0xff; 20], mark.next * SLOT as u64 + 10)
            .unwrap();
        assert_eq!(read(&dir, &verify).unwrap().unwrap().writes, 9);
        // Reopened, it keeps writing past the newest and never over it first.
        let newest = read(&dir, &verify).unwrap();
        let mut again = HighWater::open(&dir, ID, 9, newest, sign).unwrap();
        again.advance(10).unwrap();
        assert_eq!(read(&dir, &verify).unwrap().unwrap().writes, 10);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// For each record signed: its count and the thread that signed it.
    type Seen = Arc<Mutex<Vec<(u64, String)>>>;

    /// A signer that records what it signs ([`Seen`]).
    fn recording() -> (Signer, Seen) {
        let (sign, _) = keys();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let recording: Signer = Arc::new(move |m: &[u8]| {
            let writes = u64::from_le_bytes(m[8..16].try_into().unwrap());
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            log.lock().unwrap().push((writes, thread));
            sign(m)
        });
        (recording, seen)
    }

    /// Waits (bounded) until the spare holds the record of `writes`.
    fn spare_of(mark: &HighWater, writes: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while mark.spare.lock().unwrap().as_ref().map(|s| s.writes) != Some(writes) {
            assert!(std::time::Instant::now() < deadline, "no spare of {writes}");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn the_next_record_is_signed_ahead_and_only_used_for_its_own_count() {
        let dir = installation("ahead");
        let (_, verify) = keys();
        let (sign, seen) = recording();
        let mut mark = HighWater::open(&dir, ID, 0, None, sign).unwrap();
        spare_of(&mark, 1);
        mark.advance(1).unwrap();
        spare_of(&mark, 2);
        mark.advance(2).unwrap();
        assert_eq!(read(&dir, &verify).unwrap().unwrap().writes, 2);
        // Counts 1 and 2 were signed by the mark's thread, none by this one.
        let signed_here = |w: u64| {
            seen.lock()
                .unwrap()
                .iter()
                .any(|(writes, thread)| *writes == w && thread != "store-mark-sign")
        };
        assert!(
            !signed_here(1) && !signed_here(2),
            "{:?}",
            seen.lock().unwrap()
        );
        // A jump past the spare: the advance signs its own record, and it verifies.
        spare_of(&mark, 3);
        mark.advance(7).unwrap();
        assert!(signed_here(7), "{:?}", seen.lock().unwrap());
        assert_eq!(read(&dir, &verify).unwrap().unwrap().writes, 7);
        // A spare older than HIGH_WATER_SPARE_AGE_MS_MAX is signed again.
        spare_of(&mark, 8);
        mark.spare.lock().unwrap().as_mut().unwrap().at_ms -= HIGH_WATER_SPARE_AGE_MS_MAX + 1;
        mark.advance(8).unwrap();
        assert!(signed_here(8), "{:?}", seen.lock().unwrap());
        let newest = read(&dir, &verify).unwrap().unwrap();
        assert_eq!(newest.writes, 8);
        assert!(super::super::now_ms() - newest.at_ms <= HIGH_WATER_SPARE_AGE_MS_MAX);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_mark_that_does_not_verify_or_has_another_length_is_refused() {
        let dir = installation("damaged");
        let (sign, verify) = keys();
        HighWater::open(&dir, ID, 0, None, sign).unwrap();
        let other = |_: u32, _: &[u8], _: &[u8; 64]| false;
        let refused = read(&dir, &other).unwrap_err();
        assert!(refused.to_string().contains("verifies"), "{refused}");
        std::fs::write(path(&dir), b"short").unwrap();
        let refused = read(&dir, &verify).unwrap_err();
        assert!(refused.to_string().contains("5 bytes"), "{refused}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_store_behind_its_mark_or_another_store_is_refused() {
        let (dir, store) = (Path::new("/i"), Path::new("/i/store"));
        let mark = |writes| Mark {
            writes,
            store: ID.to_owned(),
            at_ms: 0,
            slot: 0,
        };
        assert_eq!(judge(dir, store, ID, None, None).unwrap(), 0);
        assert_eq!(judge(dir, store, ID, Some(12), Some(mark(12))).unwrap(), 12);
        assert_eq!(judge(dir, store, ID, Some(13), Some(mark(12))).unwrap(), 13);
        assert_eq!(judge(dir, store, ID, None, Some(mark(0))).unwrap(), 0);
        let back = judge(dir, store, ID, Some(6), Some(mark(12))).unwrap_err();
        assert!(back.to_string().contains("store rolled back"), "{back}");
        assert!(back.to_string().contains("newest 6 acknowledged"), "{back}");
        let gone = judge(dir, store, ID, None, Some(mark(3))).unwrap_err();
        assert!(gone.to_string().contains("store rolled back"), "{gone}");
        let other = judge(dir, store, &"f".repeat(32), Some(40), Some(mark(3))).unwrap_err();
        assert!(
            other.to_string().contains("missing or was replaced"),
            "{other}"
        );
        // A mark of a store that acknowledged nothing (a stop while first created).
        assert_eq!(
            judge(dir, store, &"f".repeat(32), None, Some(mark(0))).unwrap(),
            0
        );
        let missing = judge(dir, store, ID, Some(4), None).unwrap_err();
        assert!(missing.to_string().contains("mark is missing"), "{missing}");
    }
}
