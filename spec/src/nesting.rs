//! Bounds what the KDL parser recurses on, before it recurses.
//!
//! The `kdl` crate's parser is recursive descent: every `{` block, every nested
//! `/* */` comment, and (while it recovers from errors) every bad token costs stack.
//! A 10 KB file of 2,000 nested `a {` aborted gridctl with a stack overflow, which no
//! `Result` can catch. Two guards close this:
//!
//! - [`check`] scans the text as KDL's lexer would (quoted, raw and multi-line strings,
//!   `//` and nested `/* */` comments) and refuses, with a diagnostic at the first `{`
//!   or `/*` beyond it, nesting deeper than [`NESTING_DEPTH_MAX`]. A `{` inside a
//!   string or a comment does not count, so no valid shallow file is refused.
//! - [`parse_v2`] runs the parser on a thread of its own whose stack grows with the
//!   text ([`KDL_PARSE_STACK_BYTES_PER_INPUT_BYTE`]), so the recursion that remains —
//!   one frame per bad token while the parser recovers — always fits.
//!
//! Every reader of KDL text in Grid (topologies, journeys, saved plans) calls both.

use std::path::PathBuf;
use std::sync::Arc;

use kdl::{KdlDocument, KdlError};
use miette::NamedSource;

use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::limits::{
    KDL_PARSE_STACK_BYTES_BASE, KDL_PARSE_STACK_BYTES_MAX, KDL_PARSE_STACK_BYTES_PER_INPUT_BYTE,
    NESTING_DEPTH_MAX,
};
use crate::topology::Source;

/// Refuses `text` (labelled `name` in the diagnostic) when its `{` blocks or its
/// `/* */` comments nest deeper than [`NESTING_DEPTH_MAX`]; the diagnostic points at
/// the first opening beyond the limit.
pub fn check(name: &str, text: &str) -> Result<(), Diagnostics> {
    let file = Arc::new(NamedSource::new(name, text.to_owned()).with_language("kdl"));
    match problem(&file, text) {
        None => Ok(()),
        Some(diagnostic) => Err(Diagnostics::new(
            vec![Source {
                path: PathBuf::from(name),
                text: text.to_owned(),
            }],
            vec![diagnostic],
        )),
    }
}

/// [`check`]'s diagnostic in `file` (whose text is `text`), if there is one.
pub(crate) fn problem(file: &Arc<NamedSource<String>>, text: &str) -> Option<Diagnostic> {
    let Beyond { offset, what } = deepest(text)?;
    let (noun, length) = match what {
        Opening::Block => ("`{` blocks", 1),
        Opening::Comment => ("`/* */` comments", 2),
        Opening::Slashdash => ("`/-` slashdashes in a row", 2),
    };
    let diagnostic = Diagnostic::at(
        file,
        (offset, length),
        format!("{noun} nest deeper than NESTING_DEPTH_MAX ({NESTING_DEPTH_MAX})"),
        format!("level {} opens here", NESTING_DEPTH_MAX + 1),
    )
    .with_help(
        "Grid's files nest a few levels (a model's cells, a host's settings); \
         close the blocks above this one",
    );
    Some(diagnostic)
}

