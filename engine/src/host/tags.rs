//! The tag sampler (profile `sources`): each due observation of a simulated tag is
//! journaled (`source-journal`) and fed to the models that read it in one synced write;
//! recovery continues after the last durable index, never re-reading or back-filling.

use super::*;

impl Host {
    /// Tags come back from the store with their last journaled index; the sampler
    /// continues after it. Observations that fell due while the host was down are not
    /// generated afterwards (docs/sources.md): the next one is due one interval from now.
    pub(super) fn recover_tags(&mut self) -> Result<(), HostError> {
        let storage = |source| HostError::Storage {
            path: self.dir.join("store"),
            source,
        };
        let records: Vec<(String, TagRecord)> = self.named_records(&self.tags_keyspace, "tag")?;
        // A host that no longer selects `sources` keeps its tags (observe reports them,
        // the plan flags them) but gridd samples nothing.
        let now = std::time::Instant::now();
        for (name, record) in records {
            let simulation = self
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
            let next_due = now + std::time::Duration::from_millis(simulation.interval_ms.into());
            self.tags.insert(
                name,
                TagRuntime {
                    record,
                    simulation,
                    last,
                    next_due,
                },
            );
        }
        Ok(())
    }

    /// Parses a canonical tag text as a tag read at this host; refuses every source
    /// but `simulate` by name (the adapters have not landed).
    pub(super) fn parse_tag(&self, text: &str) -> Result<crate::sources::Simulation, String> {
        let tag = self.parse_tag_node(text)?;
        crate::sources::Simulation::of(&tag.source).ok_or_else(|| {
            format!(
                "tag `{}` reads {}, which this build does not provide; refusing rather than run without it",
                tag.name,
                tag.source.kind()
            )
        })
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

    /// Generates every simulated observation that is due (at most
    /// `SIMULATE_CATCH_UP_PER_TICK` per tag per call, one index at a time) and feeds
    /// every model input `from="tag:T"` the journaled observations beyond its fed
    /// position — observations, model batches (with their staged publications) and
    /// fed positions in one synced write, settled after it. Returns how long the
    /// caller may wait before the next call.
    pub fn sample_tags(&mut self) -> std::time::Duration {
        let idle = std::time::Duration::from_millis(200);
        if self.tags.is_empty() {
            return idle;
        }
        let now = std::time::Instant::now();
        let mut write = self.database.batch();
        let mut changed = false;
        // Observations generated in this write, not yet readable from the keyspace.
        let mut fresh: BTreeMap<(String, u64), f64> = BTreeMap::new();
        for (name, tag) in self.tags.iter_mut() {
            let interval = std::time::Duration::from_millis(tag.simulation.interval_ms.into());
            let mut generated = 0;
            while tag.next_due <= now && generated < grid_spec::limits::SIMULATE_CATCH_UP_PER_TICK {
                let n = tag.last + 1;
                let value = tag.simulation.observation(n);
                write.insert(
                    &self.source_journal,
                    observation_key(name, n),
                    value.to_bits().to_be_bytes(),
                );
                fresh.insert((name.clone(), n), value);
                // Memory moves ahead of the disk until the commit (a failed commit stops
                // the process).
                tag.last = n;
                tag.next_due += interval;
                generated += 1;
                changed = true;
            }
        }
        let feeds = self.feeds(|m| &m.tag_fed);
        let mut published = Vec::new();
        for (model, input, tag) in feeds {
            let Some(last) = self.tags.get(&tag).map(|t| t.last) else {
                continue;
            };
            let key = tag_fed_key(&model, &tag);
            let fed = self.fed_position(&key);
            let until = last.min(fed + u64::from(grid_spec::limits::SIMULATE_CATCH_UP_PER_TICK));
            for n in fed + 1..=until {
                let value = match fresh.get(&(tag.clone(), n)) {
                    Some(v) => *v,
                    None => self.journaled(&tag, n),
                };
                match self.feed_one(&model, &input, value, (&key, n), &mut write) {
                    Ok(p) => {
                        published.extend(p);
                        changed = true;
                    }
                    Err(reason) => {
                        eprintln!(
                            "gridd: model {model}: input {input} from tag {tag} observation {n} refused: {reason}"
                        );
                        break;
                    }
                }
            }
        }
        if changed {
            self.failpoints
                .reach(crate::store::Failpoint::SampleBeforeCommit);
            self.commit_durably(write, "journaling tag observations");
            self.settle(published);
        }
        let next = self
            .tags
            .values()
            .map(|t| t.next_due)
            .min()
            .map_or(idle, |due| {
                due.saturating_duration_since(std::time::Instant::now())
            });
        next.min(idle)
    }

    /// Observation `n` of `tag` from the journal (it must be there).
    fn journaled(&self, tag: &str, n: u64) -> f64 {
        let bytes = self
            .source_journal
            .get(observation_key(tag, n))
            .unwrap_or_else(|e| fatal(&self.dir, "reading the source journal", e))
            .unwrap_or_else(|| {
                fatal(
                    &self.dir,
                    "the source journal misses an observation",
                    format!("tag {tag} observation {n}"),
                )
            });
        let bits = <[u8; 8]>::try_from(bytes.as_ref())
            .unwrap_or_else(|_| fatal(&self.dir, "an observation does not decode", tag));
        f64::from_bits(u64::from_be_bytes(bits))
    }

    /// A tag's journal for `gridctl inspect tag`.
    pub(super) fn tag_report(&self, name: &str) -> Reply {
        let Some(tag) = self.tags.get(name) else {
            return Reply::Refused {
                reason: format!("host `{}` holds no tag `{name}`", self.config.name),
            };
        };
        let mut observations: Vec<(u64, f64)> = self
            .source_journal
            .prefix(observation_prefix(name))
            .rev()
            .take(crate::limits::TAG_REPORT_OBSERVATIONS_MAX)
            .map(|guard| {
                let (key, value) = guard
                    .into_inner()
                    .unwrap_or_else(|e| fatal(&self.dir, "reading the source journal", e));
                let n = key
                    .get(name.len() + 1..)
                    .and_then(|n| <[u8; 8]>::try_from(n).ok())
                    .map(u64::from_be_bytes)
                    .unwrap_or_else(|| fatal(&self.dir, "a journal key is malformed", name));
                let bits = <[u8; 8]>::try_from(value.as_ref())
                    .unwrap_or_else(|_| fatal(&self.dir, "an observation does not decode", name));
                (n, f64::from_bits(u64::from_be_bytes(bits)))
            })
            .collect();
        observations.reverse();
        let fed = self
            .models
            .iter()
            .flat_map(|(model, m)| {
                m.tag_fed
                    .iter()
                    .filter(|(_, t)| t == name)
                    .map(|(input, _)| crate::protocol::TagFed {
                        model: model.clone(),
                        input: input.clone(),
                        position: self
                            .meta
                            .get(tag_fed_key(model, name))
                            .unwrap_or_else(|e| fatal(&self.dir, "reading a fed position", e))
                            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
                            .map_or(0, u64::from_be_bytes),
                        batches: m.batches,
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        Reply::Tag(Box::new(crate::protocol::TagReport {
            host: self.config.name.clone(),
            name: name.to_owned(),
            tag: tag.record.tag.clone(),
            count: tag.last,
            observations,
            fed,
        }))
    }
}
