//! The source journal's entries (keyspace `source-journal`, docs/host-store.md): what a
//! tag observed at each index, as the host journaled it before anything was projected.
//!
//! A simulated observation is 8 bytes, the value's `f64` bits (big-endian), always
//! good. An adapter's observation is the byte `1` followed by the JSON of its
//! [`grid_adapters::Reading`] (raw value, quality with its value or reason, the device
//! timestamp where the protocol has one, the host's receive time). A passive receive
//! completion (a whole J1939 multi-packet message, [`grid_adapters::Completion`]) is
//! the byte `2` followed by its JSON: its own entry, journaled before the reading
//! decoded from it, never projected. Beside the journal,
//! each tag's [`Summary`] (counts by quality, the last good entry) lives in `meta`,
//! written in the same batch as the entries it counts.

use super::*;
use grid_adapters::{Completion, Quality, Raw, Reading};

/// The first byte of an adapter's journal entry (the format's version).
const READING_ENTRY: u8 = 1;
/// The first byte of a passive receive completion's journal entry.
const COMPLETION_ENTRY: u8 = 2;

/// One journaled observation.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Entry {
    /// A simulated tag's value (good by construction).
    Simulated(f64),
    Reading(Reading),
    /// A whole multi-packet message received: on record before what it is decoded
    /// into, neither good nor debt.
    Completion(Completion),
}

impl Entry {
    pub(super) fn encode(&self) -> Vec<u8> {
        match self {
            Entry::Simulated(v) => v.to_bits().to_be_bytes().to_vec(),
            Entry::Reading(r) => {
                let mut bytes = vec![READING_ENTRY];
                bytes.extend(serde_json::to_vec(r).expect("readings serialize"));
                bytes
            }
            Entry::Completion(c) => {
                let mut bytes = vec![COMPLETION_ENTRY];
                bytes.extend(serde_json::to_vec(c).expect("completions serialize"));
                bytes
            }
        }
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Entry> {
        if let Ok(bits) = <[u8; 8]>::try_from(bytes) {
            return Some(Entry::Simulated(f64::from_bits(u64::from_be_bytes(bits))));
        }
        match bytes.split_first() {
            Some((&READING_ENTRY, json)) => serde_json::from_slice(json).ok().map(Entry::Reading),
            Some((&COMPLETION_ENTRY, json)) => {
                serde_json::from_slice(json).ok().map(Entry::Completion)
            }
            _ => None,
        }
    }

    /// The value to project, if this entry is good (and finite: a good entry is
    /// finite by construction, checked again here).
    pub(super) fn good_value(&self) -> Option<f64> {
        let value = match self {
            Entry::Simulated(v) => *v,
            Entry::Reading(Reading {
                quality: Quality::Good { value },
                ..
            }) => *value,
            Entry::Reading(_) | Entry::Completion(_) => return None,
        };
        value.is_finite().then_some(value)
    }

    pub(super) fn quality(&self) -> &'static str {
        match self {
            Entry::Simulated(_) => "good",
            Entry::Reading(r) => r.quality.name(),
            Entry::Completion(_) => "completion",
        }
    }

    /// The debt or refusal reason, if any.
    pub(super) fn reason(&self) -> Option<&str> {
        match self {
            Entry::Reading(Reading {
                quality: Quality::Debt { reason } | Quality::Refused { reason },
                ..
            }) => Some(reason),
            _ => None,
        }
    }

    /// The protocol view of this entry at `index`.
    pub(super) fn report(&self, index: u64) -> crate::protocol::TagEntry {
        let (raw, device_time_ms, received_ms) = match self {
            Entry::Simulated(v) => (Raw::Float(*v), None, None),
            Entry::Reading(r) => (r.raw.clone(), r.device_time_ms, Some(r.received_ms)),
            Entry::Completion(c) => (
                Raw::Bytes(c.bytes.clone()),
                c.device_time_ms,
                Some(c.received_ms),
            ),
        };
        crate::protocol::TagEntry {
            index,
            quality: self.quality().to_owned(),
            value: self.good_value(),
            reason: self.reason().map(str::to_owned),
            raw,
            device_time_ms,
            received_ms,
        }
    }
}

