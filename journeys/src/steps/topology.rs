//! `topology "FILE"` — the topology that later `plan` and `reconcile` steps use; a
//! path relative to the journey file (a file or a directory of `.kdl` files).
//! Switching to another file later models the operator editing their files.
//!
//! `edit-topology from="TEXT" to="TEXT" [all=#true]` — the operator edits the files: a
//! copy of the current topology file with the first (or every) TEXT replaced is written
//! to `$WORK/topologies/` and becomes the current topology.

use std::path::PathBuf;

use super::Step;
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

struct Topology {
    path: PathBuf,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let file = node.argument("a topology file, relative to the journey")?;
    let path = node.cx().journey_dir().join(&file);
    if !path.exists() {
        return Err(node
            .error(format!("topology `{}` does not exist", path.display()))
            .with_help(
                "topology paths are relative to the journey file, e.g. \"topologies/counter.kdl\"",
            ));
    }
    // Absolute, so commands run from the work directory find it.
    let path = path.canonicalize().unwrap_or(path);
    node.cx().set_topology(&path);
    Ok(Box::new(Topology { path }))
}

impl Step for Topology {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        cx.set_topology(self.path.clone());
        let shown = cx.show_path(&self.path);
        cx.say(format_args!("topology is now {shown}"));
        Ok(())
    }
}

// ---- edit-topology -------------------------------------------------------------------

struct EditTopology {
    from: String,
    to: String,
    all: bool,
    /// `deadline-in=N`: the replacement is the RFC 3339 time N seconds after the step
    /// runs (a mission's deadline that passes during the journey).
    deadline_in: Option<u64>,
}

pub fn parse_edit_topology(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let from = node.required("from", "TEXT")?;
    let deadline_in = node.count("deadline-in")?;
    let to = match deadline_in {
        // Hosts are what the parser tracks: a timestamp names none.
        Some(_) => "2000-01-01T00:00:00Z".to_owned(),
        None => node.required("to", "TEXT")?,
    };
    if from.is_empty() {
        return Err(node.error("`from` must not be empty"));
    }
    let all = node.flag("all")?.unwrap_or(false);
    node.cx().edit_topology(&from, &to, all);
    Ok(Box::new(EditTopology {
        from,
        to,
        all,
        deadline_in,
    }))
}

/// RFC 3339 (UTC, whole seconds) `seconds` from now.
fn deadline_in(seconds: u64) -> String {
    let at = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .expect("zero nanoseconds")
        + time::Duration::seconds(seconds as i64);
    at.format(&time::format_description::well_known::Rfc3339)
        .expect("RFC 3339 formats")
}

impl Step for EditTopology {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let to = match self.deadline_in {
            Some(seconds) => deadline_in(seconds),
            None => self.to.clone(),
        };
        let (current, text) = read_current(cx)?;
        let count = text.matches(self.from.as_str()).count();
        if count == 0 {
            return Err(Failure::new(
                format!("{:?} in {}", self.from, cx.show_path(&current)),
                "not present",
            ));
        }
        let edited = if self.all {
            text.replace(self.from.as_str(), &to)
        } else {
            text.replacen(self.from.as_str(), &to, 1)
        };
        let path = write_edited(cx, &current, &edited)?;
        cx.say(format_args!(
            "{:?} -> {:?} ({} of {count}); the topology is now {}",
            self.from,
            to,
            if self.all { count } else { 1 },
            cx.show_path(&path)
        ));
        Ok(())
    }
}

/// The current topology file and its text (one file: an edit's subject).
pub(super) fn read_current(cx: &mut Context<'_>) -> Result<(PathBuf, String), Failure> {
    let current = cx.topology()?;
    let text = std::fs::read_to_string(&current).map_err(|e| {
        Failure::new(
            "the current topology to be one file",
            format!("{}: {e}", cx.show_path(&current)),
        )
    })?;
    Ok((current, text))
}

/// Writes `edited`, the operator's edit of the topology file `current`, as the next
/// numbered copy in `$WORK/topologies/`, and makes it the current topology.
pub(super) fn write_edited(
    cx: &mut Context<'_>,
    current: &std::path::Path,
    edited: &str,
) -> Result<PathBuf, Failure> {
    {
        let dir = cx.work_dir().join("topologies");
        std::fs::create_dir_all(&dir)
            .map_err(|e| Failure::new("the edited topology written", e.to_string()))?;
        let n = std::fs::read_dir(&dir).map_or(0, |d| d.count()) + 1;
        let name = current
            .file_name()
            .map_or("topology.kdl".into(), |n| n.to_string_lossy().into_owned());
        // An edited copy's name without its number: `02-processes.kdl`, not
        // `02-01-processes.kdl`.
        let name = match current.parent() == Some(dir.as_path()) {
            true => name
                .split_once('-')
                .map_or(name.clone(), |(_, rest)| rest.to_owned()),
            false => name,
        };
        let path = dir.join(format!("{n:02}-{name}"));
        std::fs::write(&path, edited)
            .map_err(|e| Failure::new("the edited topology written", e.to_string()))?;
        cx.set_topology(path.clone());
        Ok(path)
    }
}
