//! The composition's judge of a storage replacement's staged copy
//! (`store::replace`): everything `Host::open` refuses in a store — another format,
//! another host's or installation's store, acknowledged writes missing — refused before
//! anything is installed, and a copy holding a mission of the host still active
//! (return and settle it first). An accepted copy is stamped with its new generation.

use std::path::Path;

use fjall::{Database, PersistMode};

use super::config::HostConfig;
use super::{HOST_NAME_KEY, HOST_STORE_FORMAT, Host};
use crate::store::{high_water, mark, replace};

/// Judges the copy of a store staged at `staged` for the installation `dir`; stamps
/// `generation` into it once accepted, or says why it is refused.
pub fn judge_copy(dir: &Path, staged: &Path, generation: u64) -> Result<(), String> {
    let config = HostConfig::read(dir).map_err(|e| e.to_string())?;
    let custody = crate::custody::verify(dir).map_err(|e| e.to_string())?;
    let verify = Host::verifier(&custody);
    let high_water = high_water::read(dir, &verify).map_err(|e| e.to_string())?;
    let installed = mark::read(dir).map_err(|e| e.to_string())?;
    let failed = |e: fjall::Error| crate::store::describe(&e);
    let database = Database::builder(staged)
        .worker_threads(1)
        .open()
        .map_err(|e| format!("it does not open as a store: {}", failed(e)))?;
    let meta = database
        .keyspace("meta", crate::store::keyspace_options)
        .map_err(failed)?;
    match meta.get("format").map_err(failed)? {
        Some(found) if found.as_ref() == HOST_STORE_FORMAT.as_bytes() => {}
        Some(found) => {
            return Err(format!(
                "it holds store format `{}`, which this gridd does not read (it reads `{HOST_STORE_FORMAT}`)",
                grid_spec::diagnostic::quoted(&String::from_utf8_lossy(&found))
            ));
        }
        None => return Err("it holds no store format: it is not a host's store".to_owned()),
    }
    if let Some(held) = meta.get(HOST_NAME_KEY).map_err(failed)?
        && held.as_ref() != config.name.as_bytes()
    {
        return Err(format!(
            "it is host `{}`'s store, not `{}`'s",
            grid_spec::diagnostic::quoted(&String::from_utf8_lossy(&held)),
            config.name
        ));
    }
    let held = meta
        .get(mark::STORE_ID_KEY)
        .map_err(failed)?
        .map(|id| String::from_utf8_lossy(&id).into_owned());
    let id = match mark::judge(dir, staged, installed, held.clone()).map_err(|e| e.to_string())? {
        mark::Verdict::Same | mark::Verdict::Adopt { .. } => held.unwrap_or_default(),
        mark::Verdict::Create { .. } => {
            return Err("it has no store id: it is no store this installation served".to_owned());
        }
    };
    // A store its installation replaced is no copy to replace from (one this
    // replacement stamped before a stop is its own).
    let held = meta.get(replace::GENERATION_KEY).map_err(failed)?;
    let stamped = held.as_deref() == Some(generation.to_string().as_bytes());
    if !stamped {
        replace::judge(dir, held.as_deref())?;
    }
    let writes = Host::acknowledged(staged, &meta).map_err(|e| e.to_string())?;
    high_water::judge(dir, staged, &id, writes, high_water).map_err(|e| e.to_string())?;
    let held = crate::missions::service::held_in(&database)?;
    if let Some((name, state)) = held.first() {
        return Err(format!(
            "mission `{name}` of this host is {state} in it: return and settle it first (a replacement never moves a mission's allocation)"
        ));
    }
    meta.insert(replace::GENERATION_KEY, generation.to_string())
        .map_err(failed)?;
    database.persist(PersistMode::SyncAll).map_err(failed)?;
    Ok(())
}
