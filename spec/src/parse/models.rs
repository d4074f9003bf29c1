//! `model` nodes: inputs (with their sources), cells and their formulas, outputs.

use super::*;

impl FileReader<'_> {
    pub(super) fn model(&mut self, node: &KdlNode) {
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
        let mut serves: Vec<String> = Vec::new();
        let mut item_spans: HashMap<String, SourceSpan> = HashMap::new();
        // Recorded once the model itself is (a model that fails to read has no index).
        let mut matrix_sources = Vec::new();
        let mut operations: u64 = 0;
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            match child.name().value() {
                kind @ ("input" | "cell" | "matrix") => {
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
                        .with_help("inputs, cells and matrices of one model share one namespace");
                        self.problems.push(d);
                    } else {
                        item_spans.insert(item_name.clone(), span);
                    }
                    let item_index = items.len();
                    self.parsed
                        .item_names
                        .insert((model_index, item_index), (self.file.clone(), span));
                    if kind == "matrix" {
                        let geometry = self.geometry(&mut c);
                        let from = self.matrix_source(&mut c, name.as_ref(), host.as_ref());
                        let (apply, version) = self.matrix_policy(&mut c);
                        if let (Some((rows, cols)), Some((mapping, span)), Some(apply)) =
                            (geometry, from, apply)
                        {
                            matrix_sources.push((model_index, item_index, self.file.clone(), span));
                            items.push(Item::Matrix(MatrixItem {
                                name: item_name,
                                rows,
                                cols,
                                mapping,
                                apply,
                                version,
                            }));
                        }
                    } else if kind == "input" {
                        let default = c.float_prop(self, "default");
                        let from = c.string_prop(self, "from", false).and_then(|(from, span)| {
                            let source = self.input_source(
                                &from,
                                span,
                                name.as_ref().map(|n| n.0.as_str()),
                                host.as_ref().map(|h| h.0.as_str()),
                            );
                            if let Some(InputSource::Route(route)) = &source {
                                let at = (model_index, route.clone(), self.file.clone(), span);
                                self.parsed.model_routes.push(at);
                            }
                            source
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
                        self.parsed.model_routes.push((
                            model_index,
                            route.clone(),
                            self.file.clone(),
                            route_span,
                        ));
                        outputs.push(Output { cell, route });
                    }
                }
                "serve" => {
                    let context = name
                        .as_ref()
                        .map(|(model, _)| format!("model `{model}` serve"));
                    let at = serves.len();
                    if let Some(span) =
                        self.membership_once(&mut c, &mut serves, ("serve", context))
                    {
                        self.parsed
                            .serve_spans
                            .insert((model_index, at), (self.file.clone(), span));
                    }
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of model"),
                        "not part of a model",
                        "a model holds `input NAME`, `cell NAME \"FORMULA\"`, `matrix NAME rows=R cols=C from=\"mapping:M\"`, `output CELL route=R` and `serve M`",
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
        self.parsed.matrix_sources.extend(matrix_sources);
        let origin = self.origin(name_span);
        self.parsed.topology.models.push(Model {
            name,
            host,
            declared_ceiling: ceiling,
            scalar,
            retired,
            items,
            outputs,
            serves,
            operations,
            origin,
        });
    }

    /// A `member M` or `serve M` line (`what`): M added to `list` once (a repeat
    /// refused), and referenced as a membership in `context` (none: the owner's name did
    /// not read). Answers M's span when it was added.
    pub(super) fn membership_once(
        &mut self,
        c: &mut NodeReader<'_>,
        list: &mut Vec<String>,
        (what, context): (&str, Option<String>),
    ) -> Option<SourceSpan> {
        let (membership, span) = c.string_arg(self, 0, "membership")?;
        if list.contains(&membership) {
            self.error(
                span,
                format!("`{what} {membership}` is given twice"),
                "repeated",
                "name each membership once",
            );
            return None;
        }
        if let Some(context) = context {
            self.parsed.references.push(Reference {
                kind: RefKind::Membership,
                name: membership.clone(),
                file: self.file.clone(),
                span,
                context,
                require: None,
            });
        }
        list.push(membership);
        Some(span)
    }

    /// `apply=` and `version=` of a matrix: a pinned version is applied explicitly (by
    /// the plan), so `apply="on-receipt"` with `version=` is refused.
    fn matrix_policy(&mut self, c: &mut NodeReader) -> (Option<MatrixApply>, Option<u64>) {
        let apply = match c.string_prop(self, "apply", false) {
            None => Some(MatrixApply::Explicit),
            Some((text, span)) => match text.as_str() {
                "explicit" => Some(MatrixApply::Explicit),
                "on-receipt" => Some(MatrixApply::OnReceipt),
                other => {
                    self.error(
                        span,
                        format!(
                            "unknown apply policy `{}`",
                            crate::diagnostic::quoted(other)
                        ),
                        "not a policy",
                        "apply is \"explicit\" (the default) or \"on-receipt\"",
                    );
                    None
                }
            },
        };
        let version = c.int_prop(self, "version", false, 1, i128::from(u64::MAX));
        if let (Some(MatrixApply::OnReceipt), Some((_, span))) = (apply, version) {
            self.error(
                span,
                "a matrix applied on receipt takes each newest version; it pins none",
                "a pinned version",
                "pin a version with the default apply=\"explicit\", or drop version=",
            );
            return (None, None);
        }
        (apply, version.map(|(v, _)| v as u64))
    }

    /// The `from="mapping:M"` of a matrix: M and the span of the entry, M referenced
    /// as a mapping that delivers to the model's host.
    fn matrix_source(
        &mut self,
        c: &mut NodeReader,
        model: Option<&(String, SourceSpan)>,
        host: Option<&(String, SourceSpan)>,
    ) -> Option<(String, SourceSpan)> {
        let (from, span) = c.string_prop(self, "from", true)?;
        let mapping = match from.split_once(':') {
            Some(("mapping", m)) if !m.is_empty() => m.to_owned(),
            Some(("route" | "tag", _)) => {
                self.error(
                    span,
                    format!(
                        "a matrix is not fed from `{}`: routes and tags carry scalars",
                        crate::diagnostic::quoted(&from)
                    ),
                    "a scalar source",
                    "a matrix comes from a mapping: from=\"mapping:M\" (docs/grdx.md)",
                );
                return None;
            }
            _ => {
                self.error(
                    span,
                    format!(
                        "`{}` is not a matrix source",
                        crate::diagnostic::quoted(&from)
                    ),
                    "expected mapping:NAME",
                    "a matrix comes from a mapping: from=\"mapping:M\"",
                );
                return None;
            }
        };
        if let (Some((model, _)), Some((host, _))) = (model, host) {
            self.parsed.references.push(Reference {
                kind: RefKind::Mapping,
                name: mapping.clone(),
                file: self.file.clone(),
                span,
                context: format!("model `{model}` matrix"),
                require: Some(Requirement::MapsTo(host.clone())),
            });
        }
        Some((mapping, span))
    }

    pub(super) fn input_source(
        &mut self,
        from: &str,
        span: SourceSpan,
        model: Option<&str>,
        host: Option<&str>,
    ) -> Option<InputSource> {
        let (kind, target) = match from.split_once(':') {
            Some(("tag", t)) if !t.is_empty() => (RefKind::Tag, t),
            Some(("route", r)) if !r.is_empty() => (RefKind::Route, r),
            Some(("mapping", m)) if !m.is_empty() => {
                self.error(
                    span,
                    format!("an input takes one number; mapping `{}` carries a matrix", crate::diagnostic::quoted(m)),
                    "a matrix source",
                    &format!("declare `matrix NAME rows=R cols=C from=\"mapping:{m}\"` and read it as NAME[row, col]"),
                );
                return None;
            }
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
}
