//! `route` and `mapping` nodes: publisher, destinations, class (a route) or geometry
//! (a mapping), and what each requires of its hosts.

use super::*;

/// The `publisher H` and `destination H` children of a route or a mapping.
struct Endpoints {
    publisher: Option<(String, SourceSpan)>,
    destinations: Vec<Destination>,
    spans: Vec<(File, SourceSpan)>,
}

impl FileReader<'_> {
    pub(super) fn route(&mut self, node: &KdlNode) {
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
        let endpoints = self.endpoints(&mut n, "route");
        n.finish(self);
        let Some((name, name_span)) = name else {
            return;
        };
        let Some((membership, publisher, destinations, spans)) =
            self.endpoint_references("route", &name, name_span, membership, endpoints)
        else {
            return;
        };
        let Some(class) = class else {
            return;
        };
        self.parsed.destination_spans.push(spans);
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

    /// `mapping NAME membership=M format="grdx" rows=R cols=C { publisher H;
    /// destination H … }` (docs/grdx.md).
    pub(super) fn mapping(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "mapping");
        let membership = n.string_prop(self, "membership", true);
        let format = n
            .string_prop(self, "format", true)
            .and_then(|(format, span)| match format.as_str() {
                "grdx" => Some(MatrixFormat::Grdx),
                other => {
                    self.error(
                        span,
                        format!(
                            "unknown matrix format `{}`",
                            crate::diagnostic::quoted(other)
                        ),
                        "not a format",
                        "a mapping carries GRDX dense matrices: format=\"grdx\"",
                    );
                    None
                }
            });
        let geometry = self.geometry(&mut n);
        let retired = n.bool_prop(self, "retired").unwrap_or(false);
        let endpoints = self.endpoints(&mut n, "mapping");
        n.finish(self);
        let Some((name, name_span)) = name else {
            return;
        };
        let Some((membership, publisher, destinations, _)) =
            self.endpoint_references("mapping", &name, name_span, membership, endpoints)
        else {
            return;
        };
        let (Some(format), Some((rows, cols))) = (format, geometry) else {
            return;
        };
        let origin = self.origin(name_span);
        self.parsed.topology.mappings.push(Mapping {
            name,
            membership,
            format,
            rows,
            cols,
            publisher,
            destinations,
            retired,
            origin,
        });
    }

    /// `rows=R cols=C` of a mapping or a matrix: each at least 1, their product at most
    /// `GRDX_CELLS_MAX`.
    pub(super) fn geometry(&mut self, n: &mut NodeReader) -> Option<(u32, u32)> {
        let cells = limits::GRDX_CELLS_MAX as i128;
        let rows = n.int_prop(self, "rows", true, 1, cells);
        let cols = n.int_prop(self, "cols", true, 1, cells);
        let ((rows, rows_span), (cols, _)) = (rows?, cols?);
        if rows * cols > cells {
            self.error(
                rows_span,
                format!(
                    "{rows} × {cols} is {} cells, above GRDX_CELLS_MAX ({})",
                    rows * cols,
                    limits::GRDX_CELLS_MAX
                ),
                "too many cells",
                "a matrix holds at most GRDX_CELLS_MAX cells; split the table over several mappings",
            );
            return None;
        }
        Some((rows as u32, cols as u32))
    }

    /// Reads the `publisher` and `destination` children of a `kind` node.
    fn endpoints(&mut self, n: &mut NodeReader, kind: &str) -> Endpoints {
        let mut publisher: Option<(String, SourceSpan)> = None;
        let mut destinations: Vec<Destination> = Vec::new();
        let mut spans = Vec::new();
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            match child.name().value() {
                "publisher" => {
                    if let Some((host, span)) = c.string_arg(self, 0, "host") {
                        if let Some((_, first)) = &publisher {
                            let d = Diagnostic::at(
                                &self.file,
                                span,
                                format!("a {kind} has exactly one publisher"),
                                "second publisher",
                            )
                            .with_label(*first, "first publisher")
                            .with_help(format!("declare a second {kind} for a second publisher"));
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
                            let (_, first) = spans[i];
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
                            spans.push((self.file.clone(), span));
                        }
                    }
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of {kind}"),
                        &format!("not part of a {kind}"),
                        &format!("a {kind} holds one `publisher H` and `destination H` lines"),
                    )
                }
            }
            c.no_children(self);
            c.finish(self);
        }
        Endpoints {
            publisher,
            destinations,
            spans,
        }
    }

    /// Checks the endpoints of `kind` `name` (a publisher, at most
    /// `ROUTE_DESTINATIONS_MAX` destinations, none its own publisher) and records what
    /// they require: the publisher publishes in the membership, each destination is a
    /// member. Answers the membership, publisher and destinations (with their spans)
    /// when both the membership and a publisher are given.
    #[allow(clippy::type_complexity)]
    fn endpoint_references(
        &mut self,
        kind: &str,
        name: &str,
        name_span: SourceSpan,
        membership: Option<(String, SourceSpan)>,
        endpoints: Endpoints,
    ) -> Option<(String, String, Vec<Destination>, Vec<(File, SourceSpan)>)> {
        let Endpoints {
            publisher,
            destinations,
            spans,
        } = endpoints;
        if publisher.is_none() {
            self.error(
                name_span,
                format!("{kind} `{name}` has no publisher"),
                "needs `publisher H`",
                "add a `publisher HOST` child",
            );
        }
        let limit = crate::limits::ROUTE_DESTINATIONS_MAX;
        if destinations.len() > limit {
            let (_, span) = spans[limit];
            self.error(
                span,
                format!(
                    "{kind} `{name}` has {} destinations, above ROUTE_DESTINATIONS_MAX ({limit})",
                    destinations.len()
                ),
                "destination 1,025 and later",
                &format!("split the destinations over several {kind}s"),
            );
        }
        let ((membership, m_span), (publisher, p_span)) = (membership?, publisher?);
        self.parsed.references.push(Reference {
            kind: RefKind::Membership,
            name: membership.clone(),
            file: self.file.clone(),
            span: m_span,
            context: format!("{kind} `{name}`"),
            require: None,
        });
        self.parsed.references.push(Reference {
            kind: RefKind::Host,
            name: publisher.clone(),
            file: self.file.clone(),
            span: p_span,
            context: format!("{kind} `{name}` publisher"),
            require: Some(Requirement::Publishes(membership.clone())),
        });
        for (destination, (file, span)) in destinations.iter().zip(&spans) {
            if destination.host == publisher {
                let d = Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "`{publisher}` publishes {kind} `{name}` and cannot also be its destination"
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
                context: format!("{kind} `{name}` destination"),
                require: Some(Requirement::MemberOf(membership.clone())),
            });
        }
        Some((membership, publisher, destinations, spans))
    }
}
