//! The group's membership: bootstrap, voters (learner catch-up, then promotion),
//! learners, removal; explicit snapshots, and the policy that takes the others.

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

/// When to take a snapshot: once the log since the last one is long in entries and
/// in bytes — at least `SNAPSHOT_LOGS_SINCE_LAST` entries applied, and at least as
/// many bytes appended as the last snapshot file holds. So building snapshots costs at
/// most about what writing the log did, however many answers, claims and forgotten
/// ids a snapshot carries, and the log kept between two is about one snapshot's size
/// at most.
#[derive(Debug, Default)]
pub(super) struct SnapshotPolicy {
    /// The last snapshot's index as last seen, and the log bytes appended then.
    snapshot: Option<u64>,
    appended: u64,
}

impl SnapshotPolicy {
    /// Whether a snapshot is due: `applied` the last applied index, `snapshot` the
    /// last snapshot's, `appended` the log bytes appended so far, `snapshot_bytes`
    /// the last snapshot file's size.
    pub(super) fn due(
        &mut self,
        applied: u64,
        snapshot: Option<u64>,
        appended: u64,
        snapshot_bytes: u64,
    ) -> bool {
        if snapshot != self.snapshot {
            self.snapshot = snapshot;
            self.appended = appended;
        }
        applied.saturating_sub(snapshot.unwrap_or(0)) >= super::SNAPSHOT_LOGS_SINCE_LAST
            && appended.saturating_sub(self.appended) >= snapshot_bytes
    }
}

/// Triggers the snapshots [`SnapshotPolicy`] finds due, looking every
/// `SNAPSHOT_POLICY_INTERVAL`, until the authority is dropped.
pub(super) async fn snapshot_policy(authority: std::sync::Weak<Authority>) {
    let mut policy = SnapshotPolicy::default();
    loop {
        tokio::time::sleep(super::SNAPSHOT_POLICY_INTERVAL).await;
        let Some(authority) = authority.upgrade() else {
            return;
        };
        let (applied, snapshot) = {
            let metrics = authority.raft.metrics();
            let m = metrics.borrow();
            (
                m.last_applied.map_or(0, |l| l.index),
                m.snapshot.map(|l| l.index),
            )
        };
        let appended = authority.log.appended_bytes();
        if policy.due(
            applied,
            snapshot,
            appended,
            authority.machine.snapshot_bytes(),
        ) && let Err(e) = authority.raft.trigger().snapshot().await
        {
            tracing::warn!(membership = %authority.membership, error = %e, "authority snapshot not triggered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::SNAPSHOT_LOGS_SINCE_LAST as ENTRIES;
    use super::SnapshotPolicy;

    #[test]
    fn a_snapshot_is_due_when_the_log_is_long_in_entries_and_in_bytes() {
        let mut policy = SnapshotPolicy::default();
        // No snapshot yet, a small state: entries decide.
        assert!(!policy.due(ENTRIES - 1, None, 10_000, 0));
        assert!(policy.due(ENTRIES, None, 10_000, 0));
        // A snapshot at 5,000 of 1 MB; 10 kB appended so far.
        assert!(!policy.due(ENTRIES + 10, Some(ENTRIES), 10_000, 1_000_000));
        // Entries enough, bytes not: the log since it is far smaller than it.
        assert!(!policy.due(3 * ENTRIES, Some(ENTRIES), 500_000, 1_000_000));
        // Bytes since the snapshot reach its size.
        assert!(policy.due(3 * ENTRIES, Some(ENTRIES), 1_010_000, 1_000_000));
        // Bytes enough, entries not (a new snapshot was taken meanwhile): the mark
        // moves to the bytes appended when the new snapshot was first seen.
        assert!(!policy.due(3 * ENTRIES + 1, Some(3 * ENTRIES), 1_020_000, 100));
        assert!(!policy.due(4 * ENTRIES - 1, Some(3 * ENTRIES), 9_000_000, 100));
        assert!(policy.due(4 * ENTRIES, Some(3 * ENTRIES), 9_000_000, 100));
        // A trigger that built nothing (the snapshot did not move) stays due.
        assert!(policy.due(4 * ENTRIES + 1, Some(3 * ENTRIES), 9_000_001, 100));
    }
}
