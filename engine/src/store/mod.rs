//! The ground floor's storage machinery, shared by every capability and importing
//! none: private directories, group commit of fsyncs, the stop on a storage failure,
//! named crash points and the byte layout of composite store keys.
//!
//! Invariants kept here, stated as absences: nothing in this module knows a capability;
//! no directory it accepts is readable by group or other; no write is reported durable
//! before an fsync that began after it covered it.

pub mod commit;
pub mod failpoints;
pub mod keys;
mod private;

pub use commit::Syncer;
pub use failpoints::{Action, Failpoint, Failpoints};
pub use private::{PrivateDirError, ensure_private_dir};

/// A storage failure in the middle of an operation: the host cannot know what is
/// durable, so it stops; a restart recovers from the store.
pub fn fatal(dir: &std::path::Path, what: &str, error: impl std::fmt::Display) -> ! {
    eprintln!(
        "gridd: {}: storage failed while {what}: {error}; stopping",
        dir.display()
    );
    std::process::abort();
}

/// Opens (or creates) each named keyspace of `database` with default options, in
/// order: the shape every capability's store takes.
pub fn open_keyspaces<const N: usize>(
    database: &fjall::Database,
    names: [&str; N],
) -> Result<[fjall::Keyspace; N], fjall::Error> {
    let mut opened = Vec::with_capacity(N);
    for name in names {
        opened.push(database.keyspace(name, fjall::KeyspaceCreateOptions::default)?);
    }
    Ok(opened
        .try_into()
        .unwrap_or_else(|_| unreachable!("one keyspace per name")))
}
