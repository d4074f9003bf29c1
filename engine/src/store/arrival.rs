//! A transferred installation's arrival (docs/transfer.md, "Arrival"): the manifest a
//! transfer verified — every file's path, size, SHA-256 and permissions — is left at
//! the destination (`DIR/transfer.manifest`, 0600); the destination's first open checks
//! the installation's files against it before its store opens (a file changed, added or
//! missing since refuses the start), and once its custody signs, the host signs that
//! check with its own key: a statement of what arrived, from where, checked when,
//! verifiable offline with its custody manifest (`gridctl status --host H` verifies
//! it; this module, on the ground floor, reads no custody).
//!
//! Invariants, stated as absences: no transferred installation is served whose files
//! differ from the manifest its transfer verified, or whose manifest differs from the
//! digest its record holds; no arrival is signed that was not checked first; none is
//! signed twice.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::high_water::Signer;
use super::transfer::{self, Line, Record, Role, Step, TransferError};

/// The verified manifest a transfer leaves at its destination.
pub const MANIFEST_FILE: &str = "transfer.manifest";
/// What the host's signature covers before the statement.
const SIGNED_CONTEXT: &str = "grid-transfer-arrival/1";

/// A destination's first open after its transfer, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    /// When the files were checked against the manifest (Unix ms).
    pub checked_ms: u64,
    /// Ed25519 over [`statement`] by the host's signing key of `generation`, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u32>,
}

/// The statement host `host` signs of `record`'s arrival, checked at `checked_ms`.
pub fn statement(host: &str, record: &Record, checked_ms: u64) -> Vec<u8> {
    format!(
        "{SIGNED_CONTEXT}\nhost {host}\nop {}\nsource {}\ndestination {}\nfiles {}\nbytes {}\nmanifest {}\nchecked {checked_ms}\n",
        record.op,
        record.source.display(),
        record.served_at().display(),
        record.files,
        record.bytes,
        record.digest.as_deref().unwrap_or_default()
    )
    .into_bytes()
}

/// Writes the verified manifest into the destination (0600, synced).
pub(super) fn write_manifest(destination: &Path, lines: &[Line]) -> Result<(), TransferError> {
    let text: String = lines
        .iter()
        .map(|(path, size, sha256, mode)| format!("{path}\t{size}\t{sha256}\t{mode:o}\n"))
        .collect();
    let path = destination.join(MANIFEST_FILE);
    super::write_private(&path, text.as_bytes())
        .map_err(|source| TransferError::Io { path, source })
}

fn read_manifest(dir: &Path) -> Result<Vec<Line>, String> {
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            let fields: Vec<&str> = line.split('\t').collect();
            let parsed = match fields.as_slice() {
                [path, size, sha256, mode] => size
                    .parse()
                    .ok()
                    .zip(u32::from_str_radix(mode, 8).ok())
                    .map(|(size, mode)| ((*path).to_owned(), size, (*sha256).to_owned(), mode)),
                _ => None,
            };
            parsed.ok_or_else(|| format!("{}: line {} does not read", path.display(), n + 1))
        })
        .collect()
}

/// At the first open of a transferred installation (its record `activated`, no
/// arrival yet): its files checked against the manifest its transfer verified, the
/// manifest against its record's digest, then the check recorded. `Ok(Some(what))`
/// when it checked now; `Err(why)` refuses the start.
pub fn check(dir: &Path) -> Result<Option<String>, String> {
    let Some(mut record) = transfer::record(dir).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    if record.role != Role::Destination
        || record.step != Step::Activated
        || record.arrival.is_some()
    {
        return Ok(None);
    }
    if !dir.join(MANIFEST_FILE).exists() {
        // A transfer made before arrivals were checked left no manifest.
        return Ok(None);
    }
    let lines = read_manifest(dir)?;
    let (files, bytes, digest) = transfer::compare_arrived(dir, &lines).map_err(|e| {
        format!("{e}: this installation differs from the manifest its transfer (op {}) verified; it is not served", record.op)
    })?;
    if record.digest.as_deref() != Some(digest.as_str()) {
        return Err(format!(
            "{}: its digest sha256:{digest} is not the one the transfer (op {}) recorded; it is not served",
            dir.join(MANIFEST_FILE).display(),
            record.op
        ));
    }
    record.arrival = Some(Arrival {
        checked_ms: super::now_ms(),
        signature: None,
        generation: None,
    });
    transfer::write_record(dir, &record).map_err(|e| e.to_string())?;
    Ok(Some(format!(
        "transferred installation (op {}) checked against its manifest before anything is served: {files} files, {bytes} bytes, sha256:{digest}",
        record.op
    )))
}

