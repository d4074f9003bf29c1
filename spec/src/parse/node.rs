//! `NodeReader`: one node's entries, read once each, with every leftover reported.

use kdl::{KdlEntry, KdlNode, KdlValue};
use miette::SourceSpan;

use super::FileReader;

/// Reads one node's entries, remembering which were used so that `finish` reports
/// every unknown property and unexpected argument.
pub(super) struct NodeReader<'n> {
    node: &'n KdlNode,
    used: Vec<bool>,
    children_read: bool,
}

impl<'n> NodeReader<'n> {
    pub(super) fn new(node: &'n KdlNode) -> Self {
        NodeReader {
            node,
            used: vec![false; node.entries().len()],
            children_read: false,
        }
    }

    pub(super) fn what(&self) -> String {
        format!("`{}`", self.node.name().value())
    }

    pub(super) fn positional(&mut self, index: usize) -> Option<&'n KdlEntry> {
        let (i, entry) = self
            .node
            .entries()
            .iter()
            .enumerate()
            .filter(|(_, e)| e.name().is_none())
            .nth(index)?;
        self.used[i] = true;
        Some(entry)
    }

    pub(super) fn property(&mut self, key: &str) -> Option<&'n KdlEntry> {
        // KDL 2: the last occurrence wins; `finish` reports repeated keys.
        let (i, entry) = self
            .node
            .entries()
            .iter()
            .enumerate()
            .rfind(|(_, e)| e.name().is_some_and(|n| n.value() == key))?;
        self.used[i] = true;
        Some(entry)
    }

    /// The span of property `key` when the node has it.
    pub(super) fn has_property(&mut self, key: &str) -> Option<SourceSpan> {
        self.property(key).map(|e| e.span())
    }

    pub(super) fn missing(&self, r: &mut FileReader, what: String, help: String) {
        r.error(self.node.name().span(), what, "here", &help);
    }

    pub(super) fn string_arg(
        &mut self,
        r: &mut FileReader,
        index: usize,
        what: &str,
    ) -> Option<(String, SourceSpan)> {
        let node = self.what();
        match self.positional(index) {
            Some(entry) => match entry.value() {
                KdlValue::String(s) => Some((s.clone(), entry.span())),
                other => {
                    r.error(
                        entry.span(),
                        format!(
                            "the {what} of {node} must be a string, found {}",
                            crate::diagnostic::kdl_type(other)
                        ),
                        "wrong type",
                        "quote it, for example \"plant-ops\"",
                    );
                    None
                }
            },
            None => {
                self.missing(
                    r,
                    format!("{node} needs its {what}"),
                    format!("write it after {node}"),
                );
                None
            }
        }
    }

    /// Every positional argument, as strings.
    pub(super) fn string_args(
        &mut self,
        r: &mut FileReader,
        what: &str,
    ) -> Vec<(String, SourceSpan)> {
        let mut out = Vec::new();
        let mut index = 0;
        while let Some(entry) = self.positional(index) {
            match entry.value() {
                KdlValue::String(s) => out.push((s.clone(), entry.span())),
                other => r.error(
                    entry.span(),
                    format!(
                        "a {what} must be a string, found {}",
                        crate::diagnostic::kdl_type(other)
                    ),
                    "wrong type",
                    "",
                ),
            }
            index += 1;
        }
        out
    }

    pub(super) fn string_prop(
        &mut self,
        r: &mut FileReader,
        key: &str,
        required: bool,
    ) -> Option<(String, SourceSpan)> {
        let node = self.what();
        match self.property(key) {
            Some(entry) => match entry.value() {
                KdlValue::String(s) => Some((s.clone(), entry.span())),
                other => {
                    r.error(
                        entry.span(),
                        format!(
                            "property `{key}` of {node} must be a string, found {}",
                            crate::diagnostic::kdl_type(other)
                        ),
                        "wrong type",
                        &format!("quote the value: {key}=\"…\""),
                    );
                    None
                }
            },
            None if required => {
                self.missing(
                    r,
                    format!("{node} needs property `{key}`"),
                    format!("add {key}=…"),
                );
                None
            }
            None => None,
        }
    }

    pub(super) fn int_prop(
        &mut self,
        r: &mut FileReader,
        key: &str,
        required: bool,
        min: i128,
        max: i128,
    ) -> Option<(i128, SourceSpan)> {
        let node = self.what();
        let (i, span) = self.int_entry(r, key, required, min.max(1))?;
        if (min..=max).contains(&i) {
            return Some((i, span));
        }
        let range = if max == i128::MAX || max == u64::MAX as i128 {
            format!("at least {min}")
        } else {
            format!("from {min} to {max}")
        };
        r.error(
            span,
            format!("property `{key}` of {node} is {i}, outside its range"),
            "out of range",
            &format!("`{key}` is an integer {range}"),
        );
        None
    }

    /// [`Self::int_prop`] whose bounds are named limits (`crate::limits`): an error
    /// names the limit crossed.
    pub(super) fn limited_int_prop(
        &mut self,
        r: &mut FileReader,
        key: &str,
        required: bool,
        (min, min_name): (i128, &str),
        (max, max_name): (i128, &str),
    ) -> Option<(i128, SourceSpan)> {
        let node = self.what();
        let (i, span) = self.int_entry(r, key, required, min)?;
        let (side, name, limit) = if i < min {
            ("below", min_name, min)
        } else if i > max {
            ("above", max_name, max)
        } else {
            return Some((i, span));
        };
        r.error(
            span,
            format!("property `{key}` of {node} is {i}, {side} {name} ({limit})"),
            "out of range",
            &format!("`{key}` is from {min_name} ({min}) to {max_name} ({max})"),
        );
        None
    }

    /// An integer property, any value: reports a missing (when required) or
    /// non-integer one.
    fn int_entry(
        &mut self,
        r: &mut FileReader,
        key: &str,
        required: bool,
        example: i128,
    ) -> Option<(i128, SourceSpan)> {
        let node = self.what();
        match self.property(key) {
            Some(entry) => match entry.value() {
                KdlValue::Integer(i) => Some((*i, entry.span())),
                other => {
                    r.error(
                        entry.span(),
                        format!(
                            "property `{key}` of {node} must be an integer, found {}",
                            crate::diagnostic::kdl_type(other)
                        ),
                        "wrong type",
                        &format!("write a whole number, for example {key}={example}"),
                    );
                    None
                }
            },
            None if required => {
                self.missing(
                    r,
                    format!("{node} needs property `{key}`"),
                    format!("add {key}=N"),
                );
                None
            }
            None => None,
        }
    }

    pub(super) fn float_prop(&mut self, r: &mut FileReader, key: &str) -> Option<f64> {
        let node = self.what();
        let entry = self.property(key)?;
        let value = match entry.value() {
            KdlValue::Float(f) => *f,
            KdlValue::Integer(i) => *i as f64,
            other => {
                r.error(
                    entry.span(),
                    format!(
                        "property `{key}` of {node} must be a number, found {}",
                        crate::diagnostic::kdl_type(other)
                    ),
                    "wrong type",
                    "write a finite number, for example 82.5",
                );
                return None;
            }
        };
        if !value.is_finite() {
            r.error(
                entry.span(),
                format!("property `{key}` of {node} is not a finite number"),
                "not finite",
                "values are finite f64: NaN and ±infinity are refused",
            );
            return None;
        }
        Some(value)
    }

    pub(super) fn bool_prop(&mut self, r: &mut FileReader, key: &str) -> Option<bool> {
        let node = self.what();
        let entry = self.property(key)?;
        match entry.value() {
            KdlValue::Bool(b) => Some(*b),
            other => {
                r.error(
                    entry.span(),
                    format!(
                        "property `{key}` of {node} must be a boolean, found {}",
                        crate::diagnostic::kdl_type(other)
                    ),
                    "wrong type",
                    &format!("write {key}=#true or {key}=#false"),
                );
                None
            }
        }
    }

    pub(super) fn children(&mut self, _r: &mut FileReader) -> &'n [KdlNode] {
        self.children_read = true;
        self.node.children().map_or(&[], |c| c.nodes())
    }

    pub(super) fn no_children(&mut self, r: &mut FileReader) {
        self.children_read = true;
        if let Some(children) = self.node.children()
            && let Some(first) = children.nodes().first()
        {
            r.error(
                first.name().span(),
                format!("`{}` takes no children", self.node.name().value()),
                "unexpected child",
                "remove the `{ … }` block",
            );
        }
    }

    /// Marks every entry used (after an error that makes the rest meaningless).
    pub(super) fn skip_all(&mut self) {
        self.used.iter_mut().for_each(|u| *u = true);
        self.children_read = true;
    }

    pub(super) fn finish(self, r: &mut FileReader) {
        let node = self.node.name().value().to_owned();
        let mut seen: Vec<&str> = Vec::new();
        for (entry, used) in self.node.entries().iter().zip(&self.used) {
            if let Some(key) = entry.name() {
                if seen.contains(&key.value()) {
                    r.error(
                        entry.span(),
                        format!("property `{}` of `{node}` is given twice", key.value()),
                        "repeated",
                        "give each property once",
                    );
                }
                seen.push(key.value());
            }
            if *used {
                continue;
            }
            match entry.name() {
                Some(key) => r.error(
                    key.span(),
                    format!("unknown property `{}` of `{node}`", key.value()),
                    "unknown property",
                    &format!("see docs/topology.md for the properties of `{node}`"),
                ),
                None => r.error(
                    entry.span(),
                    format!("unexpected argument of `{node}`"),
                    "unexpected",
                    &format!("see docs/topology.md for the shape of `{node}`"),
                ),
            }
        }
        if !self.children_read {
            // Every reader decides about children; reaching here is a programming error.
            panic!("node `{node}` was read without deciding about its children");
        }
    }
}
