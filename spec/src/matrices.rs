//! Matrices in models and the mappings that carry them (issue 34, docs/grdx.md): a
//! matrix is read only one value at a time (`m[row, col]`), takes its values only from
//! a mapping of its own geometry, and never meets a scalar route.
//!
//! Invariants, stated as absences: no formula reads a matrix as a scalar, indexes a
//! scalar, or ranges over a matrix; no scalar model reads a matrix; no matrix comes
//! from a mapping of another geometry or of a membership its model does not serve; no
//! matrix is an output; no input or matrix confuses a route with a mapping.

use crate::diagnostic::Diagnostic;
use crate::formula::ExprKind;
use crate::parse::Parsed;
use crate::topology::{Item, Model};

/// The help of a reference to a route that is a mapping.
pub(crate) const NOT_A_ROUTE_HELP: &str = "this is a mapping, which carries a matrix, not scalar values: a model reads it with `matrix NAME rows=R cols=C from=\"mapping:M\"`, and matrices are published with `gridctl publish-matrix`";

pub(crate) fn check(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    for (index, model) in parsed.topology.models.iter().enumerate() {
        if !parsed.incomplete_models.contains(&index) {
            formulas(parsed, index, model, problems);
            outputs(parsed, index, model, problems);
        }
    }
    sources(parsed, problems);
    names(parsed, problems);
}

/// A mapping and a route never share a name: a host keeps both in one table of the
/// values it carries.
fn names(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    let topology = &parsed.topology;
    for mapping in &topology.mappings {
        if !topology.routes.iter().any(|r| r.name == mapping.name) {
            continue;
        }
        let Some(source) = topology.sources.get(mapping.origin.source) else {
            continue;
        };
        let file = std::sync::Arc::new(
            miette::NamedSource::new(source.path.display().to_string(), source.text.clone())
                .with_language("kdl"),
        );
        problems.push(
            Diagnostic::at(
                &file,
                miette::SourceSpan::new(mapping.origin.offset.into(), mapping.origin.length),
                format!(
                    "mapping `{}` has the name of a route: a host carries both in one table",
                    mapping.name
                ),
                "a route's name",
            )
            .with_help("name the mapping differently (for example `…-table`)"),
        );
    }
}

fn matrix<'a>(model: &'a Model, name: &str) -> Option<&'a crate::topology::MatrixItem> {
    model.matrices().find(|m| m.name == name)
}

/// What each cell's formula does with the model's matrices.
fn formulas(parsed: &Parsed, index: usize, model: &Model, problems: &mut Vec<Diagnostic>) {
    for (item_index, item) in model.items.iter().enumerate() {
        let Item::Cell(cell) = item else { continue };
        let site = &parsed.formulas[&(index, item_index)];
        let mut problem = |span, message: String, label: &str, help: String| {
            problems
                .push(Diagnostic::at(&site.file, site.span(span), message, label).with_help(help));
        };
        cell.expr.walk(&mut |expr| match &expr.kind {
            ExprKind::Name(name) => {
                if let Some(m) = matrix(model, name) {
                    problem(
                        &expr.span,
                        format!(
                            "cell `{}` reads matrix `{name}` as one number",
                            cell.name
                        ),
                        "a matrix",
                        format!(
                            "read one value of it as {name}[row, col], row below {} and column below {}, both from 0",
                            m.rows, m.cols
                        ),
                    );
                }
            }
            ExprKind::Range { first, last } => {
                let position = |n: &str| model.items.iter().position(|i| i.name() == n);
                if let (Some(a), Some(b)) = (position(&first.name), position(&last.name))
                    && let Some(inside) = model.items.get(a..=b).and_then(|covered| {
                        covered.iter().find(|i| matches!(i, Item::Matrix(_)))
                    })
                {
                    problem(
                        &expr.span,
                        format!(
                            "range `{}:{}` of cell `{}` covers matrix `{}`",
                            first.name,
                            last.name,
                            cell.name,
                            inside.name()
                        ),
                        "covers a matrix",
                        "a range folds inputs and cells; declare the matrix outside it, or name its values one by one as m[row, col]".to_owned(),
                    );
                }
            }
            ExprKind::Index { matrix: name, .. } => {
                let target = model.item(&name.name);
                if model.scalar {
                    problem(
                        &expr.span,
                        format!(
                            "scalar model `{}` reads no matrix; cell `{}` reads `{}[…]`",
                            model.name, cell.name, name.name
                        ),
                        "matrix read in a scalar model",
                        "a scalar model admits arithmetic and comparisons only; drop scalar=#true".to_owned(),
                    );
                }
                match target {
                    Some(Item::Matrix(_)) => {}
                    Some(other) => problem(
                        &name.span,
                        format!(
                            "cell `{}` indexes `{}`, which is {}, not a matrix",
                            cell.name,
                            name.name,
                            match other {
                                Item::Input(_) => "an input",
                                _ => "a cell",
                            }
                        ),
                        "not a matrix",
                        format!("write `{}` without [row, col], or declare `matrix {} rows=R cols=C from=\"mapping:M\"`", name.name, name.name),
                    ),
                    None => problem(
                        &name.span,
                        format!(
                            "cell `{}` reads matrix `{}`, which model `{}` does not declare",
                            cell.name, name.name, model.name
                        ),
                        "unknown matrix",
                        format!(
                            "declare `matrix {} rows=R cols=C from=\"mapping:M\"` in model `{}`",
                            name.name, model.name
                        ),
                    ),
                }
            }
            _ => {}
        });
    }
}

