//! What adapters report (`grid_adapters::TagEvent`), journaled: every reading of a
//! current adapter generation gets the tag's next index and is journaled in one synced
//! write with everything reported alongside it (group commit), then projected into the
//! models in that same write (`project_tags`). Connection states stay in memory. Also
//! the tag's reads: `inspect tag` and the built-in Process `tag.read`.

use super::observations::{Effect, Entry, effect_key};
use super::tags::Fresh;
use super::*;
use grid_adapters::{Event, TagEvent};

/// The debt a reading becomes while the disk is full (one reason, so that a tag
/// journals it once and counts the repeats).
pub(super) const STORAGE_FULL_DEBT: &str = "storage full: the filesystem holding the host's store is below STORAGE_RESERVE_BYTES_MIN free; this reading was not journaled";

impl Host {
    /// Journals and projects `events` (one synced write), then settles what the
    /// batches published. A reading of a stopped or replaced adapter (another
    /// generation) is dropped; a debt or refusal that repeats the tag's last entry's
    /// reason is counted, not journaled again. Returns how many entries were journaled.
    pub fn ingest(&mut self, events: Vec<TagEvent>) -> usize {
        // A full disk journals no reading: each becomes source debt, journaled once
        // per tag (a repeat is counted) within the reserve; nothing is projected.
        let full = crate::store::usage::full(&self.dir).is_some();
        let mut write = self.database.batch();
        let mut fresh = Fresh::new();
        let mut times = Vec::new();
        for TagEvent {
            tag,
            generation,
            event,
        } in events
        {
            let Some(runtime) = self.tags.get_mut(&tag) else {
                continue;
            };
            let TagReader::Adapter {
                generation: current,
                connection,
                ..
            } = &mut runtime.reader
            else {
                continue;
            };
            if *current != generation {
                continue;
            }
            match event {
                Event::Connection(c) => *connection = Some(c),
                // Its own entry, before the reading decoded from it (the adapter
                // reports them in that order): what a value came from is on record.
                Event::Completion(_) if full => {}
                Event::Completion(completion) => {
                    self.journal_entry(&tag, Entry::Completion(completion), &mut write, &mut fresh);
                }
                Event::Reading(mut reading) => {
                    if full {
                        reading.quality = grid_adapters::Quality::Debt {
                            reason: STORAGE_FULL_DEBT.to_owned(),
                        };
                    }
                    let entry = Entry::Reading(reading);
                    if entry.good_value().is_none()
                        && runtime.last_reason.is_some()
                        && entry.reason() == runtime.last_reason.as_deref()
                    {
                        runtime.repeats += 1;
                        continue;
                    }
                    if let Entry::Reading(r) = &entry {
                        times.push((entry.quality(), r.device_time_ms, r.received_ms));
                    }
                    self.journal_entry(&tag, entry, &mut write, &mut fresh);
                }
            }
        }
        self.write_summaries(&fresh, &mut write);
        // As many as one drain journals, so projection keeps up with the journal.
        // Quiesced by a mission: journaled, projected only after the return settles.
        let (projected, published) = match self.quiesced {
            Some(_) => (false, Vec::new()),
            None if full => (false, Vec::new()),
            None => self.project_tags(&fresh, &mut write, crate::limits::INGEST_BATCH_MAX as u64),
        };
        if fresh.is_empty() && !projected {
            return 0;
        }
        self.failpoints
            .reach(crate::store::Failpoint::SampleBeforeCommit);
        self.commit_durably(write, "journaling tag observations");
        let durable = grid_adapters::now_ms();
        for (quality, device, received) in times {
            let seconds = |from: u64| durable.saturating_sub(from) as f64 / 1_000.0;
            crate::metrics::tag_journaled(quality, device.map(seconds), seconds(received));
        }
        self.settle(published);
        fresh.len()
    }

