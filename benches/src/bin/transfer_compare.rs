//! Installation transfer beside `cp -a` and `sha256sum` (issue 33; BENCHMARKS.md,
//! "Installation transfer"): moving an installation of `--mib` MiB with Grid's
//! transfer (`grid_engine::store::transfer`: prepare, copy with every file synced,
//! verify by a manifest of both sides, activate, retire) beside the operator's
//! shell equivalent — `cp -a SOURCE DEST` then `sha256sum` of every copied file — in
//! one run, the two alternating round by round on the same files.
//!
//! ```text
//! cargo run --release -p grid-benches --no-default-features --bin transfer_compare \
//!     [-- --mib 100 --rounds 3]          # --mib 1024: the opt-in 1 GB run
//! ```
//!
//! The installation is synthetic but shaped like one: a `store/` of 8 MiB table files
//! (the bulk), an `archive/` of 1 MiB segments, small `keys/` files; the bytes are
//! pseudo-random (nothing compresses). Both paths read it from the page cache after the
//! first round. Reported: each path's median wall time and MB/s, and Grid / shell.
//! Grid also fsyncs every file and hashes both sides; `cp -a` syncs nothing, so a third
//! row adds `sync` of the copy's filesystem to the shell's time for context.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;

use grid_benches::procs::{Result, WorkDir, machine};
use grid_benches::report::Table;
use grid_engine::store::Failpoints;
use grid_engine::store::transfer::{self, TRANSFER_FILE};

#[derive(Parser, Debug)]
struct Args {
    /// The installation's size in MiB.
    #[arg(long, default_value_t = 100)]
    mib: usize,
    /// Rounds (each path once per round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Keep the work directory.
    #[arg(long)]
    keep: bool,
}

/// Writes `bytes` pseudo-random bytes (xorshift, seeded by `seed`) to `path`.
fn fill(path: &Path, bytes: usize, seed: u64) -> Result<()> {
    let mut state = seed | 1;
    let mut data = Vec::with_capacity(bytes);
    while data.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.extend_from_slice(&state.to_le_bytes());
    }
    data.truncate(bytes);
    std::fs::write(path, data).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// A synthetic installation of about `mib` MiB in `dir`.
fn installation(dir: &Path, mib: usize) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    for sub in ["store", "archive", "keys"] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir.join(sub))?;
    }
    const MIB: usize = 1 << 20;
    let archive = (mib / 10).max(1);
    let store = mib.saturating_sub(archive);
    for i in 0..store.div_ceil(8) {
        let size = (store - i * 8).min(8) * MIB;
        fill(&dir.join(format!("store/table-{i:04}")), size, i as u64)?;
    }
    for i in 0..archive {
        fill(
            &dir.join(format!("archive/segment-{i:06}")),
            MIB,
            1_000 + i as u64,
        )?;
    }
    for (i, key) in ["signing.key", "mail.key", "tls.key", "custody.toml"]
        .iter()
        .enumerate()
    {
        fill(&dir.join("keys").join(key), 200, 2_000 + i as u64)?;
    }
    fill(&dir.join("host.toml"), 300, 3_000)?;
    Ok(())
}

/// Grid's transfer of `source` to `destination`, then the source made transferable
/// again (its journal removed) for the next round.
fn grid(source: &Path, destination: &Path, round: usize) -> Result<Duration> {
    let started = Instant::now();
    let moved = transfer::transfer(
        source,
        destination,
        &format!("bench-{round}"),
        |_: &Path| Ok::<(), String>(()),
        &Failpoints::default(),
    )
    .map_err(|e| e.to_string())?;
    let took = started.elapsed();
    assert!(moved.files > 0 && !moved.already);
    std::fs::remove_file(source.join(TRANSFER_FILE))?;
    Ok(took)
}

/// `cp -a source destination` then `sha256sum` of every copied file (and `sync` when
/// asked): the times without and with it.
fn shell(source: &Path, destination: &Path) -> Result<(Duration, Duration)> {
    let started = Instant::now();
    let run = |command: &mut Command| -> Result<()> {
        let status = command.status()?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{command:?}: {status}").into())
        }
    };
    run(Command::new("cp").arg("-a").arg(source).arg(destination))?;
    run(Command::new("sh")
        .arg("-c")
        .arg("find \"$1\" -type f -print0 | xargs -0 sha256sum > /dev/null")
        .arg("sh")
        .arg(destination))?;
    let without = started.elapsed();
    run(Command::new("sync").arg("-f").arg(destination))?;
    Ok((without, started.elapsed()))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    let work = WorkDir::new("grid-transfer-bench", args.keep)?;
    let source: PathBuf = work.path.join("source");
    installation(&source, args.mib)?;
    println!(
        "transfer_compare: an installation of {} MiB, {} rounds; {}",
        args.mib,
        args.rounds,
        machine()
    );
    let (mut grids, mut shells, mut synced) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let (g, s) = (
            work.path.join(format!("grid-{round}")),
            work.path.join(format!("shell-{round}")),
        );
        // Alternate which goes first: each sees the same cache and background load.
        let (a, b) = if round % 2 == 0 {
            grids.push(grid(&source, &g, round)?);
            shell(&source, &s)?
        } else {
            let times = shell(&source, &s)?;
            grids.push(grid(&source, &g, round)?);
            times
        };
        shells.push(a);
        synced.push(b);
        std::fs::remove_dir_all(&g)?;
        std::fs::remove_dir_all(&s)?;
    }
    let (grid, shell, synced) = (median(grids), median(shells), median(synced));
    let rate = |d: Duration| format!("{:.0}", args.mib as f64 * 1.048_576 / d.as_secs_f64());
    let mut table = Table::new(
        &["path", "median wall", "MB/s", "÷ cp -a + sha256sum"],
        "lrrr",
    );
    table.row(vec![
        "Grid transfer (copy + fsync each file, manifest of both sides)".to_owned(),
        format!("{:.2} s", grid.as_secs_f64()),
        rate(grid),
        format!("{:.2}×", grid.as_secs_f64() / shell.as_secs_f64()),
    ]);
    table.row(vec![
        "`cp -a` + `sha256sum` of every file".to_owned(),
        format!("{:.2} s", shell.as_secs_f64()),
        rate(shell),
        "1.00×".to_owned(),
    ]);
    table.row(vec![
        "`cp -a` + `sha256sum` + `sync -f`".to_owned(),
        format!("{:.2} s", synced.as_secs_f64()),
        rate(synced),
        format!("{:.2}×", synced.as_secs_f64() / shell.as_secs_f64()),
    ]);
    table.print();
    Ok(())
}
