//! Wire observation (profile `wire-observation`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Whose writes a count holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// This host serving the peer: what its listener's connections wrote.
    ServerToClient,
    /// This host calling the peer: what its client connections wrote.
    ClientToServer,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::ServerToClient => "server-to-client",
            Direction::ClientToServer => "client-to-server",
        }
    }
}

/// Wire observation (profile `wire-observation`): the bytes this host's sockets write
/// on each TLS stream — handshake, records, alerts — per peer and direction, counted
/// once at the writer: as server (its listener's connections) and as client (the
/// connections it opens to call peers). Not counted: IP and TCP headers, TCP
/// retransmissions by the kernel, bytes the peer writes (its own observation counts
/// those). A counter that would overflow reports `unavailable` from then on.
#[derive(Debug, Default)]
pub struct WireCounters {
    peers: Mutex<BTreeMap<(String, Direction), Option<u64>>>,
}

/// The peer a connection is attributed to before (or without) an authenticated
/// handshake.
pub const UNAUTHENTICATED_PEER: &str = "unauthenticated";

impl WireCounters {
    pub(super) fn add(&self, peer: &str, direction: Direction, bytes: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let entry = peers.entry((peer.to_owned(), direction)).or_insert(Some(0));
        *entry = entry.and_then(|total| total.checked_add(bytes));
    }

    /// `(peer, direction, bytes this host wrote)`; `None` is unavailable.
    pub fn snapshot(&self) -> Vec<(String, Direction, Option<u64>)> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers
            .iter()
            .map(|((p, d), b)| (p.clone(), *d, *b))
            .collect()
    }
}

/// The counters of the installations this process serves with `wire-observation`,
/// by directory: a client a capability opens to a peer finds its host's counters here
/// (a capability knows its installation, not the composition root's counters).
fn registry() -> &'static Mutex<BTreeMap<PathBuf, Arc<WireCounters>>> {
    static REGISTRY: OnceLock<Mutex<BTreeMap<PathBuf, Arc<WireCounters>>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

fn key(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// Counts the client connections of installation `dir` from now on.
pub fn register(dir: &Path, counters: Arc<WireCounters>) {
    let mut registry = registry().lock().unwrap_or_else(|p| p.into_inner());
    registry.insert(key(dir), counters);
}

/// The counters of installation `dir`, when it runs with `wire-observation`.
pub(super) fn registered(dir: &Path) -> Option<Arc<WireCounters>> {
    let registry = registry().lock().unwrap_or_else(|p| p.into_inner());
    registry.get(&key(dir)).cloned()
}

/// Where a counted socket's bytes go.
pub(super) enum Sink {
    /// Held until the peer is known (a server's connection before its handshake).
    Tally(Arc<AtomicU64>),
    /// Straight to the peer's total (a client knows whom it calls).
    Live {
        counters: Arc<WireCounters>,
        peer: String,
    },
    /// Not observed.
    Off,
}

/// A socket that counts what it writes.
pub(super) struct Counted<S> {
    pub(super) inner: S,
    pub(super) sink: Sink,
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
            match &self.sink {
                Sink::Tally(written) => {
                    written.fetch_add(*n as u64, Ordering::Relaxed);
                }
                Sink::Live { counters, peer } => {
                    counters.add(peer, Direction::ClientToServer, *n as u64)
                }
                Sink::Off => {}
            }
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
        let (server, client) = (Direction::ServerToClient, Direction::ClientToServer);
        wire.add("b in ops", server, 10);
        wire.add("b in ops", server, 5);
        wire.add("b in ops", client, 7);
        wire.add("c in other", server, u64::MAX);
        wire.add("c in other", server, 1);
        wire.add("c in other", server, 1);
        assert_eq!(
            wire.snapshot(),
            vec![
                ("b in ops".to_owned(), server, Some(15)),
                ("b in ops".to_owned(), client, Some(7)),
                ("c in other".to_owned(), server, None)
            ]
        );
    }
}
