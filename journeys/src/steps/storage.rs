//! A host's storage lost, rolled back or damaged, as a failing disk, a restored backup
//! or an operator's mistake leaves it (docs/storage.md). Paths are relative to the
//! host's directory (`<state>/hosts/HOST`); the host should be stopped (`kill`) first.
//!
//! - `save HOST "PATH" as="NAME" [tar=#true]` — copies PATH (a file or a directory) to
//!   `$WORK/saved/NAME`: a backup taken while the host is stopped. `tar=#true`: the
//!   system's `tar -C HOSTDIR -cf $WORK/saved/NAME PATH` makes it a tar archive.
//! - `restore HOST "PATH" from="NAME"` — PATH is replaced by that copy.
//! - `truncate HOST "PATH" [ext="EXT"] [bytes=N]` — the file PATH, or every file under
//!   the directory PATH whose name ends in `.EXT`, cut to N bytes (default: half its
//!   length). At least one file must be cut.
//! - `remove-files HOST "DIR" ext="EXT"` — every file under DIR whose name ends in
//!   `.EXT` deleted (at least one): a journal deleted, say.
//! - `damage HOST "PATH" trials=N seed=S` — N seeded trials on a copy of PATH taken
//!   now: each puts the copy back, flips one bit or cuts one file at a seeded place,
//!   and starts the host. It must refuse, naming the installation, or start with every
//!   recorded input answer unchanged, and every ledger answer recorded at the host
//!   (looked up: `gridctl ledger lookup`, which applies nothing) and every ledger's view
//!   too (the `refused_or_same` oracle); it is then killed. The host must be running
//!   when the step begins (the models' values and ledgers' views are read first); at
//!   the end the copy is put back and the host started again. The high-water mark
//!   (`keys/store.high-water`) is put back with the copy before each trial and at the
//!   end: a trial that starts may write (a read waiting for an fsync, the
//!   checkpointer), which the copy put back does not hold.
//! - `expect-inputs-unchanged` — re-sends every input recorded with a definite answer
//!   (`$WORK/input-answers.jsonl`): each answer is the original, marked replayed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::gridctl::{Quiet, json_of};
use super::input::InputAnswer;
use super::tamper::{io_failure, relative};
use super::{Step, gridctl::gridctl_json};
use crate::context::Context;
use crate::error::Failure;
use crate::limits::DAMAGE_TRIALS_MAX;
use crate::oracles::answers_unchanged::{self, Answer as _};
use crate::oracles::refused_or_same::{self, Found, Retained, Verdict};
use crate::seeded::Seeded;

/// The host's high-water mark in `DIR/keys` (the engine's `HIGH_WATER_FILE`).
const HIGH_WATER_FILE: &str = "store.high-water";
use crate::step::{Node, ParseError};

/// A name for a saved copy: one path component.
fn copy_name(node: &mut Node<'_>, key: &str) -> Result<String, ParseError> {
    let name = node.required(key, "NAME")?;
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(node.error(format!("`{name}` must be a plain name (no `/`)")));
    }
    Ok(name)
}

/// `tar -C dir -cf to path`, the system's tar (what an operator's backup runs).
fn archive(dir: &Path, path: &str, to: &Path) -> Result<(), Failure> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| io_failure("the saved copies' directory".to_owned(), parent, e))?;
    }
    let output = std::process::Command::new("tar")
        .arg("-C")
        .arg(dir)
        .arg("-cf")
        .arg(to)
        .arg(path)
        .output()
        .map_err(|e| Failure::new("tar to run", e.to_string()))?;
    if !output.status.success() {
        return Err(Failure::new(
            format!("tar -cf {} {path} to succeed", to.display()),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ));
    }
    Ok(())
}

