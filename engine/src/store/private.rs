//! Private local state (SPEC §1.6): directories `0700`, files `0600`; weaker
//! permissions refuse.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivateDirError {
    #[error(
        "{path}: permissions {mode:o} are weaker than private ({expected:o}); refusing to use it"
    )]
    WeakPermissions {
        path: PathBuf,
        mode: u32,
        expected: u32,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Creates `dir` private (0700) if absent; refuses an existing one, or anything in it,
/// with group or other permission bits. `dir` itself may be a symbolic link (a host
/// with `dir=` is reached through `<state>/hosts/NAME`, a link reconcile makes): its
/// target is checked, and the directory holding the link must be private too — a
/// link's own mode is always 777 on Linux and says nothing; only who can write the
/// directory holding it can replace it.
pub fn ensure_private_dir(dir: &Path) -> Result<(), PrivateDirError> {
    let io = |source| PrivateDirError::Io {
        path: dir.to_owned(),
        source,
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        return Ok(());
    }
    let metadata = std::fs::symlink_metadata(dir).map_err(io)?;
    if metadata.file_type().is_symlink() {
        let holder = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let held = std::fs::metadata(holder).map_err(|source| PrivateDirError::Io {
            path: holder.to_owned(),
            source,
        })?;
        let mode = held.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(PrivateDirError::WeakPermissions {
                path: holder.to_owned(),
                mode,
                expected: 0o700,
            });
        }
        return check_private(&std::fs::canonicalize(dir).map_err(io)?);
    }
    check_private(dir)
}

fn check_private(path: &Path) -> Result<(), PrivateDirError> {
    let io = |source| PrivateDirError::Io {
        path: path.to_owned(),
        source,
    };
    let metadata = std::fs::symlink_metadata(path).map_err(io)?;
    let mode = metadata.permissions().mode() & 0o777;
    let expected = if metadata.is_dir() { 0o700 } else { 0o600 };
    if mode & 0o077 != 0 {
        return Err(PrivateDirError::WeakPermissions {
            path: path.to_owned(),
            mode,
            expected,
        });
    }
    if metadata.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io)? {
            check_private(&entry.map_err(io)?.path())?;
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` 0600, synced, replacing it atomically, the directory
/// holding it synced too (a private file of an installation: keys, certificates,
/// `host.toml`, the store's mark).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temporary = path.with_extension("new");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Syncs the directory `dir` itself: the names a rename, a removal or a new file put
/// in it are durable once this returns.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// A 32-byte secret key in the private file `path`: read (a regular file of mode 600,
/// exactly 32 bytes), or — when it is missing and `make` is `Ok` — made from the
/// system's randomness and written privately. Missing while `make` is `Err(why)`:
/// refused, saying `why` (what was sealed with it would not open under a new one).
/// `what` names the key in messages ("the archive's sealing key").
pub fn key_file(path: &Path, what: &str, make: Result<(), &str>) -> Result<[u8; 32], String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(metadata) => {
            let mode = metadata.permissions().mode() & 0o777;
            if !metadata.is_file() || mode & 0o077 != 0 {
                return Err(format!(
                    "{what} has mode {mode:o}: it must be a regular file of mode 600, as keys are"
                ));
            }
            let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
            <[u8; 32]>::try_from(bytes.as_slice())
                .map_err(|_| format!("{what} holds {} bytes, not 32", bytes.len()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match make {
            Ok(()) => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(|e| format!("no randomness: {e}"))?;
                write_private(path, &key).map_err(|e| e.to_string())?;
                Ok(key)
            }
            Err(why) => Err(format!("{what} is missing, and {why}")),
        },
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_link_is_judged_by_its_target_and_the_directory_holding_it() {
        let root = std::env::temp_dir().join(format!("grid-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let hosts = root.join("state/hosts");
        ensure_private_dir(&hosts).unwrap();
        let target = root.join("elsewhere/h2");
        ensure_private_dir(&target).unwrap();
        std::fs::write(target.join("host.toml"), "").unwrap();
        mode(&target.join("host.toml"), 0o600);
        let link = hosts.join("h2");
        std::os::unix::fs::symlink(&target, &link).unwrap();

        // The link's own mode (777) is not the target's: a private target is used.
        ensure_private_dir(&link).unwrap();
        // A target with weak permissions is refused, naming the target.
        mode(&target, 0o755);
        let refused = ensure_private_dir(&link).unwrap_err().to_string();
        assert!(
            refused.contains("elsewhere/h2: permissions 755"),
            "{refused}"
        );
        mode(&target, 0o700);
        // A link in a directory others can write could be replaced: refused.
        mode(&hosts, 0o777);
        let refused = ensure_private_dir(&link).unwrap_err().to_string();
        assert!(
            refused.contains("state/hosts: permissions 777"),
            "{refused}"
        );
        mode(&hosts, 0o700);
        ensure_private_dir(&link).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }
}
