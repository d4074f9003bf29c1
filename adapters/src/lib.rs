//! Industrial sources (SPEC C9, profile `sources`, docs/sources.md): readers of
//! Modbus TCP registers, MQTT Sparkplug B metrics, OPC UA nodes, BACnet/IP objects and
//! passive CAN/J1939 parameters that turn what a device, broker or capture says into
//! [`Reading`]s for one tag each.
//!
//! An adapter never journals, never feeds a model and never reads a device again to
//! recover: it only reports. The host (`grid_engine::host`) assigns each reading its
//! index, journals it (fsync, group commit) and only then projects a good value into
//! the models that read the tag. An adapter started after a restart reports *new*
//! readings; what was journaled before is the host's, and nothing here replays it.
//!
//! Every reading carries its [`Quality`]: a good finite value is projected; anything
//! else — an exception, a timeout, a lost connection, a death, a null, a non-finite
//! number, an alias not in the current birth, a sequence gap — is source **debt**,
//! journaled with its reason; a tag whose type cannot be represented is **refused**
//! before capture, and that refusal is recorded too.

pub mod bacnet;
pub mod j1939;
pub mod limits;
pub mod modbus;
pub mod opcua;
pub mod sparkplug;
pub mod task;

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// What a device or broker said, before scale and offset: kept in the journal beside
/// the value it became.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum Raw {
    /// Nothing arrived (a timeout, a lost connection, a death, a null).
    None,
    Bool(bool),
    /// Modbus registers as read, lowest address first.
    Registers(Vec<u16>),
    Int(i64),
    UInt(u64),
    Float(f64),
    /// A frame's or a reassembled message's data bytes (J1939).
    Bytes(Vec<u8>),
}

/// What a reading means for the models that read its tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "quality")]
pub enum Quality {
    /// A good, finite value, projected into the models.
    Good { value: f64 },
    /// Source debt: not projected; the model input keeps its last good value and is
    /// marked stale until a good reading follows.
    Debt { reason: String },
    /// The tag cannot be captured at all (a non-numeric Sparkplug datatype, a type the
    /// register cannot represent): nothing more is captured until it is installed
    /// again.
    Refused { reason: String },
}

impl Quality {
    /// `good`, `debt` or `refused`.
    pub fn name(&self) -> &'static str {
        match self {
            Quality::Good { .. } => "good",
            Quality::Debt { .. } => "debt",
            Quality::Refused { .. } => "refused",
        }
    }
}

/// One observation of one tag, as the adapter saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    pub raw: Raw,
    #[serde(flatten)]
    pub quality: Quality,
    /// The device's own timestamp (Sparkplug metric or payload timestamp), Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_time_ms: Option<u64>,
    /// When this host received it, Unix ms.
    pub received_ms: u64,
}

/// The state of an adapter's connection, for `inspect tag`, the live view and the
/// metrics. Not journaled: what it means for values is journaled as debt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connection {
    /// `connecting`, `connected`, `awaiting-birth`, `online`, `offline`, `refused`;
    /// J1939: `replaying` (a log), `capturing` (an interface), `ended` (the log is over).
    pub state: String,
    /// Why, when the state is not a healthy one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A passive receive completion (J1939 TP.BAM): a whole multi-packet message was
/// received. The host journals it as its own entry, before the reading decoded from
/// it, so what a projected value came from is on record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub pgn: u32,
    pub source_address: u8,
    /// The reassembled message.
    pub bytes: Vec<u8>,
    /// How many data transfer packets carried it.
    pub packets: u32,
    /// The capture's own timestamp of the last packet, Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_time_ms: Option<u64>,
    pub received_ms: u64,
}

/// What an adapter reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Reading(Reading),
    Connection(Connection),
    /// Always sent before the reading(s) decoded from the completed message.
    Completion(Completion),
}

