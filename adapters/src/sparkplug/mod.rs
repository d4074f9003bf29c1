//! MQTT Sparkplug B (rumqttc, prost): one subscription per tag. See docs/sources.md.
//!
//! - [`payload`]: the Sparkplug B schema's generated types, the datatypes, values.
//! - [`session`]: the pure state machine of births, aliases, `seq`, `bdSeq`, deaths
//!   and debt (no IO, no clock).

pub mod payload;
pub mod session;

use crate::{AdapterError, Credentials, Sink};

/// One tag's subscription to its edge node's messages.
pub struct Subscription {}

impl Subscription {
    pub fn start(
        _runtime: &tokio::runtime::Handle,
        _sink: Sink,
        _host: &str,
        tag: &grid_spec::Tag,
        _generation: u64,
        _credentials: &Credentials,
    ) -> Result<Subscription, AdapterError> {
        Err(AdapterError::NotProvided {
            tag: tag.name.clone(),
            kind: "sparkplug",
        })
    }

    pub fn stop(self) {}
}
