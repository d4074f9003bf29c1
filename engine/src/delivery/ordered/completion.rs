//! Whether a publication is complete: every recipient of its cohort has a receipt
//! covering it (what `inspect receipted` asks at the publisher).

use super::{Outbox, span};

impl Outbox {
    /// Whether every recipient of `position`'s cohort has a receipt covering it.
    /// False for a position not yet published.
    pub fn complete(&self, position: u64) -> bool {
        if position == 0 || position > self.published {
            return false;
        }
        match span(&self.cohorts, self.published, position) {
            // Forgotten: all of its publications were complete.
            None => true,
            Some(c) => c.recipients.iter().all(|r| {
                self.destinations
                    .get(r)
                    .is_some_and(|d| d.receipted >= position)
            }),
        }
    }

    /// Of `position`'s cohort: how many recipients it has, the highest position that
    /// every one of them has a receipt covering (at most what is published), and those
    /// whose receipts do not cover `position` yet, by name. `None` for a position not
    /// yet published; a forgotten cohort (every publication complete) has none.
    pub fn awaiting(&self, position: u64) -> Option<(usize, u64, Vec<&str>)> {
        if position == 0 || position > self.published {
            return None;
        }
        let Some(cohort) = span(&self.cohorts, self.published, position) else {
            return Some((0, self.published, Vec::new()));
        };
        let receipted = |r: &String| self.destinations.get(r).map_or(0, |d| d.receipted);
        let through = cohort
            .recipients
            .iter()
            .map(receipted)
            .min()
            .unwrap_or(self.published)
            .min(self.published);
        let awaited = cohort
            .recipients
            .iter()
            .filter(|r| receipted(r) < position)
            .map(String::as_str)
            .collect();
        Some((cohort.recipients.len(), through, awaited))
    }
}
