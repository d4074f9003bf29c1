//! What an installation's stores hold on disk (`gridctl inspect storage`): every
//! keyspace of the host's store with its entries and bytes, the store's write-ahead
//! journal, each database directory of the installation, and the filesystem's free
//! space. Reads only: nothing here writes, flushes or compacts.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::limits::{STORAGE_RESERVE_BYTES_MIN, STORAGE_WALK_FILES_MAX};

/// The installation's stores as `Call::Storage` answers them. Fields are only ever
/// added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageView {
    /// Every keyspace of `DIR/store` (the host's own and its rooms'), by name.
    pub keyspaces: Vec<KeyspaceUsage>,
    /// The bytes of `DIR/store`'s write-ahead journal (entries not yet in a table).
    pub journal_bytes: u64,
    /// Each store directory of the installation (`store`, `authority/M/log`, …) with
    /// the bytes of its files.
    pub directories: Vec<DirectoryUsage>,
    /// The filesystem holding the installation; none when it cannot be read.
    pub disk: Option<DiskUsage>,
    /// The store's count of fsynced writes, which its high-water mark
    /// (`DIR/keys/store.high-water`) covers once they are acknowledged.
    #[serde(default)]
    pub acknowledged_writes: u64,
    /// Every installed checkpoint of the host's rooms (`store::checkpoint`).
    #[serde(default)]
    pub checkpoints: Vec<super::checkpoint::CheckpointView>,
    /// The answers archive (`DIR/archive`, `store::archive`).
    #[serde(default)]
    pub archive: Option<ArchiveView>,
    /// Every journal an open replays or a purge bounds — a model's batches, a tag's
    /// source journal, a route's publications and Ordered inbox — sorted by store and
    /// name: what it holds and what a checkpoint now would purge.
    #[serde(default)]
    pub journals: Vec<JournalView>,
}

/// One journal of one model, tag or route: the positions it holds and how many of them
/// `gridctl storage checkpoint` would purge now (its rooms' purge rules,
/// docs/storage.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalView {
    /// `batches` (a model), `source-journal` (a tag), `delivery-published` (a route
    /// this host publishes), `delivery-inbox` (an Ordered route it receives),
    /// `ledger-journal` (a ledger).
    pub store: String,
    /// The model, tag or route.
    pub name: String,
    /// The oldest position held; none: nothing held (every entry purged, or none yet).
    pub oldest_retained: Option<u64>,
    /// The newest position (0: none yet).
    pub newest: u64,
    /// Of the positions held, how many a checkpoint taken now would purge (the oldest
    /// ones).
    pub purgeable: u64,
    /// Why the positions after those stay, when any do.
    pub kept: Option<String>,
}

impl JournalView {
    /// The view of a journal holding `held_from ..= newest` of which those up to
    /// `bound` may go (`bound` below `held_from`: none).
    pub fn held(
        store: &str,
        name: &str,
        (held_from, newest): (u64, u64),
        bound: u64,
        kept: Option<String>,
    ) -> JournalView {
        let holds = newest >= held_from;
        JournalView {
            store: store.to_owned(),
            name: name.to_owned(),
            oldest_retained: holds.then_some(held_from),
            newest,
            purgeable: if holds && bound >= held_from {
                bound.min(newest) - held_from + 1
            } else {
                0
            },
            kept: kept.filter(|_| holds && bound < newest),
        }
    }
}

/// The host's answers archive: what it holds and how far archiving is behind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveView {
    /// `retain hot-days` (its default when the topology gives none).
    pub hot_days: u32,
    /// `retain archive-days`; none: archived answers are kept for ever.
    pub archive_days: Option<u32>,
    /// Segments held, and released past `archive-days`.
    pub segments: u64,
    pub released_segments: u64,
    /// Answers in the segments held (operations' answers and a receiver's finished
    /// runs), and their bytes (compressed, with trailers).
    pub answers: u64,
    pub bytes: u64,
    /// The span of the segments held: their oldest and newest answer, Unix ms.
    pub first_ms: Option<u64>,
    pub last_ms: Option<u64>,
    /// The oldest answer (or finished run) still in the hot store, Unix ms.
    pub oldest_hot_ms: Option<u64>,
    /// How far that answer is past the hot window, seconds (0: archiving keeps up).
    pub lag_seconds: u64,
    /// Where the segments live: `DIR/archive`'s path, or `s3://BUCKET/PREFIX`.
    #[serde(default)]
    pub store: String,
    /// A remote store that has not answered since gridd started: why (nothing is
    /// archived until it does; the hot store keeps the answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// The last segment written since gridd started, Unix ms.
    #[serde(default)]
    pub last_upload_ms: Option<u64>,
    /// The last refused segment since the last one written: when (Unix ms) and why.
    #[serde(default)]
    pub last_error_ms: Option<u64>,
    #[serde(default)]
    pub last_error: Option<String>,
    /// Where the index of archived answers by id lives when it is not the host's own
    /// store (`dynamodb://TABLE`), and how many of its entries wait in the host's
    /// store for that table to take them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub index_waiting: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One keyspace of the host's store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyspaceUsage {
    pub name: String,
    /// Entries, as the store estimates them (exact until overwrites and deletions
    /// are compacted).
    pub approximate_entries: u64,
    /// Bytes of the keyspace's tables on disk (entries still in the journal are not
    /// in them).
    pub table_bytes: u64,
}

