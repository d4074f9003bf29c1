//! The house rules, checked as a test (as TigerBeetle's `tidy.zig`): it reads the
//! workspace's sources as text and fails on
//! - an import circle among the top-level modules (`crate::X` paths) of the engine,
//!   the reconciler or the journeys;
//! - the ground floor (`store`, `transport`, `custody`, `config`, `limits`, `metrics`,
//!   `grdx`) importing a capability;
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
const GROUND_FLOOR: [&str; 7] = [
    "store",
    "transport",
    "custody",
    "config",
    "limits",
    "metrics",
    "grdx",
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

/// The text without line comments and without a trailing inline `#[cfg(test)]`
/// module (`#[cfg(test)] mod tests;` declares a file and is read past: what follows
/// it is code).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.starts_with("mod ") && next.trim_end().ends_with('{'))
        {
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

/// The top-level module of the crate whose sources are under `src` (`engine/src/`) a
/// file belongs to.
fn module_of(src: &str, path: &str) -> Option<String> {
    let rest = path.strip_prefix(src)?;
    let first = rest.split('/').next()?;
    if first == "lib.rs" || first == "main.rs" || first == "bin" {
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

/// The engine's module graph.
fn engine_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    crate_graph("engine/src/", files)
}

/// module → the other top-level modules it imports, in the crate under `src`.
fn crate_graph(src: &str, files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|(p, _)| module_of(src, p))
        .collect();
    for (path, text) in files {
        let Some(module) = module_of(src, path) else {
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
fn the_reconciler_has_no_import_circle() {
    let graph = crate_graph("reconciler/src/", &sources());
    assert!(graph.contains_key("plan") && graph.contains_key("routes"));
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "an import circle among reconciler modules: {}",
            circle.join(" -> ")
        );
    }
    // The plan's vocabulary is the ground floor: it names no capability.
    let vocabulary = &graph["transition"];
    assert!(
        vocabulary
            .iter()
            .all(|m| ["changes", "observe", "resolve"].contains(&m.as_str())),
        "transition imports {vocabulary:?}"
    );
}

#[test]
fn the_journeys_have_no_import_circle() {
    let graph = crate_graph("journeys/src/", &sources());
    assert!(graph.contains_key("steps") && graph.contains_key("context"));
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "an import circle among journeys modules: {}",
            circle.join(" -> ")
        );
    }
    let limits = &graph["limits"];
    assert!(limits.is_empty(), "journeys' limits import {limits:?}");
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
fn a_circle_past_a_test_module_declaration_is_found_in_any_crate() {
    // The reconciler's circle before issue 27: `diff` called every capability and the
    // capabilities built `diff::Draft`s; the call sat after `#[cfg(test)] mod tests;`.
    let files = [
        file(
            "reconciler/src/diff/mod.rs",
            "#[cfg(test)]\nmod tests;\nfn diff() { crate::routes::transitions(); }",
        ),
        file("reconciler/src/routes.rs", "use crate::diff::Draft;"),
        file("reconciler/src/plan.rs", "use crate::diff;"),
        file("reconciler/src/bin/gridctl/main.rs", "use crate::plan;"),
    ];
    let graph = crate_graph("reconciler/src/", &files);
    assert_eq!(
        find_circle(&graph),
        Some(vec![
            "diff".to_owned(),
            "routes".to_owned(),
            "diff".to_owned()
        ])
    );
    // An inline test module at the end is not code.
    let tested = [
        file(
            "journeys/src/limits.rs",
            "const A: u8 = 1;\n#[cfg(test)]\nmod tests {\n    use crate::steps::x;\n}",
        ),
        file("journeys/src/steps/mod.rs", "use crate::limits::A;"),
    ];
    assert_eq!(find_circle(&crate_graph("journeys/src/", &tested)), None);
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

// The docs that list what the code has, checked against it.

#[test]
fn the_docs_list_every_journey_and_every_provided_profile() {
    let root = workspace();
    let journeys_doc = std::fs::read_to_string(root.join("docs/journeys.md")).unwrap();
    let mut missing: Vec<String> = std::fs::read_dir(root.join("journeys"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".kdl"))
        .filter(|name| !journeys_doc.contains(&format!("| `{name}` |")))
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "journeys missing from docs/journeys.md's table: {missing:?}"
    );
    let topology_doc = std::fs::read_to_string(root.join("docs/topology.md")).unwrap();
    let host_store_doc = std::fs::read_to_string(root.join("docs/host-store.md")).unwrap();
    let provided_line = topology_doc
        .split("This build runs")
        .nth(1)
        .and_then(|rest| rest.split("PROVIDED_PROFILES").next())
        .expect("docs/topology.md says what this build runs");
    let store_line = host_store_doc
        .split("today that is every profile but")
        .nth(1)
        .and_then(|rest| rest.split("PROVIDED_PROFILES").next())
        .expect("docs/host-store.md says what this build runs");
    for profile in grid_engine::config::AVAILABLE_PROFILES {
        let named = format!("`{profile}`");
        assert!(
            provided_line.contains(&named),
            "docs/topology.md does not list {named} among the profiles this build runs"
        );
        assert!(
            store_line.contains(&named),
            "docs/host-store.md does not list {named} among the profiles this build runs"
        );
    }
}
