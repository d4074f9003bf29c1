//! A second gridd on an installation another gridd serves (issue 15 §2): it refuses
//! to start, saying another gridd serves it and naming that gridd's pid, instead of
//! the store's bare `FjallError: Locked`; the first gridd keeps serving, and its pid
//! file (`DIR/gridd.pid`, 0600) names it. Two real gridd processes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started gridd may take to answer on its control socket.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

fn installation(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grid-served-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    grid_engine::store::ensure_private_dir(&dir).unwrap();
    let config = grid_engine::config::HostConfig {
        name: "solo".to_owned(),
        listen: "127.0.0.1:7689".to_owned(),
        profiles: Vec::new(),
        metrics: None,
        control_viewers: Vec::new(),
        capacity: Default::default(),
        membership_capacity: Default::default(),
        retain: Default::default(),
        archive: None,
        archive_leaving: None,
        archive_index_leaving: None,
        snapshots: Default::default(),
        storage_claim: None,
        control: None,
    };
    grid_engine::custody::write_private(
        &dir.join(grid_engine::config::HOST_CONFIG_FILE),
        config.to_toml().as_bytes(),
    )
    .unwrap();
    grid_engine::custody::create(&dir).unwrap();
    dir
}

fn gridd(dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_gridd"))
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gridd runs")
}

fn wait_ready(child: &mut Child, dir: &Path) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the first gridd exited: {status}");
        }
        if std::os::unix::net::UnixStream::connect(dir.join("control.sock")).is_ok() {
            return;
        }
        assert!(started.elapsed() < READY_TIMEOUT, "gridd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_gridd_on_a_served_installation_names_the_first() {
    let dir = installation("second");
    let mut first = gridd(&dir);
    wait_ready(&mut first, &dir);
    let pid_file = dir.join("gridd.pid");
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        first.id().to_string()
    );
    assert_eq!(
        std::fs::metadata(&pid_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let second = gridd(&dir).wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    let _ = first.kill();
    let _ = first.wait();
    assert!(
        !second.status.success(),
        "the second gridd started: {stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "another gridd (pid {}) serves this installation",
            first.id()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("FjallError"), "{stderr}");
    // The first gridd was killed: its pid file stays, but is never trusted alone. A
    // gridd started now holds the lock and names itself.
    let mut again = gridd(&dir);
    wait_ready(&mut again, &dir);
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        again.id().to_string()
    );
    let _ = again.kill();
    let _ = again.wait();
    std::fs::remove_dir_all(&dir).unwrap();
}
