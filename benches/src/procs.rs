//! Helpers of the side-by-side server benchmarks (`authority_compare`,
//! `delivery_compare`, `process_compare`): child processes that never outlive the benchmark, a work
//! directory that is removed afterwards, free loopback ports and CPU time from `/proc`.

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, Error>;

/// Started processes; dropping this SIGKILLs and reaps every one of them (also while a
/// panic unwinds). Each child also gets `PR_SET_PDEATHSIG = SIGKILL`, so a benchmark
/// that is itself killed takes its servers with it.
#[derive(Default)]
pub struct Procs {
    children: Vec<(String, Child, PathBuf)>,
}

impl Procs {
    /// Starts `command` (its stdout and stderr to `log`) under `name`.
    pub fn spawn(&mut self, name: &str, mut command: Command, log: &Path) -> Result<u32> {
        let file = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(|e| format!("starting {name} ({:?}): {e}", command.get_program()))?;
        let pid = child.id();
        self.children.push((name.to_owned(), child, log.to_owned()));
        Ok(pid)
    }

    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|(_, c, _)| c.id()).collect()
    }

    /// Fails, with the end of its log, when any process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        for (name, child, log) in &mut self.children {
            if let Some(status) = child.try_wait()? {
                return Err(format!(
                    "{name} exited ({status}); the end of {}:\n{}",
                    log.display(),
                    tail(log, 20)
                )
                .into());
            }
        }
        Ok(())
    }

    /// The pid of the process called `name`, if it was started.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.children
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, c, _)| c.id())
    }

    /// SIGKILLs the process called `name` and reaps it (it stays listed, exited:
    /// [`Procs::check_running`] reports it from then on).
    pub fn kill(&mut self, name: &str) -> Result<()> {
        let (_, child, _) = self
            .children
            .iter_mut()
            .find(|(n, _, _)| n == name)
            .ok_or_else(|| format!("no process {name}"))?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// SIGKILLs the process called `name`, reaps it and forgets it: a process started
    /// again under the name is the only one [`Procs::check_running`] watches.
    pub fn kill_and_forget(&mut self, name: &str) -> Result<()> {
        self.kill(name)?;
        self.children.retain(|(n, _, _)| n != name);
        Ok(())
    }

    /// The end of the log of the process called `name`.
    pub fn log_tail(&self, name: &str) -> String {
        self.children
            .iter()
            .find(|(n, _, _)| n == name)
            .map_or_else(String::new, |(_, _, log)| tail(log, 20))
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child, _) in &mut self.children {
            let _ = child.kill();
        }
        for (_, child, _) in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// Makes the child `command` starts get `PR_SET_PDEATHSIG = SIGKILL`: it dies with
/// the benchmark, also when the benchmark is itself killed.
pub fn die_with_parent(command: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The last `lines` lines of a file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A private directory under the system's temporary directory, with a short name (Unix
/// socket paths inside it are limited to ~108 bytes); removed on drop unless kept.
pub struct WorkDir {
    pub path: PathBuf,
    pub keep: bool,
}

impl WorkDir {
    /// `$TMPDIR/PREFIX-PID`.
    pub fn new(prefix: &str, keep: bool) -> Result<WorkDir> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(WorkDir { path, keep })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// `n` distinct free TCP ports on 127.0.0.1 (held together while chosen, so they
/// differ; another process could still take one before it is bound again).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    Ok(listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<Vec<_>>>()?)
}

/// User plus system CPU time of a process (`self` or a pid), from `/proc/PID/stat`.
pub fn cpu_time(pid: Option<u32>) -> Duration {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // The command name (field 2) may hold spaces: count fields after its ')'.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos((ticks(11) + ticks(12)) * 1_000_000_000 / hz)
}

/// The CPU time of several processes together.
pub fn cpu_time_of(pids: &[u32]) -> Duration {
    pids.iter().map(|&pid| cpu_time(Some(pid))).sum()
}

/// The nanoseconds a process's threads have spent on a CPU, summed: the first field of
/// every `/proc/PID/task/TID/schedstat` (the scheduler's own clock — fine enough for
/// one run, where `/proc/PID/stat`'s clock ticks are not). A thread that exited takes
/// its time with it, so a later reading may be smaller; `None` when the process is gone.
pub fn on_cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for task in tasks.flatten() {
        // A thread may exit between the listing and the read: it counts nothing.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        if let Some(ns) = stat
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    Some(total)
}

/// `target/release` beside this crate, or `$GRID_BIN_DIR`.
pub fn grid_bin_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("GRID_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release"),
    };
    for bin in ["gridd", "gridctl"] {
        if !dir.join(bin).is_file() {
            return Err(format!(
                "no {} — build it first: cargo build --release --bin gridd --bin gridctl \
                 (or set GRID_BIN_DIR)",
                dir.join(bin).display()
            )
            .into());
        }
    }
    Ok(dir)
}

/// The newest modification time of the files under `dir`.
pub fn newest(dir: &Path) -> Option<SystemTime> {
    let mut latest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let time = if path.is_dir() {
            newest(&path)
        } else {
            entry.metadata().ok().and_then(|m| m.modified().ok())
        };
        latest = latest.max(time);
    }
    latest
}

/// The number of CPUs and their model, for the report.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_default();
    format!("{cpus} CPUs ({model})")
}

/// Prints which `gridd` a benchmark runs, and a warning when `engine/src` changed after
/// it was built (a stale binary would measure old code).
pub fn report_gridd(bin_dir: &Path) -> Result<()> {
    let gridd = bin_dir.join("gridd").canonicalize()?;
    println!("gridd: {}", gridd.display());
    let built = std::fs::metadata(&gridd)?.modified()?;
    let sources = newest(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src"));
    if sources.is_some_and(|s| s > built) {
        println!(
            "WARNING: engine/src changed after gridd was built: \
             cargo build --release --bin gridd --bin gridctl"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_on_a_cpu_grows_with_work_and_is_none_for_no_process() {
        let pid = std::process::id();
        let before = on_cpu_ns(pid).expect("this process");
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = on_cpu_ns(pid).expect("this process");
        assert!(after > before, "{before} → {after}");
        // Pid 0 has no /proc entry.
        assert_eq!(on_cpu_ns(0), None);
    }
}
