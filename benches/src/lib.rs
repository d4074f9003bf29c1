//! Shared setup of the benchmarks: the reference model (`examples/reference-4096.kdl`)
//! loaded into Grid's runtime and translated into an IronCalc workbook, and a check that
//! both compute the same values — so the comparison measures the same work.
//!
//! The translation: item `k` of the model (inputs and cells in declaration order) sits
//! in sheet 1 at row `k / 64 + 1`, column `k % 64 + 1`. The reference model declares
//! one layer of 64 items after another, so layer `L` is row `L + 1` and item `c_L_I`
//! is column `I + 1`; a range `a:b` (every item declared from `a` to `b`) becomes the
//! A1 range of those consecutive cells of one row. Inputs become numbers, formulas
//! become A1 formulas with every binary operation parenthesised, so IronCalc parses the
//! same tree Grid does and adds and multiplies in the same order.
//!
//! The side-by-side binaries share the modules below: [`cli`] (their common
//! arguments), [`measure`] (windows, records, tallies, CPU time, callers run back to
//! back), [`report`] (percentiles, ratios, markdown tables, failures), [`bringup`]
//! (Grid's hosts from a topology, served control connections, the alternatives'
//! executables), [`pki`] (the alternatives' certificates), [`procs`] (child processes,
//! work directories, ports), [`processes`] (Processes read through a control socket)
//! and [`limits`].

pub mod bringup;
pub mod cli;
pub mod limits;
pub mod measure;
pub mod pki;
pub mod processes;
pub mod procs;
pub mod publisher;
pub mod report;

use std::collections::HashMap;

use grid_engine::model::{InputSlot, Runtime, Value};
use grid_spec::formula::{BinaryOp, Expr, ExprKind};
use grid_spec::{Item, Model};
use ironcalc_base::cell::CellValue;

/// The committed reference model.
pub const REFERENCE_TEXT: &str = include_str!("../../examples/reference-4096.kdl");

/// The input the benchmarks add to the reference model and no cell references: the
/// "edit nothing depends on" scenario sets it.
pub const FREE_INPUT: &str = "in_free";

/// Items per sheet row of the IronCalc translation: one layer of the reference model.
pub const ROW_WIDTH: usize = 64;

/// Largest relative difference tolerated between Grid's and IronCalc's values.
pub const AGREEMENT_TOLERANCE: f64 = 1e-9;

/// The reference text with one more input, `in_free`, declared last in the model.
pub fn reference_text_with_free_input() -> String {
    let end = REFERENCE_TEXT
        .rfind("\n}")
        .expect("the reference model ends with `}`");
    let mut text = String::with_capacity(REFERENCE_TEXT.len() + 64);
    text.push_str(&REFERENCE_TEXT[..end]);
    text.push_str(&format!("\n    input {FREE_INPUT} default=1.0"));
    text.push_str(&REFERENCE_TEXT[end..]);
    text
}

/// The reference model with `in_free`, loaded and validated by `grid_spec`.
pub fn load_reference() -> Model {
    let text = reference_text_with_free_input();
    let mut topology = match grid_spec::load_str("reference-4096.kdl", &text) {
        Ok(topology) => topology,
        Err(diagnostics) => panic!(
            "the reference model does not load: {diagnostics}: {:?}",
            diagnostics
                .iter()
                .map(|d| (&d.message, &d.labels, &d.help))
                .collect::<Vec<_>>()
        ),
    };
    assert_eq!(topology.models.len(), 1, "the reference holds one model");
    topology.models.remove(0)
}

/// Names of every item a formula reads, ranges expanded in declaration order.
fn references(expr: &Expr, index: &HashMap<&str, usize>, model: &Model) -> Vec<usize> {
    let mut found = Vec::new();
    expr.walk(&mut |node| match &node.kind {
        ExprKind::Name(name) => found.push(index[name.as_str()]),
        ExprKind::Range { first, last } => {
            let (first, last) = (index[first.name.as_str()], index[last.name.as_str()]);
            found.extend(first..=last);
        }
        _ => {}
    });
    found.sort_unstable();
    found.dedup();
    debug_assert!(found.iter().all(|&i| i < model.items.len()));
    found
}

