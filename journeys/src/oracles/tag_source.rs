//! **A tag source's state**: what `gridctl inspect tag T --host H --json` reports of an
//! industrial tag (SPEC C9) — its connection, its last good value, its journal's counts
//! by quality (at least N, or exactly N), its outstanding source debt and the reasons for it, whether a model
//! input it feeds is stale, and whether the journal's indexes are exactly
//! `1..=last_index` — meets every condition a step states.
//!
//! Unknown: a field the JSON does not carry (or carries as another type) meets no
//! condition: no connection state is not `online`, absent counts are not "at least N",
//! a `fed` that is not a list is neither stale nor fresh. `stale` is true when ANY
//! fed model input is stale (a tag feeding no model is not stale). `reason` matches a
//! substring of an outstanding debt entry's reason or of a refused entry's.
//!
//! On failure: expected "tag `T` at `H`: CONDITION, …", observed every condition not
//! met with what was found, then the whole observed state (as the story tells it).
//! Used by `expect-tag`.

use serde_json::Value;

use super::same_json;
use crate::error::Failure;

/// The conditions of one `expect-tag` step; `None` is not checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TagExpect {
    /// `connection.state` equals it.
    pub connection: Option<String>,
    /// Some fed model input is stale (`true`), or none is (`false`).
    pub stale: Option<bool>,
    /// `last_good.value` equals it (numbers by value); `Value::Null`: no good value.
    pub last_good: Option<Value>,
    pub good_at_least: Option<u64>,
    pub debt_at_least: Option<u64>,
    /// Exactly this many good (debt) entries journaled: a replayed capture's frames
    /// each once, none read again after a restart.
    pub good: Option<u64>,
    pub debt: Option<u64>,
    /// Exactly this many passive receive completions (J1939 multi-packet messages).
    pub completions: Option<u64>,
    pub refused_at_least: Option<u64>,
    /// The number of outstanding debt entries (since the last good one).
    pub outstanding_debt: Option<u64>,
    /// A substring of an outstanding debt's or a refused entry's reason.
    pub reason: Option<String>,
    /// A substring of the reason of any of the newest entries `inspect tag` lists
    /// (`entries`), outstanding or already followed by a good value: debt that a quick
    /// recovery (a rebirth the host asked for) may clear before the step looks.
    pub reason_seen: Option<String>,
    /// The journal's indexes are exactly `1..=last_index` (`true`), or not.
    pub consecutive: Option<bool>,
    /// Every model input fed from the tag was fed through `last_index`, and its
    /// model's batches equal the good entries (each good entry fed once, as one batch;
    /// debt none): for models that take batches from this tag only.
    pub fed_all: Option<bool>,
    /// The host holds the tag retired (`true`: it reads no more) or not.
    pub retired: Option<bool>,
}

impl TagExpect {
    /// Whether no condition is stated.
    pub fn is_empty(&self) -> bool {
        *self == TagExpect::default()
    }

    /// The conditions as a step writes them.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(state) = &self.connection {
            parts.push(format!("connection={state:?}"));
        }
        if let Some(stale) = self.stale {
            parts.push(format!("stale=#{stale}"));
        }
        if let Some(value) = &self.last_good {
            parts.push(format!("last-good={value}"));
        }
        for (name, least) in [
            ("good-at-least", self.good_at_least),
            ("debt-at-least", self.debt_at_least),
            ("good", self.good),
            ("debt", self.debt),
            ("completions", self.completions),
            ("refused-at-least", self.refused_at_least),
            ("outstanding-debt", self.outstanding_debt),
        ] {
            if let Some(n) = least {
                parts.push(format!("{name}={n}"));
            }
        }
        if let Some(reason) = &self.reason {
            parts.push(format!("reason={reason:?}"));
        }
        if let Some(reason) = &self.reason_seen {
            parts.push(format!("reason-seen={reason:?}"));
        }
        if let Some(consecutive) = self.consecutive {
            parts.push(format!("consecutive=#{consecutive}"));
        }
        if let Some(fed_all) = self.fed_all {
            parts.push(format!("fed-all=#{fed_all}"));
        }
        if let Some(retired) = self.retired {
            parts.push(format!("retired=#{retired}"));
        }
        parts.join(" ")
    }
}

/// Whether some model input the tag feeds is stale; `None` when `fed` is not a list.
fn stale(json: &Value) -> Option<bool> {
    let fed = json["fed"].as_array()?;
    Some(fed.iter().any(|f| f["stale"] == true))
}

