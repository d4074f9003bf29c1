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

/// `expect-tag` polls `gridctl inspect tag` until every condition holds, telling the
/// command once; never holding, it fails with what the last try observed.
#[test]
fn expect_tag_polls_until_its_conditions_hold_and_fails_with_the_last_observation() {
    // One more good observation at every inspection (a count kept in the work dir).
    let fake = Fake::new(
        r#"n=$(cat tries 2>/dev/null || echo 0); n=$((n+1)); echo $n > tries
echo "{\"source\":\"modbus\",\"connection\":{\"state\":\"online\",\"detail\":null},\"last_index\":$n,\"last_good\":{\"index\":$n,\"value\":21.5},\"counts\":{\"good\":$n,\"debt\":0,\"refused\":0},\"debt\":[],\"entries\":[],\"fed\":[{\"model\":\"m\",\"stale\":false}],\"consecutive\":true}""#,
        "exit 1",
    );
    let (result, story) = fake.run(
        "journey \"t\"\nexpect-tag boiler host=edge connection=online good-at-least=3 last-good=21.5 stale=#false within=30\n",
    );
    result.unwrap_or_else(|e| panic!("{story}\n{e}"));
    assert_eq!(
        story
            .matches("$ gridctl inspect tag boiler --host edge --json")
            .count(),
        1,
        "{story}"
    );
    assert!(story.contains("(held after 3 tries in "), "{story}");
    assert!(
        story.contains("good 3 debt 0 refused 0; outstanding debt 0"),
        "{story}"
    );
    drop(fake);

    let fake = Fake::new(
        r#"echo '{"source":"modbus","connection":{"state":"lost","detail":"connection refused"},"last_index":2,"last_good":null,"counts":{"good":0,"debt":2,"refused":0},"debt":[{"index":1,"reason":"connect: connection refused"},{"index":2,"reason":"connect: connection refused"}],"entries":[],"fed":[{"model":"m","stale":true}],"consecutive":true}'"#,
        "exit 1",
    );
    let (result, story) = fake.run(
        "journey \"t\"\nexpect-tag boiler host=edge connection=online reason=\"timeout\" within=1\n",
    );
    let failure = failure(result);
    assert_eq!(
        failure.expected,
        "tag `boiler` at `edge`: connection=\"online\" reason=\"timeout\""
    );
    assert!(
        failure.observed.starts_with(
            "connection is \"lost\", not \"online\"; no outstanding debt or refused entry's reason contains \"timeout\""
        ),
        "{}",
        failure.observed
    );
    assert!(
        failure
            .observed
            .contains("all observed: source \"modbus\", connection \"lost\" (connection refused)"),
        "{}",
        failure.observed
    );
    assert!(story.contains("(did not hold after "), "{story}");
}

/// A stand-in for `adapters/peers/modbus_device.py` speaking the peers' control protocol.
const FAKE_DEVICE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fake_device.py");

impl Fake {
    /// The stand-in device as `adapters/peers/modbus_device.py` of the fake workspace
    /// (the journey's directory).
    fn with_device(self) -> Fake {
        let peers = self.dir.join("adapters/peers");
        std::fs::create_dir_all(&peers).unwrap();
        std::fs::copy(FAKE_DEVICE, peers.join("modbus_device.py")).unwrap();
        self
    }
}

#[test]
fn device_steps_drive_a_peer_through_its_control_protocol() {
    let fake = Fake::new("exit 0", "exit 1").with_device();
    let (result, story) = fake.run(
        "journey \"t\"\n\
         peer start plc kind=modbus port=18892 units=\"1,2\"\n\
         device set plc unit=1 register=holding address=100 word-order=\"big\" { values 215 216; }\n\
         device stats plc expect-sets=1 expect-units=\"1,2\"\n\
         device fail plc expect-ok=#false expect-error=\"boom\"\n\
         peer restart plc\n\
         device stats plc expect-sets=0\n\
         peer stop plc\n\
         occupy \"127.0.0.1:18892\"\n",
    );
    result.unwrap_or_else(|e| panic!("{story}\n{e}"));
    for line in [
        "adapters/peers/modbus_device.py --port 18892 --units 1,2",
        "(peer plc printed before it was ready: not JSON, said before it is ready)",
        "peer plc ready (pid ",
        r#"$ plc ← {"op":"set","unit":1,"register":"holding","address":100,"word-order":"big","values":[215,216]}"#,
        r#"→ {"ok":true,"echo":{"op":"set","unit":1,"register":"holding","address":100,"word-order":"big","values":[215,216]}}"#,
        r#"→ {"ok":false,"error":"boom"}"#,
        " ms after SIGTERM",
    ] {
        assert!(story.contains(line), "{line}\n{story}");
    }
    assert_eq!(
        story.matches("peer plc ready").count(),
        2,
        "restarted: {story}"
    );
}

