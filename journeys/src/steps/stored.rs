//! Searching a host's store files for bytes that must (or must not) be there:
//!
//! - `expect-stored-text HOST text="TEXT" present=#true|#false` — searches every file
//!   under HOST's `store/` for TEXT's bytes.
//! - `expect-plaintext HOST route="R" present=#false|#true` — the values of route R, as
//!   a plain route stores them (see [`Plaintext`]).

use std::path::{Path, PathBuf};

use kdl::KdlValue;

use super::Step;
use super::delivered::{held, route_view};
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

/// Every file under `dir`, recursively (none if it cannot be read).
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                files_under(&path, out);
            } else {
                out.push(path);
            }
        }
    }
}

// ---- expect-stored-text --------------------------------------------------------------

struct StoredText {
    host: String,
    text: String,
    present: bool,
}

pub fn parse_stored_text(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let text = node.required("text", "TEXT")?;
    if text.len() < 8 {
        return Err(node.error(
            "`text` needs at least 8 bytes: a shorter one may be found in any binary file",
        ));
    }
    let present = node
        .flag("present")?
        .ok_or_else(|| node.error("`expect-stored-text` needs present=#true or #false"))?;
    Ok(Box::new(StoredText {
        host,
        text,
        present,
    }))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, _)) = needle.split_first() else {
        return true;
    };
    haystack
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == first)
        .any(|(i, _)| haystack[i..].starts_with(needle))
}

impl Step for StoredText {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let store = cx.host_dir(&self.host).join("store");
        let mut files = Vec::new();
        files_under(&store, &mut files);
        files.sort();
        let mut bytes = 0usize;
        let mut found = Vec::new();
        for file in &files {
            let Ok(content) = std::fs::read(file) else {
                continue;
            };
            bytes += content.len();
            if contains(&content, self.text.as_bytes()) {
                found.push(cx.show_path(file));
            }
        }
        if files.is_empty() {
            return Err(Failure::new(
                format!("files under {}", cx.show_path(&store)),
                "none",
            ));
        }
        match (self.present, found.is_empty()) {
            (true, true) => Err(Failure::new(
                format!("{:?} in {}'s store files", self.text, self.host),
                format!("not found in {} files ({bytes} bytes)", files.len()),
            )),
            (false, false) => Err(Failure::new(
                format!("no {:?} in {}'s store files", self.text, self.host),
                format!("found in {}", found.join(", ")),
            )),
            (true, false) => {
                cx.say(format_args!(
                    "{}: {:?} is readable in {} of its {} store files",
                    self.host,
                    self.text,
                    found.len(),
                    files.len()
                ));
                Ok(())
            }
            (false, true) => {
                cx.say(format_args!(
                    "{}: {:?} is in none of its {} store files ({bytes} bytes)",
                    self.host,
                    self.text,
                    files.len()
                ));
                Ok(())
            }
        }
    }
}

// ---- expect-plaintext -----------------------------------------------------------------

/// `expect-plaintext HOST route="R" present=#false|#true` — every value of R's
/// sequence (read at its publisher) is searched for in every file under HOST's store,
/// as its 8 big-endian bytes (the form a plain route stores): with `present=#false` none
/// may be found (an encrypted route's recipient journals sealed values only); with
/// `present=#true` the newest must be (the check's own control, on a plain route).
/// Only values whose 8 bytes hold at most two zero bytes are searched: a value like
/// 2.25 (`40 02 00 00 00 00 00 00`) also reads as a small integer in any binary file.
struct Plaintext {
    host: String,
    route: String,
    present: bool,
}

pub fn parse_plaintext(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let route = node.required("route", "R")?;
    let present = match node.property("present")?.map(|e| e.value().clone()) {
        Some(KdlValue::Bool(b)) => b,
        _ => return Err(node.error("`expect-plaintext` needs present=#true or #false")),
    };
    Ok(Box::new(Plaintext {
        host,
        route,
        present,
    }))
}

impl Step for Plaintext {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let (publisher, ..) = route_view(cx, &self.route)?;
        let sequence = held(cx, &self.route, &publisher)?;
        let mut files = Vec::new();
        files_under(&cx.host_dir(&self.host).join("store"), &mut files);
        let contents: Vec<(PathBuf, Vec<u8>)> = files
            .into_iter()
            .filter_map(|f| std::fs::read(&f).ok().map(|b| (f, b)))
            .collect();
        // One pass over each file: every 8-byte window looked up among the values'
        // big-endian encodings (sorted; a first-byte table skips most windows).
        let search = |values: &[f64]| -> Option<(f64, PathBuf)> {
            let mut needles: Vec<u64> = values.iter().map(|v| v.to_bits()).collect();
            needles.sort_unstable();
            let mut first = [false; 256];
            for n in &needles {
                first[(n >> 56) as usize] = true;
            }
            for (file, bytes) in &contents {
                for w in bytes.windows(8) {
                    if !first[w[0] as usize] {
                        continue;
                    }
                    let bits = u64::from_be_bytes(<[u8; 8]>::try_from(w).expect("8 bytes"));
                    if needles.binary_search(&bits).is_ok() {
                        return Some((f64::from_bits(bits), file.clone()));
                    }
                }
            }
            None
        };
        let distinctive = |v: &f64| v.to_be_bytes().iter().filter(|b| **b == 0).count() <= 2;
        if self.present {
            let Some((position, value)) = sequence.last().filter(|(_, v)| distinctive(v)) else {
                return Err(Failure::new("a value published on the route", "none"));
            };
            if search(&[*value]).is_none() {
                return Err(Failure::new(
                    format!(
                        "{value} (position {position}) in {}'s store files",
                        self.host
                    ),
                    format!("not found in {} files", contents.len()),
                ));
            }
            cx.say(format_args!(
                "{}: the newest value {value} is readable in its store (a plain route)",
                self.host
            ));
            return Ok(());
        }
        let checked: Vec<&(u64, f64)> = sequence.iter().filter(|(_, v)| distinctive(v)).collect();
        if checked.is_empty() {
            return Err(Failure::new(
                format!(
                    "values of route {} distinctive enough to search for",
                    self.route
                ),
                "none (publish values with a busy mantissa, e.g. 1/3)",
            ));
        }
        let values: Vec<f64> = checked.iter().map(|(_, v)| *v).collect();
        if let Some((value, file)) = search(&values) {
            let position = checked
                .iter()
                .find(|(_, v)| *v == value)
                .map_or(0, |(p, _)| *p);
            return Err(Failure::new(
                format!(
                    "no plaintext of route {} in {}'s store files",
                    self.route, self.host
                ),
                format!("{value} (position {position}) in {}", cx.show_path(&file)),
            ));
        }
        cx.say(format_args!(
            "{}: none of {} values of {} (of {}) is readable in its {} store files",
            self.host,
            checked.len(),
            self.route,
            sequence.len(),
            contents.len()
        ));
        Ok(())
    }
}
