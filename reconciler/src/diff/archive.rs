//! A host's `archive` (docs/storage.md, "Adapters"): where its archive segments live,
//! as its own transition apart from the rest of `host.toml` — `+ archive s3://… @ HOST`
//! when the installation keeps its archive in its own files and holds no segment
//! there; `~ archive` when it holds some (gridd's next start copies each to the bucket,
//! reads it back and compares it, and only then removes it from its files), or when
//! the same bucket and prefix are reached another way (endpoint, region, credentials).
//! Moving away from a bucket (to another, or to the host's files named as
//! `archive "file"`) is `~ archive` too: host.toml names the new place and the bucket
//! left (`archive-leaving`), and gridd's next start moves each segment out of it.
//! Moving the index away from a table (to another, or into the host's store: an
//! `archive "s3://…"`, or `archive "file"` named so) is `~ archive` too: host.toml
//! names the table left (`archive-index-leaving`), and gridd's next start copies each
//! of the host's records out of it, verified, and records the new place only when
//! every id the host archived there was found. Nothing is ever inferred from a removed
//! line.
//!
//! Invariants, stated as absences: no `host.toml` names a remote archive the
//! reconciler has not reached with its credentials and found keeping the promise
//! of a put that never overwrites; no installation whose segments are in a bucket, or
//! whose index is in a table, is pointed elsewhere without that bucket or table named
//! as the one they leave, reached first.

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
/// none: its own files) to the one the files declare (`wanted`; `files_named`: they
/// name the host's own files for its segments in so many words). An archive keeps two
/// things, each judged on its own: its segments (the installation's files or a bucket)
/// and its index by id (the installation's store or a table). Either may be added, and
/// segments may leave a bucket for the host's files (named so) or another bucket, the
/// index a table for the host's store or another table; a kept store is reached again
/// only at the same address; a store left by a removed line is `!`.
pub fn transitions(
    host: &str,
    dir: &Path,
    found: Option<&S3ArchiveConfig>,
    (wanted, files_named): (Option<&S3ArchiveConfig>, bool),
) -> Vec<Draft> {
    if found == wanted {
        return Vec::new();
    }
    let attention = |detail: String| vec![Draft::attention("archive", host, host, detail)];
    let files = dir.join(ARCHIVE_DIR).display().to_string();
    let (found_index, wanted_index) = (index(found), index(wanted));
    let (found_segments, wanted_segments) = (segments(found), segments(wanted));
    let index_leaving = moved(found_index, wanted_index);
    if let Some(f) = index_leaving.filter(|_| wanted.is_none() && !files_named) {
        return attention(format!(
            "host.toml keeps the archive's index in {}, and the files name no archive: a move of the index into the installation's store is made only when the files say so (`archive \"file\"`), never inferred from a removed line",
            f.url
        ));
    }
    let leaving = moved(found_segments, wanted_segments);
    if let Some(f) = leaving.filter(|_| wanted_segments.is_none() && !files_named) {
        return attention(format!(
            "host.toml keeps archive segments in {}, and the files name no store for them: a move back to {files} is made only when the files say so (`archive \"file\"`, or under a table `segments \"file\"`), never inferred from a removed line",
            f.url
        ));
    }
    // The field a change of the segments' store is shown as.
    let field = if found_index.is_some() || wanted_index.is_some() {
        "segments"
    } else {
        "archive"
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
                changes.push(change("index", STORE, &table.url));
            }
        }
        (Some(f), to) if index_leaving.is_some() => {
            let place = to.map_or(STORE, |t| t.url.as_str());
            let how = match to {
                Some(_) => {
                    "put in that table (the same record: its tag names the host and the id, not the table)"
                }
                None => "written into it",
            };
            parts.push(format!(
                "move of the index from {}: each of the host's records there read, its tag verified, and {how} — when gridd next starts, made whole only when every id the host archived there is found (refused, naming what is missing, nothing lost, while a table does not answer or lacks one); the records stay in {0}, no longer read",
                f.url
            ));
            changes.push(change("index", &f.url, place));
            if let Some(table) = to {
                parts.push(format!(
                    "the index of archived answers by id in {} at {}",
                    table.url, table.endpoint
                ));
            }
        }
        (Some(f), Some(table)) => changes.extend(reached("", f, table)),
        _ => {}
    }
    match (found_segments, wanted_segments) {
        (Some(f), to) if leaving.is_some() => {
            let (place, sealed) = match to {
                Some(bucket) => (
                    bucket.url.as_str(),
                    " (sealed to the host, with the same key)",
                ),
                None => (files.as_str(), ""),
            };
            parts.push(format!(
                "move from {}: its segments copied to {place}{sealed}, each read back and compared, then deleted from the bucket — when gridd next starts (refused, nothing deleted, while a store does not answer); then the bucket is released",
                f.url
            ));
            changes.push(change(field, &f.url, to.map_or("file", |b| b.url.as_str())));
            if let Some(bucket) = to {
                parts.push(format!(
                    "segments sealed to the host at {}",
                    bucket.describe()
                ));
            }
        }
        (None, Some(bucket)) => {
            let held = local_segments(dir);
            if held > 0 {
                parts.push(format!(
                    "move from {files}: its {held} segment(s) copied to the bucket (sealed to the host), each read back and compared, then removed from there — when gridd next starts (refused, nothing removed, while the bucket does not answer)"
                ));
            }
            if held > 0 || found.is_some() {
                changes.push(change(field, "file", &bucket.url));
            }
            parts.push(format!(
                "segments sealed to the host at {}",
                bucket.describe()
            ));
        }
        (Some(f), Some(bucket)) => {
            let prefix = if field == "segments" { "segments." } else { "" };
            changes.extend(reached(prefix, f, bucket));
            if !parts.is_empty() {
                parts.push(format!("segments stay in {}", bucket.url));
            }
        }
        _ => {
            if !parts.is_empty() {
                parts.push(format!("segments stay in {files}"));
            }
        }
    }
    let op = if changes.is_empty() {
        Op::Create
    } else {
        Op::Change
    };
    let detail = match (parts.is_empty(), wanted) {
        (true, Some(w)) => format!(
            "the same objects, reached at {} (takes effect when gridd restarts)",
            w.describe()
        ),
        _ => parts.join("; then "),
    };
    vec![
        Draft::new(
            op,
            "archive",
            wanted.map_or("file", |w| w.url.as_str()),
            host,
            detail,
            Action::WriteArchive {
                archive: wanted.cloned(),
                leaving: leaving.cloned(),
                index_leaving: index_leaving.cloned(),
            },
        )
        .key(key(host))
        .after([format!("host:{host}")])
        .changes(changes),
    ]
}

