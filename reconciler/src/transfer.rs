//! `~ host H: transfer installation A -> B` (SPEC C11, docs/transfer.md): applying it
//! runs the engine's transfer of the installation (`grid_engine::store::transfer`:
//! prepare — then a gridd serving it alone is stopped —, copy, verify, activate,
//! retire, each journaled in the source), then points `<state>/hosts/H` at the destination. When
//! the installation was the state directory's own `hosts/H`, the link and that
//! directory are exchanged atomically (`renameat2(RENAME_EXCHANGE)`) and the retired
//! source is kept as `<state>/transferred/H.OP`: there is never a moment without
//! `hosts/H`, so no plan ever reads a moved host as a missing one. Back into the state
//! directory (the files name no `dir`), the copy is made beside the link
//! ([`observe::returning`]) and then exchanged with it the same way, the link removed.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use grid_engine::host::control::Client;
use grid_engine::store::Failpoints;
use grid_engine::store::transfer::{self, Role, Step};

use crate::observe;
use crate::transition::{Effect, Status};

/// The environment variable that arms crash points in `gridctl` (tests and journeys).
const FAILPOINTS_ENV: &str = "GRID_FAILPOINTS";

/// Where the installation of `host` is now: `<state>/hosts/H`'s link target, or that
/// directory itself.
pub fn installation(state: &Path, host: &str) -> PathBuf {
    let dir = observe::host_dir(state, host);
    std::fs::read_link(&dir).unwrap_or(dir)
}

/// Applies the transfer of `host`'s installation `source` to `destination` under
/// `op`, resuming one a stop interrupted (the same op id).
pub fn apply(state: &Path, host: &str, op: &str, source: &Path, destination: &Path) -> Effect {
    let failpoints = match std::env::var(FAILPOINTS_ENV) {
        Ok(spec) => match Failpoints::parse(&spec) {
            Ok(f) => f,
            Err(e) => return Effect::new(Status::Failed, format!("{FAILPOINTS_ENV}: {e}")),
        },
        Err(_) => Failpoints::default(),
    };
    // A gridd serving the source is stopped once the prepare is journaled (no gridd
    // starts there again); one that cannot be stopped for it alone refuses first.
    let open = transfer::record(source).ok().flatten().is_some();
    if !open
        && Client::connect(source).is_ok()
        && let Err(reason) = crate::local::stoppable(source)
    {
        return Effect::new(
            Status::Refused,
            format!("{reason}; nothing was transferred"),
        );
    }
    let stopped = std::cell::RefCell::new(None);
    let stop = |dir: &Path| {
        let how = crate::local::stop_serving(dir, crate::local::HOST_STOP_TIMEOUT)?;
        *stopped.borrow_mut() = how;
        Ok(())
    };
    let link = observe::host_dir(state, host);
    let back = (destination == observe::returning(&link)).then_some(link.as_path());
    let moved =
        match transfer::transfer_known_as(source, (destination, back), op, stop, &failpoints) {
            Ok(moved) => moved,
            Err(e) => return Effect::new(Status::Failed, e.to_string()),
        };
    if let Err(e) = relink(state, host, destination, op) {
        return Effect::new(
            Status::Failed,
            format!("transferred, but `hosts/{host}` was not pointed at it: {e}; reconcile again"),
        );
    }
    let stopped = stopped.into_inner().map_or(String::new(), |how| {
        format!("{how} once the source was prepared; ")
    });
    let place = if back.is_some() {
        format!("{} (back into the state directory)", link.display())
    } else {
        destination.display().to_string()
    };
    let mut effect = Effect::new(
        Status::Succeeded,
        format!(
            "{stopped}transferred {} files ({} bytes, manifest sha256:{}) to {place}; {} is retired (a gridd started there refuses)",
            moved.files,
            moved.bytes,
            moved.digest,
            source.display()
        ),
    );
    effect.replayed = moved.already;
    effect
}

/// Whether the transfer to `destination` is done: `hosts/H` names it, activated — or,
/// back into the state directory, `hosts/H` is that copy itself.
pub fn done(state: &Path, host: &str, destination: &Path) -> bool {
    let link = observe::host_dir(state, host);
    let activated = |dir: &Path| {
        transfer::record(dir).ok().flatten().is_some_and(|r| {
            r.role == Role::Destination && r.step == Step::Activated && r.destination == destination
        })
    };
    if destination == observe::returning(&link) {
        return std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_dir()) && activated(&link);
    }
    std::fs::read_link(&link).is_ok_and(|target| target == destination) && activated(destination)
}

/// Where the state directory keeps a retired installation that was its own
/// `hosts/H`.
pub fn kept(state: &Path, host: &str, op: &str) -> PathBuf {
    state.join("transferred").join(format!("{host}.{op}"))
}

/// Points `link` (`<state>/hosts/H`) at `destination`: a link replaced by a link
/// atomically; a directory exchanged with the new link atomically, then moved to
/// [`kept`]. Resumable: a stop between the exchange and the move is finished here.
fn relink(state: &Path, host: &str, destination: &Path, op: &str) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let link = observe::host_dir(state, host);
    if destination == observe::returning(&link) {
        // Back into the state directory: the copy and the link exchanged, then the
        // link (now at the copy's old name) removed. Resumable at either point.
        if std::fs::symlink_metadata(&link)?.file_type().is_symlink() {
            exchange(destination, &link)?;
        }
        if std::fs::symlink_metadata(destination).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(destination)?;
        }
        let parent = link.parent().unwrap_or(Path::new("."));
        return std::fs::File::open(parent)?.sync_all();
    }
    let next = link.with_extension("relink");
    if !std::fs::read_link(&link).is_ok_and(|target| target == destination) {
        if std::fs::symlink_metadata(&next).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(&next)?;
        }
        std::os::unix::fs::symlink(destination, &next)?;
        if std::fs::symlink_metadata(&link)?.is_dir() {
            exchange(&next, &link)?;
        } else {
            std::fs::rename(&next, &link)?;
        }
    }
    if std::fs::symlink_metadata(&next).is_ok_and(|m| m.is_dir()) {
        let kept = kept(state, host, op);
        if let Some(parent) = kept.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        std::fs::rename(&next, &kept)?;
    }
    let parent = link.parent().unwrap_or(Path::new("."));
    std::fs::File::open(parent)?.sync_all()
}

/// Exchanges two paths atomically (Linux `renameat2(RENAME_EXCHANGE)`).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both paths are NUL-terminated strings that outlive the call.
    let done = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
