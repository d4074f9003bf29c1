//! Unit tests of the model runtime: semantics, admission, batches.

use grid_spec::formula::parse;
use grid_spec::limits::{BATCH_INPUTS_MAX, MODEL_OPERATIONS_CEILING_MAX};
use grid_spec::{Cell, Input, Item, MatrixItem, Model, Origin};

use super::*;

/// Builds a model from lines `input NAME`, `input NAME = DEFAULT`,
/// `cell NAME = FORMULA` and `matrix NAME = ROWSxCOLS`.
pub(crate) fn model_with(lines: &[&str], declared_ceiling: Option<u32>, scalar: bool) -> Model {
    let items: Vec<Item> = lines
        .iter()
        .map(|line| {
            let (kind, rest) = line.split_once(' ').expect("`input …` or `cell …`");
            let (name, value) = match rest.split_once('=') {
                Some((name, value)) => (name.trim(), Some(value.trim())),
                None => (rest.trim(), None),
            };
            match kind {
                "input" => Item::Input(Input {
                    name: name.to_owned(),
                    default: value.map(|v| v.parse().expect("a number")),
                    from: None,
                }),
                "cell" => {
                    let formula = value.expect("a formula");
                    Item::Cell(Cell {
                        name: name.to_owned(),
                        formula: formula.to_owned(),
                        expr: parse(formula).unwrap_or_else(|e| panic!("{formula}: {e}")),
                    })
                }
                "matrix" => {
                    let (rows, cols) = value.and_then(|v| v.split_once('x')).expect("RxC");
                    Item::Matrix(MatrixItem {
                        name: name.to_owned(),
                        rows: rows.parse().expect("rows"),
                        cols: cols.parse().expect("cols"),
                        mapping: "tables".to_owned(),
                        apply: Default::default(),
                        version: None,
                    })
                }
                other => panic!("unknown kind {other}"),
            }
        })
        .collect();
    let operations = items
        .iter()
        .map(|item| match item {
            Item::Cell(cell) => cell.expr.operations(),
            Item::Input(_) | Item::Matrix(_) => 0,
        })
        .sum();
    Model {
        name: "m".to_owned(),
        host: "h".to_owned(),
        serves: Vec::new(),
        declared_ceiling,
        scalar,
        retired: false,
        items,
        outputs: Vec::new(),
        operations,
        origin: Origin {
            source: 0,
            offset: 0,
            length: 0,
        },
    }
}

fn model(lines: &[&str]) -> Model {
    model_with(lines, Some(MODEL_OPERATIONS_CEILING_MAX), false)
}

fn runtime(lines: &[&str]) -> Runtime {
    Runtime::new(&model(lines)).unwrap_or_else(|e| panic!("{e}"))
}

/// The value of a one-cell model `x = formula` (inputs `a = 2`, `b = 3`, `z = 0`, `na`
/// without default available).
fn eval(formula: &str) -> Value {
    let cell = format!("cell x = {formula}");
    runtime(&[
        "input a = 2",
        "input b = 3",
        "input z = 0",
        "input na",
        &cell,
    ])
    .value("x")
    .unwrap()
}

fn num(formula: &str) -> f64 {
    match eval(formula) {
        Value::Number(n) => n,
        other => panic!("{formula} = {other}, expected a number"),
    }
}

fn err(formula: &str) -> ErrorValue {
    match eval(formula) {
        Value::Error(e) => e,
        other => panic!("{formula} = {other}, expected an error"),
    }
}

const DIV0: ErrorValue = ErrorValue::DivZero;
const NUM: ErrorValue = ErrorValue::Num;
const NA: ErrorValue = ErrorValue::NotAvailable;

fn admission(lines: &[&str]) -> AdmissionError {
    admission_with(lines, Some(MODEL_OPERATIONS_CEILING_MAX), false)
}

fn admission_with(lines: &[&str], ceiling: Option<u32>, scalar: bool) -> AdmissionError {
    match Runtime::new(&model_with(lines, ceiling, scalar)) {
        Ok(_) => panic!("{lines:?} was admitted"),
        Err(e) => e,
    }
}

fn snapshot(runtime: &Runtime) -> Vec<(String, Value)> {
    runtime
        .values()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
}

