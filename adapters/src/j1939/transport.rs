//! Passive TP.BAM reassembly (J1939-21 §5.10): a broadcast announce message (TP.CM,
//! control byte 32) names the PGN, its size and packet count; data transfer packets
//! (TP.DT) follow from the same source address, numbered 1 to N. Nothing is ever sent:
//! a BAM has no handshake, and RTS/CTS sessions (addressed to one node) are not
//! followed.
//!
//! A message is complete when packet N arrives in order; it is incomplete when a
//! packet is out of order, when the next packet is more than
//! `J1939_BAM_PACKET_GAP_MS_MAX` after the previous one (J1939-21's T1), when the same
//! source announces another message first, or when the capture ends. Time is the
//! capture's own (microseconds), so a replayed log reassembles exactly as it was
//! received.

use std::collections::BTreeMap;

use crate::limits::{J1939_BAM_BYTES_MAX, J1939_BAM_BYTES_MIN, J1939_BAM_PACKET_GAP_MS_MAX};

use super::frame::{Id, PGN_TP_CM, PGN_TP_DT};

/// TP.CM's control byte of a broadcast announce message.
const CONTROL_BAM: u8 = 32;

/// What one frame (or the end of the capture) finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Complete {
        pgn: u32,
        source_address: u8,
        bytes: Vec<u8>,
        packets: u32,
        /// The capture time of the last packet, µs.
        t_us: u64,
    },
    Incomplete {
        pgn: u32,
        source_address: u8,
        /// Why, after "multi-packet message incomplete: ".
        why: String,
        t_us: u64,
    },
}

#[derive(Debug)]
struct Session {
    pgn: u32,
    size: usize,
    packets: u8,
    /// The sequence number due next (1-based).
    next: u8,
    bytes: Vec<u8>,
    last_us: u64,
}

/// The open broadcast sessions, one per source address.
#[derive(Debug, Default)]
pub struct Reassembly {
    sessions: BTreeMap<u8, Session>,
}

impl Reassembly {
    /// Takes one frame at capture time `t_us`: a TP.CM BAM opens a session, a TP.DT
    /// continues one; any frame first expires the sessions that waited too long.
    /// Whatever completed or broke is pushed to `out`.
    pub fn frame(&mut self, id: &Id, data: &[u8], t_us: u64, out: &mut Vec<Outcome>) {
        self.expire(t_us, out);
        if !id.is_global() {
            return;
        }
        match id.pgn {
            PGN_TP_CM => self.announce(id.source_address, data, t_us, out),
            PGN_TP_DT => self.packet(id.source_address, data, t_us, out),
            _ => {}
        }
    }

    /// The capture ended: every open session is incomplete.
    pub fn finish(&mut self, t_us: u64, out: &mut Vec<Outcome>) {
        for (source_address, session) in std::mem::take(&mut self.sessions) {
            out.push(incomplete(
                source_address,
                &session,
                t_us,
                format!(
                    "the capture ended after packet {} of {}",
                    session.next - 1,
                    session.packets
                ),
            ));
        }
    }

    /// Whether a session from `source_address` is open (for tests and the bench).
    pub fn is_open(&self, source_address: u8) -> bool {
        self.sessions.contains_key(&source_address)
    }

    fn expire(&mut self, t_us: u64, out: &mut Vec<Outcome>) {
        let gap_us = J1939_BAM_PACKET_GAP_MS_MAX * 1_000;
        let late: Vec<u8> = self
            .sessions
            .iter()
            .filter(|(_, s)| t_us.saturating_sub(s.last_us) > gap_us)
            .map(|(sa, _)| *sa)
            .collect();
        for source_address in late {
            if let Some(session) = self.sessions.remove(&source_address) {
                out.push(incomplete(
                    source_address,
                    &session,
                    t_us,
                    format!(
                        "packet {} of {} did not arrive within {J1939_BAM_PACKET_GAP_MS_MAX} ms",
                        session.next, session.packets
                    ),
                ));
            }
        }
    }