/// Copies the file or directory `from` to `to` (which must not exist), keeping
/// permissions; links are not followed, sockets and the like skipped.
fn copy_tree(from: &Path, to: &Path) -> Result<(), Failure> {
    let copied = |p: &Path, e| io_failure(format!("{} copied", from.display()), p, e);
    let meta = std::fs::symlink_metadata(from).map_err(|e| copied(from, e))?;
    if meta.is_dir() {
        std::fs::create_dir_all(to).map_err(|e| copied(to, e))?;
        std::fs::set_permissions(to, meta.permissions()).map_err(|e| copied(to, e))?;
        for entry in std::fs::read_dir(from).map_err(|e| copied(from, e))? {
            let entry = entry.map_err(|e| copied(from, e))?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
    } else if meta.is_file() {
        // A single file saved first: `$WORK/saved` may not exist yet.
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| copied(parent, e))?;
        }
        std::fs::copy(from, to).map_err(|e| copied(to, e))?;
    }
    Ok(())
}

/// Removes the file or directory at `path` (nothing there is fine).
fn remove_tree(path: &Path) -> Result<(), Failure> {
    let result = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => Ok(()),
    };
    result.map_err(|e| io_failure(format!("{} removed", path.display()), path, e))
}

/// Every regular file under `root` (itself, when a file), sorted; `ext` keeps those
/// whose name ends in `.EXT`; gridd's `lock` files are left out.
pub(super) fn files_at(root: &Path, ext: Option<&str>) -> Result<Vec<PathBuf>, Failure> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| io_failure("files to damage".into(), &path, e))?;
        if meta.is_dir() {
            for entry in
                std::fs::read_dir(&path).map_err(|e| io_failure("a listing".into(), &path, e))?
            {
                stack.push(
                    entry
                        .map_err(|e| io_failure("a listing".into(), &path, e))?
                        .path(),
                );
            }
        } else if meta.is_file()
            && path.file_name().is_some_and(|n| n != "lock")
            && ext.is_none_or(|ext| path.extension().is_some_and(|e| e == ext))
        {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

fn saved(cx: &Context<'_>, name: &str) -> PathBuf {
    cx.work_dir().join("saved").join(name)
}

enum Storage {
    Save {
        host: String,
        path: String,
        name: String,
        tar: bool,
    },
    Restore {
        host: String,
        path: String,
        name: String,
    },
    Truncate {
        host: String,
        path: String,
        ext: Option<String>,
        bytes: Option<u64>,
    },
    RemoveFiles {
        host: String,
        path: String,
        ext: String,
    },
}

pub fn parse_save(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    let name = copy_name(node, "as")?;
    let tar = node.flag("tar")?.unwrap_or(false);
    Ok(Box::new(Storage::Save {
        host,
        path,
        name,
        tar,
    }))
}

pub fn parse_restore(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    let name = copy_name(node, "from")?;
    Ok(Box::new(Storage::Restore { host, path, name }))
}

pub fn parse_truncate(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    let ext = node.string("ext")?;
    let bytes = node.count("bytes")?;
    Ok(Box::new(Storage::Truncate {
        host,
        path,
        ext,
        bytes,
    }))
}

pub fn parse_remove_files(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    let ext = node.required("ext", "EXT, e.g. ext=\"jnl\"")?;
    Ok(Box::new(Storage::RemoveFiles { host, path, ext }))
}

/// The files `truncate` and `remove-files` act on: at least one.
fn chosen(
    cx: &Context<'_>,
    host: &str,
    path: &str,
    ext: Option<&str>,
) -> Result<Vec<PathBuf>, Failure> {
    let files = files_at(&cx.host_dir(host).join(path), ext)?;
    if files.is_empty() {
        return Err(Failure::new(
            format!("a file at {path}"),
            format!(
                "none{}",
                ext.map_or(String::new(), |e| format!(" ending in .{e}"))
            ),
        ));
    }
    Ok(files)
}

impl Step for Storage {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        match self {
            Storage::Save {
                host,
                path,
                name,
                tar,
            } => {
                let (from, to) = (cx.host_dir(host).join(path), saved(cx, name));
                if to.exists() {
                    return Err(Failure::new(
                        format!("no copy saved as `{name}` yet"),
                        "one is (names are written once)",
                    ));
                }
                if *tar {
                    archive(&cx.host_dir(host), path, &to)?;
                    cx.say(format_args!("{host}: {path} archived as {name} (tar)"));
                    return Ok(());
                }
                copy_tree(&from, &to)?;
                let files = files_at(&to, None)?.len();
                cx.say(format_args!(
                    "{host}: {path} saved as {name} ({files} files)"
                ));
            }
            Storage::Restore { host, path, name } => {
                let (from, to) = (saved(cx, name), cx.host_dir(host).join(path));
                if !from.exists() {
                    return Err(Failure::new(
                        format!("a copy saved as `{name}`"),
                        "no `save` step made one",
                    ));
                }
                remove_tree(&to)?;
                copy_tree(&from, &to)?;
                cx.say(format_args!("{host}: {path} put back from the copy {name}"));
            }
            Storage::Truncate {
                host,
                path,
                ext,
                bytes,
            } => {
                for file in chosen(cx, host, path, ext.as_deref())? {
                    let length = file
                        .metadata()
                        .map_err(|e| io_failure("a length".into(), &file, e))?
                        .len();
                    let keep = bytes.unwrap_or(length / 2).min(length);
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&file)
                        .and_then(|f| f.set_len(keep))
                        .map_err(|e| io_failure("a file cut".into(), &file, e))?;
                    let shown = cx.show_path(&file);
                    cx.say(format_args!("{shown}: cut to {keep} of {length} bytes"));
                }
            }
            Storage::RemoveFiles { host, path, ext } => {
                for file in chosen(cx, host, path, Some(ext))? {
                    std::fs::remove_file(&file)
                        .map_err(|e| io_failure("a file removed".into(), &file, e))?;
                    let shown = cx.show_path(&file);
                    cx.say(format_args!("{shown}: removed"));
                }
            }
        }
        Ok(())
    }
}