/// The index's place when no table keeps it, as a change names it.
const STORE: &str = "the installation's store";

/// The table of an archive's index (none: the installation's own store).
fn index(archive: Option<&S3ArchiveConfig>) -> Option<&S3ArchiveConfig> {
    archive.filter(|a| a.table().is_some())
}

/// The bucket of an archive's segments (none: the installation's own files).
fn segments(archive: Option<&S3ArchiveConfig>) -> Option<&S3ArchiveConfig> {
    archive.and_then(S3ArchiveConfig::segment_store)
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

/// Points the installation at `dir` to `archive` (none: its own files), moving its
/// segments out of `leaving` and its index out of `index_leaving`: refused, changing
/// nothing, when host.toml no longer keeps what the plan saw, a credentials file is
/// missing or weak, or a server does not answer or would let a put overwrite; then
/// `host.toml` rewritten with it.
pub fn write(dir: &Path, archive: Option<&S3ArchiveConfig>, leaving: Leaving<'_>) -> Effect {
    Effect::local(write_archive(dir, archive, leaving))
}

/// What a move leaves: the bucket of the segments, the table of the index.
pub type Leaving<'a> = (Option<&'a S3ArchiveConfig>, Option<&'a S3ArchiveConfig>);

/// Reaches the table and the bucket `store` names with the installation's credentials
/// and runs each store's check (the table or bucket there, a second put of a key
/// refused); then writes `config` as `host.toml`. Refused, changing nothing, when any of it fails.
pub(crate) fn reach_and_write(
    dir: &Path,
    (store, what): (&S3ArchiveConfig, &str),
    config: &HostConfig,
) -> Result<std::path::PathBuf, String> {
    reach(dir, (store, what))?;
    write_config(dir, config)
}

/// `config` written as the installation's `host.toml` (private).
fn write_config(dir: &Path, config: &HostConfig) -> Result<std::path::PathBuf, String> {
    let path = dir.join(grid_engine::config::HOST_CONFIG_FILE);
    grid_engine::custody::write_private(&path, config.to_toml().as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Reaches the table and the bucket `store` names with the installation's credentials
/// and runs each store's check; nothing written.
fn reach(dir: &Path, (store, what): (&S3ArchiveConfig, &str)) -> Result<(), String> {
    // A store that does not answer, named as what it keeps (`archive`, `snapshot`).
    let unchanged = |e: grid_engine::store::archive::ArchiveError| match e {
        grid_engine::store::archive::ArchiveError::Remote { store, detail } => {
            format!("{what} store {store}: {detail}; host.toml is unchanged")
        }
        e => format!("{e}; host.toml is unchanged"),
    };
    use grid_engine::store::archive::Blobs;
    if store.table().is_some() {
        use grid_engine::store::records::Records;
        let records = store.records(dir)?;
        Records::check(&records).map_err(unchanged)?;
    }
    if let Some(bucket) = store.segment_store() {
        let blobs = bucket.blobs(dir, what)?;
        Blobs::check(&blobs).map_err(unchanged)?;
    }
    Ok(())
}

fn write_archive(
    dir: &Path,
    archive: Option<&S3ArchiveConfig>,
    (leaving, index_leaving): Leaving<'_>,
) -> Result<String, String> {
    let mut config = HostConfig::read(dir).map_err(|e| e.to_string())?;
    let found = config.archive.clone();
    // The table the index leaves, and the bucket the segments leave, are the ones
    // host.toml keeps, as the plan saw them.
    let index_moving = as_planned(
        moved(index(found.as_ref()), index(archive)),
        index_leaving,
        (
            "the archive's index",
            "the archive's index where this plan moves it from",
        ),
    )?;
    let moving = as_planned(
        moved(segments(found.as_ref()), segments(archive)),
        leaving,
        (
            "archive segments",
            "the archive's segments where this plan moves them from",
        ),
    )?;
    if let Some(m) = &moving {
        reach(dir, (m, "archive"))?;
        config.archive_leaving = Some(Box::new(m.clone()));
    }
    if let Some(m) = &index_moving {
        reach(dir, (m, "archive"))?;
        config.archive_index_leaving = Some(Box::new(m.clone()));
    }
    config.archive = archive.cloned();
    let path = match archive {
        Some(archive) => reach_and_write(dir, (archive, "archive"), &config)?,
        None => write_config(dir, &config)?,
    };
    let named = match archive {
        Some(a) => {
            let segments = a
                .segments
                .as_ref()
                .map_or(String::new(), |s| format!(" with segments in {}", s.url));
            format!("archive {}{segments}", a.url)
        }
        None => "archive \"file\"".to_owned(),
    };
    let reached = usize::from(moving.is_some())
        + usize::from(index_moving.is_some())
        + archive.map_or(0, |a| 1 + usize::from(a.segments.is_some()));
    let servers = match reached {
        1 => "the server answered, and refuses a second put of a key",
        _ => "each server answered, and refuses a second put of a key",
    };
    let files = dir.join(ARCHIVE_DIR).display().to_string();
    let index_moves = match &index_moving {
        Some(m) => format!(
            "; gridd's next start moves the index of {} to {} (each record verified; whole only when every id archived there is found)",
            m.url,
            index(archive).map_or("this host's store", |t| t.url.as_str())
        ),
        None => String::new(),
    };
    let held = match (&moving, archive.and_then(S3ArchiveConfig::segment_store)) {
        (Some(m), to) => format!(
            "; gridd's next start moves the segments of {} to {}, then releases it",
            m.url,
            to.map_or(files.as_str(), |b| b.url.as_str())
        ),
        (None, None) => String::new(), // the segments stay
        (None, Some(to)) => match local_segments(dir) {
            0 => String::new(),
            held => format!(
                "; gridd's next start moves the {held} segment(s) of {files} to {}",
                to.url
            ),
        },
    };
    Ok(format!(
        "wrote {named} into {} ({servers}){held}{index_moves}; a running gridd takes it at its next start",
        path.display()
    ))
}

/// The store host.toml's archive leaves (`moving`), when it is the one the plan leaves
/// (`planned`); refused as a stale plan otherwise. `what`: how the stored thing is named,
/// and where it was as the plan saw it.
fn as_planned(
    moving: Option<&S3ArchiveConfig>,
    planned: Option<&S3ArchiveConfig>,
    (what, where_planned): (&str, &str),
) -> Result<Option<S3ArchiveConfig>, String> {
    if moving.map(|m| &m.url) == planned.map(|l| &l.url) {
        return Ok(moving.cloned());
    }
    Err(match moving {
        Some(m) => format!(
            "host.toml keeps {what} in {}, which this plan does not move: make a new plan (nothing was applied)",
            m.url
        ),
        None => format!(
            "host.toml no longer keeps {where_planned}: make a new plan (nothing was applied)"
        ),
    })
}

/// Whether the installation at `dir` names `archive` already (and, moving, the
/// bucket its segments leave and the table its index leaves as `leaving` names them).
pub fn written(dir: &Path, archive: Option<&S3ArchiveConfig>, leaving: Leaving<'_>) -> bool {
    let names = |held: &Option<Box<S3ArchiveConfig>>, left: Option<&S3ArchiveConfig>| {
        left.is_none_or(|l| held.as_ref().map(|x| &x.url) == Some(&l.url))
    };
    HostConfig::read(dir).is_ok_and(|c| {
        c.archive.as_ref() == archive
            && names(&c.archive_leaving, leaving.0)
            && names(&c.archive_index_leaving, leaving.1)
    })
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
            ca: None,
            segments: None,
        }
    }

    #[test]
    fn an_archive_is_its_own_transition_and_only_a_table_left_or_a_removed_line_is_never_applied() {
        let dir = std::env::temp_dir().join(format!("grid-plan-archive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = bucket("s3://grid-archive/a", "http://127.0.0.1:8333");
        let ops = |found: Option<&S3ArchiveConfig>, wanted: Option<&S3ArchiveConfig>| {
            transitions("a", &dir, found, (wanted, false))
                .into_iter()
                .map(|d| (d.transition.op, d.transition.action, d.transition.changes))
                .collect::<Vec<_>>()
        };
        assert!(ops(None, None).is_empty());
        assert!(ops(Some(&a), Some(&a)).is_empty());
        // Files, none held: `+ archive`, after the host's own transition.
        let added = transitions("a", &dir, None, (Some(&a), false));
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
        // No store named for the segments (a removed line): never applied; the host's
        // files named in so many words, or another bucket: a move out of the bucket.
        let other = bucket("s3://grid-archive/b", "http://127.0.0.1:8333");
        let drafts = ops(Some(&a), None);
        assert_eq!(drafts.len(), 1);
        assert_eq!((drafts[0].0, &drafts[0].1), (Op::Attention, &Action::None));
        for (wanted, after) in [(Some(&other), "s3://grid-archive/b"), (None, "file")] {
            let drafts = transitions("a", &dir, Some(&a), (wanted, true));
            assert_eq!(drafts.len(), 1);
            let t = &drafts[0].transition;
            assert_eq!(t.op, Op::Change);
            assert_eq!(
                t.action,
                Action::WriteArchive {
                    archive: wanted.cloned(),
                    leaving: Some(a.clone()),
                    index_leaving: None,
                }
            );
            assert_eq!(
                (t.changes[0].before.as_str(), t.changes[0].after.as_str()),
                ("s3://grid-archive/a", after)
            );
            assert!(
                t.detail.contains("move from s3://grid-archive/a")
                    && t.detail.contains("deleted from the bucket"),
                "{}",
                t.detail
            );
        }
        // Files holding a segment: `~ archive`, the move gridd's next start makes.
        let segments = dir.join(ARCHIVE_DIR).join(SEGMENTS_PREFIX);
        std::fs::create_dir_all(&segments).unwrap();
        std::fs::write(segments.join("00000000000000000001.seg"), b"x").unwrap();
        let held = transitions("a", &dir, None, (Some(&a), false));
        assert_eq!(held[0].transition.op, Op::Change);
        assert!(
            held[0]
                .transition
                .detail
                .contains("its 1 segment(s) copied")
        );
        assert_eq!(held[0].transition.changes[0].after, "s3://grid-archive/a");
        // A table for the index: `+ archive`, the segments staying in the files.
        // Leaving it by a removed line: never applied; for the host's store named so
        // (`archive "file"`), a bucket's archive or another table: a move of the index.
        let table = bucket("dynamodb://grid-answers", "http://127.0.0.1:4567");
        let indexed = transitions("a", &dir, None, (Some(&table), false));
        assert_eq!(indexed[0].transition.op, Op::Create);
        assert!(indexed[0].transition.detail.contains("segments stay in"));
        assert_eq!(ops(Some(&table), None)[0].0, Op::Attention);
        let other_table = bucket("dynamodb://grid-answers-2", "http://127.0.0.1:4568");
        for (wanted, named, after) in [
            (None, true, STORE),
            (Some(&a), false, STORE),
            (Some(&other_table), false, "dynamodb://grid-answers-2"),
        ] {
            let drafts = transitions("a", &dir, Some(&table), (wanted, named));
            assert_eq!(drafts.len(), 1);
            let t = &drafts[0].transition;
            assert_eq!(t.op, Op::Change);
            let Action::WriteArchive { index_leaving, .. } = &t.action else {
                panic!("{:?}", t.action);
            };
            assert_eq!(index_leaving.as_ref(), Some(&table));
            let index = t.changes.iter().find(|c| c.field == "index").unwrap();
            assert_eq!(
                (index.before.as_str(), index.after.as_str()),
                ("dynamodb://grid-answers", after)
            );
            assert!(
                t.detail
                    .contains("move of the index from dynamodb://grid-answers")
                    && t.detail
                        .contains("every id the host archived there is found"),
                "{}",
                t.detail
            );
        }
        // The index in a table, the segments in a bucket: each store judged on its own.
        let both = S3ArchiveConfig {
            segments: Some(Box::new(a.clone())),
            ..table.clone()
        };
        let new_both = transitions("a", &dir, None, (Some(&both), false));
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
        // Leaving the table: never applied; leaving the bucket for another, or for the
        // host's files named so (`segments "file"`): a move; by a removed line: never.
        let both_other = S3ArchiveConfig {
            segments: Some(Box::new(other.clone())),
            ..table.clone()
        };
        for wanted in [Some(&table), None] {
            assert_eq!(ops(Some(&both), wanted)[0].0, Op::Attention);
        }
        // The index into the host's store, the segments kept in their bucket.
        assert_eq!(
            fields(&both, &a),
            [(
                "index".to_owned(),
                "dynamodb://grid-answers".to_owned(),
                STORE.to_owned()
            )]
        );
        assert_eq!(
            fields(&both, &both_other),
            [(
                "segments".to_owned(),
                "s3://grid-archive/a".to_owned(),
                "s3://grid-archive/b".to_owned()
            )]
        );
        let to_files = transitions("a", &dir, Some(&both), (Some(&table), true));
        assert_eq!(to_files[0].transition.op, Op::Change);
        assert_eq!(to_files[0].transition.changes[0].after, "file");
        assert!(
            transitions("a", &dir, Some(&both), (Some(&table), false))[0]
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
        let refused = write_archive(&dir, Some(&a), (None, None)).unwrap_err();
        assert!(
            refused.contains("keeps archive segments in s3://grid-archive/b"),
            "{refused}"
        );
        let refused = write_archive(&dir, Some(&both), (None, None)).unwrap_err();
        assert!(
            refused.contains("keeps archive segments in s3://grid-archive/b"),
            "{refused}"
        );
        // A plan moving out of a bucket host.toml no longer keeps: refused as stale.
        let refused = write_archive(&dir, None, (Some(&a), None)).unwrap_err();
        assert!(refused.contains("make a new plan"), "{refused}");
        // Moving out of it with the bucket silent: refused, host.toml unchanged.
        let refused = write_archive(&dir, None, (Some(&other), None)).unwrap_err();
        assert!(
            refused.contains("does not answer") || refused.contains("credentials"),
            "{refused}"
        );
        assert!(
            !written(&dir, Some(&a), (None, None)) && written(&dir, Some(&other), (None, None))
        );
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
        assert!(written(&dir, Some(&other), (None, None)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