/// Counts by quality and the last good entry of one tag (meta `tag-summary…`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Summary {
    pub good: u64,
    pub debt: u64,
    pub refused: u64,
    /// (index, value) of the newest good entry.
    pub last_good: Option<(u64, f64)>,
    /// Passive receive completions journaled, and how many of them since the newest
    /// good entry (they are not debt).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub completions: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub completions_since_good: u64,
    /// The largest device time (Unix ms) among the journaled entries: where a
    /// replayed capture (a J1939 log) resumes after a restart, so no frame is
    /// journaled twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_time_ms_max: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Summary {
    pub(super) fn count(&mut self, index: u64, entry: &Entry) {
        let device_time = match entry {
            Entry::Reading(r) => r.device_time_ms,
            Entry::Completion(c) => c.device_time_ms,
            Entry::Simulated(_) => None,
        };
        if device_time.is_some() {
            self.device_time_ms_max = self.device_time_ms_max.max(device_time);
        }
        match entry.good_value() {
            Some(v) => {
                self.good += 1;
                self.last_good = Some((index, v));
                self.completions_since_good = 0;
            }
            None if matches!(entry, Entry::Completion(_)) => {
                self.completions += 1;
                self.completions_since_good += 1;
            }
            None if entry.quality() == "refused" => self.refused += 1,
            None => self.debt += 1,
        }
    }
}

/// The meta key of a tag's summary.
pub(super) fn summary_key(tag: &str) -> Vec<u8> {
    Key::text("tag-summary").then(tag).bytes()
}

/// The `tag-effects` key of what observation `n` of `tag` produced in `model`.
pub(super) fn effect_key(tag: &str, n: u64, model: &str) -> Vec<u8> {
    Key::text(tag).sep().u64(n).then(model).bytes()
}

/// What a fed observation produced in one model (keyspace `tag-effects`): the batch it
/// became and the model's values after it, for `tag.read`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    pub model: String,
    pub input: String,
    /// The batch number in the model's generation.
    pub generation: u32,
    pub batch: u64,
    /// The input fed and every cell after the batch (at most `TAG_EFFECT_VALUES_MAX`,
    /// in declaration order).
    pub values: BTreeMap<String, crate::protocol::ValueText>,
}

impl Host {
    /// Entry `n` of `tag` from the journal (it must be there: a missing or
    /// undecodable entry is damage, and stops the process).
    pub(super) fn entry(&self, tag: &str, n: u64) -> Entry {
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
        Entry::decode(&bytes).unwrap_or_else(|| {
            fatal(
                &self.dir,
                "an observation does not decode",
                format!("tag {tag} observation {n}"),
            )
        })
    }

    /// Whether an input fed up to entry `position` of `tag` is stale: the newest
    /// reading at or before it (passing over completions) is not good.
    pub(super) fn stale_at(&self, tag: &str, position: u64) -> bool {
        let mut n = position;
        while n > 0 {
            match self.entry(tag, n) {
                Entry::Completion(_) => n -= 1,
                entry => return entry.good_value().is_none(),
            }
        }
        false
    }

    /// The newest entries of `tag` (index, entry), oldest first, at most `limit`.
    pub(super) fn newest_entries(&self, tag: &str, limit: usize) -> Vec<(u64, Entry)> {
        self.newest_under(&self.source_journal, tag, limit, "the source journal")
            .into_iter()
            .map(|(n, value)| {
                let entry = Entry::decode(&value)
                    .unwrap_or_else(|| fatal(&self.dir, "an observation does not decode", tag));
                (n, entry)
            })
            .collect()
    }

    /// The newest `limit` entries of `keyspace` under `tag`'s prefix, oldest first: the
    /// `u64` that follows the prefix in each key (an index, a window), and the value.
    pub(super) fn newest_under(
        &self,
        keyspace: &Keyspace,
        tag: &str,
        limit: usize,
        what: &str,
    ) -> Vec<(u64, fjall::Slice)> {
        let prefix = observation_prefix(tag);
        let mut out: Vec<(u64, fjall::Slice)> = keyspace
            .prefix(&prefix)
            .rev()
            .take(limit)
            .map(|guard| {
                let (key, value) = guard
                    .into_inner()
                    .unwrap_or_else(|e| fatal(&self.dir, &format!("reading {what}"), e));
                let n = key
                    .get(prefix.len()..prefix.len() + 8)
                    .and_then(|n| <[u8; 8]>::try_from(n).ok())
                    .map(u64::from_be_bytes)
                    .unwrap_or_else(|| {
                        fatal(&self.dir, &format!("a key of {what} is malformed"), tag)
                    });
                (n, value)
            })
            .collect();
        out.reverse();
        out
    }

