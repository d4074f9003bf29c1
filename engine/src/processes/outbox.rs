//! The receiver's side of mailboxes: the fetcher pass and the outcomes owed to callers.

use crate::limits::{MAILBOX_CALL_TIMEOUT, MAILBOX_LONG_POLL_WAIT, OUTBOX_PASS_MAX};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use fjall::OwnedWriteBatch;

use super::api::{
    Deposit, DepositKind, Fetch, Held, MailboxAt, MailboxReply, RunOutcome, RunView, SignedRequest,
};
use crate::transport::{PeerClient, PeerError};

use crate::custody::seal;

use super::mailbox::binding;
use super::receiver::Admitted;
use super::service::{OUTCOME_INFO, POLL_INTERVAL, Processes, REQUEST_INFO, be64};
use crate::store::fatal;

impl Processes {
    /// Keeps one long-poll fetcher running per mailbox a grant names (it runs the
    /// requests it fetches and deposits their outcomes sealed to their callers), and
    /// deposits owed outcomes every `POLL_INTERVAL`.
    pub(super) async fn fetch_loop(self: Arc<Self>) {
        loop {
            tokio::time::sleep(POLL_INTERVAL).await;
            for (name, at) in self.mailboxes() {
                let new = self
                    .fetching
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone());
                if new {
                    let me = self.clone();
                    tokio::spawn(async move { me.fetch_mailbox(name, at).await });
                }
            }
            self.flush_outbox().await;
        }
    }

    /// The mailboxes the grants this host issued name.
    pub(super) fn mailboxes(&self) -> BTreeMap<String, MailboxAt> {
        self.lock()
            .issues
            .values()
            .filter_map(|i| i.mailbox.clone())
            .map(|m| (m.host.clone(), m))
            .collect()
    }

    /// Fetches from one mailbox, long poll after long poll, while a grant names it
    /// at that address (then the fetch loop starts another for its new address).
    async fn fetch_mailbox(self: Arc<Self>, name: String, at: MailboxAt) {
        while self.mailboxes().get(&name) == Some(&at) {
            let asked = Instant::now();
            let fetched = match self.client(&at.membership, &name, &at.address) {
                Ok(client) => self.fetch_from(&client, &at).await,
                Err(e) => Err(e),
            };
            match fetched {
                // Held for the whole wait, or found something: ask again at once.
                Ok(found) if found > 0 || asked.elapsed() >= MAILBOX_LONG_POLL_WAIT / 2 => {}
                // Answered at once with nothing (a mailbox holding MAILBOX_HELD_MAX
                // calls already), refused or unreachable: pause first.
                Ok(_) | Err(PeerError::Lost(_)) => tokio::time::sleep(POLL_INTERVAL).await,
                Err(PeerError::NotSent(_)) => {
                    self.forget(&at.membership, &name);
                    tokio::time::sleep(POLL_INTERVAL).await;
                }
            }
        }
        self.fetching
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
    }

    /// A terminal outcome of a mailbox run is owed to its caller's mailbox until a
    /// deposit is acknowledged: recorded in the outcome's own write, so neither a
    /// crash nor an unreachable mailbox loses it.
    pub(super) fn owe_deposit(&self, view: &RunView, write: &mut OwnedWriteBatch) {
        if let Some(mailbox) = view.via.strip_prefix("mailbox:")
            && view.outcome != RunOutcome::Unknown
        {
            write.insert(&self.ks.outbox, view.request.as_str(), mailbox);
        }
    }

    pub(super) fn deposited(&self, request: &str) {
        // Lazily durable: a lost removal only deposits again, answered "already".
        self.ks
            .outbox
            .remove(request)
            .unwrap_or_else(|e| fatal(&self.dir, "clearing a deposited outcome", e));
    }

    /// Deposits owed outcomes (a bounded number per pass).
    pub(super) async fn flush_outbox(&self) {
        let owed: Vec<(String, String)> = self
            .ks
            .outbox
            .iter()
            .filter_map(|g| g.into_inner().ok())
            .take(OUTBOX_PASS_MAX)
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect();
        for (request, mailbox) in owed {
            if self
                .depositing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&request)
            {
                continue;
            }
            if let Ok(Some(record)) = self.record(&request)
                && self.deposit_outcome(&mailbox, &record.view).await
            {
                self.deposited(&request);
            }
        }
    }

    /// One long-poll fetch from a mailbox: how many deposits it brought.
    pub(super) async fn fetch_from(
        self: &Arc<Self>,
        client: &PeerClient,
        at: &MailboxAt,
    ) -> Result<usize, PeerError> {
        let after = self
            .ks
            .cursor
            .get(&at.host)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a mailbox cursor", e))
            .and_then(|b| be64(&b))
            .unwrap_or(0);
        let reply: MailboxReply = client
            .post(
                &format!("/mailbox/{}/fetch", at.membership),
                &Fetch {
                    kind: DepositKind::Request,
                    after,
                    wait_ms: Some(MAILBOX_LONG_POLL_WAIT.as_millis() as u64),
                },
                MAILBOX_CALL_TIMEOUT,
            )
            .await?;
        let MailboxReply::Fetched { deposits } = reply else {
            return Ok(0);
        };
        let found = deposits.len();
        let mut last = after;
        for held in deposits {
            last = last.max(held.sequence);
            match self.open_request(&held, &at.host) {
                Ok(signed) => {
                    let via = format!("mailbox:{}", at.host);
                    match self.admit(&signed.caller, &at.membership, &via, &signed.request) {
                        Err(reason) => {
                            tracing::warn!(
                                mailbox = at.host,
                                request = held.id,
                                reason,
                                "mailbox request refused"
                            );
                        }
                        Ok(admitted) => {
                            self.sync("journaling a run").await;
                            let me = self.clone();
                            let mailbox = at.host.clone();
                            tokio::spawn(async move {
                                let view = match admitted {
                                    Admitted::Done(view) => view,
                                    Admitted::Running(mut w) => {
                                        let _ = w.wait_for(|d| *d).await;
                                        match me.record(&signed.request.request) {
                                            Ok(Some(r)) => r.view,
                                            _ => return,
                                        }
                                    }
                                    Admitted::Dispatch(view, process, done) => {
                                        me.execute(view, process, done).await
                                    }
                                };
                                if view.outcome != RunOutcome::Unknown {
                                    me.depositing
                                        .lock()
                                        .unwrap_or_else(|p| p.into_inner())
                                        .insert(view.request.clone());
                                    if me.deposit_outcome(&mailbox, &view).await {
                                        me.deposited(&view.request);
                                    }
                                    me.depositing
                                        .lock()
                                        .unwrap_or_else(|p| p.into_inner())
                                        .remove(&view.request);
                                }
                            });
                        }
                    }
                }
                Err(reason) => tracing::warn!(
                    mailbox = at.host,
                    deposit = held.id,
                    from = held.from,
                    reason,
                    "mailbox deposit refused"
                ),
            }
        }
        if last > after {
            // Every fetched request is journaled (or refused): lazily durable, a lost
            // cursor only fetches them again, answered from the journal.
            self.ks
                .cursor
                .insert(&at.host, last.to_be_bytes())
                .unwrap_or_else(|e| fatal(&self.dir, "recording a mailbox cursor", e));
        }
        Ok(found)
    }

    /// Opens a sealed request and checks its caller's signature with the keys its
    /// grant recorded; the depositor must be the caller.
    pub(super) fn open_request(&self, held: &Held, mailbox: &str) -> Result<SignedRequest, String> {
        let plain = self
            .custody
            .open_sealed(|secret| {
                seal::open(
                    secret,
                    REQUEST_INFO,
                    &binding(DepositKind::Request, &self.host, &held.id),
                    &held.sealed,
                )
            })
            .map_err(|e| e.to_string())?;
        let signed: SignedRequest =
            serde_json::from_slice(&plain).map_err(|e| format!("does not decode: {e}"))?;
        if signed.caller != held.from
            || signed.receiver != self.host
            || signed.request.request != held.id
        {
            return Err("its signed caller, receiver or id does not match the deposit".to_owned());
        }
        if signed.mailbox != mailbox {
            return Err(format!("it names mailbox `{}`", signed.mailbox));
        }
        let issue = self
            .issue_of_caller(&signed.caller)
            .ok_or_else(|| format!("no grant of this host names `{}`", signed.caller))?;
        if !crate::custody::verify_hex_signature(
            &self.custody.peer_keys(&signed.caller, &issue.caller_keys),
            signed.generation,
            &SignedRequest::signed_bytes(
                &signed.caller,
                &signed.receiver,
                &signed.mailbox,
                &signed.request,
            ),
            &signed.signature,
        ) {
            return Err("the caller's signature does not verify".to_owned());
        }
        Ok(signed)
    }

    /// One attempt to deposit a run's signed outcome, sealed to its caller, at
    /// `mailbox`: true once the mailbox holds it.
    pub(super) async fn deposit_outcome(&self, mailbox: &str, view: &RunView) -> bool {
        let Some(issue) = self.issue_of_caller(&view.caller) else {
            return false;
        };
        let Some(at) = issue.mailbox.filter(|m| m.host == mailbox) else {
            return false;
        };
        let Some(key) =
            crate::custody::mail_key_of(&self.custody.peer_keys(&view.caller, &issue.caller_keys))
        else {
            return false;
        };
        let plain = serde_json::to_vec(view).expect("runs serialize");
        let Ok(sealed) = seal::seal(
            &key,
            OUTCOME_INFO,
            &binding(DepositKind::Outcome, &view.caller, &view.request),
            &plain,
        ) else {
            return false;
        };
        let deposit = Deposit {
            to: view.caller.clone(),
            kind: DepositKind::Outcome,
            id: view.request.clone(),
            sealed,
        };
        let Ok(client) = self.client(&at.membership, &at.host, &at.address) else {
            return false;
        };
        match client
            .post::<_, MailboxReply>(
                &format!("/mailbox/{}/deposit", at.membership),
                &deposit,
                MAILBOX_CALL_TIMEOUT,
            )
            .await
        {
            Ok(MailboxReply::Deposited { .. }) => true,
            Err(PeerError::NotSent(_)) => {
                self.forget(&at.membership, &at.host);
                false
            }
            _ => false,
        }
    }
}
