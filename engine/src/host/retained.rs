//! What each journal of the host holds and what a checkpoint now would purge
//! (`gridctl inspect storage`, its `journals`): a model's batches, a tag's source
//! journal, through the delivery room each route's publications and Ordered inbox, and
//! through the ledger room each ledger's journal.
//! Reads only; the bounds are the ones the purges use (docs/storage.md).

use super::*;
use crate::store::usage::JournalView;

impl Host {
    /// Every journal's view, sorted by store and name.
    pub(super) fn journal_views(&self) -> Vec<JournalView> {
        let mut views = Vec::new();
        for (name, installed) in &self.models {
            // A checkpoint now covers every batch of the model: all of them may go.
            let newest = installed.batches;
            let held_from = self.oldest_batch(name, installed.record.generation);
            views.push(JournalView::held(
                "batches",
                name,
                (held_from.unwrap_or(newest + 1), newest),
                newest,
                None,
            ));
        }
        for (tag, runtime) in &self.tags {
            let held_from = self.held_from(tag);
            let (bound, kept) = match self.purge_bound(tag, held_from) {
                None => (
                    0,
                    "no active model is fed by the tag: nothing has consumed its entries"
                        .to_owned(),
                ),
                // The purge removes the entries below its bound.
                Some((bound, fed, last_good)) => (
                    bound.saturating_sub(1),
                    if fed < last_good {
                        format!(
                            "not yet projected into a durable batch of every model fed by the tag (the lowest fed position is {fed})"
                        )
                    } else {
                        format!(
                            "its newest good observation ({last_good}) and what follows it, which `inspect tag` reports and a restart reads"
                        )
                    },
                ),
            };
            views.push(JournalView::held(
                "source-journal",
                tag,
                (held_from, runtime.last),
                bound,
                Some(kept),
            ));
        }
        if let Some(delivery) = &self.delivery {
            views.extend(delivery.journal_views(&self.lowest_fed_routes()));
        }
        if let Some(ledgers) = &self.ledgers {
            views.extend(ledgers.journal_views());
        }
        views.sort_by(|a, b| (&a.store, &a.name).cmp(&(&b.store, &b.name)));
        views
    }

    /// The number of `name`'s oldest batch of `generation` still held.
    fn oldest_batch(&self, name: &str, generation: u32) -> Option<u64> {
        let prefix = Key::text(name).sep().bytes();
        let mut from = prefix.clone();
        from.extend_from_slice(&generation.to_be_bytes());
        let guard = self.batches.range(from..).next()?;
        let key = guard
            .key()
            .unwrap_or_else(|e| fatal(&self.dir, "reading a model's batches", e));
        let (held, number) = checkpoint::batch_position(key.strip_prefix(prefix.as_slice())?)?;
        (held == generation).then_some(number)
    }
}
