//! Answers past the hot window (docs/storage.md, "Archive"): acknowledged operation
//! records older than `retain hot-days` (or than `gridctl storage archive
//! --older-than-seconds N`) move from the `operations` keyspace onto the installation's
//! shelf (`store::shelf`: signed segments in `DIR/archive`, an index by id in the
//! store); a re-sent id found there gets its original answer with `archived: true`.
//! With `retain archive-days`, an id answered longer ago than that is refused as
//! expired, and whole segments past it are released.
//!
//! Keyspace: `operations-by-time` (answer time `u64` BE, op → empty: what a pass reads,
//! oldest first); the shelf keeps `archive-index` and `archive-segments`.
//!
//! The periodic pass waits for company: it writes a segment of fewer than
//! `ARCHIVE_SEGMENT_ENTRIES_MIN` answers only once the oldest has waited
//! `ARCHIVE_SEGMENT_WAIT_MAX` past the window, so a quiet host makes at most one
//! segment an hour, not one a minute.
//!
//! Invariants, stated as absences: no answer leaves the hot store before the segment
//! holding it is synced and the index naming it is committed in the same synced write
//! that removes it; no unacknowledged answer is archived; no id found in the index is
//! ever executed again — an unreadable archive answers `unknown`.

use super::*;
use crate::limits::{ARCHIVE_SEGMENTS_PER_PASS_MAX, RETAIN_DAY_MS};
use crate::store::archive;
use crate::store::shelf::{Found, Shared, Shelf, ShelfError};

/// The archive of a host: the installation's shelf (segments and their index, on the
/// ground floor) and the keyspace that finds answers past the hot window.
pub(super) struct Archive {
    pub(super) shelf: Shared,
    pub(super) by_time: Keyspace,
}

/// Where an operation id's record was found.
pub(super) enum Lookup {
    Hot(OperationRecord),
    Archived(OperationRecord),
    /// In the index, answered at `at_ms`, past the `archive-days` window.
    Expired {
        at_ms: u64,
        days: u32,
    },
    /// In the index, but its segment cannot be read: never "not found".
    Unreadable(String),
    Absent,
}

/// What one archive pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ArchivePass {
    pub answers: u64,
    pub segments: u64,
    /// Answers old enough but not acknowledged by their caller: kept hot.
    pub unacknowledged: u64,
    /// A receiver's finished runs archived (in `segments`, with the answers).
    pub runs: u64,
    /// A caller's closed waits archived (in `segments`).
    pub waits: u64,
    /// Ledger answers settled by a checkpoint, archived (in `segments`).
    pub ledger_ids: u64,
    /// Finished runs old enough whose outcome is still owed to a mailbox caller, or
    /// charged to a mission's allocation not settled: kept hot.
    pub owed: u64,
    /// Segments released past `archive-days`.
    pub released: u64,
    /// More old answers wait for the next pass (ARCHIVE_SEGMENTS_PER_PASS_MAX).
    pub more: bool,
}

impl ArchivePass {
    /// `archived 120 answers in 1 segment (3 unacknowledged kept hot)`.
    pub fn describe(&self) -> String {
        let plural =
            |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let rooms: Vec<String> = [
            (self.runs, "run", "runs"),
            (self.waits, "wait", "waits"),
            (self.ledger_ids, "ledger answer", "ledger answers"),
        ]
        .into_iter()
        .filter(|(n, ..)| *n > 0)
        .map(|(n, one, many)| format!(" and {}", plural(n, one, many)))
        .collect();
        let runs = rooms.concat();
        let mut text = format!(
            "archived {}{runs} in {}",
            plural(self.answers, "answer", "answers"),
            plural(self.segments, "segment", "segments")
        );
        if self.unacknowledged > 0 {
            text += &format!(
                "; {} kept hot until their callers acknowledge them",
                plural(self.unacknowledged, "answer", "answers")
            );
        }
        if self.owed > 0 {
            text += &format!(
                "; {} kept hot (an outcome owed to a mailbox, or a mission's allocation not settled)",
                plural(self.owed, "run", "runs")
            );
        }
        if self.released > 0 {
            text += &format!(
                "; released {} past the archive window",
                plural(self.released, "segment", "segments")
            );
        }
        if self.more {
            text += "; more answers wait for the next pass";
        }
        text
    }
}

