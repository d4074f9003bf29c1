//! `bacnet "HOST:PORT" device=N object=TYPE:INSTANCE [property=present-value]
//! [cov=#true [lifetime-s=N]] [interval-ms=N]` (docs/sources.md, "BACnet/IP").

use super::*;
use crate::bacnet::{BacnetObject, BacnetObjectType};
use crate::canonical::quote;
use crate::endpoint::DeviceAddress;

impl FileReader<'_> {
    pub(super) fn bacnet(&mut self, c: &mut NodeReader) -> Option<TagSource> {
        let address = c.string_arg(self, 0, "address").and_then(|(text, span)| {
            match DeviceAddress::parse(&text) {
                Ok(address) => Some(address.to_string()),
                Err(why) => {
                    self.error(
                        span,
                        format!(
                            "the address of `bacnet` is {}, not HOST:PORT: {why}",
                            quote(&text)
                        ),
                        "not HOST:PORT",
                        "write the device's UDP HOST:PORT, the port 1 to 65535 (BACnet/IP's own is 47808): \"127.0.0.1:47808\", \"ahu-3.plant:47808\"",
                    );
                    None
                }
            }
        });
        let device = c.int_prop(
            self,
            "device",
            true,
            0,
            i128::from(limits::BACNET_INSTANCE_MAX) - 1,
        );
        let object = c.string_prop(self, "object", true).and_then(|(text, span)| {
            match BacnetObject::parse(&text) {
                Ok(object) => Some(object.to_string()),
                Err(why) => {
                    let types: Vec<&str> = BacnetObjectType::ALL.iter().map(|t| t.name()).collect();
                    self.error(
                        span,
                        format!(
                            "the object of `bacnet` is {}, not TYPE:INSTANCE: {why}",
                            quote(&text)
                        ),
                        "not TYPE:INSTANCE",
                        &format!(
                            "for example object=\"analog-input:3\": TYPE is one of {}, INSTANCE 0 to {}",
                            types.join(", "),
                            limits::BACNET_INSTANCE_MAX
                        ),
                    );
                    None
                }
            }
        });
        // `present-value` when not given (the one property a tag reads for now).
        let property = match c.string_prop(self, "property", false) {
            Some((p, _)) if p == "present-value" => Some(p),
            Some((p, span)) => {
                self.error(
                    span,
                    format!("property `{p}` of a BACnet object is not read by a tag"),
                    "not present-value",
                    "a tag reads its object's present-value for now: property=present-value (status-flags and reliability are read beside it)",
                );
                None
            }
            None if c.has_property("property").is_some() => None,
            None => Some("present-value".to_owned()),
        };
        let cov = match c.bool_prop(self, "cov") {
            Some(cov) => Some(cov),
            None if c.has_property("cov").is_some() => None,
            None => Some(false),
        };
        let lifetime = optional_limited(
            self,
            c,
            "lifetime-s",
            (
                limits::BACNET_COV_LIFETIME_S_MIN,
                "BACNET_COV_LIFETIME_S_MIN",
            ),
            (
                limits::BACNET_COV_LIFETIME_S_MAX,
                "BACNET_COV_LIFETIME_S_MAX",
            ),
        );
        let interval = optional_limited(
            self,
            c,
            "interval-ms",
            (limits::BACNET_INTERVAL_MS_MIN, "BACNET_INTERVAL_MS_MIN"),
            (limits::BACNET_INTERVAL_MS_MAX, "BACNET_INTERVAL_MS_MAX"),
        );
        // What the fields mean together, once each reads on its own.
        let mut fits = true;
        if let (Some(false), Some(Some((_, span)))) = (cov, lifetime) {
            self.error(
                span,
                "`lifetime-s` is the lifetime of a COV subscription, and this tag polls",
                "without cov=#true",
                "add cov=#true to follow the object through a confirmed COV subscription, or remove lifetime-s",
            );
            fits = false;
        }
        if let (Some(true), Some(Some((_, span)))) = (cov, interval) {
            self.error(
                span,
                "`interval-ms` is a polling interval, and this tag follows a COV subscription",
                "with cov=#true",
                "a COV tag is told of each change: remove interval-ms, or cov=#true to poll",
            );
            fits = false;
        }
        let cov = cov?;
        let source = TagSource::Bacnet {
            address: address?,
            device: device?.0 as u32,
            object: object?,
            property: property?,
            cov,
            lifetime_s: cov.then(|| {
                lifetime
                    .flatten()
                    .map_or(limits::BACNET_COV_LIFETIME_S_DEFAULT, |(l, _)| l)
            }),
            interval_ms: interval?.map_or(limits::BACNET_INTERVAL_MS_DEFAULT, |(i, _)| i),
        };
        lifetime?;
        fits.then_some(source)
    }
}

/// An optional integer property within named limits: `Some(None)` when absent,
/// `Some(Some((value, span)))` when valid, `None` (its diagnostic given) when not.
fn optional_limited(
    r: &mut FileReader,
    c: &mut NodeReader,
    key: &str,
    (min, min_name): (u32, &str),
    (max, max_name): (u32, &str),
) -> Option<Option<(u32, SourceSpan)>> {
    match c.limited_int_prop(
        r,
        key,
        false,
        (min.into(), min_name),
        (max.into(), max_name),
    ) {
        Some((value, span)) => Some(Some((value as u32, span))),
        None if c.has_property(key).is_some() => None,
        None => Some(None),
    }
}
