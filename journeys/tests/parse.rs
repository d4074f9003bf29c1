//! Every journey file parses, and malformed journeys are rejected before anything runs,
//! pointing at the place. (Running journeys needs the binaries: see
//! `reconciler/tests/journeys.rs`.)

use std::path::{Path, PathBuf};

use grid_journeys::{JourneyError, parse_file, parse_str};

fn journeys_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

#[test]
fn every_journey_file_parses() {
    let mut count = 0;
    for entry in std::fs::read_dir(journeys_dir()).expect("journeys/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|ext| ext == "kdl") {
            let journey = parse_file(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!journey.steps.is_empty(), "{} has no steps", path.display());
            count += 1;
        }
    }
    assert!(
        count >= 5,
        "expected the journeys of issue 3, found {count}"
    );
}

/// The parse error for `text`, as a journey in journeys/ (so topologies resolve).
fn error(text: &str) -> String {
    match parse_str(&journeys_dir().join("test.kdl"), text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(JourneyError::Parse(failure)) => {
            format!("{}:{}: {}", failure.line, failure.column, failure.message)
        }
        Err(other) => panic!("expected a parse error, got {other}"),
    }
}

#[test]
fn malformed_journeys_are_rejected_with_a_place() {
    let cases = [
        ("", "1:1: empty journey"),
        (
            "reconcile\n",
            "1:1: a journey starts with `journey \"TITLE\"`, found `reconcile`",
        ),
        ("journey \"t\"\nwidget\n", "2:1: unknown step `widget`"),
        ("journey \"t\"\nstart\n", "2:1: `start` needs a host name"),
        (
            "journey \"t\"\nkill solo colour=1\n",
            "2:11: unknown property `colour` of `kill`",
        ),
        (
            "journey \"t\"\nreconcile expect=maybe\n",
            "2:11: `expect` must be one of \"succeeded\", \"failed\", \"unknown\", \"refused\"",
        ),
        (
            "journey \"t\"\ninput counter n=1\n",
            "2:1: `input` needs an operation id: op=\"ID\"",
        ),
        (
            "journey \"t\"\ninput counter op=\"b1\"\n",
            "2:1: `input` needs at least one NAME=VALUE",
        ),
        (
            "journey \"t\"\ninput counter n=#true op=\"b1\"\n",
            "2:15: input `n` must be a number, found a boolean",
        ),
        (
            "journey \"t\"\ninput counter n=1 n=2 op=\"b1\"\n",
            "2:19: property `n` is repeated",
        ),
        (
            "journey \"t\"\nexpect-refused { kill solo }\n",
            "2:18: `kill` cannot be expected to be refused",
        ),
        (
            "journey \"t\"\nexpect-refused {\n  input c n=1 op=\"a\" expect=unknown\n}\n",
            "3:22: inside `expect-refused` the outcome is `refused`, not `unknown`",
        ),
        (
            "journey \"t\"\nexpect-refused\n",
            "2:1: `expect-refused` wraps exactly one step, found 0",
        ),
        (
            "journey \"t\"\nreconcile {\n  plan\n}\n",
            "3:3: `reconcile` takes no children",
        ),
        (
            "journey \"t\"\nplan expect-transitions=-1\n",
            "2:6: property `expect-transitions` must be 0 or more",
        ),
        (
            "journey \"t\"\nplan out=\"../x\"\n",
            "2:1: plan name `../x` must use letters, digits, `-`, `_` and `.`",
        ),
        (
            "journey \"t\"\ntopology \"topologies/missing.kdl\"\n",
            "2:1: topology `",
        ),
        ("journey \"t\"\nplan {\n", "2:6: KDL syntax: "),
    ];
    for (text, expected) in cases {
        let got = error(text);
        assert!(
            got.starts_with(expected),
            "for {text:?}\n  expected {expected}\n  got      {got}"
        );
    }
}

#[test]
fn steps_keep_their_text_and_line() {
    let text = "journey \"t\"\n// a comment\nstart solo failpoints=\"submit-after-commit=drop-reply\" // why\n\nexpect-refused {\n    input counter n=9 op=\"b1\"\n}\nexpect-values counter ratio=\"#DIV/0!\" x=1.5 n=-2\n";
    let journey = parse_str(&journeys_dir().join("test.kdl"), text).expect("parses");
    assert_eq!(journey.title, "t");
    let steps: Vec<(usize, usize, &str)> = journey
        .steps
        .iter()
        .map(|s| (s.number, s.line, s.text.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            (
                1,
                3,
                "start solo failpoints=\"submit-after-commit=drop-reply\""
            ),
            (2, 5, "expect-refused {\n    input counter n=9 op=\"b1\"\n}"),
            (3, 8, "expect-values counter ratio=\"#DIV/0!\" x=1.5 n=-2"),
        ]
    );
}
