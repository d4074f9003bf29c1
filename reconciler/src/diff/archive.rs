//! A host's `archive` (docs/storage.md, "Adapters"): where its archive segments live,
//! as its own transition apart from the rest of `host.toml` — `+ archive s3://… @ HOST`
//! when the installation keeps its archive in its own files and holds no segment
//! there; `~ archive` when it holds some (gridd's next start copies each to the bucket,
//! reads it back and compares it, and only then removes it from its files), or when
//! the same bucket and prefix are reached another way (endpoint, region, credentials).
//! Moving away from a bucket (to files or another bucket) is not performed by this
//! version: it is `!`, and never inferred from a removed line.
//!
//! Invariants, stated as absences: no `host.toml` names a remote archive the
//! reconciler has not reached with its credentials and found keeping the promise
//! of a put that never overwrites; no installation whose segments are in a bucket is
//! pointed elsewhere.

use std::path::Path;

use grid_engine::config::{HostConfig, S3ArchiveConfig};
use grid_engine::store::archive::{ARCHIVE_DIR, SEGMENTS_PREFIX};

use crate::changes::Change;
use crate::transition::{Action, Draft, Effect, Op};

/// The key of a host's archive transition.
pub fn key(host: &str) -> String {
    format!("archive:{host}")
}

/// The transitions from the archive the installation's `host.toml` holds (`found`;
/// none: its own files) to the one the files declare (`wanted`). An archive keeps two
/// things, each judged on its own: its segments (the installation's files or a bucket)
/// and its index by id (the installation's store or a table). Either may be added; one
/// kept is reached again only at the same address; one left is `!`.
pub fn transitions(
    host: &str,
    dir: &Path,
    found: Option<&S3ArchiveConfig>,
    wanted: Option<&S3ArchiveConfig>,
) -> Vec<Draft> {
    if found == wanted {
        return Vec::new();
    }
    let attention = |detail: String| vec![Draft::attention("archive", host, host, detail)];
    let files = dir.join(ARCHIVE_DIR).display().to_string();
    let (found_index, wanted_index) = (index(found), index(wanted));
    let (found_segments, wanted_segments) = (segments(found), segments(wanted));
    if let Some(left) = leaves(dir, found, wanted) {
        return attention(format!(
            "{left}: {NOT_MOVED}, and it is never inferred from a removed line"
        ));
    }
    let Some(w) = wanted else {
        return Vec::new(); // unreachable: found kept nothing the files left
    };
    let mut parts = Vec::new();
    let mut changes = Vec::new();
    match (found_index, wanted_index) {
        (None, Some(table)) => {
            parts.push(format!(
                "the index of archived answers by id in {} at {} (first answer wins, each record tagged by the host)",
                table.url, table.endpoint
            ));
            if found.is_some() {
                changes.push(change("index", "the installation's store", &table.url));
            }
        }
        (Some(f), Some(table)) => changes.extend(reached("", f, table)),
        _ => {}
    }
    match (found_segments, wanted_segments) {
        (None, Some(bucket)) => {
            let held = local_segments(dir);
            if held > 0 {
                parts.push(format!(
                    "move from {files}: its {held} segment(s) copied to the bucket (sealed to the host), each read back and compared, then removed from there — when gridd next starts (refused, nothing removed, while the bucket does not answer)"
                ));
            }
            if held > 0 || found.is_some() {
                let field = if w.table().is_some() {
                    "segments"
                } else {
                    "archive"
                };
                changes.push(change(field, "file", &bucket.url));
            }
            parts.push(format!(
                "segments sealed to the host at {}",
                bucket.describe()
            ));
        }
        (Some(f), Some(bucket)) => {
            let field = if w.table().is_some() { "segments." } else { "" };
            changes.extend(reached(field, f, bucket));
            if !parts.is_empty() {
                parts.push(format!("segments stay in {}", bucket.url));
            }
        }
        _ => parts.push(format!("segments stay in {files}")),
    }
    let op = if changes.is_empty() {
        Op::Create
    } else {
        Op::Change
    };
    let detail = match (op, parts.is_empty()) {
        (Op::Change, true) => format!(
            "the same objects, reached at {} (takes effect when gridd restarts)",
            w.describe()
        ),
        _ => parts.join("; then "),
    };
    vec![
        Draft::new(
            op,
            "archive",
            &w.url,
            host,
            detail,
            Action::WriteArchive { archive: w.clone() },
        )
        .key(key(host))
        .after([format!("host:{host}")])
        .changes(changes),
    ]
}

