//! `gridctl inspect storage` against a real gridd (docs/storage.md): every keyspace of
//! the host's store with its entries, the store's journal, each store directory — the
//! host store and its authority's databases — with exactly the files and bytes an
//! independent walk of the installation finds, and the disk's free space. Inspecting
//! changes nothing on disk. And a store that is gone, emptied or another
//! installation's is refused by name (`DIR/keys/store.mark`), never started afresh:
//! put back, the host answers its acknowledged ids as before; made afresh past both
//! marks, the plan never installs a model the custody says it held
//! (`DIR/keys/held-models`).

use std::path::Path;

mod common;

use common::{KillOnDrop, copy_tree, gridctl, gridctl_code, start_gridd as start};

const TOPOLOGY: &str = "grid version=1\nmembership ops {\n    authority voters=1\n}\n\
    host solo listen=\"127.0.0.1:7951\" {\n    member ops\n    profiles transport authority\n}\n\
    model counter host=solo {\n    input n default=0\n    cell twice \"n * 2\"\n}\n";

/// `(files, bytes)` under `path`, links not followed: the count `inspect storage` must
/// match.
fn walk(path: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    for entry in std::fs::read_dir(path).unwrap().flatten() {
        let metadata = entry.path().symlink_metadata().unwrap();
        if metadata.is_dir() {
            let (f, b) = walk(&entry.path());
            files += f;
            bytes += b;
        } else if metadata.is_file() {
            files += 1;
            bytes += metadata.len();
        }
    }
    (files, bytes)
}

