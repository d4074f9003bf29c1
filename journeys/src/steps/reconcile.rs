//! `reconcile [expect=OUTCOME] [plan="NAME"] [expect-replayed=N]` — `gridctl
//! reconcile` of the current topology, or of the plan saved earlier by `plan
//! out="NAME"`; its outcome must be `expect` (default `succeeded`; `refused` inside
//! `expect-refused`; `waiting` when transitions wait for hosts to run; `attention`
//! when `!` lines remain). `expect-replayed` counts the transitions whose owner
//! returned its original answer to a re-sent operation id (nothing applied again).

use std::ffi::OsString;

use super::{Outcome, Step, check_outcome};
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

struct Reconcile {
    expect: Outcome,
    plan: Option<String>,
    replayed: Option<u64>,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let expect = Outcome::expected(node)?;
    let plan = node.string("plan")?;
    let replayed = node.count("expect-replayed")?;
    Ok(Box::new(Reconcile {
        expect,
        plan,
        replayed,
    }))
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
        let json = check_outcome(cx, &output, self.expect)?;
        if let Some(expected) = self.replayed {
            let replayed: Vec<String> = json["transitions"]
                .as_array()
                .map(|ts| {
                    ts.iter()
                        .filter(|t| t["replayed"] == true)
                        .map(|t| format!("{} {} {}", t["op"], t["kind"], t["name"]))
                        .collect()
                })
                .unwrap_or_default();
            if replayed.len() as u64 != expected {
                return Err(Failure::new(
                    format!(
                        "{expected} transition(s) answered with their original answer (expect-replayed)"
                    ),
                    format!("{}: {}", replayed.len(), replayed.join(", ")),
                ));
            }
        }
        Ok(())
    }
}
