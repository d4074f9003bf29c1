//! `transfer HOST to=DIR|back=#true [at=POINT] [expect=OUTCOME] [plan-mention=TEXT]`
//! (SPEC §5, docs/transfer.md) — the operator moves HOST's installation: its `host`
//! node's `dir` becomes `$WORK/DIR` in the files (`back=#true`: the `dir` is removed,
//! back into the state directory; written as the next edited copy of the topology, like
//! `edit-topology`), `gridctl plan` shows TEXT (when given) and `gridctl reconcile`
//! runs.
//!
//! - With `at`, gridctl runs with `GRID_FAILPOINTS=POINT=abort` (`transfer-after-prepare`,
//!   `transfer-mid-copy`, `transfer-before-activate`, `transfer-before-retire`) and must
//!   abort there: the transfer stops midway, journaled; the next `transfer` (or
//!   `reconcile`) resumes it under the same operation id.
//! - Without, the reconcile's outcome must be `expect` (default `succeeded`; a stopped
//!   host's plan also says `! host H` unreachable: `attention`). A gridd serving HOST
//!   is stopped by the transfer's prepare: its exit is reported, not a crash. Once HOST's link names
//!   the new place, the step also checks that a gridd started on the old installation
//!   (or `<state>/transferred/H.OP`, when it was the state directory's own) refuses,
//!   naming the new place: the source is retired, never served again.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use kdl::KdlDocument;

use super::{Outcome, Step, check_outcome};
use crate::context::Context;
use crate::error::Failure;
use crate::process::{describe_status, quote_output};
use crate::step::{Node, ParseError};

struct Transfer {
    host: String,
    /// The new `dir` below `$WORK`; none: back into the state directory.
    to: Option<String>,
    at: Option<String>,
    expect: Outcome,
    /// Text the plan of the edited files must show first (`plan-mention`).
    plan_mention: Option<String>,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the host whose installation moves")?;
    let to = node.string("to")?;
    let back = node.flag("back")?.unwrap_or(false);
    if to.is_some() == back {
        return Err(node.error(
            "`transfer` moves to=\"DIR\" (below the work directory) or back=#true (into the state directory), one of them",
        ));
    }
    let at = crash_point(
        node,
        "a transfer's",
        "transfer-",
        "transfer-after-prepare, transfer-mid-copy, transfer-before-activate, transfer-before-retire",
    )?;
    let expect = Outcome::expected(node)?;
    let plan_mention = node.string("plan-mention")?;
    Ok(Box::new(Transfer {
        host,
        to,
        at,
        expect,
        plan_mention,
    }))
}

/// The `at` of a step whose gridctl runs armed with one crash point named PREFIX…
/// (`what`: whose crash points, `points`: their names, for the diagnostic).
pub(super) fn crash_point(
    node: &mut Node<'_>,
    what: &str,
    prefix: &str,
    points: &str,
) -> Result<Option<String>, ParseError> {
    let at = node.string("at")?;
    if let Some(point) = &at
        && !point.starts_with(prefix)
    {
        return Err(node.error(format!(
            "`at` is {what} crash point ({points}), not `{point}`"
        )));
    }
    Ok(at)
}

/// Runs gridctl with `args` armed to abort at `point`: it must abort there (`what`
/// stops midway, journaled).
pub(super) fn aborts_at(
    cx: &mut Context<'_>,
    args: &[OsString],
    point: &str,
    what: &str,
) -> Result<(), Failure> {
    let output = cx.gridctl_armed(args, &format!("{point}=abort"))?;
    use std::os::unix::process::ExitStatusExt;
    if output.status.signal() != Some(6) {
        return Err(Failure::new(
            format!("gridctl to abort at {point}"),
            format!(
                "{}; stdout: {}; stderr: {}",
                describe_status(&output.status),
                quote_output(&output.stdout),
                quote_output(&output.stderr)
            ),
        ));
    }
    cx.say(format_args!(
        "gridctl aborted at {point} ({what} stops there, journaled)"
    ));
    Ok(())
}

