//! Installation transfer (SPEC C11, docs/transfer.md): a host's whole installation
//! copied to another directory with its identity unchanged — same keys, certificates,
//! store, operation ids and answers — in steps, each journaled in the source
//! (`DIR/transfer.toml`, 0600, synced) before the next acts, each resumable by the
//! same operation id:
//!
//! 1. **prepare** — the source records `transferring to DEST`: from then on a gridd
//!    started on it refuses (no new work is taken there); a gridd serving it is then
//!    stopped (the caller's `stop`) before anything is copied;
//! 2. **copy** — every file and directory, permissions kept, each file synced (the
//!    destination marked `copying` until it is verified);
//! 3. **verify** — a manifest of every file (path, size, SHA-256) of both sides,
//!    compared whole; its digest recorded;
//! 4. **activate** — the destination records `transferred from SOURCE` with the digest:
//!    a gridd may start there;
//! 5. **retire** — the source records `transferred`: a gridd started on it refuses,
//!    naming the destination.
//!
//! Invariants, stated as absences: no gridd starts on a source once it is prepared,
//! nothing is copied while one still serves it, no gridd serves a destination before
//! it is activated; no destination is activated whose files differ
//! from the source's; no second transfer starts while one is open; nothing in the
//! source is removed.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::{Failpoint, Failpoints};

/// The transfer's journal in an installation (source and destination alike).
pub const TRANSFER_FILE: &str = "transfer.toml";
/// Files of an installation a transfer does not copy: its own journal, the control
/// socket and the pid file of a gridd that served it.
const NOT_COPIED: [&str; 4] = [
    TRANSFER_FILE,
    super::arrival::MANIFEST_FILE,
    "control.sock",
    "gridd.pid",
];

/// Where a transfer stands, as an installation's journal records it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Prepared,
    Copied,
    Verified,
    /// Destination only: verified, a gridd may start here.
    Activated,
    /// Source only: the destination is active; nothing runs here again.
    Retired,
    /// Destination only: files arriving, not verified.
    Copying,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Source,
    Destination,
}

/// `DIR/transfer.toml`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub op: String,
    pub role: Role,
    pub step: Step,
    pub source: PathBuf,
    pub destination: PathBuf,
    /// Files and bytes copied, once verified.
    #[serde(default)]
    pub files: u64,
    #[serde(default)]
    pub bytes: u64,
    /// SHA-256 of the verified manifest, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Where the destination is served once moved, when not where it is copied to
    /// (back into the state directory: renamed after activation); messages name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_as: Option<PathBuf>,
    /// A destination's first open: its files checked against the verified manifest,
    /// then signed (`arrival.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<super::arrival::Arrival>,
}

impl Record {
    /// Where the installation is served once moved.
    pub fn served_at(&self) -> &Path {
        self.known_as.as_deref().unwrap_or(&self.destination)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: the transfer journal does not read: {reason}", path.display())]
    Journal { path: PathBuf, reason: String },
    #[error(
        "a transfer of {} to {} (op {op}) is already open: it resumes with its own operation id, and no other starts meanwhile",
        from.display(),
        to.display()
    )]
    Open {
        from: PathBuf,
        to: PathBuf,
        op: String,
    },
    #[error("a gridd still serves {}: {reason}; nothing is copied (a transfer copies a stopped installation) — the same op id resumes it", path.display())]
    Running { path: PathBuf, reason: String },
    #[error("the destination {} holds files of no transfer of this installation: refusing to write over them", .0.display())]
    Occupied(PathBuf),
    #[error("{} is not a file or directory a host installation holds (a link or a device): refusing to copy it", .0.display())]
    Unexpected(PathBuf),
    #[error("the copy differs from the source at {}: {detail}; nothing is activated", path.display())]
    Differs { path: PathBuf, detail: String },
    /// A tar archive to unpack refused (`unpack.rs`).
    #[error("the archive {}: {reason}", path.display())]
    Archive { path: PathBuf, reason: String },
}

/// One line of a manifest: a file's path below its root, size, SHA-256 (hex) and
/// permissions.
pub(super) type Line = (String, u64, String, u32);

/// What a manifest holds in all: files, bytes, and its SHA-256 (hex).
type Summary = (u64, u64, String);

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TransferError + '_ {
    move |source| TransferError::Io {
        path: path.to_owned(),
        source,
    }
}

