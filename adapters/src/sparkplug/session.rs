//! One tag's view of one Sparkplug B edge node: a pure state machine (no IO, no clock —
//! the receive time is passed in) fed the node's MQTT messages and the client's
//! connection changes, answering what to report and whether to ask for a rebirth.
//!
//! Invariants (docs/sources.md, "MQTT Sparkplug B"):
//! - Nothing is read from a data message unless the birth it refers to was seen in the
//!   current run of sequence numbers: at start, after every (re)connect, after a gap,
//!   an unknown alias or a death, the tag is *awaiting birth* and data is debt.
//! - A debt reason is reported once until it changes or a good value follows: an
//!   outage or a flood journals one entry, not one per message.
//! - A metric whose birth declares a non-numeric datatype is refused once and nothing
//!   of it is reported until a birth declares it numeric.

use std::collections::BTreeSet;

use super::payload::{self, DataType, Metric, Payload};
use crate::limits::SPARKPLUG_REBIRTH_REPEAT_MS;
use crate::{Connection, Event, Quality, Raw, Reading};

/// What the session asks its client to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Report this to the host.
    Report(Event),
    /// Publish an NCMD `Node Control/Rebirth` to the edge node.
    RequestRebirth,
}

/// The Sparkplug B namespace of topics (`spBv1.0/GROUP/TYPE/NODE[/DEVICE]`).
pub const NAMESPACE: &str = "spBv1.0";

/// Where a tag's metric lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub group: String,
    pub node: String,
    pub device: Option<String>,
    pub metric: String,
}

impl Address {
    /// The subscriptions that carry every message of the edge node and its devices.
    pub fn filters(&self) -> [String; 2] {
        [
            format!("{NAMESPACE}/{}/+/{}", self.group, self.node),
            format!("{NAMESPACE}/{}/+/{}/+", self.group, self.node),
        ]
    }

    /// The topic of node commands (the rebirth request).
    pub fn ncmd_topic(&self) -> String {
        format!("{NAMESPACE}/{}/NCMD/{}", self.group, self.node)
    }
}

/// The message types of the edge node's topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NBirth,
    NData,
    NDeath,
    DBirth,
    DData,
    DDeath,
}

/// What a birth declared about the tag's metric, and which aliases it declared.
#[derive(Debug, Clone, Default)]
struct Birth {
    aliases: BTreeSet<u64>,
    /// The tag's metric as declared: its alias (if any) and datatype code.
    ours: Option<(Option<u64>, u32)>,
}

impl Birth {
    fn of(payload: &Payload, metric: &str) -> Birth {
        let mut birth = Birth::default();
        for m in &payload.metrics {
            if let Some(alias) = m.alias {
                birth.aliases.insert(alias);
            }
            if m.name.as_deref() == Some(metric) {
                birth.ours = Some((m.alias, m.datatype.unwrap_or(0)));
            }
        }
        birth
    }
}

/// One tag's session with its edge node.
#[derive(Debug)]
pub struct Session {
    address: Address,
    /// The current NBIRTH (None: awaiting it).
    node: Option<Birth>,
    /// The current DBIRTH of the tag's device (device tags only).
    device: Option<Birth>,
    /// `bdSeq` of the last NBIRTH: the node's MQTT session an NDEATH must name.
    bdseq: Option<u64>,
    /// The `seq` the next NDATA/DBIRTH/DDATA/DDEATH must carry.
    seq_next: Option<u64>,
    /// When a rebirth was last requested and no NBIRTH has arrived since.
    rebirth_requested_ms: Option<u64>,
    /// Whether the client's connection is up (None: never tried).
    link: Option<bool>,
    /// The last debt reason reported, until a good value follows.
    debt: Option<String>,
    /// The refusal reported, until a birth declares the metric numeric.
    refused: Option<String>,
    connection: Option<Connection>,
    actions: Vec<Action>,
}