impl Retained for InputAnswer {
    fn replayed(&self) -> bool {
        self.replayed
    }

    fn unknown(&self) -> Option<&str> {
        (self.outcome == "unknown").then_some(self.detail.as_str())
    }
}

/// Re-sends `original` quietly: the answer its id gets now, and its JSON.
fn again(
    quiet: &Quiet,
    original: &InputAnswer,
    tag: &str,
) -> Result<(InputAnswer, serde_json::Value), Failure> {
    let what = format!("op {} re-sent", original.op);
    let output = quiet
        .output(&original.args(), tag)
        .map_err(|e| Failure::new(what.clone(), format!("{e:?}")))?;
    let json = json_of(&output, &what)?;
    Ok((original.again(&json), json))
}

/// Every input recorded with a definite answer: at least one.
fn recorded(cx: &Context<'_>) -> Result<Vec<InputAnswer>, Failure> {
    let originals = InputAnswer::originals(cx.work_dir())?;
    if originals.is_empty() {
        return Err(Failure::new(
            "inputs recorded with a definite answer",
            "none: `input` steps come first",
        ));
    }
    Ok(originals)
}

/// `expect-inputs-unchanged`.
struct InputsUnchanged;

pub fn parse_inputs_unchanged(_node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(InputsUnchanged))
}

impl Step for InputsUnchanged {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let originals = recorded(cx)?;
        let quiet = Quiet::new(cx);
        let mut archived = 0;
        for original in &originals {
            let (answer, json) = again(&quiet, original, &format!("unchanged-{}", original.op))?;
            answers_unchanged::check(
                &original.op,
                &mut Some(original.clone()),
                &answer,
                "re-sent",
            )?;
            if !answer.replayed {
                return Err(Failure::new(
                    format!(
                        "op {}'s answer marked replayed (nothing ran again)",
                        original.op
                    ),
                    answer.show(),
                ));
            }
            archived += usize::from(json.get("archived") == Some(&serde_json::Value::Bool(true)));
        }
        cx.say(format_args!(
            "{} ops re-sent: each answered as first given ({archived} from the archive)",
            originals.len()
        ));
        Ok(())
    }
}

/// `damage HOST "PATH" trials=N seed=S`.
struct Damage {
    host: String,
    path: String,
    trials: u64,
    seed: u64,
}

