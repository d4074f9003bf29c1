//! KDL documents → typed desired state, reporting every shape error with its span.
//!
//! This pass checks what one node can tell on its own: known node names, known and
//! well-typed properties and arguments, value ranges, formula syntax, duplicate names.
//! References between objects and formula names are resolved afterwards by
//! `validate`, which needs the whole topology.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use kdl::{KdlDocument, KdlEntry, KdlNode, KdlValue};
use miette::{NamedSource, SourceSpan};

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::formula;
use crate::limits;
use crate::limits::{MODEL_OPERATIONS_CEILING_MAX, NAME_LENGTH_MAX};
use crate::topology::*;
use crate::validate;

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
}

impl RefKind {
    pub fn noun(self) -> &'static str {
        match self {
            RefKind::Host => "host",
            RefKind::Membership => "membership",
            RefKind::Route => "route",
            RefKind::Tag => "tag",
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
    /// The tag must be read at this host (a model reads only its own host's tags).
    TagAt(String),
    /// A party of a grant: the host selects the `processes` profile and shares one
    /// membership with every host named (the transport's identity between them).
    Processes(Vec<String>),
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
    /// Model index → span of its name.
    pub model_names: Vec<(File, SourceSpan)>,
    /// Membership name → span of its `authority voters=N` entry.
    pub authority_spans: HashMap<String, (File, SourceSpan)>,
    /// Route index → spans of its destination nodes.
    pub destination_spans: Vec<Vec<(File, SourceSpan)>>,
    /// Host index → (file, listen entry span, dir entry span).
    pub host_spans: Vec<(File, SourceSpan, Option<SourceSpan>)>,
    /// Every name declared per kind, also of objects that failed to read, so a
    /// reference to them is not reported a second time as undeclared.
    pub declared: HashMap<&'static str, std::collections::HashSet<String>>,
    /// Models some item of which failed to read: their names and cycles are not checked.
    pub incomplete_models: std::collections::HashSet<usize>,
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
        model_names: Vec::new(),
        authority_spans: HashMap::new(),
        destination_spans: Vec::new(),
        host_spans: Vec::new(),
        declared: HashMap::new(),
        incomplete_models: Default::default(),
    };
    let mut names = Names::default();
    for (index, source) in sources.iter().enumerate() {
        let file: File = Arc::new(
            NamedSource::new(source.path.display().to_string(), source.text.clone())
                .with_language("kdl"),
        );
        let document = match KdlDocument::parse_v2(&source.text) {
            Ok(document) => document,
            Err(error) => {
                for d in error.diagnostics {
                    let message = d
                        .message
                        .clone()
                        .unwrap_or_else(|| "this is not valid KDL 2".to_owned());
                    let mut diagnostic = Diagnostic::at(
                        &file,
                        d.span,
                        format!("KDL syntax: {message}"),
                        d.label.clone().unwrap_or_else(|| "here".to_owned()),
                    );
                    diagnostic.help = Some(d.help.clone().unwrap_or_else(|| {
                        "topology files are KDL 2 documents (https://kdl.dev)".to_owned()
                    }));
                    problems.push(diagnostic);
                }
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

const KINDS: &str = "grid, host, membership, model, route, grant, mission, tag, export";

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
                "grant" => self.grant(node),
                "mission" => self.mission(node),
                "tag" => self.tag(node),
                "export" => self.export(node),
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
                "names start with a letter or digit and use letters, digits, `_`, `-`, `.` and `/`",
            );
            return false;
        }
        true
    }

