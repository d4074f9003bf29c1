//! A store unpacked from a tar archive (docs/transfer.md, "Storage replacement"): the
//! operator's backup of a stopped host's store (`tar -C DIR -cf store.tar store`, or
//! `tar -C DIR/store -cf store.tar .`), put in place by `gridctl host replace-storage
//! HOST --from store.tar`.
//!
//! Each regular file is written whole to a temporary name, synced and renamed into
//! place, private (`0600`, as gridd writes its files; directories `0700`), while its
//! size and SHA-256 are taken from the archive's bytes (a file cut short is refused);
//! the caller then compares that manifest with the unpacked directory's, file by file.
//!
//! Invariants, stated as absences: no entry is written outside the directory it is
//! unpacked into (an absolute path or `..` is refused); no link, device or other
//! special file is made (refused, naming it); no path is written twice; no file is
//! more open than `0600`; no file is shorter than its entry says.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::transfer::{Line, TransferError};

/// The top directory an archive of `DIR/store` may hold its files under.
const STORE_DIR: &str = "store";
/// Every file unpacked is private, as gridd writes its own.
const FILE_MODE: u32 = 0o600;

fn refused(archive: &Path, reason: String) -> TransferError {
    TransferError::Archive {
        path: archive.to_owned(),
        reason,
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TransferError + '_ {
    move |source| TransferError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Unpacks the tar archive `archive` into `to` (created `0700`, or left as it is);
/// `each` is called after every file. Returns the archive's manifest — each file's
/// path below `to`, size, SHA-256 and the permissions it was given — in the order a
/// directory's manifest lists them.
pub(super) fn unpack(
    archive: &Path,
    to: &Path,
    each: &mut dyn FnMut(),
) -> Result<Vec<Line>, TransferError> {
    let file = std::fs::File::open(archive).map_err(io(archive))?;
    make_dir(to)?;
    let mut tar = tar::Archive::new(std::io::BufReader::new(file));
    let entries = tar
        .entries()
        .map_err(|e| refused(archive, format!("not a tar archive ({e})")))?;
    let mut lines = Vec::new();
    let mut seen = BTreeSet::new();
    let mut dirs = BTreeSet::from([to.to_owned()]);
    // Whether the files are under a top `store/` (decided by the first entry).
    let mut under_store: Option<bool> = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| refused(archive, format!("does not read ({e})")))?;
        let raw = entry
            .path()
            .map_err(|e| refused(archive, format!("an entry's path does not read ({e})")))?
            .into_owned();
        let shown = grid_spec::diagnostic::quoted(&raw.to_string_lossy()).into_owned();
        let mut parts = Vec::new();
        for component in raw.components() {
            match component {
                Component::Normal(part) => parts.push(part.to_owned()),
                Component::CurDir => {}
                _ => {
                    return Err(refused(
                        archive,
                        format!("entry `{shown}` leaves the store (an absolute path or `..`)"),
                    ));
                }
            }
        }
        let prefixed = *under_store.get_or_insert(parts.first().is_some_and(|p| p == STORE_DIR));
        if prefixed {
            if parts.first().is_none_or(|p| p != STORE_DIR) {
                return Err(refused(
                    archive,
                    format!(
                        "entry `{shown}` is outside `store/`, where the archive's first entry put the store"
                    ),
                ));
            }
            parts.remove(0);
        }
        let relative: PathBuf = parts.iter().collect();
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            let path = to.join(&relative);
            make_dir(&path)?;
            dirs.insert(path);
            continue;
        }
        if !kind.is_file() {
            return Err(refused(
                archive,
                format!("entry `{shown}` is a link or a special file, which no store holds"),
            ));
        }
        if parts.is_empty() || !seen.insert(relative.clone()) {
            return Err(refused(
                archive,
                format!("entry `{shown}` names no file, or one named before"),
            ));
        }
        let path = to.join(&relative);
        let parent = path.parent().unwrap_or(to).to_owned();
        make_dir(&parent)?;
        dirs.insert(parent);
        let expected = entry.size();
        let (size, sha256) = write_file(&mut entry, &path, FILE_MODE).map_err(|e| {
            refused(
                archive,
                format!("entry `{shown}` does not read whole ({e})"),
            )
        })?;
        if size != expected {
            return Err(refused(
                archive,
                format!(
                    "entry `{shown}` is cut short: {size} of its {expected} bytes (a truncated archive)"
                ),
            ));
        }
        lines.push((relative.display().to_string(), size, sha256, FILE_MODE));
        each();
    }
    if lines.is_empty() {
        return Err(refused(
            archive,
            "holds no file: it is no archive of a store".to_owned(),
        ));
    }
    for dir in dirs.iter().rev() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
    }
    // A directory's manifest lists depth first, each directory's entries by name.
    lines.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
    Ok(lines)
}

/// Creates `dir` and what is missing above it, `0700`.
fn make_dir(dir: &Path) -> Result<(), TransferError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io(dir))
}