#[test]
fn a_peer_refusing_a_request_fails_the_step_with_its_error_and_its_log() {
    let fake = Fake::new("exit 0", "exit 1").with_device();
    let (result, _) = fake.run(
        "journey \"t\"\npeer start plc kind=modbus port=18893\ndevice set plc\ndevice fail plc\n",
    );
    let refused = failure(result);
    assert_eq!(
        (refused.step, refused.text.as_str()),
        (3, "device fail plc")
    );
    assert_eq!(refused.expected, "peer `plc` to answer ok");
    assert_eq!(refused.observed, "ok false: boom");
    assert!(
        refused.host_logs.contains("peer plc (modbus #1) log")
            && refused.host_logs.contains("fake device serving"),
        "{}",
        refused.host_logs
    );

    // Expectations that never hold within S: the last answer is the observation.
    let (result, story) = fake.run(
        "journey \"t\"\npeer start plc kind=modbus port=18893\ndevice stats plc expect-sets-at-least=1 within=1\n",
    );
    let short = failure(result);
    assert_eq!(short.expected, "peer `plc`'s answer to have sets ≥ 1");
    assert!(
        short.observed.starts_with("sets is 0; the answer: "),
        "{}",
        short.observed
    );
    assert!(story.contains("(did not hold after "), "{story}");
}

/// A peer that exits after answering cannot answer the next request; the step says how
/// it ended. (Whether the check after the answering step saw the exit already is a race:
/// `tests/peers.rs` tells the exit itself.)
#[test]
fn a_peer_that_exited_cannot_answer() {
    let fake = Fake::new("exit 0", "exit 1").with_device();
    let (result, story) = fake.run(
        "journey \"t\"\npeer start plc kind=modbus port=18893\ndevice exit plc\ndevice stats plc\n",
    );
    let failure = failure(result);
    assert_eq!(failure.step, 3, "{story}");
    assert_eq!(failure.expected, "peer `plc` to answer {\"op\":\"stats\"}");
    let told = story.contains("peer plc exited by itself (exit 3)");
    let found = [
        "it has exited (exit 3)",
        "it closed its stdout without answering (exit 3)",
        "could not write to its stdin",
    ];
    assert!(
        found.iter().any(|f| failure.observed.starts_with(f)),
        "{}",
        failure.observed
    );
    assert!(
        !told || failure.observed.starts_with(found[0]),
        "told in the story, then found exited: {story}"
    );
}

#[test]
fn a_broker_peer_runs_stops_restarts_and_dies_with_the_journey() {
    let fake = Fake::new("exit 0", "exit 1");
    let (result, story) = fake.run(
        "journey \"t\"\n\
         peer start broker kind=mosquitto port=18894\n\
         peer stop broker\n\
         peer restart broker\n\
         peer kill broker\n\
         peer restart broker\n\
         peer start other kind=mosquitto port=18895\n",
    );
    result.unwrap_or_else(|e| panic!("{story}\n{e}"));
    for line in [
        "peer broker stopped (exit 0) ",
        "peer broker: killed by signal 9 (SIGKILL)",
        "$WORK/peers/broker-3.conf",
        "peer other ready",
    ] {
        assert!(story.contains(line), "{line}\n{story}");
    }
    for port in [18894, 18895] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "the journey's end killed the broker on {port}"
        );
    }
}
