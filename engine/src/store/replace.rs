//! Storage replacement (SPEC C11, docs/transfer.md, "Storage replacement"): a stopped
//! host's store replaced by a copy of it — the disk under it failed or is being
//! retired — under a new **storage generation**, so the store it replaces is fenced: if
//! it ever comes back (the old disk remounted, the kept directory put back), gridd
//! refuses it (`fenced: storage generation 2 was replaced by 3`), never serving two
//! stores of one installation.
//!
//! Steps, each journaled in `DIR/replace.toml` (0600, synced) before the next acts,
//! each resumable by the same operation id; a gridd started meanwhile refuses:
//!
//! 1. **prepare** — the host is stopped; the new generation is the installation's plus
//!    one, refused at `STORAGE_GENERATION_MAX`;
//! 2. **copy** — the replacement (a copy of a store, or a tar archive of one:
//!    `unpack.rs`) copied into `DIR/store.replacing`, each file synced, and verified
//!    against its source by a manifest of every file (size, SHA-256);
//! 3. **check** — the composition's judge opens the copy: the store format this gridd
//!    reads, this installation's store (its id), no acknowledged write missing (the
//!    high-water mark), no mission of the host active; then stamps the new generation
//!    into the copy's own `meta` (synced);
//! 4. **install** — `DIR/store` renamed to `DIR/replaced/store.G` (kept, never removed),
//!    the copy renamed to `DIR/store`;
//! 5. **record** — `DIR/keys/storage.toml` names the new generation and the
//!    replacement (its op id, source, time, where the predecessor is kept); the journal
//!    is removed. A re-sent op id is answered from that record.
//!
//! Invariants, stated as absences: no gridd serves an installation while a
//! replacement is journaled, nor a store whose generation is below the installation's;
//! no copy is installed that differs from its source or that the judge refused; no
//! store is ever removed (the predecessor is kept); no generation is reused.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::transfer::{self, TransferError};
use super::{Failpoint, Failpoints};
use crate::limits::STORAGE_GENERATION_MAX;

/// A replacement's journal in the installation.
pub const REPLACE_FILE: &str = "replace.toml";
/// The installation's storage generation and replacement history, in its custody.
pub const STORAGE_FILE: &str = "storage.toml";
/// The store's own storage generation (its `meta` keyspace), decimal text.
pub const GENERATION_KEY: &str = "storage-generation";
/// Where the copy is staged, beside `DIR/store`.
const STAGED: &str = "store.replacing";
/// Where replaced stores are kept.
const REPLACED: &str = "replaced";

/// Where a replacement stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Prepared,
    Copied,
    Checked,
}

/// `DIR/replace.toml`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Journal {
    pub op: String,
    pub from: PathBuf,
    /// The generation the replacement installs.
    pub generation: u64,
    pub step: Step,
}

/// One replacement done, as `keys/storage.toml` records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replacement {
    pub op: String,
    /// The generation replaced ...
    pub replaced: u64,
    /// ... by this one.
    pub generation: u64,
    pub from: PathBuf,
    pub at_ms: u64,
    /// Where the replaced store is kept (none when the installation had lost it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<PathBuf>,
}

/// `DIR/keys/storage.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    pub generation: u64,
    #[serde(default)]
    pub replacements: Vec<Replacement>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: does not read: {reason}", path.display())]
    Journal { path: PathBuf, reason: String },
    #[error(
        "a storage replacement from {} (op {op}) is already open: it resumes with its own operation id, and no other starts meanwhile",
        from.display()
    )]
    Open { from: PathBuf, op: String },
    #[error("a gridd serves {}: stop it first (storage is replaced under a stopped host)", .0.display())]
    Running(PathBuf),
    #[error(
        "storage generation {generation} is exhausted: it is at its maximum (STORAGE_GENERATION_MAX = {STORAGE_GENERATION_MAX}); this installation's storage is not replaced again (a new installation is a new host)"
    )]
    Exhausted { generation: u64 },
    #[error("{} is not a directory (a copy of a store to put in place) nor a tar archive of one", .0.display())]
    NoSource(PathBuf),
    #[error("the copy of {}: {source}", from.display())]
    Copy {
        source: TransferError,
        from: PathBuf,
    },
    #[error("{} is refused as this host's store: {reason}; nothing was replaced", from.display())]
    Refused { from: PathBuf, reason: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReplaceError + '_ {
    move |source| ReplaceError::Io {
        path: path.to_owned(),
        source,
    }
}

fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, ReplaceError> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text)
            .map(Some)
            .map_err(|e| ReplaceError::Journal {
                path: path.to_owned(),
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

/// Writes a record (0600, synced, renamed into place, its directory synced).
fn write_toml<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), ReplaceError> {
    let text = toml::to_string(value).expect("records serialize");
    super::write_private(path, text.as_bytes()).map_err(io(path))
}

fn sync_dir(dir: &Path) -> Result<(), ReplaceError> {
    super::sync_dir(dir).map_err(io(dir))
}

fn storage_path(dir: &Path) -> PathBuf {
    dir.join("keys").join(STORAGE_FILE)
}

/// The installation's storage record (generation 1 and no history when it has none).
pub fn storage(dir: &Path) -> Result<Storage, ReplaceError> {
    let held: Option<Storage> = read_toml(&storage_path(dir))?;
    Ok(held.unwrap_or(Storage {
        generation: 1,
        replacements: Vec::new(),
    }))
}

/// An open replacement's journal, if any.
pub fn journal(dir: &Path) -> Result<Option<Journal>, ReplaceError> {
    read_toml(&dir.join(REPLACE_FILE))
}

/// Why a gridd must not serve `dir` now (a replacement under way), or `None`.
pub fn refusal(dir: &Path) -> Option<String> {
    match journal(dir) {
        Ok(None) => None,
        Ok(Some(j)) => Some(format!(
            "a storage replacement from {} (op {}, generation {}) is under way: `gridctl reconcile` of the files that planned it, or `gridctl host replace-storage` with the same op id, finishes it; no gridd serves this installation meanwhile",
            j.from.display(),
            j.op,
            j.generation
        )),
        Err(e) => Some(e.to_string()),
    }
}

/// At open: the store's own generation (`None`: it never recorded one, generation 1)
/// judged against the installation's. A lower one is a replaced store come back.
pub fn judge(dir: &Path, held: Option<&[u8]>) -> Result<u64, String> {
    let record = storage(dir).map_err(|e| e.to_string())?;
    let found = match held {
        None => 1,
        Some(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|t| t.parse::<u64>().ok())
            .ok_or_else(|| "the store's storage generation does not read".to_owned())?,
    };
    if found == record.generation {
        return Ok(found);
    }
    if found < record.generation {
        let by = record
            .replacements
            .iter()
            .find(|r| r.replaced == found)
            .map(|r| {
                format!(
                    " (op {} from {}, {})",
                    r.op,
                    r.from.display(),
                    super::rfc3339_ms(r.at_ms)
                )
            })
            .unwrap_or_default();
        return Err(format!(
            "fenced: storage generation {found} was replaced by {}{by}; this is a predecessor, never served again: put back the store of generation {}",
            record.generation, record.generation
        ));
    }
    Err(format!(
        "the store is storage generation {found}, but {} says {}: the custody directory is older than the store; put back the custody this installation last served",
        storage_path(dir).display(),
        record.generation
    ))
}

/// What a replacement did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub record: Replacement,
    /// Whether this call found it already done (a re-sent operation id).
    pub already: bool,
}

