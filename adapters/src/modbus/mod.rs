//! Modbus TCP (tokio-modbus): registers polled per device address. See docs/sources.md.
//!
//! One task per device address (`HOST:PORT`) holds one TCP connection and polls every
//! tag of that address ([`poll`]); due tags are coalesced into as few reads as Modbus
//! allows ([`plan`]); what the registers mean is pure ([`decode`]).

mod decode;
mod plan;
mod poll;

use std::collections::{BTreeSet, HashMap};
use std::sync::PoisonError;
use std::time::Duration;

use grid_spec::TagSource;
use grid_spec::limits::{MODBUS_INTERVAL_MS_MAX, MODBUS_INTERVAL_MS_MIN};
use tokio::sync::mpsc;

use crate::{AdapterError, Sink};
use poll::{Active, Command, Point};

/// The Modbus devices a host polls, one connection per device address.
pub struct Devices {
    runtime: tokio::runtime::Handle,
    sink: Sink,
    active: Active,
    /// Device address → its task.
    devices: HashMap<String, Device>,
    /// Tag → the device address it reads.
    addresses: HashMap<String, String>,
}

/// The handle of one device address's task.
struct Device {
    commands: mpsc::UnboundedSender<Command>,
    tags: BTreeSet<String>,
}

impl Devices {
    pub fn new(runtime: tokio::runtime::Handle, sink: Sink) -> Devices {
        Devices {
            runtime,
            sink,
            active: Active::default(),
            devices: HashMap::new(),
            addresses: HashMap::new(),
        }
    }

    /// Polls `tag` at its device (replacing what polled it before, under another
    /// generation: from now on only `generation` reports). A type its register cannot
    /// hold is reported as one `refused` reading, and the tag is not polled.
    pub fn start(&mut self, tag: &grid_spec::Tag, generation: u64) -> Result<(), AdapterError> {
        let TagSource::Modbus {
            address,
            unit,
            register,
            register_address,
            value_type,
            word_order,
            scale,
            offset,
            interval_ms,
        } = &tag.source
        else {
            return Err(AdapterError::Invalid {
                tag: tag.name.clone(),
                reason: format!("reads {}, not modbus", tag.source.kind()),
            });
        };
        if !(MODBUS_INTERVAL_MS_MIN..=MODBUS_INTERVAL_MS_MAX).contains(interval_ms) {
            return Err(AdapterError::Invalid {
                tag: tag.name.clone(),
                reason: format!(
                    "interval-ms={interval_ms} is outside \
                     {MODBUS_INTERVAL_MS_MIN}..={MODBUS_INTERVAL_MS_MAX}"
                ),
            });
        }
        if !scale.is_finite() || !offset.is_finite() {
            return Err(AdapterError::Invalid {
                tag: tag.name.clone(),
                reason: format!("scale={scale} and offset={offset} must be finite"),
            });
        }
        let point = Point {
            tag: tag.name.clone(),
            generation,
            span: plan::Span {
                unit: *unit,
                register: *register,
                address: *register_address,
                count: value_type.registers(),
            },
            encoding: decode::Encoding {
                value_type: *value_type,
                word_order: *word_order,
                scale: *scale,
                offset: *offset,
            },
            interval: Duration::from_millis(u64::from(*interval_ms)),
        };
        if self.addresses.get(&tag.name) != Some(address) {
            self.stop(&tag.name);
        }
        self.lock_active().insert(tag.name.clone(), generation);
        self.addresses.insert(tag.name.clone(), address.clone());
        let device = self
            .devices
            .entry(address.clone())
            .or_insert_with(|| spawn(&self.runtime, address, &self.sink, &self.active));
        device.tags.insert(tag.name.clone());
        // Fails only when the task ended because the sink closed: nobody listens.
        let _ = device.commands.send(Command::Start(point));
        Ok(())
    }

    /// Stops polling `name`: once this returns, nothing more is sent for it. The task
    /// of its device ends with its last tag.
    pub fn stop(&mut self, name: &str) {
        self.lock_active().remove(name);
        let Some(address) = self.addresses.remove(name) else {
            return;
        };
        let Some(device) = self.devices.get_mut(&address) else {
            return;
        };
        device.tags.remove(name);
        let _ = device.commands.send(Command::Stop(name.to_owned()));
        if device.tags.is_empty() {
            // Dropping the last sender ends the task once it has read its commands.
            self.devices.remove(&address);
        }
    }

    fn lock_active(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn spawn(runtime: &tokio::runtime::Handle, address: &str, sink: &Sink, active: &Active) -> Device {
    let (commands, receiver) = mpsc::unbounded_channel();
    runtime.spawn(poll::run(
        address.to_owned(),
        receiver,
        sink.clone(),
        active.clone(),
    ));
    Device {
        commands,
        tags: BTreeSet::new(),
    }
}