/// What retiring a tag released at its device: `Ok(detail)` (e.g. "COV subscription
/// cancelled") or `Err(reason)` (the device refused or did not answer; the
/// subscription then expires by its lifetime).
pub type Released = tokio::sync::oneshot::Receiver<Result<String, String>>;

/// One report for one tag: `generation` is the one [`Adapters::start`] was given, so
/// the host can drop what a replaced definition still reported.
#[derive(Debug, Clone, PartialEq)]
pub struct TagEvent {
    pub tag: String,
    pub generation: u64,
    pub event: Event,
}

/// Where adapters report: a bounded channel, so a host that journals slower than a
/// device reports pushes back on the adapter (which then reads or receives less),
/// never drops what it was sent.
pub type Sink = mpsc::Sender<TagEvent>;

/// How an adapter may reach its peer beyond what the tag says: the TLS client
/// configuration of `mqtts://` brokers with the host's membership credentials.
#[derive(Clone, Default)]
pub struct Credentials {
    /// Membership name → a rustls client configuration presenting the host's
    /// certificate of that membership and trusting its authority.
    pub memberships: BTreeMap<String, std::sync::Arc<rustls::ClientConfig>>,
    /// The host's OPC UA application instance certificate and key, from its custody
    /// (`None` when the host has none: `sign`/`sign-and-encrypt` tags are refused).
    pub opcua: Option<OpcUaIdentity>,
}

/// An OPC UA application instance identity kept in the host's custody.
#[derive(Clone)]
pub struct OpcUaIdentity {
    /// The application instance certificate, DER.
    pub certificate_der: Vec<u8>,
    /// Its private key, PKCS#8 DER.
    pub private_key_der: Vec<u8>,
    /// The certificate's application URI (`urn:grid:HOST`).
    pub application_uri: String,
    /// The custody files of the two (async-opcua reads them from disk for every
    /// secure channel): the certificate DER and the key PEM (PKCS#8), both 0600.
    pub certificate_path: std::path::PathBuf,
    pub private_key_path: std::path::PathBuf,
    /// The host directory: a relative `server-certificate` is its.
    pub host_dir: std::path::PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("tag `{tag}` reads {kind}, which this build does not provide")]
    NotProvided { tag: String, kind: &'static str },
    #[error("tag `{tag}`: {reason}")]
    Invalid { tag: String, reason: String },
}

/// The sources this build reads (besides `simulate`, which the host generates itself).
pub const PROVIDED: &[&str] = &["modbus", "sparkplug", "opcua", "bacnet", "j1939"];

/// Whether this build reads `source`.
pub fn provides(source: &grid_spec::TagSource) -> bool {
    PROVIDED.contains(&source.kind())
}

/// The running adapters of one host: started, replaced and stopped by tag name.
pub struct Adapters {
    runtime: tokio::runtime::Handle,
    sink: Sink,
    credentials: Credentials,
    host: String,
    modbus: modbus::Devices,
    sparkplug: BTreeMap<String, sparkplug::Subscription>,
    j1939: BTreeMap<String, j1939::Capture>,
    j1939_pace: j1939::Pace,
    bacnet: bacnet::Objects,
    opcua: BTreeMap<String, opcua::Subscription>,
}

impl Adapters {
    pub fn new(
        runtime: tokio::runtime::Handle,
        sink: Sink,
        host: &str,
        credentials: Credentials,
    ) -> Adapters {
        Adapters {
            modbus: modbus::Devices::new(runtime.clone(), sink.clone()),
            bacnet: bacnet::Objects::new(runtime.clone(), sink.clone()),
            runtime,
            sink,
            credentials,
            host: host.to_owned(),
            sparkplug: BTreeMap::new(),
            j1939: BTreeMap::new(),
            j1939_pace: j1939::default_pace(),
            opcua: BTreeMap::new(),
        }
    }

    /// Replays J1939 logs started from now on at `pace`: the benchmark's switch
    /// (`Pace::Unpaced`), never a topology's.
    pub fn set_j1939_pace(&mut self, pace: j1939::Pace) {
        self.j1939_pace = pace;
    }

