//! Saved plans (`gridctl plan --out PLAN`): KDL, with what was observed of each owner,
//! so `reconcile PLAN` can refuse a plan whose owners changed since.
//!
//! ```kdl
//! plan version=1 state="grid-state" fingerprint="…" {
//!     file "topology.kdl"
//!     observed "edge-a" fingerprint="…"
//!     transition "+" kind="model" name="boiler" host="edge-a" id="plan-…" detail="…" \
//!             after="plan-…-1" waits-for="host-not-running" waits-for-hosts="edge-a" {
//!         submit "{…request JSON…}"
//!         change "ceiling" before="128" after="200"
//!     }
//! }
//! ```

use std::path::{Path, PathBuf};

use grid_engine::host::config::HostConfig;
use grid_spec::canonical::quote;
use kdl::{KdlNode, KdlValue};

use crate::plan::{Action, Op, Plan, Transition, Wait, WaitReason};

pub fn render(plan: &Plan) -> String {
    // Absolute: `reconcile PLAN` may run from another directory, and applies the plan
    // to the state it was made against, never to one the current directory names.
    let state = std::path::absolute(&plan.state).unwrap_or_else(|_| plan.state.clone());
    let mut out = format!(
        "plan version=1 state={} fingerprint={} {{\n",
        quote(&state.display().to_string()),
        quote(&plan.fingerprint())
    );
    for file in &plan.files {
        out.push_str(&format!(
            "    file {}\n",
            quote(&file.display().to_string())
        ));
    }
    for o in &plan.observed {
        out.push_str(&format!(
            "    observed {} fingerprint={} summary={}\n",
            quote(&o.owner),
            quote(&o.fingerprint),
            quote(&o.summary)
        ));
    }
    for t in &plan.transitions {
        out.push_str(&format!(
            "    transition {} kind={} name={} host={} id={} detail={}",
            quote(t.op.symbol()),
            quote(&t.kind),
            quote(&t.name),
            quote(&t.host),
            quote(&t.id),
            quote(&t.detail)
        ));
        if !t.after.is_empty() {
            out.push_str(&format!(" after={}", quote(&t.after.join(" "))));
        }
        if let Some(wait) = &t.waits_for {
            out.push_str(&format!(
                " waits-for={} waits-for-hosts={}",
                quote(wait.reason.name()),
                quote(&wait.hosts.join(" "))
            ));
        }
        let mut children = Vec::new();
        match &t.action {
            Action::None => {}
            Action::WriteHostConfig { config, dir } => {
                let mut line = format!("host-config {}", quote(&config.to_toml()));
                if let Some(dir) = dir {
                    line.push_str(&format!(" dir={}", quote(&dir.display().to_string())));
                }
                children.push(line);
            }
            Action::Submit { request } => children.push(format!(
                "submit {}",
                quote(&serde_json::to_string(request).expect("requests serialize"))
            )),
            Action::Resolve { template } => children.push(format!(
                "resolve {}",
                quote(&serde_json::to_string(template).expect("templates serialize"))
            )),
            Action::Recover { op } => children.push(format!("recover {}", quote(op))),
            Action::WriteArchive {
                archive,
                leaving,
                index_leaving,
            } => {
                let mut line = format!(
                    "archive-config {}",
                    quote(&serde_json::to_string(archive).expect("archives serialize"))
                );
                if let Some(leaving) = leaving {
                    line += &format!(
                        " leaving={}",
                        quote(&serde_json::to_string(leaving).expect("archives serialize"))
                    );
                }
                if let Some(table) = index_leaving {
                    line += &format!(
                        " index-leaving={}",
                        quote(&serde_json::to_string(table).expect("archives serialize"))
                    );
                }
                children.push(line)
            }
            Action::WriteSnapshots { store } => children.push(format!(
                "snapshots-config {}",
                quote(&serde_json::to_string(store).expect("snapshot stores serialize"))
            )),
            Action::CreateCustody => children.push("create-custody".to_owned()),
            Action::RewriteKeysAsPem => children.push("rewrite-keys-as-pem".to_owned()),
            Action::CreateAuthority { membership } => {
                children.push(format!("create-authority {}", quote(membership)))
            }
            Action::Enroll {
                membership,
                valid_days,
            } => children.push(format!(
                "enroll {} valid-days={valid_days}",
                quote(membership)
            )),
            Action::Renew {
                membership,
                serial,
                valid_days,
            } => children.push(format!(
                "renew {} serial={serial} valid-days={valid_days}",
                quote(membership)
            )),
            Action::Revoke {
                membership,
                participant,
            } => children.push(format!(
                "revoke {} participant={}",
                quote(membership),
                quote(participant)
            )),
            Action::DistributeRevocations { membership } => {
                children.push(format!("distribute-revocations {}", quote(membership)))
            }
            Action::Transfer {
                source,
                destination,
            } => children.push(format!(
                "transfer source={} destination={}",
                quote(&source.display().to_string()),
                quote(&destination.display().to_string())
            )),
            Action::ReplaceStorage { from, generation } => children.push(format!(
                "replace-storage from={} generation={generation}",
                quote(&from.display().to_string())
            )),
            Action::PublishKeys {
                membership,
                members,
            } => children.push(format!(
                "publish-keys {} members={}",
                quote(membership),
                quote(&members.join(" "))
            )),
            Action::Authority { membership, call } => children.push(format!(
                "authority {} call={}",
                quote(membership),
                quote(&serde_json::to_string(call).expect("authority calls serialize"))
            )),
            Action::Claim {
                membership,
                command,
            } => children.push(format!(
                "claim {} command={}",
                quote(membership),
                quote(&serde_json::to_string(command).expect("claim commands serialize"))
            )),
            Action::Mission { step } => children.push(format!(
                "mission {}",
                quote(&serde_json::to_string(step).expect("mission steps serialize"))
            )),
        }
        for c in &t.changes {
            children.push(format!(
                "change {} before={} after={}",
                quote(&c.field),
                quote(&c.before),
                quote(&c.after)
            ));
        }
        if children.is_empty() {
            out.push('\n');
        } else {
            out.push_str(" {\n");
            for c in children {
                out.push_str(&format!("        {c}\n"));
            }
            out.push_str("    }\n");
        }
    }
    out.push_str("}\n");
    out
}

