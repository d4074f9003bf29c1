//! `gridctl wallet show` (docs/wallet.md): a participant's wallet, observed from its
//! original owners — each installed host asked on its control socket — and assembled
//! by the engine's pure `wallet::view::assemble`. Observing changes nothing anywhere.
//!
//! An owner that does not answer is listed `unobserved` with its reason; its numbers
//! are never guessed, zeroed or taken from elsewhere. A host whose installation selects
//! neither `ledger` nor `processes` holds nothing of a wallet and is not asked.

use std::path::Path;

use grid_engine::host::control::Client;
use grid_engine::ledger::api::{LedgerCall, LedgerReply};
use grid_engine::protocol::{Call, Reply};
use grid_engine::wallet::api::{WalletCall, WalletReply};
use grid_engine::wallet::view::{Observed, OwnerAnswer, WalletView, assemble};
use grid_spec::Profile;

use crate::ledger::{Failure, call as ledger_call};
use crate::observe::{self, HostStatus};

/// The open waits of `host`'s caller journal (its control socket).
pub fn waits(dir: &Path) -> Result<Vec<grid_engine::processes::api::RunView>, String> {
    let mut client = Client::connect(dir).map_err(|e| e.to_string())?;
    match client.call(&Call::Wallet {
        request: WalletCall::Waits,
    }) {
        Ok(Reply::Wallet(reply)) => match *reply {
            WalletReply::Waits { waits, .. } => Ok(waits),
            WalletReply::Refused { reason } => Err(reason),
            other => Err(format!("unexpected reply {other:?}")),
        },
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// One owner's answer for the wallet of `host`: its ledgers holding accounts `host`
/// owns (each inspected), its grants and its public manifest; or why it is unobserved.
fn ask_owner(name: &str, dir: &Path, host: &str) -> Vec<Observed> {
    let observation = observe::observe_host(name, dir);
    let Some(config) = observation.config.as_ref() else {
        return vec![unobserved(
            name,
            "ledgers, grants",
            "its host.toml does not read",
        )];
    };
    let keeps_ledgers = config.selects(Profile::Ledger);
    let issues_grants = config.selects(Profile::Processes);
    let holds = match (keeps_ledgers, issues_grants) {
        (false, false) => return Vec::new(),
        (true, false) => "ledgers",
        (false, true) => "grants",
        (true, true) => "ledgers, grants",
    };
    let o = match observation.status {
        HostStatus::Running(o) => o,
        HostStatus::Unreachable { reason } => {
            return vec![unobserved(
                name,
                holds,
                &format!(
                    "its control socket does not answer ({reason}); nothing it holds is shown"
                ),
            )];
        }
        HostStatus::Locked(_) => {
            return vec![unobserved(
                name,
                holds,
                "its custody is locked: it serves reads only until `gridctl custody unlock`; nothing it holds is shown",
            )];
        }
        HostStatus::Missing => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut ledgers = Vec::new();
    for definition in &o.ledgers {
        if !definition
            .accounts
            .iter()
            .any(|a| a.owner.as_deref() == Some(host))
        {
            continue;
        }
        let asked = LedgerCall::Inspect {
            ledger: definition.name.clone(),
            account: None,
        };
        match ledger_call(dir, asked) {
            Ok(LedgerReply::Inspected(view)) => ledgers.push(*view),
            Ok(other) => out.push(unobserved(
                name,
                &format!("ledger {}", definition.name),
                &format!("answered {other:?}"),
            )),
            Err(Failure::Refused(r) | Failure::Unknown(r) | Failure::Unreachable(r)) => {
                out.push(unobserved(name, &format!("ledger {}", definition.name), &r))
            }
        }
    }
    out.push(Observed {
        owner: name.to_owned(),
        answer: OwnerAnswer::Answered {
            ledgers,
            grants: o.grants,
            // The issuer's public manifest, as its installation holds it.
            manifest: grid_engine::custody::manifest(dir).ok(),
        },
    });
    out
}

fn unobserved(owner: &str, holds: &str, reason: &str) -> Observed {
    Observed {
        owner: owner.to_owned(),
        answer: OwnerAnswer::Unobserved {
            holds: holds.split(", ").map(str::to_owned).collect(),
            reason: reason.to_owned(),
        },
    }
}

/// The wallet of `host`, from every installed host under `state` (each its own
/// owner) and `host`'s own wait journal.
pub fn show(state: &Path, host: &str) -> Result<WalletView, String> {
    let dir = observe::installed(state, host)?;
    let mut owners = Vec::new();
    for name in observe::installed_hosts(state) {
        owners.extend(ask_owner(&name, &observe::host_dir(state, &name), host));
    }
    let waits = waits(&dir).map_err(|reason| {
        format!("{host}'s control socket does not answer ({reason}); its open waits are unobserved")
    });
    Ok(assemble(host, &owners, waits))
}

/// Sends a wallet call to the host in `dir` (its control socket).
pub fn call(dir: &Path, request: WalletCall) -> Result<WalletReply, String> {
    let mut client = Client::connect(dir).map_err(|e| e.to_string())?;
    match client.call(&Call::Wallet { request }) {
        Ok(Reply::Wallet(reply)) => match *reply {
            WalletReply::Refused { reason } => Err(reason),
            reply => Ok(reply),
        },
        Ok(Reply::Refused { reason }) => Err(reason),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `host`'s installation directory (for the CLI).
pub fn host_dir(state: &Path, host: &str) -> Result<std::path::PathBuf, String> {
    observe::installed(state, host)
}

/// The installed host that issued grant `grant` to `caller` (asking each running
/// host), for `gridctl wallet surrender`.
pub fn issuer_of(state: &Path, grant: &str, caller: &str) -> Result<String, String> {
    for name in observe::installed_hosts(state) {
        if let HostStatus::Running(o) =
            observe::observe_host(&name, &observe::host_dir(state, &name)).status
            && o.grants
                .iter()
                .any(|g| g.name == grant && g.caller == caller)
        {
            return Ok(name);
        }
    }
    Err(format!(
        "no running host under {} issued grant `{grant}` to `{caller}`",
        state.display()
    ))
}