/// Writes `input` whole to a temporary name beside `to`, synced, then renamed to `to`:
/// its size and SHA-256.
fn write_file(input: &mut impl Read, to: &Path, mode: u32) -> std::io::Result<(u64, String)> {
    use std::io::Write;
    let name = to.file_name().unwrap_or_default().to_string_lossy();
    let partial = to.with_file_name(format!(".{name}.unpack-partial"));
    let mut output = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)?;
    let mut hash = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    let mut size = 0u64;
    loop {
        let n = input.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hash.update(&buffer[..n]);
        output.write_all(&buffer[..n])?;
        size += n as u64;
    }
    output.set_permissions(std::fs::Permissions::from_mode(mode))?;
    output.sync_all()?;
    std::fs::rename(&partial, to)?;
    Ok((size, hex::encode(hash.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::transfer;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-unpack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A store-like tree: files at the top and nested, one empty.
    fn tree(dir: &Path) -> PathBuf {
        let store = dir.join("store");
        std::fs::create_dir_all(store.join("keyspaces/1")).unwrap();
        std::fs::write(store.join("version"), b"3").unwrap();
        std::fs::write(store.join("keyspaces/1/segment"), vec![7u8; 70_000]).unwrap();
        std::fs::write(store.join("keyspaces/1.meta"), b"").unwrap();
        std::fs::write(store.join("a.b"), b"dot sorts before slash").unwrap();
        store
    }

    /// A tar of `store` with every file under `prefix` ("store" or ".").
    fn archive_of(store: &Path, prefix: &str, to: &Path) {
        let mut builder = tar::Builder::new(std::fs::File::create(to).unwrap());
        builder.append_dir_all(prefix, store).unwrap();
        builder.finish().unwrap();
    }

    /// A tar of one entry whose raw header says `path` and `kind`, with `body`.
    fn crafted(to: &Path, entries: &[(&[u8], tar::EntryType, &[u8])]) {
        let mut bytes = Vec::new();
        for (path, kind, body) in entries {
            let mut header = tar::Header::new_old();
            header.as_old_mut().name[..path.len()].copy_from_slice(path);
            header.set_entry_type(*kind);
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            bytes.extend_from_slice(header.as_bytes());
            bytes.extend_from_slice(body);
            bytes.resize(bytes.len().div_ceil(512) * 512, 0);
        }
        bytes.extend_from_slice(&[0u8; 1024]);
        std::fs::write(to, bytes).unwrap();
    }

    fn refusal(archive: &Path, to: &Path) -> String {
        match unpack(archive, to, &mut || {}) {
            Err(e @ TransferError::Archive { .. }) => e.to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_archive_of_a_store_unpacks_whole_private_and_matches_its_manifest() {
        for prefix in ["store", "."] {
            let dir = scratch(&format!("whole-{}", prefix.len()));
            let store = tree(&dir);
            let archive = dir.join("store.tar");
            archive_of(&store, prefix, &archive);
            let to = dir.join("unpacked");
            let mut files = 0;
            let lines = unpack(&archive, &to, &mut || files += 1).unwrap();
            assert_eq!(files, 4);
            transfer::compare_unpacked(&archive, &lines, &to).unwrap();
            for name in ["version", "keyspaces/1/segment", "keyspaces/1.meta", "a.b"] {
                assert_eq!(
                    std::fs::read(to.join(name)).unwrap(),
                    std::fs::read(store.join(name)).unwrap()
                );
                let mode = std::fs::metadata(to.join(name))
                    .unwrap()
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o600, "{name}");
            }
            // The same files as a copy of the directory would give.
            let copied = dir.join("copied");
            transfer::copy_tree(&store, &copied, &mut || {}).unwrap();
            std::fs::set_permissions(
                copied.join("version"),
                std::fs::Permissions::from_mode(0o644),
            )
            .unwrap();
            let e = transfer::compare_unpacked(&archive, &lines, &copied).unwrap_err();
            assert!(e.to_string().contains("permissions"), "{e}");
        }
    }

    #[test]
    fn an_archive_that_leaves_the_store_links_repeats_or_is_cut_short_is_refused() {
        use tar::EntryType::{Regular, Symlink};
        let dir = scratch("refused");
        let archive = dir.join("bad.tar");
        let to = dir.join("to");
        crafted(&archive, &[(b"../evil", Regular, b"x")]);
        assert!(refusal(&archive, &to).contains("entry `../evil` leaves the store"));
        assert!(!dir.join("evil").exists());
        crafted(&archive, &[(b"/etc/evil", Regular, b"x")]);
        assert!(refusal(&archive, &to).contains("leaves the store"));
        crafted(&archive, &[(b"link", Symlink, b"")]);
        assert!(refusal(&archive, &to).contains("a link or a special file"));
        crafted(&archive, &[(b"a", Regular, b"1"), (b"./a", Regular, b"2")]);
        assert!(refusal(&archive, &to).contains("one named before"));
        crafted(
            &archive,
            &[(b"store/a", Regular, b"1"), (b"b", Regular, b"2")],
        );
        assert!(refusal(&archive, &to).contains("outside `store/`"));
        // A valid archive cut inside its file's bytes.
        let store = tree(&dir);
        archive_of(&store, "store", &archive);
        let whole = std::fs::read(&archive).unwrap();
        std::fs::write(&archive, &whole[..whole.len() / 2]).unwrap();
        let cut = refusal(&archive, &dir.join("cut"));
        assert!(
            cut.contains("cut short") || cut.contains("does not read"),
            "{cut}"
        );
        std::fs::write(&archive, b"no tar at all, and far too short to be one").unwrap();
        let none = refusal(&archive, &dir.join("none"));
        assert!(
            none.contains("does not read") || none.contains("holds no file"),
            "{none}"
        );
        crafted(&archive, &[]);
        assert!(refusal(&archive, &dir.join("empty")).contains("holds no file"));
    }
}
