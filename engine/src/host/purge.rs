//! Bounding a tag's source journal (docs/storage.md, "Source journal"): the entries
//! every model fed by the tag has projected into a durable batch are purged — with
//! what they produced (`tag-effects`) — keeping the newest good entry and everything
//! after it, so what `inspect tag`, `tag.read` of recent indexes and recovery read
//! is always there. Counts stay exact (the tag's summary counts every entry ever
//! journaled); the debt and refusals purged are folded first into per-reason,
//! per-window counts (keyspace `tag-debt`).
//!
//! Keys: `meta` `tag-purged`, tag → the lowest index the journal still holds (`u64`
//! BE; absent: 1); `tag-debt`: tag, window start (Unix ms `u64` BE), reason → JSON
//! [`DebtWindow`].
//!
//! Invariants, stated as absences: no entry is purged that a model fed by the tag has
//! not projected (its fed position is durable with the batch); no entry at or after
//! the tag's newest good one is purged; no tag without a model fed by it is purged
//! (nothing has consumed its entries); no purged debt is uncounted.

use super::observations::{Entry, effect_key};
use super::*;
use crate::limits::{
    CHECKPOINT_PURGE_ENTRIES_MAX, TAG_DEBT_WINDOW_MS, TAG_JOURNAL_HOT_ENTRIES_MAX,
};

/// Debt or refusals of one reason in one window, folded in when purged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebtWindow {
    pub reason: String,
    /// `debt` or `refused`.
    pub quality: String,
    pub count: u64,
    /// The first and last index it counts.
    pub first: u64,
    pub last: u64,
}

/// The meta key of the lowest index `tag`'s journal still holds.
fn purged_key(tag: &str) -> Vec<u8> {
    Key::text("tag-purged").then(tag).bytes()
}

/// The `tag-debt` key of `reason` in the window starting at `window_ms`.
fn debt_key(tag: &str, window_ms: u64, reason: &str) -> Vec<u8> {
    Key::text(tag).sep().u64(window_ms).then(reason).bytes()
}

/// What one tag's purge removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TagPurge {
    pub tag: String,
    pub entries: u64,
    /// The lowest index the journal holds now.
    pub held_from: u64,
}

impl Host {
    /// The lowest index `tag`'s journal holds (1: nothing purged).
    pub(super) fn held_from(&self, tag: &str) -> u64 {
        self.meta
            .get(purged_key(tag))
            .unwrap_or_else(|e| fatal(&self.dir, "reading a tag's purge position", e))
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(1, u64::from_be_bytes)
    }

    /// Below which index `tag`'s entries may go: every model fed by it projected them,
    /// and they are older than its newest good entry (and than any completion a
    /// staleness check walks back over) — with the lowest fed position and the newest
    /// good index that bound it. `None`: no model is fed by it.
    pub(super) fn purge_bound(&self, tag: &str, held_from: u64) -> Option<(u64, u64, u64)> {
        let (fed, last_good, last) = self.purge_limits(tag)?;
        let mut bound = fed.min(last_good).min(last);
        while bound >= held_from
            && bound > 0
            && matches!(self.entry(tag, bound), Entry::Completion(_))
        {
            bound -= 1;
        }
        Some((bound, fed, last_good))
    }

    /// What bounds `tag`'s purge: the lowest fed position of the active models fed by
    /// it, its newest good index and its newest index. `None`: no model is fed by it.
    fn purge_limits(&self, tag: &str) -> Option<(u64, u64, u64)> {
        let runtime = self.tags.get(tag)?;
        let fed = self
            .models
            .iter()
            .filter(|(_, m)| !m.record.retired)
            .filter(|(_, m)| m.tag_fed.iter().any(|(_, t)| t == tag))
            .map(|(model, _)| self.fed_position(&tag_fed_key(model, tag)))
            .min()?;
        let last_good = runtime.summary.last_good.map_or(0, |(n, _)| n);
        Some((fed, last_good, runtime.last))
    }

