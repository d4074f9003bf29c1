//! Reading the archive back (`gridctl storage verify`, docs/storage.md): every segment
//! the store records as held, checked whole, and every segment the archive holds that
//! the store does not record, named.

use serde::{Deserialize, Serialize};

use super::{Shelf, decode_segment};
use crate::store::archive;
use crate::store::high_water::Verifier;

/// An archived segment that does not verify, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentProblem {
    pub segment: String,
    pub problem: String,
}

/// What [`Shelf::verify`] found (`gridctl storage verify`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    /// Where the segments live (`DIR/archive`).
    pub store: String,
    /// Segments the store records as held, each read back whole.
    pub segments: u64,
    /// Of those, the ones that verified.
    pub verified: u64,
    /// Answers and bytes in the segments that verified.
    pub answers: u64,
    pub bytes: u64,
    /// Segments released past `archive-days` (their blobs deleted; not read).
    pub released: u64,
    /// With the index in a table (`dynamodb://TABLE`): the records of the answers in
    /// the segments that verified, each read back and found pointing at its entry.
    #[serde(default)]
    pub index_records: u64,
    /// Every segment that does not verify, missing, or unknown to the store (and each
    /// index record that is missing, changed or not this installation's).
    pub problems: Vec<SegmentProblem>,
}

impl Shelf {
    /// Reads back every segment the store records as held and checks it whole — its
    /// size against the store's record, the sequence number its header carries
    /// against its name, its checksum, its signature by `host` (any key generation
    /// `check` accepts) and its count of answers — and names every segment the archive
    /// holds that the store has no record of. Changes nothing; holds the shelf (its
    /// lock, taken by the caller) while it reads.
    pub fn verify(&self, host: &str, check: Verifier) -> Verification {
        let mut out = Verification {
            store: self.place.clone(),
            ..Verification::default()
        };
        let mut problems = Vec::new();
        let mut recorded = std::collections::BTreeSet::new();
        for guard in self.segments.iter() {
            let (key, value) = match guard.into_inner() {
                Ok(kv) => kv,
                Err(e) => {
                    problems.push((
                        "archive-segments".to_owned(),
                        format!("the store's segment records cannot be read: {e}"),
                    ));
                    break;
                }
            };
            let Some((seq, record)) = decode_segment(&key, &value) else {
                problems.push((
                    "archive-segments".to_owned(),
                    "a segment record does not decode".to_owned(),
                ));
                continue;
            };
            recorded.insert(seq);
            if record.expired {
                out.released += 1;
                continue;
            }
            out.segments += 1;
            let name = archive::segment_name(seq);
            let problem = match self.blobs.get(&name) {
                Ok(None) => Some(format!(
                    "missing: the store records it ({} bytes, {} answers)",
                    record.bytes, record.entries
                )),
                Err(e) => Some(format!("it cannot be read: {e}")),
                Ok(Some(bytes)) if bytes.len() as u64 != record.bytes => Some(format!(
                    "it holds {} bytes, the store recorded {} (changed, cut or put back from elsewhere)",
                    bytes.len(),
                    record.bytes
                )),
                Ok(Some(bytes)) => match archive::verify(&name, host, seq, &bytes, check) {
                    Err(e) => Some(e.to_string()),
                    Ok(v) if v.entries != record.entries => Some(format!(
                        "it holds {} answers, the store recorded {}",
                        v.entries, record.entries
                    )),
                    Ok(v) => {
                        out.verified += 1;
                        out.answers += u64::from(v.entries);
                        out.bytes += record.bytes;
                        self.verify_records(seq, &bytes, &mut out, &mut problems);
                        None
                    }
                },
            };
            if let Some(problem) = problem {
                problems.push((name, problem));
            }
        }
        match self.blobs.list(archive::SEGMENTS_PREFIX) {
            Err(e) => problems.push((
                archive::SEGMENTS_PREFIX.to_owned(),
                format!("it cannot be listed: {e}"),
            )),
            Ok(listed) => {
                for (name, _) in listed {
                    match archive::segment_seq(&name) {
                        Some(seq) if recorded.contains(&seq) => {}
                        Some(_) => problems.push((
                            name,
                            "the store has no record of it (another installation's, or put there)"
                                .to_owned(),
                        )),
                        None => problems.push((name, "a file the archive never writes".to_owned())),
                    }
                }
            }
        }
        out.problems = problems
            .into_iter()
            .map(|(segment, problem)| SegmentProblem { segment, problem })
            .collect();
        out
    }
}

