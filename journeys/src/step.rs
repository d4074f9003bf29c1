//! The contract of a journey step: read once from its KDL node ([`Node`], within a
//! [`ParseCx`]), run once in order ([`Step::run`] on a [`Context`]).
//!
//! Every step kind implements [`Step`] and has one [`ParseStep`] function registered by
//! node name in `crate::steps::REGISTRY`, which the parser hands to [`ParseCx`]; the
//! parser and the runner know nothing else about steps, and this module knows no step.
//! [`Node`] rejects anything a step's parser did not take — so a misspelt property is
//! an error before anything runs, never silently ignored. An unknown step names the
//! closest known one. A host a step names ([`Node::host`]) must be declared by a
//! topology the journey set before it (`topology`, `edit-topology`): a misspelt host is
//! an error at its place, not a failure half-way through the run. So is a protocol
//! peer ([`Node::peer`]) no earlier `peer start` started.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kdl::{KdlEntry, KdlNode, KdlValue};

use crate::context::Context;
use crate::error::Failure;

/// One kind of step: parsed once from its node, run once in order.
pub trait Step {
    /// Runs the step, telling its story through [`Context::say`]; an expectation that
    /// does not hold is a [`Failure`] (what was expected, what was observed).
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure>;
}

/// Reads a step node into a step; everything it does not take is an error.
pub type ParseStep = fn(&mut Node<'_>) -> Result<Box<dyn Step>, ParseError>;

/// Every step kind by node name (`crate::steps::REGISTRY`).
pub type Registry = [(&'static str, ParseStep)];

/// A problem at a place in the journey file.
#[derive(Debug, Clone)]
pub struct ParseError {
    pub offset: usize,
    pub message: String,
    pub help: Option<String>,
}

impl ParseError {
    pub fn with_help(mut self, help: impl Into<String>) -> ParseError {
        self.help = Some(help.into());
        self
    }
}

/// What step parsers may know about the journey being parsed.
pub struct ParseCx<'a> {
    /// The step kinds, by node name.
    registry: &'a Registry,
    journey_dir: &'a Path,
    source: &'a str,
    /// Whether the step being parsed is inside `expect-refused`.
    refused: Cell<bool>,
    /// Whether the step's parser asked (and so handles the refusal).
    refusal_taken: Cell<bool>,
    /// The hosts the topologies set so far declare.
    hosts: RefCell<Hosts>,
    /// The current topology's text, when it is one readable file (what `edit-topology`
    /// edits).
    topology_text: RefCell<Option<String>>,
    /// The protocol peers `peer start` steps so far start, with their kinds.
    peers: RefCell<BTreeMap<String, String>>,
}

/// What the parser knows of the hosts steps may name.
#[derive(Debug, Clone)]
enum Hosts {
    /// No `topology` step yet: host names are not checked.
    NoTopologyYet,
    /// Every host declared by a topology set so far (also those a later topology
    /// dropped: their installations and processes may still be there).
    Declared(BTreeSet<String>),
    /// A topology the parser could not read as KDL (a journey about a broken file):
    /// host names are not checked from there on; the run finds out.
    Unknown,
}

/// The closest of `known` to `name` by edit distance, when it is close enough to be a
/// slip: at most 2 edits, or a third of the name's length.
pub fn did_you_mean<'k>(name: &str, known: impl IntoIterator<Item = &'k str>) -> Option<&'k str> {
    let most = 2.max(name.chars().count() / 3);
    known
        .into_iter()
        .map(|candidate| (strsim::levenshtein(name, candidate), candidate))
        .filter(|(distance, _)| *distance <= most)
        .min()
        .map(|(_, candidate)| candidate)
}

/// The hosts a topology's text declares (`host NAME …` at the top level); `None` when
/// it is not KDL.
fn declared_hosts(text: &str) -> Option<BTreeSet<String>> {
    grid_spec::nesting::check("topology", text).ok()?;
    let document = grid_spec::nesting::parse_v2(text).ok()?;
    Some(
        document
            .nodes()
            .iter()
            .filter(|node| node.name().value() == "host")
            .filter_map(|node| node.entries().iter().find(|e| e.name().is_none()))
            .filter_map(|entry| entry.value().as_string().map(str::to_owned))
            .collect(),
    )
}