impl Archive {
    /// Opens the archive of the installation at `dir` in `database` on the adapter
    /// `config` names (the shelf refuses an archive that is not the one the store
    /// recorded, by name).
    pub(super) fn open(
        dir: &Path,
        database: &fjall::Database,
        meta: &Keyspace,
        config: &HostConfig,
        failpoints: &crate::store::Failpoints,
    ) -> Result<Archive, HostError> {
        let store = dir.join("store");
        let [by_time] =
            crate::store::open_keyspaces(database, ["operations-by-time"]).map_err(|source| {
                HostError::Storage {
                    path: store.clone(),
                    source,
                }
            })?;
        leave_bucket(dir, database, meta, config, failpoints)?;
        let indexed = index_went(dir, meta, config)?;
        let shelf = match &config.archive {
            None => Shelf::open(dir, database, meta),
            Some(table) if table.table().is_some() => Shelf::open_on(
                dir,
                database,
                meta,
                table_adapter(dir, database, meta, (config, table), (indexed, failpoints))?,
            ),
            Some(s3) => Shelf::open_on(
                dir,
                database,
                meta,
                remote_adapter(dir, database, meta, s3, failpoints)?,
            ),
        };
        let shelf = shelf.map_err(|e| match e {
            ShelfError::Storage(source) => HostError::Storage {
                path: store.clone(),
                source,
            },
            ShelfError::StoreDamaged(detail) => HostError::Damaged {
                path: store.clone(),
                detail,
            },
            ShelfError::Refused(detail) => HostError::Damaged {
                path: match &config.archive {
                    None => dir.join(archive::ARCHIVE_DIR),
                    Some(s3) => PathBuf::from(&s3.url),
                },
                detail,
            },
        })?;
        Ok(Archive {
            shelf: std::sync::Arc::new(std::sync::RwLock::new(shelf)),
            by_time,
        })
    }
}

