//! Named crash points compiled into every build and armed only by the environment
//! variable `GRID_FAILPOINTS` (read by `gridd`, never by this library), so journeys can
//! kill a host at an exact point of an operation or lose a reply after a commit.
//!
//! `GRID_FAILPOINTS="POINT=ACTION[,POINT=ACTION]"`; points are the [`Failpoint`]s by name,
//! actions are `abort` (the process aborts: a crash, as SIGKILL), `drop-reply` (the
//! connection closes without the reply, once), `slow` (the step takes
//! [`SLOW_DELAY`] longer: for the authority's snapshot installation, far longer than
//! openraft's default snapshot-chunk timeout) and `eio` (an fsync fails as a disk's
//! EIO would: `store-fsync`). `GRID_RETENTION_CLOCK_OFFSET_S=N`, also read by gridd
//! only, shifts the clock the retention windows read by N seconds.

use std::collections::HashMap;

/// Every failpoint, in the order an operation reaches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failpoint {
    /// An operation was executed in memory; nothing of it is durable yet.
    SubmitBeforeCommit,
    /// The operation and its answer are durable; the reply is not sent yet.
    SubmitAfterCommit,
    /// An input batch is durable; the reply is not sent yet (input batches only).
    BatchAfterCommit,
    /// A voter received a whole snapshot from the leader and is about to install it.
    SnapshotInstall,
    /// A voter installing a snapshot marked its store and removed part of what it
    /// held (its claims); the rest is still there, the snapshot's records not written
    /// (the next start completes the install).
    SnapshotInstallPart,
    /// A publication is durable in the publisher's outbox; `publish` has not returned.
    PublishAfterCommit,
    /// A recipient stored delivered values durably; its receipt is not signed or sent.
    InboxAfterCommit,
    /// The publisher received a receipt and has not applied or recorded it.
    ReceiptBeforeRecord,
    /// A receiver journaled a run and reserved its unit; the Process has not started.
    ProcessAfterDispatch,
    /// A receiver's Process ran; its outcome is not journaled.
    ProcessBeforeOutcome,
    /// A receiver journaled a run's outcome; the reply is not sent (drop-reply loses it).
    ProcessReply,
    /// A caller journaled its wait; the request is not sent yet.
    WaitAfterJournal,
    /// The sampler generated tag observations and fed them to models; nothing is durable.
    SampleBeforeCommit,
    /// A ledger batch is applied and fsynced; its answers are not sent (drop-reply
    /// loses them; abort crashes after the journal write).
    LedgerReply,
    /// A receiver admitted a `ledger.transfer` run (journaled, unit reserved); nothing
    /// is submitted to the ledger yet.
    TransferBeforeSubmit,
    /// The ledger answered a `ledger.transfer` run's transfer (fsynced); the run's
    /// outcome is not journaled.
    TransferAfterAnswer,
    /// A mission's issuer journaled the signed allocation; the reply is not sent
    /// (drop-reply loses it; abort crashes after the journal write).
    MissionIssueReply,
    /// A write of the host's store is fsynced; its high-water mark is not raised over it
    /// yet and nothing of it is acknowledged.
    HighWaterBeforeWrite,
    /// A room computed a checkpoint of one of its objects; nothing of it is written.
    CheckpointBeforeWrite,
    /// The checkpoint is staged and fsynced; it is not installed (opening ignores it).
    CheckpointBeforeInstall,
    /// A ledger checkpoint's settled ids are written into its id index (fsynced); the
    /// checkpoint is not installed (opening removes them again).
    CheckpointAfterIndex,
    /// The checkpoint is installed and fsynced; the entries it covers are not purged.
    CheckpointBeforePurge,
    /// An fsync of the host's store (armed `eio`: it fails as a disk's EIO would,
    /// before anything is synced).
    StoreFsync,
    /// An archive segment is written and synced; the index naming its entries is not
    /// committed and the answers are still in the hot store.
    ArchiveBeforeIndex,
    /// A segment moving between archive stores at gridd's start (`~ archive`) is
    /// copied and read back whole at its destination; it is not removed from its
    /// source yet.
    ArchiveMoveBeforeRelease,
    /// An archive index moving out of a table at gridd's start (`~ archive`) is
    /// whole where it goes (every record put there, every id found); the store does
    /// not record its new place yet.
    ArchiveIndexMoveBeforeRecord,
    /// A gateway holds values of an export's `from` (receipted to their publisher) and
    /// confirmed both rights; nothing of their crossing is written yet.
    ExportBeforeMapping,
    /// A gateway's mappings and the publications on `to` they name are durable
    /// together; no push carries them yet.
    ExportAfterMapping,
    /// A gateway's publications of crossed values are receipted by every destination of
    /// `to` (waited for up to `EXPORT_PUBLISH_WAIT`).
    ExportAfterPublish,
    /// A signing-key rotation wrote the new key to `signing.key.next`; the manifest
    /// still names the old one.
    RotationBeforeManifest,
    /// A signing-key rotation's manifest names the new key; it is not renamed into place.
    RotationBeforeRename,
    /// A custody lock staged every key under the new passphrase; its commit
    /// (`keys/relock`) is not written.
    CustodyLockBeforeCommit,
    /// A custody lock committed and renamed the first staged key (the signing key)
    /// into place; the others are not.
    CustodyLockMidway,
    /// An installation transfer journaled `prepared` in its source (gridctl).
    TransferAfterPrepare,
    /// An installation transfer copied its first file (gridctl).
    TransferMidCopy,
    /// An installation transfer verified the copy; the destination is not activated.
    TransferBeforeActivate,
    /// An installation transfer activated the destination; the source is not retired.
    TransferBeforeRetire,
    /// A storage replacement journaled `prepared` (gridctl).
    ReplaceAfterPrepare,
    /// A storage replacement copied its first file (gridctl).
    ReplaceMidCopy,
    /// A storage replacement checked and stamped its copy; nothing is installed.
    ReplaceBeforeInstall,
    /// A storage replacement installed its copy; `keys/storage.toml` is not written.
    ReplaceBeforeRecord,
    /// A start took the claim `store:HOST` at the authority; the store has not
    /// recorded its epoch (docs/transfer.md, "Fenced at the authority").
    StoreClaimBeforeRecord,
    /// An owner read its observation for a peer's `POST /control`; the reply is not
    /// sent (armed `slow`: it is sent SLOW_DELAY later — a control plane's inspection
    /// pending that long).
    ObserveReply,
}

