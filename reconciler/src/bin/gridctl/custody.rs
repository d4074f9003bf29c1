//! `gridctl custody lock|unlock HOST --passphrase-file FILE` (docs/custody.md, "Locked
//! custody"): the operator's passphrase reaches the running host over its control
//! socket (0600) and nowhere else — never an argument, never the files, never a log.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use grid_engine::host::control::Client;
use grid_engine::limits::CUSTODY_PASSPHRASE_BYTES_MAX;
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
    /// CUSTODY_PASSPHRASE_BYTES_MIN), 1 the host could not be asked.
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
    /// (or already), 4 refused, 1 the host could not be asked.
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
    /// `succeeded` or `refused`.
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
    let passphrase = read_passphrase(&file)?;
    let request = if lock {
        CustodyCall::Lock { passphrase }
    } else {
        CustodyCall::Unlock { passphrase }
    };
    let dir = observe::host_dir(&output.state, &host);
    let reply = Client::connect(&dir)
        .and_then(|mut c| c.call(&Call::Custody { request }))
        .with_context(|| format!("asking host `{host}` (is its gridd running?)"))?;
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

/// The passphrase in `file`: UTF-8, one trailing newline (`\n` or `\r\n`) dropped,
/// at most CUSTODY_PASSPHRASE_BYTES_MAX bytes read.
fn read_passphrase(file: &Path) -> anyhow::Result<Passphrase> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| {
            f.take(CUSTODY_PASSPHRASE_BYTES_MAX as u64 + 2)
                .read_to_end(&mut bytes)
        })
        .with_context(|| format!("reading the passphrase file {}", file.display()))?;
    let bytes = zeroize::Zeroizing::new(bytes);
    let mut text = match std::str::from_utf8(&bytes) {
        Ok(text) => zeroize::Zeroizing::new(text.to_owned()),
        Err(_) => bail!("the passphrase file {} is not UTF-8 text", file.display()),
    };
    for end in ["\r\n", "\n"] {
        if text.ends_with(end) {
            let keep = text.len() - end.len();
            text.truncate(keep);
            break;
        }
    }
    if text.len() > CUSTODY_PASSPHRASE_BYTES_MAX {
        bail!(
            "the passphrase in {} is longer than CUSTODY_PASSPHRASE_BYTES_MAX ({CUSTODY_PASSPHRASE_BYTES_MAX} bytes)",
            file.display()
        );
    }
    if text.is_empty() {
        bail!("the passphrase file {} is empty", file.display());
    }
    Ok(Passphrase::new(text.to_string()))
}