pub fn parse_damage(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    let trials = node
        .count("trials")?
        .ok_or_else(|| node.error("`damage` needs trials=N"))?;
    if trials == 0 || trials > DAMAGE_TRIALS_MAX {
        return Err(node.error(format!(
            "trials is 1 to DAMAGE_TRIALS_MAX ({DAMAGE_TRIALS_MAX})"
        )));
    }
    let seed = node.count("seed")?.ok_or_else(|| {
        node.error("`damage` needs seed=S (the same seed damages the same places)")
    })?;
    Ok(Box::new(Damage {
        host,
        path,
        trials,
        seed,
    }))
}

/// One seeded change to a file: a bit flipped or the file cut. Most of a preallocated
/// journal is zeros past what was written: half the flips fall in a file's first
/// 64 KiB, where what was written lies; one trial in four cuts instead.
fn damage_file(file: &Path, trial: u64, random: &mut Seeded) -> Result<Option<String>, Failure> {
    let failed = |e| io_failure("a file damaged".into(), file, e);
    let length = file.metadata().map_err(failed)?.len();
    if length == 0 {
        return Ok(None);
    }
    if trial % 4 == 3 {
        let keep = random.below(length);
        std::fs::OpenOptions::new()
            .write(true)
            .open(file)
            .and_then(|f| f.set_len(keep))
            .map_err(failed)?;
        return Ok(Some(format!("cut to {keep} of {length} bytes")));
    }
    let span = if trial.is_multiple_of(2) {
        length.min(64 * 1024)
    } else {
        length
    };
    let at = random.below(span);
    let bit = 1u8 << random.below(8);
    let mut bytes = std::fs::read(file).map_err(failed)?;
    bytes[at as usize] ^= bit;
    std::fs::write(file, &bytes).map_err(failed)?;
    Ok(Some(format!("byte {at} flipped ({bit:#04x})")))
}

impl Damage {
    /// Every recorded model's values now, by model.
    fn values(
        cx: &mut Context<'_>,
        originals: &[InputAnswer],
    ) -> Result<BTreeMap<String, serde_json::Value>, Failure> {
        let mut values = BTreeMap::new();
        for original in originals {
            if !values.contains_key(&original.model) {
                let json = gridctl_json(cx, &["inspect", "model", &original.model, "--json"])?;
                values.insert(original.model.clone(), json);
            }
        }
        Ok(values)
    }
}

