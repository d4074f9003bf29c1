//! Saved plans (`gridctl plan --out PLAN`): KDL, with what was observed of each owner,
//! so `reconcile PLAN` can refuse a plan whose owners changed since.
//!
//! ```kdl
//! plan version=1 state="grid-state" fingerprint="…" {
//!     file "topology.kdl"
//!     observed "edge-a" fingerprint="…"
//!     transition "+" kind="model" name="boiler" host="edge-a" id="plan-…" detail="…" {
//!         submit "{…request JSON…}"
//!     }
//! }
//! ```

use std::path::{Path, PathBuf};

use grid_engine::host::config::HostConfig;
use grid_spec::canonical::quote;
use kdl::{KdlDocument, KdlNode, KdlValue};

use crate::plan::{Action, Op, Plan, Transition};

pub fn render(plan: &Plan) -> String {
    let mut out = format!(
        "plan version=1 state={} fingerprint={} {{\n",
        quote(&plan.state.display().to_string()),
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
        match &t.action {
            Action::None => out.push('\n'),
            Action::WriteHostConfig { config, dir } => {
                out.push_str(&format!(
                    " {{\n        host-config {}",
                    quote(&config.to_toml())
                ));
                if let Some(dir) = dir {
                    out.push_str(&format!(" dir={}", quote(&dir.display().to_string())));
                }
                out.push_str("\n    }\n");
            }
            Action::Submit { request } => out.push_str(&format!(
                " {{\n        submit {}\n    }}\n",
                quote(&serde_json::to_string(request).expect("requests serialize"))
            )),
            Action::Recover { op } => {
                out.push_str(&format!(" {{\n        recover {}\n    }}\n", quote(op)))
            }
            Action::CreateCustody => out.push_str(" {\n        create-custody\n    }\n"),
            Action::CreateAuthority { membership } => out.push_str(&format!(
                " {{\n        create-authority {}\n    }}\n",
                quote(membership)
            )),
            Action::Enroll { membership } => out.push_str(&format!(
                " {{\n        enroll {}\n    }}\n",
                quote(membership)
            )),
            Action::Revoke {
                membership,
                participant,
            } => out.push_str(&format!(
                " {{\n        revoke {} participant={}\n    }}\n",
                quote(membership),
                quote(participant)
            )),
            Action::DistributeRevocations { membership } => out.push_str(&format!(
                " {{\n        distribute-revocations {}\n    }}\n",
                quote(membership)
            )),
            Action::Authority { membership, call } => out.push_str(&format!(
                " {{\n        authority {} call={}\n    }}\n",
                quote(membership),
                quote(&serde_json::to_string(call).expect("authority calls serialize"))
            )),
            Action::Claim {
                membership,
                command,
            } => out.push_str(&format!(
                " {{\n        claim {} command={}\n    }}\n",
                quote(membership),
                quote(&serde_json::to_string(command).expect("claim commands serialize"))
            )),
        }
    }
    out.push_str("}\n");
    out
}

/// Whether `path` holds a saved plan rather than a topology.
pub fn is_plan(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| KdlDocument::parse_v2(&text).ok())
        .and_then(|doc| doc.nodes().first().map(|n| n.name().value() == "plan"))
        .unwrap_or(false)
}

fn string(node: &KdlNode, key: &str) -> Result<String, String> {
    match node.get(key) {
        Some(KdlValue::String(s)) => Ok(s.clone()),
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
    let document = KdlDocument::parse_v2(&text)
        .map_err(|e| format!("{}: not a saved plan: {e}", path.display()))?;
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
                let child = node.children().and_then(|c| c.nodes().first());
                let action = match child.map(|c| (c.name().value(), c)) {
                    None => Action::None,
                    Some(("host-config", c)) => Action::WriteHostConfig {
                        config: toml_config(&argument(c)?)?,
                        dir: string(c, "dir").ok().map(PathBuf::from),
                    },
                    Some(("submit", c)) => Action::Submit {
                        request: serde_json::from_str(&argument(c)?)
                            .map_err(|e| format!("a request does not decode: {e}"))?,
                    },
                    Some(("recover", c)) => Action::Recover { op: argument(c)? },
                    Some(("create-custody", _)) => Action::CreateCustody,
                    Some(("create-authority", c)) => Action::CreateAuthority {
                        membership: argument(c)?,
                    },
                    Some(("enroll", c)) => Action::Enroll {
                        membership: argument(c)?,
                    },
                    Some(("revoke", c)) => Action::Revoke {
                        membership: argument(c)?,
                        participant: string(c, "participant")?,
                    },
                    Some(("distribute-revocations", c)) => Action::DistributeRevocations {
                        membership: argument(c)?,
                    },
                    Some(("authority", c)) => Action::Authority {
                        membership: argument(c)?,
                        call: serde_json::from_str(&string(c, "call")?)
                            .map_err(|e| format!("an authority call does not decode: {e}"))?,
                    },
                    Some(("claim", c)) => Action::Claim {
                        membership: argument(c)?,
                        command: serde_json::from_str(&string(c, "command")?)
                            .map_err(|e| format!("a claim command does not decode: {e}"))?,
                    },
                    Some((other, _)) => return Err(format!("unknown action `{other}`")),
                };
                plan.transitions.push(Transition {
                    op,
                    kind: string(node, "kind")?,
                    name: string(node, "name")?,
                    host: string(node, "host")?,
                    detail: string(node, "detail")?,
                    id: string(node, "id")?,
                    action,
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
                    id: "plan-x-0".to_owned(),
                    action: Action::Submit {
                        request: Request::InstallModel {
                            name: "m".to_owned(),
                            model: "model \"m\" host=\"solo\" {\n    input \"a\"\n}\n".to_owned(),
                        },
                    },
                },
                Transition {
                    op: Op::Attention,
                    kind: "operation".to_owned(),
                    name: "b2".to_owned(),
                    host: "solo".to_owned(),
                    detail: "lost".to_owned(),
                    id: "b2".to_owned(),
                    action: Action::Recover {
                        op: "b2".to_owned(),
                    },
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
