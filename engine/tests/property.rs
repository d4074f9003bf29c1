//! Property: after any sequence of batches, the incremental runtime holds exactly the
//! values a fresh runtime computes from the same inputs — errors by kind, numbers bit
//! for bit — and a refused batch changes nothing.

use grid_engine::model::{BatchError, Runtime, Value};
use grid_spec::formula::parse;
use grid_spec::limits::MODEL_OPERATIONS_CEILING_MAX;
use grid_spec::{Cell, Input, Item, Model, Origin};
use proptest::prelude::*;
use proptest::sample::{Index, select};

/// A formula over abstract references, resolved against the items declared before
/// the cell when rendered.
#[derive(Debug, Clone)]
enum Formula {
    Number(f64),
    Ref(Index),
    Negate(Box<Formula>),
    Binary(&'static str, Box<Formula>, Box<Formula>),
    If(Box<Formula>, Box<Formula>, Box<Formula>),
    Variadic(&'static str, Vec<Arg>),
    Abs(Box<Formula>),
    Sqrt(Box<Formula>),
    Round(Box<Formula>, i8),
}

#[derive(Debug, Clone)]
enum Arg {
    Value(Formula),
    Range(Index, Index),
}

const SPECIALS: [f64; 12] = [
    0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 2.675, 0.1, 10.0, 1e300, -1e300, 1e-300,
];

fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        select(&SPECIALS[..]),
        -100.0..100.0f64,
        (-20i32..20).prop_map(f64::from)
    ]
}

fn formula() -> impl Strategy<Value = Formula> {
    let leaf = prop_oneof![
        1 => number().prop_map(Formula::Number),
        3 => any::<Index>().prop_map(Formula::Ref),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        let arg = prop_oneof![
            3 => inner.clone().prop_map(Arg::Value),
            1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Arg::Range(a, b)),
        ];
        prop_oneof![
            1 => inner.clone().prop_map(|f| Formula::Negate(Box::new(f))),
            6 => (
                select(&["+", "-", "*", "/", "^", "<", "<=", ">", ">=", "=", "<>"][..]),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(op, l, r)| Formula::Binary(op, Box::new(l), Box::new(r))),
            2 => (inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, a, b)| Formula::If(Box::new(c), Box::new(a), Box::new(b))),
            2 => (
                select(&["MIN", "MAX", "SUM", "AVERAGE"][..]),
                prop::collection::vec(arg, 1..4)
            )
                .prop_map(|(f, args)| Formula::Variadic(f, args)),
            1 => inner.clone().prop_map(|f| Formula::Abs(Box::new(f))),
            1 => inner.clone().prop_map(|f| Formula::Sqrt(Box::new(f))),
            1 => (inner, -3i8..5).prop_map(|(f, d)| Formula::Round(Box::new(f), d)),
        ]
    })
}

fn render(f: &Formula, names: &[String]) -> String {
    let pick = |i: &Index| names[i.index(names.len())].clone();
    match f {
        Formula::Number(n) if n.is_sign_negative() => format!("(-{})", -n),
        Formula::Number(n) => format!("{n}"),
        Formula::Ref(i) => pick(i),
        Formula::Negate(x) => format!("(-{})", render(x, names)),
        Formula::Binary(op, l, r) => format!("({} {op} {})", render(l, names), render(r, names)),
        Formula::If(c, a, b) => format!(
            "IF({}, {}, {})",
            render(c, names),
            render(a, names),
            render(b, names)
        ),
        Formula::Variadic(function, args) => {
            let args: Vec<String> = args
                .iter()
                .map(|arg| match arg {
                    Arg::Value(f) => render(f, names),
                    Arg::Range(a, b) => {
                        let (a, b) = (a.index(names.len()), b.index(names.len()));
                        format!("{}:{}", names[a.min(b)], names[a.max(b)])
                    }
                })
                .collect();
            format!("{function}({})", args.join(", "))
        }
        Formula::Abs(x) => format!("ABS({})", render(x, names)),
        Formula::Sqrt(x) => format!("SQRT({})", render(x, names)),
        Formula::Round(x, d) => format!("ROUND({}, {d})", render(x, names)),
    }
}

#[derive(Debug, Clone)]
struct Shape {
    defaults: Vec<Option<f64>>,
    layers: Vec<Vec<Formula>>,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop::collection::vec(prop::option::weighted(0.8, number()), 1..8),
        prop::collection::vec(prop::collection::vec(formula(), 1..8), 1..7),
    )
        .prop_map(|(defaults, layers)| Shape { defaults, layers })
}

