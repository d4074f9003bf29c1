//! Tampering with a host's installation, as an intruder or a careless operator would:
//! the host must then refuse to start (SPEC §1.6). Paths are relative to the host's
//! directory (`<state>/hosts/HOST`).
//!
//! - `chmod HOST "PATH" mode="644"` — sets the permission bits (octal).
//! - `replace-key HOST "FILE"` — overwrites `keys/FILE` with another well-formed key
//!   (fresh bytes, same format), keeping its permissions.
//! - `remove HOST "PATH"` — deletes a file, or a directory with all it holds.
//! - `edit HOST "PATH" from="TEXT" to="TEXT"` — replaces the first occurrence of TEXT,
//!   which must be present.
//! - `place HOST "PATH" from="FILE"` — copies FILE (relative to the journey file, e.g. a
//!   J1939 capture of `adapters/tests/data/`) to PATH, private (0600), as an operator
//!   puts a file a tag reads (`log=`) into the host's directory.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::Step;
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

enum Tamper {
    Chmod {
        host: String,
        path: String,
        mode: u32,
    },
    ReplaceKey {
        host: String,
        file: String,
    },
    Remove {
        host: String,
        path: String,
    },
    Edit {
        host: String,
        path: String,
        from: String,
        to: String,
    },
    Place {
        host: String,
        path: String,
        from: PathBuf,
    },
}

/// The host and a path inside its directory (never leaving it).
pub(super) fn relative(node: &mut Node<'_>) -> Result<(String, String), ParseError> {
    let host = node.host("a host name")?;
    let path = node.argument("a path inside the host directory")?;
    if path.starts_with('/') || path.split('/').any(|c| c == "..") {
        return Err(node.error(format!("`{path}` must stay inside the host directory")));
    }
    Ok((host, path))
}

pub fn parse_chmod(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    let text = node
        .string("mode")?
        .ok_or_else(|| node.error("`chmod` needs mode=\"OCTAL\", e.g. mode=\"644\""))?;
    let mode = u32::from_str_radix(&text, 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| node.error(format!("mode `{text}` is not octal permission bits")))?;
    Ok(Box::new(Tamper::Chmod { host, path, mode }))
}

pub fn parse_replace_key(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let file = node.argument("a key file name, e.g. \"signing.key\"")?;
    if file.contains('/') {
        return Err(node.error("a key file name, not a path: keys live in `keys/`"));
    }
    Ok(Box::new(Tamper::ReplaceKey { host, file }))
}

pub fn parse_remove(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    Ok(Box::new(Tamper::Remove { host, path }))
}

pub fn parse_edit(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    let from = node.required("from", "TEXT")?;
    let to = node.required("to", "TEXT")?;
    Ok(Box::new(Tamper::Edit {
        host,
        path,
        from,
        to,
    }))
}

pub fn parse_place(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let (host, path) = relative(node)?;
    let file = node.required("from", "FILE")?;
    let from = node.cx().journey_dir().join(&file);
    if !from.is_file() {
        return Err(node
            .error(format!("`{}` is not a file", from.display()))
            .with_help("from= is relative to the journey file, e.g. from=\"../adapters/tests/data/j1939/bam.log\""));
    }
    Ok(Box::new(Tamper::Place { host, path, from }))
}

pub(super) fn io_failure(what: String, path: &std::path::Path, e: std::io::Error) -> Failure {
    Failure::new(what, format!("{}: {e}", path.display()))
}

impl Step for Tamper {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        match self {
            Tamper::Chmod { host, path, mode } => {
                let full: PathBuf = cx.host_dir(host).join(path);
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(*mode))
                    .map_err(|e| io_failure(format!("to chmod {path}"), &full, e))?;
                cx.say(format_args!("{host}: {path} is now {mode:o}"));
            }
            Tamper::ReplaceKey { host, file } => {
                let full = cx.host_dir(host).join("keys").join(file);
                let old = std::fs::read_to_string(&full)
                    .map_err(|e| io_failure(format!("to read key {file}"), &full, e))?;
                if old.trim_start().starts_with("-----BEGIN") {
                    // A PEM PKCS#8 key: another well-formed one of the same algorithm.
                    let algorithm = if file == "mail.key" {
                        "x25519"
                    } else {
                        "ed25519"
                    };
                    let output = std::process::Command::new("openssl")
                        .args(["genpkey", "-algorithm", algorithm])
                        .output()
                        .map_err(|e| Failure::new("openssl to run", e.to_string()))?;
                    if !output.status.success() {
                        return Err(Failure::new(
                            "openssl to generate a key",
                            String::from_utf8_lossy(&output.stderr).into_owned(),
                        ));
                    }
                    std::fs::write(&full, output.stdout)
                        .map_err(|e| io_failure(format!("to replace key {file}"), &full, e))?;
                    cx.say(format_args!("{host}: keys/{file} replaced by another key"));
                    return Ok(());
                }
                // Another well-formed key in the older hex form: every hex digit shifted
                // by one.
                let new: String = old
                    .trim()
                    .chars()
                    .map(|c| match c.to_digit(16) {
                        Some(d) => std::char::from_digit((d + 1) % 16, 16).unwrap_or('0'),
                        None => c,
                    })
                    .collect();
                std::fs::write(&full, new)
                    .map_err(|e| io_failure(format!("to replace key {file}"), &full, e))?;
                cx.say(format_args!("{host}: keys/{file} replaced by another key"));
            }
            Tamper::Remove { host, path } => {
                let full = cx.host_dir(host).join(path);
                if full.is_dir() {
                    std::fs::remove_dir_all(&full)
                } else {
                    std::fs::remove_file(&full)
                }
                .map_err(|e| io_failure(format!("to remove {path}"), &full, e))?;
                cx.say(format_args!("{host}: {path} removed"));
            }
            Tamper::Edit {
                host,
                path,
                from,
                to,
            } => {
                let full = cx.host_dir(host).join(path);
                let text = std::fs::read_to_string(&full)
                    .map_err(|e| io_failure(format!("to read {path}"), &full, e))?;
                if !text.contains(from.as_str()) {
                    return Err(Failure::new(
                        format!("{path} to contain {from:?}"),
                        text.trim().to_string(),
                    ));
                }
                std::fs::write(&full, text.replacen(from.as_str(), to, 1))
                    .map_err(|e| io_failure(format!("to edit {path}"), &full, e))?;
                cx.say(format_args!("{host}: {path}: {from:?} -> {to:?}"));
            }
            Tamper::Place { host, path, from } => {
                let full = cx.host_dir(host).join(path);
                let bytes = std::fs::copy(from, &full)
                    .map_err(|e| io_failure(format!("to place {path}"), &full, e))?;
                // Private, as everything in a host's directory (the host refuses weaker).
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| io_failure(format!("to chmod {path}"), &full, e))?;
                cx.say(format_args!("{host}: {path} placed ({bytes} bytes)"));
            }
        }
        Ok(())
    }
}
