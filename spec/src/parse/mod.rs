//! KDL documents → typed desired state, reporting every shape error with its span.
//!
//! This pass checks what one node can tell on its own: known node names, known and
//! well-typed properties and arguments, value ranges, formula syntax, duplicate names.
//! References between objects and formula names are resolved afterwards by
//! `validate`, which needs the whole topology.
//!
//! This file holds the walk over a file's nodes and the helpers every kind shares;
//! each kind family reads its nodes in a file of its own (`hosts`, `models`, `routes`,
//! `tags`, `grants`), all through `node::NodeReader`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use kdl::{KdlDocument, KdlNode};
use miette::{NamedSource, SourceSpan};

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::formula;
use crate::limits;
use crate::limits::{MODEL_OPERATIONS_CEILING_MAX, NAME_LENGTH_MAX};
use crate::topology::*;
use crate::validate;

mod bacnet;
mod control;
mod decisions;
mod grants;
mod hosts;
mod j1939;
mod ledgers;
mod models;
mod node;
mod opcua;
mod routes;
mod tags;

use node::NodeReader;

/// A source file as diagnostics see it.
pub(crate) type File = Arc<NamedSource<String>>;

/// A reference from one object to another, kept with its span for `validate`.
#[derive(Debug, Clone)]
pub(crate) struct Reference {
    pub kind: RefKind,
    pub name: String,
    pub file: File,
    pub span: SourceSpan,
    /// What the reference is for, e.g. "route `r` publisher".
    pub context: String,
    pub require: Option<Requirement>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefKind {
    Host,
    Membership,
    Route,
    Tag,
    Mapping,
}

impl RefKind {
    pub fn noun(self) -> &'static str {
        match self {
            RefKind::Host => "host",
            RefKind::Membership => "membership",
            RefKind::Route => "route",
            RefKind::Tag => "tag",
            RefKind::Mapping => "mapping",
        }
    }
}

