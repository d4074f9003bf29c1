//! Prints the 4,096-cell reference model (SPEC §1.9) as a KDL 2 topology on stdout.
//!
//! ```text
//! cargo run -p grid-examples --bin gen-reference > examples/reference-4096.kdl
//! cargo run -p grid-examples --bin gen-reference -- --shared \
//!     > journeys/topologies/shared-reference/reference.kdl
//! ```
//!
//! With `--shared` it prints the same model for the journey `shared-reference`: on host
//! `edge` (declared in that journey's other file), serving two memberships, `in_0` fed
//! from utility's route `util-in`, `in_1` from plant-ops's `site-in`, and the last
//! layer's first cell published on a route of each.
//!
//! Shape: 64 layers of 64 items. Layer 0 holds the inputs `in_0 .. in_63`; layers
//! `1..=63` hold the formula cells `c_L_I`. Every cell references 2 to 4 items of
//! earlier layers, at least one of them from the layer just before, and combines them
//! with `+` and `*` only. The weights of every formula are non-negative and add up to at
//! most 1 (the one product term is scaled so that it does too, for values in
//! `[0.5, 2]`), so every value stays within the inputs' range `[0.5, 2]`: nothing grows
//! towards infinity over 63 layers. Exactly one cell (`SUM_CELL_LAYER`,
//! `SUM_CELL_INDEX`) sums a range of 4 consecutive cells of the layer before it.
//!
//! The output is a pure function of `SEED`: the committed file
//! `examples/reference-4096.kdl` is checked against it by `tests/reference.rs`.

use std::fmt::Write as _;

/// The seed of the generator; changing it changes the committed reference file.
const SEED: u64 = 0x6772_6964_2d72_6566; // "grid-ref"

/// Items per layer, inputs included.
const LAYER_WIDTH: usize = 64;

/// Layers, counting the layer of inputs.
const LAYERS: usize = 64;

/// The one cell whose formula holds a `SUM` over a range of the layer before it.
const SUM_CELL_LAYER: usize = 32;
const SUM_CELL_INDEX: usize = 10;

/// The first of the 4 consecutive cells of layer `SUM_CELL_LAYER - 1` that it sums.
const SUM_RANGE_FIRST: usize = 20;
const SUM_RANGE_LENGTH: usize = 4;

/// The ceiling the model declares: the largest any model may declare.
const CEILING: u64 = 65_536;

const _: () = assert!(LAYER_WIDTH * LAYERS == 4_096);
const _: () = assert!(SUM_CELL_LAYER >= 2 && SUM_CELL_LAYER < LAYERS);
const _: () = assert!(SUM_CELL_INDEX < LAYER_WIDTH);
const _: () = assert!(SUM_RANGE_FIRST + SUM_RANGE_LENGTH <= LAYER_WIDTH);

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fixed-seed, good enough to scatter
/// references.
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (the slight modulo bias does not matter here).
    fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }
}

/// The name of item `index` of `layer`.
fn item_name(layer: usize, index: usize) -> String {
    if layer == 0 {
        format!("in_{index}")
    } else {
        format!("c_{layer}_{index}")
    }
}

/// A default in `0.5..=2.0` with two decimals, written as a KDL 2 decimal number.
fn default_text(rng: &mut SplitMix64) -> String {
    let hundredths = 50 + rng.below(151);
    let whole = hundredths / 100;
    let fraction = hundredths % 100;
    if fraction == 0 {
        format!("{whole}.0")
    } else if fraction.is_multiple_of(10) {
        format!("{whole}.{}", fraction / 10)
    } else {
        format!("{whole}.{fraction:02}")
    }
}

/// A formula over `refs` (2 to 4 names) and its counted operations (every literal,
/// name reference, range, operator and function call counts 1; parentheses do not).
fn formula(rng: &mut SplitMix64, refs: &[String]) -> (String, u64) {
    let variant = rng.below(refs.len());
    match (refs, variant) {
        ([a, b], 0) => (format!("({a} + {b}) * 0.5"), 5),
        ([a, b], _) => (format!("{a} * 0.75 + {b} * 0.25"), 7),
        ([a, b, c], 0) => (format!("({a} + {b}) * 0.25 + {c} * 0.5"), 9),
        // For a, b, c in [0.5, 2]: a * b * 0.25 <= 1 and c * 0.5 <= 1.
        ([a, b, c], 1) => (format!("{a} * {b} * 0.25 + {c} * 0.5"), 9),
        ([a, b, c], _) => (format!("{a} * 0.5 + {b} * 0.375 + {c} * 0.125"), 11),
        ([a, b, c, d], 0 | 1) => (format!("({a} + {b} + {c} + {d}) * 0.25"), 9),
        ([a, b, c, d], _) => (format!("({a} + {b}) * 0.375 + ({c} + {d}) * 0.125"), 11),
        _ => unreachable!("a cell references 2 to 4 items"),
    }
}