impl Step for Damage {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let originals = recorded(cx)?;
        if !cx.host_running(&self.host) {
            return Err(Failure::new(
                format!("host `{}` running when `damage` begins", self.host),
                "it is not (its models' values are read first)",
            ));
        }
        let before = Self::values(cx, &originals)?;
        // The ledgers this host keeps: their views and every answer recorded.
        let ledgers = super::ledger::kept_at(cx.work_dir(), &self.host)?;
        let mut ledgers_before = Vec::new();
        for ledger in ledgers.keys() {
            let view = gridctl_json(
                cx,
                &["inspect", "ledger", ledger, "--host", &self.host, "--json"],
            )?;
            ledgers_before.push((format!("ledger {ledger}"), view));
        }
        cx.kill_host(&self.host)?;
        let host_dir = cx.host_dir(&self.host);
        let root = host_dir.join(&self.path);
        // The high-water mark as it stands now: a trial that starts may write (a read
        // that waits for an fsync, the checkpointer), raising it past the pristine copy,
        // so it is put back with the copy before each trial and at the end.
        let mark = host_dir.join("keys").join(HIGH_WATER_FILE);
        let mark_kept = std::fs::read(&mark).ok();
        let put_mark_back = || -> Result<(), Failure> {
            match &mark_kept {
                Some(bytes) => std::fs::write(&mark, bytes)
                    .map_err(|e| io_failure("the high-water mark put back".into(), &mark, e)),
                None => Ok(()),
            }
        };
        let pristine =
            cx.work_dir()
                .join("saved")
                .join(format!(".damage-{}-{}", self.host, cx.said_count()));
        copy_tree(&root, &pristine)?;
        let files = files_at(&pristine, None)?;
        if files.is_empty() {
            return Err(Failure::new(
                format!("files to damage under {}", self.path),
                "none",
            ));
        }
        let quiet = Quiet::new(cx);
        let mut random = Seeded::new(self.seed);
        let (mut refused, mut same, mut unknown) = (0, 0, 0);
        for trial in 0..self.trials {
            remove_tree(&root)?;
            copy_tree(&pristine, &root)?;
            put_mark_back()?;
            let picked = &files[random.below(files.len() as u64) as usize];
            let relative = picked.strip_prefix(&pristine).unwrap_or(picked);
            let file = root.join(relative);
            let Some(change) = damage_file(&file, trial, &mut random)? else {
                continue;
            };
            let shown = format!("{}/{}", self.path, relative.display());
            let damaged = relative
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            cx.hush();
            let started = cx.start_host_or_refusal(&self.host);
            cx.unhush();
            let names = [
                host_dir.display().to_string(),
                root.display().to_string(),
                damaged.clone(),
            ];
            let verdict = match started? {
                Some(output) => refused_or_same::check(
                    |a: &InputAnswer| a.op.as_str(),
                    &damaged,
                    &names,
                    Found::Refused { output: &output },
                )?,
                None => {
                    let mut answers = Vec::new();
                    for original in &originals {
                        let tag = format!("damage-{trial}-{}", original.op);
                        answers.push((original, again(&quiet, original, &tag)?.0));
                    }
                    let mut values = Vec::new();
                    let labels: Vec<String> = before
                        .keys()
                        .map(|model| format!("model {model}"))
                        .collect();
                    for ((model, was), label) in before.iter().zip(&labels) {
                        let now = quiet.json(
                            &["inspect", "model", model, "--json"],
                            &format!("damage-{trial}-model-{model}"),
                        )?;
                        values.push((label.as_str(), was, now));
                    }
                    let verdict = refused_or_same::check(
                        |a: &InputAnswer| a.op.as_str(),
                        &damaged,
                        &names,
                        Found::Started { answers, values },
                    );
                    let (mut answers, mut values) = (Vec::new(), Vec::new());
                    for ((ledger, kept), (label, was)) in ledgers.iter().zip(&ledgers_before) {
                        let tag = format!("damage-{trial}-ledger-{ledger}");
                        let now = super::ledger::looked_up(&quiet, &self.host, ledger, kept, &tag)?;
                        answers.extend(kept.iter().zip(now));
                        let view = quiet.json(
                            &["inspect", "ledger", ledger, "--host", &self.host, "--json"],
                            &tag,
                        )?;
                        values.push((label.as_str(), was, view));
                    }
                    let in_ledgers = refused_or_same::check(
                        |a: &super::ledger::Looked| a.op.as_str(),
                        &damaged,
                        &names,
                        Found::Started { answers, values },
                    );
                    cx.kill_host(&self.host)?;
                    match (verdict?, in_ledgers?) {
                        (Verdict::Same { unknown: a }, Verdict::Same { unknown: b }) => {
                            Verdict::Same { unknown: a + b }
                        }
                        (verdict, _) => verdict,
                    }
                }
            };
            let told = match verdict {
                Verdict::Refused => {
                    refused += 1;
                    "refused to start, naming it".to_owned()
                }
                Verdict::Same { unknown: 0 } => {
                    same += 1;
                    format!("started: {} answers as first given", originals.len())
                }
                Verdict::Same { unknown: n } => {
                    same += 1;
                    unknown += n;
                    let answers = if n == 1 { "answer" } else { "answers" };
                    format!(
                        "started: {n} {answers} `unknown` naming {damaged}, the rest as first given"
                    )
                }
            };
            cx.say(format_args!(
                "trial {}: {shown} {change} → {told}",
                trial + 1
            ));
        }
        remove_tree(&root)?;
        copy_tree(&pristine, &root)?;
        put_mark_back()?;
        remove_tree(&pristine)?;
        cx.say(format_args!(
            "{} trials: {same} started with the same answers ({unknown} answers unknown naming the damaged file), {refused} refused; {} put back",
            self.trials, self.path
        ));
        cx.start_host(&self.host, None)
    }
}
