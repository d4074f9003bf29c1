//! Objects in the bucket of a `seaweedfs` peer, read and changed behind the hosts'
//! backs by an independent S3 client (`curl --aws-sigv4`, with the peer's own keys), as
//! an intruder holding the bucket's keys, or a careless operator, would. Keys are the
//! bucket's (`PREFIX/segments/…seg`).
//!
//! - `s3-object PEER "KEY" flip-byte=N` — the object read, byte N inverted, and written
//!   back over it.
//! - `s3-object PEER "KEY" copy-from="KEY2"` — the object replaced by KEY2's bytes (an
//!   older object put back: a rollback, or two swapped).
//! - `s3-object PEER "KEY" remove=#true` — the object deleted.
//! - `s3-object PEER "KEY" expect-sealed=#true [without="TEXT"]` — the object exists,
//!   begins with the sealed magic `GRIDSL01`, and (with `without=`) does not hold TEXT
//!   anywhere in its bytes (a host name, an operation id: the server sees no plaintext).
//! - `newest=#true` with any of them: KEY is a prefix, and the object is the last name
//!   the server lists under it (an authority snapshot's name holds its digest).
//! - `s3-objects PEER "PREFIX" count=N [expect-sealed=#true] [without="TEXT"]` — the
//!   server lists N objects under PREFIX (each sealed, and without TEXT, when asked).

use super::Step;
use crate::context::Context;
use crate::error::Failure;
use crate::peers::{PeerSpec, SEAWEED_KEY, SEAWEED_SECRET};
use crate::step::{Node, ParseError};

/// The first bytes of a blob sealed to its host (`engine/src/store/sealed.rs`).
const SEALED_MAGIC: &[u8] = b"GRIDSL01";

enum Change {
    FlipByte(u64),
    CopyFrom(String),
    Remove,
    ExpectSealed { without: Option<String> },
}

struct Object {
    peer: String,
    key: String,
    change: Change,
    /// `key` is a prefix: the object is the last name listed under it.
    newest: bool,
}

pub fn parse_s3_object(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (peer, kind) = node.peer("a seaweedfs peer")?;
    if kind != "seaweedfs" {
        return Err(node.error(format!(
            "peer `{peer}` is a {kind} peer; `s3-object` reads a seaweedfs peer's bucket"
        )));
    }
    let key = node.argument("an object key, e.g. \"edge-a/segments/00000000000000000001.seg\"")?;
    let valid = valid_key;
    if !valid(&key) {
        return Err(node.error(format!(
            "object key `{key}` must be letters, digits, `-`, `_`, `.` and `/`, not starting with `/`"
        )));
    }
    let newest = node.flag("newest")?.unwrap_or(false);
    let flip = node.count("flip-byte")?;
    let copy = node.string("copy-from")?;
    let remove = node.flag("remove")?.unwrap_or(false);
    let sealed = node.flag("expect-sealed")?.unwrap_or(false);
    let without = without_text(node)?;
    if without.is_some() && !sealed {
        return Err(node.error("`without=` goes with expect-sealed=#true"));
    }
    let change = match (flip, copy, remove, sealed) {
        (Some(at), None, false, false) => Change::FlipByte(at),
        (None, Some(from), false, false) if valid(&from) => Change::CopyFrom(from),
        (None, None, true, false) => Change::Remove,
        (None, None, false, true) => Change::ExpectSealed { without },
        _ => {
            return Err(node.error(
                "`s3-object` takes one of flip-byte=N, copy-from=\"KEY\", remove=#true, expect-sealed=#true",
            ));
        }
    };
    Ok(Box::new(Object {
        peer,
        key,
        change,
        newest,
    }))
}

/// `without="TEXT"`: refused when shorter than `SEALED_WITHOUT_BYTES_MIN` (a check that
/// ciphertext could fail by chance).
fn without_text(node: &mut Node) -> Result<Option<String>, ParseError> {
    let without = node.string("without")?;
    match &without {
        Some(text) if text.len() < crate::limits::SEALED_WITHOUT_BYTES_MIN => Err(node.error(format!(
            "`without=\"{text}\"` is shorter than SEALED_WITHOUT_BYTES_MIN ({} bytes): ciphertext holds so short a text by chance now and then; name a longer one every plaintext would hold (an operation id, `acknowledged`)",
            crate::limits::SEALED_WITHOUT_BYTES_MIN
        ))),
        _ => Ok(without),
    }
}

