//! Why a model is not admitted, and why a batch is refused.

use grid_spec::formula::Function;
use grid_spec::limits::{BATCH_INPUTS_MAX, MODEL_OPERATIONS_CEILING_MAX};

/// Why [`Runtime::new`](super::Runtime::new) refused a model. The owner re-checks
/// everything validation checked (SPEC §1.9), so these normally only occur for a model
/// that did not come from `grid_spec::load`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AdmissionError {
    #[error(
        "model `{model}` declares ceiling {ceiling}, above MODEL_OPERATIONS_CEILING_MAX \
         ({MODEL_OPERATIONS_CEILING_MAX})"
    )]
    CeilingAboveMax { model: String, ceiling: u32 },

    #[error(
        "model `{model}`: {operations} counted operations exceed the model's {}",
        describe_ceiling(*.ceiling, *.declared)
    )]
    OperationsAboveCeiling {
        model: String,
        operations: u64,
        ceiling: u32,
        /// Whether the model declared its ceiling (otherwise the default applied).
        declared: bool,
    },

    #[error(
        "model `{model}` is scalar: cell `{cell}` calls {function}, but a scalar model \
         admits arithmetic and comparisons only"
    )]
    ScalarFunction {
        model: String,
        cell: String,
        function: Function,
    },

    #[error(
        "model `{model}` is scalar: cell `{cell}` uses the range `{first}:{last}`, but a \
         scalar model admits arithmetic and comparisons only"
    )]
    ScalarRange {
        model: String,
        cell: String,
        first: String,
        last: String,
    },

    #[error("model `{model}` declares `{name}` more than once")]
    DuplicateName { model: String, name: String },

    #[error(
        "model `{model}`: cell `{cell}` refers to `{name}`, which is not an input or cell of the model"
    )]
    UnknownName {
        model: String,
        cell: String,
        name: String,
    },

    #[error(
        "model `{model}`: cell `{cell}` uses the range `{first}:{last}`, but `{last}` is \
         declared before `{first}`"
    )]
    BadRange {
        model: String,
        cell: String,
        first: String,
        last: String,
    },

    /// A cycle on the *static* dependency graph: every name and range a formula
    /// mentions is a dependency, including one inside an `IF` branch that would never
    /// be taken at run time — `a = IF(1, x, b)` with `b = a` is a cycle. `path` starts
    /// and ends with the same name: `a -> b -> a` reads "a refers to b, which refers
    /// to a".
    #[error("model `{model}`: cycle {}", .path.join(" -> "))]
    Cycle { model: String, path: Vec<String> },

    #[error(
        "model `{model}`: input `{input}` has the default {value}, which is not a finite number"
    )]
    NonFiniteDefault {
        model: String,
        input: String,
        value: f64,
    },

    /// A formula tree the parser never produces (a wrong argument count, a range
    /// outside a variadic function, a non-finite literal).
    #[error("model `{model}`: cell `{cell}`: {reason}")]
    Malformed {
        model: String,
        cell: String,
        reason: String,
    },
}

fn describe_ceiling(ceiling: u32, declared: bool) -> String {
    if declared {
        format!(
            "declared ceiling {ceiling}; raise `ceiling` (at most \
             MODEL_OPERATIONS_CEILING_MAX, {MODEL_OPERATIONS_CEILING_MAX}) or simplify the \
             formulas"
        )
    } else {
        format!(
            "ceiling {ceiling} (MODEL_OPERATIONS_CEILING_DEFAULT); none is declared: \
             declare `ceiling=N` (at most MODEL_OPERATIONS_CEILING_MAX, \
             {MODEL_OPERATIONS_CEILING_MAX}) or simplify the formulas"
        )
    }
}

/// Why a batch was refused. A refused batch changes nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    #[error("input `{input}`: {value} is not a finite number; values are finite f64")]
    NonFinite { input: String, value: f64 },

    #[error("`{name}` is not an input of the model")]
    UnknownName { name: String },

    #[error("`{name}` is a formula cell; a batch sets inputs only")]
    NotAnInput { name: String },

    #[error("input `{input}` is set more than once in one batch")]
    Duplicate { input: String },

    #[error("a batch of {entries} entries exceeds BATCH_INPUTS_MAX ({BATCH_INPUTS_MAX})")]
    TooManyEntries { entries: usize },

    /// An [`InputSlot`](super::InputSlot) that this runtime did not resolve.
    #[error("input slot {slot} does not name an input of this model")]
    UnknownSlot { slot: u32 },

    #[error("`{name}` is a matrix: it takes a whole matrix value, not a number in a batch")]
    MatrixInBatch { name: String },

    #[error("`{name}` is not a matrix of the model")]
    NotAMatrix { name: String },

    #[error(
        "matrix `{name}` is declared {rows} × {cols}; the value given is {given_rows} × {given_cols}"
    )]
    MatrixGeometry {
        name: String,
        rows: u32,
        cols: u32,
        given_rows: u32,
        given_cols: u32,
    },
}
