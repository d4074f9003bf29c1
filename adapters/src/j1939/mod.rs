//! Passive CAN/J1939 (socketcan): one capture per tag, replaying a candump log at its
//! recorded pace or reading a SocketCAN interface. Nothing is ever transmitted. See
//! docs/sources.md, "CAN/J1939".
//!
//! - [`frame`]: the 29-bit identifier (priority, PGN, destination, source address).
//! - [`value`]: one SPN's value, with J1939-71's "not available" and "error
//!   indicator" ranges as debt.
//! - [`transport`]: passive TP.BAM reassembly.
//! - [`decoder`]: one tag's frames → events (pure).
//! - this module: the tasks that feed the decoder and report.

pub mod decoder;
pub mod frame;
pub mod transport;
pub mod value;

use std::path::{Path, PathBuf};
use std::time::Duration;

use socketcan::{CanAnyFrame, CanFrame, CanSocket, EmbeddedFrame, Id as CanId, Socket};

use crate::limits::{J1939_CAPTURE_POLL_MS, J1939_REPLAY_SLEEP_MS_MAX};
use crate::task::{Reporter, Task};
use crate::{AdapterError, Connection, Event, Quality, Raw, Reading, Sink, now_ms};
use decoder::Decoder;

/// How a log is replayed: at its recorded pace (what a tag does), or as fast as the
/// host takes it (the benchmark's switch: never in a topology).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pace {
    #[default]
    Recorded,
    Unpaced,
}

/// Whether logs replay unpaced in this process (see [`set_default_pace`]).
static UNPACED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The pace of every [`crate::Adapters`] created from now on in this process: `gridd`
/// sets [`Pace::Unpaced`] when the benchmark asks (`GRID_BENCH_J1939_UNPACED`), never a
/// topology.
pub fn set_default_pace(pace: Pace) {
    UNPACED.store(pace == Pace::Unpaced, std::sync::atomic::Ordering::Relaxed);
}

/// The pace [`crate::Adapters::new`] starts with.
pub fn default_pace() -> Pace {
    if UNPACED.load(std::sync::atomic::Ordering::Relaxed) {
        Pace::Unpaced
    } else {
        Pace::Recorded
    }
}

/// One tag's capture: a task on the host's runtime.
pub struct Capture {
    task: Task,
}

/// What a tag reads, once checked.
enum Input {
    Log(PathBuf),
    Interface(String),
}

fn input(tag: &grid_spec::Tag) -> Result<(Input, Decoder), AdapterError> {
    let invalid = |reason: String| AdapterError::Invalid {
        tag: tag.name.clone(),
        reason,
    };
    let grid_spec::TagSource::J1939 {
        input,
        pgn,
        spn,
        source_address,
    } = &tag.source
    else {
        return Err(invalid(format!("reads {}, not j1939", tag.source.kind())));
    };
    let decoder = Decoder::new(*pgn, *spn, *source_address)
        .ok_or_else(|| invalid(format!("SPN {spn} in PGN {pgn} is not one Grid decodes")))?;
    let input = match input {
        grid_spec::J1939Input::Log(path) => Input::Log(PathBuf::from(path)),
        grid_spec::J1939Input::Interface(name) => Input::Interface(name.clone()),
    };
    Ok((input, decoder))
}

