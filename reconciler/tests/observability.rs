//! gridd's logs and metrics against the real binaries (see `docs/observability.md`):
//! with `--log-format json` every log line is a JSON object and an operation answered
//! names its id, kind and outcome; the host's `metrics=` address serves Prometheus
//! text whose operation counter and fsync histogram moved with the submit; SIGTERM is
//! logged as a shutdown and still ends gridd by that signal; a metrics address that is
//! not loopback is refused by `gridctl check` (a diagnostic naming `metrics`) and by
//! gridd at start.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

mod common;

const METRICS: &str = "127.0.0.1:17895";

use common::{KillOnDrop, gridctl, gridctl_code};

fn topology(metrics: &str) -> String {
    format!(
        "grid version=1\nhost solo listen=\"127.0.0.1:7895\" metrics=\"{metrics}\" {{ profiles sources; }}\n\
         model counter host=solo {{ input n default=0; cell twice \"n * 2\"; }}\n\
         tag temp host=solo {{ simulate wave=sine period-s=20 min=0 max=1 seed=1; }}\n"
    )
}

/// `GET /metrics` on plain HTTP/1.1: the response's status line and body.
fn scrape(address: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(address).expect("metrics are served");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The value of the series `series` (name and labels exactly) in Prometheus text.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn json_logs_name_operations_and_metrics_count_them() {
    let dir = common::work_dir("observability");
    std::fs::write(dir.join("t.kdl"), topology(METRICS)).unwrap();
    // The installation; the model waits for the host to run (exit 5).
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let host_dir = dir.join("grid-state/hosts/solo");
    let config = std::fs::read_to_string(host_dir.join("host.toml")).unwrap();
    assert!(
        config.contains(&format!("metrics = \"{METRICS}\"")),
        "{config}"
    );

    let log = dir.join("solo.log");
    // Killed when the test ends, also on a failed assertion (a gridd left running
    // would hold the test's output open).
    let mut host = KillOnDrop(
        Command::new(common::gridd())
            .arg("--dir")
            .arg(&host_dir)
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    common::wait_ready(&mut host.0, &host_dir).expect("gridd starts");
    let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]); // installs counter and temp
    assert!(ok, "{text}");
    let (ok, text) = gridctl(&dir, &["input", "counter", "n=3", "--op", "obs-b1"]);
    assert!(ok, "{text}");
    let (ok, text) = gridctl(
        &dir,
        &["storage", "checkpoint", "--host", "solo", "--op", "obs-c1"],
    );
    assert!(ok, "{text}");

    let (status, body) = scrape(METRICS);
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(
        value(
            &body,
            "grid_operations_total{kind=\"input\",outcome=\"succeeded\"}"
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value(
            &body,
            "grid_operations_total{kind=\"install-model\",outcome=\"succeeded\"}"
        ),
        Some(1.0),
        "{body}"
    );
    assert!(
        value(&body, "grid_fsync_seconds_count").is_some_and(|n| n > 0.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "grid_batches_applied_total"),
        Some(1.0),
        "{body}"
    );
    // A tag's held series: its outstanding debt (a simulated tag never has any) and no
    // connection (only adapters report one).
    assert_eq!(
        value(&body, "grid_tag_outstanding_debt{tag=\"temp\"}"),
        Some(0.0),
        "{body}"
    );
    assert!(!body.contains("grid_tag_connection{"), "{body}");
    // The store's held series: its acknowledged writes, journal and tables, and the
    // model's checkpoint at its one batch, which it purged.
    assert!(
        value(&body, "grid_store_acknowledged_writes").is_some_and(|n| n >= 3.0),
        "{body}"
    );
    assert!(
        value(&body, "grid_store_journal_bytes").is_some_and(|n| n > 0.0),
        "{body}"
    );
    assert!(
        value(&body, "grid_store_table_bytes{keyspace=\"operations\"}").is_some(),
        "{body}"
    );
    // The archive (its own files) keeps up: nothing waits past the hot window.
    assert_eq!(value(&body, "grid_archive_failing"), Some(0.0), "{body}");
    assert_eq!(
        value(&body, "grid_archive_lag_seconds"),
        Some(0.0),
        "{body}"
    );
    assert_eq!(
        value(
            &body,
            "grid_checkpoint_position{room=\"model\",name=\"counter\"}"
        ),
        Some(1.0),
        "{body}"
    );
    assert!(
        value(
            &body,
            "grid_checkpoint_age_seconds{room=\"model\",name=\"counter\"}"
        )
        .is_some_and(|s| (0.0..60.0).contains(&s)),
        "{body}"
    );
    assert_eq!(
        value(&body, "grid_checkpoint_purged_entries_total"),
        Some(1.0),
        "{body}"
    );

    // SIGTERM: logged as a shutdown, and gridd still ends by that signal.
    let killed = Command::new("kill")
        .args(["-TERM", &host.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = host.0.wait().unwrap();
    assert_eq!(status.signal(), Some(15), "{status:?}");

    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let answered = events
        .iter()
        .find(|e| e["op"] == "obs-b1")
        .unwrap_or_else(|| panic!("no event names operation obs-b1:\n{text}"));
    assert_eq!(answered["message"], "operation answered", "{answered}");
    assert_eq!(answered["kind"], "input", "{answered}");
    assert_eq!(answered["outcome"], "succeeded", "{answered}");
    assert_eq!(answered["level"], "INFO", "{answered}");
    assert!(
        events
            .iter()
            .any(|e| e["message"] == "shutdown" && e["signal"] == "SIGTERM"),
        "no shutdown event:\n{text}"
    );

    // A metrics address that is not loopback: gridd refuses to start, naming it.
    let config = std::fs::read_to_string(host_dir.join("host.toml")).unwrap();
    std::fs::write(
        host_dir.join("host.toml"),
        config.replace(METRICS, "0.0.0.0:17895"),
    )
    .unwrap();
    let output = Command::new(common::gridd())
        .arg("--dir")
        .arg(&host_dir)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("metrics = \"0.0.0.0:17895\" is not a loopback address"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_refuses_a_metrics_address_that_is_not_loopback() {
    let dir = common::work_dir("observability-check");
    std::fs::write(dir.join("t.kdl"), topology("192.0.2.7:9100")).unwrap();
    let (ok, text) = gridctl(&dir, &["check", "t.kdl"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("`metrics` address `192.0.2.7:9100` is not a loopback address"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
