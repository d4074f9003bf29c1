//! Opening a host: its installation checked (permissions, configuration, profiles,
//! keys), its store refused when it is gone, another's or behind its high-water mark
//! (`store::mark`, `store::high_water`), then every installed model recovered from
//! its journaled batches.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use fjall::{Database, Keyspace, PersistMode};

use super::config::HostConfig;
use super::{
    FENCE_KEY, HOST_NAME_KEY, HOST_STORE_FORMAT, Host, HostError, Installed, ModelRecord,
    batch_key, batch_prefix, pid,
};
use crate::model::Runtime;
use crate::store::{Failpoints, ensure_private_dir, high_water, mark, replace};

impl Host {
    /// Opens the host in `dir`: private permissions, configuration, profiles, store,
    /// then every installed model recovered from its journaled batches.
    pub fn open(dir: &Path, failpoints: Failpoints) -> Result<Host, HostError> {
        if !dir.is_dir() {
            return Err(HostError::Config {
                path: dir.to_owned(),
                reason: "no host installation here (gridctl reconcile creates it)".to_owned(),
            });
        }
        // A transfer's source, or its copy not yet activated, is never served
        // (store/transfer.rs).
        if let Some(reason) = crate::store::transfer::refusal(dir) {
            return Err(HostError::Config {
                path: dir.join(crate::store::transfer::TRANSFER_FILE),
                reason,
            });
        }
        // A transferred installation's first open: its files checked against the
        // manifest its transfer verified, before anything writes (store/arrival.rs).
        match crate::store::arrival::check(dir) {
            Ok(Some(said)) => tracing::info!(installation = %dir.display(), "{said}"),
            Ok(None) => {}
            Err(reason) => {
                return Err(HostError::Config {
                    path: dir.join(crate::store::arrival::MANIFEST_FILE),
                    reason,
                });
            }
        }
        // Nor one whose storage is being replaced (store/replace.rs).
        if let Some(reason) = crate::store::replace::refusal(dir) {
            return Err(HostError::Config {
                path: dir.join(crate::store::replace::REPLACE_FILE),
                reason,
            });
        }
        ensure_private_dir(dir)?;
        let config = HostConfig::read(dir)?;
        config.check_profiles(dir)?;
        // A rotation a crash interrupted completes, or the old generation stays
        // (custody/rotation.rs) — never a hand fix.
        // So does a custody lock: all or nothing (custody/lock.rs).
        if let Some(done) = crate::custody::finish_lock(dir)? {
            tracing::warn!(host = config.name, "{done}");
        }
        for done in crate::custody::finish_rotation(dir, None)? {
            tracing::warn!(host = config.name, "{done}");
        }
        // Every host has its keys; missing, replaced or exposed keys refuse (SPEC §1.6).
        let custody = crate::custody::verify(dir)?;
        let store = dir.join("store");
        let storage = |source| HostError::Storage {
            path: store.clone(),
            source,
        };
        // A store the installation once had is never created afresh (store::mark).
        let mark = mark::before_open(dir, &store)?;
        // Nor is one that acknowledged writes (store::high_water), even without `store.mark`.
        let verify = Self::verifier(&custody);
        let high_water = high_water::read(dir, &verify)?;
        high_water::before_open(dir, &store, high_water.as_ref())?;
        // What an open replays of fjall's own journal is bounded: a keyspace's memtable
        // is flushed to tables past STORE_MEMTABLE_BYTES_MAX (`store::keyspace_options`),
        // the journal's oldest files released past STORE_JOURNAL_BYTES_MAX (fjall's
        // defaults, 64 MiB per keyspace and 512 MiB, let restarts grow to seconds:
        // BENCHMARKS.md, "Retention").
        let database = match Database::builder(&store)
            .worker_threads(1)
            .max_journaling_size(crate::limits::STORE_JOURNAL_BYTES_MAX)
            .open()
        {
            Err(fjall::Error::Locked) => {
                return Err(HostError::Served {
                    path: dir.to_owned(),
                    pid: pid::holder(dir),
                });
            }
            opened => opened.map_err(storage)?,
        };
        // This process holds the store's lock: it names itself as the one serving.
        pid::write(dir)?;
        let keyspace = |name: &str| database.keyspace(name, crate::store::keyspace_options);
        let meta = keyspace("meta").map_err(storage)?;
        let operations = keyspace("operations").map_err(storage)?;
        let unacknowledged = keyspace("unacknowledged").map_err(storage)?;
        let models_keyspace = keyspace("models").map_err(storage)?;
        let batches = keyspace("batches").map_err(storage)?;
        let checkpoints =
            keyspace(crate::store::checkpoint::CHECKPOINTS_KEYSPACE).map_err(storage)?;
        let tags_keyspace = keyspace("tags").map_err(storage)?;
        let source_journal = keyspace("source-journal").map_err(storage)?;
        let tag_effects = keyspace("tag-effects").map_err(storage)?;
        let tag_debt = keyspace("tag-debt").map_err(storage)?;
        let held = meta.get(mark::STORE_ID_KEY).map_err(storage)?;
        let held = held.map(|id| String::from_utf8_lossy(&id).into_owned());
        let verdict = mark::judge(dir, &store, mark, held.clone())?;
        let id = match &verdict {
            mark::Verdict::Create { id } | mark::Verdict::Adopt { id } => id.clone(),
            mark::Verdict::Same => held.expect("a store agreeing with its mark has an id"),
        };
        // A store its installation replaced is fenced (store/replace.rs), whatever it
        // holds.
        if !matches!(verdict, mark::Verdict::Create { .. }) {
            let held = meta.get(replace::GENERATION_KEY).map_err(storage)?;
            replace::judge(dir, held.as_deref()).map_err(|reason| HostError::Config {
                path: store.clone(),
                reason,
            })?;
        }
        // Judged before anything is written into the store.
        let writes = Self::acknowledged(&store, &meta)?;
        let writes = high_water::judge(dir, &store, &id, writes, high_water.clone())?;
        // A new store takes the installation's generation.
        if let mark::Verdict::Create { .. } = &verdict {
            let generation = replace::storage(dir)
                .map_err(|e| HostError::Config {
                    path: store.clone(),
                    reason: e.to_string(),
                })?
                .generation;
            if generation > 1 {
                meta.insert(replace::GENERATION_KEY, generation.to_string())
                    .map_err(storage)?;
            }
        }
        match meta.get("format").map_err(storage)? {
            Some(found) if found.as_ref() != HOST_STORE_FORMAT.as_bytes() => {
                return Err(HostError::UnsupportedFormat {
                    path: store,
                    found: String::from_utf8_lossy(&found).into_owned(),
                });
            }
            Some(_) => {}
            None => {
                meta.insert("format", HOST_STORE_FORMAT).map_err(storage)?;
                database.persist(PersistMode::SyncAll).map_err(storage)?;
            }
        }
        // An installation belongs to one host: a `name` changed in host.toml is refused
        // as what it is, never read as damage of the models that name their host.
        match meta.get(HOST_NAME_KEY).map_err(storage)? {
            Some(held) if held.as_ref() != config.name.as_bytes() => {
                return Err(HostError::Config {
                    path: dir.join(crate::config::HOST_CONFIG_FILE),
                    reason: format!(
                        "this installation belongs to host `{}`, but host.toml names `{}`: a host is never renamed in place (put `name = \"{}\"` back; a new name is a new installation)",
                        String::from_utf8_lossy(&held),
                        grid_spec::diagnostic::quoted(&config.name),
                        String::from_utf8_lossy(&held),
                    ),
                });
            }
            Some(_) => {}
            None => {
                meta.insert(HOST_NAME_KEY, config.name.as_bytes())
                    .map_err(storage)?;
                database.persist(PersistMode::SyncAll).map_err(storage)?;
            }
        }
        // Into the store first: a stop before the mark is written adopts it.
        if let mark::Verdict::Create { id } = &verdict {
            meta.insert(mark::STORE_ID_KEY, id.as_bytes())
                .map_err(storage)?;
            database.persist(PersistMode::SyncAll).map_err(storage)?;
        }
        if let mark::Verdict::Create { id } | mark::Verdict::Adopt { id } = &verdict {
            mark::write(dir, id)?;
        }
        let archive = super::archive::Archive::open(dir, &database, &meta, &config, &failpoints)?;
        let mark =
            high_water::HighWater::open(dir, &id, writes, high_water, Self::signer(&custody))?;
        let failpoints_offset = failpoints.retention_clock_offset_ms();
        let database =
            crate::store::Durable::new(database, meta.clone(), writes, mark, failpoints.clone());
        let mut host = Host {
            dir: dir.to_owned(),
            config,
            wire: None,
            custody,
            database,
            operations,
            unacknowledged,
            models_keyspace,
            batches,
            checkpoints: crate::store::checkpoint::Checkpoints::new(checkpoints),
            tags_keyspace,
            source_journal,
            tag_effects,
            tag_debt,
            tags: BTreeMap::new(),
            adapters: None,
            adapter_generation: 0,
            tag_fed_cache: Default::default(),
            models: BTreeMap::new(),
            failpoints,
            fence: match meta.get(FENCE_KEY).map_err(storage)? {
                Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| HostError::Config {
                    path: store.clone(),
                    reason: format!("the fence record does not decode: {e}"),
                })?,
                None => Default::default(),
            },
            meta,
            delivery: None,
            processes: None,
            ledgers: None,
            exports: None,
            decisions: None,
            quiesced: None,
            archive,
            retention_offset_ms: failpoints_offset,
            left: Default::default(),
        };
        host.recover()?;
        host.complete_leaves()?;
        // What the store holds is what this installation held (docs/storage.md).
        crate::store::held::record(dir, host.models.keys().map(String::as_str)).map_err(|e| {
            HostError::Config {
                path: crate::store::held::path(dir),
                reason: format!("cannot record the models this installation holds: {e}"),
            }
        })?;
        Ok(host)
    }

    /// Verifies a record signed by this host's signing keys, current or retired.
    pub(super) fn verifier(
        custody: &crate::custody::Custody,
    ) -> impl Fn(u32, &[u8], &[u8; 64]) -> bool + use<> {
        // The manifest read at each call: a rotation's new generation verifies too.
        let custody = custody.clone();
        move |generation: u32, message: &[u8], signature: &[u8; 64]| {
            let signature = ed25519_dalek::Signature::from_bytes(signature);
            crate::custody::verify_signature(&custody.manifest(), generation, message, &signature)
        }
    }

    /// Signs, once, the checked arrival of this transferred installation
    /// (store/arrival.rs): called once its custody signs.
    pub fn sign_arrival(&self) -> Result<Option<String>, String> {
        crate::store::arrival::sign(&self.dir, &self.config.name, &Self::signer(&self.custody))
    }

    /// Signs a record with this host's current signing key.
    pub(super) fn signer(custody: &crate::custody::Custody) -> high_water::Signer {
        let custody = custody.clone();
        std::sync::Arc::new(move |message: &[u8]| {
            let (generation, signature) = custody.try_sign(message).map_err(|e| e.to_string())?;
            Ok((generation, signature.to_bytes()))
        })
    }

    /// The store's own count of acknowledged writes (`None`: it never counted).
    pub(super) fn acknowledged(store: &Path, meta: &Keyspace) -> Result<Option<u64>, HostError> {
        let held = meta
            .get(high_water::ACKNOWLEDGED_KEY)
            .map_err(|source| HostError::Storage {
                path: store.to_owned(),
                source,
            })?;
        held.map(|bytes| {
            <[u8; 8]>::try_from(bytes.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| HostError::Damaged {
                    path: store.to_owned(),
                    detail: format!(
                        "its count of acknowledged writes is {} bytes, not 8",
                        bytes.len()
                    ),
                })
        })
        .transpose()
    }

    fn recover(&mut self) -> Result<(), HostError> {
        let storage = |source| HostError::Storage {
            path: self.dir.join("store"),
            source,
        };
        let records: Vec<(String, ModelRecord)> =
            self.named_records(&self.models_keyspace, "model")?;
        for (name, record) in records {
            let model = self
                .parse_model(&record.model)
                .map_err(|e| self.damaged(format!("model `{name}` no longer loads: {e}")))?;
            let mut runtime =
                Runtime::new(&model).map_err(|e| self.damaged(format!("model `{name}`: {e}")))?;
            // The installed checkpoint of this generation, then the batches after it.
            let (mut batches, mut set) = (0u64, BTreeSet::new());
            let mut applied = BTreeMap::new();
            let checkpoint = self.model_checkpoint(&name, record.generation)?;
            let checkpointed = checkpoint.as_ref().map_or(0, |(position, _)| *position);
            if let Some((position, state)) = checkpoint {
                let named: Vec<(&str, f64)> =
                    state.inputs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                if !named.is_empty() {
                    runtime.apply(&named).map_err(|e| {
                        self.damaged(format!(
                            "model `{name}`: its checkpoint at batch {position}: {e}"
                        ))
                    })?;
                }
                set.extend(state.inputs.into_iter().map(|(input, _)| input));
                for m in state.matrices {
                    let matrix = hex::decode(&m.grdx)
                        .map_err(|e| e.to_string())
                        .and_then(|b| crate::grdx::Matrix::decode(&b).map_err(|e| e.to_string()))
                        .and_then(|x| runtime.apply_matrix(&m.name, &x).map_err(|e| e.to_string()));
                    matrix.map_err(|e| {
                        self.damaged(format!(
                            "model `{name}`: matrix `{}` of its checkpoint at batch {position}: {e}",
                            m.name
                        ))
                    })?;
                    applied.insert(m.name, m.version);
                }
                batches = position;
            }
            let prefix = batch_prefix(&name, record.generation);
            let first = batch_key(&name, record.generation, batches + 1);
            for guard in self.batches.range(first..) {
                let (key, value) = guard.into_inner().map_err(storage)?;
                if !key.starts_with(&prefix) {
                    break;
                }
                let number = key
                    .get(prefix.len()..)
                    .and_then(|n| <[u8; 8]>::try_from(n).ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(|| {
                        self.damaged(format!("model `{name}`: a batch key is malformed"))
                    })?;
                if number != batches + 1 {
                    return Err(self.damaged(format!(
                        "model `{name}`: batch {number} follows batch {batches}"
                    )));
                }
                super::matrices::replay(&mut runtime, &value, &mut set, &mut applied)
                    .map_err(|e| self.damaged(format!("model `{name}`: batch {number}: {e}")))?;
                batches = number;
            }
            let mut installed = Installed::new(record, runtime, batches, set, &model);
            installed.checkpointed = checkpointed;
            installed.applied = applied;
            self.models.insert(name, installed);
        }
        self.recover_tags()
    }

    /// The installed checkpoint of model `name` when it is of `generation`: its batch
    /// and state. A damaged or undecodable one refuses to open, naming it.
    fn model_checkpoint(
        &self,
        name: &str,
        generation: u32,
    ) -> Result<Option<(u64, super::checkpoint::ModelState)>, HostError> {
        let Some(checkpoint) = self
            .checkpoints
            .installed(super::checkpoint::ROOM, name)
            .map_err(|detail| self.damaged(detail))?
        else {
            return Ok(None);
        };
        let state: super::checkpoint::ModelState = serde_json::from_slice(&checkpoint.state)
            .map_err(|e| {
                self.damaged(format!(
                    "model `{name}`: its checkpoint does not decode: {e}"
                ))
            })?;
        Ok((state.generation == generation).then_some((checkpoint.position, state)))
    }
}
