//! `gridctl storage`: an operator's triggers of what a host does to its storage on its
//! own cadence (docs/storage.md), as `etcdctl compact` is: each an operation with an id.

use std::process::ExitCode;

use clap::Subcommand;
use grid_engine::protocol::Request;
use grid_reconciler::observe;

use crate::Output;

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
    }
}
