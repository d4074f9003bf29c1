//! The Grid topology language (SPEC §2): KDL 2 files parsed into typed desired state,
//! validated, with miette diagnostics that point at the exact span — inside a formula
//! string too.
//!
//! This crate does no IO beyond reading the topology files it is given.
//!
//! Entry points: [`load`] (files and directories) and [`load_str`] (one text).

pub mod bacnet;
pub mod canonical;
mod decisions;
pub mod diagnostic;
pub mod endpoint;
pub mod format;
pub mod formula;
pub mod j1939;
pub mod limits;
mod matrices;
pub mod nesting;
mod parse;
pub mod serving;
pub mod storage;
pub mod topology;
mod validate;

use std::path::{Path, PathBuf};

pub use decisions::effect_owner;
pub use diagnostic::{Diagnostic, Diagnostics};
pub use topology::*;

/// What `load_with` checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Check each model's counted operations against its ceiling. `gridctl model
    /// check` turns this off to let the owner's admission report instead.
    pub admission: bool,
    /// Resolve references between objects (hosts, memberships, routes, tags). An
    /// owner that receives one object alone (a host installing a model) turns this
    /// off and checks what it needs itself.
    pub references: bool,
    /// The profiles this build runs (`grid_engine::config::PROVIDED_PROFILES`): a host
    /// selecting any other is refused on the profile's span. `None` accepts every
    /// profile the language names.
    pub provided_profiles: Option<&'static [Profile]>,
    /// The time a mission's `deadline` is compared with: a mission not yet returned
    /// whose deadline has passed can never be reserved, so it is refused. `None`
    /// (owners reading one object, the data-driven tests) compares nothing.
    pub now: Option<std::time::SystemTime>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            admission: true,
            references: true,
            provided_profiles: None,
            now: None,
        }
    }
}

/// Reads every path (a directory means every `.kdl` file in it, sorted by name),
/// parses and validates them together as one topology.
pub fn load(paths: &[PathBuf]) -> Result<Topology, Diagnostics> {
    load_with(paths, Options::default())
}

/// [`load`] with explicit [`Options`].
pub fn load_with(paths: &[PathBuf], options: Options) -> Result<Topology, Diagnostics> {
    let mut sources = Vec::new();
    let mut problems = Vec::new();
    for path in paths {
        collect(path, &mut sources, &mut problems);
    }
    if sources.is_empty() && problems.is_empty() {
        problems.push(Diagnostic::plain(
            "no topology files given",
            Some("name one or more .kdl files or directories holding them"),
        ));
    }
    if !problems.is_empty() {
        return Err(Diagnostics::new(sources, problems));
    }
    parse::topology(sources, options)
}

/// Parses and validates one topology text; `name` labels it in diagnostics.
pub fn load_str(name: &str, text: &str) -> Result<Topology, Diagnostics> {
    load_str_with(name, text, Options::default())
}

/// [`load_str`] with explicit [`Options`].
pub fn load_str_with(name: &str, text: &str, options: Options) -> Result<Topology, Diagnostics> {
    parse::topology(
        vec![Source {
            path: PathBuf::from(name),
            text: text.to_owned(),
        }],
        options,
    )
}

fn collect(path: &Path, sources: &mut Vec<Source>, problems: &mut Vec<Diagnostic>) {
    if path.is_dir() {
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => {
                problems.push(Diagnostic::plain(
                    format!("cannot read directory {}: {e}", path.display()),
                    None,
                ));
                return;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "kdl") && p.is_file())
            .collect();
        files.sort();
        if files.is_empty() {
            problems.push(Diagnostic::plain(
                format!("directory {} holds no .kdl file", path.display()),
                None,
            ));
        }
        for file in files {
            collect(&file, sources, problems);
        }
        return;
    }
    match std::fs::read_to_string(path) {
        Ok(text) => sources.push(Source {
            path: path.to_owned(),
            text,
        }),
        Err(e) => problems.push(Diagnostic::plain(
            format!("cannot read {}: {e}", path.display()),
            None,
        )),
    }
}
