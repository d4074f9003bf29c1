//! Runs a parsed journey's steps, in order, on a [`Context`].

use crate::context::Context;
use crate::error::StepFailure;
use crate::parse::Journey;

/// Runs every step of `journey`; the first failure stops the run, naming its step.
pub(crate) fn run_steps(cx: &mut Context<'_>, journey: &Journey) -> Result<(), Box<StepFailure>> {
    for entry in &journey.steps {
        cx.run_step((entry.number, entry.line, &entry.text), |cx| {
            entry.step.run(cx)
        })?;
    }
    cx.check_after_last(
        journey
            .steps
            .last()
            .map(|entry| (entry.number, entry.line, entry.text.as_str())),
    )
}
