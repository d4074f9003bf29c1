//! Blobs sealed to their host before they reach a store that is not trusted (issue 29:
//! an S3 bucket is someone else's disk). [`Sealed`] wraps any [`Blobs`]: each blob is
//! cut into chunks of [`SEALED_CHUNK_BYTES`], each chunk sealed with XChaCha20-Poly1305
//! under the host's archive key, with a random salt per blob, so a ranged read opens only
//! the chunks it covers:
//! ```text
//! "GRIDSL01" | salt (16 bytes) | plaintext length u64 BE
//! chunk i: ciphertext of bytes [i*C, (i+1)*C) | 16-byte tag      (an empty blob: one empty chunk)
//! nonce: salt | i u64 BE      associated data: "grid-sealed/1\0" name "\0" length u64 BE
//! ```
//! The name and the whole length are in every chunk's associated data, so a chunk
//! moved to another blob, another place or another length, a blob renamed, cut or
//! grown, and a byte changed anywhere, do not open: they are refused naming the blob,
//! never read differently.
//!
//! Invariants, stated as absences: no plaintext reaches the inner store; no byte is
//! returned from a chunk that did not open; no nonce repeats under one key (a fresh
//! 16-byte random salt per put, the chunk index after it).

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::archive::{ArchiveError, Blobs};
use crate::limits::SEALED_CHUNK_BYTES;

const MAGIC: &[u8; 8] = b"GRIDSL01";
const SALT: usize = 16;
/// Magic, salt, plaintext length.
const HEADER: usize = 8 + SALT + 8;
const TAG: usize = 16;
const AAD_CONTEXT: &[u8] = b"grid-sealed/1\0";

/// A store whose blobs are sealed under one 32-byte key.
pub struct Sealed<B> {
    inner: B,
    cipher: XChaCha20Poly1305,
    /// The headers (salt, plaintext length) of blobs read before: a blob's name is
    /// never written twice, so they hold until it is deleted (a blob changed behind the
    /// store's back fails to open under them, as under its own).
    headers: std::sync::Mutex<std::collections::HashMap<String, ([u8; SALT], u64)>>,
}

/// How many chunks a plaintext of `len` bytes is cut into (at least one).
fn chunks(len: u64) -> u64 {
    len.div_ceil(SEALED_CHUNK_BYTES as u64).max(1)
}

/// The sealed size of a plaintext of `len` bytes.
pub fn sealed_len(len: u64) -> u64 {
    HEADER as u64 + len + chunks(len) * TAG as u64
}

/// The plaintext length a sealed blob of `size` bytes holds, when `size` is one a
/// sealed blob can have.
fn plain_len(size: u64) -> Option<u64> {
    let body = size.checked_sub(HEADER as u64)?;
    let stride = (SEALED_CHUNK_BYTES + TAG) as u64;
    let full = body / stride;
    let rest = body % stride;
    let len = match rest {
        0 if full > 0 => full * SEALED_CHUNK_BYTES as u64,
        r if r >= TAG as u64 => full * SEALED_CHUNK_BYTES as u64 + (r - TAG as u64),
        _ => return None,
    };
    (sealed_len(len) == size).then_some(len)
}

fn nonce(salt: &[u8; SALT], index: u64) -> XNonce {
    let mut bytes = [0u8; 24];
    bytes[..SALT].copy_from_slice(salt);
    bytes[SALT..].copy_from_slice(&index.to_be_bytes());
    XNonce::from(bytes)
}

fn aad(name: &str, len: u64) -> Vec<u8> {
    let mut aad = Vec::with_capacity(AAD_CONTEXT.len() + name.len() + 9);
    aad.extend_from_slice(AAD_CONTEXT);
    aad.extend_from_slice(name.as_bytes());
    aad.push(0);
    aad.extend_from_slice(&len.to_be_bytes());
    aad
}

fn damaged(name: &str, detail: impl Into<String>) -> ArchiveError {
    ArchiveError::Damaged {
        name: name.to_owned(),
        detail: detail.into(),
    }
}

impl<B: Blobs> Sealed<B> {
    pub fn new(inner: B, key: &[u8; 32]) -> Sealed<B> {
        Sealed {
            inner,
            cipher: XChaCha20Poly1305::new(&(*key).into()),
            headers: Default::default(),
        }
    }

