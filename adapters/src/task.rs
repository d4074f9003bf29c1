//! What the adapters that run one task per tag share (Sparkplug B, OPC UA, J1939): the
//! [`Reporter`] a task sends through — the host's sink under the tag's stop flag — and
//! the [`Task`] handle that sets the flag and aborts the task, so that nothing is sent
//! for a tag once its handle is stopped or dropped.

use std::sync::{Arc, Mutex, PoisonError};

use crate::{Event, Sink, TagEvent};

/// Where a tag's task reports: the sink, under the stop flag.
#[derive(Clone)]
pub struct Reporter {
    pub sink: Sink,
    pub tag: String,
    pub generation: u64,
    pub stopped: Arc<Mutex<bool>>,
}

impl Reporter {
    /// A reporter for `tag` under `generation`, not stopped.
    pub fn new(sink: Sink, tag: &str, generation: u64) -> Reporter {
        Reporter {
            sink,
            tag: tag.to_owned(),
            generation,
            stopped: Arc::new(Mutex::new(false)),
        }
    }

    /// Sends one event, waiting for room (backpressure). Err: stopped, or the host is
    /// gone — the task ends.
    pub(crate) async fn send(&self, event: Event) -> Result<(), ()> {
        let permit = self.sink.reserve().await.map_err(|_| ())?;
        // Checked while the permit is held: once `Task::stop` has set the flag, no
        // send gets past this point.
        let stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
        if *stopped {
            return Err(());
        }
        permit.send(TagEvent {
            tag: self.tag.clone(),
            generation: self.generation,
            event,
        });
        Ok(())
    }

    /// Whether the tag's handle was stopped.
    pub(crate) fn stopped(&self) -> bool {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One tag's task on the host's runtime; stopping or dropping it sets the reporter's
/// stop flag and aborts the task.
pub struct Task {
    stopped: Arc<Mutex<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Task {
    /// The handle of `task`, which reports through `reporter` (or a clone of it).
    pub fn new(reporter: &Reporter, task: tokio::task::JoinHandle<()>) -> Task {
        Task {
            stopped: reporter.stopped.clone(),
            task,
        }
    }

    /// Ends the task; nothing is sent to the sink once this returns.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        *self.stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Connection;

    #[test]
    fn nothing_is_sent_once_stopped() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (sink, mut events) = tokio::sync::mpsc::channel(4);
        let reporter = Reporter::new(sink, "t", 3);
        let event = || {
            Event::Connection(Connection {
                state: "online".into(),
                detail: None,
            })
        };
        runtime.block_on(async {
            assert!(reporter.send(event()).await.is_ok());
            *reporter.stopped.lock().unwrap() = true;
            assert!(reporter.stopped());
            assert!(reporter.send(event()).await.is_err());
        });
        let first = events.try_recv().unwrap();
        assert_eq!((first.tag.as_str(), first.generation), ("t", 3));
        assert!(events.try_recv().is_err());
    }
}