const NOT_MOVED: &str = "moving an archive away from a bucket or a table (its segments or records copied and verified, then the old store released) is not performed by this version";

/// The table of an archive's index (none: the installation's own store).
fn index(archive: Option<&S3ArchiveConfig>) -> Option<&S3ArchiveConfig> {
    archive.filter(|a| a.table().is_some())
}

/// The bucket of an archive's segments (none: the installation's own files).
fn segments(archive: Option<&S3ArchiveConfig>) -> Option<&S3ArchiveConfig> {
    archive.and_then(S3ArchiveConfig::segment_store)
}

/// What `wanted` leaves of the stores `found` keeps — the table of its index or the
/// bucket of its segments, named — when it leaves one (none: each kept store is still
/// named at the same address).
fn leaves(
    dir: &Path,
    found: Option<&S3ArchiveConfig>,
    wanted: Option<&S3ArchiveConfig>,
) -> Option<String> {
    let url = |store: Option<&S3ArchiveConfig>, none: String| store.map_or(none, |s| s.url.clone());
    if let Some(f) = moved(index(found), index(wanted)) {
        return Some(format!(
            "host.toml keeps the archive's index in {}, the files declare it in {}",
            f.url,
            url(index(wanted), "the installation's store".to_owned())
        ));
    }
    moved(segments(found), segments(wanted)).map(|f| {
        format!(
            "host.toml keeps archive segments in {}, the files declare them in {}",
            f.url,
            url(
                segments(wanted),
                dir.join(ARCHIVE_DIR).display().to_string()
            )
        )
    })
}

/// The store `found` names that `wanted` does not name at the same address.
fn moved<'a>(
    found: Option<&'a S3ArchiveConfig>,
    wanted: Option<&S3ArchiveConfig>,
) -> Option<&'a S3ArchiveConfig> {
    found.filter(|f| wanted.is_none_or(|w| w.url != f.url))
}

fn change(field: &str, before: &str, after: &str) -> Change {
    Change {
        field: field.to_owned(),
        before: before.to_owned(),
        after: after.to_owned(),
    }
}

/// What changed in how a kept store is reached (its address is the same):
/// `endpoint`, `region`, `credentials`, each after `prefix`.
fn reached(prefix: &str, f: &S3ArchiveConfig, w: &S3ArchiveConfig) -> Vec<Change> {
    [
        ("endpoint", &f.endpoint, &w.endpoint),
        ("region", &f.region, &w.region),
        ("credentials", &f.credentials, &w.credentials),
    ]
    .into_iter()
    .filter(|(_, before, after)| before != after)
    .map(|(field, before, after)| change(&format!("{prefix}{field}"), before, after))
    .collect()
}

/// Segments in the installation's own archive (`DIR/archive/segments`).
fn local_segments(dir: &Path) -> usize {
    std::fs::read_dir(dir.join(ARCHIVE_DIR).join(SEGMENTS_PREFIX)).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
            .count()
    })
}

/// Points the installation at `dir` to `archive`: refused, changing nothing, when its
/// own archive holds segments, the credentials file is missing or weak, or the server
/// does not answer or would let a put overwrite; then `host.toml` rewritten with it.
pub fn write(dir: &Path, archive: &S3ArchiveConfig) -> Effect {
    Effect::local(write_archive(dir, archive))
}

