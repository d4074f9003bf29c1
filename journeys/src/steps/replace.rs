//! `replace-storage HOST from="NAME" (op="ID" | generation=N) [at=POINT] [expect=OUTCOME]`
//! (SPEC C11, docs/transfer.md, "Storage replacement") — the operator replaces HOST's
//! store (the host stopped) by `$WORK/saved/NAME`, a copy a `save HOST "store"
//! as="NAME"` step took: with `op`, `gridctl host replace-storage HOST --from … --op ID
//! --json`; with `generation`, HOST's `storage` node becomes `storage generation=N
//! from="$WORK/saved/NAME"` in the files (the next edited copy of the topology) and
//! `gridctl reconcile` runs (a stopped host's plan also says `! host H` unreachable:
//! `attention`).
//!
//! - With `at`, gridctl runs with `GRID_FAILPOINTS=POINT=abort` (`replace-after-prepare`,
//!   `replace-mid-copy`, `replace-before-install`, `replace-before-record`) and must
//!   abort there: the replacement stops midway, journaled (a gridd started meanwhile
//!   refuses); the same step without `at` and with the same op id finishes it.
//! - Without, its outcome must be `expect` (default `succeeded`).

use std::ffi::OsString;
use std::path::Path;

use kdl::{KdlDocument, KdlNode};

use super::{Outcome, Step, check_outcome};
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

enum How {
    Command { op: String },
    Plan { generation: u64 },
}

struct Replace {
    host: String,
    from: String,
    /// The command's op id, or the generation the files are to say.
    how: How,
    at: Option<String>,
    expect: Outcome,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the host whose store is replaced")?;
    let from = node.required("from", "NAME")?;
    let how = match (node.string("op")?, node.count("generation")?) {
        (Some(op), None) => How::Command { op },
        (None, Some(generation)) => How::Plan { generation },
        _ => {
            return Err(node.error(
                "say `op=\"ID\"` (gridctl host replace-storage) or `generation=N` (the files, then reconcile)",
            ));
        }
    };
    let at = super::transfer::crash_point(
        node,
        "a replacement's",
        "replace-",
        "replace-after-prepare, replace-mid-copy, replace-before-install, replace-before-record",
    )?;
    let expect = Outcome::expected(node)?;
    Ok(Box::new(Replace {
        host,
        from,
        how,
        at,
        expect,
    }))
}

impl Step for Replace {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let copy = cx.work_dir().join("saved").join(&self.from);
        let args: Vec<OsString> = match &self.how {
            How::Command { op } => vec![
                "host".into(),
                "replace-storage".into(),
                self.host.clone().into(),
                "--from".into(),
                copy.into(),
                "--op".into(),
                op.into(),
                "--json".into(),
            ],
            How::Plan { generation } => {
                let (current, text) = super::topology::read_current(cx)?;
                let edited = storage_said(&text, &self.host, *generation, &copy).map_err(|e| {
                    Failure::new("the host's storage generation set in the files", e)
                })?;
                let path = super::topology::write_edited(cx, &current, &edited)?;
                cx.say(format_args!(
                    "{}: storage generation={generation} from={} ({})",
                    self.host,
                    cx.show_path(&copy),
                    cx.show_path(&path)
                ));
                vec!["reconcile".into(), path.into(), "--json".into()]
            }
        };
        if let Some(point) = &self.at {
            return super::transfer::aborts_at(cx, &args, point, "the replacement");
        }
        let output = cx.gridctl(&args)?;
        check_outcome(cx, &output, self.expect)?;
        Ok(())
    }
}

/// `text` with `host`'s `storage` node saying `generation` and `from`.
fn storage_said(text: &str, host: &str, generation: u64, from: &Path) -> Result<String, String> {
    let mut doc: KdlDocument = text
        .parse()
        .map_err(|e| format!("the topology does not parse: {e}"))?;
    let children = super::custody::node_named(&mut doc, "host", host)?.ensure_children();
    children
        .nodes_mut()
        .retain(|n| n.name().value() != "storage");
    let mut storage = KdlNode::new("storage");
    storage.insert("generation", generation as i128);
    storage.insert("from", from.display().to_string());
    children.nodes_mut().push(storage);
    Ok(doc.to_string())
}