    fn host(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "host");
        let listen = n
            .string_prop(self, "listen", true)
            .and_then(|(text, span)| match text.parse::<SocketAddr>() {
                Ok(addr) => Some((addr, span)),
                Err(_) => {
                    self.error(
                        span,
                        format!("`{text}` is not a listen address"),
                        "expected IP:PORT",
                        "for example listen=\"127.0.0.1:7401\"",
                    );
                    None
                }
            });
        let dir = n.string_prop(self, "dir", false);
        if let Some((dir, span)) = &dir
            && dir.is_empty()
        {
            self.error(
                *span,
                "`dir` is empty",
                "empty path",
                "omit `dir` to use <state>/hosts/NAME",
            );
        }
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        let mut memberships: Vec<String> = Vec::new();
        let mut profiles: Vec<Profile> = Vec::new();
        let mut key_generation = None;
        let mut capacity = crate::topology::DeliveryCapacity::default();
        let mut profiles_seen = false;
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            match child.name().value() {
                "member" => {
                    if let Some((membership, span)) = c.string_arg(self, 0, "membership") {
                        if memberships.contains(&membership) {
                            self.error(
                                span,
                                format!("`member {membership}` is given twice"),
                                "repeated",
                                "list each membership once",
                            );
                        } else {
                            if let Some((host, _)) = &name {
                                self.parsed.references.push(Reference {
                                    kind: RefKind::Membership,
                                    name: membership.clone(),
                                    file: self.file.clone(),
                                    span,
                                    context: format!("host `{host}` member"),
                                    require: None,
                                });
                            }
                            memberships.push(membership);
                        }
                    }
                }
                "profiles" => {
                    if profiles_seen {
                        self.error(
                            child.name().span(),
                            "`profiles` is given twice",
                            "second list",
                            "list every profile on one `profiles` line",
                        );
                    }
                    profiles_seen = true;
                    for (value, span) in c.string_args(self, "profile") {
                        match Profile::from_name(&value) {
                            Some(p) if profiles.contains(&p) => self.error(
                                span,
                                format!("profile `{value}` is listed twice"),
                                "repeated",
                                "",
                            ),
                            Some(p) => profiles.push(p),
                            None => self.error(
                                span,
                                format!("unknown profile `{value}`"),
                                "not a profile",
                                &format!(
                                    "profiles are: {}",
                                    Profile::ALL.map(Profile::name).join(", ")
                                ),
                            ),
                        }
                    }
                }
                "keys" => {
                    if let Some((generation, _)) =
                        c.int_prop(self, "generation", true, 1, u32::MAX as i128)
                    {
                        key_generation = Some(generation as u32);
                    }
                }
                "capacity" => {
                    let max = crate::limits::DELIVERY_CAPACITY_MAX as i128;
                    let mut read =
                        |key: &str| c.int_prop(self, key, false, 1, max).map(|(n, _)| n as u64);
                    capacity = crate::topology::DeliveryCapacity {
                        ordered_per_destination: read("ordered-per-destination"),
                        ordered_per_host: read("ordered-per-host"),
                        latest_per_destination: read("latest-per-destination"),
                        latest_per_host: read("latest-per-host"),
                    };
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of host"),
                        "not a host setting",
                        "a host holds `member M`, `profiles P…`, `keys generation=N` and `capacity …`",
                    )
                }
            }
            c.no_children(self);
            c.finish(self);
        }
        n.finish(self);
        let (Some((name, name_span)), Some((listen, listen_span))) = (name, listen) else {
            return;
        };
        self.parsed
            .host_spans
            .push((self.file.clone(), listen_span, dir.as_ref().map(|d| d.1)));
        let origin = self.origin(name_span);
        self.parsed.topology.hosts.push(Host {
            name,
            listen,
            dir: dir.map(|(d, _)| PathBuf::from(d)),
            memberships,
            profiles,
            key_generation,
            capacity,
            retired,
            origin,
        });
    }

    fn membership(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "membership");
        let mut authority_voters = None;
        let mut revoked: Vec<String> = Vec::new();
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            match child.name().value() {
                "authority" => {
                    if authority_voters.is_some() {
                        self.error(
                            child.name().span(),
                            "`authority` is given twice",
                            "second",
                            "one authority per membership",
                        );
                    }
                    if let Some((voters, span)) = c.int_prop(
                        self,
                        "voters",
                        true,
                        1,
                        crate::limits::AUTHORITY_VOTERS_MAX as i128,
                    ) {
                        authority_voters = Some(voters as u32);
                        if let Some((m, _)) = &name {
                            self.parsed
                                .authority_spans
                                .insert(m.clone(), (self.file.clone(), span));
                        }
                    }
                }
                "revoke" => {
                    if let Some((participant, span)) = c.string_arg(self, 0, "participant") {
                        if revoked.contains(&participant) {
                            self.error(
                                span,
                                format!("`{participant}` is revoked twice"),
                                "repeated",
                                "",
                            );
                        } else {
                            revoked.push(participant);
                        }
                    }
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of membership"),
                        "not a membership setting",
                        "a membership holds `authority voters=N` and `revoke PARTICIPANT`",
                    )
                }
            }
            c.no_children(self);
            c.finish(self);
        }
        n.finish(self);
        if let Some((name, span)) = name {
            let origin = self.origin(span);
            self.parsed.topology.memberships.push(Membership {
                name,
                authority_voters,
                revoked,
                origin,
            });
        }
    }

    fn model(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "model");
        let host = n.string_prop(self, "host", true);
        let ceiling = n
            .int_prop(self, "ceiling", false, 1, i128::MAX)
            .and_then(|(ceiling, span)| {
                if ceiling > MODEL_OPERATIONS_CEILING_MAX as i128 {
                    self.error(
                        span,
                        format!(
                            "ceiling {ceiling} is above MODEL_OPERATIONS_CEILING_MAX ({MODEL_OPERATIONS_CEILING_MAX})"
                        ),
                        "too high",
                        &format!("a model may declare at most ceiling={MODEL_OPERATIONS_CEILING_MAX}"),
                    );
                    None
                } else {
                    Some(ceiling as u32)
                }
            });
        let scalar = n.bool_prop(self, "scalar").unwrap_or(false);
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        let model_index = self.parsed.topology.models.len();
        let problems_before = self.problems.len();
        let mut items: Vec<Item> = Vec::new();
        let mut outputs: Vec<Output> = Vec::new();
        let mut item_spans: HashMap<String, SourceSpan> = HashMap::new();
        let mut operations: u64 = 0;
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            match child.name().value() {
                kind @ ("input" | "cell") => {
                    let Some((item_name, span)) = c.string_arg(self, 0, "name") else {
                        c.skip_all();
                        c.finish(self);
                        continue;
                    };
                    if !formula::is_formula_name(&item_name) || item_name.len() > NAME_LENGTH_MAX {
                        self.error(
                            span,
                            format!("`{item_name}` is not a valid {kind} name"),
                            "invalid name",
                            "input and cell names start with a letter or `_`, use letters, digits and `_`, are not function names, and are at most NAME_LENGTH_MAX (128) bytes",
                        );
                    } else if let Some(first) = item_spans.get(&item_name) {
                        let d = Diagnostic::at(
                            &self.file,
                            span,
                            format!("`{item_name}` is declared twice in this model"),
                            "second declaration",
                        )
                        .with_label(*first, "first declared here")
                        .with_help("inputs and cells of one model share one namespace");
                        self.problems.push(d);
                    } else {
                        item_spans.insert(item_name.clone(), span);
                    }
                    let item_index = items.len();
                    self.parsed
                        .item_names
                        .insert((model_index, item_index), (self.file.clone(), span));
                    if kind == "input" {
                        let default = c.float_prop(self, "default");
                        let from = c.string_prop(self, "from", false).and_then(|(from, span)| {
                            self.input_source(
                                &from,
                                span,
                                name.as_ref().map(|n| n.0.as_str()),
                                host.as_ref().map(|h| h.0.as_str()),
                            )
                        });
                        items.push(Item::Input(Input {
                            name: item_name,
                            default,
                            from,
                        }));
                    } else {
                        let Some((text, entry)) = c.string_arg(self, 1, "formula") else {
                            c.skip_all();
                            c.finish(self);
                            continue;
                        };
                        let site = FormulaSite {
                            file: self.file.clone(),
                            base: string_base(self.file.inner(), entry, &text),
                            entry,
                        };
                        if text.len() > crate::limits::FORMULA_LENGTH_MAX {
                            self.error(
                                entry,
                                format!(
                                    "formula is {} bytes long, above FORMULA_LENGTH_MAX ({})",
                                    text.len(),
                                    crate::limits::FORMULA_LENGTH_MAX
                                ),
                                "too long",
                                "split it into several cells",
                            );
                        } else {
                            match formula::parse(&text) {
                                Ok(expr) => {
                                    operations += expr.operations();
                                    self.parsed.formulas.insert((model_index, item_index), site);
                                    items.push(Item::Cell(Cell {
                                        name: item_name,
                                        formula: text,
                                        expr,
                                    }));
                                }
                                Err(e) => {
                                    let mut d = Diagnostic::at(
                                        &self.file,
                                        site.span(&e.span),
                                        format!("formula of cell `{item_name}`: {}", e.message),
                                        "here",
                                    );
                                    d.help = e.help;
                                    self.problems.push(d);
                                }
                            }
                        }
                    }
                }
                "output" => {
                    let cell = c.string_arg(self, 0, "cell");
                    let route = c.string_prop(self, "route", true);
                    if let (Some((cell, cell_span)), Some((route, route_span))) = (cell, route) {
                        if outputs.iter().any(|o| o.cell == cell && o.route == route) {
                            self.error(
                                cell_span,
                                format!("output `{cell}` to route `{route}` is given twice"),
                                "repeated",
                                "",
                            );
                        }
                        if let (Some((model, _)), Some((host, _))) = (&name, &host) {
                            self.parsed.references.push(Reference {
                                kind: RefKind::Route,
                                name: route.clone(),
                                file: self.file.clone(),
                                span: route_span,
                                context: format!("model `{model}` output"),
                                require: Some(Requirement::PublishedBy(host.clone())),
                            });
                        }
                        self.parsed
                            .output_spans
                            .insert((model_index, outputs.len()), (self.file.clone(), cell_span));
                        outputs.push(Output { cell, route });
                    }
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of model"),
                        "not part of a model",
                        "a model holds `input NAME`, `cell NAME \"FORMULA\"` and `output CELL route=R`",
                    )
                }
            }
            c.no_children(self);
            c.finish(self);
        }
        n.finish(self);
        if self.problems.len() > problems_before {
            self.parsed.incomplete_models.insert(model_index);
        }
        let (Some((name, name_span)), Some((host, host_span))) = (name, host) else {
            return;
        };
        self.parsed.references.push(Reference {
            kind: RefKind::Host,
            name: host.clone(),
            file: self.file.clone(),
            span: host_span,
            context: format!("model `{name}`"),
            require: None,
        });
        self.parsed.model_names.push((self.file.clone(), name_span));
        let origin = self.origin(name_span);
        self.parsed.topology.models.push(Model {
            name,
            host,
            declared_ceiling: ceiling,
            scalar,
            retired,
            items,
            outputs,
            operations,
            origin,
        });
    }

    fn input_source(
        &mut self,
        from: &str,
        span: SourceSpan,
        model: Option<&str>,
        host: Option<&str>,
    ) -> Option<InputSource> {
        let (kind, target) = match from.split_once(':') {
            Some(("tag", t)) if !t.is_empty() => (RefKind::Tag, t),
            Some(("route", r)) if !r.is_empty() => (RefKind::Route, r),
            _ => {
                self.error(
                    span,
                    format!("`{from}` is not an input source"),
                    "expected tag:NAME or route:NAME",
                    "an input is fed from=\"tag:T\" or from=\"route:R\"",
                );
                return None;
            }
        };
        if let Some(model) = model {
            self.parsed.references.push(Reference {
                kind,
                name: target.to_owned(),
                file: self.file.clone(),
                span,
                context: format!("model `{model}` input"),
                require: match (kind, host) {
                    (RefKind::Route, Some(h)) => Some(Requirement::DeliversTo(h.to_owned())),
                    (RefKind::Tag, Some(h)) => Some(Requirement::TagAt(h.to_owned())),
                    _ => None,
                },
            });
        }
        Some(match kind {
            RefKind::Tag => InputSource::Tag(target.to_owned()),
            _ => InputSource::Route(target.to_owned()),
        })
    }

    fn route(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "route");
        let membership = n.string_prop(self, "membership", true);
        let class = n
            .string_prop(self, "class", true)
            .and_then(|(class, span)| match class.as_str() {
                "ordered" => Some(RouteClass::Ordered),
                "latest" => Some(RouteClass::Latest),
                other => {
                    self.error(
                        span,
                        format!("unknown route class `{other}`"),
                        "not a class",
                        "class is `ordered` or `latest`",
                    );
                    None
                }
            });
        let encrypted = n.bool_prop(self, "encrypted").unwrap_or(false);
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        let mut publisher: Option<(String, SourceSpan)> = None;
        let mut destinations: Vec<Destination> = Vec::new();
        let mut destination_spans = Vec::new();
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            match child.name().value() {
                "publisher" => {
                    if let Some((host, span)) = c.string_arg(self, 0, "host") {
                        if let Some((_, first)) = &publisher {
                            let d = Diagnostic::at(
                                &self.file,
                                span,
                                "a route has exactly one publisher",
                                "second publisher",
                            )
                            .with_label(*first, "first publisher")
                            .with_help("declare a second route for a second publisher");
                            self.problems.push(d);
                        } else {
                            publisher = Some((host, span));
                        }
                    }
                }
                "destination" => {
                    let host = c.string_arg(self, 0, "host");
                    let retired = c.bool_prop(self, "retired").unwrap_or(false);
                    if let Some((host, span)) = host {
                        if let Some(i) = destinations.iter().position(|d| d.host == host) {
                            let (_, first) = destination_spans[i];
                            let d = Diagnostic::at(
                                &self.file,
                                span,
                                format!("destination `{host}` is listed twice"),
                                "repeated",
                            )
                            .with_label(first, "first listed here")
                            .with_help("list each destination once");
                            self.problems.push(d);
                        } else {
                            destinations.push(Destination { host, retired });
                            destination_spans.push((self.file.clone(), span));
                        }
                    }
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of route"),
                        "not part of a route",
                        "a route holds one `publisher H` and `destination H` lines",
                    )
                }
            }
            c.no_children(self);
            c.finish(self);
        }
        n.finish(self);
        let Some((name, name_span)) = name else {
            return;
        };
        if publisher.is_none() {
            self.error(
                name_span,
                format!("route `{name}` has no publisher"),
                "needs `publisher H`",
                "add a `publisher HOST` child",
            );
        }
        let limit = crate::limits::ROUTE_DESTINATIONS_MAX;
        if destinations.len() > limit {
            let (_, span) = destination_spans[limit];
            self.error(
                span,
                format!(
                    "route `{name}` has {} destinations, above ROUTE_DESTINATIONS_MAX ({limit})",
                    destinations.len()
                ),
                "destination 1,025 and later",
                "split the destinations over several routes",
            );
        }
        let (Some((membership, m_span)), Some(class), Some((publisher, p_span))) =
            (membership, class, publisher)
        else {
            return;
        };
        self.parsed.references.push(Reference {
            kind: RefKind::Membership,
            name: membership.clone(),
            file: self.file.clone(),
            span: m_span,
            context: format!("route `{name}`"),
            require: None,
        });
        self.parsed.references.push(Reference {
            kind: RefKind::Host,
            name: publisher.clone(),
            file: self.file.clone(),
            span: p_span,
            context: format!("route `{name}` publisher"),
            require: Some(Requirement::Publishes(membership.clone())),
        });
        for (destination, (file, span)) in destinations.iter().zip(&destination_spans) {
            if destination.host == publisher {
                let d = Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "`{publisher}` publishes route `{name}` and cannot also be its destination"
                    ),
                    "publisher here too",
                )
                .with_help("a publisher already holds its own values");
                self.problems.push(d);
            }
            self.parsed.references.push(Reference {
                kind: RefKind::Host,
                name: destination.host.clone(),
                file: file.clone(),
                span: *span,
                context: format!("route `{name}` destination"),
                require: Some(Requirement::MemberOf(membership.clone())),
            });
        }
        self.parsed.destination_spans.push(destination_spans);
        let origin = self.origin(name_span);
        self.parsed.topology.routes.push(Route {
            name,
            membership,
            class,
            encrypted,
            publisher,
            destinations,
            retired,
            origin,
        });
    }

    fn host_ref(&mut self, n: &mut NodeReader, key: &str, object: &str) -> Option<String> {
        let (host, span) = n.string_prop(self, key, true)?;
        self.parsed.references.push(Reference {
            kind: RefKind::Host,
            name: host.clone(),
            file: self.file.clone(),
            span,
            context: format!("{object} `{key}`"),
            require: None,
        });
        Some(host)
    }

    fn grant(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "grant");
        let label = format!("grant `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let first = self.parsed.references.len();
        let issuer = self.host_ref(&mut n, "issuer", &label);
        let caller = self.host_ref(&mut n, "caller", &label);
        let mailbox = match n.string_prop(self, "mailbox", false) {
            Some((host, span)) => {
                self.parsed.references.push(Reference {
                    kind: RefKind::Host,
                    name: host.clone(),
                    file: self.file.clone(),
                    span,
                    context: format!("{label} `mailbox`"),
                    require: None,
                });
                Some(host)
            }
            None => None,
        };
        let units = n.int_prop(self, "units", true, 1, u64::MAX as i128);
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        n.no_children(self);
        n.finish(self);
        // Every party serves Processes and shares a membership with the others.
        let parties: Vec<String> = [&issuer, &caller, &mailbox]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for reference in &mut self.parsed.references[first..] {
            let others = parties
                .iter()
                .filter(|p| **p != reference.name)
                .cloned()
                .collect();
            reference.require = Some(Requirement::Processes(others));
        }
        if let (Some(issuer), Some(caller)) = (&issuer, &caller)
            && issuer == caller
            && let Some(span) = self.parsed.references.get(first + 1).map(|r| r.span)
        {
            self.error(
                span,
                format!("{label}: host `{caller}` cannot be granted units by itself"),
                "the caller is the issuer",
                "a grant lets another host run Processes at the issuer: name a different caller",
            );
        }
        if let (Some((name, span)), Some(issuer), Some(caller), Some((units, _))) =
            (name, issuer, caller, units)
        {
            let origin = self.origin(span);
            self.parsed.topology.grants.push(Grant {
                name,
                issuer,
                caller,
                units: units as u64,
                mailbox,
                retired,
                origin,
            });
        }
    }

    fn mission(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "mission");
        let label = format!("mission `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let host = self.host_ref(&mut n, "host", &label);
        let units = n.int_prop(self, "units", true, 1, u64::MAX as i128);
        let deadline = n.string_prop(self, "deadline", true).and_then(|(d, span)| {
            if is_rfc3339(&d) {
                Some(d)
            } else {
                self.error(
                    span,
                    format!("`{d}` is not an RFC 3339 timestamp"),
                    "not a timestamp",
                    "for example deadline=\"2026-12-01T06:00:00Z\"",
                );
                None
            }
        });
        let successor = n.string_prop(self, "successor", true);
        n.no_children(self);
        n.finish(self);
        let (
            Some((name, span)),
            Some(host),
            Some((units, _)),
            Some(deadline),
            Some((successor, s_span)),
        ) = (name, host, units, deadline, successor)
        else {
            return;
        };
        if successor == host {
            self.error(
                s_span,
                format!("mission `{name}` names its own host as successor"),
                "same host",
                "the successor is the host that takes over after departure",
            );
        }
        self.parsed.references.push(Reference {
            kind: RefKind::Host,
            name: successor.clone(),
            file: self.file.clone(),
            span: s_span,
            context: format!("mission `{name}` successor"),
            require: None,
        });
        let origin = self.origin(span);
        self.parsed.topology.missions.push(Mission {
            name,
            host,
            units: units as u64,
            deadline,
            successor,
            origin,
        });
    }

    fn tag(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "tag");
        let label = format!("tag `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let host = self.host_ref(&mut n, "host", &label);
        let mut source: Option<(TagSource, SourceSpan)> = None;
        // A source child that failed to read has its own diagnostics already.
        let mut unreadable = false;
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            let known = matches!(
                child.name().value(),
                "modbus" | "opcua" | "sparkplug" | "bacnet" | "j1939" | "simulate"
            );
            let read = match child.name().value() {
                "modbus" => self.modbus(&mut c),
                "opcua" => (|| {
                    let (endpoint, _) = c.string_arg(self, 0, "endpoint")?;
                    let (node, _) = c.string_prop(self, "node", true)?;
                    Some(TagSource::OpcUa { endpoint, node })
                })(),
                "sparkplug" => (|| {
                    let broker = c.string_arg(self, 0, "broker");
                    let group = c.string_prop(self, "group", true);
                    let node = c.string_prop(self, "node", true);
                    let device = c.string_prop(self, "device", false).map(|d| d.0);
                    let metric = c.string_prop(self, "metric", true);
                    Some(TagSource::Sparkplug {
                        broker: broker?.0,
                        group: group?.0,
                        node: node?.0,
                        device,
                        metric: metric?.0,
                    })
                })(),
                "bacnet" => (|| {
                    let address = c.string_arg(self, 0, "address");
                    let device = c.int_prop(self, "device", true, 0, 4_194_303);
                    let object = c.string_prop(self, "object", true);
                    Some(TagSource::Bacnet {
                        address: address?.0,
                        device: device?.0 as u32,
                        object: object?.0,
                    })
                })(),
                "simulate" => self.simulate(&mut c),
                "j1939" => (|| {
                    let source = c.string_arg(self, 0, "candump log or interface");
                    let pgn = c.int_prop(self, "pgn", true, 0, 0x3FFFF);
                    let spn = c.int_prop(self, "spn", true, 0, 0x7FFFF);
                    Some(TagSource::J1939 {
                        source: source?.0,
                        pgn: pgn?.0 as u32,
                        spn: spn?.0 as u32,
                    })
                })(),
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown tag source `{other}`"),
                        "not a source",
                        "a tag reads from one of: modbus, opcua, sparkplug, bacnet, j1939, simulate",
                    );
                    None
                }
            };
            c.no_children(self);
            c.finish(self);
            unreadable |= known && read.is_none();
            if let Some(read) = read {
                if let Some((_, first)) = &source {
                    let d = Diagnostic::at(
                        &self.file,
                        child.name().span(),
                        "a tag has exactly one source",
                        "second source",
                    )
                    .with_label(*first, "first source")
                    .with_help("declare another tag for another source");
                    self.problems.push(d);
                } else {
                    source = Some((read, child.name().span()));
                }
            }
        }
        n.finish(self);
        let Some((name, span)) = name else { return };
        let Some((source, _)) = source else {
            if unreadable {
                return;
            }
            self.error(
                span,
                format!("tag `{name}` has no source"),
                "needs a source",
                "add one child: modbus, opcua, sparkplug, bacnet, j1939 or simulate",
            );
            return;
        };
        let Some(host) = host else { return };
        let origin = self.origin(span);
        self.parsed.topology.tags.push(Tag {
            name,
            host,
            source,
            origin,
        });
    }

    /// `simulate wave=… period-s=N min=X max=Y seed=N [interval-ms=N]`.
    fn simulate(&mut self, c: &mut NodeReader) -> Option<TagSource> {
        let wave = c.string_prop(self, "wave", true).and_then(|(w, span)| {
            Wave::from_name(&w).or_else(|| {
                self.error(
                    span,
                    format!("unknown wave `{w}`"),
                    "not a wave",
                    "wave is sine, triangle, square or sawtooth",
                );
                None
            })
        });
        let period = c.int_prop(
            self,
            "period-s",
            true,
            1,
            limits::SIMULATE_PERIOD_S_MAX as i128,
        );
        let number = |this: &mut Self, c: &mut NodeReader, key: &str| {
            let v = c.float_prop(this, key);
            if v.is_none() && c.has_property(key).is_none() {
                c.missing(
                    this,
                    format!("`simulate` needs the property `{key}`"),
                    format!("add {key}=NUMBER, a finite number"),
                );
            }
            v
        };
        let min = number(self, c, "min");
        let max = number(self, c, "max");
        let max_span = c.has_property("max");
        let seed = c.int_prop(self, "seed", true, 0, u64::MAX as i128);
        let interval = match c.int_prop(
            self,
            "interval-ms",
            false,
            limits::SIMULATE_INTERVAL_MS_MIN as i128,
            limits::SIMULATE_INTERVAL_MS_MAX as i128,
        ) {
            Some((i, _)) => Some(i as u32),
            None if c.has_property("interval-ms").is_some() => None,
            None => Some(limits::SIMULATE_INTERVAL_MS_DEFAULT),
        };
        let (min, max) = (min?, max?);
        if min >= max {
            if let Some(span) = max_span {
                self.error(
                    span,
                    format!("`simulate` has min={min} not below max={max}"),
                    "not above min",
                    "a simulated tag ranges from min up to a larger max",
                );
            }
            return None;
        }
        Some(TagSource::Simulate {
            wave: wave?,
            period_s: period?.0 as u32,
            min,
            max,
            seed: seed?.0 as u64,
            interval_ms: interval?,
        })
    }

    fn modbus(&mut self, c: &mut NodeReader) -> Option<TagSource> {
        let address = c.string_arg(self, 0, "address");
        let unit = c.int_prop(self, "unit", true, 0, 255);
        let register = c.string_prop(self, "register", true).and_then(|(r, span)| {
            Some(match r.as_str() {
                "holding" => ModbusRegister::Holding,
                "input" => ModbusRegister::Input,
                "coil" => ModbusRegister::Coil,
                "discrete" => ModbusRegister::Discrete,
                other => {
                    self.error(
                        span,
                        format!("unknown Modbus register kind `{other}`"),
                        "not a register kind",
                        "register is holding, input, coil or discrete",
                    );
                    return None;
                }
            })
        });
        let register_address = c.int_prop(self, "address", true, 0, u16::MAX as i128);
        let value_type = c.string_prop(self, "type", true).and_then(|(t, span)| {
            Some(match t.as_str() {
                "u16" => ModbusType::U16,
                "i16" => ModbusType::I16,
                "u32" => ModbusType::U32,
                "i32" => ModbusType::I32,
                "f32" => ModbusType::F32,
                other => {
                    self.error(
                        span,
                        format!("unknown Modbus value type `{other}`"),
                        "not a type",
                        "type is u16, i16, u32, i32 or f32",
                    );
                    return None;
                }
            })
        });
        let scale = c.float_prop(self, "scale").unwrap_or(1.0);
        Some(TagSource::Modbus {
            address: address?.0,
            unit: unit?.0 as u8,
            register: register?,
            register_address: register_address?.0 as u16,
            value_type: value_type?,
            scale,
        })
    }

    fn export(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "export");
        let label = format!("export `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let gateway = self.host_ref(&mut n, "gateway", &label);
        let mut route = |this: &mut Self, key: &str| {
            let (route, span) = n.string_prop(this, key, true)?;
            this.parsed.references.push(Reference {
                kind: RefKind::Route,
                name: route.clone(),
                file: this.file.clone(),
                span,
                context: format!("{label} `{key}`"),
                require: None,
            });
            Some((route, span))
        };
        let from = route(self, "from");
        let to = route(self, "to");
        n.no_children(self);
        n.finish(self);
        let (Some((name, span)), Some(gateway), Some((from, _)), Some((to, to_span))) =
            (name, gateway, from, to)
        else {
            return;
        };
        if from == to {
            self.error(
                to_span,
                format!("export `{name}` reads and writes the same route"),
                "same route",
                "an export passes values from a route of one membership to a route of another",
            );
        }
        let origin = self.origin(span);
        self.parsed.topology.exports.push(Export {
            name,
            gateway,
            from,
            to,
            origin,
        });
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

/// Reads one node's entries, remembering which were used so that `finish` reports
/// every unknown property and unexpected argument.
struct NodeReader<'n> {
    node: &'n KdlNode,
    used: Vec<bool>,
    children_read: bool,
}

