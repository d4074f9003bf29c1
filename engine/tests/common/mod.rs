//! A fault-injecting HTTP/1.1 proxy for the remote stores' conformance suites
//! (`blob_stores.rs`, `records.rs`): drops, 500s, truncated bodies, duplicated requests,
//! and a server that ignores write conditions.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the proxy does to the next requests, in order; then it forwards faithfully.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answers 500 without forwarding.
    ServerError,
    /// Forwards, then closes the connection without answering.
    DropAfterForwarding,
    /// Forwards, then answers the status line and headers and half the body.
    TruncateBody,
    /// Forwards the request twice and answers the second answer.
    Duplicate,
}

/// An HTTP/1.1 proxy in front of `upstream` injecting `faults`, one per request; while
/// `lenient` is set it also turns every 412 (S3's refused `If-None-Match`) and every
/// 400 `ConditionalCheckFailedException` (DynamoDB's refused condition) into a 200, as
/// a server that ignores the condition (and overwrites) would answer.
pub struct Proxy {
    pub port: u16,
    faults: Arc<Mutex<Vec<Fault>>>,
    pub served: Arc<AtomicUsize>,
    pub lenient: Arc<std::sync::atomic::AtomicBool>,
}

/// One HTTP/1.1 message read whole (headers and a Content-Length body).
fn read_message(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let header_end = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&bytes[..header_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap_or(0));
    while bytes.len() < header_end + length {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    Some(bytes)
}

/// Sends `request` (asking to close after it) to `upstream` on a new connection; the
/// answer whole, up to the server's close.
fn forward(upstream: u16, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let faults: Arc<Mutex<Vec<Fault>>> = Arc::default();
        let served = Arc::new(AtomicUsize::new(0));
        let lenient: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (f, s, l) = (faults.clone(), served.clone(), lenient.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let (faults, served, lenient) = (f.clone(), s.clone(), l.clone());
                std::thread::spawn(move || {
                    // One request per connection, both ways: the answer is passed on
                    // as the server framed it, and the connection closed after it.
                    if let Some(request) = read_message(&mut stream) {
                        let request = String::from_utf8_lossy(&request)
                            .replacen("\r\n\r\n", "\r\nconnection: close\r\n\r\n", 1)
                            .into_bytes();
                        let fault = {
                            let mut faults = faults.lock().unwrap();
                            (!faults.is_empty()).then(|| faults.remove(0))
                        };
                        served.fetch_add(1, Ordering::SeqCst);
                        let answer = match fault {
                            Some(Fault::ServerError) => b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec(),
                            Some(Fault::DropAfterForwarding) => {
                                forward(upstream, &request);
                                return;
                            }
                            Some(Fault::TruncateBody) => {
                                let whole = forward(upstream, &request);
                                let head = whole.windows(4).position(|w| w == b"\r\n\r\n").map_or(whole.len(), |p| p + 4);
                                let cut = head + (whole.len() - head) / 2;
                                let _ = stream.write_all(&whole[..cut]);
                                return;
                            }
                            Some(Fault::Duplicate) => {
                                forward(upstream, &request);
                                forward(upstream, &request)
                            }
                            None => forward(upstream, &request),
                        };
                        let refused_condition = answer.starts_with(b"HTTP/1.1 412")
                            || (answer.starts_with(b"HTTP/1.1 400")
                                && answer
                                    .windows(31)
                                    .any(|w| w == b"ConditionalCheckFailedException"));
                        let answer = if lenient.load(Ordering::SeqCst) && refused_condition {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
                                .to_vec()
                        } else {
                            answer
                        };
                        let _ = stream.write_all(&answer);
                    }
                });
            }
        });
        Proxy {
            port,
            faults,
            served,
            lenient,
        }
    }

    pub fn inject(&self, faults: &[Fault]) {
        self.faults.lock().unwrap().extend_from_slice(faults);
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
