//! Journey files (KDL 2) → a title and a list of steps.
//!
//! The first node is `journey "TITLE"`; every following node is a step, looked up by
//! name in [`crate::steps::REGISTRY`] and read through [`Node`] (`crate::step`).

use std::path::{Path, PathBuf};

use miette::Diagnostic as _;

use crate::error::{JourneyError, ParseFailure};
use crate::step::{Node, ParseCx, ParseError, Step};
use crate::steps::REGISTRY;

/// A parsed journey.
pub struct Journey {
    pub title: String,
    pub path: PathBuf,
    pub steps: Vec<StepEntry>,
}

/// One step of a journey, with where it was written.
pub struct StepEntry {
    /// 1-based; the `journey` node is not counted.
    pub number: usize,
    pub line: usize,
    /// The step's KDL text as written in the file.
    pub text: String,
    pub step: Box<dyn Step>,
}

/// Reads and parses a journey file. Paths in it (topologies) are relative to its
/// directory.
pub fn parse_file(path: &Path) -> Result<Journey, JourneyError> {
    let source = std::fs::read_to_string(path).map_err(|source| JourneyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_str(path, &source)
}

/// Parses journey text as if read from `path`.
pub fn parse_str(path: &Path, source: &str) -> Result<Journey, JourneyError> {
    let fail = |error: ParseError| JourneyError::Parse(Box::new(locate(path, source, error)));
    if let Err(diagnostics) = grid_spec::nesting::check(&path.display().to_string(), source) {
        let first = diagnostics.iter().next();
        return Err(fail(ParseError {
            offset: first
                .and_then(|d| d.labels().and_then(|mut l| l.next()))
                .map_or(0, |l| l.offset()),
            message: first.map_or_else(|| "too deeply nested".to_owned(), |d| d.to_string()),
            help: first.and_then(|d| d.help().map(|h| h.to_string())),
        }));
    }
    let document = grid_spec::nesting::parse_v2(source).map_err(|error| {
        let first = error.diagnostics.first();
        fail(ParseError {
            offset: first.map_or(0, |d| d.span.offset()),
            message: format!(
                "KDL syntax: {}",
                first
                    .and_then(|d| d.message.clone().or_else(|| d.label.clone()))
                    .unwrap_or_else(|| "invalid document".into())
            ),
            help: first.and_then(|d| d.help.clone()),
        })
    })?;
    let journey_dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let cx = ParseCx::new(REGISTRY, &journey_dir, source);

    let mut nodes = document.nodes().iter();
    let title = match nodes.next() {
        Some(node) if node.name().value() == "journey" => {
            let mut reader = Node::new(node, &cx);
            let title = reader.argument("the journey's title").map_err(fail)?;
            reader.finish().map_err(fail)?;
            title
        }
        Some(node) => {
            return Err(fail(ParseError {
                offset: node.span().offset(),
                message: format!(
                    "a journey starts with `journey \"TITLE\"`, found `{}`",
                    node.name().value()
                ),
                help: None,
            }));
        }
        None => {
            return Err(fail(ParseError {
                offset: 0,
                message: "empty journey".into(),
                help: Some("start with `journey \"TITLE\"`, then one step per line".into()),
            }));
        }
    };

    let mut steps = Vec::new();
    for (index, node) in nodes.enumerate() {
        let step = cx.parse_step(node).map_err(fail)?;
        let offset = node.span().offset();
        steps.push(StepEntry {
            number: index + 1,
            line: line_column(source, offset).0,
            text: cx.text(node),
            step,
        });
    }
    Ok(Journey {
        title,
        path: path.to_path_buf(),
        steps,
    })
}

fn locate(path: &Path, source: &str, error: ParseError) -> ParseFailure {
    let (line, column) = line_column(source, error.offset);
    ParseFailure {
        path: path.to_path_buf(),
        line,
        column,
        message: error.message,
        help: error.help,
        source_line: source.lines().nth(line - 1).unwrap_or_default().to_string(),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Parses `source` as journey steps (without the `journey` node), each through the
/// registry except the last, which `read` reads: a step parser's result, for unit
/// tests of what it took from its node.
#[cfg(test)]
pub(crate) fn read_last<T>(
    source: &str,
    read: impl FnOnce(&mut Node<'_>) -> Result<T, ParseError>,
) -> Result<T, ParseError> {
    let document = grid_spec::nesting::parse_v2(source).expect("KDL");
    let cx = ParseCx::new(REGISTRY, Path::new("."), source);
    let (last, before) = document.nodes().split_last().expect("a node");
    for node in before {
        cx.parse_step(node)?;
    }
    let mut reader = Node::new(last, &cx);
    let value = read(&mut reader)?;
    reader.finish()?;
    Ok(value)
}
