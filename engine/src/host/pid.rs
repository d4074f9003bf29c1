//! `DIR/gridd.pid` (0600): the process id of the gridd serving the installation,
//! written once that gridd holds the store's lock and removed at a clean shutdown.
//!
//! Invariant: the file is never trusted alone. The store's lock says whether a gridd
//! serves the installation; the file only names that gridd when the lock is taken (a
//! stale file, left by a gridd that was killed, is ignored unless its process lives).

use std::path::Path;

/// The pid file inside a host installation.
pub const PID_FILE: &str = "gridd.pid";

/// Records this process as the one serving `dir` (called once it holds the store's
/// lock).
pub(super) fn write(dir: &Path) -> Result<(), super::HostError> {
    crate::custody::write_private(
        &dir.join(PID_FILE),
        format!("{}\n", std::process::id()).as_bytes(),
    )
    .map_err(|e| super::HostError::Config {
        path: dir.join(PID_FILE),
        reason: e.to_string(),
    })
}

/// Removes `dir`'s pid file at a clean shutdown of the gridd serving it (a missing
/// file is fine: nothing to remove).
pub fn remove(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(PID_FILE));
}

/// The pid `dir`'s pid file names, when that process is alive and is not this one:
/// to name the gridd holding the store's lock.
pub(super) fn holder(dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let raw = libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)?;
    if pid == std::process::id() {
        return None;
    }
    // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
    let alive = unsafe { libc::kill(raw, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    alive.then_some(pid)
}
