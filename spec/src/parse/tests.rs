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
    let text = "grid version=1\nmembership m\nhost a listen=\"127.0.0.1:7401\" {\n    member m\n    profiles transport authority processes missions\n}\n";
    // The language knows `missions`: without a provided list it loads.
    assert!(crate::load_str("t.kdl", text).is_ok());
    let options = crate::Options {
        provided_profiles: Some(&[Profile::Transport, Profile::Authority, Profile::Processes]),
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
        Some("this build provides: transport, authority, processes")
    );
    assert_eq!(d.offset(), text.find("missions"));
}

#[test]
fn the_archive_wallet_needs_processes_and_says_so_on_its_span() {
    let text = "grid version=1\nmembership m\nhost hq listen=\"127.0.0.1:7401\" {\n    member m\n    profiles transport archive-wallet\n}\n";
    let error = crate::load_str("t.kdl", text).unwrap_err();
    assert_eq!(error.len(), 1);
    let d = &error.items[0];
    assert!(d.message.contains("host `hq`"), "{}", d.message);
    assert!(d.message.contains("`processes`"), "{}", d.message);
    assert_eq!(d.offset(), text.find("archive-wallet"));
    let with = "grid version=1\nmembership m\nhost hq listen=\"127.0.0.1:7401\" {\n    member m\n    profiles transport archive-wallet processes\n}\n";
    let topology = crate::load_str("t.kdl", with).unwrap();
    assert!(topology.hosts[0].profiles.contains(&Profile::ArchiveWallet));
}

#[test]
fn an_export_is_refused_while_the_build_does_not_provide_exports() {
    let text = "grid version=1\nmembership a {\n    authority voters=1\n}\nmembership b {\n    authority voters=1\n}\nhost p listen=\"127.0.0.1:7400\" {\n    member a\n    profiles transport authority delivery exports\n}\nhost g listen=\"127.0.0.1:7401\" {\n    member a\n    member b\n    profiles transport authority delivery exports\n}\nroute ra membership=a class=ordered {\n    publisher p\n    destination g\n}\nroute rb membership=b class=ordered {\n    publisher g\n}\nexport x gateway=g from=ra to=rb {\n    disclosure issuer=p\n    publication\n}\n";
    // The language knows exports: without a provided list it loads.
    assert!(crate::load_str("t.kdl", text).is_ok());
    let options = crate::Options {
        provided_profiles: Some(&[Profile::Transport, Profile::Authority, Profile::Delivery]),
        ..crate::Options::default()
    };
    let error = crate::load_str_with("t.kdl", text, options).unwrap_err();
    // The export itself, and each host selecting `exports`, are refused.
    assert_eq!(error.len(), 3, "{:?}", error.items);
    let d = error
        .items
        .iter()
        .find(|d| d.message.starts_with("export "))
        .expect("the export is refused");
    assert_eq!(
        d.message,
        "export `x` cannot run: this build does not provide the `exports` profile"
    );
    assert_eq!(d.offset(), text.find("x gateway"));
    let provided = crate::Options {
        provided_profiles: Some(&[
            Profile::Transport,
            Profile::Authority,
            Profile::Delivery,
            Profile::Exports,
        ]),
        ..crate::Options::default()
    };
    assert!(crate::load_str_with("t.kdl", text, provided).is_ok());
}

#[test]
fn a_mission_past_its_deadline_is_refused_unless_returned() {
    let head = "grid version=1\nmembership m {\n    authority voters=1\n}\nhost e listen=\"127.0.0.1:7401\" {\n    member m\n    profiles transport authority processes missions\n}\nhost s listen=\"127.0.0.1:7402\" {\n    member m\n    profiles transport authority processes missions\n}\n";
    let text =
        format!("{head}mission n host=e units=3 deadline=\"2026-01-01T00:00:00Z\" successor=s\n");
    let at = |rfc3339: &str| {
        let t =
            time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339)
                .unwrap();
        crate::Options {
            now: Some(t.into()),
            ..crate::Options::default()
        }
    };
    // Without a clock nothing is compared; before the deadline it loads.
    assert!(crate::load_str("t.kdl", &text).is_ok());
    assert!(crate::load_str_with("t.kdl", &text, at("2025-12-31T23:59:59Z")).is_ok());
    let error = crate::load_str_with("t.kdl", &text, at("2026-01-01T00:00:00Z")).unwrap_err();
    assert_eq!(error.len(), 1, "{:?}", error.items);
    let d = &error.items[0];
    assert_eq!(
        d.message,
        "mission `n`: its deadline 2026-01-01T00:00:00Z has passed"
    );
    assert_eq!(d.offset(), text.find("deadline="));
    let returned = text.replace("successor=s", "successor=s returned=#true");
    assert!(crate::load_str_with("t.kdl", &returned, at("2027-01-01T00:00:00Z")).is_ok());
}