#[test]
fn inspect_storage_reports_what_the_installation_holds_on_disk() {
    let dir = common::work_dir("storage");
    std::fs::write(dir.join("t.kdl"), TOPOLOGY).unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}"); // the model and the authority wait for gridd
    let host_dir = dir.join("grid-state/hosts/solo");
    let host = start(&host_dir, &dir.join("solo.log")).unwrap();
    let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
    assert!(ok, "{text}");
    const INPUTS: u64 = 20;
    for i in 0..INPUTS {
        let (code, answer) = input(&dir, &format!("n={i}"), &format!("s{i}"));
        assert_eq!(code, Some(0), "{answer}");
    }

    // The store may flush or compact in the background: compare with a walk only when
    // the walks before and after the inspection agree (bounded attempts).
    let mut compared = None;
    for _ in 0..50 {
        let before = walk(&host_dir.join("store"));
        let (ok, text) = gridctl(&dir, &["inspect", "storage", "--host", "solo", "--json"]);
        assert!(ok, "{text}");
        let after = walk(&host_dir.join("store"));
        if before == after {
            compared = Some((before, text));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let ((files, bytes), text) = compared.expect("the store settles");
    let view: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["host"], "solo");

    let keyspace = |name: &str| {
        view["keyspaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == name)
            .unwrap_or_else(|| panic!("keyspace `{name}` in {text}"))
            .clone()
    };
    // The model's install and every input are operations with retained answers.
    let operations = keyspace("operations")["approximate_entries"]
        .as_u64()
        .unwrap();
    assert!(operations > INPUTS, "{operations} operations: {text}");
    assert!(keyspace("batches")["approximate_entries"].as_u64().unwrap() >= INPUTS);
    for name in ["meta", "models", "unacknowledged"] {
        keyspace(name);
    }
    assert!(view["journal_bytes"].as_u64().unwrap() > 0, "{text}");
    // Every input was answered after its own fsync, each counted in the store.
    let acknowledged = view["acknowledged_writes"].as_u64().unwrap();
    assert!(
        acknowledged > INPUTS,
        "{acknowledged} acknowledged writes: {text}"
    );

    let directories = view["directories"].as_array().unwrap();
    assert_eq!(directories[0]["path"], "store", "{text}");
    assert_eq!(directories[0]["files"].as_u64(), Some(files), "{text}");
    assert_eq!(directories[0]["bytes"].as_u64(), Some(bytes), "{text}");
    assert_eq!(directories[0]["truncated"], false);
    // The authority's databases, each counted as a walk counts it.
    let authority: Vec<&serde_json::Value> = directories
        .iter()
        .filter(|d| d["path"].as_str().unwrap().starts_with("authority/ops/"))
        .collect();
    assert!(!authority.is_empty(), "the authority's stores: {text}");
    for d in authority {
        let (files, _) = walk(&host_dir.join(d["path"].as_str().unwrap()));
        assert_eq!(d["files"].as_u64(), Some(files), "{d}");
    }
    let disk = &view["disk"];
    let (total, available) = (
        disk["total_bytes"].as_u64().unwrap(),
        disk["available_bytes"].as_u64().unwrap(),
    );
    assert!(total > 0 && available <= total, "{disk}");

    let (ok, text) = gridctl(&dir, &["inspect", "storage", "--host", "solo"]);
    assert!(ok, "{text}");
    assert!(text.contains("keyspace operations: ~"), "{text}");
    assert!(text.contains("  store: "), "{text}");

    // A host that does not run: named, nothing else.
    let (code, text) = gridctl_code(&dir, &["inspect", "storage", "--host", "nobody"]);
    assert_ne!(code, Some(0), "{text}");

    drop(host);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The values of model `counter`, as `gridctl inspect model --json` shows them.
fn values(dir: &Path) -> serde_json::Value {
    let (ok, text) = gridctl(dir, &["inspect", "model", "counter", "--json"]);
    assert!(ok, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The `--json` answer of `gridctl input counter N=V --op OP`.
fn input(dir: &Path, value: &str, op: &str) -> (Option<i32>, serde_json::Value) {
    let (code, text) = gridctl_code(dir, &["input", "counter", value, "--op", op, "--json"]);
    let answer = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, answer)
}

#[test]
fn a_missing_emptied_or_foreign_store_is_refused_and_the_own_one_answers_as_before() {
    let dir = common::work_dir("store-mark");
    std::fs::write(
        dir.join("t.kdl"),
        "grid version=1\n\
         host solo listen=\"127.0.0.1:7952\"\n\
         host other listen=\"127.0.0.1:7953\"\n\
         model counter host=solo {\n    input n default=0\n    cell twice \"n * 2\"\n}\n",
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let (solo, other) = (
        dir.join("grid-state/hosts/solo"),
        dir.join("grid-state/hosts/other"),
    );
    let log = dir.join("gridd.log");
    {
        let _solo = start(&solo, &log).unwrap();
        let _other = start(&other, &log).unwrap();
        let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
        assert!(ok, "{text}");
        for i in 0..3 {
            let (code, answer) = input(&dir, &format!("n={i}"), &format!("m{i}"));
            assert_eq!(code, Some(0), "{answer}");
        }
    } // both stopped (SIGKILL)
    let mark = solo.join("keys/store.mark");
    let mode = std::os::unix::fs::PermissionsExt::mode(&mark.metadata().unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{}", mark.display());

    // Gone: refused, and nothing is created in its place.
    let store = solo.join("store");
    std::fs::rename(&store, solo.join("store.kept")).unwrap();
    let refused = start(&solo, &log)
        .err()
        .expect("a missing store is refused");
    assert!(
        refused.contains("the store of this installation is missing")
            && refused.contains("store.mark"),
        "{refused}"
    );
    assert!(!store.exists(), "no store created afresh");
    // Emptied: refused the same.
    grid_engine::store::ensure_private_dir(&store).unwrap();
    let refused = start(&solo, &log).err().expect("an empty store is refused");
    assert!(refused.contains("is missing"), "{refused}");
    std::fs::remove_dir_all(&store).unwrap();
    // Another installation's store: refused, naming both.
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(other.join("store"))
        .arg(&store)
        .status()
        .unwrap();
    assert!(copied.success());
    let refused = start(&solo, &log)
        .err()
        .expect("a foreign store is refused");
    assert!(refused.contains("this is another store"), "{refused}");
    std::fs::remove_dir_all(&store).unwrap();

    // Its own store back: it serves, and an acknowledged id answers as it first did.
    std::fs::rename(solo.join("store.kept"), &store).unwrap();
    let _solo = start(&solo, &log).unwrap();
    let (code, answer) = input(&dir, "n=2", "m2");
    assert_eq!(
        (code, &answer["replayed"]),
        (Some(0), &true.into()),
        "{answer}"
    );
    assert_eq!(values(&dir)["twice"], 4.0, "the last input before the stop");
    let (ok, text) = gridctl(&dir, &["input", "counter", "n=7", "--op", "m3"]);
    assert!(ok, "{text}");
    assert_eq!(values(&dir)["twice"], 14.0);
    drop(_solo);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every journal file (`*.jnl`) of the store at `store`.
fn journals(store: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![store.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "jnl") {
                found.push(path);
            }
        }
    }
    assert!(!found.is_empty(), "no journal under {}", store.display());
    found
}

#[test]
fn a_store_rolled_back_truncated_or_replaced_is_refused_and_no_id_runs_twice() {
    let dir = common::work_dir("store-high-water");
    std::fs::write(
        dir.join("t.kdl"),
        "grid version=1\n\
         host solo listen=\"127.0.0.1:7962\"\n\
         model counter host=solo {\n    input n default=0\n    cell twice \"n * 2\"\n}\n",
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let solo = dir.join("grid-state/hosts/solo");
    let (store, log) = (solo.join("store"), dir.join("gridd.log"));
    {
        let _solo = start(&solo, &log).unwrap();
        let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
        assert!(ok, "{text}");
        for i in 1..=6 {
            let (code, answer) = input(&dir, &format!("n={i}"), &format!("b{i}"));
            assert_eq!(code, Some(0), "{answer}");
        }
    } // SIGKILL
    copy_tree(&store, &dir.join("store.old"));
    let acknowledged = {
        let _solo = start(&solo, &log).unwrap();
        for i in 7..=12 {
            let (code, answer) = input(&dir, &format!("n={i}"), &format!("b{i}"));
            assert_eq!(code, Some(0), "{answer}");
        }
        assert_eq!(values(&dir)["twice"], 24.0);
        let (ok, text) = gridctl(&dir, &["inspect", "storage", "--host", "solo", "--json"]);
        assert!(ok, "{text}");
        let view: serde_json::Value = serde_json::from_str(&text).unwrap();
        view["acknowledged_writes"].as_u64().unwrap()
    }; // SIGKILL
    let acknowledged = format!("acknowledged {acknowledged} writes in");
    let mark = solo.join("keys/store.high-water");
    let mode = std::os::unix::fs::PermissionsExt::mode(&mark.metadata().unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{}", mark.display());
    copy_tree(&store, &dir.join("store.full"));
    let put_back = |copy: &str| {
        std::fs::remove_dir_all(&store).unwrap();
        copy_tree(&dir.join(copy), &store);
    };
    let refused_as = |what: &str, expected: &[&str]| {
        let refused = start(&solo, &log)
            .err()
            .unwrap_or_else(|| panic!("{what}: gridd started"));
        assert!(
            expected.iter().any(|e| refused.contains(e)),
            "{what}: {refused}"
        );
        refused
    };

    // The journal's tail cut off (what a torn disk or a careless `truncate` leaves).
    for journal in journals(&store) {
        let length = journal.metadata().unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&journal)
            .unwrap()
            .set_len(length / 2)
            .unwrap();
    }
    refused_as("a truncated journal", &["store rolled back"]);
    // The journal deleted.
    put_back("store.full");
    for journal in journals(&store) {
        std::fs::remove_file(journal).unwrap();
    }
    // (the store's own id goes with it, unless fjall had flushed it to a table)
    refused_as(
        "a deleted journal",
        &[
            "store rolled back",
            "the store of this installation is missing",
        ],
    );
    // An older copy of this very store, taken after batch 6.
    put_back("store.old");
    let refused = refused_as("an older copy", &["store rolled back"]);
    assert!(
        refused.contains(&acknowledged) && refused.contains("store.high-water"),
        "{refused}"
    );
    // The store and its identity both gone: never started afresh.
    std::fs::remove_dir_all(&store).unwrap();
    std::fs::remove_file(solo.join("keys/store.mark")).unwrap();
    refused_as("a store made afresh", &[&acknowledged]);
    assert!(!store.exists(), "no store created afresh");
    // The mark itself gone, with a store that counted acknowledged writes.
    copy_tree(&dir.join("store.full"), &store);
    copy_tree(&mark, &dir.join("high-water.kept"));
    std::fs::remove_file(&mark).unwrap();
    refused_as("a missing mark", &["mark is missing"]);
    std::fs::rename(dir.join("high-water.kept"), &mark).unwrap();

    // The store it last served: every acknowledged id answers as it first did.
    {
        let _solo = start(&solo, &log).unwrap();
        let (code, answer) = input(&dir, "n=12", "b12");
        assert_eq!(
            (code, &answer["replayed"]),
            (Some(0), &true.into()),
            "{answer}"
        );
        assert_eq!(values(&dir)["twice"], 24.0);
    }
    // A crash after an fsync, before the mark over it: the store is ahead of its mark,
    // which is no loss — gridd starts, and the write is answered once.
    {
        let child = std::process::Command::new(common::gridd())
            .arg("--dir")
            .arg(&solo)
            .env("GRID_FAILPOINTS", "high-water-before-write=abort")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut child = KillOnDrop(child);
        common::wait_ready(&mut child.0, &solo).expect("serves until its first write");
        let (code, answer) =
            gridctl_code(&dir, &["input", "counter", "n=13", "--op", "b13", "--json"]);
        assert_ne!(code, Some(0), "the crash loses the answer: {answer}");
        let status = child.0.wait().unwrap();
        assert!(!status.success(), "{status}");
    }
    let _solo = start(&solo, &log).unwrap();
    let (code, answer) = input(&dir, "n=13", "b13");
    assert_eq!(
        (code, &answer["replayed"]),
        (Some(0), &true.into()),
        "{answer}"
    );
    let (code, answer) = input(&dir, "n=14", "b14");
    assert_eq!(
        (code, &answer["replayed"]),
        (Some(0), &false.into()),
        "{answer}"
    );
    let model = values(&dir);
    assert_eq!(model["twice"], 28.0, "{model}");
    drop(_solo);

    // The store made afresh with both its marks removed — only an operator's hand does
    // that: gridd serves an empty store, but the custody still says this installation
    // held `counter`, and neither plan nor reconcile installs it afresh.
    let held = std::fs::read_to_string(solo.join("keys/held-models")).unwrap();
    assert_eq!(held, "counter\n");
    std::fs::remove_dir_all(&store).unwrap();
    std::fs::remove_file(solo.join("keys/store.mark")).unwrap();
    std::fs::remove_file(&mark).unwrap();
    let _solo = start(&solo, &log).unwrap();
    let (code, text) = gridctl_code(&dir, &["plan", "t.kdl", "--json"]);
    assert_eq!(code, Some(0), "{text}");
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let lines = plan["transitions"].as_array().unwrap();
    let model = lines
        .iter()
        .find(|t| t["kind"] == "model" && t["name"] == "counter")
        .unwrap_or_else(|| panic!("a line for the model: {text}"));
    assert_eq!(model["op"], "!", "{model}");
    let detail = model["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("lost: ") && detail.contains("held-models"),
        "{detail}"
    );
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(
        code,
        Some(6),
        "attention remains, nothing installed: {text}"
    );
    let (code, text) = gridctl_code(&dir, &["input", "counter", "n=12", "--op", "b12"]);
    assert_ne!(code, Some(0), "no acknowledged id runs again: {text}");
    assert!(text.contains("serves model `counter`"), "{text}");
    drop(_solo);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `gridctl storage checkpoint --host solo --op OP --json`: its exit code and answer.
fn checkpoint(dir: &Path, op: &str) -> (Option<i32>, serde_json::Value) {
    let (code, text) = gridctl_code(
        dir,
        &[
            "storage",
            "checkpoint",
            "--host",
            "solo",
            "--op",
            op,
            "--json",
        ],
    );
    let answer = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, answer)
}

/// The installed checkpoints `inspect storage` lists: `(room, name, position)`.
fn checkpoints(dir: &Path) -> Vec<(String, String, u64)> {
    let (ok, text) = gridctl(dir, &["inspect", "storage", "--host", "solo", "--json"]);
    assert!(ok, "{text}");
    let view: serde_json::Value = serde_json::from_str(&text).unwrap();
    view["checkpoints"]
        .as_array()
        .unwrap_or_else(|| panic!("no checkpoints in {text}"))
        .iter()
        .map(|c| {
            (
                c["room"].as_str().unwrap().to_owned(),
                c["name"].as_str().unwrap().to_owned(),
                c["position"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `inspect storage`'s view of model `counter`'s batches: `(oldest_retained, newest,
/// purgeable)`.
fn batches_held(dir: &Path) -> (Option<u64>, u64, u64) {
    let (ok, text) = gridctl(dir, &["inspect", "storage", "--host", "solo", "--json"]);
    assert!(ok, "{text}");
    let view: serde_json::Value = serde_json::from_str(&text).unwrap();
    let journal = view["journals"]
        .as_array()
        .unwrap_or_else(|| panic!("no journals in {text}"))
        .iter()
        .find(|j| j["store"] == "batches" && j["name"] == "counter")
        .unwrap_or_else(|| panic!("no batches of counter in {text}"))
        .clone();
    (
        journal["oldest_retained"].as_u64(),
        journal["newest"].as_u64().unwrap(),
        journal["purgeable"].as_u64().unwrap(),
    )
}

#[test]
fn a_checkpoint_covers_the_batches_it_purges_and_a_crash_at_each_step_recovers_the_same_model() {
    let dir = common::work_dir("checkpoint");
    std::fs::write(
        dir.join("t.kdl"),
        "grid version=1\n\
         host solo listen=\"127.0.0.1:7964\"\n\
         model counter host=solo {\n    input n default=0\n    input m default=5\n    cell total \"n * 2 + m\"\n}\n",
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let solo = dir.join("grid-state/hosts/solo");
    let log = dir.join("gridd.log");
    // Batch b sets n=b when odd, m=b when even: after batch B, total = 2·n + m.
    let total_after = |batches: u64| {
        let n = (1..=batches).filter(|b| b % 2 == 1).max().unwrap_or(0);
        let m = (1..=batches).filter(|b| b % 2 == 0).max().unwrap_or(5);
        (2 * n + m) as f64
    };
    let send = |b: u64| {
        let set = if b % 2 == 1 {
            format!("n={b}")
        } else {
            format!("m={b}")
        };
        input(&dir, &set, &format!("b{b}"))
    };
    let mut batches = 0;
    {
        let _solo = start(&solo, &log).unwrap();
        let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
        assert!(ok, "{text}");
        for _ in 0..20 {
            batches += 1;
            let (code, answer) = send(batches);
            assert_eq!(code, Some(0), "{answer}");
        }
        // Every batch held, and a checkpoint now would purge them all.
        assert_eq!(batches_held(&dir), (Some(1), 20, 20));
        let (code, answer) = checkpoint(&dir, "c1");
        assert_eq!(code, Some(0), "{answer}");
        assert_eq!(batches_held(&dir), (None, 20, 0));
        assert_eq!(
            answer["detail"], "checkpointed model counter at batch 20 (20 batches purged)",
            "{answer}"
        );
        let (code, again) = checkpoint(&dir, "c1");
        assert_eq!(
            (code, &again["replayed"]),
            (Some(0), &true.into()),
            "{again}"
        );
        assert_eq!(again["detail"], answer["detail"]);
        let (code, none) = checkpoint(&dir, "c2");
        assert_eq!(code, Some(0), "{none}");
        assert_eq!(
            none["detail"],
            "no model has a batch past its checkpoint or left to purge"
        );
        assert_eq!(
            checkpoints(&dir),
            [("model".to_owned(), "counter".to_owned(), 20)]
        );
    } // SIGKILL
    // Opened from the checkpoint (its 20 batches are purged): the same model, and
    // every id answered before the purge answers as first given, applying nothing.
    {
        let _solo = start(&solo, &log).unwrap();
        assert_eq!(values(&dir)["total"], total_after(batches));
        for b in [1, 20] {
            let (code, answer) = send(b);
            assert_eq!(
                (code, &answer["replayed"]),
                (Some(0), &true.into()),
                "{answer}"
            );
        }
        assert_eq!(values(&dir)["total"], total_after(batches));
    }
    // A crash at each step of a checkpoint: the restarted host holds the same model,
    // the checkpoint's id (never answered) checkpoints when re-sent, and a further
    // batch follows the last one.
    for (step, point) in [
        "checkpoint-before-write",
        "checkpoint-before-install",
        "checkpoint-before-purge",
    ]
    .into_iter()
    .enumerate()
    {
        let child = std::process::Command::new(common::gridd())
            .arg("--dir")
            .arg(&solo)
            .env("GRID_FAILPOINTS", format!("{point}=abort"))
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut child = KillOnDrop(child);
        common::wait_ready(&mut child.0, &solo).expect("serves");
        for _ in 0..3 {
            batches += 1;
            let (code, answer) = send(batches);
            assert_eq!(code, Some(0), "{answer}");
        }
        let op = format!("k{step}");
        let (code, answer) = checkpoint(&dir, &op);
        assert_ne!(
            code,
            Some(0),
            "{point}: the crash loses the answer: {answer}"
        );
        assert!(!child.0.wait().unwrap().success());
        drop(child);

        let _solo = start(&solo, &log).unwrap();
        let model = values(&dir);
        assert_eq!(model["total"], total_after(batches), "{point}: {model}");
        let (code, answer) = send(batches);
        assert_eq!(
            (code, &answer["replayed"]),
            (Some(0), &true.into()),
            "{point}: {answer}"
        );
        let (code, answer) = checkpoint(&dir, &op);
        assert_eq!(
            (code, &answer["replayed"]),
            (Some(0), &false.into()),
            "{point}: {answer}"
        );
        let detail = answer["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("checkpointed model counter at batch {batches} (")),
            "{point}: {detail}"
        );
        assert_eq!(
            checkpoints(&dir),
            [("model".to_owned(), "counter".to_owned(), batches)],
            "{point}"
        );
        batches += 1;
        let (code, answer) = send(batches);
        assert_eq!(code, Some(0), "{point}: {answer}");
        assert!(
            answer["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("batch {batches}")),
            "{point}: {answer}"
        );
        assert_eq!(values(&dir)["total"], total_after(batches), "{point}");
    }
    let solo_again = start(&solo, &log).unwrap();
    assert_eq!(values(&dir)["total"], total_after(batches));
    drop(solo_again);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_fsync_failure_stops_the_host_and_a_restart_keeps_every_acknowledged_batch() {
    let dir = common::work_dir("fsync-eio");
    std::fs::write(
        dir.join("t.kdl"),
        "grid version=1\n\
         host solo listen=\"127.0.0.1:7965\"\n\
         model counter host=solo {\n    input n default=0\n    cell twice \"n * 2\"\n}\n",
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let solo = dir.join("grid-state/hosts/solo");
    let log = dir.join("gridd.log");
    {
        let _solo = start(&solo, &log).unwrap();
        let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
        assert!(ok, "{text}");
        for i in 1..=3 {
            let (code, answer) = input(&dir, &format!("n={i}"), &format!("e{i}"));
            assert_eq!(code, Some(0), "{answer}");
        }
    }
    {
        let child = std::process::Command::new(common::gridd())
            .arg("--dir")
            .arg(&solo)
            .env("GRID_FAILPOINTS", "store-fsync=eio")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut child = KillOnDrop(child);
        common::wait_ready(&mut child.0, &solo).expect("serves until its first fsync");
        let (code, answer) = input(&dir, "n=4", "e4");
        assert_eq!(
            code,
            Some(3),
            "no answer is given for a write never synced: {answer}"
        );
        // It stops by itself, saying why; it never retries the fsync.
        let status = child.0.wait().unwrap();
        assert!(!status.success(), "{status}");
        let said = std::fs::read_to_string(&log).unwrap();
        assert!(
            said.contains("storage failed while") && said.contains("Input/output error"),
            "{said}"
        );
    }
    let _solo = start(&solo, &log).unwrap();
    for i in 1..=3 {
        let (code, answer) = input(&dir, &format!("n={i}"), &format!("e{i}"));
        assert_eq!(
            (code, &answer["replayed"]),
            (Some(0), &true.into()),
            "{answer}"
        );
    }
    // The unanswered input: held once or not at all, never twice.
    let (code, answer) = input(&dir, "n=4", "e4");
    assert_eq!(code, Some(0), "{answer}");
    assert!(
        answer["detail"].as_str().unwrap().contains("batch 4"),
        "{answer}"
    );
    assert_eq!(values(&dir)["twice"], 8.0);
    drop(_solo);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tmpfs of `bytes` mounted at `path` for one test, unmounted when it ends.
struct Mounted(std::path::PathBuf);

impl Mounted {
    fn tmpfs(path: &Path, bytes: u64) -> Mounted {
        std::fs::create_dir_all(path).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes},mode=0700")])
            .arg("tmpfs")
            .arg(path)
            .status()
            .expect("mount runs");
        assert!(
            status.success(),
            "mounting a tmpfs needs root (CI runs as root)"
        );
        Mounted(path.to_owned())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A work directory `grid-NAME-PID` with a tmpfs at `disk/` of 48 MiB more than
/// `STORAGE_RESERVE_BYTES_MIN`: room for the installations, then filled past the reserve.
fn small_disk(name: &str) -> (std::path::PathBuf, std::path::PathBuf, Mounted) {
    let dir = common::work_dir(name);
    let disk = dir.join("disk");
    let mounted = Mounted::tmpfs(
        &disk,
        grid_engine::limits::STORAGE_RESERVE_BYTES_MIN + 48 * 1024 * 1024,
    );
    (dir, disk, mounted)
}

/// Bytes an unprivileged writer may still use on the filesystem of `path`.
fn available(path: &Path) -> u64 {
    let output = std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().nth(1).unwrap().trim().parse().unwrap()
}

/// Writes `filler` until the filesystem of `disk` has `left` bytes available.
fn fill(disk: &Path, filler: &Path, left: u64) {
    use std::io::Write;
    let mut file = std::fs::File::create(filler).unwrap();
    let chunk = vec![0u8; 1024 * 1024];
    let mut missing = available(disk).saturating_sub(left);
    while missing > 0 {
        let n = missing.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n]).unwrap();
        missing -= n as u64;
    }
    file.sync_all().unwrap();
    assert!(available(disk) <= left + 1024 * 1024, "filled");
}

/// Whether `count()` passes `held` within `window` (polled every 50 ms).
fn grows_past_for(count: &dyn Fn() -> u64, held: u64, window: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + window;
    while std::time::Instant::now() < until {
        if count() > held {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

#[test]
fn a_full_disk_refuses_new_work_and_keeps_answering_until_space_returns() {
    use grid_engine::limits::STORAGE_RESERVE_BYTES_MIN;
    let (dir, disk, mounted) = small_disk("storage-full");
    std::fs::write(
        dir.join("t.kdl"),
        format!(
            "grid version=1\nhost tiny listen=\"127.0.0.1:7954\" dir=\"{}\" {{\n    profiles ledger sources\n}}\n\
             model counter host=tiny {{\n    input n default=0\n    cell twice \"n * 2\"\n}}\n\
             tag temp host=tiny {{ simulate wave=sine period-s=20 min=0 max=1 seed=1 interval-ms=10; }}\n\
             ledger books host=tiny {{\n    account a currency=\"EUR\"\n    account b currency=\"EUR\"\n}}\n",
            disk.join("tiny").display()
        ),
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let host_dir = dir.join("grid-state/hosts/tiny");
    let tiny = start(&host_dir, &dir.join("tiny.log")).unwrap();
    let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
    assert!(ok, "{text}");
    let (ok, text) = gridctl(&dir, &["input", "counter", "n=1", "--op", "f1"]);
    assert!(ok, "{text}");
    let transfer = |op: &str| {
        gridctl_code(
            &dir,
            &[
                "ledger",
                "transfer",
                "books",
                "--host",
                "tiny",
                "--op",
                op,
                "--debit",
                "a",
                "--credit",
                "b",
                "--amount",
                "5",
                "--currency",
                "EUR",
                "--json",
            ],
        )
    };
    let (code, first) = transfer("t1");
    assert_eq!(code, Some(0), "{first}");
    // The simulated tag's journaled observations (its last index).
    let observed = || {
        let (ok, text) = gridctl(
            &dir,
            &["inspect", "tag", "temp", "--host", "tiny", "--json"],
        );
        assert!(ok, "{text}");
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        report["count"].as_u64().unwrap()
    };
    // Waits (at most 10 s) until the tag journals past `count`; false if it never does.
    let grows_past =
        |count: u64| grows_past_for(&observed, count, std::time::Duration::from_secs(10));
    assert!(grows_past(0), "the tag is sampled");

    // Fill the disk to half the reserve.
    let filler = disk.join("filler");
    fill(&disk, &filler, STORAGE_RESERVE_BYTES_MIN / 2);
    assert!(available(&disk) < STORAGE_RESERVE_BYTES_MIN);

    // New work: refused, naming the cause; nothing journaled (exit 4, refused).
    let (code, answer) = input(&dir, "n=2", "f2");
    assert_eq!(code, Some(4), "{answer}");
    assert_eq!(answer["outcome"], "refused", "{answer}");
    assert!(
        answer["detail"].as_str().unwrap().contains("storage full"),
        "{answer}"
    );
    // Answers and reads keep working.
    let (code, answer) = input(&dir, "n=1", "f1");
    assert_eq!(
        (code, &answer["replayed"]),
        (Some(0), &true.into()),
        "{answer}"
    );
    assert_eq!(values(&dir)["twice"], 2.0);
    // The ledger the same: a new transfer refused, a re-sent one answered as first.
    let (code, text) = transfer("t2");
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("storage full"), "{text}");
    assert_eq!(transfer("t1"), (Some(0), first.clone()));
    // The tag journals nothing more (sampled every 10 ms before): no observation is
    // taken while the disk is full.
    let held = observed();
    assert!(
        !grows_past_for(&observed, held, std::time::Duration::from_millis(500)),
        "journaled while full"
    );

    // Space returns: the same id is taken now, without a restart.
    std::fs::remove_file(&filler).unwrap();
    assert!(grows_past(held), "the tag is sampled again");
    let (code, answer) = input(&dir, "n=2", "f2");
    assert_eq!(
        (code, &answer["outcome"]),
        (Some(0), &"succeeded".into()),
        "{answer}"
    );
    assert_eq!(values(&dir)["twice"], 4.0);
    let (code, text) = transfer("t2");
    assert_eq!(code, Some(0), "{text}");
    drop(tiny);
    drop(mounted);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_full_disk_refuses_new_runs_at_the_receiver_and_at_the_caller() {
    use grid_engine::limits::STORAGE_RESERVE_BYTES_MIN;
    let (dir, disk, mounted) = small_disk("storage-full-runs");
    // `site` (the receiver), `edge` (a caller) and `box` (a mailbox) on the small disk,
    // `hq` (a caller) not.
    std::fs::write(
        dir.join("t.kdl"),
        format!(
            "grid version=1\nmembership ops\n\
             host site listen=\"127.0.0.1:7955\" dir=\"{}\" {{\n    member ops\n    profiles transport processes\n}}\n\
             host edge listen=\"127.0.0.1:7956\" dir=\"{}\" {{\n    member ops\n    profiles transport processes\n}}\n\
             host hq listen=\"127.0.0.1:7957\" {{\n    member ops\n    profiles transport processes\n}}\n\
             host box listen=\"127.0.0.1:7961\" dir=\"{}\" {{\n    member ops\n    profiles transport processes\n}}\n\
             grant hq-on-site issuer=site caller=hq units=10 mailbox=box\n\
             grant edge-on-hq issuer=hq caller=edge units=10\n",
            disk.join("site").display(),
            disk.join("edge").display(),
            disk.join("box").display(),
        ),
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let hosts = dir.join("grid-state/hosts");
    let site = start(&hosts.join("site"), &dir.join("site.log")).unwrap();
    let edge = start(&hosts.join("edge"), &dir.join("edge.log")).unwrap();
    let hq = start(&hosts.join("hq"), &dir.join("hq.log")).unwrap();
    let mailbox = start(&hosts.join("box"), &dir.join("box.log")).unwrap();
    let (ok, text) = gridctl(&dir, &["reconcile", "t.kdl"]);
    assert!(ok, "{text}");
    let run_via = |at: &str, caller: &str, op: &str, via: &[&str]| {
        let mut args = vec![
            "process",
            "run",
            at,
            "demo.count",
            "--as",
            caller,
            "--op",
            op,
            "--json",
        ];
        args.extend(via);
        let (code, text) = gridctl_code(&dir, &args);
        // The reply on stdout; a refusal also says so on stderr, after it.
        let reply = serde_json::Deserializer::from_str(&text)
            .into_iter::<serde_json::Value>()
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("a JSON reply: {text}"));
        (code, reply)
    };
    let run = |at: &str, caller: &str, op: &str| run_via(at, caller, op, &[]);
    let (code, first) = run("site", "hq", "r1");
    assert_eq!(code, Some(0), "{first}");

    let filler = disk.join("filler");
    fill(&disk, &filler, STORAGE_RESERVE_BYTES_MIN / 2);
    // The receiver's disk is full: it refuses the new run, journaling nothing.
    let (code, refused) = run("site", "hq", "r2");
    assert_ne!(code, Some(0), "{refused}");
    assert!(refused.to_string().contains("storage full"), "{refused}");
    // The caller's disk is full: it refuses before its wait is journaled.
    let (code, refused) = run("hq", "edge", "e1");
    assert_ne!(code, Some(0), "{refused}");
    assert!(refused.to_string().contains("storage full"), "{refused}");
    // The mailbox's disk is full: it refuses the deposit.
    let (code, refused) = run_via("site", "hq", "x1", &["--via", "mailbox:box"]);
    assert_ne!(code, Some(0), "{refused}");
    assert!(
        refused
            .to_string()
            .contains("the mailbox refused the request: storage full"),
        "{refused}"
    );
    // A run answered before answers the same.
    assert_eq!(run("site", "hq", "r1"), (Some(0), first));

    std::fs::remove_file(&filler).unwrap();
    let (code, text) = run("site", "hq", "r3");
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = run("hq", "edge", "e2");
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = run_via("site", "hq", "x2", &["--via", "mailbox:box"]);
    assert_eq!(code, Some(0), "{text}");
    drop((site, edge, hq, mailbox));
    drop(mounted);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_full_disk_refuses_publications_and_pushes_until_space_returns() {
    use grid_engine::limits::STORAGE_RESERVE_BYTES_MIN;
    let (dir, disk, mounted) = small_disk("storage-full-delivery");
    // `plant` on the small disk publishes to `line` and receives from it.
    std::fs::write(
        dir.join("t.kdl"),
        format!(
            "grid version=1\nmembership ops {{\n    authority voters=1\n}}\n\
             host auth listen=\"127.0.0.1:7958\" {{\n    member ops\n    profiles transport authority\n}}\n\
             host line listen=\"127.0.0.1:7959\" {{\n    member ops\n    profiles transport authority delivery\n}}\n\
             host plant listen=\"127.0.0.1:7960\" dir=\"{}\" {{\n    member ops\n    profiles transport authority delivery\n}}\n\
             route to-plant membership=ops class=ordered {{\n    publisher line\n    destination plant\n}}\n\
             route to-line membership=ops class=ordered {{\n    publisher plant\n    destination line\n}}\n",
            disk.join("plant").display(),
        ),
    )
    .unwrap();
    let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
    assert_eq!(code, Some(5), "{text}");
    let hosts = dir.join("grid-state/hosts");
    let running: Vec<KillOnDrop> = ["auth", "line", "plant"]
        .iter()
        .map(|h| start(&hosts.join(h), &dir.join(format!("{h}.log"))).unwrap())
        .collect();
    // The authority, its learners, the publishing rights, the routes: a few rounds.
    let mut settled = None;
    for _ in 0..5 {
        let (code, text) = gridctl_code(&dir, &["reconcile", "t.kdl"]);
        if code == Some(0) && gridctl(&dir, &["plan", "t.kdl", "--detailed-exitcode"]).0 {
            settled = Some(text);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    settled.expect("the topology reconciles");
    let publish = |route: &str, value: &str, host: &str| {
        gridctl_code(&dir, &["publish", route, value, "--as", host])
    };
    let inbox = |route: &str, host: &str| -> Vec<f64> {
        let (ok, text) = gridctl(&dir, &["inspect", "inbox", route, "--host", host, "--json"]);
        assert!(ok, "{text}");
        let held: serde_json::Value = serde_json::from_str(&text).unwrap();
        held.as_array()
            .unwrap()
            .iter()
            .map(|v| v["value"].as_f64().unwrap())
            .collect()
    };
    let arrives = |route: &str, host: &str, values: &[f64]| {
        let started = std::time::Instant::now();
        while inbox(route, host) != values {
            assert!(
                started.elapsed() < common::READY_TIMEOUT,
                "{route} at {host}: {:?}, expected {values:?}",
                inbox(route, host)
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let (code, text) = publish("to-plant", "1", "line");
    assert_eq!(code, Some(0), "{text}");
    arrives("to-plant", "plant", &[1.0]);

    let filler = disk.join("filler");
    fill(&disk, &filler, STORAGE_RESERVE_BYTES_MIN / 2);
    // The publisher's disk is full: refused, nothing published.
    let (code, text) = publish("to-line", "2", "plant");
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("storage full"), "{text}");
    // The destination's disk is full: the value is durable at its publisher, and
    // refused at the destination until space returns (the publisher pushes again).
    let (code, text) = publish("to-plant", "3", "line");
    assert_eq!(code, Some(0), "{text}");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        inbox("to-plant", "plant"),
        vec![1.0],
        "not taken while full"
    );

    std::fs::remove_file(&filler).unwrap();
    arrives("to-plant", "plant", &[1.0, 3.0]);
    let (code, text) = publish("to-line", "4", "plant");
    assert_eq!(code, Some(0), "{text}");
    arrives("to-line", "line", &[4.0]);
    drop(running);
    drop(mounted);
    std::fs::remove_dir_all(&dir).unwrap();
}
