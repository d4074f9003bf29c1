//! The model runtime (SPEC C1): a validated [`grid_spec::Model`] is admitted and
//! compiled into a plan; a [`Runtime`] holds the current value of every input and cell
//! and applies input batches, recomputing only downstream cells in dependency order,
//! atomically.
//!
//! # API contract
//!
//! Used by gridctl, the journal and the benchmarks — keep it stable.
//!
//! - [`Runtime::new`]`(&grid_spec::Model) -> Result<Runtime, AdmissionError>`:
//!   admission (re-checked at the owner, SPEC §1.9: ceiling ≤
//!   `MODEL_OPERATIONS_CEILING_MAX`, operations ≤ ceiling, scalar rules, names resolve,
//!   no cycle), then compilation, then a full evaluation from the inputs' defaults
//!   (`#N/A` for an input without default).
//! - [`Runtime::evaluate_all`]`(&mut self)`: recompute every cell from the current
//!   inputs.
//! - [`Runtime::input_slot`]`(&self, name) -> Option<InputSlot>`: resolve an input once.
//! - [`Runtime::apply_slots`]`(&mut self, &[(InputSlot, f64)]) -> Result<(), BatchError>`:
//!   one atomic batch; refused (nothing changes) on a non-finite value, a slot given
//!   twice, or more than `BATCH_INPUTS_MAX` entries.
//! - [`Runtime::apply`]`(&mut self, &[(&str, f64)]) -> Result<(), BatchError>`: the same
//!   by name; also refuses an unknown name or a formula cell's name.
//! - [`Runtime::value`]`(&self, name) -> Option<Value>`; [`Runtime::values`] iterates
//!   `(name, Value)` over inputs and cells in declaration order.
//! - [`Runtime::apply_matrix`]`(&mut self, name, &grdx::Matrix) -> Result<(), BatchError>`:
//!   the whole value of a matrix item at once (its declared geometry only); the cells
//!   reading it recompute once. [`Runtime::matrices`] lists the matrices.
//! - [`Value`] is a finite number or an [`ErrorValue`] (`#DIV/0!`, `#NUM!`, `#N/A`,
//!   `#REF!`); its
//!   `Display` prints the number with Rust's shortest round-trip formatting or the error
//!   text.
//!
//! # Semantics
//!
//! - Values are always finite: an operation producing NaN or ±∞ yields `#NUM!`; `x/0`
//!   and `0^negative` yield `#DIV/0!`; `SQRT` of a negative number is `#NUM!`.
//! - Errors propagate: the first error operand, left to right, wins.
//! - Comparisons give 1 or 0. `IF(c, a, b)` takes `a` when `c` is nonzero; only the
//!   condition and the taken branch are evaluated.
//! - `MIN MAX SUM AVERAGE` are variadic over their arguments and expanded ranges; a
//!   range `a:b` is every input and cell declared from `a` to `b`.
//! - `ROUND(x, digits)` truncates `digits` toward zero, refuses `|digits| >
//!   ROUND_DIGITS_MAX` with `#NUM!`, and rounds half away from zero in decimal, on the
//!   shortest round-trip representation of `x`: `ROUND(2.675, 2)` is 2.68.
//! - `m[row, col]` reads one value of matrix `m`, row then column, from 0: an index
//!   that is not an integer or lies outside the matrix yields `#REF!` (never a panic),
//!   a matrix no value was applied to yet reads `#N/A`. A matrix is not a value:
//!   [`Runtime::values`] leaves it out.
//! - Cycles are found on the static dependency graph: a reference inside an `IF`
//!   branch that is never taken still counts (see [`AdmissionError::Cycle`]).
//!
//! # Design
//!
//! - **Compile** (`compile.rs`): the static dependency graph (names and expanded
//!   ranges) is searched for cycles and ordered by *level* (1 + the highest level a
//!   cell reads; inputs are level 0). Within a level, cells whose code has the same
//!   shape run one after another, which keeps the interpreter's dispatch predictable
//!   on models whose formulas repeat a pattern. Each formula becomes flat bytecode
//!   followed by a `Store` of its value, all cells in one program.
//! - **Evaluate** (`eval.rs`): a small stack machine with the top of the stack in a
//!   register. Values are single `f64`s — an error value is a NaN whose payload names
//!   it — so the common path of an operation is one arithmetic instruction and one
//!   `is_finite` check. Right operands that are names or literals are fused into the
//!   instruction (`AddL`, `MulC`, `x * c` terms of weighted sums …); `IF` is a
//!   conditional jump over the untaken branch. A full evaluation is one run over the
//!   whole program.
//! - **Incremental**: every input and cell keeps the ranks (evaluation positions) of
//!   the cells that read it. A batch marks the readers of the inputs whose value
//!   changed in a bitset indexed by rank, then runs the evaluator from the lowest
//!   marked cell; each cell's `Store` marks its own readers — always of a higher rank —
//!   if its value changed bit for bit, and continues at the next marked cell. So only
//!   downstream cells recompute, each once, after everything they read. Applying a
//!   batch allocates nothing and looks nothing up by name; a batch that changes an
//!   input nobody reads costs a few nanoseconds.