#[test]
fn retain_reads_its_windows_and_refuses_zero_too_long_or_an_archive_shorter_than_hot() {
    let host = |retain: &str| {
        format!("grid version=1\nhost a listen=\"127.0.0.1:7401\" {{\n    {retain}\n}}\n")
    };
    let topology = crate::load_str("t.kdl", &host("retain hot-days=3 archive-days=30")).unwrap();
    assert_eq!(
        topology.hosts[0].retain,
        crate::Retention {
            hot_days: Some(3),
            archive_days: Some(30)
        }
    );
    let plain = "grid version=1\nhost a listen=\"127.0.0.1:7401\"\n";
    let topology = crate::load_str("t.kdl", plain).unwrap();
    assert_eq!(topology.hosts[0].retain, crate::Retention::default());
    for (retain, message, at) in [
        (
            "retain hot-days=0",
            "property `hot-days` of `retain` is 0, below RETAIN_DAYS_MIN (1)",
            "hot-days=0",
        ),
        (
            "retain hot-days=400",
            "property `hot-days` of `retain` is 400, above RETAIN_HOT_DAYS_MAX (366)",
            "hot-days=400",
        ),
        (
            "retain archive-days=40000",
            "property `archive-days` of `retain` is 40000, above RETAIN_ARCHIVE_DAYS_MAX (36525)",
            "archive-days=40000",
        ),
        (
            "retain hot-days=10 archive-days=5",
            "`archive-days` (5) is shorter than the hot window (10 days)",
            "archive-days=5",
        ),
        (
            "retain archive-days=3",
            "`archive-days` (3) is shorter than the hot window (7 days)",
            "archive-days=3",
        ),
    ] {
        let text = host(retain);
        let error = crate::load_str("t.kdl", &text).unwrap_err();
        assert_eq!(error.len(), 1, "{retain}: {error:?}");
        let d = &error.items[0];
        assert_eq!(d.message, message, "{retain}");
        assert_eq!(d.offset(), text.find(at), "{retain}");
    }
    let twice = host("retain hot-days=2\n    retain hot-days=3");
    let error = crate::load_str("t.kdl", &twice).unwrap_err();
    assert_eq!(error.items[0].message, "`retain` is given twice");
}

