//! Answers recorded in the work directory, one JSON line each, so that a later step
//! can compare with them: `claim-answers.jsonl` (claims), `published.jsonl`
//! (publishes), `process-runs.jsonl` (process runs). A record is written once its
//! answer is known (or known to be unknown) and never edited, except that
//! `expect-answers-unchanged` rewrites a claim record whose unknown answer became
//! definite.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Failure;

/// Appends one record to `$WORK/FILE`.
pub fn append<T: Serialize>(work: &Path, file: &str, record: &T) -> Result<(), Failure> {
    let written =
        |e: std::io::Error| Failure::new(format!("a record written to {file}"), e.to_string());
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(work.join(file))
        .map_err(written)?;
    let line = serde_json::to_string(record).expect("records serialize");
    writeln!(out, "{line}").map_err(written)
}

/// Every record of `$WORK/FILE` (none if it does not exist yet).
pub fn read<T: DeserializeOwned>(work: &Path, file: &str) -> Result<Vec<T>, Failure> {
    let text = std::fs::read_to_string(work.join(file)).unwrap_or_default();
    text.lines()
        .map(|line| {
            serde_json::from_str(line)
                .map_err(|e| Failure::new(format!("readable records in {file}"), e.to_string()))
        })
        .collect()
}

/// Replaces `$WORK/FILE` by `records`.
pub fn rewrite<T: Serialize>(work: &Path, file: &str, records: &[T]) -> Result<(), Failure> {
    let mut text = String::new();
    for record in records {
        text.push_str(&serde_json::to_string(record).expect("records serialize"));
        text.push('\n');
    }
    std::fs::write(work.join(file), text)
        .map_err(|e| Failure::new(format!("records written to {file}"), e.to_string()))
}
