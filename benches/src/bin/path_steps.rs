//! The steps of the paths where one caller waits (issue 37; BENCHMARKS.md §24), each
//! timed alone on this machine with the engine's own code: an acknowledged write
//! (`Durable::persist`: the journal's fsync, then the high-water mark's), the journal's
//! fsync alone, asking a store's fsync thread (`Syncer::sync`, a thread switch each
//! way) beside a lone writer fsyncing on its own thread (`on_own_thread`), an Ed25519
//! signature and a strict verification, a task spawned on a runtime and awaited.
//!
//! ```text
//! cargo run --release -p grid-benches --no-default-features --bin path_steps [-- --samples 2000]
//! ```
//!
//! Each figure is the median of `--samples` timings (after as many unrecorded). The
//! store lives under `$TMPDIR`, as the comparison binaries' hosts do.

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use ed25519_dalek::{Signer as _, SigningKey};
use fjall::{Database, PersistMode};

use grid_benches::procs::{Result, WorkDir, machine};
use grid_benches::report::Table;
use grid_engine::store::commit::on_own_thread;
use grid_engine::store::high_water::{HighWater, Signer};
use grid_engine::store::{Durable, Failpoints, Syncer};

#[derive(Parser, Debug)]
struct Args {
    /// Timings per step (each step also runs as many times first, unrecorded).
    #[arg(long, default_value_t = 2_000)]
    samples: usize,
    /// Keep the work directory.
    #[arg(long)]
    keep: bool,
}

/// The median of `samples` timings of `step`, in microseconds.
fn median_us(samples: usize, mut step: impl FnMut()) -> f64 {
    for _ in 0..samples {
        step();
    }
    let mut us: Vec<f64> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            step();
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    us.sort_by(f64::total_cmp);
    us[us.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    let work = WorkDir::new("gps", args.keep)?;
    println!("path_steps: the one-caller paths' steps, each alone");
    println!("machine: {}", machine());
    println!(
        "{} samples per step, store under {}",
        args.samples,
        work.path.display()
    );
    let failed = |e: fjall::Error| e.to_string();
    std::fs::create_dir_all(work.path.join("keys")).map_err(|e| e.to_string())?;
    let database = Database::builder(work.path.join("store"))
        .worker_threads(1)
        .open()
        .map_err(failed)?;
    let meta = database
        .keyspace("meta", grid_engine::store::keyspace_options)
        .map_err(failed)?;
    let data = database
        .keyspace("data", grid_engine::store::keyspace_options)
        .map_err(failed)?;
    let key = SigningKey::from_bytes(&[7; 32]);
    let signing = key.clone();
    let sign: Signer = Arc::new(move |m: &[u8]| Ok((1, signing.sign(m).to_bytes())));
    let mark =
        HighWater::open(&work.path, &"0".repeat(32), 0, None, sign).map_err(|e| e.to_string())?;
    let durable = Durable::new(database.clone(), meta, 0, mark, Failpoints::default());
    let value = [1u8; 100];
    let mut n = 0u64;
    let mut write = || {
        n += 1;
        data.insert(n.to_be_bytes(), value).expect("insert");
    };

    let mut table = Table::new(&["step", "median"], "lr");
    let mut row = |step: &str, us: f64| table.row(vec![step.to_owned(), format!("{us:.1} µs")]);
    row(
        "journal fsync alone (a 100-byte write, `persist(SyncAll)`)",
        median_us(args.samples, || {
            write();
            database.persist(PersistMode::SyncAll).expect("fsync");
        }),
    );
    row(
        "acknowledged write (`Durable::persist`: journal fsync, then the mark's)",
        median_us(args.samples, || {
            write();
            durable.persist().expect("persist");
        }),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .map_err(|e| e.to_string())?;
    let persisting = durable.clone();
    let syncer = Syncer::start(move || persisting.persist(), "path-steps-fsync")
        .map_err(|e| e.to_string())?;
    row(
        "the same through the fsync thread (`Syncer::sync` from a thread of its own)",
        median_us(args.samples, || {
            write();
            runtime.block_on(syncer.sync()).expect("sync");
        }),
    );
    row(
        "the same, a lone writer fsyncing where it runs (`on_own_thread`)",
        median_us(args.samples, || {
            write();
            on_own_thread(|| runtime.block_on(syncer.sync())).expect("sync");
        }),
    );
    let message = [3u8; 200];
    let signature = key.sign(&message);
    let public = key.verifying_key();
    row(
        "Ed25519 signature (200 bytes)",
        median_us(args.samples, || {
            std::hint::black_box(key.sign(&message));
        }),
    );
    row(
        "Ed25519 strict verification (200 bytes)",
        median_us(args.samples, || {
            public
                .verify_strict(&message, &signature)
                .expect("verifies");
        }),
    );
    let public_bytes = public.to_bytes();
    row(
        "an Ed25519 public key parsed from its 32 bytes (a point decompressed)",
        median_us(args.samples, || {
            std::hint::black_box(
                ed25519_dalek::VerifyingKey::from_bytes(&public_bytes).expect("a key"),
            );
        }),
    );
    row(
        "a task spawned on the runtime and awaited (`block_on`)",
        median_us(args.samples, || {
            runtime
                .block_on(async { tokio::spawn(async {}).await })
                .expect("joins");
        }),
    );
    table.print();
    Ok(())
}