    /// A tag's journal for `gridctl inspect tag`.
    pub(super) fn tag_report(&self, name: &str) -> Reply {
        let Some(tag) = self.tags.get(name) else {
            return Reply::Refused {
                reason: format!("host `{}` holds no tag `{name}`", self.config.name),
            };
        };
        // One read of the newest entries; the shorter lists are its tails.
        let newest = self.newest_entries(name, crate::limits::TAG_REPORT_OBSERVATIONS_MAX);
        let tail = |n: usize| &newest[newest.len().saturating_sub(n)..];
        let observations: Vec<(u64, f64)> = newest
            .iter()
            .filter_map(|(n, e)| e.good_value().map(|v| (*n, v)))
            .collect();
        let entries = tail(crate::limits::TAG_REPORT_ENTRIES_MAX)
            .iter()
            .map(|(n, e)| e.report(*n))
            .collect();
        let since_good = usize::try_from(tag.since_good()).unwrap_or(usize::MAX);
        let debt = tail(since_good.min(crate::limits::TAG_REPORT_DEBT_MAX))
            .iter()
            .filter_map(|(n, e)| {
                e.reason().map(|reason| crate::protocol::DebtEntry {
                    index: *n,
                    reason: reason.to_owned(),
                    quality: e.quality().to_owned(),
                    received_ms: match e {
                        Entry::Reading(r) => Some(r.received_ms),
                        Entry::Completion(c) => Some(c.received_ms),
                        Entry::Simulated(_) => None,
                    },
                })
            })
            .collect();
        let fed = self
            .models
            .iter()
            .flat_map(|(model, m)| {
                m.tag_fed
                    .iter()
                    .filter(|(_, t)| t == name)
                    .map(|(input, _)| {
                        let position = self.fed_position(&tag_fed_key(model, name));
                        crate::protocol::TagFed {
                            model: model.clone(),
                            input: input.clone(),
                            position,
                            batches: m.batches,
                            stale: self.stale_at(name, position),
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let (source, connection) = match &tag.reader {
            TagReader::Simulated { .. } | TagReader::Retired { .. } => {
                (tag.source_kind().to_owned(), None)
            }
            TagReader::Adapter {
                tag, connection, ..
            } => (tag.source.kind().to_owned(), connection.clone()),
        };
        Reply::Tag(Box::new(crate::protocol::TagReport {
            host: self.config.name.clone(),
            name: name.to_owned(),
            tag: tag.record.tag.clone(),
            count: tag.last,
            observations,
            fed,
            source,
            connection,
            last_index: tag.last,
            last_good: tag
                .summary
                .last_good
                .map(|(index, value)| crate::protocol::LastGood { index, value }),
            counts: crate::protocol::QualityCounts {
                good: tag.summary.good,
                debt: tag.summary.debt,
                refused: tag.summary.refused,
                completions: tag.summary.completions,
            },
            debt,
            entries,
            consecutive: self.consecutive(name, tag.last),
            repeats: tag.repeats,
            retired: tag.record.retired,
            held_from: self.held_from(name),
            debt_windows: self
                .debt_windows(name, crate::limits::TAG_REPORT_DEBT_WINDOWS_MAX)
                .into_iter()
                .map(|(window_ms, w)| crate::protocol::DebtWindowView {
                    window_ms,
                    reason: w.reason,
                    quality: w.quality,
                    count: w.count,
                    first: w.first,
                    last: w.last,
                })
                .collect(),
        }))
    }

    /// The built-in Process `tag.read`: the journaled entry `index` of `tag` (the
    /// newest when `None`) and what it produced in each model it was fed to. Reads
    /// only what is durable; never asks the device.
    pub fn tag_read(&self, name: &str, index: Option<u64>) -> Result<serde_json::Value, String> {
        let tag = self
            .tags
            .get(name)
            .ok_or_else(|| format!("host `{}` holds no tag `{name}`", self.config.name))?;
        let n = index.unwrap_or(tag.last);
        if n == 0 || n > tag.last {
            return Err(format!(
                "tag `{name}` has no observation {n} (journaled: 1..={})",
                tag.last
            ));
        }
        let held_from = self.held_from(name);
        if n < held_from {
            return Err(format!(
                "observation {n} of tag `{name}` was purged once every model fed by the tag had projected it (the journal holds {held_from}..={}; its counts stay in `inspect tag`)",
                tag.last
            ));
        }
        let entry = self.entry(name, n);
        let effects: Vec<Effect> = self
            .tag_effects
            .prefix(effect_key(name, n, ""))
            .map(|guard| {
                let value = guard
                    .value()
                    .unwrap_or_else(|e| fatal(&self.dir, "reading tag effects", e));
                serde_json::from_slice(&value)
                    .unwrap_or_else(|e| fatal(&self.dir, "a tag effect does not decode", e))
            })
            .collect();
        // The entry's fields at the top (index, quality, value or reason, raw, times),
        // beside the tag's name and what it produced.
        let mut answer = serde_json::to_value(entry.report(n)).expect("entries serialize");
        answer["tag"] = serde_json::json!(name);
        answer["models"] = serde_json::to_value(effects).expect("effects serialize");
        Ok(answer)
    }
}