/// `s3-objects PEER "PREFIX" count=N [expect-sealed=#true] [without="TEXT"]`.
struct Objects {
    peer: String,
    prefix: String,
    count: u64,
    sealed: bool,
    without: Option<String>,
}

pub fn parse_s3_objects(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (peer, kind) = node.peer("a seaweedfs peer")?;
    if kind != "seaweedfs" {
        return Err(node.error(format!(
            "peer `{peer}` is a {kind} peer; `s3-objects` lists a seaweedfs peer's bucket"
        )));
    }
    let prefix = node.argument("a key prefix, e.g. \"ops/snapshots/a/\"")?;
    if !valid_key(&prefix) {
        return Err(node.error(format!(
            "prefix `{prefix}` must be letters, digits, `-`, `_`, `.` and `/`, not starting with `/`"
        )));
    }
    let count = node
        .count("count")?
        .ok_or_else(|| node.error("`s3-objects` needs count=N"))?;
    let sealed = node.flag("expect-sealed")?.unwrap_or(false);
    let without = without_text(node)?;
    if without.is_some() && !sealed {
        return Err(node.error("`without=` goes with expect-sealed=#true"));
    }
    Ok(Box::new(Objects {
        peer,
        prefix,
        count,
        sealed,
        without,
    }))
}

impl Step for Objects {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let bucket = Object {
            peer: self.peer.clone(),
            key: String::new(),
            change: Change::Remove,
            newest: false,
        };
        let keys = bucket.list(cx, &self.prefix)?;
        if keys.len() as u64 != self.count {
            return Err(Failure::new(
                format!("{} object(s) under {}", self.count, self.prefix),
                format!("{}: {}", keys.len(), keys.join(" ")),
            ));
        }
        for key in &keys {
            if self.sealed {
                Object {
                    peer: self.peer.clone(),
                    key: key.clone(),
                    change: Change::ExpectSealed {
                        without: self.without.clone(),
                    },
                    newest: false,
                }
                .run(cx)?;
            }
        }
        cx.say(format_args!(
            "{} object(s) under {}: {}",
            keys.len(),
            self.prefix,
            keys.join(" ")
        ));
        Ok(())
    }
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with('/')
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