impl Failpoint {
    /// Every failpoint, in the order an operation reaches them.
    pub const ALL: [Failpoint; 43] = [
        Failpoint::SubmitBeforeCommit,
        Failpoint::SubmitAfterCommit,
        Failpoint::BatchAfterCommit,
        Failpoint::SnapshotInstall,
        Failpoint::SnapshotInstallPart,
        Failpoint::PublishAfterCommit,
        Failpoint::InboxAfterCommit,
        Failpoint::ReceiptBeforeRecord,
        Failpoint::ProcessAfterDispatch,
        Failpoint::ProcessBeforeOutcome,
        Failpoint::ProcessReply,
        Failpoint::WaitAfterJournal,
        Failpoint::SampleBeforeCommit,
        Failpoint::LedgerReply,
        Failpoint::TransferBeforeSubmit,
        Failpoint::TransferAfterAnswer,
        Failpoint::MissionIssueReply,
        Failpoint::HighWaterBeforeWrite,
        Failpoint::CheckpointBeforeWrite,
        Failpoint::CheckpointBeforeInstall,
        Failpoint::CheckpointAfterIndex,
        Failpoint::CheckpointBeforePurge,
        Failpoint::StoreFsync,
        Failpoint::ArchiveBeforeIndex,
        Failpoint::ArchiveMoveBeforeRelease,
        Failpoint::ArchiveIndexMoveBeforeRecord,
        Failpoint::ExportBeforeMapping,
        Failpoint::ExportAfterMapping,
        Failpoint::ExportAfterPublish,
        Failpoint::RotationBeforeManifest,
        Failpoint::RotationBeforeRename,
        Failpoint::CustodyLockBeforeCommit,
        Failpoint::CustodyLockMidway,
        Failpoint::TransferAfterPrepare,
        Failpoint::TransferMidCopy,
        Failpoint::TransferBeforeActivate,
        Failpoint::TransferBeforeRetire,
        Failpoint::ReplaceAfterPrepare,
        Failpoint::ReplaceMidCopy,
        Failpoint::ReplaceBeforeInstall,
        Failpoint::ReplaceBeforeRecord,
        Failpoint::StoreClaimBeforeRecord,
        Failpoint::ObserveReply,
    ];

