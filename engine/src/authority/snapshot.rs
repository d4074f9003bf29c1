//! A snapshot file of the authority's state machine: `grid-authority-snapshot/2`, one
//! JSON record a line, so it is written from the database as it is read and read back
//! into a store as it is parsed — no voter holds a whole snapshot in memory to build
//! or send one:
//!
//! ```text
//! {"format":"grid-authority-snapshot/2","meta":…,"last_applied":…,"last_membership":…}
//! {"claim":{…}}                              every claim, held or released
//! {"answer":["op",{"seq":…,"command":…,"answer":…}]}   retained answers, oldest first
//! {"forgotten":[d,d,…]}                      forgotten ids' digests, up to 4,096 a line
//! {"end":{"claims":N,"answers":N,"forgotten":N,"sha256":"…"}}
//! ```
//!
//! The last line counts what came before it and carries the SHA-256 of every byte
//! before it: a file cut anywhere (no `end`, counts that differ) or changed anywhere
//! (another digest) is refused whole, never installed as far as it goes. A file of the
//! first format (one JSON object, `{"meta":…,"state":…}`, written before this one) is
//! still read, whole.
//!
//! [`SnapshotData`] is the openraft snapshot handle: the file, open — so a newer
//! generation deleting its name does not take it from a send in progress.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::answers::StoredAnswer;
use super::claims::{Answer, Claim, Command};
use super::types::{LogId, SnapshotMeta, StoredMembership};

/// The current format's name, on its first line.
pub const SNAPSHOT_FORMAT: &str = "grid-authority-snapshot/2";
/// Digests on one `forgotten` line.
const FORGOTTEN_PER_LINE: usize = 4_096;

/// A snapshot's bytes: its file (open) and where it is.
#[derive(Debug, Clone)]
pub struct SnapshotData {
    file: Arc<File>,
    pub path: PathBuf,
}

impl SnapshotData {
    /// Opens the snapshot file at `path`.
    pub fn open(path: &Path) -> std::io::Result<SnapshotData> {
        Ok(SnapshotData {
            file: Arc::new(File::open(path)?),
            path: path.to_owned(),
        })
    }

    /// A reader from the file's start, with an offset of its own (clones of one
    /// handle read side by side).
    pub fn reader(&self) -> std::io::Result<BufReader<At<'_>>> {
        Ok(BufReader::with_capacity(
            1 << 16,
            At {
                file: &self.file,
                offset: 0,
            },
        ))
    }

    /// The whole file (a send to a voter or a bucket carries it in one body).
    pub fn bytes(&self) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.reader()?.read_to_end(&mut bytes)?;
        Ok(bytes)
    }
}

/// Reads a file by position (`pread`), not through its shared offset.
pub struct At<'a> {
    file: &'a File,
    offset: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(self.file, buf, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// The first line.
#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    meta: SnapshotMeta,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
}

/// What a file says before its records: the snapshot's meta and the state's place.
#[derive(Debug, Clone)]
pub struct Heading {
    pub meta: SnapshotMeta,
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership,
}

/// Every line after the first.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Line {
    Claim(Claim),
    Answer((String, StoredAnswer)),
    Forgotten(Vec<u64>),
    End(End),
}

/// What a file holds: records of each kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub claims: u64,
    pub answers: u64,
    pub forgotten: u64,
}

/// The last line: the counts, and the SHA-256 (hex) of every byte before this line.
#[derive(Serialize, Deserialize)]
struct End {
    #[serde(flatten)]
    counts: Counts,
    sha256: String,
}

/// A snapshot file being written (to a temporary name; the caller renames it).
pub struct Writer {
    out: BufWriter<File>,
    counts: Counts,
    digests: Vec<u64>,
    hasher: Sha256,
    /// One line being encoded.
    line: Vec<u8>,
}

