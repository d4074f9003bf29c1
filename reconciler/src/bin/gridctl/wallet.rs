//! `gridctl wallet show|propose|surrender|archive|verify|open` (docs/wallet.md).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use grid_engine::wallet::api::{WalletCall, WalletReply};
use grid_engine::wallet::archive;
use grid_engine::wallet::view::{WalletView, render};
use serde::Serialize;

use crate::Output;
use crate::process::ProcessCli;
use crate::report::{Report, emit, emit_failure};

#[derive(Subcommand, Debug)]
pub enum WalletCli {
    /// The wallet of participant HOST, observed from its original owners (read-only;
    /// nothing changes anywhere): every ledger account whose owner is HOST with its
    /// exact balances from the host that keeps the ledger; every execution grant whose
    /// caller is HOST from its issuer, its signed issues verified with the issuer's
    /// public manifest, issuer settlement shown separately (`unobserved` without the
    /// issuer's settlement record); HOST's open waits (unknown at HOST). An owner that
    /// does not answer is listed unobserved with its reason, never as zero. Exit 0
    /// every owner answered, 3 some are unobserved, 1 error.
    #[command(mut_arg("json", |a| a.help(
        "One JSON object {\"host\", \"money\", \"grants\", \"open_waits\", \"unobserved\"}"
    )))]
    Show {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// Propose a transfer at the archive wallet HOST (profile `archive-wallet`): the
    /// Process `wallet.propose` run as CALLER under the id ID. HOST signs and stores
    /// the proposal; it moves no money. The ledger's keeper, its address and keys are
    /// read from the state directory. Exit codes as `process run`.
    Propose {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long = "as", value_name = "CALLER")]
        caller: String,
        /// The request id, which is the proposal's id.
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "LEDGER")]
        ledger: String,
        #[arg(long, value_name = "ACCOUNT")]
        debit: String,
        #[arg(long, value_name = "ACCOUNT")]
        credit: String,
        /// Integer minor units.
        #[arg(long, value_name = "N")]
        amount: u128,
        #[arg(long, value_name = "CUR")]
        currency: String,
        #[arg(long)]
        pending: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Surrender the available units of grant GRANT (held by the archive wallet HOST)
    /// through its issuer: the Process `wallet.surrender` run as CALLER under the id
    /// ID; refused while HOST has unresolved effects under it (open waits, unknown or
    /// reserved units). Exit codes as `process run`.
    Surrender {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long = "as", value_name = "CALLER")]
        caller: String,
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "GRANT")]
        grant: String,
        #[command(flatten)]
        output: Output,
    },
    /// Write a coherent archive of the archive wallet HOST to FILE (0600): its
    /// proposals and history at one journal position, its observation, the archive
    /// metadata and HOST's public manifest, signed by HOST's custody key.
    Archive {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        #[command(flatten)]
        output: Output,
    },
    /// Verify an archive offline with the public keys inside it (no host, no secret:
    /// the signing key may be absent), and with --keys against a custody manifest
    /// (`keys/custody.toml`). Exit 0 verified, 1 it does not (naming what failed).
    #[command(mut_arg("state", |a| a.help(
        "Ignored: verification asks no host and reads nothing but FILE (and --keys)"
    )))]
    Verify {
        file: PathBuf,
        /// A public custody manifest the archive's must equal.
        #[arg(long, value_name = "MANIFEST")]
        keys: Option<PathBuf>,
        #[command(flatten)]
        output: Output,
    },
    /// Open an archive at the archive wallet HOST as a foreign archive: verified, then
    /// observed only — its history and observation readable (`wallet.history`,
    /// `wallet.observe` with `archive=FROM`), no spending (its manifest grants no
    /// rights). Exit 0 opened, 4 refused.
    Open {
        file: PathBuf,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
}

#[derive(Serialize)]
#[serde(transparent)]
struct Shown(WalletView);

