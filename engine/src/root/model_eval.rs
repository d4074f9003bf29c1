//! The built-in Process `model.eval`, wired here because it joins two rooms: the
//! Processes service runs it, the host's model owner evaluates.

use std::sync::{Mutex, Weak};

use crate::host::Host;
use crate::processes::service::{Invocation, Process};

/// `model.eval`: evaluates a model this host serves with the given inputs (argument
/// `model=NAME`, every other argument an input value) on a copy — nothing is journaled
/// or changed — and returns every value.
pub struct ModelEval {
    pub host: Weak<Mutex<Host>>,
}

impl Process for ModelEval {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        let model = invocation
            .arguments
            .get("model")
            .ok_or("model.eval needs the argument `model=NAME`")?;
        let mut inputs = Vec::new();
        for (name, text) in invocation.arguments.iter().filter(|(n, _)| *n != "model") {
            let value: f64 = text
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .ok_or_else(|| format!("input `{name}`: `{text}` is not a finite number"))?;
            inputs.push((name.clone(), value));
        }
        let host = self.host.upgrade().ok_or("the host is stopping")?;
        let values = host
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .evaluate(model, &inputs)?;
        let values: serde_json::Map<String, serde_json::Value> = values
            .into_iter()
            .map(|(name, value)| {
                let value = match value {
                    crate::protocol::ValueText::Number(x) => serde_json::json!(x),
                    crate::protocol::ValueText::Error(e) => serde_json::json!(e),
                };
                (name, value)
            })
            .collect();
        Ok(serde_json::json!({ "model": model, "values": values }))
    }
}
