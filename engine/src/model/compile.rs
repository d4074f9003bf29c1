//! Admission and compilation: parse tree → dependency graph → cycle check → admission
//! → a topologically ordered plan of flat bytecode per cell.

use std::collections::HashMap;

use grid_spec::formula::{BinaryOp, Expr, ExprKind, Function};
use grid_spec::limits::MODEL_OPERATIONS_CEILING_MAX;
use grid_spec::{Item, Model};

use super::error::AdmissionError;
use super::eval::{Op, Table};
use super::value::NOT_AVAILABLE;

/// Names to declaration indices.
pub(crate) type NameIndex = HashMap<String, u32>;

/// A compiled, admitted model.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub model: String,
    /// Names of inputs and cells in declaration order; a value's index is its
    /// declaration index.
    pub names: Vec<String>,
    pub index: NameIndex,
    pub is_input: Vec<bool>,
    /// The encoded starting value of each input (`#N/A` without default); cells hold
    /// `#N/A` until evaluated.
    pub initial: Vec<f64>,
    /// Where each cell's code starts, in evaluation order (every cell after the items
    /// it reads); a cell's position here is its rank. Its code ends with a `Store`.
    pub cell_starts: Vec<u32>,
    /// The program: every cell's code and `Store`, in topological order, so running
    /// all of it is a full evaluation.
    pub code: Vec<Op>,
    /// For each declaration index `i`, the ranks of the cells that read it:
    /// `dependents[dependents_start[i]..dependents_start[i + 1]]`, each rank once,
    /// ascending.
    pub dependents_start: Vec<u32>,
    pub dependents: Vec<u32>,
    /// The evaluator's stack size: one more than the deepest stack any cell needs.
    pub stack_size: usize,
    /// Counted operations of all formulas.
    pub operations: u64,
    /// The declaration index of each matrix item, by ordinal (its position among the
    /// model's matrices), and its table without values.
    pub matrix_items: Vec<u32>,
    pub tables: Vec<Table>,
}

fn malformed(model: &Model, cell: &str, reason: impl Into<String>) -> AdmissionError {
    AdmissionError::Malformed {
        model: model.name.clone(),
        cell: cell.to_owned(),
        reason: reason.into(),
    }
}