/// An installation's transfer journal, if it has one.
pub fn record(dir: &Path) -> Result<Option<Record>, TransferError> {
    let path = dir.join(TRANSFER_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text)
            .map(Some)
            .map_err(|e| TransferError::Journal {
                path,
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    }
}

/// Writes the journal (0600, synced, renamed into place, `dir` synced).
pub(super) fn write_record(dir: &Path, record: &Record) -> Result<(), TransferError> {
    let path = dir.join(TRANSFER_FILE);
    let text = toml::to_string(record).expect("records serialize");
    super::write_private(&path, text.as_bytes()).map_err(io(&path))
}

fn sync_dir(dir: &Path) -> Result<(), TransferError> {
    super::sync_dir(dir).map_err(io(dir))
}

/// Why a gridd must not serve `dir` now (a transfer's source, or a destination not yet
/// activated), or `None`.
pub fn refusal(dir: &Path) -> Option<String> {
    let record = match record(dir) {
        Ok(Some(record)) => record,
        Ok(None) => return None,
        Err(e) => return Some(e.to_string()),
    };
    match (record.role, record.step) {
        (Role::Source, Step::Retired) => Some(format!(
            "this installation was transferred to {} (op {}): gridd runs there, never here again",
            record.served_at().display(),
            record.op
        )),
        (Role::Source, _) => Some(format!(
            "a transfer of this installation to {} (op {}) is under way: `gridctl reconcile` resumes it; no gridd serves it meanwhile",
            record.served_at().display(),
            record.op
        )),
        (Role::Destination, Step::Activated) => None,
        (Role::Destination, _) => Some(format!(
            "this is the copy of a transfer from {} (op {}) not yet verified: `gridctl reconcile` resumes it",
            record.source.display(),
            record.op
        )),
    }
}

/// What a finished transfer moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub files: u64,
    pub bytes: u64,
    pub digest: String,
    /// Whether this call found it already finished (a re-sent operation id).
    pub already: bool,
}

/// Transfers the installation `source` to `destination` under operation id `op`, from
/// wherever an earlier call with the same id stopped. `stop`: makes sure no gridd
/// serves `source` — stops one that does, or says why it could not; asked once the
/// journal says `prepared` (so no gridd starts on the source again) and before
/// anything is copied. Failpoints: `transfer-after-prepare`, `transfer-mid-copy`,
/// `transfer-before-activate`, `transfer-before-retire`.
pub fn transfer(
    source: &Path,
    destination: &Path,
    op: &str,
    stop: impl Fn(&Path) -> Result<(), String>,
    failpoints: &Failpoints,
) -> Result<Moved, TransferError> {
    transfer_known_as(source, (destination, None), op, stop, failpoints)
}

/// [`transfer`], the destination to be served at `known_as` once moved (renamed there
/// after activation): the source's records and refusals name that place.
pub fn transfer_known_as(
    source: &Path,
    (destination, known_as): (&Path, Option<&Path>),
    op: &str,
    stop: impl Fn(&Path) -> Result<(), String>,
    failpoints: &Failpoints,
) -> Result<Moved, TransferError> {
    // A destination's record of a finished transfer is no open transfer: this
    // installation may move again.
    let held =
        record(source)?.filter(|r| !(r.role == Role::Destination && r.step == Step::Activated));
    let mut journal = match held {
        Some(r) if r.op != op || r.destination != destination || r.role != Role::Source => {
            return Err(TransferError::Open {
                from: r.source,
                to: r.destination,
                op: r.op,
            });
        }
        Some(r) => r,
        None => {
            let r = Record {
                op: op.to_owned(),
                role: Role::Source,
                step: Step::Prepared,
                source: source.to_owned(),
                destination: destination.to_owned(),
                files: 0,
                bytes: 0,
                digest: None,
                known_as: known_as.map(Path::to_owned),
                arrival: None,
            };
            write_record(source, &r)?;
            failpoints.abort_if_armed(Failpoint::TransferAfterPrepare);
            r
        }
    };
    let already = journal.step == Step::Retired;
    if journal.step == Step::Prepared {
        stop(source).map_err(|reason| TransferError::Running {
            path: source.to_owned(),
            reason,
        })?;
        copy_installation(source, destination, op, failpoints)?;
        journal.step = Step::Copied;
        write_record(source, &journal)?;
    }
    if journal.step == Step::Copied {
        let (lines, (files, bytes, digest)) = verify(source, destination)?;
        // Left at the destination: its first open checks the files against it.
        super::arrival::write_manifest(destination, &lines)?;
        (journal.files, journal.bytes, journal.digest) = (files, bytes, Some(digest));
        journal.step = Step::Verified;
        write_record(source, &journal)?;
    }
    if journal.step == Step::Verified {
        failpoints.abort_if_armed(Failpoint::TransferBeforeActivate);
        let mut activated = journal.clone();
        activated.role = Role::Destination;
        activated.step = Step::Activated;
        write_record(destination, &activated)?;
        failpoints.abort_if_armed(Failpoint::TransferBeforeRetire);
        journal.step = Step::Retired;
        write_record(source, &journal)?;
    }
    Ok(Moved {
        files: journal.files,
        bytes: journal.bytes,
        digest: journal.digest.unwrap_or_default(),
        already,
    })
}

