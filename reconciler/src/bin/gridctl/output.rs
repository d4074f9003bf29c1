//! gridctl's standard output and error, written the way a Unix tool writes them.
//!
//! `print!`, `println!`, `eprint!` and `eprintln!` are shadowed for the whole binary
//! (this module is declared first in `main.rs`): std's versions panic when the stream
//! is closed (`gridctl check bad.kdl 2>&1 | head -1` exited 101). Here a write that
//! finds its reader gone (EPIPE) ends gridctl by `SIGPIPE`, as `cat` or `grep` end; any
//! other write error ends it with exit 1.
//!
//! Why not restore `SIGPIPE`'s default at start instead: gridctl also writes to hosts'
//! sockets, and a host that closes its end mid-call must be an error the command
//! reports (outcome unknown, exit 3), never a silent death. So `SIGPIPE` stays ignored
//! (Rust's default) and only a closed standard stream takes the Unix tool's way out.

use std::fmt;
use std::io::{self, Write};

macro_rules! print {
    ($($arg:tt)*) => { $crate::output::stdout(format_args!($($arg)*)) };
}

macro_rules! println {
    () => { $crate::output::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

macro_rules! eprint {
    ($($arg:tt)*) => { $crate::output::stderr(format_args!($($arg)*)) };
}

macro_rules! eprintln {
    () => { $crate::output::stderr(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Writes to standard output (line-buffered, so a complete line reaches the reader).
pub fn stdout(args: fmt::Arguments) {
    let mut out = io::stdout().lock();
    if let Err(error) = out.write_fmt(args) {
        closed(error, "standard output");
    }
}

/// Writes to standard error (unbuffered).
pub fn stderr(args: fmt::Arguments) {
    if let Err(error) = io::stderr().lock().write_fmt(args) {
        closed(error, "standard error");
    }
}

fn closed(error: io::Error, stream: &str) -> ! {
    closed_pipe(&error);
    // Not a closed pipe (a full disk, say): say so where it may still be read.
    let _ = writeln!(io::stderr(), "error: cannot write to {stream}: {error}");
    std::process::exit(1);
}

/// Ends gridctl by `SIGPIPE` when `error` is a closed pipe; returns otherwise.
fn closed_pipe(error: &io::Error) {
    if error.kind() != io::ErrorKind::BrokenPipe {
        return;
    }
    // SAFETY: `signal` and `raise` only change this process's disposition of SIGPIPE
    // and deliver it to this thread; with the default disposition the process ends.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Not reached: the default action of SIGPIPE ends the process. 128 + 13 is what a
    // shell shows for it.
    std::process::exit(141);
}
