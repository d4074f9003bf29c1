//! Records (issue 29, SPEC C12): small values by key where the **first write wins** —
//! the index of original answers by operation id, where a retried put must never
//! replace the answer an earlier one recorded. One interface, [`Records`], with two
//! implementations: [`BlobRecords`] over any [`Blobs`] (local files, a bucket), and
//! DynamoDB ([`super::dynamodb::DynamoRecords`], a conditional `PutItem`). One
//! conformance suite runs them all (`engine/tests/records.rs`).
//!
//! Invariants, stated as absences: no put replaces a value a key holds; no put answers
//! "ours" unless the key holds exactly the bytes it was given (a lost reply retried
//! answers "ours" again, another writer's value answers "theirs" with that value); no
//! key or value past its limit reaches a store.

use super::archive::{ArchiveError, Blobs};
use crate::limits::{RECORD_KEY_BYTES_MAX, RECORD_VALUE_BYTES_MAX, REMOTE_LIST_PAGE_MAX};

/// What a key holds after [`Records::put_first`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum First {
    /// The bytes given: written by this put, or by an identical earlier one.
    Ours,
    /// Another writer's bytes, which stay.
    Theirs(Vec<u8>),
}

/// One page of [`Records::scan`]: records (key, value) in no promised order, and the
/// key the next page begins after (none: this was the last).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub records: Vec<(String, Vec<u8>)>,
    pub next: Option<String>,
}

/// A store of small values by key, first write wins.
pub trait Records: Send + Sync {
    /// Writes `value` under `key` unless the key holds a value; durable when it returns.
    fn put_first(&self, key: &str, value: &[u8]) -> Result<First, ArchiveError>;
    /// The value `key` holds, `None` when it holds none (read after every write that
    /// returned: consistent, not eventual).
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ArchiveError>;
    /// The records whose key begins with `prefix`: one page (at most
    /// `REMOTE_LIST_PAGE_MAX` read), from the start or after the key a previous page
    /// named (`after`). Every record written before the first page is on some page
    /// (consistent reads); a page may be empty and still name a next one.
    fn scan(&self, prefix: &str, after: Option<&str>) -> Result<Page, ArchiveError>;
    /// Whether the store answers and keeps this interface's promise (a remote one:
    /// reachable, the table there, a second put of a key refused).
    fn check(&self) -> Result<(), ArchiveError> {
        Ok(())
    }
}

/// A key and value within the limits every store takes, or why not.
pub fn within_limits(key: &str, value: Option<&[u8]>) -> Result<(), ArchiveError> {
    let refused = |detail: String| ArchiveError::Remote {
        store: "records".to_owned(),
        detail,
    };
    if key.is_empty() || key.len() > RECORD_KEY_BYTES_MAX {
        return Err(refused(format!(
            "a record key of {} bytes (1 to RECORD_KEY_BYTES_MAX = {RECORD_KEY_BYTES_MAX})",
            key.len()
        )));
    }
    if let Some(value) = value
        && value.len() > RECORD_VALUE_BYTES_MAX
    {
        return Err(refused(format!(
            "record `{}`: a value of {} bytes (at most RECORD_VALUE_BYTES_MAX = {RECORD_VALUE_BYTES_MAX})",
            grid_spec::diagnostic::quoted(key),
            value.len()
        )));
    }
    Ok(())
}

/// Records as blobs named `PREFIX` + the key in hex (any key a valid name).
pub struct BlobRecords<B> {
    blobs: B,
    prefix: String,
}

impl<B: Blobs> BlobRecords<B> {
    pub fn new(blobs: B, prefix: &str) -> BlobRecords<B> {
        BlobRecords {
            blobs,
            prefix: prefix.to_owned(),
        }
    }

    fn name(&self, key: &str) -> String {
        format!("{}{}", self.prefix, hex::encode(key))
    }
}

impl<B: Blobs> Records for BlobRecords<B> {
    fn put_first(&self, key: &str, value: &[u8]) -> Result<First, ArchiveError> {
        within_limits(key, Some(value))?;
        let name = self.name(key);
        if self.blobs.put_if_absent(&name, value)? {
            return Ok(First::Ours);
        }
        match self.blobs.get(&name)? {
            Some(held) => Ok(First::Theirs(held)),
            // Names are never deleted by this interface: a put that found the name and
            // then no blob is a store that lost one.
            None => Err(ArchiveError::Missing { name }),
        }
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        within_limits(key, None)?;
        self.blobs.get(&self.name(key))
    }

    fn scan(&self, prefix: &str, after: Option<&str>) -> Result<Page, ArchiveError> {
        // Names are the keys in hex, so a key's prefix is its name's, and names sort
        // as their keys do.
        let after = after.map(|key| self.name(key));
        let mut names: Vec<String> = self
            .blobs
            .list(&self.name(prefix))?
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| after.as_ref().is_none_or(|after| name > after))
            .collect();
        names.sort();
        let more = names.len() > REMOTE_LIST_PAGE_MAX;
        names.truncate(REMOTE_LIST_PAGE_MAX);
        let mut page = Page::default();
        for name in names {
            let key = hex::decode(&name[self.prefix.len()..])
                .ok()
                .and_then(|key| String::from_utf8(key).ok())
                .ok_or_else(|| ArchiveError::Damaged {
                    name: name.clone(),
                    detail: "a record name that is not a key in hex".to_owned(),
                })?;
            // Names are never deleted by this interface: one listed and then gone is a
            // store that lost it.
            let value = self
                .blobs
                .get(&name)?
                .ok_or(ArchiveError::Missing { name: name.clone() })?;
            page.records.push((key, value));
        }
        if more {
            page.next = page.records.last().map(|(key, _)| key.clone());
        }
        Ok(page)
    }

    fn check(&self) -> Result<(), ArchiveError> {
        self.blobs.check()
    }
}
