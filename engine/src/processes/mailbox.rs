//! The mailbox a host keeps for others: deposit, fetch, collect.

use crate::limits::{MAILBOX_FETCH_MAX, REQUEST_ID_LENGTH_MAX};

use super::api::{Collect, Deposit, DepositKind, Fetch, Held, MailboxReply};

use super::service::{Processes, be64};
use crate::store::fatal;
use crate::store::keys::Key;

/// What a sealed deposit is bound to: its kind, addressee and id, each length-prefixed.
pub(super) fn binding(kind: DepositKind, to: &str, id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for part in [kind_name(kind), to, id] {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out
}

fn kind_name(kind: DepositKind) -> &'static str {
    match kind {
        DepositKind::Request => "request",
        DepositKind::Outcome => "outcome",
    }
}

/// `TO \0 KIND \0`: the deposits of a kind for `to`, followed by their sequence.
fn mailbox_prefix(to: &str, kind: DepositKind) -> Key {
    Key::text(to).then(kind_name(kind)).sep()
}

/// `TO \0 KIND \0 FROM \0 ID`: one deposit's sequence number.
fn index_key(to: &str, kind: DepositKind, from: &str, id: &str) -> Vec<u8> {
    Key::text(to)
        .then(kind_name(kind))
        .then(from)
        .then(id)
        .bytes()
}

impl Processes {
    /// `deposit` from `from`: kept once, fsynced before the answer.
    pub async fn deposit(&self, from: &str, deposit: Deposit) -> MailboxReply {
        let refused = |reason: String| MailboxReply::Refused { reason };
        if deposit.id.is_empty() || deposit.id.len() > REQUEST_ID_LENGTH_MAX {
            return refused(format!(
                "deposit ids are 1 to REQUEST_ID_LENGTH_MAX ({REQUEST_ID_LENGTH_MAX}) bytes"
            ));
        }
        let index = index_key(&deposit.to, deposit.kind, from, &deposit.id);
        let sequence = {
            let mut state = self.lock();
            if let Some(seq) = self
                .ks
                .mailbox_index
                .get(&index)
                .unwrap_or_else(|e| fatal(&self.dir, "reading the mailbox", e))
                .and_then(|b| be64(&b))
            {
                drop(state);
                self.sync("syncing the mailbox").await;
                return MailboxReply::Deposited {
                    sequence: seq,
                    already: true,
                };
            }
            let sequence = state.next_sequence;
            state.next_sequence += 1;
            let held = Held {
                sequence,
                from: from.to_owned(),
                id: deposit.id.clone(),
                sealed: deposit.sealed,
            };
            let key = mailbox_prefix(&deposit.to, deposit.kind)
                .u64(sequence)
                .bytes();
            let mut write = self.database.batch();
            write.insert(
                &self.ks.mailbox,
                key,
                serde_json::to_vec(&held).expect("deposits serialize"),
            );
            write.insert(&self.ks.mailbox_index, index, sequence.to_be_bytes());
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "storing a deposit", e));
            sequence
        };
        self.sync("syncing a deposit").await;
        MailboxReply::Deposited {
            sequence,
            already: false,
        }
    }

    /// `fetch` by `to`: its deposits of a kind after a sequence number.
    pub fn fetch(&self, to: &str, fetch: &Fetch) -> MailboxReply {
        let prefix = mailbox_prefix(to, fetch.kind);
        let start = prefix.clone().u64(fetch.after.saturating_add(1)).bytes();
        let end = prefix.u64(u64::MAX).bytes();
        let deposits = self
            .ks
            .mailbox
            .range(start..=end)
            .take(MAILBOX_FETCH_MAX)
            .filter_map(|g| g.into_inner().ok())
            .filter_map(|(_, v)| serde_json::from_slice::<Held>(&v).ok())
            .collect();
        MailboxReply::Fetched { deposits }
    }

    /// `collect` by `to`: one deposit of a kind from `from` with an id.
    pub fn collect(&self, to: &str, collect: &Collect) -> MailboxReply {
        let index = index_key(to, collect.kind, &collect.from, &collect.id);
        let deposit = self
            .ks
            .mailbox_index
            .get(&index)
            .unwrap_or_else(|e| fatal(&self.dir, "reading the mailbox", e))
            .and_then(|b| be64(&b))
            .and_then(|seq| {
                let key = mailbox_prefix(to, collect.kind).u64(seq).bytes();
                self.ks.mailbox.get(key).ok().flatten()
            })
            .and_then(|v| serde_json::from_slice::<Held>(&v).ok());
        MailboxReply::Collected { deposit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mailbox_keys_keep_their_bytes() {
        assert_eq!(
            mailbox_prefix("site-b", DepositKind::Request)
                .u64(3)
                .bytes(),
            b"site-b\0request\0\0\0\0\0\0\0\0\x03"
        );
        assert_eq!(
            index_key("site-b", DepositKind::Outcome, "hq", "r1"),
            b"site-b\0outcome\0hq\0r1"
        );
    }
}
