//! Field-level diffs for `~` lines: what changed in one object, as one
//! `field: before → after` pair per changed field (`cell power: "flow * factor" →
//! "flow * factor + 1"`, `ceiling: 128 → 200`), and the colours of the plan's
//! `+ ~ - !` symbols on a terminal.
//!
//! Models and tags are compared as their canonical KDL texts
//! (`grid_spec::canonical`), read with the `kdl` crate: a node's properties are its
//! fields, and each child is identified by its name and first argument (`input
//! factor`, `cell power`, `output power`, `simulate`, `modbus 127.0.0.1:5020`,
//! `sparkplug mqtt://127.0.0.1:1883`). Host configurations and
//! routes are compared as their structs. Values read as a topology file writes them:
//! strings quoted, numbers, booleans and identifiers bare. Order: the after text's,
//! removed children last. A text that does not read as one canonical node gives one
//! `definition` change with its line difference; nothing here panics.

use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;

use grid_engine::config::HostConfig;
use grid_engine::custody::Manifest;
use grid_engine::delivery::api::{RouteDestination, RouteInstall};
use grid_spec::canonical::quote;
use kdl::{KdlDocument, KdlEntry, KdlNode, KdlValue};

/// One changed field of one object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    /// `ceiling`, `input factor default`, `cell power`, `destination b address`, …
    pub field: String,
    /// The value the owner holds, `(none)` when the field was absent.
    pub before: String,
    /// The value the files want, `(none)` when absent, `(removed)` for a removed child.
    pub after: String,
}

/// The value of a field an object does not have.
pub const ABSENT: &str = "(none)";
/// The after value of a child the files no longer declare.
pub const REMOVED: &str = "(removed)";
/// The value of a child that has no arguments or properties (`input b`).
pub const DECLARED: &str = "(declared)";

/// `field: before → after`.
pub fn render(change: &Change) -> String {
    format!("{}: {} → {}", change.field, change.before, change.after)
}

/// The changed fields of a model, from two canonical model texts.
pub fn model(before: &str, after: &str) -> Vec<Change> {
    definition(before, after)
}

/// The changed fields of a tag, from two canonical tag texts (the source's
/// properties read `simulate period-s: 20 → 10`, `modbus 127.0.0.1:5020 scale: 0.1 →
/// 0.2`; a new device address or broker URL is a new source child).
pub fn tag(before: &str, after: &str) -> Vec<Change> {
    definition(before, after)
}

/// The changed fields of a host's configuration (`host.toml`).
pub fn host_config(before: &HostConfig, after: &HostConfig) -> Vec<Change> {
    let mut out = Vec::new();
    field(&mut out, "name", quote(&before.name), quote(&after.name));
    field(
        &mut out,
        "listen",
        quote(&before.listen),
        quote(&after.listen),
    );
    field(
        &mut out,
        "profiles",
        list(before.profiles.iter().cloned()),
        list(after.profiles.iter().cloned()),
    );
    let metrics = |m: &Option<String>| m.as_deref().map_or_else(|| ABSENT.to_owned(), quote);
    field(
        &mut out,
        "metrics",
        metrics(&before.metrics),
        metrics(&after.metrics),
    );
    capacity(&mut out, "capacity", &before.capacity, &after.capacity);
    let memberships: std::collections::BTreeSet<&String> = before
        .membership_capacity
        .keys()
        .chain(after.membership_capacity.keys())
        .collect();
    for m in memberships {
        let none = grid_engine::config::CapacityConfig::default();
        capacity(
            &mut out,
            &format!("capacity membership={m}"),
            before.membership_capacity.get(m).unwrap_or(&none),
            after.membership_capacity.get(m).unwrap_or(&none),
        );
    }
    let claim = |c: &Option<grid_engine::config::StorageClaimConfig>| {
        c.as_ref().map_or_else(
            || ABSENT.to_owned(),
            |c| {
                let hosts: Vec<String> = c
                    .voters
                    .iter()
                    .map(|v| format!("{}@{}", v.participant, v.address))
                    .collect();
                format!("{} ({})", quote(&c.membership), hosts.join(" "))
            },
        )
    };
    field(
        &mut out,
        "storage authority",
        claim(&before.storage_claim),
        claim(&after.storage_claim),
    );
    let control = |c: &Option<grid_engine::config::ControlConfig>| {
        c.as_ref().map_or_else(
            || ABSENT.to_owned(),
            |c| {
                let listen: Vec<String> = c
                    .listen
                    .iter()
                    .map(|l| match (&l.operators, &l.certificate) {
                        (Some(ca), Some(certificate)) => format!(
                            "{} (operators {}, certificate {}, files {})",
                            quote(&l.listen),
                            ca.display(),
                            certificate.display(),
                            short(l.digest.as_deref())
                        ),
                        (Some(ca), None) => format!(
                            "{} (operators {}, participant certificate, files {})",
                            quote(&l.listen),
                            ca.display(),
                            short(l.digest.as_deref())
                        ),
                        (None, _) => quote(&l.listen),
                    })
                    .collect();
                let owners: Vec<String> = c
                    .owners
                    .iter()
                    .map(|o| format!("{}@{} in {}", o.name, o.address, o.membership))
                    .collect();
                format!("{} owners ({})", listen.join(" "), owners.join(" "))
            },
        )
    };
    field(
        &mut out,
        "control",
        control(&before.control),
        control(&after.control),
    );
    field(
        &mut out,
        "control viewers",
        list(before.control_viewers.iter().cloned()),
        list(after.control_viewers.iter().cloned()),
    );
    let (b, a) = (&before.retain, &after.retain);
    for (name, b, a) in [
        ("hot-days", b.hot_days, a.hot_days),
        ("archive-days", b.archive_days, a.archive_days),
    ] {
        let (b, a) = (b.map(u64::from), a.map(u64::from));
        field(
            &mut out,
            &format!("retain {name}"),
            optional(b),
            optional(a),
        );
    }
    out
}

