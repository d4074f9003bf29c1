//! One device address's task: a single TCP connection, every tag of that address polled
//! at its own interval on a fixed grid of due times, due tags coalesced into as few
//! reads as Modbus allows, and what each read meant reported per tag.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use grid_spec::ModbusRegister;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout, timeout_at};
use tokio_modbus::client::{Context, Reader, tcp};
use tokio_modbus::prelude::SlaveContext;
use tokio_modbus::{ExceptionCode, Slave};

use super::decode::{self, Encoding};
use super::plan::{self, Read, Span};
use crate::limits::{
    MODBUS_CONNECT_TIMEOUT_MS, MODBUS_RECONNECT_DELAY_MS_MAX, MODBUS_RECONNECT_DELAY_MS_MIN,
    MODBUS_RESPONSE_TIMEOUT_MS,
};
use crate::{Connection, Event, Quality, Raw, Reading, Sink, TagEvent, now_ms};

/// One tag as its device's task polls it.
#[derive(Debug, Clone)]
pub(super) struct Point {
    pub tag: String,
    pub generation: u64,
    pub span: Span,
    pub encoding: Encoding,
    pub interval: Duration,
}

/// What [`super::Devices`] asks a device's task. The task ends when the channel closes.
pub(super) enum Command {
    /// Poll this tag (replacing what polled it before).
    Start(Point),
    Stop(String),
}

/// Which generation of each tag may still report. [`super::Devices`] changes it in
/// `start` and `stop` before returning; a task checks it in the same critical section
/// as the send, so nothing reaches the sink for a tag after `stop` returned, or for a
/// generation after it was replaced.
pub(super) type Active = Arc<Mutex<HashMap<String, u64>>>;

/// The sink is closed: nobody listens any more, and the task ends.
struct Closed;

/// A tag's state in its device's task.
struct Polled {
    point: Point,
    next_due: Instant,
    /// The last reading reported: debt is reported again only when its reason changes.
    reported: Option<Reported>,
    /// The last connection state reported.
    connection: Option<Connection>,
}

#[derive(Debug, PartialEq)]
enum Reported {
    Good,
    Debt(String),
}

/// The tags due in one poll cycle, and where each one's value lies.
struct Cycle {
    tags: Vec<String>,
    spans: Vec<Span>,
}

/// What a device answered to one read.
enum Answer {
    Words(Vec<u16>),
    Bits(Vec<bool>),
}

impl Answer {
    fn len(&self) -> usize {
        match self {
            Answer::Words(words) => words.len(),
            Answer::Bits(bits) => bits.len(),
        }
    }
}

/// Why a read has no values: every tag of the read gets this reason as debt.
enum Failure {
    /// A Modbus exception response (the connection stays open).
    Exception(String),
    /// A timeout, a lost connection, a refused one, a malformed answer.
    Unanswered(String),
}

/// Polls the tags of one device `address` until `commands` closes (or the sink does).
pub(super) async fn run(
    address: String,
    mut commands: mpsc::UnboundedReceiver<Command>,
    sink: Sink,
    active: Active,
) {
    let mut device = Device {
        link: Link::new(address),
        tags: BTreeMap::new(),
        epoch: Instant::now(),
        reporter: Reporter { sink, active },
    };
    let _closed_or_done = device.serve(&mut commands).await;
}

struct Device {
    link: Link,
    tags: BTreeMap<String, Polled>,
    /// The origin of every tag's grid of due times, so tags of one interval fall due
    /// together (and share reads) and lateness never accumulates.
    epoch: Instant,
    reporter: Reporter,
}

