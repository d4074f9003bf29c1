//! The runner against stand-in binaries (shell scripts): outcome and exit-status checks,
//! a gridd that refuses to start, and what a failure reports. The real binaries are
//! exercised by `reconciler/tests/journeys.rs`.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use grid_journeys::{Binaries, JourneyError, run_file};

/// Writing a script while another test thread forks can make exec fail with ETXTBSY
/// (the child briefly holds the write descriptor): the tests here run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A directory with a `gridctl` and a `gridd` script and a journey file.
struct Fake {
    dir: PathBuf,
    _serial: MutexGuard<'static, ()>,
}

impl Fake {
    fn new(gridctl: &str, gridd: &str) -> Fake {
        let serial = SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "grid-journeys-fake-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(dir.join("topologies")).unwrap();
        std::fs::write(dir.join("topologies/t.kdl"), "grid version=1\n").unwrap();
        for (name, body) in [("gridctl", gridctl), ("gridd", gridd)] {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Fake {
            dir,
            _serial: serial,
        }
    }

    fn run(&self, journey: &str) -> (Result<grid_journeys::Report, JourneyError>, String) {
        let path = self.dir.join("j.kdl");
        std::fs::write(&path, journey).unwrap();
        let binaries = Binaries::beside(&self.dir.join("gridctl"));
        let mut story = Vec::new();
        let result = run_file(&path, &binaries, &mut story);
        (result, String::from_utf8(story).unwrap())
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn failure(result: Result<grid_journeys::Report, JourneyError>) -> grid_journeys::StepFailure {
    match result {
        Err(JourneyError::Step(failure)) => {
            let _ = std::fs::remove_dir_all(&failure.work_dir);
            *failure
        }
        Err(other) => panic!("expected a step failure, got {other}"),
        Ok(report) => panic!("expected a failure, the journey passed: {report:?}"),
    }
}

#[test]
fn binaries_beside_finds_gridd_next_to_gridctl() {
    let binaries = Binaries::beside(Path::new("/opt/grid/bin/gridctl"));
    assert_eq!(binaries.gridd, Path::new("/opt/grid/bin/gridd"));
    let missing = Binaries::beside(Path::new("/nonexistent/gridctl"));
    let message = missing.check().unwrap_err().to_string();
    assert!(message.contains("cargo build --bin gridctl"), "{message}");
}

#[test]
fn a_matching_outcome_passes_and_the_work_directory_is_removed() {
    let fake = Fake::new(
        r#"echo '{"outcome":"unknown","transitions":[]}'; exit 3"#,
        "exit 1",
    );
    let (result, story) =
        fake.run("journey \"t\"\ntopology \"topologies/t.kdl\"\nreconcile expect=unknown\n");
    let report = result.unwrap_or_else(|e| panic!("{story}\n{e}"));
    assert_eq!(report.steps, 2);
    assert!(story.contains("→ unknown (exit 3)"), "{story}");
    let work = story
        .lines()
        .find_map(|line| line.strip_prefix("work directory: "))
        .expect("the story names the work directory");
    assert!(!Path::new(work).exists(), "{work} was not removed");
}

#[test]
fn an_outcome_and_exit_status_that_disagree_fail() {
    let fake = Fake::new(r#"echo '{"outcome":"succeeded"}'; exit 3"#, "exit 1");
    let (result, _) = fake.run("journey \"t\"\ntopology \"topologies/t.kdl\"\nreconcile\n");
    let failure = failure(result);
    assert_eq!((failure.step, failure.line), (2, 3));
    assert_eq!(failure.text, "reconcile");
    assert_eq!(failure.expected, "outcome succeeded (exit 0)");
    assert!(
        failure.observed.contains("outcome succeeded but exit 3"),
        "{}",
        failure.observed
    );
}

#[test]
fn a_different_outcome_fails_naming_the_step_expectation_and_observation() {
    let fake = Fake::new(
        r#"echo '{"op":"b1","outcome":"refused","detail":"op b1 was used for another request"}'; exit 4"#,
        "exit 1",
    );
    let (result, story) = fake.run("journey \"t\"\n\ninput counter n=9 op=\"b1\"\n");
    let failure = failure(result);
    assert_eq!((failure.step, failure.line), (1, 3));
    assert_eq!(failure.text, "input counter n=9 op=\"b1\"");
    assert_eq!(failure.expected, "outcome succeeded (exit 0)");
    assert!(
        failure
            .observed
            .contains("outcome refused (exit 4): op b1 was used"),
        "{}",
        failure.observed
    );
    assert!(
        story.contains("$ gridctl input counter n=9 --op b1 --json"),
        "{story}"
    );
    let report = failure.to_string();
    assert!(report.contains("failed at step 1 (line 3)"), "{report}");
}

#[test]
fn missing_json_is_reported_with_stderr() {
    let fake = Fake::new("echo 'boom: no such model' >&2; exit 1", "exit 1");
    let (result, _) = fake.run("journey \"t\"\nexpect-refused { input counter n=1 op=\"b1\" }\n");
    let failure = failure(result);
    assert_eq!(failure.expected, "outcome refused (exit 4)");
    assert!(
        failure.observed.contains("no JSON \"outcome\""),
        "{}",
        failure.observed
    );
    assert!(
        failure.observed.contains("boom: no such model"),
        "{}",
        failure.observed
    );
}

#[test]
fn plan_counts_are_checked() {
    let fake = Fake::new(
        r#"echo '{"transitions":[{"op":"!","kind":"model","name":"gauge","host":"solo","detail":"unmanaged"}],"counts":{"+":0,"~":0,"-":0,"!":1}}'"#,
        "exit 1",
    );
    let (result, story) = fake.run(
        "journey \"t\"\ntopology \"topologies/t.kdl\"\nplan expect-transitions=1 expect-attention=1 expect-mention=\"unmanaged\"\nexpect-plan-empty\n",
    );
    let failure = failure(result);
    assert!(
        story.contains("! model gauge on solo: unmanaged"),
        "{story}"
    );
    assert_eq!(failure.step, 3);
    assert_eq!(failure.expected, "an empty plan (no transitions)");
}

#[test]
fn a_gridd_that_refuses_to_start() {
    let fake = Fake::new(
        "exit 0",
        "echo 'gridd: profile transport refused: no key' >&2; exit 1",
    );
    let (result, story) = fake.run("journey \"t\"\nexpect-refused { start solo }\n");
    result.unwrap_or_else(|e| panic!("{story}\n{e}"));
    assert!(
        story.contains("→ refused (exit 1): gridd: profile transport refused"),
        "{story}"
    );

    let (result, _) = fake.run("journey \"t\"\nstart solo\n");
    let failure = failure(result);
    assert!(
        failure
            .observed
            .contains("gridd exited (exit 1) before it was ready"),
        "{}",
        failure.observed
    );
    assert!(failure.observed.contains("no key"), "{}", failure.observed);
}

/// A polling expectation tells its command once, then what the last try observed and
/// how many tries it took — not the command and observation of every try.
#[test]
fn a_polling_expectation_tells_its_command_once_with_the_number_of_tries() {
    // The model holds n=3 from the 4th inspection on (a count kept in the work dir).
    let fake = Fake::new(
        r#"n=$(cat tries 2>/dev/null || echo 0); n=$((n+1)); echo $n > tries
if [ $n -ge 4 ]; then echo '{"n":3}'; else echo '{"n":1}'; fi"#,
        "exit 1",
    );
    let (result, story) = fake.run("journey \"t\"\nexpect-values counter n=3 within=30\n");
    result.unwrap_or_else(|e| panic!("{story}\n{e}"));
    assert_eq!(
        story
            .matches("$ gridctl inspect model counter --json")
            .count(),
        1,
        "{story}"
    );
    assert_eq!(story.matches("→ n=1").count(), 1, "{story}");
    assert_eq!(story.matches("→ n=3").count(), 1, "{story}");
    assert!(story.contains("(held after 4 tries in "), "{story}");
    drop(fake); // It holds the lock every test here takes.

    // Never holding: the same, and the step fails with the last observation.
    let fake = Fake::new(r#"echo '{"n":1}'"#, "exit 1");
    let (result, story) = fake.run("journey \"t\"\nexpect-values counter n=3 within=1\n");
    let failure = failure(result);
    assert_eq!(failure.expected, "model `counter` to hold n=3");
    assert_eq!(
        story
            .matches("$ gridctl inspect model counter --json")
            .count(),
        1,
        "{story}"
    );
    assert!(story.contains("(did not hold after "), "{story}");
}