impl<'a> ParseCx<'a> {
    /// Before the first step: no topology, no peers.
    pub(crate) fn new(
        registry: &'a Registry,
        journey_dir: &'a Path,
        source: &'a str,
    ) -> ParseCx<'a> {
        ParseCx {
            registry,
            journey_dir,
            source,
            refused: Cell::new(false),
            refusal_taken: Cell::new(false),
            hosts: RefCell::new(Hosts::NoTopologyYet),
            topology_text: RefCell::new(None),
            peers: RefCell::new(BTreeMap::new()),
        }
    }

    /// Parses one step node through the registry.
    pub fn parse_step(&self, node: &KdlNode) -> Result<Box<dyn Step>, ParseError> {
        self.parse_step_as(node, false)
    }

    /// Parses one step node that must end refused (the child of `expect-refused`).
    pub fn parse_refused_step(&self, node: &KdlNode) -> Result<Box<dyn Step>, ParseError> {
        self.parse_step_as(node, true)
    }

    fn parse_step_as(&self, node: &KdlNode, refused: bool) -> Result<Box<dyn Step>, ParseError> {
        let name = node.name().value();
        let Some((_, parse)) = self.registry.iter().find(|(known, _)| *known == name) else {
            let known: Vec<&str> = self.registry.iter().map(|(known, _)| *known).collect();
            let near = did_you_mean(name, known.iter().copied())
                .map_or(String::new(), |near| format!("did you mean `{near}`? "));
            return Err(ParseError {
                offset: node.name().span().offset(),
                message: format!("unknown step `{name}`"),
                help: Some(format!("{near}steps are: {}", known.join(", "))),
            });
        };
        let (outer_refused, outer_taken) = (self.refused.get(), self.refusal_taken.get());
        self.refused.set(refused);
        self.refusal_taken.set(false);
        let mut reader = Node::new(node, self);
        let result = parse(&mut reader).and_then(|step| {
            reader.finish()?;
            if refused && !self.refusal_taken.get() {
                return Err(reader.error(format!("`{name}` cannot be expected to be refused")));
            }
            Ok(step)
        });
        self.refused.set(outer_refused);
        self.refusal_taken.set(outer_taken);
        result
    }

    /// The directory of the journey file; paths in steps are relative to it.
    pub fn journey_dir(&self) -> &Path {
        self.journey_dir
    }

    /// A `topology` step set `path` (a file or a directory of `.kdl` files): its hosts
    /// join those steps may name.
    pub fn set_topology(&self, path: &Path) {
        let texts: Option<Vec<String>> = if path.is_dir() {
            std::fs::read_dir(path).ok().and_then(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .filter(|p| p.extension().is_some_and(|ext| ext == "kdl"))
                    .map(|p| std::fs::read_to_string(p).ok())
                    .collect()
            })
        } else {
            std::fs::read_to_string(path).ok().map(|text| vec![text])
        };
        // `edit-topology` edits one file; a directory is refused when it runs.
        *self.topology_text.borrow_mut() = match path.is_dir() {
            true => None,
            false => texts.as_ref().and_then(|t| t.first().cloned()),
        };
        match texts {
            Some(texts) => texts.iter().for_each(|text| self.declare_hosts(text)),
            None => *self.hosts.borrow_mut() = Hosts::Unknown,
        }
    }

    /// An `edit-topology` step replaces the first (or every) `from` by `to` in the
    /// current topology: the edited file's hosts join those steps may name.
    pub fn edit_topology(&self, from: &str, to: &str, all: bool) {
        let edited = self.topology_text.borrow().as_ref().map(|text| {
            if all {
                text.replace(from, to)
            } else {
                text.replacen(from, to, 1)
            }
        });
        match &edited {
            Some(text) => self.declare_hosts(text),
            // Not one file the parser read: the run finds out.
            None => *self.hosts.borrow_mut() = Hosts::Unknown,
        }
        *self.topology_text.borrow_mut() = edited;
    }

    fn declare_hosts(&self, text: &str) {
        let mut hosts = self.hosts.borrow_mut();
        let declared = declared_hosts(text);
        *hosts = match (std::mem::replace(&mut *hosts, Hosts::Unknown), declared) {
            (Hosts::Unknown, _) | (_, None) => Hosts::Unknown,
            (Hosts::NoTopologyYet, Some(new)) => Hosts::Declared(new),
            (Hosts::Declared(mut old), Some(new)) => {
                old.extend(new);
                Hosts::Declared(old)
            }
        };
    }

    /// `Ok` when `host` is declared by a topology set so far (or nothing can be known).
    fn check_host(&self, host: &str, offset: usize) -> Result<(), ParseError> {
        let Hosts::Declared(hosts) = &*self.hosts.borrow() else {
            return Ok(());
        };
        if hosts.contains(host) {
            return Ok(());
        }
        let listed: Vec<&str> = hosts.iter().map(String::as_str).take(12).collect();
        let more = if hosts.len() > listed.len() {
            ", …"
        } else {
            ""
        };
        let near = did_you_mean(host, hosts.iter().map(String::as_str))
            .map_or(String::new(), |near| format!("did you mean `{near}`? "));
        Err(ParseError {
            offset,
            message: format!("host `{host}` is not declared by the journey's topology"),
            help: Some(format!(
                "{near}its hosts are: {}{more} (a host must be in a topology set before the step)",
                listed.join(", ")
            )),
        })
    }

    /// A `peer start NAME kind=KIND` step: later steps may name the peer.
    pub fn declare_peer(&self, name: &str, kind: &str) {
        self.peers
            .borrow_mut()
            .insert(name.to_owned(), kind.to_owned());
    }

    /// The kind of peer `name`, when an earlier `peer start` started it.
    fn check_peer(&self, name: &str, offset: usize) -> Result<String, ParseError> {
        let peers = self.peers.borrow();
        if let Some(kind) = peers.get(name) {
            return Ok(kind.clone());
        }
        let help = if peers.is_empty() {
            "no `peer start` comes before this step".to_owned()
        } else {
            let near = did_you_mean(name, peers.keys().map(String::as_str))
                .map_or(String::new(), |near| format!("did you mean `{near}`? "));
            let listed: Vec<&str> = peers.keys().map(String::as_str).collect();
            format!(
                "{near}the peers started before it are: {}",
                listed.join(", ")
            )
        };
        Err(ParseError {
            offset,
            message: format!("peer `{name}` is not started by an earlier `peer start`"),
            help: Some(help),
        })
    }

    /// The node's text as written, for reports.
    pub fn text(&self, node: &KdlNode) -> String {
        let span = node.span();
        let end = (span.offset() + span.len()).min(self.source.len());
        let text = self.source.get(span.offset()..end).unwrap_or_default();
        // A node's span may include its terminator and surrounding blanks.
        text.trim().trim_end_matches(';').trim_end().to_string()
    }
}

