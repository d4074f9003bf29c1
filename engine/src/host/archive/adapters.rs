//! Where the archive lives (docs/storage.md, "Adapters"): the adapter gridd's start
//! builds from `host.toml`'s `archive` — the installation's own files, a bucket
//! (sealed), a table for the index by id with segments in files or a bucket — after
//! checking it is the one the store recorded, and the moves between them a plan wrote
//! (files to a bucket, a bucket to another or back to files), each segment put, read
//! back whole and only then removed from where it was.

use super::*;

/// The key archive segments on another server are sealed with (32 random bytes,
/// private, made with the first remote archive): `DIR/keys/archive-seal.key`.
pub const ARCHIVE_SEAL_KEY: &str = "keys/archive-seal.key";

/// The `meta` key naming the remote archive this store's segments went to (`s3://…`):
/// written, synced, before the first segment is put there; a host.toml naming another
/// is refused.
const ARCHIVE_REMOTE_KEY: &str = "archive-remote";

/// The adapter of `archive "s3://…"`: the bucket's objects sealed with the
/// installation's archive key ([`bucket_blobs`]).
pub(super) fn remote_adapter(
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
        let (files, place) = local_files(dir)?;
        let from = Store {
            blobs: &files,
            place,
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
    let blobs = s3.blobs(dir, "archive").map_err(config_refused(dir))?;
    Ok(crate::store::sealed::Sealed::new(blobs, key))
}

/// Moves the segments out of the bucket the store records its segments went to, when
/// host.toml keeps them elsewhere and names that bucket as `archive-leaving` (the
/// `~ archive` reconcile wrote): each moved ([`move_segments`]) to the installation's
/// own `DIR/archive` or the other bucket (sealed with the same key); then the store
/// records where they are (synced). A stop anywhere resumes with what is left in the
/// bucket. Otherwise nothing: the adapters refuse a host.toml pointing elsewhere.
pub(super) fn leave_bucket(
    dir: &Path,
    database: &fjall::Database,
    meta: &Keyspace,
    config: &HostConfig,
    failpoints: &crate::store::Failpoints,
) -> Result<(), HostError> {
    let storage = storage_failed(dir);
    let to = config
        .archive
        .as_ref()
        .and_then(crate::config::S3ArchiveConfig::segment_store);
    let leaving = config.archive_leaving.as_deref();
    let Some(from) = left(meta, ARCHIVE_REMOTE_KEY, leaving, to).map_err(&storage)? else {
        return Ok(());
    };
    let key = seal_key(dir, true)?;
    let source = sealed_bucket(dir, from, &key)?;
    let (target, place): (Box<dyn archive::Blobs>, String) = match to {
        Some(to) => (Box::new(sealed_bucket(dir, to, &key)?), to.url.clone()),
        None => {
            let (files, place) = local_files(dir)?;
            (Box::new(files), place)
        }
    };
    let from_store = Store {
        blobs: &source,
        place: from.url.clone(),
    };
    let to_store = Store {
        blobs: &*target,
        place,
    };
    move_segments(from_store, to_store, failpoints)?;
    record_moved(database, meta, ARCHIVE_REMOTE_KEY, to).map_err(&storage)?;
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
pub(super) fn index_went(
    dir: &Path,
    meta: &Keyspace,
    config: &HostConfig,
) -> Result<bool, HostError> {
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
        "host.toml names archive {named}, but this store's index of archived answers went to {}, and without it archived ids would run again: name that archive again, or move the index as a transition (`gridctl plan` shows it as `~ archive`; host.toml then names the table left as `archive-index-leaving`)",
        String::from_utf8_lossy(&went)
    )))
}

