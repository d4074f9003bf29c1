//! `gridctl journey run --junit FILE`: every journey runs (also after one failed), and
//! the report is JUnit XML with one testcase per journey and each failure's report.

use std::process::Command;

use quick_junit::{NonSuccessKind, Report, TestCaseStatus};

mod common;

#[test]
fn journey_run_writes_a_junit_report_of_every_journey() {
    common::gridd();
    let dir = common::work_dir("journey-junit");
    // A misspelt step fails before anything runs; the journey after it still runs.
    std::fs::write(dir.join("slip.kdl"), "journey \"a slip\"\nrestrat solo\n").unwrap();
    std::fs::write(dir.join("empty.kdl"), "journey \"nothing to do\"\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .env_remove("CARGO")
        .current_dir(&dir)
        .args([
            "journey",
            "run",
            "slip.kdl",
            "empty.kdl",
            "--junit",
            "report.xml",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("did you mean `restart`?"), "{stderr}");
    assert!(
        stderr.contains("1 of 2 journeys passed; JUnit report: report.xml"),
        "{stderr}"
    );
    let xml = std::fs::read_to_string(dir.join("report.xml")).unwrap();
    let report = Report::deserialize_from_str(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    assert_eq!((report.tests, report.failures), (2, 1), "{xml}");
    let cases = &report.test_suites[0].test_cases;
    assert_eq!(cases[0].name.as_str(), "slip.kdl");
    match &cases[0].status {
        TestCaseStatus::NonSuccess {
            kind: NonSuccessKind::Failure,
            message: Some(message),
            description: Some(description),
            ..
        } => {
            assert!(
                message
                    .as_str()
                    .ends_with("slip.kdl:2:1: unknown step `restrat`"),
                "{xml}"
            );
            assert!(
                description.as_str().contains("did you mean `restart`?"),
                "{xml}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(cases[1].name.as_str(), "empty.kdl");
    assert!(
        matches!(cases[1].status, TestCaseStatus::Success { .. }),
        "{xml}"
    );
    let story = cases[1].system_out.as_ref().map(|s| s.as_str().to_owned());
    assert!(
        story
            .as_deref()
            .is_some_and(|s| s.contains("passed: 0 steps")),
        "{xml}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