/// Whether `path` holds a saved plan rather than a topology.
/// Whether `path` holds a saved plan, readable or not: its text begins with the `plan`
/// node `render` writes first (a topology has no `plan` kind), so a damaged or
/// truncated plan is reported as such by [`load`], not as a topology.
pub fn is_plan(path: &Path) -> bool {
    let mut head = [0u8; 64];
    let Ok(mut file) = std::fs::File::open(path) else {
        return false;
    };
    let read = std::io::Read::read(&mut file, &mut head).unwrap_or(0);
    String::from_utf8_lossy(&head[..read])
        .trim_start()
        .starts_with("plan version=")
}

fn string(node: &KdlNode, key: &str) -> Result<String, String> {
    match node.get(key) {
        Some(KdlValue::String(s)) => Ok(s.clone()),
        _ => Err(format!("`{}` lacks `{key}`", node.name().value())),
    }
}

fn integer(node: &KdlNode, key: &str) -> Result<i128, String> {
    match node.get(key) {
        Some(KdlValue::Integer(n)) if (0..=i128::from(u32::MAX)).contains(n) => Ok(*n),
        _ => Err(format!("`{}` lacks `{key}`", node.name().value())),
    }
}

fn argument(node: &KdlNode) -> Result<String, String> {
    match node
        .entries()
        .iter()
        .find(|e| e.name().is_none())
        .map(|e| e.value())
    {
        Some(KdlValue::String(s)) => Ok(s.clone()),
        _ => Err(format!("`{}` lacks its argument", node.name().value())),
    }
}