impl Device {
    async fn serve(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Result<(), Closed> {
        loop {
            while let Ok(command) = commands.try_recv() {
                self.apply(command).await?;
            }
            let next_due = self.tags.values().map(|t| t.next_due).min();
            let command = match next_due {
                None => commands.recv().await,
                Some(due) => match timeout_at(due, commands.recv()).await {
                    Ok(command) => command,
                    Err(_due) => {
                        self.cycle().await?;
                        continue;
                    }
                },
            };
            match command {
                Some(command) => self.apply(command).await?,
                None => return Ok(()),
            }
        }
    }

    async fn apply(&mut self, command: Command) -> Result<(), Closed> {
        let point = match command {
            Command::Stop(tag) => {
                self.tags.remove(&tag);
                return Ok(());
            }
            Command::Start(point) => point,
        };
        self.tags.remove(&point.tag);
        let span = point.span;
        if let Some(reason) =
            decode::refusal(span.register, span.address, point.encoding.value_type)
        {
            let refused = Reading {
                raw: Raw::None,
                quality: Quality::Refused { reason },
                device_time_ms: None,
                received_ms: now_ms(),
            };
            return self
                .reporter
                .send(&point.tag, point.generation, Event::Reading(refused))
                .await;
        }
        let polled = Polled {
            point,
            next_due: Instant::now(),
            reported: None,
            connection: None,
        };
        self.tags.insert(polled.point.tag.clone(), polled);
        self.sync_connections().await
    }

    /// Reads every due tag (coalesced), reports what each read meant, and moves each
    /// one to its next due time after now.
    async fn cycle(&mut self) -> Result<(), Closed> {
        let now = Instant::now();
        let tags: Vec<String> = self
            .tags
            .iter()
            .filter(|(_, polled)| polled.next_due <= now)
            .map(|(tag, _)| tag.clone())
            .collect();
        let spans = tags.iter().map(|tag| self.tags[tag].point.span).collect();
        let cycle = Cycle { tags, spans };
        for read in plan::coalesce(&cycle.spans) {
            let outcome = self.link.read(&read).await;
            self.sync_connections().await?;
            match outcome {
                // Read each tag alone, so each gets its own answer (only some of them
                // may be the cause).
                Err(Failure::Exception(_)) if read.members.len() > 1 => {
                    for &member in &read.members {
                        let alone = Read::alone(cycle.spans[member], member);
                        let outcome = self.link.read(&alone).await;
                        self.sync_connections().await?;
                        self.report_outcome(&cycle, &alone, outcome).await?;
                    }
                }
                outcome => self.report_outcome(&cycle, &read, outcome).await?,
            }
        }
        let now = Instant::now();
        for tag in &cycle.tags {
            if let Some(polled) = self.tags.get_mut(tag) {
                polled.next_due = next_due(self.epoch, polled.point.interval, now);
            }
        }
        Ok(())
    }

    async fn report_outcome(
        &mut self,
        cycle: &Cycle,
        read: &Read,
        outcome: Result<Answer, Failure>,
    ) -> Result<(), Closed> {
        let received_ms = now_ms();
        for &member in &read.members {
            let (tag, span) = (&cycle.tags[member], cycle.spans[member]);
            let Some(polled) = self.tags.get(tag) else {
                continue;
            };
            let at = read.position(&span);
            let (raw, quality) = match &outcome {
                Ok(Answer::Words(words)) => decode::words(
                    &polled.point.encoding,
                    &words[at..at + usize::from(span.count)],
                ),
                Ok(Answer::Bits(bits)) => decode::bit(&polled.point.encoding, bits[at]),
                Err(Failure::Exception(reason) | Failure::Unanswered(reason)) => (
                    Raw::None,
                    Quality::Debt {
                        reason: reason.clone(),
                    },
                ),
            };
            let reading = Reading {
                raw,
                quality,
                device_time_ms: None,
                received_ms,
            };
            self.report(tag, reading).await?;
        }
        Ok(())
    }

    /// Sends a good reading always, and debt only when its reason differs from the last
    /// reading reported for the tag (so an outage is one debt entry, not one per poll).
    async fn report(&mut self, tag: &str, reading: Reading) -> Result<(), Closed> {
        let Some(polled) = self.tags.get_mut(tag) else {
            return Ok(());
        };
        let reported = match &reading.quality {
            Quality::Good { .. } => Reported::Good,
            Quality::Debt { reason } | Quality::Refused { reason } => {
                Reported::Debt(reason.clone())
            }
        };
        let repeated = reported != Reported::Good && polled.reported.as_ref() == Some(&reported);
        polled.reported = Some(reported);
        if repeated {
            return Ok(());
        }
        let generation = polled.point.generation;
        self.reporter
            .send(tag, generation, Event::Reading(reading))
            .await
    }

    /// Reports the link's state to every tag that has not seen it yet.
    async fn sync_connections(&mut self) -> Result<(), Closed> {
        let state = &self.link.state;
        let stale: Vec<(String, u64)> = self
            .tags
            .values_mut()
            .filter(|polled| polled.connection.as_ref() != Some(state))
            .map(|polled| {
                polled.connection = Some(state.clone());
                (polled.point.tag.clone(), polled.point.generation)
            })
            .collect();
        let state = state.clone();
        for (tag, generation) in stale {
            self.reporter
                .send(&tag, generation, Event::Connection(state.clone()))
                .await?;
        }
        Ok(())
    }
}

/// Where a device's task reports, and which generations may still report.
struct Reporter {
    sink: Sink,
    active: Active,
}

impl Reporter {
    /// Waits for room in the sink (backpressure, never a drop), then sends the event
    /// if this generation of the tag is still active.
    async fn send(&self, tag: &str, generation: u64, event: Event) -> Result<(), Closed> {
        let permit = self.sink.reserve().await.map_err(|_| Closed)?;
        let active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        if active.get(tag) == Some(&generation) {
            permit.send(TagEvent {
                tag: tag.to_owned(),
                generation,
                event,
            });
        }
        Ok(())
    }
}

/// The first due time on `interval`'s grid from `epoch` that is after `now`: a late
/// cycle skips the due times it missed instead of shifting every later one.
fn next_due(epoch: Instant, interval: Duration, now: Instant) -> Instant {
    let interval_ns = interval.as_nanos().max(1);
    let ticks = now.saturating_duration_since(epoch).as_nanos() / interval_ns + 1;
    let offset_ns = u64::try_from(ticks * interval_ns).unwrap_or(u64::MAX);
    epoch + Duration::from_nanos(offset_ns)
}

/// The one TCP connection to a device, opened when a read needs it and reopened after
/// a failure with a bounded, doubling delay.
struct Link {
    address: String,
    context: Option<Context>,
    /// `connecting` (never connected yet), `connected` or `offline` with why.
    state: Connection,
    /// Why there is no connection (the debt of every read until one opens).
    failure: String,
    retry_at: Instant,
    delay: Duration,
}

impl Link {
    fn new(address: String) -> Link {
        Link {
            address,
            context: None,
            state: connection("connecting", None),
            failure: String::new(),
            retry_at: Instant::now(),
            delay: Duration::from_millis(MODBUS_RECONNECT_DELAY_MS_MIN),
        }
    }

