//! The ground floor's storage machinery, shared by every capability and importing
//! none: private directories, group commit of fsyncs, the stop on a storage failure,
//! named crash points, the byte layout of composite store keys, the store's identity
//! and high-water mark kept outside it (`mark`, `high_water`, written through
//! `Durable`), what the stores hold on disk (`usage`), and the archive answers move to
//! past their hot window (`archive`).
//!
//! Invariants kept here, stated as absences: nothing in this module knows a capability;
//! no directory it accepts is readable by group or other; no write is reported durable
//! before an fsync that began after it covered it.

pub mod archive;
pub mod arrival;
pub mod checkpoint;
pub mod commit;
mod durable;
pub mod dynamodb;
pub mod failpoints;
pub mod held;
pub mod high_water;
pub mod keys;
pub mod mark;
mod private;
pub mod records;
pub mod replace;
pub mod s3;
pub mod sealed;
pub mod shelf;
pub mod transfer;
mod unpack;
pub mod usage;

pub use commit::Syncer;
pub use durable::Durable;
pub use failpoints::{Action, Failpoint, Failpoints};
pub use private::{PrivateDirError, ensure_private_dir, key_file, sync_dir, write_private};

/// A storage failure in the middle of an operation: the host cannot know what is
/// durable, so it stops; a restart recovers from the store.
pub fn fatal(dir: &std::path::Path, what: &str, error: impl std::fmt::Display) -> ! {
    // Never `eprintln!`: it panics when stderr is a closed pipe, and this must abort.
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "gridd: {}: storage failed while {what}: {error}; stopping\n",
            dir.display()
        ),
    );
    std::process::abort();
}

/// A storage failure in words an operator can act on — fjall's own `Display` is its
/// Debug form (`FjallError: JournalRecovery(ChecksumMismatch)`), kept in parentheses
/// for a bug report. Damage is never read past and never answered by starting the
/// store afresh: that would run acknowledged operation ids again (SPEC §1.5).
pub fn describe(error: &fjall::Error) -> String {
    const DAMAGED: &str = "the files were changed or damaged on disk; Grid does not read past damage nor start the store afresh. Stop gridd and restore this directory from a backup taken while gridd was stopped";
    match error {
        fjall::Error::Io(e) => format!("{e}"),
        fjall::Error::JournalRecovery(e) => {
            format!("its write-ahead journal does not recover ({e:?}): {DAMAGED}")
        }
        fjall::Error::Storage(e) => format!("a table does not read back ({e:?}): {DAMAGED}"),
        fjall::Error::InvalidVersion(_)
        | fjall::Error::Decompress(_)
        | fjall::Error::InvalidTrailer
        | fjall::Error::InvalidTag(_)
        | fjall::Error::Unrecoverable => format!("it does not open ({error:?}): {DAMAGED}"),
        fjall::Error::Poisoned => "an earlier write did not become durable (the disk refused an fsync); no later write is trusted until gridd restarts and recovers".to_owned(),
        fjall::Error::Locked => "another process holds its lock".to_owned(),
        other => format!("{other:?}"),
    }
}

/// How every keyspace of the host store is created: its memtable flushed to tables past
/// `STORE_MEMTABLE_BYTES_MAX`, so fjall's journal — what an open replays — is released
/// early (an option fjall records when the keyspace is created).
pub fn keyspace_options() -> fjall::KeyspaceCreateOptions {
    fjall::KeyspaceCreateOptions::default()
        .max_memtable_size(crate::limits::STORE_MEMTABLE_BYTES_MAX)
}

/// Opens (or creates) each named keyspace of `database` with [`keyspace_options`], in
/// order: the shape every capability's store takes.
pub fn open_keyspaces<const N: usize>(
    database: &fjall::Database,
    names: [&str; N],
) -> Result<[fjall::Keyspace; N], fjall::Error> {
    let mut opened = Vec::with_capacity(N);
    for name in names {
        opened.push(database.keyspace(name, keyspace_options)?);
    }
    Ok(opened
        .try_into()
        .unwrap_or_else(|_| unreachable!("one keyspace per name")))
}

/// Every record of `keyspace`, decoded from JSON, by its key — what a room reads into
/// memory at open. A record that does not decode refuses the open, naming `what` and
/// its key (quoted, capped).
pub fn decode_all<T: serde::de::DeserializeOwned>(
    keyspace: &fjall::Keyspace,
    what: &str,
) -> Result<std::collections::BTreeMap<String, T>, String> {
    let mut all = std::collections::BTreeMap::new();
    for guard in keyspace.iter() {
        let (key, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
        let key = String::from_utf8_lossy(&key).into_owned();
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{what} `{}` does not decode: {e}",
                grid_spec::diagnostic::quoted(&key)
            )
        })?;
        all.insert(key, value);
    }
    Ok(all)
}

/// Unix milliseconds as RFC 3339 (UTC), or the number itself when out of range.
pub fn rfc3339_ms(ms: u64) -> String {
    i128::from(ms)
        .checked_mul(1_000_000)
        .and_then(|ns| time::OffsetDateTime::from_unix_timestamp_nanos(ns).ok())
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{ms} ms after the Unix epoch"))
}

/// Now, Unix milliseconds (0 before the epoch): when a record was written.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
