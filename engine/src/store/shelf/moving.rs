//! Moving an archive's index out of a table (`~ archive` changing `index`, issue 29,
//! docs/storage.md "Adapters"): at gridd's start, before the shelf opens. Entries still
//! waiting for the table it leaves are put there first, so it holds every id the host
//! archived there. Then each of the host's records there is read (a consistent scan,
//! page by page), its tag verified, and either put in the table the index goes to (the
//! same bytes: the tag names the host and the key, not the table) or written into the
//! host's own `archive-index` with its digest dropped in the same write. The move is
//! whole only when every id whose digest the store keeps was found; then the caller
//! records the new place (synced). A stop anywhere resumes: each step done again is
//! the same step. The table left is only read: its records stay there.
//!
//! Invariants, stated as absences: no digest leaves the store except in the write
//! that puts its id's entry in `archive-index`; no record is copied whose tag does not
//! verify; no move is answered whole while an id the host archived in the table left
//! was not found there.

use std::path::Path;

use super::index::{self, RemoteIndex};
use crate::store::fatal;

/// Why a move of the index is not whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexMoveRefused {
    /// A table does not answer, or the one the index goes to holds another entry for a
    /// key: the move waits (nothing was lost; it is made again at the next start).
    Waits(String),
    /// The table left holds a record that is not this installation's, or lacks ids
    /// the host archived there: refused by name.
    Damaged(String),
}

/// Moves the index of the installation at `dir` (store `database`) out of `from`
/// into `to` (none: the store's own `archive-index`), `before_whole` run (a failpoint)
/// once every record is where it goes. Answers how many records of the host's the
/// table left holds.
pub fn move_index(
    dir: &Path,
    database: &fjall::Database,
    (from, to): (&RemoteIndex, Option<&RemoteIndex>),
    before_whole: impl FnOnce(),
) -> Result<u64, IndexMoveRefused> {
    let [index, ids, unpublished] = crate::store::open_keyspaces(
        database,
        ["archive-index", "archive-ids", "archive-unpublished"],
    )
    .unwrap_or_else(|e| fatal(dir, "opening the archive index", e));
    let refused = |why: String| match why.starts_with("the archive index does not answer") {
        true => IndexMoveRefused::Waits(why),
        false => IndexMoveRefused::Damaged(why),
    };
    let commit = |write: fjall::OwnedWriteBatch| {
        write
            .commit()
            .unwrap_or_else(|e| fatal(dir, "moving the archive index", e));
    };
    let (_, failed) = index::put_waiting(dir, database, (&index, &unpublished), from, commit);
    if let Some(why) = failed {
        return Err(refused(why));
    }
    let known = |key: &str| {
        ids.get(index::id_digest(key))
            .unwrap_or_else(|e| fatal(dir, "reading the archive's ids", e))
            .is_some()
    };
    let (mut held, mut found) = (0u64, 0u64);
    let mut after: Option<String> = None;
    loop {
        let page = from
            .scan(after.as_deref())
            .map_err(IndexMoveRefused::Waits)?;
        let mut write = database.batch();
        for (record, value) in &page.records {
            let key = from.key_of(record).ok_or_else(|| {
                IndexMoveRefused::Damaged(format!(
                    "the archive index {} answered a record `{}` of another host",
                    from.place(),
                    grid_spec::diagnostic::quoted(record)
                ))
            })?;
            let at = from
                .open(key, value, &grid_spec::diagnostic::quoted(key))
                .map_err(IndexMoveRefused::Damaged)?;
            held += 1;
            let ours = known(key);
            found += u64::from(ours);
            match to {
                // Entries the host's store already holds (a move resumed, or ids
                // indexed here before the table) are the same entries.
                None => {
                    write.insert(&index, key, at.to_bytes());
                    write.remove(&ids, index::id_digest(key));
                }
                Some(to) if ours => to.put(key, &at).map_err(refused)?,
                Some(_) => {}
            }
        }
        commit(write);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    // What the store still knows by digest only: ids archived in the table left that
    // it does not hold (none, moving into the store, once every record came).
    let digests = ids
        .len()
        .unwrap_or_else(|e| fatal(dir, "counting the archive's ids", e)) as u64;
    let missing = match to {
        None => digests,
        Some(_) => digests.saturating_sub(found),
    };
    if missing > 0 {
        return Err(IndexMoveRefused::Damaged(format!(
            "the archive index {} holds no record of {missing} id(s) this host archived there (removed, or the table rolled back or replaced): the index is not moved, and those ids are never answered as new",
            from.place()
        )));
    }
    before_whole();
    Ok(held)
}