/// Admits `model` — re-checking at the owner what validation checked — and compiles
/// it. The checks run in this order: the declared ceiling, the counted operations
/// against the ceiling, unique names and finite defaults, the scalar rules, name and
/// range resolution, and cycles.
///
/// Cycles are found on the *static* dependency graph: every name and range a formula
/// mentions is a dependency, including those in an `IF` branch that is never taken at
/// run time. `IF(1, a, b)` depends on `b` too, so `b` may not refer back to its
/// reader.
pub(crate) fn compile(model: &Model) -> Result<Plan, AdmissionError> {
    let model_name = || model.name.clone();
    if let Some(ceiling) = model.declared_ceiling
        && ceiling > MODEL_OPERATIONS_CEILING_MAX
    {
        return Err(AdmissionError::CeilingAboveMax {
            model: model_name(),
            ceiling,
        });
    }
    // Recount rather than trust `model.operations`.
    let operations: u64 = model.cells().map(|c| c.expr.operations()).sum();
    let ceiling = model.ceiling();
    if operations > u64::from(ceiling) {
        return Err(AdmissionError::OperationsAboveCeiling {
            model: model_name(),
            operations,
            ceiling,
            declared: model.declared_ceiling.is_some(),
        });
    }

    let count = model.items.len();
    if u32::try_from(count).is_err() {
        return Err(malformed(model, "", "too many inputs and cells"));
    }
    let mut index = NameIndex::with_capacity(count);
    let mut names = Vec::with_capacity(count);
    let mut is_input = Vec::with_capacity(count);
    let mut initial = Vec::with_capacity(count);
    // Matrix ordinals by declaration index.
    let mut ordinal: HashMap<u32, u32> = HashMap::new();
    let mut matrix_items = Vec::new();
    let mut tables = Vec::new();
    for (i, item) in model.items.iter().enumerate() {
        let name = item.name();
        if index.insert(name.to_owned(), i as u32).is_some() {
            return Err(AdmissionError::DuplicateName {
                model: model_name(),
                name: name.to_owned(),
            });
        }
        names.push(name.to_owned());
        match item {
            Item::Input(input) => {
                is_input.push(true);
                initial.push(match input.default {
                    Some(value) if value.is_finite() => value,
                    Some(value) => {
                        return Err(AdmissionError::NonFiniteDefault {
                            model: model_name(),
                            input: name.to_owned(),
                            value,
                        });
                    }
                    None => NOT_AVAILABLE,
                });
            }
            Item::Cell(_) => {
                is_input.push(false);
                initial.push(NOT_AVAILABLE);
            }
            Item::Matrix(matrix) => {
                let cells = u64::from(matrix.rows) * u64::from(matrix.cols);
                if matrix.rows == 0
                    || matrix.cols == 0
                    || cells > grid_spec::limits::GRDX_CELLS_MAX as u64
                {
                    return Err(malformed(
                        model,
                        name,
                        format!(
                            "matrix of {} × {} is outside 1 ≤ rows, cols and rows × cols ≤ GRDX_CELLS_MAX",
                            matrix.rows, matrix.cols
                        ),
                    ));
                }
                is_input.push(false);
                initial.push(NOT_AVAILABLE);
                ordinal.insert(i as u32, matrix_items.len() as u32);
                matrix_items.push(i as u32);
                tables.push(Table {
                    rows: matrix.rows,
                    cols: matrix.cols,
                    cells: Vec::new(),
                });
            }
        }
    }

    if model.scalar {
        for cell in model.cells() {
            let mut problem = None;
            cell.expr.walk(&mut |e| {
                if problem.is_some() {
                    return;
                }
                match &e.kind {
                    ExprKind::Call(function, _) => {
                        problem = Some(AdmissionError::ScalarFunction {
                            model: model_name(),
                            cell: cell.name.clone(),
                            function: *function,
                        });
                    }
                    ExprKind::Range { first, last } => {
                        problem = Some(AdmissionError::ScalarRange {
                            model: model_name(),
                            cell: cell.name.clone(),
                            first: first.name.clone(),
                            last: last.name.clone(),
                        });
                    }
                    ExprKind::Index { matrix, .. } => {
                        problem = Some(malformed(
                            model,
                            &cell.name,
                            format!("a scalar model reads no matrix (`{}[…]`)", matrix.name),
                        ));
                    }
                    _ => {}
                }
            });
            if let Some(problem) = problem {
                return Err(problem);
            }
        }
    }

    // The static dependency graph: for each item, what it reads, in order of first
    // mention, each once (CSR layout).
    let mut reads_start = vec![0u32; count + 1];
    let mut reads: Vec<u32> = Vec::new();
    let mut mark = vec![u32::MAX; count];
    for (i, item) in model.items.iter().enumerate() {
        if let Item::Cell(cell) = item {
            let mut problem = None;
            let mut add = |d: u32, reads: &mut Vec<u32>| {
                if mark[d as usize] != i as u32 {
                    mark[d as usize] = i as u32;
                    reads.push(d);
                }
            };
            cell.expr.walk(&mut |e| {
                if problem.is_some() {
                    return;
                }
                let resolve = |name: &str| {
                    index
                        .get(name)
                        .copied()
                        .ok_or_else(|| AdmissionError::UnknownName {
                            model: model.name.clone(),
                            cell: cell.name.clone(),
                            name: name.to_owned(),
                        })
                };
                let is_matrix = |d: u32| ordinal.contains_key(&d);
                match &e.kind {
                    ExprKind::Name(name) => match resolve(name) {
                        Ok(d) if is_matrix(d) => {
                            problem = Some(malformed(
                                model,
                                &cell.name,
                                format!("`{name}` is a matrix: read one value as {name}[row, col]"),
                            ));
                        }
                        Ok(d) => add(d, &mut reads),
                        Err(err) => problem = Some(err),
                    },
                    ExprKind::Index { matrix, .. } => match resolve(&matrix.name) {
                        Ok(d) if is_matrix(d) => add(d, &mut reads),
                        Ok(_) => {
                            problem = Some(malformed(
                                model,
                                &cell.name,
                                format!("`{}` is not a matrix", matrix.name),
                            ));
                        }
                        Err(err) => problem = Some(err),
                    },
                    ExprKind::Range { first, last } => {
                        match (resolve(&first.name), resolve(&last.name)) {
                            (Ok(a), Ok(b)) if a <= b && (a..=b).any(is_matrix) => {
                                problem = Some(malformed(
                                    model,
                                    &cell.name,
                                    format!(
                                        "the range `{}:{}` covers a matrix",
                                        first.name, last.name
                                    ),
                                ));
                            }
                            (Ok(a), Ok(b)) if a <= b => (a..=b).for_each(|d| add(d, &mut reads)),
                            (Ok(_), Ok(_)) => {
                                problem = Some(AdmissionError::BadRange {
                                    model: model.name.clone(),
                                    cell: cell.name.clone(),
                                    first: first.name.clone(),
                                    last: last.name.clone(),
                                });
                            }
                            (Err(err), _) | (_, Err(err)) => problem = Some(err),
                        }
                    }
                    _ => {}
                }
            });
            if let Some(problem) = problem {
                return Err(problem);
            }
        }
        reads_start[i + 1] = reads.len() as u32;
    }
    let reads_of = |i: usize| &reads[reads_start[i] as usize..reads_start[i + 1] as usize];

    // Inputs and matrices read nothing: the sources of the graph.
    let is_source: Vec<bool> = (0..count)
        .map(|i| is_input[i] || ordinal.contains_key(&(i as u32)))
        .collect();
    let order = topological_order(model, &is_source, &reads_of)?;

    // Compile every cell on its own (jump targets relative to its start).
    let mut compiled: Vec<Vec<Op>> = vec![Vec::new(); count];
    let mut max_depth = 1;
    for &item in &order {
        let Item::Cell(cell) = &model.items[item as usize] else {
            unreachable!("the order holds cells only")
        };
        let mut emitter = Emitter {
            model,
            cell: &cell.name,
            index: &index,
            ordinal: &ordinal,
            code: &mut compiled[item as usize],
            depth: 0,
            max_depth: 0,
        };
        emitter.expr(&cell.expr)?;
        debug_assert_eq!(emitter.depth, 1);
        max_depth = max_depth.max(emitter.max_depth);
    }

    // The evaluation order: by level (1 + the highest level a cell reads; inputs are
    // level 0), so every cell follows what it reads; within a level, cells of the same
    // shape (the same instructions but for their operands) run one after another,
    // which keeps the interpreter's dispatch predictable on models whose formulas
    // repeat a pattern; then declaration order.
    let mut level = vec![0u32; count];
    for &item in &order {
        let i = item as usize;
        level[i] = 1 + reads_of(i)
            .iter()
            .map(|&d| level[d as usize])
            .max()
            .unwrap_or(0);
    }
    let mut shapes: HashMap<Vec<std::mem::Discriminant<Op>>, u32> = HashMap::new();
    let mut shape = vec![0u32; count];
    for &item in &order {
        let key: Vec<_> = compiled[item as usize]
            .iter()
            .map(std::mem::discriminant)
            .collect();
        let next = shapes.len() as u32;
        shape[item as usize] = *shapes.entry(key).or_insert(next);
    }
    let mut order = order;
    order.sort_by_key(|&item| (level[item as usize], shape[item as usize], item));

    let mut code = Vec::new();
    let mut cell_starts = Vec::with_capacity(order.len());
    for &item in &order {
        let start = code.len();
        let base = start as u32;
        code.extend(compiled[item as usize].iter().map(|&op| match op {
            Op::Branch { otherwise, end } => Op::Branch {
                otherwise: otherwise + base,
                end: end + base,
            },
            Op::Jump(target) => Op::Jump(target + base),
            op => op,
        }));
        code.push(Op::Store(item));
        if u32::try_from(code.len()).is_err() {
            return Err(malformed(
                model,
                model.items[item as usize].name(),
                "too much code",
            ));
        }
        cell_starts.push(start as u32);
    }

    let mut rank_of = vec![u32::MAX; count];
    for (rank, &item) in order.iter().enumerate() {
        rank_of[item as usize] = rank as u32;
    }
    // Dependents (CSR): for each item, the ranks of the cells reading it.
    let mut dependents_start = vec![0u32; count + 1];
    for &d in &reads {
        dependents_start[d as usize + 1] += 1;
    }
    for i in 0..count {
        dependents_start[i + 1] += dependents_start[i];
    }
    let mut fill = dependents_start.clone();
    let mut dependents = vec![0u32; reads.len()];
    for (i, &is_source) in is_source.iter().enumerate() {
        if is_source {
            continue;
        }
        for &d in reads_of(i) {
            dependents[fill[d as usize] as usize] = rank_of[i];
            fill[d as usize] += 1;
        }
    }
    for i in 0..count {
        dependents[dependents_start[i] as usize..dependents_start[i + 1] as usize].sort_unstable();
    }

    Ok(Plan {
        model: model.name.clone(),
        names,
        index,
        is_input,
        initial,
        cell_starts,
        code,
        dependents_start,
        dependents,
        stack_size: max_depth + 1,
        operations,
        matrix_items,
        tables,
    })
}

