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
}

pub fn parse_s3_object(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (peer, kind) = node.peer("a seaweedfs peer")?;
    if kind != "seaweedfs" {
        return Err(node.error(format!(
            "peer `{peer}` is a {kind} peer; `s3-object` reads a seaweedfs peer's bucket"
        )));
    }
    let key = node.argument("an object key, e.g. \"edge-a/segments/00000000000000000001.seg\"")?;
    let valid = |k: &str| {
        !k.is_empty()
            && !k.starts_with('/')
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
    };
    if !valid(&key) {
        return Err(node.error(format!(
            "object key `{key}` must be letters, digits, `-`, `_`, `.` and `/`, not starting with `/`"
        )));
    }
    let flip = node.count("flip-byte")?;
    let copy = node.string("copy-from")?;
    let remove = node.flag("remove")?.unwrap_or(false);
    let sealed = node.flag("expect-sealed")?.unwrap_or(false);
    let without = node.string("without")?;
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
    Ok(Box::new(Object { peer, key, change }))
}

impl Object {
    /// `curl` with the peer's keys: the HTTP status and the body.
    fn curl(&self, cx: &mut Context<'_>, args: &[&str]) -> Result<(u16, Vec<u8>), Failure> {
        let Some(PeerSpec::SeaweedFs { port, bucket }) = cx.peers().spec(&self.peer).cloned()
        else {
            return Err(Failure::new(
                format!("peer `{}` to be a started seaweedfs peer", self.peer),
                "it is not",
            ));
        };
        let url = format!("http://127.0.0.1:{port}/{bucket}/{}", self.key);
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
