//! What a decision's host admits, given the record it holds and the time: pure — no
//! IO, no clock (the time is an argument), no signature checks (the service verifies
//! them first). Property-tested in `tests.rs`.

use super::api::{Ballot, DecisionRecord, DecisionState, Gate, ballots_digest};

/// Ballots in favour and against.
pub fn tally(record: &DecisionRecord) -> (u32, u32) {
    let yes = record.ballots.iter().filter(|b| b.yes).count() as u32;
    (yes, record.ballots.len() as u32 - yes)
}

/// Where the decision stands at `now_ms`.
pub fn state(record: &DecisionRecord, now_ms: u64) -> DecisionState {
    if let Some(applied) = &record.applied {
        return if applied.outcome == "succeeded" {
            DecisionState::Applied
        } else {
            DecisionState::Failed
        };
    }
    if let Some(gate) = &record.gate {
        return if gate.approve {
            DecisionState::Applying
        } else {
            DecisionState::Declined
        };
    }
    if now_ms >= record.opened.expires_ms {
        return DecisionState::Expired;
    }
    let policy = &record.opened.policy;
    let (yes, _) = tally(record);
    if yes >= policy.threshold {
        return DecisionState::Passed;
    }
    let uncast = policy.roster.len() as u32 - record.ballots.len() as u32;
    if yes + uncast < policy.threshold {
        return DecisionState::Rejected;
    }
    DecisionState::Open
}

/// Whether the decision names this one: its id, name, host and Open digest.
fn same_decision(
    record: &DecisionRecord,
    (decision, name, host, open): (&str, &str, &str, &str),
) -> Result<(), String> {
    let opened = &record.opened;
    if decision != opened.decision || name != opened.policy.name || host != opened.policy.host {
        return Err(format!(
            "it names decision `{decision}` of `{name}` at `{host}`, not `{}` of `{}` at `{}`",
            opened.decision, opened.policy.name, opened.policy.host
        ));
    }
    if open != opened.digest() {
        return Err(format!(
            "it was cast on another Open record (digest {open}, this decision's is {}): look at the decision again",
            opened.digest()
        ));
    }
    Ok(())
}

/// A ballot is admitted once per roster member, while the decision takes ballots.
pub fn admit_ballot(record: &DecisionRecord, ballot: &Ballot, now_ms: u64) -> Result<(), String> {
    same_decision(
        record,
        (&ballot.decision, &ballot.name, &ballot.host, &ballot.open),
    )?;
    let policy = &record.opened.policy;
    if !policy.roster.contains(&ballot.member) {
        return Err(format!(
            "`{}` is not on the roster of decision `{}` ({}): its ballot is not counted",
            ballot.member,
            record.opened.decision,
            policy.roster.join(", ")
        ));
    }
    if let Some(earlier) = record.ballots.iter().find(|b| b.member == ballot.member) {
        return Err(format!(
            "`{}` already cast its ballot on decision `{}` ({}): one ballot per member",
            ballot.member,
            record.opened.decision,
            if earlier.yes { "yes" } else { "no" }
        ));
    }
    match state(record, now_ms) {
        DecisionState::Open | DecisionState::Passed => Ok(()),
        DecisionState::Expired => Err(format!(
            "decision `{}` expired at {} ({} hours after it opened): it takes no ballot",
            record.opened.decision,
            crate::store::rfc3339_ms(record.opened.expires_ms),
            policy.expires_after_hours
        )),
        closed => Err(format!(
            "decision `{}` is closed ({}): it takes no ballot",
            record.opened.decision,
            closed.name()
        )),
    }
}

/// The gate is admitted once, from the gate operator, after the threshold, naming
/// exactly the ballots recorded.
pub fn admit_gate(record: &DecisionRecord, gate: &Gate, now_ms: u64) -> Result<(), String> {
    same_decision(record, (&gate.decision, &gate.name, &gate.host, &gate.open))?;
    let policy = &record.opened.policy;
    if gate.operator != policy.gate {
        return Err(format!(
            "`{}` is not the gate operator of decision `{}` (`{}` is)",
            gate.operator, record.opened.decision, policy.gate
        ));
    }
    let (yes, _) = tally(record);
    match state(record, now_ms) {
        DecisionState::Passed => {}
        DecisionState::Open => {
            return Err(format!(
                "decision `{}` has {yes} ballot(s) in favour of the {} its threshold needs: the gate comes after the threshold",
                record.opened.decision, policy.threshold
            ));
        }
        DecisionState::Expired => {
            return Err(format!(
                "decision `{}` expired at {}: nothing is gated or applied",
                record.opened.decision,
                crate::store::rfc3339_ms(record.opened.expires_ms)
            ));
        }
        closed => {
            return Err(format!(
                "decision `{}` is closed ({}): a gate applies nothing now",
                record.opened.decision,
                closed.name()
            ));
        }
    }
    if gate.ballots != ballots_digest(&record.ballots) {
        return Err(format!(
            "the gate names other ballots than the {} decision `{}` holds: look at the decision again",
            record.ballots.len(),
            record.opened.decision
        ));
    }
    Ok(())
}

/// Whether the one apply run may be started or asked about: approved, no receipt yet.
pub fn may_apply(record: &DecisionRecord) -> bool {
    record.gate.as_ref().is_some_and(|g| g.approve) && record.applied.is_none()
}