/// Cells in an order where each follows everything it reads; or the first cycle
/// found, searching from cells in declaration order and following references in the
/// order they are written.
fn topological_order<'a>(
    model: &Model,
    is_source: &[bool],
    reads_of: &dyn Fn(usize) -> &'a [u32],
) -> Result<Vec<u32>, AdmissionError> {
    const WHITE: u8 = 0;
    const GRAY: u8 = 1;
    const BLACK: u8 = 2;
    let mut color: Vec<u8> = is_source
        .iter()
        .map(|&source| if source { BLACK } else { WHITE })
        .collect();
    let mut order = Vec::with_capacity(is_source.len());
    // An explicit stack of (item, next read to visit): chains of thousands of cells
    // must not exhaust the thread's stack.
    let mut stack: Vec<(u32, usize)> = Vec::new();
    for root in 0..is_source.len() {
        if color[root] != WHITE {
            continue;
        }
        color[root] = GRAY;
        stack.push((root as u32, 0));
        while let Some(top) = stack.last_mut() {
            let (item, next) = *top;
            let item_reads = reads_of(item as usize);
            if next < item_reads.len() {
                top.1 += 1;
                let d = item_reads[next];
                match color[d as usize] {
                    WHITE => {
                        color[d as usize] = GRAY;
                        stack.push((d, 0));
                    }
                    GRAY => {
                        let from = stack
                            .iter()
                            .position(|&(i, _)| i == d)
                            .expect("a gray item is on the stack");
                        let mut path: Vec<String> = stack[from..]
                            .iter()
                            .map(|&(i, _)| model.items[i as usize].name().to_owned())
                            .collect();
                        path.push(model.items[d as usize].name().to_owned());
                        return Err(AdmissionError::Cycle {
                            model: model.name.clone(),
                            path,
                        });
                    }
                    _ => {}
                }
            } else {
                color[item as usize] = BLACK;
                order.push(item);
                stack.pop();
            }
        }
    }
    Ok(order)
}

