//! What the room reopens with, independent of its history: the receiver's runs not
//! finished (`process-open`), the caller's waits without an outcome
//! (`process-open-waits`), the runs charged to each allocation
//! (`process-allocation-runs`) and the outcomes counted (`process-archived`
//! "finished"). Each is written in the same write as the record it follows
//! (`archive.rs`, `journal`), so a restart reads these — as many entries as runs and
//! waits still open — instead of walking every hot run and wait.
//!
//! A store written before they were kept has no "finished" key: it is walked once,
//! the indexes and counts are written from it in one write, and every later start
//! reads them.
//!
//! Invariants, stated as absences: no run admitted and unfinished is missing from
//! `process-open` (a run there whose record is missing or finished refuses the open,
//! naming it — never treated as never admitted); no finished run is counted twice.

use std::collections::{BTreeMap, BTreeSet};

use super::api::{GrantView, RunCounts, RunOutcome};
use super::archive::{Answered, ArchivedCounts, FINISHED_KEY, journal};
use super::caller::WaitRecord;
use super::grants;
use super::receiver::RunRecord;
use super::service::Keyspaces;
use crate::store::Durable;

/// What `reopen` found.
pub(super) struct Reopened {
    pub(super) counts: RunCounts,
    pub(super) open_waits: BTreeSet<String>,
}

/// The key in `process-allocation-runs` of a run charged to `allocation`.
pub(super) fn allocation_key(allocation: &str, request: &str) -> String {
    format!("{allocation}\0{request}")
}

/// Reads the counts, the open runs and the open waits; a run admitted and not
/// finished before the stop becomes `unknown` here (its unit held in `grants`),
/// written and synced before this returns.
pub(super) fn reopen(
    database: &Durable,
    ks: &Keyspaces,
    grants: &mut BTreeMap<String, GrantView>,
) -> Result<Reopened, String> {
    let finished = match ks.archived.get(FINISHED_KEY).map_err(|e| e.to_string())? {
        Some(bytes) => serde_json::from_slice::<ArchivedCounts>(&bytes)
            .map_err(|e| format!("the counts of finished runs do not decode: {e}"))?,
        None => return walk_once(database, ks, grants),
    };
    let mut counts = RunCounts {
        succeeded: finished.succeeded,
        failed: finished.failed,
        ..RunCounts::default()
    };
    let mut write = database.batch();
    let mut changed = false;
    for guard in ks.open.iter() {
        let key = guard.key().map_err(|e| e.to_string())?;
        let request = String::from_utf8_lossy(&key).into_owned();
        let damaged = |what: &str| {
            format!(
                "process-open lists run `{}` as unfinished, but process-runs {what}: the store is damaged (restore it, or replace storage)",
                grid_spec::diagnostic::quoted(&request)
            )
        };
        let bytes = ks
            .runs
            .get(&key)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| damaged("does not hold it"))?;
        let mut record: RunRecord = serde_json::from_slice(&bytes)
            .map_err(|e| format!("run record `{request}` does not decode: {e}"))?;
        if interrupted(&mut record, grants, ks, &mut write)? {
            changed = true;
        }
        match record.view.outcome {
            RunOutcome::Unknown => counts.unknown += 1,
            _ => return Err(damaged("holds its outcome")),
        }
    }
    if changed {
        write
            .commit()
            .and_then(|()| database.persist())
            .map_err(|e| format!("marking interrupted runs unknown: {e}"))?;
    }
    let mut open_waits = BTreeSet::new();
    for guard in ks.open_waits.iter() {
        let key = guard.key().map_err(|e| e.to_string())?;
        open_waits.insert(String::from_utf8_lossy(&key).into_owned());
    }
    Ok(Reopened { counts, open_waits })
}

/// A run dispatched before the stop without an outcome becomes `unknown`, its unit
/// held, never run again (written into `write`). Answers whether it was.
fn interrupted(
    record: &mut RunRecord,
    grants: &mut BTreeMap<String, GrantView>,
    ks: &Keyspaces,
    write: &mut fjall::OwnedWriteBatch,
) -> Result<bool, String> {
    let mut run = record.run();
    let Ok(moved) = run.interrupted() else {
        return Ok(false);
    };
    let grant_name = record.view.grant.clone().unwrap_or_default();
    let grant = grants.get_mut(&grant_name).ok_or_else(|| {
        format!(
            "run `{}` holds a unit of grant `{grant_name}`, which this host does not hold",
            record.view.request
        )
    })?;
    grants::apply(grant, moved).map_err(|e| e.to_string())?;
    record.set(run);
    record.view.detail = "the receiver stopped after dispatching the run and before journaling its outcome; nothing runs it again; its unit is held until `gridctl process resolve`".to_owned();
    write.insert(
        &ks.runs,
        record.view.request.as_str(),
        serde_json::to_vec(&*record).expect("records serialize"),
    );
    let record = super::grant_records::grant_record(grant);
    write.insert(&ks.grants, grant.name.as_str(), record);
    Ok(true)
}

