//! BACnet/IP (the `bacnet-client` crate of Rusty BACnet): one object's present value
//! per tag, polled with ReadPropertyMultiple (present-value, status-flags,
//! reliability) or followed through a confirmed COV subscription. See
//! docs/sources.md, "BACnet/IP".
//!
//! Each tag has its own task and its own client (one UDP socket), so its COV
//! subscription is its own at the device: (this client's address, the tag's process
//! identifier, the object). What the properties mean is pure ([`decode`]).

mod decode;
mod point;

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use grid_spec::TagSource;
use grid_spec::bacnet::BacnetObject;
use tokio::sync::{mpsc, oneshot};

use crate::{AdapterError, Released, Sink};
use point::{Command, Point};

/// The BACnet objects a host reads, one task per tag.
pub struct Objects {
    runtime: tokio::runtime::Handle,
    sink: Sink,
    points: HashMap<String, Handle>,
}

struct Handle {
    commands: mpsc::UnboundedSender<Command>,
    stopped: Arc<AtomicBool>,
    cov: bool,
}

impl Objects {
    pub fn new(runtime: tokio::runtime::Handle, sink: Sink) -> Objects {
        Objects {
            runtime,
            sink,
            points: HashMap::new(),
        }
    }

    /// Reads `tag` (replacing what read it before, under another generation).
    pub fn start(&mut self, tag: &grid_spec::Tag, generation: u64) -> Result<(), AdapterError> {
        let (device, object, cov, interval_ms) = fields(tag)?;
        self.stop(&tag.name);
        let stopped = Arc::new(AtomicBool::new(false));
        let (commands, receiver) = mpsc::unbounded_channel();
        let point = Point {
            tag: tag.name.clone(),
            generation,
            device,
            object,
            cov,
            interval_ms,
            process: process_identifier(&tag.name),
            stopped: stopped.clone(),
            sink: self.sink.clone(),
            last_debt: None,
            state: None,
        };
        self.runtime.spawn(point.run(receiver));
        self.points.insert(
            tag.name.clone(),
            Handle {
                commands,
                stopped,
                cov: cov.is_some(),
            },
        );
        Ok(())
    }

    /// Stops reading `name`; nothing it reports afterwards is sent. A COV
    /// subscription is not cancelled: it expires by its lifetime.
    pub fn stop(&mut self, name: &str) {
        if let Some(handle) = self.points.remove(name) {
            handle.stopped.store(true, Ordering::SeqCst);
            let _ = handle.commands.send(Command::Stop);
        }
    }

    /// Stops reading `name` and, for a COV tag, cancels its subscription at the
    /// device: the answer comes through the receiver. `None` for a polled tag (it
    /// holds nothing at the device) or one not read here.
    pub fn release(&mut self, name: &str) -> Option<Released> {
        let handle = self.points.remove(name)?;
        handle.stopped.store(true, Ordering::SeqCst);
        if !handle.cov {
            let _ = handle.commands.send(Command::Stop);
            return None;
        }
        let (answer, released) = oneshot::channel();
        let _ = handle.commands.send(Command::Release(answer));
        Some(released)
    }
}

/// Whether `tag` could start: its device address resolves.
pub fn check(tag: &grid_spec::Tag) -> Result<(), AdapterError> {
    fields(tag).map(|_| ())
}

type Fields = (SocketAddr, BacnetObject, Option<u32>, u32);

fn fields(tag: &grid_spec::Tag) -> Result<Fields, AdapterError> {
    let TagSource::Bacnet {
        address,
        object,
        cov,
        lifetime_s,
        interval_ms,
        ..
    } = &tag.source
    else {
        return Err(AdapterError::Invalid {
            tag: tag.name.clone(),
            reason: "not a bacnet source".into(),
        });
    };
    let invalid = |reason: String| AdapterError::Invalid {
        tag: tag.name.clone(),
        reason,
    };
    let object =
        BacnetObject::parse(object).map_err(|e| invalid(format!("object {object}: {e}")))?;
    let device = address
        .to_socket_addrs()
        .map_err(|e| invalid(format!("BACnet device {address} does not resolve: {e}")))?
        .find(SocketAddr::is_ipv4)
        .ok_or_else(|| invalid(format!("BACnet device {address} has no IPv4 address")))?;
    let cov = cov.then(|| lifetime_s.unwrap_or(grid_spec::limits::BACNET_COV_LIFETIME_S_DEFAULT));
    Ok((device, object, cov, *interval_ms))
}

/// The tag's subscriber process identifier: FNV-1a of its name, so each tag has its
/// own and the same after a restart.
fn process_identifier(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}
