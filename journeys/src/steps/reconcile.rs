//! `reconcile [expect=OUTCOME] [plan="NAME"]` — `gridctl reconcile` of the current
//! topology, or of the plan saved earlier by `plan out="NAME"`; its outcome must be
//! `expect` (default `succeeded`; `refused` inside `expect-refused`).

use std::ffi::OsString;

use super::{Outcome, Step, check_outcome};
use crate::error::Failure;
use crate::parse::{Node, ParseError};
use crate::runner::Context;

struct Reconcile {
    expect: Outcome,
    plan: Option<String>,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let expect = Outcome::expected(node)?;
    let plan = node.string("plan")?;
    Ok(Box::new(Reconcile { expect, plan }))
}

impl Step for Reconcile {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let input = match &self.plan {
            Some(name) => {
                let path = cx.plan_path(name);
                if !path.is_file() {
                    return Err(Failure::new(
                        format!("a plan saved as `{name}` by an earlier `plan out=\"{name}\"`"),
                        format!("no file {}", cx.show_path(&path)),
                    ));
                }
                path
            }
            None => cx.topology()?,
        };
        let args: Vec<OsString> = vec!["reconcile".into(), input.into(), "--json".into()];
        let output = cx.gridctl(&args)?;
        check_outcome(cx, &output, self.expect)?;
        Ok(())
    }
}
