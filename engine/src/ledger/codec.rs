//! The byte layout of one journal record (docs/ledger.md): a batch's time and
//! operations in a compact binary form (no per-transfer JSON), or a definition change.
//! Answers are not stored: the machine recomputes them, identically, on replay.
//!
//! ```text
//! record  = kind:u8 …
//! batch   = 1 now_ms:u64le count:u32le (id:str body)*
//! install = 2 json(LedgerDefinition)
//! open    = 3 json(AccountDefinition)
//! retire  = 4 account:str
//! str     = len:u16le utf-8
//! body    = 1 debit:str credit:str amount:u128le currency:str pending:u8 timeout:(0 | 1 s:u64le)
//!         | 2 pending_id:str amount:(0 | 1 u128le)
//!         | 3 pending_id:str
//! ```
//!
//! An id's settled answer in the ledger's id index (checkpoint.rs), as compact:
//! ```text
//! entry   = body_len:u16le body refused:(0 | 1 str) amount:(0 | 1 u128le)
//! ```

use super::api::{AccountDefinition, LedgerDefinition, LedgerOp};

/// One journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Batch { now_ms: u64, ops: Vec<LedgerOp> },
    Install(LedgerDefinition),
    Open(AccountDefinition),
    Retire(String),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let len = u16::try_from(s.len()).expect("ids and names are bounded far below 64 KiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub fn put_body(out: &mut Vec<u8>, op: &LedgerOp) {
    match op {
        LedgerOp::Transfer {
            debit,
            credit,
            amount,
            currency,
            pending,
            timeout_s,
            ..
        } => {
            out.push(1);
            put_str(out, debit);
            put_str(out, credit);
            out.extend_from_slice(&amount.to_le_bytes());
            put_str(out, currency);
            out.push(u8::from(*pending));
            match timeout_s {
                None => out.push(0),
                Some(s) => {
                    out.push(1);
                    out.extend_from_slice(&s.to_le_bytes());
                }
            }
        }
        LedgerOp::Post {
            pending_id, amount, ..
        } => {
            out.push(2);
            put_str(out, pending_id);
            match amount {
                None => out.push(0),
                Some(a) => {
                    out.push(1);
                    out.extend_from_slice(&a.to_le_bytes());
                }
            }
        }
        LedgerOp::Void { pending_id, .. } => {
            out.push(3);
            put_str(out, pending_id);
        }
    }
}

/// A batch's record, from borrowed operations.
pub fn encode_batch(now_ms: u64, ops: &[LedgerOp]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + ops.len() * 64);
    out.push(1);
    out.extend_from_slice(&now_ms.to_le_bytes());
    let count = u32::try_from(ops.len()).expect("batches are bounded");
    out.extend_from_slice(&count.to_le_bytes());
    for op in ops {
        put_str(&mut out, op.id());
        put_body(&mut out, op);
    }
    out
}

pub fn encode(record: &Record) -> Vec<u8> {
    match record {
        Record::Batch { now_ms, ops } => encode_batch(*now_ms, ops),
        Record::Install(definition) => {
            let mut out = vec![2];
            out.extend(serde_json::to_vec(definition).expect("definitions serialize"));
            out
        }
        Record::Open(account) => {
            let mut out = vec![3];
            out.extend(serde_json::to_vec(account).expect("definitions serialize"));
            out
        }
        Record::Retire(account) => {
            let mut out = vec![4];
            put_str(&mut out, account);
            out
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.bytes.len() < n {
            return Err("a journal record ends early".to_owned());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn u128(&mut self) -> Result<u128, String> {
        Ok(u128::from_le_bytes(
            self.take(16)?.try_into().expect("16 bytes"),
        ))
    }

    fn str(&mut self) -> Result<String, String> {
        let len = u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes"));
        String::from_utf8(self.take(len.into())?.to_vec())
            .map_err(|_| "a journal record holds a name that is not UTF-8".to_owned())
    }

    fn flag(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("a journal record holds flag byte {other}")),
        }
    }

    fn op(&mut self) -> Result<LedgerOp, String> {
        let id = self.str()?;
        Ok(match self.u8()? {
            1 => LedgerOp::Transfer {
                id,
                debit: self.str()?,
                credit: self.str()?,
                amount: self.u128()?,
                currency: self.str()?,
                pending: self.flag()?,
                timeout_s: if self.flag()? {
                    Some(self.u64()?)
                } else {
                    None
                },
            },
            2 => LedgerOp::Post {
                id,
                pending_id: self.str()?,
                amount: if self.flag()? {
                    Some(self.u128()?)
                } else {
                    None
                },
            },
            3 => LedgerOp::Void {
                id,
                pending_id: self.str()?,
            },
            other => return Err(format!("a journal record holds operation kind {other}")),
        })
    }
}

pub fn decode(bytes: &[u8]) -> Result<Record, String> {
    let mut r = Reader { bytes };
    let record = match r.u8()? {
        1 => {
            let now_ms = r.u64()?;
            let count = u32::from_le_bytes(r.take(4)?.try_into().expect("4 bytes"));
            let mut ops = Vec::with_capacity(count.min(1 << 16) as usize);
            for _ in 0..count {
                ops.push(r.op()?);
            }
            Record::Batch { now_ms, ops }
        }
        2 => {
            return serde_json::from_slice(r.bytes)
                .map(Record::Install)
                .map_err(|e| format!("a ledger definition does not decode: {e}"));
        }
        3 => {
            return serde_json::from_slice(r.bytes)
                .map(Record::Open)
                .map_err(|e| format!("an account definition does not decode: {e}"));
        }
        4 => Record::Retire(r.str()?),
        other => return Err(format!("unknown journal record kind {other}")),
    };
    if !r.bytes.is_empty() {
        return Err("a journal record has trailing bytes".to_owned());
    }
    Ok(record)
}

/// An id's settled answer, for the id index.
pub fn encode_entry(entry: &super::machine::Entry) -> Vec<u8> {
    let (body, refused, amount) = entry.parts();
    let mut out = Vec::with_capacity(body.len() + 24);
    let len = u16::try_from(body.len()).expect("an operation's body is bounded far below 64 KiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    match refused {
        None => out.push(0),
        Some(reason) => {
            out.push(1);
            put_str(&mut out, reason);
        }
    }
    match amount {
        None => out.push(0),
        Some(a) => {
            out.push(1);
            out.extend_from_slice(&a.to_le_bytes());
        }
    }
    out
}

/// Decodes an id index entry; why not, when it is cut short or has trailing bytes.
pub fn decode_entry(bytes: &[u8]) -> Result<super::machine::Entry, String> {
    let mut r = Reader { bytes };
    let len = u16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes"));
    let body: Box<[u8]> = r.take(len.into())?.into();
    let refused = if r.flag()? {
        Some(r.str()?.into_boxed_str())
    } else {
        None
    };
    let amount = if r.flag()? { Some(r.u128()?) } else { None };
    if !r.bytes.is_empty() {
        return Err("an id index entry has trailing bytes".to_owned());
    }
    Ok(super::machine::Entry::new(body, refused, amount))
}