/// Copies every file of `source` into `destination` (created 0700, or empty, or an
/// earlier copy of the same transfer), permissions kept, each file and directory
/// synced. The destination's journal says `copying` throughout.
fn copy_installation(
    source: &Path,
    destination: &Path,
    op: &str,
    failpoints: &Failpoints,
) -> Result<(), TransferError> {
    match record(destination)? {
        // An earlier copy of this transfer a stop interrupted: started again from
        // nothing (a file cut short, a temporary one left, is never kept).
        Some(r) if r.op == op && r.role == Role::Destination => {
            for entry in entries(destination)? {
                if entry.file_name() == TRANSFER_FILE {
                    continue;
                }
                let path = entry.path();
                let removed = if std::fs::symlink_metadata(&path)
                    .map_err(io(&path))?
                    .is_dir()
                {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                removed.map_err(io(&path))?;
            }
        }
        Some(_) => return Err(TransferError::Occupied(destination.to_owned())),
        None => {
            let empty = match std::fs::read_dir(destination) {
                Ok(mut entries) => entries.next().is_none(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                Err(e) => return Err(io(destination)(e)),
            };
            if !empty {
                return Err(TransferError::Occupied(destination.to_owned()));
            }
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(destination)
        .map_err(io(destination))?;
    std::fs::set_permissions(destination, std::fs::Permissions::from_mode(0o700))
        .map_err(io(destination))?;
    write_record(
        destination,
        &Record {
            op: op.to_owned(),
            role: Role::Destination,
            step: Step::Copying,
            source: source.to_owned(),
            destination: destination.to_owned(),
            files: 0,
            bytes: 0,
            digest: None,
            known_as: None,
            arrival: None,
        },
    )?;
    let mut copied = 0u64;
    copy_dir(source, destination, true, &mut |_| {
        copied += 1;
        if copied == 1 {
            failpoints.abort_if_armed(Failpoint::TransferMidCopy);
        }
    })
}

fn copy_dir(
    from: &Path,
    to: &Path,
    top: bool,
    each: &mut dyn FnMut(&Path),
) -> Result<(), TransferError> {
    use std::os::unix::fs::FileTypeExt;
    for entry in entries(from)? {
        let name = entry.file_name();
        if top && NOT_COPIED.iter().any(|n| name == *n) {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let target = to.join(&name);
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            match std::fs::DirBuilder::new().mode(0o700).create(&target) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(&target)(e)),
            }
            copy_dir(&path, &target, false, each)?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
                .map_err(io(&target))?;
            sync_dir(&target)?;
        } else if meta.is_file() {
            copy_file(&path, &target, mode)?;
            each(&target);
        } else if meta.file_type().is_socket() {
            continue; // a stale socket is never part of an installation
        } else {
            return Err(TransferError::Unexpected(path));
        }
    }
    sync_dir(to)
}

/// Copies the directory `from` into `to` (created 0700, or left as it is), as a
/// transfer copies an installation; `each` is called after every file.
pub(super) fn copy_tree(
    from: &Path,
    to: &Path,
    each: &mut dyn FnMut(),
) -> Result<(), TransferError> {
    match std::fs::DirBuilder::new().mode(0o700).create(to) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(to)(e)),
    }
    copy_dir(from, to, true, &mut |_| each())
}

/// Compares two directories' manifests whole, as a transfer verifies its copy.
pub(super) fn compare(from: &Path, to: &Path) -> Result<(), TransferError> {
    verify(from, to).map(|_| ())
}

/// `dir`'s entries in name order.
fn entries(dir: &Path) -> Result<Vec<std::fs::DirEntry>, TransferError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .collect::<Result<_, _>>()
        .map_err(io(dir))?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    Ok(entries)
}

