//! gridctl as a Unix tool and as a new user meets it: a file no parser can crash it on,
//! closed pipes, profiles this build lacks, a `--state` that is not a directory,
//! `GRID_STATE`, completions, `--version`, `check --json`. Each test runs the real
//! binary as a child process.

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

fn text(bytes: &[u8]) -> String {
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
    let stderr = text(&output.stderr);
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