/// Reads a saved plan; the recorded fingerprint must match its content.
pub fn load(path: &Path) -> Result<Plan, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    grid_spec::nesting::check(&path.display().to_string(), &text).map_err(|_| {
        format!(
            "{}: not a readable saved plan (nested too deeply)",
            path.display()
        )
    })?;
    let document = grid_spec::nesting::parse_v2(&text).map_err(|e| {
        format!(
            "{}: not a readable saved plan ({e}): damaged or cut short; make a new one with `gridctl plan FILES --out PLAN`",
            path.display()
        )
    })?;
    let root = document
        .nodes()
        .first()
        .filter(|n| n.name().value() == "plan")
        .ok_or_else(|| format!("{}: not a saved plan", path.display()))?;
    if root.get("version") != Some(&KdlValue::Integer(1)) {
        return Err(format!("{}: unsupported plan version", path.display()));
    }
    let mut plan = Plan {
        state: PathBuf::from(string(root, "state")?),
        files: Vec::new(),
        observed: Vec::new(),
        transitions: Vec::new(),
    };
    let recorded = string(root, "fingerprint")?;
    for node in root.children().map_or(&[][..], |c| c.nodes()) {
        match node.name().value() {
            "file" => plan.files.push(PathBuf::from(argument(node)?)),
            "observed" => plan.observed.push(crate::plan::Observed {
                owner: argument(node)?,
                fingerprint: string(node, "fingerprint")?,
                summary: string(node, "summary")?,
            }),
            "transition" => {
                let symbol = argument(node)?;
                let op = Op::from_symbol(&symbol)
                    .ok_or_else(|| format!("unknown transition `{symbol}`"))?;
                let mut action = Action::None;
                let mut changes = Vec::new();
                for c in node.children().map_or(&[][..], |c| c.nodes()) {
                    if c.name().value() == "change" {
                        changes.push(crate::changes::Change {
                            field: argument(c)?,
                            before: string(c, "before")?,
                            after: string(c, "after")?,
                        });
                        continue;
                    }
                    action = match c.name().value() {
                        "host-config" => Action::WriteHostConfig {
                            config: toml_config(&argument(c)?)?,
                            dir: string(c, "dir").ok().map(PathBuf::from),
                        },
                        "submit" => Action::Submit {
                            request: serde_json::from_str(&argument(c)?)
                                .map_err(|e| format!("a request does not decode: {e}"))?,
                        },
                        "resolve" => Action::Resolve {
                            template: serde_json::from_str(&argument(c)?)
                                .map_err(|e| format!("a request template does not decode: {e}"))?,
                        },
                        "recover" => Action::Recover { op: argument(c)? },
                        "archive-config" => Action::WriteArchive {
                            archive: serde_json::from_str(&argument(c)?)
                                .map_err(|e| format!("an archive does not decode: {e}"))?,
                            leaving: string(c, "leaving")
                                .ok()
                                .map(|text| serde_json::from_str(&text))
                                .transpose()
                                .map_err(|e| format!("an archive left does not decode: {e}"))?,
                            index_leaving: string(c, "index-leaving")
                                .ok()
                                .map(|text| serde_json::from_str(&text))
                                .transpose()
                                .map_err(|e| format!("an index table left does not decode: {e}"))?,
                        },
                        "snapshots-config" => Action::WriteSnapshots {
                            store: serde_json::from_str(&argument(c)?)
                                .map_err(|e| format!("a snapshot store does not decode: {e}"))?,
                        },
                        "create-custody" => Action::CreateCustody,
                        "rewrite-keys-as-pem" => Action::RewriteKeysAsPem,
                        "create-authority" => Action::CreateAuthority {
                            membership: argument(c)?,
                        },
                        "enroll" => Action::Enroll {
                            membership: argument(c)?,
                            valid_days: integer(c, "valid-days")? as u32,
                        },
                        "renew" => Action::Renew {
                            membership: argument(c)?,
                            serial: integer(c, "serial")? as u64,
                            valid_days: integer(c, "valid-days")? as u32,
                        },
                        "revoke" => Action::Revoke {
                            membership: argument(c)?,
                            participant: string(c, "participant")?,
                        },
                        "distribute-revocations" => Action::DistributeRevocations {
                            membership: argument(c)?,
                        },
                        "transfer" => Action::Transfer {
                            source: PathBuf::from(string(c, "source")?),
                            destination: PathBuf::from(string(c, "destination")?),
                        },
                        "replace-storage" => Action::ReplaceStorage {
                            from: PathBuf::from(string(c, "from")?),
                            generation: integer(c, "generation")? as u64,
                        },
                        "publish-keys" => Action::PublishKeys {
                            membership: argument(c)?,
                            members: string(c, "members")?
                                .split_whitespace()
                                .map(str::to_owned)
                                .collect(),
                        },
                        "authority" => Action::Authority {
                            membership: argument(c)?,
                            call: serde_json::from_str(&string(c, "call")?)
                                .map_err(|e| format!("an authority call does not decode: {e}"))?,
                        },
                        "claim" => Action::Claim {
                            membership: argument(c)?,
                            command: serde_json::from_str(&string(c, "command")?)
                                .map_err(|e| format!("a claim command does not decode: {e}"))?,
                        },
                        "mission" => Action::Mission {
                            step: serde_json::from_str(&argument(c)?)
                                .map_err(|e| format!("a mission step does not decode: {e}"))?,
                        },
                        other => return Err(format!("unknown action `{other}`")),
                    };
                }
                let words = |key: &str| -> Vec<String> {
                    string(node, key)
                        .map(|s| s.split_whitespace().map(str::to_owned).collect())
                        .unwrap_or_default()
                };
                let waits_for = match string(node, "waits-for") {
                    Ok(name) => Some(Wait {
                        reason: WaitReason::from_name(&name)
                            .ok_or_else(|| format!("unknown wait `{name}`"))?,
                        hosts: words("waits-for-hosts"),
                    }),
                    Err(_) => None,
                };
                plan.transitions.push(Transition {
                    op,
                    kind: string(node, "kind")?,
                    name: string(node, "name")?,
                    host: string(node, "host")?,
                    detail: string(node, "detail")?,
                    changes,
                    id: string(node, "id")?,
                    action,
                    after: words("after"),
                    waits_for,
                });
            }
            other => return Err(format!("{}: unknown plan node `{other}`", path.display())),
        }
    }
    if plan.fingerprint() != recorded {
        return Err(format!(
            "{}: the plan was edited after it was made (fingerprint mismatch); make a new plan",
            path.display()
        ));
    }
    Ok(plan)
}

