//! Ledgers (profile `ledger`, docs/ledger.md): plan transitions — `+ ledger L @ H`
//! (install it with its accounts), `+ account L:A @ H` (open one more), `~ account
//! L:A @ H` (retire it: `retired=#true` closes it to new transfers) — and the operator's
//! calls: `gridctl ledger transfer|post|void`, `gridctl inspect ledger`.
//!
//! An account is never deleted or changed: another currency, owner or balance flag in
//! the files than the ledger holds is `!`, and so is a ledger or account the host keeps
//! that no file declares (unmanaged; nothing is retired).

use std::path::{Path, PathBuf};

use grid_engine::host::control::Client;
use grid_engine::ledger::api::{AccountDefinition, LedgerCall, LedgerDefinition, LedgerReply};
use grid_engine::protocol::{Call, Reply, Request};
use grid_spec::{Profile, Topology};

use crate::observe::{self, HostStatus, World};
use crate::transition::Draft;
use crate::transition::{Action, Op};

/// An account as the owner takes it.
pub fn definition(account: &grid_spec::topology::Account) -> AccountDefinition {
    AccountDefinition {
        name: account.name.clone(),
        currency: account.currency.clone(),
        owner: account.owner.clone(),
        debits_must_not_exceed_credits: account.debits_must_not_exceed_credits,
        credits_must_not_exceed_debits: account.credits_must_not_exceed_debits,
        retired: account.retired,
    }
}

fn describe(account: &AccountDefinition) -> String {
    let mut parts = vec![account.currency.clone()];
    if let Some(owner) = &account.owner {
        parts.push(format!("owner {owner}"));
    }
    if account.debits_must_not_exceed_credits {
        parts.push("debits-must-not-exceed-credits".to_owned());
    }
    if account.credits_must_not_exceed_debits {
        parts.push("credits-must-not-exceed-debits".to_owned());
    }
    if account.retired {
        parts.push("retired".to_owned());
    }
    parts.join(", ")
}

/// The plan's name of an account: `LEDGER:ACCOUNT` (names never hold `:`).
pub fn account_name(ledger: &str, account: &str) -> String {
    format!("{ledger}:{account}")
}

