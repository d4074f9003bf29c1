//! The group's membership: bootstrap, voters (learner catch-up, then promotion),
//! learners, removal; and explicit snapshots.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::ChangeMembers;
use openraft::error::{InitializeError, RaftError as OrError};

use super::{
    Authority, AuthorityReply, CLAIM_WRITE_TIMEOUT, SNAPSHOT_TIMEOUT, VOTER_CATCH_UP_TIMEOUT,
};
use crate::authority::types::{NodeId, Voter, node_id};

impl Authority {
    pub(super) async fn initialize(&self) -> AuthorityReply {
        let mut members = BTreeMap::new();
        members.insert(
            self.id,
            Voter {
                participant: self.participant.clone(),
                address: self.address.clone(),
            },
        );
        match self.raft.initialize(members).await {
            Ok(()) => {
                // Later transitions (adding voters) go to the leader: wait for it.
                let elected = self
                    .raft
                    .wait(Some(Duration::from_secs(10)))
                    .metrics(|m| m.current_leader.is_some(), "a leader elected")
                    .await;
                if let Err(e) = elected {
                    return AuthorityReply::Unknown {
                        reason: format!("bootstrapped, but no leader yet: {e}"),
                    };
                }
                AuthorityReply::Done {
                    detail: format!(
                        "authority of `{}` bootstrapped with voter `{}`",
                        self.membership, self.participant
                    ),
                }
            }
            Err(OrError::APIError(InitializeError::NotAllowed(_))) => AuthorityReply::Done {
                detail: format!("authority of `{}` was already initialized", self.membership),
            },
            Err(e) => AuthorityReply::Refused {
                reason: e.to_string(),
            },
        }
    }

    pub(super) async fn add_voter(&self, participant: &str, address: &str) -> AuthorityReply {
        let id = node_id(participant);
        let node = Voter {
            participant: participant.to_owned(),
            address: address.to_owned(),
        };
        let metrics = self.raft.metrics().borrow().clone();
        if metrics
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id)
        {
            return AuthorityReply::Done {
                detail: format!("`{participant}` already votes"),
            };
        }
        match tokio::time::timeout(
            VOTER_CATCH_UP_TIMEOUT,
            self.raft.add_learner(id, node, true),
        )
        .await
        {
            Err(_) => {
                return AuthorityReply::Unknown {
                    reason: format!(
                        "`{participant}` did not catch up within VOTER_CATCH_UP_TIMEOUT ({} s); it stays a learner",
                        VOTER_CATCH_UP_TIMEOUT.as_secs()
                    ),
                };
            }
            Ok(Err(e)) => {
                return AuthorityReply::Refused {
                    reason: e.to_string(),
                };
            }
            Ok(Ok(_)) => {}
        }
        let ids: BTreeSet<NodeId> = [id].into();
        match tokio::time::timeout(
            CLAIM_WRITE_TIMEOUT,
            self.raft
                .change_membership(ChangeMembers::AddVoterIds(ids), false),
        )
        .await
        {
            Err(_) => AuthorityReply::Unknown {
                reason: format!("promoting `{participant}` did not commit in time"),
            },
            Ok(Err(e)) => AuthorityReply::Refused {
                reason: e.to_string(),
            },
            Ok(Ok(_)) => AuthorityReply::Done {
                detail: format!("`{participant}` caught up as a learner and now votes"),
            },
        }
    }

    pub(super) async fn add_learner(&self, participant: &str, address: &str) -> AuthorityReply {
        let node = Voter {
            participant: participant.to_owned(),
            address: address.to_owned(),
        };
        match tokio::time::timeout(
            VOTER_CATCH_UP_TIMEOUT,
            self.raft.add_learner(node_id(participant), node, true),
        )
        .await
        {
            Err(_) => AuthorityReply::Unknown {
                reason: format!(
                    "`{participant}` did not catch up within VOTER_CATCH_UP_TIMEOUT ({} s)",
                    VOTER_CATCH_UP_TIMEOUT.as_secs()
                ),
            },
            Ok(Err(e)) => AuthorityReply::Refused {
                reason: e.to_string(),
            },
            Ok(Ok(_)) => AuthorityReply::Done {
                detail: format!("`{participant}` caught up and replicates as a learner"),
            },
        }
    }

    /// Removes a voter (`voter`; kept as a learner if `keep`) or a learner.
    pub(super) async fn remove(
        &self,
        participant: &str,
        voter: bool,
        keep: bool,
    ) -> AuthorityReply {
        let ids: BTreeSet<NodeId> = [node_id(participant)].into();
        let change = if voter {
            ChangeMembers::RemoveVoters(ids)
        } else {
            ChangeMembers::RemoveNodes(ids)
        };
        match tokio::time::timeout(
            CLAIM_WRITE_TIMEOUT,
            self.raft.change_membership(change, keep),
        )
        .await
        {
            Err(_) => AuthorityReply::Unknown {
                reason: format!("removing `{participant}` did not commit in time"),
            },
            Ok(Err(e)) => AuthorityReply::Refused {
                reason: e.to_string(),
            },
            Ok(Ok(_)) => AuthorityReply::Done {
                detail: match (voter, keep) {
                    (true, true) => format!("`{participant}` no longer votes; it stays a learner"),
                    (true, false) => format!("`{participant}` no longer votes"),
                    _ => format!("`{participant}` no longer replicates"),
                },
            },
        }
    }

    pub(super) async fn snapshot(&self) -> AuthorityReply {
        let applied = self.raft.metrics().borrow().last_applied;
        if let Err(e) = self.raft.trigger().snapshot().await {
            return AuthorityReply::Refused {
                reason: e.to_string(),
            };
        }
        let waited = self
            .raft
            .wait(Some(SNAPSHOT_TIMEOUT))
            .metrics(|m| m.snapshot >= applied, "snapshot built")
            .await;
        match waited {
            Ok(m) => AuthorityReply::Done {
                detail: format!(
                    "snapshot through {} written; older generations deleted",
                    m.snapshot.map_or(0, |l| l.index)
                ),
            },
            Err(e) => AuthorityReply::Unknown {
                reason: e.to_string(),
            },
        }
    }
}
