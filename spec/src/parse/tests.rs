use super::*;

#[test]
fn rfc3339_shapes() {
    assert!(is_rfc3339("2026-12-01T06:00:00Z"));
    assert!(is_rfc3339("2026-12-01T06:00:00.123+01:00"));
    assert!(!is_rfc3339("2026-13-01T06:00:00Z"));
    assert!(!is_rfc3339("2026-12-01 06:00:00Z"));
    assert!(!is_rfc3339("2026-12-01T06:00:00"));
}

#[test]
fn string_base_finds_plain_strings_only() {
    let text = r#"cell a "x + 1""#;
    let span = SourceSpan::new(7.into(), 7);
    assert_eq!(string_base(text, span, "x + 1"), Some(8));
    let text = r#"cell a "x \"+ 1""#;
    assert_eq!(
        string_base(text, SourceSpan::new(7.into(), 9), "x \"+ 1"),
        None
    );
    let text = r##"cell a #"x + 1"#"##;
    assert_eq!(
        string_base(text, SourceSpan::new(7.into(), 9), "x + 1"),
        Some(9)
    );
}