/// An extra condition on a resolved reference.
#[derive(Debug, Clone)]
pub(crate) enum Requirement {
    /// The host must be a `member` of this membership.
    MemberOf(String),
    /// A route's publisher: a `member` of this membership selecting the `delivery`
    /// profile (to publish) and the `authority` profile (its right to publish is a
    /// claim in the membership's authority, which must exist).
    Publishes(String),
    /// The route must have this host as its publisher.
    PublishedBy(String),
    /// The route must have this host as a destination.
    DeliversTo(String),
    /// The mapping must have this host as a destination.
    MapsTo(String),
    /// The tag must be read at this host (a model reads only its own host's tags).
    TagAt(String),
    /// The membership must have this host as a `member` (a Sparkplug tag presents the
    /// host's certificate of it to the broker).
    HasMember(String),
    /// A party of a grant: the host selects the `processes` profile and shares one
    /// membership with every other party named (the transport's identity between
    /// them) — the grant's `membership`, when it names one.
    Processes {
        others: Vec<String>,
        membership: Option<String>,
    },
    /// The host selects this profile (for the reason given: "keeping a ledger needs").
    Selects(Profile, &'static str),
    /// The host selects `decisions` and `processes` and shares a membership with this
    /// one (a decision's roster member or gate operator and the decision's host).
    SharesWith(String),
}

/// Where a cell's formula text starts in its file, so formula spans map into the file.
#[derive(Debug, Clone)]
pub(crate) struct FormulaSite {
    pub file: File,
    /// File offset of the formula's first byte, when the string has no escapes.
    pub base: Option<usize>,
    /// The whole string entry, used when `base` is unknown.
    pub entry: SourceSpan,
}

impl FormulaSite {
    pub fn span(&self, inner: &formula::Span) -> SourceSpan {
        match self.base {
            Some(base) => SourceSpan::new(
                (base + inner.start).into(),
                inner.end.saturating_sub(inner.start),
            ),
            None => self.entry,
        }
    }
}

/// What `validate` needs besides the typed topology.
pub(crate) struct Parsed {
    pub topology: Topology,
    pub references: Vec<Reference>,
    /// `(model index, item index)` → site of that cell's formula.
    pub formulas: HashMap<(usize, usize), FormulaSite>,
    /// `(model index, item index)` → span of the item's name.
    pub item_names: HashMap<(usize, usize), (File, SourceSpan)>,
    /// `(model index, output index)` → span of the output's cell name.
    pub output_spans: HashMap<(usize, usize), (File, SourceSpan)>,
    /// Every route a model's input is fed from or its output goes to: (model index,
    /// route, where the route is named).
    pub model_routes: Vec<(usize, String, File, SourceSpan)>,
    /// `(model index, serve index)` → span of the membership a `serve` names.
    pub serve_spans: HashMap<(usize, usize), (File, SourceSpan)>,
    /// Model index → span of its name.
    pub model_names: Vec<(File, SourceSpan)>,
    /// Membership name → span of its `authority voters=N` entry.
    pub authority_spans: HashMap<String, (File, SourceSpan)>,
    /// Route index → spans of its destination nodes.
    pub destination_spans: Vec<Vec<(File, SourceSpan)>>,
    /// Host index → (file, listen entry span, dir entry span).
    pub host_spans: Vec<(File, SourceSpan, Option<SourceSpan>)>,
    /// Every `storage authority="M"`: its span, the host's name and M.
    pub storage_authority_spans: Vec<(File, SourceSpan, String, String)>,
    /// Every profile a host selects, with its span and the host's name.
    pub profile_spans: Vec<(File, SourceSpan, Profile, String)>,
    /// Every name declared per kind, also of objects that failed to read, so a
    /// reference to them is not reported a second time as undeclared.
    pub declared: HashMap<&'static str, std::collections::HashSet<String>>,
    /// Models some item of which failed to read: their names and cycles are not checked.
    pub incomplete_models: std::collections::HashSet<usize>,
    /// Ledger index → span of its name.
    pub ledger_spans: Vec<(File, SourceSpan)>,
    /// Mission index → span of its `deadline=` entry.
    pub mission_deadlines: Vec<(File, SourceSpan)>,
    /// Every matrix item read: (model index, item index, where its `from=` is).
    pub matrix_sources: Vec<(usize, usize, File, SourceSpan)>,
}

pub(crate) fn topology(
    sources: Vec<Source>,
    options: crate::Options,
) -> Result<Topology, Diagnostics> {
    let mut problems = Vec::new();
    let mut parsed = Parsed {
        topology: Topology::default(),
        references: Vec::new(),
        formulas: HashMap::new(),
        item_names: HashMap::new(),
        output_spans: HashMap::new(),
        model_routes: Vec::new(),
        serve_spans: HashMap::new(),
        model_names: Vec::new(),
        authority_spans: HashMap::new(),
        destination_spans: Vec::new(),
        host_spans: Vec::new(),
        storage_authority_spans: Vec::new(),
        profile_spans: Vec::new(),
        declared: HashMap::new(),
        incomplete_models: Default::default(),
        ledger_spans: Vec::new(),
        mission_deadlines: Vec::new(),
        matrix_sources: Vec::new(),
    };
    let mut names = Names::default();
    for (index, source) in sources.iter().enumerate() {
        let file: File = Arc::new(
            NamedSource::new(source.path.display().to_string(), source.text.clone())
                .with_language("kdl"),
        );
        if let Some(deep) = crate::nesting::problem(&file, &source.text) {
            problems.push(deep);
            continue;
        }
        let document = match crate::nesting::parse_v2(&source.text) {
            Ok(document) => document,
            Err(error) => {
                problems.extend(syntax_problems(&file, &source.text, error));
                continue;
            }
        };
        let mut reader = FileReader {
            file: file.clone(),
            index,
            problems: &mut problems,
            parsed: &mut parsed,
            names: &mut names,
        };
        reader.document(&document);
    }
    parsed.topology.sources = sources;
    for (kind, name) in names.by_kind.keys() {
        parsed
            .declared
            .entry(kind)
            .or_default()
            .insert(name.clone());
    }
    validate::topology(&parsed, options, &mut problems);
    // File order, then position in the file.
    let order: Vec<String> = parsed
        .topology
        .sources
        .iter()
        .map(|s| s.path.display().to_string())
        .collect();
    problems.sort_by_key(|d| {
        let file = d
            .source
            .as_ref()
            .and_then(|f| order.iter().position(|o| o == f.name()))
            .unwrap_or(usize::MAX);
        (file, d.offset().unwrap_or(0))
    });
    if problems.is_empty() {
        Ok(parsed.topology)
    } else {
        Err(Diagnostics::new(parsed.topology.sources, problems))
    }
}

/// First declaration of each name per kind, for duplicate detection across files.
#[derive(Default)]
struct Names {
    by_kind: HashMap<(&'static str, String), (File, SourceSpan)>,
}

struct FileReader<'a> {
    file: File,
    index: usize,
    problems: &'a mut Vec<Diagnostic>,
    parsed: &'a mut Parsed,
    names: &'a mut Names,
}

/// The KDL parser's errors as diagnostics in `file` (whose text is `text`). Where the
/// error's line holds characters outside ASCII, the help says what names allow: the
/// parser's own words ("Expected quoted string") do not.
pub(crate) fn syntax_problems(file: &File, text: &str, error: kdl::KdlError) -> Vec<Diagnostic> {
    error
        .diagnostics
        .into_iter()
        .map(|d| {
            let message = d
                .message
                .clone()
                .unwrap_or_else(|| "this is not valid KDL 2".to_owned());
            let mut diagnostic = Diagnostic::at(
                file,
                d.span,
                format!("KDL syntax: {message}"),
                d.label.clone().unwrap_or_else(|| "here".to_owned()),
            );
            let offset = d.span.offset().min(text.len());
            let line_start = text[..offset].rfind('\n').map_or(0, |n| n + 1);
            let line_end = text[offset..].find('\n').map_or(text.len(), |n| offset + n);
            let line = text.get(line_start..line_end).unwrap_or("");
            diagnostic.help = Some(if !line.is_ascii() {
                NAME_CHARACTERS_HELP.to_owned()
            } else {
                d.help.clone().unwrap_or_else(|| {
                    "topology files are KDL 2 documents (https://kdl.dev)".to_owned()
                })
            });
            diagnostic
        })
        .collect()
}

/// What a name may hold, said wherever a name is refused.
pub(crate) const NAME_CHARACTERS_HELP: &str = "names are ASCII: they start with a letter or digit and use letters, digits, `_`, `-`, `.` and `/` (a name becomes a file, a certificate's participant and a claim); other text, in any script, goes in a quoted string value";

const KINDS: &str =
    "grid, host, membership, model, route, mapping, grant, mission, tag, export, ledger, decision";

impl FileReader<'_> {
    fn error(&mut self, span: SourceSpan, message: impl Into<String>, label: &str, help: &str) {
        let mut d = Diagnostic::at(&self.file, span, message, label);
        if !help.is_empty() {
            d = d.with_help(help);
        }
        self.problems.push(d);
    }