/// The changed values of a `capacity` line (`what`: how it is named).
fn capacity(
    out: &mut Vec<Change>,
    what: &str,
    b: &grid_engine::config::CapacityConfig,
    a: &grid_engine::config::CapacityConfig,
) {
    for (name, b, a) in [
        (
            "ordered-per-destination",
            b.ordered_per_destination,
            a.ordered_per_destination,
        ),
        ("ordered-per-host", b.ordered_per_host, a.ordered_per_host),
        (
            "latest-per-destination",
            b.latest_per_destination,
            a.latest_per_destination,
        ),
        ("latest-per-host", b.latest_per_host, a.latest_per_host),
    ] {
        field(out, &format!("{what} {name}"), optional(b), optional(a));
    }
}

/// The changed fields of a route's definition: its properties, then each destination
/// of the after definition (added, retired, moved, new keys), then removed ones.
pub fn route(before: &RouteInstall, after: &RouteInstall) -> Vec<Change> {
    let mut out = Vec::new();
    field(&mut out, "name", quote(&before.name), quote(&after.name));
    field(
        &mut out,
        "membership",
        quote(&before.membership),
        quote(&after.membership),
    );
    field(
        &mut out,
        "class",
        before.class.name().to_owned(),
        after.class.name().to_owned(),
    );
    field(
        &mut out,
        "encrypted",
        before.encrypted.to_string(),
        after.encrypted.to_string(),
    );
    field(
        &mut out,
        "publisher",
        quote(&before.publisher),
        quote(&after.publisher),
    );
    for d in &after.destinations {
        let prefix = format!("destination {}", d.host);
        let Some(b) = before.destination(&d.host) else {
            out.push(Change {
                field: prefix,
                before: ABSENT.to_owned(),
                after: destination_summary(d),
            });
            continue;
        };
        field(
            &mut out,
            &format!("{prefix} retired"),
            b.retired.to_string(),
            d.retired.to_string(),
        );
        field(
            &mut out,
            &format!("{prefix} address"),
            quote(&b.address),
            quote(&d.address),
        );
        keys(&mut out, &format!("{prefix} keys"), &b.keys, &d.keys);
    }
    for b in &before.destinations {
        if after.destination(&b.host).is_none() {
            out.push(Change {
                field: format!("destination {}", b.host),
                before: destination_summary(b),
                after: REMOVED.to_owned(),
            });
        }
    }
    out
}

fn destination_summary(d: &RouteDestination) -> String {
    let mut out = quote(&d.address);
    if d.retired {
        out.push_str(" retired=true");
    }
    out
}

fn keys(out: &mut Vec<Change>, prefix: &str, before: &Manifest, after: &Manifest) {
    field(
        out,
        &format!("{prefix} generation"),
        before.generation.to_string(),
        after.generation.to_string(),
    );
    for (name, b, a) in [
        ("signing", &before.signing, &after.signing),
        ("mail", &before.mail, &after.mail),
        ("tls", &before.tls, &after.tls),
    ] {
        field(out, &format!("{prefix} {name}"), quote(b), quote(a));
    }
    let retired = |m: &Manifest| list(m.retired.iter().map(|k| k.generation.to_string()));
    field(
        out,
        &format!("{prefix} retired"),
        retired(before),
        retired(after),
    );
}

fn field(out: &mut Vec<Change>, name: &str, before: String, after: String) {
    if before != after {
        out.push(Change {
            field: name.to_owned(),
            before,
            after,
        });
    }
}

