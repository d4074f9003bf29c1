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

/// The parse error for `text` with its help.
fn error_with_help(text: &str) -> (String, String) {
    match parse_str(&journeys_dir().join("test.kdl"), text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(JourneyError::Parse(failure)) => (
            format!("{}:{}: {}", failure.line, failure.column, failure.message),
            failure.help.clone().unwrap_or_default(),
        ),
        Err(other) => panic!("expected a parse error, got {other}"),
    }
}

/// A slip — a misspelt step, a host the topology does not declare — is a parse error at
/// its place, naming the closest known name; nothing runs.
#[test]
fn slips_are_parse_errors_with_a_did_you_mean() {
    const TOPOLOGY: &str = "journey \"t\"\ntopology \"topologies/crash-mid-batch.kdl\"\n";
    let cases: &[(&str, &str, &str)] = &[
        (
            "journey \"t\"\nexpect-value counter n=1\n",
            "2:1: unknown step `expect-value`",
            "did you mean `expect-values`? steps are: topology, plan,",
        ),
        (
            "journey \"t\"\nrestrat solo\n",
            "2:1: unknown step `restrat`",
            "did you mean `restart`?",
        ),
        (
            "journey \"t\"\nwidget\n",
            "2:1: unknown step `widget`",
            "steps are: topology, plan,",
        ),
        (
            "start sol\n",
            "3:7: host `sol` is not declared by the journey's topology",
            "did you mean `solo`? its hosts are: solo",
        ),
        (
            "kill edge-a at=\"batch-after-commit\"\n",
            "3:6: host `edge-a` is not declared by the journey's topology",
            "its hosts are: solo (a host must be in a topology set before the step)",
        ),
        (
            "expect-process p1 host=\"edge\"\n",
            "3:19: host `edge` is not declared by the journey's topology",
            "its hosts are: solo",
        ),
        (
            "expect-refused { start sool; }\n",
            "3:24: host `sool` is not declared by the journey's topology",
            "did you mean `solo`?",
        ),
        (
            "partition solo sola\n",
            "3:16: host `sola` is not declared by the journey's topology",
            "did you mean `solo`?",
        ),
        (
            "edit-topology from=\"host solo\" to=\"host duo\"\nstart trio\n",
            "4:7: host `trio` is not declared by the journey's topology",
            "its hosts are: duo, solo",
        ),
    ];
    for (text, expected, help) in cases {
        let text = if text.starts_with("journey") {
            text.to_string()
        } else {
            format!("{TOPOLOGY}{text}")
        };
        let (got, got_help) = error_with_help(&text);
        assert_eq!(&got, expected, "for {text:?}");
        if help.starts_with("steps are") {
            assert!(
                got_help.starts_with(help),
                "for {text:?}: help {got_help:?}"
            );
        } else {
            assert!(got_help.contains(help), "for {text:?}: help {got_help:?}");
        }
    }
}

/// Hosts are checked against every topology set so far: one the edited topology adds,
/// one a later topology dropped (its installation may still be there), and any host
/// before the first `topology` step (nothing to check against yet).
#[test]
fn hosts_of_every_topology_set_so_far_are_known() {
    let text = "journey \"t\"\nstart anything\ntopology \"topologies/crash-mid-batch.kdl\"\nstart solo\nedit-topology from=\"host solo\" to=\"host duo\"\nstart duo\nkill solo\ntopology \"topologies/custody.kdl\"\nstart perm\nrestart solo\n";
    let journey =
        parse_str(&journeys_dir().join("test.kdl"), text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(journey.steps.len(), 9);
}

/// A journey nested 2,000 blocks deep (10 KB) is a parse error naming the limit, not a
/// stack overflow of the KDL parser.
#[test]
fn a_deeply_nested_journey_is_refused_not_a_crash() {
    let text = format!("journey \"deep\"\n{}", "{ x ".repeat(2_000));
    let message = error(&text);
    assert!(message.contains("NESTING_DEPTH_MAX"), "{message}");
}

/// The protocol peers' example in docs/journeys.md is a journey that parses: the docs
/// show steps as they are.
#[test]
fn the_docs_protocol_peers_example_parses() {
    let docs = std::fs::read_to_string(journeys_dir().join("../docs/journeys.md")).unwrap();
    let section = docs
        .split_once("## Protocol peers")
        .expect("docs/journeys.md has a Protocol peers section")
        .1;
    let example = section
        .split_once("```kdl\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("a KDL example")
        .0;
    let journey = parse_str(
        &journeys_dir().join("doc.kdl"),
        &format!("journey \"the docs' example\"\n{example}"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(journey.steps.len(), 11);
}
