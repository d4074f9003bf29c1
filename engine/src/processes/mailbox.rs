//! The mailbox a host keeps for others: deposit, fetch, collect, forget.
//!
//! A deposit is kept until its addressee says it took it: requests up to a `fetch`'s
//! `after` (the receiver fetches after what it journaled) are dropped by that fetch,
//! outcomes by the caller's `forget` once it journaled them. Its index entry stays, so
//! the same deposit made again (a caller asking again, a receiver answering a request
//! again) is answered `already` and kept no more: nothing dropped comes back for no
//! one to take. An outcome its caller forgot before it was deposited (the wait closed
//! by a proof of no dispatch) is never held: its index entry is written by the forget.

use crate::limits::{
    MAILBOX_FETCH_MAX, MAILBOX_FORGET_MAX, MAILBOX_HELD_MAX, MAILBOX_LONG_POLL_WAIT,
    MAILBOX_PURGE_PER_FETCH_MAX, REQUEST_ID_LENGTH_MAX,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::api::{Collect, Deposit, DepositKind, Fetch, Forget, Held, MailboxReply};

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

/// The `mailbox-index` key of the next deposit's sequence number (`u64` BE). No index
/// key starts with `\0` (a host name is never empty).
pub(super) const NEXT_SEQUENCE_KEY: &[u8] = b"\0next-sequence";

/// The sequence an index entry holds for a deposit its addressee forgot before it was
/// made: never a deposit's (they start at 1), so the deposit, made later, is answered
/// `already` and never held.
const FORGOTTEN_BEFORE_DEPOSIT: u64 = 0;

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
            // A full disk refuses a new deposit before anything is written; one held
            // before is answered above.
            if let Some(reason) = crate::store::usage::full(&self.dir) {
                return refused(reason);
            }
            let sequence = state.next_sequence;
            state.next_sequence += 1;
            state.deposits_held += 1;
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
            // Kept apart from the deposits, which are dropped: a sequence number is
            // never given twice (a fetch's `after` drops what is at or below it).
            write.insert(
                &self.ks.mailbox_index,
                NEXT_SEQUENCE_KEY,
                (sequence + 1).to_be_bytes(),
            );
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "storing a deposit", e));
            sequence
        };
        self.sync("syncing a deposit").await;
        // Wakes the long polls held here: each looks again (it is durable now).
        self.deposits.send_modify(|n| *n = n.wrapping_add(1));
        MailboxReply::Deposited {
            sequence,
            already: false,
        }
    }

    /// `fetch` by `to`: its deposits of a kind after a sequence number; held (a long
    /// poll) while there is none, up to its `wait_ms` and `MAILBOX_LONG_POLL_WAIT`.
    /// Those up to `after` it took: dropped first (at most
    /// `MAILBOX_PURGE_PER_FETCH_MAX`; lazily durable — a drop a crash lost is made by
    /// the next fetch).
    pub async fn fetch(&self, to: &str, fetch: &Fetch) -> MailboxReply {
        self.drop_taken(to, fetch.kind, fetch.after);
        let prefix = mailbox_prefix(to, fetch.kind);
        let start = prefix.clone().u64(fetch.after.saturating_add(1)).bytes();
        let end = prefix.u64(u64::MAX).bytes();
        let look = || {
            let deposits: Vec<Held> = self
                .ks
                .mailbox
                .range(start.clone()..=end.clone())
                .take(MAILBOX_FETCH_MAX)
                .filter_map(|g| g.into_inner().ok())
                .filter_map(|(_, v)| serde_json::from_slice::<Held>(&v).ok())
                .collect();
            (!deposits.is_empty()).then_some(deposits)
        };
        let deposits = hold(&self.deposits, &self.held, fetch.wait_ms, look)
            .await
            .unwrap_or_default();
        MailboxReply::Fetched { deposits }
    }

    /// Drops `to`'s deposits of `kind` up to sequence `after`. Their index entries stay
    /// (see the module's header).
    fn drop_taken(&self, to: &str, kind: DepositKind, after: u64) {
        if after == 0 {
            return;
        }
        let prefix = mailbox_prefix(to, kind);
        let (start, end) = (prefix.clone().u64(0).bytes(), prefix.u64(after).bytes());
        let mut state = self.lock();
        let mut write = self.database.batch();
        let mut dropped = 0;
        for guard in self
            .ks
            .mailbox
            .range(start..=end)
            .take(MAILBOX_PURGE_PER_FETCH_MAX)
        {
            let key = guard
                .key()
                .unwrap_or_else(|e| fatal(&self.dir, "reading the mailbox", e));
            write.remove(&self.ks.mailbox, key);
            dropped += 1;
        }
        self.dropped(&mut state, write, dropped, "dropping fetched deposits");
    }

    /// Commits `write`, which drops `count` deposits, and counts them out.
    fn dropped(
        &self,
        state: &mut super::service::State,
        write: fjall::OwnedWriteBatch,
        count: u64,
        doing: &str,
    ) {
        if count > 0 {
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, doing, e));
            state.deposits_held = state.deposits_held.saturating_sub(count);
        }
    }

    /// `forget` by `to`: drops the deposits it names (it journaled them, or closed
    /// their wait otherwise), durably before the answer; answers how many were held.
    /// Their index entries stay; one not deposited yet gets an entry of its own
    /// ([`FORGOTTEN_BEFORE_DEPOSIT`]), so it is never held when it comes.
    pub async fn forget_deposits(&self, to: &str, forget: &Forget) -> MailboxReply {
        if forget.deposits.len() > MAILBOX_FORGET_MAX {
            return MailboxReply::Refused {
                reason: format!(
                    "a forget names at most MAILBOX_FORGET_MAX ({MAILBOX_FORGET_MAX}) deposits"
                ),
            };
        }
        let held = {
            let mut state = self.lock();
            let mut write = self.database.batch();
            let mut held = 0;
            let mut barred = false;
            for deposit in &forget.deposits {
                let index = index_key(to, forget.kind, &deposit.from, &deposit.id);
                let sequence = self
                    .ks
                    .mailbox_index
                    .get(&index)
                    .unwrap_or_else(|e| fatal(&self.dir, "reading the mailbox", e))
                    .and_then(|b| be64(&b));
                let Some(sequence) = sequence else {
                    write.insert(
                        &self.ks.mailbox_index,
                        index,
                        FORGOTTEN_BEFORE_DEPOSIT.to_be_bytes(),
                    );
                    barred = true;
                    continue;
                };
                let key = mailbox_prefix(to, forget.kind).u64(sequence).bytes();
                if self
                    .ks
                    .mailbox
                    .contains_key(&key)
                    .unwrap_or_else(|e| fatal(&self.dir, "reading the mailbox", e))
                {
                    write.remove(&self.ks.mailbox, key);
                    held += 1;
                }
            }
            if held > 0 {
                self.dropped(&mut state, write, held, "dropping collected deposits");
            } else if barred {
                write
                    .commit()
                    .unwrap_or_else(|e| fatal(&self.dir, "barring forgotten deposits", e));
            }
            (held, barred)
        };
        let (held, barred) = held;
        if held > 0 || barred {
            self.sync("dropping collected deposits").await;
        }
        MailboxReply::Forgotten { deposits: held }
    }

    /// `collect` by `to`: one deposit of a kind from `from` with an id; held (a long
    /// poll) while there is none, as `fetch`.
    pub async fn collect(&self, to: &str, collect: &Collect) -> MailboxReply {
        let index = index_key(to, collect.kind, &collect.from, &collect.id);
        let look = || {
            self.ks
                .mailbox_index
                .get(&index)
                .unwrap_or_else(|e| fatal(&self.dir, "reading the mailbox", e))
                .and_then(|b| be64(&b))
                .and_then(|seq| {
                    let key = mailbox_prefix(to, collect.kind).u64(seq).bytes();
                    self.ks.mailbox.get(key).ok().flatten()
                })
                .and_then(|v| serde_json::from_slice::<Held>(&v).ok())
        };
        let deposit = hold(&self.deposits, &self.held, collect.wait_ms, look).await;
        MailboxReply::Collected { deposit }
    }
}