#[test]
fn archive_reads_files_an_s3_bucket_or_a_dynamodb_table_and_refuses_what_it_cannot_use_with_a_span()
{
    use crate::storage::{ArchiveTarget, DynamoArchive, S3Archive, S3Location};
    let host = |archive: &str| {
        format!("grid version=1\nhost a listen=\"127.0.0.1:7401\" {{\n    {archive}\n}}\n")
    };
    let s3 = r#"archive "s3://grid-archive/edge-a" endpoint="http://127.0.0.1:8333/" credentials="s3.credentials""#;
    let topology = crate::load_str("t.kdl", &host(s3)).unwrap();
    assert_eq!(
        topology.hosts[0].archive,
        ArchiveTarget::S3(S3Archive {
            location: S3Location::parse("s3://grid-archive/edge-a").unwrap(),
            endpoint: "http://127.0.0.1:8333".to_owned(),
            region: "us-east-1".to_owned(),
            credentials: "s3.credentials".into(),
            ca: None,
        })
    );
    assert_eq!(topology.hosts[0].archive.url(), "s3://grid-archive/edge-a");
    let private = r#"archive "s3://grid-archive/edge-a" endpoint="https://s3.plant.example:8443" credentials="s3.credentials" ca="/etc/grid/plant-ca.pem""#;
    let topology = crate::load_str("t.kdl", &host(private)).unwrap();
    let ArchiveTarget::S3(private) = &topology.hosts[0].archive else {
        panic!("{:?}", topology.hosts[0].archive)
    };
    assert_eq!(private.ca, Some("/etc/grid/plant-ca.pem".into()));
    let ddb = r#"archive "dynamodb://grid-answers" endpoint="http://127.0.0.1:4567" region="eu-west-1" credentials="ddb.credentials""#;
    let topology = crate::load_str("t.kdl", &host(ddb)).unwrap();
    assert_eq!(
        topology.hosts[0].archive,
        ArchiveTarget::DynamoDb(DynamoArchive {
            table: "grid-answers".to_owned(),
            endpoint: "http://127.0.0.1:4567".to_owned(),
            region: "eu-west-1".to_owned(),
            credentials: "ddb.credentials".into(),
            ca: None,
            segments: None,
        })
    );
    assert_eq!(topology.hosts[0].archive.url(), "dynamodb://grid-answers");
    // The index in a table, the segments in a bucket.
    let both = format!(
        "{ddb} {{\n        segments \"s3://grid-archive/edge-a\" endpoint=\"http://127.0.0.1:8333\" credentials=\"s3.credentials\"\n    }}"
    );
    let topology = crate::load_str("t.kdl", &host(&both)).unwrap();
    let ArchiveTarget::DynamoDb(d) = &topology.hosts[0].archive else {
        panic!("{:?}", topology.hosts[0].archive)
    };
    assert_eq!(
        d.segments,
        Some(S3Archive {
            location: S3Location::parse("s3://grid-archive/edge-a").unwrap(),
            endpoint: "http://127.0.0.1:8333".to_owned(),
            region: "us-east-1".to_owned(),
            credentials: "s3.credentials".into(),
            ca: None,
        })
    );
    let files = format!("{ddb} {{\n        segments \"file\"\n    }}");
    let topology = crate::load_str("t.kdl", &host(&files)).unwrap();
    assert!(
        matches!(&topology.hosts[0].archive, ArchiveTarget::DynamoDb(d) if d.segments.is_none())
    );
    // The host's own files named in so many words (a move out of a bucket is made only
    // then), or left to the default by a line left out.
    assert!(topology.hosts[0].archive_files_named);
    for (text, named) in [
        (ddb.to_owned(), false),
        (both.clone(), false),
        (s3.to_owned(), false),
    ] {
        let topology = crate::load_str("t.kdl", &host(&text)).unwrap();
        assert_eq!(topology.hosts[0].archive_files_named, named, "{text}");
    }
    let file = crate::load_str("t.kdl", &host("archive \"file\"")).unwrap();
    assert_eq!(file.hosts[0].archive, ArchiveTarget::File);
    assert!(file.hosts[0].archive_files_named);
    let plain = "grid version=1\nhost a listen=\"127.0.0.1:7401\"\n";
    let plain = crate::load_str("t.kdl", plain).unwrap();
    assert_eq!(plain.hosts[0].archive, ArchiveTarget::File);
    assert!(!plain.hosts[0].archive_files_named);
    let with = |extra: &str| {
        format!(
            r#"archive "s3://grid-archive/a" endpoint="http://127.0.0.1:8333" credentials="c" {extra}"#
        )
    };
    for (archive, message, at) in [
        (
            r#"archive "file" endpoint="http://127.0.0.1:8333""#.to_owned(),
            "`endpoint` belongs to an s3:// archive, not to `archive \"file\"`",
            "endpoint=",
        ),
        (
            r#"archive "dynamodb://grid-answers" credentials="c""#.to_owned(),
            "a dynamodb:// archive needs `endpoint`",
            "archive",
        ),
        (
            r#"archive "dynamodb://g!" endpoint="http://h:1" credentials="c""#.to_owned(),
            "archive table `g!`: a DynamoDB table name is 3 to 255 letters, digits, `_`, `-` and `.`",
            "\"dynamodb",
        ),
        (
            r#"archive "s3://Grid_Archive/a" endpoint="http://h:1" credentials="c""#.to_owned(),
            "archive `s3://Grid_Archive/a`: a bucket name is 3 to 63 lower-case letters, digits, `-` and `.`, starting and ending with a letter or digit",
            "\"s3://Grid",
        ),
        (
            r#"archive "ftp://x""#.to_owned(),
            "archive `ftp://x` is not an s3:// address",
            "\"ftp",
        ),
        (
            r#"archive "s3://grid-archive/a" credentials="c""#.to_owned(),
            "an s3:// archive needs `endpoint`",
            "archive",
        ),
        (
            r#"archive "s3://grid-archive/a" endpoint="ftp://127.0.0.1:1" credentials="c""#
                .to_owned(),
            "`endpoint` `ftp://127.0.0.1:1` is not an S3 endpoint: `ftp://` is neither http:// nor https://",
            "endpoint=",
        ),
        (
            r#"archive "s3://grid-archive/a" endpoint="http://u:p@127.0.0.1:1" credentials="c""#
                .to_owned(),
            "`endpoint` `http://u:p@127.0.0.1:1` is not an S3 endpoint: it has user info (`…@`): keys belong in the credentials file",
            "endpoint=",
        ),
        (
            with("region=\"US East\""),
            "`region` `US East`: a region is 1 to 32 lower-case letters, digits and `-` (for example us-east-1)",
            "region=",
        ),
        (
            r#"archive "s3://grid-archive/a" endpoint="http://127.0.0.1:1" credentials="""#
                .to_owned(),
            "`credentials` is empty",
            "credentials=",
        ),
        (
            with("secret=\"x\""),
            "unknown property `secret` of `archive`",
            "secret=",
        ),
        (
            with("ca=\"ca.pem\""),
            "`ca` belongs to an https:// endpoint: an http:// one is not encrypted, and no certificate is checked",
            "ca=",
        ),
        (
            r#"archive "file" ca="ca.pem""#.to_owned(),
            "`ca` belongs to an s3:// archive, not to `archive \"file\"`",
            "ca=",
        ),
        (
            with("{ segments \"file\"; }"),
            "`segments` belongs to an archive indexed in DynamoDB, not to `archive \"s3://grid-archive/a\"`",
            "segments",
        ),
        (
            r#"archive "dynamodb://grid-answers" endpoint="http://h:1" credentials="c" { segments "dynamodb://other"; }"#.to_owned(),
            "segments `dynamodb://other`: segments are objects, kept in files or on S3, not in DynamoDB",
            "\"dynamodb://other",
        ),
        (
            r#"archive "dynamodb://grid-answers" endpoint="http://h:1" credentials="c" { segments "s3://grid-archive/a" credentials="c"; }"#.to_owned(),
            "an s3:// segment store needs `endpoint`",
            "segments",
        ),
        (
            r#"archive "dynamodb://grid-answers" endpoint="http://h:1" credentials="c" { index "x"; }"#.to_owned(),
            "unknown child `index` of archive",
            "index",
        ),
    ] {
        let text = host(&archive);
        let error = crate::load_str("t.kdl", &text).unwrap_err();
        assert_eq!(error.len(), 1, "{archive}: {error:?}");
        let d = &error.items[0];
        assert_eq!(d.message, message, "{archive}");
        assert_eq!(d.offset(), text.find(at), "{archive}");
    }
    let twice = host("archive \"file\"\n    archive \"file\"");
    let error = crate::load_str("t.kdl", &twice).unwrap_err();
    assert_eq!(error.items[0].message, "`archive` is given twice");
}