/// Replaces the stopped installation `dir`'s store by a copy of `from` under
/// operation id `op`, from wherever an earlier call with the same id stopped.
/// `running`: whether a gridd serves `dir` now. `judge(staged, generation)`: opens the
/// staged copy, refuses it (why) or stamps `generation` into it. Failpoints:
/// `replace-after-prepare`, `replace-mid-copy`, `replace-before-install`,
/// `replace-before-record`.
pub fn replace(
    dir: &Path,
    from: &Path,
    op: &str,
    running: impl Fn(&Path) -> bool,
    judge: impl Fn(&Path, u64) -> Result<(), String>,
    failpoints: &Failpoints,
) -> Result<Replaced, ReplaceError> {
    let record = storage(dir)?;
    if let Some(done) = record.replacements.iter().find(|r| r.op == op) {
        return Ok(Replaced {
            record: done.clone(),
            already: true,
        });
    }
    let journal_path = dir.join(REPLACE_FILE);
    let mut journal = match journal(dir)? {
        Some(j) if j.op != op || j.from != from => {
            return Err(ReplaceError::Open {
                from: j.from,
                op: j.op,
            });
        }
        Some(j) => j,
        None => {
            if running(dir) {
                return Err(ReplaceError::Running(dir.to_owned()));
            }
            if record.generation >= STORAGE_GENERATION_MAX {
                return Err(ReplaceError::Exhausted {
                    generation: record.generation,
                });
            }
            if !from.is_dir() && !from.is_file() {
                return Err(ReplaceError::NoSource(from.to_owned()));
            }
            let j = Journal {
                op: op.to_owned(),
                from: from.to_owned(),
                generation: record.generation + 1,
                step: Step::Prepared,
            };
            write_toml(&journal_path, &j)?;
            failpoints.abort_if_armed(Failpoint::ReplaceAfterPrepare);
            j
        }
    };
    let staged = dir.join(STAGED);
    if journal.step == Step::Prepared {
        if staged.exists() {
            // A copy a stop cut short starts again from nothing.
            std::fs::remove_dir_all(&staged).map_err(io(&staged))?;
        }
        let copy = |source| ReplaceError::Copy {
            source,
            from: from.to_owned(),
        };
        let mut each = || failpoints.abort_if_armed(Failpoint::ReplaceMidCopy);
        if from.is_file() {
            // A tar archive of the store: unpacked, then compared with its own bytes.
            let lines = super::unpack::unpack(from, &staged, &mut each).map_err(copy)?;
            transfer::compare_unpacked(from, &lines, &staged).map_err(copy)?;
        } else {
            transfer::copy_tree(from, &staged, &mut each).map_err(copy)?;
            transfer::compare(from, &staged).map_err(copy)?;
        }
        journal.step = Step::Copied;
        write_toml(&journal_path, &journal)?;
    }
    if journal.step == Step::Copied {
        if let Err(reason) = judge(&staged, journal.generation) {
            // Nothing was replaced: the staged copy goes, and so does the journal.
            std::fs::remove_dir_all(&staged).map_err(io(&staged))?;
            std::fs::remove_file(&journal_path).map_err(io(&journal_path))?;
            sync_dir(dir)?;
            return Err(ReplaceError::Refused {
                from: from.to_owned(),
                reason,
            });
        }
        journal.step = Step::Checked;
        write_toml(&journal_path, &journal)?;
    }
    failpoints.abort_if_armed(Failpoint::ReplaceBeforeInstall);
    // Asked again before anything moves: a gridd that started between the prepare's
    // question and its journal (a start refuses once the journal exists) still holds
    // the store.
    if running(dir) {
        return Err(ReplaceError::Running(dir.to_owned()));
    }
    let replaced = journal.generation - 1;
    let kept = dir.join(REPLACED).join(format!("store.{replaced}"));
    let store = dir.join("store");
    let mut kept_any = kept.exists();
    if staged.exists() {
        if store.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir.join(REPLACED))
                .map_err(io(&kept))?;
            std::fs::rename(&store, &kept).map_err(io(&kept))?;
            kept_any = true;
        }
        std::fs::rename(&staged, &store).map_err(io(&store))?;
        if kept_any {
            sync_dir(&dir.join(REPLACED))?;
        }
        sync_dir(dir)?;
    }
    failpoints.abort_if_armed(Failpoint::ReplaceBeforeRecord);
    let done = Replacement {
        op: op.to_owned(),
        replaced,
        generation: journal.generation,
        from: from.to_owned(),
        at_ms: super::now_ms(),
        kept: kept_any.then_some(kept),
    };
    let mut record = record;
    record.generation = journal.generation;
    record.replacements.push(done.clone());
    write_toml(&storage_path(dir), &record)?;
    std::fs::remove_file(&journal_path).map_err(io(&journal_path))?;
    sync_dir(dir)?;
    Ok(Replaced {
        record: done,
        already: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installation(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-replace-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        std::fs::create_dir_all(dir.join("store")).unwrap();
        std::fs::write(dir.join("store").join("data"), b"old").unwrap();
        dir
    }

    fn copy(dir: &Path) -> PathBuf {
        let from = dir.with_extension("copy");
        let _ = std::fs::remove_dir_all(&from);
        std::fs::create_dir_all(&from).unwrap();
        std::fs::write(from.join("data"), b"new").unwrap();
        from
    }

    #[test]
    fn a_replacement_keeps_its_predecessor_fences_it_and_answers_its_id_again() {
        let dir = installation("ok");
        let from = copy(&dir);
        let stamp = |_: &Path, g: u64| if g == 2 { Ok(()) } else { Err("gen".into()) };
        let done = replace(&dir, &from, "r1", |_| false, stamp, &Failpoints::default()).unwrap();
        assert!(!done.already);
        assert_eq!((done.record.replaced, done.record.generation), (1, 2));
        assert_eq!(std::fs::read(dir.join("store/data")).unwrap(), b"new");
        assert_eq!(
            std::fs::read(dir.join("replaced/store.1/data")).unwrap(),
            b"old"
        );
        assert!(refusal(&dir).is_none());
        assert_eq!(judge(&dir, Some(b"2")).unwrap(), 2);
        let fenced = judge(&dir, None).unwrap_err();
        assert!(
            fenced.starts_with("fenced: storage generation 1 was replaced by 2 (op r1"),
            "{fenced}"
        );
        assert!(
            judge(&dir, Some(b"3"))
                .unwrap_err()
                .contains("older than the store")
        );
        let again = replace(&dir, &from, "r1", |_| true, stamp, &Failpoints::default()).unwrap();
        assert!(again.already);
        assert_eq!(again.record, done.record);
    }

    #[test]
    fn a_refused_copy_replaces_nothing_and_a_running_host_or_exhausted_generation_refuse() {
        let dir = installation("refused");
        let from = copy(&dir);
        let refuse = |_: &Path, _: u64| Err("not this host's store".to_owned());
        let e = replace(&dir, &from, "r1", |_| false, refuse, &Failpoints::default()).unwrap_err();
        assert!(e.to_string().contains("not this host's store"), "{e}");
        assert_eq!(std::fs::read(dir.join("store/data")).unwrap(), b"old");
        assert!(journal(&dir).unwrap().is_none() && !dir.join(STAGED).exists());
        let ok = |_: &Path, _: u64| Ok(());
        let e = replace(&dir, &from, "r2", |_| true, ok, &Failpoints::default()).unwrap_err();
        assert!(matches!(e, ReplaceError::Running(_)), "{e}");
        write_toml(
            &storage_path(&dir),
            &Storage {
                generation: STORAGE_GENERATION_MAX,
                replacements: Vec::new(),
            },
        )
        .unwrap();
        let e = replace(&dir, &from, "r3", |_| false, ok, &Failpoints::default()).unwrap_err();
        assert!(e.to_string().contains("STORAGE_GENERATION_MAX"), "{e}");
        assert_eq!(std::fs::read(dir.join("store/data")).unwrap(), b"old");
    }

    #[test]
    fn an_open_replacement_refuses_another_and_resumes_with_its_own_id() {
        let dir = installation("resume");
        let from = copy(&dir);
        write_toml(
            &dir.join(REPLACE_FILE),
            &Journal {
                op: "r1".into(),
                from: from.clone(),
                generation: 2,
                step: Step::Prepared,
            },
        )
        .unwrap();
        // A copy cut short: a leftover staged file never survives the resumed copy.
        std::fs::create_dir_all(dir.join(STAGED)).unwrap();
        std::fs::write(dir.join(STAGED).join("leftover"), b"x").unwrap();
        assert!(refusal(&dir).unwrap().contains("op r1"));
        let ok = |_: &Path, _: u64| Ok(());
        let e = replace(&dir, &from, "r2", |_| false, ok, &Failpoints::default()).unwrap_err();
        assert!(matches!(e, ReplaceError::Open { .. }), "{e}");
        // A gridd serving it meanwhile: nothing is installed, the journal stays.
        let e = replace(&dir, &from, "r1", |_| true, ok, &Failpoints::default()).unwrap_err();
        assert!(matches!(e, ReplaceError::Running(_)), "{e}");
        assert_eq!(std::fs::read(dir.join("store/data")).unwrap(), b"old");
        assert!(refusal(&dir).unwrap().contains("op r1"));
        let done = replace(&dir, &from, "r1", |_| false, ok, &Failpoints::default()).unwrap();
        assert_eq!(done.record.generation, 2);
        assert!(!dir.join("store/leftover").exists());
        assert_eq!(storage(&dir).unwrap().generation, 2);
    }
}