/// Moves the archive's index out of the table the store records it went to, when
/// host.toml keeps it elsewhere (the store, or another table) and names that table as
/// `archive-index-leaving` (the `~ archive` reconcile wrote): every record of the
/// host's there verified and put where it goes ([`crate::store::shelf::move_index`]);
/// then the store records the new place (synced). A stop anywhere resumes. Otherwise
/// nothing: [`index_went`] refuses a host.toml pointing elsewhere.
pub(super) fn leave_table(
    dir: &Path,
    database: &fjall::Database,
    meta: &Keyspace,
    config: &HostConfig,
    failpoints: &crate::store::Failpoints,
) -> Result<(), HostError> {
    let (refused, storage) = (config_refused(dir), storage_failed(dir));
    let to = config.archive.as_ref().filter(|a| a.table().is_some());
    let leaving = config.archive_index_leaving.as_deref();
    let Some(from) = left(meta, ARCHIVE_INDEX_REMOTE_KEY, leaving, to).map_err(&storage)? else {
        return Ok(());
    };
    let key = installation_key(
        dir,
        ARCHIVE_INDEX_KEY,
        "the archive's index key",
        Some("this store's index records were tagged with it"),
    )?;
    let index = |table: &crate::config::S3ArchiveConfig| -> Result<_, HostError> {
        let records = table.records(dir).map_err(&refused)?;
        Ok(crate::store::shelf::RemoteIndex::new(
            Box::new(records),
            &table.url,
            &config.name,
            key,
        ))
    };
    let source = index(from)?;
    let target = to.map(index).transpose()?;
    let place = to.map_or("this host's store", |to| to.url.as_str());
    let waits = |why: String| HostError::Config {
        path: PathBuf::from(&from.url),
        reason: format!(
            "the archive's index moves from {} to {place} (host.toml), but {why}; gridd does not start until it is moved (the index stays in {0} until then)",
            from.url
        ),
    };
    if let Some(target) = &target {
        target.check().map_err(|e| waits(e.to_string()))?;
    }
    tracing::info!(from = from.url, to = place, "moving the archive's index");
    let held = crate::store::shelf::move_index(dir, database, (&source, target.as_ref()), || {
        failpoints.abort_if_armed(crate::store::Failpoint::ArchiveIndexMoveBeforeRecord)
    })
    .map_err(|e| match e {
        crate::store::shelf::IndexMoveRefused::Waits(why) => waits(why),
        crate::store::shelf::IndexMoveRefused::Damaged(detail) => HostError::Damaged {
            path: PathBuf::from(&from.url),
            detail,
        },
    })?;
    record_moved(database, meta, ARCHIVE_INDEX_REMOTE_KEY, to).map_err(&storage)?;
    tracing::info!(
        from = from.url,
        to = place,
        records = held,
        "the archive's index left the table: each record verified and put where it goes; the table is no longer read"
    );
    Ok(())
}

/// The adapter of `archive "dynamodb://TABLE"`: the index by id in the table, tagged
/// with the installation's index key; segments in the installation's own
/// `DIR/archive`, or in the bucket its `segments` names ([`bucket_blobs`]). Refused,
/// by name, when host.toml's address does not read, the credentials file is missing or
/// weak, the store's segments went to a bucket host.toml does not name, or the index
/// key is missing while records were tagged with it (`indexed`: the store records this
/// table). The table is asked nothing here: one that does not answer keeps index
/// entries waiting in the store.
pub(super) fn table_adapter(
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
            let (blobs, place) = local_files(dir)?;
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

/// The installation's own `DIR/archive`, and its place as it is named (a directory
/// that cannot be opened refuses the start as damage, named).
fn local_files(dir: &Path) -> Result<(archive::LocalFiles, String), HostError> {
    let local = dir.join(archive::ARCHIVE_DIR);
    let files = archive::LocalFiles::open(dir).map_err(|e| HostError::Damaged {
        path: local.clone(),
        detail: e.to_string(),
    })?;
    Ok((files, local.display().to_string()))
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

/// The store a move leaves: `leaving` (host.toml's), when it is the one the store
/// records under `meta_key` that what it keeps went to, and not `to`, where host.toml
/// keeps it now (none: nothing to move — the adapters refuse a host.toml pointing
/// elsewhere without naming the store left).
fn left<'a>(
    meta: &Keyspace,
    meta_key: &str,
    leaving: Option<&'a crate::config::S3ArchiveConfig>,
    to: Option<&crate::config::S3ArchiveConfig>,
) -> Result<Option<&'a crate::config::S3ArchiveConfig>, fjall::Error> {
    let Some(went) = meta.get(meta_key)? else {
        return Ok(None);
    };
    Ok(leaving.filter(|leaving| {
        leaving.url.as_bytes() == went.as_ref() && to.is_none_or(|to| to.url != leaving.url)
    }))
}

/// After a move: the store's record of where what it keeps went (`meta_key`) names
/// `to`'s address, or (none: the installation's own) is removed; synced.
fn record_moved(
    database: &fjall::Database,
    meta: &Keyspace,
    meta_key: &str,
    to: Option<&crate::config::S3ArchiveConfig>,
) -> Result<(), fjall::Error> {
    match to {
        Some(to) => meta.insert(meta_key, to.url.as_bytes()),
        None => meta.remove(meta_key),
    }?;
    database.persist(fjall::PersistMode::SyncAll)
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
            ca: None,
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
