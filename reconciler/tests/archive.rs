//! Answers past the hot window (docs/storage.md, "Archive"), against a real gridd: an
//! archived id answers with its original answer marked `archived`, nothing runs
//! twice, also after a restart and a crash between a segment and its index; the
//! periodic pass archives by `retain hot-days` (a handful of answers waits for company
//! until an hour past it); damage answers `unknown` or refuses
//! the start naming the segment; past `archive-days` an id is refused as expired and
//! its segment released. The retention clock is moved with
//! `GRID_RETENTION_CLOCK_OFFSET_S` instead of waiting days.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;

use common::{KillOnDrop, gridctl, gridctl_code, start_gridd_with};

const TOPOLOGY: &str = "grid version=1\n\
    host solo listen=\"127.0.0.1:7967\" {\n    retain hot-days=1 archive-days=2\n}\n\
    model counter host=solo {\n    input n default=0\n    cell twice \"n * 2\"\n}\n";

const DAY_S: u64 = 86_400;

/// The `--json` answer of `gridctl input counter n=V --op OP`.
fn input(dir: &Path, value: u64, op: &str) -> (Option<i32>, serde_json::Value) {
    let value = format!("n={value}");
    let (code, text) = gridctl_code(dir, &["input", "counter", &value, "--op", op, "--json"]);
    let answer = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, answer)
}

fn archive(dir: &Path, op: &str) -> (Option<i32>, serde_json::Value) {
    let (code, text) = gridctl_code(
        dir,
        &[
            "storage",
            "archive",
            "--host",
            "solo",
            "--older-than-seconds",
            "0",
            "--op",
            op,
            "--json",
        ],
    );
    let answer = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, answer)
}

