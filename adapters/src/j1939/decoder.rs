//! One tag's decoder: frames in capture order → the tag's events (a completion before
//! the reading decoded from it; debt for n/a, error and incomplete multi-packet
//! messages). Pure: no IO, no clock beyond the times it is given.

use grid_spec::j1939::{Spn, find};

use super::frame::Id;
use super::transport::{Outcome, Reassembly};
use super::value;
use crate::{Completion, Event, Quality, Raw, Reading};

/// What one tag reads: one SPN of one PGN, from one source address or any.
#[derive(Debug)]
pub struct Decoder {
    row: &'static Spn,
    source_address: Option<u8>,
    reassembly: Reassembly,
    last_us: u64,
}

impl Decoder {
    /// `None` when Grid does not decode `spn` in `pgn` (the parser refuses such tags).
    pub fn new(pgn: u32, spn: u32, source_address: Option<u8>) -> Option<Decoder> {
        Some(Decoder {
            row: find(pgn, spn)?,
            source_address,
            reassembly: Reassembly::default(),
            last_us: 0,
        })
    }

    /// Takes one CAN frame captured at `t_us` (Unix µs): `raw_id` with `extended`
    /// (J1939 uses 29-bit identifiers only; others are not J1939 and are skipped).
    /// Pushes what it means for the tag to `out`, stamped `received_ms`.
    pub fn frame(
        &mut self,
        t_us: u64,
        raw_id: u32,
        extended: bool,
        data: &[u8],
        received_ms: u64,
        out: &mut Vec<Event>,
    ) {
        if !extended {
            return;
        }
        self.last_us = self.last_us.max(t_us);
        let id = Id::from_raw(raw_id);
        let mut outcomes = Vec::new();
        self.reassembly.frame(&id, data, t_us, &mut outcomes);
        for outcome in outcomes {
            self.outcome(outcome, received_ms, out);
        }
        if id.pgn == self.row.pgn && self.reads_source(id.source_address) {
            out.push(self.reading(data, t_us, received_ms));
        }
    }

    /// The capture ended: an open multi-packet message of the tag is debt.
    pub fn finish(&mut self, received_ms: u64, out: &mut Vec<Event>) {
        let mut outcomes = Vec::new();
        self.reassembly.finish(self.last_us, &mut outcomes);
        for outcome in outcomes {
            self.outcome(outcome, received_ms, out);
        }
    }

    /// Expires waiting multi-packet messages at `t_us` without a frame (a quiet bus).
    pub fn tick(&mut self, t_us: u64, received_ms: u64, out: &mut Vec<Event>) {
        let mut outcomes = Vec::new();
        // A frame that is no transport frame only expires.
        let id = Id::from_raw(0);
        self.reassembly.frame(&id, &[], t_us, &mut outcomes);
        for outcome in outcomes {
            self.outcome(outcome, received_ms, out);
        }
    }

    fn reads_source(&self, source_address: u8) -> bool {
        self.source_address.is_none_or(|sa| sa == source_address)
    }

    fn reading(&self, data: &[u8], t_us: u64, received_ms: u64) -> Event {
        let (raw, quality) = value::decode(self.row, data);
        Event::Reading(Reading {
            raw,
            quality,
            device_time_ms: Some(t_us / 1_000),
            received_ms,
        })
    }

    fn outcome(&self, outcome: Outcome, received_ms: u64, out: &mut Vec<Event>) {
        match outcome {
            Outcome::Complete {
                pgn,
                source_address,
                bytes,
                packets,
                t_us,
            } if pgn == self.row.pgn && self.reads_source(source_address) => {
                let reading = self.reading(&bytes, t_us, received_ms);
                out.push(Event::Completion(Completion {
                    pgn,
                    source_address,
                    bytes,
                    packets,
                    device_time_ms: Some(t_us / 1_000),
                    received_ms,
                }));
                out.push(reading);
            }
            Outcome::Incomplete {
                pgn,
                source_address,
                why,
                t_us,
            } if pgn == self.row.pgn && self.reads_source(source_address) => {
                out.push(Event::Reading(Reading {
                    raw: Raw::None,
                    quality: Quality::Debt {
                        reason: format!("multi-packet message incomplete: {why}"),
                    },
                    device_time_ms: Some(t_us / 1_000),
                    received_ms,
                }));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::j1939::transport::bam_frames;

    #[test]
    fn only_the_tags_pgn_and_source_are_read_and_a_completion_precedes_its_reading() {
        let mut decoder = Decoder::new(65251, 188, Some(0)).unwrap();
        let mut out = Vec::new();
        // EEC1 (another PGN) and EC1 from SA 1 (another source): nothing.
        decoder.frame(1_000, 0x0CF0_0400, true, &[0xFF; 8], 5, &mut out);
        let mut ec1 = vec![0xFF; 39];
        ec1[..2].copy_from_slice(&[0x00, 0x19]);
        for (i, (raw, data)) in bam_frames(65251, 1, &ec1).into_iter().enumerate() {
            decoder.frame(2_000 + i as u64 * 50_000, raw, true, &data, 5, &mut out);
        }
        assert!(out.is_empty(), "{out:?}");
        for (i, (raw, data)) in bam_frames(65251, 0, &ec1).into_iter().enumerate() {
            decoder.frame(1_000_000 + i as u64 * 50_000, raw, true, &data, 5, &mut out);
        }
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(
            matches!(&out[0], Event::Completion(c) if c.bytes == ec1 && c.packets == 6 && c.device_time_ms == Some(1_300))
        );
        assert!(
            matches!(&out[1], Event::Reading(r) if r.quality == Quality::Good { value: 800.0 } && r.device_time_ms == Some(1_300))
        );
        // An 11-bit frame is not J1939.
        out.clear();
        decoder.frame(3_000_000, 0x0400, false, &[0; 8], 5, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn an_open_message_of_the_tag_is_debt_at_the_end_or_after_a_quiet_gap() {
        let mut decoder = Decoder::new(65251, 188, None).unwrap();
        let mut out = Vec::new();
        let frames = bam_frames(65251, 3, &[0; 39]);
        for (raw, data) in &frames[..3] {
            decoder.frame(1_000_000, *raw, true, data, 5, &mut out);
        }
        decoder.tick(1_500_000, 5, &mut out);
        assert!(out.is_empty());
        decoder.tick(1_800_000, 5, &mut out);
        assert!(
            matches!(&out[..], [Event::Reading(Reading { quality: Quality::Debt { reason }, .. })] if reason == "multi-packet message incomplete: packet 3 of 6 did not arrive within 750 ms"),
            "{out:?}"
        );
        out.clear();
        for (raw, data) in &frames[..2] {
            decoder.frame(2_000_000, *raw, true, data, 5, &mut out);
        }
        decoder.finish(5, &mut out);
        assert!(
            matches!(&out[..], [Event::Reading(Reading { quality: Quality::Debt { reason }, device_time_ms: Some(2_000), .. })] if reason == "multi-packet message incomplete: the capture ended after packet 1 of 6"),
            "{out:?}"
        );
    }
}
