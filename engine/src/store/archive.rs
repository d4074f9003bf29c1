//! The archive: answers older than a host's hot window, moved out of its store into
//! append-only segments, each compressed entry by entry, checksummed and signed with
//! the host's key (docs/storage.md, "Archive").
//!
//! Two parts, so that a segment store can be a directory here and object storage
//! later (issue 29): [`Blobs`] (put-if-absent, get, ranged get, list, delete), with
//! [`LocalFiles`] in `DIR/archive/`; and the segment format ([`encode`], [`entry`],
//! [`verify`]). Where an entry lives ([`Located`]: segment, offset, length, digest) is
//! kept by the room that archived it, in its own store, written in the same synced
//! batch that removes the hot entries: an entry is never in neither place.
//!
//! Invariants, stated as absences: no blob is ever overwritten (a name is written
//! once, whole, or not at all); no entry is decoded whose bytes do not match the
//! digest its room recorded; no segment is trusted whose trailer does not verify.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::high_water::{Signer, Verifier};

/// The archive's directory in an installation.
pub const ARCHIVE_DIR: &str = "archive";
/// Where segments live among the blobs.
pub const SEGMENTS_PREFIX: &str = "segments/";

const MAGIC: &[u8; 8] = b"GRIDAR01";
/// Magic, sequence number, entry count.
const HEADER: usize = 8 + 8 + 4;
/// SHA-256 of everything before it, key generation, Ed25519 signature.
const TRAILER: usize = 32 + 4 + 64;
/// What the signature covers before the digest: the format and the host.
const SIGNED_CONTEXT: &[u8] = b"grid-archive-segment/1\0";

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("archive segment {name} is damaged: {detail}")]
    Damaged { name: String, detail: String },
    #[error("archive segment {name} is missing")]
    Missing { name: String },
    /// A remote store (`s3://…`) that failed or answered what an operation does not
    /// expect: its address and what was asked.
    #[error("archive store {store}: {detail}")]
    Remote { store: String, detail: String },
}

/// A store of named, immutable byte strings.
pub trait Blobs: Send + Sync {
    /// Writes `bytes` under `name` unless the name exists. `true` when the name now
    /// holds exactly `bytes` (written by this put, or by an identical earlier one whose
    /// answer was lost); `false` when it holds other bytes (nothing written). Durable
    /// when it returns.
    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> Result<bool, ArchiveError>;
    /// The whole blob, `None` when there is none.
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ArchiveError>;
    /// `len` bytes at `offset`, `None` when there is no such blob.
    fn get_range(&self, name: &str, offset: u64, len: u32)
    -> Result<Option<Vec<u8>>, ArchiveError>;
    /// Names starting with `prefix`, sorted, with their sizes.
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArchiveError>;
    /// Removes `name` (no error when it is gone).
    fn delete(&self, name: &str) -> Result<(), ArchiveError>;
    /// Whether the store answers and keeps this interface's promises (a remote one:
    /// reachable, its bucket there, a put of an existing name refused).
    fn check(&self) -> Result<(), ArchiveError> {
        Ok(())
    }
}

/// A borrowed store is a store (a [`Sealed`](super::sealed::Sealed) view over a store
/// kept elsewhere, under a key of its own).
impl<B: Blobs + ?Sized> Blobs for &B {
    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> Result<bool, ArchiveError> {
        (**self).put_if_absent(name, bytes)
    }
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        (**self).get(name)
    }
    fn get_range(
        &self,
        name: &str,
        offset: u64,
        len: u32,
    ) -> Result<Option<Vec<u8>>, ArchiveError> {
        (**self).get_range(name, offset, len)
    }
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArchiveError> {
        (**self).list(prefix)
    }
    fn delete(&self, name: &str) -> Result<(), ArchiveError> {
        (**self).delete(name)
    }
    fn check(&self) -> Result<(), ArchiveError> {
        (**self).check()
    }
}

