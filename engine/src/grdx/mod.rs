//! GRDX dense matrices (SPEC C14, docs/grdx.md): the one encoder and the one decoder of
//! the format certified numeric tables travel in. Ground floor: it imports no
//! capability; mappings, staging and models use it.
//!
//! ```text
//! offset  size  field
//! 0       4     magic  "GRDX"
//! 4       1     version  1
//! 5       1     dimensions  2
//! 6       2     reserved  0
//! 8       4     rows  u32 little-endian, ≥ 1
//! 12      4     cols  u32 little-endian, ≥ 1
//! 16      8·n   the n = rows × cols cells, f64 little-endian, row-major
//! ```
//!
//! Invariants, stated as absences: no [`Matrix`] exists whose cells are not all finite,
//! whose dimensions are zero, or that has more than `GRDX_CELLS_MAX` cells; no decode
//! returns a matrix from bytes it does not consume exactly (a truncated body and
//! trailing bytes are refused alike); nothing is returned from a decode that refused
//! (the whole input is checked before any typed value exists); no input panics.

use crate::limits::GRDX_CELLS_MAX;

/// The first four bytes of every GRDX value.
pub const MAGIC: [u8; 4] = *b"GRDX";
/// The version this build writes and reads.
pub const VERSION: u8 = 1;
/// The dimensions a GRDX dense matrix has.
pub const DIMENSIONS: u8 = 2;
/// The header's length in bytes.
pub const HEADER_BYTES: usize = 16;

/// Why bytes (or a table) are not a GRDX matrix. Each names what it found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GrdxError {
    #[error("{found} bytes are shorter than the 16-byte GRDX header")]
    ShortHeader { found: usize },
    #[error("the magic is {found:02x?}, not \"GRDX\": this is no GRDX value")]
    Magic { found: [u8; 4] },
    #[error("GRDX version {found} is not read by this build (it reads version {VERSION})")]
    Version { found: u8 },
    #[error("the header says {found} dimensions: a GRDX dense matrix has 2 (rows and columns)")]
    Dimensions { found: u8 },
    #[error("the header's reserved bytes are {found:#06x}, not zero")]
    Reserved { found: u16 },
    #[error("a matrix of {rows} × {cols}: both dimensions are at least 1")]
    Empty { rows: u64, cols: u64 },
    #[error(
        "a matrix of {rows} × {cols} has {cells} cells, above GRDX_CELLS_MAX ({GRDX_CELLS_MAX})"
    )]
    TooLarge { rows: u64, cols: u64, cells: u64 },
    #[error("the body holds {found} bytes; {rows} × {cols} cells of 8 bytes are {expected}: {}", if found < expected { "truncated" } else { "trailing bytes" })]
    Length {
        rows: u32,
        cols: u32,
        expected: usize,
        found: usize,
    },
    #[error("cell [{row}, {col}] is {value}: every cell is a finite number")]
    NotFinite { row: u32, col: u32, value: f64 },
    #[error("{cells} cells given for a matrix of {rows} × {cols}")]
    Cells { rows: u32, cols: u32, cells: usize },
    #[error("line {line}: {reason}")]
    Table { line: usize, reason: String },
}

/// A valid GRDX matrix: 2 dimensions of at least 1, at most `GRDX_CELLS_MAX` cells,
/// every one finite, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    rows: u32,
    cols: u32,
    cells: Vec<f64>,
}

/// The dimensions' product, refused when zero or above `GRDX_CELLS_MAX`.
fn cell_count(rows: u64, cols: u64) -> Result<usize, GrdxError> {
    if rows == 0 || cols == 0 {
        return Err(GrdxError::Empty { rows, cols });
    }
    let cells = rows.saturating_mul(cols);
    if cells > GRDX_CELLS_MAX as u64 {
        return Err(GrdxError::TooLarge { rows, cols, cells });
    }
    Ok(cells as usize)
}

impl Matrix {
    /// A matrix of `rows` × `cols` from its cells, row-major.
    pub fn new(rows: u32, cols: u32, cells: Vec<f64>) -> Result<Matrix, GrdxError> {
        let count = cell_count(u64::from(rows), u64::from(cols))?;
        if cells.len() != count {
            return Err(GrdxError::Cells {
                rows,
                cols,
                cells: cells.len(),
            });
        }
        if let Some(at) = cells.iter().position(|v| !v.is_finite()) {
            return Err(not_finite(cols, at, cells[at]));
        }
        Ok(Matrix { rows, cols, cells })
    }

