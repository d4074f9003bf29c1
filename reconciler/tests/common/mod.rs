//! Helpers shared by the reconciler's integration tests (each test file uses a part).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// How long a started gridd may take to answer on its control socket.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A fresh work directory for this test process, named `grid-NAME-PID`.
pub fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grid-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `gridd`, built beside `gridctl` by `cargo test`.
pub fn gridd() -> PathBuf {
    let gridd = PathBuf::from(env!("CARGO_BIN_EXE_gridctl")).with_file_name("gridd");
    assert!(gridd.exists(), "build gridd too: cargo build --bin gridd");
    gridd
}

/// Waits until the gridd `child` serving `host_dir` answers on its control socket;
/// `Err` with its exit status when it exits instead.
pub fn wait_ready(child: &mut Child, host_dir: &Path) -> Result<(), std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Err(status);
        }
        if std::os::unix::net::UnixStream::connect(host_dir.join("control.sock")).is_ok() {
            return Ok(());
        }
        assert!(started.elapsed() < READY_TIMEOUT, "gridd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child process killed (and reaped) when the test ends, also when it panics: no
/// gridd outlives the test that started it.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `gridctl ARGS…` in `dir`: its exit code and its stdout then stderr.
pub fn gridctl_code(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gridctl"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

/// `gridctl ARGS…` in `dir`: whether it exited 0, and its output.
pub fn gridctl(dir: &Path, args: &[&str]) -> (bool, String) {
    let (code, text) = gridctl_code(dir, args);
    (code == Some(0), text)
}

/// Starts gridd on `host_dir`, its stderr in `log`: `Ok` once it serves, `Err(stderr)`
/// when it exits first (never successfully).
pub fn start_gridd(host_dir: &Path, log: &Path) -> Result<KillOnDrop, String> {
    start_gridd_with(host_dir, log, &[])
}

/// [`start_gridd`] with environment variables (`GRID_FAILPOINTS`, …).
pub fn start_gridd_with(
    host_dir: &Path,
    log: &Path,
    env: &[(&str, &str)],
) -> Result<KillOnDrop, String> {
    let child = std::process::Command::new(gridd())
        .arg("--dir")
        .arg(host_dir)
        .envs(env.iter().copied())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    match wait_ready(&mut child.0, host_dir) {
        Ok(()) => Ok(child),
        Err(status) => {
            assert!(!status.success(), "{status}");
            Err(std::fs::read_to_string(log).unwrap())
        }
    }
}

/// Copies `from` to `to` as `cp -a` does (a store copied while its gridd is stopped).
pub fn copy_tree(from: &Path, to: &Path) {
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        copied.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}