/// Space-separated bare values, `(none)` for none.
fn list(values: impl Iterator<Item = String>) -> String {
    let values: Vec<String> = values.collect();
    if values.is_empty() {
        ABSENT.to_owned()
    } else {
        values.join(" ")
    }
}

/// The first 12 hex digits of a digest: enough to see the files changed.
fn short(digest: Option<&str>) -> String {
    digest.map_or_else(|| "unread".to_owned(), |d| d.chars().take(12).collect())
}

fn optional(value: Option<u64>) -> String {
    value.map_or_else(|| ABSENT.to_owned(), |v| v.to_string())
}

/// A node of a canonical text, its values rendered.
#[derive(Debug)]
struct Node {
    name: String,
    /// The first argument as written (unquoted): the node's identity among its
    /// siblings, with its name.
    key: Option<String>,
    /// Further arguments, rendered.
    rest: Vec<String>,
    props: Vec<(String, Value)>,
    children: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq)]
struct Value {
    text: String,
    boolean: bool,
}

impl Node {
    fn of(node: &KdlNode) -> Node {
        let mut key = None;
        let mut rest = Vec::new();
        let mut props = Vec::new();
        for entry in node.entries() {
            match entry.name() {
                Some(name) => props.push((name.value().to_owned(), value(entry))),
                None if key.is_none() => {
                    key = Some(match entry.value() {
                        KdlValue::String(s) => s.clone(),
                        _ => value(entry).text,
                    })
                }
                None => rest.push(value(entry).text),
            }
        }
        Node {
            name: node.name().value().to_owned(),
            key,
            rest,
            props,
            children: node
                .children()
                .map(|d| d.nodes().iter().map(Node::of).collect())
                .unwrap_or_default(),
        }
    }

    /// `cell power`, `simulate`.
    fn identity(&self) -> String {
        match &self.key {
            Some(key) => format!("{} {key}", self.name),
            None => self.name.clone(),
        }
    }

    fn prop(&self, name: &str) -> Option<&Value> {
        self.props.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// What an added or removed child holds: its further arguments and properties.
    fn summary(&self) -> String {
        let mut parts = self.rest.clone();
        parts.extend(self.props.iter().map(|(k, v)| format!("{k}={}", v.text)));
        if !self.children.is_empty() {
            parts.push("{…}".to_owned());
        }
        if parts.is_empty() {
            DECLARED.to_owned()
        } else {
            parts.join(" ")
        }
    }
}

/// A value as a topology file writes it.
fn value(entry: &KdlEntry) -> Value {
    let text = match entry.value() {
        KdlValue::String(s) => {
            let bare = entry
                .format()
                .is_some_and(|f| !f.value_repr.is_empty() && !f.value_repr.starts_with(['"', '#']));
            if bare { s.clone() } else { quote(s) }
        }
        KdlValue::Integer(i) => i.to_string(),
        KdlValue::Float(f) => number(*f),
        KdlValue::Bool(b) => b.to_string(),
        KdlValue::Null => "null".to_owned(),
    };
    Value {
        text,
        boolean: matches!(entry.value(), KdlValue::Bool(_)),
    }
}

/// A number as an operator wrote it: `2`, not the canonical `2.0`.
fn number(value: f64) -> String {
    if value.is_nan() {
        "#nan".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "#inf" } else { "#-inf" }.to_owned()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value:?}")
    }
}

/// The one node of a canonical text, or `None` if it is not one.
fn canonical_node(text: &str) -> Option<Node> {
    // Canonical texts nest one block (a node's children). A deeper text is not
    // canonical, and is not handed to the recursive KDL parser, whose stack a deep
    // nesting would exhaust.
    if brace_depth(text) > 1 {
        return None;
    }
    let document = KdlDocument::parse_v2(text).ok()?;
    match document.nodes() {
        [node] => Some(Node::of(node)),
        _ => None,
    }
}

/// The deepest `{` nesting of a text, counting every brace (also those in strings:
/// that only overestimates, and an overestimate only falls back to the line diff).
fn brace_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

fn definition(before: &str, after: &str) -> Vec<Change> {
    if before == after {
        return Vec::new();
    }
    if let (Some(b), Some(a)) = (canonical_node(before), canonical_node(after))
        && b.name == a.name
    {
        let mut out = Vec::new();
        if b.key != a.key {
            let name = |n: &Node| n.key.as_deref().map_or_else(|| ABSENT.to_owned(), quote);
            field(&mut out, "name", name(&b), name(&a));
        }
        node(&mut out, "", &b, &a);
        if out.is_empty()
            && let Some(change) = order(&b, &a)
        {
            out.push(change);
        }
        if !out.is_empty() {
            return out;
        }
    }
    vec![lines(before, after)]
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix} {name}")
    }
}