/// Every ledger's transitions at its host: one that runs with the `ledger` profile,
/// or one this plan creates (it certainly keeps no ledger yet).
pub fn transitions(topology: &Topology, world: &World) -> Vec<Draft> {
    let mut out = Vec::new();
    for ledger in &topology.ledgers {
        let host = &ledger.host;
        let key = format!("ledger:{host}:{}", ledger.name);
        let install = || {
            let accounts: Vec<AccountDefinition> = ledger.accounts.iter().map(definition).collect();
            Draft::new(
                Op::Create,
                "ledger",
                &ledger.name,
                host,
                format!(
                    "{} account(s): {}",
                    accounts.len(),
                    accounts
                        .iter()
                        .map(|a| format!("{} ({})", a.name, describe(a)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Action::Submit {
                    request: Request::InstallLedger {
                        ledger: LedgerDefinition {
                            name: ledger.name.clone(),
                            accounts,
                        },
                    },
                },
            )
            .key(key.clone())
            .after([format!("host:{host}")])
        };
        if world.missing(host) {
            out.push(install());
            continue;
        }
        let Some(observed) = world.running(host) else {
            continue; // the host's own line says it does not run
        };
        let selects = world
            .host(host)
            .and_then(|o| o.config.as_ref())
            .is_some_and(|c| c.selects(Profile::Ledger));
        if !selects {
            continue; // its `~ host` line comes first
        }
        let Some(held) = observed.ledgers.iter().find(|l| l.name == ledger.name) else {
            let observation = world.host(host);
            match observation.filter(|o| o.held_ledgers.contains(&ledger.name)) {
                // Its custody says this installation held it: the store lost it.
                Some(o) => out.push(
                    Draft::lost(
                        "ledger",
                        &ledger.name,
                        host,
                        &o.dir,
                        grid_engine::store::held::HELD_LEDGERS_FILE,
                        "answer its transfer ids as new and move their amounts again",
                    )
                    .key(key.clone()),
                ),
                None => out.push(install()),
            }
            continue;
        };
        for account in &ledger.accounts {
            let wanted = definition(account);
            let name = account_name(&ledger.name, &account.name);
            let attention = |detail: String| Draft::attention("account", &name, host, detail);
            let Some(current) = held.accounts.iter().find(|a| a.name == account.name) else {
                out.push(
                    Draft::new(
                        Op::Create,
                        "account",
                        &name,
                        host,
                        describe(&wanted),
                        Action::Submit {
                            request: Request::OpenAccount {
                                ledger: ledger.name.clone(),
                                account: wanted.clone(),
                            },
                        },
                    )
                    .key(format!("account:{host}:{name}"))
                    .after([key.clone()]),
                );
                continue;
            };
            let unchanged = AccountDefinition {
                retired: current.retired,
                ..wanted.clone()
            };
            if unchanged != *current {
                out.push(attention(format!(
                    "the ledger holds it as {}, the files say {}: an account never changes; retire it and open another",
                    describe(current),
                    describe(&wanted)
                )));
                continue;
            }
            match (wanted.retired, current.retired) {
                (true, false) => out.push(
                    Draft::new(
                        Op::Change,
                        "account",
                        &name,
                        host,
                        "retired=#true in the files: closed to new transfers (its balances and pending transfers stay)".to_owned(),
                        Action::Submit {
                            request: Request::RetireAccount {
                                ledger: ledger.name.clone(),
                                account: account.name.clone(),
                            },
                        },
                    )
                    .key(format!("account:{host}:{name}")),
                ),
                (false, true) => out.push(attention(
                    "retired at the ledger; a retired account is never reopened: declare a new account"
                        .to_owned(),
                )),
                _ => {}
            }
        }
        for current in &held.accounts {
            if !ledger.accounts.iter().any(|a| a.name == current.name) {
                out.push(Draft::attention(
                    "account",
                    &account_name(&ledger.name, &current.name),
                    host,
                    "unmanaged: the ledger holds it but no file declares it; nothing is retired"
                        .to_owned(),
                ));
            }
        }
    }
    for o in &world.hosts {
        if let HostStatus::Running(observed) = &o.status {
            for held in &observed.ledgers {
                if !topology
                    .ledgers
                    .iter()
                    .any(|l| l.name == held.name && l.host == o.name)
                {
                    out.push(Draft::attention(
                        "ledger",
                        &held.name,
                        &o.name,
                        format!(
                            "unmanaged: the host keeps it ({} account(s)) but no file declares it here; nothing is retired",
                            held.accounts.len()
                        ),
                    ));
                }
            }
        }
    }
    out
}

/// The installed host that keeps `ledger` (asking each running one), or `host`'s
/// directory when given.
pub fn keeper(state: &Path, ledger: &str, host: Option<&str>) -> Result<(String, PathBuf), String> {
    if let Some(host) = host {
        return Ok((host.to_owned(), observe::installed(state, host)?));
    }
    let mut unreachable = Vec::new();
    for name in observe::installed_hosts(state) {
        let dir = observe::host_dir(state, &name);
        match observe::observe_host(&name, &dir).status {
            HostStatus::Running(o) if o.ledgers.iter().any(|l| l.name == ledger) => {
                return Ok((name, dir));
            }
            HostStatus::Running(_) => {}
            _ => unreachable.push(name),
        }
    }
    let also = if unreachable.is_empty() {
        String::new()
    } else {
        format!("; not reachable: {}", unreachable.join(", "))
    };
    Err(format!(
        "no running host under {} keeps ledger `{ledger}`{also} (name it with --host)",
        state.display()
    ))
}

/// Why a ledger call did not come back with a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Nothing was sent: the host's control socket does not answer.
    Unreachable(String),
    /// The host refused the whole call; it changed nothing.
    Refused(String),
    /// The call was sent and no reply came: its outcome is unknown (look the ids up,
    /// or re-send the same ids: never new ones).
    Unknown(String),
}

/// One ledger call to the host in `dir` (its control socket).
pub fn call(dir: &Path, request: LedgerCall) -> Result<LedgerReply, Failure> {
    let mut client = Client::connect(dir).map_err(|e| Failure::Unreachable(e.to_string()))?;
    match client.call(&Call::Ledger { request }) {
        Ok(Reply::Ledger(reply)) => match *reply {
            LedgerReply::Refused { reason } => Err(Failure::Refused(reason)),
            reply => Ok(reply),
        },
        Ok(Reply::Refused { reason }) => Err(Failure::Refused(reason)),
        Ok(other) => Err(Failure::Refused(format!("unexpected reply {other:?}"))),
        Err(e) => Err(Failure::Unknown(e.to_string())),
    }
}
