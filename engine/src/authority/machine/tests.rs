//! The state machine against its database and snapshot files.

use super::*;
use crate::authority::claims::{Command, random_command, xorshift};
use install::INSTALL_TRIAL;

/// A machine in `dir` retaining `answers_max` answers: in memory, or stored in
/// `database`.
fn retaining(
    dir: &Path,
    database: Option<&crate::authority::log::LogStore>,
    answers_max: u64,
) -> Machine {
    let mut machine = Machine::open(dir, database.map(|d| d.database()), None).unwrap();
    machine.answers_max = answers_max;
    machine
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}
use crate::authority::types::{Proposal, Proposals};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grid-machine-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn entry(index: u64, op: &str, claim: &str) -> Entry {
    command(
        index,
        op,
        Command::Acquire {
            claim: claim.to_owned(),
            caller: "a".to_owned(),
        },
    )
}

#[test]
fn a_new_generation_replaces_the_old_one_and_reopening_loads_it() {
    let dir = scratch("generations");
    let runtime = runtime();
    runtime.block_on(async {
        let mut machine = Machine::open(&dir, None, None).unwrap();
        machine.apply(vec![entry(1, "o1", "x")]).await.unwrap();
        machine.build_snapshot().await.unwrap();
        assert_eq!(machine.snapshot_files(), vec!["000000000001-1.snapshot"]);
        machine
            .apply(vec![entry(2, "o2", "y"), entry(3, "o3", "z")])
            .await
            .unwrap();
        machine.build_snapshot().await.unwrap();
        // The older generation's file is really gone.
        assert_eq!(machine.snapshot_files(), vec!["000000000002-3.snapshot"]);
        assert!(!dir.join("000000000001-1.snapshot").exists());
    });
    // A temporary file of an interrupted write is not a snapshot and is removed.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join("000000000003-9.tmp"))
        .and_then(|mut f| f.write_all(b"partial"))
        .unwrap();
    let reopened = Machine::open(&dir, None, None).unwrap();
    assert!(!dir.join("000000000003-9.tmp").exists());
    let state = reopened.state.read().unwrap();
    assert_eq!(state.last_applied.map(|l| l.index), Some(3));
    assert_eq!(state.claims.len(), 3);
    drop(state);
    assert_eq!(reopened.answer("o2").map(|a| a.epoch), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_state_written_through_to_fjall_is_read_back_whole() {
    let dir = scratch("store");
    let runtime = runtime();
    let log = crate::authority::log::LogStore::open(&dir.join("log")).unwrap();
    let before = runtime.block_on(async {
        let mut machine =
            Machine::open(&dir.join("snapshots"), Some(log.database()), None).unwrap();
        machine
            .apply(vec![
                entry(1, "o1", "x"),
                entry(2, "o2", "x"),
                entry(3, "o3", "y"),
            ])
            .await
            .unwrap();
        machine.state.read().unwrap().clone()
    });
    assert!(
        matches!(
            before.answers,
            AnswersHome::Stored(Retained { len: 3, oldest: 0 })
        ),
        "{:?}",
        before.answers
    );
    log.database().persist(fjall::PersistMode::SyncAll).unwrap();
    // No snapshot file exists: everything comes from the keyspaces.
    let reopened = Machine::open(&dir.join("snapshots"), Some(log.database()), None).unwrap();
    assert!(reopened.snapshot_files().is_empty());
    let after = reopened.state.read().unwrap().clone();
    assert_eq!(after.last_applied, before.last_applied);
    assert_eq!(after.claims, before.claims);
    assert!(matches!(after.answers, AnswersHome::Stored(r) if r.len == 3));
    assert_eq!(
        reopened.answer("o2").map(|a| a.outcome),
        Some(crate::authority::claims::Outcome::Succeeded)
    );
    drop(reopened);
    drop(log);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A store written before `sm-answer-order` existed (no order, no `answers-retained`)
/// is indexed once at its first open and then decides as any other.
#[test]
fn a_store_without_the_answers_order_is_indexed_once() {
    let dir = scratch("index-once");
    let runtime = runtime();
    let log = random_log(60, 0x5eed);
    let mut memory = retaining(&dir.join("memory"), None, 8);
    let database = crate::authority::log::LogStore::open(&dir.join("log")).unwrap();
    let mut stored = retaining(&dir.join("stored"), Some(&database), 8);
    let expected = decisions(&mut memory, &log[..30], &runtime);
    assert_eq!(decisions(&mut stored, &log[..30], &runtime), expected);
    let store = stored.store.clone().unwrap();
    drop(stored);
    let mut batch = store.database.batch();
    batch.remove(&store.meta, RETAINED);
    for guard in store.answers.order.iter() {
        batch.remove(&store.answers.order, guard.key().unwrap());
    }
    batch.commit().unwrap();
    assert!(store.answers.order.is_empty().unwrap());
    let mut stored = retaining(&dir.join("stored"), Some(&database), 8);
    assert!(matches!(stored.state.read().unwrap().answers, AnswersHome::Stored(r) if r.len == 8));
    let expected = decisions(&mut memory, &log[30..], &runtime);
    assert_eq!(decisions(&mut stored, &log[30..], &runtime), expected);
    drop((stored, store, database));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A random log of claim commands, re-sent ids among them (some long forgotten),
/// in entries of one to five proposals.
fn random_log(entries: u64, seed: u64) -> Vec<Entry> {
    let mut next = xorshift(seed);
    let mut sent: Vec<Proposal> = Vec::new();
    let mut log = Vec::new();
    for index in 1..=entries {
        let mut proposals = Vec::new();
        for _ in 0..1 + next() % 5 {
            let proposal = if !sent.is_empty() && next().is_multiple_of(4) {
                sent[(next() % sent.len() as u64) as usize].clone()
            } else {
                Proposal {
                    op: format!("op{}", sent.len()),
                    command: random_command(&mut next, &["x", "y", "z"]),
                }
            };
            sent.push(proposal.clone());
            proposals.push(proposal);
        }
        log.push(Entry {
            log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Proposals(proposals)),
        });
    }
    log
}

fn decisions(
    machine: &mut Machine,
    entries: &[Entry],
    runtime: &tokio::runtime::Runtime,
) -> String {
    let decided = runtime.block_on(machine.apply(entries.to_vec())).unwrap();
    serde_json::to_string(&decided).unwrap()
}

/// Answers kept in the database decide as answers kept in memory do — retained,
/// forgotten (refused as expired), re-sent within one apply — across a reopen and
/// a snapshot installed on a third voter; their snapshots hold the same state.
#[test]
fn stored_answers_decide_as_answers_in_memory() {
    let dir = scratch("stored-answers");
    let runtime = runtime();
    let log = random_log(400, 0x00c0_ffee);
    let mut memory = retaining(&dir.join("memory"), None, 16);
    let database = crate::authority::log::LogStore::open(&dir.join("log")).unwrap();
    let open_stored = |database: &crate::authority::log::LogStore| {
        retaining(&dir.join("stored"), Some(database), 16)
    };
    let mut stored = open_stored(&database);
    let mut at = 0;
    let mut step = 1;
    let mut forgotten_refusals = 0;
    while at < log.len() {
        let end = (at + step).min(log.len());
        let expected = decisions(&mut memory, &log[at..end], &runtime);
        assert_eq!(
            decisions(&mut stored, &log[at..end], &runtime),
            expected,
            "entries {at}..{end}"
        );
        forgotten_refusals += expected.matches("never executed again").count();
        if at < 200 && end >= 200 {
            // Reopened from the database alone.
            drop(stored);
            database
                .database()
                .persist(fjall::PersistMode::SyncAll)
                .unwrap();
            stored = open_stored(&database);
        }
        at = end;
        step = step % 7 + 1;
    }
    assert!(
        forgotten_refusals > 10,
        "the log re-sends forgotten ids ({forgotten_refusals})"
    );
    // The snapshots of both hold the same state.
    let snapshot = |machine: &mut Machine| {
        let built = runtime.block_on(machine.build_snapshot()).unwrap();
        let (_, state) = SnapshotState::read(&built.snapshot).unwrap();
        serde_json::to_string(&state).unwrap()
    };
    let from_memory = snapshot(&mut memory);
    assert_eq!(snapshot(&mut stored), from_memory);
    // The stored voter holds only held claims in memory; it counts the others.
    {
        let (memory, stored) = (memory.read(), stored.read());
        assert_eq!(stored.claims.len(), memory.claims.len());
        assert!(stored.claims.all().all(|c| c.state == ClaimState::Held));
        assert_eq!(
            stored.claims.elsewhere() as usize,
            memory
                .claims
                .all()
                .filter(|c| c.state == ClaimState::Released)
                .count()
        );
    }
    // A third voter installs the stored one's snapshot and decides the same after.
    let other = crate::authority::log::LogStore::open(&dir.join("other-log")).unwrap();
    let mut third = retaining(&dir.join("third"), Some(&other), 16);
    let built = runtime.block_on(stored.build_snapshot()).unwrap();
    runtime
        .block_on(third.install_snapshot(&built.meta, built.snapshot))
        .unwrap();
    let more = random_log(460, 0x00c0_ffee);
    let tail = &more[400..];
    let expected = decisions(&mut memory, tail, &runtime);
    assert_eq!(decisions(&mut third, tail, &runtime), expected);
    assert_eq!(decisions(&mut stored, tail, &runtime), expected);
    drop((stored, third, database, other));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn command(index: u64, op: &str, command: Command) -> Entry {
    Entry {
        log_id: openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposals(vec![Proposal {
            op: op.to_owned(),
            command,
        }])),
    }
}

fn release(index: u64, op: &str, claim: &str) -> Entry {
    command(
        index,
        op,
        Command::Release {
            claim: claim.to_owned(),
            caller: "a".to_owned(),
        },
    )
}

/// The claims `machine` holds in memory (names), how many it counts, and how many
/// released ones it keeps elsewhere.
fn in_memory(machine: &Machine) -> (Vec<String>, usize, u64) {
    let state = machine.read();
    let names = state.claims.all().map(|c| c.name.clone()).collect();
    (names, state.claims.len(), state.claims.elsewhere())
}

/// Released claims leave memory where a database keeps them: a show reads them from
/// there, a new acquire takes the next epoch (within one apply and after a reopen),
/// snapshots and an installing voter still hold them, and a store written before
/// `sm-held` is indexed once.
#[test]
fn released_claims_are_kept_in_the_database_not_in_memory() {
    let dir = scratch("released");
    let runtime = runtime();
    let database = crate::authority::log::LogStore::open(&dir.join("log")).unwrap();
    let mut machine = retaining(&dir.join("snapshots"), Some(&database), 16);
    runtime
        .block_on(machine.apply(vec![
            entry(1, "a1", "x"),
            entry(2, "a2", "y"),
            release(3, "r1", "x"),
            // Released and acquired again in one apply: epoch 2.
            release(4, "r2", "y"),
            entry(5, "a3", "y"),
        ]))
        .unwrap();
    assert_eq!(in_memory(&machine), (vec!["y".to_owned()], 2, 1));
    let x = machine.claim("x").unwrap().unwrap();
    assert_eq!((x.state, x.epoch), (ClaimState::Released, 1));
    assert_eq!(machine.claim("y").unwrap().map(|c| c.epoch), Some(2));
    assert_eq!(machine.claim("z").unwrap(), None);
    // Reopened: the held claim comes back, the released one stays on disk.
    drop(machine);
    database
        .database()
        .persist(fjall::PersistMode::SyncAll)
        .unwrap();
    let mut machine = retaining(&dir.join("snapshots"), Some(&database), 16);
    assert_eq!(in_memory(&machine), (vec!["y".to_owned()], 2, 1));
    let decided = runtime
        .block_on(machine.apply(vec![entry(6, "a4", "x")]))
        .unwrap();
    let Decision::Answer(answer) = &decided[0].0[0] else {
        panic!("{decided:?}");
    };
    assert_eq!(
        answer.epoch, 2,
        "a released claim's next epoch grows from its last"
    );
    assert_eq!(in_memory(&machine).1, 2);
    runtime
        .block_on(machine.apply(vec![release(7, "r3", "x")]))
        .unwrap();
    // A snapshot holds every claim; a voter installing it keeps the released one on
    // disk and decides from it.
    let built = runtime.block_on(machine.build_snapshot()).unwrap();
    let (_, state) = SnapshotState::read(&built.snapshot).unwrap();
    assert_eq!(state.claims.keys().collect::<Vec<_>>(), ["x", "y"]);
    let other = crate::authority::log::LogStore::open(&dir.join("other-log")).unwrap();
    let mut third = retaining(&dir.join("third"), Some(&other), 16);
    runtime
        .block_on(third.install_snapshot(&built.meta, built.snapshot))
        .unwrap();
    assert_eq!(in_memory(&third), (vec!["y".to_owned()], 2, 1));
    assert_eq!(third.claim("x").unwrap().map(|c| c.epoch), Some(2));
    // A store written before `sm-held` existed: indexed once at its next open.
    let store = machine.store.clone().unwrap();
    drop(machine);
    let mut batch = store.database.batch();
    batch.remove(&store.meta, RELEASED);
    for guard in store.held.iter() {
        batch.remove(&store.held, guard.key().unwrap());
    }
    batch.commit().unwrap();
    let machine = retaining(&dir.join("snapshots"), Some(&database), 16);
    assert_eq!(in_memory(&machine), (vec!["y".to_owned()], 2, 1));
    assert_eq!(store.held.iter().count(), 1);
    drop((machine, third, store, database, other));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A snapshot received cut short or changed is refused whole: the installing voter's
/// state, files and store stay as they were, and the received file is not kept; the
/// same snapshot received whole installs.
#[test]
fn a_damaged_snapshot_is_refused_and_changes_nothing() {
    let dir = scratch("damaged");
    let runtime = runtime();
    let database = crate::authority::log::LogStore::open(&dir.join("log")).unwrap();
    let mut machine = retaining(&dir.join("snapshots"), Some(&database), 2);
    runtime
        .block_on(machine.apply(vec![
            entry(1, "a1", "x"),
            entry(2, "a2", "y"),
            release(3, "r1", "x"),
            entry(4, "a3", "z"),
        ]))
        .unwrap();
    let built = runtime.block_on(machine.build_snapshot()).unwrap();
    let whole = built.snapshot.bytes().unwrap();
    let other = crate::authority::log::LogStore::open(&dir.join("other-log")).unwrap();
    let mut third = retaining(&dir.join("third"), Some(&other), 2);
    runtime
        .block_on(third.apply(vec![entry(1, "b1", "w")]))
        .unwrap();
    let mut changed = whole.clone();
    let at = changed.len() / 2;
    changed[at] ^= 0x20;
    for damaged in [&whole[..whole.len() - 3], &changed[..]] {
        let data = third.receive(damaged).unwrap();
        let refused = runtime
            .block_on(third.install_snapshot(&built.meta, Box::new(data)))
            .expect_err("a damaged snapshot is refused");
        assert!(refused.to_string().contains("line "), "{refused}");
        assert_eq!(in_memory(&third), (vec!["w".to_owned()], 1, 0));
        assert!(third.answer("b1").is_some() && third.answer("a1").is_none());
        assert_eq!(third.snapshot_files(), Vec::<String>::new());
        assert_eq!(std::fs::read_dir(dir.join("third")).unwrap().count(), 0);
    }
    let data = third.receive(&whole).unwrap();
    runtime
        .block_on(third.install_snapshot(&built.meta, Box::new(data)))
        .unwrap();
    assert_eq!(
        in_memory(&third),
        (vec!["y".to_owned(), "z".to_owned()], 3, 1)
    );
    assert!(third.answer("b1").is_none() && third.answer("a3").is_some());
    assert_eq!(third.snapshot_files().len(), 1);
    drop((machine, third, database, other));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Where `machine` stands: its last applied entry, the claims it holds in memory and
/// how many released ones it keeps elsewhere.
fn standing(machine: &Machine) -> (Option<LogId>, Vec<String>, u64) {
    let state = machine.read();
    let held = state.claims.all().map(|c| c.name.clone()).collect();
    (state.last_applied, held, state.claims.elsewhere())
}

/// A stop part-way through installing a snapshot (after some of its batches) leaves
/// the mark: the next start installs the named file again, whole, before anything
/// else; with the file gone it refuses to start, naming it. Never a part-way store
/// taken for a whole one.
#[test]
fn a_stop_part_way_through_an_install_is_completed_at_the_next_start() {
    let dir = scratch("install-stop");
    let runtime = runtime();
    let database = crate::authority::log::LogStore::open(&dir.join("log")).unwrap();
    let mut machine = retaining(&dir.join("snapshots"), Some(&database), 3);
    let entries: Vec<Entry> = (1..=12)
        .map(|i| entry(i, &format!("a{i}"), &format!("c{}", i % 5)))
        .collect();
    runtime.block_on(machine.apply(entries)).unwrap();
    let built = runtime.block_on(machine.build_snapshot()).unwrap();
    let name = machine.snapshot_files().pop().unwrap();
    let expected = standing(&machine);
    drop(built);
    // Another voter whose store holds a state of its own, and the snapshot file where
    // an install keeps it.
    let other_dir = dir.join("other");
    let other_log = crate::authority::log::LogStore::open(&dir.join("other-log")).unwrap();
    let mut other = retaining(&other_dir, Some(&other_log), 3);
    runtime
        .block_on(other.apply(vec![entry(1, "b1", "w")]))
        .unwrap();
    drop(other);
    std::fs::copy(dir.join("snapshots").join(&name), other_dir.join(&name)).unwrap();
    let store = Store::open(other_log.database()).unwrap();
    // Trial: two records a batch, stopped after three batches.
    let data = SnapshotData::open(&other_dir.join(&name)).unwrap();
    INSTALL_TRIAL.set(Some((2, 3)));
    let stopped = install_into(&store, &data, &name, None).expect_err("stopped");
    INSTALL_TRIAL.set(None);
    assert!(stopped.contains("stopped after 3 batches"), "{stopped}");
    assert_eq!(store.installing().unwrap(), Some(name.clone()));
    // The next start installs it again before anything else.
    let reopened = retaining(&other_dir, Some(&other_log), 3);
    assert_eq!(store.installing().unwrap(), None);
    assert_eq!(standing(&reopened), expected);
    assert!(reopened.answer("b1").is_none());
    assert!(reopened.answer("a12").is_some());
    assert!(reopened.answer("a9").is_none(), "past retention");
    drop(reopened);
    // The same stop with the file gone: the start is refused, naming it.
    INSTALL_TRIAL.set(Some((2, 1)));
    install_into(&store, &data, &name, None).expect_err("stopped");
    INSTALL_TRIAL.set(None);
    std::fs::remove_file(other_dir.join(&name)).unwrap();
    let refused = Machine::open(&other_dir, Some(other_log.database()), None)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.contains(&name) && refused.contains("part-way"),
        "{refused}"
    );
    drop((machine, store, database, other_log));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A build asked while a snapshot is being installed waits for the install and then
/// builds from what follows it — never from a view taken part-way, and never failing
/// (a build's error would stop openraft's core).
#[test]
fn a_build_waits_for_an_install_in_progress() {
    let dir = scratch("build-waits");
    let database = crate::authority::log::LogStore::open(&dir.join("log")).unwrap();
    let mut machine = retaining(&dir.join("snapshots"), Some(&database), 16);
    runtime()
        .block_on(machine.apply(vec![entry(1, "a1", "x")]))
        .unwrap();
    // The install's lock, as an install holds it.
    let installing = machine.install_lock.clone();
    let guard = installing.lock().unwrap();
    let (done, built) = std::sync::mpsc::channel();
    let mut builder = machine.clone();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        done.send(runtime.block_on(builder.build_snapshot()))
            .unwrap();
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(built.try_recv().is_err(), "the build waits");
    // What changes before the install ends is in the snapshot built after it.
    runtime()
        .block_on(machine.apply(vec![entry(2, "a2", "y")]))
        .unwrap();
    drop(guard);
    let snapshot = built.recv().unwrap().expect("built once the install ended");
    assert_eq!(snapshot.meta.last_log_id.map(|l| l.index), Some(2));
    thread.join().unwrap();
    drop((machine, database));
    std::fs::remove_dir_all(&dir).unwrap();
}
