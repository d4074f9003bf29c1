//! `gridctl up` end to end: it creates the installation, starts a real `gridd`,
//! reconciles until the plan is empty, shows the live view (models, routes with
//! receipts verified, grants, authority), and leaves no host running when `--seconds`
//! elapse. A host with a profile it cannot run stops `up` with the host's own refusal.
//! A child gridd killed while `up` runs is reported (how it ended, its log) and makes
//! `up` exit 1. A host fenced at the authority starts after the authority's hosts. The view's drawing and its screen (redrawn in place on a terminal,
//! appended only on change otherwise) are checked on their own, without hosts.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use grid_engine::host::control::Client;
use grid_reconciler::up::{
    AuthorityRow, DestinationRow, GrantRow, GrantUnits, HostRow, HostState, ModelRow, Observed,
    RouteRow, Screen, TagRow, render, render_hosts,
};

mod common;

fn work(name: &str) -> PathBuf {
    common::work_dir(&format!("up-{name}"))
}

/// `gridctl up FILE --state state --seconds 1` in `dir`.
fn up_for_a_second(dir: &std::path::Path, file: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .env_remove("CARGO")
        .current_dir(dir)
        .arg("up")
        .arg(file)
        .args(["--state", "state", "--seconds", "1"])
        .output()
        .unwrap()
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
    // Not a terminal: the view is printed once, as it did not change (the elapsed time
    // alone changing prints nothing).
    assert_eq!(stdout.matches("\nmodels\n").count(), 1, "{stdout}");
    assert_eq!(stdout.matches("\nhosts\n").count(), 1, "{stdout}");
    assert!(
        stdout.contains("\nup 0 s; 1 of 1 host(s) running; Ctrl-C stops them\nhosts\n  solo  pid "),
        "{stdout}"
    );
    assert!(stdout.contains("  127.0.0.1:7461  running\n"), "{stdout}");
    assert!(
        !stdout.contains('\x1b'),
        "no escape codes when not a terminal: {stdout}"
    );
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
    // The installed host is not running yet: its `!` line is explained as starting.
    assert!(
        stdout.contains("! host solo @ solo: unreachable"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nstarting: solo (installed, not running yet, hence unreachable above;"),
        "{stdout}"
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
    // `authority` without `transport` can never run: refused before any host starts.
    let plant = dir.join("plant.kdl");
    std::fs::write(
        &plant,
        "grid version=1\nmembership ops\nhost edge-a listen=\"127.0.0.1:7459\" { member ops; profiles authority; }\n",
    )
    .unwrap();
    let output = up_for_a_second(&dir, &plant);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("needs the `transport` profile"), "{stderr}");
    assert!(Client::connect(&dir.join("state/hosts/edge-a")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A host whose store is fenced at the authority (`storage authority="ops"`) asks it
/// before it serves: `up` starts it only after the authority's host runs and a round
/// bootstrapped the authority — its first start takes `store:edge` and the plan
/// becomes empty.
#[test]
fn up_starts_a_host_fenced_at_the_authority_after_the_authority_runs() {
    let dir = work("fenced");
    let plant = dir.join("plant.kdl");
    // The fenced host comes first in the files: `up` still starts it last.
    std::fs::write(
        &plant,
        "grid version=1
membership ops {
    authority voters=1
}
host edge listen=\"127.0.0.1:7464\" {
    member ops
    profiles transport
    storage generation=1 authority=\"ops\"
}
host hq listen=\"127.0.0.1:7463\" {
    member ops
    profiles transport authority
}
",
    )
    .unwrap();
    let output = up_for_a_second(&dir, &plant);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let at = |text: &str| {
        stdout
            .find(text)
            .unwrap_or_else(|| panic!("`{text}` not in: {stdout}"))
    };
    assert!(at("started host hq") < at("+ authority ops @ hq: succeeded"));
    assert!(at("+ authority ops @ hq: succeeded") < at("started host edge"));
    assert!(
        stdout.contains("plan is empty; 2 host(s) running"),
        "{stdout}"
    );
    let log = std::fs::read_to_string(dir.join("state/hosts/edge/gridd.log")).unwrap();
    assert!(
        log.contains("took `store:edge` at epoch 1 for storage generation 1"),
        "{log}"
    );
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
    let (mut up, mut lines) = spawn_up(&dir, 4);
    let mut wait_for = |want: &str| lines.wait_for(want);
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
    let rest: Vec<String> = lines.received.iter().collect();
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

/// `gridctl up t.kdl --state state --seconds SECONDS` in `dir`, its stdout read line by
/// line.
fn spawn_up(dir: &std::path::Path, seconds: u64) -> (std::process::Child, Lines) {
    let mut up = Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .env_remove("CARGO")
        .current_dir(dir)
        .args(["up", "t.kdl", "--state", "state", "--seconds"])
        .arg(seconds.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (sender, received) = std::sync::mpsc::channel();
    let stdout = up.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if sender.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let lines = Lines {
        received,
        seen: Vec::new(),
        started: Instant::now(),
    };
    (up, lines)
}

/// The lines `up` printed so far.
struct Lines {
    received: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
    started: Instant,
}

impl Lines {
    /// Reads until a line contains `want`; everything read so far.
    fn wait_for(&mut self, want: &str) -> String {
        while !self.seen.iter().any(|l| l.contains(want)) {
            match self.received.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!(
                    "no line with `{want}` after {:?}:\n{}",
                    self.started.elapsed(),
                    self.seen.join("\n")
                ),
            }
        }
        self.seen.join("\n")
    }

    /// Every line, up to the end of `up`'s output.
    fn rest(mut self) -> String {
        self.seen.extend(self.received.iter());
        self.seen.join("\n")
    }
}

/// A child gridd SIGKILLed while `up` runs: `up` says so at once with the path of its
/// log, the view shows it exited (printed again because it changed, not every refresh),
/// and `up` exits 1 at the end.
#[test]
fn up_reports_a_host_that_died_and_exits_non_zero() {
    let dir = work("died");
    std::fs::write(
        dir.join("t.kdl"),
        "grid version=1\nhost edge-a listen=\"127.0.0.1:7462\"\nmodel counter host=edge-a {\n    input n default=4\n    cell twice \"n * 2\"\n}\n",
    )
    .unwrap();
    let (mut up, mut lines) = spawn_up(&dir, 6);
    let text = lines.wait_for("  counter  @ edge-a  n=4 twice=8");
    let row = text
        .lines()
        .find(|l| l.starts_with("  edge-a  pid "))
        .unwrap_or_else(|| panic!("no host row:\n{text}"));
    let pid: i32 = row["  edge-a  pid ".len()..]
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {row:?}"));
    // SAFETY: kill(2) on the pid of the gridd `up` started (still its child, not reaped).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    // As `up` was told the state directory: relative to where it runs.
    let log = std::path::Path::new("state/hosts/edge-a/gridd.log");
    let exited = format!("edge-a exited (signal 9); its log: {}", log.display());
    lines.wait_for(&exited);
    let status = up.wait().unwrap();
    let text = lines.rest();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "  edge-a  pid {pid}  127.0.0.1:7462  exited (signal 9); its log: {}",
            log.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("  counter  @ edge-a  unavailable: not running"),
        "{text}"
    );
    assert!(
        text.contains(&format!("exited while up ran: {exited}\nstopped")),
        "{text}"
    );
    // Not a terminal: a frame only when the view changed — the first, the one after the
    // kill (and at most one caught between the kill and its report), never one per
    // refresh over the 6 s.
    let frames = text.matches("\nhosts\n").count();
    assert!((2..=3).contains(&frames), "{frames} frames:\n{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A terminal gets each changed frame in place: the cursor goes up over the previous
/// frame and erases it, never the whole screen; an unchanged frame writes nothing. Not a
/// terminal, the elapsed time alone changing writes nothing.
#[test]
fn the_screen_redraws_in_place_only_on_change() {
    let mut terminal = Screen::new(true);
    let mut out = Vec::new();
    terminal.show(&mut out, "up 0 s", "hosts\n  a\n");
    terminal.show(&mut out, "up 0 s", "hosts\n  a\n");
    assert_eq!(String::from_utf8_lossy(&out), "up 0 s\nhosts\n  a\n");
    out.clear();
    terminal.show(&mut out, "up 1 s", "hosts\n  a\n");
    assert_eq!(
        String::from_utf8_lossy(&out),
        "\x1b[3F\x1b[Jup 1 s\nhosts\n  a\n"
    );
    out.clear();
    terminal.note(&mut out, "a exited (signal 9)");
    terminal.show(&mut out, "up 1 s", "hosts\n  a exited\n");
    assert_eq!(
        String::from_utf8_lossy(&out),
        "\x1b[3F\x1b[Ja exited (signal 9)\nup 1 s\nhosts\n  a exited\n"
    );

    let mut plain = Screen::new(false);
    let mut out = Vec::new();
    plain.show(&mut out, "up 0 s", "hosts\n  a\n");
    plain.show(&mut out, "up 1 s", "hosts\n  a\n");
    plain.show(&mut out, "up 2 s", "hosts\n  a\n");
    plain.note(&mut out, "a exited (signal 9)");
    plain.show(&mut out, "up 3 s", "hosts\n  a exited\n");
    plain.show(&mut out, "up 4 s", "hosts\n  a exited\n");
    assert_eq!(
        String::from_utf8_lossy(&out),
        "up 0 s\nhosts\n  a\na exited (signal 9)\nup 3 s\nhosts\n  a exited\n"
    );
}

#[test]
fn the_hosts_section_shows_pid_address_and_how_a_host_ended() {
    let row = |host: &str, state| HostRow {
        host: host.into(),
        listen: "127.0.0.1:7401".into(),
        state,
        control: None,
    };
    let text = render_hosts(&[
        row("edge-a", HostState::Running { pid: Some(4242) }),
        HostRow {
            control: Some("http://127.0.0.1:7404/".into()),
            ..row("hq", HostState::Running { pid: Some(4244) })
        },
        row(
            "site-b",
            HostState::Exited {
                pid: 4243,
                how: "exited (signal 9)".into(),
                log: "state/hosts/site-b/gridd.log".into(),
            },
        ),
        row("hq-c", HostState::Running { pid: None }),
        row("d", HostState::NotRunning),
    ]);
    assert_eq!(
        text,
        "hosts\n  edge-a  pid 4242  127.0.0.1:7401  running\n  hq      pid 4244  127.0.0.1:7401  running; control plane http://127.0.0.1:7404/\n  site-b  pid 4243  127.0.0.1:7401  exited (signal 9); its log: state/hosts/site-b/gridd.log\n  hq-c    pid ?     127.0.0.1:7401  running (not started by up)\n  d       -         127.0.0.1:7401  not running\n"
    );
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
        tags: Vec::new(),
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

/// Tags get a section of their own: observations, the adapter's connection and the
/// debt outstanding, or why the host could not say.
#[test]
fn the_view_draws_tags_with_their_connection_and_debt() {
    let observed = Observed {
        tags: vec![
            TagRow {
                tag: "boiler-temp".into(),
                host: "edge-a".into(),
                state: Ok(Some(grid_engine::protocol::TagState {
                    name: "boiler-temp".into(),
                    tag: String::new(),
                    observations: 12,
                    debt: 2,
                    connection: Some("offline".into()),
                    retired: false,
                })),
            },
            TagRow {
                tag: "line-speed".into(),
                host: "edge-a".into(),
                state: Ok(None),
            },
        ],
        ..Observed::default()
    };
    let text = render(&observed);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        &lines[..5],
        &[
            "models",
            "  (none declared)",
            "tags",
            "  boiler-temp  @ edge-a  12 observation(s), offline, 2 debt outstanding",
            "  line-speed   @ edge-a  not installed yet",
        ]
    );
}
