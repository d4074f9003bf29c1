//! Group commit: one fsync thread per store; every writer that asks waits for an fsync
//! that began after its request, so one fsync covers every write committed before it.

use fjall::{Database, PersistMode};

type Waiter = tokio::sync::oneshot::Sender<Result<(), String>>;

/// The fsync thread of one store.
pub struct Syncer {
    requests: std::sync::mpsc::Sender<Waiter>,
}

impl Syncer {
    /// Starts the thread `name`, which fsyncs `database` whenever asked, once for
    /// every request waiting at that moment.
    pub fn start(database: Database, name: &str) -> std::io::Result<Syncer> {
        let (requests, pending) = std::sync::mpsc::channel::<Waiter>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while let Ok(first) = pending.recv() {
                    let mut waiting = vec![first];
                    waiting.extend(pending.try_iter());
                    let result = crate::metrics::fsync(|| database.persist(PersistMode::SyncAll))
                        .map_err(|e| e.to_string());
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