/// Signs the checked arrival of the installation at `dir` (host `host`) with `sign`,
/// once. `Ok(Some(what))` when it signed now.
pub fn sign(dir: &Path, host: &str, sign: &Signer) -> Result<Option<String>, String> {
    let Some(mut record) = transfer::record(dir).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let Some(arrival) = record.arrival.clone().filter(|a| a.signature.is_none()) else {
        return Ok(None);
    };
    let (generation, signature) = sign(&statement(host, &record, arrival.checked_ms))?;
    record.arrival = Some(Arrival {
        signature: Some(hex::encode(signature)),
        generation: Some(generation),
        ..arrival
    });
    transfer::write_record(dir, &record).map_err(|e| e.to_string())?;
    Ok(Some(format!(
        "the arrival of transfer {} signed (key generation {generation})",
        record.op
    )))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::DirBuilderExt;
    use std::path::PathBuf;

    use super::*;
    use crate::store::Failpoints;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("grid-arrival-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// An installation moved from `name`.source to `name`.destination: the destination.
    fn arrived(name: &str) -> PathBuf {
        let (source, destination) = (dir(&format!("{name}-source")), dir(&format!("{name}-dest")));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(source.join("store"))
            .unwrap();
        super::super::write_private(&source.join("host.toml"), b"name = \"a\"\n").unwrap();
        super::super::write_private(&source.join("store/data"), b"journal").unwrap();
        let idle = |_: &Path| Ok::<(), String>(());
        transfer::transfer(&source, &destination, "t1", idle, &Failpoints::default()).unwrap();
        destination
    }

    #[test]
    fn the_first_open_checks_every_file_against_the_manifest_then_signs_once() {
        let destination = arrived("ok");
        assert!(destination.join(MANIFEST_FILE).exists());
        let signer: Signer = std::sync::Arc::new(|_: &[u8]| Ok((1, [7u8; 64])));
        // Not checked yet: nothing to sign.
        assert_eq!(sign(&destination, "a", &signer).unwrap(), None);
        let said = check(&destination).unwrap().expect("checked now");
        assert!(said.contains("2 files"), "{said}");
        // Checked once: later opens (which write into the store) are not checked again.
        super::super::write_private(&destination.join("store/data"), b"grown").unwrap();
        assert_eq!(check(&destination).unwrap(), None);
        let counting: Signer = std::sync::Arc::new(move |message: &[u8]| {
            assert!(message.starts_with(b"grid-transfer-arrival/1\nhost a\nop t1\n"));
            Ok((3, [9u8; 64]))
        });
        assert!(sign(&destination, "a", &counting).unwrap().is_some());
        assert_eq!(
            sign(&destination, "a", &signer).unwrap(),
            None,
            "signed once"
        );
        let record = transfer::record(&destination).unwrap().unwrap();
        let arrival = record.arrival.unwrap();
        assert_eq!(arrival.generation, Some(3));
        assert_eq!(
            arrival.signature.as_deref(),
            Some(hex::encode([9u8; 64]).as_str())
        );
    }

    #[test]
    fn a_file_changed_added_or_missing_since_the_transfer_refuses_the_first_open() {
        for (name, tamper) in [
            (
                "changed",
                (|d: &Path| std::fs::write(d.join("store/data"), b"other"))
                    as fn(&Path) -> std::io::Result<()>,
            ),
            ("added", |d: &Path| {
                std::fs::write(d.join("store/extra"), b"x")
            }),
            ("missing", |d: &Path| {
                std::fs::remove_file(d.join("host.toml"))
            }),
        ] {
            let destination = arrived(name);
            tamper(&destination).unwrap();
            let refused = check(&destination).unwrap_err();
            assert!(
                refused.contains("differs from the manifest its transfer (op t1)"),
                "{name}: {refused}"
            );
            assert!(
                transfer::record(&destination)
                    .unwrap()
                    .unwrap()
                    .arrival
                    .is_none()
            );
        }
        // A manifest edited to match tampered files no longer matches the record's digest.
        let destination = arrived("manifest");
        std::fs::write(destination.join("store/data"), b"other").unwrap();
        let lines = transfer::manifest(&destination).unwrap();
        write_manifest(&destination, &lines).unwrap();
        let refused = check(&destination).unwrap_err();
        assert!(
            refused.contains("is not the one the transfer (op t1) recorded"),
            "{refused}"
        );
    }
}