impl Archive {
    /// The shelf, read (finds, views): shared with other readers.
    pub(super) fn shelf(&self) -> std::sync::RwLockReadGuard<'_, Shelf> {
        self.shelf.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// The key archive segments on another server are sealed with (32 random bytes,
/// private, made with the first remote archive): `DIR/keys/archive-seal.key`.
pub const ARCHIVE_SEAL_KEY: &str = "keys/archive-seal.key";

/// The `meta` key naming the remote archive this store's segments went to (`s3://…`):
/// written, synced, before the first segment is put there; a host.toml naming another
/// is refused.
const ARCHIVE_REMOTE_KEY: &str = "archive-remote";

/// The adapter of `archive "s3://…"`: the bucket's objects sealed with the
/// installation's archive key ([`bucket_blobs`]).
fn remote_adapter(
    dir: &Path,
    database: &fjall::Database,
    meta: &Keyspace,
    s3: &crate::config::S3ArchiveConfig,
    failpoints: &crate::store::Failpoints,
) -> Result<crate::store::shelf::Adapter, HostError> {
    Ok(crate::store::shelf::Adapter {
        blobs: bucket_blobs(dir, database, meta, s3, failpoints)?,
        place: s3.url.clone(),
        remote: true,
        index: None,
    })
}

/// The segments of a bucket (`archive "s3://…"`, or a table's `segments "s3://…"`),
/// sealed with the installation's archive key. Refused, by name, when host.toml's
/// address does not read, the credentials file is missing or weak, the store's
/// segments went to another bucket, or the sealing key is missing while segments were
/// sealed with it. Segments still in the installation's own `DIR/archive` (an archive
/// moving from files, `~ archive`) are moved first ([`move_segments`]).
fn bucket_blobs(
    dir: &Path,
    database: &fjall::Database,
    meta: &Keyspace,
    s3: &crate::config::S3ArchiveConfig,
    failpoints: &crate::store::Failpoints,
) -> Result<Box<dyn archive::Blobs>, HostError> {
    let (refused, storage) = (config_refused(dir), storage_failed(dir));
    let went = meta.get(ARCHIVE_REMOTE_KEY).map_err(&storage)?;
    if let Some(url) = went.as_deref().filter(|url| *url != s3.url.as_bytes()) {
        return Err(refused(format!(
            "host.toml names archive segments in {}, but this store's segments went to {}: moving an archive between buckets is not performed by this version; put back the archive this installation wrote",
            s3.url,
            String::from_utf8_lossy(url)
        )));
    }
    let key = seal_key(dir, went.is_some())?;
    let sealed = sealed_bucket(dir, s3, &key)?;
    record_remote(database, meta, went.is_some(), ARCHIVE_REMOTE_KEY, &s3.url).map_err(&storage)?;
    let local = dir.join(archive::ARCHIVE_DIR);
    if local.join(archive::SEGMENTS_PREFIX).is_dir() {
        let files = archive::LocalFiles::open(dir).map_err(|e| HostError::Damaged {
            path: local.clone(),
            detail: e.to_string(),
        })?;
        let from = Store {
            blobs: &files,
            place: local.display().to_string(),
        };
        let to = Store {
            blobs: &sealed,
            place: s3.url.clone(),
        };
        move_segments(from, to, failpoints)?;
    }
    Ok(Box::new(sealed))
}

/// The objects of the bucket `s3` names, sealed with the archive's key `key`: refused,
/// by name, when host.toml's address does not read or the credentials file is missing
/// or weak. Nothing is sent.
fn sealed_bucket(
    dir: &Path,
    s3: &crate::config::S3ArchiveConfig,
    key: &[u8; 32],
) -> Result<crate::store::sealed::Sealed<crate::store::s3::S3Blobs>, HostError> {
    use crate::store::s3::{AccessKeys, S3Blobs};
    let refused = config_refused(dir);
    let target = s3.target().map_err(&refused)?;
    let keys = AccessKeys::read(&dir.join(&target.credentials))
        .map_err(|e| refused(format!("archive {}: {e}", s3.url)))?;
    let blobs = S3Blobs::new(target.location, &target.endpoint, &target.region, &keys)
        .map_err(|e| refused(e.to_string()))?;
    Ok(crate::store::sealed::Sealed::new(blobs, key))
}

/// Moves the segments out of the bucket the store records its segments went to, when
/// host.toml keeps them elsewhere and names that bucket as `archive-leaving` (the
/// `~ archive` reconcile wrote): each moved ([`move_segments`]) to the installation's
/// own `DIR/archive` or the other bucket (sealed with the same key); then the store
/// records where they are (synced). A stop anywhere resumes with what is left in the
/// bucket. Otherwise nothing: the adapters refuse a host.toml pointing elsewhere.
fn leave_bucket(
    dir: &Path,
    database: &fjall::Database,
    meta: &Keyspace,
    config: &HostConfig,
    failpoints: &crate::store::Failpoints,
) -> Result<(), HostError> {
    let storage = storage_failed(dir);
    let Some(went) = meta.get(ARCHIVE_REMOTE_KEY).map_err(&storage)? else {
        return Ok(());
    };
    let to = config
        .archive
        .as_ref()
        .and_then(crate::config::S3ArchiveConfig::segment_store);
    let Some(from) = config.archive_leaving.as_ref().filter(|leaving| {
        leaving.url.as_bytes() == went.as_ref() && to.is_none_or(|to| to.url != leaving.url)
    }) else {
        return Ok(());
    };
    let key = seal_key(dir, true)?;
    let source = sealed_bucket(dir, from, &key)?;
    let from_store = Store {
        blobs: &source,
        place: from.url.clone(),
    };
    match to {
        Some(to) => {
            let bucket = sealed_bucket(dir, to, &key)?;
            let place = to.url.clone();
            move_segments(
                from_store,
                Store {
                    blobs: &bucket,
                    place,
                },
                failpoints,
            )?;
            meta.insert(ARCHIVE_REMOTE_KEY, to.url.as_bytes())
        }
        None => {
            let local = dir.join(archive::ARCHIVE_DIR);
            let files = archive::LocalFiles::open(dir).map_err(|e| HostError::Damaged {
                path: local.clone(),
                detail: e.to_string(),
            })?;
            let place = local.display().to_string();
            move_segments(
                from_store,
                Store {
                    blobs: &files,
                    place,
                },
                failpoints,
            )?;
            meta.remove(ARCHIVE_REMOTE_KEY)
        }
    }
    .map_err(&storage)?;
    database
        .persist(fjall::PersistMode::SyncAll)
        .map_err(&storage)?;
    tracing::info!(
        from = from.url,
        "the archive's segments left the bucket: it is released"
    );
    Ok(())
}

/// The key a table's index records are tagged with (32 random bytes, private, made
/// with the first record): `DIR/keys/archive-index.key`.
pub const ARCHIVE_INDEX_KEY: &str = "keys/archive-index.key";

/// The `meta` key naming the table this store's index entries went to
/// (`dynamodb://…`): written, synced, before the first is put there.
const ARCHIVE_INDEX_REMOTE_KEY: &str = "archive-index-remote";

/// Refuses a `host.toml` that points the archive away from the table its index went
/// to: those ids would be answered as new. Answers whether the store records one (then
/// the one host.toml names).
fn index_went(dir: &Path, meta: &Keyspace, config: &HostConfig) -> Result<bool, HostError> {
    let Some(went) = meta
        .get(ARCHIVE_INDEX_REMOTE_KEY)
        .map_err(storage_failed(dir))?
    else {
        return Ok(false);
    };
    let named = config.archive.as_ref().map_or("file", |a| a.url.as_str());
    if named.as_bytes() == went.as_ref() {
        return Ok(true);
    }
    Err(config_refused(dir)(format!(
        "host.toml names archive {named}, but this store's index of archived answers went to {}: moving it is not performed by this version, and without it archived ids would run again; name that archive again",
        String::from_utf8_lossy(&went)
    )))
}

/// The adapter of `archive "dynamodb://TABLE"`: the index by id in the table, tagged
/// with the installation's index key; segments in the installation's own
/// `DIR/archive`, or in the bucket its `segments` names ([`bucket_blobs`]). Refused,
/// by name, when host.toml's address does not read, the credentials file is missing or
/// weak, the store's segments went to a bucket host.toml does not name, or the index
/// key is missing while records were tagged with it (`indexed`: the store records this
/// table). The table is asked nothing here: one that does not answer keeps index
/// entries waiting in the store.
fn table_adapter(
    dir: &Path,
    database: &fjall::Database,
    meta: &Keyspace,
    (config, table): (&HostConfig, &crate::config::S3ArchiveConfig),
    (indexed, failpoints): (bool, &crate::store::Failpoints),
) -> Result<crate::store::shelf::Adapter, HostError> {
    let (refused, storage) = (config_refused(dir), storage_failed(dir));
    let records = table.records(dir).map_err(&refused)?;
    let mut adapter = match table.segments.as_deref() {
        Some(bucket) if bucket.table().is_some() || bucket.segments.is_some() => {
            return Err(refused(format!(
                "host.toml names archive {} with segments in {}: segments are objects, kept in files or in an s3:// bucket",
                table.url, bucket.url
            )));
        }
        Some(bucket) => crate::store::shelf::Adapter {
            blobs: bucket_blobs(dir, database, meta, bucket, failpoints)?,
            place: bucket.url.clone(),
            remote: true,
            index: None,
        },
        None => {
            if let Some(bucket) = meta.get(ARCHIVE_REMOTE_KEY).map_err(&storage)? {
                return Err(refused(format!(
                    "host.toml names archive {} with segments in DIR/archive, but this store's segments went to {}: name that bucket as the archive's `segments`, or move them back as a transition (`segments \"file\"`: `gridctl plan` shows it as `~ archive`)",
                    table.url,
                    String::from_utf8_lossy(&bucket)
                )));
            }
            let blobs = archive::LocalFiles::open(dir).map_err(|e| HostError::Damaged {
                path: dir.join(archive::ARCHIVE_DIR),
                detail: e.to_string(),
            })?;
            let place = dir.join(archive::ARCHIVE_DIR).display().to_string();
            crate::store::shelf::Adapter::files(blobs, place)
        }
    };
    let key = installation_key(
        dir,
        ARCHIVE_INDEX_KEY,
        "the archive's index key",
        indexed.then_some("this store's index records were tagged with it"),
    )?;
    record_remote(
        database,
        meta,
        indexed,
        ARCHIVE_INDEX_REMOTE_KEY,
        &table.url,
    )
    .map_err(&storage)?;
    adapter.index = Some(crate::store::shelf::RemoteIndex::new(
        Box::new(records),
        &table.url,
        &config.name,
        key,
    ));
    Ok(adapter)
}

/// One end of a move of archive segments: its blobs, and how it is named.
struct Store<'a> {
    blobs: &'a dyn archive::Blobs,
    place: String,
}

