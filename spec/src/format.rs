//! `gridctl fmt`: a topology file's text in canonical layout, as `terraform fmt` does
//! for HCL: each line indented four spaces per enclosing `{` block (continuation
//! lines after `\\` two levels more), runs of spaces and tabs between tokens made one,
//! one space before `{` and before a trailing `//` comment, no trailing whitespace, no
//! leading blank lines, one newline at the end.
//!
//! Only whitespace between tokens changes: never a node, an entry, a value, a string's
//! text or a comment — the layout is made by a lexical scan that copies strings and
//! comments byte for byte (the one [`crate::nesting`] checks nesting with), and the
//! result is checked to parse to the same document before it is returned. A text that
//! is not KDL 2 is refused with the diagnostics `check` gives.

use std::path::PathBuf;
use std::sync::Arc;

use miette::NamedSource;

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::nesting::{block_comment, line_end, quoted, raw};
use crate::topology::Source;

/// Spaces per block level.
const INDENT: usize = 4;

/// `text` (labelled `name` in diagnostics) in canonical layout.
pub fn canonical(name: &str, text: &str) -> Result<String, Diagnostics> {
    let file = Arc::new(NamedSource::new(name, text.to_owned()).with_language("kdl"));
    let refuse = |items| {
        Diagnostics::new(
            vec![Source {
                path: PathBuf::from(name),
                text: text.to_owned(),
            }],
            items,
        )
    };
    if let Some(deep) = crate::nesting::problem(&file, text) {
        return Err(refuse(vec![deep]));
    }
    let mut before = crate::nesting::parse_v2(text)
        .map_err(|error| refuse(crate::parse::syntax_problems(&file, text, error)))?;
    let formatted = layout(text);
    // The layout is whitespace only; a document that reads differently afterwards is
    // a bug here, and nothing is rewritten.
    let same = crate::nesting::parse_v2(&formatted).is_ok_and(|mut after| {
        before.clear_format_recursive();
        after.clear_format_recursive();
        before == after
    });
    if !same {
        return Err(refuse(vec![Diagnostic::plain(
            format!("{name}: its canonical layout would read differently; nothing was rewritten"),
            Some("please report this file: fmt changes only whitespace"),
        )]));
    }
    Ok(formatted)
}

/// The lines of `text` laid out canonically (see the module's documentation).
fn layout(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    // Block depth where the current line began, and now.
    let mut depth = 0usize;
    let mut line_depth = 0usize;
    // The line before ended in `\` (a node continued on this one).
    let mut continued = false;
    let mut space = false;
    let mut i = 0usize;
    let mut finish = |line: &mut Vec<u8>, line_depth: usize, continued: bool| {
        while line.last().is_some_and(|b| *b == b' ' || *b == b'\t') {
            line.pop();
        }
        let closes = line.first() == Some(&b'}');
        let level = line_depth.saturating_sub(usize::from(closes)) + if continued { 2 } else { 0 };
        let mut out = Vec::new();
        if !line.is_empty() {
            out.resize(level * INDENT, b' ');
        }
        out.append(line);
        lines.push(out);
    };
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        match b {
            b'\n' | b'\r' => {
                let ends_continued = line.ends_with(b"\\");
                finish(&mut line, line_depth, continued);
                continued = ends_continued;
                line_depth = depth;
                space = false;
                i += if b == b'\r' && next == Some(b'\n') {
                    2
                } else {
                    1
                };
                continue;
            }
            b' ' | b'\t' => {
                space = !line.is_empty();
                i += 1;
                continue;
            }
            _ => {}
        }
        let spaced = space || (b == b'{' || (b == b'/' && next == Some(b'/')));
        if spaced && !line.is_empty() && line.last() != Some(&b' ') {
            line.push(b' ');
        }
        space = false;
        let end = match b {
            b'{' => {
                depth += 1;
                i + 1
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                i + 1
            }
            // To the end of the line, its newline left for the loop.
            b'/' if next == Some(b'/') => {
                let end = line_end(bytes, i + 2);
                if bytes[..end].ends_with(b"\r\n") {
                    end - 2
                } else if bytes[..end].ends_with(b"\n") || bytes[..end].ends_with(b"\r") {
                    end - 1
                } else {
                    end
                }
            }
            b'/' if next == Some(b'*') => block_comment(bytes, i).unwrap_or(bytes.len()),
            b'"' => quoted(bytes, i),
            b'#' => {
                let hashes = bytes[i..].iter().take_while(|&&h| h == b'#').count();
                if bytes.get(i + hashes) == Some(&b'"') {
                    raw(bytes, i + hashes, hashes)
                } else {
                    i + hashes
                }
            }
            _ => i + 1,
        };
        line.extend_from_slice(&bytes[i..end]);
        i = end;
    }
    finish(&mut line, line_depth, continued);
    let first = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let last = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(0, |n| n + 1);
    let mut out = Vec::new();
    for l in lines.get(first..last).unwrap_or(&[]) {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    // Only ASCII whitespace was inserted or removed, between whole characters.
    String::from_utf8(out).expect("layout keeps UTF-8")
}

#[cfg(test)]
mod tests {
    use super::canonical;

    /// The same nodes, entries and values, ignoring layout.
    fn same_content(a: &str, b: &str) -> bool {
        let mut a = kdl::KdlDocument::parse_v2(a).unwrap();
        let mut b = kdl::KdlDocument::parse_v2(b).unwrap();
        a.clear_format_recursive();
        b.clear_format_recursive();
        a == b
    }

    #[test]
    fn layout_changes_and_nothing_else() {
        let text = "grid   version=1\n// the plant\nhost edge-a    listen=\"127.0.0.1:7401\"{\n  member plant   // why\n        profiles transport   authority\n}\nmodel m host=edge-a {\ninput a default=1.5\n    cell b \"a * 2\"\n}";
        let formatted = canonical("t.kdl", text).unwrap();
        assert_eq!(
            formatted,
            "grid version=1\n// the plant\nhost edge-a listen=\"127.0.0.1:7401\" {\n    member plant // why\n    profiles transport authority\n}\nmodel m host=edge-a {\n    input a default=1.5\n    cell b \"a * 2\"\n}\n"
        );
        assert!(same_content(text, &formatted));
        // Idempotent: a formatted file is its own canonical form.
        assert_eq!(canonical("t.kdl", &formatted).unwrap(), formatted);
    }

    #[test]
    fn a_text_that_is_not_kdl_is_refused_with_diagnostics() {
        let error = canonical("bad.kdl", "host \"a\n").unwrap_err();
        assert!(!error.is_empty());
        assert!(
            error.items[0].message.starts_with("KDL syntax"),
            "{:?}",
            error.items
        );
    }

    #[test]
    fn every_topology_in_the_repository_keeps_its_content() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut checked = 0;
        for dir in ["examples", "journeys/topologies", "spec/tests/data/valid"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_none_or(|e| e != "kdl") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let formatted = canonical("t.kdl", &text).unwrap();
                assert!(same_content(&text, &formatted), "{}", path.display());
                assert_eq!(
                    canonical("t.kdl", &formatted).unwrap(),
                    formatted,
                    "{} is not idempotent",
                    path.display()
                );
                checked += 1;
            }
        }
        assert!(checked > 10, "found only {checked} topology files");
    }
}
