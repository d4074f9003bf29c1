//! The built-in Process `demo.count`.

use crate::limits::DEMO_DELAY_MS_MAX;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use fjall::Keyspace;

use super::service::{Invocation, Process, be64};
use crate::store::fatal;

/// `demo.count`: sleeps `delay_ms` (optional), then increments a durable counter
/// and returns `{"count": N}` — so users and tests can see how often work really ran.
///
/// The increment is written to the host's journal without an fsync of its own: the
/// run's outcome is written to the same journal after it, and no outcome is answered
/// before an fsync that began after its write (group commit) — which makes the
/// increment durable too. A crash before that fsync loses the increment and the
/// outcome together, or keeps the increment alone (the run is then `unknown`, its
/// unit held, as when a crash falls between any Process's effect and its outcome);
/// never an outcome without its increment.
pub(super) struct DemoCount {
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
            // Durable with the outcome written after it (see above).
            self.keyspace
                .insert("count", count.to_be_bytes())
                .unwrap_or_else(|e| fatal(&self.dir, "incrementing the demo counter", e));
            count
        };
        Ok(serde_json::json!({ "count": count }))
    }

    /// Only a run with `delay_ms` sleeps; the increment itself is a journal write.
    fn blocks(&self, invocation: &Invocation<'_>) -> bool {
        invocation.arguments.contains_key("delay_ms")
    }
}
