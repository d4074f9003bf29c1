//! `gridctl custody lock|unlock HOST --passphrase-file FILE` (docs/custody.md, "Locked
//! custody"): the operator's passphrase reaches the running host over its control
//! socket (0600) and nowhere else — never an argument, never the files, never a log.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use grid_engine::host::control::{CallError, Client};
use grid_engine::protocol::{Call, CustodyCall, Passphrase, Reply};
use grid_reconciler::observe;
use serde::Serialize;

use crate::Output;
use crate::report::{Report, emit};

#[derive(Subcommand, Debug)]
pub enum CustodyCli {
    /// Encrypt HOST's signing and mail keys at rest (encrypted PKCS#8: scrypt,
    /// AES-256-GCM) under the passphrase in FILE; again on a locked custody: change the
    /// passphrase. The running gridd keeps its keys in use; from its next start it
    /// serves reads and retained answers only, signing and admitting nothing, until
    /// `gridctl custody unlock`. The TLS key stays unencrypted (reads are served over
    /// TLS). Exit 0 locked, 4 refused (a passphrase shorter than
    /// CUSTODY_PASSPHRASE_BYTES_MIN), 3 unknown (the reply was lost: the same command
    /// again completes it), 1 the host could not be asked.
    Lock {
        /// The host (it must run).
        host: String,
        #[command(flatten)]
        passphrase: PassphraseFile,
        #[command(flatten)]
        output: Output,
    },
    /// Unlock HOST's custody with the passphrase in FILE: every key is decrypted and
    /// checked against the custody manifest, then a gridd that started locked starts
    /// its rooms. A wrong passphrase is refused and changes nothing. Exit 0 unlocked
    /// (or already), 4 refused, 3 unknown (the reply was lost), 1 the host could not be
    /// asked.
    Unlock {
        /// The host (it must run).
        host: String,
        #[command(flatten)]
        passphrase: PassphraseFile,
        #[command(flatten)]
        output: Output,
    },
}

#[derive(clap::Args, Debug)]
pub struct PassphraseFile {
    /// A file holding the passphrase (one trailing newline ignored), e.g. a systemd
    /// credential (`$CREDENTIALS_DIRECTORY/grid-passphrase`) or `/dev/fd/3`.
    #[arg(long, value_name = "FILE")]
    passphrase_file: PathBuf,
}

/// What a custody call did.
#[derive(Serialize)]
struct Done {
    host: String,
    /// `succeeded`, `refused` or `unknown` (the reply was lost).
    outcome: &'static str,
    encrypted: Option<bool>,
    locked: Option<bool>,
    detail: String,
}

impl Report for Done {
    fn text(&self) -> String {
        format!("{}: {}\n", self.outcome, self.detail)
    }
}

pub fn custody(command: CustodyCli) -> anyhow::Result<ExitCode> {
    let (host, file, output, lock) = match command {
        CustodyCli::Lock {
            host,
            passphrase,
            output,
        } => (host, passphrase.passphrase_file, output, true),
        CustodyCli::Unlock {
            host,
            passphrase,
            output,
        } => (host, passphrase.passphrase_file, output, false),
    };
    let passphrase = grid_engine::custody::read_passphrase_file(&file)
        .map(|text| Passphrase::new(text.to_string()))?;
    let request = if lock {
        CustodyCall::Lock { passphrase }
    } else {
        CustodyCall::Unlock { passphrase }
    };
    let dir = observe::host_dir(&output.state, &host);
    let reply = match Client::connect(&dir).and_then(|mut c| c.call(&Call::Custody { request })) {
        Ok(reply) => reply,
        // Sent, and no answer came: the lock may have happened in part; its files
        // say (`gridctl status`), and the same command again completes it.
        Err(CallError::Lost { detail }) => {
            let done = Done {
                host,
                outcome: "unknown",
                encrypted: None,
                locked: None,
                detail: format!(
                    "the reply was lost ({detail}): `gridctl status` shows the custody; the same command again completes it"
                ),
            };
            emit(&done, output.json);
            return Ok(ExitCode::from(3));
        }
        Err(e) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("asking host `{host}` (is its gridd running?)"));
        }
    };
    let (done, code) = match reply {
        Reply::Custody {
            encrypted,
            locked,
            said,
        } => (
            Done {
                host,
                outcome: "succeeded",
                encrypted: Some(encrypted),
                locked: Some(locked),
                detail: said,
            },
            0,
        ),
        Reply::Refused { reason } => (
            Done {
                host,
                outcome: "refused",
                encrypted: None,
                locked: None,
                detail: reason,
            },
            4,
        ),
        other => bail!("host `{host}` answered a custody call with {other:?}"),
    };
    emit(&done, output.json);
    Ok(ExitCode::from(code))
}