    /// Purges every tag with at least `at_least` (≥ 1) purgeable entries, at most
    /// `CHECKPOINT_PURGE_ENTRIES_MAX` per tag and call (the rest go next time). Each
    /// tag's purge is one synced write: the entries, their effects, the debt they fold
    /// into and the new position.
    pub(super) fn purge_tag_journals(&mut self, at_least: u64) -> Vec<TagPurge> {
        let names: Vec<String> = self.tags.keys().cloned().collect();
        let mut done = Vec::new();
        for tag in names {
            let held_from = self.held_from(&tag);
            let Some((bound, _, _)) = self.purge_bound(&tag, held_from) else {
                continue;
            };
            if bound < held_from.saturating_add(at_least.max(1)) {
                continue;
            }
            let until = bound.min(held_from.saturating_add(CHECKPOINT_PURGE_ENTRIES_MAX as u64));
            let mut write = self.database.batch();
            let mut debt: BTreeMap<Vec<u8>, DebtWindow> = BTreeMap::new();
            let mut entries = 0;
            let journal = self
                .source_journal
                .range(observation_key(&tag, held_from)..observation_key(&tag, until));
            for guard in journal {
                let (key, value) = guard
                    .into_inner()
                    .unwrap_or_else(|e| fatal(&self.dir, "reading the source journal", e));
                let n = crate::store::keys::trailing_u64(&key)
                    .unwrap_or_else(|| fatal(&self.dir, "a journal key is malformed", &tag));
                let entry = Entry::decode(&value)
                    .unwrap_or_else(|| fatal(&self.dir, "an observation does not decode", &tag));
                if let (Some(reason), Entry::Reading(r)) = (entry.reason(), &entry) {
                    let window = r.received_ms - r.received_ms % TAG_DEBT_WINDOW_MS;
                    let key = debt_key(&tag, window, reason);
                    let folded = match debt.get_mut(&key) {
                        Some(w) => w,
                        None => {
                            let held = self.debt_window(&key).unwrap_or_else(|| DebtWindow {
                                reason: reason.to_owned(),
                                quality: r.quality.name().to_owned(),
                                first: n,
                                ..DebtWindow::default()
                            });
                            debt.entry(key).or_insert(held)
                        }
                    };
                    folded.count += 1;
                    folded.last = n;
                }
                write.remove(&self.source_journal, key.to_vec());
                for effect in self.tag_effects.prefix(effect_key(&tag, n, "")) {
                    let key = effect
                        .key()
                        .unwrap_or_else(|e| fatal(&self.dir, "reading tag effects", e));
                    write.remove(&self.tag_effects, key.to_vec());
                }
                entries += 1;
            }
            for (key, window) in debt {
                write.insert(
                    &self.tag_debt,
                    key,
                    serde_json::to_vec(&window).expect("debt windows serialize"),
                );
            }
            write.insert(&self.meta, purged_key(&tag), until.to_be_bytes());
            self.commit_durably(write, "purging a tag's journal");
            crate::metrics::checkpoint_purged(entries);
            done.push(TagPurge {
                tag,
                entries,
                held_from: until,
            });
        }
        done
    }

    fn debt_window(&self, key: &[u8]) -> Option<DebtWindow> {
        let bytes = self
            .tag_debt
            .get(key)
            .unwrap_or_else(|e| fatal(&self.dir, "reading tag debt", e))?;
        Some(
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| fatal(&self.dir, "a tag debt window does not decode", e)),
        )
    }

    /// The newest `limit` debt windows of `tag`'s purged entries, oldest first.
    pub(super) fn debt_windows(&self, tag: &str, limit: usize) -> Vec<(u64, DebtWindow)> {
        self.newest_under(&self.tag_debt, tag, limit, "tag debt")
            .into_iter()
            .map(|(window, value)| {
                let debt = serde_json::from_slice(&value)
                    .unwrap_or_else(|e| fatal(&self.dir, "a tag debt window does not decode", e));
                (window, debt)
            })
            .collect()
    }

    /// Bounds the journals of the routes this host takes part in (profile `delivery`):
    /// checkpoints each route it publishes with at least `publications` past its
    /// checkpoint, and purges each Ordered inbox up to what every model fed by the route
    /// took into a durable batch, when at least `values` would go. An inbox no model is
    /// fed by is never purged (nothing has taken its values); a mapping's staged
    /// versions are purged once `MAPPING_STAGED_KEPT_MAX` newer ones supersede them.
    pub(super) fn bound_deliveries(
        &self,
        publications: u64,
        values: u64,
    ) -> Vec<crate::delivery::service::Bounded> {
        let Some(delivery) = self.delivery.clone() else {
            return Vec::new();
        };
        let mut done = delivery.checkpoint_publishers(publications);
        done.extend(delivery.purge_staged());
        for (route, least) in self.lowest_fed_routes() {
            done.extend(delivery.purge_inbox(&route, least, values));
        }
        done
    }

    /// Per route this host receives, the lowest position the active models fed by it
    /// took into a durable batch (routes no model is fed by are absent).
    pub(super) fn lowest_fed_routes(&self) -> BTreeMap<String, u64> {
        let mut fed: BTreeMap<String, u64> = BTreeMap::new();
        let exported = self.exports.as_ref().map(|e| e.holds()).unwrap_or_default();
        let positions = self
            .feeds(|m| &m.fed)
            .into_iter()
            .map(|(model, _, route)| {
                let position = self.fed_position(&fed_key(&model, &route));
                (route, position)
            })
            // An export still to carry a value holds it in the inbox too.
            .chain(exported);
        for (route, position) in positions {
            fed.entry(route)
                .and_modify(|least| *least = (*least).min(position))
                .or_insert(position);
        }
        fed
    }

    /// Called every `CHECKPOINT_CHECK_INTERVAL`: tags with more than
    /// `TAG_JOURNAL_HOT_ENTRIES_MAX` purgeable entries.
    pub(super) fn purge_tags_due(&mut self) {
        for purged in self.purge_tag_journals(TAG_JOURNAL_HOT_ENTRIES_MAX) {
            tracing::info!(
                tag = purged.tag,
                entries = purged.entries,
                held_from = purged.held_from,
                "tag journal purged"
            );
        }
    }
}
