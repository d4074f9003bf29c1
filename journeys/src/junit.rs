//! JUnit XML reports of journeys run (`gridctl journey run --junit FILE`): one
//! `testsuite` named `journeys`, one `testcase` per journey file — its time, its story
//! as `system-out`, and for a journey that did not pass a `failure` whose message is the
//! first line of the report and whose text is the whole report (the failing step, what
//! was expected and observed, the kept work directory). Serialized by `quick-junit`
//! (nextest's), which escapes text and drops characters XML cannot hold.

use std::path::PathBuf;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use crate::JourneyError;

/// The name of the report's one test suite.
pub const SUITE: &str = "journeys";

/// One journey file run: what the report says of it.
#[derive(Debug, Clone)]
pub struct JourneyRun {
    pub path: PathBuf,
    pub elapsed: Duration,
    /// What the run printed (the story).
    pub story: String,
    /// `None`: it passed; else the report of why not.
    pub failure: Option<String>,
}

impl JourneyRun {
    /// A run's entry from its result.
    pub fn new(
        path: PathBuf,
        elapsed: Duration,
        story: String,
        result: &Result<crate::Report, JourneyError>,
    ) -> JourneyRun {
        JourneyRun {
            path,
            elapsed,
            story,
            failure: result.as_ref().err().map(ToString::to_string),
        }
    }
}

/// The JUnit XML of `runs`.
pub fn report(runs: &[JourneyRun]) -> Result<String, JourneyError> {
    let mut suite = TestSuite::new(SUITE);
    let mut total = Duration::ZERO;
    for run in runs {
        let status = match &run.failure {
            None => TestCaseStatus::success(),
            Some(failure) => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                status
                    .set_message(failure.lines().next().unwrap_or("failed"))
                    .set_type("journey failed")
                    .set_description(failure.as_str());
                status
            }
        };
        let name = run.path.file_name().map_or_else(
            || run.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut case = TestCase::new(name, status);
        case.set_classname(SUITE)
            .set_time(run.elapsed)
            .set_system_out(run.story.as_str());
        suite.add_test_case(case);
        total += run.elapsed;
    }
    suite.set_time(total);
    let mut report = Report::new("gridctl journey run");
    report.set_time(total).add_test_suite(suite);
    report
        .to_string()
        .map_err(|e| JourneyError::Setup(format!("cannot write the JUnit report: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report parses back (with quick-junit's own reader) into what was run:
    /// one case per journey, the failure's message and text whole — markup characters
    /// and a terminal escape in a story included.
    #[test]
    fn the_report_is_well_formed_and_parses_back() {
        let failure = "journey a.kdl failed at step 2 (line 3):\n    expect-values m x=\"<1>\"\n  expected: x & y < 2\n  observed: \"quoted\" 'single' ]]>";
        let runs = [
            JourneyRun {
                path: "journeys/pass.kdl".into(),
                elapsed: Duration::from_millis(1500),
                story: "  1. start solo\n     \x1b[1mbold\x1b[0m <ok> & done".into(),
                failure: None,
            },
            JourneyRun {
                path: "journeys/a.kdl".into(),
                elapsed: Duration::from_millis(250),
                story: String::new(),
                failure: Some(failure.into()),
            },
        ];
        let xml = report(&runs).unwrap();
        assert!(
            xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
            "{xml}"
        );
        let parsed = Report::deserialize_from_str(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        assert_eq!(parsed.tests, 2);
        assert_eq!(parsed.failures, 1);
        assert_eq!(parsed.test_suites.len(), 1);
        let suite = &parsed.test_suites[0];
        assert_eq!(suite.name.as_str(), SUITE);
        let names: Vec<&str> = suite.test_cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["pass.kdl", "a.kdl"]);
        assert!(matches!(
            suite.test_cases[0].status,
            TestCaseStatus::Success { .. }
        ));
        match &suite.test_cases[1].status {
            TestCaseStatus::NonSuccess {
                kind,
                message,
                description,
                ..
            } => {
                assert_eq!(*kind, NonSuccessKind::Failure);
                assert_eq!(
                    message.as_ref().map(|m| m.as_str()),
                    Some("journey a.kdl failed at step 2 (line 3):")
                );
                assert_eq!(description.as_ref().map(|d| d.as_str()), Some(failure));
            }
            other => panic!("expected a failure, got {other:?}"),
        }
        let story = suite.test_cases[0].system_out.as_ref().unwrap();
        assert!(story.as_str().ends_with("bold <ok> & done"), "{story:?}");
    }
}
