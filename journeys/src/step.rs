//! The contract of a journey step: parsed once from its KDL node, run once in order.
//!
//! Every step kind implements [`Step`] and has one [`ParseStep`] function registered by
//! node name in [`crate::steps::REGISTRY`]; the parser and the runner know nothing else
//! about steps.

use crate::error::Failure;
use crate::parse::{Node, ParseError};
use crate::runner::Context;

/// One kind of step: parsed once from its node, run once in order.
pub trait Step {
    /// Runs the step, telling its story through [`Context::say`]; an expectation that
    /// does not hold is a [`Failure`] (what was expected, what was observed).
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure>;
}

/// Reads a step node into a step; everything it does not take is an error.
pub type ParseStep = fn(&mut Node<'_>) -> Result<Box<dyn Step>, ParseError>;
