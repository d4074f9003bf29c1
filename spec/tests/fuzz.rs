//! A stable-toolchain fuzzer for the topology and formula parsers (cargo-fuzz needs a
//! nightly toolchain, which this project does not assume).
//!
//! It mutates the seed corpus (every `.kdl` under `tests/data/` and `examples/`) with
//! byte flips, deletions, duplications, splices and KDL/formula tokens, then checks for
//! every mutant: loading never panics; every diagnostic's spans lie inside its file and
//! on character boundaries, and render; a topology that loads keeps its invariants
//! (admitted operation counts within ceilings, formulas that re-parse).
//!
//! The default run is short (it is part of the test suite). A long run by hand:
//! `GRID_FUZZ_ITERATIONS=1000000 GRID_FUZZ_SEED=7 cargo test --release -p grid-spec --test fuzz`.

use std::path::{Path, PathBuf};

use miette::{GraphicalReportHandler, GraphicalTheme};

const DEFAULT_ITERATIONS: u64 = 3_000;

const TOKENS: &[&str] = &[
    "\"",
    "{",
    "}",
    "(",
    ")",
    "=",
    ";",
    ":",
    "^",
    "-",
    "+",
    "*",
    "/",
    "<>",
    "<=",
    ",",
    "\n",
    "#nan",
    "#inf",
    "#-inf",
    "#true",
    "#null",
    "1e400",
    "-0",
    "0x1F",
    "SUM(",
    "IF(",
    "ROUND(",
    "a:b",
    "/*",
    "*/",
    "//",
    "/-",
    "#\"",
    "\"#",
    "\\",
    "\u{301}",
    "é",
    "model m host=a {",
    "cell c \"",
    "input i default=",
    "route r membership=m class=ordered",
    "host h listen=",
    "destination ",
    "publisher ",
    "ceiling=65537",
    "scalar=#true",
    "retired=#true",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn corpus() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = vec![root.join("tests/data"), root.join("../examples")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "kdl")
                && std::fs::metadata(&path)
                    .map(|m| m.len() < 64 * 1024)
                    .unwrap_or(false)
            {
                files.push(std::fs::read(&path).unwrap());
            }
        }
    }
    files.sort();
    assert!(files.len() >= 5, "the seed corpus is missing");
    files
}

fn mutate(rng: &mut Rng, corpus: &[Vec<u8>]) -> String {
    let mut bytes = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(6) {
            0 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
            1 => {
                let end = (at + rng.below(16)).min(bytes.len());
                bytes.drain(at..end);
            }
            2 => {
                let end = (at + rng.below(64)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                let to = rng.below(bytes.len() + 1);
                bytes.splice(to..to, copy);
            }
            3 => {
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len());
                let end = (from + rng.below(128)).min(other.len());
                bytes.splice(at..at, other[from..end].iter().copied());
            }
            _ => {
                let token = TOKENS[rng.below(TOKENS.len())];
                bytes.splice(at..at, token.bytes());
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn check(text: &str) {
    match grid_spec::load_str("fuzz.kdl", text) {
        Ok(topology) => {
            for model in &topology.models {
                assert!(
                    model.operations <= u64::from(model.ceiling()),
                    "admitted above ceiling"
                );
                for cell in model.cells() {
                    let again =
                        grid_spec::formula::parse(&cell.formula).expect("formula re-parses");
                    assert_eq!(again, cell.expr, "parsing is deterministic");
                }
            }
        }
        Err(diagnostics) => {
            assert!(
                !diagnostics.is_empty(),
                "an error names at least one problem"
            );
            let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor());
            for diagnostic in diagnostics.iter() {
                for label in &diagnostic.labels {
                    let end = label.offset() + label.len();
                    assert!(
                        end <= text.len(),
                        "span {}..{end} outside a file of {} bytes: {}",
                        label.offset(),
                        text.len(),
                        diagnostic.message
                    );
                    assert!(
                        text.is_char_boundary(label.offset()) && text.is_char_boundary(end),
                        "span splits a character: {}",
                        diagnostic.message
                    );
                }
                let mut out = String::new();
                handler
                    .render_report(&mut out, diagnostic)
                    .expect("renders");
            }
        }
    }
}

fn main() {
    let iterations = std::env::var("GRID_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ITERATIONS);
    let seed = std::env::var("GRID_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let corpus = corpus();
    let mut rng = Rng(seed);
    for iteration in 0..iterations {
        let text = mutate(&mut rng, &corpus);
        let result = std::panic::catch_unwind(|| check(&text));
        if result.is_err() {
            let path = std::env::temp_dir().join(format!("grid-fuzz-{seed}-{iteration}.kdl"));
            std::fs::write(&path, &text).unwrap();
            panic!(
                "fuzz case {iteration} (seed {seed}) failed; input saved to {}",
                path.display()
            );
        }
        // Formulas alone, too: the string inside the first quotes.
        if let Some(formula) = text.split('"').nth(1) {
            let _ = grid_spec::formula::parse(formula);
        }
    }
    println!("fuzz: {iterations} cases from seed {seed}: 0 failed");
}
