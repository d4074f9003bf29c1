//! Claim commands in batches (group commit): queued, gathered while earlier batches
//! are in flight, committed as one log entry here or forwarded to the leader as one
//! request; every command gets exactly one reply.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError as CwError, RaftError as OrError};

use super::{
    Authority, AuthorityCall, AuthorityReply, CLAIM_WRITE_TIMEOUT, ClaimCommand, ClaimOutcome,
};
use crate::authority::claims::{Command, Outcome};
use crate::authority::types::{Decision, Proposal, Proposals, Voter};
use crate::limits::{BATCH_COMMANDS_MAX, BATCHES_IN_FLIGHT_MAX};
use crate::transport::PeerError;

/// A claim command waiting for its batch.
pub(super) struct Pending {
    pub(super) proposal: Proposal,
    /// Forwarded by another voter: never forwarded again.
    pub(super) forwarded: bool,
    pub(super) reply: tokio::sync::oneshot::Sender<AuthorityReply>,
}

/// Gathers the commands that arrive while earlier batches are in flight into one
/// batch each (group commit).
pub(super) async fn batch_loop(
    authority: std::sync::Weak<Authority>,
    mut queue: tokio::sync::mpsc::UnboundedReceiver<Pending>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT_MAX));
    while let Some(first) = queue.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < BATCH_COMMANDS_MAX {
            match queue.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let Some(authority) = authority.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            authority.write_batch(batch).await;
            drop(permit);
        });
    }
}

pub(super) fn answer_all(batch: Vec<Pending>, reply: impl Fn(&Proposal) -> AuthorityReply) {
    for pending in batch {
        let r = reply(&pending.proposal);
        let _ = pending.reply.send(r);
    }
}

pub(super) fn unknown_claim(proposal: &Proposal, reason: String) -> AuthorityReply {
    AuthorityReply::Claim {
        op: proposal.op.clone(),
        claim: proposal.command.claim().to_owned(),
        outcome: ClaimOutcome::Unknown,
        owner: None,
        epoch: 0,
        detail: format!("{reason}; re-send the same op id to learn its outcome"),
    }
}

pub(super) fn decided(proposal: &Proposal, decision: Decision) -> AuthorityReply {
    match decision {
        Decision::Answer(answer) => AuthorityReply::Claim {
            op: answer.op,
            claim: answer.claim,
            outcome: match answer.outcome {
                Outcome::Succeeded => ClaimOutcome::Succeeded,
                Outcome::Failed => ClaimOutcome::Failed,
            },
            owner: answer.owner,
            epoch: answer.epoch,
            detail: answer.detail,
        },
        Decision::Refused { reason } => AuthorityReply::Claim {
            op: proposal.op.clone(),
            claim: proposal.command.claim().to_owned(),
            outcome: ClaimOutcome::Refused,
            owner: None,
            epoch: 0,
            detail: reason,
        },
    }
}

/// A command as its caller states it (the caller is who sends it).
pub(super) fn stated(command: &Command) -> ClaimCommand {
    match command.clone() {
        Command::Acquire { claim, .. } => ClaimCommand::Acquire { claim },
        Command::EnrollSuccessor {
            claim, successor, ..
        } => ClaimCommand::EnrollSuccessor { claim, successor },
        Command::Handoff { claim, .. } => ClaimCommand::Handoff { claim },
        Command::Release { claim, .. } => ClaimCommand::Release { claim },
    }
}

impl Authority {
    /// Queues one claim command for the next batch; the receiver gets its reply.
    pub(super) fn enqueue(
        &self,
        op: String,
        command: Command,
        forwarded: bool,
    ) -> tokio::sync::oneshot::Receiver<AuthorityReply> {
        let (reply, receiver) = tokio::sync::oneshot::channel();
        let pending = Pending {
            proposal: Proposal { op, command },
            forwarded,
            reply,
        };
        if let Err(refused) = self.batcher.send(pending) {
            let p = refused.0;
            let _ = p.reply.send(unknown_claim(
                &p.proposal,
                "the authority is stopping".to_owned(),
            ));
        }
        receiver
    }

    pub(super) async fn claim(
        &self,
        op: String,
        command: Command,
        forwarded: bool,
    ) -> AuthorityReply {
        let proposal = Proposal {
            op: op.clone(),
            command: command.clone(),
        };
        match self.enqueue(op, command, forwarded).await {
            Ok(reply) => reply,
            Err(_) => unknown_claim(&proposal, "the batch was dropped".to_owned()),
        }
    }

