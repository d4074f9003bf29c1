//! `topology "FILE"` — the topology that later `plan` and `reconcile` steps use; a
//! path relative to the journey file (a file or a directory of `.kdl` files).
//! Switching to another file later models the operator editing their files.

use std::path::PathBuf;

use super::Step;
use crate::error::Failure;
use crate::parse::{Node, ParseError};
use crate::runner::Context;

struct Topology {
    path: PathBuf,
}

pub fn parse(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let file = node.argument("a topology file, relative to the journey")?;
    let path = node.cx().journey_dir().join(&file);
    if !path.exists() {
        return Err(node
            .error(format!("topology `{}` does not exist", path.display()))
            .with_help(
                "topology paths are relative to the journey file, e.g. \"topologies/counter.kdl\"",
            ));
    }
    // Absolute, so commands run from the work directory find it.
    let path = path.canonicalize().unwrap_or(path);
    Ok(Box::new(Topology { path }))
}

impl Step for Topology {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        cx.set_topology(self.path.clone());
        let shown = cx.show_path(&self.path);
        cx.say(format_args!("topology is now {shown}"));
        Ok(())
    }
}