impl Report for Shown {
    fn text(&self) -> String {
        render(&self.0)
    }
}

/// Any JSON answer, with its text line.
#[derive(Serialize)]
#[serde(transparent)]
struct Said {
    json: serde_json::Value,
    #[serde(skip)]
    text: String,
}

impl Report for Said {
    fn text(&self) -> String {
        self.text.clone()
    }
}

fn manifest_json(keys: &grid_engine::custody::Manifest) -> String {
    serde_json::to_string(keys).expect("manifests serialize")
}

pub fn wallet(command: WalletCli) -> anyhow::Result<ExitCode> {
    match command {
        WalletCli::Show { host, output } => {
            let view =
                grid_reconciler::wallet::show(&output.state, &host).map_err(anyhow::Error::msg)?;
            let complete = view.complete();
            emit(&Shown(view), output.json);
            Ok(ExitCode::from(if complete { 0 } else { 3 }))
        }
        WalletCli::Propose {
            host,
            caller,
            op,
            ledger,
            debit,
            credit,
            amount,
            currency,
            pending,
            output,
        } => {
            let state = &output.state;
            let (keeper, _) = grid_reconciler::ledger::keeper(state, &ledger, None)
                .map_err(anyhow::Error::msg)?;
            let peer =
                grid_reconciler::processes::peer(state, &keeper).map_err(anyhow::Error::msg)?;
            let membership =
                grid_reconciler::processes::common_membership(state, &[&host, &keeper])
                    .with_context(|| format!("`{host}` and `{keeper}` share no membership"))?;
            let mut args = vec![
                format!("ledger={ledger}"),
                format!("keeper={keeper}"),
                format!("keeper_address={}", peer.address),
                format!("keeper_keys={}", manifest_json(&peer.keys)),
                format!("membership={membership}"),
                format!("debit={debit}"),
                format!("credit={credit}"),
                format!("amount={amount}"),
                format!("currency={currency}"),
            ];
            if pending {
                args.push("pending=true".to_owned());
            }
            crate::process::process(ProcessCli::Run {
                host,
                process: "wallet.propose".to_owned(),
                caller,
                op,
                via: None,
                membership: None,
                args,
                wait_ms: None,
                output,
            })
        }
        WalletCli::Surrender {
            host,
            caller,
            op,
            grant,
            output,
        } => {
            let state = &output.state;
            let issuer = grid_reconciler::wallet::issuer_of(state, &grant, &host)
                .map_err(anyhow::Error::msg)?;
            let peer =
                grid_reconciler::processes::peer(state, &issuer).map_err(anyhow::Error::msg)?;
            let membership =
                grid_reconciler::processes::common_membership(state, &[&host, &issuer])
                    .with_context(|| format!("`{host}` and `{issuer}` share no membership"))?;
            let args = vec![
                format!("grant={grant}"),
                format!("issuer={issuer}"),
                format!("issuer_address={}", peer.address),
                format!("issuer_keys={}", manifest_json(&peer.keys)),
                format!("membership={membership}"),
            ];
            crate::process::process(ProcessCli::Run {
                host,
                process: "wallet.surrender".to_owned(),
                caller,
                op,
                via: None,
                membership: None,
                args,
                wait_ms: None,
                output,
            })
        }
        WalletCli::Archive { host, out, output } => {
            let dir = grid_reconciler::wallet::host_dir(&output.state, &host)
                .map_err(anyhow::Error::msg)?;
            let text = match grid_reconciler::wallet::call(&dir, WalletCall::Archive) {
                Ok(WalletReply::Archived { archive }) => archive,
                Ok(other) => bail!("the host answered {other:?}"),
                Err(reason) => bail!("{host} made no archive: {reason}"),
            };
            // Verified before it is written: what is kept is what verifies.
            let body = archive::verify(&text, None)
                .map_err(|e| anyhow::anyhow!("the archive {host} made does not verify: {e}"))?;
            grid_engine::custody::write_private(&out, text.as_bytes())
                .with_context(|| format!("writing {}", out.display()))?;
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&out)
                    .with_context(|| format!("reading {}", out.display()))?
                    .permissions(),
            ) & 0o777;
            let json = serde_json::json!({
                "host": host,
                "out": out,
                "mode": format!("{mode:o}"),
                "bytes": text.len(),
                "digest": archive::digest(&text),
                "position": body.metadata.position,
                "proposals": body.proposals.len(),
                "created_ms": body.metadata.created_ms,
            });
            let said = Said {
                text: format!(
                    "archived the wallet of {host} at journal position {} ({} proposal(s)) to {} (0600, {} bytes)\n",
                    body.metadata.position,
                    body.proposals.len(),
                    out.display(),
                    text.len()
                ),
                json,
            };
            emit(&said, output.json);
            Ok(ExitCode::SUCCESS)
        }
        WalletCli::Verify { file, keys, output } => {
            let json = output.json;
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let given = match &keys {
                Some(path) => Some(
                    archive::manifest_from_toml(
                        &std::fs::read_to_string(path)
                            .with_context(|| format!("reading {}", path.display()))?,
                    )
                    .map_err(|e| {
                        anyhow::anyhow!("{} is not a custody manifest: {e}", path.display())
                    })?,
                ),
                None => None,
            };
            match archive::verify(&text, given.as_ref()) {
                Ok(body) => {
                    let m = &body.metadata;
                    let said = Said {
                        text: format!(
                            "verified: the wallet archive of {} ({}, installation {}) made at {} ms, journal position {}, {} proposal(s), signed with signing key generation {}\n",
                            m.host,
                            m.interface,
                            m.installation,
                            m.created_ms,
                            m.position,
                            body.proposals.len(),
                            body.manifest.generation
                        ),
                        json: serde_json::json!({
                            "verified": true,
                            "file": file,
                            "digest": archive::digest(&text),
                            "metadata": m,
                            "proposals": body.proposals.len(),
                            "entries": body.history.len(),
                            "observation": body.observation,
                        }),
                    };
                    emit(&said, json);
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    let said = Said {
                        text: format!("NOT verified: {}: {e}\n", file.display()),
                        json: serde_json::json!({
                            "verified": false,
                            "file": file,
                            "failed": e.to_string(),
                        }),
                    };
                    emit_failure(&said, json);
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        WalletCli::Open { file, host, output } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let dir = grid_reconciler::wallet::host_dir(&output.state, &host)
                .map_err(anyhow::Error::msg)?;
            let refuse = |reason: String| {
                let said = Said {
                    text: format!("refused: {reason}\n"),
                    json: serde_json::json!({"host": host, "file": file, "outcome": "refused", "detail": reason}),
                };
                emit_failure(&said, output.json);
                Ok(ExitCode::from(4))
            };
            if let Err(e) = archive::verify(&text, None) {
                return refuse(format!(
                    "the archive does not verify: {e}; nothing was opened"
                ));
            }
            match grid_reconciler::wallet::call(&dir, WalletCall::Open { archive: text }) {
                Ok(WalletReply::Opened {
                    host: at,
                    from,
                    created_ms,
                    already,
                }) => {
                    let said = Said {
                        text: format!(
                            "opened the archive of {from} (made at {created_ms} ms) at {at}: observed only, it cannot spend{}\n",
                            if already { " (already open)" } else { "" }
                        ),
                        json: serde_json::json!({
                            "host": at, "from": from, "created_ms": created_ms,
                            "already": already, "outcome": "succeeded", "observed_only": true,
                        }),
                    };
                    emit(&said, output.json);
                    Ok(ExitCode::SUCCESS)
                }
                Ok(other) => bail!("the host answered {other:?}"),
                Err(reason) => refuse(reason),
            }
        }
    }
}