/// Copies one file, written whole to a temporary name, synced, renamed into place.
fn copy_file(from: &Path, to: &Path, mode: u32) -> Result<(), TransferError> {
    let name = to.file_name().unwrap_or_default().to_string_lossy();
    let partial = to.with_file_name(format!(".{name}.transfer-partial"));
    let mut input = std::fs::File::open(from).map_err(io(from))?;
    let mut output = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(io(&partial))?;
    std::io::copy(&mut input, &mut output).map_err(io(&partial))?;
    output
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io(&partial))?;
    output.sync_all().map_err(io(&partial))?;
    std::fs::rename(&partial, to).map_err(io(to))
}

/// `dir`'s manifest: every file's path below it, size, SHA-256 and permissions, depth
/// first, each directory's entries by name.
pub(super) fn manifest(dir: &Path) -> Result<Vec<Line>, TransferError> {
    let mut lines = Vec::new();
    walk(dir, dir, true, &mut lines)?;
    Ok(lines)
}

fn walk(root: &Path, dir: &Path, top: bool, lines: &mut Vec<Line>) -> Result<(), TransferError> {
    for entry in entries(dir)? {
        let name = entry.file_name();
        if top && NOT_COPIED.iter().any(|n| name == *n) {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        if meta.is_dir() {
            walk(root, &path, false, lines)?;
        } else if meta.is_file() {
            let mut hash = Sha256::new();
            let mut file = std::fs::File::open(&path).map_err(io(&path))?;
            let mut buffer = vec![0u8; 1 << 16];
            let mut size = 0u64;
            loop {
                let n = file.read(&mut buffer).map_err(io(&path))?;
                if n == 0 {
                    break;
                }
                hash.update(&buffer[..n]);
                size += n as u64;
            }
            let relative = path
                .strip_prefix(root)
                .expect("below the root")
                .display()
                .to_string();
            lines.push((
                relative,
                size,
                hex::encode(hash.finalize()),
                meta.permissions().mode() & 0o777,
            ));
        }
    }
    Ok(())
}

/// Compares the manifests of both sides whole: the files, bytes and digest, or the
/// first difference.
fn verify(source: &Path, destination: &Path) -> Result<(Vec<Line>, Summary), TransferError> {
    let lines = manifest(source)?;
    let summary = differ(source, &lines, &manifest(destination)?)?;
    Ok((lines, summary))
}

/// Compares the installation `dir`'s manifest whole with `lines`, the one its transfer
/// verified (`arrival.rs`): the files, bytes and digest of `lines`, or the first
/// difference (`here`: the manifest, `there`: the files now).
pub(super) fn compare_arrived(dir: &Path, lines: &[Line]) -> Result<(u64, u64, String), String> {
    differ(dir, lines, &manifest(dir).map_err(|e| e.to_string())?).map_err(|e| match e {
        TransferError::Differs { path, detail } => format!(
            "{} differs: {}",
            path.display(),
            detail
                .replace(" in the copy", " now")
                .replace("the copy has", "the installation has")
        ),
        other => other.to_string(),
    })
}

/// Compares `unpacked`'s manifest whole with the one its archive's bytes gave.
pub(super) fn compare_unpacked(
    archive: &Path,
    lines: &[Line],
    unpacked: &Path,
) -> Result<(), TransferError> {
    differ(archive, lines, &manifest(unpacked)?).map(|_| ())
}

/// The first difference of two manifests (paths named below `source`), or the files,
/// bytes and digest of the first.
fn differ(source: &Path, from: &[Line], to: &[Line]) -> Result<(u64, u64, String), TransferError> {
    for (a, b) in from.iter().zip(to) {
        if a != b {
            let (path, detail) = if a.0 != b.0 {
                (&a.0, format!("the copy has `{}` there", b.0))
            } else if a.1 != b.1 || a.2 != b.2 {
                (
                    &a.0,
                    format!("{} bytes {} here, {} bytes {} there", a.1, a.2, b.1, b.2),
                )
            } else {
                (&a.0, format!("permissions {:o} here, {:o} there", a.3, b.3))
            };
            return Err(TransferError::Differs {
                path: source.join(path),
                detail,
            });
        }
    }
    if from.len() != to.len() {
        let extra = from.get(to.len()).or(to.get(from.len())).expect("longer");
        return Err(TransferError::Differs {
            path: source.join(&extra.0),
            detail: format!("{} files here, {} in the copy", from.len(), to.len()),
        });
    }
    let mut digest = Sha256::new();
    for (path, size, hash, mode) in from {
        writeln!(
            DigestWriter(&mut digest),
            "{path}\t{size}\t{hash}\t{mode:o}"
        )
        .expect("hashing cannot fail");
    }
    let bytes = from.iter().map(|l| l.1).sum();
    Ok((from.len() as u64, bytes, hex::encode(digest.finalize())))
}

struct DigestWriter<'a>(&'a mut Sha256);

