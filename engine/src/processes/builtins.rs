//! The built-in Process `demo.count`.

use crate::limits::DEMO_DELAY_MS_MAX;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use fjall::{Database, Keyspace, PersistMode};

use super::service::{Invocation, Process, be64};
use crate::store::fatal;

/// `demo.count`: sleeps `delay_ms` (optional), then increments a durable counter
/// (fsynced) and returns `{"count": N}` — so users and tests can see how often work
/// really ran.
pub(super) struct DemoCount {
    pub(super) database: Database,
    pub(super) keyspace: Keyspace,
    pub(super) dir: PathBuf,
    /// One increment at a time (read, add one, write).
    pub(super) incrementing: Mutex<()>,
}

impl DemoCount {
    pub(super) fn read(keyspace: &Keyspace, dir: &Path) -> u64 {
        keyspace
            .get("count")
            .unwrap_or_else(|e| fatal(dir, "reading the demo counter", e))
            .and_then(|b| be64(&b))
            .unwrap_or(0)
    }
}

impl Process for DemoCount {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        if let Some(delay) = invocation.arguments.get("delay_ms") {
            let delay: u64 = delay
                .parse()
                .ok()
                .filter(|d| *d <= DEMO_DELAY_MS_MAX)
                .ok_or_else(|| {
                    format!("delay_ms `{delay}` is not a whole number of milliseconds up to DEMO_DELAY_MS_MAX ({DEMO_DELAY_MS_MAX})")
                })?;
            std::thread::sleep(Duration::from_millis(delay));
        }
        let count = {
            let _one = self.incrementing.lock().unwrap_or_else(|p| p.into_inner());
            let count = Self::read(&self.keyspace, &self.dir) + 1;
            self.keyspace
                .insert("count", count.to_be_bytes())
                .and_then(|()| {
                    crate::metrics::fsync(|| self.database.persist(PersistMode::SyncAll))
                })
                .unwrap_or_else(|e| fatal(&self.dir, "incrementing the demo counter", e));
            count
        };
        Ok(serde_json::json!({ "count": count }))
    }
}
