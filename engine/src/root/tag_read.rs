//! The built-in Process `tag.read`, wired here because it joins two rooms: the
//! Processes service runs it (under the caller's execution grant, its outcome journaled
//! under the request id), the host's source journal answers.

use std::sync::{Mutex, Weak};

use crate::host::Host;
use crate::processes::service::{Invocation, Process};

/// `tag.read`: the journaled observation `index` of `tag` (argument `tag=NAME`, optional
/// `index=N`, the newest when absent) and what it produced in each model it fed — read
/// from the journal, never from the device. A re-sent request id answers the outcome
/// journaled the first time, so the same observation.
pub struct TagRead {
    pub host: Weak<Mutex<Host>>,
}

impl Process for TagRead {
    fn run(&self, invocation: &Invocation<'_>) -> Result<serde_json::Value, String> {
        let tag = invocation
            .arguments
            .get("tag")
            .ok_or("tag.read needs the argument `tag=NAME`")?;
        if let Some((name, _)) = invocation
            .arguments
            .iter()
            .find(|(n, _)| *n != "tag" && *n != "index")
        {
            return Err(format!(
                "tag.read takes the arguments `tag` and `index`, not `{name}`"
            ));
        }
        let index = match invocation.arguments.get("index") {
            None => None,
            Some(text) => Some(text.trim().parse::<u64>().map_err(|_| {
                format!("argument `index`: `{text}` is not an observation index (1, 2, …)")
            })?),
        };
        let host = self.host.upgrade().ok_or("the host is stopping")?;
        let host = host.lock().unwrap_or_else(|p| p.into_inner());
        host.tag_read(tag, index)
    }
}
