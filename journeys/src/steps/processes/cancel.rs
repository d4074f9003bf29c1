//! `cancel-process OP host="CALLER" expect=cancelled|finalized|unknown [outcome=…]` —
//! `gridctl process cancel OP --host CALLER --json`: CALLER closes its stopped wait OP.
//! - `cancelled`: closed with the receiver's signed proof of no dispatch (exit 0,
//!   `cancelled` true, outcome `failed`, units `none`, a proof naming this receiver,
//!   caller and request, signed);
//! - `finalized`: the receiver had dispatched and finalized it: its original outcome
//!   (`outcome=`, when given) is returned and the wait closed — not cancelled (exit 0,
//!   `cancelled` false, no proof);
//! - `unknown`: the cancel's reply was lost (exit 3).
//!
//! Inside `expect-refused` it must be refused (exit 4): a run dispatched with no
//! outcome yet, a receiver that cannot be reached.

use std::ffi::OsString;

use crate::context::Context;
use crate::error::Failure;
use crate::process::describe_status;
use crate::step::Step;
use crate::step::{Node, ParseError};
use crate::steps::gridctl::json_of;
use crate::steps::shorten;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Cancelled,
    Finalized,
    Unknown,
    Refused,
}

struct CancelProcess {
    op: String,
    host: String,
    expect: Expect,
    outcome: Option<String>,
}

pub fn parse_cancel(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let op = node.argument("a request id")?;
    let host = node.required_host("host")?;
    let refused = node.expects_refusal();
    let expect = match node.string("expect")?.as_deref() {
        _ if refused => Expect::Refused,
        None | Some("cancelled") => Expect::Cancelled,
        Some("finalized") => Expect::Finalized,
        Some("unknown") => Expect::Unknown,
        Some(other) => {
            return Err(node.error(format!(
                "`expect` is cancelled, finalized or unknown (refused: inside expect-refused), not `{other}`"
            )));
        }
    };
    let outcome = node.string("outcome")?;
    if let Some(o) = &outcome
        && o != "succeeded"
        && o != "failed"
    {
        return Err(node.error(format!("`outcome` is succeeded or failed, not `{o}`")));
    }
    Ok(Box::new(CancelProcess {
        op,
        host,
        expect,
        outcome,
    }))
}

impl Step for CancelProcess {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let args: Vec<OsString> = [
            "process", "cancel", &self.op, "--host", &self.host, "--json",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let output = cx.gridctl(&args)?;
        let status = describe_status(&output.status);
        let said = format!(
            "{status}: {} {}",
            output.stdout.trim(),
            output.stderr.trim()
        );
        let code = output.status.code();
        let wanted = match self.expect {
            Expect::Cancelled | Expect::Finalized => 0,
            Expect::Unknown => 3,
            Expect::Refused => 4,
        };
        if code != Some(wanted) {
            return Err(Failure::new(
                format!("gridctl process cancel {} to exit {wanted}", self.op),
                shorten(&said, 700),
            ));
        }
        if self.expect == Expect::Refused {
            cx.say(format_args!(
                "→ refused: {}",
                shorten(output.stderr.trim(), 400)
            ));
            return Ok(());
        }
        let json = json_of(&output, "gridctl process cancel")?;
        let field = |key: &str| json[key].as_str().unwrap_or_default().to_owned();
        cx.say(format_args!(
            "→ {} at {}: cancelled {}, outcome {}, units {} ({})",
            self.op,
            self.host,
            json["cancelled"],
            field("outcome"),
            field("units"),
            shorten(&field("detail"), 200)
        ));
        let fail = |what: String| Err(Failure::new(what, shorten(&json.to_string(), 900)));
        match self.expect {
            Expect::Cancelled => {
                let proof = &json["proof"];
                if json["cancelled"] != true
                    || field("outcome") != "failed"
                    || field("units") != "none"
                {
                    return fail(format!(
                        "{} cancelled: outcome failed, units none, with a proof",
                        self.op
                    ));
                }
                if proof["request"] != self.op.as_str()
                    || proof["caller"] != self.host.as_str()
                    || proof["receiver"] != json["receiver"]
                    || proof["signature"].as_str().is_none_or(str::is_empty)
                {
                    return fail(format!(
                        "a signed proof of no dispatch of {} from its receiver to {}",
                        self.op, self.host
                    ));
                }
            }
            Expect::Finalized => {
                if json["cancelled"] != false || !json["proof"].is_null() {
                    return fail(format!(
                        "{} not cancelled (no proof): it was dispatched",
                        self.op
                    ));
                }
                let outcome = field("outcome");
                if outcome != "succeeded" && outcome != "failed" {
                    return fail(format!("{} finalized at its receiver", self.op));
                }
            }
            Expect::Unknown => {
                if field("outcome") != "unknown" {
                    return fail(format!("{} still unknown to its caller", self.op));
                }
            }
            Expect::Refused => unreachable!("handled above"),
        }
        if let Some(expected) = &self.outcome
            && field("outcome") != *expected
        {
            return fail(format!("outcome {expected} for {}", self.op));
        }
        Ok(())
    }
}
