//! `route` nodes: publisher, destinations, class and capacity.

use super::*;

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
}
