//! An authority's `snapshots "s3://…"` (docs/storage.md, "Authority snapshots"): where
//! each of its voters puts the snapshots it builds and fetches a leader's, written into
//! each voter's `host.toml` as its own transition — `+ snapshots s3://… @ HOST` (after
//! the host's own), `~ snapshots` when the same store is reached another way or another
//! bucket is named (new snapshots go there; nothing is moved: a snapshot is rebuilt from
//! the voter's own state). A store the files no longer name is `!`: a voter is never
//! taken off a bucket by a removed line.
//!
//! Invariants, stated as absences: no `host.toml` names a snapshot store the
//! reconciler has not reached with the host's credentials and found refusing a put of
//! an existing key; no store is removed from a `host.toml` by a plan.

use std::collections::BTreeMap;
use std::path::Path;

use grid_engine::config::{HostConfig, S3ArchiveConfig};
use grid_spec::Topology;
use grid_spec::storage::ArchiveTarget;

use crate::changes::Change;
use crate::observe::HostObservation;
use crate::transition::{Action, Draft, Effect, Op};

pub use crate::transition::SnapshotStore;

/// The key of a host's snapshot-store transition for `membership`.
pub fn key(membership: &str, host: &str) -> String {
    format!("snapshots:{membership}:{host}")
}

/// The stores the files give `host`: one per membership whose authority it takes part
/// in and whose `authority` names `snapshots "s3://…"`.
pub fn wanted(topology: &Topology, host: &str) -> BTreeMap<String, S3ArchiveConfig> {
    topology
        .memberships
        .iter()
        .filter(|m| m.authority_voters.is_some())
        .filter(|m| {
            crate::diff::authority::authority_hosts(topology, &m.name)
                .iter()
                .any(|h| h.name == host)
        })
        .filter_map(|m| match &m.snapshots {
            ArchiveTarget::File => None,
            target => S3ArchiveConfig::from_target(target).map(|s| (m.name.clone(), s)),
        })
        .collect()
}

/// The transitions from the stores `observation`'s `host.toml` holds to the ones the
/// files give its host.
pub fn transitions(topology: &Topology, observation: &HostObservation) -> Vec<Draft> {
    let host = &observation.name;
    let Some(config) = &observation.config else {
        // Not installed yet: the host's own transition writes host.toml first.
        return wanted(topology, host)
            .into_iter()
            .map(|(membership, store)| write(host, Op::Create, membership, store, Vec::new()))
            .collect();
    };
    between(host, &config.snapshots, &wanted(topology, host))
}

fn write(
    host: &str,
    op: Op,
    membership: String,
    store: S3ArchiveConfig,
    changes: Vec<Change>,
) -> Draft {
    let detail = format!(
        "the snapshots of `{membership}`'s authority sealed by this voter at {} (takes effect when gridd (re)starts)",
        store.describe()
    );
    let url = store.url.clone();
    Draft::new(
        op,
        "snapshots",
        &url,
        host,
        detail,
        Action::WriteSnapshots {
            store: SnapshotStore {
                membership: membership.clone(),
                store,
            },
        },
    )
    .key(key(&membership, host))
    .after([format!("host:{host}")])
    .changes(changes)
}

fn between(
    host: &str,
    found: &BTreeMap<String, S3ArchiveConfig>,
    wanted: &BTreeMap<String, S3ArchiveConfig>,
) -> Vec<Draft> {
    let mut out = Vec::new();
    for (membership, w) in wanted {
        match found.get(membership) {
            Some(f) if f == w => {}
            None => out.push(write(
                host,
                Op::Create,
                membership.clone(),
                w.clone(),
                Vec::new(),
            )),
            Some(f) => {
                let changes = [
                    ("snapshots", &f.url, &w.url),
                    ("endpoint", &f.endpoint, &w.endpoint),
                    ("region", &f.region, &w.region),
                    ("credentials", &f.credentials, &w.credentials),
                ]
                .into_iter()
                .filter(|(_, before, after)| before != after)
                .map(|(field, before, after)| Change {
                    field: field.to_owned(),
                    before: before.clone(),
                    after: after.clone(),
                })
                .collect();
                out.push(write(
                    host,
                    Op::Change,
                    membership.clone(),
                    w.clone(),
                    changes,
                ));
            }
        }
    }
    for (membership, f) in found {
        if !wanted.contains_key(membership) {
            out.push(Draft::attention(
                "snapshots",
                &f.url,
                host,
                format!(
                    "host.toml keeps the snapshots of `{membership}`'s authority at {}, the files name none: a voter is never taken off its store by a removed line; name it again, or edit host.toml by hand",
                    f.url
                ),
            ));
        }
    }
    out
}

