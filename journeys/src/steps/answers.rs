//! `expect-answer OP host="H" [outcome=OUTCOME] [same-as="OP2"]` — `gridctl verify
//! --host H --op OP --json`: H retains an answer for operation OP whose signature
//! verifies offline against H's custody manifest (any generation, retired included);
//! its outcome is `outcome` when given. Each observation is recorded in
//! `$WORK/answers.jsonl`; `same-as` requires the answer to be identical — outcome,
//! detail and signature — to the first one recorded for OP2 by an earlier
//! `expect-answer` (with OP2 = OP: the retained answer was never rewritten, also across
//! crashes, rotations and restarts). The general form of `run-process … same-as` and
//! `ledger … same-as`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::gridctl::gridctl_json;
use super::{Step, journal};
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

const ANSWERS_FILE: &str = "answers.jsonl";

struct ExpectAnswer {
    op: String,
    host: String,
    outcome: Option<String>,
    same_as: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct AnswerRecord {
    op: String,
    host: String,
    /// The retained answer as `gridctl verify` showed it.
    answer: Value,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let op = node.argument("the operation id")?;
    let host = node.required_host("host")?;
    let outcome = node.string("outcome")?;
    let same_as = node.string("same-as")?;
    Ok(Box::new(ExpectAnswer {
        op,
        host,
        outcome,
        same_as,
    }))
}

/// The parts of an answer that must never change once given.
fn lasting(answer: &Value) -> [&Value; 3] {
    [&answer["outcome"], &answer["detail"], &answer["signature"]]
}

impl Step for ExpectAnswer {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let earlier = match &self.same_as {
            None => None,
            Some(other) => {
                let records: Vec<AnswerRecord> = journal::read(cx.work_dir(), ANSWERS_FILE)?;
                let first = records
                    .into_iter()
                    .find(|r| r.op == *other && r.host == self.host)
                    .ok_or_else(|| {
                        Failure::new(
                            format!(
                                "an answer of {other:?} at {} recorded by an earlier expect-answer",
                                self.host
                            ),
                            "none recorded",
                        )
                    })?;
                Some((other, first.answer))
            }
        };
        let json = gridctl_json(
            cx,
            &["verify", "--host", &self.host, "--op", &self.op, "--json"],
        )?;
        if json["verified"] != true {
            return Err(Failure::new(
                format!(
                    "{}'s answer to {:?} to verify with its custody manifest",
                    self.host, self.op
                ),
                json.to_string(),
            ));
        }
        let answer = json["answer"].clone();
        if let Some(outcome) = &self.outcome
            && answer["outcome"] != outcome.as_str()
        {
            return Err(Failure::new(
                format!("outcome {outcome}"),
                answer["outcome"].to_string(),
            ));
        }
        if let Some((other, first)) = &earlier
            && lasting(first) != lasting(&answer)
        {
            return Err(Failure::new(
                format!("the answer first recorded for {other:?}: {first}"),
                answer.to_string(),
            ));
        }
        cx.say(format_args!(
            "{} retains {:?}: {} {} (signature generation {}, verified){}",
            self.host,
            self.op,
            answer["outcome"],
            answer["detail"],
            json["generation"],
            earlier.as_ref().map_or(String::new(), |(other, _)| format!(
                "; identical to the answer first recorded for {other:?}"
            ))
        ));
        journal::append(
            cx.work_dir(),
            ANSWERS_FILE,
            &AnswerRecord {
                op: self.op.clone(),
                host: self.host.clone(),
                answer,
            },
        )
    }
}
