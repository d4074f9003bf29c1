//! The host's store as every room writes it: a fjall database whose fsyncs go
//! through [`Durable::persist`], which counts them in the store and, once the fsync
//! returned, in the installation's high-water mark ([`super::high_water`]). Whatever a
//! room acknowledges after `persist` is then covered by both: a store found behind its
//! mark at the next open is refused by name.
//!
//! `Durable` dereferences to the [`fjall::Database`] for batches and keyspaces; its
//! own `persist()` (no argument) is the only fsync it offers — fjall's
//! `persist(mode)` does not compile through it, so no room can fsync past the mark.

use super::high_water::{ACKNOWLEDGED_KEY, HighWater};
use super::{Action, Failpoint, Failpoints};
use fjall::{Database, Keyspace, PersistMode};
use std::sync::{Arc, Mutex};

struct Inner {
    database: Database,
    meta: Keyspace,
    /// The store's count of writes; the lock orders the counts as fjall sequences them.
    writes: Mutex<u64>,
    high_water: Mutex<HighWater>,
    failpoints: Failpoints,
}

/// A host's store with its high-water mark (cheap to clone).
#[derive(Clone)]
pub struct Durable(Arc<Inner>);

impl std::ops::Deref for Durable {
    type Target = Database;
    fn deref(&self) -> &Database {
        &self.0.database
    }
}

impl Durable {
    /// The store `database`, whose count of writes (in `meta`) is `writes`, with its
    /// opened mark.
    pub fn new(
        database: Database,
        meta: Keyspace,
        writes: u64,
        high_water: HighWater,
        failpoints: Failpoints,
    ) -> Durable {
        Durable(Arc::new(Inner {
            database,
            meta,
            writes: Mutex::new(writes),
            high_water: Mutex::new(high_water),
            failpoints,
        }))
    }

    /// Fsyncs every write committed before this call and raises the mark over it: the
    /// store's count is written first (the fsync covers it), then the mark is written
    /// and fsynced. Only then may anything be acknowledged.
    pub fn persist(&self) -> Result<(), fjall::Error> {
        let writes = {
            let mut count = self.0.writes.lock().unwrap_or_else(|p| p.into_inner());
            *count += 1;
            self.0.meta.insert(ACKNOWLEDGED_KEY, count.to_be_bytes())?;
            *count
        };
        if self.0.failpoints.armed(Failpoint::StoreFsync) == Some(Action::Eio) {
            // What a disk refusing the fsync returns; the caller stops the host.
            return Err(fjall::Error::Io(std::io::Error::from_raw_os_error(5)));
        }
        crate::metrics::fsync(|| self.0.database.persist(PersistMode::SyncAll))?;
        if self.0.failpoints.armed(Failpoint::HighWaterBeforeWrite) == Some(Action::Abort) {
            std::process::abort();
        }
        self.0
            .high_water
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .advance(writes)
            .map_err(fjall::Error::Io)
    }

    /// Commits `write` and fsyncs it ([`Durable::persist`]); a failure stops the
    /// process naming `what` (memory may be ahead of the disk; a restart recovers).
    pub fn commit_or_stop(&self, write: fjall::OwnedWriteBatch, dir: &std::path::Path, what: &str) {
        if let Err(e) = write.commit().and_then(|()| self.persist()) {
            super::fatal(dir, what, e);
        }
    }

    /// The store's count of writes so far (the newest may not be fsynced yet).
    pub fn writes(&self) -> u64 {
        *self.0.writes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fjall database itself.
    pub fn database(&self) -> &Database {
        &self.0.database
    }
}