/// The first open of a store written before the indexes were kept: walks every hot
/// run and wait once, writes the indexes, the answer times of records closed without
/// one, the receivers called and the counts — in one write, synced.
fn walk_once(
    database: &Durable,
    ks: &Keyspaces,
    grants: &mut BTreeMap<String, GrantView>,
) -> Result<Reopened, String> {
    let archived = super::archive::read_counts(&ks.archived)?;
    let mut counts = RunCounts {
        succeeded: archived.succeeded,
        failed: archived.failed,
        ..RunCounts::default()
    };
    let mut write = database.batch();
    for guard in ks.runs.iter() {
        let (_, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
        let mut record: RunRecord = serde_json::from_slice(&bytes)
            .map_err(|e| format!("a run record does not decode: {e}"))?;
        interrupted(&mut record, grants, ks, &mut write)?;
        // Written again only where an index needs it: open, or closed without a time.
        if record.open() || record.answered_ms.is_none() {
            journal(
                &mut write,
                [&ks.runs, &ks.runs_by_time, &ks.open],
                &mut record,
            );
        }
        note_allocation(ks, &mut write, &record);
        match record.view.outcome {
            RunOutcome::Succeeded => counts.succeeded += 1,
            RunOutcome::Failed => counts.failed += 1,
            RunOutcome::Unknown => counts.unknown += 1,
        }
    }
    let mut open_waits = BTreeSet::new();
    let mut called = BTreeSet::new();
    for guard in ks.waits.iter() {
        let (_, bytes) = guard.into_inner().map_err(|e| e.to_string())?;
        let mut record: WaitRecord = serde_json::from_slice(&bytes)
            .map_err(|e| format!("a wait record does not decode: {e}"))?;
        if record.run.is_none() {
            open_waits.insert(record.request.request.clone());
        }
        if called.insert(record.receiver.name.clone())
            && ks
                .called
                .get(&record.receiver.name)
                .map_err(|e| e.to_string())?
                .is_none()
        {
            super::caller::call_noted(&ks.called, &mut write, &record);
        }
        if record.open() || record.answered_ms.is_none() {
            journal(
                &mut write,
                [&ks.waits, &ks.waits_by_time, &ks.open_waits],
                &mut record,
            );
        }
    }
    write_finished(ks, &mut write, &counts);
    write
        .commit()
        .and_then(|()| database.persist())
        .map_err(|e| format!("writing the open runs and waits: {e}"))?;
    Ok(Reopened { counts, open_waits })
}

/// Notes in `write` that `record` is charged to its allocation, if it is.
pub(super) fn note_allocation(
    ks: &Keyspaces,
    write: &mut fjall::OwnedWriteBatch,
    record: &RunRecord,
) {
    if let Some(allocation) = record
        .view
        .grant
        .as_deref()
        .filter(|g| super::allocations::is_allocation(g))
    {
        write.insert(
            &ks.allocation_runs,
            allocation_key(allocation, &record.view.request),
            [],
        );
    }
}

/// Writes `counts`' finished outcomes into `write`.
pub(super) fn write_finished(
    ks: &Keyspaces,
    write: &mut fjall::OwnedWriteBatch,
    counts: &RunCounts,
) {
    let finished = ArchivedCounts {
        succeeded: counts.succeeded,
        failed: counts.failed,
    };
    write.insert(
        &ks.archived,
        FINISHED_KEY,
        serde_json::to_vec(&finished).expect("counts serialize"),
    );
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::store::Failpoints;
    use crate::store::high_water::HighWater;
    use ed25519_dalek::{Signer as _, SigningKey};
    use serde_json::json;

    /// A fresh store with the room's keyspaces.
    pub(in crate::processes) fn store(name: &str) -> (std::path::PathBuf, Durable, Keyspaces) {
        let dir = std::env::temp_dir().join(format!("grid-open-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let database = fjall::Database::builder(dir.join("store")).open().unwrap();
        let [meta] = crate::store::open_keyspaces(&database, ["meta"]).unwrap();
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let sign: crate::store::high_water::Signer =
            std::sync::Arc::new(move |m: &[u8]| Ok((1, key.sign(m).to_bytes())));
        let mark = HighWater::open(&dir, &"0".repeat(32), 0, None, sign).unwrap();
        let durable = Durable::new(database, meta, 0, mark, Failpoints::default());
        let ks = Keyspaces::open(&durable).unwrap();
        (dir, durable, ks)
    }

    fn run(request: &str, outcome: &str, units: &str, grant: &str) -> RunRecord {
        serde_json::from_value(json!({
            "view": {
                "request": request, "process": "demo.count", "caller": "hq",
                "receiver": "site", "via": "direct", "role": "receiver",
                "outcome": outcome, "grant": grant, "units": units,
            },
        }))
        .unwrap()
    }

    fn wait(request: &str, outcome: Option<&str>) -> WaitRecord {
        let receiver = json!({"name": "site", "address": "127.0.0.1:1", "keys": {
            "generation": 1, "signing": "s", "mail": "m", "tls": "t"}});
        let run = outcome.map(|o| run(request, o, "consumed", "g").view);
        serde_json::from_value(json!({
            "request": {"request": request, "process": "demo.count"},
            "receiver": receiver, "via": null, "membership": "plant", "run": run,
        }))
        .unwrap()
    }

    fn grants() -> BTreeMap<String, GrantView> {
        let grant = GrantView {
            name: "g".to_owned(),
            caller: "hq".to_owned(),
            allocated: 10,
            reserved: 1,
            consumed: 1,
            ..GrantView::default()
        };
        BTreeMap::from([("g".to_owned(), grant)])
    }

    fn keys(keyspace: &fjall::Keyspace) -> Vec<String> {
        keyspace
            .iter()
            .map(|g| String::from_utf8_lossy(&g.key().unwrap()).into_owned())
            .collect()
    }

    /// A store written before the indexes were kept is walked once; every later open
    /// reads the indexes and finds the same counts, open runs and open waits — and
    /// the run dispatched before the stop is unknown, its unit held, once.
    #[test]
    fn a_store_without_the_indexes_is_walked_once_and_reopens_the_same_from_them() {
        let (dir, durable, ks) = store("walk");
        let records = [
            run("ok", "succeeded", "consumed", "g"),
            run("no", "failed", "none", ""),
            run("mid", "unknown", "reserved", "g"),
            run("alloc", "succeeded", "consumed", "mission:m"),
        ];
        for record in &records {
            let id = record.view.request.as_str();
            ks.runs
                .insert(id, serde_json::to_vec(record).unwrap())
                .unwrap();
        }
        for record in [wait("w-open", None), wait("w-done", Some("succeeded"))] {
            let id = record.request.request.clone();
            ks.waits
                .insert(id, serde_json::to_vec(&record).unwrap())
                .unwrap();
        }
        let mut held = grants();
        let first = reopen(&durable, &ks, &mut held).unwrap();
        let expected = RunCounts {
            succeeded: 2,
            failed: 1,
            unknown: 1,
            running: 0,
        };
        assert_eq!(first.counts, expected);
        assert_eq!(first.open_waits, BTreeSet::from(["w-open".to_owned()]));
        assert_eq!((held["g"].reserved, held["g"].unknown), (0, 1));
        assert_eq!(keys(&ks.open), ["mid"]);
        assert_eq!(keys(&ks.open_waits), ["w-open"]);
        assert_eq!(keys(&ks.allocation_runs), ["mission:m\0alloc"]);
        assert_eq!(ks.runs_by_time.len().unwrap(), 3, "finished runs stamped");
        assert_eq!(
            ks.waits_by_time.len().unwrap(),
            1,
            "the closed wait stamped"
        );
        assert_eq!(keys(&ks.called), ["site"]);
        // Every later open reads the indexes: a run record the walk would count but
        // no index lists is not read (the counts come from "finished").
        ks.runs
            .insert(
                "stray",
                serde_json::to_vec(&run("stray", "failed", "none", "")).unwrap(),
            )
            .unwrap();
        let mut again = held.clone();
        let second = reopen(&durable, &ks, &mut again).unwrap();
        assert_eq!(second.counts, expected);
        assert_eq!(second.open_waits, first.open_waits);
        assert_eq!(again, held, "an unknown run is not interrupted twice");
        // A run listed open whose record is gone refuses the open by name.
        ks.runs.remove("mid").unwrap();
        let refused = reopen(&durable, &ks, &mut held.clone()).err().unwrap();
        assert!(
            refused.contains("`mid`") && refused.contains("damaged"),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