impl Object {
    /// The names the server lists under `prefix` (one page: a journey's few objects).
    fn list(&self, cx: &mut Context<'_>, prefix: &str) -> Result<Vec<String>, Failure> {
        let bucket = Object {
            peer: self.peer.clone(),
            // SigV4 signs the query as the server reads it: `/` encoded.
            key: format!("?list-type=2&prefix={}", prefix.replace('/', "%2F")),
            change: Change::Remove,
            newest: false,
        };
        let (status, body) = bucket.curl(cx, &[])?;
        if status != 200 {
            return Err(Failure::new(
                format!(
                    "a listing of {prefix} from peer {} to answer 200",
                    self.peer
                ),
                format!("HTTP {status}"),
            ));
        }
        let text = String::from_utf8_lossy(&body);
        let mut keys: Vec<String> = text
            .split("<Key>")
            .skip(1)
            .filter_map(|k| k.split_once("</Key>").map(|(k, _)| k.to_owned()))
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// The object's key: its own, or (`newest`) the last listed under it.
    fn resolve(&self, cx: &mut Context<'_>) -> Result<Object, Failure> {
        let key = match self.newest {
            false => self.key.clone(),
            true => self.list(cx, &self.key)?.pop().ok_or_else(|| {
                Failure::new(
                    format!("an object under {} on peer {}", self.key, self.peer),
                    "none is listed",
                )
            })?,
        };
        Ok(Object {
            peer: self.peer.clone(),
            key,
            change: match &self.change {
                Change::FlipByte(n) => Change::FlipByte(*n),
                Change::CopyFrom(k) => Change::CopyFrom(k.clone()),
                Change::Remove => Change::Remove,
                Change::ExpectSealed { without } => Change::ExpectSealed {
                    without: without.clone(),
                },
            },
            newest: false,
        })
    }

    /// `curl` with the peer's keys: the HTTP status and the body.
    fn curl(&self, cx: &mut Context<'_>, args: &[&str]) -> Result<(u16, Vec<u8>), Failure> {
        let Some(PeerSpec::SeaweedFs { port, bucket }) = cx.peers().spec(&self.peer).cloned()
        else {
            return Err(Failure::new(
                format!("peer `{}` to be a started seaweedfs peer", self.peer),
                "it is not",
            ));
        };
        let url = match self.key.starts_with('?') {
            true => format!("http://127.0.0.1:{port}/{bucket}{}", self.key),
            false => format!("http://127.0.0.1:{port}/{bucket}/{}", self.key),
        };
        let out = std::process::Command::new("curl")
            .args(["-s", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
            .args(["--aws-sigv4", "aws:amz:us-east-1:s3"])
            .args(["--user", &format!("{SEAWEED_KEY}:{SEAWEED_SECRET}")])
            .args(args)
            .arg(&url)
            .output()
            .map_err(|e| Failure::new("curl to run", e.to_string()))?;
        let mut body = out.stdout;
        let split = body.iter().rposition(|b| *b == b'\n').unwrap_or(0);
        let status = String::from_utf8_lossy(&body[split..])
            .trim()
            .parse()
            .unwrap_or(0);
        body.truncate(split);
        Ok((status, body))
    }

    fn get(&self, cx: &mut Context<'_>, key: &str) -> Result<Vec<u8>, Failure> {
        let object = Object {
            peer: self.peer.clone(),
            key: key.to_owned(),
            change: Change::Remove,
            newest: false,
        };
        match object.curl(cx, &[])? {
            (200, body) => Ok(body),
            (status, _) => Err(Failure::new(
                format!("GET {key} from peer {} to answer 200", self.peer),
                format!("HTTP {status}"),
            )),
        }
    }

    fn put(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Result<(), Failure> {
        let file = std::env::temp_dir().join(format!(
            "grid-journey-object-{}-{}",
            std::process::id(),
            self.key.replace('/', "_")
        ));
        std::fs::write(&file, bytes)
            .map_err(|e| Failure::new("a temporary file", e.to_string()))?;
        let upload = format!("{}", file.display());
        let answered = self.curl(cx, &["-X", "PUT", "--upload-file", &upload]);
        let _ = std::fs::remove_file(&file);
        match answered? {
            (200, _) => Ok(()),
            (status, _) => Err(Failure::new(
                format!("PUT {} to peer {} to answer 200", self.key, self.peer),
                format!("HTTP {status}"),
            )),
        }
    }
}

impl Step for Object {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        if self.newest {
            return self.resolve(cx)?.run(cx);
        }
        let key = &self.key;
        match &self.change {
            Change::FlipByte(at) => {
                let mut bytes = self.get(cx, key)?;
                let Some(byte) = bytes.get_mut(*at as usize) else {
                    return Err(Failure::new(
                        format!("{key} to hold a byte {at}"),
                        format!("it holds {} bytes", bytes.len()),
                    ));
                };
                *byte ^= 0xff;
                self.put(cx, &bytes)?;
                cx.say(format_args!("{key}: byte {at} inverted on the server"));
            }
            Change::CopyFrom(from) => {
                let bytes = self.get(cx, from)?;
                self.put(cx, &bytes)?;
                cx.say(format_args!(
                    "{key}: replaced on the server by {from}'s bytes"
                ));
            }
            Change::Remove => match self.curl(cx, &["-X", "DELETE"])? {
                (200 | 204, _) => cx.say(format_args!("{key}: deleted on the server")),
                (status, _) => {
                    return Err(Failure::new(
                        format!("DELETE {key} to answer 204"),
                        format!("HTTP {status}"),
                    ));
                }
            },
            Change::ExpectSealed { without } => {
                let bytes = self.get(cx, key)?;
                if !bytes.starts_with(SEALED_MAGIC) {
                    return Err(Failure::new(
                        format!("{key} to begin with the sealed magic GRIDSL01"),
                        format!(
                            "it begins {:?}",
                            String::from_utf8_lossy(&bytes[..bytes.len().min(8)])
                        ),
                    ));
                }
                if let Some(text) = without
                    && bytes
                        .windows(text.len().max(1))
                        .any(|w| w == text.as_bytes())
                {
                    return Err(Failure::new(
                        format!("{key} not to hold {text:?}"),
                        "it does: the server sees plaintext",
                    ));
                }
                cx.say(format_args!(
                    "{key}: {} bytes, sealed{}",
                    bytes.len(),
                    without
                        .as_ref()
                        .map_or(String::new(), |t| format!(", without {t:?}"))
                ));
            }
        }
        Ok(())
    }
}