/// Whether `tag` could start, without capturing: its SPN decodes, its log opens, or
/// this kernel has CAN and the interface exists (both known before capture, so the
/// install is refused with the reason).
pub fn check(tag: &grid_spec::Tag) -> Result<(), AdapterError> {
    let (input, _) = input(tag)?;
    let reason = match input {
        Input::Log(path) => std::fs::File::open(&path)
            .err()
            .map(|e| format!("cannot open the candump log `{}`: {e}", path.display())),
        Input::Interface(name) => open_interface(&name).err(),
    };
    match reason {
        Some(reason) => Err(AdapterError::Invalid {
            tag: tag.name.clone(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Opens a raw CAN socket on `name`: first one bound to every interface (what fails
/// where the kernel has no CAN), then the interface's own.
fn open_interface(name: &str) -> Result<CanSocket, String> {
    CanSocket::open_iface(0).map_err(|e| format!("no CAN support in this kernel: {e}"))?;
    CanSocket::open(name).map_err(|e| format!("no CAN interface `{name}`: {e}"))
}

impl Capture {
    /// Starts reading `tag` (a `j1939` source); a log replay skips every frame captured
    /// at or before `resume` (Unix ms: the device time of the tag's last journaled
    /// entry), so a restarted host never reads a frame twice.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        sink: Sink,
        tag: &grid_spec::Tag,
        generation: u64,
        resume: Option<u64>,
        pace: Pace,
    ) -> Result<Capture, AdapterError> {
        let (input, decoder) = input(tag)?;
        let reporter = Reporter::new(sink, &tag.name, generation);
        let stop = reporter.clone();
        let spawned = match input {
            Input::Log(path) => runtime.spawn(replay(path, decoder, reporter, resume, pace)),
            Input::Interface(name) => {
                let handle = runtime.clone();
                runtime.spawn(async move {
                    let _ = tokio::task::spawn_blocking(move || {
                        capture(&handle, &name, decoder, reporter)
                    })
                    .await;
                })
            }
        };
        Ok(Capture {
            task: Task::new(&stop, spawned),
        })
    }

    /// Ends the capture; nothing is sent to the sink once this returns.
    pub fn stop(self) {
        self.task.stop();
    }
}

/// What a capture sends besides single events (the sending itself is the shared
/// `crate::task::Reporter`'s).
impl Reporter {
    async fn send_all(&self, events: &mut Vec<Event>) -> Result<(), ()> {
        for event in events.drain(..) {
            self.send(event).await?;
        }
        Ok(())
    }

    /// A capture that cannot run: one refused reading and the connection's state.
    async fn refuse(&self, reason: String) {
        let refused = Event::Reading(Reading {
            raw: Raw::None,
            quality: Quality::Refused {
                reason: reason.clone(),
            },
            device_time_ms: None,
            received_ms: now_ms(),
        });
        if self.send(refused).await.is_ok() {
            let _ = self.send(connection("refused", Some(reason))).await;
        }
    }
}

fn connection(state: &str, detail: Option<String>) -> Event {
    Event::Connection(Connection {
        state: state.to_owned(),
        detail,
    })
}

/// One data frame of a record: its identifier, whether 29-bit, and its bytes (remote,
/// error and FD frames carry no J1939 message here).
fn data_frame(frame: &CanAnyFrame) -> Option<(u32, bool, &[u8])> {
    let CanAnyFrame::Normal(frame) = frame else {
        return None;
    };
    Some(match frame.id() {
        CanId::Standard(id) => (u32::from(id.as_raw()), false, frame.data()),
        CanId::Extended(id) => (id.as_raw(), true, frame.data()),
    })
}

/// Replays the log at `path` into the decoder, frame by frame at the recorded pace
/// (relative to the first frame replayed), then reports `ended`.
async fn replay(
    path: PathBuf,
    mut decoder: Decoder,
    reporter: Reporter,
    resume: Option<u64>,
    pace: Pace,
) {
    let mut reader = match socketcan::dump::Reader::from_file(&path) {
        Ok(reader) => reader,
        Err(e) => {
            let reason = format!("cannot open the candump log `{}`: {e}", path.display());
            return reporter.refuse(reason).await;
        }
    };
    let detail = Some(describe(&path, resume));
    if reporter
        .send(connection("replaying", detail))
        .await
        .is_err()
    {
        return;
    }
    let mut events = Vec::new();
    let mut start: Option<(u64, tokio::time::Instant)> = None;
    let (mut replayed, mut malformed) = (0u64, 0u64);
    loop {
        let record = match reader.next_record() {
            Ok(Some(record)) => record,
            Ok(None) => break,
            Err(e) => {
                malformed += 1;
                tracing::warn!(tag = reporter.tag, log = %path.display(), "skipping a line: {e}");
                continue;
            }
        };
        let Some((raw_id, extended, data)) = data_frame(&record.frame) else {
            continue;
        };
        let skipped = resume.is_some_and(|after| record.t_us / 1_000 <= after);
        if !skipped && pace == Pace::Recorded {
            let (first_us, first_at) =
                *start.get_or_insert((record.t_us, tokio::time::Instant::now()));
            let due = first_at + Duration::from_micros(record.t_us.saturating_sub(first_us));
            if wait_until(due, &reporter).await.is_err() {
                return;
            }
        }
        decoder.frame(record.t_us, raw_id, extended, data, now_ms(), &mut events);
        if skipped {
            events.clear();
            continue;
        }
        replayed += 1;
        if reporter.send_all(&mut events).await.is_err() {
            return;
        }
    }
    decoder.finish(now_ms(), &mut events);
    events.retain(|e| !skipped_event(e, resume));
    if reporter.send_all(&mut events).await.is_err() {
        return;
    }
    let detail = format!("{replayed} frames replayed, {malformed} malformed lines skipped");
    let _ = reporter.send(connection("ended", Some(detail))).await;
}

/// Whether an event at the end of a log was journaled before `resume` (a log that
/// ended before the resume point).
fn skipped_event(event: &Event, resume: Option<u64>) -> bool {
    let time = match event {
        Event::Reading(r) => r.device_time_ms,
        Event::Completion(c) => c.device_time_ms,
        Event::Connection(_) => None,
    };
    matches!((time, resume), (Some(t), Some(after)) if t <= after)
}

fn describe(path: &Path, resume: Option<u64>) -> String {
    match resume {
        Some(after) => format!("{} after device time {after} ms", path.display()),
        None => path.display().to_string(),
    }
}

/// Sleeps until `due`, in short steps so a stop is noticed.
async fn wait_until(due: tokio::time::Instant, reporter: &Reporter) -> Result<(), ()> {
    loop {
        if reporter.stopped() {
            return Err(());
        }
        let now = tokio::time::Instant::now();
        if now >= due {
            return Ok(());
        }
        let step = Duration::from_millis(J1939_REPLAY_SLEEP_MS_MAX).min(due - now);
        tokio::time::sleep(step).await;
    }
}

/// Reads `name` live (a blocking thread): every frame into the decoder, expiring
/// waiting multi-packet messages when the bus is quiet, until stopped.
fn capture(runtime: &tokio::runtime::Handle, name: &str, mut decoder: Decoder, reporter: Reporter) {
    let socket = match open_interface(name) {
        Ok(socket) => socket,
        Err(reason) => return runtime.block_on(reporter.refuse(reason)),
    };
    let poll = Duration::from_millis(J1939_CAPTURE_POLL_MS);
    if let Err(e) = socket.set_read_timeout(poll) {
        let reason = format!("cannot wait on CAN interface `{name}`: {e}");
        return runtime.block_on(reporter.refuse(reason));
    }
    if runtime
        .block_on(reporter.send(connection("capturing", Some(name.to_owned()))))
        .is_err()
    {
        return;
    }
    let mut events = Vec::new();
    while !reporter.stopped() {
        let t_us = now_ms() * 1_000;
        match socket.read_frame() {
            Ok(CanFrame::Data(frame)) => {
                let any = CanAnyFrame::Normal(frame);
                if let Some((raw_id, extended, data)) = data_frame(&any) {
                    decoder.frame(t_us, raw_id, extended, data, now_ms(), &mut events);
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                decoder.tick(t_us, now_ms(), &mut events);
            }
            Err(e) => {
                let detail = format!("reading CAN interface `{name}` failed: {e}");
                let _ = runtime.block_on(reporter.send(connection("offline", Some(detail))));
                return;
            }
        }
        if runtime.block_on(reporter.send_all(&mut events)).is_err() {
            return;
        }
    }
}