#[test]
fn arithmetic_operators() {
    assert_eq!(num("a + b"), 5.0);
    assert_eq!(num("a - b"), -1.0);
    assert_eq!(num("a * b"), 6.0);
    assert_eq!(num("b / a"), 1.5);
    assert_eq!(num("a ^ b"), 8.0);
    assert_eq!(num("-a"), -2.0);
    assert_eq!(num("--a"), 2.0);
    assert_eq!(num("0.1 + 0.2"), 0.1 + 0.2);
    assert_eq!(num("ABS(-a)"), 2.0);
    assert_eq!(num("ABS(a)"), 2.0);
    assert_eq!(num("SQRT(16)"), 4.0);
    assert_eq!(num("SQRT(z)"), 0.0);
    assert_eq!(num("2 ^ 0.5"), 2f64.sqrt());
    assert_eq!(num("2 ^ -1"), 0.5);
    assert_eq!(num("0 ^ 0"), 1.0);
    assert_eq!(num("(-8) ^ 3"), -512.0);
}

#[test]
fn precedence_by_evaluation() {
    assert_eq!(num("-2^2"), -4.0);
    assert_eq!(num("(-2)^2"), 4.0);
    assert_eq!(num("2^3^2"), 512.0);
    assert_eq!(num("(2^3)^2"), 64.0);
    assert_eq!(num("1 + 2 * 3"), 7.0);
    assert_eq!(num("(1 + 2) * 3"), 9.0);
    assert_eq!(num("1 - 2 - 3"), -4.0);
    assert_eq!(num("8 / 2 / 2"), 2.0);
    assert_eq!(num("2 * 3 ^ 2"), 18.0);
    assert_eq!(num("1 + 1 = 2"), 1.0);
    assert_eq!(num("a + 1 > b * 2"), 0.0);
    assert_eq!(num("1 < 2 = 1"), 1.0);
    assert_eq!(num("-a * -b"), 6.0);
}

#[test]
fn comparisons_give_one_or_zero() {
    let cases = [
        ("a < b", 1.0),
        ("b < a", 0.0),
        ("a < a", 0.0),
        ("a <= a", 1.0),
        ("b <= a", 0.0),
        ("b > a", 1.0),
        ("a > b", 0.0),
        ("a >= a", 1.0),
        ("a >= b", 0.0),
        ("a = 2", 1.0),
        ("a = b", 0.0),
        ("a <> b", 1.0),
        ("a <> 2", 0.0),
        ("0 = -0", 1.0),
    ];
    for (formula, expected) in cases {
        assert_eq!(num(formula), expected, "{formula}");
    }
}

#[test]
fn values_stay_finite() {
    assert_eq!(err("a / 0"), DIV0);
    assert_eq!(err("0 / z"), DIV0);
    assert_eq!(err("-a / z"), DIV0);
    assert_eq!(err("SQRT(-1)"), NUM);
    assert_eq!(err("0 ^ -1"), DIV0);
    assert_eq!(err("z ^ -0.5"), DIV0);
    assert_eq!(err("(-8) ^ (1/3)"), NUM);
    assert_eq!(err("10 ^ 400"), NUM);
    assert_eq!(err("1e308 * 10"), NUM);
    assert_eq!(err("1e308 + 1e308"), NUM);
    assert_eq!(err("-1e308 - 1e308"), NUM);
    assert_eq!(err("1e308 / 1e-10"), NUM);
    assert_eq!(err("SUM(1e308, 1e308, -1e308)"), NUM);
    assert_eq!(err("AVERAGE(1e308, 1e308)"), NUM);
    assert_eq!(num("MAX(1e308, 1e308)"), 1e308);
}

