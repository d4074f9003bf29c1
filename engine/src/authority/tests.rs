use std::path::PathBuf;

use openraft::testing::{StoreBuilder, Suite};

use super::log::LogStore;
use super::machine::Machine;
use super::types::{StorageError, TypeConfig};

/// Removes a test's storage directory when the suite drops it.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, Machine, Scratch> for Builder {
    async fn build(&self) -> Result<(Scratch, LogStore, Machine), StorageError> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("grid-authority-suite-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let log = LogStore::open(&dir.join("log")).expect("the log opens");
        let machine = Machine::open(&dir.join("snapshots"), Some(log.database()), None)
            .expect("the machine opens");
        Ok((Scratch(dir), log, machine))
    }
}

/// openraft's own conformance suite for log and state machine storage: vote and
/// log persistence, truncation, purge, applied state, snapshots.
#[test]
fn the_storage_passes_openrafts_suite() {
    Suite::test_all(Builder).expect("openraft's storage suite");
}