/// For every input, how many cells depend on it (directly or through other cells).
pub fn dependents_per_input(model: &Model) -> Vec<(String, usize)> {
    let index: HashMap<&str, usize> = model
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| (item.name(), i))
        .collect();
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); model.items.len()];
    for (i, item) in model.items.iter().enumerate() {
        if let Item::Cell(cell) = item {
            for source in references(&cell.expr, &index, model) {
                readers[source].push(i);
            }
        }
    }
    let mut result = Vec::new();
    for (i, item) in model.items.iter().enumerate() {
        let Item::Input(input) = item else { continue };
        let mut seen = vec![false; model.items.len()];
        let mut stack = vec![i];
        let mut count = 0;
        while let Some(at) = stack.pop() {
            for &reader in &readers[at] {
                if !seen[reader] {
                    seen[reader] = true;
                    count += 1;
                    stack.push(reader);
                }
            }
        }
        result.push((input.name.clone(), count));
    }
    result
}

/// The input most cells depend on (the first of them on a tie), and how many do.
pub fn busiest_input(model: &Model) -> (String, usize) {
    dependents_per_input(model)
        .into_iter()
        .fold(None, |best: Option<(String, usize)>, next| match best {
            Some(best) if best.1 >= next.1 => Some(best),
            _ => Some(next),
        })
        .expect("the model has inputs")
}

/// Grid's runtime for `model`, admitted and fully evaluated.
pub fn grid_runtime(model: &Model) -> Runtime {
    match Runtime::new(model) {
        Ok(runtime) => runtime,
        Err(error) => panic!("Grid refuses the reference model: {error:?}"),
    }
}

/// Grid's slot for an input.
pub fn grid_slot(runtime: &Runtime, name: &str) -> InputSlot {
    runtime
        .input_slot(name)
        .unwrap_or_else(|| panic!("no input {name}"))
}

/// Grid's number in `name`.
pub fn grid_number(runtime: &Runtime, name: &str) -> f64 {
    match runtime.value(name) {
        Some(Value::Number(number)) => number,
        other => panic!("Grid holds {other:?} in {name}"),
    }
}

/// The A1 name of a column, 1-based: 1 is `A`, 27 is `AA`.
pub fn column_letters(column: usize) -> String {
    assert!(column >= 1);
    let mut letters = Vec::new();
    let mut rest = column;
    while rest > 0 {
        let digit = (rest - 1) % 26;
        letters.push(b'A' + digit as u8);
        rest = (rest - 1) / 26;
    }
    letters.reverse();
    String::from_utf8(letters).expect("ASCII")
}

/// Row and column (1-based) of item `k` in the translation.
pub fn position_of_item(k: usize) -> (i32, i32) {
    ((k / ROW_WIDTH + 1) as i32, (k % ROW_WIDTH + 1) as i32)
}

/// Row and column (1-based) of every item of `model` in the translation, by name.
pub fn positions_of(model: &Model) -> HashMap<String, (i32, i32)> {
    model
        .items
        .iter()
        .enumerate()
        .map(|(k, item)| (item.name().to_owned(), position_of_item(k)))
        .collect()
}

/// The A1 reference of a 1-based row and column.
pub fn a1(row: i32, column: i32) -> String {
    format!("{}{row}", column_letters(column as usize))
}

/// The Excel formula (with its leading `=`) of a Grid formula.
pub fn excel_formula(expr: &Expr, positions: &HashMap<String, (i32, i32)>) -> String {
    let mut out = String::from("=");
    write_excel(expr, positions, &mut out);
    out
}