    fn announce(&mut self, source_address: u8, data: &[u8], t_us: u64, out: &mut Vec<Outcome>) {
        let [
            CONTROL_BAM,
            size_lo,
            size_hi,
            packets,
            _,
            pgn_lo,
            pgn_mid,
            pgn_hi,
            ..,
        ] = *data
        else {
            return;
        };
        let size = usize::from(u16::from_le_bytes([size_lo, size_hi]));
        let pgn = u32::from_le_bytes([pgn_lo, pgn_mid, pgn_hi, 0]) & 0x3FFFF;
        if let Some(previous) = self.sessions.remove(&source_address) {
            out.push(incomplete(
                source_address,
                &previous,
                t_us,
                format!(
                    "the source announced another message after packet {} of {}",
                    previous.next - 1,
                    previous.packets
                ),
            ));
        }
        let session = Session {
            pgn,
            size,
            packets,
            next: 1,
            bytes: Vec::with_capacity(size.min(J1939_BAM_BYTES_MAX)),
            last_us: t_us,
        };
        if !(J1939_BAM_BYTES_MIN..=J1939_BAM_BYTES_MAX).contains(&size)
            || usize::from(packets) != size.div_ceil(7)
        {
            out.push(incomplete(
                source_address,
                &session,
                t_us,
                format!("the announcement of {size} bytes in {packets} packets is malformed"),
            ));
            return;
        }
        self.sessions.insert(source_address, session);
    }

    fn packet(&mut self, source_address: u8, data: &[u8], t_us: u64, out: &mut Vec<Outcome>) {
        let Some(session) = self.sessions.get_mut(&source_address) else {
            return;
        };
        let Some((&sequence, payload)) = data.split_first() else {
            return;
        };
        if sequence != session.next || payload.len() < 7.min(session.size - session.bytes.len()) {
            let why = if sequence != session.next {
                format!(
                    "packet {sequence} arrived when packet {} of {} was due",
                    session.next, session.packets
                )
            } else {
                format!("packet {sequence} of {} is short", session.packets)
            };
            if let Some(session) = self.sessions.remove(&source_address) {
                out.push(incomplete(source_address, &session, t_us, why));
            }
            return;
        }
        let take = payload.len().min(session.size - session.bytes.len());
        session.bytes.extend_from_slice(&payload[..take]);
        session.last_us = t_us;
        if session.next < session.packets {
            session.next += 1;
            return;
        }
        if let Some(session) = self.sessions.remove(&source_address) {
            out.push(Outcome::Complete {
                pgn: session.pgn,
                source_address,
                bytes: session.bytes,
                packets: u32::from(session.packets),
                t_us,
            });
        }
    }
}

fn incomplete(source_address: u8, session: &Session, t_us: u64, why: String) -> Outcome {
    Outcome::Incomplete {
        pgn: session.pgn,
        source_address,
        why,
        t_us,
    }
}