#[test]
fn an_authority_keeps_its_snapshots_in_files_or_an_s3_bucket_and_refuses_the_rest_with_a_span() {
    use crate::storage::ArchiveTarget;
    const VOTER: &str =
        "host a listen=\"127.0.0.1:7401\" {\n    member ops\n    profiles transport authority\n}\n";
    let membership = |inner: &str| {
        format!(
            "grid version=1\nmembership ops {{\n    authority voters=1 {{\n        {inner}\n    }}\n}}\n{VOTER}"
        )
    };
    let s3 = r#"snapshots "s3://grid-snapshots/ops" endpoint="http://127.0.0.1:8333" credentials="s3.credentials""#;
    let topology = crate::load_str("t.kdl", &membership(s3)).unwrap();
    let ArchiveTarget::S3(store) = &topology.memberships[0].snapshots else {
        panic!("an S3 store: {:?}", topology.memberships[0].snapshots);
    };
    assert_eq!(store.location.to_string(), "s3://grid-snapshots/ops");
    assert_eq!(store.region, "us-east-1");
    assert_eq!(topology.memberships[0].authority_voters, Some(1));
    // Files, or nothing said: files.
    let file = crate::load_str("t.kdl", &membership("snapshots \"file\"")).unwrap();
    assert_eq!(file.memberships[0].snapshots, ArchiveTarget::File);
    let plain = format!("grid version=1\nmembership ops {{\n    authority voters=1\n}}\n{VOTER}");
    assert_eq!(
        crate::load_str("t.kdl", &plain).unwrap().memberships[0].snapshots,
        ArchiveTarget::File
    );
    for (inner, message, at) in [
        (
            r#"snapshots "dynamodb://grid-answers""#,
            "snapshots `dynamodb://grid-answers`: snapshots are objects, kept in files or on S3, not in DynamoDB",
            "\"dynamodb",
        ),
        (
            r#"snapshots "s3://grid-snapshots/ops" credentials="c""#,
            "an s3:// snapshots needs `endpoint`",
            "snapshots",
        ),
        (
            r#"snapshots "file" credentials="c""#,
            "`credentials` belongs to an s3:// snapshots, not to `snapshots \"file\"`",
            "credentials=",
        ),
        (
            "voters 3",
            "unknown child `voters` of authority",
            "voters 3",
        ),
        (
            "snapshots \"file\"\n        snapshots \"file\"",
            "`snapshots` is given twice",
            "snapshots \"file\"\n    }",
        ),
    ] {
        let text = membership(inner);
        let error = crate::load_str("t.kdl", &text).unwrap_err();
        assert_eq!(error.len(), 1, "{inner}: {error:?}");
        let d = &error.items[0];
        assert_eq!(d.message, message, "{inner}");
        assert_eq!(d.offset(), text.find(at), "{inner}");
    }
}