    /// Starts reading `tag` (replacing what read it before under another
    /// generation). Refuses a source this build does not read, or a tag whose
    /// credentials are missing, before anything connects.
    pub fn start(&mut self, tag: &grid_spec::Tag, generation: u64) -> Result<(), AdapterError> {
        self.start_after(tag, generation, None)
    }

    /// [`Adapters::start`] after what the host already journaled of `tag`: `resume` is
    /// the largest device time (Unix ms) among the tag's journaled entries (readings
    /// and completions alike). A replayed J1939 log skips every frame captured at or
    /// before it; the other sources read live and ignore it.
    pub fn start_after(
        &mut self,
        tag: &grid_spec::Tag,
        generation: u64,
        resume: Option<u64>,
    ) -> Result<(), AdapterError> {
        self.stop(&tag.name);
        match &tag.source {
            grid_spec::TagSource::Modbus { .. } => self.modbus.start(tag, generation),
            grid_spec::TagSource::Sparkplug { .. } => {
                let subscription = sparkplug::Subscription::start(
                    &self.runtime,
                    self.sink.clone(),
                    &self.host,
                    tag,
                    generation,
                    &self.credentials,
                )?;
                self.sparkplug.insert(tag.name.clone(), subscription);
                Ok(())
            }
            grid_spec::TagSource::J1939 { .. } => {
                let capture = j1939::Capture::start(
                    &self.runtime,
                    self.sink.clone(),
                    tag,
                    generation,
                    resume,
                    self.j1939_pace,
                )?;
                self.j1939.insert(tag.name.clone(), capture);
                Ok(())
            }
            grid_spec::TagSource::Bacnet { .. } => self.bacnet.start(tag, generation),
            grid_spec::TagSource::OpcUa { .. } => {
                let subscription = opcua::Subscription::start(
                    &self.runtime,
                    self.sink.clone(),
                    &self.host,
                    tag,
                    generation,
                    &self.credentials,
                )?;
                self.opcua.insert(tag.name.clone(), subscription);
                Ok(())
            }
            other => Err(AdapterError::NotProvided {
                tag: tag.name.clone(),
                kind: other.kind(),
            }),
        }
    }

    /// Whether `tag` could start here (a source this build reads, its broker's
    /// credentials), without connecting: the host refuses an install that could not.
    pub fn check(&self, tag: &grid_spec::Tag) -> Result<(), AdapterError> {
        match &tag.source {
            grid_spec::TagSource::Modbus { .. } => Ok(()),
            grid_spec::TagSource::Sparkplug { .. } => sparkplug::check(tag, &self.credentials),
            grid_spec::TagSource::J1939 { .. } => j1939::check(tag),
            grid_spec::TagSource::Bacnet { .. } => bacnet::check(tag),
            grid_spec::TagSource::OpcUa { .. } => opcua::check(&self.host, tag, &self.credentials),
            other => Err(AdapterError::NotProvided {
                tag: tag.name.clone(),
                kind: other.kind(),
            }),
        }
    }

    /// Retires `name`: stops reading it and releases what it holds at its device. A
    /// confirmed COV subscription is cancelled and the answer comes through the
    /// returned receiver; `None` when the tag held nothing to release.
    pub fn release(&mut self, name: &str) -> Option<Released> {
        let released = self.bacnet.release(name);
        self.stop(name);
        released
    }

    /// Stops reading `name`; nothing it reports afterwards is sent.
    pub fn stop(&mut self, name: &str) {
        self.modbus.stop(name);
        if let Some(subscription) = self.sparkplug.remove(name) {
            subscription.stop();
        }
        if let Some(capture) = self.j1939.remove(name) {
            capture.stop();
        }
        self.bacnet.stop(name);
        if let Some(subscription) = self.opcua.remove(name) {
            subscription.stop();
        }
    }
}

/// Now, Unix ms (the host's receive time of a reading).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