mod compile;
mod error;
mod eval;
mod round;
mod value;

#[cfg(test)]
mod tests;

use grid_spec::Model;
use grid_spec::limits::BATCH_INPUTS_MAX;

pub use error::{AdmissionError, BatchError};
pub use value::{ErrorValue, Value, number_text};

use crate::grdx::Matrix;
use compile::Plan;
use eval::Table;
use value::decode;

/// An input of one [`Runtime`], resolved once by [`Runtime::input_slot`] so batches
/// skip name lookups. A slot is only meaningful for the runtime that resolved it (or
/// another runtime of the same model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InputSlot(u32);

impl InputSlot {
    /// The input's position among the model's inputs and cells, in declaration order.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// An admitted, compiled model with the current value of every input and cell.
#[derive(Debug, Clone)]
pub struct Runtime {
    plan: Plan,
    /// Encoded values by declaration index (a matrix item's is `#N/A`).
    values: Vec<f64>,
    /// The values of each matrix, by ordinal.
    tables: Vec<Table>,
    /// The evaluator's stack, sized for the deepest cell.
    stack: Vec<f64>,
    /// Cells to recompute.
    dirty: Dirty,
    /// Duplicate detection within a batch: `seen[i] == stamp` once input `i` is in it.
    seen: Vec<u32>,
    stamp: u32,
    /// Reused by [`Runtime::apply`] to turn names into slots.
    slots: Vec<(InputSlot, f64)>,
    recomputed: usize,
}

impl Runtime {
    /// Admits and compiles `model` and evaluates every cell from the inputs' defaults
    /// (`#N/A` for an input without default).
    pub fn new(model: &Model) -> Result<Runtime, AdmissionError> {
        let plan = compile::compile(model)?;
        let words = plan.cell_starts.len().div_ceil(64);
        let mut runtime = Runtime {
            values: plan.initial.clone(),
            tables: plan.tables.clone(),
            stack: vec![0.0; plan.stack_size],
            dirty: Dirty {
                words: vec![0; words],
                low: usize::MAX,
                high: 0,
            },
            seen: vec![0; plan.names.len()],
            stamp: 0,
            slots: Vec::new(),
            recomputed: 0,
            plan,
        };
        runtime.evaluate_all();
        tracing::debug!(
            model = %runtime.plan.model,
            items = runtime.plan.names.len(),
            cells = runtime.plan.cell_starts.len(),
            operations = runtime.plan.operations,
            "model admitted"
        );
        Ok(runtime)
    }

    /// Recomputes every cell from the current inputs, in topological order: one run
    /// over the whole program.
    pub fn evaluate_all(&mut self) {
        let code = &self.plan.code;
        eval::run(
            code,
            0,
            code.len(),
            &mut self.values,
            &self.tables,
            &mut self.stack,
            eval::Sequential,
        );
        self.dirty.clear();
        self.recomputed = self.plan.cell_starts.len();
    }

    /// The slot of input `name`; `None` when the model has no input of that name.
    pub fn input_slot(&self, name: &str) -> Option<InputSlot> {
        let &index = self.plan.index.get(name)?;
        self.plan.is_input[index as usize].then_some(InputSlot(index))
    }

    /// Applies one batch atomically: every entry is checked first — a slot of an
    /// input of this model, a finite value, each slot once, at most
    /// `BATCH_INPUTS_MAX` entries — and on any refusal nothing changes. Then the
    /// values are set and the cells downstream of the changed inputs recompute, each
    /// once, in dependency order.
    pub fn apply_slots(&mut self, batch: &[(InputSlot, f64)]) -> Result<(), BatchError> {
        if batch.len() > BATCH_INPUTS_MAX {
            return Err(BatchError::TooManyEntries {
                entries: batch.len(),
            });
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.seen.fill(0);
            self.stamp = 1;
        }
        for &(InputSlot(slot), value) in batch {
            let index = slot as usize;
            if !self.plan.is_input.get(index).copied().unwrap_or(false) {
                return Err(BatchError::UnknownSlot { slot });
            }
            if !value.is_finite() {
                return Err(BatchError::NonFinite {
                    input: self.plan.names[index].clone(),
                    value,
                });
            }
            if self.seen[index] == self.stamp {
                return Err(BatchError::Duplicate {
                    input: self.plan.names[index].clone(),
                });
            }
            self.seen[index] = self.stamp;
        }
        for &(InputSlot(slot), value) in batch {
            let index = slot as usize;
            if self.values[index].to_bits() != value.to_bits() {
                self.values[index] = value;
                self.dirty.mark(&self.plan, index);
            }
        }
        self.recompute_dirty();
        Ok(())
    }

