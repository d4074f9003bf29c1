//! A full disk, as a plant's disk fills and an operator clears it (`crate::disks`):
//!
//! - `small-disk HOST mib=N` — before the reconcile that installs HOST: a tmpfs of N MiB
//!   is mounted at its directory (`<state>/hosts/HOST`), unmounted when the journey
//!   ends. Needs root.
//! - `fill-disk HOST leave-mib=N` — a filler file at the root of that disk grows until
//!   N MiB are left available.
//! - `free-disk HOST` — the filler is removed: the space returns, the host keeps
//!   running.

use super::Step;
use crate::context::Context;
use crate::error::Failure;
use crate::limits::SMALL_DISK_MIB_MAX;
use crate::step::{Node, ParseError};

enum Disk {
    Mount { host: String, mib: u64 },
    Fill { host: String, leave_mib: u64 },
    Free { host: String },
}

pub fn parse_small_disk(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let mib = node
        .count("mib")?
        .ok_or_else(|| node.error("`small-disk` needs its size: mib=N"))?;
    if mib == 0 || mib > SMALL_DISK_MIB_MAX {
        return Err(node.error(format!(
            "mib is 1 to SMALL_DISK_MIB_MAX ({SMALL_DISK_MIB_MAX})"
        )));
    }
    Ok(Box::new(Disk::Mount { host, mib }))
}

pub fn parse_fill_disk(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let leave_mib = node.count("leave-mib")?.ok_or_else(|| {
        node.error("`fill-disk` needs what to leave: leave-mib=N")
            .with_help("below the host's reserve (64 MiB) it refuses new work")
    })?;
    Ok(Box::new(Disk::Fill { host, leave_mib }))
}

pub fn parse_free_disk(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    Ok(Box::new(Disk::Free { host }))
}

impl Step for Disk {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        const MIB: u64 = 1024 * 1024;
        match self {
            Disk::Mount { host, mib } => {
                let dir = cx.host_dir(host);
                cx.disks().mount(host, &dir, *mib)?;
                let shown = cx.show_path(&dir);
                cx.say(format_args!("{shown}: a tmpfs of {mib} MiB"));
            }
            Disk::Fill { host, leave_mib } => {
                let left = cx.disks().fill(host, *leave_mib)?;
                cx.say(format_args!(
                    "{host}'s disk filled: {} MiB ({left} bytes) left",
                    left / MIB
                ));
            }
            Disk::Free { host } => {
                let left = cx.disks().free(host)?;
                cx.say(format_args!(
                    "{host}'s filler removed: {} MiB available",
                    left / MIB
                ));
            }
        }
        Ok(())
    }
}