/// `text` with `host`'s `dir` set to `dir`, or removed.
fn moved(text: &str, host: &str, dir: Option<&Path>) -> Result<String, String> {
    let mut doc: KdlDocument = text
        .parse()
        .map_err(|e| format!("the topology does not parse: {e}"))?;
    let node = super::custody::node_named(&mut doc, "host", host)?;
    match dir {
        Some(dir) => {
            node.insert("dir", dir.display().to_string());
        }
        // By value: kdl's `remove` compares the parsed name's representation too.
        None => node
            .entries_mut()
            .retain(|e| e.name().is_none_or(|n| n.value() != "dir")),
    }

    Ok(doc.to_string())
}

impl Step for Transfer {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let link = cx.host_dir(&self.host);
        let new_dir = self.to.as_ref().map(|to| cx.work_dir().join(to));
        // Back into the state directory, the copy is made beside the link first.
        let destination = new_dir
            .clone()
            .unwrap_or_else(|| link.with_file_name(format!("{}.returning", self.host)));
        let source = std::fs::read_link(&link).unwrap_or_else(|_| link.clone());
        let (current, text) = super::topology::read_current(cx)?;
        let edited = moved(&text, &self.host, new_dir.as_deref())
            .map_err(|e| Failure::new("the host's dir set in the files", e))?;
        let path = super::topology::write_edited(cx, &current, &edited)?;
        cx.say(format_args!(
            "{}: {} ({})",
            self.host,
            new_dir
                .as_ref()
                .map_or("no dir: back into the state directory".to_owned(), |d| {
                    format!("dir={}", cx.show_path(d))
                }),
            cx.show_path(&path)
        ));
        if let Some(mention) = &self.plan_mention {
            let output = cx.gridctl(&["plan".into(), path.clone().into()])?;
            if !output.stdout.contains(mention.as_str()) {
                return Err(Failure::new(
                    format!("the plan to mention `{mention}`"),
                    quote_output(&output.stdout),
                ));
            }
            cx.say(format_args!("the plan mentions `{mention}`"));
        }
        let args: Vec<OsString> = vec!["reconcile".into(), path.into(), "--json".into()];
        let was_running = cx.host_running(&self.host);
        if let Some(point) = &self.at {
            aborts_at(cx, &args, point, "the transfer")?;
            return stopped_by_transfer(cx, &self.host, was_running);
        }
        let output = cx.gridctl(&args)?;
        stopped_by_transfer(cx, &self.host, was_running)?;
        check_outcome(cx, &output, self.expect)?;
        // Moved (the host's link names the new place, or back: `hosts/H` is the copy
        // itself): the old place refuses.
        let arrived = match &new_dir {
            Some(_) => std::fs::read_link(&link).is_ok_and(|target| target == destination),
            None => std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_dir()) && source != link,
        };
        if arrived {
            let served = new_dir.unwrap_or(link);
            source_refuses(cx, &self.host, &source, &served)?;
        }
        Ok(())
    }
}

/// A gridd the transfer stopped (its prepare stops the one serving the source): its
/// exit is the transfer's, not a crash.
fn stopped_by_transfer(cx: &mut Context<'_>, host: &str, was_running: bool) -> Result<(), Failure> {
    if was_running && !cx.host_running(host) {
        let (status, _) = cx.wait_host_exit(host)?;
        cx.say(format_args!(
            "the transfer stopped the gridd of {host} ({})",
            describe_status(&status)
        ));
    }
    Ok(())
}

/// A gridd started on the old installation refuses, naming `destination`.
fn source_refuses(
    cx: &mut Context<'_>,
    host: &str,
    source: &Path,
    destination: &Path,
) -> Result<(), Failure> {
    // The state directory's own `hosts/H` was kept as `transferred/H.OP`.
    let retired: PathBuf = if source == cx.host_dir(host) {
        std::fs::read_dir(cx.state_dir().join("transferred"))
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{host}.")))
            })
            .ok_or_else(|| {
                Failure::new(
                    format!("the retired installation kept as <state>/transferred/{host}.OP"),
                    "none found",
                )
            })?
    } else {
        source.to_owned()
    };
    let refusal = cx.start_dir_refusal(&retired)?;
    let expected = format!("transferred to {}", destination.display());
    if !refusal.contains(&expected) {
        return Err(Failure::new(
            format!(
                "a gridd on {} to refuse, naming {}",
                retired.display(),
                destination.display()
            ),
            refusal,
        ));
    }
    cx.say(format_args!(
        "a gridd on the old installation {} refuses: {}",
        cx.show_path(&retired),
        super::shorten(&refusal, 300)
    ));
    Ok(())
}