/// A long poll: `look` now, and again after every deposit counted by `deposits`,
/// until it finds something or `wait_ms` (at most `MAILBOX_LONG_POLL_WAIT`) has
/// passed. At most `MAILBOX_HELD_MAX` calls are held at once (counted by `held`);
/// beyond that, and without `wait_ms`, the first look is the answer.
async fn hold<T>(
    deposits: &watch::Sender<u64>,
    held: &AtomicUsize,
    wait_ms: Option<u64>,
    look: impl Fn() -> Option<T>,
) -> Option<T> {
    // Subscribed before the first look: a deposit made after it wakes this call.
    let mut deposited = deposits.subscribe();
    if let Some(found) = look() {
        return Some(found);
    }
    let wait = Duration::from_millis(wait_ms.unwrap_or(0)).min(MAILBOX_LONG_POLL_WAIT);
    if wait.is_zero() {
        return None;
    }
    let _slot = HeldSlot::take(held)?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, deposited.changed()).await {
            Ok(Ok(())) => {
                deposited.borrow_and_update();
                if let Some(found) = look() {
                    return Some(found);
                }
            }
            // The wait is over (or the mailbox is going away): nothing yet.
            Ok(Err(_)) | Err(_) => return look(),
        }
    }
}

/// One of the `MAILBOX_HELD_MAX` long polls a mailbox host holds; freed when the
/// call ends (answered, or dropped with its connection).
struct HeldSlot<'a>(&'a AtomicUsize);