/// Blobs as files under one private directory (`DIR/archive`): a name's `/` is a
/// subdirectory. A put writes a temporary file, fsyncs it and links it into place —
/// the link fails when the name exists — then fsyncs the directory.
pub struct LocalFiles {
    root: PathBuf,
}

impl LocalFiles {
    /// The archive of the installation at `dir` (created private when absent).
    pub fn open(dir: &Path) -> Result<LocalFiles, ArchiveError> {
        let root = dir.join(ARCHIVE_DIR);
        for d in [
            root.clone(),
            root.join(SEGMENTS_PREFIX.trim_end_matches('/')),
        ] {
            super::ensure_private_dir(&d).map_err(|e| ArchiveError::Io {
                path: d.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
            // A staged file left by a crash was never linked: nothing refers to it.
            for entry in std::fs::read_dir(&d).map_err(Self::io(&d))? {
                let path = entry.map_err(Self::io(&d))?.path();
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                if name.starts_with('.') && name.ends_with(".staged") {
                    std::fs::remove_file(&path).map_err(Self::io(&path))?;
                }
            }
        }
        Ok(LocalFiles { root })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError + '_ {
        move |source| ArchiveError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

impl Blobs for LocalFiles {
    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> Result<bool, ArchiveError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path(name);
        if path.exists() {
            return Ok(self.get(name)?.as_deref() == Some(bytes));
        }
        let parent = path.parent().unwrap_or(&self.root).to_owned();
        if !parent.is_dir() {
            super::ensure_private_dir(&parent).map_err(|e| ArchiveError::Io {
                path: parent.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        // Each put stages under a name of its own (puts of one name may race); what a
        // crash left staged is removed at open.
        static STAGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let staged = parent.join(format!(
            ".{}.{}-{}.staged",
            path.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id(),
            STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&staged)
            .map_err(Self::io(&staged))?;
        file.write_all(bytes).map_err(Self::io(&staged))?;
        file.sync_all().map_err(Self::io(&staged))?;
        drop(file);
        let linked = match std::fs::hard_link(&staged, &path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.get(name)?.as_deref() == Some(bytes)
            }
            Err(e) => return Err(Self::io(&path)(e)),
        };
        std::fs::remove_file(&staged).map_err(Self::io(&staged))?;
        std::fs::File::open(&parent)
            .and_then(|d| d.sync_all())
            .map_err(Self::io(&parent))?;
        Ok(linked)
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        let path = self.path(name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io(&path)(e)),
        }
    }

    fn get_range(
        &self,
        name: &str,
        offset: u64,
        len: u32,
    ) -> Result<Option<Vec<u8>>, ArchiveError> {
        let path = self.path(name);
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::io(&path)(e)),
        };
        file.seek(SeekFrom::Start(offset))
            .map_err(Self::io(&path))?;
        let mut bytes = Vec::new();
        file.take(u64::from(len))
            .read_to_end(&mut bytes)
            .map_err(Self::io(&path))?;
        Ok(Some(bytes))
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArchiveError> {
        let (dir, start) = match prefix.rsplit_once('/') {
            Some((d, _)) => (self.root.join(d), format!("{d}/")),
            None => (self.root.clone(), String::new()),
        };
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(Self::io(&dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(Self::io(&dir))?;
            let file = entry.file_name().to_string_lossy().into_owned();
            let name = format!("{start}{file}");
            if file.starts_with('.') || !name.starts_with(prefix) {
                continue;
            }
            let size = entry.metadata().map_err(Self::io(&dir))?.len();
            out.push((name, size));
        }
        out.sort();
        Ok(out)
    }

    fn delete(&self, name: &str) -> Result<(), ArchiveError> {
        let path = self.path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Self::io(&path)(e)),
        }
    }
}

/// The blob name of segment `seq`.
pub fn segment_name(seq: u64) -> String {
    format!("{SEGMENTS_PREFIX}{seq:020}.seg")
}

/// The sequence number a segment's name carries.
pub fn segment_seq(name: &str) -> Option<u64> {
    name.strip_prefix(SEGMENTS_PREFIX)?
        .strip_suffix(".seg")?
        .parse()
        .ok()
}

/// One archived record: the room's key for it (an operation id), when it was
/// answered, and the room's own bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub at_ms: u64,
    pub value: Vec<u8>,
}

/// Where an entry lives: what its room keeps in its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    pub seq: u64,
    pub offset: u64,
    pub len: u32,
    pub at_ms: u64,
    pub digest: [u8; 32],
}

impl Located {
    const BYTES: usize = 8 + 8 + 4 + 8 + 32;

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::BYTES);
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.len.to_be_bytes());
        out.extend_from_slice(&self.at_ms.to_be_bytes());
        out.extend_from_slice(&self.digest);
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Located> {
        if bytes.len() != Self::BYTES {
            return None;
        }
        let u64_at = |i: usize| u64::from_be_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        Some(Located {
            seq: u64_at(0),
            offset: u64_at(8),
            len: u32::from_be_bytes(bytes[16..20].try_into().expect("4 bytes")),
            at_ms: u64_at(20),
            digest: bytes[28..60].try_into().expect("32 bytes"),
        })
    }
}