    /// [`Runtime::apply_slots`] by name; also refuses a name that is not an input of
    /// the model (unknown, or a formula cell's).
    pub fn apply(&mut self, batch: &[(&str, f64)]) -> Result<(), BatchError> {
        if batch.len() > BATCH_INPUTS_MAX {
            return Err(BatchError::TooManyEntries {
                entries: batch.len(),
            });
        }
        let mut slots = std::mem::take(&mut self.slots);
        slots.clear();
        let mut resolved = Ok(());
        for &(name, value) in batch {
            match self.plan.index.get(name) {
                None => {
                    resolved = Err(BatchError::UnknownName {
                        name: name.to_owned(),
                    });
                    break;
                }
                Some(&index) if self.plan.matrix_items.contains(&index) => {
                    resolved = Err(BatchError::MatrixInBatch {
                        name: name.to_owned(),
                    });
                    break;
                }
                Some(&index) if !self.plan.is_input[index as usize] => {
                    resolved = Err(BatchError::NotAnInput {
                        name: name.to_owned(),
                    });
                    break;
                }
                Some(&index) => slots.push((InputSlot(index), value)),
            }
        }
        let result = resolved.and_then(|()| self.apply_slots(&slots));
        self.slots = slots;
        result
    }

    /// Sets the whole value of matrix `name` at once: refused, changing nothing, when
    /// `name` is not a matrix of the model or `matrix` has another geometry. Then the
    /// cells reading it recompute, each once, in dependency order (none when the value
    /// is the one it holds, bit for bit).
    pub fn apply_matrix(&mut self, name: &str, matrix: &Matrix) -> Result<(), BatchError> {
        let not_a_matrix = || BatchError::NotAMatrix {
            name: name.to_owned(),
        };
        let &index = self.plan.index.get(name).ok_or_else(not_a_matrix)?;
        let ordinal = self
            .plan
            .matrix_items
            .iter()
            .position(|&i| i == index)
            .ok_or_else(not_a_matrix)?;
        let table = &mut self.tables[ordinal];
        if (table.rows, table.cols) != (matrix.rows(), matrix.cols()) {
            return Err(BatchError::MatrixGeometry {
                name: name.to_owned(),
                rows: table.rows,
                cols: table.cols,
                given_rows: matrix.rows(),
                given_cols: matrix.cols(),
            });
        }
        let same = table.cells.len() == matrix.cells().len()
            && table
                .cells
                .iter()
                .zip(matrix.cells())
                .all(|(a, b)| a.to_bits() == b.to_bits());
        if same {
            self.recomputed = 0;
            return Ok(());
        }
        table.cells.clear();
        table.cells.extend_from_slice(matrix.cells());
        self.dirty.mark(&self.plan, index as usize);
        self.recompute_dirty();
        Ok(())
    }

    /// Every matrix of the model: its name, rows, columns and value (none until one is
    /// applied), in declaration order.
    pub fn matrices(&self) -> impl Iterator<Item = (&str, u32, u32, Option<&[f64]>)> + '_ {
        self.plan
            .matrix_items
            .iter()
            .zip(&self.tables)
            .map(|(&i, t)| {
                let cells = (!t.cells.is_empty()).then_some(t.cells.as_slice());
                (self.plan.names[i as usize].as_str(), t.rows, t.cols, cells)
            })
    }

    /// The current value of input or cell `name` (`None` for a matrix: read it with
    /// [`Runtime::matrices`]).
    pub fn value(&self, name: &str) -> Option<Value> {
        let &index = self.plan.index.get(name)?;
        if self.plan.matrix_items.contains(&index) {
            return None;
        }
        Some(decode(self.values[index as usize]))
    }

    /// The current value of an input, by slot.
    pub fn slot_value(&self, slot: InputSlot) -> Option<Value> {
        self.values.get(slot.index()).copied().map(decode)
    }

