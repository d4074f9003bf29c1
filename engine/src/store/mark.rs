//! The store's identity, kept outside it: a random id written into the store when it
//! is created and into `DIR/keys/store.mark` (0600, synced, atomically). At every
//! open the two must agree. A store that is gone, emptied or swapped for another
//! installation's is refused by name — never started afresh, which would run
//! acknowledged operation ids again (SPEC principle 2).
//!
//! An older copy of this very store (a rollback) has the same id: the high-water mark
//! (`super::high_water`) refuses it.

use std::path::{Path, PathBuf};

/// The mark's file in the installation's custody directory.
pub const STORE_MARK_FILE: &str = "store.mark";
/// The key of the store's own copy of its id (in its `meta` keyspace).
pub const STORE_ID_KEY: &str = "store-id";

/// Why the store does not belong to this installation.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    #[error(
        "{store}: the store of this installation is missing ({mark} names store {id}): it was deleted, moved or emptied. gridd never starts a store afresh, which would run acknowledged operation ids again; restore {store} from a backup taken while gridd was stopped"
    )]
    Missing {
        store: PathBuf,
        mark: PathBuf,
        id: String,
    },
    #[error(
        "{store}: this is another store ({found}) than the one of this installation ({mark} names store {id}): it was copied or swapped in from elsewhere. gridd does not serve it; put this installation's own store back"
    )]
    Foreign {
        store: PathBuf,
        mark: PathBuf,
        id: String,
        found: String,
    },
    #[error("{path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
}

pub fn mark_path(dir: &Path) -> PathBuf {
    dir.join("keys").join(STORE_MARK_FILE)
}

/// The id `DIR/keys/store.mark` names, if the installation has one.
pub fn read(dir: &Path) -> Result<Option<String>, MarkError> {
    let path = mark_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(Some(id.to_owned()))
            } else {
                Err(MarkError::Unreadable {
                    path,
                    reason: "not a store id (32 hexadecimal digits)".to_owned(),
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(MarkError::Unreadable {
            path,
            reason: e.to_string(),
        }),
    }
}

/// Before the store opens: the installation's mark, refusing a store directory that
/// is gone when the mark names one (opening would create it empty).
pub fn before_open(dir: &Path, store: &Path) -> Result<Option<String>, MarkError> {
    let mark = read(dir)?;
    match mark {
        Some(id) if !store.is_dir() => Err(MarkError::Missing {
            store: store.to_owned(),
            mark: mark_path(dir),
            id,
        }),
        mark => Ok(mark),
    }
}

/// Writes the mark (0600, synced, renamed into place, its directory synced).
pub fn write(dir: &Path, id: &str) -> Result<(), MarkError> {
    let path = mark_path(dir);
    super::write_private(&path, format!("{id}\n").as_bytes()).map_err(|e| MarkError::Unreadable {
        path: path.clone(),
        reason: e.to_string(),
    })
}

/// A new store id: 16 random bytes as hexadecimal.
pub fn new_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    hex::encode(bytes)
}

/// What to do with a store whose own id is `held`, given the installation's `mark`.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// They agree.
    Same,
    /// A new store (or one from before marks): write `id` into the store, then the mark.
    Create { id: String },
    /// The store has an id and no mark names it yet (a stop between the two writes,
    /// or an installation from before marks): write the mark.
    Adopt { id: String },
}

/// Compares the store's own id with the installation's mark.
pub fn judge(
    dir: &Path,
    store: &Path,
    mark: Option<String>,
    held: Option<String>,
) -> Result<Verdict, MarkError> {
    match (mark, held) {
        (None, None) => Ok(Verdict::Create { id: new_id() }),
        (None, Some(id)) => Ok(Verdict::Adopt { id }),
        (Some(id), Some(found)) if id == found => Ok(Verdict::Same),
        (Some(id), Some(found)) => Err(MarkError::Foreign {
            store: store.to_owned(),
            mark: mark_path(dir),
            id,
            found,
        }),
        (Some(id), None) => Err(MarkError::Missing {
            store: store.to_owned(),
            mark: mark_path(dir),
            id,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_agrees_with_its_mark_or_is_refused_by_name() {
        let (dir, store) = (Path::new("/i"), Path::new("/i/store"));
        let id = "0123456789abcdef0123456789abcdef".to_owned();
        assert_eq!(
            judge(dir, store, Some(id.clone()), Some(id.clone())).unwrap(),
            Verdict::Same
        );
        assert_eq!(
            judge(dir, store, None, Some(id.clone())).unwrap(),
            Verdict::Adopt { id: id.clone() }
        );
        assert!(matches!(
            judge(dir, store, None, None).unwrap(),
            Verdict::Create { id } if id.len() == 32
        ));
        let missing = judge(dir, store, Some(id.clone()), None).unwrap_err();
        assert!(missing.to_string().contains("is missing"), "{missing}");
        let foreign = judge(dir, store, Some(id), Some("f".repeat(32))).unwrap_err();
        assert!(foreign.to_string().contains("another store"), "{foreign}");
    }
}