impl Writer {
    /// Creates `path` (`0600`, new) and writes its first line.
    pub fn create(path: &Path, heading: &Heading) -> std::io::Result<Writer> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let mut writer = Writer {
            out: BufWriter::with_capacity(1 << 16, file),
            counts: Counts::default(),
            digests: Vec::with_capacity(FORGOTTEN_PER_LINE),
            hasher: Sha256::new(),
            line: Vec::new(),
        };
        writer.line(&Header {
            format: SNAPSHOT_FORMAT.to_owned(),
            meta: heading.meta.clone(),
            last_applied: heading.last_applied,
            last_membership: heading.last_membership.clone(),
        })?;
        Ok(writer)
    }

    /// Writes the line being encoded (with its newline), counted in the digest.
    fn put_line(&mut self) -> std::io::Result<()> {
        self.line.push(b'\n');
        self.hasher.update(&self.line);
        self.out.write_all(&self.line)?;
        self.line.clear();
        Ok(())
    }

    fn line(&mut self, value: &impl Serialize) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.line, value)?;
        self.put_line()
    }

    pub fn claim(&mut self, claim: &Claim) -> std::io::Result<()> {
        self.counts.claims += 1;
        self.line(&Line::Claim(claim.clone()))
    }

    /// A claim as the database stores it (its JSON, copied as it is).
    pub fn claim_json(&mut self, json: &[u8]) -> std::io::Result<()> {
        self.counts.claims += 1;
        self.line.extend_from_slice(b"{\"claim\":");
        self.line.extend_from_slice(json);
        self.line.push(b'}');
        self.put_line()
    }

    pub fn answer(&mut self, op: &str, command: &Command, answer: &Answer) -> std::io::Result<()> {
        let stored = StoredAnswer {
            seq: self.counts.answers,
            command: command.clone(),
            answer: answer.clone(),
        };
        self.counts.answers += 1;
        self.line(&Line::Answer((op.to_owned(), stored)))
    }

    /// A retained answer as the database stores it (a [`StoredAnswer`]'s JSON).
    pub fn answer_json(&mut self, op: &str, json: &[u8]) -> std::io::Result<()> {
        self.counts.answers += 1;
        self.line.extend_from_slice(b"{\"answer\":[");
        serde_json::to_writer(&mut self.line, op)?;
        self.line.push(b',');
        self.line.extend_from_slice(json);
        self.line.extend_from_slice(b"]}");
        self.put_line()
    }

    pub fn forgotten(&mut self, digest: u64) -> std::io::Result<()> {
        self.counts.forgotten += 1;
        self.digests.push(digest);
        if self.digests.len() == FORGOTTEN_PER_LINE {
            self.flush_digests()?;
        }
        Ok(())
    }

    fn flush_digests(&mut self) -> std::io::Result<()> {
        if self.digests.is_empty() {
            return Ok(());
        }
        let digests = std::mem::take(&mut self.digests);
        self.line(&Line::Forgotten(digests))
    }

    /// Writes the last line and fsyncs the file; what it holds.
    pub fn finish(mut self) -> std::io::Result<Counts> {
        self.flush_digests()?;
        let counts = self.counts;
        let sha256 = hex::encode(std::mem::take(&mut self.hasher).finalize());
        self.line(&Line::End(End { counts, sha256 }))?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(counts)
    }
}

/// Where a snapshot's records go as they are read.
pub trait Sink {
    fn claim(&mut self, claim: Claim) -> Result<(), String>;
    /// Retained answers come oldest first.
    fn answer(&mut self, op: String, command: Command, answer: Answer) -> Result<(), String>;
    fn forgotten(&mut self, digest: u64) -> Result<(), String>;
}

/// The first format: one JSON object.
#[derive(Deserialize)]
struct FirstFile {
    meta: SnapshotMeta,
    state: FirstState,
}

#[derive(Deserialize)]
struct FirstState {
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    claims: FirstClaims,
}

#[derive(Deserialize)]
struct FirstClaims {
    claims: std::collections::BTreeMap<String, Claim>,
    #[serde(flatten)]
    answers: super::answers::MemoryAnswers,
}

fn refused(line: usize, what: impl std::fmt::Display) -> String {
    format!("line {line}: {what}")
}

/// Reads only the first line's meta (a v2 file), or the whole file (the first format).
pub fn heading(data: &SnapshotData) -> Result<Heading, String> {
    read_from(data, None)
}

/// Reads a whole snapshot into `sink`; its heading. Refused, naming the line, when a
/// line does not decode, the file ends before its `end` line, the counts differ or
/// anything follows `end`.
pub fn read(data: &SnapshotData, sink: &mut dyn Sink) -> Result<Heading, String> {
    read_from(data, Some(sink))
}

