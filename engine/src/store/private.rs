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
/// with group or other permission bits.
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