/// The reasons `reason` is matched against: outstanding debt, then refused entries.
fn reasons(json: &Value) -> Vec<&str> {
    let debt = json["debt"].as_array().into_iter().flatten();
    let refused = json["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["quality"] == "refused");
    debt.chain(refused)
        .filter_map(|e| e["reason"].as_str())
        .collect()
}

/// One line of what the JSON shows, for the story and for a failure.
pub fn summary(json: &Value) -> String {
    let connection = match &json["connection"] {
        Value::Object(c) => match c.get("detail").and_then(Value::as_str) {
            Some(detail) => format!("{} ({detail})", c["state"]),
            None => c["state"].to_string(),
        },
        other => other.to_string(),
    };
    let last_good = match &json["last_good"] {
        Value::Object(g) => format!("#{} = {}", g["index"], g["value"]),
        other => other.to_string(),
    };
    let counts = &json["counts"];
    let debt = json["debt"].as_array();
    let shown: Vec<String> = debt
        .into_iter()
        .flatten()
        .take(3)
        .map(|d| format!("#{} {}", d["index"], d["reason"]))
        .collect();
    let more = debt.map_or(0, Vec::len).saturating_sub(shown.len());
    let outstanding = match debt {
        None => "null".to_owned(),
        Some(all) if all.is_empty() => "0".to_owned(),
        Some(all) => format!(
            "{} ({}{})",
            all.len(),
            shown.join(", "),
            if more > 0 {
                format!(", … {more} more")
            } else {
                String::new()
            }
        ),
    };
    let refused: Vec<&str> = json["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["quality"] == "refused")
        .filter_map(|e| e["reason"].as_str())
        .take(2)
        .collect();
    let refused = if refused.is_empty() {
        String::new()
    } else {
        format!(", refused because {}", refused.join("; "))
    };
    format!(
        "source {}, connection {connection}, last index {}, last good {last_good}; good {} \
         debt {} refused {}; outstanding debt {outstanding}{refused}; stale {}, consecutive {}",
        json["source"],
        json["last_index"],
        counts["good"],
        counts["debt"],
        counts["refused"],
        stale(json).map_or("null".to_owned(), |s| s.to_string()),
        json["consecutive"],
    )
}

/// Whether every fed input reached `last_index` with its model's batches equal to the
/// good entries; `None` when the fields are missing or nothing is fed.
fn fed_all(json: &Value) -> Option<bool> {
    let last = json["last_index"].as_u64()?;
    let good = json["counts"]["good"].as_u64()?;
    let fed = json["fed"].as_array().filter(|f| !f.is_empty())?;
    let mut all = true;
    for f in fed {
        all &= f["position"].as_u64()? == last && f["batches"].as_u64()? == good;
    }
    Some(all)
}

/// Checks every stated condition against the JSON; returns [`summary`] when all hold.
pub fn check(tag: &str, host: &str, expect: &TagExpect, json: &Value) -> Result<String, Failure> {
    let mut unmet = Vec::new();
    if let Some(state) = &expect.connection {
        let observed = &json["connection"]["state"];
        if observed.as_str() != Some(state.as_str()) {
            unmet.push(format!("connection is {observed}, not {state:?}"));
        }
    }
    if let Some(want) = expect.stale {
        let observed = stale(json);
        if observed != Some(want) {
            let observed = observed.map_or("unknown (no `fed` list)".to_owned(), |s| s.to_string());
            unmet.push(format!("stale is {observed}, not {want}"));
        }
    }
    if let Some(want) = &expect.last_good {
        let observed = match &json["last_good"] {
            Value::Object(good) => good.get("value").cloned().unwrap_or(Value::Null),
            _ => Value::Null,
        };
        let no_good = json["last_good"].is_null();
        let holds = match want {
            Value::Null => no_good,
            want => !no_good && same_json(want, &observed),
        };
        if !holds {
            unmet.push(format!("last good is {}, not {want}", json["last_good"]));
        }
    }
    for (name, least, key) in [
        ("good", expect.good_at_least, "good"),
        ("debt", expect.debt_at_least, "debt"),
        ("refused", expect.refused_at_least, "refused"),
    ] {
        let Some(least) = least else { continue };
        let observed = json["counts"][key].as_u64();
        if observed.is_none_or(|n| n < least) {
            unmet.push(format!(
                "{name} count is {}, not at least {least}",
                json["counts"][key]
            ));
        }
    }
    for (name, exact) in [
        ("good", expect.good),
        ("debt", expect.debt),
        ("completions", expect.completions),
    ] {
        let Some(exact) = exact else { continue };
        if json["counts"][name].as_u64() != Some(exact) {
            unmet.push(format!(
                "{name} count is {}, not {exact}",
                json["counts"][name]
            ));
        }
    }
    if let Some(want) = expect.outstanding_debt {
        let observed = json["debt"].as_array().map(|d| d.len() as u64);
        if observed != Some(want) {
            let observed =
                observed.map_or("unknown (no `debt` list)".to_owned(), |n| n.to_string());
            unmet.push(format!("outstanding debt is {observed}, not {want}"));
        }
    }
    if let Some(part) = &expect.reason_seen {
        let found: Vec<&str> = json["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["reason"].as_str())
            .collect();
        if !found.iter().any(|reason| reason.contains(part.as_str())) {
            unmet.push(format!(
                "no listed entry's reason contains {part:?} (reasons: {found:?})"
            ));
        }
    }
    if let Some(part) = &expect.reason {
        let found = reasons(json);
        if !found.iter().any(|reason| reason.contains(part.as_str())) {
            unmet.push(format!(
                "no outstanding debt or refused entry's reason contains {part:?} (reasons: {found:?})"
            ));
        }
    }
    if let Some(want) = expect.consecutive {
        let observed = &json["consecutive"];
        if observed.as_bool() != Some(want) {
            unmet.push(format!("consecutive is {observed}, not {want}"));
        }
    }
    if let Some(want) = expect.retired {
        let observed = &json["retired"];
        if observed.as_bool() != Some(want) {
            unmet.push(format!("retired is {observed}, not {want}"));
        }
    }
    if let Some(want) = expect.fed_all {
        let observed = fed_all(json);
        if observed != Some(want) {
            unmet.push(format!(
                "fed-all is {}, not {want} (last index {}, good {}, fed {})",
                observed.map_or("unknown".to_owned(), |b| b.to_string()),
                json["last_index"],
                json["counts"]["good"],
                json["fed"]
            ));
        }
    }
    let summary = summary(json);
    if unmet.is_empty() {
        return Ok(summary);
    }
    Err(Failure::new(
        format!("tag `{tag}` at `{host}`: {}", expect.describe()),
        format!("{}\nall observed: {summary}", unmet.join("; ")),
    ))
}
