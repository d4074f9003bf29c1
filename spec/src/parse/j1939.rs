//! `j1939 (log=PATH | interface=NAME) pgn=N spn=N [source-address=N]`: one SPN of one
//! PGN received passively on a CAN bus (docs/sources.md, "CAN/J1939").

use kdl::KdlValue;

use super::*;
use crate::canonical::quote;
use crate::j1939::{SPNS, find, spn as spn_row};

impl FileReader<'_> {
    pub(super) fn j1939(&mut self, c: &mut NodeReader) -> Option<TagSource> {
        // The first shape of this source named its input positionally: say what to
        // write now rather than "unexpected argument".
        let mut positional = false;
        if let Some(entry) = c.positional(0) {
            let shown = match entry.value() {
                KdlValue::String(s) => quote(s),
                other => other.to_string(),
            };
            self.error(
                entry.span(),
                format!("`j1939` names its input with log= or interface=, not as the argument {shown}"),
                "positional input",
                &format!(
                    "write log={shown} for a candump log to replay, or interface={shown} for a SocketCAN interface"
                ),
            );
            positional = true;
            let mut index = 1;
            while c.positional(index).is_some() {
                index += 1;
            }
        }
        let log = self.optional(c, "log", |this, path, span| {
            if path.is_empty() {
                this.error(
                    span,
                    "property `log` of `j1939` is empty",
                    "empty",
                    "name a candump log file (candump -l), for example log=\"engine.log\"",
                );
                return false;
            }
            true
        });
        let interface = self.optional(c, "interface", |this, name, span| {
            interface_name(this, name, span)
        });
        let input = match (log, interface) {
            (Some(Some(path)), Some(None)) => Some(J1939Input::Log(path)),
            (Some(None), Some(Some(name))) => Some(J1939Input::Interface(name)),
            (Some(Some(_)), Some(Some(_))) => {
                if let Some(span) = c.has_property("interface") {
                    let mut d = Diagnostic::at(
                        &self.file,
                        span,
                        "`j1939` reads either a log or an interface, and names both",
                        "second input",
                    )
                    .with_help(
                        "keep log=PATH to replay a capture, or interface=NAME to capture live",
                    );
                    if let Some(log_span) = c.has_property("log") {
                        d = d.with_label(log_span, "first input");
                    }
                    self.problems.push(d);
                }
                None
            }
            (Some(None), Some(None)) if !positional => {
                c.missing(
                    self,
                    "`j1939` needs its input: log=PATH or interface=NAME".to_owned(),
                    "add log=\"engine.log\" (a candump log replayed at its recorded pace) or interface=\"can0\" (a SocketCAN interface)".to_owned(),
                );
                None
            }
            _ => None,
        };
        let pgn = self.j1939_number(c, "pgn", limits::J1939_PGN_MAX, "J1939_PGN_MAX");
        let spn = self.j1939_number(c, "spn", limits::J1939_SPN_MAX, "J1939_SPN_MAX");
        let source_address = match c.int_prop(self, "source-address", false, 0, i128::MAX) {
            Some((address, span)) if address > i128::from(limits::J1939_SOURCE_ADDRESS_MAX) => {
                let what = match address {
                    254 => ": 254 is the null address (a node without one), never a source",
                    255 => ": 255 is the global address (a destination), never a source",
                    _ => "",
                };
                self.error(
                    span,
                    format!(
                        "property `source-address` of `j1939` is {address}, above J1939_SOURCE_ADDRESS_MAX ({}){what}",
                        limits::J1939_SOURCE_ADDRESS_MAX
                    ),
                    "not a source address",
                    &format!(
                        "a source address is 0 to J1939_SOURCE_ADDRESS_MAX ({}); leave it out to read every source",
                        limits::J1939_SOURCE_ADDRESS_MAX
                    ),
                );
                None
            }
            Some((address, _)) => Some(Some(address as u8)),
            None if c.has_property("source-address").is_some() => None,
            None => Some(None),
        };
        let mut decodable = true;
        if let (Some((pgn, _)), Some((spn, span))) = (pgn, spn)
            && find(pgn, spn).is_none()
        {
            let known = SPNS
                .iter()
                .map(|row| format!("{} ({}, PGN {})", row.spn, row.name, row.pgn))
                .collect::<Vec<_>>()
                .join(", ");
            let message = match spn_row(spn) {
                Some(row) => format!(
                    "SPN {spn} ({}) is carried in PGN {}, not PGN {pgn}",
                    row.name, row.pgn
                ),
                None => format!("SPN {spn} is not one Grid decodes"),
            };
            self.error(
                span,
                message,
                "not decodable",
                &format!("Grid decodes SPN {known}"),
            );
            decodable = false;
        }
        let source = TagSource::J1939 {
            input: input?,
            pgn: pgn?.0,
            spn: spn?.0,
            source_address: source_address?,
        };
        decodable.then_some(source)
    }

    /// A required number from 0 to the limit `max` (named `max_name`).
    fn j1939_number(
        &mut self,
        c: &mut NodeReader,
        key: &str,
        max: u32,
        max_name: &str,
    ) -> Option<(u32, SourceSpan)> {
        let (value, span) = c.int_prop(self, key, true, 0, i128::MAX)?;
        if value > i128::from(max) {
            self.error(
                span,
                format!("property `{key}` of `j1939` is {value}, above {max_name} ({max})"),
                "out of range",
                &format!("`{key}` is from 0 to {max_name} ({max})"),
            );
            return None;
        }
        Some((value as u32, span))
    }
}

/// A SocketCAN interface name as Linux accepts one (`dev_valid_name`): 1 to
/// IFNAMSIZ−1 bytes, not `.` or `..`, without `/`, `:` or white space.
fn interface_name(r: &mut FileReader, name: &str, span: SourceSpan) -> bool {
    let max = limits::J1939_INTERFACE_NAME_LENGTH_MAX;
    let (message, label) = if name.is_empty() {
        (
            "property `interface` of `j1939` is empty".to_owned(),
            "empty",
        )
    } else if name.len() > max {
        (
            format!(
                "property `interface` of `j1939` is {} bytes long, above J1939_INTERFACE_NAME_LENGTH_MAX ({max})",
                name.len()
            ),
            "too long",
        )
    } else if name == "." || name == ".." {
        (
            format!("property `interface` of `j1939` is {}", quote(name)),
            "not an interface name",
        )
    } else if let Some(bad) = name
        .chars()
        .find(|c| matches!(c, '/' | ':') || c.is_whitespace())
    {
        (
            format!(
                "property `interface` of `j1939` is {}, which holds {bad:?}",
                quote(name)
            ),
            "not an interface name",
        )
    } else {
        return true;
    };
    r.error(
        span,
        message,
        label,
        &format!(
            "an interface name is 1 to {max} bytes without `/`, `:` or white space, for example interface=\"can0\""
        ),
    );
    false
}