/// Inputs first, then the layers; each cell reads only items declared before it.
fn build(shape: &Shape) -> Model {
    let mut names: Vec<String> = Vec::new();
    let mut items = Vec::new();
    for (i, default) in shape.defaults.iter().enumerate() {
        let name = format!("in{i}");
        items.push(Item::Input(Input {
            name: name.clone(),
            default: *default,
            from: None,
        }));
        names.push(name);
    }
    for (l, layer) in shape.layers.iter().enumerate() {
        let visible = names.clone();
        for (c, f) in layer.iter().enumerate() {
            let name = format!("c{l}_{c}");
            let formula = render(f, &visible);
            let expr = parse(&formula).unwrap_or_else(|e| panic!("{formula}: {e}"));
            items.push(Item::Cell(Cell {
                name: name.clone(),
                formula,
                expr,
            }));
            names.push(name);
        }
    }
    let operations = items
        .iter()
        .map(|item| match item {
            Item::Cell(cell) => cell.expr.operations(),
            Item::Input(_) | Item::Matrix(_) => 0,
        })
        .sum();
    Model {
        name: "random".to_owned(),
        host: "h".to_owned(),
        declared_ceiling: Some(MODEL_OPERATIONS_CEILING_MAX),
        scalar: false,
        retired: false,
        items,
        outputs: Vec::new(),
        serves: Vec::new(),
        operations,
        origin: Origin {
            source: 0,
            offset: 0,
            length: 0,
        },
    }
}

#[derive(Debug, Clone)]
struct Batch {
    entries: Vec<(Index, f64)>,
    /// 0: add a duplicate entry, 1: add a non-finite value, otherwise valid.
    spoil: u8,
}

fn batch() -> impl Strategy<Value = Batch> {
    (
        prop::collection::vec((any::<Index>(), number()), 0..4),
        0u8..8,
    )
        .prop_map(|(entries, spoil)| Batch { entries, spoil })
}

fn snapshot(runtime: &Runtime) -> Vec<(String, Value)> {
    runtime
        .values()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
}

fn assert_identical(incremental: &Runtime, fresh: &Runtime) -> Result<(), TestCaseError> {
    for ((name, a), (fresh_name, b)) in incremental.values().zip(fresh.values()) {
        prop_assert_eq!(name, fresh_name);
        prop_assert!(
            a.identical(b),
            "`{}`: incremental {:?}, fresh {:?}",
            name,
            a,
            b
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn incremental_equals_fresh(shape in shape(), batches in prop::collection::vec(batch(), 1..16)) {
        let model = build(&shape);
        let mut runtime = Runtime::new(&model).unwrap_or_else(|e| panic!("{e}"));
        let inputs = shape.defaults.len();
        let mut current = shape.defaults.clone();
        for batch in &batches {
            // Resolve entries to distinct inputs; later duplicates are dropped.
            let mut entries: Vec<(usize, f64)> = Vec::new();
            for (index, value) in &batch.entries {
                let input = index.index(inputs);
                if entries.iter().all(|&(i, _)| i != input) {
                    entries.push((input, *value));
                }
            }
            let names: Vec<String> = entries.iter().map(|&(i, _)| format!("in{i}")).collect();
            let mut named: Vec<(&str, f64)> =
                entries.iter().zip(&names).map(|(&(_, v), n)| (n.as_str(), v)).collect();
            let spoiled = match batch.spoil {
                0 if !named.is_empty() => {
                    named.push((named[0].0, 1.0));
                    true
                }
                1 => {
                    named.push(("in0", f64::NAN));
                    true
                }
                _ => false,
            };
            let before = snapshot(&runtime);
            if spoiled {
                let refused = runtime.apply(&named);
                let kind_ok = matches!(
                    refused,
                    Err(BatchError::Duplicate { .. } | BatchError::NonFinite { .. })
                );
                prop_assert!(kind_ok, "{:?}", refused);
                prop_assert_eq!(snapshot(&runtime), before);
                continue;
            }
            if batch.spoil % 2 == 0 {
                runtime.apply(&named).unwrap();
            } else {
                let slots: Vec<_> = named
                    .iter()
                    .map(|&(name, v)| (runtime.input_slot(name).unwrap(), v))
                    .collect();
                runtime.apply_slots(&slots).unwrap();
            }
            for &(i, v) in &entries {
                current[i] = Some(v);
            }
            let mut fresh_model = model.clone();
            for (item, value) in fresh_model.items.iter_mut().zip(&current) {
                if let Item::Input(input) = item {
                    input.default = *value;
                }
            }
            let fresh = Runtime::new(&fresh_model).unwrap();
            assert_identical(&runtime, &fresh)?;
        }
        // A full evaluation of the incremental state changes nothing either.
        let before = snapshot(&runtime);
        runtime.evaluate_all();
        let after = snapshot(&runtime);
        for ((name, a), (_, b)) in before.iter().zip(&after) {
            prop_assert!(a.identical(*b), "`{}`: {:?} then {:?}", name, a, b);
        }
    }
}
