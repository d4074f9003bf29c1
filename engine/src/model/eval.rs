//! The evaluator: flat bytecode for a small stack machine over encoded values (see
//! `value.rs`: a finite `f64`, or a NaN whose payload names the error).
//!
//! The top of the stack lives in a register (`acc`); the rest in a scratch slice. Most
//! binary operations take their right operand straight from a value slot (`…L`) or a
//! literal (`…C`), and a few common pairs are one instruction, so `(a + b) * 0.5 +
//! c * 0.25` is three: `LoadAddL a b`, `MultiplyC 0.5`, `AddScaled c 0.25`. The
//! cells' code is laid out in evaluation order, each followed by a `Store` of its
//! value; what a `Store` does is the caller's [`Store`]: a full evaluation
//! ([`Sequential`]) stores and falls through to the next cell, an incremental batch
//! compares, marks readers and jumps to the next marked cell.
//!
//! Evaluation order within a cell is fixed (operands left to right), so the same
//! inputs always give bit-identical results, whether a cell is reached by a full
//! evaluation or an incremental batch.
//!
//! Error rules: the first error operand, left to right, wins; a finite operation that
//! produces NaN or ±∞ yields `#NUM!`, except `x/0` and `0^negative`, which yield
//! `#DIV/0!`. `IF` jumps over the branch it does not take, so an error there does
//! not matter.

use super::round::round;
use super::value::{DIV_ZERO, NOT_AVAILABLE, NUM, REF};

/// The values of one matrix item: `rows × cols` cells, row-major; none until a value
/// is applied (every read is `#N/A`).
#[derive(Debug, Clone)]
pub(crate) struct Table {
    pub rows: u32,
    pub cols: u32,
    pub cells: Vec<f64>,
}

/// `m[row, col]`: an error index is that error; an index that is not an integer or
/// outside the matrix is `#REF!`; a matrix without a value is `#N/A`.
#[inline]
fn matrix_read(table: &Table, row: f64, col: f64) -> f64 {
    if row.is_nan() || col.is_nan() {
        return error_of(row, col, NUM);
    }
    let inside = |i: f64, n: u32| i.fract() == 0.0 && i >= 0.0 && i < f64::from(n);
    if !inside(row, table.rows) || !inside(col, table.cols) {
        return REF;
    }
    let at = row as usize * table.cols as usize + col as usize;
    table.cells.get(at).copied().unwrap_or(NOT_AVAILABLE)
}

