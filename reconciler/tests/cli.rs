//! gridctl as a Unix tool and as a new user meets it: a file no parser can crash it on,
//! closed pipes, profiles this build lacks, a `--state` that is not a directory,
//! `GRID_STATE`, completions, `--version`, `check --json`, `model eval|run --matrix`.
//! Each test runs the real binary as a child process.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;

fn work(name: &str) -> PathBuf {
    common::work_dir(&format!("cli-{name}"))
}

fn gridctl(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gridctl"));
    command
        .current_dir(dir)
        .env_remove("CARGO")
        .env_remove("GRID_STATE")
        .stdin(Stdio::null());
    command
}

fn run(command: &mut Command) -> Output {
    command.output().unwrap()
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const BAD: &str = "grid version=1\nhost a listen=\"nowhere\"\nwidget w\n";
const GOOD: &str = "grid version=1\nhost a listen=\"127.0.0.1:7491\"\n";

#[test]
fn check_of_two_thousand_nested_blocks_is_a_diagnostic_not_a_crash() {
    let dir = work("nesting");
    let nested = format!(
        "grid version=1\n{}{}",
        "x {".repeat(2_000),
        "}".repeat(2_000)
    );
    std::fs::write(dir.join("deep.kdl"), &nested).unwrap();
    let output = run(gridctl(&dir).args(["check", "deep.kdl"]));
    let stderr = text_of(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{:?}\n{stderr}",
        output.status
    );
    assert!(
        stderr.contains("`{` blocks nest deeper than NESTING_DEPTH_MAX (32)"),
        "{stderr}"
    );
}

/// `gridctl ARGS` with stdout and stderr both on a pipe whose reader is already gone.
fn into_closed_pipe(dir: &Path, args: &[&str]) -> std::process::ExitStatus {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    gridctl(dir)
        .args(args)
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .status()
        .unwrap()
}

#[test]
fn a_closed_pipe_ends_gridctl_by_sigpipe_not_a_panic() {
    let dir = work("pipe");
    std::fs::write(dir.join("bad.kdl"), BAD).unwrap();
    std::fs::write(dir.join("good.kdl"), GOOD).unwrap();
    // Diagnostics on stderr; a result on stdout; an error on stderr.
    for args in [
        &["check", "bad.kdl"][..],
        &["check", "good.kdl"],
        &["status", "--host", "a", "--state", "nowhere"],
    ] {
        let status = into_closed_pipe(&dir, args);
        assert_eq!(
            status.signal(),
            Some(libc::SIGPIPE),
            "gridctl {args:?}: {status:?} (101 is a panic)"
        );
    }
    // clap's own help: no panic either.
    let status = into_closed_pipe(&dir, &["--help"]);
    assert_ne!(status.code(), Some(101), "{status:?}");
}

#[test]
fn check_refuses_a_profile_this_build_does_not_provide() {
    let dir = work("profiles");
    // Every profile the language names runs in this build (`control` was the last):
    // a name it does not know is refused on its span, with the list of those it runs.
    let text =
        "grid version=1\nhost a listen=\"127.0.0.1:7492\" {\n    profiles transport teleport\n}\n";
    std::fs::write(dir.join("t.kdl"), text).unwrap();
    for args in [
        &["check", "t.kdl"][..],
        &["plan", "t.kdl", "--state", "state"],
    ] {
        let output = run(gridctl(&dir).args(args));
        let stderr = text_of(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("teleport"), "{stderr}");
        // (miette wraps the help line on narrow terminals.)
        let help: String = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains("unknown profile `teleport`")
                && help.contains("profiles are: transport, authority, delivery, processes"),
            "{stderr}"
        );
    }
    assert!(
        !dir.join("state").exists(),
        "nothing planned, nothing created"
    );
}

