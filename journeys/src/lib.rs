//! Grid's journeys harness (SPEC §5).
//!
//! A journey is a KDL file that names a topology and scripts steps — reconcile, start,
//! kill (also at a named crash point), lose a reply, send input — against **real**
//! `gridctl` and `gridd` processes, stating what must still hold. [`run_file`] runs one
//! journey in a fresh temporary state directory, prints a readable story of each step
//! as it runs, kills every `gridd` it started (also on failure or panic), removes the
//! directory on success and keeps it on failure. A failure names the step (its number
//! and KDL text), the expectation and what was observed.
//!
//! The harness drives the binaries as black boxes: it never links reconciler or engine
//! code. Every wait is bounded by a named constant ([`HOST_READY_TIMEOUT`],
//! [`STEP_TIMEOUT`], [`HOST_EXIT_TIMEOUT`]).
//!
//! Steps implement [`step::Step`] and live in [`steps`], one module per family, found by
//! node name through one registry; adding a step never touches the parser or the
//! runner. The real protocol peers steps start (a `mosquitto` broker, the Python Modbus
//! device and Sparkplug edge node of `adapters/peers/`) are owned by [`peers`], which
//! kills them all when the journey ends, like the `gridd` children. The invariants
//! steps check — runs once, units conserved, delivered once in order, receipts verify,
//! answers unchanged, one owner per epoch, a tag source's state — are [`oracles`], one
//! file each, shared by every step that checks one. Beside them: `network.rs` (the
//! namespaces, veths and bridge of partitions), `disks.rs` (the small disks of
//! `small-disk`, filled and freed), `seeded.rs` (the generator of seeded
//! cycles), [`limits`] (the harness's bounds), [`junit`] (JUnit XML reports of the
//! journeys run). The language is documented in `docs/journeys.md`.

mod context;
mod disks;
mod error;
pub mod junit;
pub mod limits;
mod network;
pub mod oracles;
mod parse;
pub mod peers;
mod process;
mod runner;
mod seeded;
pub mod step;
pub mod steps;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use context::{CONTROL_SOCKET, Context, FAILPOINTS_ENV};
pub use error::{Failure, JourneyError, ParseFailure, StepFailure};
pub use parse::{Journey, StepEntry, parse_file, parse_str};
pub use peers::{PEER_ANSWER_TIMEOUT, PEER_READY_TIMEOUT, PEER_STOP_TIMEOUT};
pub use process::CommandOutput;
pub use step::{Node, ParseCx, ParseError};

/// How long a started `gridd` may take until its control socket accepts a connection.
pub const HOST_READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one `gridctl` command of a step may run before it is killed and the step fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a `gridd` may take to exit: after SIGKILL, or after it was armed to abort at
/// a crash point that a step has reached.
pub const HOST_EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often waits poll a process or a socket.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The two binaries a journey drives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    pub gridctl: PathBuf,
    pub gridd: PathBuf,
}

impl Binaries {
    /// `gridctl` is `exe`; `gridd` is the binary of that name in the same directory
    /// (cargo builds both into one target directory).
    pub fn beside(exe: &Path) -> Binaries {
        let dir = exe.parent().unwrap_or(Path::new("."));
        Binaries {
            gridctl: exe.to_path_buf(),
            gridd: dir.join(format!("gridd{}", std::env::consts::EXE_SUFFIX)),
        }
    }

    /// Both binaries exist, or a message saying which is missing and how to build it.
    pub fn check(&self) -> Result<(), JourneyError> {
        for (name, path) in [("gridctl", &self.gridctl), ("gridd", &self.gridd)] {
            if !path.is_file() {
                return Err(JourneyError::Setup(format!(
                    "{name} not found at {} — build it with `cargo build --bin {name}`",
                    path.display()
                )));
            }
        }
        Ok(())
    }
}

/// What a passed journey did.
#[derive(Debug, Clone)]
pub struct Report {
    pub title: String,
    pub path: PathBuf,
    /// Top-level steps run (all of them, since the journey passed).
    pub steps: usize,
    /// `gridctl` commands and `gridd` processes started.
    pub commands: usize,
    pub hosts_started: usize,
    pub elapsed: Duration,
}

/// Parses and runs one journey file, writing its story to `out` as it goes.
pub fn run_file(
    path: &Path,
    binaries: &Binaries,
    out: &mut dyn Write,
) -> Result<Report, JourneyError> {
    let journey = parse_file(path)?;
    binaries.check()?;
    run(&journey, binaries, out)
}

/// Runs a parsed journey (see [`run_file`]).
pub fn run(
    journey: &Journey,
    binaries: &Binaries,
    out: &mut dyn Write,
) -> Result<Report, JourneyError> {
    let started = Instant::now();
    let mut cx = Context::new(&journey.path, &journey.title, binaries, out)?;
    let result = runner::run_steps(&mut cx, journey);
    let (commands, hosts_started) = cx.counts();
    let work = cx.work_dir().to_path_buf();
    // Kills every gridd this journey started before the directory is removed or kept.
    let out = cx.finish();
    match result {
        Ok(()) => {
            let elapsed = started.elapsed();
            let _ = writeln!(
                out,
                "passed: {} steps, {} commands, {} gridd processes in {:.1} s",
                journey.steps.len(),
                commands,
                hosts_started,
                elapsed.as_secs_f64()
            );
            if let Err(error) = std::fs::remove_dir_all(&work) {
                let _ = writeln!(out, "(could not remove {}: {error})", work.display());
            }
            Ok(Report {
                title: journey.title.clone(),
                path: journey.path.clone(),
                steps: journey.steps.len(),
                commands,
                hosts_started,
                elapsed,
            })
        }
        Err(failure) => {
            let _ = writeln!(out, "FAILED — work directory kept: {}", work.display());
            Err(JourneyError::Step(failure))
        }
    }
}
