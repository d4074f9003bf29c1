//! `gridctl host replace-storage HOST --from COPY --op ID` (SPEC C11, docs/transfer.md,
//! "Storage replacement"): runs the engine's replacement of a stopped host's store
//! (`grid_engine::store::replace`: prepare, copy, check, install, record, each journaled
//! in the installation) with the composition's judge of the copy
//! (`grid_engine::host::replace::judge_copy`). Nothing here retries: a replacement a
//! stop interrupted is finished by the same command with the same op id.

use std::path::Path;

use grid_engine::host::control::Client;
use grid_engine::store::Failpoints;
use grid_engine::store::replace::{self, ReplaceError, Replaced};

use crate::observe;
use crate::transition::{Effect, Status};

/// The environment variable that arms crash points in `gridctl` (tests and journeys).
const FAILPOINTS_ENV: &str = "GRID_FAILPOINTS";

/// Why a replacement did not happen: refused (nothing replaced, or an open one left
/// to its own op id) or failed (an error midway: the same command resumes it).
#[derive(Debug)]
pub enum NotReplaced {
    Refused(String),
    Failed(String),
}

/// Replaces the store of `host`'s installation under `state` by a copy of `from`.
pub fn apply(state: &Path, host: &str, op: &str, from: &Path) -> Result<Replaced, NotReplaced> {
    let dir = observe::installed(state, host).map_err(NotReplaced::Refused)?;
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let from = std::path::absolute(from).map_err(|e| NotReplaced::Refused(e.to_string()))?;
    let failpoints = match std::env::var(FAILPOINTS_ENV) {
        Ok(spec) => Failpoints::parse(&spec)
            .map_err(|e| NotReplaced::Failed(format!("{FAILPOINTS_ENV}: {e}")))?,
        Err(_) => Failpoints::default(),
    };
    let running = |dir: &Path| Client::connect(dir).is_ok();
    let judge = |staged: &Path, generation| {
        grid_engine::host::replace::judge_copy(&dir, staged, generation)
    };
    replace::replace(&dir, &from, op, running, judge, &failpoints).map_err(|e| match e {
        ReplaceError::Io { .. } | ReplaceError::Copy { .. } => NotReplaced::Failed(e.to_string()),
        _ => NotReplaced::Refused(e.to_string()),
    })
}

/// Applies `~ host H: replace storage (generation N -> N+1)`.
pub fn effect(state: &Path, host: &str, op: &str, from: &Path) -> Effect {
    match apply(state, host, op, from) {
        Ok(replaced) => {
            let mut effect = Effect::new(Status::Succeeded, said(&replaced));
            effect.replayed = replaced.already;
            effect
        }
        Err(NotReplaced::Refused(reason)) => Effect::new(Status::Refused, reason),
        Err(NotReplaced::Failed(reason)) => Effect::new(
            Status::Failed,
            format!("{reason}; reconcile again to finish it under the same op id"),
        ),
    }
}

/// What a replacement did, in words.
pub fn said(replaced: &Replaced) -> String {
    let r = &replaced.record;
    format!(
        "storage generation {} replaced by {} from {}{}",
        r.replaced,
        r.generation,
        r.from.display(),
        match &r.kept {
            Some(kept) => format!(
                "; the replaced store is kept in {} (fenced)",
                kept.display()
            ),
            None => String::new(),
        }
    )
}

/// Whether the installation `dir` is at storage generation `generation` (or beyond).
pub fn done(dir: &Path, generation: u64) -> bool {
    replace::storage(dir).is_ok_and(|s| s.generation >= generation)
}
