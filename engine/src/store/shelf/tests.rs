//! The shelf's own tests: shelved, found, released, gathered, refused.
use super::*;
use crate::store::Failpoints;
use crate::store::high_water::HighWater;
use ed25519_dalek::{Signer as _, SigningKey};

pub(super) fn sign() -> Signer {
    let key = SigningKey::from_bytes(&[9u8; 32]);
    std::sync::Arc::new(move |m: &[u8]| Ok((1, key.sign(m).to_bytes())))
}

/// A store and its shelf in a fresh installation, with a keyspace a room keeps its
/// hot entries in.
pub(super) fn installation(name: &str) -> (PathBuf, Durable, Keyspace, Keyspace) {
    let dir = std::env::temp_dir().join(format!("grid-shelf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    let database = fjall::Database::builder(dir.join("store")).open().unwrap();
    let [meta, hot] = super::super::open_keyspaces(&database, ["meta", "hot"]).unwrap();
    let mark = HighWater::open(&dir, &"0".repeat(32), 0, None, sign()).unwrap();
    let durable = Durable::new(database, meta.clone(), 0, mark, Failpoints::default());
    (dir, durable, meta, hot)
}

/// `shelf` as the rooms share it.
pub(super) fn shared(shelf: Shelf) -> Shared {
    std::sync::Arc::new(std::sync::RwLock::new(shelf))
}

pub(super) fn entry(key: &str, at_ms: u64) -> Entry {
    Entry {
        key: key.to_owned(),
        at_ms,
        value: format!("the answer of {key}").into_bytes(),
    }
}

#[test]
fn shelved_entries_leave_the_room_in_the_same_write_are_found_and_released_whole() {
    let (dir, durable, meta, hot) = installation("whole");
    let shelf = shared(Shelf::open(&dir, &durable, &meta).unwrap());
    let entries = [entry("a", 10), entry("b", 20), entry("c", 30)];
    for e in &entries {
        hot.insert(e.key.as_str(), e.value.as_slice()).unwrap();
    }
    let mut indexed = false;
    let record = shelve(
        &shelf,
        &durable,
        "solo",
        &entries,
        &sign(),
        || indexed = true,
        |write| {
            for e in &entries {
                write.remove(&hot, e.key.as_str());
            }
        },
    )
    .unwrap();
    assert!(indexed, "the failpoint hook runs between segment and index");
    assert_eq!(
        (record.entries, record.first_ms, record.last_ms),
        (3, 10, 30)
    );
    assert!(
        hot.get("b").unwrap().is_none(),
        "removed with the index write"
    );
    let never = |_: u64| false;
    match shelf.read().unwrap().find("b", "b", never) {
        Found::Held { at_ms, value, .. } => {
            assert_eq!((at_ms, value), (20, b"the answer of b".to_vec()));
        }
        _ => panic!("b is on the shelf"),
    }
    assert!(matches!(
        shelf.read().unwrap().find("z", "z", never),
        Found::Absent
    ));
    assert!(matches!(
        shelf.read().unwrap().find("a", "a", |at| at < 15),
        Found::Expired { at_ms: 10 }
    ));
    let held = shelf.read().unwrap().holding();
    assert_eq!(
        (held.segments, held.entries, held.first_ms),
        (1, 3, Some(10))
    );
    // Reopened: the same totals, counted from the store's records.
    drop(shelf);
    let shelf = shared(Shelf::open(&dir, &durable, &meta).unwrap());
    // (When it last wrote a segment is this process's own.)
    assert!(held.last_upload_ms.is_some());
    let held = Holding {
        last_upload_ms: None,
        ..held
    };
    assert_eq!(shelf.read().unwrap().holding(), held);
    // Released only once its newest entry is past the window: then whole.
    assert_eq!(release(&shelf, &durable, |last| last < 30).unwrap(), 0);
    assert_eq!(release(&shelf, &durable, |last| last < 31).unwrap(), 1);
    let released = shelf.read().unwrap().holding();
    assert_eq!((released.segments, released.released_segments), (0, 1));
    // Its ids stay known: never "absent", whatever the caller's window says.
    assert!(!matches!(
        shelf.read().unwrap().find("c", "c", never),
        Found::Absent
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_pass_gathers_full_segments_up_to_its_maximum_and_a_patient_one_waits_for_company() {
    use crate::limits::{ARCHIVE_SEGMENT_ENTRIES_MAX, ARCHIVE_SEGMENT_WAIT_MAX};
    let wait = ARCHIVE_SEGMENT_WAIT_MAX.as_millis() as u64;
    let entries = |n: usize, at_ms: u64| (0..n).map(move |i| entry(&format!("e{i}"), at_ms));
    let pass = |candidates: Vec<Entry>, cutoff: u64, patient: bool, max: usize| {
        let mut written = Vec::new();
        let gathered = gather(candidates, cutoff, patient, max, |segment| {
            written.push(segment.len());
            Ok(())
        })
        .unwrap();
        (gathered, written)
    };
    // A handful, young: the patient pass leaves them; the operator's writes them.
    let few: Vec<Entry> = entries(3, 10_000).collect();
    let (gathered, written) = pass(few.clone(), 10_000 + wait, true, 16);
    assert_eq!((gathered, written.len()), (Gathered::default(), 0));
    let (gathered, written) = pass(few.clone(), 10_000 + wait, false, 16);
    assert_eq!(
        (gathered.entries, gathered.segments, written),
        (3, 1, vec![3])
    );
    // Waited long enough past the cutoff: written by the patient pass too.
    let (gathered, _) = pass(few, 10_001 + wait, true, 16);
    assert_eq!(gathered.entries, 3);
    // Two full segments and a rest, at most two per pass: the rest waits (`more`).
    let many: Vec<Entry> = entries(2 * ARCHIVE_SEGMENT_ENTRIES_MAX + 1, 1).collect();
    let (gathered, written) = pass(many, 1, false, 2);
    assert_eq!(written, vec![ARCHIVE_SEGMENT_ENTRIES_MAX; 2]);
    assert!(gathered.more && gathered.segments == 2);
    // A refused segment refuses the pass.
    let refused = gather(entries(1, 1), 1, false, 16, |_| Err("no".to_owned()));
    assert_eq!(refused, Err("no".to_owned()));
}

#[test]
fn a_segment_missing_cut_or_foreign_refuses_the_shelf_by_name() {
    let (dir, durable, meta, _) = installation("refused");
    let shelf = shared(Shelf::open(&dir, &durable, &meta).unwrap());
    shelve(
        &shelf,
        &durable,
        "solo",
        &[entry("a", 1)],
        &sign(),
        || {},
        |_| {},
    )
    .unwrap();
    drop(shelf);
    let segment = dir
        .join(archive::ARCHIVE_DIR)
        .join(archive::segment_name(1));
    let bytes = std::fs::read(&segment).unwrap();
    let refused = |what: &str| match Shelf::open(&dir, &durable, &meta) {
        Err(ShelfError::Refused(detail)) => detail,
        Err(other) => panic!("{what}: {other}"),
        Ok(_) => panic!("{what}: opened"),
    };
    std::fs::write(&segment, &bytes[..bytes.len() - 1]).unwrap();
    let cut = refused("cut");
    assert!(
        cut.contains("is damaged") && cut.contains("00000000000000000001.seg"),
        "{cut}"
    );
    std::fs::remove_file(&segment).unwrap();
    assert!(refused("missing").contains("is missing"));
    // Put back (private, as every file of an installation), it opens again.
    let private = |path: &Path, bytes: &[u8]| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, bytes).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    private(&segment, &bytes);
    Shelf::open(&dir, &durable, &meta).unwrap();
    let foreign = dir
        .join(archive::ARCHIVE_DIR)
        .join("segments/not-a-segment");
    private(&foreign, b"x");
    assert!(refused("foreign").contains("never writes"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Records that stop answering while `down` is set (over real files).
struct Switched {
    records: crate::store::records::BlobRecords<archive::LocalFiles>,
    down: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl crate::store::records::Records for Switched {
    fn put_first(
        &self,
        key: &str,
        value: &[u8],
    ) -> Result<crate::store::records::First, ArchiveError> {
        self.answer()?;
        self.records.put_first(key, value)
    }
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        self.answer()?;
        self.records.get(key)
    }
    fn scan(
        &self,
        prefix: &str,
        after: Option<&str>,
    ) -> Result<crate::store::records::Page, ArchiveError> {
        self.answer()?;
        self.records.scan(prefix, after)
    }
}

impl Switched {
    fn answer(&self) -> Result<(), ArchiveError> {
        match self.down.load(std::sync::atomic::Ordering::SeqCst) {
            true => Err(ArchiveError::Remote {
                store: "dynamodb://t".to_owned(),
                detail: "down".to_owned(),
            }),
            false => Ok(()),
        }
    }
}

#[test]
fn an_index_in_a_table_waits_in_the_store_until_taken_and_a_changed_or_lost_record_is_never_absent()
{
    use crate::store::records::{BlobRecords, Records};
    let (dir, durable, meta, _) = installation("table");
    let down = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let table_dir = dir.join("table");
    std::fs::create_dir_all(&table_dir).unwrap();
    let records = || BlobRecords::new(archive::LocalFiles::open(&table_dir).unwrap(), "r/");
    let open = |key: [u8; 32]| {
        let blobs = archive::LocalFiles::open(&dir).unwrap();
        let mut adapter = Adapter::files(blobs, "archive".to_owned());
        let switched = Switched {
            records: records(),
            down: down.clone(),
        };
        adapter.index = Some(RemoteIndex::new(
            Box::new(switched),
            "dynamodb://t",
            "solo",
            key,
        ));
        Shelf::open_on(&dir, &durable, &meta, adapter).unwrap()
    };
    let shelf = shared(open([1; 32]));
    let never = |_: u64| false;
    shelve(
        &shelf,
        &durable,
        "solo",
        &[entry("a", 1), entry("b", 2)],
        &sign(),
        || {},
        |_| {},
    )
    .unwrap();
    // Taken by the table: the store keeps no index entry, only the ids' digests.
    assert_eq!(shelf.read().unwrap().holding().index_waiting, 0);
    assert!(shelf.read().unwrap().index.get("a").unwrap().is_none());
    assert!(records().get("solo/a").unwrap().is_some());
    assert!(matches!(
        shelf.read().unwrap().find("a", "a", never),
        Found::Held { .. }
    ));
    assert!(matches!(
        shelf.read().unwrap().find("z", "z", never),
        Found::Absent
    ));
    // The table down: the segment is archived, its entries wait here and are found
    // here; an id only the table knows is unreadable; the next segment is refused.
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    shelve(
        &shelf,
        &durable,
        "solo",
        &[entry("c", 3)],
        &sign(),
        || {},
        |_| {},
    )
    .unwrap();
    assert_eq!(shelf.read().unwrap().holding().index_waiting, 1);
    assert!(
        shelf
            .read()
            .unwrap()
            .failing()
            .is_some_and(|why| why.contains("does not answer"))
    );
    assert!(matches!(
        shelf.read().unwrap().find("c", "c", never),
        Found::Held { .. }
    ));
    assert!(matches!(
        shelf.read().unwrap().find("a", "a", never),
        Found::Unreadable(_)
    ));
    let refused = shelve(
        &shelf,
        &durable,
        "solo",
        &[entry("d", 4)],
        &sign(),
        || {},
        |_| {},
    );
    assert!(refused.is_err_and(|e| e.contains("does not answer")));
    assert_eq!(shelf.read().unwrap().holding().segments, 2);
    // Reopened (a stop while entries wait), the table back: the next publish puts them.
    drop(shelf);
    let shelf = shared(open([1; 32]));
    assert_eq!(shelf.read().unwrap().holding().index_waiting, 1);
    // Until the table takes them, the shelf says archiving fails (the hot store's
    // bound applies from the start).
    assert!(
        shelf
            .read()
            .unwrap()
            .failing()
            .is_some_and(|why| why.contains("1 archive index entries wait"))
    );
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(publish(&shelf, &durable), Ok(1));
    assert_eq!(shelf.read().unwrap().failing(), None);
    assert_eq!(shelf.read().unwrap().holding().index_waiting, 0);
    assert!(matches!(
        shelf.read().unwrap().find("c", "c", never),
        Found::Held { .. }
    ));
    // Another installation's key (or a record changed): refused, never absent or held.
    let other = open([2; 32]);
    let Found::Unreadable(why) = other.find("a", "a", never) else {
        panic!("a record tagged by another key is refused");
    };
    assert!(why.contains("not this installation's"), "{why}");
    // A record moved to another key does not open either; a removed one is named.
    let b = records().get("solo/b").unwrap().unwrap();
    std::fs::remove_file(table_dir.join("archive/r").join(hex::encode("solo/a"))).unwrap();
    let Found::Unreadable(why) = shelf.read().unwrap().find("a", "a", never) else {
        panic!("a removed record is refused");
    };
    assert!(why.contains("has no record `solo/a`"), "{why}");
    assert_eq!(
        records().put_first("solo/a", &b).unwrap(),
        crate::store::records::First::Ours
    );
    assert!(matches!(
        shelf.read().unwrap().find("a", "a", never),
        Found::Unreadable(_)
    ));
    // A key the table holds another value for is never replaced: its put is refused
    // and the entry stays indexed here.
    assert_eq!(
        records().put_first("solo/e", b"theirs").unwrap(),
        crate::store::records::First::Ours
    );
    shelve(
        &shelf,
        &durable,
        "solo",
        &[entry("e", 5)],
        &sign(),
        || {},
        |_| {},
    )
    .unwrap();
    assert!(
        shelf
            .read()
            .unwrap()
            .failing()
            .is_some_and(|why| why.contains("another entry"))
    );
    assert!(matches!(
        shelf.read().unwrap().find("e", "e", never),
        Found::Held { .. }
    ));
    assert_eq!(records().get("solo/e").unwrap(), Some(b"theirs".to_vec()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_index_moved_out_of_a_table_is_whole_only_when_every_id_archived_there_is_found() {
    use crate::store::records::{BlobRecords, Records};
    let (dir, durable, meta, _) = installation("move-index");
    let table = |name: &str| {
        let at = dir.join(name);
        std::fs::create_dir_all(&at).unwrap();
        BlobRecords::new(archive::LocalFiles::open(&at).unwrap(), "r/")
    };
    let record_file =
        |name: &str, key: &str| dir.join(name).join("archive/r").join(hex::encode(key));
    let index = |name: &str| {
        RemoteIndex::new(
            Box::new(table(name)),
            &format!("dynamodb://{name}"),
            "solo",
            [1; 32],
        )
    };
    let down = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let first = || {
        let switched = Switched {
            records: table("t1"),
            down: down.clone(),
        };
        RemoteIndex::new(Box::new(switched), "dynamodb://t1", "solo", [1; 32])
    };
    let open = |index: Option<RemoteIndex>| {
        let blobs = archive::LocalFiles::open(&dir).unwrap();
        let mut adapter = Adapter::files(blobs, "archive".to_owned());
        adapter.index = index;
        Shelf::open_on(&dir, &durable, &meta, adapter).unwrap()
    };
    let never = |_: u64| false;
    let held = |shelf: &Shared, keys: &[&str]| {
        for key in keys {
            assert!(
                matches!(
                    shelf.read().unwrap().find(key, key, never),
                    Found::Held { .. }
                ),
                "{key}"
            );
        }
    };
    // `a` and `b` taken by t1; `c` waits in the store (t1 down).
    let shelf = shared(open(Some(first())));
    let put = |entries: &[Entry]| {
        shelve(&shelf, &durable, "solo", entries, &sign(), || {}, |_| {}).unwrap()
    };
    put(&[entry("a", 1), entry("b", 2)]);
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    put(&[entry("c", 3)]);
    assert_eq!(shelf.read().unwrap().holding().index_waiting, 1);
    drop(shelf);
    // t1 not answering: the move waits.
    let waits = move_index(&dir, &durable, (&first(), None), || {});
    assert!(
        matches!(waits, Err(IndexMoveRefused::Waits(_))),
        "{waits:?}"
    );
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    // To another table: what waited is put in t1 first, then every record of the
    // host's copied to t2, the same bytes; a second run is the same run.
    let t2 = index("t2");
    for _ in 0..2 {
        assert_eq!(
            move_index(&dir, &durable, (&first(), Some(&t2)), || {}),
            Ok(3)
        );
    }
    for key in ["solo/a", "solo/b", "solo/c"] {
        let copied = table("t2").get(key).unwrap();
        assert!(copied.is_some() && copied == table("t1").get(key).unwrap());
    }
    let shelf = shared(open(Some(index("t2"))));
    assert_eq!(shelf.read().unwrap().holding().index_waiting, 0);
    held(&shelf, &["a", "b", "c"]);
    drop(shelf);
    // Into the store: a record t2 lost refuses the move by name (what moved stays
    // found, what did not stays known by its digest, never absent) ...
    let b = table("t2").get("solo/b").unwrap().unwrap();
    std::fs::remove_file(record_file("t2", "solo/b")).unwrap();
    let Err(IndexMoveRefused::Damaged(why)) = move_index(&dir, &durable, (&t2, None), || {}) else {
        panic!("a lost record refuses the move");
    };
    assert!(why.contains("holds no record of 1 id(s)"), "{why}");
    let shelf = shared(open(Some(index("t2"))));
    held(&shelf, &["a", "c"]);
    assert!(matches!(
        shelf.read().unwrap().find("b", "b", never),
        Found::Unreadable(_)
    ));
    drop(shelf);
    // ... and so does a record changed; each put back, the move is whole.
    assert_eq!(
        table("t2").put_first("solo/b", &b).unwrap(),
        crate::store::records::First::Ours
    );
    let c = std::fs::read(record_file("t2", "solo/c")).unwrap();
    let mut changed = c.clone();
    changed[0] ^= 0xff;
    std::fs::write(record_file("t2", "solo/c"), &changed).unwrap();
    let Err(IndexMoveRefused::Damaged(why)) = move_index(&dir, &durable, (&t2, None), || {}) else {
        panic!("a changed record refuses the move");
    };
    assert!(
        why.contains("`solo/c` that is not this installation's"),
        "{why}"
    );
    std::fs::write(record_file("t2", "solo/c"), &c).unwrap();
    assert_eq!(move_index(&dir, &durable, (&t2, None), || {}), Ok(3));
    // No table asked now: every id found in the store, no digest left.
    let shelf = shared(open(None));
    held(&shelf, &["a", "b", "c"]);
    assert!(shelf.read().unwrap().ids.is_empty().unwrap());
    drop(shelf);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Local files whose segment puts and deletes wait for the test's word (and say they
/// started).
struct HeldPuts {
    files: archive::LocalFiles,
    started: std::sync::mpsc::Sender<()>,
    go: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Blobs for HeldPuts {
    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> Result<bool, ArchiveError> {
        self.started.send(()).unwrap();
        self.go.lock().unwrap().recv().unwrap();
        self.files.put_if_absent(name, bytes)
    }
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        self.files.get(name)
    }
    fn get_range(
        &self,
        name: &str,
        offset: u64,
        len: u32,
    ) -> Result<Option<Vec<u8>>, ArchiveError> {
        self.files.get_range(name, offset, len)
    }
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArchiveError> {
        self.files.list(prefix)
    }
    fn delete(&self, name: &str) -> Result<(), ArchiveError> {
        self.started.send(()).unwrap();
        self.go.lock().unwrap().recv().unwrap();
        self.files.delete(name)
    }
}

/// While a room's segment is being uploaded, finds go on (the shelf is not held for
/// writing across the put): an id archived before is found, the ids being shelved are
/// still in their room's hot keyspace and not yet in the index; once the put answers,
/// the index commit moves them, in one write.
#[test]
fn finds_go_on_while_a_segment_is_uploaded_or_released() {
    let (dir, durable, meta, hot) = installation("upload");
    let [by_time] = super::super::open_keyspaces(&durable, ["hot-by-time"]).unwrap();
    let (started, started_rx) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let blobs = HeldPuts {
        files: archive::LocalFiles::open(&dir).unwrap(),
        started,
        go: std::sync::Mutex::new(go_rx),
    };
    let adapter = Adapter {
        blobs: Box::new(blobs),
        place: "held".to_owned(),
        remote: true,
        index: None,
    };
    let shelf: Shared = std::sync::Arc::new(std::sync::RwLock::new(
        Shelf::open_on(&dir, &durable, &meta, adapter).unwrap(),
    ));
    let room = |entries: &[Entry]| {
        for e in entries {
            hot.insert(e.key.as_str(), e.value.as_slice()).unwrap();
            by_time.insert(time_key(e.at_ms, &e.key), []).unwrap();
        }
    };
    let first = [entry("a", 1)];
    room(&first);
    go.send(()).unwrap();
    shelve_room(
        &shelf,
        &durable,
        "solo",
        (&first, ""),
        &sign(),
        || {},
        [&hot, &by_time],
        |_| {},
    )
    .unwrap();
    started_rx.recv().unwrap();
    let second = [entry("b", 2), entry("c", 3)];
    room(&second);
    std::thread::scope(|scope| {
        let shelving = scope.spawn(|| {
            shelve_room(
                &shelf,
                &durable,
                "solo",
                (&second, ""),
                &sign(),
                || {},
                [&hot, &by_time],
                |_| {},
            )
        });
        started_rx.recv().unwrap();
        // The put waits: the shelf can be read, and is (the put is let go before any
        // assertion, so a failure never leaves it waiting).
        let seen = shelf.try_read().ok().map(|reading| {
            (
                matches!(reading.find("a", "a", |_| false), Found::Held { .. }),
                matches!(reading.find("b", "b", |_| false), Found::Absent),
            )
        });
        let still_hot = hot.get("b").unwrap().is_some();
        go.send(()).unwrap();
        shelving.join().unwrap().unwrap();
        assert_eq!(
            seen,
            Some((true, true)),
            "the shelf is not held across the put"
        );
        assert!(still_hot, "still hot until indexed");
    });
    let reading = shelf.read().unwrap();
    for key in ["a", "b", "c"] {
        assert!(
            matches!(reading.find(key, key, |_| false), Found::Held { .. }),
            "{key}"
        );
    }
    assert!(
        hot.get("b").unwrap().is_none(),
        "moved in the index's write"
    );
    assert_eq!(reading.holding().entries, 3);
    drop(reading);
    // A release past the window: while the first segment's blob is being deleted the
    // shelf can be read, and its id answers "expired" from the index.
    std::thread::scope(|scope| {
        let releasing = scope.spawn(|| release(&shelf, &durable, |last| last < 2));
        started_rx.recv().unwrap();
        let seen = shelf.try_read().ok().map(|reading| {
            (
                matches!(
                    reading.find("a", "a", |at| at < 2),
                    Found::Expired { at_ms: 1 }
                ),
                matches!(reading.find("b", "b", |at| at < 2), Found::Held { .. }),
            )
        });
        go.send(()).unwrap();
        assert_eq!(releasing.join().unwrap(), Ok(1));
        assert_eq!(
            seen,
            Some((true, true)),
            "the shelf is not held across the delete"
        );
    });
    let holding = shelf.read().unwrap().holding();
    assert_eq!((holding.segments, holding.released_segments), (1, 1));
}
