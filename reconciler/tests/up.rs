//! `gridctl up` end to end: it creates the installation, starts a real `gridd`,
//! reconciles until the plan is empty, shows the owner's values, and leaves no host
//! running when `--seconds` elapse. A host with a profile it cannot run stops `up`
//! with the host's own refusal.

use std::path::PathBuf;
use std::process::Command;

use grid_engine::host::control::Client;

mod common;

fn work(name: &str) -> PathBuf {
    common::work_dir(&format!("up-{name}"))
}

#[test]
fn up_runs_hosts_until_the_plan_is_empty_then_stops_them() {
    let dir = work("counter");
    std::fs::write(
        dir.join("t.kdl"),
        "grid version=1\nhost solo listen=\"127.0.0.1:7461\"\nmodel counter host=solo {\n    input n default=4\n    cell twice \"n * 2\"\n}\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .current_dir(&dir)
        .args(["up", "t.kdl", "--state", "state", "--seconds", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("+ host solo @ solo: succeeded"), "{stdout}");
    assert!(
        stdout.contains("+ model counter @ solo: succeeded"),
        "{stdout}"
    );
    assert!(
        stdout.contains("plan is empty; 1 host(s) running"),
        "{stdout}"
    );
    assert!(
        stdout.contains("model counter @ solo: n=4 twice=8"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("stopped"), "{stdout}");
    let host = dir.join("state/hosts/solo");
    assert!(
        Client::connect(&host).is_err(),
        "gridd still answers after up returned"
    );

    // A second run finds everything in place: nothing to create.
    let output = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .current_dir(&dir)
        .args(["up", "t.kdl", "--state", "state", "--seconds", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        !stdout.contains("succeeded"),
        "nothing should be applied twice: {stdout}"
    );
    assert!(
        stdout.contains("model counter @ solo: n=4 twice=8"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn up_stops_with_the_refusal_of_a_host_that_cannot_run_its_profiles() {
    let dir = work("profiles");
    let plant = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/plant.kdl");
    let output = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .current_dir(&dir)
        .arg("up")
        .arg(&plant)
        .args(["--state", "state", "--seconds", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("profile `sources` cannot run"), "{stderr}");
    assert!(Client::connect(&dir.join("state/hosts/edge-a")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
