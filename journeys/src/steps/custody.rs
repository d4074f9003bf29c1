//! `rotate-key HOST key=signing|mail [expect=OUTCOME]` — the operator raises HOST's
//! generation of that key by one in the files (`keys generation=N` /
//! `keys mail-generation=N` of its `host` node, written as the next edited copy of the
//! topology, like `edit-topology`) and runs `gridctl reconcile`, whose outcome must be
//! `expect` (default `succeeded`): the host rotates its key and every fellow member
//! learns the new public keys (docs/custody.md).

use std::ffi::OsString;

use kdl::{KdlDocument, KdlNode};

use super::{Outcome, Step, check_outcome};
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

struct RotateKey {
    host: String,
    /// The `keys` property raised: `generation` or `mail-generation`.
    property: &'static str,
    expect: Outcome,
}

pub fn parse_rotate_key(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("the host whose key rotates")?;
    let property = match node.required("key", "signing|mail")?.as_str() {
        "signing" => "generation",
        "mail" => "mail-generation",
        other => {
            return Err(node
                .error(format!("`key` is `signing` or `mail`, not `{other}`"))
                .with_help("the TLS key is not rotated by this version"));
        }
    };
    let expect = Outcome::expected(node)?;
    Ok(Box::new(RotateKey {
        host,
        property,
        expect,
    }))
}

/// Raises `property` of `host`'s `keys` node in `text` by one (from 1 when unsaid):
/// the edited text and the new generation.
fn raise(text: &str, host: &str, property: &str) -> Result<(String, i128), String> {
    let mut doc: KdlDocument = text
        .parse()
        .map_err(|e| format!("the topology does not parse: {e}"))?;
    let node = doc
        .nodes_mut()
        .iter_mut()
        .find(|n| {
            n.name().value() == "host"
                && n.entry(0)
                    .and_then(|e| e.value().as_string())
                    .is_some_and(|name| name == host)
        })
        .ok_or_else(|| format!("no `host {host:?}` node in the topology file"))?;
    let children = node.ensure_children();
    if children.get("keys").is_none() {
        children.nodes_mut().push(KdlNode::new("keys"));
    }
    let keys = children.get_mut("keys").expect("just ensured");
    let current = keys
        .entry(property)
        .map_or(Some(1), |e| e.value().as_integer())
        .ok_or_else(|| format!("`keys {property}=` of host `{host}` is not an integer"))?;
    keys.insert(property, current + 1);
    keys.clear_format();
    Ok((doc.to_string(), current + 1))
}

impl Step for RotateKey {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let (current, text) = super::topology::read_current(cx)?;
        let (edited, generation) = raise(&text, &self.host, self.property)
            .map_err(|e| Failure::new("the host's keys raised in the files", e))?;
        let path = super::topology::write_edited(cx, &current, &edited)?;
        cx.say(format_args!(
            "{}: keys {}={generation} in {}",
            self.host,
            self.property,
            cx.show_path(&path)
        ));
        let args: Vec<OsString> = vec!["reconcile".into(), path.into(), "--json".into()];
        let output = cx.gridctl(&args)?;
        check_outcome(cx, &output, self.expect)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::raise;

    #[test]
    fn raises_the_named_generation_of_one_host_only() {
        let text = "host a listen=\"x\" {\n    keys generation=2\n}\nhost b listen=\"y\"\n";
        let (edited, g) = raise(text, "a", "generation").unwrap();
        assert_eq!(g, 3);
        assert!(edited.contains("generation=3"), "{edited}");
        let (edited, g) = raise(&edited, "b", "mail-generation").unwrap();
        assert_eq!(g, 2);
        let doc: kdl::KdlDocument = edited.parse().unwrap();
        let b = &doc.nodes()[1];
        assert_eq!(
            b.children().unwrap().get_arg("mail-generation"),
            None,
            "a property, not an argument"
        );
        assert_eq!(
            b.children()
                .unwrap()
                .get("keys")
                .unwrap()
                .entry("mail-generation")
                .unwrap()
                .value()
                .as_integer(),
            Some(2)
        );
        assert!(raise(text, "c", "generation").is_err());
    }
}
