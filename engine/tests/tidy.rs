//! The house rules, checked as a test (as TigerBeetle's `tidy.zig`): it reads the
//! workspace's sources as text and fails on
//! - an import circle among the engine's top-level modules (`crate::X` paths);
//! - the ground floor (`store`, `transport`, `custody`, `config`, `limits`) importing a
//!   capability;
//! - a `*_MAX` / `*_MIN` constant outside a limits module, or a limit whose unit is not
//!   last (`DELAY_MAX_MS`);
//! - a leftover debug macro;
//! - a source file over 1,000 lines outside tests (files under `tests/`, or named
//!   `tests.rs`).
//!
//! Each rule is a pure function over file texts, unit-tested below on inputs that break
//! it, so the test is shown to fail when the rule is broken.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest source file outside tests, in lines.
const FILE_LINES_LIMIT: usize = 1_000;

/// Modules every capability may use and that use no capability.
const GROUND_FLOOR: [&str; 6] = [
    "store",
    "transport",
    "custody",
    "config",
    "limits",
    "metrics",
];

/// The only files that may define `*_MAX` / `*_MIN` constants.
const LIMITS_FILES: [&str; 5] = [
    "spec/src/limits.rs",
    "engine/src/limits.rs",
    "adapters/src/limits.rs",
    "journeys/src/limits.rs",
    "benches/src/limits.rs",
];

/// The workspace's crates whose sources the rules read.
const CRATES: [&str; 7] = [
    "spec",
    "engine",
    "reconciler",
    "journeys",
    "examples",
    "benches",
    "adapters",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the engine crate sits in the workspace")
        .to_owned()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// (path relative to the workspace, text) of every Rust source file.
fn sources() -> Vec<(String, String)> {
    let root = workspace();
    let mut files = Vec::new();
    for krate in CRATES {
        rust_files(&root.join(krate), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            let relative = path
                .strip_prefix(&root)
                .expect("under the workspace")
                .to_string_lossy()
                .into_owned();
            (relative, text)
        })
        .collect()
}

fn is_test_file(path: &str) -> bool {
    path.split('/').any(|part| part == "tests") || path.ends_with("/tests.rs")
}

/// The text without line comments and without a trailing `#[cfg(test)]` module.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The top-level engine module a file of `engine/src` belongs to.
fn engine_module(path: &str) -> Option<String> {
    let rest = path.strip_prefix("engine/src/")?;
    let first = rest.split('/').next()?;
    if first == "lib.rs" || first == "bin" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_owned())
}

/// Every top-level module `code` names through `crate::X` (also `crate::{X, Y}`).
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let preceded = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !preceded {
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for part in group[..end].split(',') {
                    let name: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        names.insert(name);
                    }
                }
            } else {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
        }
        rest = after;
    }
    names
}

/// module → the other top-level modules it imports.
fn engine_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let modules: BTreeSet<String> = files.iter().filter_map(|(p, _)| engine_module(p)).collect();
    for (path, text) in files {
        let Some(module) = engine_module(path) else {
            continue;
        };
        if is_test_file(path) {
            continue;
        }
        let entry = graph.entry(module.clone()).or_default();
        for name in crate_references(&code_of(text)) {
            if name != module && modules.contains(&name) {
                entry.insert(name);
            }
        }
    }
    graph
}

/// A circle of imports, as its path `a -> b -> a`, if there is one.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(circle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(circle);
        }
    }
    None
}

/// `ground -> capability` imports.
fn ground_floor_violations(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for ground in GROUND_FLOOR {
        for name in graph.get(ground).into_iter().flatten() {
            if !GROUND_FLOOR.contains(&name.as_str()) {
                found.push(format!("{ground} -> {name}"));
            }
        }
    }
    found
}

/// `path:line: NAME` for every `*_MAX`/`*_MIN` constant outside a limits file, and for
/// every limit whose name puts a unit after `_MAX`/`_MIN`.
fn stray_limits(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        if path.ends_with("engine/tests/tidy.rs") {
            continue;
        }
        let in_limits = LIMITS_FILES.contains(&path.as_str());
        for (number, line) in code_of(text).lines().enumerate() {
            let Some(at) = line.find("const ") else {
                continue;
            };
            let name: String = line[at + "const ".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let limit = name.ends_with("_MAX") || name.ends_with("_MIN");
            let unit_after = ["_MAX_", "_MIN_"].iter().any(|m| name.contains(m));
            if (limit && !in_limits) || unit_after {
                found.push(format!("{path}:{}: {name}", number + 1));
            }
        }
    }
    found
}

