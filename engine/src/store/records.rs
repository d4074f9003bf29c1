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
use crate::limits::{RECORD_KEY_BYTES_MAX, RECORD_VALUE_BYTES_MAX};

/// What a key holds after [`Records::put_first`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum First {
    /// The bytes given: written by this put, or by an identical earlier one.
    Ours,
    /// Another writer's bytes, which stay.
    Theirs(Vec<u8>),
}

/// A store of small values by key, first write wins.
pub trait Records: Send + Sync {
    /// Writes `value` under `key` unless the key holds a value; durable when it returns.
    fn put_first(&self, key: &str, value: &[u8]) -> Result<First, ArchiveError>;
    /// The value `key` holds, `None` when it holds none (read after every write that
    /// returned: consistent, not eventual).
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ArchiveError>;
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

    fn check(&self) -> Result<(), ArchiveError> {
        self.blobs.check()
    }
}
