//! The route feeder (profile `delivery`): values this host's inboxes stored durably are
//! applied to the models with `input … from="route:R"`, one journaled batch each with
//! its fed position, so no value is fed twice or skipped.

use super::*;

impl Host {
    /// Stages the deferred publications (a model serving several memberships) their
    /// routes now admit, durably, in order (docs/memberships.md, "One writer").
    fn release_deferred(&self, delivery: &std::sync::Arc<crate::delivery::service::Delivery>) {
        let mut write = self.database.batch();
        let released = delivery.release_deferred(&mut write);
        if released.is_empty() {
            return;
        }
        self.commit_durably(write, "staging deferred publications");
        self.settle(released);
    }

    /// The position a feed recorded under `key` (0 when it fed nothing yet).
    pub(super) fn fed_position(&self, key: &[u8]) -> u64 {
        self.meta
            .get(key)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a fed position", e))
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, u64::from_be_bytes)
    }

    /// Applies one fed value to `input` of `model` as a journaled batch, with the fed
    /// position `(key, position)` in the same write; the publications it stages, or why
    /// the model refused it.
    pub(super) fn feed_one(
        &mut self,
        model: &str,
        input: &str,
        value: f64,
        (key, position): (&[u8], u64),
        write: &mut fjall::OwnedWriteBatch,
    ) -> Result<Vec<(String, u64)>, String> {
        let (_, published) = self.batch(model, &[(input, value)], write)?;
        write.insert(&self.meta, key.to_vec(), position.to_be_bytes());
        Ok(published)
    }

    /// Feeds every model input `from="route:R"` the values this host's inbox of R
    /// holds beyond what the model was fed: one journaled batch per value, each with
    /// the fed position, in one synced write. A value the model refuses stops that
    /// input (it stays in the inbox; nothing is skipped).
    pub fn feed_routes(&mut self) {
        let Some(delivery) = self.delivery.clone() else {
            return;
        };
        // Quiesced by a mission: the values wait in their inboxes, fed after return.
        if self.quiesced.is_some() {
            return;
        }
        self.release_deferred(&delivery);
        let mut write = self.database.batch();
        let mut published = Vec::new();
        let mut fed_any = false;
        let feeds = self.feeds(|m| &m.fed);
        for (model, input, route) in feeds {
            // Only routes of the memberships a model serves feed it (the check refuses
            // others; a leave drops a membership): the values wait in their inbox.
            if let Some(reason) = self.unserved(&model, &route) {
                tracing::warn!(%model, %input, %route, %reason, "route not fed");
                continue;
            }
            let key = fed_key(&model, &route);
            let fed = self.fed_position(&key);
            let values = match delivery.delivered_after(&route, fed, usize::MAX) {
                Ok(v) => v,
                Err(reason) => {
                    tracing::warn!(%model, %route, %reason, "route not readable");
                    continue;
                }
            };
            for (position, value) in values {
                match self.feed_one(&model, &input, value, (&key, position), &mut write) {
                    Ok(p) => {
                        published.extend(p);
                        fed_any = true;
                    }
                    Err(reason) => {
                        tracing::warn!(
                            %model, %input, %route, position, %reason,
                            "input from route refused"
                        );
                        break;
                    }
                }
            }
        }
        fed_any |= self.apply_received(&mut write, &mut published);
        if !fed_any {
            return;
        }
        self.commit_durably(write, "feeding models from routes");
        self.settle(published);
    }
}
