//! The wallet's own journal: `DIR/wallet/journal.jsonl` (directory 0700, file 0600),
//! one JSON [`Entry`] a line, appended and fsynced before anything is answered. At
//! open, a last line without its newline is a write that was never acknowledged (a
//! crash mid-write) and is cut off; any other line that does not decode refuses the
//! wallet, naming the file and line.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::WalletError;
use super::api::{Entry, Event, Proposal};
use crate::limits::WALLET_JOURNAL_ENTRIES_MAX;

/// The wallet's directory inside a host's directory.
pub const WALLET_DIR: &str = "wallet";
const JOURNAL_FILE: &str = "journal.jsonl";

pub struct Journal {
    path: PathBuf,
    file: File,
    entries: Vec<Entry>,
}

/// `DIR/wallet` (0700), made when missing, then synced into `dir`; weaker
/// permissions on it or anything in it refuse.
pub fn wallet_dir(dir: &Path) -> Result<PathBuf, WalletError> {
    let wallet = dir.join(WALLET_DIR);
    let existed = wallet.exists();
    crate::store::ensure_private_dir(&wallet)?;
    if !existed {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| WalletError::Io {
                path: wallet.clone(),
                source,
            })?;
    }
    Ok(wallet)
}

impl Journal {
    pub fn open(dir: &Path) -> Result<Journal, WalletError> {
        let path = wallet_dir(dir)?.join(JOURNAL_FILE);
        let io = |source| WalletError::Io {
            path: path.clone(),
            source,
        };
        let created = !path.exists();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        if created {
            file.sync_all().map_err(io)?;
            File::open(path.parent().expect("in the wallet directory"))
                .and_then(|d| d.sync_all())
                .map_err(io)?;
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).map_err(io)?;
        let complete = text.rfind('\n').map_or(0, |i| i + 1);
        if complete < text.len() {
            // A torn last write, never acknowledged: cut off.
            file.set_len(complete as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        let mut entries = Vec::new();
        for (n, line) in text[..complete].lines().enumerate() {
            let entry: Entry = serde_json::from_str(line).map_err(|e| WalletError::Corrupt {
                path: path.clone(),
                line: n + 1,
                reason: e.to_string(),
            })?;
            entries.push(entry);
        }
        Ok(Journal {
            path,
            file,
            entries,
        })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The position of the last entry (0: none yet).
    pub fn position(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.position)
    }

    pub fn proposals(&self) -> Vec<Proposal> {
        self.entries
            .iter()
            .filter_map(|e| match &e.event {
                Event::Proposed { proposal } => Some(proposal.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn proposal(&self, id: &str) -> Option<Proposal> {
        self.proposals().into_iter().find(|p| p.id == id)
    }

    /// Whether an entry matching `pick` is journaled.
    pub fn holds(&self, pick: impl Fn(&Event) -> bool) -> bool {
        self.entries.iter().any(|e| pick(&e.event))
    }

    /// Appends `event` and fsyncs it; answered only once durable.
    pub fn append(&mut self, event: Event, at_ms: u64) -> Result<Entry, WalletError> {
        if self.entries.len() >= WALLET_JOURNAL_ENTRIES_MAX {
            return Err(WalletError::Limit(format!(
                "the wallet's journal holds WALLET_JOURNAL_ENTRIES_MAX ({WALLET_JOURNAL_ENTRIES_MAX}) entries"
            )));
        }
        let entry = Entry {
            position: self.position() + 1,
            at_ms,
            event,
        };
        let mut line = serde_json::to_vec(&entry).expect("entries serialize");
        line.push(b'\n');
        let io = |source| WalletError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&line).map_err(io)?;
        crate::metrics::fsync(|| self.file.sync_data()).map_err(io)?;
        self.entries.push(entry.clone());
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_a_reopen_and_a_torn_last_line_is_cut_off() {
        let dir = std::env::temp_dir().join(format!("grid-wallet-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut journal = Journal::open(&dir).unwrap();
        let event = Event::Submitted {
            proposal: "p".to_owned(),
            request: "wallet-p".to_owned(),
        };
        assert_eq!(journal.append(event.clone(), 5).unwrap().position, 1);
        drop(journal);
        let path = dir.join(WALLET_DIR).join(JOURNAL_FILE);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"{\"position\":2,\"at").unwrap();
        drop(file);
        let mut journal = Journal::open(&dir).unwrap();
        assert_eq!(journal.entries().len(), 1);
        assert_eq!(journal.entries()[0].event, event);
        assert_eq!(journal.append(event, 6).unwrap().position, 2);
        assert_eq!(Journal::open(&dir).unwrap().position(), 2);
        // A complete line that does not decode refuses, naming its line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"nonsense\n")
            .unwrap();
        let refused = Journal::open(&dir).err().expect("refused").to_string();
        assert!(refused.contains("line 3"), "{refused}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
