//! Wire observation (profile `wire-observation`).

use std::sync::Arc;

/// Wire observation (profile `wire-observation`): the bytes this host's sockets write
/// on each TLS stream — handshake, records, alerts — per peer, counted once at the
/// writer. Not counted: IP and TCP headers, TCP retransmissions by the kernel, bytes
/// the peer writes (its own observation counts those). A counter that would overflow
/// reports `unavailable` from then on.
#[derive(Debug, Default)]
pub struct WireCounters {
    peers: std::sync::Mutex<std::collections::BTreeMap<String, Option<u64>>>,
}

/// The peer a connection is attributed to before (or without) an authenticated
/// handshake.
pub const UNAUTHENTICATED_PEER: &str = "unauthenticated";

impl WireCounters {
    pub(super) fn add(&self, peer: &str, bytes: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let entry = peers.entry(peer.to_owned()).or_insert(Some(0));
        *entry = entry.and_then(|total| total.checked_add(bytes));
    }

    /// `(peer, bytes written to it by this host as server)`; `None` is unavailable.
    pub fn snapshot(&self) -> Vec<(String, Option<u64>)> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.iter().map(|(p, b)| (p.clone(), *b)).collect()
    }
}

/// A socket that counts what it writes; the count moves to the peer's total when the
/// peer is known and whenever more is written.
pub(super) struct Counted<S> {
    pub(super) inner: S,
    pub(super) written: Arc<std::sync::atomic::AtomicU64>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let result = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &result {
            self.written
                .fetch_add(*n as u64, std::sync::atomic::Ordering::Relaxed);
        }
        result
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflowing_counter_reads_unavailable_from_then_on() {
        let wire = WireCounters::default();
        wire.add("b in ops", 10);
        wire.add("b in ops", 5);
        wire.add("c in other", u64::MAX);
        wire.add("c in other", 1);
        wire.add("c in other", 1);
        assert_eq!(
            wire.snapshot(),
            vec![
                ("b in ops".to_owned(), Some(15)),
                ("c in other".to_owned(), None)
            ]
        );
    }
}
