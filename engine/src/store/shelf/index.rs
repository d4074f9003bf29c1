//! The archive's index by id in a records store (`archive "dynamodb://TABLE"`, issue
//! 29, docs/storage.md "Adapters"): the segments stay in the installation's own
//! `DIR/archive`, and where each archived answer lives moves out of the local store into
//! the table, first answer wins. What stays local per id is a 16-byte digest of its key
//! (`archive-ids`), so a new id needs no remote call, and an id the host archived whose
//! record the table no longer holds is named, never taken for a new one.
//!
//! A segment's index entries are committed locally first, in the write that removes its
//! answers from the hot store, with one `archive-unpublished` marker per entry; then each
//! is put in the table; then one synced write drops the local entries and markers put
//! there. A stop anywhere in between leaves markers, and the next pass (or start) puts
//! them again: a put that finds its own value is the same put.
//!
//! The table is not trusted: a record's value is the entry's [`Located`] and an
//! HMAC-SHA256 over the host, the key and the location under the installation's own
//! `keys/archive-index.key`; a record changed, moved to another key or written by
//! another installation does not open, and the entry it points to must carry the key
//! asked for.
//!
//! Invariants, stated as absences: no index entry leaves the local store before the
//! table answered that it holds exactly that entry; no id whose digest the host keeps is
//! answered "absent"; no record is accepted whose tag does not verify.

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

use super::{Shelf, fatal};
use crate::store::Durable;
use crate::store::archive::{ArchiveError, Located};
use crate::store::records::{First, Page, Records};

/// What a record's tag covers before the host, key and location.
const TAG_CONTEXT: &[u8] = b"grid-archive-index/1\0";
/// The tag's length in a record's value, after the location.
const TAG: usize = 32;
/// The local digest of an archived key.
pub(super) const ID_DIGEST: usize = 16;

/// The table an installation's archive index is kept in.
pub struct RemoteIndex {
    records: Box<dyn Records>,
    /// `dynamodb://TABLE`, as messages name it.
    place: String,
    /// The host whose keys these are: each record's key begins `HOST/`.
    host: String,
    /// The installation's index key (`keys/archive-index.key`).
    key: [u8; 32],
}

impl RemoteIndex {
    pub fn new(records: Box<dyn Records>, place: &str, host: &str, key: [u8; 32]) -> RemoteIndex {
        RemoteIndex {
            records,
            place: place.to_owned(),
            host: host.to_owned(),
            key,
        }
    }

    /// Where the index lives, as messages name it.
    pub fn place(&self) -> &str {
        &self.place
    }

    /// Whether the table answers and keeps the first write of a key.
    pub fn check(&self) -> Result<(), ArchiveError> {
        self.records.check()
    }

    /// The table's key of `key`'s record: `HOST/KEY`.
    pub(super) fn record_key(&self, key: &str) -> String {
        format!("{}/{key}", self.host)
    }

    fn mac(&self, key: &str, at: &[u8]) -> hmac::Hmac<Sha256> {
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes any key length");
        mac.update(TAG_CONTEXT);
        mac.update(self.host.as_bytes());
        mac.update(&[0]);
        mac.update(&(key.len() as u64).to_be_bytes());
        mac.update(key.as_bytes());
        mac.update(at);
        mac
    }

    /// Puts `key`'s location in the table (first write wins; the same put again is
    /// the same answer). Another value there is refused by name and left.
    pub fn put(&self, key: &str, at: &Located) -> Result<(), String> {
        let located = at.to_bytes();
        let mut value = located.clone();
        value.extend_from_slice(&self.mac(key, &located).finalize().into_bytes());
        match self.records.put_first(&self.record_key(key), &value) {
            Ok(First::Ours) => Ok(()),
            Ok(First::Theirs(_)) => Err(format!(
                "the archive index {} holds another entry for `{}/{}` (written by another installation of host {0}, or changed behind Grid's back): it is never replaced, and the answer stays indexed in this host's store",
                self.place,
                self.host,
                grid_spec::diagnostic::quoted(key)
            )),
            Err(e) => Err(format!("the archive index does not answer: {e}")),
        }
    }

    /// Where `key`'s entry lives, as the table holds it: `Ok(None)` when it holds no
    /// record; refused when the record's tag does not verify.
    pub fn get(&self, key: &str, quoted: &str) -> Result<Option<Located>, String> {
        let value = self
            .records
            .get(&self.record_key(key))
            .map_err(|e| format!("the archive index does not answer: {e}"))?;
        value
            .map(|value| self.open(key, &value, quoted))
            .transpose()
    }

    /// The location a record of `key` holds, once its tag verifies; refused, naming
    /// the record (`quoted`), when it does not.
    pub(super) fn open(&self, key: &str, value: &[u8], quoted: &str) -> Result<Located, String> {
        let changed = || {
            format!(
                "the archive index {} holds a record `{}/{quoted}` that is not this installation's (changed, moved from another key, or written by another): refused",
                self.place, self.host
            )
        };
        if value.len() < TAG {
            return Err(changed());
        }
        let (located, tag) = value.split_at(value.len() - TAG);
        if self.mac(key, located).verify_slice(tag).is_err() {
            return Err(changed());
        }
        Located::from_bytes(located).ok_or_else(changed)
    }