    fn origin(&self, span: SourceSpan) -> Origin {
        Origin {
            source: self.index,
            offset: span.offset(),
            length: span.len(),
        }
    }

    fn document(&mut self, document: &KdlDocument) {
        let mut grid_seen: Option<SourceSpan> = None;
        for node in document.nodes() {
            let kind = node.name().value();
            match kind {
                "grid" => {
                    if let Some(first) = grid_seen {
                        let d = Diagnostic::at(
                            &self.file,
                            node.name().span(),
                            "`grid` is declared twice in this file",
                            "second declaration",
                        )
                        .with_label(first, "first declaration")
                        .with_help("keep one `grid version=1` line per file");
                        self.problems.push(d);
                    }
                    grid_seen = Some(node.name().span());
                    self.grid(node);
                }
                "host" => self.host(node),
                "membership" => self.membership(node),
                "model" => self.model(node),
                "route" => self.route(node),
                "mapping" => self.mapping(node),
                "grant" => self.grant(node),
                "mission" => self.mission(node),
                "tag" => self.tag(node),
                "export" => self.export(node),
                "ledger" => self.ledger(node),
                "decision" => self.decision(node),
                other => self.error(
                    node.name().span(),
                    format!("unknown node `{other}`"),
                    "not a topology kind",
                    &format!("top-level nodes are: {KINDS}"),
                ),
            }
        }
        if grid_seen.is_none() {
            let d = Diagnostic::at(
                &self.file,
                SourceSpan::new(0.into(), 0),
                "this file does not declare `grid version=1`",
                "expected here",
            )
            .with_help("start every topology file with `grid version=1`");
            self.problems.push(d);
        }
    }