fn type_name(value: &KdlValue) -> &'static str {
    match value {
        KdlValue::String(_) => "a string",
        KdlValue::Integer(_) => "an integer",
        KdlValue::Float(_) => "a number",
        KdlValue::Bool(_) => "a boolean",
        KdlValue::Null => "#null",
    }
}

impl<'n> NodeReader<'n> {
    fn new(node: &'n KdlNode) -> Self {
        NodeReader {
            node,
            used: vec![false; node.entries().len()],
            children_read: false,
        }
    }

    fn what(&self) -> String {
        format!("`{}`", self.node.name().value())
    }

    fn positional(&mut self, index: usize) -> Option<&'n KdlEntry> {
        let (i, entry) = self
            .node
            .entries()
            .iter()
            .enumerate()
            .filter(|(_, e)| e.name().is_none())
            .nth(index)?;
        self.used[i] = true;
        Some(entry)
    }

    fn property(&mut self, key: &str) -> Option<&'n KdlEntry> {
        // KDL 2: the last occurrence wins; `finish` reports repeated keys.
        let (i, entry) = self
            .node
            .entries()
            .iter()
            .enumerate()
            .rfind(|(_, e)| e.name().is_some_and(|n| n.value() == key))?;
        self.used[i] = true;
        Some(entry)
    }

    /// The span of property `key` when the node has it.
    fn has_property(&mut self, key: &str) -> Option<SourceSpan> {
        self.property(key).map(|e| e.span())
    }

    fn missing(&self, r: &mut FileReader, what: String, help: String) {
        r.error(self.node.name().span(), what, "here", &help);
    }

    fn string_arg(
        &mut self,
        r: &mut FileReader,
        index: usize,
        what: &str,
    ) -> Option<(String, SourceSpan)> {
        let node = self.what();
        match self.positional(index) {
            Some(entry) => match entry.value() {
                KdlValue::String(s) => Some((s.clone(), entry.span())),
                other => {
                    r.error(
                        entry.span(),
                        format!(
                            "the {what} of {node} must be a string, found {}",
                            type_name(other)
                        ),
                        "wrong type",
                        "quote it, for example \"plant-ops\"",
                    );
                    None
                }
            },
            None => {
                self.missing(
                    r,
                    format!("{node} needs its {what}"),
                    format!("write it after {node}"),
                );
                None
            }
        }
    }

    /// Every positional argument, as strings.
    fn string_args(&mut self, r: &mut FileReader, what: &str) -> Vec<(String, SourceSpan)> {
        let mut out = Vec::new();
        let mut index = 0;
        while let Some(entry) = self.positional(index) {
            match entry.value() {
                KdlValue::String(s) => out.push((s.clone(), entry.span())),
                other => r.error(
                    entry.span(),
                    format!("a {what} must be a string, found {}", type_name(other)),
                    "wrong type",
                    "",
                ),
            }
            index += 1;
        }
        out
    }

    fn string_prop(
        &mut self,
        r: &mut FileReader,
        key: &str,
        required: bool,
    ) -> Option<(String, SourceSpan)> {
        let node = self.what();
        match self.property(key) {
            Some(entry) => match entry.value() {
                KdlValue::String(s) => Some((s.clone(), entry.span())),
                other => {
                    r.error(
                        entry.span(),
                        format!(
                            "property `{key}` of {node} must be a string, found {}",
                            type_name(other)
                        ),
                        "wrong type",
                        &format!("quote the value: {key}=\"…\""),
                    );
                    None
                }
            },
            None if required => {
                self.missing(
                    r,
                    format!("{node} needs property `{key}`"),
                    format!("add {key}=…"),
                );
                None
            }
            None => None,
        }
    }

    fn int_prop(
        &mut self,
        r: &mut FileReader,
        key: &str,
        required: bool,
        min: i128,
        max: i128,
    ) -> Option<(i128, SourceSpan)> {
        let node = self.what();
        match self.property(key) {
            Some(entry) => match entry.value() {
                KdlValue::Integer(i) if (min..=max).contains(i) => Some((*i, entry.span())),
                KdlValue::Integer(i) => {
                    let range = if max == i128::MAX || max == u64::MAX as i128 {
                        format!("at least {min}")
                    } else {
                        format!("from {min} to {max}")
                    };
                    r.error(
                        entry.span(),
                        format!("property `{key}` of {node} is {i}, outside its range"),
                        "out of range",
                        &format!("`{key}` is an integer {range}"),
                    );
                    None
                }
                other => {
                    r.error(
                        entry.span(),
                        format!(
                            "property `{key}` of {node} must be an integer, found {}",
                            type_name(other)
                        ),
                        "wrong type",
                        &format!("write a whole number, for example {key}={}", min.max(1)),
                    );
                    None
                }
            },
            None if required => {
                self.missing(
                    r,
                    format!("{node} needs property `{key}`"),
                    format!("add {key}=N"),
                );
                None
            }
            None => None,
        }
    }

    fn float_prop(&mut self, r: &mut FileReader, key: &str) -> Option<f64> {
        let node = self.what();
        let entry = self.property(key)?;
        let value = match entry.value() {
            KdlValue::Float(f) => *f,
            KdlValue::Integer(i) => *i as f64,
            other => {
                r.error(
                    entry.span(),
                    format!(
                        "property `{key}` of {node} must be a number, found {}",
                        type_name(other)
                    ),
                    "wrong type",
                    "write a finite number, for example 82.5",
                );
                return None;
            }
        };
        if !value.is_finite() {
            r.error(
                entry.span(),
                format!("property `{key}` of {node} is not a finite number"),
                "not finite",
                "values are finite f64: NaN and ±infinity are refused",
            );
            return None;
        }
        Some(value)
    }

    fn bool_prop(&mut self, r: &mut FileReader, key: &str) -> Option<bool> {
        let node = self.what();
        let entry = self.property(key)?;
        match entry.value() {
            KdlValue::Bool(b) => Some(*b),
            other => {
                r.error(
                    entry.span(),
                    format!(
                        "property `{key}` of {node} must be a boolean, found {}",
                        type_name(other)
                    ),
                    "wrong type",
                    &format!("write {key}=#true or {key}=#false"),
                );
                None
            }
        }
    }

    fn children(&mut self, _r: &mut FileReader) -> &'n [KdlNode] {
        self.children_read = true;
        self.node.children().map_or(&[], |c| c.nodes())
    }

    fn no_children(&mut self, r: &mut FileReader) {
        self.children_read = true;
        if let Some(children) = self.node.children()
            && let Some(first) = children.nodes().first()
        {
            r.error(
                first.name().span(),
                format!("`{}` takes no children", self.node.name().value()),
                "unexpected child",
                "remove the `{ … }` block",
            );
        }
    }

    /// Marks every entry used (after an error that makes the rest meaningless).
    fn skip_all(&mut self) {
        self.used.iter_mut().for_each(|u| *u = true);
        self.children_read = true;
    }

    fn finish(self, r: &mut FileReader) {
        let node = self.node.name().value().to_owned();
        let mut seen: Vec<&str> = Vec::new();
        for (entry, used) in self.node.entries().iter().zip(&self.used) {
            if let Some(key) = entry.name() {
                if seen.contains(&key.value()) {
                    r.error(
                        entry.span(),
                        format!("property `{}` of `{node}` is given twice", key.value()),
                        "repeated",
                        "give each property once",
                    );
                }
                seen.push(key.value());
            }
            if *used {
                continue;
            }
            match entry.name() {
                Some(key) => r.error(
                    key.span(),
                    format!("unknown property `{}` of `{node}`", key.value()),
                    "unknown property",
                    &format!("see docs/topology.md for the properties of `{node}`"),
                ),
                None => r.error(
                    entry.span(),
                    format!("unexpected argument of `{node}`"),
                    "unexpected",
                    &format!("see docs/topology.md for the shape of `{node}`"),
                ),
            }
        }
        if !self.children_read {
            // Every reader decides about children; reaching here is a programming error.
            panic!("node `{node}` was read without deciding about its children");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_shapes() {
        assert!(is_rfc3339("2026-12-01T06:00:00Z"));
        assert!(is_rfc3339("2026-12-01T06:00:00.123+01:00"));
        assert!(!is_rfc3339("2026-13-01T06:00:00Z"));
        assert!(!is_rfc3339("2026-12-01 06:00:00Z"));
        assert!(!is_rfc3339("2026-12-01T06:00:00"));
    }

    #[test]
    fn string_base_finds_plain_strings_only() {
        let text = r#"cell a "x + 1""#;
        let span = SourceSpan::new(7.into(), 7);
        assert_eq!(string_base(text, span, "x + 1"), Some(8));
        let text = r#"cell a "x \"+ 1""#;
        assert_eq!(
            string_base(text, SourceSpan::new(7.into(), 9), "x \"+ 1"),
            None
        );
        let text = r##"cell a #"x + 1"#"##;
        assert_eq!(
            string_base(text, SourceSpan::new(7.into(), 9), "x + 1"),
            Some(9)
        );
    }
}
