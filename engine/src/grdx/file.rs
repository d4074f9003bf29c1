//! A matrix read from a file an operator gives (`--matrix NAME=FILE`, later
//! `gridctl publish-matrix --file`): `.grdx` holds GRDX bytes, `.csv` a table of
//! decimal numbers. Read whole, at most `MATRIX_FILE_BYTES_MAX` bytes, and validated
//! before a [`Matrix`] exists.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{GrdxError, Matrix};
use crate::limits::MATRIX_FILE_BYTES_MAX;

/// Why a file gave no matrix; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum MatrixFileError {
    #[error("{}: cannot read it: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: more than MATRIX_FILE_BYTES_MAX ({MATRIX_FILE_BYTES_MAX}) bytes; a matrix holds at most GRDX_CELLS_MAX cells",
        .path.display()
    )]
    TooLarge { path: PathBuf },
    #[error("{}: a matrix file ends in .grdx (GRDX bytes) or .csv (a table of numbers)", .path.display())]
    Kind { path: PathBuf },
    #[error("{}: the CSV table is not UTF-8", .path.display())]
    NotText { path: PathBuf },
    #[error("{}: {source}", .path.display())]
    Format { path: PathBuf, source: GrdxError },
}

impl Matrix {
    /// The matrix in `path`: GRDX when it ends in `.grdx`, CSV when it ends in `.csv`.
    pub fn read_file(path: &Path) -> Result<Matrix, MatrixFileError> {
        let path_buf = || path.to_owned();
        let kind = path.extension().and_then(|e| e.to_str());
        if !matches!(kind, Some("grdx" | "csv")) {
            return Err(MatrixFileError::Kind { path: path_buf() });
        }
        let file = std::fs::File::open(path).map_err(|source| MatrixFileError::Io {
            path: path_buf(),
            source,
        })?;
        let mut bytes = Vec::new();
        file.take(MATRIX_FILE_BYTES_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| MatrixFileError::Io {
                path: path_buf(),
                source,
            })?;
        if bytes.len() as u64 > MATRIX_FILE_BYTES_MAX {
            return Err(MatrixFileError::TooLarge { path: path_buf() });
        }
        let format = |source| MatrixFileError::Format {
            path: path_buf(),
            source,
        };
        if kind == Some("grdx") {
            return Matrix::decode(&bytes).map_err(format);
        }
        let text =
            String::from_utf8(bytes).map_err(|_| MatrixFileError::NotText { path: path_buf() })?;
        Matrix::from_csv(&text).map_err(format)
    }
}