/// Moves every segment `from` holds to `to`: each put (idempotent: a segment moved
/// before a stop answers the same), read back and compared whole, and only then removed
/// from `from` (failpoint `archive-move-before-release` between). A store that does not
/// answer, or a destination holding another segment of that name, refuses the start as
/// a move that waits; a segment that does not read at `from` refuses it as damage,
/// named. Nothing is removed from `from` that was not moved.
fn move_segments(
    from: Store,
    to: Store,
    failpoints: &crate::store::Failpoints,
) -> Result<(), HostError> {
    use archive::ArchiveError;
    let damaged = |detail: String| HostError::Damaged {
        path: PathBuf::from(&from.place),
        detail,
    };
    let held = match from.blobs.list(archive::SEGMENTS_PREFIX) {
        Ok(held) => held,
        Err(e @ ArchiveError::Remote { .. }) => {
            return Err(HostError::Config {
                path: PathBuf::from(&from.place),
                reason: format!(
                    "the archive's segments move from {} to {} (host.toml), but the archive store does not answer ({e}); gridd does not start until they are moved",
                    from.place, to.place
                ),
            });
        }
        Err(e) => return Err(damaged(e.to_string())),
    };
    if held.is_empty() {
        return Ok(());
    }
    // Not damage: a move that waits (a store does not answer, or holds another's).
    let pending = |e: String| HostError::Config {
        path: PathBuf::from(&from.place),
        reason: format!(
            "the archive moves to {} (host.toml) and {} segment(s) wait in {} to be copied, but {e}; gridd does not start until they are copied and verified (nothing there is removed before)",
            to.place,
            held.len(),
            from.place
        ),
    };
    let failed = |e: ArchiveError| match e {
        ArchiveError::Remote { .. } => pending(format!("the archive store does not answer ({e})")),
        e => damaged(e.to_string()),
    };
    tracing::info!(
        segments = held.len(),
        from = from.place,
        to = to.place,
        "moving the archive's segments"
    );
    for (name, _) in &held {
        let bytes = from
            .blobs
            .get(name)
            .map_err(failed)?
            .ok_or_else(|| damaged(format!("{name} vanished while it moved")))?;
        match to.blobs.put_if_absent(name, &bytes) {
            Ok(true) => {}
            Ok(false) => {
                return Err(pending(format!(
                    "{} holds another {name} (not this installation's)",
                    to.place
                )));
            }
            Err(e) => return Err(failed(e)),
        }
        match to.blobs.get(name) {
            Ok(Some(back)) if back == bytes => {}
            Ok(_) => {
                return Err(pending(format!(
                    "{name} read back from {} differs from the one written",
                    to.place
                )));
            }
            Err(e) => return Err(failed(e)),
        }
        failpoints.abort_if_armed(crate::store::Failpoint::ArchiveMoveBeforeRelease);
        from.blobs.delete(name).map_err(failed)?;
        tracing::info!(
            segment = name,
            from = from.place,
            to = to.place,
            "archive segment moved, read back and compared"
        );
    }
    Ok(())
}

