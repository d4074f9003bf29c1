//! `gridctl up` end to end: it creates the installation, starts a real `gridd`,
//! reconciles until the plan is empty, shows the live view (models, routes with
//! receipts verified, grants, authority), and leaves no host running when `--seconds`
//! elapse. A host with a profile it cannot run stops `up` with the host's own refusal.
//! The view's drawing is checked on its own, without hosts.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use grid_engine::host::control::Client;
use grid_reconciler::up::{
    AuthorityRow, DestinationRow, GrantRow, GrantUnits, ModelRow, Observed, RouteRow, render,
};

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
        .env_remove("CARGO")
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
        stdout.contains("\nmodels\n  counter  @ solo  n=4 twice=8\n"),
        "{stdout}"
    );
    for header in ["routes", "grants", "authority"] {
        assert!(
            stdout.contains(&format!("\n{header}\n  (none declared)\n")),
            "{stdout}"
        );
    }
    // Not a terminal: the view is printed once, as it did not change.
    assert_eq!(stdout.matches("\nmodels\n").count(), 1, "{stdout}");
    assert!(stdout.trim_end().ends_with("stopped"), "{stdout}");
    let host = dir.join("state/hosts/solo");
    assert!(
        Client::connect(&host).is_err(),
        "gridd still answers after up returned"
    );

    // A second run finds everything in place: nothing to create.
    let output = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .env_remove("CARGO")
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
        stdout.contains("  counter  @ solo  n=4 twice=8\n"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn up_stops_with_the_refusal_of_a_host_that_cannot_run_its_profiles() {
    let dir = work("profiles");
    // `missions` has not landed: its host refuses to start.
    let plant = dir.join("plant.kdl");
    std::fs::write(
        &plant,
        "grid version=1\nhost edge-a listen=\"127.0.0.1:7459\" { profiles missions; }\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .env_remove("CARGO")
        .current_dir(&dir)
        .arg("up")
        .arg(&plant)
        .args(["--state", "state", "--seconds", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("profile `missions` cannot run"), "{stderr}");
    assert!(Client::connect(&dir.join("state/hosts/edge-a")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two hosts, one authority, an encrypted route and a grant: the view shows each
/// section, and a value published while `up` runs shows up receipted and verified.
#[test]
fn up_shows_routes_receipts_grants_and_the_authority() {
    let dir = work("view");
    std::fs::write(
        dir.join("t.kdl"),
        r#"grid version=1
membership ops {
    authority voters=1
}
host a listen="127.0.0.1:7597" {
    member ops
    profiles transport authority delivery processes
}
host b listen="127.0.0.1:7598" {
    member ops
    profiles transport authority delivery processes
}
model boiler host=a {
    input temp_c default=80
    cell temp_f "temp_c * 9 / 5 + 32"
    output temp_f route="ops/temp_f"
}
route "ops/temp_f" membership=ops class=ordered encrypted=#true {
    publisher a
    destination b
}
grant b-on-a issuer=a caller=b units=10
"#,
    )
    .unwrap();
    let mut up = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .env_remove("CARGO")
        .current_dir(&dir)
        .args(["up", "t.kdl", "--state", "state", "--seconds", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    let stdout = up.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if lines.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let started = Instant::now();
    let mut wait_for = |want: &str| {
        while !seen.iter().any(|l: &String| l.contains(want)) {
            match received.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => seen.push(line),
                Err(_) => panic!(
                    "no line with `{want}` after {:?}:\n{}",
                    started.elapsed(),
                    seen.join("\n")
                ),
            }
        }
        seen.join("\n")
    };
    wait_for("plan is empty; 2 host(s) running");
    let input = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .env_remove("CARGO")
        .current_dir(&dir)
        .args([
            "input",
            "boiler",
            "temp_c=90",
            "--op",
            "v1",
            "--state",
            "state",
        ])
        .output()
        .unwrap();
    assert!(input.status.success(), "{input:?}");
    let text = wait_for("-> b  receipted through 1, signature verified; 0 outstanding");
    let text = text.split("plan is empty").nth(1).unwrap().to_owned();
    for want in [
        "\nmodels\n",
        "  boiler  @ a  temp_c=90 temp_f=194",
        "\nroutes\n",
        "  ops/temp_f  @ a   published through 1",
        "\ngrants\n",
        "  b-on-a  @ a for b  allocated 10 reserved 0 consumed 0 unknown 0 available 10",
        "\nauthority\n",
        "  ops  leader a (reported by a, b)  barrier ok (through a, read index ",
    ] {
        assert!(text.contains(want), "`{want}` missing:\n{text}");
    }
    let status = up.wait().unwrap();
    let rest: Vec<String> = received.iter().collect();
    assert!(status.success(), "{text}\n{}", rest.join("\n"));
    assert_eq!(rest.last().map(String::as_str), Some("stopped"), "{rest:?}");
    for host in ["a", "b"] {
        assert!(
            Client::connect(&dir.join("state/hosts").join(host)).is_err(),
            "gridd {host} still answers after up returned"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The drawing alone: aligned sections, one line per item, failures as one short
/// line.
#[test]
fn the_view_draws_aligned_sections_with_short_reasons() {
    let long = format!("cannot reach the host\n{}", "x".repeat(300));
    let observed = Observed {
        models: vec![
            ModelRow {
                model: "boiler".into(),
                host: "edge-a".into(),
                values: Ok(vec![
                    ("temp_c".into(), "90".into()),
                    ("over".into(), "#DIV/0!".into()),
                ]),
            },
            ModelRow {
                model: "m".into(),
                host: "site-b".into(),
                values: Err(long.clone()),
            },
        ],
        routes: vec![RouteRow {
            route: "plant/temp_f".into(),
            publisher: "edge-a".into(),
            published: Ok(7),
            destinations: vec![
                DestinationRow {
                    host: "site-b".into(),
                    retired: false,
                    receipted: Some(7),
                    outstanding: Some(0),
                    verified: Some(Ok(())),
                },
                DestinationRow {
                    host: "hq-c".into(),
                    retired: false,
                    receipted: Some(5),
                    outstanding: Some(2),
                    verified: Some(Err("bad signature".into())),
                },
                DestinationRow {
                    host: "x".into(),
                    retired: true,
                    receipted: None,
                    outstanding: None,
                    verified: None,
                },
            ],
        }],
        grants: vec![GrantRow {
            grant: "g".into(),
            issuer: "site-b".into(),
            caller: "hq-c".into(),
            units: Ok(Some(GrantUnits {
                allocated: 10,
                reserved: 1,
                consumed: 3,
                unknown: 1,
                surrendered: 0,
                available: 5,
            })),
        }],
        authorities: vec![AuthorityRow {
            membership: "plant-ops".into(),
            voters: vec![
                ("edge-a".into(), Ok(Some("site-b".into()))),
                ("site-b".into(), Ok(Some("site-b".into()))),
                ("hq-c".into(), Err("not running".into())),
            ],
            barrier: "unknown".into(),
            barrier_detail: long,
        }],
    };
    let text = render(&observed);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        &lines[..9],
        &[
            "models",
            "  boiler  @ edge-a  temp_c=90 over=#DIV/0!",
            &format!(
                "  m       @ site-b  unavailable: cannot reach the host {}…",
                "x".repeat(77)
            ),
            "routes",
            "  plant/temp_f  @ edge-a   published through 7",
            "                -> site-b  receipted through 7, signature verified; 0 outstanding",
            "                -> hq-c    receipted through 5, NOT VERIFIED: bad signature; 2 outstanding",
            "                -> x       no receipt yet; 0 outstanding (retired)",
            "grants",
        ],
        "{text}"
    );
    assert_eq!(
        lines[9],
        "  g  @ site-b for hq-c  allocated 10 reserved 1 consumed 3 unknown 1 available 5"
    );
    assert_eq!(lines[10], "authority");
    assert!(
        lines[11].starts_with(
            "  plant-ops  leader site-b (reported by edge-a, site-b) [hq-c: not running]  barrier unknown: cannot reach"
        ),
        "{text}"
    );
    assert_eq!(lines.len(), 12, "{text}");
    assert!(lines.iter().all(|l| l.chars().count() < 240), "{text}");
}
