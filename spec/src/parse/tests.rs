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

#[test]
fn a_profile_the_build_does_not_provide_is_refused_on_its_span() {
    let text =
        "grid version=1\nhost a listen=\"127.0.0.1:7401\" {\n    profiles transport missions\n}\n";
    // The language knows `missions`: without a provided list it loads.
    assert!(crate::load_str("t.kdl", text).is_ok());
    let options = crate::Options {
        provided_profiles: Some(&[Profile::Transport, Profile::Authority]),
        ..crate::Options::default()
    };
    let error = crate::load_str_with("t.kdl", text, options).unwrap_err();
    assert_eq!(error.len(), 1);
    let d = &error.items[0];
    assert_eq!(
        d.message,
        "profile `missions` cannot run: this build does not provide it (host `a`)"
    );
    assert_eq!(
        d.help.as_deref(),
        Some("this build provides: transport, authority")
    );
    assert_eq!(d.offset(), text.find("missions"));
}

#[test]
fn the_archive_wallet_needs_processes_and_says_so_on_its_span() {
    let text = "grid version=1\nhost hq listen=\"127.0.0.1:7401\" {\n    profiles transport archive-wallet\n}\n";
    let error = crate::load_str("t.kdl", text).unwrap_err();
    assert_eq!(error.len(), 1);
    let d = &error.items[0];
    assert!(d.message.contains("host `hq`"), "{}", d.message);
    assert!(d.message.contains("`processes`"), "{}", d.message);
    assert_eq!(d.offset(), text.find("archive-wallet"));
    let with = "grid version=1\nhost hq listen=\"127.0.0.1:7401\" {\n    profiles transport archive-wallet processes\n}\n";
    let topology = crate::load_str("t.kdl", with).unwrap();
    assert!(topology.hosts[0].profiles.contains(&Profile::ArchiveWallet));
}