/// The archive's sealing key: read (32 bytes, private), or made when `recorded` is false
/// (no segment was sealed with one yet); missing while it is true, refused by name (the
/// segments would not open).
fn seal_key(dir: &Path, recorded: bool) -> Result<[u8; 32], HostError> {
    installation_key(
        dir,
        ARCHIVE_SEAL_KEY,
        "the archive's sealing key",
        recorded.then_some("this store's segments were sealed with it"),
    )
}

/// A key of the installation's at `DIR/file` (32 bytes, private): read, or made when
/// nothing `used` it yet; missing while something did, refused by name.
fn installation_key(
    dir: &Path,
    file: &str,
    what: &str,
    used: Option<&str>,
) -> Result<[u8; 32], HostError> {
    let path = dir.join(file);
    let why = used.map(|used| format!("{used}: put back the key this installation made"));
    let make = match &why {
        None => Ok(()),
        Some(why) => Err(why.as_str()),
    };
    crate::store::key_file(&path, what, make).map_err(|detail| HostError::Damaged { path, detail })
}

/// After its key: the store's record that what it keeps went to `url` (`meta_key`,
/// synced), unless it was there already — a key is never made afresh over it.
fn record_remote(
    database: &fjall::Database,
    meta: &Keyspace,
    recorded: bool,
    meta_key: &str,
    url: &str,
) -> Result<(), fjall::Error> {
    if !recorded {
        meta.insert(meta_key, url.as_bytes())?;
        database.persist(fjall::PersistMode::SyncAll)?;
    }
    Ok(())
}

/// A `host.toml` that cannot be used, named.
fn config_refused(dir: &Path) -> impl Fn(String) -> HostError {
    let path = dir.join(crate::config::HOST_CONFIG_FILE);
    move |reason| HostError::Config {
        path: path.clone(),
        reason,
    }
}

/// A storage failure of the installation's store.
fn storage_failed(dir: &Path) -> impl Fn(fjall::Error) -> HostError {
    let path = dir.join("store");
    move |source| HostError::Storage {
        path: path.clone(),
        source,
    }
}

/// The `operations-by-time` key of an operation answered at a time.
pub(super) use crate::store::shelf::time_key;

impl Host {
    /// Now, as the retention windows read it (shifted by
    /// `Failpoints::with_retention_clock_offset`).
    pub(super) fn retention_now(&self) -> u64 {
        crate::store::now_ms().saturating_add_signed(self.retention_offset_ms)
    }

