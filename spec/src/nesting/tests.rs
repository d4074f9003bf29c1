use super::*;
use crate::limits::NESTING_DEPTH_MAX;

/// The nesting diagnostic of `text` through the whole topology reader: its offset, or
/// `None` when no diagnostic names the limit.
fn nesting_offset(text: &str) -> Option<usize> {
    let diagnostics = crate::load_str("t.kdl", text).err()?;
    diagnostics
        .iter()
        .find(|d| d.message.contains("NESTING_DEPTH_MAX"))
        .and_then(Diagnostic::offset)
}

fn nested(levels: usize) -> String {
    format!(
        "grid version=1\n{}{}",
        "x {".repeat(levels),
        "}".repeat(levels)
    )
}

#[test]
fn two_thousand_nested_blocks_are_refused_at_the_first_block_beyond_the_limit() {
    // 10 KB of `x {`: this overflowed the stack (the process aborted) before the limit.
    let text = nested(2_000);
    let header = "grid version=1\n".len();
    assert_eq!(
        nesting_offset(&text),
        Some(header + 3 * NESTING_DEPTH_MAX + 2),
        "the 33rd `{{` is the first beyond the limit"
    );
    let error = check("t.kdl", &text).unwrap_err();
    assert_eq!(error.len(), 1);
    assert!(
        error.items[0]
            .message
            .contains(&format!("NESTING_DEPTH_MAX ({NESTING_DEPTH_MAX})")),
        "{}",
        error.items[0].message
    );
}

#[test]
fn nesting_at_the_limit_is_read_by_the_parser() {
    assert!(check("t.kdl", &nested(NESTING_DEPTH_MAX)).is_ok());
    assert_eq!(nesting_offset(&nested(NESTING_DEPTH_MAX)), None);
    assert!(check("t.kdl", &nested(NESTING_DEPTH_MAX + 1)).is_err());
}

#[test]
fn braces_inside_strings_and_comments_do_not_count() {
    let deep = "{".repeat(3 * NESTING_DEPTH_MAX);
    let texts = [
        format!("a \"{deep}\""),
        format!("a \"\\\"{deep}\""),
        format!("a \"\\\\\" \"{deep}\""),
        format!("a #\"{deep}\"#"),
        format!("a ##\"\"#{deep}\"##"),
        format!("a \"\"\"\n{deep}\n\"\"\"\n"),
        format!("a \"\"\"\n\\\"\"\"{deep}\n\"\"\"\n"),
        format!("a #\"\"\"\n\"\"\"{deep}\n\"\"\"#\n"),
        format!("// {deep}\na"),
        format!("/* {deep} */ a"),
        format!("/* /* {deep} */ {deep} */ a"),
        format!("a /- \"{deep}\""),
        format!("a #true \"{deep}\""),
    ];
    for text in &texts {
        assert!(check("t.kdl", text).is_ok(), "refused: {text}");
        assert!(
            KdlDocument::parse_v2(text).is_ok(),
            "not valid KDL, so not a fair case: {text}"
        );
    }
    // After a string or comment ends, braces count again.
    let closed = format!("a \"x\" {}", "{".repeat(NESTING_DEPTH_MAX + 1));
    assert_eq!(deepest(&closed).map(|b| b.what), Some(Opening::Block));
    let closed = format!("/* x */ a {}", "{".repeat(NESTING_DEPTH_MAX + 1));
    assert_eq!(deepest(&closed).map(|b| b.what), Some(Opening::Block));
    let closed = format!("// x\na {}", "{".repeat(NESTING_DEPTH_MAX + 1));
    assert_eq!(deepest(&closed).map(|b| b.what), Some(Opening::Block));
}

#[test]
fn comments_nested_beyond_the_limit_are_refused() {
    let text = format!("grid version=1\n{}", "/* ".repeat(10_000));
    let offset = "grid version=1\n".len() + 3 * NESTING_DEPTH_MAX;
    assert_eq!(
        deepest(&text),
        Some(Beyond {
            offset,
            what: Opening::Comment
        })
    );
    assert_eq!(nesting_offset(&text), Some(offset));
}

#[test]
fn slashdashes_in_a_row_beyond_the_limit_are_refused() {
    let text = format!("grid version=1\na {}b", "/- ".repeat(100_000));
    let offset = "grid version=1\na ".len() + 3 * NESTING_DEPTH_MAX;
    assert_eq!(nesting_offset(&text), Some(offset));
    // Slashdashes apart are not in a row.
    let apart = format!("grid version=1\n{}", "/- a\n".repeat(1_000));
    assert!(check("t.kdl", &apart).is_ok());
    let commented = format!("a {}b", "/- /* c */ ".repeat(NESTING_DEPTH_MAX + 1));
    assert_eq!(
        deepest(&commented).map(|b| b.what),
        Some(Opening::Slashdash)
    );
}

#[test]
fn the_parser_recovering_from_many_errors_does_not_overflow() {
    // Each of these overflowed gridctl's 8 MiB main stack (a test thread has 2 MiB).
    let texts = [
        "}".repeat(100_000),
        "a=".repeat(100_000),
        format!("a {}", "\\ ".repeat(100_000)),
    ];
    for text in &texts {
        let text = format!("grid version=1\n{text}");
        assert!(crate::load_str("t.kdl", &text).is_err());
    }
    // Valid, and the parser recurses once per `*` of a comment.
    let stars = format!("grid version=1\n/* {} */", "*".repeat(200_000));
    assert!(crate::load_str("t.kdl", &stars).is_ok());
}

/// Soup of the tokens KDL's lexer and the nesting scan care about.
const SOUP: &[&str] = &[
    "{",
    "}",
    "\"",
    "\"\"\"",
    "#",
    "#\"",
    "\"#",
    "##",
    "/*",
    "*/",
    "//",
    "/-",
    "\\",
    "\n",
    " ",
    "=",
    ";",
    "(",
    ")",
    "a",
    "1",
    "*",
    "/",
    "x {",
    "\u{2028}",
    "é",
    "#true",
    "node \"{\"",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 256,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// No soup of braces, quotes and comments crashes the reader: it answers a
    /// topology or diagnostics whose spans lie inside the text.
    #[test]
    fn brace_and_quote_soup_never_crashes_load(
        tokens in proptest::collection::vec(proptest::sample::select(SOUP), 0..3_000)
    ) {
        let text = format!("grid version=1\n{}", tokens.concat());
        let scanned = check("t.kdl", &text);
        if let Err(diagnostics) = crate::load_str("t.kdl", &text) {
            for d in diagnostics.iter() {
                for label in &d.labels {
                    proptest::prop_assert!(label.offset() + label.len() <= text.len());
                }
            }
        } else {
            proptest::prop_assert!(scanned.is_ok());
        }
    }
}