struct Emitter<'a> {
    model: &'a Model,
    cell: &'a str,
    index: &'a NameIndex,
    /// Matrix ordinals by declaration index.
    ordinal: &'a HashMap<u32, u32>,
    code: &'a mut Vec<Op>,
    depth: usize,
    max_depth: usize,
}

/// The stack, slot (`…L`) and literal (`…C`) forms of a binary operation.
struct Forms {
    stack: Op,
    slot: fn(u32) -> Op,
    literal: fn(f64) -> Op,
}

fn binary_forms(op: BinaryOp) -> Forms {
    let forms = |stack, slot, literal| Forms {
        stack,
        slot,
        literal,
    };
    match op {
        BinaryOp::Add => forms(Op::Add, Op::AddL, Op::AddC),
        BinaryOp::Subtract => forms(Op::Subtract, Op::SubtractL, Op::SubtractC),
        BinaryOp::Multiply => forms(Op::Multiply, Op::MultiplyL, Op::MultiplyC),
        BinaryOp::Divide => forms(Op::Divide, Op::DivideL, Op::DivideC),
        BinaryOp::Power => forms(Op::Power, Op::PowerL, Op::PowerC),
        BinaryOp::Less => forms(Op::Less, Op::LessL, Op::LessC),
        BinaryOp::LessOrEqual => forms(Op::LessOrEqual, Op::LessOrEqualL, Op::LessOrEqualC),
        BinaryOp::Greater => forms(Op::Greater, Op::GreaterL, Op::GreaterC),
        BinaryOp::GreaterOrEqual => {
            forms(Op::GreaterOrEqual, Op::GreaterOrEqualL, Op::GreaterOrEqualC)
        }
        BinaryOp::Equal => forms(Op::Equal, Op::EqualL, Op::EqualC),
        BinaryOp::NotEqual => forms(Op::NotEqual, Op::NotEqualL, Op::NotEqualC),
    }
}

/// A value the right operand of a fused operation can take without code of its own.
enum Operand {
    Slot(u32),
    Literal(f64),
}

