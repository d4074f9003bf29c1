//! A model's generations end to end (issue 15 §2), as a journey run by the
//! `grid-journeys` harness against real `gridctl` and `gridd` processes: two hosts
//! and an Ordered route; a new formula's recompute is published to the destination's
//! model, a new default reaches an input no batch set, and recovery replays each
//! recompute once. The journey file is `tests/generations/republish.kdl`.

use std::path::Path;

use grid_journeys::{Binaries, run_file};

#[test]
fn a_new_generation_is_recomputed_and_published_once() {
    let binaries = Binaries::beside(Path::new(env!("CARGO_BIN_EXE_gridctl")));
    assert!(
        binaries.gridd.is_file(),
        "build gridd too: cargo build --bin gridd"
    );
    let path = std::fs::canonicalize(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/generations/republish.kdl"),
    )
    .unwrap();
    let mut story: Vec<u8> = Vec::new();
    if let Err(error) = run_file(&path, &binaries, &mut story) {
        panic!("\n{}\n{error}", String::from_utf8_lossy(&story));
    }
}