fn write_excel(expr: &Expr, positions: &HashMap<String, (i32, i32)>, out: &mut String) {
    let reference = |name: &str| {
        let (row, column) = positions[name];
        a1(row, column)
    };
    match &expr.kind {
        // Rust's shortest round-trip form, never an exponent: IronCalc reads the same f64.
        ExprKind::Number(value) => out.push_str(&format!("{value}")),
        ExprKind::Name(name) => out.push_str(&reference(name)),
        ExprKind::Range { first, last } => {
            let (first_row, _) = positions[&first.name];
            let (last_row, _) = positions[&last.name];
            assert_eq!(
                first_row, last_row,
                "a range of the translation must stay within one row"
            );
            out.push_str(&reference(&first.name));
            out.push(':');
            out.push_str(&reference(&last.name));
        }
        ExprKind::Negate(inner) => {
            out.push_str("(-");
            write_excel(inner, positions, out);
            out.push(')');
        }
        ExprKind::Binary(op, left, right) => {
            let comparison = matches!(
                op,
                BinaryOp::Less
                    | BinaryOp::LessOrEqual
                    | BinaryOp::Greater
                    | BinaryOp::GreaterOrEqual
                    | BinaryOp::Equal
                    | BinaryOp::NotEqual
            );
            // Grid's comparisons yield 1 or 0, Excel's TRUE or FALSE.
            out.push_str(if comparison { "IF((" } else { "(" });
            write_excel(left, positions, out);
            out.push_str(op.symbol());
            write_excel(right, positions, out);
            out.push_str(if comparison { "),1,0)" } else { ")" });
        }
        ExprKind::Call(function, args) => {
            out.push_str(function.name());
            out.push('(');
            for (i, arg) in args.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_excel(arg, positions, out);
            }
            out.push(')');
        }
        ExprKind::Index { matrix, .. } => {
            panic!(
                "the translation to Excel has no matrices (`{}[…]`)",
                matrix.name
            )
        }
    }
}

/// The model as an IronCalc workbook.
pub struct IronCalcWorkbook {
    pub model: ironcalc_base::Model<'static>,
    positions: HashMap<String, (i32, i32)>,
}

impl IronCalcWorkbook {
    /// Lays `model` out on sheet 1 (see the crate documentation) and evaluates it once.
    pub fn new(model: &Model) -> IronCalcWorkbook {
        let positions = positions_of(model);
        let mut workbook = ironcalc_base::Model::new_empty("reference", "en", "UTC", "en")
            .expect("an empty IronCalc workbook");
        for item in &model.items {
            let (row, column) = positions[item.name()];
            match item {
                Item::Input(input) => {
                    let value = input.default.expect("every reference input has a default");
                    workbook
                        .update_cell_with_number(0, row, column, value)
                        .expect("set an input");
                }
                Item::Cell(cell) => {
                    let formula = excel_formula(&cell.expr, &positions);
                    workbook
                        .set_user_input(0, row, column, formula)
                        .expect("set a formula");
                }
                Item::Matrix(matrix) => {
                    panic!(
                        "the IronCalc comparison has no matrices (`{}`)",
                        matrix.name
                    )
                }
            }
        }
        workbook.evaluate();
        IronCalcWorkbook {
            model: workbook,
            positions,
        }
    }

    /// Row and column (1-based) of an item.
    pub fn position(&self, name: &str) -> (i32, i32) {
        self.positions[name]
    }

    /// Sets a number into an item's cell, without evaluating.
    pub fn set_number(&mut self, (row, column): (i32, i32), value: f64) {
        self.model
            .update_cell_with_number(0, row, column, value)
            .expect("set a number");
    }

    /// Evaluates the whole workbook (IronCalc's only way to recompute).
    pub fn evaluate(&mut self) {
        self.model.evaluate();
    }

    /// The number in an item's cell.
    pub fn number(&self, name: &str) -> f64 {
        let (row, column) = self.position(name);
        match self.model.get_cell_value_by_index(0, row, column) {
            Ok(CellValue::Number(number)) => number,
            other => panic!("IronCalc holds {other:?} in {name} ({})", a1(row, column)),
        }
    }
}

/// Compares every item's value in Grid and IronCalc; returns how many were compared
/// and the largest relative difference, or the first item that disagrees.
pub fn check_agreement(
    model: &Model,
    runtime: &Runtime,
    workbook: &IronCalcWorkbook,
) -> Result<(usize, f64), String> {
    let mut largest: f64 = 0.0;
    for item in &model.items {
        let name = item.name();
        let grid = grid_number(runtime, name);
        let ironcalc = workbook.number(name);
        let scale = grid.abs().max(ironcalc.abs()).max(f64::MIN_POSITIVE);
        let difference = (grid - ironcalc).abs() / scale;
        if difference.is_nan() || difference >= AGREEMENT_TOLERANCE {
            return Err(format!(
                "{name}: Grid {grid}, IronCalc {ironcalc} (relative difference {difference:e})"
            ));
        }
        largest = largest.max(difference);
    }
    Ok((model.items.len(), largest))
}

