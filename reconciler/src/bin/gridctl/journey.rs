//! `gridctl journey run`: journey files by hand, printing their story; with `--junit
//! FILE`, every file runs and a JUnit XML report of them is written.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::Subcommand;

use crate::common::build_gridd_under_cargo;

#[derive(Subcommand, Debug)]
pub enum JourneyCommand {
    /// Run journey files by hand, printing their story; exit 1 at the first failure
    /// (with `--junit`: after every file ran, if any failed).
    Run {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Run every file (also after a failure) and write a JUnit XML report to FILE:
        /// one testcase per journey, a failure with its report, the story as its output.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
}

pub fn journey(command: JourneyCommand) -> anyhow::Result<ExitCode> {
    let JourneyCommand::Run { files, junit } = command;
    build_gridd_under_cargo()?;
    let binaries = grid_journeys::Binaries::beside(&std::env::current_exe()?);
    let Some(junit) = junit else {
        for file in &files {
            if let Err(e) = grid_journeys::run_file(file, &binaries, &mut std::io::stdout()) {
                eprintln!("{e}");
                return Ok(ExitCode::FAILURE);
            }
        }
        return Ok(ExitCode::SUCCESS);
    };
    let mut runs = Vec::new();
    for file in &files {
        let started = Instant::now();
        let mut story = Tee {
            kept: Vec::new(),
            out: std::io::stdout(),
        };
        let result = grid_journeys::run_file(file, &binaries, &mut story);
        if let Err(e) = &result {
            eprintln!("{e}");
        }
        runs.push(grid_journeys::junit::JourneyRun::new(
            file.clone(),
            started.elapsed(),
            String::from_utf8_lossy(&story.kept).into_owned(),
            &result,
        ));
    }
    let xml = grid_journeys::junit::report(&runs)?;
    std::fs::write(&junit, xml).with_context(|| format!("cannot write {}", junit.display()))?;
    let failed = runs.iter().filter(|r| r.failure.is_some()).count();
    eprintln!(
        "{} of {} journeys passed; JUnit report: {}",
        runs.len() - failed,
        runs.len(),
        junit.display()
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Writes the story through to stdout and keeps it for the report.
struct Tee {
    kept: Vec<u8>,
    out: std::io::Stdout,
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.kept.extend_from_slice(buf);
        // A closed stdout must not stop the journeys nor lose the report.
        let _ = self.out.write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.out.flush();
        Ok(())
    }
}