#[test]
fn a_capacity_line_per_membership_is_its_own_and_only_for_a_membership_of_the_host() {
    let host = |lines: &str| {
        format!(
            "grid version=1\nmembership ops\nmembership util\nhost a listen=\"127.0.0.1:7401\" {{\n    member ops\n    member util\n{lines}}}\n"
        )
    };
    let text = host(
        "    capacity ordered-per-host=8\n    capacity membership=util ordered-per-host=2 latest-per-host=3\n",
    );
    let topology = crate::load_str("t.kdl", &text).unwrap();
    let a = &topology.hosts[0];
    assert_eq!(a.capacity.ordered_per_host, Some(8));
    let util = &a.membership_capacity["util"];
    assert_eq!(
        (util.ordered_per_host, util.latest_per_host),
        (Some(2), Some(3))
    );
    assert!(!a.membership_capacity.contains_key("ops"));
    // A membership the host is not in; a line given twice (the host's or one
    // membership's): each refused on its span.
    let messages = |text: &str| {
        crate::load_str("t.kdl", text)
            .unwrap_err()
            .items
            .iter()
            .map(|d| (d.message.clone(), d.offset()))
            .collect::<Vec<_>>()
    };
    let text = host("    capacity membership=other ordered-per-host=2\n");
    let found = messages(&text.replace("membership util\n", "membership util\nmembership other\n"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].0.contains("host `a` is not a member of `other`"),
        "{found:?}"
    );
    let twice = host(
        "    capacity membership=util ordered-per-host=2\n    capacity membership=util ordered-per-host=3\n",
    );
    assert_eq!(
        messages(&twice)[0].0,
        "`capacity membership=util` is given twice"
    );
    let twice = host("    capacity ordered-per-host=2\n    capacity ordered-per-host=3\n");
    assert_eq!(messages(&twice)[0].0, "`capacity` is given twice");
}
