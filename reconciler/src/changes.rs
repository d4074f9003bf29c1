//! Field-level changes of `~` lines (placeholder until the field differ lands).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub field: String,
    pub before: String,
    pub after: String,
}

pub fn render(change: &Change) -> String {
    format!("{}: {} → {}", change.field, change.before, change.after)
}

pub struct Paint {
    on: bool,
}

impl Paint {
    pub fn off() -> Paint {
        Paint { on: false }
    }

    pub fn detect() -> Paint {
        Paint::off()
    }

    pub fn op(&self, symbol: &str) -> String {
        let _ = self.on;
        symbol.to_owned()
    }
}

pub fn model(before: &str, after: &str) -> Vec<Change> {
    let _ = (before, after);
    Vec::new()
}

pub fn tag(before: &str, after: &str) -> Vec<Change> {
    let _ = (before, after);
    Vec::new()
}

pub fn host_config(
    before: &grid_engine::host::config::HostConfig,
    after: &grid_engine::host::config::HostConfig,
) -> Vec<Change> {
    let _ = (before, after);
    Vec::new()
}

pub fn route(
    before: &grid_engine::delivery::api::RouteInstall,
    after: &grid_engine::delivery::api::RouteInstall,
) -> Vec<Change> {
    let _ = (before, after);
    Vec::new()
}