    pub fn rows(&self) -> u32 {
        self.rows
    }

    pub fn cols(&self) -> u32 {
        self.cols
    }

    /// The cells, row-major.
    pub fn cells(&self) -> &[f64] {
        &self.cells
    }

    /// The cell at `row`, `col` (from 0), if inside the matrix.
    pub fn get(&self, row: u32, col: u32) -> Option<f64> {
        (row < self.rows && col < self.cols)
            .then(|| self.cells[row as usize * self.cols as usize + col as usize])
    }

    /// The GRDX bytes of this matrix.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.cells.len() * 8);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(DIMENSIONS);
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.rows.to_le_bytes());
        out.extend_from_slice(&self.cols.to_le_bytes());
        for cell in &self.cells {
            out.extend_from_slice(&cell.to_le_bytes());
        }
        out
    }

    /// The matrix `bytes` encode: the header, the length and every cell are checked
    /// before the matrix exists.
    pub fn decode(bytes: &[u8]) -> Result<Matrix, GrdxError> {
        let Some((header, body)) = bytes.split_first_chunk::<HEADER_BYTES>() else {
            return Err(GrdxError::ShortHeader { found: bytes.len() });
        };
        let magic: [u8; 4] = header[0..4].try_into().expect("4 bytes");
        if magic != MAGIC {
            return Err(GrdxError::Magic { found: magic });
        }
        if header[4] != VERSION {
            return Err(GrdxError::Version { found: header[4] });
        }
        if header[5] != DIMENSIONS {
            return Err(GrdxError::Dimensions { found: header[5] });
        }
        let reserved = u16::from_le_bytes([header[6], header[7]]);
        if reserved != 0 {
            return Err(GrdxError::Reserved { found: reserved });
        }
        let rows = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        let cols = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        let count = cell_count(u64::from(rows), u64::from(cols))?;
        if body.len() != count * 8 {
            return Err(GrdxError::Length {
                rows,
                cols,
                expected: count * 8,
                found: body.len(),
            });
        }
        // Read whole, then checked whole (both loops without a branch per cell, so the
        // compiler vectorizes them: one pass with a flag set inside the read's closure
        // measured 6× slower); the cells are returned only once all are finite.
        let cells: Vec<f64> = body
            .chunks_exact(8)
            .map(|chunk| f64::from_le_bytes(chunk.try_into().expect("8 bytes")))
            .collect();
        if cells.iter().fold(false, |bad, v| bad | !v.is_finite()) {
            let at = cells
                .iter()
                .position(|v| !v.is_finite())
                .expect("a non-finite cell was seen");
            return Err(not_finite(cols, at, cells[at]));
        }
        Ok(Matrix { rows, cols, cells })
    }

    /// A matrix from a CSV table: one row per non-empty line, cells separated by
    /// commas, every row as long as the first, every cell a finite decimal number.
    pub fn from_csv(text: &str) -> Result<Matrix, GrdxError> {
        let mut cells = Vec::new();
        let (mut rows, mut cols) = (0u64, None::<u64>);
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let table = |reason: String| GrdxError::Table {
                line: index + 1,
                reason,
            };
            let mut width = 0u64;
            for field in line.split(',') {
                let field = field.trim();
                let value: f64 = field.parse().map_err(|_| {
                    table(format!(
                        "`{}` is not a number",
                        grid_spec::diagnostic::quoted(field)
                    ))
                })?;
                if !value.is_finite() {
                    return Err(table(format!(
                        "`{}` is not a finite number",
                        grid_spec::diagnostic::quoted(field)
                    )));
                }
                width += 1;
                cells.push(value);
                if cells.len() > GRDX_CELLS_MAX {
                    return Err(table(format!(
                        "more than GRDX_CELLS_MAX ({GRDX_CELLS_MAX}) cells"
                    )));
                }
            }
            match cols {
                None => cols = Some(width),
                Some(c) if c != width => {
                    return Err(table(format!(
                        "{width} cells in this row, {c} in the first: every row is as long"
                    )));
                }
                Some(_) => {}
            }
            rows += 1;
        }
        let cols = cols.unwrap_or(0);
        cell_count(rows, cols)?;
        Matrix::new(rows as u32, cols as u32, cells)
    }
}

fn not_finite(cols: u32, at: usize, value: f64) -> GrdxError {
    let cols = cols as usize;
    GrdxError::NotFinite {
        row: (at / cols) as u32,
        col: (at % cols) as u32,
        value,
    }
}

mod file;
pub use file::MatrixFileError;

#[cfg(test)]
mod tests;