    /// `(name, value)` of every input and cell, in declaration order (matrices are
    /// not values: [`Runtime::matrices`]).
    pub fn values(&self) -> impl Iterator<Item = (&str, Value)> + '_ {
        let matrices = &self.plan.matrix_items;
        self.plan
            .names
            .iter()
            .zip(&self.values)
            .enumerate()
            .filter(move |(i, _)| matrices.is_empty() || !matrices.contains(&(*i as u32)))
            .map(|(_, (name, &raw))| (name.as_str(), decode(raw)))
    }

    /// The model's name.
    pub fn model_name(&self) -> &str {
        &self.plan.model
    }

    /// Counted operations of the model's formulas (what admission compared to the
    /// ceiling).
    pub fn operations(&self) -> u64 {
        self.plan.operations
    }

    /// How many formula cells the last batch (or full evaluation) recomputed.
    pub fn last_recomputed(&self) -> usize {
        self.recomputed
    }

    /// Recomputes the marked cells, lowest rank first, in one run of the evaluator:
    /// each `Store` marks the cell's dependents — always of a higher rank — when its
    /// value changed, then continues with the next marked cell.
    fn recompute_dirty(&mut self) {
        let mut propagate = Propagate {
            dependents_start: &self.plan.dependents_start,
            dependents: &self.plan.dependents,
            cell_starts: &self.plan.cell_starts,
            words: &mut self.dirty.words,
            high: self.dirty.high,
            rank: self.dirty.low.saturating_mul(64),
            recomputed: 0,
        };
        if let Some(start) = propagate.next() {
            propagate = eval::run(
                &self.plan.code,
                start,
                self.plan.code.len(),
                &mut self.values,
                &self.tables,
                &mut self.stack,
                propagate,
            );
        }
        self.recomputed = propagate.recomputed;
        self.dirty.low = usize::MAX;
        self.dirty.high = 0;
    }
}

/// A bit per topological rank: the cells to recompute. Words `low..high` may hold set
/// bits.
#[derive(Debug, Clone)]
struct Dirty {
    words: Vec<u64>,
    low: usize,
    high: usize,
}

impl Dirty {
    fn clear(&mut self) {
        if self.low < self.high {
            self.words[self.low..self.high].fill(0);
        }
        self.low = usize::MAX;
        self.high = 0;
    }

    /// Marks the cells that read item `index`.
    #[inline]
    fn mark(&mut self, plan: &Plan, index: usize) {
        let start = plan.dependents_start[index] as usize;
        let end = plan.dependents_start[index + 1] as usize;
        let ranks = &plan.dependents[start..end];
        let (Some(&first), Some(&last)) = (ranks.first(), ranks.last()) else {
            return;
        };
        // Ranks are ascending: the bounds move once per item, not once per rank.
        self.low = self.low.min(first as usize >> 6);
        self.high = self.high.max((last as usize >> 6) + 1);
        for &rank in ranks {
            self.words[rank as usize >> 6] |= 1 << (rank & 63);
        }
    }
}

/// The `Store` of an incremental batch: the bitset and the plan's tables, unpacked so
/// the evaluator can keep them in registers.
struct Propagate<'a> {
    dependents_start: &'a [u32],
    dependents: &'a [u32],
    cell_starts: &'a [u32],
    words: &'a mut [u64],
    /// Words from `high` on hold no set bit.
    high: usize,
    /// The rank of the cell being recomputed.
    rank: usize,
    recomputed: usize,
}

impl Propagate<'_> {
    /// Takes the lowest marked rank (never below the current one: marks only go to
    /// higher ranks) and returns where its code starts.
    #[inline]
    fn next(&mut self) -> Option<usize> {
        let mut word = self.rank >> 6;
        while word < self.high {
            let bits = self.words[word];
            if bits != 0 {
                self.words[word] = bits & (bits - 1);
                self.rank = word * 64 + bits.trailing_zeros() as usize;
                return Some(self.cell_starts[self.rank] as usize);
            }
            word += 1;
        }
        None
    }
}

impl eval::Store for Propagate<'_> {
    #[inline]
    fn store(&mut self, item: u32, value: f64, values: &mut [f64], _next: usize) -> Option<usize> {
        self.recomputed += 1;
        let index = item as usize;
        if values[index].to_bits() != value.to_bits() {
            values[index] = value;
            // Readers of a cell rank above it: only the upper bound can move.
            let start = self.dependents_start[index] as usize;
            let end = self.dependents_start[index + 1] as usize;
            let ranks = &self.dependents[start..end];
            if let Some(&last) = ranks.last() {
                self.high = self.high.max((last as usize >> 6) + 1);
            }
            for &rank in ranks {
                self.words[rank as usize >> 6] |= 1 << (rank & 63);
            }
        }
        self.next()
    }
}