    fn grid(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        if let Some((version, span)) = n.int_prop(self, "version", true, 0, u32::MAX as i128) {
            if version != 1 {
                self.error(
                    span,
                    format!("unsupported topology version {version}"),
                    "this version",
                    "this Grid reads `grid version=1`",
                );
            }
            self.parsed.topology.version = version as u32;
        }
        n.no_children(self);
        n.finish(self);
    }

    /// Reads the node's name argument and checks it is unique per kind.
    fn object_name(
        &mut self,
        n: &mut NodeReader,
        kind: &'static str,
    ) -> Option<(String, SourceSpan)> {
        let (name, span) = n.string_arg(self, 0, "name")?;
        if !self.check_name(&name, span, kind) {
            return None;
        }
        let key = (kind, name.clone());
        if let Some((file, first)) = self.names.by_kind.get(&key).cloned() {
            let mut d = Diagnostic::at(
                &self.file,
                span,
                format!("{kind} `{name}` is declared twice"),
                "second declaration",
            )
            .with_help(format!(
                "names are unique per kind; rename or remove one {kind}"
            ));
            if Arc::ptr_eq(&file, &self.file) {
                d = d.with_label(first, "first declared here");
            } else {
                d.help = Some(format!(
                    "names are unique per kind; the first `{name}` is in {}",
                    file.name()
                ));
            }
            self.problems.push(d);
            return None;
        }
        self.names.by_kind.insert(key, (self.file.clone(), span));
        Some((name, span))
    }

    fn check_name(&mut self, name: &str, span: SourceSpan, kind: &str) -> bool {
        let valid_chars = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'));
        let starts_well = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        if name.len() > NAME_LENGTH_MAX {
            self.error(
                span,
                format!(
                    "{kind} name is {} bytes long, above NAME_LENGTH_MAX ({NAME_LENGTH_MAX})",
                    name.len()
                ),
                "too long",
                "choose a shorter name",
            );
            return false;
        }
        if !valid_chars || !starts_well {
            self.error(
                span,
                format!("`{name}` is not a valid {kind} name"),
                "invalid name",
                NAME_CHARACTERS_HELP,
            );
            return false;
        }
        true
    }

    fn host_ref(&mut self, n: &mut NodeReader, key: &str, object: &str) -> Option<String> {
        self.named_ref(n, key, RefKind::Host, true, object)
    }

    /// The value of property `key` of `object`, recorded as a reference to a declared
    /// object of `kind` (checked once every file is read).
    fn named_ref(
        &mut self,
        n: &mut NodeReader,
        key: &str,
        kind: RefKind,
        required: bool,
        object: &str,
    ) -> Option<String> {
        let (name, span) = n.string_prop(self, key, required)?;
        self.parsed.references.push(Reference {
            kind,
            name: name.clone(),
            file: self.file.clone(),
            span,
            context: format!("{object} `{key}`"),
            require: None,
        });
        Some(name)
    }
}

/// The file offset where a string entry's value starts, when the value appears
/// verbatim between the quotes (no escapes), so formula spans can be shifted into the
/// file. `None` otherwise.
fn string_base(text: &str, entry: SourceSpan, value: &str) -> Option<usize> {
    let raw = text.get(entry.offset()..entry.offset() + entry.len())?;
    // The entry may start with its property key or whitespace; find the string start.
    let start = raw.find(['"', '#'])?;
    let rest = &raw[start..];
    let hashes = rest.bytes().take_while(|&b| b == b'#').count();
    let after = &rest[hashes..];
    if !after.starts_with('"') || after.starts_with("\"\"\"") {
        return None;
    }
    let inner_start = start + hashes + 1;
    let inner = raw.get(inner_start..inner_start + value.len())?;
    (inner == value).then_some(entry.offset() + inner_start)
}

/// A minimal RFC 3339 shape check: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range.clone())
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
            .then(|| s[range].parse::<u32>().unwrap_or(u32::MAX))
    };
    let (Some(_year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(0..4),
        digits(5..7),
        digits(8..10),
        digits(11..13),
        digits(14..16),
        digits(17..19),
    ) else {
        return false;
    };
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't'))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return false;
    }
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &frac[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => {
            [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit())
                && (*h1 - b'0') * 10 + (*h2 - b'0') <= 23
                && (*m1 - b'0') * 10 + (*m2 - b'0') <= 59
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
