//! What one authority snapshot costs when the state machine holds what a long-running
//! group accumulates (issue 28): `--claims` claims each acquired and released (two
//! operations each), so the newest `ANSWERS_RETAINED_MAX` answers are retained and the
//! rest forgotten (their 8-byte digests kept), every claim released and kept in the
//! database. The state machine and its fjall database are the engine's own, driven
//! in-process (no Raft group, no network): the state is filled through `apply` in
//! entries of `--per-entry` operations, then one snapshot is built, and a second
//! voter with a database of its own installs it.
//!
//! ```text
//! cargo run --release -p grid-benches --no-default-features --bin authority_snapshot [-- --claims 1000000]
//! ```
//!
//! Printed per phase: wall time, the process's peak resident memory above what it
//! held when the phase began (`VmHWM`, reset with `/proc/self/clear_refs` before each
//! phase) and the snapshot file's size. Built against an older engine (the same file in
//! a checkout of it), it measures that engine the same way.

use std::path::Path;
use std::time::Instant;

use clap::Parser;
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload, LogId};

use grid_benches::procs::{Result, WorkDir, machine};
use grid_engine::authority::claims::Command;
use grid_engine::authority::log::LogStore;
use grid_engine::authority::machine::Machine;
use grid_engine::authority::types::{Entry, Proposal, Proposals};

#[derive(Parser, Debug)]
struct Args {
    /// Claims acquired and released (two operations each).
    #[arg(long, default_value_t = 1_000_000)]
    claims: u64,
    /// Operations per log entry.
    #[arg(long, default_value_t = 256)]
    per_entry: u64,
    /// Keep the work directory.
    #[arg(long)]
    keep: bool,
}

/// `(VmRSS, VmHWM)` of this process, in MiB.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// Resets `VmHWM` to the current resident size; the resident size then.
fn reset_peak() -> f64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    memory().0
}

fn snapshot_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_some_and(|x| x == "snapshot"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn entry(index: u64, proposals: Vec<Proposal>) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposals(proposals)),
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let work = WorkDir::new("gas", args.keep)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!("authority_snapshot: one snapshot of a state machine that has seen much");
    println!("machine: {}", machine());
    println!(
        "{} claims acquired and released ({} operations, {} per entry; ANSWERS_RETAINED_MAX {})",
        args.claims,
        2 * args.claims,
        args.per_entry,
        grid_engine::limits::ANSWERS_RETAINED_MAX
    );
    let log = LogStore::open(&work.path.join("log")).map_err(|e| e.to_string())?;
    let snapshots = work.path.join("snapshots");
    let mut voter = Machine::open(&snapshots, Some(log.database()), None)?;

    // Fill: acquire then release each claim.
    let before = reset_peak();
    let started = Instant::now();
    let mut index = 0;
    let mut pending = Vec::new();
    let ops = (0..args.claims).flat_map(|i| {
        let claim = format!("claim-{i:09}");
        [
            (
                format!("a-{i:09}"),
                Command::Acquire {
                    claim: claim.clone(),
                    caller: "a".to_owned(),
                },
            ),
            (
                format!("r-{i:09}"),
                Command::Release {
                    claim,
                    caller: "a".to_owned(),
                },
            ),
        ]
    });
    for (op, command) in ops {
        pending.push(Proposal { op, command });
        if pending.len() as u64 == args.per_entry {
            index += 1;
            let batch = std::mem::take(&mut pending);
            runtime
                .block_on(voter.apply(vec![entry(index, batch)]))
                .map_err(|e| e.to_string())?;
        }
    }
    if !pending.is_empty() {
        index += 1;
        runtime
            .block_on(voter.apply(vec![entry(index, pending)]))
            .map_err(|e| e.to_string())?;
    }
    let (_, peak) = memory();
    println!(
        "fill      {:>8.1} s   peak +{:>7.1} MiB   ({index} entries)",
        started.elapsed().as_secs_f64(),
        peak - before
    );

    // Build one snapshot.
    let before = reset_peak();
    let started = Instant::now();
    let built = runtime
        .block_on(async { voter.get_snapshot_builder().await.build_snapshot().await })
        .map_err(|e| e.to_string())?;
    let build_s = started.elapsed().as_secs_f64();
    let (_, peak) = memory();
    println!(
        "build     {:>8.1} s   peak +{:>7.1} MiB   file {:.1} MiB",
        build_s,
        peak - before,
        snapshot_bytes(&snapshots) as f64 / (1024.0 * 1024.0)
    );

    // Another voter installs it.
    let other_log = LogStore::open(&work.path.join("other-log")).map_err(|e| e.to_string())?;
    let mut other = Machine::open(
        &work.path.join("other-snapshots"),
        Some(other_log.database()),
        None,
    )?;
    let before = reset_peak();
    let started = Instant::now();
    runtime
        .block_on(other.install_snapshot(&built.meta, built.snapshot))
        .map_err(|e| e.to_string())?;
    let (_, peak) = memory();
    // fjall's memtables not yet flushed (an experimental, hidden fjall figure: read
    // here to explain the install's peak, nowhere in the engine).
    let unflushed = other_log.database().write_buffer_size();
    println!(
        "install   {:>8.1} s   peak +{:>7.1} MiB   fjall memtables unflushed at the end {:.1} MiB",
        started.elapsed().as_secs_f64(),
        peak - before,
        unflushed as f64 / (1024.0 * 1024.0)
    );
    drop((voter, other, log, other_log));
    drop(work);
    Ok(())
}