impl Session {
    pub fn new(address: Address) -> Session {
        Session {
            address,
            node: None,
            device: None,
            bdseq: None,
            seq_next: None,
            rebirth_requested_ms: None,
            link: None,
            debt: None,
            refused: None,
            connection: None,
            actions: Vec::new(),
        }
    }

    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The client connected (every ConnAck): awaiting birth, ask for a rebirth.
    pub fn connected(&mut self, received_ms: u64) -> Vec<Action> {
        self.link = Some(true);
        self.forget_births();
        self.connection("awaiting-birth", None);
        self.request_rebirth(received_ms, true);
        self.take()
    }

    /// The connection failed or was lost: one debt per outage, `offline`.
    pub fn connection_lost(&mut self, reason: &str, received_ms: u64) -> Vec<Action> {
        if self.link == Some(false) {
            return self.take();
        }
        let what = if self.link == Some(true) {
            "connection lost"
        } else {
            "connection failed"
        };
        self.link = Some(false);
        self.forget_births();
        self.rebirth_requested_ms = None;
        let reason = format!("{what}: {reason}");
        self.debt(&reason, Raw::None, None, received_ms);
        self.connection("offline", Some(reason));
        self.take()
    }

    /// One MQTT message on the node's topics.
    pub fn message(&mut self, topic: &str, bytes: &[u8], received_ms: u64) -> Vec<Action> {
        let Some((kind, device)) = self.parse_topic(topic) else {
            return self.take();
        };
        let payload = match payload::decode(bytes) {
            Ok(p) => p,
            Err(e) => {
                // Its seq is unknown: whatever followed may be misread.
                if kind != Kind::NDeath {
                    let reason = format!("undecodable payload: {e}");
                    self.lose_sync(&reason, None, received_ms);
                }
                return self.take();
            }
        };
        match kind {
            Kind::NBirth => self.node_birth(&payload, received_ms),
            Kind::NDeath => self.node_death(&payload, received_ms),
            _ => {
                let ours = self.concerns_tag(kind, device);
                self.sequenced(kind, ours, &payload, received_ms);
            }
        }
        self.take()
    }