    /// Whether the journal of `tag` holds exactly the indexes from its purge position
    /// (1 when none was purged) to `last` (read whole, a bounded hot journal:
    /// `inspect tag` only).
    pub(super) fn consecutive(&self, tag: &str, last: u64) -> bool {
        let prefix = observation_prefix(tag);
        // Below this, entries were purged by rule (`purge.rs`), not lost.
        let mut expected = self.held_from(tag);
        for guard in self.source_journal.prefix(&prefix) {
            let key = guard
                .key()
                .unwrap_or_else(|e| fatal(&self.dir, "reading the source journal", e));
            let n = key
                .get(prefix.len()..)
                .and_then(|n| <[u8; 8]>::try_from(n).ok())
                .map(u64::from_be_bytes);
            if n != Some(expected) {
                return false;
            }
            expected += 1;
        }
        expected == last + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(quality: Quality) -> Entry {
        Entry::Reading(Reading {
            raw: Raw::Registers(vec![215]),
            quality,
            device_time_ms: Some(7),
            received_ms: 9,
        })
    }

    fn completion() -> Entry {
        Entry::Completion(Completion {
            pgn: 65260,
            source_address: 0,
            bytes: vec![1, 2, 3, 4, 5, 6, 7, 8, 9],
            packets: 2,
            device_time_ms: Some(5),
            received_ms: 6,
        })
    }

    #[test]
    fn a_completion_is_neither_good_nor_debt_and_is_not_outstanding() {
        let c = completion();
        assert_eq!(
            (c.good_value(), c.reason(), c.quality()),
            (None, None, "completion")
        );
        let mut summary = Summary::default();
        summary.count(1, &c);
        summary.count(2, &reading(Quality::Good { value: 1.0 }));
        summary.count(3, &c);
        assert_eq!((summary.good, summary.debt, summary.completions), (1, 0, 2));
        assert_eq!(summary.completions_since_good, 1);
        assert_eq!(
            summary.device_time_ms_max,
            Some(7),
            "the reading's, after the completion's 5"
        );
    }

    #[test]
    fn entries_read_back_as_written_and_simulated_ones_stay_eight_bytes() {
        let simulated = Entry::Simulated(21.5);
        assert_eq!(simulated.encode().len(), 8);
        let entries = [
            simulated,
            reading(Quality::Good { value: 21.5 }),
            reading(Quality::Debt {
                reason: "exception: illegal data address".into(),
            }),
            reading(Quality::Refused {
                reason: "datatype String is not numeric".into(),
            }),
        ];
        for entry in entries {
            assert_eq!(Entry::decode(&entry.encode()), Some(entry.clone()));
        }
        let completion = completion();
        assert_eq!(completion.encode()[0], COMPLETION_ENTRY);
        assert_eq!(Entry::decode(&completion.encode()), Some(completion));
        assert_eq!(
            Entry::decode(b"\x02{}"),
            None,
            "a completion without its fields"
        );
        assert_eq!(Entry::decode(b"\x03{}"), None, "an unknown version");
        assert_eq!(Entry::decode(b""), None);
    }

    #[test]
    fn only_good_finite_entries_have_a_value_to_project() {
        assert_eq!(
            reading(Quality::Good { value: 3.0 }).good_value(),
            Some(3.0)
        );
        assert_eq!(
            reading(Quality::Good { value: f64::NAN }).good_value(),
            None,
            "a non-finite good value is never projected"
        );
        let debt = reading(Quality::Debt {
            reason: "timeout".into(),
        });
        assert_eq!(debt.good_value(), None);
        assert_eq!(debt.reason(), Some("timeout"));
        assert_eq!(Entry::Simulated(1.0).reason(), None);
    }

    #[test]
    fn a_summary_counts_by_quality_and_keeps_the_last_good_entry() {
        let mut summary = Summary::default();
        summary.count(1, &reading(Quality::Good { value: 1.0 }));
        summary.count(
            2,
            &reading(Quality::Debt {
                reason: "timeout".into(),
            }),
        );
        summary.count(
            3,
            &reading(Quality::Refused {
                reason: "no".into(),
            }),
        );
        summary.count(4, &Entry::Simulated(4.0));
        assert_eq!(
            summary,
            Summary {
                good: 2,
                debt: 1,
                refused: 1,
                last_good: Some((4, 4.0)),
                device_time_ms_max: Some(7),
                ..Summary::default()
            }
        );
    }
}
