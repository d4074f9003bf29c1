//! `gridctl check [--json]`: the text form is `model::check`'s; `--json` gives the
//! result as data, diagnostics included.

use std::path::PathBuf;
use std::process::ExitCode;

use grid_spec::{Diagnostic, Options};
use serde::Serialize;

use crate::common::with_provided_profiles;
use crate::report::{Report, emit};

/// `gridctl check FILES [--json]`: exit 0 valid, 1 on any error.
pub fn check(files: &[PathBuf], json: bool) -> anyhow::Result<ExitCode> {
    if !json {
        return crate::model::check(files);
    }
    match grid_spec::load_with(files, with_provided_profiles(Options::default())) {
        Ok(t) => {
            let valid = Valid {
                ok: true,
                hosts: t.hosts.len(),
                memberships: t.memberships.len(),
                models: t.models.len(),
                routes: t.routes.len(),
                grants: t.grants.len(),
                missions: t.missions.len(),
                tags: t.tags.len(),
                exports: t.exports.len(),
                ledgers: t.ledgers.len(),
                mappings: t.mappings.len(),
                decisions: t.decisions.len(),
            };
            emit(&valid, true);
            Ok(ExitCode::SUCCESS)
        }
        Err(diagnostics) => {
            let invalid = Invalid {
                ok: false,
                diagnostics: diagnostics.iter().map(Item::of).collect(),
            };
            emit(&invalid, true);
            Ok(ExitCode::FAILURE)
        }
    }
}

#[derive(Serialize)]
struct Valid {
    ok: bool,
    hosts: usize,
    memberships: usize,
    models: usize,
    routes: usize,
    grants: usize,
    missions: usize,
    tags: usize,
    exports: usize,
    ledgers: usize,
    mappings: usize,
    decisions: usize,
}

#[derive(Serialize)]
struct Invalid {
    ok: bool,
    diagnostics: Vec<Item>,
}

/// One diagnostic as data. `line` and `column` count from 1 (`column` in characters);
/// `file`, `span`, `line` and `column` are null for a problem in no file.
#[derive(Serialize)]
struct Item {
    file: Option<String>,
    span: Option<Span>,
    line: Option<usize>,
    column: Option<usize>,
    message: String,
    help: Option<String>,
    /// The named limit exceeded (`NESTING_DEPTH_MAX`, …), else null.
    limit: Option<&'static str>,
}

#[derive(Serialize)]
struct Span {
    offset: usize,
    length: usize,
}

impl Item {
    fn of(d: &Diagnostic) -> Item {
        let primary = d.labels.first();
        let place = d.source.as_ref().zip(primary).map(|(file, label)| {
            let text = file.inner();
            let before = text.get(..label.offset()).unwrap_or(text);
            let line_start = before.rfind('\n').map_or(0, |n| n + 1);
            (
                file.name().to_owned(),
                before.matches('\n').count() + 1,
                before[line_start..].chars().count() + 1,
            )
        });
        Item {
            file: d.source.as_ref().map(|f| f.name().to_owned()),
            span: primary.map(|l| Span {
                offset: l.offset(),
                length: l.len(),
            }),
            line: place.as_ref().map(|p| p.1),
            column: place.as_ref().map(|p| p.2),
            message: d.message.clone(),
            help: d.help.clone(),
            limit: d.limit(),
        }
    }
}

impl Report for Valid {
    fn text(&self) -> String {
        String::new()
    }
}

impl Report for Invalid {
    fn text(&self) -> String {
        String::new()
    }
}