    /// The open connection, opening one unless the last attempt failed too recently.
    async fn ready(&mut self) -> Result<&mut Context, String> {
        if self.context.is_none() {
            if Instant::now() < self.retry_at {
                return Err(self.failure.clone());
            }
            match connect(&self.address).await {
                Ok(context) => {
                    self.context = Some(context);
                    self.state = connection("connected", None);
                    self.delay = Duration::from_millis(MODBUS_RECONNECT_DELAY_MS_MIN);
                }
                Err(error) => {
                    self.failure = format!("connection refused: {error}");
                    self.state = connection("offline", Some(&self.failure));
                    self.retry_at = Instant::now() + self.delay;
                    self.delay =
                        (self.delay * 2).min(Duration::from_millis(MODBUS_RECONNECT_DELAY_MS_MAX));
                    return Err(self.failure.clone());
                }
            }
        }
        Ok(self.context.as_mut().expect("opened above"))
    }

    /// One read request, answered in time or failed; a failure other than an
    /// exception response drops the connection (the next read reopens it at once).
    async fn read(&mut self, read: &Read) -> Result<Answer, Failure> {
        let context = self.ready().await.map_err(Failure::Unanswered)?;
        context.set_slave(Slave(read.unit));
        let (address, count) = (read.address, read.count);
        let asked = async {
            match read.register {
                ModbusRegister::Holding => context
                    .read_holding_registers(address, count)
                    .await
                    .map(|r| r.map(Answer::Words)),
                ModbusRegister::Input => context
                    .read_input_registers(address, count)
                    .await
                    .map(|r| r.map(Answer::Words)),
                ModbusRegister::Coil => context
                    .read_coils(address, count)
                    .await
                    .map(|r| r.map(Answer::Bits)),
                ModbusRegister::Discrete => context
                    .read_discrete_inputs(address, count)
                    .await
                    .map(|r| r.map(Answer::Bits)),
            }
        };
        let answered = timeout(Duration::from_millis(MODBUS_RESPONSE_TIMEOUT_MS), asked).await;
        let reason = match answered {
            Ok(Ok(Ok(answer))) if answer.len() >= usize::from(count) => return Ok(answer),
            Ok(Ok(Ok(answer))) => format!(
                "protocol error: asked for {count} values, answered {}",
                answer.len()
            ),
            Ok(Ok(Err(code))) => return Err(Failure::Exception(exception_reason(code))),
            Ok(Err(tokio_modbus::Error::Transport(error))) => {
                format!("connection lost: {}", io_reason(&error))
            }
            Ok(Err(tokio_modbus::Error::Protocol(error))) => format!("protocol error: {error}"),
            Err(_elapsed) => "timeout".to_owned(),
        };
        self.drop_connection(&reason);
        Err(Failure::Unanswered(reason))
    }