    /// The record of `op`: in the hot store, else in the archive.
    pub(super) fn lookup(&self, op: &str) -> Lookup {
        if let Some(record) = self.retained(op) {
            return Lookup::Hot(record);
        }
        let archive_days = self.config.retain.archive_days;
        let now = self.retention_now();
        let expired = |at_ms: u64| {
            archive_days
                .is_some_and(|days| at_ms.saturating_add(u64::from(days) * RETAIN_DAY_MS) < now)
        };
        let quoted = grid_spec::diagnostic::quoted(op);
        let found = self.archive.shelf().find(op, &quoted, expired);
        match found {
            Found::Absent => Lookup::Absent,
            Found::Expired { at_ms } => Lookup::Expired {
                at_ms,
                days: archive_days.unwrap_or_default(),
            },
            Found::Unreadable(reason) => Lookup::Unreadable(reason),
            Found::Held { value, segment, .. } => {
                match serde_json::from_slice::<OperationRecord>(&value) {
                    Ok(record) => Lookup::Archived(record),
                    Err(e) => Lookup::Unreadable(format!(
                        "archive segment {segment}: the record does not decode ({e})"
                    )),
                }
            }
        }
    }

    /// The reply for an id whose record is expired or unreadable: never "not found".
    pub(super) fn not_answered(&self, op: &str, lookup: Lookup) -> Reply {
        let quoted = grid_spec::diagnostic::quoted(op);
        match lookup {
            Lookup::Expired { at_ms, days } => {
                tracing::warn!(op = %quoted, "operation refused: expired");
                Reply::Refused {
                    reason: format!(
                        "expired: operation `{quoted}` was answered at {}, past host `{}`'s archive window of {days} days (retain archive-days={days}); its answer is no longer kept, and it is never executed again",
                        crate::store::rfc3339_ms(at_ms),
                        self.config.name
                    ),
                }
            }
            Lookup::Unreadable(reason) => {
                tracing::warn!(op = %quoted, reason, "archived answer unreadable");
                Reply::Unknown {
                    op: op.to_owned(),
                    reason: format!(
                        "operation `{quoted}` was answered and archived, but its answer cannot be read: {reason}; it is not executed again"
                    ),
                }
            }
            Lookup::Hot(record) | Lookup::Archived(record) => Reply::Answer(record.answer),
            Lookup::Absent => Reply::NoAnswer { op: op.to_owned() },
        }
    }

    /// Moves acknowledged answers older than `age_ms` to the archive, at most
    /// ARCHIVE_SEGMENTS_PER_PASS_MAX segments, and releases segments past
    /// `archive-days`. A storage failure stops the host (`fatal`); an archive that
    /// cannot be written refuses the pass and changes nothing.
    /// `patient` (the periodic pass): a last segment of fewer than
    /// `ARCHIVE_SEGMENT_ENTRIES_MIN` answers waits until its oldest is
    /// `ARCHIVE_SEGMENT_WAIT_MAX` past the cutoff.
    pub fn archive_older_than(
        &mut self,
        age_ms: u64,
        patient: bool,
    ) -> Result<ArchivePass, String> {
        // Index entries waiting for their table first (an archive indexed in DynamoDB):
        // while it does not answer, nothing more leaves the hot store.
        self.archive
            .shelf
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .publish(&self.database)?;
        let now = self.retention_now();
        let cutoff = now.saturating_sub(age_ms);
        let mut pass = ArchivePass::default();
        let signer = Self::signer(&self.custody);
        let dir = &self.dir;
        let operations = &self.operations;
        let unacknowledged = &mut pass.unacknowledged;
        let candidates = crate::store::shelf::answered_before(
            &self.archive.by_time,
            operations,
            cutoff,
            dir,
            "operations",
        )
        .filter(|entry| {
            let record: OperationRecord = serde_json::from_slice(&entry.value)
                .unwrap_or_else(|e| fatal(dir, "decoding an operation", e));
            if !record.acknowledged {
                *unacknowledged += 1;
            }
            record.acknowledged
        });
        let (shelf, database, host) = (&self.archive.shelf, &self.database, &self.config.name);
        let (failpoints, by_time) = (&mut self.failpoints, &self.archive.by_time);
        let answers = crate::store::shelf::gather(
            candidates,
            cutoff,
            patient,
            ARCHIVE_SEGMENTS_PER_PASS_MAX,
            |entries| {
                crate::store::shelf::shelve_room(
                    shelf,
                    database,
                    host,
                    (&entries, ""),
                    &signer,
                    || {
                        failpoints.reach(crate::store::Failpoint::ArchiveBeforeIndex);
                    },
                    [operations, by_time],
                    |_| {},
                )
            },
        )?;
        pass.answers = answers.entries;
        pass.segments = answers.segments;
        pass.more = answers.more;
        // The rooms' own answers (a receiver's finished runs, a caller's closed
        // waits), in the segments left.
        if let Some(processes) = &self.processes {
            let left = ARCHIVE_SEGMENTS_PER_PASS_MAX.saturating_sub(pass.segments as usize);
            let rooms = processes.archive(cutoff, patient, left, &signer)?;
            pass.runs = rooms.runs.entries;
            pass.waits = rooms.waits.entries;
            pass.segments += rooms.runs.segments + rooms.waits.segments;
            pass.more |= rooms.runs.more || rooms.waits.more;
            pass.owed = rooms.owed;
        }
        if let Some(ledgers) = &self.ledgers {
            let left = ARCHIVE_SEGMENTS_PER_PASS_MAX.saturating_sub(pass.segments as usize);
            let ids = ledgers.archive(cutoff, patient, left, &signer)?;
            pass.ledger_ids = ids.entries;
            pass.segments += ids.segments;
            pass.more |= ids.more;
        }
        pass.released = self.release_expired(now)?;
        if pass.segments > 0 || pass.released > 0 {
            tracing::info!(
                answers = pass.answers,
                runs = pass.runs,
                segments = pass.segments,
                released = pass.released,
                "answers archived"
            );
        }
        Ok(pass)
    }