/// The changes between two nodes of the same identity, under `prefix`.
fn node(out: &mut Vec<Change>, prefix: &str, before: &Node, after: &Node) {
    if before.rest != after.rest {
        let rest = |n: &Node| {
            if n.rest.is_empty() {
                ABSENT.to_owned()
            } else {
                n.rest.join(" ")
            }
        };
        let name = if prefix.is_empty() { "value" } else { prefix };
        field(out, name, rest(before), rest(after));
    }
    // An absent boolean property is false (`scalar`, `retired`, `encrypted`).
    let absent = |other: &Value| {
        if other.boolean {
            "false".to_owned()
        } else {
            ABSENT.to_owned()
        }
    };
    for (name, a) in &after.props {
        let b = before
            .prop(name)
            .map_or_else(|| absent(a), |b| b.text.clone());
        field(out, &join(prefix, name), b, a.text.clone());
    }
    for (name, b) in &before.props {
        if after.prop(name).is_none() {
            field(out, &join(prefix, name), b.text.clone(), absent(b));
        }
    }
    // Children pair by identity and occurrence (a repeated identity pairs in order).
    let mut unmatched: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, child) in before.children.iter().enumerate().rev() {
        unmatched.entry(child.identity()).or_default().push(i);
    }
    let mut matched = HashSet::new();
    for child in &after.children {
        let identity = child.identity();
        let field_name = join(prefix, &identity);
        match unmatched.get_mut(&identity).and_then(Vec::pop) {
            Some(i) => {
                matched.insert(i);
                node(out, &field_name, &before.children[i], child);
            }
            None => out.push(Change {
                field: field_name,
                before: ABSENT.to_owned(),
                after: child.summary(),
            }),
        }
    }
    for (i, child) in before.children.iter().enumerate() {
        if !matched.contains(&i) {
            out.push(Change {
                field: join(prefix, &child.identity()),
                before: child.summary(),
                after: REMOVED.to_owned(),
            });
        }
    }
}

/// The same children in another order (the order of a model's items is its
/// declaration order): `order: input a, cell b → cell b, input a`.
fn order(before: &Node, after: &Node) -> Option<Change> {
    let sequence = |n: &Node| {
        n.children
            .iter()
            .map(Node::identity)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (b, a) = (sequence(before), sequence(after));
    (b != a).then(|| Change {
        field: "order".to_owned(),
        before: b,
        after: a,
    })
}

/// `definition`: the lines only the before text has, and those only the after text
/// has (all lines when both hold the same lines in another order), joined by `; `.
fn lines(before: &str, after: &str) -> Change {
    let read = |t: &str| -> Vec<String> {
        t.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let (old, new) = (read(before), read(after));
    let old_set: HashSet<&String> = old.iter().collect();
    let new_set: HashSet<&String> = new.iter().collect();
    let mut removed: Vec<&String> = old.iter().filter(|l| !new_set.contains(l)).collect();
    let mut added: Vec<&String> = new.iter().filter(|l| !old_set.contains(l)).collect();
    if removed.is_empty() && added.is_empty() {
        removed = old.iter().collect();
        added = new.iter().collect();
    }
    let text = |ls: Vec<&String>| {
        if ls.is_empty() {
            ABSENT.to_owned()
        } else {
            ls.iter().map(|l| l.as_str()).collect::<Vec<_>>().join("; ")
        }
    };
    Change {
        field: "definition".to_owned(),
        before: text(removed),
        after: text(added),
    }
}

/// Colours for the plan's symbols: `+` green, `~` yellow, `-` red, `!` bold magenta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paint {
    on: bool,
}

impl Paint {
    /// Colours only when stdout is a terminal and `NO_COLOR` is unset or empty
    /// (<https://no-color.org>).
    pub fn detect() -> Paint {
        Paint::decide(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        )
    }

    /// The rule of [`Paint::detect`], given what it reads.
    pub fn decide(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> Paint {
        Paint {
            on: terminal && no_color.is_none_or(|v| v.is_empty()),
        }
    }

    /// Colours on (`true`) or off, whatever the output is.
    pub fn new(on: bool) -> Paint {
        Paint { on }
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    /// The symbol, coloured when colours are on; any other text unchanged.
    pub fn op(&self, symbol: &str) -> String {
        use anstyle::{AnsiColor, Style};
        let style = match symbol {
            "+" => Style::new().fg_color(Some(AnsiColor::Green.into())),
            "~" => Style::new().fg_color(Some(AnsiColor::Yellow.into())),
            "-" => Style::new().fg_color(Some(AnsiColor::Red.into())),
            "!" => Style::new()
                .fg_color(Some(AnsiColor::Magenta.into()))
                .bold(),
            _ => return symbol.to_owned(),
        };
        if self.on {
            format!("{style}{symbol}{style:#}")
        } else {
            symbol.to_owned()
        }
    }
}

#[cfg(test)]
mod tests;