    fn drop_connection(&mut self, reason: &str) {
        self.context = None;
        self.failure = reason.to_owned();
        self.state = connection("offline", Some(reason));
        self.retry_at = Instant::now();
    }
}

async fn connect(address: &str) -> Result<Context, String> {
    let connecting = async {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        Ok::<_, io::Error>(tcp::attach(stream))
    };
    match timeout(Duration::from_millis(MODBUS_CONNECT_TIMEOUT_MS), connecting).await {
        Ok(Ok(context)) => Ok(context),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_elapsed) => Err(format!(
            "no connection within {MODBUS_CONNECT_TIMEOUT_MS} ms"
        )),
    }
}

fn connection(state: &str, detail: Option<&str>) -> Connection {
    Connection {
        state: state.to_owned(),
        detail: detail.map(str::to_owned),
    }
}

/// `exception: ` and the exception's name as the Modbus specification spells it.
fn exception_reason(code: ExceptionCode) -> String {
    let name = match code {
        ExceptionCode::IllegalFunction => "illegal function",
        ExceptionCode::IllegalDataAddress => "illegal data address",
        ExceptionCode::IllegalDataValue => "illegal data value",
        ExceptionCode::ServerDeviceFailure => "server device failure",
        ExceptionCode::Acknowledge => "acknowledge",
        ExceptionCode::ServerDeviceBusy => "server device busy",
        ExceptionCode::MemoryParityError => "memory parity error",
        ExceptionCode::GatewayPathUnavailable => "gateway path unavailable",
        ExceptionCode::GatewayTargetDevice => "gateway target device failed to respond",
        ExceptionCode::Custom(code) => return format!("exception: code {code:#04x}"),
    };
    format!("exception: {name}")
}

/// tokio-modbus reports a stream the device closed as the thread's last OS error,
/// which is no error at all (0) or the would-block of the previous read.
fn io_reason(error: &io::Error) -> String {
    if error.raw_os_error() == Some(0) || error.kind() == io::ErrorKind::WouldBlock {
        "closed by the device".to_owned()
    } else {
        error.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_stay_on_the_grid_and_skip_what_was_missed() {
        let epoch = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(next_due(epoch, ms(500), epoch), epoch + ms(500));
        assert_eq!(next_due(epoch, ms(500), epoch + ms(499)), epoch + ms(500));
        assert_eq!(next_due(epoch, ms(500), epoch + ms(500)), epoch + ms(1000));
        // A cycle that ran 1.3 s late lands on the next point of the same grid.
        assert_eq!(next_due(epoch, ms(500), epoch + ms(1800)), epoch + ms(2000));
    }

    #[test]
    fn exceptions_are_named() {
        assert_eq!(
            exception_reason(ExceptionCode::IllegalDataAddress),
            "exception: illegal data address"
        );
        assert_eq!(
            exception_reason(ExceptionCode::ServerDeviceFailure),
            "exception: server device failure"
        );
        assert_eq!(
            exception_reason(ExceptionCode::Custom(0x42)),
            "exception: code 0x42"
        );
    }
}