    /// The name `GRID_FAILPOINTS` and journeys use.
    pub fn name(self) -> &'static str {
        match self {
            Failpoint::SubmitBeforeCommit => "submit-before-commit",
            Failpoint::SubmitAfterCommit => "submit-after-commit",
            Failpoint::BatchAfterCommit => "batch-after-commit",
            Failpoint::SnapshotInstall => "snapshot-install",
            Failpoint::SnapshotInstallPart => "snapshot-install-part",
            Failpoint::PublishAfterCommit => "publish-after-commit",
            Failpoint::InboxAfterCommit => "inbox-after-commit",
            Failpoint::ReceiptBeforeRecord => "receipt-before-record",
            Failpoint::ProcessAfterDispatch => "process-after-dispatch",
            Failpoint::ProcessBeforeOutcome => "process-before-outcome",
            Failpoint::ProcessReply => "process-reply",
            Failpoint::WaitAfterJournal => "wait-after-journal",
            Failpoint::SampleBeforeCommit => "sample-before-commit",
            Failpoint::LedgerReply => "ledger-reply",
            Failpoint::TransferBeforeSubmit => "transfer-before-submit",
            Failpoint::TransferAfterAnswer => "transfer-after-answer",
            Failpoint::MissionIssueReply => "mission-issue-reply",
            Failpoint::HighWaterBeforeWrite => "high-water-before-write",
            Failpoint::CheckpointBeforeWrite => "checkpoint-before-write",
            Failpoint::CheckpointBeforeInstall => "checkpoint-before-install",
            Failpoint::CheckpointAfterIndex => "checkpoint-after-index",
            Failpoint::CheckpointBeforePurge => "checkpoint-before-purge",
            Failpoint::StoreFsync => "store-fsync",
            Failpoint::ArchiveBeforeIndex => "archive-before-index",
            Failpoint::ArchiveMoveBeforeRelease => "archive-move-before-release",
            Failpoint::ArchiveIndexMoveBeforeRecord => "archive-index-move-before-record",
            Failpoint::ExportBeforeMapping => "export-before-mapping",
            Failpoint::ExportAfterMapping => "export-after-mapping",
            Failpoint::ExportAfterPublish => "export-after-publish",
            Failpoint::RotationBeforeManifest => "rotation-before-manifest",
            Failpoint::RotationBeforeRename => "rotation-before-rename",
            Failpoint::CustodyLockBeforeCommit => "custody-lock-before-commit",
            Failpoint::CustodyLockMidway => "custody-lock-midway",
            Failpoint::TransferAfterPrepare => "transfer-after-prepare",
            Failpoint::TransferMidCopy => "transfer-mid-copy",
            Failpoint::TransferBeforeActivate => "transfer-before-activate",
            Failpoint::TransferBeforeRetire => "transfer-before-retire",
            Failpoint::ReplaceAfterPrepare => "replace-after-prepare",
            Failpoint::ReplaceMidCopy => "replace-mid-copy",
            Failpoint::ReplaceBeforeInstall => "replace-before-install",
            Failpoint::ReplaceBeforeRecord => "replace-before-record",
            Failpoint::StoreClaimBeforeRecord => "store-claim-before-record",
            Failpoint::ObserveReply => "observe-reply",
        }
    }

    pub fn from_name(name: &str) -> Option<Failpoint> {
        Failpoint::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for Failpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How much longer a step armed `slow` takes.
pub const SLOW_DELAY: std::time::Duration = std::time::Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Abort,
    DropReply,
    Slow,
    /// The step fails with EIO, as a disk refusing it would (fsyncs only).
    Eio,
}

