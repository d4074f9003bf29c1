//! The caller: its wait journal, asking the receiver (direct or through a mailbox), resuming open waits.

use crate::limits::{
    MAILBOX_CALL_TIMEOUT, MAILBOX_FORGET_MAX, MAILBOX_LONG_POLL_WAIT, WAIT_POLL_MAX, WAITS_PASS_MAX,
};
use crate::store::keys::Key;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::api::{
    Collect, Deposit, DepositKind, DepositRef, Forget, MailboxReply, Peer, ProcessReply,
    RunOutcome, RunRequest, RunView, ServiceReply, SignedRequest, StatusQuery,
};
use super::runs::RunUnits;
use crate::transport::PeerError;

use crate::custody::seal::{self, Sealed};

use super::mailbox::binding;
use super::service::{OUTCOME_INFO, POLL_INTERVAL, Processes, REQUEST_INFO, check_request};
use crate::store::{Failpoint, fatal};

/// What the caller keeps per request id it sent.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct WaitRecord {
    pub(super) request: RunRequest,
    pub(super) receiver: Peer,
    pub(super) via: Option<Peer>,
    pub(super) membership: String,
    /// The receiver's signed terminal outcome, once learned.
    pub(super) run: Option<RunView>,
    /// The receiver's signed proof that it never dispatched the request (`process
    /// cancel`), with `run` its barred record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) no_dispatch: Option<super::cancel::NoDispatch>,
    /// When it was closed with a terminal outcome, Unix ms (`archive.rs`: past the hot
    /// window it moves to the archive). None: open, or closed before this was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) answered_ms: Option<u64>,
}

/// A receiver this host called, as its newest wait names it (`process-called`): the
/// owners a wallet observation may ask, kept when the waits move to the archive.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Called {
    pub(super) receiver: Peer,
    pub(super) membership: String,
}

/// Notes in `write` that `record`'s receiver was called.
pub(super) fn call_noted(
    called: &fjall::Keyspace,
    write: &mut fjall::OwnedWriteBatch,
    record: &WaitRecord,
) {
    let noted = Called {
        receiver: record.receiver.clone(),
        membership: record.membership.clone(),
    };
    write.insert(
        called,
        record.receiver.name.as_str(),
        serde_json::to_vec(&noted).expect("peers serialize"),
    );
}

impl WaitRecord {
    pub(super) fn via(&self) -> String {
        self.via
            .as_ref()
            .map_or("direct".to_owned(), |m| format!("mailbox:{}", m.name))
    }

    pub(super) fn view(&self, host: &str, detail: &str) -> RunView {
        match &self.run {
            Some(run) => RunView {
                role: "caller".to_owned(),
                ..run.clone()
            },
            None => RunView {
                request: self.request.request.clone(),
                process: self.request.process.clone(),
                arguments: self.request.arguments.clone(),
                caller: host.to_owned(),
                receiver: self.receiver.name.clone(),
                via: self.via(),
                role: "caller".to_owned(),
                outcome: RunOutcome::Unknown,
                result: None,
                detail: detail.to_owned(),
                grant: None,
                units: RunUnits::Untold,
                signature: None,
                archived: false,
            },
        }
    }
}