    /// Commits one batch of claim commands as one log entry here, or forwards the
    /// batch to the leader in one request. Within CLAIM_WRITE_TIMEOUT, attempts that
    /// certainly did not reach a leader (none known yet; the leader refused the
    /// connection) are made again — and the state machine applies an op id once
    /// anyway. Every command of the batch gets exactly one reply.
    pub(super) async fn write_batch(&self, batch: Vec<Pending>) {
        let deadline = tokio::time::Instant::now() + CLAIM_WRITE_TIMEOUT;
        let mut batch = batch;
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                let reason = format!(
                    "no leader of `{}` answered within CLAIM_WRITE_TIMEOUT ({} s)",
                    self.membership,
                    CLAIM_WRITE_TIMEOUT.as_secs()
                );
                return answer_all(batch, |p| unknown_claim(p, reason.clone()));
            }
            // A voter that knows another leader forwards at once: its Raft would only
            // answer ForwardToLeader, a round trip to its core (issue 37). A batch
            // holding a command forwarded here goes to this voter's Raft: such
            // commands are never forwarded again.
            if !batch.iter().any(|p| p.forwarded)
                && let Some(leader) = self.other_leader()
            {
                match self.forward_batch(batch, &leader, remaining).await {
                    Some(rest) => {
                        batch = rest;
                        continue;
                    }
                    None => return,
                }
            }
            let proposals = Proposals(batch.iter().map(|p| p.proposal.clone()).collect());
            let written = tokio::time::timeout(remaining, self.raft.client_write(proposals)).await;
            let to = match written {
                Err(_) => {
                    let reason = format!(
                        "not committed within CLAIM_WRITE_TIMEOUT ({} s): a quorum may be unreachable",
                        CLAIM_WRITE_TIMEOUT.as_secs()
                    );
                    return answer_all(batch, |p| unknown_claim(p, reason.clone()));
                }
                Ok(Ok(response)) => {
                    let decisions = response.data.0;
                    assert_eq!(
                        decisions.len(),
                        batch.len(),
                        "one decision per proposal of an entry"
                    );
                    for (pending, decision) in batch.into_iter().zip(decisions) {
                        let reply = decided(&pending.proposal, decision);
                        let _ = pending.reply.send(reply);
                    }
                    return;
                }
                Ok(Err(OrError::APIError(CwError::ForwardToLeader(to)))) => to,
                Ok(Err(e)) => {
                    let reason = e.to_string();
                    return answer_all(batch, |p| unknown_claim(p, reason.clone()));
                }
            };
            // Commands forwarded to this voter are never forwarded again.
            let (again, local): (Vec<Pending>, Vec<Pending>) =
                batch.into_iter().partition(|p| p.forwarded);
            let reason = format!(
                "`{}` is no longer the leader of `{}`",
                self.participant, self.membership
            );
            answer_all(again, |p| unknown_claim(p, reason.clone()));
            batch = local;
            if batch.is_empty() {
                return;
            }
            let Some(leader) = to.leader_node else {
                // An election is under way: wait for its outcome.
                let _ = self
                    .raft
                    .wait(Some(remaining.min(Duration::from_millis(500))))
                    .metrics(|m| m.current_leader.is_some(), "a leader known")
                    .await;
                continue;
            };
            match self.forward_batch(batch, &leader, remaining).await {
                Some(rest) => batch = rest,
                None => return,
            }
        }
    }

    /// Forwards `batch` to `leader` in one request and answers every command — or,
    /// when the request certainly did not reach it (the connection was refused),
    /// waits a little for the voters to elect another and gives the batch back.
    async fn forward_batch(
        &self,
        batch: Vec<Pending>,
        leader: &Voter,
        remaining: Duration,
    ) -> Option<Vec<Pending>> {
        let call = AuthorityCall::ClaimBatch {
            claims: batch
                .iter()
                .map(|p| (p.proposal.op.clone(), stated(&p.proposal.command)))
                .collect(),
        };
        match self
            .forward(leader, call, CLAIM_WRITE_TIMEOUT + Duration::from_secs(2))
            .await
        {
            Ok(AuthorityReply::Claims { replies }) if replies.len() == batch.len() => {
                for (pending, reply) in batch.into_iter().zip(replies) {
                    let _ = pending.reply.send(reply);
                }
                None
            }
            Ok(other) => {
                let reason = format!("the leader `{}` answered {other:?}", leader.participant);
                answer_all(batch, |p| unknown_claim(p, reason.clone()));
                None
            }
            Err(PeerError::NotSent(_)) => {
                // The remembered leader is gone: wait for the voters to elect another.
                tokio::time::sleep(remaining.min(Duration::from_millis(200))).await;
                Some(batch)
            }
            Err(PeerError::Lost(e)) => {
                let reason = format!(
                    "forwarded to the leader `{}`, no answer: {e}",
                    leader.participant
                );
                answer_all(batch, |p| unknown_claim(p, reason.clone()));
                None
            }
        }
    }
}
