//! Group commit: one fsync thread per store; every writer that asks waits for an fsync
//! that began after its request, so one fsync covers every write committed before it.
//! A syncer started with a gather pause waits that long before an fsync whenever the
//! previous one covered more than one writer (writers are arriving concurrently), so
//! one fsync covers more of them; a lone writer is never kept waiting.
//!
//! A lone writer on a thread of its own (a control connection's thread, inside
//! [`on_own_thread`]), when no other writer of the store is waiting for an fsync, does
//! not hand its fsync to the thread: it fsyncs on its own thread, without the two
//! thread switches of asking another thread and being woken by it. Whenever another
//! writer is waiting, it asks the thread like every writer, so concurrent writers
//! still share fsyncs (group commit) and are answered together. A runtime worker never
//! fsyncs itself: it would stall every task on it for a device flush.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

type Waiter = tokio::sync::oneshot::Sender<Result<(), String>>;
type Persist = Arc<dyn Fn() -> Result<(), fjall::Error> + Send + Sync>;

thread_local! {
    /// Whether this thread may block on a device flush ([`on_own_thread`]).
    static OWN_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread marked as one of its own: a [`Syncer::sync`] awaited
/// within (e.g. in a `Handle::block_on` on this thread) by a lone writer fsyncs here
/// instead of asking the fsync thread. Only for threads that serve one caller and may
/// block, never a runtime worker.
pub fn on_own_thread<R>(f: impl FnOnce() -> R) -> R {
    let was = OWN_THREAD.with(|own| own.replace(true));
    let result = f();
    OWN_THREAD.with(|own| own.set(was));
    result
}

/// The fsync thread of one store.
pub struct Syncer {
    requests: std::sync::mpsc::Sender<Waiter>,
    persist: Persist,
    /// Writers between asking for an fsync and being answered.
    waiting: AtomicUsize,
}

/// Counts a writer as waiting until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Syncer {
    /// Starts the thread `name`, which calls `persist` (a store's fsync:
    /// [`super::Durable::persist`]) whenever asked, once for every request waiting at
    /// that moment.
    pub fn start(
        persist: impl Fn() -> Result<(), fjall::Error> + Send + Sync + 'static,
        name: &str,
    ) -> std::io::Result<Syncer> {
        Syncer::start_gathering(persist, name, std::time::Duration::ZERO)
    }

    /// As [`Syncer::start`], and when the previous fsync covered more than one
    /// request, the thread pauses `gather` before the next one, so that it covers the
    /// requests arriving meanwhile too (fewer fsyncs under concurrent writers; a write
    /// is still reported durable only after an fsync that began after it).
    pub fn start_gathering(
        persist: impl Fn() -> Result<(), fjall::Error> + Send + Sync + 'static,
        name: &str,
        gather: std::time::Duration,
    ) -> std::io::Result<Syncer> {
        let persist: Persist = Arc::new(persist);
        let on_thread = persist.clone();
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
                    let result = on_thread().map_err(|e| e.to_string());
                    for w in waiting {
                        let _ = w.send(result.clone());
                    }
                }
            })?;
        Ok(Syncer {
            requests,
            persist,
            waiting: AtomicUsize::new(0),
        })
    }

    /// Waits for an fsync that began after this call: it covers every write committed
    /// before. A lone writer on a thread of its own ([`on_own_thread`]) fsyncs here,
    /// blocking this thread; every other writer asks the fsync thread.
    pub async fn sync(&self) -> Result<(), String> {
        let alone = self.waiting.fetch_add(1, Ordering::AcqRel) == 0;
        let _waiting = Waiting(&self.waiting);
        if alone && OWN_THREAD.with(Cell::get) {
            return (self.persist)().map_err(|e| e.to_string());
        }
        let stopped = || "the fsync thread stopped".to_owned();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests.send(tx).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
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

    /// A persist that makes durable what was committed when it began (after a
    /// device-like pause) and records the thread it ran on.
    fn recording(
        committed: &Arc<std::sync::atomic::AtomicU64>,
        durable: &Arc<std::sync::atomic::AtomicU64>,
        threads: &Arc<std::sync::Mutex<Vec<String>>>,
        pause: Duration,
    ) -> impl Fn() -> Result<(), fjall::Error> + Send + Sync + 'static {
        use std::sync::atomic::Ordering::SeqCst;
        let (committed, durable, threads) = (committed.clone(), durable.clone(), threads.clone());
        move || {
            let covers = committed.load(SeqCst);
            std::thread::sleep(pause);
            durable.fetch_max(covers, SeqCst);
            let name = std::thread::current().name().unwrap_or("").to_owned();
            threads.lock().unwrap().push(name);
            Ok(())
        }
    }

    #[test]
    fn a_lone_writer_on_a_thread_of_its_own_fsyncs_there_and_concurrent_ones_share() {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        let committed = Arc::new(AtomicU64::new(0));
        let durable = Arc::new(AtomicU64::new(0));
        let threads = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let persist = recording(&committed, &durable, &threads, Duration::from_micros(300));
        let syncer = Arc::new(Syncer::start(persist, "own-thread-test").unwrap());
        let rt = runtime();
        // A thread of its own that writes and syncs `writes` times, checking each
        // answer came after an fsync that began after its write.
        let writer = |name: String, writes: usize| {
            let (syncer, committed, durable) = (syncer.clone(), committed.clone(), durable.clone());
            let handle = rt.handle().clone();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    for _ in 0..writes {
                        let mine = committed.fetch_add(1, SeqCst) + 1;
                        on_own_thread(|| handle.block_on(syncer.sync())).unwrap();
                        assert!(durable.load(SeqCst) >= mine, "answered before its fsync");
                    }
                })
                .unwrap()
        };
        // One writer at a time: every fsync runs on its thread.
        writer("lone-writer".to_owned(), 20).join().unwrap();
        assert_eq!(*threads.lock().unwrap(), vec!["lone-writer".to_owned(); 20]);
        // Eight at once: they share the fsync thread's fsyncs when they overlap.
        let writers: Vec<_> = (0..8).map(|w| writer(format!("writer-{w}"), 50)).collect();
        for w in writers {
            w.join().unwrap();
        }
        // Outside `on_own_thread` the fsync thread does it, even alone.
        rt.block_on(syncer.sync()).unwrap();
        assert_eq!(
            threads.lock().unwrap().last().map(String::as_str),
            Some("own-thread-test")
        );
    }

    #[test]
    fn a_failed_fsync_on_a_thread_of_its_own_fails_its_writer() {
        let persist = || Err(fjall::Error::Io(std::io::Error::from_raw_os_error(5)));
        let syncer = Syncer::start(persist, "own-thread-failing").unwrap();
        let rt = runtime();
        let failed = on_own_thread(|| rt.block_on(syncer.sync())).unwrap_err();
        assert!(failed.contains("Input/output error"), "{failed}");
        let failed = rt.block_on(syncer.sync()).unwrap_err();
        assert!(failed.contains("Input/output error"), "{failed}");
    }
}