/// One segment, encoded: its bytes, and where each entry lives in it.
pub struct Encoded {
    pub bytes: Vec<u8>,
    pub located: Vec<(String, Located)>,
}

/// Encodes `entries` as segment `seq` of `host`, signed by `sign`. Each entry is
/// `u32` length, then: key length `u16`, key, `at_ms` `u64`, the value compressed
/// (LZ4 block with its size prepended); all integers big-endian.
pub fn encode(host: &str, seq: u64, entries: &[Entry], sign: &Signer) -> Result<Encoded, String> {
    let mut bytes = Vec::with_capacity(HEADER + TRAILER + entries.len() * 64);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&seq.to_be_bytes());
    let count = u32::try_from(entries.len()).expect("a segment's entries are bounded");
    bytes.extend_from_slice(&count.to_be_bytes());
    let mut located = Vec::with_capacity(entries.len());
    for e in entries {
        let key = e.key.as_bytes();
        let key_len = u16::try_from(key.len()).expect("archive keys are operation ids");
        let compressed = lz4_flex::compress_prepend_size(&e.value);
        let mut body = Vec::with_capacity(2 + key.len() + 8 + compressed.len());
        body.extend_from_slice(&key_len.to_be_bytes());
        body.extend_from_slice(key);
        body.extend_from_slice(&e.at_ms.to_be_bytes());
        body.extend_from_slice(&compressed);
        let len = u32::try_from(body.len()).expect("an entry is bounded");
        bytes.extend_from_slice(&len.to_be_bytes());
        located.push((
            e.key.clone(),
            Located {
                seq,
                offset: bytes.len() as u64,
                len,
                at_ms: e.at_ms,
                digest: Sha256::digest(&body).into(),
            },
        ));
        bytes.extend_from_slice(&body);
    }
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    let (generation, signature) = sign(&signed(host, seq, &digest))?;
    bytes.extend_from_slice(&digest);
    bytes.extend_from_slice(&generation.to_be_bytes());
    bytes.extend_from_slice(&signature);
    Ok(Encoded { bytes, located })
}

/// Where each entry of segment `seq` lives, read from its whole `bytes` (which
/// [`verify`] checked): what [`encode`] answered when it wrote them. `None` when an
/// entry's frame runs past the body.
pub fn located(seq: u64, bytes: &[u8]) -> Option<Vec<(String, Located)>> {
    let body = bytes.get(..bytes.len().checked_sub(TRAILER)?)?;
    let count = u32::from_be_bytes(body.get(16..20)?.try_into().ok()?);
    let mut out = Vec::with_capacity(count.min(1 << 16) as usize);
    let mut at = HEADER;
    for _ in 0..count {
        let len = u32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        let offset = at + 4;
        let entry = body.get(offset..offset + len as usize)?;
        let key_len = usize::from(u16::from_be_bytes(entry.get(..2)?.try_into().ok()?));
        let key = std::str::from_utf8(entry.get(2..2 + key_len)?).ok()?;
        let at_ms = u64::from_be_bytes(entry.get(2 + key_len..10 + key_len)?.try_into().ok()?);
        out.push((
            key.to_owned(),
            Located {
                seq,
                offset: offset as u64,
                len,
                at_ms,
                digest: Sha256::digest(entry).into(),
            },
        ));
        at = offset + len as usize;
    }
    Some(out)
}

