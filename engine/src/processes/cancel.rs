//! `process cancel`: a caller's stopped wait closed by the receiver's signed proof that
//! the request was never dispatched there — and never will be (SPEC C5: "a stopped wait
//! with durable proof of no dispatch may close its unused charge").
//!
//! The caller asks its receiver directly (`POST /process/M/cancel`, the caller named by
//! its certificate, the whole request in the body). Under the run journal's lock the
//! receiver either
//! - holds no record of the id: it journals the request **barred** — a terminal
//!   `failed` record with no unit charged, and its signed [`NoDispatch`] — fsynced
//!   before it answers. A later arrival of the same request (a re-send, a deposit still
//!   in a mailbox) is answered from that record and never dispatched; or
//! - holds the id's record: it answers that record unchanged. A finalized run is the
//!   caller's to learn (the cancel recovers the original outcome and closes nothing
//!   else: a pending ledger amount it holds stays the Ledger's obligation); a run
//!   dispatched and not finalized (running, or `unknown`) refuses the cancel — its
//!   outcome belongs to the receiver's operator (`process resolve`).
//!
//! The caller verifies the proof and the record's signature with the receiver's keys,
//! journals both in its wait record (fsynced) and closes the wait.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::api::{ProcessReply, RunOutcome, RunRequest, RunView, ServiceReply};
use super::receiver::RunRecord;
use super::runs::Run;
use super::service::{Processes, check_request};
use crate::custody::Manifest;
use crate::limits::CANCEL_CALL_TIMEOUT;
use crate::store::fatal;
use crate::transport::PeerError;

/// The receiver's signed statement that `request` from `caller` was never dispatched,
/// journaled with the request barred, so that it never will be. Verifiable offline with
/// the receiver's custody manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoDispatch {
    pub receiver: String,
    pub caller: String,
    pub request: String,
    pub process: String,
    pub arguments: std::collections::BTreeMap<String, String>,
    /// The receiver's custody key generation that signed.
    pub generation: u32,
    pub signature: String,
}

impl NoDispatch {
    pub fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-process-no-dispatch/1\nreceiver {}\ncaller {}\nrequest {}\nprocess {}\narguments {}\n",
            self.receiver,
            self.caller,
            self.request,
            self.process,
            serde_json::to_string(&self.arguments).expect("arguments serialize"),
        )
        .into_bytes()
    }

    /// Verifies the receiver's signature with its custody manifest.
    pub fn verify(&self, receiver_keys: &Manifest) -> bool {
        crate::custody::verify_hex_signature(
            receiver_keys,
            self.generation,
            &self.signed_bytes(),
            &self.signature,
        )
    }

    /// Whether this proof is about exactly `request` from `caller` at `receiver`.
    pub fn names(&self, receiver: &str, caller: &str, request: &RunRequest) -> bool {
        self.receiver == receiver
            && self.caller == caller
            && self.request == request.request
            && self.process == request.process
            && self.arguments == request.arguments
    }
}

/// `POST /process/M/cancel`: the whole request, so that the barred record is the one a
/// later arrival of it is compared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelQuery {
    pub request: RunRequest,
}

