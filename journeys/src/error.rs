//! What goes wrong: a journey file that does not parse, a harness that cannot start,
//! and a step whose expectation does not hold.

use std::fmt;
use std::path::PathBuf;

/// Why a journey did not pass.
#[derive(Debug, thiserror::Error)]
pub enum JourneyError {
    #[error("cannot read journey {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The journey file is not valid KDL or not a valid journey; nothing was run.
    #[error("{0}")]
    Parse(Box<ParseFailure>),
    /// The harness could not set up (missing binaries, no temporary directory).
    #[error("{0}")]
    Setup(String),
    /// A step's expectation did not hold.
    #[error("{0}")]
    Step(Box<StepFailure>),
}

/// A journey file that does not parse, pointing at the place.
#[derive(Debug, Clone)]
pub struct ParseFailure {
    pub path: PathBuf,
    /// 1-based line and column of the problem.
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub help: Option<String>,
    /// The source line, for the report.
    pub source_line: String,
}

impl fmt::Display for ParseFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}:{}:{}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.message
        )?;
        writeln!(f, "  {:>4} | {}", self.line, self.source_line)?;
        write!(f, "       | {}^", " ".repeat(self.column.saturating_sub(1)))?;
        if let Some(help) = &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// A step that ran and whose expectation did not hold.
#[derive(Debug, Clone)]
pub struct StepFailure {
    pub journey: PathBuf,
    /// The step's number in the journey (the `journey` node is not counted).
    pub step: usize,
    pub line: usize,
    /// The step's KDL text as written.
    pub text: String,
    pub expected: String,
    pub observed: String,
    /// The kept work directory: state, saved plans, each command's and host's output.
    pub work_dir: PathBuf,
    /// The last lines each host process wrote, when any.
    pub host_logs: String,
}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "journey {} failed at step {} (line {}):",
            self.journey.display(),
            self.step,
            self.line
        )?;
        for line in self.text.lines() {
            writeln!(f, "    {line}")?;
        }
        writeln!(f, "  expected: {}", indent_rest(&self.expected))?;
        writeln!(f, "  observed: {}", indent_rest(&self.observed))?;
        write!(f, "  work directory kept: {}", self.work_dir.display())?;
        if !self.host_logs.is_empty() {
            write!(f, "\n{}", self.host_logs.trim_end())?;
        }
        Ok(())
    }
}

fn indent_rest(text: &str) -> String {
    text.trim_end().replace('\n', "\n            ")
}

/// A step's expectation that did not hold: what was expected and what was observed.
/// Steps return it; the runner adds which step it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub expected: String,
    pub observed: String,
}

impl Failure {
    pub fn new(expected: impl Into<String>, observed: impl Into<String>) -> Failure {
        Failure {
            expected: expected.into(),
            observed: observed.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}; observed {}", self.expected, self.observed)
    }
}
