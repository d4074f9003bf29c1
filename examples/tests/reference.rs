//! The committed reference model (`examples/reference-4096.kdl`) is exactly what the
//! generator prints, and it loads as a model of `REFERENCE_MODEL_CELLS` items within
//! the largest operation ceiling.

use std::path::Path;
use std::process::Command;

use grid_spec::formula::{ExprKind, Function};
use grid_spec::limits::{MODEL_OPERATIONS_CEILING_MAX, REFERENCE_MODEL_CELLS};
use grid_spec::{Item, Topology};

const INPUTS: usize = 64;

fn committed_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("reference-4096.kdl");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn load() -> Topology {
    let text = committed_text();
    match grid_spec::load_str("reference-4096.kdl", &text) {
        Ok(topology) => topology,
        Err(diagnostics) => panic!(
            "the reference model does not load: {diagnostics}: {:?}",
            diagnostics
                .iter()
                .map(|d| (&d.message, &d.labels, &d.help))
                .collect::<Vec<_>>()
        ),
    }
}

#[test]
fn committed_file_is_the_generator_output() {
    let output = Command::new(env!("CARGO_BIN_EXE_gen-reference"))
        .output()
        .expect("run gen-reference");
    assert!(output.status.success(), "gen-reference failed: {output:?}");
    let generated = String::from_utf8(output.stdout).expect("gen-reference prints UTF-8");
    assert!(
        generated == committed_text(),
        "examples/reference-4096.kdl is stale; regenerate it with \
         `cargo run -p grid-examples --bin gen-reference > examples/reference-4096.kdl`"
    );
}

/// The journey `shared-reference` runs the same model, served to two memberships: its
/// committed file is what `gen-reference --shared` prints.
#[test]
fn the_journey_copy_is_the_generator_output() {
    let output = Command::new(env!("CARGO_BIN_EXE_gen-reference"))
        .arg("--shared")
        .output()
        .expect("run gen-reference --shared");
    assert!(output.status.success(), "gen-reference failed: {output:?}");
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../journeys/topologies/shared-reference/reference.kdl");
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        String::from_utf8(output.stdout).expect("UTF-8") == committed,
        "{} is stale; regenerate it with `cargo run -p grid-examples --bin gen-reference -- --shared > journeys/topologies/shared-reference/reference.kdl`",
        path.display()
    );
}

#[test]
fn reference_model_loads_within_limits() {
    let topology = load();
    assert_eq!(topology.models.len(), 1);
    let model = &topology.models[0];
    assert_eq!(model.name, "reference");
    assert_eq!(model.items.len(), REFERENCE_MODEL_CELLS);
    assert_eq!(model.inputs().count(), INPUTS);
    assert_eq!(model.cells().count(), REFERENCE_MODEL_CELLS - INPUTS);
    assert!(
        !model.scalar,
        "the reference model uses SUM, so it is not scalar"
    );
    assert_eq!(model.ceiling(), MODEL_OPERATIONS_CEILING_MAX);
    assert!(model.operations <= u64::from(model.ceiling()));

    // The header states the counted operations the loader computes.
    let header = format!("// counted operations: {} ", model.operations);
    assert!(
        committed_text().contains(&header),
        "the header does not state {} operations",
        model.operations
    );

    // Inputs first, every one with a finite default.
    for (index, item) in model.items.iter().enumerate() {
        match item {
            Item::Input(input) => {
                assert!(index < INPUTS, "input {} after the first layer", input.name);
                assert!(input.default.is_some_and(f64::is_finite));
            }
            Item::Cell(cell) => assert!(index >= INPUTS, "cell {} among inputs", cell.name),
            Item::Matrix(matrix) => panic!("the reference model holds no matrix: {}", matrix.name),
        }
    }
}

#[test]
fn exactly_one_cell_sums_a_range() {
    let topology = load();
    let model = &topology.models[0];
    let mut sums = Vec::new();
    for cell in model.cells() {
        cell.expr.walk(&mut |node| {
            if let ExprKind::Call(Function::Sum, args) = &node.kind {
                sums.push((cell.name.clone(), args.clone()));
            }
        });
    }
    assert_eq!(sums.len(), 1, "expected exactly one SUM: {sums:?}");
    let (_, args) = &sums[0];
    let [arg] = args.as_slice() else {
        panic!("SUM takes one range: {args:?}")
    };
    let ExprKind::Range { first, last } = &arg.kind else {
        panic!("SUM takes one range: {arg:?}")
    };
    let position = |name: &str| model.items.iter().position(|i| i.name() == name).unwrap();
    assert_eq!(position(&last.name) - position(&first.name), 3, "4 cells");
}
