//! One measurement of the side-by-side binaries: a warm-up, then a window in which every
//! call that starts is recorded; callers that run calls back to back (one thread each
//! for Grid's control sockets, one tokio task each for the alternatives' clients); what
//! they recorded summed into a [`Tally`]; and the CPU time the servers and this process
//! spent during the window.
//!
//! Every time is in nanoseconds since the run's origin `t0`, one clock for everything.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::limits::REASON_CHARS_MAX;
use crate::procs::{Result, cpu_time, cpu_time_of};
use crate::report::percentile;

/// How long a caller pauses after a failed call (refused, pushed back, unknown): it
/// tries again soon, but does not spin.
pub const FAILURE_PAUSE: Duration = Duration::from_millis(1);

/// Nanoseconds since the run's origin.
pub fn since(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// When a measurement's warm-up ends and its window closes.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub measure_from: Instant,
    pub end: Instant,
    pub from_ns: u64,
    pub end_ns: u64,
}

impl Window {
    /// A warm-up of `warmup` seconds from now, then a window of `seconds`.
    pub fn of(warmup: f64, seconds: f64, t0: Instant) -> Window {
        let measure_from = Instant::now() + Duration::from_secs_f64(warmup);
        let end = measure_from + Duration::from_secs_f64(seconds);
        Window {
            measure_from,
            end,
            from_ns: (measure_from - t0).as_nanos() as u64,
            end_ns: (end - t0).as_nanos() as u64,
        }
    }

    /// Whether a call that started at `start_ns` is recorded (it started in the window).
    pub fn holds(&self, start_ns: u64) -> bool {
        start_ns >= self.from_ns && start_ns < self.end_ns
    }
}

/// Failed calls (recorded, and in the warm-up) and their reasons, each counted.
#[derive(Default, Debug)]
pub struct Failures {
    pub recorded: u64,
    pub warmup: u64,
    pub reasons: BTreeMap<String, u64>,
}

impl Failures {
    /// Counts one failure; a warm-up one's reason is marked `(warm-up)`.
    pub fn note(&mut self, recorded: bool, reason: &str) {
        if recorded {
            self.recorded += 1;
            self.reason(reason);
        } else {
            self.warmup += 1;
            self.reason(format!("(warm-up) {reason}"));
        }
    }

    /// Counts a reason only (a poll that failed, a drain that fell short), cut to
    /// `REASON_CHARS_MAX` characters.
    pub fn reason(&mut self, reason: impl AsRef<str>) {
        self.reasons_n(reason, 1);
    }

    /// As [`Failures::reason`], `n` times.
    pub fn reasons_n(&mut self, reason: impl AsRef<str>, n: u64) {
        let reason: String = reason.as_ref().chars().take(REASON_CHARS_MAX).collect();
        *self.reasons.entry(reason).or_default() += n;
    }

