//! What an installation held, kept outside its store: the name of every model it ever
//! installed, one per line in `DIR/keys/held-models`, and of every ledger, in
//! `DIR/keys/held-ledgers` (0600, synced, replaced atomically). The host adds a name
//! after the store commits its install and before the answer leaves, and adds every
//! model and ledger its store holds at each open (what a stop between the two, or an
//! installation from before these files, left out).
//!
//! A store that lost a model or a ledger — replaced, or created afresh with its marks
//! removed — so cannot make the reconciler plan it afresh (which would number a model's
//! batches from 1 and run its input ids again, or answer a ledger's transfer ids as
//! new, SPEC principle 2): the reconciler reads these files and asks for attention
//! instead. Invariant, stated as an absence: no model's or ledger's install is answered
//! before its name is in its file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The file in the installation's custody directory naming its models.
pub const HELD_MODELS_FILE: &str = "held-models";
/// The file in the installation's custody directory naming its ledgers.
pub const HELD_LEDGERS_FILE: &str = "held-ledgers";

/// `DIR/keys/held-models`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join("keys").join(HELD_MODELS_FILE)
}

/// `DIR/keys/held-ledgers`.
pub fn ledgers_path(dir: &Path) -> PathBuf {
    dir.join("keys").join(HELD_LEDGERS_FILE)
}

/// The models the installation at `dir` ever held (none when the file is absent).
pub fn read(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    read_at(&path(dir))
}

/// The ledgers the installation at `dir` ever held (none when the file is absent).
pub fn read_ledgers(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    read_at(&ledgers_path(dir))
}

fn read_at(path: &Path) -> std::io::Result<BTreeSet<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeSet::new()),
        Err(e) => Err(e),
    }
}

/// Adds the models `names` to their file (written only when one is new).
pub fn record<'a>(dir: &Path, names: impl IntoIterator<Item = &'a str>) -> std::io::Result<()> {
    record_at(&path(dir), names)
}

/// Adds the ledgers `names` to their file (written only when one is new).
pub fn record_ledgers<'a>(
    dir: &Path,
    names: impl IntoIterator<Item = &'a str>,
) -> std::io::Result<()> {
    record_at(&ledgers_path(dir), names)
}

fn record_at<'a>(path: &Path, names: impl IntoIterator<Item = &'a str>) -> std::io::Result<()> {
    let mut held = read_at(path)?;
    let before = held.len();
    held.extend(names.into_iter().map(str::to_owned));
    if held.len() == before {
        return Ok(());
    }
    let text: String = held.iter().map(|n| format!("{n}\n")).collect();
    super::write_private(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_added_once_and_read_back_and_a_missing_file_holds_none() {
        let dir = std::env::temp_dir().join(format!("grid-held-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("keys")).unwrap();
        assert!(read(&dir).unwrap().is_empty());
        record(&dir, ["counter", "boiler"]).unwrap();
        record(&dir, ["counter"]).unwrap();
        record_ledgers(&dir, ["books"]).unwrap();
        assert_eq!(read_ledgers(&dir).unwrap().len(), 1);
        let held = read(&dir).unwrap();
        assert_eq!(
            held.into_iter().collect::<Vec<_>>(),
            vec!["boiler".to_owned(), "counter".to_owned()]
        );
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&path(&dir).metadata().unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