impl Write for DigestWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-transfer-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn installation(at: &Path) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(at.join("keys"))
            .unwrap();
        super::super::write_private(&at.join("host.toml"), b"name = \"a\"\n").unwrap();
        super::super::write_private(&at.join("keys/signing.key"), b"secret").unwrap();
        super::super::write_private(&at.join("gridd.pid"), b"1\n").unwrap();
    }

    #[test]
    fn a_transfer_copies_verifies_activates_and_retires_once() {
        let (source, destination) = (dir("source"), dir("destination"));
        installation(&source);
        let idle = |_: &Path| Ok::<(), String>(());
        let none = Failpoints::default();
        let moved = transfer(&source, &destination, "t1", idle, &none).unwrap();
        assert_eq!((moved.files, moved.already), (2, false));
        assert_eq!(
            std::fs::read(destination.join("keys/signing.key")).unwrap(),
            b"secret"
        );
        assert!(!destination.join("gridd.pid").exists());
        let mode = std::fs::metadata(destination.join("keys"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(refusal(&destination), None);
        assert!(refusal(&source).unwrap().contains("was transferred to"));
        // The same id again: the first answer, nothing copied again.
        let again = transfer(&source, &destination, "t1", idle, &none).unwrap();
        assert_eq!((again.digest, again.already), (moved.digest, true));
        // Another transfer of the same source: refused while this one is its record.
        assert!(matches!(
            transfer(&source, &dir("elsewhere"), "t2", idle, &none),
            Err(TransferError::Open { .. })
        ));
        std::fs::remove_dir_all(&source).unwrap();
        std::fs::remove_dir_all(&destination).unwrap();
    }

    #[test]
    fn a_running_source_an_occupied_destination_and_a_bad_copy_are_refused() {
        let (source, destination) = (dir("busy"), dir("occupied"));
        installation(&source);
        let none = Failpoints::default();
        // A gridd that could not be stopped: journaled `prepared` (no gridd starts
        // there again), nothing copied; the same id resumes.
        let busy = |_: &Path| Err("it did not stop".to_owned());
        assert!(matches!(
            transfer(&source, &destination, "t1", busy, &none),
            Err(TransferError::Running { .. })
        ));
        let held = record(&source).unwrap().expect("journaled");
        assert_eq!((held.step, held.op.as_str()), (Step::Prepared, "t1"));
        assert!(!destination.exists(), "nothing copied");
        std::fs::create_dir_all(&destination).unwrap();
        std::fs::write(destination.join("other"), b"x").unwrap();
        assert!(matches!(
            transfer(
                &source,
                &destination,
                "t1",
                |_: &Path| Ok::<(), String>(()),
                &none
            ),
            Err(TransferError::Occupied(_))
        ));
        assert!(refusal(&source).unwrap().contains("under way"));
        // Emptied, the same id resumes; a copy a stop cut short (a temporary file
        // left) starts again from nothing; a copy changed before its verification is
        // refused and never activated.
        std::fs::remove_file(destination.join("other")).unwrap();
        copy_installation(&source, &destination, "t1", &none).unwrap();
        std::fs::write(
            destination.join("keys/.signing.key.transfer-partial"),
            b"se",
        )
        .unwrap();
        copy_installation(&source, &destination, "t1", &none).unwrap();
        assert!(
            !destination
                .join("keys/.signing.key.transfer-partial")
                .exists()
        );
        verify(&source, &destination).unwrap();
        std::fs::write(destination.join("host.toml"), b"name = \"b\"\n").unwrap();
        assert!(matches!(
            verify(&source, &destination),
            Err(TransferError::Differs { path, .. }) if path.ends_with("host.toml")
        ));
        assert!(refusal(&destination).unwrap().contains("not yet verified"));
        std::fs::remove_dir_all(&source).unwrap();
        std::fs::remove_dir_all(&destination).unwrap();
    }
}