impl<'a> HeldSlot<'a> {
    fn take(held: &'a AtomicUsize) -> Option<HeldSlot<'a>> {
        held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAILBOX_HELD_MAX).then_some(n + 1)
        })
        .ok()
        .map(|_| HeldSlot(held))
    }
}

impl Drop for HeldSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::super::api::DepositRef;
    use super::*;
    use crate::custody::seal::Sealed;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;
    use std::time::Instant;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_long_poll_answers_at_once_when_something_is_there_or_no_wait_is_asked() {
        runtime().block_on(async {
            let (deposits, held) = (watch::channel(0).0, AtomicUsize::new(0));
            let started = Instant::now();
            assert_eq!(
                hold(&deposits, &held, Some(5_000), || Some(7)).await,
                Some(7)
            );
            assert_eq!(hold(&deposits, &held, None, || None::<u8>).await, None);
            assert_eq!(hold(&deposits, &held, Some(0), || None::<u8>).await, None);
            assert!(started.elapsed() < Duration::from_secs(1));
            assert_eq!(held.load(Ordering::SeqCst), 0);
        });
    }

    #[test]
    fn a_long_poll_is_held_until_a_deposit_makes_it_find_something() {
        runtime().block_on(async {
            let deposits = Arc::new(watch::channel(0u64).0);
            let held = AtomicUsize::new(0);
            let stored = Arc::new(AtomicU64::new(0));
            let (d, s) = (deposits.clone(), stored.clone());
            let depositor = tokio::spawn(async move {
                // A deposit that is not the one looked for wakes the poll, which
                // looks again and keeps waiting.
                tokio::time::sleep(Duration::from_millis(50)).await;
                d.send_modify(|n| *n += 1);
                tokio::time::sleep(Duration::from_millis(50)).await;
                s.store(2, Ordering::SeqCst);
                d.send_modify(|n| *n += 1);
            });
            let started = Instant::now();
            let found = hold(&deposits, &held, Some(5_000), || {
                (stored.load(Ordering::SeqCst) == 2).then_some("outcome")
            })
            .await;
            let took = started.elapsed();
            assert_eq!(found, Some("outcome"));
            assert!(took >= Duration::from_millis(100), "{took:?}");
            assert!(took < Duration::from_secs(4), "{took:?}");
            assert_eq!(held.load(Ordering::SeqCst), 0, "the slot is freed");
            depositor.await.unwrap();
        });
    }

    #[test]
    fn a_long_poll_ends_with_its_wait_and_beyond_the_held_limit_answers_at_once() {
        runtime().block_on(async {
            let deposits = watch::channel(0u64).0;
            let held = AtomicUsize::new(0);
            let started = Instant::now();
            assert_eq!(hold(&deposits, &held, Some(150), || None::<u8>).await, None);
            let took = started.elapsed();
            assert!(took >= Duration::from_millis(150), "{took:?}");
            assert!(took < MAILBOX_LONG_POLL_WAIT, "{took:?}");
            // Every slot taken: the next poll is not held.
            held.store(MAILBOX_HELD_MAX, Ordering::SeqCst);
            let started = Instant::now();
            assert_eq!(
                hold(&deposits, &held, Some(5_000), || None::<u8>).await,
                None
            );
            assert!(started.elapsed() < Duration::from_secs(1));
            assert_eq!(held.load(Ordering::SeqCst), MAILBOX_HELD_MAX);
        });
    }

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

    /// A forget that names an outcome not deposited yet (its wait closed by a proof of
    /// no dispatch) bars it: deposited later, it is `already` and never held; another
    /// outcome is held as before.
    #[test]
    fn an_outcome_forgotten_before_it_is_deposited_is_never_held() {
        let (dir, durable, _) = super::super::open::tests::store("mailbox-bar");
        crate::custody::create(&dir).unwrap();
        let custody = crate::custody::verify(&dir).unwrap();
        let processes = Processes::open(
            &durable,
            &dir,
            "box",
            custody,
            crate::store::Failpoints::default(),
            crate::store::shelf::Retention::default(),
        )
        .unwrap();
        let runtime = runtime();
        let outcome = |id: &str| Deposit {
            to: "hq".to_owned(),
            kind: DepositKind::Outcome,
            id: id.to_owned(),
            sealed: Sealed {
                enc: [1; 32],
                seq: None,
                ciphertext: vec![2; 16],
            },
        };
        let fetch = Fetch {
            kind: DepositKind::Outcome,
            after: 0,
            wait_ms: None,
        };
        runtime.block_on(async {
            let forget = Forget {
                kind: DepositKind::Outcome,
                deposits: vec![DepositRef {
                    from: "site".to_owned(),
                    id: "c4".to_owned(),
                }],
            };
            assert_eq!(
                processes.forget_deposits("hq", &forget).await,
                MailboxReply::Forgotten { deposits: 0 }
            );
            assert!(matches!(
                processes.deposit("site", outcome("c4")).await,
                MailboxReply::Deposited { already: true, .. }
            ));
            assert_eq!(
                processes.fetch("hq", &fetch).await,
                MailboxReply::Fetched {
                    deposits: Vec::new()
                }
            );
            assert_eq!(processes.lock().deposits_held, 0);
            // Another outcome is held, and forgetting c4 again changes nothing.
            assert!(matches!(
                processes.deposit("site", outcome("c5")).await,
                MailboxReply::Deposited { already: false, .. }
            ));
            assert_eq!(
                processes.forget_deposits("hq", &forget).await,
                MailboxReply::Forgotten { deposits: 0 }
            );
            match processes.fetch("hq", &fetch).await {
                MailboxReply::Fetched { deposits } => {
                    assert_eq!(deposits.len(), 1);
                    assert_eq!(deposits[0].id, "c5");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(processes.lock().deposits_held, 1);
        });
        drop(processes);
        drop(durable);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The grants' issues are kept in memory (a mailbox run reads them without a
    /// scan): each grant's newest issue, found by its caller, its mailbox listed, and
    /// the same after the store is opened again.
    #[test]
    fn grant_issues_are_found_by_caller_and_mailbox_before_and_after_a_reopen() {
        use super::super::api::{GrantIssue, MailboxAt};
        let (dir, durable, _) = super::super::open::tests::store("mailbox-issues");
        crate::custody::create(&dir).unwrap();
        let open = || {
            Processes::open(
                &durable,
                &dir,
                "site",
                crate::custody::verify(&dir).unwrap(),
                crate::store::Failpoints::default(),
                crate::store::shelf::Retention::default(),
            )
            .unwrap()
        };
        let processes = open();
        let keys = processes.custody.manifest();
        let at = |host: &str| MailboxAt {
            host: host.to_owned(),
            address: "127.0.0.1:1".to_owned(),
            membership: "plant".to_owned(),
        };
        let issue =
            |name: &str, caller: &str, before: u64, mailbox: Option<MailboxAt>| GrantIssue {
                name: name.to_owned(),
                caller: caller.to_owned(),
                units: 5,
                allocated_before: before,
                caller_keys: keys.clone(),
                mailbox,
                membership: None,
            };
        for one in [
            issue("g-hq", "hq", 0, None),
            issue("g-edge", "edge", 0, Some(at("box-a"))),
            // A newer issue of the same grant names another mailbox.
            issue("g-edge", "edge", 5, Some(at("box-b"))),
        ] {
            let mut state = processes.lock();
            let mut write = processes.database.batch();
            processes.issue(&mut state, &one, &mut write).unwrap();
            write.commit().unwrap();
        }
        let check = |processes: &Processes| {
            assert_eq!(processes.issue_of_caller("hq").unwrap().name, "g-hq");
            let edge = processes.issue_of_caller("edge").unwrap();
            assert_eq!((edge.name.as_str(), edge.allocated_before), ("g-edge", 5));
            assert!(processes.issue_of_caller("nobody").is_none());
            let mailboxes = processes.mailboxes();
            assert_eq!(mailboxes.keys().collect::<Vec<_>>(), ["box-b"]);
            assert_eq!(mailboxes["box-b"], at("box-b"));
        };
        check(&processes);
        drop(processes);
        check(&open());
        drop(durable);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