/// A matrix is never published on a (scalar) route.
fn outputs(parsed: &Parsed, index: usize, model: &Model, problems: &mut Vec<Diagnostic>) {
    for (output_index, output) in model.outputs.iter().enumerate() {
        if matrix(model, &output.cell).is_none() {
            continue;
        }
        let (file, span) = &parsed.output_spans[&(index, output_index)];
        problems.push(
            Diagnostic::at(
                file,
                *span,
                format!(
                    "output `{}` of model `{}` is a matrix; route `{}` carries scalar values",
                    output.cell, model.name, output.route
                ),
                "a matrix on a scalar route",
            )
            .with_help("publish a cell that reads one value of it (m[row, col]), or publish the table itself on a mapping with `gridctl publish-matrix`"),
        );
    }
}

/// Each matrix's mapping has its geometry and a membership its model serves.
fn sources(parsed: &Parsed, problems: &mut Vec<Diagnostic>) {
    let topology = &parsed.topology;
    for (model_index, item_index, file, span) in &parsed.matrix_sources {
        let Some(model) = topology.models.get(*model_index) else {
            continue;
        };
        let Some(Item::Matrix(m)) = model.items.get(*item_index) else {
            continue;
        };
        let Some(mapping) = topology.mappings.iter().find(|p| p.name == m.mapping) else {
            continue; // an undeclared mapping is reported as a reference
        };
        if (mapping.rows, mapping.cols) != (m.rows, m.cols) {
            problems.push(
                Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "matrix `{}` of model `{}` is {} × {}, mapping `{}` carries {} × {}",
                        m.name, model.name, m.rows, m.cols, mapping.name, mapping.rows, mapping.cols
                    ),
                    "another geometry",
                )
                .with_help("a matrix takes values of its own geometry only: make rows= and cols= the mapping's"),
            );
        }
        let Some(host) = topology.host(&model.host) else {
            continue;
        };
        // A host outside the mapping's membership is reported with the mapping.
        if host.memberships.contains(&mapping.membership)
            && !crate::serving::served(model, &host.memberships).contains(&mapping.membership)
        {
            problems.push(
                Diagnostic::at(
                    file,
                    *span,
                    format!(
                        "matrix `{}` of model `{}` reads mapping `{}` of membership `{}`, which the model does not serve",
                        m.name, model.name, mapping.name, mapping.membership
                    ),
                    "another membership",
                )
                .with_help(format!(
                    "add `serve {}` to model `{}`",
                    mapping.membership, model.name
                )),
            );
        }
    }
}