impl Processes {
    /// Journals the receiver's terminal outcome in the wait journal (once): `record`
    /// is the wait as journaled, without an outcome.
    pub(super) async fn learned(&self, record: &WaitRecord, run: &RunView) {
        let request = record.request.request.as_str();
        {
            let _waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
            // The open waits are exactly the journaled waits without an outcome (kept
            // under this lock): taken out here, the outcome is journaled once, and no
            // pass of `resume_waits` asks about it again (after a crash before the
            // fsync, the wait is open again and asked again).
            if !self
                .open_waits
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(request)
            {
                return;
            }
            let mut learned = WaitRecord {
                // The caller's own journal: not read from an archive here.
                run: Some(RunView {
                    archived: false,
                    ..run.clone()
                }),
                ..record.clone()
            };
            let mut write = self.database.batch();
            self.journal_wait(&mut write, &mut learned);
            self.note_forget(&mut write, record);
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "journaling an outcome learned", e));
        }
        self.sync("syncing a wait").await;
    }

    /// Checks a receiver's answer: it is the run asked for, and a terminal outcome
    /// carries the receiver's signature.
    pub(super) fn check_answer(&self, record: &WaitRecord, run: &RunView) -> Result<(), String> {
        let caller = self.host.as_str();
        if run.request != record.request.request
            || run.process != record.request.process
            || run.arguments != record.request.arguments
            || run.caller != caller
            || run.receiver != record.receiver.name
        {
            return Err("the receiver's answer is about another request".to_owned());
        }
        if run.outcome != RunOutcome::Unknown
            && !run.verify(
                &self
                    .custody
                    .peer_keys(&record.receiver.name, &record.receiver.keys),
            )
        {
            return Err("the receiver's signature on the outcome does not verify".to_owned());
        }
        Ok(())
    }

    /// One attempt to learn the outcome: direct (`run`, or `status` when `ask_only`),
    /// or through the mailbox (deposit once, then collect).
    pub(super) async fn ask(
        &self,
        record: &WaitRecord,
        ask_only: bool,
        wait: Duration,
    ) -> Result<RunView, String> {
        match &record.via {
            None => {
                let client = self
                    .client(
                        &record.membership,
                        &record.receiver.name,
                        &record.receiver.address,
                    )
                    .map_err(|e| e.to_string())?;
                let reply: ServiceReply = if ask_only {
                    client
                        .post(
                            &format!("/process/{}/status", record.membership),
                            &StatusQuery {
                                request: record.request.request.clone(),
                            },
                            Duration::from_secs(10),
                        )
                        .await
                } else {
                    client
                        .post(
                            &format!("/process/{}/run", record.membership),
                            &record.request,
                            wait,
                        )
                        .await
                }
                .map_err(|e| match e {
                    PeerError::NotSent(e) => {
                        self.forget(&record.membership, &record.receiver.name);
                        format!("the request was not sent: {e}")
                    }
                    PeerError::Lost(e) => format!("the reply was lost ({e})"),
                })?;
                match reply {
                    ServiceReply::Run { run } | ServiceReply::Cancelled { run, .. } => {
                        self.check_answer(record, &run)?;
                        Ok(run)
                    }
                    ServiceReply::Absent { .. } => {
                        Err("the receiver holds no such request yet".to_owned())
                    }
                    ServiceReply::Refused { reason } => Err(format!("refused: {reason}")),
                    ServiceReply::Surrendered { .. } => {
                        Err("the receiver answered with a surrender".to_owned())
                    }
                }
            }
            Some(mailbox) => {
                let client = self
                    .client(&record.membership, &mailbox.name, &mailbox.address)
                    .map_err(|e| e.to_string())?;
                if !ask_only {
                    let deposit = self.seal_request(record, &mailbox.name)?;
                    let reply: MailboxReply = client
                        .post(
                            &format!("/mailbox/{}/deposit", record.membership),
                            &deposit,
                            MAILBOX_CALL_TIMEOUT,
                        )
                        .await
                        .map_err(|e| format!("depositing the request: {e}"))?;
                    if let MailboxReply::Refused { reason } = reply {
                        return Err(format!("the mailbox refused the request: {reason}"));
                    }
                }
                let deadline = Instant::now() + wait;
                let mut pause = POLL_INTERVAL / 4;
                loop {
                    // A long poll: the mailbox holds the collect until the outcome is
                    // deposited or the hold (at most MAILBOX_LONG_POLL_WAIT) ends.
                    let hold = deadline
                        .saturating_duration_since(Instant::now())
                        .min(MAILBOX_LONG_POLL_WAIT);
                    let asked = Instant::now();
                    let reply: Result<MailboxReply, _> = client
                        .post(
                            &format!("/mailbox/{}/collect", record.membership),
                            &Collect {
                                kind: DepositKind::Outcome,
                                from: record.receiver.name.clone(),
                                id: record.request.request.clone(),
                                wait_ms: Some(hold.as_millis() as u64),
                            },
                            MAILBOX_CALL_TIMEOUT,
                        )
                        .await;
                    if let Ok(MailboxReply::Collected {
                        deposit: Some(held),
                    }) = reply
                    {
                        let plain = self
                            .custody
                            .open_sealed(|secret| {
                                seal::open(
                                    secret,
                                    OUTCOME_INFO,
                                    &binding(DepositKind::Outcome, &self.host, &held.id),
                                    &held.sealed,
                                )
                            })
                            .map_err(|e| format!("the outcome does not open: {e}"))?;
                        let run: RunView = serde_json::from_slice(&plain)
                            .map_err(|e| format!("the outcome does not decode: {e}"))?;
                        self.check_answer(record, &run)?;
                        return Ok(run);
                    }
                    if Instant::now() + pause > deadline {
                        return Err("no outcome in the mailbox yet".to_owned());
                    }
                    // Answered before the hold ended without the outcome (a mailbox
                    // holding MAILBOX_HELD_MAX calls already, an error): pause first,
                    // at most POLL_INTERVAL while the user waits.
                    if asked.elapsed() < hold {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(POLL_INTERVAL);
                    }
                }
            }
        }
    }

    pub(super) fn seal_request(
        &self,
        record: &WaitRecord,
        mailbox: &str,
    ) -> Result<Deposit, String> {
        let bytes = SignedRequest::signed_bytes(
            &self.host,
            &record.receiver.name,
            mailbox,
            &record.request,
        );
        let (generation, signature) = self.custody.sign_hex(&bytes);
        let signed = SignedRequest {
            caller: self.host.clone(),
            receiver: record.receiver.name.clone(),
            mailbox: mailbox.to_owned(),
            request: record.request.clone(),
            generation,
            signature,
        };
        let key = crate::custody::mail_key_of(
            &self
                .custody
                .peer_keys(&record.receiver.name, &record.receiver.keys),
        )
        .ok_or_else(|| format!("`{}` names no mail key", record.receiver.name))?;
        let sealed: Sealed = seal::seal(
            &key,
            REQUEST_INFO,
            &binding(
                DepositKind::Request,
                &record.receiver.name,
                &record.request.request,
            ),
            &serde_json::to_vec(&signed).expect("requests serialize"),
        )
        .map_err(|e| e.to_string())?;
        Ok(Deposit {
            to: record.receiver.name.clone(),
            kind: DepositKind::Request,
            id: record.request.request.clone(),
            sealed,
        })
    }

    /// `run` as the caller: journal the wait, send (or ask again), journal the outcome.
    pub(super) async fn run(
        &self,
        request: RunRequest,
        receiver: Peer,
        via: Option<Peer>,
        membership: String,
        wait: Duration,
    ) -> ProcessReply {
        if let Err(reason) = check_request(&request) {
            return ProcessReply::Refused { reason };
        }
        if receiver.name == self.host {
            return ProcessReply::Refused {
                reason: format!("host `{}` cannot call itself", self.host),
            };
        }
        let fresh = WaitRecord {
            request,
            receiver,
            via,
            membership,
            run: None,
            no_dispatch: None,
            answered_ms: None,
        };
        let (record, first) = {
            let _waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
            let held = match self.wait_record(&fresh.request.request) {
                Ok(held) => held,
                // Known and not answerable (expired, unreadable): never sent again.
                Err(reason) => return ProcessReply::Refused { reason },
            };
            match held {
                Some(held) => {
                    if held.request != fresh.request
                        || held.receiver.name != fresh.receiver.name
                        || held.via.as_ref().map(|v| &v.name) != fresh.via.as_ref().map(|v| &v.name)
                    {
                        return ProcessReply::Refused {
                            reason: format!(
                                "request id `{}` was already used for {} at `{}` ({}); its original outcome stands",
                                held.request.request,
                                held.request.process,
                                held.receiver.name,
                                held.via()
                            ),
                        };
                    }
                    (held, false)
                }
                None => {
                    // A full disk refuses a new run before its wait is journaled.
                    if let Some(reason) = crate::store::usage::full(&self.dir) {
                        return ProcessReply::Refused { reason };
                    }
                    let mut fresh = fresh;
                    let mut write = self.database.batch();
                    self.journal_wait(&mut write, &mut fresh);
                    call_noted(&self.ks.called, &mut write, &fresh);
                    write
                        .commit()
                        .unwrap_or_else(|e| fatal(&self.dir, "journaling a wait", e));
                    self.open_waits
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(fresh.request.request.clone());
                    (fresh, true)
                }
            }
        };
        if let Some(run) = &record.run {
            return ProcessReply::Ran {
                run: RunView {
                    role: "caller".to_owned(),
                    ..run.clone()
                },
            };
        }
        if first {
            self.sync("journaling a wait").await;
            // Armed `abort`, the caller dies with its wait journaled, nothing sent.
            self.failpoint(Failpoint::WaitAfterJournal);
        }
        // Asking again with the same id is the only recovery: the receiver answers
        // the original outcome, or takes the request if it never journaled it.
        match self.ask(&record, false, wait).await {
            Ok(run) => {
                if run.outcome != RunOutcome::Unknown {
                    self.learned(&record, &run).await;
                    if record.via.is_some() {
                        self.forget_collected().await;
                    }
                }
                ProcessReply::Ran {
                    run: RunView {
                        role: "caller".to_owned(),
                        ..run
                    },
                }
            }
            Err(reason) => ProcessReply::Ran {
                run: record.view(
                    &self.host,
                    &format!("{reason}; the outcome is unknown to the caller; the wait stays open: ask again with the same id"),
                ),
            },
        }
    }

    /// Notes in `write` that the mailbox `record` went through (if it did) may drop the
    /// receiver's outcome deposit for it — deposited or still to come — once `write`
    /// is durable (`forget_collected` tells it).
    pub(super) fn note_forget(&self, write: &mut fjall::OwnedWriteBatch, record: &WaitRecord) {
        let Some(mailbox) = &record.via else {
            return;
        };
        let key = Key::text(&mailbox.name)
            .then(&record.receiver.name)
            .then(&record.request.request)
            .bytes();
        let noted = Called {
            receiver: mailbox.clone(),
            membership: record.membership.clone(),
        };
        write.insert(
            &self.ks.forget,
            key,
            serde_json::to_vec(&noted).expect("peers serialize"),
        );
    }

    /// Tells the mailboxes which outcomes this caller journaled (`process-forget`, at
    /// most `MAILBOX_FORGET_MAX` per mailbox and pass): each drops those deposits, and
    /// the notes of the ones it answered go. A mailbox that cannot be reached is told
    /// on a later pass; telling it twice drops nothing more.
    pub(super) async fn forget_collected(&self) {
        // Per mailbox: where it is, and the notes (key, deposit) due there.
        type Notes = Vec<(Vec<u8>, DepositRef)>;
        let mut due: BTreeMap<String, (Called, Notes)> = BTreeMap::new();
        for guard in self.ks.forget.iter().take(MAILBOX_FORGET_MAX) {
            let Ok((key, value)) = guard.into_inner() else {
                continue;
            };
            let mut parts = key.split(|b| *b == 0).map(String::from_utf8_lossy);
            let (Some(mailbox), Some(from), Some(id)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(at) = serde_json::from_slice::<Called>(&value) else {
                continue;
            };
            let deposit = DepositRef {
                from: from.into_owned(),
                id: id.into_owned(),
            };
            due.entry(mailbox.into_owned())
                .or_insert_with(|| (at, Vec::new()))
                .1
                .push((key.to_vec(), deposit));
        }
        for (name, (at, deposits)) in due {
            let Ok(client) = self.client(&at.membership, &name, &at.receiver.address) else {
                continue;
            };
            let forget = Forget {
                kind: DepositKind::Outcome,
                deposits: deposits.iter().map(|(_, d)| d.clone()).collect(),
            };
            let reply: Result<MailboxReply, _> = client
                .post(
                    &format!("/mailbox/{}/forget", at.membership),
                    &forget,
                    MAILBOX_CALL_TIMEOUT,
                )
                .await;
            if let Ok(MailboxReply::Forgotten { .. }) = reply {
                let mut write = self.database.batch();
                for (key, _) in &deposits {
                    write.remove(&self.ks.forget, key.as_slice());
                }
                write
                    .commit()
                    .unwrap_or_else(|e| fatal(&self.dir, "clearing forgotten deposits", e));
            }
        }
    }

    /// After a restart, and while waits are open: asks each open wait's receiver (or
    /// mailbox) for its outcome without sending the request again.
    pub(super) async fn resume_waits(self: Arc<Self>) {
        let mut pause = POLL_INTERVAL;
        // Open waits are asked WAITS_PASS_MAX at a time, round the set.
        let mut after = String::new();
        loop {
            tokio::time::sleep(pause).await;
            let ids: Vec<String> = {
                let open = self.open_waits.lock().unwrap_or_else(|p| p.into_inner());
                let mut ids: Vec<String> = open
                    .range::<String, _>((
                        std::ops::Bound::Excluded(&after),
                        std::ops::Bound::Unbounded,
                    ))
                    .take(WAITS_PASS_MAX)
                    .cloned()
                    .collect();
                for id in open.iter() {
                    if ids.len() >= WAITS_PASS_MAX {
                        break;
                    }
                    if !ids.contains(id) {
                        ids.push(id.clone());
                    }
                }
                ids
            };
            after = ids.last().cloned().unwrap_or_default();
            self.forget_collected().await;
            let open: Vec<WaitRecord> = ids
                .iter()
                .filter_map(|id| self.hot_wait(id))
                .filter(|r| r.run.is_none())
                .collect();
            if open.is_empty() {
                pause = WAIT_POLL_MAX;
                continue;
            }
            for record in open {
                if let Ok(run) = self.ask(&record, true, Duration::ZERO).await
                    && run.outcome != RunOutcome::Unknown
                {
                    self.learned(&record, &run).await;
                }
            }
            pause = (pause * 2).min(WAIT_POLL_MAX);
        }
    }
}