#[test]
fn errors_propagate_first_operand_wins() {
    assert_eq!(err("na + 1"), NA);
    assert_eq!(err("1 + na"), NA);
    assert_eq!(err("1/0 + SQRT(-1)"), DIV0);
    assert_eq!(err("SQRT(-1) + 1/0"), NUM);
    assert_eq!(err("SQRT(-1) * na"), NUM);
    assert_eq!(err("na / 0"), NA);
    assert_eq!(err("1 / na"), NA);
    assert_eq!(err("na ^ 0"), NA);
    assert_eq!(err("1 ^ na"), NA);
    assert_eq!(err("-na"), NA);
    assert_eq!(err("ABS(1/0)"), DIV0);
    assert_eq!(err("SQRT(na)"), NA);
    assert_eq!(err("na < 1/0"), NA);
    assert_eq!(err("1/0 = na"), DIV0);
    assert_eq!(err("1 <> na"), NA);
    assert_eq!(err("MIN(1, na, 1/0)"), NA);
    assert_eq!(err("MAX(1/0, na)"), DIV0);
    assert_eq!(err("SUM(1, 1/0, na)"), DIV0);
    assert_eq!(err("AVERAGE(a, SQRT(-1), na)"), NUM);
    assert_eq!(
        err("SUM(1e308, 1e308, na)"),
        NA,
        "an operand error beats an overflow"
    );
    assert_eq!(err("ROUND(na, 1/0)"), NA);
    assert_eq!(err("ROUND(1, 1/0)"), DIV0);
    assert_eq!(err("IF(na, 1, 2)"), NA);
    assert_eq!(err("IF(1/0, na, na)"), DIV0);
    assert_eq!(err("IF(1, 1/0, 2)"), DIV0);
}

#[test]
fn if_is_lazy() {
    assert_eq!(num("IF(1, 5, 1/0)"), 5.0);
    assert_eq!(num("IF(0, 1/0, 6)"), 6.0);
    assert_eq!(num("IF(a > b, na, b - a)"), 1.0);
    assert_eq!(num("IF(a < b, b - a, SQRT(-1))"), 1.0);
    assert_eq!(num("IF(-0.5, 1, 2)"), 1.0, "nonzero is true");
    assert_eq!(num("IF(z, 1, 2)"), 2.0);
    assert_eq!(num("IF(IF(0, na, 1), IF(1, 3, na), na)"), 3.0);
    assert_eq!(num("1 + IF(a, 10, na) * 2"), 21.0);
    assert_eq!(num("SUM(IF(0, na, 1), IF(1, 2, na), 3)"), 6.0);
    // Dynamically lazy, statically strict: the untaken branch may read an error cell.
    let r = runtime(&[
        "input flag = 1",
        "cell bad = 1/0",
        "cell pick = IF(flag, 7, bad)",
    ]);
    assert_eq!(r.value("pick"), Some(Value::Number(7.0)));
}

#[test]
fn variadic_functions_and_ranges() {
    assert_eq!(num("MIN(3, a, b)"), 2.0);
    assert_eq!(num("MAX(3, a, b, -1)"), 3.0);
    assert_eq!(num("SUM(a, b, 10)"), 15.0);
    assert_eq!(num("AVERAGE(a, b)"), 2.5);
    assert_eq!(num("SUM(a:z)"), 5.0);
    assert_eq!(num("AVERAGE(a:z)"), 5.0 / 3.0);
    assert_eq!(num("MIN(a:z)"), 0.0);
    assert_eq!(num("MAX(a:z, 1)"), 3.0);
    assert_eq!(num("SUM(a:a)"), 2.0);
    assert_eq!(num("SUM(a:b, a:b, 1)"), 11.0);
    assert_eq!(num("AVERAGE(a:b, 7)"), 4.0);
    assert_eq!(err("SUM(a:na)"), NA);
    assert_eq!(err("MIN(a:na)"), NA);
    assert_eq!(err("MAX(na:na)"), NA);
    assert_eq!(err("AVERAGE(z:na)"), NA);
}

#[test]
fn ranges_follow_declaration_order_over_inputs_and_cells() {
    let r = runtime(&[
        "cell total = SUM(p:q)",
        "input p = 1",
        "cell m = p + 1",
        "input q = 3",
        "cell avg = AVERAGE(p:q)",
        "cell low = MIN(m:avg)",
        "cell high = MAX(total:q)",
    ]);
    assert_eq!(r.value("total"), Some(Value::Number(6.0)));
    assert_eq!(r.value("avg"), Some(Value::Number(2.0)));
    assert_eq!(r.value("low"), Some(Value::Number(2.0)));
    assert_eq!(r.value("high"), Some(Value::Number(6.0)));
    let names: Vec<&str> = r.values().map(|(name, _)| name).collect();
    assert_eq!(names, ["total", "p", "m", "q", "avg", "low", "high"]);
}