fn toml_config(text: &str) -> Result<HostConfig, String> {
    grid_engine::host::config::HostConfig::from_toml(text)
        .map_err(|e| format!("a host configuration does not decode: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deeply_nested_saved_plan_is_refused_and_crashes_nothing() {
        let dir = std::env::temp_dir().join(format!("grid-planfile-deep-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("deep.plan");
        let text = format!("plan version=1 {}", "{ x ".repeat(2_000));
        std::fs::write(&path, text).unwrap();
        // It says it is a plan (its first line), so it is read as one, and refused.
        assert!(is_plan(&path));
        assert!(load(&path).unwrap_err().contains("nested too deeply"));
        // A truncated plan is a plan that does not read, not a topology.
        std::fs::write(&path, "plan version=1 state=\"/x\" fingerprint=\"ab").unwrap();
        assert!(is_plan(&path));
        assert!(load(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
    use crate::plan::Observed;
    use grid_engine::protocol::Request;

    #[test]
    fn a_saved_plan_loads_back_identical_and_refuses_edits() {
        let plan = Plan {
            state: PathBuf::from("grid-state"),
            files: vec![PathBuf::from("a.kdl")],
            observed: vec![Observed {
                owner: "solo".to_owned(),
                fingerprint: "abc".to_owned(),
                summary: "listen 127.0.0.1:1 profiles []; models []".to_owned(),
            }],
            transitions: vec![
                Transition {
                    op: Op::Create,
                    kind: "model".to_owned(),
                    name: "m".to_owned(),
                    host: "solo".to_owned(),
                    detail: "two\nlines \"quoted\"".to_owned(),
                    changes: vec![crate::changes::Change {
                        field: "ceiling".to_owned(),
                        before: "128".to_owned(),
                        after: "200".to_owned(),
                    }],
                    id: "plan-x-0".to_owned(),
                    action: Action::Submit {
                        request: Request::InstallModel {
                            name: "m".to_owned(),
                            model: "model \"m\" host=\"solo\" {\n    input \"a\"\n}\n".to_owned(),
                            serves: vec!["ops".to_owned()],
                            ceilings: [("ops".to_owned(), 4096)].into(),
                        },
                    },
                    after: vec!["plan-x-1".to_owned()],
                    waits_for: Some(Wait::running(["solo".to_owned()])),
                },
                Transition {
                    op: Op::Attention,
                    kind: "operation".to_owned(),
                    name: "b2".to_owned(),
                    host: "solo".to_owned(),
                    detail: "lost".to_owned(),
                    changes: Vec::new(),
                    id: "b2".to_owned(),
                    action: Action::Recover {
                        op: "b2".to_owned(),
                    },
                    after: Vec::new(),
                    waits_for: None,
                },
            ],
        };
        let dir = std::env::temp_dir().join(format!("grid-planfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.plan");
        std::fs::write(&path, render(&plan)).unwrap();
        assert!(is_plan(&path));
        let loaded = load(&path).unwrap();
        assert_eq!(loaded.transitions, plan.transitions);
        assert_eq!(loaded.observed, plan.observed);
        assert_eq!(loaded.fingerprint(), plan.fingerprint());
        let edited = render(&plan).replace("plan-x-0\" detail=\"two", "plan-x-0\" detail=\"three");
        std::fs::write(&path, edited).unwrap();
        assert!(load(&path).unwrap_err().contains("edited"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