/// Writes `store` into the installation at `dir`: refused, changing nothing, when the
/// credentials file is missing or weak or the server does not answer or would let a
/// put overwrite.
pub fn write_store(dir: &Path, store: &SnapshotStore) -> Effect {
    Effect::local(write_inner(dir, store))
}

fn write_inner(dir: &Path, store: &SnapshotStore) -> Result<String, String> {
    let mut config = HostConfig::read(dir).map_err(|e| e.to_string())?;
    config
        .snapshots
        .insert(store.membership.clone(), store.store.clone());
    let path = crate::diff::archive::reach_and_write(dir, (&store.store, "snapshot"), &config)?;
    Ok(format!(
        "wrote the snapshots of `{}` at {} into {} (the server answered, and refuses a put of an existing key)",
        store.membership,
        store.store.url,
        path.display()
    ))
}

/// Whether the installation at `dir` names `store` already.
pub fn written(dir: &Path, store: &SnapshotStore) -> bool {
    HostConfig::read(dir).is_ok_and(|c| c.snapshots.get(&store.membership) == Some(&store.store))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::archive::tests::bucket;

    #[test]
    fn a_store_is_its_own_transition_and_never_removed_by_a_plan() {
        let a = bucket("s3://grid-snapshots/ops", "http://127.0.0.1:8333");
        let map = |s: Option<&S3ArchiveConfig>| -> BTreeMap<String, S3ArchiveConfig> {
            s.map(|s| ("ops".to_owned(), s.clone()))
                .into_iter()
                .collect()
        };
        let ops = |found: Option<&S3ArchiveConfig>, wanted: Option<&S3ArchiveConfig>| {
            between("a", &map(found), &map(wanted))
                .into_iter()
                .map(|d| (d.transition.op, d.transition.changes))
                .collect::<Vec<_>>()
        };
        assert!(ops(None, None).is_empty());
        assert!(ops(Some(&a), Some(&a)).is_empty());
        let added = between("a", &map(None), &map(Some(&a)));
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].transition.op, Op::Create);
        assert_eq!(added[0].transition.kind, "snapshots");
        assert_eq!(added[0].transition.name, "s3://grid-snapshots/ops");
        assert_eq!(added[0].after, vec!["host:a".to_owned()]);
        // Reached elsewhere: `~`, the changed field named.
        let moved = bucket("s3://grid-snapshots/ops", "http://127.0.0.1:9333");
        let changed = ops(Some(&a), Some(&moved));
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].0, Op::Change);
        assert_eq!(changed[0].1.len(), 1);
        assert_eq!(changed[0].1[0].field, "endpoint");
        // Named no more: `!`, nothing applied.
        let removed = between("a", &map(Some(&a)), &map(None));
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].transition.op, Op::Attention);
        assert_eq!(removed[0].transition.action, Action::None);
    }

    #[test]
    fn only_the_authority_hosts_of_a_membership_with_a_bucket_want_one() {
        let text = "grid version=1\nmembership ops {\n    authority voters=1 {\n        snapshots \"s3://grid-snapshots/ops\" endpoint=\"http://127.0.0.1:8333\" credentials=\"s3.credentials\"\n    }\n}\nmembership plain {\n    authority voters=1\n}\nhost a listen=\"127.0.0.1:7401\" {\n    member ops\n    member plain\n    profiles transport authority\n}\nhost b listen=\"127.0.0.1:7402\" {\n    member ops\n    profiles transport\n}\n";
        let topology = grid_spec::load_str("t.kdl", text).expect("parses");
        let a = wanted(&topology, "a");
        assert_eq!(a.keys().collect::<Vec<_>>(), vec!["ops"]);
        assert_eq!(a["ops"].url, "s3://grid-snapshots/ops");
        assert!(wanted(&topology, "b").is_empty());
    }
}
