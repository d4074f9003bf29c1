//! `gridctl journey run`: journey files by hand, printing their story.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

use crate::common::build_gridd_under_cargo;

#[derive(Subcommand, Debug)]
pub enum JourneyCommand {
    /// Run journey files by hand, printing their story; exit 1 at the first failure.
    Run {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

pub fn journey(command: JourneyCommand) -> anyhow::Result<ExitCode> {
    let JourneyCommand::Run { files } = command;
    build_gridd_under_cargo()?;
    let binaries = grid_journeys::Binaries::beside(&std::env::current_exe()?);
    for file in &files {
        if let Err(e) = grid_journeys::run_file(file, &binaries, &mut std::io::stdout()) {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