    pub fn merge(&mut self, other: Failures) {
        self.recorded += other.recorded;
        self.warmup += other.warmup;
        for (reason, n) in other.reasons {
            *self.reasons.entry(reason).or_default() += n;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.reasons.is_empty()
    }
}

/// One call that succeeded: when it started, when its answer came, what it answered.
#[derive(Clone, Copy, Debug)]
pub struct Call<T> {
    pub start_ns: u64,
    pub end_ns: u64,
    pub value: T,
}

/// What one caller recorded (warm-up included; the [`Tally`] keeps the window).
#[derive(Debug)]
pub struct Record<T = ()> {
    pub calls: Vec<Call<T>>,
    pub failures: Failures,
}

impl<T> Default for Record<T> {
    fn default() -> Self {
        Record {
            calls: Vec::new(),
            failures: Failures::default(),
        }
    }
}

impl<T> Record<T> {
    /// Notes the outcome of a call that started at `start_ns` and has just ended;
    /// true when it failed.
    pub fn note(
        &mut self,
        window: &Window,
        start_ns: u64,
        t0: Instant,
        outcome: std::result::Result<T, String>,
    ) -> bool {
        match outcome {
            Ok(value) => {
                self.calls.push(Call {
                    start_ns,
                    end_ns: since(t0),
                    value,
                });
                false
            }
            Err(reason) => {
                self.failures.note(start_ns >= window.from_ns, &reason);
                true
            }
        }
    }
}

/// The recorded calls of one measurement, all callers together.
#[derive(Debug)]
pub struct Tally<T = ()> {
    /// The calls that started in the window and succeeded.
    pub calls: Vec<Call<T>>,
    pub failures: Failures,
    /// From the window's start to the last recorded completion (at least the window).
    pub elapsed: Duration,
    /// The recorded calls' latencies, sorted.
    pub latency_ns: Vec<u64>,
}

impl<T> Tally<T> {
    pub fn new(window: &Window, records: Vec<Record<T>>) -> Tally<T> {
        let mut tally = Tally {
            calls: Vec::new(),
            failures: Failures::default(),
            elapsed: Duration::ZERO,
            latency_ns: Vec::new(),
        };
        let mut last = window.end_ns;
        for record in records {
            tally.failures.merge(record.failures);
            for call in record.calls {
                if !window.holds(call.start_ns) {
                    continue;
                }
                tally.latency_ns.push(call.end_ns - call.start_ns);
                last = last.max(call.end_ns);
                tally.calls.push(call);
            }
        }
        tally.elapsed = Duration::from_nanos(last - window.from_ns);
        tally.latency_ns.sort_unstable();
        tally
    }

    pub fn succeeded(&self) -> u64 {
        self.calls.len() as u64
    }

    /// Succeeded calls per second of [`Tally::elapsed`].
    pub fn per_second(&self) -> f64 {
        self.succeeded() as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest-rank percentile of the latencies.
    pub fn p(&self, p: f64) -> Duration {
        percentile(&self.latency_ns, p)
    }

    pub fn mean(&self) -> Duration {
        if self.latency_ns.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.latency_ns.iter().sum::<u64>() / self.latency_ns.len() as u64)
    }
}

/// CPU time spent during a window: by the servers' processes, and by this process (the
/// client side).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    pub server: Duration,
    pub client: Duration,
}

/// Reads the CPU time at the window's start; [`CpuMeter::stop`] gives what was spent.
pub struct CpuMeter {
    pids: Vec<u32>,
    at_start: Cpu,
}

impl CpuMeter {
    pub fn start(pids: Vec<u32>) -> CpuMeter {
        let at_start = Cpu {
            server: cpu_time_of(&pids),
            client: cpu_time(None),
        };
        CpuMeter { pids, at_start }
    }

    pub fn stop(self) -> Cpu {
        Cpu {
            server: cpu_time_of(&self.pids).saturating_sub(self.at_start.server),
            client: cpu_time(None).saturating_sub(self.at_start.client),
        }
    }
}

/// Runs `call(caller, i, seq)` back to back on one thread per caller (`i` its index,
/// `seq` the call's number) until the window ends, pausing [`FAILURE_PAUSE`] after a
/// failure; the meter of the CPU of `pids` and of this process runs from the window's
/// start (stop it when the measurement is over).
pub fn on_threads<C, T, F>(
    callers: Vec<C>,
    window: Window,
    t0: Instant,
    pids: Vec<u32>,
    call: F,
) -> Result<(Vec<Record<T>>, CpuMeter)>
where
    C: Send + 'static,
    T: Send + 'static,
    F: Fn(&mut C, usize, u64) -> std::result::Result<T, String> + Clone + Send + 'static,
{
    on_threads_then(callers, window, t0, pids, call, |_: &mut C| {})
}