/// A step node being read by its parser. Everything not taken is an error.
pub struct Node<'a> {
    node: &'a KdlNode,
    cx: &'a ParseCx<'a>,
    taken: Vec<bool>,
    children_taken: bool,
}

impl<'a> Node<'a> {
    pub(crate) fn new(node: &'a KdlNode, cx: &'a ParseCx<'a>) -> Node<'a> {
        Node {
            node,
            cx,
            taken: vec![false; node.entries().len()],
            children_taken: false,
        }
    }

    pub fn name(&self) -> &str {
        self.node.name().value()
    }

    pub fn cx(&self) -> &'a ParseCx<'a> {
        self.cx
    }

    /// Whether this step must end refused (it is the child of `expect-refused`). A step
    /// that can be refused asks and adapts its expectation; one that never asks is
    /// rejected inside `expect-refused`.
    pub fn expects_refusal(&self) -> bool {
        self.cx.refusal_taken.set(true);
        self.cx.refused.get()
    }

    /// An error pointing at the node.
    pub fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            offset: self.node.span().offset(),
            message: message.into(),
            help: None,
        }
    }

    /// An error pointing at one of its entries.
    pub fn entry_error(&self, entry: &KdlEntry, message: impl Into<String>) -> ParseError {
        ParseError {
            offset: entry.span().offset(),
            message: message.into(),
            help: None,
        }
    }

    /// The next positional argument, which must be a string.
    pub fn argument(&mut self, what: &str) -> Result<String, ParseError> {
        match self.optional_argument(what)? {
            Some(value) => Ok(value),
            None => Err(self.error(format!("`{}` needs {what}", self.name()))),
        }
    }

    /// The next positional argument if there is one; it must be a string.
    pub fn optional_argument(&mut self, what: &str) -> Result<Option<String>, ParseError> {
        Ok(self.next_argument(what)?.map(|(text, _)| text))
    }

    /// The next positional argument and its entry's offset.
    fn next_argument(&mut self, what: &str) -> Result<Option<(String, usize)>, ParseError> {
        let entries = self.node.entries();
        let Some(index) =
            (0..entries.len()).find(|&i| !self.taken[i] && entries[i].name().is_none())
        else {
            return Ok(None);
        };
        self.taken[index] = true;
        let entry = &entries[index];
        match entry.value() {
            KdlValue::String(text) => Ok(Some((text.clone(), entry.span().offset()))),
            other => Err(self.entry_error(
                entry,
                format!("{what} must be a string, found {}", kind(other)),
            )),
        }
    }

    /// The next positional argument, a host declared by the journey's topology.
    pub fn host(&mut self, what: &str) -> Result<String, ParseError> {
        match self.optional_host(what)? {
            Some(host) => Ok(host),
            None => Err(self.error(format!("`{}` needs {what}", self.name()))),
        }
    }

    /// The next positional argument if there is one, a host declared by the journey's
    /// topology.
    pub fn optional_host(&mut self, what: &str) -> Result<Option<String>, ParseError> {
        let Some((host, offset)) = self.next_argument(what)? else {
            return Ok(None);
        };
        self.cx.check_host(&host, offset)?;
        Ok(Some(host))
    }

    /// The next positional argument, a peer an earlier `peer start` started: its name
    /// and kind.
    pub fn peer(&mut self, what: &str) -> Result<(String, String), ParseError> {
        let Some((name, offset)) = self.next_argument(what)? else {
            return Err(self.error(format!("`{}` needs {what}", self.name())));
        };
        let kind = self.cx.check_peer(&name, offset)?;
        Ok((name, kind))
    }

    /// Where property `key` is written (the node, when it is not).
    fn property_offset(&self, key: &str) -> usize {
        self.node
            .entries()
            .iter()
            .find(|e| e.name().is_some_and(|name| name.value() == key))
            .map_or(self.node.span().offset(), |e| e.span().offset())
    }

    /// A string property naming a peer a step before started: its name and kind.
    pub fn peer_property(&mut self, key: &str) -> Result<Option<(String, String)>, ParseError> {
        let Some(peer) = self.string(key)? else {
            return Ok(None);
        };
        let kind = self.cx.check_peer(&peer, self.property_offset(key))?;
        Ok(Some((peer, kind)))
    }

    /// A string property naming a host declared by the journey's topology.
    pub fn host_property(&mut self, key: &str) -> Result<Option<String>, ParseError> {
        let Some(host) = self.string(key)? else {
            return Ok(None);
        };
        self.cx.check_host(&host, self.property_offset(key))?;
        Ok(Some(host))
    }

    /// A host property the step cannot do without (see [`Node::required`]).
    pub fn required_host(&mut self, key: &str) -> Result<String, ParseError> {
        let value = self.host_property(key)?;
        value.ok_or_else(|| self.error(format!("`{}` needs {key}=\"HOST\"", self.name())))
    }

    /// A property's entry, taken.
    pub fn property(&mut self, key: &str) -> Result<Option<&'a KdlEntry>, ParseError> {
        let entries = self.node.entries();
        let mut found = None;
        for (index, entry) in entries.iter().enumerate() {
            if entry.name().is_some_and(|name| name.value() == key) {
                if found.is_some() {
                    return Err(self.entry_error(entry, format!("property `{key}` is repeated")));
                }
                self.taken[index] = true;
                found = Some(entry);
            }
        }
        Ok(found)
    }

    /// A string property.
    pub fn string(&mut self, key: &str) -> Result<Option<String>, ParseError> {
        let Some(entry) = self.property(key)? else {
            return Ok(None);
        };
        match entry.value() {
            KdlValue::String(text) => Ok(Some(text.clone())),
            other => Err(self.entry_error(
                entry,
                format!("property `{key}` must be a string, found {}", kind(other)),
            )),
        }
    }

    /// A string property the step cannot do without: absent, the error says
    /// "`STEP` needs KEY=\"HELP\"".
    pub fn required(&mut self, key: &str, help: &str) -> Result<String, ParseError> {
        let value = self.string(key)?;
        value.ok_or_else(|| self.error(format!("`{}` needs {key}=\"{help}\"", self.name())))
    }

    /// A boolean property (`#true` or `#false`).
    pub fn flag(&mut self, key: &str) -> Result<Option<bool>, ParseError> {
        let Some(entry) = self.property(key)? else {
            return Ok(None);
        };
        match entry.value() {
            KdlValue::Bool(b) => Ok(Some(*b)),
            _ => Err(self.entry_error(entry, format!("`{key}` is #true or #false"))),
        }
    }

    /// A non-negative integer property.
    pub fn count(&mut self, key: &str) -> Result<Option<u64>, ParseError> {
        let Some(entry) = self.property(key)? else {
            return Ok(None);
        };
        match entry.value() {
            KdlValue::Integer(n) => u64::try_from(*n).map(Some).map_err(|_| {
                self.entry_error(entry, format!("property `{key}` must be 0 or more"))
            }),
            other => Err(self.entry_error(
                entry,
                format!("property `{key}` must be an integer, found {}", kind(other)),
            )),
        }
    }

    /// Every property not taken yet, in file order, now taken. Repeated keys are errors.
    pub fn remaining_properties(&mut self) -> Result<Vec<(String, &'a KdlEntry)>, ParseError> {
        let entries = self.node.entries();
        let mut rest: Vec<(String, &'a KdlEntry)> = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let Some(name) = entry.name() else { continue };
            if self.taken[index] {
                continue;
            }
            if rest.iter().any(|(seen, _)| seen == name.value()) {
                return Err(
                    self.entry_error(entry, format!("property `{}` is repeated", name.value()))
                );
            }
            self.taken[index] = true;
            rest.push((name.value().to_string(), entry));
        }
        Ok(rest)
    }

    /// The child nodes (`{ … }`), taken.
    pub fn children(&mut self) -> &'a [KdlNode] {
        self.children_taken = true;
        self.node.children().map_or(&[], |doc| doc.nodes())
    }

    pub(crate) fn finish(&self) -> Result<(), ParseError> {
        for (entry, taken) in self.node.entries().iter().zip(&self.taken) {
            if !taken {
                let message = match entry.name() {
                    Some(name) => {
                        format!("unknown property `{}` of `{}`", name.value(), self.name())
                    }
                    None => format!("unexpected argument of `{}`", self.name()),
                };
                return Err(self.entry_error(entry, message));
            }
        }
        if !self.children_taken
            && let Some(children) = self.node.children()
            && let Some(first) = children.nodes().first()
        {
            return Err(ParseError {
                offset: first.span().offset(),
                message: format!("`{}` takes no children", self.name()),
                help: None,
            });
        }
        Ok(())
    }
}

/// A value's KDL type, for messages.
pub use grid_spec::diagnostic::kdl_type as kind;
