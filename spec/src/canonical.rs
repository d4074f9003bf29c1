//! Canonical KDL text of desired objects: one rendering per meaning, so two objects
//! are the same desired state exactly when their texts are equal, and a field-level
//! diff is a line diff. The reconciler sends this text to an owner, the owner keeps it
//! and reports it back, and plan compares the two.

use std::fmt::Write;

use crate::topology::{InputSource, Item, Model, Tag, TagSource};

/// A KDL 2 quoted string.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A finite number as KDL reads it back to the same `f64`.
pub fn number(value: f64) -> String {
    assert!(value.is_finite(), "desired state holds finite numbers only");
    format!("{value:?}")
}

/// The canonical `model` node (without `retired`, which is a transition, not content).
pub fn model(model: &Model) -> String {
    let mut out = format!("model {} host={}", quote(&model.name), quote(&model.host));
    if let Some(ceiling) = model.declared_ceiling {
        let _ = write!(out, " ceiling={ceiling}");
    }
    if model.scalar {
        out.push_str(" scalar=#true");
    }
    out.push_str(" {\n");
    for item in &model.items {
        match item {
            Item::Input(input) => {
                let _ = write!(out, "    input {}", quote(&input.name));
                if let Some(default) = input.default {
                    let _ = write!(out, " default={}", number(default));
                }
                match &input.from {
                    Some(InputSource::Tag(tag)) => {
                        let _ = write!(out, " from={}", quote(&format!("tag:{tag}")));
                    }
                    Some(InputSource::Route(route)) => {
                        let _ = write!(out, " from={}", quote(&format!("route:{route}")));
                    }
                    None => {}
                }
                out.push('\n');
            }
            Item::Cell(cell) => {
                let _ = writeln!(
                    out,
                    "    cell {} {}",
                    quote(&cell.name),
                    quote(&cell.formula)
                );
            }
        }
    }
    for output in &model.outputs {
        let _ = writeln!(
            out,
            "    output {} route={}",
            quote(&output.cell),
            quote(&output.route)
        );
    }
    out.push_str("}\n");
    out
}

/// The canonical `tag` node of a simulated tag; `None` for other sources, which no
/// owner installs yet (the reconciler reports them instead).
pub fn tag(tag: &Tag) -> Option<String> {
    let TagSource::Simulate {
        wave,
        period_s,
        min,
        max,
        seed,
        interval_ms,
    } = &tag.source
    else {
        return None;
    };
    Some(format!(
        "tag {} host={} {{\n    simulate wave={} period-s={period_s} min={} max={} seed={seed} interval-ms={interval_ms}\n}}\n",
        quote(&tag.name),
        quote(&tag.host),
        wave.name(),
        number(*min),
        number(*max),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_simulated_tag_reads_back_to_the_same_text() {
        let text = "grid version=1\nhost h listen=\"127.0.0.1:1\"\ntag t host=h { simulate wave=sine period-s=20 min=60 max=95.5 seed=7; }\n";
        let topology = crate::load_str("t.kdl", text).unwrap();
        let canonical = super::tag(&topology.tags[0]).unwrap();
        assert!(canonical.contains("interval-ms=1000"), "{canonical}");
        let again = format!("grid version=1\nhost h listen=\"127.0.0.1:1\"\n{canonical}");
        let topology2 = crate::load_str("again.kdl", &again).unwrap();
        assert_eq!(topology2.tags[0].source, topology.tags[0].source);
        assert_eq!(super::tag(&topology2.tags[0]).unwrap(), canonical);
    }

    #[test]
    fn a_model_reads_back_to_the_same_text() {
        let text = r#"grid version=1
host h listen="127.0.0.1:1"
model m host=h ceiling=64 {
    input a default=0.1
    input b
    cell c "IF(a > 1, \"x\" = 1, b)"
    cell d "a*2"
}
"#;
        // The quoted formula is nonsense but parses up to the quote: use a valid one.
        let text = text.replace(r#""IF(a > 1, \"x\" = 1, b)""#, r#""IF(a > 1, a, b)""#);
        let topology = crate::load_str("m.kdl", &text).unwrap();
        let canonical = super::model(&topology.models[0]);
        let again = format!("grid version=1\nhost h listen=\"127.0.0.1:1\"\n{canonical}");
        let topology2 = crate::load_str("again.kdl", &again).unwrap();
        assert_eq!(super::model(&topology2.models[0]), canonical);
        assert_eq!(topology2.models[0].items, topology.models[0].items);
    }

    #[test]
    fn quoting_escapes() {
        assert_eq!(super::quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
    }
}