fn debug_macros(files: &[(String, String)]) -> Vec<String> {
    let needle = concat!("db", "g!(");
    files
        .iter()
        .flat_map(|(path, text)| {
            code_of(text)
                .lines()
                .enumerate()
                .filter(|(_, line)| line.contains(needle))
                .map(|(n, _)| format!("{path}:{}", n + 1))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn long_files(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(path, _)| !is_test_file(path))
        .filter_map(|(path, text)| {
            let lines = text.lines().count();
            (lines > FILE_LINES_LIMIT).then(|| format!("{path}: {lines} lines"))
        })
        .collect()
}

#[test]
fn the_engine_has_no_import_circle() {
    let graph = engine_graph(&sources());
    assert!(graph.contains_key("host") && graph.contains_key("store"));
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "an import circle among engine modules: {}",
            circle.join(" -> ")
        );
    }
}

#[test]
fn the_ground_floor_imports_no_capability() {
    let found = ground_floor_violations(&engine_graph(&sources()));
    assert!(
        found.is_empty(),
        "the ground floor imports a capability: {found:?}"
    );
}

#[test]
fn limits_live_only_in_limits_modules() {
    let found = stray_limits(&sources());
    assert!(
        found.is_empty(),
        "limit constants outside a limits module (or with the unit not last): {found:#?}"
    );
}

#[test]
fn no_debug_macro_is_left() {
    let found = debug_macros(&sources());
    assert!(found.is_empty(), "debug macros left: {found:?}");
}

#[test]
fn no_source_file_is_longer_than_the_limit() {
    let found = long_files(&sources());
    assert!(
        found.is_empty(),
        "source files over {FILE_LINES_LIMIT} lines outside tests: {found:#?}"
    );
}

// The rules themselves, on inputs that break them.

fn file(path: &str, text: &str) -> (String, String) {
    (path.to_owned(), text.to_owned())
}

#[test]
fn a_circle_is_found_and_printed_as_a_path() {
    let files = [
        file(
            "engine/src/host/mod.rs",
            "use crate::delivery::service::Delivery;",
        ),
        file(
            "engine/src/delivery/service.rs",
            "use crate::{store, host::fatal};",
        ),
        file(
            "engine/src/store/mod.rs",
            "// crate::host is only named in a comment",
        ),
    ];
    let graph = engine_graph(&files);
    assert_eq!(
        find_circle(&graph),
        Some(vec![
            "delivery".to_owned(),
            "host".to_owned(),
            "delivery".to_owned()
        ])
    );
    let acyclic = [
        file(
            "engine/src/host/mod.rs",
            "use crate::delivery::service::Delivery;",
        ),
        file(
            "engine/src/delivery/service.rs",
            "use crate::store::Syncer;",
        ),
        file("engine/src/store/mod.rs", ""),
    ];
    assert_eq!(find_circle(&engine_graph(&acyclic)), None);
}

#[test]
fn a_ground_floor_import_of_a_capability_is_found() {
    let files = [
        file("engine/src/transport/server.rs", "use crate::host::Host;"),
        file("engine/src/host/mod.rs", "use crate::transport::Routes;"),
    ];
    assert_eq!(
        ground_floor_violations(&engine_graph(&files)),
        vec!["transport -> host".to_owned()]
    );
}

#[test]
fn a_stray_limit_and_a_unit_after_max_are_found() {
    let files = [
        file(
            "engine/src/delivery/service.rs",
            "pub const PUSH_MAX: usize = 1;",
        ),
        file(
            "engine/src/limits.rs",
            "pub const DELAY_MAX_MS: u64 = 1;\npub const OK_MAX: u8 = 1;",
        ),
        file("engine/src/host/mod.rs", "const LOCAL_TIMEOUT: u64 = 1;"),
    ];
    assert_eq!(
        stray_limits(&files),
        vec![
            "engine/src/delivery/service.rs:1: PUSH_MAX".to_owned(),
            "engine/src/limits.rs:1: DELAY_MAX_MS".to_owned()
        ]
    );
}

#[test]
fn long_files_and_debug_macros_are_found_outside_tests() {
    let long = "x\n".repeat(FILE_LINES_LIMIT + 1);
    let files = [
        file("engine/src/host/mod.rs", &long),
        file("engine/src/model/tests.rs", &long),
        file("engine/tests/property.rs", &long),
        file("spec/src/parse.rs", concat!("let x = db", "g!(1);")),
    ];
    assert_eq!(
        long_files(&files),
        vec![format!(
            "engine/src/host/mod.rs: {} lines",
            FILE_LINES_LIMIT + 1
        )]
    );
    assert_eq!(debug_macros(&files), vec!["spec/src/parse.rs:1".to_owned()]);
}
