//! A start of a host whose store is fenced at an authority (`storage authority="M"`,
//! docs/transfer.md, "Fenced at the authority"): before anything is served — no room,
//! no listener, no control socket — the host asks M's voters over the transport for
//! the claim `store:HOST` (after a read barrier), judges its store against it
//! (`host::store_claim::judge`) and, where its generation is new, takes the claim
//! (release and acquire: the epoch grows past every earlier store) under operation ids
//! its store journaled first. A refusal, or no voter answering within
//! `STORE_CLAIM_START_WAIT`, refuses the start.
//!
//! Invariants, stated as absences: no room starts before the claim is confirmed; no
//! answer other than a voter's own (a `Shown` after its barrier, a `Claim` decided by
//! the leader) is taken as the authority's; no operation id is sent before the store
//! synced the intent naming it; nothing is retried under a new id.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::authority::api::{AuthorityCall, AuthorityReply, ClaimCommand, ClaimOutcome, Forwarded};
use crate::authority::claims::Claim;
use crate::config::StorageClaimConfig;
use crate::host::Host;
use crate::host::store_claim::{Intent, Verdict, claim_of, judge};
use crate::limits::{STORE_CLAIM_CALL_TIMEOUT, STORE_CLAIM_START_WAIT};
use crate::store::{Failpoint, Failpoints};
use crate::transport::PeerClient;

/// Confirms (or takes) the host's store claim; what was done, or why the start is
/// refused. Nothing to do without `storage authority=`.
pub(super) fn confirm(
    host: &mut Host,
    runtime: &tokio::runtime::Runtime,
    failpoints: &Failpoints,
) -> Result<Option<String>, String> {
    let Some(config) = host.config().storage_claim.clone() else {
        return Ok(None);
    };
    let name = host.name().to_owned();
    let membership = config.membership.clone();
    if config.voters.is_empty() {
        return Err(format!(
            "its store is fenced at the authority of `{membership}` (storage authority=), but host.toml names none of its voters: reconcile writes them"
        ));
    }
    let asker = Asker::new(host.dir(), config);
    let (generation, recorded, intent) = host.storage_claim_held().map_err(|e| e.to_string())?;
    let intent = match intent.filter(|i| i.generation == generation) {
        // A start that stopped after journaling its intent sends the same ids again.
        Some(intent) => intent,
        None => {
            let shown = runtime.block_on(asker.show(&claim_of(&name)))?;
            match judge(&name, &membership, generation, recorded, shown.as_ref()) {
                Verdict::Holds { epoch } => {
                    return Ok(Some(format!(
                        "holds `store:{name}` at epoch {epoch} (storage generation {generation}) at the authority of `{membership}`"
                    )));
                }
                Verdict::Refused(reason) => return Err(reason),
                Verdict::Take { advance } => host
                    .storage_claim_intend(generation, advance)
                    .map_err(|e| e.to_string())?,
            }
        }
    };
    let epoch = runtime.block_on(asker.take(&name, &intent))?;
    failpoints.abort_if_armed(Failpoint::StoreClaimBeforeRecord);
    host.storage_claim_record(generation, epoch);
    Ok(Some(format!(
        "took `store:{name}` at epoch {epoch} for storage generation {generation} at the authority of `{membership}`{}",
        if intent.advance {
            ": every earlier store of this installation is fenced"
        } else {
            ""
        }
    )))
}

/// Asks the voters in turn until one answers, or the start's wait is over.
struct Asker {
    membership: String,
    /// Each voter's participant name and its client (built once; or why not).
    voters: Vec<(String, Result<PeerClient, String>)>,
    deadline: Instant,
}

impl Asker {
    fn new(dir: &std::path::Path, config: StorageClaimConfig) -> Asker {
        let voters = config
            .voters
            .iter()
            .map(|v| {
                let client = PeerClient::new(dir, &config.membership, &v.participant, &v.address)
                    .map_err(|e| e.to_string());
                (v.participant.clone(), client)
            })
            .collect();
        Asker {
            membership: config.membership,
            voters,
            deadline: Instant::now() + STORE_CLAIM_START_WAIT,
        }
    }

    /// The claim as a voter shows it after its read barrier.
    async fn show(&self, claim: &str) -> Result<Option<Claim>, String> {
        let call = AuthorityCall::Show {
            claim: claim.to_owned(),
        };
        self.ask(call, claim, |reply| match reply {
            AuthorityReply::Shown { claim, .. } => Some(claim),
            _ => None,
        })
        .await
    }

    /// Takes the claim under the intent's ids: the epoch it is held at afterwards.
    async fn take(&self, host: &str, intent: &Intent) -> Result<u64, String> {
        let claim = claim_of(host);
        let (release, acquire) = intent.ops(host);
        if intent.advance {
            self.command(
                release,
                ClaimCommand::Release {
                    claim: claim.clone(),
                },
            )
            .await?;
        }
        self.command(acquire, ClaimCommand::Acquire { claim }).await
    }

    /// One command, decided by the leader (`succeeded`: the epoch after it).
    async fn command(&self, op: String, command: ClaimCommand) -> Result<u64, String> {
        let claim = command.claim().to_owned();
        let call = AuthorityCall::Claim {
            op: op.clone(),
            command,
        };
        let decided = self
            .ask(call, &claim, |reply| match reply {
                AuthorityReply::Claim {
                    outcome: outcome @ (ClaimOutcome::Succeeded | ClaimOutcome::Failed),
                    epoch,
                    detail,
                    ..
                } => Some((outcome, epoch, detail)),
                _ => None,
            })
            .await?;
        match decided {
            (ClaimOutcome::Succeeded, epoch, _) => Ok(epoch),
            (_, _, detail) => Err(format!(
                "the authority of `{}` refused `{op}`: {detail}; nothing is served",
                self.membership
            )),
        }
    }

    /// Sends `call` to each voter in turn, again every half second, until `decided`
    /// takes a reply or the wait is over.
    async fn ask<T>(
        &self,
        call: AuthorityCall,
        claim: &str,
        decided: impl Fn(AuthorityReply) -> Option<T>,
    ) -> Result<T, String> {
        let membership = &self.membership;
        let path = format!("/authority/{membership}/forward");
        // The last answer (or failure) of each voter, for the refusal.
        let mut heard: BTreeMap<&str, String> = BTreeMap::new();
        loop {
            for (voter, client) in &self.voters {
                let remaining = self.deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    break;
                }
                let client = match client {
                    Ok(client) => client,
                    Err(e) => {
                        heard.insert(voter, e.clone());
                        continue;
                    }
                };
                let body = Forwarded { call: call.clone() };
                let timeout = remaining.min(STORE_CLAIM_CALL_TIMEOUT);
                match client
                    .post::<_, AuthorityReply>(&path, &body, timeout)
                    .await
                {
                    Ok(reply) => {
                        let said = format!("{reply:?}");
                        match decided(reply) {
                            Some(taken) => return Ok(taken),
                            None => heard
                                .insert(voter, grid_spec::diagnostic::quoted(&said).into_owned()),
                        };
                    }
                    Err(e) => {
                        heard.insert(voter, e.to_string());
                    }
                }
            }
            if Instant::now() >= self.deadline {
                let last: Vec<String> = heard.iter().map(|(v, e)| format!("{v}: {e}")).collect();
                return Err(format!(
                    "unknown: no voter of `{membership}` answered for `{claim}` within STORE_CLAIM_START_WAIT ({} s) (last: {}); nothing was served — start it again once its authority runs",
                    STORE_CLAIM_START_WAIT.as_secs(),
                    last.join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