/// Everything a benchmark needs, checked: both engines hold the reference model and
/// agree on every value, before and after the busiest input changes.
pub struct Setup {
    pub model: Model,
    pub runtime: Runtime,
    pub workbook: IronCalcWorkbook,
    /// The input most cells depend on.
    pub busy_input: String,
    /// How many cells depend on `busy_input`.
    pub busy_dependents: usize,
    pub busy_default: f64,
    pub free_default: f64,
}

impl Setup {
    pub fn new() -> Setup {
        let model = load_reference();
        let (busy_input, busy_dependents) = busiest_input(&model);
        let default_of = |name: &str| match model.item(name) {
            Some(Item::Input(input)) => input.default.expect("a default"),
            _ => panic!("no input {name}"),
        };
        let busy_default = default_of(&busy_input);
        let free_default = default_of(FREE_INPUT);
        let free_dependents = dependents_per_input(&model)
            .into_iter()
            .find(|(name, _)| name == FREE_INPUT)
            .map(|(_, count)| count);
        assert_eq!(
            free_dependents,
            Some(0),
            "nothing may depend on {FREE_INPUT}"
        );

        let mut runtime = grid_runtime(&model);
        let mut workbook = IronCalcWorkbook::new(&model);
        let agree = |runtime: &Runtime, workbook: &IronCalcWorkbook, when: &str| {
            if let Err(problem) = check_agreement(&model, runtime, workbook) {
                panic!("Grid and IronCalc disagree {when}: {problem}");
            }
        };
        agree(&runtime, &workbook, "after loading");

        // Change the busiest input in both and compare again: Grid recomputes only
        // what depends on it, IronCalc everything.
        let slot = grid_slot(&runtime, &busy_input);
        let changed = busy_default + 0.125;
        runtime
            .apply_slots(&[(slot, changed)])
            .expect("Grid applies a batch");
        let position = workbook.position(&busy_input);
        workbook.set_number(position, changed);
        workbook.evaluate();
        agree(&runtime, &workbook, "after changing the busiest input");

        // And back; then a full evaluation of both must still agree.
        runtime
            .apply_slots(&[(slot, busy_default)])
            .expect("Grid applies a batch");
        workbook.set_number(position, busy_default);
        runtime.evaluate_all();
        workbook.evaluate();
        agree(&runtime, &workbook, "after a full evaluation");

        Setup {
            model,
            runtime,
            workbook,
            busy_input,
            busy_dependents,
            busy_default,
            free_default,
        }
    }

    /// Formula cells of the model.
    pub fn cell_count(&self) -> usize {
        self.model.cells().count()
    }
}

impl Default for Setup {
    fn default() -> Self {
        Setup::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_letters_follow_a1() {
        assert_eq!(column_letters(1), "A");
        assert_eq!(column_letters(26), "Z");
        assert_eq!(column_letters(27), "AA");
        assert_eq!(column_letters(64), "BL");
        assert_eq!(position_of_item(0), (1, 1));
        assert_eq!(position_of_item(64 * 32 + 10), (33, 11));
    }

    #[test]
    fn engines_agree_on_the_reference_model() {
        // Setup::new panics when Grid and IronCalc disagree on any cell.
        let setup = Setup::new();
        assert_eq!(setup.model.items.len(), 4_097);
        assert!(setup.busy_dependents > setup.cell_count() / 2);
    }

    #[test]
    fn formulas_translate_to_a1() {
        let model = load_reference();
        let positions = positions_of(&model);
        let formula_of = |name: &str| match model.item(name) {
            Some(Item::Cell(cell)) => excel_formula(&cell.expr, &positions),
            _ => panic!("no cell {name}"),
        };
        // Layer 31 is row 32; cells 20..=23 are columns U..=X.
        assert_eq!(formula_of("c_32_10"), "=(SUM(U32:X32)*0.25)");
        assert_eq!(positions["in_free"], (65, 1));
    }

    #[test]
    fn free_input_is_declared_last_in_the_model() {
        let text = reference_text_with_free_input();
        assert!(text.trim_end().ends_with("input in_free default=1.0\n}"));
    }
}