/// The formula of a cell of `layer` (>= 1) and its counted operations.
fn cell_formula(rng: &mut SplitMix64, layer: usize) -> (String, u64) {
    let count = 2 + rng.below(3);
    // The first reference comes from the layer just before; the others from any
    // earlier layer, never the same item twice.
    let mut picked: Vec<(usize, usize)> = vec![(layer - 1, rng.below(LAYER_WIDTH))];
    while picked.len() < count {
        let candidate = (rng.below(layer), rng.below(LAYER_WIDTH));
        if !picked.contains(&candidate) {
            picked.push(candidate);
        }
    }
    // Shuffle so the reference of the layer before is not always first.
    for i in (1..picked.len()).rev() {
        picked.swap(i, rng.below(i + 1));
    }
    let refs: Vec<String> = picked.iter().map(|&(l, i)| item_name(l, i)).collect();
    formula(rng, &refs)
}

/// The whole topology text: the reference file, or (`shared`) the journey's variant.
fn generate(shared: bool) -> String {
    let mut rng = SplitMix64::new(SEED);
    let mut body = String::new();
    let mut operations: u64 = 0;
    for index in 0..LAYER_WIDTH {
        let default = default_text(&mut rng);
        let from = match (shared, index) {
            (true, 0) => " from=\"route:util-in\"",
            (true, 1) => " from=\"route:site-in\"",
            _ => "",
        };
        writeln!(
            body,
            "    input {} default={default}{from}",
            item_name(0, index)
        )
        .unwrap();
    }
    for layer in 1..LAYERS {
        for index in 0..LAYER_WIDTH {
            // Draw for every cell, the SUM cell too, so it does not shift the others.
            let (mut text, mut count) = cell_formula(&mut rng, layer);
            if (layer, index) == (SUM_CELL_LAYER, SUM_CELL_INDEX) {
                let first = item_name(layer - 1, SUM_RANGE_FIRST);
                let last = item_name(layer - 1, SUM_RANGE_FIRST + SUM_RANGE_LENGTH - 1);
                // SUM, the range, `*`, the literal.
                text = format!("SUM({first}:{last}) * 0.25");
                count = 4;
            }
            operations += count;
            writeln!(body, "    cell {} \"{text}\"", item_name(layer, index)).unwrap();
        }
    }
    assert!(
        operations <= CEILING,
        "{operations} operations exceed {CEILING}"
    );

    let mut out = String::new();
    writeln!(
        out,
        "// The reference model: {} items ({LAYER_WIDTH} inputs, {} formula cells in {} layers).",
        LAYER_WIDTH * LAYERS,
        LAYER_WIDTH * (LAYERS - 1),
        LAYERS - 1
    )
    .unwrap();
    writeln!(
        out,
        "// counted operations: {operations} (ceiling {CEILING})"
    )
    .unwrap();
    if shared {
        writeln!(
            out,
            "// generated by: cargo run -p grid-examples --bin gen-reference -- --shared > journeys/topologies/shared-reference/reference.kdl"
        )
        .unwrap();
        writeln!(out, "grid version=1").unwrap();
        writeln!(out).unwrap();
        writeln!(out, "model reference host=edge ceiling={CEILING} {{").unwrap();
        writeln!(out, "    serve plant-ops").unwrap();
        writeln!(out, "    serve utility").unwrap();
        out.push_str(&body);
        let last = item_name(LAYERS - 1, 0);
        writeln!(out, "    output {last} route=to-site").unwrap();
        writeln!(out, "    output {last} route=to-util").unwrap();
        writeln!(out, "}}").unwrap();
        return out;
    }
    writeln!(
        out,
        "// generated by: cargo run -p grid-examples --bin gen-reference > examples/reference-4096.kdl"
    )
    .unwrap();
    writeln!(out, "grid version=1").unwrap();
    writeln!(out).unwrap();
    writeln!(out, "host ref listen=\"127.0.0.1:7499\"").unwrap();
    writeln!(out).unwrap();
    writeln!(out, "model reference host=ref ceiling={CEILING} {{").unwrap();
    out.push_str(&body);
    writeln!(out, "}}").unwrap();
    out
}

fn main() {
    let shared = std::env::args().skip(1).any(|a| a == "--shared");
    print!("{}", generate(shared));
}