fn signed(host: &str, seq: u64, digest: &[u8; 32]) -> Vec<u8> {
    let mut out = SIGNED_CONTEXT.to_vec();
    out.extend_from_slice(host.as_bytes());
    out.push(0);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(digest);
    out
}

/// Decodes the entry `bytes` read at `at` of segment `name`: refused as damaged
/// unless they match the digest the room recorded.
pub fn entry(name: &str, at: &Located, bytes: &[u8]) -> Result<Entry, ArchiveError> {
    let damaged = |detail: &str| ArchiveError::Damaged {
        name: name.to_owned(),
        detail: format!("the entry at byte {}: {detail}", at.offset),
    };
    if bytes.len() != at.len as usize {
        return Err(damaged(&format!(
            "{} of its {} bytes are there (the file is truncated)",
            bytes.len(),
            at.len
        )));
    }
    if <[u8; 32]>::from(Sha256::digest(bytes)) != at.digest {
        return Err(damaged(
            "its bytes do not match the digest its index recorded",
        ));
    }
    if bytes.len() < 2 + 8 {
        return Err(damaged("it is shorter than its header"));
    }
    let key_len = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
    let key = bytes
        .get(2..2 + key_len)
        .and_then(|k| std::str::from_utf8(k).ok())
        .ok_or_else(|| damaged("its key does not decode"))?;
    let rest = &bytes[2 + key_len..];
    let Some((at_ms, compressed)) = rest.split_first_chunk::<8>() else {
        return Err(damaged("it is shorter than its header"));
    };
    let at_ms = u64::from_be_bytes(*at_ms);
    let value = lz4_flex::decompress_size_prepended(compressed)
        .map_err(|e| damaged(&format!("it does not decompress ({e})")))?;
    Ok(Entry {
        key: key.to_owned(),
        at_ms,
        value,
    })
}

/// What a whole segment holds once it verifies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub seq: u64,
    pub entries: u32,
    /// The signing-key generation that signed it.
    pub generation: u32,
}

