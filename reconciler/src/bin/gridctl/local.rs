//! `gridctl fmt`, `gridctl down` and `gridctl inspect hosts`: the topology files' layout
//! and the gridd processes of a state directory on this machine.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use grid_reconciler::local::{self, LocalHost, Stopped};
use serde::Serialize;

use crate::Output;
use crate::report::{Report, emit};

/// `gridctl fmt FILES [--check]`: rewrites each topology file in canonical layout
/// (only whitespace and layout change); with `--check` rewrites nothing and exits 3
/// when a file would change. Exit 1 when a file is not KDL 2 (nothing is rewritten).
pub fn fmt(files: &[PathBuf], check: bool) -> anyhow::Result<ExitCode> {
    let mut paths = Vec::new();
    for path in files {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "kdl") && p.is_file())
                .collect();
            found.sort();
            paths.extend(found);
        } else {
            paths.push(path.clone());
        }
    }
    // Every file is read and formatted before any is written: one that is not KDL
    // leaves every file as it was.
    let mut changed = Vec::new();
    let mut failed = false;
    for path in &paths {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                failed = true;
                continue;
            }
        };
        match grid_spec::format::canonical(&path.display().to_string(), &text) {
            Ok(formatted) if formatted != text => changed.push((path, formatted)),
            Ok(_) => {}
            Err(diagnostics) => {
                eprintln!("{:?}", miette::Report::new(diagnostics));
                failed = true;
            }
        }
    }
    if failed {
        eprintln!("nothing was rewritten");
        return Ok(ExitCode::FAILURE);
    }
    for (path, formatted) in &changed {
        if check {
            println!("{} is not in canonical layout", path.display());
        } else {
            write_keeping_mode(path, formatted)?;
            println!("{}", path.display());
        }
    }
    Ok(if check && !changed.is_empty() {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// Replaces `path`'s contents through a sibling file renamed over it, with the
/// original's permissions: a crash leaves the old text or the new, never half.
fn write_keeping_mode(path: &Path, text: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let permissions = std::fs::metadata(path)?.permissions();
    let name = path.file_name().context("a file name")?.to_string_lossy();
    let temporary = path.with_file_name(format!(".{name}.fmt"));
    std::fs::write(&temporary, text)
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    std::fs::set_permissions(&temporary, permissions)?;
    std::fs::File::open(&temporary)?.sync_all()?;
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

#[derive(Serialize)]
#[serde(transparent)]
struct Hosts(Vec<LocalHost>);

impl Report for Hosts {
    fn text(&self) -> String {
        if self.0.is_empty() {
            return "no host is installed under this state\n".to_owned();
        }
        let mut out = String::new();
        for h in &self.0 {
            let process = match (h.running, h.pid) {
                (true, Some(pid)) => format!("running, pid {pid}"),
                (true, None) => "running".to_owned(),
                (false, _) => h.reason.clone().unwrap_or_else(|| "not running".into()),
            };
            out.push_str(&format!("{}  {}\n", h.name, process));
            let dir = match &h.link {
                Some(target) => format!("{} -> {}", h.dir.display(), target.display()),
                None => h.dir.display().to_string(),
            };
            out.push_str(&format!("  directory  {dir}\n"));
            out.push_str(&format!("  profiles   {}\n", list(&h.profiles)));
            if let Some(running) = &h.running_profiles {
                out.push_str(&format!(
                    "  runs       {} (restart gridd to run what host.toml selects)\n",
                    list(running)
                ));
            }
            if h.running {
                out.push_str(&format!("  models     {}\n", list(&h.models)));
            }
            for (model, memberships) in &h.serves {
                out.push_str(&format!("  serves     {model}: {}\n", list(memberships)));
            }
        }
        out
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".to_owned()
    } else {
        items.join(" ")
    }
}

/// `gridctl inspect hosts`.
pub fn inspect_hosts(output: &Output) -> anyhow::Result<ExitCode> {
    emit(&Hosts(local::hosts(&output.state)), output.json);
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct Down {
    stopped: Vec<Stopped>,
}

impl Report for Down {
    fn text(&self) -> String {
        if self.stopped.is_empty() {
            return "nothing to stop: no `gridctl up` and no gridd runs for this state\n"
                .to_owned();
        }
        self.stopped
            .iter()
            .map(|s| format!("{} (pid {}): {}\n", s.what, s.pid, s.outcome))
            .collect()
    }
}

/// `gridctl down`: exit 0 when everything stopped, 1 when a process is still running.
pub fn down(output: &Output) -> anyhow::Result<ExitCode> {
    let stopped = local::down(&output.state, grid_reconciler::up::HOST_STOP_TIMEOUT);
    let all = stopped.iter().all(|s| s.outcome != "still running");
    emit(&Down { stopped }, output.json);
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
