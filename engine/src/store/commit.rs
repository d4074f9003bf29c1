//! Group commit: one fsync thread per store; every writer that asks waits for an fsync
//! that began after its request, so one fsync covers every write committed before it.
//! A syncer started with a gather pause waits that long before an fsync whenever the
//! previous one covered more than one writer (writers are arriving concurrently), so
//! one fsync covers more of them; a lone writer is never kept waiting.

type Waiter = tokio::sync::oneshot::Sender<Result<(), String>>;

/// The fsync thread of one store.
pub struct Syncer {
    requests: std::sync::mpsc::Sender<Waiter>,
}

impl Syncer {
    /// Starts the thread `name`, which calls `persist` (a store's fsync:
    /// [`super::Durable::persist`]) whenever asked, once for every request waiting at
    /// that moment.
    pub fn start(
        persist: impl Fn() -> Result<(), fjall::Error> + Send + 'static,
        name: &str,
    ) -> std::io::Result<Syncer> {
        Syncer::start_gathering(persist, name, std::time::Duration::ZERO)
    }

    /// As [`Syncer::start`], and when the previous fsync covered more than one
    /// request, the thread pauses `gather` before the next one, so that it covers the
    /// requests arriving meanwhile too (fewer fsyncs under concurrent writers; a write
    /// is still reported durable only after an fsync that began after it).
    pub fn start_gathering(
        persist: impl Fn() -> Result<(), fjall::Error> + Send + 'static,
        name: &str,
        gather: std::time::Duration,
    ) -> std::io::Result<Syncer> {
        let (requests, pending) = std::sync::mpsc::channel::<Waiter>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let mut covered = 0;
                while let Ok(first) = pending.recv() {
                    if covered > 1 && !gather.is_zero() {
                        std::thread::sleep(gather);
                    }
                    let mut waiting = vec![first];
                    waiting.extend(pending.try_iter());
                    covered = waiting.len();
                    let result = persist().map_err(|e| e.to_string());
                    for w in waiting {
                        let _ = w.send(result.clone());
                    }
                }
            })?;
        Ok(Syncer { requests })
    }

    /// Waits for an fsync that began after this call: it covers every write committed
    /// before.
    pub async fn sync(&self) -> Result<(), String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests
            .send(tx)
            .map_err(|_| "the fsync thread stopped".to_owned())?;
        rx.await
            .map_err(|_| "the fsync thread stopped".to_owned())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjall::{Database, PersistMode};
    use std::time::{Duration, Instant};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_gathering_syncer_never_keeps_a_lone_writer_waiting_and_covers_concurrent_ones() {
        let dir = std::env::temp_dir().join(format!("grid-commit-gather-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let database = Database::builder(&dir).open().unwrap();
        let keyspace = database
            .keyspace("k", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        // A pause far longer than an fsync: visible if a lone writer waited for it.
        let gather = Duration::from_secs(1);
        let persist = move || database.persist(PersistMode::SyncAll);
        let syncer =
            std::sync::Arc::new(Syncer::start_gathering(persist, "gather-test", gather).unwrap());
        runtime().block_on(async {
            for i in 0..3u8 {
                keyspace.insert([i], [i]).unwrap();
                let asked = Instant::now();
                syncer.sync().await.unwrap();
                assert!(
                    asked.elapsed() < gather,
                    "a lone write waited {:?}",
                    asked.elapsed()
                );
            }
            // Concurrent writers: every one is answered durable.
            let mut all = Vec::new();
            for i in 0..16u8 {
                let syncer = syncer.clone();
                let keyspace = keyspace.clone();
                all.push(tokio::spawn(async move {
                    keyspace.insert([100 + i], [i]).unwrap();
                    syncer.sync().await
                }));
            }
            for one in all {
                one.await.unwrap().unwrap();
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