    /// Releases the segments whose newest answer is past `archive-days`, in sequence
    /// order; the index keeps the ids. Before a segment is released, every ledger with
    /// a record past its checkpoint is checkpointed, so no record an open replays names
    /// an id whose segment is gone (every id in a segment due is expired: no batch
    /// naming one is journaled meanwhile).
    fn release_expired(&mut self, now: u64) -> Result<u64, String> {
        let Some(days) = self.config.retain.archive_days else {
            return Ok(0);
        };
        let window = u64::from(days) * RETAIN_DAY_MS;
        let past = |last_ms: u64| last_ms.saturating_add(window) < now;
        let shelf = &self.archive.shelf;
        if !shelf
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .releasable(past)
        {
            return Ok(0);
        }
        if let Some(ledgers) = &self.ledgers {
            ledgers.checkpoint(1, false);
        }
        shelf
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .release(&self.database, past)
    }

    /// What the archive holds and how far it is behind (`inspect storage`, metrics).
    /// Verifying the archive, to run without the host's lock: it holds the shelf's
    /// read lock while it reads every segment (an archive pass waits for it).
    pub fn verify_archive(
        &self,
    ) -> impl FnOnce() -> crate::store::shelf::Verification + Send + use<> {
        let shelf = self.archive.shelf.clone();
        let host = self.config.name.clone();
        let check = Self::verifier(&self.custody);
        move || {
            shelf
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .verify(&host, &check)
        }
    }

    pub(super) fn archive_view(&self) -> crate::store::usage::ArchiveView {
        let holding = self.archive.shelf().holding();
        let oldest_hot_ms = self.oldest_hot_ms();
        let hot_days = self.config.retain.hot_days();
        let window = u64::from(hot_days) * RETAIN_DAY_MS;
        crate::store::usage::ArchiveView {
            hot_days,
            archive_days: self.config.retain.archive_days,
            segments: holding.segments,
            released_segments: holding.released_segments,
            answers: holding.entries,
            bytes: holding.bytes,
            first_ms: holding.first_ms,
            last_ms: holding.last_ms,
            oldest_hot_ms,
            lag_seconds: oldest_hot_ms.map_or(0, |oldest| {
                self.retention_now()
                    .saturating_sub(window)
                    .saturating_sub(oldest)
                    / 1_000
            }),
            store: holding.place,
            waiting: holding.waiting,
            last_upload_ms: holding.last_upload_ms,
            last_error_ms: holding.last_error.as_ref().map(|(at, _)| *at),
            last_error: holding.last_error.map(|(_, why)| why),
            index: holding.index,
            index_waiting: holding.index_waiting,
        }
    }

