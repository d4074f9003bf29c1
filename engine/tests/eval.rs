//! Evaluation as data: every `tests/eval/*.kdl` is loaded and each of its models
//! evaluated; comment lines `// batch: NAME=VALUE …` apply batches in order (to every
//! model that has those inputs). The values — or the refusal of a batch — must equal
//! `*.kdl.expected`. A new case is a new file; `GRID_BLESS=1` writes expected files.

use std::fmt::Write;
use std::path::Path;

use grid_engine::model::Runtime;

fn evaluate(path: &Path, text: &str) -> String {
    let topology = match grid_spec::load_str(&path.display().to_string(), text) {
        Ok(t) => t,
        Err(d) => {
            let messages: Vec<String> = d.iter().map(|d| d.message.clone()).collect();
            return format!("invalid: {}\n", messages.join("; "));
        }
    };
    let batches: Vec<Vec<(String, f64)>> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("// batch:"))
        .map(|l| {
            l.split_whitespace()
                .map(|set| {
                    let (n, v) = set.split_once('=').expect("NAME=VALUE");
                    (n.to_owned(), v.parse().expect("a number"))
                })
                .collect()
        })
        .collect();
    let mut out = String::new();
    for model in &topology.models {
        writeln!(out, "model {}", model.name).unwrap();
        let mut runtime = match Runtime::new(model) {
            Ok(r) => r,
            Err(e) => {
                writeln!(out, "  not admitted: {e}").unwrap();
                continue;
            }
        };
        for (i, batch) in batches.iter().enumerate() {
            let named: Vec<(&str, f64)> = batch.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            if let Err(e) = runtime.apply(&named) {
                writeln!(out, "  batch {} refused: {e}", i + 1).unwrap();
            }
        }
        for (name, value) in runtime.values() {
            writeln!(out, "  {name} = {value}").unwrap();
        }
    }
    out
}

fn check(path: &Path, text: String) -> datatest_stable::Result<()> {
    let relative = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path);
    let actual = evaluate(relative, &text);
    let expected_path = path.with_extension("kdl.expected");
    if std::env::var_os("GRID_BLESS").is_some() {
        std::fs::write(&expected_path, &actual)?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&expected_path)
        .map_err(|e| format!("{}: {e} (GRID_BLESS=1 creates it)", expected_path.display()))?;
    if actual != expected {
        return Err(format!("--- expected\n{expected}\n--- actual\n{actual}").into());
    }
    Ok(())
}

datatest_stable::harness! {
    { test = check, root = "tests/eval", pattern = r".*\.kdl$" },
}