impl Emitter<'_> {
    fn emit(&mut self, op: Op, depth_change: isize) {
        self.code.push(op);
        self.depth = self.depth.wrapping_add_signed(depth_change);
        self.max_depth = self.max_depth.max(self.depth);
    }

    fn here(&self) -> u32 {
        self.code.len() as u32
    }

    fn resolve(&self, name: &str) -> Result<u32, AdmissionError> {
        self.index
            .get(name)
            .copied()
            .ok_or_else(|| AdmissionError::UnknownName {
                model: self.model.name.clone(),
                cell: self.cell.to_owned(),
                name: name.to_owned(),
            })
    }

    fn malformed(&self, reason: impl Into<String>) -> AdmissionError {
        malformed(self.model, self.cell, reason)
    }

    fn literal(&self, n: f64) -> Result<f64, AdmissionError> {
        if n.is_finite() {
            Ok(n)
        } else {
            Err(self.malformed(format!("the literal {n} is not finite")))
        }
    }

    /// `e` as an operand a fused instruction can read directly, if it is one: a name,
    /// a literal or a negated literal.
    fn operand(&self, e: &Expr) -> Result<Option<Operand>, AdmissionError> {
        Ok(match &e.kind {
            ExprKind::Name(name) => Some(Operand::Slot(self.resolve(name)?)),
            ExprKind::Number(n) => Some(Operand::Literal(self.literal(*n)?)),
            ExprKind::Negate(inner) => match &inner.kind {
                ExprKind::Number(n) => Some(Operand::Literal(-self.literal(*n)?)),
                _ => None,
            },
            _ => None,
        })
    }

    /// `e` as `x * c` of a slot and a literal, if it is one.
    fn scaled(&self, e: &Expr) -> Result<Option<(u32, f64)>, AdmissionError> {
        if let ExprKind::Binary(BinaryOp::Multiply, left, right) = &e.kind
            && let Some(Operand::Slot(x)) = self.operand(left)?
            && let Some(Operand::Literal(c)) = self.operand(right)?
        {
            return Ok(Some((x, c)));
        }
        Ok(None)
    }

    fn expr(&mut self, e: &Expr) -> Result<(), AdmissionError> {
        if let Some(operand) = self.operand(e)? {
            match operand {
                Operand::Slot(index) => self.emit(Op::Load(index), 1),
                Operand::Literal(n) => self.emit(Op::Const(n), 1),
            }
            return Ok(());
        }
        match &e.kind {
            ExprKind::Number(_) | ExprKind::Name(_) => unreachable!("operands are handled above"),
            ExprKind::Range { first, last } => {
                return Err(self.malformed(format!(
                    "the range `{}:{}` is only allowed as an argument of MIN, MAX, SUM or AVERAGE",
                    first.name, last.name
                )));
            }
            ExprKind::Negate(inner) => {
                self.expr(inner)?;
                self.emit(Op::Negate, 0);
            }
            ExprKind::Binary(op, left, right) => {
                let right_operand = self.operand(right)?;
                if let Some(Operand::Slot(x)) = self.operand(left)? {
                    let fused = match (op, &right_operand) {
                        (BinaryOp::Add, Some(Operand::Slot(y))) => Some(Op::LoadAddL(x, *y)),
                        (BinaryOp::Subtract, Some(Operand::Slot(y))) => {
                            Some(Op::LoadSubtractL(x, *y))
                        }
                        (BinaryOp::Multiply, Some(Operand::Slot(y))) => {
                            Some(Op::LoadMultiplyL(x, *y))
                        }
                        (BinaryOp::Divide, Some(Operand::Slot(y))) => Some(Op::LoadDivideL(x, *y)),
                        (BinaryOp::Multiply, Some(Operand::Literal(c))) => {
                            Some(Op::LoadMultiplyC(x, *c))
                        }
                        (BinaryOp::Divide, Some(Operand::Literal(c))) => {
                            Some(Op::LoadDivideC(x, *c))
                        }
                        _ => None,
                    };
                    if let Some(fused) = fused {
                        self.emit(fused, 1);
                        return Ok(());
                    }
                }
                let Forms {
                    stack,
                    slot,
                    literal,
                } = binary_forms(*op);
                self.expr(left)?;
                match right_operand {
                    Some(Operand::Slot(index)) => self.emit(slot(index), 0),
                    Some(Operand::Literal(n)) => self.emit(literal(n), 0),
                    None => {
                        if let Some((x, c)) = self.scaled(right)?
                            && matches!(op, BinaryOp::Add | BinaryOp::Subtract)
                        {
                            self.emit(
                                if *op == BinaryOp::Add {
                                    Op::AddScaled(x, c)
                                } else {
                                    Op::SubtractScaled(x, c)
                                },
                                0,
                            );
                        } else {
                            self.expr(right)?;
                            self.emit(stack, -1);
                        }
                    }
                }
            }
            ExprKind::Call(function, args) => self.call(*function, args)?,
            ExprKind::Index { matrix, row, col } => {
                let item = self.resolve(&matrix.name)?;
                let Some(&m) = self.ordinal.get(&item) else {
                    return Err(self.malformed(format!("`{}` is not a matrix", matrix.name)));
                };
                self.expr(row)?;
                self.expr(col)?;
                self.emit(Op::MatrixRead(m), -1);
            }
        }
        Ok(())
    }

    fn call(&mut self, function: Function, args: &[Expr]) -> Result<(), AdmissionError> {
        if let Some(arity) = function.arity()
            && arity != args.len()
        {
            return Err(self.malformed(format!(
                "{function} takes {arity} argument(s), found {}",
                args.len()
            )));
        }
        match function {
            Function::If => {
                self.expr(&args[0])?;
                let branch = self.code.len();
                self.emit(
                    Op::Branch {
                        otherwise: 0,
                        end: 0,
                    },
                    -1,
                );
                let before = self.depth;
                self.expr(&args[1])?;
                let jump = self.code.len();
                self.emit(Op::Jump(0), 0);
                let otherwise = self.here();
                self.depth = before;
                self.expr(&args[2])?;
                let end = self.here();
                self.code[branch] = Op::Branch { otherwise, end };
                self.code[jump] = Op::Jump(end);
            }
            Function::Abs => {
                self.expr(&args[0])?;
                self.emit(Op::Abs, 0);
            }
            Function::Sqrt => {
                self.expr(&args[0])?;
                self.emit(Op::Sqrt, 0);
            }
            Function::Round => {
                self.expr(&args[0])?;
                self.expr(&args[1])?;
                self.emit(Op::Round, -1);
            }
            Function::Sum | Function::Average | Function::Min | Function::Max => {
                self.variadic(function, args)?;
            }
        }
        Ok(())
    }

    /// A fold over the arguments, left to right. A first argument that is not a range
    /// starts the accumulator itself; otherwise it starts at 0 (SUM, AVERAGE), +∞
    /// (MIN) or −∞ (MAX), which a non-empty range always replaces.
    fn variadic(&mut self, function: Function, args: &[Expr]) -> Result<(), AdmissionError> {
        let (fold, fold_slot): (Op, fn(u32) -> Op) = match function {
            Function::Min => (Op::FoldMin, Op::FoldMinL),
            Function::Max => (Op::FoldMax, Op::FoldMaxL),
            _ => (Op::FoldSum, Op::FoldSumL),
        };
        let mut count: u32 = 0;
        for (position, arg) in args.iter().enumerate() {
            if let ExprKind::Range { first, last } = &arg.kind {
                let (first, last) = (self.resolve(&first.name)?, self.resolve(&last.name)?);
                if first > last {
                    return Err(self.malformed("a range ends before it starts"));
                }
                if position == 0 {
                    let start = match function {
                        Function::Min => f64::INFINITY,
                        Function::Max => f64::NEG_INFINITY,
                        _ => 0.0,
                    };
                    self.emit(Op::Const(start), 1);
                }
                count = count.saturating_add(last - first + 1);
                self.emit(
                    match function {
                        Function::Min => Op::RangeMin { first, last },
                        Function::Max => Op::RangeMax { first, last },
                        _ => Op::RangeSum { first, last },
                    },
                    0,
                );
            } else {
                count = count.saturating_add(1);
                if position == 0 {
                    self.expr(arg)?;
                } else if let Some(Operand::Slot(index)) = self.operand(arg)? {
                    self.emit(fold_slot(index), 0);
                } else {
                    self.expr(arg)?;
                    self.emit(fold, -1);
                }
            }
        }
        match function {
            _ if args.is_empty() => {
                // Never produced by the parser: MIN, MAX and SUM of nothing are 0,
                // AVERAGE of nothing is #DIV/0!.
                self.emit(Op::Const(0.0), 1);
                if function == Function::Average {
                    self.emit(Op::EndAverage(0), 0);
                }
            }
            Function::Sum if count > 1 => self.emit(Op::EndSum, 0),
            Function::Average => self.emit(Op::EndAverage(count), 0),
            _ => {}
        }
        Ok(())
    }
}