    /// The store the sealed blobs live in.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn cached(&self, name: &str) -> Option<([u8; SALT], u64)> {
        self.headers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied()
    }

    fn remember(&self, name: &str, header: ([u8; SALT], u64)) {
        let mut headers = self.headers.lock().unwrap_or_else(|p| p.into_inner());
        if headers.len() >= crate::limits::SEALED_HEADERS_CACHED_MAX {
            headers.clear();
        }
        headers.insert(name.to_owned(), header);
    }

    fn forget(&self, name: &str) {
        self.headers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }

    fn seal(&self, name: &str, bytes: &[u8]) -> Result<Vec<u8>, ArchiveError> {
        let mut salt = [0u8; SALT];
        getrandom::fill(&mut salt)
            .map_err(|e| damaged(name, format!("no randomness to seal it: {e}")))?;
        let len = bytes.len() as u64;
        let aad = aad(name, len);
        let mut out = Vec::with_capacity(sealed_len(len) as usize);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&salt);
        out.extend_from_slice(&len.to_be_bytes());
        let pieces: Vec<&[u8]> = if bytes.is_empty() {
            vec![&[]]
        } else {
            bytes.chunks(SEALED_CHUNK_BYTES).collect()
        };
        for (i, piece) in pieces.into_iter().enumerate() {
            let sealed = self
                .cipher
                .encrypt(
                    &nonce(&salt, i as u64),
                    Payload {
                        msg: piece,
                        aad: &aad,
                    },
                )
                .map_err(|_| damaged(name, "sealing failed"))?;
            out.extend_from_slice(&sealed);
        }
        debug_assert_eq!(out.len() as u64, sealed_len(len));
        Ok(out)
    }

    /// The header of a sealed blob: its salt and plaintext length, checked against
    /// the blob's size when known.
    fn header(
        name: &str,
        head: &[u8],
        size: Option<u64>,
    ) -> Result<([u8; SALT], u64), ArchiveError> {
        if head.len() < HEADER || &head[..8] != MAGIC {
            return Err(damaged(name, "not a sealed blob (no GRIDSL01 header)"));
        }
        let mut salt = [0u8; SALT];
        salt.copy_from_slice(&head[8..8 + SALT]);
        let len = u64::from_be_bytes(head[8 + SALT..HEADER].try_into().expect("8 bytes"));
        if let Some(size) = size
            && sealed_len(len) != size
        {
            return Err(damaged(
                name,
                format!(
                    "it holds {size} bytes, its header says {} (cut or grown)",
                    sealed_len(len)
                ),
            ));
        }
        Ok((salt, len))
    }

    /// Opens chunks `first..` of a blob from `sealed` (their bytes, in order).
    fn open_chunks(
        &self,
        name: &str,
        salt: &[u8; SALT],
        len: u64,
        first: u64,
        sealed: &[u8],
    ) -> Result<Vec<u8>, ArchiveError> {
        let aad = aad(name, len);
        let mut out = Vec::with_capacity(sealed.len());
        for (i, piece) in sealed.chunks(SEALED_CHUNK_BYTES + TAG).enumerate() {
            let index = first + i as u64;
            let opened = self
                .cipher
                .decrypt(&nonce(salt, index), Payload { msg: piece, aad: &aad })
                .map_err(|_| {
                    damaged(
                        name,
                        format!("sealed chunk {index} does not open (changed, moved, or sealed under another key)"),
                    )
                })?;
            out.extend_from_slice(&opened);
        }
        Ok(out)
    }
}

impl<B: Blobs> Blobs for Sealed<B> {
    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> Result<bool, ArchiveError> {
        self.forget(name);
        if self.inner.put_if_absent(name, &self.seal(name, bytes)?)? {
            return Ok(true);
        }
        // Sealed again, the bytes differ (a fresh salt): compare what they hold.
        Ok(self.get(name)?.as_deref() == Some(bytes))
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        let Some(sealed) = self.inner.get(name)? else {
            return Ok(None);
        };
        let (salt, len) = Self::header(name, &sealed, Some(sealed.len() as u64))?;
        let opened = self.open_chunks(name, &salt, len, 0, &sealed[HEADER..])?;
        Ok(Some(opened))
    }

    fn get_range(
        &self,
        name: &str,
        offset: u64,
        len: u32,
    ) -> Result<Option<Vec<u8>>, ArchiveError> {
        let cached = self.cached(name);
        let (salt, total) = match cached {
            Some(header) => header,
            None => {
                let Some(head) = self.inner.get_range(name, 0, HEADER as u32)? else {
                    return Ok(None);
                };
                let header = Self::header(name, &head, None)?;
                self.remember(name, header);
                header
            }
        };
        let end = (offset + u64::from(len)).min(total);
        if offset >= end {
            return Ok(Some(Vec::new()));
        }
        let chunk = SEALED_CHUNK_BYTES as u64;
        let (first, last) = (offset / chunk, (end - 1) / chunk);
        let stride = chunk + TAG as u64;
        let from = HEADER as u64 + first * stride;
        let want = (last - first + 1) * stride;
        let sealed = self
            .inner
            .get_range(name, from, u32::try_from(want).unwrap_or(u32::MAX))?
            .ok_or_else(|| ArchiveError::Missing {
                name: name.to_owned(),
            })?;
        // The last chunk of the blob is shorter; anything else short was cut.
        let expected = sealed_len(total).min(from + want) - from;
        if sealed.len() as u64 != expected {
            return Err(damaged(
                name,
                format!(
                    "{} sealed bytes at {from}, {expected} expected (cut)",
                    sealed.len()
                ),
            ));
        }
        let opened = self.open_chunks(name, &salt, total, first, &sealed)?;
        let skip = (offset - first * chunk) as usize;
        Ok(Some(opened[skip..skip + (end - offset) as usize].to_vec()))
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArchiveError> {
        self.inner
            .list(prefix)?
            .into_iter()
            .map(|(name, size)| match plain_len(size) {
                Some(len) => Ok((name, len)),
                None => Err(damaged(
                    &name,
                    format!("{size} bytes is no sealed blob's size"),
                )),
            })
            .collect()
    }

    fn delete(&self, name: &str) -> Result<(), ArchiveError> {
        self.forget(name);
        self.inner.delete(name)
    }

    fn check(&self) -> Result<(), ArchiveError> {
        self.inner.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_trip() {
        let c = SEALED_CHUNK_BYTES as u64;
        for len in [0, 1, c - 1, c, c + 1, 2 * c, 5 * c + 3] {
            assert_eq!(plain_len(sealed_len(len)), Some(len), "{len}");
        }
        for size in [0, HEADER as u64, HEADER as u64 + 15, sealed_len(c) + 3] {
            assert_eq!(plain_len(size), None, "{size}");
        }
    }
}