fn read_from(data: &SnapshotData, sink: Option<&mut dyn Sink>) -> Result<Heading, String> {
    let mut reader = data.reader().map_err(|e| e.to_string())?;
    let mut first = Vec::new();
    reader
        .read_until(b'\n', &mut first)
        .map_err(|e| e.to_string())?;
    let header = match serde_json::from_slice::<Header>(&first) {
        Ok(header) => header,
        Err(e) if !first.ends_with(b"\n") => {
            // The first format: the whole file is one object.
            let file: FirstFile = serde_json::from_slice(&first).map_err(|e2| {
                refused(
                    1,
                    format!("neither `{SNAPSHOT_FORMAT}` ({e}) nor the first format ({e2})"),
                )
            })?;
            if let Some(sink) = sink {
                for claim in file.state.claims.claims.into_values() {
                    sink.claim(claim)?;
                }
                let answers = file.state.claims.answers;
                for (op, command, answer) in answers.oldest_first() {
                    sink.answer(op.clone(), command.clone(), answer.clone())?;
                }
                for digest in answers.forgotten() {
                    sink.forgotten(digest)?;
                }
            }
            return Ok(Heading {
                meta: file.meta,
                last_applied: file.state.last_applied,
                last_membership: file.state.last_membership,
            });
        }
        Err(e) => return Err(refused(1, e)),
    };
    if header.format != SNAPSHOT_FORMAT {
        return Err(refused(
            1,
            format!("format `{}`, not `{SNAPSHOT_FORMAT}`", header.format),
        ));
    }
    let heading = Heading {
        meta: header.meta,
        last_applied: header.last_applied,
        last_membership: header.last_membership,
    };
    let Some(sink) = sink else {
        return Ok(heading);
    };
    let mut counts = Counts::default();
    let mut hasher = Sha256::new();
    hasher.update(&first);
    let mut line = Vec::new();
    let mut n = 1;
    loop {
        line.clear();
        n += 1;
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| refused(n, e))?;
        if read == 0 || !line.ends_with(b"\n") {
            return Err(refused(
                n,
                "the file ends before its `end` line (cut short)",
            ));
        }
        let decoded = serde_json::from_slice::<Line>(&line).map_err(|e| refused(n, e))?;
        if !matches!(decoded, Line::End(_)) {
            hasher.update(&line);
        }
        match decoded {
            Line::Claim(claim) => {
                counts.claims += 1;
                sink.claim(claim).map_err(|e| refused(n, e))?;
            }
            Line::Answer((op, stored)) => {
                counts.answers += 1;
                sink.answer(op, stored.command, stored.answer)
                    .map_err(|e| refused(n, e))?;
            }
            Line::Forgotten(digests) => {
                counts.forgotten += digests.len() as u64;
                for digest in digests {
                    sink.forgotten(digest).map_err(|e| refused(n, e))?;
                }
            }
            Line::End(end) => {
                if end.counts != counts {
                    return Err(refused(
                        n,
                        format!(
                            "the file says it holds {:?}, it holds {counts:?}",
                            end.counts
                        ),
                    ));
                }
                let sha256 = hex::encode(std::mem::take(&mut hasher).finalize());
                if end.sha256 != sha256 {
                    return Err(refused(
                        n,
                        format!(
                            "the file's bytes have SHA-256 {sha256}, its last line says {} (changed)",
                            grid_spec::diagnostic::quoted(&end.sha256)
                        ),
                    ));
                }
                let mut rest = [0u8; 1];
                if reader.read(&mut rest).map_err(|e| refused(n, e))? != 0 {
                    return Err(refused(n + 1, "something follows the `end` line"));
                }
                return Ok(heading);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::answers::{Answers, MemoryAnswers};
    use crate::authority::claims::{ClaimState, Outcome};

    /// Every record read, in order.
    #[derive(Default, Debug, PartialEq)]
    struct Collected {
        claims: Vec<Claim>,
        answers: Vec<(String, Command, Answer)>,
        forgotten: Vec<u64>,
    }

    impl Sink for Collected {
        fn claim(&mut self, claim: Claim) -> Result<(), String> {
            self.claims.push(claim);
            Ok(())
        }
        fn answer(&mut self, op: String, command: Command, answer: Answer) -> Result<(), String> {
            self.answers.push((op, command, answer));
            Ok(())
        }
        fn forgotten(&mut self, digest: u64) -> Result<(), String> {
            self.forgotten.push(digest);
            Ok(())
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-snapshot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn records(claims: usize, answers: usize, forgotten: usize) -> Collected {
        let claim = |i: usize| Claim {
            name: format!("claim-\"{i}\"\n"),
            owner: format!("host-{i}"),
            epoch: i as u64 + 1,
            successor: i.is_multiple_of(2).then(|| "next".to_owned()),
            state: if i.is_multiple_of(3) {
                ClaimState::Released
            } else {
                ClaimState::Held
            },
        };
        let answer = |i: usize| {
            let op = format!("op-{i}");
            let command = Command::Acquire {
                claim: format!("claim-{i}"),
                caller: "a".to_owned(),
            };
            let answer = Answer {
                op: op.clone(),
                outcome: Outcome::Succeeded,
                claim: format!("claim-{i}"),
                owner: Some("a".to_owned()),
                epoch: i as u64,
                detail: "acquired".to_owned(),
            };
            (op, command, answer)
        };
        Collected {
            claims: (0..claims).map(claim).collect(),
            answers: (0..answers).map(answer).collect(),
            forgotten: (0..forgotten as u64)
                .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect(),
        }
    }

    fn heading() -> Heading {
        Heading {
            meta: SnapshotMeta {
                snapshot_id: "3-7".to_owned(),
                ..Default::default()
            },
            last_applied: None,
            last_membership: StoredMembership::default(),
        }
    }

    fn write(path: &Path, records: &Collected) -> Counts {
        let mut writer = Writer::create(path, &heading()).unwrap();
        for claim in &records.claims {
            writer.claim(claim).unwrap();
        }
        for (op, command, answer) in &records.answers {
            writer.answer(op, command, answer).unwrap();
        }
        for digest in &records.forgotten {
            writer.forgotten(*digest).unwrap();
        }
        writer.finish().unwrap()
    }

    #[test]
    fn a_snapshot_reads_back_what_was_written_a_line_at_a_time() {
        let dir = scratch("round-trip");
        let path = dir.join("s");
        // More digests than one line holds: three `forgotten` lines.
        let written = records(5, 7, 2 * FORGOTTEN_PER_LINE + 3);
        let counts = write(&path, &written);
        assert_eq!(
            counts,
            Counts {
                claims: 5,
                answers: 7,
                forgotten: 2 * FORGOTTEN_PER_LINE as u64 + 3
            }
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1 + 5 + 7 + 3 + 1);
        let data = SnapshotData::open(&path).unwrap();
        let mut read = Collected::default();
        let said = super::read(&data, &mut read).unwrap();
        assert_eq!(said.meta.snapshot_id, "3-7");
        assert_eq!(read, written);
        // Read twice from one handle, and the heading alone.
        let mut again = Collected::default();
        super::read(&data, &mut again).unwrap();
        assert_eq!(again, written);
        assert_eq!(super::heading(&data).unwrap().meta.snapshot_id, "3-7");
        // A stored claim or answer copied as its JSON reads the same.
        let copied = dir.join("copied");
        let mut writer = Writer::create(&copied, &heading()).unwrap();
        for claim in &written.claims {
            writer
                .claim_json(&serde_json::to_vec(claim).unwrap())
                .unwrap();
        }
        for (i, (op, command, answer)) in written.answers.iter().enumerate() {
            let stored = StoredAnswer {
                seq: 1_000 + i as u64,
                command: command.clone(),
                answer: answer.clone(),
            };
            writer
                .answer_json(op, &serde_json::to_vec(&stored).unwrap())
                .unwrap();
        }
        for digest in &written.forgotten {
            writer.forgotten(*digest).unwrap();
        }
        writer.finish().unwrap();
        let mut read = Collected::default();
        super::read(&SnapshotData::open(&copied).unwrap(), &mut read).unwrap();
        assert_eq!(read, written);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_cut_or_changed_snapshot_is_refused_whole() {
        let dir = scratch("damage");
        let path = dir.join("s");
        write(&path, &records(2, 2, 3));
        let whole = std::fs::read(&path).unwrap();
        let damaged = dir.join("damaged");
        let try_read = |bytes: &[u8]| {
            std::fs::write(&damaged, bytes).unwrap();
            super::read(
                &SnapshotData::open(&damaged).unwrap(),
                &mut Collected::default(),
            )
        };
        assert!(try_read(&whole).is_ok());
        // Cut at every length.
        for len in 0..whole.len() {
            let refused = try_read(&whole[..len]).expect_err("a cut file is refused");
            assert!(refused.starts_with("line "), "{len}: {refused}");
        }
        // Every byte changed, one at a time.
        for at in 0..whole.len() {
            let mut bytes = whole.clone();
            bytes[at] ^= 0x01;
            assert!(try_read(&bytes).is_err(), "a change at byte {at} was read");
        }
        // Anything after the last line.
        let mut longer = whole.clone();
        longer.extend_from_slice(b"{\"claim\":{}}\n");
        let refused = try_read(&longer).expect_err("refused");
        assert!(refused.contains("follows the `end` line"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_snapshot_of_the_first_format_is_still_read() {
        let dir = scratch("first-format");
        let written = records(3, 2, 4);
        let mut answers = MemoryAnswers::default();
        for (op, command, answer) in &written.answers {
            answers.retain(op, command, answer);
        }
        for digest in &written.forgotten {
            answers.insert_forgotten(*digest);
        }
        let mut claims = serde_json::Map::new();
        for claim in &written.claims {
            claims.insert(claim.name.clone(), serde_json::to_value(claim).unwrap());
        }
        let mut state_claims = serde_json::to_value(&answers).unwrap();
        state_claims["claims"] = serde_json::Value::Object(claims);
        let file = serde_json::json!({
            "meta": heading().meta,
            "state": {
                "last_applied": null,
                "last_membership": StoredMembership::default(),
                "claims": state_claims,
            }
        });
        let path = dir.join("old");
        std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();
        let data = SnapshotData::open(&path).unwrap();
        let mut read = Collected::default();
        assert_eq!(
            super::read(&data, &mut read).unwrap().meta.snapshot_id,
            "3-7"
        );
        let mut expected = written;
        // The first format kept claims by name and digests sorted.
        expected.claims.sort_by(|a, b| a.name.cmp(&b.name));
        expected.forgotten.sort();
        assert_eq!(read, expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
