//! What a new user hits first (issue 27), against the real binaries: `gridctl fmt`,
//! `inspect hosts` and `down`; `check` refusing topologies that can never run; messages
//! that name the real problem (a saved plan for another state, a truncated plan, an
//! input that is not a number, a non-ASCII name, a model run in a directory that is not
//! an instance, a retired model); output floods capped; `up`'s children dying with it
//! and strays refused; a host with `dir=` started through its link; gridd ending on
//! SIGTERM when nobody reads its stderr.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{KillOnDrop, gridctl, gridctl_code};

/// How long a process given a signal may take to end.
const END_TIMEOUT: Duration = Duration::from_secs(20);

fn solo(port: u16) -> String {
    format!(
        "grid version=1\nhost solo listen=\"127.0.0.1:{port}\"\nmodel counter host=solo {{\n    input n default=4\n    cell twice \"n * 2\"\n}}\n"
    )
}

/// Waits (bounded) until process `pid` no longer exists.
fn gone(pid: i32) -> bool {
    let started = Instant::now();
    while started.elapsed() < END_TIMEOUT {
        // SAFETY: signal 0 only asks whether the process exists.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn fmt_rewrites_only_layout_and_check_says_which_files_would_change() {
    let dir = common::work_dir("first-fmt");
    let messy = "grid  version=1\nhost solo   listen=\"127.0.0.1:7301\"{\n profiles   transport // a comment\n      member ops\n}\nmembership ops\n";
    std::fs::write(dir.join("t.kdl"), messy).unwrap();
    std::fs::write(dir.join("bad.kdl"), "host {").unwrap();
    let (code, text) = gridctl_code(&dir, &["fmt", "t.kdl", "--check"]);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("t.kdl is not in canonical layout"), "{text}");
    assert_eq!(std::fs::read_to_string(dir.join("t.kdl")).unwrap(), messy);
    // A file that is not KDL: nothing is rewritten, the good one included.
    let (code, text) = gridctl_code(&dir, &["fmt", "t.kdl", "bad.kdl"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("nothing was rewritten"), "{text}");
    assert_eq!(std::fs::read_to_string(dir.join("t.kdl")).unwrap(), messy);
    let (ok, text) = gridctl(&dir, &["fmt", "t.kdl"]);
    assert!(ok, "{text}");
    let formatted = std::fs::read_to_string(dir.join("t.kdl")).unwrap();
    assert_eq!(
        formatted,
        "grid version=1\nhost solo listen=\"127.0.0.1:7301\" {\n    profiles transport // a comment\n    member ops\n}\nmembership ops\n"
    );
    let (code, text) = gridctl_code(&dir, &["fmt", "t.kdl", "--check"]);
    assert_eq!(code, Some(0), "{text}");
    let (ok, text) = gridctl(&dir, &["check", "t.kdl"]);
    assert!(ok, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_refuses_topologies_that_can_never_run_naming_them() {
    let dir = common::work_dir("first-check");
    std::fs::write(
        dir.join("t.kdl"),
        "grid version=1\nhost lonely listen=\"127.0.0.1:7302\" {\n    profiles transport\n}\n",
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["check", "t.kdl"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("host `lonely` selects `transport`")
            && text.contains("member of no membership"),
        "{text}"
    );
    // A mission whose deadline has passed, refused on its `deadline=` (gridctl knows
    // the time); once it says `returned=#true` it is a record, not a request.
    let mission = |returned: &str| {
        format!(
            "grid version=1\nmembership ops {{\n    authority voters=1\n}}\n\
             host edge listen=\"127.0.0.1:7303\" {{\n    member ops\n    profiles transport authority processes missions\n}}\n\
             host site listen=\"127.0.0.1:7304\" {{\n    member ops\n    profiles transport authority processes\n}}\n\
             grant g issuer=site caller=edge units=10\n\
             mission dawn {returned}host=edge units=2 deadline=\"2020-01-01T00:00:00Z\" successor=site\n"
        )
    };
    std::fs::write(dir.join("m.kdl"), mission("")).unwrap();
    let (code, text) = gridctl_code(&dir, &["check", "m.kdl"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("mission `dawn`: its deadline 2020-01-01T00:00:00Z has passed"),
        "{text}"
    );
    assert!(text.contains("deadline=\"2020-01-01T00:00:00Z\""), "{text}");
    std::fs::write(dir.join("m.kdl"), mission("returned=#true ")).unwrap();
    let (ok, text) = gridctl(&dir, &["check", "m.kdl"]);
    assert!(ok, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn messages_name_the_real_problem_and_cap_what_they_quote() {
    let dir = common::work_dir("first-messages");
    // `input` has no `--set`.
    let (code, text) = gridctl_code(&dir, &["input", "oven", "limit=hot", "--op", "i1"]);
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("input `limit=hot`: `hot` is not a number"),
        "{text}"
    );
    assert!(!text.contains("--set"), "{text}");
    // Non-ASCII names: which characters names allow.
    std::fs::write(
        dir.join("u.kdl"),
        "grid version=1\nhost héllo listen=\"127.0.0.1:7305\"\n",
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["check", "u.kdl"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("ASCII"), "{text}");
    // A 1 MB formula: the diagnostics quote a window of it, not all of it.
    let formula = "n + ".repeat(250_000) + "+";
    std::fs::write(
        dir.join("big.kdl"),
        format!(
            "grid version=1\nhost solo listen=\"127.0.0.1:7306\"\nmodel m host=solo {{\n    input n default=0\n    cell c \"{formula}\"\n}}\n"
        ),
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["check", "big.kdl"]);
    assert_eq!(code, Some(1), "{}", &text[..text.len().min(2_000)]);
    assert!(
        text.len() < 64 * 1024,
        "{} bytes of diagnostics for one formula",
        text.len()
    );
    // `model run --dir` of something that is not an instance.
    std::fs::write(dir.join("t.kdl"), solo(7307)).unwrap();
    let (code, text) = gridctl_code(
        &dir,
        &[
            "model",
            "run",
            "t.kdl",
            "--model",
            "counter",
            "--dir",
            "/etc/passwd",
        ],
    );
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("/etc/passwd is not a model instance directory: it is not a directory"),
        "{text}"
    );
    assert!(!text.contains("permissions"), "{text}");
    // A very long operation id is never echoed back whole.
    let op = "x".repeat(10_000);
    let (code, text) = gridctl_code(&dir, &["input", "counter", "n=1", "--op", &op]);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.len() < 2_000, "{} bytes", text.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_saved_plan_applies_only_to_its_own_state_and_a_truncated_one_is_named() {
    let dir = common::work_dir("first-planfile");
    std::fs::write(dir.join("t.kdl"), solo(7308)).unwrap();
    let (ok, text) = gridctl(&dir, &["plan", "t.kdl", "--state", "a", "--out", "p.plan"]);
    assert!(ok, "{text}");
    let saved = std::fs::read_to_string(dir.join("p.plan")).unwrap();
    let absolute = dir.join("a").display().to_string();
    assert!(
        saved.contains(&absolute),
        "the saved state is absolute: {saved}"
    );
    let (code, text) = gridctl_code(&dir, &["reconcile", "p.plan", "--state", "b"]);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains(&absolute) && text.contains('b'), "{text}");
    assert!(!dir.join("a").exists() && !dir.join("b").exists(), "{text}");
    // Truncated: not a readable saved plan (never "the topology has errors").
    std::fs::write(dir.join("cut.plan"), &saved[..saved.len() / 2]).unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "cut.plan"]);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("not a readable saved plan"), "{text}");
    assert!(!text.contains("the topology has"), "{text}");
    // From another directory, the plan still applies to its own state.
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let (code, text) = gridctl_code(&elsewhere, &["reconcile", "../p.plan"]);
    assert_eq!(code, Some(5), "{text}");
    assert!(dir.join("a/hosts/solo/host.toml").exists(), "{text}");
    assert!(!elsewhere.join("grid-state").exists(), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn up_children_die_with_it_strays_are_refused_and_down_stops_them() {
    let dir = common::work_dir("first-up");
    std::fs::write(dir.join("t.kdl"), solo(7309)).unwrap();
    let mut up = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_gridctl"))
            .env_remove("CARGO")
            .current_dir(&dir)
            .args(["up", "t.kdl", "--seconds", "120"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(up.0.stdout.take().unwrap()).lines();
    let started = Instant::now();
    loop {
        let line = lines
            .next()
            .expect("up prints until the plan is empty")
            .unwrap();
        if line.starts_with("plan is empty") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "up did not settle"
        );
    }
    // inspect hosts: the host, its pid, its profiles and models.
    let (ok, text) = gridctl(&dir, &["inspect", "hosts", "--json"]);
    assert!(ok, "{text}");
    let hosts: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(hosts[0]["name"], "solo", "{text}");
    assert_eq!(hosts[0]["running"], true, "{text}");
    let pid = hosts[0]["pid"].as_i64().expect("a pid") as i32;
    assert!(
        hosts[0]["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "counter"),
        "{text}"
    );
    // kill -9 of up: its child gridd dies with it (PR_SET_PDEATHSIG).
    up.0.kill().unwrap();
    up.0.wait().unwrap();
    assert!(gone(pid), "gridd {pid} outlived its `up`");

    // A gridd started by hand is a stray to `up`: refused by name, never adopted.
    let host = dir.join("grid-state/hosts/solo");
    let mut stray = KillOnDrop(
        Command::new(common::gridd())
            .arg("--dir")
            .arg(&host)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_ready(&mut stray.0, &host).expect("gridd starts");
    let output = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .env_remove("CARGO")
        .current_dir(&dir)
        .args(["up", "t.kdl", "--seconds", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{text}");
    assert!(
        text.contains("already running, not started by this `up`: solo")
            && text.contains("gridctl down"),
        "{text}"
    );
    // down stops it, and retires nothing.
    let (ok, text) = gridctl(&dir, &["down"]);
    assert!(ok, "{text}");
    let status = stray.0.wait().unwrap();
    assert!(status.signal().is_some() || status.success(), "{status:?}");
    assert!(host.join("host.toml").exists());
    let (ok, text) = gridctl(&dir, &["inspect", "hosts"]);
    assert!(
        ok && text.contains("solo") && text.contains("not running"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_host_with_dir_starts_through_its_link_and_a_retired_model_is_named() {
    let dir = common::work_dir("first-dir");
    let elsewhere = dir.join("elsewhere");
    let text = solo(7310).replace(
        "listen=\"127.0.0.1:7310\"",
        &format!("listen=\"127.0.0.1:7310\" dir=\"{}\"", elsewhere.display()),
    );
    std::fs::write(dir.join("t.kdl"), &text).unwrap();
    let (code, out) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{out}");
    let link = dir.join("grid-state/hosts/solo");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The command reconcile prints: gridd --dir STATE/hosts/solo, through the link.
    let mut host = KillOnDrop(
        Command::new(common::gridd())
            .arg("--dir")
            .arg(&link)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    if common::wait_ready(&mut host.0, &link).is_err() {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut host.0.stderr.take().unwrap(), &mut err).unwrap();
        panic!("gridd refused its linked directory: {err}");
    }
    let (ok, out) = gridctl(&dir, &["reconcile", "t.kdl"]);
    assert!(ok, "{out}");
    std::fs::write(
        dir.join("t.kdl"),
        text.replace(
            "model counter host=solo",
            "model counter host=solo retired=#true",
        ),
    )
    .unwrap();
    let (ok, out) = gridctl(&dir, &["reconcile", "t.kdl"]);
    assert!(ok, "{out}");
    let (code, out) = gridctl_code(&dir, &["input", "counter", "n=1", "--op", "r1"]);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("model `counter` is retired"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gridd_ends_on_sigterm_when_nobody_reads_its_stderr() {
    let dir = common::work_dir("first-sigterm");
    std::fs::write(dir.join("t.kdl"), solo(7311)).unwrap();
    let (code, out) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{out}");
    let host = dir.join("grid-state/hosts/solo");
    // As `gridd --dir D 2>&1 | head -1`: read one line, then close the pipe.
    let mut gridd = KillOnDrop(
        Command::new(common::gridd())
            .arg("--dir")
            .arg(&host)
            .env("RUST_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = BufReader::new(gridd.0.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    drop(stderr);
    common::wait_ready(&mut gridd.0, &host).expect("gridd keeps serving");
    // Work that logs, written to the closed pipe.
    let (ok, out) = gridctl(&dir, &["reconcile", "t.kdl"]);
    assert!(ok, "{out}");
    assert!(Path::new(&host.join("control.sock")).exists());
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(gridd.0.id() as i32, libc::SIGTERM);
    }
    let started = Instant::now();
    let status = loop {
        if let Some(status) = gridd.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < END_TIMEOUT,
            "gridd still runs {END_TIMEOUT:?} after SIGTERM with its stderr closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_repositorys_topologies_are_in_canonical_layout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (code, text) = gridctl_code(root, &["fmt", "--check", "examples", "journeys/topologies"]);
    assert_eq!(code, Some(0), "run `gridctl fmt` on them:\n{text}");
}

#[test]
fn the_tariffs_example_checks_and_evaluates_as_docs_grdx_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (code, text) = gridctl_code(root, &["check", "examples/tariffs.kdl"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("1 mapping"), "{text}");
    let args = [
        "model",
        "eval",
        "examples/tariffs.kdl",
        "--model",
        "cost",
        "--matrix",
        "tariff=examples/tariffs.csv",
        "--set",
        "hour=18",
        "--set",
        "day=5",
        "--json",
    ];
    let (code, text) = gridctl_code(root, &args);
    assert_eq!(code, Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).expect(&text);
    // tariffs.csv: cell [h, d] = 0.10 + 0.01 h + 0.02 d; price = 1.2 × cell [18, 5].
    let price = json["price"].as_f64().expect(&text);
    assert!((price - 0.456).abs() < 1e-9, "{text}");
}

#[test]
fn the_shared_memberships_example_checks_as_docs_memberships_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (code, text) = gridctl_code(root, &["check", "examples/shared.kdl"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("3 hosts, 2 memberships, 1 model, 3 routes"),
        "{text}"
    );
    let (code, text) = gridctl_code(
        root,
        &[
            "model",
            "eval",
            "examples/shared.kdl",
            "--model",
            "boiler",
            "--set",
            "setpoint=90",
            "--json",
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).expect(&text);
    assert_eq!(json["out"].as_f64(), Some(135.0), "{text}");
}

#[test]
fn the_decisions_example_checks_as_docs_decisions_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let (code, text) = gridctl_code(root, &["check", "examples/decisions.kdl"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("4 grants") && text.contains("1 decision"),
        "{text}"
    );
}