    /// The records of this host's keys, one page from after `after` (a key of the
    /// table's, `HOST/KEY`).
    pub(super) fn scan(&self, after: Option<&str>) -> Result<Page, String> {
        self.records
            .scan(&format!("{}/", self.host), after)
            .map_err(|e| format!("the archive index does not answer: {e}"))
    }

    /// The key of the table's record key `record` (`HOST/KEY` → `KEY`).
    pub(super) fn key_of<'a>(&self, record: &'a str) -> Option<&'a str> {
        record
            .strip_prefix(self.host.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
    }
}

/// The local digest of an archived key (`archive-ids`).
pub(super) fn id_digest(key: &str) -> [u8; ID_DIGEST] {
    let digest = Sha256::digest(key.as_bytes());
    digest[..ID_DIGEST].try_into().expect("16 bytes")
}

/// The `archive-unpublished` key of `key` in segment `seq`.
pub(super) fn marker(seq: u64, key: &str) -> Vec<u8> {
    let mut out = seq.to_be_bytes().to_vec();
    out.extend_from_slice(key.as_bytes());
    out
}

impl Shelf {
    /// Where `key`'s entry lives in the table of the index, when this host archived
    /// it there (`Ok(None)`: it did not); an id it did whose record is gone or does
    /// not verify is refused, never absent.
    pub(super) fn find_remote(&self, key: &str, quoted: &str) -> Result<Option<Located>, String> {
        let Some(remote) = &self.remote_index else {
            return Ok(None);
        };
        let known = self
            .ids
            .get(id_digest(key))
            .unwrap_or_else(|e| fatal(&self.dir, "reading the archive's ids", e));
        if known.is_none() {
            return Ok(None);
        }
        remote.get(key, quoted)?.map(Some).ok_or_else(|| {
            format!(
                "the archive index {} has no record `{}`, though this host archived `{quoted}` there (removed, or the table rolled back or replaced)",
                remote.place(),
                remote.record_key(quoted)
            )
        })
    }

    /// The puts of [`super::publish`] into the table of a [`RemoteIndex`] (none:
    /// nothing to do) and the write dropping what the table took, changing nothing
    /// else: how many it put, and why it stopped.
    pub(super) fn put_waiting_now(&self, database: &Durable) -> (u64, Option<String>) {
        let Some(remote) = &self.remote_index else {
            return (0, None);
        };
        let dir = &self.dir;
        put_waiting(
            dir,
            database,
            (&self.index, &self.unpublished),
            remote,
            |write| database.commit_or_stop(write, dir, "dropping index entries put in the table"),
        )
    }

    /// Counts what [`Shelf::put_waiting_now`] put, and keeps why it stopped as the
    /// last error (then refused).
    pub(super) fn published(&mut self, put: u64, failed: Option<String>) -> Result<u64, String> {
        self.waiting -= put;
        match failed {
            Some(why) => {
                self.last_error = Some((crate::store::now_ms(), why.clone()));
                Err(why)
            }
            None => Ok(put),
        }
    }
}

/// Puts each index entry waiting in `unpublished` (its location in `index`) into
/// `remote`, in order, until one fails; then hands `commit` one write dropping the
/// markers and local entries of those it put (none put: no write). Answers how many it
/// put, and why it stopped (none: every one was put).
pub(super) fn put_waiting(
    dir: &std::path::Path,
    database: &fjall::Database,
    (index, unpublished): (&fjall::Keyspace, &fjall::Keyspace),
    remote: &RemoteIndex,
    commit: impl FnOnce(fjall::OwnedWriteBatch),
) -> (u64, Option<String>) {
    let mut put = Vec::new();
    let mut failed = None;
    for guard in unpublished.iter() {
        let marker = guard
            .key()
            .unwrap_or_else(|e| fatal(dir, "reading archive index entries waiting", e));
        let key = String::from_utf8_lossy(marker.get(8..).unwrap_or_default()).into_owned();
        let located = index
            .get(&key)
            .unwrap_or_else(|e| fatal(dir, "reading the archive index", e))
            .and_then(|bytes| Located::from_bytes(&bytes));
        let Some(at) = located else {
            failed = Some(format!(
                "the archive index entry of `{}` waits for {} but is not in this store (damaged)",
                grid_spec::diagnostic::quoted(&key),
                remote.place()
            ));
            break;
        };
        match remote.put(&key, &at) {
            Ok(()) => put.push((marker.to_vec(), key)),
            Err(why) => {
                failed = Some(why);
                break;
            }
        }
    }
    if !put.is_empty() {
        let mut write = database.batch();
        for (marker, key) in &put {
            write.remove(unpublished, marker.as_slice());
            write.remove(index, key.as_str());
        }
        commit(write);
    }
    (put.len() as u64, failed)
}