#[test]
fn round_in_decimal_half_away_from_zero() {
    assert_eq!(num("ROUND(2.675, 2)"), 2.68);
    assert_eq!(num("ROUND(-2.5, 0)"), -3.0);
    assert_eq!(num("ROUND(2.5, 0)"), 3.0);
    assert_eq!(num("ROUND(1234.5, -2)"), 1200.0);
    assert_eq!(num("ROUND(0.285, 2)"), 0.29);
    assert_eq!(num("ROUND(1.005, 2)"), 1.01);
    assert_eq!(num("ROUND(0.1 + 0.2, 2)"), 0.3);
    assert_eq!(num("ROUND(123.456, 1.9)"), 123.5);
    assert_eq!(num("ROUND(123.456, -1.9)"), 120.0);
    assert_eq!(num("ROUND(5, 15)"), 5.0);
    assert_eq!(err("ROUND(5, 16)"), NUM);
    assert_eq!(err("ROUND(5, -16)"), NUM);
}

#[test]
fn inputs_without_default_read_not_available() {
    let mut r = runtime(&["input t", "input k = 2", "cell y = t * k"]);
    assert_eq!(r.value("t"), Some(Value::Error(NA)));
    assert_eq!(r.value("y"), Some(Value::Error(NA)));
    assert_eq!(r.value("y").unwrap().to_string(), "#N/A");
    r.apply(&[("t", 21.0)]).unwrap();
    assert_eq!(r.value("y"), Some(Value::Number(42.0)));
    assert_eq!(r.value("y").unwrap().to_string(), "42");
}

#[test]
fn boiler_example() {
    let mut r = runtime(&[
        "input temp_c",
        "input setpoint = 82.5",
        "cell temp_f = temp_c * 9 / 5 + 32",
        "cell over = IF(temp_c > setpoint, temp_c - setpoint, 0)",
    ]);
    r.apply(&[("temp_c", 90.0)]).unwrap();
    assert_eq!(r.value("temp_f"), Some(Value::Number(194.0)));
    assert_eq!(r.value("over"), Some(Value::Number(7.5)));
    let slot = r.input_slot("temp_c").unwrap();
    r.apply_slots(&[(slot, 80.0)]).unwrap();
    assert_eq!(r.value("over"), Some(Value::Number(0.0)));
    assert_eq!(r.slot_value(slot), Some(Value::Number(80.0)));
    assert_eq!(r.input_slot("temp_f"), None);
    assert_eq!(r.input_slot("nope"), None);
    assert_eq!(r.value("nope"), None);
    assert_eq!(r.model_name(), "m");
    assert_eq!(r.operations(), 7 + 8);
}

#[test]
fn ceiling_above_max_names_the_limit() {
    let e = admission_with(
        &["input a", "cell b = a"],
        Some(MODEL_OPERATIONS_CEILING_MAX + 1),
        false,
    );
    assert!(matches!(
        e,
        AdmissionError::CeilingAboveMax {
            ceiling: 65_537,
            ..
        }
    ));
    assert_eq!(
        e.to_string(),
        "model `m` declares ceiling 65537, above MODEL_OPERATIONS_CEILING_MAX (65536)"
    );
}