    fn take(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.actions)
    }

    /// `(kind, device)` of a topic of this node; None for another node's, a command's
    /// or one this session does not read.
    fn parse_topic<'t>(&self, topic: &'t str) -> Option<(Kind, Option<&'t str>)> {
        let mut parts = topic.split('/');
        let (ns, group, kind, node) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let device = parts.next();
        if parts.next().is_some()
            || ns != NAMESPACE
            || group != self.address.group
            || node != self.address.node
        {
            return None;
        }
        let kind = match (kind, device.is_some()) {
            ("NBIRTH", false) => Kind::NBirth,
            ("NDATA", false) => Kind::NData,
            ("NDEATH", false) => Kind::NDeath,
            ("DBIRTH", true) => Kind::DBirth,
            ("DDATA", true) => Kind::DData,
            ("DDEATH", true) => Kind::DDeath,
            _ => return None,
        };
        Some((kind, device))
    }

    /// Whether a message of this kind carries the tag's metric (node messages for a
    /// node tag, the tag's device's for a device tag).
    fn concerns_tag(&self, kind: Kind, device: Option<&str>) -> bool {
        match (&self.address.device, device) {
            (None, None) => matches!(kind, Kind::NBirth | Kind::NData | Kind::NDeath),
            (Some(ours), Some(d)) => ours == d,
            _ => false,
        }
    }

    fn tag_birth(&self) -> Option<&Birth> {
        match self.address.device {
            None => self.node.as_ref(),
            Some(_) => self.node.as_ref().and(self.device.as_ref()),
        }
    }

    fn forget_births(&mut self) {
        self.node = None;
        self.device = None;
        self.seq_next = None;
    }

    fn node_birth(&mut self, payload: &Payload, received_ms: u64) {
        let birth = Birth::of(payload, &self.address.metric);
        self.bdseq = payload::bdseq(payload);
        self.seq_next = payload.seq.map(|s| (s + 1) % 256);
        self.rebirth_requested_ms = None;
        self.device = None;
        if self.address.device.is_none() {
            self.node = Some(birth.clone());
            self.tag_born(&birth, payload, received_ms);
        } else {
            self.node = Some(birth);
            self.connection("awaiting-birth", None);
        }
    }

    fn node_death(&mut self, payload: &Payload, received_ms: u64) {
        if let (Some(current), Some(death)) = (self.bdseq, payload::bdseq(payload))
            && current != death
        {
            return; // an older session's will
        }
        self.forget_births();
        self.rebirth_requested_ms = None;
        self.debt("NDEATH", Raw::None, payload.timestamp, received_ms);
        self.connection("offline", Some("NDEATH".to_owned()));
    }

    /// NDATA, DBIRTH, DDATA, DDEATH: each carries the node's next `seq`.
    fn sequenced(&mut self, kind: Kind, ours: bool, payload: &Payload, received_ms: u64) {
        if self.node.is_none() {
            self.awaiting(kind, ours, payload, received_ms);
            return;
        }
        if let (Some(expected), Some(got)) = (self.seq_next, payload.seq)
            && expected != got
        {
            let reason = format!("sequence gap: expected {expected}, got {got}");
            self.lose_sync(&reason, payload.timestamp, received_ms);
            return;
        }
        self.seq_next = payload.seq.map(|s| (s + 1) % 256);
        if !ours {
            return;
        }
        match kind {
            Kind::NData | Kind::DData => {
                if self.tag_birth().is_none() {
                    self.awaiting(kind, ours, payload, received_ms);
                } else {
                    self.data(payload, received_ms);
                }
            }
            Kind::DBirth => {
                let birth = Birth::of(payload, &self.address.metric);
                self.device = Some(birth.clone());
                self.tag_born(&birth, payload, received_ms);
            }
            Kind::DDeath => {
                self.device = None;
                self.debt("DDEATH", Raw::None, payload.timestamp, received_ms);
                self.connection("offline", Some("DDEATH".to_owned()));
            }
            Kind::NBirth | Kind::NDeath => unreachable!("handled before"),
        }
    }

    /// A message while the births it refers to are unknown: debt for data of the tag,
    /// and a rebirth request.
    fn awaiting(&mut self, kind: Kind, ours: bool, payload: &Payload, received_ms: u64) {
        if ours && matches!(kind, Kind::NData | Kind::DData) {
            self.debt("awaiting birth", Raw::None, payload.timestamp, received_ms);
        }
        self.request_rebirth(received_ms, false);
    }

    /// The births can no longer be trusted: debt, rebirth, awaiting birth.
    fn lose_sync(&mut self, reason: &str, device_time_ms: Option<u64>, received_ms: u64) {
        self.forget_births();
        self.debt(reason, Raw::None, device_time_ms, received_ms);
        self.connection("awaiting-birth", Some(reason.to_owned()));
        self.request_rebirth(received_ms, true);
    }

    /// The birth that declares the tag's metric (NBIRTH for a node tag, the device's
    /// DBIRTH for a device tag): admit or refuse it, and read its value.
    fn tag_born(&mut self, birth: &Birth, payload: &Payload, received_ms: u64) {
        let Some((_, code)) = birth.ours else {
            let reason = format!("metric {} not in the birth", self.address.metric);
            self.debt(&reason, Raw::None, payload.timestamp, received_ms);
            self.connection("awaiting-birth", Some(reason));
            return;
        };
        let datatype = DataType::from_code(code);
        if !datatype.is_numeric() {
            let reason = format!("datatype {} is not numeric", datatype.name());
            if self.refused.as_ref() != Some(&reason) {
                self.refused = Some(reason.clone());
                self.debt = None;
                self.report(Reading {
                    raw: Raw::None,
                    quality: Quality::Refused {
                        reason: reason.clone(),
                    },
                    device_time_ms: payload.timestamp,
                    received_ms,
                });
            }
            self.connection("refused", Some(reason));
            return;
        }
        self.refused = None;
        self.connection("online", None);
        let metric = &self.address.metric;
        let values: Vec<&Metric> = payload
            .metrics
            .iter()
            .filter(|m| m.name.as_deref() == Some(metric.as_str()))
            .collect();
        for m in values {
            self.observe(m, datatype, payload.timestamp, received_ms);
        }
    }

    /// NDATA or DDATA of the tag, its birth known.
    fn data(&mut self, payload: &Payload, received_ms: u64) {
        let Some(birth) = self.tag_birth().cloned() else {
            return;
        };
        for m in &payload.metrics {
            let is_ours = match (m.alias, m.name.as_deref()) {
                (Some(alias), _) => {
                    if !birth.aliases.contains(&alias) {
                        let reason = format!("alias {alias} not in the current birth");
                        self.undeclared(&reason, m.timestamp.or(payload.timestamp), received_ms);
                        continue;
                    }
                    birth.ours.is_some_and(|(a, _)| a == Some(alias))
                }
                (None, Some(name)) => {
                    if name == self.address.metric && birth.ours.is_none() {
                        let reason = format!("metric {name} not in the current birth");
                        self.undeclared(&reason, m.timestamp.or(payload.timestamp), received_ms);
                        continue;
                    }
                    name == self.address.metric
                }
                (None, None) => false,
            };
            if let (true, Some((_, code))) = (is_ours, birth.ours)
                && self.refused.is_none()
            {
                self.observe(m, DataType::from_code(code), payload.timestamp, received_ms);
            }
        }
    }

    /// Data names what the current birth did not declare: the births are stale.
    fn undeclared(&mut self, reason: &str, device_time_ms: Option<u64>, received_ms: u64) {
        self.debt(reason, Raw::None, device_time_ms, received_ms);
        self.request_rebirth(received_ms, false);
    }

    /// One value of the tag's (numeric) metric.
    fn observe(
        &mut self,
        m: &Metric,
        datatype: DataType,
        payload_ms: Option<u64>,
        received_ms: u64,
    ) {
        let device_time_ms = m.timestamp.or(payload_ms);
        if m.is_null == Some(true) {
            self.debt("is_null", Raw::None, device_time_ms, received_ms);
            return;
        }
        match payload::numeric(datatype, m.value.as_ref()) {
            Ok((raw, value)) if value.is_finite() => {
                self.debt = None;
                self.report(Reading {
                    raw,
                    quality: Quality::Good { value },
                    device_time_ms,
                    received_ms,
                });
            }
            Ok((raw, value)) => self.debt(
                &format!("not finite: {value}"),
                raw,
                device_time_ms,
                received_ms,
            ),
            Err(reason) => self.debt(&reason, Raw::None, device_time_ms, received_ms),
        }
    }

    fn debt(&mut self, reason: &str, raw: Raw, device_time_ms: Option<u64>, received_ms: u64) {
        if self.refused.is_some() || self.debt.as_deref() == Some(reason) {
            return;
        }
        self.debt = Some(reason.to_owned());
        self.report(Reading {
            raw,
            quality: Quality::Debt {
                reason: reason.to_owned(),
            },
            device_time_ms,
            received_ms,
        });
    }

    fn report(&mut self, reading: Reading) {
        self.actions.push(Action::Report(Event::Reading(reading)));
    }

    fn connection(&mut self, state: &str, detail: Option<String>) {
        let connection = Connection {
            state: state.to_owned(),
            detail,
        };
        if self.connection.as_ref() != Some(&connection) {
            self.connection = Some(connection.clone());
            self.actions
                .push(Action::Report(Event::Connection(connection)));
        }
    }

    /// Asks for a rebirth once per cause (`new_cause`), or again when the last request
    /// went unanswered for `SPARKPLUG_REBIRTH_REPEAT_MS` (a QoS-0 NCMD may be lost).
    fn request_rebirth(&mut self, received_ms: u64, new_cause: bool) {
        let due = match self.rebirth_requested_ms {
            None => true,
            Some(at) => new_cause || received_ms.saturating_sub(at) >= SPARKPLUG_REBIRTH_REPEAT_MS,
        };
        if due {
            self.rebirth_requested_ms = Some(received_ms);
            self.actions.push(Action::RequestRebirth);
        }
    }
}

#[cfg(test)]
mod tests;