/// Checks a whole segment: its magic, that it is segment `seq`, its digest, and its
/// signature by `host` (any generation `verify` accepts).
pub fn verify(
    name: &str,
    host: &str,
    seq: u64,
    bytes: &[u8],
    check: Verifier,
) -> Result<Verified, ArchiveError> {
    let damaged = |detail: String| ArchiveError::Damaged {
        name: name.to_owned(),
        detail,
    };
    if bytes.len() < HEADER + TRAILER || &bytes[..8] != MAGIC {
        return Err(damaged(format!(
            "it is not a Grid archive segment ({} bytes, no `{}` header)",
            bytes.len(),
            String::from_utf8_lossy(MAGIC)
        )));
    }
    let found = u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if found != seq {
        return Err(damaged(format!("it says it is segment {found}")));
    }
    let body = bytes.len() - TRAILER;
    let digest: [u8; 32] = Sha256::digest(&bytes[..body]).into();
    if digest[..] != bytes[body..body + 32] {
        return Err(damaged(
            "its contents do not match its checksum (changed or truncated)".to_owned(),
        ));
    }
    let generation = u32::from_be_bytes(bytes[body + 32..body + 36].try_into().expect("4"));
    let signature: [u8; 64] = bytes[body + 36..].try_into().expect("64 bytes");
    if !check(generation, &signed(host, seq, &digest), &signature) {
        return Err(damaged(format!(
            "its signature does not verify with host {host}'s key of generation {generation}"
        )));
    }
    Ok(Verified {
        seq,
        entries: u32::from_be_bytes(bytes[16..20].try_into().expect("4 bytes")),
        generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer as _, SigningKey, Verifier as _};

    fn keys() -> (Signer, impl Fn(u32, &[u8], &[u8; 64]) -> bool) {
        let key = SigningKey::from_bytes(&[7; 32]);
        let public = key.verifying_key();
        let sign: Signer = std::sync::Arc::new(move |m: &[u8]| Ok((1, key.sign(m).to_bytes())));
        let check = move |g: u32, m: &[u8], s: &[u8; 64]| {
            g == 1
                && public
                    .verify(m, &ed25519_dalek::Signature::from_bytes(s))
                    .is_ok()
        };
        (sign, check)
    }

    fn entries(n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| Entry {
                key: format!("op-{i}"),
                at_ms: 1_000 + i as u64,
                value: format!("{{\"answer\":\"succeeded\",\"detail\":\"batch {i} {i} {i}\"}}")
                    .into_bytes(),
            })
            .collect()
    }

    #[test]
    fn a_segment_verifies_and_every_entry_reads_back_through_local_files() {
        let dir = std::env::temp_dir().join(format!("grid-archive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        super::super::ensure_private_dir(&dir).unwrap();
        let blobs = LocalFiles::open(&dir).unwrap();
        let (sign, check) = keys();
        let written = entries(50);
        let encoded = encode("solo", 3, &written, &sign).unwrap();
        let name = segment_name(3);
        assert_eq!(segment_seq(&name), Some(3));
        assert!(blobs.put_if_absent(&name, &encoded.bytes).unwrap());
        // Never overwritten.
        assert!(!blobs.put_if_absent(&name, b"other").unwrap());
        let whole = blobs.get(&name).unwrap().unwrap();
        assert_eq!(whole, encoded.bytes);
        let verified = verify(&name, "solo", 3, &whole, &check).unwrap();
        assert_eq!(verified.entries, 50);
        // Read from the whole segment, where each entry lives is what encode answered.
        assert_eq!(located(3, &whole).as_ref(), Some(&encoded.located));
        assert_eq!(located(3, &whole[..whole.len() - 200]), None);
        for ((key, at), e) in encoded.located.iter().zip(&written) {
            assert_eq!(Located::from_bytes(&at.to_bytes()), Some(*at));
            let bytes = blobs.get_range(&name, at.offset, at.len).unwrap().unwrap();
            assert_eq!(&entry(&name, at, &bytes).unwrap(), e);
            assert_eq!(key, &e.key);
        }
        assert_eq!(
            blobs.list(SEGMENTS_PREFIX).unwrap(),
            vec![(name.clone(), whole.len() as u64)]
        );
        // Another host's name, another sequence number: refused.
        assert!(verify(&name, "other", 3, &whole, &check).is_err());
        assert!(verify(&name, "solo", 4, &whole, &check).is_err());
        blobs.delete(&name).unwrap();
        assert_eq!(blobs.get(&name).unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_refused_never_read_differently() {
        let (sign, check) = keys();
        let encoded = encode("solo", 1, &entries(3), &sign).unwrap();
        let name = segment_name(1);
        for i in 0..encoded.bytes.len() {
            let mut bytes = encoded.bytes.clone();
            bytes[i] ^= 0x40;
            assert!(
                verify(&name, "solo", 1, &bytes, &check).is_err(),
                "a flip at byte {i} verifies"
            );
            for (_, at) in &encoded.located {
                let range = at.offset as usize..at.offset as usize + at.len as usize;
                if range.contains(&i) {
                    let e = entry(&name, at, &bytes[range]).unwrap_err();
                    assert!(e.to_string().contains(&name), "{e}");
                }
            }
        }
        for cut in 0..encoded.bytes.len() {
            assert!(verify(&name, "solo", 1, &encoded.bytes[..cut], &check).is_err());
        }
        let (_, at) = &encoded.located[2];
        let start = at.offset as usize;
        let short = &encoded.bytes[start..start + at.len as usize - 1];
        assert!(
            entry(&name, at, short)
                .unwrap_err()
                .to_string()
                .contains("truncated")
        );
    }
}
