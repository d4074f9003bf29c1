//! Small disks for hosts (`small-disk`, `fill-disk`, `free-disk`; the steps live in
//! `steps/disk.rs`): a size-limited tmpfs mounted at a host's directory before the host
//! is installed, so a journey can fill the filesystem holding its store and give the
//! space back, as a full disk does and an operator's clean-up undoes.
//!
//! The filler is one file, `FILLER` at the root of the mount (the host's directory,
//! beside `store/` and `keys/`), private like the rest (gridd refuses a weaker file
//! there). Every mount is unmounted (`umount -l`) when the journey ends, after its
//! hosts are killed — also on failure or panic ([`Disks`] is a drop guard inside the
//! runner's `Context`, declared after the hosts). Mounting needs root, as the
//! journeys' network namespaces do; without it the step fails saying so.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::Failure;
use crate::process::describe_status;

/// The file `fill-disk` writes at the root of a small disk.
pub const FILLER: &str = ".journey-filler";
const MIB: u64 = 1024 * 1024;

/// The small disks of one journey, by host.
#[derive(Default)]
pub struct Disks {
    mounted: BTreeMap<String, PathBuf>,
}

/// Bytes an unprivileged writer may still use on the filesystem holding `path`.
pub fn available_bytes(path: &Path) -> Result<u64, Failure> {
    let output = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()
        .map_err(|e| Failure::new("df to run", e.to_string()))?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .nth(1)
        .and_then(|line| line.trim().parse().ok())
        .ok_or_else(|| {
            Failure::new(
                format!("df to report the space left at {}", path.display()),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        })
}

impl Disks {
    /// Mounts a tmpfs of `mib` MiB (mode 0700) at `dir`, which must not exist yet or
    /// be empty (the host is not installed there yet).
    pub fn mount(&mut self, host: &str, dir: &Path, mib: u64) -> Result<(), Failure> {
        let expected = format!("a {mib} MiB tmpfs mounted at host `{host}`'s directory");
        if self.mounted.contains_key(host) {
            return Err(Failure::new(expected, "the host has a small disk already"));
        }
        if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(Failure::new(
                expected,
                format!(
                    "{} holds files already: `small-disk` comes before the reconcile that installs the host",
                    dir.display()
                ),
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::new(expected.clone(), format!("{}: {e}", dir.display())))?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={}m,mode=0700", mib)])
            .arg("tmpfs")
            .arg(dir)
            .output()
            .map_err(|e| Failure::new(expected.clone(), format!("mount did not run: {e}")))?;
        if !output.status.success() {
            return Err(Failure::new(
                expected,
                format!(
                    "mount {} (mounting a tmpfs needs root, as CI runs): {}",
                    describe_status(&output.status),
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
            ));
        }
        self.mounted.insert(host.to_owned(), dir.to_owned());
        Ok(())
    }

    fn root(&self, host: &str) -> Result<&Path, Failure> {
        self.mounted.get(host).map(PathBuf::as_path).ok_or_else(|| {
            Failure::new(
                format!("host `{host}` to have a small disk"),
                "no `small-disk` step mounted one for it",
            )
        })
    }

    /// Writes the filler until `leave_mib` MiB are left available; answers what is left.
    pub fn fill(&self, host: &str, leave_mib: u64) -> Result<u64, Failure> {
        let root = self.root(host)?;
        let filler = root.join(FILLER);
        let failed = |e: std::io::Error| {
            Failure::new(
                format!("the filler {} written", filler.display()),
                e.to_string(),
            )
        };
        // Private, as everything in a host's directory (gridd refuses weaker).
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&filler)
            .map_err(failed)?;
        let chunk = vec![0u8; MIB as usize];
        let mut missing = available_bytes(root)?.saturating_sub(leave_mib * MIB);
        while missing > 0 {
            let n = missing.min(MIB) as usize;
            file.write_all(&chunk[..n]).map_err(failed)?;
            missing -= n as u64;
        }
        file.sync_all().map_err(failed)?;
        let left = available_bytes(root)?;
        if left > leave_mib * MIB + MIB {
            return Err(Failure::new(
                format!("at most {leave_mib} MiB left on host `{host}`'s small disk"),
                format!("{left} bytes left after filling"),
            ));
        }
        Ok(left)
    }

    /// Removes the filler; answers the bytes available after.
    pub fn free(&self, host: &str) -> Result<u64, Failure> {
        let root = self.root(host)?;
        let filler = root.join(FILLER);
        std::fs::remove_file(&filler).map_err(|e| {
            Failure::new(
                format!("the filler {} removed", filler.display()),
                e.to_string(),
            )
        })?;
        available_bytes(root)
    }

    /// Unmounts every small disk (lazily: a process still holding a file cannot keep
    /// it mounted). Answers a line per disk for the story.
    pub fn unmount_all(&mut self) -> Vec<String> {
        std::mem::take(&mut self.mounted)
            .into_iter()
            .map(
                |(host, dir)| match Command::new("umount").arg("-l").arg(&dir).status() {
                    Ok(status) if status.success() => format!("small disk of {host} unmounted"),
                    Ok(status) => format!(
                        "small disk of {host}: umount {} ({})",
                        describe_status(&status),
                        dir.display()
                    ),
                    Err(e) => format!("small disk of {host}: umount did not run: {e}"),
                },
            )
            .collect()
    }
}

impl Drop for Disks {
    fn drop(&mut self) {
        self.unmount_all();
    }
}