/// As [`on_threads`], and `then(caller)` after each call has been recorded (outside
/// its timing), before the next starts.
pub fn on_threads_then<C, T, F, G>(
    callers: Vec<C>,
    window: Window,
    t0: Instant,
    pids: Vec<u32>,
    call: F,
    then: G,
) -> Result<(Vec<Record<T>>, CpuMeter)>
where
    C: Send + 'static,
    T: Send + 'static,
    F: Fn(&mut C, usize, u64) -> std::result::Result<T, String> + Clone + Send + 'static,
    G: Fn(&mut C) + Clone + Send + 'static,
{
    let handles: Vec<_> = callers
        .into_iter()
        .enumerate()
        .map(|(i, mut caller)| {
            let (call, then) = (call.clone(), then.clone());
            std::thread::spawn(move || {
                let mut record = Record::default();
                for seq in 0u64.. {
                    let start = Instant::now();
                    if start >= window.end {
                        break;
                    }
                    let start_ns = (start - t0).as_nanos() as u64;
                    let outcome = call(&mut caller, i, seq);
                    let failed = record.note(&window, start_ns, t0, outcome);
                    then(&mut caller);
                    if failed {
                        std::thread::sleep(FAILURE_PAUSE);
                    }
                }
                record
            })
        })
        .collect();
    std::thread::sleep(
        window
            .measure_from
            .saturating_duration_since(Instant::now()),
    );
    let meter = CpuMeter::start(pids);
    let records = handles
        .into_iter()
        .map(|h| h.join().map_err(|_| "a caller thread panicked"))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((records, meter))
}

/// As [`on_threads`], with one tokio task per caller: `call` takes the caller and gives
/// it back with the outcome.
pub async fn on_tasks<C, T, F, Fut>(
    callers: Vec<C>,
    window: Window,
    t0: Instant,
    pids: Vec<u32>,
    call: F,
) -> Result<(Vec<Record<T>>, CpuMeter)>
where
    C: Send + 'static,
    T: Send + 'static,
    F: Fn(C, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = (C, std::result::Result<T, String>)> + Send,
{
    let tasks: Vec<_> = callers
        .into_iter()
        .enumerate()
        .map(|(i, caller)| {
            let call = call.clone();
            tokio::spawn(async move {
                let mut record = Record::default();
                let mut caller = Some(caller);
                for seq in 0u64.. {
                    let start = Instant::now();
                    if start >= window.end {
                        break;
                    }
                    let start_ns = (start - t0).as_nanos() as u64;
                    let (back, outcome) =
                        call(caller.take().expect("given back by every call"), i, seq).await;
                    caller = Some(back);
                    if record.note(&window, start_ns, t0, outcome) {
                        tokio::time::sleep(FAILURE_PAUSE).await;
                    }
                }
                record
            })
        })
        .collect();
    tokio::time::sleep_until(window.measure_from.into()).await;
    let meter = CpuMeter::start(pids);
    let mut records = Vec::with_capacity(tasks.len());
    for task in tasks {
        records.push(
            task.await
                .map_err(|e| format!("a caller task failed: {e}"))?,
        );
    }
    Ok((records, meter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_keeps_the_calls_that_started_in_the_window() {
        let t0 = Instant::now();
        let window = Window {
            measure_from: t0,
            end: t0,
            from_ns: 100,
            end_ns: 200,
        };
        let mut record = Record::default();
        for (start_ns, end_ns) in [(50, 120), (100, 150), (199, 260), (200, 210)] {
            record.calls.push(Call {
                start_ns,
                end_ns,
                value: (),
            });
        }
        record.failures.note(false, "early");
        record.failures.note(true, "late");
        let tally = Tally::new(&window, vec![record]);
        assert_eq!(tally.succeeded(), 2);
        assert_eq!(tally.latency_ns, vec![50, 61]);
        assert_eq!(tally.elapsed, Duration::from_nanos(160));
        assert_eq!((tally.failures.recorded, tally.failures.warmup), (1, 1));
        assert_eq!(tally.failures.reasons["(warm-up) early"], 1);
    }
}