#[derive(Debug, Default, Clone)]
pub struct Failpoints {
    armed: HashMap<Failpoint, Action>,
    /// How far the retention clock is shifted (`GRID_RETENTION_CLOCK_OFFSET_S`).
    retention_offset_ms: i64,
    /// Benchmarks only (`GRID_BENCH_CHECKPOINTS_OFF`): no checkpoint, purge or archive.
    checkpoints_off: bool,
}

impl Failpoints {
    /// Parses the `GRID_FAILPOINTS` syntax; an unknown point or action is an error
    /// naming it.
    pub fn parse(spec: &str) -> Result<Failpoints, String> {
        let mut armed = HashMap::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (point, action) = part
                .split_once('=')
                .ok_or_else(|| format!("failpoint `{part}`: expected POINT=ACTION"))?;
            let point = Failpoint::from_name(point).ok_or_else(|| {
                let names: Vec<&str> = Failpoint::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown failpoint `{point}`; points are: {}",
                    names.join(", ")
                )
            })?;
            let action = match action {
                "abort" => Action::Abort,
                "drop-reply" => Action::DropReply,
                "slow" => Action::Slow,
                "eio" => Action::Eio,
                other => {
                    return Err(format!(
                        "unknown failpoint action `{other}`; actions are: abort, drop-reply, slow, eio"
                    ));
                }
            };
            armed.insert(point, action);
        }
        Ok(Failpoints {
            armed,
            ..Failpoints::default()
        })
    }

    /// Shifts the clock the host's retention windows read (`retain hot-days`,
    /// `archive-days`) by `seconds`: gridd's `GRID_RETENTION_CLOCK_OFFSET_S`, for
    /// tests and journeys that cannot wait days. Only decisions' expiry reads it too
    /// (docs/decisions.md); nothing else does.
    pub fn with_retention_clock_offset(mut self, seconds: i64) -> Failpoints {
        self.retention_offset_ms = seconds.saturating_mul(1_000);
        self
    }

    /// Benchmarks only (gridd's `GRID_BENCH_CHECKPOINTS_OFF`, never a topology): the
    /// host takes no checkpoint, purges nothing and archives nothing on its own —
    /// the path before checkpoints, measured beside them.
    pub fn with_checkpoints_off(mut self) -> Failpoints {
        self.checkpoints_off = true;
        self
    }

    pub fn checkpoints_off(&self) -> bool {
        self.checkpoints_off
    }

    /// The retention clock's shift, milliseconds.
    pub fn retention_clock_offset_ms(&self) -> i64 {
        self.retention_offset_ms
    }

    /// Reaching `point`: aborts the process if armed so; returns true if the reply
    /// must be dropped (once).
    pub fn reach(&mut self, point: Failpoint) -> bool {
        match self.armed.get(&point) {
            Some(Action::Abort) => {
                eprintln!("gridd: failpoint {point}: aborting");
                std::process::abort();
            }
            Some(Action::DropReply) => {
                self.armed.remove(&point);
                true
            }
            Some(Action::Slow) => {
                std::thread::sleep(SLOW_DELAY);
                false
            }
            Some(Action::Eio) | None => false,
        }
    }

    /// Reaching `point` where only `abort` applies (no reply to drop, nothing to
    /// slow): aborts the process if armed so. For holders without `&mut`.
    pub fn abort_if_armed(&self, point: Failpoint) {
        if self.armed(point) == Some(Action::Abort) {
            eprintln!("gridd: failpoint {point}: aborting");
            std::process::abort();
        }
    }

    /// How `point` is armed, for code that must act on it itself (async code sleeps
    /// without blocking its runtime).
    pub fn armed(&self, point: Failpoint) -> Option<Action> {
        self.armed.get(&point).copied()
    }
}