/// `KdlDocument::parse_v2(text)` on a thread whose stack is sized for `text`, so the
/// parser's recursion cannot overflow it. Call [`check`] first: it bounds the nesting,
/// which costs far more stack per byte than anything else.
pub fn parse_v2(text: &str) -> Result<KdlDocument, KdlError> {
    let stack = text
        .len()
        .saturating_mul(KDL_PARSE_STACK_BYTES_PER_INPUT_BYTE)
        .saturating_add(KDL_PARSE_STACK_BYTES_BASE)
        .min(KDL_PARSE_STACK_BYTES_MAX);
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("kdl-parse".to_owned())
            .stack_size(stack)
            .spawn_scoped(scope, || KdlDocument::parse_v2(text));
        match parser {
            Ok(parser) => parser
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            // No thread to be had (the address space is exhausted): parse here.
            Err(_) => KdlDocument::parse_v2(text),
        }
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    Block,
    Comment,
    /// `/-` after `/-`: the parser recurses on each like on a block.
    Slashdash,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Beyond {
    offset: usize,
    what: Opening,
}

/// The length in bytes of the KDL 2 newline at `i`, if one starts there (a `//`
/// comment and a single-line string end at one).
pub(crate) fn newline_at(bytes: &[u8], i: usize) -> Option<usize> {
    match bytes.get(i..)? {
        [b'\n' | b'\r' | 0x0B | 0x0C, ..] => Some(1),
        [0xC2, 0x85, ..] => Some(2),
        [0xE2, 0x80, 0xA8 | 0xA9, ..] => Some(3),
        _ => None,
    }
}

/// The first `{`, `/*` or `/-` that opens a level beyond [`NESTING_DEPTH_MAX`], if
/// any. `/-` slashdashes in a row (only whitespace and comments between) count as
/// levels too.
fn deepest(text: &str) -> Option<Beyond> {
    let bytes = text.as_bytes();
    let at = |i: usize| bytes.get(i).copied();
    let mut depth = 0usize;
    let mut slashdashes = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if at(i + 1) == Some(b'-') => {
                slashdashes += 1;
                if slashdashes > NESTING_DEPTH_MAX {
                    return Some(Beyond {
                        offset: i,
                        what: Opening::Slashdash,
                    });
                }
                i += 2;
                continue;
            }
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            _ => {}
        }
        if !(bytes[i] == b'/' && matches!(at(i + 1), Some(b'/' | b'*'))) {
            slashdashes = 0;
        }
        match bytes[i] {
            b'{' => {
                depth += 1;
                if depth > NESTING_DEPTH_MAX {
                    return Some(Beyond {
                        offset: i,
                        what: Opening::Block,
                    });
                }
                i += 1;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'/' if at(i + 1) == Some(b'/') => i = line_end(bytes, i + 2),
            b'/' if at(i + 1) == Some(b'*') => match block_comment(bytes, i) {
                Ok(end) => i = end,
                Err(beyond) => return Some(beyond),
            },
            b'"' => i = quoted(bytes, i),
            b'#' => {
                let hashes = bytes[i..].iter().take_while(|&&b| b == b'#').count();
                if at(i + hashes) == Some(b'"') {
                    i = raw(bytes, i + hashes, hashes);
                } else {
                    // A keyword (`#true`, `#null`, `#inf`, …).
                    i += hashes;
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// The offset just past the newline that ends a `//` comment started before `from`.
pub(crate) fn line_end(bytes: &[u8], from: usize) -> usize {
    (from..bytes.len())
        .find_map(|i| newline_at(bytes, i).map(|n| i + n))
        .unwrap_or(bytes.len())
}

/// The offset just past the `*/` closing the comment opened at `start`, or the first
/// `/*` nested beyond the limit. An unclosed comment runs to the end of the text.
pub(crate) fn block_comment(bytes: &[u8], start: usize) -> Result<usize, Beyond> {
    let mut depth = 0usize;
    let mut i = start;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'/', Some(b'*')) => {
                depth += 1;
                if depth > NESTING_DEPTH_MAX {
                    return Err(Beyond {
                        offset: i,
                        what: Opening::Comment,
                    });
                }
                i += 2;
            }
            (b'*', Some(b'/')) => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => i += 1,
        }
    }
    Ok(bytes.len())
}

/// The offset just past a quoted string starting at `start` (`"…"`, or `"""…"""` over
/// several lines), escapes skipped. A single-line string also ends at a newline (KDL
/// refuses it there; the parser reports that).
pub(crate) fn quoted(bytes: &[u8], start: usize) -> usize {
    let multi = bytes[start..].starts_with(b"\"\"\"");
    let mut i = start + if multi { 3 } else { 1 };
    while i < bytes.len() {
        match bytes[i] {
            // The escaped byte is skipped; the rest of a multi-byte character is
            // neither `"` nor `\\`.
            b'\\' => i += 2,
            b'"' if !multi => return i + 1,
            b'"' if bytes[i..].starts_with(b"\"\"\"") => return i + 3,
            _ if !multi && newline_at(bytes, i).is_some() => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// The offset just past a raw string whose quote is at `quote`, opened by `hashes`
/// `#`s: `#"…"#`, or `#"""…"""#` over several lines. No escapes.
pub(crate) fn raw(bytes: &[u8], quote: usize, hashes: usize) -> usize {
    let multi = bytes[quote..].starts_with(b"\"\"\"");
    let close_quotes = if multi { 3 } else { 1 };
    let mut i = quote + close_quotes;
    while i < bytes.len() {
        if bytes[i..].starts_with(&b"\"\"\""[..close_quotes])
            && bytes[i + close_quotes..]
                .iter()
                .take(hashes)
                .filter(|&&b| b == b'#')
                .count()
                == hashes
        {
            return i + close_quotes + hashes;
        }
        i += 1;
    }
    bytes.len()
}

#[cfg(test)]
mod tests;