#[test]
fn a_state_that_is_not_a_directory_is_refused_at_once() {
    let dir = work("state-file");
    std::fs::write(dir.join("t.kdl"), GOOD).unwrap();
    std::fs::write(dir.join("afile"), "").unwrap();
    let commands: [&[&str]; 5] = [
        &["plan", "t.kdl"],
        &["reconcile", "t.kdl"],
        &["up", "t.kdl"],
        &["status", "--host", "a"],
        &["authority", "snapshot", "ops", "--host", "a"],
    ];
    for args in commands {
        for state in ["afile", "afile/below"] {
            let output = run(gridctl(&dir).args(args).args(["--state", state]));
            let stderr = text_of(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{args:?} {state}: {stderr}");
            assert!(stderr.contains("is not a directory"), "{stderr}");
            assert!(stderr.contains("--state"), "{stderr}");
        }
        // The same from GRID_STATE.
        let output = run(gridctl(&dir).args(args).env("GRID_STATE", "afile"));
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn grid_state_sets_the_default_state_directory() {
    let dir = work("grid-state");
    std::fs::create_dir_all(dir.join("elsewhere/hosts/a")).unwrap();
    // `status` names the state directory it looked in.
    let output = run(gridctl(&dir)
        .args(["status", "--host", "b"])
        .env("GRID_STATE", "elsewhere"));
    let stderr = text_of(&output.stderr);
    assert!(stderr.contains("under elsewhere"), "{stderr}");
    // `--state` wins over the variable.
    let output = run(gridctl(&dir)
        .args(["status", "--host", "b", "--state", "mine"])
        .env("GRID_STATE", "elsewhere"));
    assert!(text_of(&output.stderr).contains("under mine"));
    // Help shows the variable.
    let help = run(gridctl(&dir).args(["plan", "--help"]));
    assert!(
        text_of(&help.stdout).contains("[env: GRID_STATE="),
        "{}",
        text_of(&help.stdout)
    );
}

#[test]
fn check_json_gives_diagnostics_as_data() {
    let dir = work("check-json");
    std::fs::write(dir.join("good.kdl"), GOOD).unwrap();
    let deep = format!("grid version=1\n{}", "x {".repeat(40));
    std::fs::write(dir.join("deep.kdl"), &deep).unwrap();
    std::fs::write(dir.join("bad.kdl"), BAD).unwrap();

    let output = run(gridctl(&dir).args(["check", "--json", "good.kdl"]));
    assert!(output.status.success());
    let valid: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(valid["ok"], true);
    assert_eq!(valid["hosts"], 1);

    let output = run(gridctl(&dir).args(["check", "--json", "deep.kdl"]));
    assert_eq!(output.status.code(), Some(1));
    let invalid: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(invalid["ok"], false);
    let offset = "grid version=1\n".len() + 3 * 32 + 2;
    assert_eq!(
        invalid["diagnostics"][0],
        serde_json::json!({
            "file": "deep.kdl",
            "span": {"offset": offset, "length": 1},
            "line": 2,
            "column": 3 * 32 + 3,
            "message": "`{` blocks nest deeper than NESTING_DEPTH_MAX (32)",
            "help": "Grid's files nest a few levels (a model's cells, a host's settings); close the blocks above this one",
            "limit": "NESTING_DEPTH_MAX",
        })
    );

    let output = run(gridctl(&dir).args(["check", "--json", "bad.kdl"]));
    assert_eq!(output.status.code(), Some(1));
    let invalid: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let messages: Vec<&str> = invalid["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["message"].as_str().unwrap())
        .collect();
    assert!(messages.contains(&"unknown node `widget`"), "{messages:?}");
    let widget = &invalid["diagnostics"].as_array().unwrap()[messages.len() - 1];
    assert_eq!(
        (widget["line"].clone(), widget["column"].clone()),
        (3.into(), 1.into())
    );
    assert_eq!(widget["limit"], serde_json::Value::Null);
    assert!(output.stderr.is_empty(), "{}", text_of(&output.stderr));
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    let dir = work("completions");
    for (shell, marker) in [
        ("bash", "complete -F _gridctl"),
        ("zsh", "#compdef gridctl"),
        ("fish", "complete -c gridctl"),
    ] {
        let output = run(gridctl(&dir).args(["completions", shell]));
        assert!(output.status.success(), "{shell}");
        let script = text_of(&output.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        // Subcommands and the flags they take (fish writes `-l state`) are completed.
        assert!(
            script.contains("reconcile") && script.contains("state"),
            "{shell}"
        );
    }
    let output = run(gridctl(&dir).args(["completions", "tcsh"]));
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn version_names_the_commit() {
    let dir = work("version");
    let output = run(gridctl(&dir).arg("--version"));
    assert!(output.status.success());
    let version = text_of(&output.stdout);
    let commit = Command::new("git")
        .args(["rev-parse", "--short=7", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text_of(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(
        version,
        format!("gridctl {} ({commit})\n", env!("CARGO_PKG_VERSION"))
    );
}

/// The tariff table of `valid/matrices.kdl` as CSV: `rows` × `cols`, cell [r, c] = 10r + c.
fn tariff_csv(rows: u32, cols: u32) -> String {
    (0..rows)
        .map(|r| {
            let line: Vec<String> = (0..cols).map(|c| (10 * r + c).to_string()).collect();
            line.join(", ") + "\n"
        })
        .collect()
}

/// The same table as GRDX bytes, written by hand from docs/grdx.md.
fn tariff_grdx(rows: u32, cols: u32) -> Vec<u8> {
    let mut out = b"GRDX\x01\x02\x00\x00".to_vec();
    out.extend_from_slice(&rows.to_le_bytes());
    out.extend_from_slice(&cols.to_le_bytes());
    for r in 0..rows {
        for c in 0..cols {
            out.extend_from_slice(&f64::from(10 * r + c).to_le_bytes());
        }
    }
    out
}

fn values(output: &Output) -> serde_json::Map<String, serde_json::Value> {
    assert!(
        output.status.success(),
        "{:?}\n{}",
        output.status,
        text_of(&output.stderr)
    );
    match serde_json::from_slice(&output.stdout).unwrap() {
        serde_json::Value::Object(map) => map,
        other => panic!("{other}"),
    }
}

#[test]
fn model_eval_and_run_take_a_whole_matrix_from_a_csv_or_grdx_file() {
    let dir = work("matrix");
    let topology =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/tests/data/valid/matrices.kdl");
    std::fs::write(dir.join("t.csv"), tariff_csv(24, 7)).unwrap();
    std::fs::write(dir.join("t.grdx"), tariff_grdx(24, 7)).unwrap();
    std::fs::write(dir.join("turned.csv"), tariff_csv(7, 24)).unwrap();
    std::fs::write(dir.join("nan.csv"), "1, 2\n3, NaN\n").unwrap();
    std::fs::write(dir.join("t.txt"), tariff_csv(24, 7)).unwrap();
    let eval = |extra: &[&str]| {
        run(gridctl(&dir)
            .args(["model", "eval"])
            .arg(&topology)
            .args(["--model", "cost", "--json"])
            .args(extra))
    };

    // No value applied yet: every read is #N/A; a matrix is not listed as a value.
    let before = values(&eval(&[]));
    assert_eq!(before["price"], "#N/A");
    assert!(!before.contains_key("tariff"), "{before:?}");

    for file in ["t.csv", "t.grdx"] {
        let matrix = format!("tariff={file}");
        let after = values(&eval(&[
            "--matrix", &matrix, "--set", "hour=3", "--set", "day=2",
        ]));
        assert_eq!(after["price"], 32.0 * 1.2, "{file}");
        assert_eq!(after["tomorrow"], 33.0, "{file}");
        // Outside the table: #REF!, never a panic.
        let outside = values(&eval(&["--matrix", &matrix, "--set", "hour=24"]));
        assert_eq!(outside["price"], "#REF!", "{file}");
    }

    for (entry, says) in [
        (
            "tariff=turned.csv",
            "matrix `tariff` is declared 24 × 7; the value given is 7 × 24",
        ),
        (
            "tariff=nan.csv",
            "nan.csv: line 2: `NaN` is not a finite number",
        ),
        (
            "tariff=t.txt",
            "t.txt: a matrix file ends in .grdx (GRDX bytes) or .csv",
        ),
        ("tariff=absent.csv", "absent.csv: cannot read it"),
        ("hour=t.csv", "`hour` is not a matrix of the model"),
        ("tariff", "--matrix `tariff` is not NAME=FILE"),
    ] {
        let refused = eval(&["--matrix", entry]);
        let stderr = text_of(&refused.stderr);
        assert!(!refused.status.success(), "{entry}");
        assert!(stderr.contains(says), "{entry}: {stderr}");
    }

    // A durable instance journals the matrix as one batch of its own and replays it.
    let instance = dir.join("instance");
    let run_model = |extra: &[&str]| {
        run(gridctl(&dir)
            .args(["model", "run"])
            .arg(&topology)
            .args(["--model", "cost", "--json", "--dir"])
            .arg(&instance)
            .args(extra))
    };
    let applied = values(&run_model(&[
        "--matrix",
        "tariff=t.grdx",
        "--set",
        "hour=1",
    ]));
    assert_eq!(applied["price"], 10.0 * 1.2);
    let recovered = values(&run_model(&["--set", "hour=23", "--set", "day=6"]));
    assert_eq!(recovered["price"], 236.0 * 1.2);
    assert_eq!(recovered["tomorrow"], 236.0);
    let refused = run_model(&["--matrix", "tariff=turned.csv"]);
    assert!(!refused.status.success());
    let unchanged = values(&run_model(&[]));
    assert_eq!(unchanged, recovered, "a refused matrix changes nothing");
}