fn storage(dir: &Path) -> serde_json::Value {
    let (ok, text) = gridctl(dir, &["inspect", "storage", "--host", "solo", "--json"]);
    assert!(ok, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The model's next batch number, by a probe input of a fresh id (`batch N`): a
/// re-sent id that ran again between two probes would show as a gap.
fn probe(dir: &Path, op: &str) -> u64 {
    let (code, answer) = input(dir, 1_000, op);
    assert_eq!(code, Some(0), "{answer}");
    answer["detail"]
        .as_str()
        .and_then(|d| d.strip_prefix("batch "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a batch number in {answer}"))
}

fn segments(host: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(host.join("archive/segments"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    out.sort();
    out
}

/// Starts gridd with its retention clock `offset` seconds ahead (and `failpoints`).
fn start(host: &Path, log: &Path, offset: u64, failpoints: &str) -> Result<KillOnDrop, String> {
    let offset = offset.to_string();
    let mut env = vec![("GRID_RETENTION_CLOCK_OFFSET_S", offset.as_str())];
    if !failpoints.is_empty() {
        env.push(("GRID_FAILPOINTS", failpoints));
    }
    start_gridd_with(host, log, &env)
}

/// Polls `inspect storage` (bounded) until `done` holds for its archive view.
fn wait_archive(dir: &Path, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let view = storage(dir);
        if done(&view["archive"]) {
            return view;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the periodic archive pass did not run: {view}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn archived_answers_are_the_original_ones_nothing_runs_twice_and_expired_ids_are_refused() {
    let dir = common::work_dir("archive");
    std::fs::write(dir.join("t.kdl"), TOPOLOGY).unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}"); // the model waits for gridd
    let solo = dir.join("grid-state/hosts/solo");
    let log = dir.join("solo.log");
    let host = start(&solo, &log, 0, "").unwrap();
    let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
    assert!(ok, "{text}");
    const INPUTS: u64 = 30;
    let mut originals = Vec::new();
    for i in 0..INPUTS {
        let (code, answer) = input(&dir, i, &format!("a{i}"));
        assert_eq!(code, Some(0), "{answer}");
        assert_eq!(answer["archived"], false, "{answer}");
        originals.push(answer);
    }
    let held = probe(&dir, "p1");
    assert!(storage(&dir)["archive"]["segments"] == 0);

    // Moved now, whatever hot-days says: one segment, every acknowledged answer.
    let (code, answer) = archive(&dir, "ar1");
    assert_eq!(code, Some(0), "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(detail.contains("in 1 segment"), "{answer}");
    let view = storage(&dir);
    let archived = view["archive"]["answers"].as_u64().unwrap();
    assert!(archived > INPUTS, "{view}");
    assert_eq!(view["archive"]["segments"], 1, "{view}");
    assert_eq!(segments(&solo).len(), 1);
    let (code, again) = archive(&dir, "ar1");
    assert_eq!((code, &again["detail"]), (Some(0), &answer["detail"]));
    assert_eq!(again["replayed"], true);

    // A re-sent id: its original answer, from the archive; nothing applied again.
    for (i, original) in originals.iter().enumerate() {
        let (code, answer) = input(&dir, i as u64, &format!("a{i}"));
        assert_eq!(code, Some(0), "{answer}");
        assert_eq!(answer["detail"], original["detail"], "a{i}");
        assert_eq!(answer["outcome"], original["outcome"], "a{i}");
        assert_eq!(
            (&answer["replayed"], &answer["archived"]),
            (
                &serde_json::Value::Bool(true),
                &serde_json::Value::Bool(true)
            ),
            "{answer}"
        );
    }
    // The same id for another request is refused, as in the hot store.
    let (code, answer) = input(&dir, 99, "a3");
    assert_eq!(code, Some(4), "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("already used for another request"),
        "{answer}"
    );
    assert_eq!(probe(&dir, "p5"), held + 1, "no archived id ran again");

    // Kill -9 between a segment and its index: the segment was never indexed, the
    // answers stay hot, the leftover is removed at the next start.
    drop(host);
    let host = start(&solo, &log, 0, "archive-before-index=abort").unwrap();
    for i in 0..5 {
        let (code, answer) = input(&dir, 100 + i, &format!("c{i}"));
        assert_eq!(code, Some(0), "{answer}");
    }
    let (code, answer) = archive(&dir, "ar2");
    assert_eq!(code, Some(3), "the crash loses the reply: {answer}");
    drop(host);
    assert_eq!(segments(&solo).len(), 2, "the unindexed segment is on disk");
    let host = start(&solo, &log, 0, "").unwrap();
    assert_eq!(segments(&solo).len(), 1, "and removed at the start");
    let held = probe(&dir, "p2");
    for i in 0..5 {
        let (code, answer) = input(&dir, 100 + i, &format!("c{i}"));
        assert_eq!(code, Some(0), "{answer}");
        assert_eq!(answer["archived"], false, "still hot: {answer}");
        assert_eq!(answer["replayed"], true, "{answer}");
    }
    let (code, answer) = input(&dir, 7, "a7");
    assert_eq!((code, &answer["archived"]), (Some(0), &true.into()));
    assert_eq!(probe(&dir, "p6"), held + 1);
    drop(host);

    // Ten minutes past the hot window (retain hot-days=1), a handful of answers wait
    // for company (ARCHIVE_SEGMENT_ENTRIES_MIN) until the oldest is an hour past it.
    let host = start(&solo, &log, DAY_S + 600, "").unwrap();
    let waited = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("wait for company") {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the periodic pass did not run: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let view = storage(&dir);
    assert_eq!(view["archive"]["segments"], 1, "{view}");
    assert!(
        view["archive"]["lag_seconds"].as_u64().unwrap() >= 590,
        "{view}"
    );
    drop(host);

    // A day and a half later: the periodic pass moves what is hot.
    let host = start(&solo, &log, DAY_S * 3 / 2, "").unwrap();
    let view = wait_archive(&dir, |a| a["segments"] == 2);
    assert_eq!(view["archive"]["lag_seconds"], 0, "{view}");
    let span = |v: &serde_json::Value| (v["first_ms"].as_u64(), v["last_ms"].as_u64());
    let (Some(first), Some(last)) = span(&view["archive"]) else {
        panic!("the segments' span: {view}");
    };
    assert!(first <= last, "{view}");
    let (code, answer) = input(&dir, 102, "c2");
    assert_eq!(
        (code, &answer["archived"]),
        (Some(0), &true.into()),
        "{answer}"
    );
    let (code, answer) = archive(&dir, "ar1");
    assert_eq!(
        (code, &answer["archived"]),
        (Some(0), &true.into()),
        "{answer}"
    );
    drop(host);

    // Damage: a flipped byte inside an entry answers `unknown` naming the segment —
    // never a different answer, never run again; the other ids still answer.
    let first = segments(&solo)[0].clone();
    let pristine = std::fs::read(&first).unwrap();
    let mut flipped = pristine.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x20;
    std::fs::write(&first, &flipped).unwrap();
    let host = start(&solo, &log, 0, "").unwrap();
    let held = probe(&dir, "p3");
    let mut unknown = 0;
    for (i, original) in originals.iter().enumerate() {
        let (code, answer) = input(&dir, i as u64, &format!("a{i}"));
        if code == Some(3) {
            unknown += 1;
            let detail = answer["detail"].as_str().unwrap();
            assert!(detail.contains(&first.display().to_string()), "{detail}");
            assert!(detail.contains("it is not executed again"), "{detail}");
        } else {
            assert_eq!(code, Some(0), "{answer}");
            assert_eq!(answer["detail"], original["detail"], "a{i}");
        }
    }
    assert!(unknown >= 1, "the flipped entry answers unknown");
    assert_eq!(probe(&dir, "p7"), held + 1, "no damaged id ran again");
    drop(host);
    // Truncated or missing: the start is refused naming the segment.
    std::fs::write(&first, &pristine[..pristine.len() - 7]).unwrap();
    let refused = start(&solo, &log, 0, "")
        .err()
        .expect("a truncated segment");
    assert!(refused.contains(&first.file_name().unwrap().to_string_lossy().to_string()));
    assert!(refused.contains("bytes"), "{refused}");
    std::fs::remove_file(&first).unwrap();
    let refused = start(&solo, &log, 0, "").err().expect("a missing segment");
    assert!(refused.contains("is missing"), "{refused}");
    std::fs::write(&first, &pristine).unwrap();
    // Put back as private as the archive wrote it (a weaker file is refused too).
    std::fs::set_permissions(&first, std::fs::Permissions::from_mode(0o600)).unwrap();

    // Past archive-days=2: refused as expired, never run; the segments are released.
    let host = start(&solo, &log, DAY_S * 4, "").unwrap();
    let held = probe(&dir, "p4");
    let (code, answer) = input(&dir, 9, "a9");
    assert_eq!(code, Some(4), "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(detail.starts_with("expired: "), "{detail}");
    assert!(detail.contains("retain archive-days=2"), "{detail}");
    // (The probe above may be archived and released by the same pass: it is four
    // days old on the shifted clock.)
    let view = wait_archive(&dir, |a| {
        a["segments"] == 0 && a["released_segments"].as_u64().unwrap() >= 2
    });
    assert_eq!(view["archive"]["answers"], 0, "{view}");
    assert_eq!(view["archive"]["bytes"], 0, "{view}");
    assert_eq!(span(&view["archive"]), (None, None), "{view}");
    assert!(segments(&solo).is_empty());
    let (code, answer) = input(&dir, 9, "a9");
    assert_eq!(code, Some(4), "still known after release: {answer}");
    assert_eq!(probe(&dir, "p8"), held + 1, "no expired id ran again");
    let (code, answer) = input(&dir, 9, "fresh");
    assert_eq!(code, Some(0), "new work goes on: {answer}");
    drop(host);
    let _ = std::fs::remove_dir_all(&dir);
}
