//! Records in the table of a `dynalite` peer, read and changed behind the hosts' backs
//! by an independent DynamoDB client (`curl --aws-sigv4`), as an intruder holding the
//! table's keys, or a careless operator, would. A record's key is what the host put
//! there: `HOST/ID` for an archived answer's index entry.
//!
//! - `ddb-record PEER "KEY" remove=#true` — the item deleted.
//! - `ddb-record PEER "KEY" flip-byte=N` — byte N of its binary value inverted, and the
//!   item written back over it.
//! - `ddb-record PEER "KEY" copy-from="KEY2" [from-peer=PEER2]` — the item's value
//!   replaced by KEY2's (an entry moved to another key), or written from KEY2 of
//!   PEER2's table (a record put back from a copy an operator kept).
//! - `ddb-records PEER "PREFIX" count=N` — the table holds N items whose key begins
//!   with PREFIX.

use base64::Engine as _;
use serde_json::{Value, json};

use super::Step;
use crate::context::Context;
use crate::error::Failure;
use crate::peers::{PeerSpec, dynamodb};
use crate::step::{Node, ParseError};

enum Change {
    Remove,
    FlipByte(u64),
    CopyFrom(String, Option<String>),
}

struct Record {
    peer: String,
    key: String,
    change: Change,
}

struct Records {
    peer: String,
    prefix: String,
    count: u64,
}

fn dynalite_peer(node: &mut Node<'_>, step: &str) -> Result<String, ParseError> {
    let (peer, kind) = node.peer("a dynalite peer")?;
    if kind != "dynalite" {
        return Err(node.error(format!(
            "peer `{peer}` is a {kind} peer; `{step}` reads a dynalite peer's table"
        )));
    }
    Ok(peer)
}

pub fn parse_ddb_record(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let peer = dynalite_peer(node, "ddb-record")?;
    let key = node.argument("a record key, e.g. \"solo/v1\"")?;
    let remove = node.flag("remove")?.unwrap_or(false);
    let flip = node.count("flip-byte")?;
    let copy = node.string("copy-from")?;
    let from_peer = match node.peer_property("from-peer")? {
        Some((_, kind)) if kind != "dynalite" => {
            return Err(node.error(format!(
                "`from-peer` names a {kind} peer; `ddb-record` copies from a dynalite peer's table"
            )));
        }
        Some((name, _)) if copy.is_some() => Some(name),
        Some(_) => return Err(node.error("`from-peer` goes with copy-from=\"KEY\"")),
        None => None,
    };
    let change = match (remove, flip, copy) {
        (true, None, None) => Change::Remove,
        (false, Some(at), None) => Change::FlipByte(at),
        (false, None, Some(from)) => Change::CopyFrom(from, from_peer),
        _ => {
            return Err(node
                .error("`ddb-record` takes one of remove=#true, flip-byte=N, copy-from=\"KEY\""));
        }
    };
    Ok(Box::new(Record { peer, key, change }))
}

pub fn parse_ddb_records(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let peer = dynalite_peer(node, "ddb-records")?;
    let prefix = node.argument("a key prefix, e.g. \"solo/\"")?;
    let count = node
        .count("count")?
        .ok_or_else(|| node.error("`ddb-records` needs count=N"))?;
    Ok(Box::new(Records {
        peer,
        prefix,
        count,
    }))
}

/// The port and table of started dynalite peer `peer`.
fn table(cx: &mut Context<'_>, peer: &str) -> Result<(u16, String), Failure> {
    match cx.peers().spec(peer).cloned() {
        Some(PeerSpec::Dynalite { port, table }) => Ok((port, table)),
        _ => Err(Failure::new(
            format!("peer `{peer}` to be a started dynalite peer"),
            "it is not",
        )),
    }
}

fn call(port: u16, operation: &str, body: &Value) -> Result<Value, Failure> {
    let (status, answer) =
        dynamodb(port, operation, body).map_err(|e| Failure::new("curl to run", e))?;
    if status != 200 {
        return Err(Failure::new(
            format!("{operation} to answer 200"),
            format!("HTTP {status}: {answer}"),
        ));
    }
    Ok(answer)
}

impl Record {
    fn value(&self, port: u16, table: &str, key: &str) -> Result<Vec<u8>, Failure> {
        let answer = call(
            port,
            "GetItem",
            &json!({"TableName": table, "Key": {"k": {"S": key}}, "ConsistentRead": true}),
        )?;
        let encoded = answer["Item"]["v"]["B"].as_str().ok_or_else(|| {
            Failure::new(
                format!("record {key} in table {table}"),
                format!("none: {answer}"),
            )
        })?;
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| Failure::new(format!("record {key}'s value in base64"), e.to_string()))
    }

    fn put(&self, port: u16, table: &str, value: &[u8]) -> Result<(), Failure> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        call(
            port,
            "PutItem",
            &json!({"TableName": table, "Item": {"k": {"S": self.key}, "v": {"B": encoded}}}),
        )
        .map(drop)
    }
}

impl Step for Record {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let (port, table) = table(cx, &self.peer)?;
        let key = &self.key;
        match &self.change {
            Change::Remove => {
                self.value(port, &table, key)?;
                call(
                    port,
                    "DeleteItem",
                    &json!({"TableName": table, "Key": {"k": {"S": key}}}),
                )?;
                cx.say(format_args!("record {key}: deleted from table {table}"));
            }
            Change::FlipByte(at) => {
                let mut value = self.value(port, &table, key)?;
                let Some(byte) = value.get_mut(*at as usize) else {
                    return Err(Failure::new(
                        format!("record {key} to hold a byte {at}"),
                        format!("it holds {} bytes", value.len()),
                    ));
                };
                *byte ^= 0xff;
                self.put(port, &table, &value)?;
                cx.say(format_args!(
                    "record {key}: byte {at} inverted in table {table}"
                ));
            }
            Change::CopyFrom(from, None) => {
                let value = self.value(port, &table, from)?;
                self.put(port, &table, &value)?;
                cx.say(format_args!(
                    "record {key}: replaced in table {table} by {from}'s value"
                ));
            }
            Change::CopyFrom(from, Some(peer)) => {
                let (other_port, other) = self::table(cx, peer)?;
                let value = self.value(other_port, &other, from)?;
                self.put(port, &table, &value)?;
                cx.say(format_args!(
                    "record {key}: written in table {table} from {from} of table {other} (peer {peer})"
                ));
            }
        }
        Ok(())
    }
}

impl Step for Records {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let (port, table) = table(cx, &self.peer)?;
        // One page: a journey's few records.
        let answer = call(
            port,
            "Scan",
            &json!({"TableName": table, "ConsistentRead": true}),
        )?;
        let mut keys: Vec<String> = answer["Items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| item["k"]["S"].as_str())
            .filter(|k| k.starts_with(&self.prefix))
            .map(str::to_owned)
            .collect();
        keys.sort();
        if keys.len() as u64 != self.count {
            return Err(Failure::new(
                format!(
                    "{} record(s) under {} in table {table}",
                    self.count, self.prefix
                ),
                format!("{}: {}", keys.len(), keys.join(" ")),
            ));
        }
        cx.say(format_args!(
            "{} record(s) under {} in table {table}: {}",
            keys.len(),
            self.prefix,
            keys.join(" ")
        ));
        Ok(())
    }
}