/// One instruction. `…L(i)` takes its right operand from value slot `i`, `…C(c)` from
/// the literal `c`, and the plain form from the stack. Jump targets are absolute
/// positions in the program.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Op {
    /// Push the value of an input or cell (its declaration index).
    Load(u32),
    /// Push a constant (a finite literal, or a fold's starting accumulator).
    Const(f64),
    /// Push `x op y` of two value slots, or `x op c` of a slot and a literal: the
    /// first operation of most formulas, in one instruction.
    LoadAddL(u32, u32),
    LoadSubtractL(u32, u32),
    LoadMultiplyL(u32, u32),
    LoadDivideL(u32, u32),
    LoadMultiplyC(u32, f64),
    LoadDivideC(u32, f64),
    /// `acc + x * c` and `acc - x * c` for slot `x` and literal `c`: a term of a
    /// weighted sum, in one instruction.
    AddScaled(u32, f64),
    SubtractScaled(u32, f64),
    Add,
    AddL(u32),
    AddC(f64),
    Subtract,
    SubtractL(u32),
    SubtractC(f64),
    Multiply,
    MultiplyL(u32),
    MultiplyC(f64),
    Divide,
    DivideL(u32),
    DivideC(f64),
    Power,
    PowerL(u32),
    PowerC(f64),
    Less,
    LessL(u32),
    LessC(f64),
    LessOrEqual,
    LessOrEqualL(u32),
    LessOrEqualC(f64),
    Greater,
    GreaterL(u32),
    GreaterC(f64),
    GreaterOrEqual,
    GreaterOrEqualL(u32),
    GreaterOrEqualC(f64),
    Equal,
    EqualL(u32),
    EqualC(f64),
    NotEqual,
    NotEqualL(u32),
    NotEqualC(f64),
    Negate,
    Abs,
    Sqrt,
    /// Pops digits, then x; pushes `ROUND(x, digits)`.
    Round,
    /// Pops the condition of an `IF`. An error is pushed back and jumps to `end` (the
    /// IF's value is that error); zero jumps to `otherwise`; anything else falls
    /// through into the taken branch.
    Branch {
        otherwise: u32,
        end: u32,
    },
    Jump(u32),
    /// Pops a value and folds it into the accumulator below it.
    FoldSum,
    FoldSumL(u32),
    FoldMin,
    FoldMinL(u32),
    FoldMax,
    FoldMaxL(u32),
    /// Folds the values of declaration indices `first..=last` into the accumulator on
    /// top of the stack.
    RangeSum {
        first: u32,
        last: u32,
    },
    RangeMin {
        first: u32,
        last: u32,
    },
    RangeMax {
        first: u32,
        last: u32,
    },
    /// Turns a sum of two or more values into the function's value (an overflow is
    /// `#NUM!`).
    EndSum,
    /// Turns the sum of `count` values into their average.
    EndAverage(u32),
    /// Pops the column, then the row; pushes that value of the matrix with this
    /// ordinal (its position among the model's matrices).
    MatrixRead(u32),
    /// Pops the cell's value into its slot; the stack is empty afterwards.
    Store(u32),
}

/// The first error of two operands (left first), or `otherwise` when neither is one.
#[cold]
#[inline(never)]
fn error_of(a: f64, b: f64, otherwise: f64) -> f64 {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else {
        otherwise
    }
}

macro_rules! arithmetic {
    ($name:ident, $op:tt) => {
        #[inline(always)]
        fn $name(a: f64, b: f64) -> f64 {
            let r = a $op b;
            if r.is_finite() { r } else { error_of(a, b, NUM) }
        }
    };
}

arithmetic!(add, +);
arithmetic!(subtract, -);
arithmetic!(multiply, *);

#[inline(always)]
fn divide(a: f64, b: f64) -> f64 {
    let r = a / b;
    if r.is_finite() {
        r
    } else {
        error_of(a, b, if b == 0.0 { DIV_ZERO } else { NUM })
    }
}

#[inline(always)]
fn power(a: f64, b: f64) -> f64 {
    // powf(NaN, 0) and powf(1, NaN) are 1: check error operands first.
    if a.is_nan() || b.is_nan() {
        return error_of(a, b, NUM);
    }
    let r = a.powf(b);
    if r.is_finite() {
        r
    } else if a == 0.0 && b < 0.0 {
        DIV_ZERO
    } else {
        NUM
    }
}

macro_rules! comparison {
    ($name:ident, $op:tt) => {
        #[inline(always)]
        fn $name(a: f64, b: f64) -> f64 {
            if a.is_nan() || b.is_nan() {
                error_of(a, b, NUM)
            } else if a $op b {
                1.0
            } else {
                0.0
            }
        }
    };
}

comparison!(less, <);
comparison!(less_or_equal, <=);
comparison!(greater, >);
comparison!(greater_or_equal, >=);
comparison!(equal, ==);
comparison!(not_equal, !=);

#[inline(always)]
fn fold_sum(acc: f64, v: f64) -> f64 {
    // The accumulator is finite, ±∞ after an overflow (never NaN from arithmetic,
    // since every operand is finite), or the first error.
    let r = acc + v;
    if r.is_nan() { error_of(acc, v, NUM) } else { r }
}

#[inline(always)]
fn fold_min(acc: f64, v: f64) -> f64 {
    if acc.is_nan() || v.is_nan() {
        error_of(acc, v, NUM)
    } else if v < acc {
        v
    } else {
        acc
    }
}