/// Reaches the table and the bucket `store` names with the installation's credentials
/// and runs each store's check (the table or bucket there, a second put of a key
/// refused); then writes `config` as `host.toml`. Refused, changing nothing, when any of it fails.
pub(crate) fn reach_and_write(
    dir: &Path,
    (store, what): (&S3ArchiveConfig, &str),
    config: &HostConfig,
) -> Result<std::path::PathBuf, String> {
    // A store that does not answer, named as what it keeps (`archive`, `snapshot`).
    let unchanged = |e: grid_engine::store::archive::ArchiveError| match e {
        grid_engine::store::archive::ArchiveError::Remote { store, detail } => {
            format!("{what} store {store}: {detail}; host.toml is unchanged")
        }
        e => format!("{e}; host.toml is unchanged"),
    };
    use grid_engine::store::archive::Blobs;
    use grid_engine::store::s3::{AccessKeys, S3Blobs};
    if store.table().is_some() {
        use grid_engine::store::records::Records;
        let records = store.records(dir)?;
        Records::check(&records).map_err(unchanged)?;
    }
    if let Some(bucket) = store.segment_store() {
        let target = bucket.target()?;
        let keys = AccessKeys::read(&dir.join(&target.credentials))?;
        let blobs = S3Blobs::new(target.location, &target.endpoint, &target.region, &keys)
            .map_err(|e| e.to_string())?;
        Blobs::check(&blobs).map_err(unchanged)?;
    }
    let path = dir.join(grid_engine::config::HOST_CONFIG_FILE);
    grid_engine::custody::write_private(&path, config.to_toml().as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

fn write_archive(dir: &Path, archive: &S3ArchiveConfig) -> Result<String, String> {
    let mut config = HostConfig::read(dir).map_err(|e| e.to_string())?;
    if let Some(left) = leaves(dir, config.archive.as_ref(), Some(archive)) {
        return Err(format!("{left}: {NOT_MOVED}"));
    }
    config.archive = Some(archive.clone());
    let path = reach_and_write(dir, (archive, "archive"), &config)?;
    let held = match archive.segment_store() {
        None => 0, // the segments stay
        Some(_) => local_segments(dir),
    };
    let moving = if held > 0 {
        format!("; gridd's next start moves the {held} segment(s) of its files there")
    } else {
        String::new()
    };
    let segments = archive
        .segments
        .as_ref()
        .map_or(String::new(), |s| format!(" with segments in {}", s.url));
    let servers = if segments.is_empty() {
        "the server answered, and refuses a second put of a key"
    } else {
        "both servers answered, and each refuses a second put of a key"
    };
    Ok(format!(
        "wrote archive {}{segments} into {} ({servers}){moving}",
        archive.url,
        path.display()
    ))
}

/// Whether the installation at `dir` names `archive` already.
pub fn written(dir: &Path, archive: &S3ArchiveConfig) -> bool {
    HostConfig::read(dir).is_ok_and(|c| c.archive.as_ref() == Some(archive))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A remote store `url` at `endpoint` (shared with `diff::snapshots`' tests).
    pub(crate) fn bucket(url: &str, endpoint: &str) -> S3ArchiveConfig {
        S3ArchiveConfig {
            url: url.to_owned(),
            endpoint: endpoint.to_owned(),
            region: "us-east-1".to_owned(),
            credentials: "s3.credentials".to_owned(),
            segments: None,
        }
    }

    #[test]
    fn an_archive_is_its_own_transition_and_a_move_between_adapters_is_never_applied() {
        let dir = std::env::temp_dir().join(format!("grid-plan-archive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = bucket("s3://grid-archive/a", "http://127.0.0.1:8333");
        let ops = |found: Option<&S3ArchiveConfig>, wanted: Option<&S3ArchiveConfig>| {
            transitions("a", &dir, found, wanted)
                .into_iter()
                .map(|d| (d.transition.op, d.transition.action, d.transition.changes))
                .collect::<Vec<_>>()
        };
        assert!(ops(None, None).is_empty());
        assert!(ops(Some(&a), Some(&a)).is_empty());
        // Files, none held: `+ archive`, after the host's own transition.
        let added = transitions("a", &dir, None, Some(&a));
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].transition.op, Op::Create);
        assert_eq!(added[0].transition.name, "s3://grid-archive/a");
        assert_eq!(added[0].after, vec!["host:a".to_owned()]);
        // The same bucket reached elsewhere: `~ archive`, the changed field named.
        let moved = bucket("s3://grid-archive/a", "http://127.0.0.1:9333");
        let changed = ops(Some(&a), Some(&moved));
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].0, Op::Change);
        assert_eq!(changed[0].2.len(), 1);
        assert_eq!(changed[0].2[0].field, "endpoint");
        // Another bucket, or none: never applied.
        let other = bucket("s3://grid-archive/b", "http://127.0.0.1:8333");
        for (found, wanted) in [(Some(&a), Some(&other)), (Some(&a), None)] {
            let drafts = ops(found, wanted);
            assert_eq!(drafts.len(), 1);
            assert_eq!((drafts[0].0, &drafts[0].1), (Op::Attention, &Action::None));
        }
        // Files holding a segment: `~ archive`, the move gridd's next start makes.
        let segments = dir.join(ARCHIVE_DIR).join(SEGMENTS_PREFIX);
        std::fs::create_dir_all(&segments).unwrap();
        std::fs::write(segments.join("00000000000000000001.seg"), b"x").unwrap();
        let held = transitions("a", &dir, None, Some(&a));
        assert_eq!(held[0].transition.op, Op::Change);
        assert!(
            held[0]
                .transition
                .detail
                .contains("its 1 segment(s) copied")
        );
        assert_eq!(held[0].transition.changes[0].after, "s3://grid-archive/a");
        // A table for the index: `+ archive`, the segments staying in the files; and
        // leaving it (for files or a bucket) is never applied.
        let table = bucket("dynamodb://grid-answers", "http://127.0.0.1:4567");
        let indexed = transitions("a", &dir, None, Some(&table));
        assert_eq!(indexed[0].transition.op, Op::Create);
        assert!(indexed[0].transition.detail.contains("segments stay in"));
        for wanted in [None, Some(&a)] {
            assert_eq!(ops(Some(&table), wanted)[0].0, Op::Attention);
        }
        // The index in a table, the segments in a bucket: each store judged on its own.
        let both = S3ArchiveConfig {
            segments: Some(Box::new(a.clone())),
            ..table.clone()
        };
        let new_both = transitions("a", &dir, None, Some(&both));
        assert_eq!(new_both[0].transition.op, Op::Change, "1 segment held");
        let detail = &new_both[0].transition.detail;
        assert!(detail.contains("index of archived answers by id in dynamodb://grid-answers"));
        assert!(
            detail.contains("its 1 segment(s) copied")
                && detail.contains("sealed to the host at s3://grid-archive/a"),
            "{detail}"
        );
        let fields = |found: &S3ArchiveConfig, wanted: &S3ArchiveConfig| {
            let drafts = ops(Some(found), Some(wanted));
            assert_eq!(drafts.len(), 1);
            assert_eq!(drafts[0].0, Op::Change);
            drafts[0]
                .2
                .iter()
                .map(|c| (c.field.clone(), c.before.clone(), c.after.clone()))
                .collect::<Vec<_>>()
        };
        // Files to a bucket under a kept table; a bucket gaining a table for its index.
        assert_eq!(
            fields(&table, &both),
            [(
                "segments".to_owned(),
                "file".to_owned(),
                "s3://grid-archive/a".to_owned()
            )]
        );
        assert_eq!(fields(&a, &both)[0].0, "index");
        // The same bucket reached elsewhere under the table.
        let both_moved = S3ArchiveConfig {
            segments: Some(Box::new(moved.clone())),
            ..table.clone()
        };
        assert_eq!(fields(&both, &both_moved)[0].0, "segments.endpoint");
        // Leaving the bucket (for files or another) or the table: never applied.
        let both_other = S3ArchiveConfig {
            segments: Some(Box::new(other.clone())),
            ..table.clone()
        };
        for wanted in [Some(&table), Some(&both_other), Some(&a), None] {
            assert_eq!(ops(Some(&both), wanted)[0].0, Op::Attention);
        }
        assert!(
            transitions("a", &dir, Some(&both), Some(&table))[0]
                .transition
                .detail
                .contains("keeps archive segments in s3://grid-archive/a")
        );
        // A host.toml keeping another bucket: the apply refuses, changing nothing.
        let config = HostConfig {
            archive: Some(other.clone()),
            ..HostConfig::from_toml("name = \"a\"\nlisten = \"127.0.0.1:7401\"\n").unwrap()
        };
        let path = dir.join(grid_engine::config::HOST_CONFIG_FILE);
        std::fs::write(&path, config.to_toml()).unwrap();
        let refused = write_archive(&dir, &a).unwrap_err();
        assert!(
            refused.contains("keeps archive segments in s3://grid-archive/b"),
            "{refused}"
        );
        let refused = write_archive(&dir, &both).unwrap_err();
        assert!(
            refused.contains("keeps archive segments in s3://grid-archive/b"),
            "{refused}"
        );
        assert!(!written(&dir, &a) && written(&dir, &other));
        // A store that does not answer is named as what it keeps; host.toml unchanged.
        let credentials = dir.join("s3.credentials");
        grid_engine::custody::write_private(
            &credentials,
            b"[default]\naws_access_key_id = k\naws_secret_access_key = s\n",
        )
        .unwrap();
        let silent = bucket("s3://grid-archive/a", "http://127.0.0.1:1");
        for what in ["snapshot", "archive"] {
            let refused = reach_and_write(&dir, (&silent, what), &config).unwrap_err();
            assert!(
                refused.starts_with(&format!("{what} store s3://grid-archive/a"))
                    && refused.ends_with("host.toml is unchanged"),
                "{refused}"
            );
        }
        assert!(written(&dir, &other));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
