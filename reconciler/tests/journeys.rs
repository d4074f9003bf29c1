//! Journeys (SPEC §5): every top-level `journeys/*.kdl` file is one test case, run by
//! the `grid-journeys` harness against the real `gridctl` and `gridd` binaries in a
//! fresh temporary state directory. Topologies they use live in `journeys/topologies/`
//! and are not test cases themselves.
//!
//! A failing journey prints its story (every step and what it observed) and then the
//! failing step, its expectation and the observation; its work directory is kept.
//! `GRID_JOURNEY_LOG=1` streams every journey's story to stderr as it runs.
//! One journey by hand: `cargo test -p grid-reconciler --test journeys -- NAME`, or
//! `gridctl journey run journeys/NAME.kdl`.

use std::fmt;
use std::path::{Path, PathBuf};

use grid_journeys::{Binaries, run_file};

fn binaries() -> Result<Binaries, Failed> {
    let binaries = Binaries::beside(Path::new(env!("CARGO_BIN_EXE_gridctl")));
    if !binaries.gridd.is_file() {
        return Err(Failed(format!(
            "gridd not found beside gridctl ({}): build it with cargo build --bin gridd",
            binaries.gridd.display()
        )));
    }
    Ok(binaries)
}

fn journey(path: &Path) -> datatest_stable::Result<()> {
    let binaries = binaries()?;
    // The journey file, absolute: the harness resolves topologies beside it.
    let path: PathBuf = std::fs::canonicalize(path)?;
    let live = std::env::var_os("GRID_JOURNEY_LOG").is_some();
    let mut story: Vec<u8> = Vec::new();
    let result = if live {
        run_file(&path, &binaries, &mut std::io::stderr())
    } else {
        run_file(&path, &binaries, &mut story)
    };
    match result {
        Ok(_) => Ok(()),
        Err(error) => {
            let story = String::from_utf8_lossy(&story);
            Err(Box::new(Failed(format!("\n{story}\n{error}"))))
        }
    }
}

/// A failed journey's story and report, printed as is (datatest-stable shows errors
/// with `Debug`, which would escape a `String`'s newlines).
struct Failed(String);

impl fmt::Debug for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

datatest_stable::harness! {
    // Only top-level journey files: topologies/ holds the files they reconcile.
    { test = journey, root = "../journeys", pattern = r"^[^/]+\.kdl$" },
}