/// One store directory of the installation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryUsage {
    /// Relative to the installation: `store`, `authority/plant-ops/log`, ….
    pub path: String,
    pub files: u64,
    pub bytes: u64,
    /// More than `STORAGE_WALK_FILES_MAX` files: `files` and `bytes` count only those.
    pub truncated: bool,
}

/// The filesystem holding the installation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskUsage {
    pub total_bytes: u64,
    /// Bytes an unprivileged writer may still use.
    pub available_bytes: u64,
}

/// The store directories of an installation: `store`, and each database of each
/// membership's authority (`authority/M/*`).
fn store_directories(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for own in ["store", super::archive::ARCHIVE_DIR] {
        if dir.join(own).is_dir() {
            out.push(own.to_owned());
        }
    }
    let names = |relative: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join(relative))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    for membership in names("authority") {
        for database in names(&format!("authority/{membership}")) {
            out.push(format!("authority/{membership}/{database}"));
        }
    }
    out
}

/// Files and bytes under `path`, never following a link, at most
/// `STORAGE_WALK_FILES_MAX` files.
fn walk(path: &Path) -> (u64, u64, bool) {
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut pending = vec![path.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            let Ok(metadata) = entry.path().symlink_metadata() else {
                continue;
            };
            if metadata.is_dir() {
                pending.push(entry.path());
            } else if metadata.is_file() {
                if files as usize >= STORAGE_WALK_FILES_MAX {
                    return (files, bytes, true);
                }
                files += 1;
                bytes = bytes.saturating_add(metadata.len());
            }
        }
    }
    (files, bytes, false)
}

fn disk(dir: &Path) -> Option<DiskUsage> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes only the struct given; `path` is a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    let block = stat.f_frsize;
    Some(DiskUsage {
        total_bytes: stat.f_blocks.saturating_mul(block),
        available_bytes: stat.f_bavail.saturating_mul(block),
    })
}

/// Why new work must be refused now: the filesystem holding the installation at `dir`
/// has less than `STORAGE_RESERVE_BYTES_MIN` left for an unprivileged writer. The
/// reserve keeps answers, acknowledgements, flushes and compactions writable, so a
/// full disk refuses new work instead of failing a write halfway and stopping the
/// host; work is taken again as soon as space returns. A filesystem that does not
/// answer refuses nothing (the write itself then reports).
pub fn full(dir: &Path) -> Option<String> {
    let disk = disk(dir)?;
    (disk.available_bytes < STORAGE_RESERVE_BYTES_MIN).then(|| {
        format!(
            "storage full: {} bytes available on the filesystem of {}, below STORAGE_RESERVE_BYTES_MIN ({STORAGE_RESERVE_BYTES_MIN}); new work is refused until space returns (answers and reads still work; nothing was journaled)",
            disk.available_bytes,
            dir.display()
        )
    })
}

/// What the metrics show of a store, read from fjall's own accounting (no directory
/// walk, no statvfs): cheap enough for every scrape.
#[derive(Debug, Clone, Default)]
pub struct StoreGauges {
    pub acknowledged_writes: u64,
    pub journal_bytes: u64,
    pub keyspaces: Vec<KeyspaceUsage>,
    pub checkpoints: Vec<super::checkpoint::CheckpointView>,
    pub archive: Option<ArchiveView>,
}

/// The store's [`StoreGauges`] (its checkpoints listed from `checkpoints`).
pub fn gauges(
    database: &super::Durable,
    checkpoints: &super::checkpoint::Checkpoints,
) -> StoreGauges {
    StoreGauges {
        acknowledged_writes: database.writes(),
        journal_bytes: database.journal_disk_space().unwrap_or(0),
        keyspaces: keyspaces(database),
        checkpoints: checkpoints.list(),
        archive: None,
    }
}

/// Every keyspace of `database`, by name, with its entries and table bytes.
fn keyspaces(database: &fjall::Database) -> Vec<KeyspaceUsage> {
    let mut keyspaces: Vec<KeyspaceUsage> = database
        .list_keyspace_names()
        .iter()
        .filter_map(|name| {
            let name: &str = name.as_ref();
            let name = name.to_owned();
            let keyspace = database
                .keyspace(&name, fjall::KeyspaceCreateOptions::default)
                .ok()?;
            Some(KeyspaceUsage {
                approximate_entries: keyspace.approximate_len() as u64,
                table_bytes: keyspace.disk_space(),
                name,
            })
        })
        .collect();
    keyspaces.sort_by(|a, b| a.name.cmp(&b.name));
    keyspaces
}

/// What the installation at `dir`, whose store `database` is, holds on disk now.
pub fn usage(database: &super::Durable, dir: &Path) -> StorageView {
    let keyspaces = keyspaces(database);
    let directories = store_directories(dir)
        .into_iter()
        .map(|path| {
            let (files, bytes, truncated) = walk(&dir.join(&path));
            DirectoryUsage {
                path,
                files,
                bytes,
                truncated,
            }
        })
        .collect();
    StorageView {
        keyspaces,
        journal_bytes: database.journal_disk_space().unwrap_or(0),
        directories,
        disk: disk(dir),
        acknowledged_writes: database.writes(),
        checkpoints: Vec::new(),
        archive: None,
        journals: Vec::new(),
    }
}
