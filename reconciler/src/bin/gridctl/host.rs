//! `gridctl host replace-storage HOST --from COPY|ARCHIVE --op ID` (docs/transfer.md,
//! "Storage replacement"): a stopped host's store replaced by a copy of it (a directory
//! or a tar archive) under a new storage generation, the store it replaces fenced and
//! kept.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use grid_reconciler::replace::{self, NotReplaced};
use serde::Serialize;

use crate::Output;
use crate::report::{Report, emit};

#[derive(Subcommand, Debug)]
pub enum HostCli {
    /// Replace the store of HOST (stopped) by COPY, a copy of its store directory
    /// (`DIR/store`, copied while gridd was stopped), or ARCHIVE, a tar archive of it
    /// (`tar -C DIR -cf store.tar store`), under storage generation N+1: COPY is
    /// copied in (ARCHIVE unpacked, refused when an entry leaves the store, is a link
    /// or is cut short), verified file by file and judged as gridd would (this
    /// installation's store, its format, no acknowledged write missing, no mission of
    /// the host active); the store it replaces is kept in `DIR/replaced/store.N` and
    /// fenced — a gridd refuses it if it ever comes back. A stop midway is finished by
    /// the same command with the same op id; re-sending a finished op id returns its
    /// first answer. Exit 0 replaced, 4 refused (nothing replaced), 1 failed midway.
    ReplaceStorage {
        /// The host.
        host: String,
        /// The copy of the host's store directory to put in place, or a tar archive
        /// of it.
        #[arg(long, value_name = "COPY|ARCHIVE")]
        from: PathBuf,
        /// The operation id.
        #[arg(long, value_name = "ID")]
        op: String,
        #[command(flatten)]
        output: Output,
    },
}

/// What a replacement did.
#[derive(Serialize)]
struct Done {
    op: String,
    host: String,
    /// `succeeded`, `refused` or `failed`.
    outcome: &'static str,
    /// The storage generation installed, and the one it replaced.
    generation: Option<u64>,
    replaced: Option<u64>,
    /// Where the replaced store is kept.
    kept: Option<PathBuf>,
    /// Whether this was a re-sent, finished op id.
    replayed: bool,
    detail: String,
}

impl Report for Done {
    fn text(&self) -> String {
        format!("{}: {}\n", self.outcome, self.detail)
    }
}

pub fn host(command: HostCli) -> anyhow::Result<ExitCode> {
    let HostCli::ReplaceStorage {
        host,
        from,
        op,
        output,
    } = command;
    let mut done = Done {
        op: op.clone(),
        host: host.clone(),
        outcome: "succeeded",
        generation: None,
        replaced: None,
        kept: None,
        replayed: false,
        detail: String::new(),
    };
    let code = match replace::apply(&output.state, &host, &op, &from) {
        Ok(replaced) => {
            done.detail = replace::said(&replaced);
            let r = replaced.record;
            (done.generation, done.replaced, done.kept) =
                (Some(r.generation), Some(r.replaced), r.kept);
            done.replayed = replaced.already;
            0
        }
        Err(NotReplaced::Refused(reason)) => {
            (done.outcome, done.detail) = ("refused", reason);
            4
        }
        Err(NotReplaced::Failed(reason)) => {
            (done.outcome, done.detail) = (
                "failed",
                format!("{reason}; the same command with the same op id finishes it"),
            );
            1
        }
    };
    emit(&done, output.json);
    Ok(ExitCode::from(code))
}
