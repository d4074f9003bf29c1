//! A damaged store (docs/storage.md): a byte flipped or a file cut short anywhere in
//! `DIR/store`, at seeded places. Each time gridd either starts with identical answers
//! — every acknowledged id answered as first given, the model as it was — or refuses
//! to start naming what failed. Never a panic, never a different answer, never an
//! acknowledged batch silently gone (the high-water mark refuses that).
//!
//! `GRID_DAMAGE_TRIALS=N` runs N trials instead of the default 24 (the seed is fixed;
//! `GRID_DAMAGE_SEED` changes it).

use std::path::{Path, PathBuf};

mod common;

use common::{copy_tree, gridctl, gridctl_code, start_gridd as start};

const INPUTS: u64 = 12;

/// splitmix64: a reproducible sequence from a seed, enough to place damage.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn files_under(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, found);
        } else if path.file_name().is_some_and(|n| n != "lock") {
            found.push(path);
        }
    }
}

/// The `--json` answer of `gridctl input counter n=V --op OP`.
fn input(dir: &Path, value: u64, op: &str) -> (Option<i32>, serde_json::Value) {
    let (code, text) = gridctl_code(
        dir,
        &[
            "input",
            "counter",
            &format!("n={value}"),
            "--op",
            op,
            "--json",
        ],
    );
    let answer = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, answer)
}

fn twice(dir: &Path) -> serde_json::Value {
    let (ok, text) = gridctl(dir, &["inspect", "model", "counter", "--json"]);
    assert!(ok, "{text}");
    let model: serde_json::Value = serde_json::from_str(&text).unwrap();
    model["twice"].clone()
}

#[test]
fn a_flipped_byte_or_a_cut_file_in_the_store_starts_with_the_same_answers_or_is_refused_by_name() {
    let trials: u64 = std::env::var("GRID_DAMAGE_TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(24);
    let seed: u64 = std::env::var("GRID_DAMAGE_SEED")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(28);
    let dir = common::work_dir("damage");
    std::fs::write(
        dir.join("t.kdl"),
        "grid version=1\n\
         host solo listen=\"127.0.0.1:7966\"\n\
         model counter host=solo {\n    input n default=0\n    cell twice \"n * 2\"\n}\n",
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let solo = dir.join("grid-state/hosts/solo");
    let (store, log) = (solo.join("store"), dir.join("gridd.log"));
    let mut answers = Vec::new();
    {
        let _solo = start(&solo, &log).unwrap();
        let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
        assert!(ok, "{text}");
        for i in 1..=INPUTS {
            let (code, answer) = input(&dir, i, &format!("d{i}"));
            assert_eq!(code, Some(0), "{answer}");
            answers.push(answer["detail"].clone());
        }
        // Half the batches behind a checkpoint, so its record is in the store too.
        let (code, text) = gridctl_code(
            &dir,
            &["storage", "checkpoint", "--host", "solo", "--op", "k1"],
        );
        assert_eq!(code, Some(0), "{text}");
    } // SIGKILL
    let pristine = dir.join("store.pristine");
    copy_tree(&store, &pristine);
    let mut files = Vec::new();
    files_under(&pristine, &mut files);
    files.sort();
    assert!(!files.is_empty());

    let mut random = Seeded(seed);
    let (mut started, mut refused) = (0, 0);
    for trial in 0..trials {
        std::fs::remove_dir_all(&store).unwrap();
        copy_tree(&pristine, &store);
        let file = store.join(
            files[random.below(files.len() as u64) as usize]
                .strip_prefix(&pristine)
                .unwrap(),
        );
        let length = std::fs::metadata(&file).unwrap().len();
        // Most of a preallocated journal is zeros past its end: half the places fall
        // in a file's first 64 KiB, where what was written lies.
        let span = if trial % 2 == 0 {
            length.min(64 * 1024)
        } else {
            length
        };
        let damage = if trial % 4 == 3 && length > 0 {
            let keep = random.below(length);
            std::fs::OpenOptions::new()
                .write(true)
                .open(&file)
                .unwrap()
                .set_len(keep)
                .unwrap();
            format!("{} cut to {keep} of {length} bytes", file.display())
        } else if length > 0 {
            let at = random.below(span);
            let mut bytes = std::fs::read(&file).unwrap();
            let bit = 1u8 << random.below(8);
            bytes[at as usize] ^= bit;
            std::fs::write(&file, &bytes).unwrap();
            format!("{} byte {at} flipped ({bit:#04x})", file.display())
        } else {
            continue;
        };
        match start(&solo, &log) {
            Ok(solo_running) => {
                // Started: every acknowledged id answers as first given, nothing runs
                // again, the model is as it was.
                for i in 1..=INPUTS {
                    let (code, answer) = input(&dir, i, &format!("d{i}"));
                    assert_eq!(code, Some(0), "{damage}: d{i}: {answer}");
                    assert_eq!(answer["replayed"], true, "{damage}: d{i}: {answer}");
                    assert_eq!(
                        answer["detail"],
                        answers[(i - 1) as usize],
                        "{damage}: d{i}"
                    );
                }
                assert_eq!(twice(&dir), 2.0 * INPUTS as f64, "{damage}");
                drop(solo_running);
                started += 1;
            }
            Err(said) => {
                assert!(!said.contains("panicked"), "{damage}: {said}");
                assert!(
                    said.contains(&store.display().to_string())
                        || said.contains(&solo.display().to_string()),
                    "{damage}: the refusal names no path: {said}"
                );
                refused += 1;
            }
        }
    }
    eprintln!(
        "{trials} damaged stores: {started} started with the same answers, {refused} refused"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
