//! `expect-refused { STEP }` — the one inner step must end refused: an outcome-reporting
//! step (`reconcile`, `input`) with outcome `refused`, `plan` with a non-zero exit,
//! `start` with gridd refusing to start. Steps that cannot be refused are rejected when
//! the journey is parsed.

use super::Step;
use crate::error::Failure;
use crate::parse::{Node, ParseError};
use crate::runner::Context;

struct ExpectRefused {
    inner: Box<dyn Step>,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let cx = node.cx();
    let children = node.children();
    let [child] = children else {
        return Err(node
            .error(format!(
                "`expect-refused` wraps exactly one step, found {}",
                children.len()
            ))
            .with_help("write e.g. `expect-refused { input counter n=9 op=\"b1\" }`"));
    };
    let inner = cx.parse_refused_step(child)?;
    Ok(Box::new(ExpectRefused { inner }))
}

impl Step for ExpectRefused {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        self.inner.run(cx)?;
        cx.say("refused, as expected");
        Ok(())
    }
}
