//! The linearizable read barrier: the leader's confirmation by a quorum, then this
//! voter applies through the leader's read index.

use std::time::Duration;

use openraft::ServerState;

use super::{Authority, AuthorityCall, AuthorityReply, BARRIER_TIMEOUT};

impl Authority {
    /// The barrier at the leader: a quorum confirms the leadership, the state machine
    /// applies through the read index.
    pub(super) async fn leader_barrier(&self) -> Result<u64, String> {
        match tokio::time::timeout(BARRIER_TIMEOUT, self.raft.ensure_linearizable()).await {
            Err(_) => Err(format!(
                "no quorum confirmed the leader within BARRIER_TIMEOUT ({} s)",
                BARRIER_TIMEOUT.as_secs()
            )),
            Ok(Ok(read)) => Ok(read.map_or(0, |l| l.index)),
            Ok(Err(e)) => Err(e.to_string()),
        }
    }

    /// A linearizable read barrier from any voter: the leader's barrier, then this
    /// voter applies through the leader's read index.
    pub async fn barrier(&self) -> Result<u64, String> {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.state == ServerState::Leader {
            return self.leader_barrier().await;
        }
        if self.leader().is_none() {
            // Just started or just added: a leader's first message names it.
            let _ = self
                .raft
                .wait(Some(BARRIER_TIMEOUT))
                .metrics(|m| m.current_leader.is_some(), "a leader known")
                .await;
        }
        let Some(leader) = self.leader() else {
            return Err(format!(
                "no leader of `{}` is known to `{}`",
                self.membership, self.participant
            ));
        };
        let index = match self
            .forward(
                &leader,
                AuthorityCall::Barrier,
                BARRIER_TIMEOUT + Duration::from_secs(1),
            )
            .await
        {
            Ok(AuthorityReply::Barrier {
                read_index: Some(index),
                ..
            }) => index,
            Ok(AuthorityReply::Barrier { detail, .. }) => return Err(detail),
            Ok(other) => return Err(format!("the leader answered {other:?}")),
            Err(e) => {
                return Err(format!(
                    "the leader `{}` did not answer: {e}",
                    leader.participant
                ));
            }
        };
        self.raft
            .wait(Some(BARRIER_TIMEOUT))
            .applied_index_at_least(Some(index), "read barrier")
            .await
            .map_err(|e| format!("this voter did not apply through {index}: {e}"))?;
        Ok(index)
    }
}
