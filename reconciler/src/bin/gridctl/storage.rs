//! `gridctl storage`: an operator's triggers of what a host does to its storage on its
//! own cadence (docs/storage.md), as `etcdctl compact` is: each an operation with an id.

use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply, Request};
use grid_engine::store::shelf::Verification;
use grid_reconciler::observe;

use crate::Output;
use crate::report::{Rendered, emit};

#[derive(Subcommand, Debug)]
pub enum StorageCli {
    /// Checkpoint every model and every published route of a host now and purge
    /// what the checkpoints cover (batches; publications every recipient receipted),
    /// each tag's journal below what its models projected, and each Ordered inbox below
    /// what its models took (the host does this by itself every
    /// MODEL_CHECKPOINT_BATCHES_MAX batches, DELIVERY_CHECKPOINT_POSITIONS_MAX
    /// publications, TAG_JOURNAL_HOT_ENTRIES_MAX and INBOX_HOT_ENTRIES_MAX entries).
    /// Re-sending the id returns the first answer. Exit 0 succeeded, 1 failed, 3
    /// unknown, 4 refused.
    Checkpoint {
        /// The host.
        #[arg(long, value_name = "NAME")]
        host: String,
        /// The operation id.
        #[arg(long, value_name = "ID")]
        op: String,
        #[command(flatten)]
        output: Output,
    },
    /// Move a host's acknowledged answers older than N seconds to its archive now,
    /// whatever `retain hot-days` says (the host does this by itself every
    /// ARCHIVE_CHECK_INTERVAL for answers past `hot-days`): operations' answers, a
    /// receiver's finished runs (not one whose outcome a mailbox caller is still owed,
    /// nor one charged to a mission's allocation), a caller's closed waits and a
    /// ledger's answers and closed transfers settled by a checkpoint. A
    /// re-sent id of an archived answer or run still gets that answer, marked
    /// `"archived": true` where it is shown. Re-sending
    /// this command's id returns its first answer. Exit 0 succeeded, 1 failed, 3
    /// unknown, 4 refused.
    Archive {
        /// The host.
        #[arg(long, value_name = "NAME")]
        host: String,
        /// Answers older than this many seconds move (0: every acknowledged answer).
        #[arg(long, value_name = "N")]
        older_than_seconds: u64,
        /// The operation id.
        #[arg(long, value_name = "ID")]
        op: String,
        #[command(flatten)]
        output: Output,
    },
    /// Read back every segment of a host's archive and verify it: its size against the
    /// host's store, the sequence number in its header against its name, its
    /// checksum and its signature by the host (any key generation, retired ones
    /// too); name every segment changed, missing, cut or unknown to the store. Changes
    /// nothing. Exit 0 every segment verifies, 1 a problem was found or the host could
    /// not be asked.
    Verify {
        /// The host.
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
}

pub fn storage(command: StorageCli) -> anyhow::Result<ExitCode> {
    match command {
        StorageCli::Checkpoint { host, op, output } => {
            let dir = observe::host_dir(&output.state, &host);
            Ok(crate::hosts::submit(
                &dir,
                op,
                Request::Checkpoint {},
                &output,
            ))
        }
        StorageCli::Archive {
            host,
            older_than_seconds,
            op,
            output,
        } => {
            let dir = observe::host_dir(&output.state, &host);
            Ok(crate::hosts::submit(
                &dir,
                op,
                Request::Archive { older_than_seconds },
                &output,
            ))
        }
        StorageCli::Verify { host, output } => verify(&host, &output),
    }
}

/// `gridctl storage verify --host NAME`.
fn verify(host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let dir = observe::host_dir(&output.state, host);
    let reply = Client::connect(&dir).and_then(|mut c| c.call(&Call::VerifyArchive))?;
    let found = match reply {
        Reply::ArchiveVerified(found) => found,
        Reply::Refused { reason } => bail!("{reason}"),
        other => bail!("the host answered {other:?}"),
    };
    let ok = found.problems.is_empty();
    let mut json = serde_json::to_value(&*found)?;
    json["host"] = host.into();
    json["ok"] = ok.into();
    emit(&Rendered::new(json, text(host, &found)), output.json);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn text(host: &str, found: &Verification) -> String {
    let mut out = format!(
        "archive of {host} ({}): {} of {} segments verified ({} answers, {} bytes), {} released\n",
        found.store, found.verified, found.segments, found.answers, found.bytes, found.released
    );
    if found.index_records > 0 {
        out.push_str(&format!(
            "  {} index records read back from the table and found pointing at their answers\n",
            found.index_records
        ));
    }
    for problem in &found.problems {
        out.push_str(&format!("  {}: {}\n", problem.segment, problem.problem));
    }
    out
}