impl Processes {
    /// As the receiver: bar `query.request` from `caller` if it was never dispatched
    /// (signed proof, fsynced), or answer the record it has.
    pub async fn serve_cancel(self: &Arc<Self>, caller: &str, query: &CancelQuery) -> ServiceReply {
        let request = &query.request;
        if let Err(reason) = check_request(request) {
            return ServiceReply::Refused { reason };
        }
        let reply = {
            let mut state = self.lock();
            let kept = match self.record(&request.request) {
                Ok(kept) => kept,
                // Known and unreadable (or expired): never a proof of no dispatch.
                Err(reason) => {
                    return ServiceReply::Refused {
                        reason: format!("{reason}; nothing cancelled"),
                    };
                }
            };
            if let Some(record) = kept {
                let view = &record.view;
                if view.caller != caller
                    || view.process != request.process
                    || view.arguments != request.arguments
                {
                    return ServiceReply::Refused {
                        reason: format!(
                            "request id `{}` is not this request of `{caller}`; nothing cancelled",
                            request.request
                        ),
                    };
                }
                return match record.no_dispatch {
                    // Cancelled before: the same answer.
                    Some(proof) => ServiceReply::Cancelled {
                        run: record.view,
                        proof,
                    },
                    None => ServiceReply::Run { run: record.view },
                };
            }
            let mut proof = NoDispatch {
                receiver: self.host.clone(),
                caller: caller.to_owned(),
                request: request.request.clone(),
                process: request.process.clone(),
                arguments: request.arguments.clone(),
                generation: 0,
                signature: String::new(),
            };
            (proof.generation, proof.signature) = self.custody.sign_hex(&proof.signed_bytes());
            let refused = Run::refused();
            let mut view = RunView {
                request: request.request.clone(),
                process: request.process.clone(),
                arguments: request.arguments.clone(),
                caller: caller.to_owned(),
                receiver: self.host.clone(),
                via: "direct".to_owned(),
                role: "receiver".to_owned(),
                outcome: refused.outcome,
                result: None,
                detail: format!(
                    "cancelled by its caller `{caller}` before dispatch: never run, nothing charged (signed proof of no dispatch)"
                ),
                grant: None,
                units: refused.units,
                signature: None,
                archived: false,
            };
            self.sign(&mut view);
            let mut record = RunRecord {
                view: view.clone(),
                resolved: false,
                no_dispatch: Some(proof.clone()),
                answered_ms: None,
            };
            let mut write = self.database.batch();
            self.journal_run(&mut state, &mut write, &mut record);
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "journaling a cancelled request", e));
            ServiceReply::Cancelled { run: view, proof }
        };
        // Durable before it is answered: the proof is a promise never to dispatch.
        self.sync("journaling a cancelled request").await;
        reply
    }

    /// As the caller: close the stopped wait `request` with the receiver's proof of no
    /// dispatch, or learn its finalized outcome; refused while it is dispatched and
    /// not finalized, and when the receiver cannot be asked.
    pub(super) async fn cancel(&self, request: &str) -> ProcessReply {
        let refused = |reason: String| ProcessReply::Refused { reason };
        let record = match self.wait_record(request) {
            Ok(record) => record,
            Err(reason) => return refused(format!("{reason}; nothing cancelled")),
        };
        let Some(record) = record else {
            return refused(format!(
                "host `{}` holds no wait `{request}`: nothing to cancel (a run this host received is closed by `process resolve` here)",
                self.host
            ));
        };
        if let Some(run) = &record.run {
            // Closed already: cancelled before, or its outcome learned.
            return ProcessReply::Cancelled {
                run: RunView {
                    role: "caller".to_owned(),
                    ..run.clone()
                },
                proof: record.no_dispatch.clone(),
            };
        }
        let client = match self.client(
            &record.membership,
            &record.receiver.name,
            &record.receiver.address,
        ) {
            Ok(client) => client,
            Err(e) => return refused(format!("{e}; nothing was cancelled")),
        };
        let reply: ServiceReply = match client
            .post(
                &format!("/process/{}/cancel", record.membership),
                &CancelQuery {
                    request: record.request.clone(),
                },
                CANCEL_CALL_TIMEOUT,
            )
            .await
        {
            Ok(reply) => reply,
            Err(PeerError::NotSent(e)) => {
                self.forget(&record.membership, &record.receiver.name);
                return refused(format!(
                    "the cancel was not sent to `{}` ({e}); nothing was cancelled and the wait stays open",
                    record.receiver.name
                ));
            }
            Err(PeerError::Lost(e)) => {
                return ProcessReply::Cancelled {
                    run: record.view(
                        &self.host,
                        &format!(
                            "the cancel's reply was lost ({e}): the request may be barred at `{}` or not; cancel again with the same id (never a new one)",
                            record.receiver.name
                        ),
                    ),
                    proof: None,
                };
            }
        };
        match reply {
            ServiceReply::Cancelled { run, proof } => {
                if let Err(reason) = self.check_answer(&record, &run) {
                    return refused(reason);
                }
                if !proof.names(&record.receiver.name, &self.host, &record.request)
                    || !proof.verify(
                        &self
                            .custody
                            .peer_keys(&record.receiver.name, &record.receiver.keys),
                    )
                {
                    return refused(format!(
                        "the proof of no dispatch from `{}` is not about this request or does not verify; the wait stays open",
                        record.receiver.name
                    ));
                }
                self.closed_by_proof(request, &run, &proof).await;
                ProcessReply::Cancelled {
                    run: RunView {
                        role: "caller".to_owned(),
                        ..run
                    },
                    proof: Some(proof),
                }
            }
            ServiceReply::Run { run } => {
                if let Err(reason) = self.check_answer(&record, &run) {
                    return refused(reason);
                }
                if run.outcome == RunOutcome::Unknown {
                    return refused(format!(
                        "request `{request}` was dispatched at `{}` (units {}): it has no outcome there yet, so nothing proves it unused; its receiver's operator decides it (`gridctl process resolve`)",
                        run.receiver, run.units
                    ));
                }
                // Dispatched and finalized: the original effect is the outcome.
                self.learned(&record, &run).await;
                ProcessReply::Cancelled {
                    run: RunView {
                        role: "caller".to_owned(),
                        ..run
                    },
                    proof: None,
                }
            }
            ServiceReply::Absent { .. } => refused(format!(
                "`{}` answered the cancel with nothing; the wait stays open",
                record.receiver.name
            )),
            ServiceReply::Refused { reason } => refused(format!(
                "`{}` refused the cancel: {reason}",
                record.receiver.name
            )),
            ServiceReply::Surrendered { .. } => refused(format!(
                "`{}` answered the cancel with a surrender; the wait stays open",
                record.receiver.name
            )),
        }
    }

    /// Journals the barred record and its proof in the wait record (fsynced) and closes
    /// the wait. An outcome learned meanwhile (the barred record, from a re-send) keeps
    /// its place; the proof is added to it.
    async fn closed_by_proof(&self, request: &str, run: &RunView, proof: &NoDispatch) {
        {
            let _waits = self.waits.lock().unwrap_or_else(|p| p.into_inner());
            let Some(mut record) = self.hot_wait(request) else {
                return;
            };
            if record.no_dispatch.is_some() {
                return;
            }
            if record.run.as_ref().is_some_and(|held| held != run) {
                // Another outcome was learned: the receiver answered it before the bar.
                return;
            }
            // Out of the open waits (kept under the waits lock): no pass of
            // `resume_waits` asks about it again, and `learned` journals nothing more.
            self.open_waits
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(request);
            record.run = Some(run.clone());
            record.no_dispatch = Some(proof.clone());
            let mut write = self.database.batch();
            self.journal_wait(&mut write, &mut record);
            // Through a mailbox: the barred outcome the receiver deposits there (now
            // or later) is never collected — the mailbox may drop it.
            self.note_forget(&mut write, &record);
            write
                .commit()
                .unwrap_or_else(|e| fatal(&self.dir, "journaling a cancelled wait", e));
        }
        self.sync("syncing a cancelled wait").await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-cancel-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    fn proof(dir: &std::path::Path) -> (NoDispatch, Manifest) {
        let manifest = crate::custody::create(dir).expect("custody");
        let custody = crate::custody::verify(dir).expect("custody opens");
        let mut proof = NoDispatch {
            receiver: "site".to_owned(),
            caller: "hq".to_owned(),
            request: "c1".to_owned(),
            process: "demo.count".to_owned(),
            arguments: [("delay_ms".to_owned(), "5".to_owned())].into(),
            generation: 0,
            signature: String::new(),
        };
        (proof.generation, proof.signature) = custody.sign_hex(&proof.signed_bytes());
        (proof, manifest)
    }

    #[test]
    fn a_proof_verifies_with_the_public_manifest_alone_and_any_change_breaks_it() {
        let (site, other) = (dir("site"), dir("other"));
        let (proof, manifest) = proof(&site);
        assert!(proof.verify(&manifest));
        let request = RunRequest {
            request: "c1".to_owned(),
            process: "demo.count".to_owned(),
            arguments: proof.arguments.clone(),
        };
        assert!(proof.names("site", "hq", &request));
        assert!(!proof.names("site", "other", &request));
        let changes: [fn(&mut NoDispatch); 5] = [
            |p| p.receiver = "box".to_owned(),
            |p| p.caller = "lean".to_owned(),
            |p| p.request = "c2".to_owned(),
            |p| p.process = "ledger.transfer".to_owned(),
            |p| {
                p.arguments.insert("delay_ms".to_owned(), "6".to_owned());
            },
        ];
        for change in changes {
            let mut changed = proof.clone();
            change(&mut changed);
            assert!(!changed.verify(&manifest), "{changed:?} must not verify");
        }
        // Another host's keys do not verify it.
        let (_, other_manifest) = super::tests::proof(&other);
        assert!(!proof.verify(&other_manifest));
        for d in [site, other] {
            std::fs::remove_dir_all(d).expect("remove");
        }
    }
}