impl Shelf {
    /// With the index in a table: every answer of segment `seq` (its whole `bytes`,
    /// verified) whose index entry is not in this store read back from the table and
    /// compared with where the segment holds it; each that is not, named.
    fn verify_records(
        &self,
        seq: u64,
        bytes: &[u8],
        out: &mut Verification,
        problems: &mut Vec<(String, String)>,
    ) {
        let Some(remote) = &self.remote_index else {
            return;
        };
        let name = archive::segment_name(seq);
        let Some(located) = archive::located(seq, bytes) else {
            problems.push((name, "its entries do not frame".to_owned()));
            return;
        };
        for (key, at) in located {
            let local = self
                .index
                .get(&key)
                .unwrap_or_else(|e| super::fatal(&self.dir, "reading the archive index", e));
            if local.is_some() {
                continue; // waiting to be put there: found here
            }
            let quoted = grid_spec::diagnostic::quoted(&key);
            let problem = match remote.get(&key, &quoted) {
                Ok(Some(found)) if found == at => {
                    out.index_records += 1;
                    continue;
                }
                Ok(Some(_)) => {
                    format!("the record of `{quoted}` points elsewhere than its entry in {name}")
                }
                Ok(None) => format!("the record of `{quoted}` (in {name}) is missing"),
                Err(e) => e,
            };
            problems.push((
                format!("{}/{}", remote.place(), remote.record_key(&quoted)),
                problem,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{entry, installation, sign};
    use super::*;
    use ed25519_dalek::{SigningKey, Verifier as _};

    /// Every problem named: a flipped byte (checksum), a segment copied into another's
    /// place (sequence), one missing, one unknown; and asked as another host, none
    /// verifies (the signature covers the host's name).
    #[test]
    fn every_segment_is_read_back_and_every_problem_named() {
        let (dir, durable, meta, _) = installation("verify");
        let shelf = super::super::tests::shared(Shelf::open(&dir, &durable, &meta).unwrap());
        for seq in 1..=4u64 {
            let entries = [entry(&format!("s{seq}"), seq * 10)];
            super::super::shelve(&shelf, &durable, "solo", &entries, &sign(), || {}, |_| {})
                .unwrap();
        }
        let public = SigningKey::from_bytes(&[9u8; 32]).verifying_key();
        let check = move |generation: u32, message: &[u8], signature: &[u8; 64]| {
            generation == 1
                && public
                    .verify(message, &ed25519_dalek::Signature::from_bytes(signature))
                    .is_ok()
        };
        let found = shelf.read().unwrap().verify("solo", &check);
        assert_eq!((found.segments, found.verified, found.answers), (4, 4, 4));
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        // Another host's name: no segment's signature is this host's.
        assert_eq!(shelf.read().unwrap().verify("other", &check).verified, 0);
        let segments = dir.join("archive/segments");
        let path = |seq: u64| segments.join(format!("{seq:020}.seg"));
        let mut flipped = std::fs::read(path(1)).unwrap();
        flipped[30] ^= 0x01;
        std::fs::write(path(1), flipped).unwrap();
        // Segment 3's bytes in segment 2's place (same size: one entry each).
        std::fs::copy(path(3), path(2)).unwrap();
        std::fs::remove_file(path(4)).unwrap();
        std::fs::copy(path(3), path(9)).unwrap();
        let found = shelf.read().unwrap().verify("solo", &check);
        assert_eq!((found.segments, found.verified), (4, 1));
        let named: Vec<(&str, &str)> = found
            .problems
            .iter()
            .map(|p| (p.segment.as_str(), p.problem.as_str()))
            .collect();
        assert_eq!(named.len(), 4, "{named:?}");
        assert!(
            named[0].0.ends_with("01.seg") && named[0].1.contains("checksum"),
            "{named:?}"
        );
        assert!(
            named[1].0.ends_with("02.seg") && named[1].1.contains("says it is segment 3"),
            "{named:?}"
        );
        assert!(
            named[2].0.ends_with("04.seg") && named[2].1.starts_with("missing"),
            "{named:?}"
        );
        assert!(
            named[3].0.ends_with("09.seg") && named[3].1.contains("no record"),
            "{named:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
