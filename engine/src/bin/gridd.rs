//! `gridd`: the host daemon. A host runs from its installation directory, which
//! `gridctl reconcile` creates; until the reconciler lands (issue 3), gridd refuses
//! to start rather than run a host nobody reconciled.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Grid host daemon: runs one host from its installation directory.
#[derive(Parser, Debug)]
#[command(name = "gridd", version, about)]
struct Cli {
    /// The host's installation directory (0700), created by `gridctl reconcile`.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    eprintln!(
        "gridd: cannot run a host from {}: host installations are created by `gridctl reconcile`, which this version does not have yet; use `gridctl model run` for a durable local model",
        cli.dir.display()
    );
    ExitCode::FAILURE
}
