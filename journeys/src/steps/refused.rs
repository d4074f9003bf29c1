//! `expect-refused { STEP }` — the one inner step must end refused: an outcome-reporting
//! step (`reconcile`, `input`) with outcome `refused`, `plan` with a non-zero exit,
//! `start` with gridd refusing to start. Steps that cannot be refused are rejected when
//! the journey is parsed. `expect-refused because="TEXT" { STEP }` also requires the
//! refusal's message (what the step reported) to contain TEXT, so a journey proves the
//! refusal happened for the reason it claims.

use super::Step;
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

struct ExpectRefused {
    inner: Box<dyn Step>,
    because: Option<String>,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let cx = node.cx();
    let because = node.string("because")?;
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
    Ok(Box::new(ExpectRefused { inner, because }))
}

impl Step for ExpectRefused {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let mark = cx.said_count();
        self.inner.run(cx)?;
        if let Some(because) = &self.because {
            let said = cx.said_since(mark);
            if !said.contains(because.as_str()) {
                return Err(Failure::new(
                    format!("a refusal because of {because:?}"),
                    format!("a refusal for another reason: {said}"),
                ));
            }
        }
        cx.say("refused, as expected");
        Ok(())
    }
}
