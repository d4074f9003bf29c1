//! Requests completed when they are sent: a whole plan names, for hosts it creates,
//! values that exist only after earlier transitions apply (their public keys, the
//! membership they will share). The template holds everything the files say; the
//! rest is read from the owners' installations at apply time (Terraform's "known
//! after apply").

use std::path::Path;

use grid_engine::delivery::api::{Geometry, RouteDestination, RouteInstall};
use grid_engine::delivery::receipts::Class;
use grid_engine::processes::api::{GrantIssue, MailboxAt};
use grid_engine::protocol::Request;
use serde::{Deserialize, Serialize};

use crate::observe;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "template", rename_all = "kebab-case")]
pub enum Template {
    /// `Request::InstallRoute` at `at` (the publisher, or one destination).
    Route {
        name: String,
        membership: String,
        class: Class,
        encrypted: bool,
        publisher: String,
        /// `(host, address, retired)` of each destination.
        destinations: Vec<(String, String, bool)>,
        at: String,
        /// A mapping: the geometry of the matrices it carries.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        matrix: Option<Geometry>,
    },
    /// `Request::IssueGrant` at `issuer`.
    Grant {
        name: String,
        issuer: String,
        caller: String,
        units: u64,
        allocated_before: u64,
        /// `(host, address)` of the mailbox.
        mailbox: Option<(String, String)>,
        /// The one membership the grant serves (`grant … membership=M`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        membership: Option<String>,
    },
    /// `Request::InstallExport` at the gateway: the disclosure its issuer signed, read
    /// from the issuer when it is sent.
    Export { name: String, issuer: String },
    /// `Request::InstallDecision` at the decision's host: the parties' public keys
    /// and the owner's membership read when it is sent.
    Decision {
        policy: grid_engine::decisions::api::Policy,
        /// The effect's owner's address.
        address: String,
    },
}

impl Template {
    /// The request, with the values read from the owners now.
    pub fn resolve(&self, state: &Path) -> Result<Request, String> {
        let keys = |host: &str| {
            grid_engine::custody::manifest(&observe::host_dir(state, host))
                .map_err(|e| format!("the public keys of `{host}` cannot be read: {e}"))
        };
        match self {
            Template::Decision { policy, address } => decision_install(state, policy, address),
            Template::Export { name, issuer } => {
                crate::observe::export_install(state, name, issuer)
            }
            Template::Route {
                name,
                membership,
                class,
                encrypted,
                publisher,
                destinations,
                at,
                matrix,
            } => {
                let mut install = RouteInstall {
                    name: name.clone(),
                    membership: membership.clone(),
                    class: *class,
                    encrypted: *encrypted,
                    publisher: publisher.clone(),
                    destinations: Vec::with_capacity(destinations.len()),
                    matrix: *matrix,
                };
                for (host, address, retired) in destinations {
                    install.destinations.push(RouteDestination {
                        host: host.clone(),
                        address: address.clone(),
                        retired: *retired,
                        keys: keys(host)?,
                    });
                }
                let route = if at == publisher {
                    install
                } else {
                    install.for_destination(at)
                };
                Ok(Request::InstallRoute { route })
            }
            Template::Grant {
                name,
                issuer,
                caller,
                units,
                allocated_before,
                mailbox,
                membership,
            } => {
                let mailbox = match mailbox {
                    None => None,
                    Some((host, address)) => Some(MailboxAt {
                        host: host.clone(),
                        address: address.clone(),
                        // The grant's own membership, when it serves one.
                        membership: match membership {
                            Some(m) => m.clone(),
                            None => crate::observe::common_membership(state, &[issuer, host])
                                .ok_or_else(|| {
                                    format!(
                                        "`{issuer}` and mailbox `{host}` share no enrolled membership"
                                    )
                                })?,
                        },
                    }),
                };
                Ok(Request::IssueGrant {
                    grant: GrantIssue {
                        name: name.clone(),
                        caller: caller.clone(),
                        units: *units,
                        allocated_before: *allocated_before,
                        caller_keys: keys(caller)?,
                        mailbox,
                        membership: membership.clone(),
                    },
                })
            }
        }
    }
}

/// The install of `policy` with the parties' keys and the owner's membership read
/// from their installations now (a template completed when it is sent).
fn decision_install(
    state: &Path,
    policy: &grid_engine::decisions::api::Policy,
    address: &str,
) -> Result<Request, String> {
    let keys = |host: &str| {
        grid_engine::custody::manifest(&observe::host_dir(state, host))
            .map_err(|e| format!("the public keys of `{host}` cannot be read: {e}"))
    };
    let mut parties: std::collections::BTreeMap<String, grid_engine::custody::Manifest> =
        std::collections::BTreeMap::new();
    for party in policy.roster.iter().chain([&policy.gate]) {
        if *party != policy.host && !parties.contains_key(party) {
            parties.insert(party.clone(), keys(party)?);
        }
    }
    let membership =
        observe::common_membership(state, &[&policy.host, &policy.owner]).ok_or_else(|| {
            format!(
                "`{}` and the effect's owner `{}` share no enrolled membership",
                policy.host, policy.owner
            )
        })?;
    Ok(Request::InstallDecision {
        decision: Box::new(grid_engine::decisions::api::DecisionInstall {
            policy: policy.clone(),
            owner: grid_engine::processes::api::Peer {
                name: policy.owner.clone(),
                address: address.to_owned(),
                keys: keys(&policy.owner)?,
            },
            membership,
            keys: parties,
        }),
    })
}