    /// The oldest answer (or a receiver's finished run) in the hot store, Unix ms.
    fn oldest_hot_ms(&self) -> Option<u64> {
        let oldest_hot_ms = self
            .archive
            .by_time
            .first_key_value()
            .map(|guard| {
                guard
                    .key()
                    .unwrap_or_else(|e| fatal(&self.dir, "reading operations by time", e))
            })
            .and_then(|key| key.first_chunk::<8>().map(|at| u64::from_be_bytes(*at)));
        // A receiver's finished runs are answers too.
        let oldest_run_ms = self.processes.as_ref().and_then(|p| p.oldest_finished_ms());
        match (oldest_hot_ms, oldest_run_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The hot store's bound while the archive refuses segments: when an answer has
    /// waited `ARCHIVE_LAG_DAYS_MAX` past the hot window and the archive still does not
    /// take it, why new work is refused (none: it is taken).
    pub(super) fn archive_full(&self) -> Option<String> {
        use crate::limits::ARCHIVE_LAG_DAYS_MAX;
        let shelf = self.archive.shelf();
        let why = shelf.failing()?;
        let oldest = self.oldest_hot_ms()?;
        let hot_days = self.config.retain.hot_days();
        let bound = u64::from(hot_days + ARCHIVE_LAG_DAYS_MAX) * RETAIN_DAY_MS;
        if oldest.saturating_add(bound) >= self.retention_now() {
            return None;
        }
        Some(format!(
            "archive unreachable and the hot store is full: an answer of {} has waited more than ARCHIVE_LAG_DAYS_MAX ({ARCHIVE_LAG_DAYS_MAX}) days past the hot window ({hot_days} days) for archive {}, which refuses it ({}); new work is refused until a pass archives it (`gridctl storage archive`, or the next periodic pass once the store answers); re-sent ids are still answered",
            crate::store::rfc3339_ms(oldest),
            shelf.place(),
            grid_spec::diagnostic::quoted(&why)
        ))
    }

    /// The periodic pass: answers past `retain hot-days`. While the archive refuses
    /// segments it tries again only every `ARCHIVE_RETRY_INTERVAL` (the pass holds
    /// the host while it writes).
    pub fn archive_due(&mut self) {
        let failed_at = self.archive.shelf().failed_at();
        let retry = crate::limits::ARCHIVE_RETRY_INTERVAL.as_millis() as u64;
        if failed_at.is_some_and(|at| crate::store::now_ms() < at.saturating_add(retry)) {
            tracing::debug!(
                "archive pass waits: the archive refused a segment less than ARCHIVE_RETRY_INTERVAL ago"
            );
            return;
        }
        let age = u64::from(self.config.retain.hot_days()) * RETAIN_DAY_MS;
        if let Err(reason) = self.archive_older_than(age, true) {
            tracing::warn!(reason, "archive pass refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_sealing_key_is_made_once_kept_private_and_never_made_again_over_sealed_segments() {
        let dir = std::env::temp_dir().join(format!("grid-seal-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        let path = dir.join(ARCHIVE_SEAL_KEY);
        let refused = |recorded: bool| match seal_key(&dir, recorded) {
            Err(HostError::Damaged { path: at, detail }) => {
                assert_eq!(at, path);
                detail
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        };
        // Missing while the store records sealed segments: refused, never made afresh.
        assert!(refused(true).contains("is missing"));
        assert!(!path.exists());
        // None recorded: made, private, and read back the same.
        let made = seal_key(&dir, false).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(seal_key(&dir, true).unwrap(), made);
        // Weak or cut: refused by name.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(refused(true).contains("mode 644"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, &made[..31]).unwrap();
        assert!(refused(true).contains("31 bytes"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_archive_whose_index_went_to_a_table_is_never_pointed_elsewhere() {
        let dir = std::env::temp_dir().join(format!("grid-index-went-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let database = fjall::Database::builder(dir.join("store")).open().unwrap();
        let [meta] = crate::store::open_keyspaces(&database, ["meta"]).unwrap();
        let mut config =
            HostConfig::from_toml("name = \"a\"\nlisten = \"127.0.0.1:7401\"\n").unwrap();
        let table = crate::config::S3ArchiveConfig {
            url: "dynamodb://grid-answers".to_owned(),
            endpoint: "http://127.0.0.1:4567".to_owned(),
            region: "us-east-1".to_owned(),
            credentials: "ddb.credentials".to_owned(),
            segments: None,
        };
        // Nothing went anywhere yet: any archive opens.
        assert!(!index_went(&dir, &meta, &config).unwrap());
        meta.insert(ARCHIVE_INDEX_REMOTE_KEY, table.url.as_bytes())
            .unwrap();
        let refused = |config: &HostConfig| match index_went(&dir, &meta, config) {
            Err(HostError::Config { reason, .. }) => reason,
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        };
        // Files, a bucket, another table: refused, naming where the index went.
        assert!(refused(&config).contains("names archive file"));
        for url in ["s3://grid-archive/a", "dynamodb://other-table"] {
            config.archive = Some(crate::config::S3ArchiveConfig {
                url: url.to_owned(),
                ..table.clone()
            });
            let why = refused(&config);
            assert!(why.contains("went to dynamodb://grid-answers"), "{why}");
        }
        config.archive = Some(table);
        assert!(index_went(&dir, &meta, &config).unwrap());
        drop(database);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
