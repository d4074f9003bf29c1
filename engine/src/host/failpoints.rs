//! Named crash points compiled into every build and armed only by the environment
//! variable `GRID_FAILPOINTS` (read by `gridd`, never by this library), so journeys can
//! kill a host at an exact point of an operation or lose a reply after a commit.
//!
//! `GRID_FAILPOINTS="POINT=ACTION[,POINT=ACTION]"`; points are listed in [`POINTS`],
//! actions are `abort` (the process aborts: a crash, as SIGKILL), `drop-reply` (the
//! connection closes without the reply, once) and `slow` (the step takes
//! [`SLOW_DELAY`] longer: for the authority's snapshot installation, far longer than
//! openraft's default snapshot-chunk timeout).

use std::collections::HashMap;

/// Every failpoint, in the order an operation reaches them.
pub const POINTS: [&str; 12] = [
    // An operation was executed in memory; nothing of it is durable yet.
    "submit-before-commit",
    // The operation and its answer are durable; the reply is not sent yet.
    "submit-after-commit",
    // An input batch is durable; the reply is not sent yet (input batches only).
    "batch-after-commit",
    // A voter received a whole snapshot from the leader and is about to install it.
    "snapshot-install",
    // A publication is durable in the publisher's outbox; `publish` has not returned.
    "publish-after-commit",
    // A recipient stored delivered values durably; its receipt is not signed or sent.
    "inbox-after-commit",
    // The publisher received a receipt and has not applied or recorded it.
    "receipt-before-record",
    // A receiver journaled a run and reserved its unit; the Process has not started.
    "process-after-dispatch",
    // A receiver's Process ran; its outcome is not journaled.
    "process-before-outcome",
    // A receiver journaled a run's outcome; the reply is not sent (drop-reply loses it).
    "process-reply",
    // A caller journaled its wait; the request is not sent yet.
    "wait-after-journal",
    // The sampler generated tag observations and fed them to models; nothing is durable.
    "sample-before-commit",
];

/// How much longer a step armed `slow` takes.
pub const SLOW_DELAY: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Abort,
    DropReply,
    Slow,
}

#[derive(Debug, Default, Clone)]
pub struct Failpoints {
    armed: HashMap<&'static str, Action>,
}

impl Failpoints {
    /// Parses the `GRID_FAILPOINTS` syntax; an unknown point or action is an error
    /// naming it.
    pub fn parse(spec: &str) -> Result<Failpoints, String> {
        let mut armed = HashMap::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (point, action) = part
                .split_once('=')
                .ok_or_else(|| format!("failpoint `{part}`: expected POINT=ACTION"))?;
            let point = POINTS.iter().find(|p| **p == point).ok_or_else(|| {
                format!(
                    "unknown failpoint `{point}`; points are: {}",
                    POINTS.join(", ")
                )
            })?;
            let action = match action {
                "abort" => Action::Abort,
                "drop-reply" => Action::DropReply,
                "slow" => Action::Slow,
                other => {
                    return Err(format!(
                        "unknown failpoint action `{other}`; actions are: abort, drop-reply, slow"
                    ));
                }
            };
            armed.insert(*point, action);
        }
        Ok(Failpoints { armed })
    }

    /// Reaching `point`: aborts the process if armed so; returns true if the reply
    /// must be dropped (once).
    pub fn reach(&mut self, point: &'static str) -> bool {
        debug_assert!(POINTS.contains(&point), "unknown failpoint {point}");
        match self.armed.get(point) {
            Some(Action::Abort) => {
                eprintln!("gridd: failpoint {point}: aborting");
                std::process::abort();
            }
            Some(Action::DropReply) => {
                self.armed.remove(point);
                true
            }
            Some(Action::Slow) => {
                std::thread::sleep(SLOW_DELAY);
                false
            }
            None => false,
        }
    }

    /// How `point` is armed, for code that must act on it itself (async code sleeps
    /// without blocking its runtime).
    pub fn armed(&self, point: &'static str) -> Option<Action> {
        debug_assert!(POINTS.contains(&point), "unknown failpoint {point}");
        self.armed.get(point).copied()
    }
}