#[inline(always)]
fn fold_max(acc: f64, v: f64) -> f64 {
    if acc.is_nan() || v.is_nan() {
        error_of(acc, v, NUM)
    } else if v > acc {
        v
    } else {
        acc
    }
}

/// What a `Store` does: write the cell's value, and say where to continue.
pub(crate) trait Store {
    /// Called at the `Store` of cell `item` with its new value; `next` is the
    /// instruction after the `Store`. Returns where to continue, or `None` to stop.
    fn store(&mut self, item: u32, value: f64, values: &mut [f64], next: usize) -> Option<usize>;
}

/// Stores each value and continues with the next cell: a full evaluation.
pub(crate) struct Sequential;

impl Store for Sequential {
    #[inline(always)]
    fn store(&mut self, item: u32, value: f64, values: &mut [f64], next: usize) -> Option<usize> {
        values[item as usize] = value;
        Some(next)
    }
}

/// Runs the program from `pc` until `end` or until `store` says to stop, and gives
/// `store` back. (`store` is taken by value so its state can live in registers.)
/// `stack` must be one longer than the deepest stack the compiler computed.
pub(crate) fn run<S: Store>(
    code: &[Op],
    mut pc: usize,
    end: usize,
    values: &mut [f64],
    tables: &[Table],
    stack: &mut [f64],
    mut store: S,
) -> S {
    // The logical stack is v1..vd with vd in `acc`, v1..v(d-1) in stack[1..d], and
    // `sp` = d; stack[0] takes whatever `acc` held before the first push.
    let mut acc = 0.0f64;
    let mut sp = 0usize;
    macro_rules! push {
        ($v:expr) => {{
            stack[sp] = acc;
            sp += 1;
            acc = $v;
        }};
    }
    macro_rules! pop {
        () => {{
            sp -= 1;
            stack[sp]
        }};
    }
    while pc < end {
        let op = code[pc];
        pc += 1;
        match op {
            Op::Load(i) => push!(values[i as usize]),
            Op::Const(c) => push!(c),
            Op::LoadAddL(x, y) => push!(add(values[x as usize], values[y as usize])),
            Op::LoadSubtractL(x, y) => push!(subtract(values[x as usize], values[y as usize])),
            Op::LoadMultiplyL(x, y) => push!(multiply(values[x as usize], values[y as usize])),
            Op::LoadDivideL(x, y) => push!(divide(values[x as usize], values[y as usize])),
            Op::LoadMultiplyC(x, c) => push!(multiply(values[x as usize], c)),
            Op::LoadDivideC(x, c) => push!(divide(values[x as usize], c)),
            Op::AddScaled(x, c) => acc = add(acc, multiply(values[x as usize], c)),
            Op::SubtractScaled(x, c) => acc = subtract(acc, multiply(values[x as usize], c)),
            Op::Add => acc = add(pop!(), acc),
            Op::AddL(i) => acc = add(acc, values[i as usize]),
            Op::AddC(c) => acc = add(acc, c),
            Op::Subtract => acc = subtract(pop!(), acc),
            Op::SubtractL(i) => acc = subtract(acc, values[i as usize]),
            Op::SubtractC(c) => acc = subtract(acc, c),
            Op::Multiply => acc = multiply(pop!(), acc),
            Op::MultiplyL(i) => acc = multiply(acc, values[i as usize]),
            Op::MultiplyC(c) => acc = multiply(acc, c),
            Op::Divide => acc = divide(pop!(), acc),
            Op::DivideL(i) => acc = divide(acc, values[i as usize]),
            Op::DivideC(c) => acc = divide(acc, c),
            Op::Power => acc = power(pop!(), acc),
            Op::PowerL(i) => acc = power(acc, values[i as usize]),
            Op::PowerC(c) => acc = power(acc, c),
            Op::Less => acc = less(pop!(), acc),
            Op::LessL(i) => acc = less(acc, values[i as usize]),
            Op::LessC(c) => acc = less(acc, c),
            Op::LessOrEqual => acc = less_or_equal(pop!(), acc),
            Op::LessOrEqualL(i) => acc = less_or_equal(acc, values[i as usize]),
            Op::LessOrEqualC(c) => acc = less_or_equal(acc, c),
            Op::Greater => acc = greater(pop!(), acc),
            Op::GreaterL(i) => acc = greater(acc, values[i as usize]),
            Op::GreaterC(c) => acc = greater(acc, c),
            Op::GreaterOrEqual => acc = greater_or_equal(pop!(), acc),
            Op::GreaterOrEqualL(i) => acc = greater_or_equal(acc, values[i as usize]),
            Op::GreaterOrEqualC(c) => acc = greater_or_equal(acc, c),
            Op::Equal => acc = equal(pop!(), acc),
            Op::EqualL(i) => acc = equal(acc, values[i as usize]),
            Op::EqualC(c) => acc = equal(acc, c),
            Op::NotEqual => acc = not_equal(pop!(), acc),
            Op::NotEqualL(i) => acc = not_equal(acc, values[i as usize]),
            Op::NotEqualC(c) => acc = not_equal(acc, c),
            Op::Negate => {
                if !acc.is_nan() {
                    acc = -acc;
                }
            }
            Op::Abs => {
                if !acc.is_nan() {
                    acc = acc.abs();
                }
            }
            Op::Sqrt => {
                if acc < 0.0 {
                    acc = NUM;
                } else if !acc.is_nan() {
                    acc = acc.sqrt();
                }
            }
            Op::Round => acc = round(pop!(), acc),
            Op::Branch { otherwise, end } => {
                if acc.is_nan() {
                    pc = end as usize; // the error stays as the IF's value
                } else {
                    if acc == 0.0 {
                        pc = otherwise as usize;
                    }
                    acc = pop!();
                }
            }
            Op::Jump(target) => pc = target as usize,
            Op::FoldSum => acc = fold_sum(pop!(), acc),
            Op::FoldSumL(i) => acc = fold_sum(acc, values[i as usize]),
            Op::FoldMin => acc = fold_min(pop!(), acc),
            Op::FoldMinL(i) => acc = fold_min(acc, values[i as usize]),
            Op::FoldMax => acc = fold_max(pop!(), acc),
            Op::FoldMaxL(i) => acc = fold_max(acc, values[i as usize]),
            Op::RangeSum { first, last } => {
                let slice = &values[first as usize..=last as usize];
                let mut sum = acc;
                for &v in slice {
                    sum += v;
                }
                acc = if sum.is_nan() {
                    first_error(acc, slice)
                } else {
                    sum
                };
            }
            Op::RangeMin { first, last } => {
                for &v in &values[first as usize..=last as usize] {
                    acc = fold_min(acc, v);
                }
            }
            Op::RangeMax { first, last } => {
                for &v in &values[first as usize..=last as usize] {
                    acc = fold_max(acc, v);
                }
            }
            Op::EndSum => {
                if acc.is_infinite() {
                    acc = NUM;
                }
            }
            Op::EndAverage(count) => {
                if !acc.is_nan() {
                    acc = if count == 0 {
                        DIV_ZERO
                    } else {
                        let r = acc / f64::from(count);
                        if r.is_finite() { r } else { NUM }
                    };
                }
            }
            Op::MatrixRead(m) => acc = matrix_read(&tables[m as usize], pop!(), acc),
            Op::Store(item) => {
                debug_assert_eq!(sp, 1, "a cell's code leaves exactly one value");
                sp = 0;
                match store.store(item, acc, values, pc) {
                    Some(next) => pc = next,
                    None => return store,
                }
            }
        }
    }
    store
}

#[cold]
#[inline(never)]
fn first_error(acc: f64, slice: &[f64]) -> f64 {
    if acc.is_nan() {
        return acc;
    }
    slice.iter().copied().find(|v| v.is_nan()).unwrap_or(NUM)
}
