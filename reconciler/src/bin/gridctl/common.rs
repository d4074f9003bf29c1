//! Helpers more than one command family uses: loading the files, `NAME=VALUE`
//! arguments, the host that serves a model, and building `gridd` under `cargo run`.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use grid_spec::{Diagnostics, Model, Options, Topology};

/// Parses `--state DIR` (or `GRID_STATE`): refused at once when DIR, or the nearest
/// part of it that exists, is not a directory (`--state /etc/passwd` planned
/// installations under a file). A DIR that does not exist yet is created when needed.
pub fn state_dir(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    if value.is_empty() {
        return Err("the state directory is an empty path".to_owned());
    }
    let existing = path
        .ancestors()
        .find(|a| !a.as_os_str().is_empty() && std::fs::symlink_metadata(a).is_ok());
    match existing {
        Some(found) if !found.is_dir() => Err(if found == path {
            format!("{} is not a directory", path.display())
        } else {
            format!(
                "{} cannot be made: {} is not a directory",
                path.display(),
                found.display()
            )
        }),
        _ => Ok(path),
    }
}

/// `options` refusing every profile this build of gridd does not provide, and every
/// mission not yet returned whose deadline has passed by now.
pub fn with_provided_profiles(options: Options) -> Options {
    Options {
        provided_profiles: Some(&grid_engine::config::PROVIDED_PROFILES),
        now: Some(std::time::SystemTime::now()),
        ..options
    }
}

/// Prints diagnostics the way a person reads them: spans, labels, help lines.
fn report(diagnostics: Diagnostics) {
    eprintln!("{:?}", miette::Report::new(diagnostics));
}

/// The topology of `files`, or `None` after printing every diagnostic. A host selecting
/// a profile this build does not provide is refused here, before gridd would refuse
/// to start it.
pub fn load(files: &[PathBuf], options: Options) -> Option<Topology> {
    match grid_spec::load_with(files, with_provided_profiles(options)) {
        Ok(topology) => Some(topology),
        Err(diagnostics) => {
            report(diagnostics);
            None
        }
    }
}

pub fn find_model<'t>(topology: &'t Topology, name: &str) -> anyhow::Result<&'t Model> {
    topology.model(name).with_context(|| {
        let names: Vec<&str> = topology.models.iter().map(|m| m.name.as_str()).collect();
        if names.is_empty() {
            format!("model `{name}` is not declared: the files declare no model")
        } else {
            format!(
                "model `{name}` is not declared; the files declare: {}",
                names.join(", ")
            )
        }
    })
}

/// Parses `NAME=VALUE` arguments (`--set NAME=VALUE` of `model`, the values of
/// `input`; `what` names them in a refusal), refusing non-finite values before
/// anything is captured. Quoted input is capped at `QUOTED_CHARS_MAX`.
pub fn parse_sets(what: &str, sets: &[String]) -> anyhow::Result<Vec<(String, f64)>> {
    sets.iter()
        .map(|set| {
            let quoted = grid_spec::diagnostic::quoted(set);
            let (name, value) = set
                .split_once('=')
                .with_context(|| format!("{what} `{quoted}`: expected NAME=VALUE"))?;
            let number: f64 = value.trim().parse().with_context(|| {
                format!(
                    "{what} `{quoted}`: `{}` is not a number",
                    grid_spec::diagnostic::quoted(value)
                )
            })?;
            if !number.is_finite() {
                bail!(
                    "{what} `{quoted}`: values are finite numbers; NaN and infinities are refused"
                );
            }
            Ok((name.trim().to_owned(), number))
        })
        .collect()
}

/// The installed host that serves `model` (not retired), found under STATE/hosts.
pub fn owner_of(state: &Path, model: &str) -> anyhow::Result<PathBuf> {
    use grid_reconciler::observe;
    let shown = grid_spec::diagnostic::quoted(model);
    let mut unreachable = Vec::new();
    let mut retired_at = Vec::new();
    // Every host asked at once (a state may hold many), then read in name order.
    let observed = observe::each_installed(state, |name| {
        observe::observe_host(name, &observe::host_dir(state, name)).status
    });
    for (name, status) in observed {
        let dir = observe::host_dir(state, &name);
        match status {
            // A locked host still serves reads (docs/custody.md, "Locked custody").
            grid_reconciler::observe::HostStatus::Running(o)
            | grid_reconciler::observe::HostStatus::Locked(o) => {
                if o.models.iter().any(|m| m.name == model && !m.retired) {
                    return Ok(dir);
                }
                if o.models.iter().any(|m| m.name == model && m.retired) {
                    retired_at.push(name);
                }
            }
            _ => unreachable.push(name),
        }
    }
    if !retired_at.is_empty() && unreachable.is_empty() {
        bail!(
            "model `{shown}` is retired (host {} holds it retired): it takes no input and serves no value; un-retire it in the files and reconcile to reinstate it",
            retired_at.join(", ")
        )
    }
    if unreachable.is_empty() {
        bail!(
            "no running host under {} serves model `{shown}`",
            state.display()
        )
    }
    bail!(
        "no running host under {} serves model `{shown}`; not reachable: {}",
        state.display(),
        unreachable.join(", ")
    )
}

/// Under `cargo run` (which sets `CARGO`), `up` and `journey run` first have cargo
/// build the `gridd` they start beside this gridctl, in the same profile, when it is
/// missing or older than this gridctl: `cargo run --bin gridctl` builds gridctl only,
/// and a missing or stale gridd would not speak this gridctl's protocol.
pub fn build_gridd_under_cargo() -> anyhow::Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    let exe = std::env::current_exe().context("where is gridctl?")?;
    let Some(dir) = exe.parent() else {
        return Ok(());
    };
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let gridd = dir.join("gridd");
    if let (Some(built), Some(ours)) = (modified(&gridd), modified(&exe))
        && built >= ours
    {
        return Ok(());
    }
    // The workspace's selection, as `cargo run --bin gridctl` made (no `-p`): the same
    // features, so gridd reuses gridctl's build instead of compiling the engine again.
    // Not quiet: the first build takes minutes, and cargo shows its progress.
    eprintln!("building gridd beside gridctl (cargo build --bin gridd)");
    let mut build = std::process::Command::new(cargo);
    build.args(["build", "--bin", "gridd"]);
    // What `cargo run` set for gridctl describes gridctl's package: passed on to the
    // nested build it changes crates' fingerprints (ring's build script reruns when
    // `OUT_DIR` changes), and the next `cargo run` or `cargo test` compiles a dozen
    // crates again. The nested build gets the caller's environment without them.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                // gridctl's build script's: ring's build script reruns when it changes.
                "OUT_DIR",
            ]
            .contains(&name.as_ref())
        {
            build.env_remove(name.as_ref());
        }
    }
    // The workspace's manifest (the reconciler's parent directory), never the
    // reconciler's own: that would select the reconciler alone, which has no `gridd`.
    if let Some(workspace) = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .and_then(|manifest| manifest.parent().map(Path::to_path_buf))
    {
        build
            .arg("--manifest-path")
            .arg(workspace.join("Cargo.toml"));
    }
    if dir.ends_with("release") {
        build.arg("--release");
    }
    let status = build.status().context("cannot run cargo to build gridd")?;
    if !status.success() {
        bail!("cargo could not build gridd ({status})");
    }
    Ok(())
}