#[test]
fn operations_above_the_ceiling_name_the_limit() {
    // 65 cells of `a + 1` (3 operations each): 195 > 128.
    let mut lines = vec!["input a".to_owned()];
    lines.extend((0..65).map(|i| format!("cell c{i} = a + 1")));
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let e = admission_with(&lines, None, false);
    assert!(
        matches!(
            e,
            AdmissionError::OperationsAboveCeiling {
                operations: 195,
                ceiling: 128,
                declared: false,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains(
            "195 counted operations exceed the model's ceiling 128 (MODEL_OPERATIONS_CEILING_DEFAULT)"
        ),
        "{text}"
    );
    assert!(text.contains("MODEL_OPERATIONS_CEILING_MAX"), "{text}");

    let e = admission_with(&["input a", "cell b = a + a + a"], Some(4), false);
    let text = e.to_string();
    assert!(
        text.contains("5 counted operations exceed the model's declared ceiling 4"),
        "{text}"
    );
    // Exactly at the ceiling is admitted.
    Runtime::new(&model_with(
        &["input a", "cell b = a + a + a"],
        Some(5),
        false,
    ))
    .unwrap();
    // The owner recounts instead of trusting `Model::operations`.
    let mut m = model_with(&["input a", "cell b = a + a + a"], Some(4), false);
    m.operations = 0;
    assert!(matches!(
        Runtime::new(&m),
        Err(AdmissionError::OperationsAboveCeiling { operations: 5, .. })
    ));
}

#[test]
fn scalar_models_admit_arithmetic_and_comparisons_only() {
    let ok = model_with(&["input a = 1", "cell b = -a^2 * 3 > 1"], None, true);
    Runtime::new(&ok).unwrap();
    let e = admission_with(&["input a", "cell b = a + ABS(a)"], None, true);
    assert!(matches!(
        e,
        AdmissionError::ScalarFunction {
            function: grid_spec::formula::Function::Abs,
            ..
        }
    ));
    assert_eq!(
        e.to_string(),
        "model `m` is scalar: cell `b` calls ABS, but a scalar model admits arithmetic and comparisons only"
    );
    let e = admission_with(&["input a", "input c", "cell b = SUM(a:c)"], None, true);
    // The call is found first (parents before children).
    assert!(matches!(e, AdmissionError::ScalarFunction { .. }), "{e:?}");
    // A hand-built tree with a bare range still names the range.
    let mut m = model_with(&["input a", "input c", "cell b = SUM(a:c)"], None, true);
    if let Item::Cell(cell) = &mut m.items[2]
        && let grid_spec::formula::ExprKind::Call(_, args) = &cell.expr.kind
    {
        cell.expr = args[0].clone();
    }
    let e = Runtime::new(&m).unwrap_err();
    assert!(matches!(e, AdmissionError::ScalarRange { .. }), "{e:?}");
    assert!(e.to_string().contains("range `a:c`"), "{e}");
}

#[test]
fn unknown_names_and_bad_ranges() {
    let e = admission(&["input a", "cell b = a + nope"]);
    assert_eq!(
        e.to_string(),
        "model `m`: cell `b` refers to `nope`, which is not an input or cell of the model"
    );
    let e = admission(&["input a", "cell b = SUM(a:nope)"]);
    assert!(matches!(e, AdmissionError::UnknownName { ref name, .. } if name == "nope"));
    let e = admission(&["input a", "input c", "cell b = SUM(c:a)"]);
    assert_eq!(
        e.to_string(),
        "model `m`: cell `b` uses the range `c:a`, but `a` is declared before `c`"
    );
    let e = admission(&["input a", "input a"]);
    assert!(matches!(e, AdmissionError::DuplicateName { .. }));
    assert_eq!(e.to_string(), "model `m` declares `a` more than once");
    let mut m = model(&["input a", "cell b = a"]);
    if let Item::Input(input) = &mut m.items[0] {
        input.default = Some(f64::NAN);
    }
    assert!(matches!(
        Runtime::new(&m),
        Err(AdmissionError::NonFiniteDefault { .. })
    ));
}

#[test]
fn cycles_print_their_path() {
    let e = admission(&[
        "input x",
        "cell a = b + x",
        "cell b = c * 2",
        "cell c = a - 1",
    ]);
    assert!(matches!(e, AdmissionError::Cycle { ref path, .. } if path == &["a", "b", "c", "a"]));
    assert_eq!(e.to_string(), "model `m`: cycle a -> b -> c -> a");

    let e = admission(&["cell a = a + 1"]);
    assert_eq!(e.to_string(), "model `m`: cycle a -> a");

    // The path starts where the search first closes the loop.
    let e = admission(&["input x", "cell a = x + b", "cell b = c", "cell c = b"]);
    assert_eq!(e.to_string(), "model `m`: cycle b -> c -> b");

    // A range covering the cell itself.
    let e = admission(&["input x", "cell s = SUM(x:s)"]);
    assert_eq!(e.to_string(), "model `m`: cycle s -> s");

    // Static graph: a reference in an IF branch never taken still counts.
    let e = admission(&["input x = 1", "cell a = IF(1, x, b)", "cell b = a"]);
    assert_eq!(e.to_string(), "model `m`: cycle a -> b -> a");
}

#[test]
fn malformed_trees_are_refused() {
    let mut m = model(&["input a", "cell b = ABS(a)"]);
    if let Item::Cell(cell) = &mut m.items[1]
        && let grid_spec::formula::ExprKind::Call(_, args) = &mut cell.expr.kind
    {
        args.push(args[0].clone());
    }
    let e = Runtime::new(&m).unwrap_err();
    assert!(matches!(e, AdmissionError::Malformed { .. }), "{e:?}");
    assert!(e.to_string().contains("ABS takes 1 argument"), "{e}");
}

#[test]
fn batch_refusals_change_nothing() {
    let mut r = runtime(&["input a = 1", "input b = 2", "cell c = a + b"]);
    let before = snapshot(&r);
    let a = r.input_slot("a").unwrap();

    let e = r.apply(&[("a", 5.0), ("b", f64::NAN)]).unwrap_err();
    assert!(matches!(e, BatchError::NonFinite { ref input, .. } if input == "b"));
    assert_eq!(
        e.to_string(),
        "input `b`: NaN is not a finite number; values are finite f64"
    );
    assert_eq!(snapshot(&r), before);

    let e = r.apply_slots(&[(a, f64::INFINITY)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "input `a`: inf is not a finite number; values are finite f64"
    );
    assert_eq!(snapshot(&r), before);

    let e = r.apply(&[("a", 5.0), ("nope", 1.0)]).unwrap_err();
    assert_eq!(
        e,
        BatchError::UnknownName {
            name: "nope".to_owned()
        }
    );
    assert_eq!(snapshot(&r), before);

    let e = r.apply(&[("a", 5.0), ("c", 1.0)]).unwrap_err();
    assert_eq!(
        e,
        BatchError::NotAnInput {
            name: "c".to_owned()
        }
    );
    assert_eq!(
        e.to_string(),
        "`c` is a formula cell; a batch sets inputs only"
    );
    assert_eq!(snapshot(&r), before);

    let e = r.apply(&[("a", 5.0), ("b", 1.0), ("a", 6.0)]).unwrap_err();
    assert_eq!(
        e,
        BatchError::Duplicate {
            input: "a".to_owned()
        }
    );
    assert_eq!(snapshot(&r), before);
    let e = r.apply_slots(&[(a, 5.0), (a, 5.0)]).unwrap_err();
    assert_eq!(
        e,
        BatchError::Duplicate {
            input: "a".to_owned()
        }
    );
    assert_eq!(snapshot(&r), before);

    let e = r.apply_slots(&[(a, 5.0), (InputSlot(2), 1.0)]).unwrap_err();
    assert_eq!(e, BatchError::UnknownSlot { slot: 2 });
    let e = r.apply_slots(&[(InputSlot(99), 1.0)]).unwrap_err();
    assert_eq!(e, BatchError::UnknownSlot { slot: 99 });
    assert_eq!(snapshot(&r), before);

    let big = vec![(a, 1.0); BATCH_INPUTS_MAX + 1];
    let e = r.apply_slots(&big).unwrap_err();
    assert!(e.to_string().contains("BATCH_INPUTS_MAX (4096)"), "{e}");
    let big = vec![("a", 1.0); BATCH_INPUTS_MAX + 1];
    assert!(matches!(
        r.apply(&big),
        Err(BatchError::TooManyEntries { entries: 4097 })
    ));
    assert_eq!(snapshot(&r), before);

    // The same slot in two separate batches is fine.
    r.apply_slots(&[(a, 5.0)]).unwrap();
    r.apply_slots(&[(a, 6.0)]).unwrap();
    assert_eq!(r.value("c"), Some(Value::Number(8.0)));
    r.apply(&[]).unwrap();
    assert_eq!(r.value("c"), Some(Value::Number(8.0)));
}

#[test]
fn batches_recompute_only_downstream_cells_once() {
    let mut r = runtime(&[
        "input a = 1",
        "input b = 1",
        "input lonely = 0",
        "cell x = a + 1",
        "cell y = x * b",
        "cell z = x + y",
        "cell w = b * 10",
        "cell sign = a > 0",
        "cell after_sign = sign + 100",
    ]);
    assert_eq!(r.last_recomputed(), 6);
    r.apply(&[("lonely", 5.0)]).unwrap();
    assert_eq!(r.last_recomputed(), 0);
    r.apply(&[("a", 1.0)]).unwrap(); // unchanged value: nothing to do
    assert_eq!(r.last_recomputed(), 0);
    r.apply(&[("b", 2.0)]).unwrap(); // y, z, w
    assert_eq!(r.last_recomputed(), 3);
    assert_eq!(r.value("z"), Some(Value::Number(6.0)));
    assert_eq!(r.value("w"), Some(Value::Number(20.0)));
    // a: x, y, z and sign; sign stays 1, so after_sign is not recomputed.
    r.apply(&[("a", 2.0)]).unwrap();
    assert_eq!(r.last_recomputed(), 4);
    assert_eq!(r.value("z"), Some(Value::Number(9.0)));
    assert_eq!(r.value("after_sign"), Some(Value::Number(101.0)));
    r.apply(&[("a", -1.0), ("b", 3.0)]).unwrap();
    assert_eq!(r.value("z"), Some(Value::Number(0.0)));
    assert_eq!(r.value("after_sign"), Some(Value::Number(100.0)));
    // evaluate_all agrees with the incremental state.
    let before = snapshot(&r);
    r.evaluate_all();
    assert_eq!(snapshot(&r), before);
}

#[test]
fn long_chains_and_wide_models() {
    // A chain deeper than any recursion would allow, declared in reverse order.
    let n = 3000;
    let mut lines: Vec<String> = (1..n)
        .rev()
        .map(|i| format!("cell c{i} = c{} + 1", i - 1))
        .collect();
    lines.push("cell c0 = seed".to_owned());
    lines.push("input seed = 0".to_owned());
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let mut r = runtime(&lines);
    assert_eq!(
        r.value(&format!("c{}", n - 1)),
        Some(Value::Number((n - 1) as f64))
    );
    r.apply(&[("seed", 10.0)]).unwrap();
    assert_eq!(r.last_recomputed(), n);
    assert_eq!(
        r.value(&format!("c{}", n - 1)),
        Some(Value::Number((n + 9) as f64))
    );
}

/// A model reading a 2 × 3 matrix `t` (values 0..6 once applied) at (`r`, `c`).
fn matrix_model(extra: &[&str]) -> Runtime {
    let mut lines = vec![
        "input r = 1",
        "input c = 2",
        "matrix t = 2x3",
        "cell at = t[r, c]",
        "cell scaled = t[r, c] * 10 + t[0, 0]",
        "cell plain = r + c",
    ];
    lines.extend_from_slice(extra);
    runtime(&lines)
}

fn table(rows: u32, cols: u32) -> crate::grdx::Matrix {
    let cells = (0..rows * cols).map(f64::from).collect();
    crate::grdx::Matrix::new(rows, cols, cells).unwrap()
}

#[test]
fn a_matrix_reads_not_available_until_applied_then_each_value_by_row_and_column() {
    let mut rt = matrix_model(&[]);
    assert_eq!(rt.value("at"), Some(Value::Error(ErrorValue::NotAvailable)));
    assert_eq!(rt.value("t"), None, "a matrix is not a value");
    assert_eq!(
        rt.values().map(|(n, _)| n).collect::<Vec<_>>(),
        ["r", "c", "at", "scaled", "plain"]
    );
    let listed: Vec<_> = rt
        .matrices()
        .map(|(n, r, c, v)| (n, r, c, v.is_some()))
        .collect();
    assert_eq!(listed, [("t", 2, 3, false)]);

    rt.apply_matrix("t", &table(2, 3)).unwrap();
    assert_eq!(
        rt.last_recomputed(),
        2,
        "the two cells reading t, once each"
    );
    assert_eq!(rt.value("at"), Some(Value::Number(5.0)));
    assert_eq!(rt.value("scaled"), Some(Value::Number(50.0)));
    assert_eq!(
        rt.matrices().next().unwrap().3,
        Some(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0][..])
    );

    rt.apply_matrix("t", &table(2, 3)).unwrap();
    assert_eq!(rt.last_recomputed(), 0, "the same value recomputes nothing");

    for (r, c, expected) in [
        (0.0, 0.0, Value::Number(0.0)),
        (-0.0, 1.0, Value::Number(1.0)),
        (1.0, 0.0, Value::Number(3.0)),
        (2.0, 0.0, Value::Error(ErrorValue::Ref)),
        (0.0, 3.0, Value::Error(ErrorValue::Ref)),
        (-1.0, 0.0, Value::Error(ErrorValue::Ref)),
        (0.5, 0.0, Value::Error(ErrorValue::Ref)),
        (0.0, 1e300, Value::Error(ErrorValue::Ref)),
        (f64::MAX, f64::MAX, Value::Error(ErrorValue::Ref)),
    ] {
        rt.apply(&[("r", r), ("c", c)]).unwrap();
        assert_eq!(rt.value("at"), Some(expected), "t[{r}, {c}]");
        // A full evaluation gives the same value as the incremental one.
        let mut again = rt.clone();
        again.evaluate_all();
        assert!(
            again.value("at").unwrap().identical(expected),
            "t[{r}, {c}]"
        );
    }
}

#[test]
fn an_error_index_is_that_error() {
    let mut rt = matrix_model(&[
        "input z = 0",
        "cell bad = t[1 / z, 0]",
        "cell worse = t[na2, 1/z]",
        "input na2",
    ]);
    rt.apply_matrix("t", &table(2, 3)).unwrap();
    assert_eq!(rt.value("bad"), Some(Value::Error(ErrorValue::DivZero)));
    assert_eq!(
        rt.value("worse"),
        Some(Value::Error(ErrorValue::NotAvailable)),
        "left first"
    );
}

#[test]
fn a_matrix_value_of_another_geometry_or_name_is_refused_changing_nothing() {
    let mut rt = matrix_model(&[]);
    rt.apply_matrix("t", &table(2, 3)).unwrap();
    let before: Vec<_> = rt.values().map(|(n, v)| (n.to_owned(), v)).collect();
    assert_eq!(
        rt.apply_matrix("t", &table(3, 2)),
        Err(BatchError::MatrixGeometry {
            name: "t".into(),
            rows: 2,
            cols: 3,
            given_rows: 3,
            given_cols: 2
        })
    );
    assert_eq!(
        rt.apply_matrix("r", &table(2, 3)),
        Err(BatchError::NotAMatrix { name: "r".into() })
    );
    assert_eq!(
        rt.apply_matrix("nope", &table(2, 3)),
        Err(BatchError::NotAMatrix {
            name: "nope".into()
        })
    );
    assert_eq!(
        rt.apply(&[("t", 1.0)]),
        Err(BatchError::MatrixInBatch { name: "t".into() })
    );
    let after: Vec<_> = rt.values().map(|(n, v)| (n.to_owned(), v)).collect();
    assert_eq!(before, after);
}

#[test]
fn admission_refuses_a_matrix_read_as_a_number_ranged_over_or_in_a_scalar_model() {
    for (lines, fragment) in [
        (&["matrix t = 2x2", "cell x = t + 1"][..], "`t` is a matrix"),
        (
            &[
                "input a = 1",
                "matrix t = 2x2",
                "input b = 1",
                "cell x = SUM(a:b)",
            ][..],
            "covers a matrix",
        ),
        (
            &["input a = 1", "cell x = a[0, 0]"][..],
            "`a` is not a matrix",
        ),
        (&["matrix t = 0x2", "cell x = 1"][..], "GRDX_CELLS_MAX"),
        (&["matrix t = 200x200", "cell x = 1"][..], "GRDX_CELLS_MAX"),
    ] {
        let refused = Runtime::new(&model(lines)).unwrap_err().to_string();
        assert!(refused.contains(fragment), "{lines:?}: {refused}");
    }
    let scalar = model_with(&["matrix t = 2x2", "cell x = t[0, 0]"], None, true);
    let refused = Runtime::new(&scalar).unwrap_err().to_string();
    assert!(
        refused.contains("scalar model reads no matrix"),
        "{refused}"
    );
}

#[test]
fn matrix_reads_are_counted_operations() {
    // t[r, c] = 3; t[r, c] * 10 + t[0, 0] = 3 + 1 + 1 + 1 + 3 = 9; r + c = 3.
    assert_eq!(matrix_model(&[]).operations(), 15);
}
