//! Modbus TCP (tokio-modbus): registers polled per device address. See docs/sources.md.

use crate::{AdapterError, Sink};

/// The Modbus devices a host polls, one connection per device address.
pub struct Devices {
    #[allow(dead_code)]
    runtime: tokio::runtime::Handle,
    #[allow(dead_code)]
    sink: Sink,
}

impl Devices {
    pub fn new(runtime: tokio::runtime::Handle, sink: Sink) -> Devices {
        Devices { runtime, sink }
    }

    pub fn start(&mut self, tag: &grid_spec::Tag, _generation: u64) -> Result<(), AdapterError> {
        Err(AdapterError::NotProvided {
            tag: tag.name.clone(),
            kind: "modbus",
        })
    }

    pub fn stop(&mut self, _name: &str) {}
}