/// The frames a BAM of `bytes` for `pgn` from `source_address` is sent as (TP.CM then
/// TP.DT 1..=N, the last padded with 0xFF): identifiers and data. For tests, fixtures
/// and the bench.
pub fn bam_frames(pgn: u32, source_address: u8, bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let packets = bytes.len().div_ceil(7) as u8;
    let size = (bytes.len() as u16).to_le_bytes();
    let pgn_bytes = pgn.to_le_bytes();
    let id = |pgn| {
        Id {
            priority: 7,
            pgn,
            destination: Some(super::frame::GLOBAL),
            source_address,
        }
        .to_raw()
    };
    let mut frames = vec![(
        id(PGN_TP_CM),
        vec![
            CONTROL_BAM,
            size[0],
            size[1],
            packets,
            0xFF,
            pgn_bytes[0],
            pgn_bytes[1],
            pgn_bytes[2],
        ],
    )];
    for (i, chunk) in bytes.chunks(7).enumerate() {
        let mut data = vec![i as u8 + 1];
        data.extend_from_slice(chunk);
        data.resize(8, 0xFF);
        frames.push((id(PGN_TP_DT), data));
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(frames: &[(u32, Vec<u8>, u64)]) -> (Vec<Outcome>, Reassembly) {
        let mut reassembly = Reassembly::default();
        let mut out = Vec::new();
        for (raw, data, t_us) in frames {
            reassembly.frame(&Id::from_raw(*raw), data, *t_us, &mut out);
        }
        (out, reassembly)
    }

    fn timed(frames: Vec<(u32, Vec<u8>)>, step_us: u64) -> Vec<(u32, Vec<u8>, u64)> {
        frames
            .into_iter()
            .enumerate()
            .map(|(i, (raw, data))| (raw, data, 1_000_000 + i as u64 * step_us))
            .collect()
    }

    #[test]
    fn a_bam_in_order_completes_with_its_bytes() {
        let message: Vec<u8> = (0..39).collect();
        let frames = timed(bam_frames(65251, 0x00, &message), 50_000);
        assert_eq!(frames.len(), 1 + 6);
        let (out, reassembly) = run(&frames);
        assert_eq!(
            out,
            vec![Outcome::Complete {
                pgn: 65251,
                source_address: 0,
                bytes: message,
                packets: 6,
                t_us: 1_300_000,
            }]
        );
        assert!(!reassembly.is_open(0));
    }

    #[test]
    fn sessions_of_two_sources_interleave() {
        let a = timed(bam_frames(65251, 0x00, &[1; 20]), 10_000);
        let b = timed(bam_frames(65251, 0x01, &[2; 10]), 10_000);
        let mut frames = Vec::new();
        for i in 0..a.len().max(b.len()) {
            frames.extend(a.get(i).cloned());
            frames.extend(b.get(i).cloned());
        }
        let (out, _) = run(&frames);
        let complete: Vec<u8> = out
            .iter()
            .map(|o| match o {
                Outcome::Complete { source_address, .. } => *source_address,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(complete, vec![1, 0]);
    }

    #[test]
    fn a_missing_packet_a_late_packet_and_a_new_announcement_break_the_message() {
        let mut frames = timed(bam_frames(65251, 0x00, &[7; 20]), 50_000);
        frames.remove(2); // packet 2 lost
        let (out, _) = run(&frames);
        assert!(
            matches!(&out[..], [Outcome::Incomplete { why, .. }] if why == "packet 3 arrived when packet 2 of 3 was due"),
            "{out:?}"
        );

        let mut frames = timed(bam_frames(65251, 0x00, &[7; 20]), 50_000);
        frames[3].2 += 800_000; // packet 3 came 850 ms after packet 2
        let (out, _) = run(&frames[..]);
        assert!(
            matches!(&out[..], [Outcome::Incomplete { why, t_us: 1_950_000, .. }] if why == "packet 3 of 3 did not arrive within 750 ms"),
            "{out:?}"
        );

        let mut frames = timed(bam_frames(65251, 0x00, &[7; 20]), 50_000);
        frames.truncate(2);
        frames.extend(
            timed(bam_frames(65251, 0x00, &[8; 9]), 50_000)
                .into_iter()
                .map(|(r, d, t)| (r, d, t + 200_000)),
        );
        let (out, _) = run(&frames);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(
            matches!(&out[0], Outcome::Incomplete { why, .. } if why == "the source announced another message after packet 1 of 3")
        );
        assert!(matches!(&out[1], Outcome::Complete { bytes, .. } if bytes == &vec![8; 9]));
    }

    #[test]
    fn the_end_of_the_capture_breaks_an_open_message() {
        let mut frames = timed(bam_frames(65251, 0x05, &[7; 20]), 50_000);
        frames.truncate(3);
        let (mut out, mut reassembly) = run(&frames);
        assert!(out.is_empty());
        reassembly.finish(2_000_000, &mut out);
        assert!(
            matches!(&out[..], [Outcome::Incomplete { source_address: 5, why, .. }] if why == "the capture ended after packet 2 of 3")
        );
    }

    #[test]
    fn a_malformed_announcement_and_packets_to_one_node_are_not_reassembled() {
        // 20 bytes cannot be 2 packets.
        let cm = (
            0x1CEC_FF00,
            vec![32, 20, 0, 2, 0xFF, 0xE3, 0xFE, 0x00],
            1_000,
        );
        let (out, reassembly) = run(&[cm]);
        assert!(matches!(&out[..], [Outcome::Incomplete { why, .. }] if why.contains("malformed")));
        assert!(!reassembly.is_open(0));
        // An RTS/CTS session's packets go to one node: not followed.
        let dt_to_node = (0x1CEB_0300, vec![1, 1, 2, 3, 4, 5, 6, 7], 2_000);
        let (out, _) = run(&[dt_to_node]);
        assert!(out.is_empty());
    }
}
