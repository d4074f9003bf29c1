//! Tags (profile `sources`, docs/sources.md): a tag's observations are journaled
//! (`source-journal`) before they feed the models that read it, in one synced write;
//! recovery continues after the last durable index, never re-reading or back-filling.
//! Simulated tags are generated here (`sample_tags`); adapter tags are reported by
//! `grid_adapters` and journaled by `ingest` (ingest.rs). Both project through
//! [`Host::project_tags`]: a good entry becomes a model batch, debt or a refusal only
//! moves the fed position (the input keeps its last good value, stale).

use super::observations::{Effect, Entry, Summary, effect_key, summary_key};
use super::*;

/// Observations journaled in the write being built, not yet readable from the keyspace.
pub(super) type Fresh = BTreeMap<(String, u64), Entry>;

impl Host {
    /// Tags come back from the store with their last journaled index and summary; the
    /// sampler and the adapters continue after it. Observations that fell due while
    /// the host was down are not generated afterwards (docs/sources.md): the next one is
    /// due one interval from now; an adapter reports only what it reads from now on.
    pub(super) fn recover_tags(&mut self) -> Result<(), HostError> {
        let store = self.dir.join("store");
        let storage = |source| HostError::Storage {
            path: store.clone(),
            source,
        };
        let records: Vec<(String, TagRecord)> = self.named_records(&self.tags_keyspace, "tag")?;
        // A host that no longer selects `sources` keeps its tags (observe reports them,
        // the plan flags them) but gridd samples nothing.
        let now = std::time::Instant::now();
        for (name, record) in records {
            let (tag, simulation) = self
                .parse_tag(&record.tag)
                .map_err(|e| self.damaged(format!("tag `{name}` no longer loads: {e}")))?;
            let prefix = observation_prefix(&name);
            let last = match self.source_journal.prefix(&prefix).next_back() {
                None => 0,
                Some(guard) => {
                    let key = guard.key().map_err(storage)?;
                    key.get(prefix.len()..)
                        .and_then(|n| <[u8; 8]>::try_from(n).ok())
                        .map(u64::from_be_bytes)
                        .ok_or_else(|| {
                            self.damaged(format!("tag `{name}`: a journal key is malformed"))
                        })?
                }
            };
            let summary = match self.meta.get(summary_key(&name)).map_err(storage)? {
                Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                    self.damaged(format!("tag `{name}`: its summary does not decode: {e}"))
                })?,
                // A journal written before summaries existed: counted once, here.
                None => self.count_journal(&name),
            };
            let last_reason = match last {
                0 => None,
                n => self.entry(&name, n).reason().map(str::to_owned),
            };
            let reader = match simulation {
                _ if record.retired => TagReader::Retired {
                    source: tag.source.kind(),
                },
                Some(simulation) => TagReader::Simulated {
                    simulation,
                    next_due: now + std::time::Duration::from_millis(simulation.interval_ms.into()),
                },
                None => self.adapter_reader(tag),
            };
            self.tags.insert(
                name,
                TagRuntime {
                    record,
                    reader,
                    last,
                    summary,
                    last_reason,
                    repeats: 0,
                },
            );
        }
        Ok(())
    }

    /// The summary of a journal that has none, counted entry by entry.
    fn count_journal(&self, name: &str) -> Summary {
        let mut summary = Summary::default();
        for guard in self.source_journal.prefix(observation_prefix(name)) {
            let (key, value) = guard
                .into_inner()
                .unwrap_or_else(|e| fatal(&self.dir, "reading the source journal", e));
            let n = crate::store::keys::trailing_u64(&key)
                .unwrap_or_else(|| fatal(&self.dir, "a journal key is malformed", name));
            let entry = Entry::decode(&value)
                .unwrap_or_else(|| fatal(&self.dir, "an observation does not decode", name));
            summary.count(n, &entry);
        }
        summary
    }

    /// Parses a canonical tag text as a tag read at this host: its simulation for a
    /// `simulate` tag, `None` for a source an adapter of this build reads; refuses
    /// every other source by name (never a weaker mode).
    pub(super) fn parse_tag(
        &self,
        text: &str,
    ) -> Result<(grid_spec::Tag, Option<crate::sources::Simulation>), String> {
        let tag = self.parse_tag_node(text)?;
        if let Some(simulation) = crate::sources::Simulation::of(&tag.source) {
            return Ok((tag, Some(simulation)));
        }
        if grid_adapters::provides(&tag.source) {
            return Ok((tag, None));
        }
        Err(format!(
            "tag `{}` reads {}, which this build does not provide; refusing rather than run without it",
            tag.name,
            tag.source.kind()
        ))
    }

    pub(super) fn parse_tag_node(&self, text: &str) -> Result<grid_spec::Tag, String> {
        let topology = self.load_own("tag", text)?;
        let [tag] = <[grid_spec::Tag; 1]>::try_from(topology.tags)
            .map_err(|_| "the text must hold exactly one tag".to_owned())?;
        if tag.host != self.config.name {
            return Err(format!(
                "tag `{}` is read at host `{}`, not `{}`",
                tag.name, tag.host, self.config.name
            ));
        }
        Ok(tag)
    }

    /// Attaches the adapters (profile `sources`) and starts one for every adapter tag
    /// this host holds.
    pub fn attach_adapters(&mut self, adapters: grid_adapters::Adapters) {
        self.adapters = Some(adapters);
        let names: Vec<String> = self
            .tags
            .iter()
            .filter(|(_, t)| matches!(t.reader, TagReader::Adapter { .. }))
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            self.start_adapter(&name);
        }
    }

    /// `tag` as its adapter reads it: a relative file (a Sparkplug `ca`, an OPC UA
    /// `server-certificate`, a J1939 `log`) is the host's, relative to its directory
    /// (the canonical text keeps it as the files say it).
    pub(super) fn as_read_here(&self, tag: &grid_spec::Tag) -> grid_spec::Tag {
        let mut tag = tag.clone();
        let file = match &mut tag.source {
            grid_spec::TagSource::Sparkplug { ca: Some(ca), .. } => Some(ca),
            grid_spec::TagSource::OpcUa {
                server_certificate: Some(certificate),
                ..
            } => Some(certificate),
            grid_spec::TagSource::J1939 {
                input: grid_spec::J1939Input::Log(log),
                ..
            } => Some(log),
            _ => None,
        };
        if let Some(file) = file
            && std::path::Path::new(file.as_str()).is_relative()
        {
            *file = self.dir.join(file.as_str()).display().to_string();
        }
        tag
    }

    /// (Re)starts the adapter of tag `name` under its current generation; a refusal
    /// (missing credentials) is shown as its connection state and logged.
    /// A replayed capture resumes after the newest device time journaled.
    pub(super) fn start_adapter(&mut self, name: &str) {
        let Some(TagRuntime {
            reader: TagReader::Adapter {
                tag, generation, ..
            },
            summary,
            ..
        }) = self.tags.get(name)
        else {
            return;
        };
        let (read, generation) = (self.as_read_here(tag), *generation);
        let resume = summary.device_time_ms_max;
        let Some(adapters) = self.adapters.as_mut() else {
            return;
        };
        if let Err(e) = adapters.start_after(&read, generation, resume) {
            tracing::error!(tag = name, "adapter refused to start: {e}");
            if let Some(TagRuntime {
                reader: TagReader::Adapter { connection, .. },
                ..
            }) = self.tags.get_mut(name)
            {
                *connection = Some(grid_adapters::Connection {
                    state: "refused".to_owned(),
                    detail: Some(e.to_string()),
                });
            }
        }
    }

    /// Takes an installed (or changed) definition once it is durable: observations
    /// continue after the last index; an adapter tag gets a new generation (what the
    /// old one still reports is dropped) and its adapter is started again.
    pub(super) fn install_tag(
        &mut self,
        name: String,
        record: TagRecord,
        tag: grid_spec::Tag,
        simulation: Option<crate::sources::Simulation>,
    ) {
        let reader = match simulation {
            Some(simulation) => {
                if let Some(adapters) = self.adapters.as_mut() {
                    adapters.stop(&name);
                }
                TagReader::Simulated {
                    simulation,
                    next_due: std::time::Instant::now()
                        + std::time::Duration::from_millis(simulation.interval_ms.into()),
                }
            }
            None => self.adapter_reader(tag),
        };
        let adapter = matches!(reader, TagReader::Adapter { .. });
        match self.tags.get_mut(&name) {
            Some(current) => {
                current.record = record;
                current.reader = reader;
            }
            None => {
                self.tags.insert(
                    name.clone(),
                    TagRuntime {
                        record,
                        reader,
                        last: 0,
                        summary: Summary::default(),
                        last_reason: None,
                        repeats: 0,
                    },
                );
            }
        }
        if adapter {
            self.start_adapter(&name);
        }
    }

    /// The reader of an adapter tag, under a generation of its own.
    fn adapter_reader(&mut self, tag: grid_spec::Tag) -> TagReader {
        self.adapter_generation += 1;
        TagReader::Adapter {
            tag: Box::new(tag),
            generation: self.adapter_generation,
            connection: None,
        }
    }

    /// Journals `entry` as the next index of `tag` in `write` (memory moves ahead of
    /// the disk until the commit; a failed commit stops the process); the caller
    /// writes the summaries ([`Host::write_summaries`]) in the same write. Returns the
    /// index.
    pub(super) fn journal_entry(
        &mut self,
        name: &str,
        entry: Entry,
        write: &mut fjall::OwnedWriteBatch,
        fresh: &mut Fresh,
    ) -> u64 {
        let tag = self.tags.get_mut(name).expect("journaling a held tag");
        let n = tag.last + 1;
        write.insert(
            &self.source_journal,
            observation_key(name, n),
            entry.encode(),
        );
        tag.summary.count(n, &entry);
        tag.last_reason = entry.reason().map(str::to_owned);
        tag.last = n;
        fresh.insert((name.to_owned(), n), entry);
        n
    }

    /// Writes the summary of every tag `fresh` journaled to (once per write, after its
    /// entries).
    pub(super) fn write_summaries(&self, fresh: &Fresh, write: &mut fjall::OwnedWriteBatch) {
        let mut last = None;
        for (name, _) in fresh.keys() {
            if last == Some(name) {
                continue;
            }
            last = Some(name);
            write.insert(
                &self.meta,
                summary_key(name),
                serde_json::to_vec(&self.tags[name].summary).expect("summaries serialize"),
            );
        }
    }

    /// Generates every simulated observation that is due (at most
    /// `SIMULATE_CATCH_UP_PER_TICK` per tag per call, one index at a time), then
    /// projects — observations, model batches (with their staged publications) and
    /// fed positions in one synced write, settled after it. Returns how long the
    /// caller may wait before the next call.
    pub fn sample_tags(&mut self) -> std::time::Duration {
        let idle = std::time::Duration::from_millis(200);
        // Quiesced by a mission: nothing is sampled (nor back-filled after).
        if self.tags.is_empty() || self.quiesced.is_some() {
            return idle;
        }
        // A full disk: nothing is sampled, journaled or projected; sampling resumes
        // one interval after space returns (the next index follows the last one).
        if crate::store::usage::full(&self.dir).is_some() {
            let now = std::time::Instant::now();
            for tag in self.tags.values_mut() {
                if let TagReader::Simulated {
                    simulation,
                    next_due,
                } = &mut tag.reader
                {
                    let interval = std::time::Duration::from_millis(simulation.interval_ms.into());
                    *next_due = (*next_due).max(now + interval);
                }
            }
            return idle;
        }
        let now = std::time::Instant::now();
        let mut write = self.database.batch();
        let mut fresh = Fresh::new();
        let due: Vec<(String, crate::sources::Simulation)> = self
            .tags
            .iter()
            .filter_map(|(name, t)| match &t.reader {
                TagReader::Simulated {
                    simulation,
                    next_due,
                } if *next_due <= now => Some((name.clone(), *simulation)),
                _ => None,
            })
            .collect();
        for (name, simulation) in due {
            let interval = std::time::Duration::from_millis(simulation.interval_ms.into());
            for _ in 0..grid_spec::limits::SIMULATE_CATCH_UP_PER_TICK {
                let (n, next_due) = match &self.tags[&name] {
                    TagRuntime {
                        last,
                        reader: TagReader::Simulated { next_due, .. },
                        ..
                    } => (last + 1, *next_due),
                    _ => unreachable!("a simulated tag stays simulated within a call"),
                };
                if next_due > now {
                    break;
                }
                let value = simulation.observation(n);
                self.journal_entry(&name, Entry::Simulated(value), &mut write, &mut fresh);
                if let Some(TagRuntime {
                    reader: TagReader::Simulated { next_due, .. },
                    ..
                }) = self.tags.get_mut(&name)
                {
                    *next_due += interval;
                }
            }
        }
        self.write_summaries(&fresh, &mut write);
        // Also what adapters journaled and a bounded drain left behind.
        let (projected, published) = self.project_tags(
            &fresh,
            &mut write,
            u64::from(grid_spec::limits::SIMULATE_CATCH_UP_PER_TICK),
        );
        if !fresh.is_empty() || projected {
            self.failpoints
                .reach(crate::store::Failpoint::SampleBeforeCommit);
            self.commit_durably(write, "journaling tag observations");
            self.settle(published);
        }
        let next = self
            .tags
            .values()
            .filter_map(|t| match &t.reader {
                TagReader::Simulated { next_due, .. } => Some(*next_due),
                TagReader::Adapter { .. } | TagReader::Retired { .. } => None,
            })
            .min()
            .map_or(idle, |due| {
                due.saturating_duration_since(std::time::Instant::now())
            });
        next.min(idle)
    }

    /// Feeds every model input `from="tag:T"` the journaled entries beyond its fed
    /// position (at most `limit` per input per call): a good entry
    /// is one model batch with its fed position and its effect; debt or a refusal only
    /// moves the fed position — the input keeps its last good value, stale. Whether
    /// anything was written, and the publications to settle after the commit.
    pub(super) fn project_tags(
        &mut self,
        fresh: &Fresh,
        write: &mut fjall::OwnedWriteBatch,
        limit: u64,
    ) -> (bool, Vec<(String, u64)>) {
        // Only the inputs whose tag journaled beyond what they were fed.
        let feeds: Vec<(String, String, String, u64, u64)> = self
            .feeds(|m| &m.tag_fed)
            .into_iter()
            .filter_map(|(model, input, tag)| {
                let last = self.tags.get(&tag)?.last;
                let fed = self.tag_fed(&model, &tag);
                (last > fed).then_some((model, input, tag, fed, last))
            })
            .collect();
        let mut published = Vec::new();
        let mut changed = false;
        for (model, input, tag, fed, last) in feeds {
            let key = tag_fed_key(&model, &tag);
            let until = last.min(fed.saturating_add(limit));
            // Looked up by (tag, n): one key built per input, not one per entry.
            let mut probe = (tag.clone(), 0);
            for n in fed + 1..=until {
                probe.1 = n;
                let entry = match fresh.get(&probe) {
                    Some(e) => e.clone(),
                    None => self.entry(&tag, n),
                };
                let Some(value) = entry.good_value() else {
                    // Debt: nothing projected; the fed position moves past it.
                    write.insert(&self.meta, key.clone(), n.to_be_bytes());
                    self.tag_fed_cache.get_mut().insert(key.clone(), n);
                    changed = true;
                    continue;
                };
                match self.feed_one(&model, &input, value, (&key, n), write) {
                    Ok(p) => {
                        self.tag_fed_cache.get_mut().insert(key.clone(), n);
                        published.extend(p);
                        self.record_effect(&tag, n, &model, &input, write);
                        changed = true;
                    }
                    Err(reason) => {
                        tracing::warn!(
                            model,
                            input,
                            tag,
                            observation = n,
                            "tag observation refused by the model: {reason}"
                        );
                        break;
                    }
                }
            }
        }
        (changed, published)
    }

    /// The last index of `tag` fed to `model`: remembered once read (only
    /// `project_tags` moves it, and memory may run ahead of the disk until the commit,
    /// whose failure stops the process).
    fn tag_fed(&self, model: &str, tag: &str) -> u64 {
        let key = tag_fed_key(model, tag);
        if let Some(n) = self.tag_fed_cache.borrow().get(&key) {
            return *n;
        }
        let n = self.fed_position(&key);
        self.tag_fed_cache.borrow_mut().insert(key, n);
        n
    }

    /// What observation `n` of `tag` produced in `model` (the batch just staged), for
    /// `tag.read`.
    fn record_effect(
        &self,
        tag: &str,
        n: u64,
        model: &str,
        input: &str,
        write: &mut fjall::OwnedWriteBatch,
    ) {
        let installed = &self.models[model];
        // The input fed and every cell (what the observation produced), not the other
        // inputs: they did not change.
        let runtime = &installed.runtime;
        let values = runtime
            .values()
            .filter(|(name, _)| *name == input || runtime.input_slot(name).is_none())
            .take(crate::limits::TAG_EFFECT_VALUES_MAX)
            .map(|(name, value)| (name.to_owned(), crate::protocol::ValueText::from(value)))
            .collect();
        let effect = Effect {
            model: model.to_owned(),
            input: input.to_owned(),
            generation: installed.record.generation,
            batch: installed.batches,
            values,
        };
        write.insert(
            &self.tag_effects,
            effect_key(tag, n, model),
            serde_json::to_vec(&effect).expect("effects serialize"),
        );
    }
}
