//! The `opcua` tag source: `opcua "opc.tcp://HOST:PORT[/PATH]" node=NODE-ID
//! security=none|sign|sign-and-encrypt [policy=P] [publishing-ms=N]
//! [server-certificate=PATH]` (docs/sources.md, "OPC UA").

use super::*;
use crate::canonical::quote;
use crate::endpoint::OpcUaEndpoint;

/// The security policies a `sign` or `sign-and-encrypt` tag may name, the first the
/// default: the three OPC UA 1.04 policies that are neither deprecated nor `None`.
pub const OPCUA_POLICIES: [&str; 3] = [
    "Basic256Sha256",
    "Aes128Sha256RsaOaep",
    "Aes256Sha256RsaPss",
];

impl FileReader<'_> {
    pub(super) fn opcua(&mut self, c: &mut NodeReader) -> Option<TagSource> {
        let endpoint = c.string_arg(self, 0, "endpoint URL").and_then(|(text, span)| {
            match OpcUaEndpoint::parse(&text) {
                Ok(endpoint) => Some((endpoint, span)),
                Err(why) => {
                    self.error(
                        span,
                        format!(
                            "the endpoint of `opcua` is {}, not opc.tcp://HOST:PORT[/PATH]: {why}",
                            quote(&text)
                        ),
                        "not an OPC UA endpoint",
                        "for example \"opc.tcp://127.0.0.1:4840/grid/\": the scheme opc.tcp, the port written out",
                    );
                    None
                }
            }
        });
        let node = c.string_prop(self, "node", true).and_then(|(text, span)| {
            match node_id(&text) {
                Ok(node) => Some(node),
                Err(why) => {
                    self.error(
                        span,
                        format!("property `node` of `opcua` is {}: {why}", shorten(&text)),
                        "not a node id",
                        "a node id is ns=N;s=NAME, ns=N;i=NUMBER, ns=N;g=GUID or ns=N;b=BASE64 (ns=N; may be left out for namespace 0)",
                    );
                    None
                }
            }
        });
        let security = match c.string_prop(self, "security", false) {
            Some((name, span)) => match OpcUaSecurity::from_name(&name) {
                Some(security) => Some((security, span)),
                None => {
                    self.error(
                        span,
                        format!("unknown OPC UA security mode `{name}`"),
                        "not a security mode",
                        "security is none (a loopback server only), sign or sign-and-encrypt",
                    );
                    None
                }
            },
            None => {
                if c.has_property("security").is_none() {
                    c.missing(
                        self,
                        "`opcua` needs property `security`: it has no default".to_owned(),
                        "write security=none (a server on this machine only), security=sign or security=sign-and-encrypt (with server-certificate=PATH)".to_owned(),
                    );
                }
                None
            }
        };
        let policy = match c.string_prop(self, "policy", false) {
            Some((name, span)) => match OPCUA_POLICIES.iter().find(|p| **p == name) {
                Some(_) => Some(Some((name, span))),
                None => {
                    self.error(
                        span,
                        format!("unknown OPC UA security policy `{name}`"),
                        "not a policy",
                        &format!("policy is one of {}", OPCUA_POLICIES.join(", ")),
                    );
                    None
                }
            },
            None if c.has_property("policy").is_some() => None,
            None => Some(None),
        };
        let publishing = match c.limited_int_prop(
            self,
            "publishing-ms",
            false,
            (
                limits::OPCUA_PUBLISHING_MS_MIN.into(),
                "OPCUA_PUBLISHING_MS_MIN",
            ),
            (
                limits::OPCUA_PUBLISHING_MS_MAX.into(),
                "OPCUA_PUBLISHING_MS_MAX",
            ),
        ) {
            Some((i, _)) => Some(i as u32),
            None if c.has_property("publishing-ms").is_some() => None,
            None => Some(limits::OPCUA_PUBLISHING_MS_DEFAULT),
        };
        let certificate = match c.string_prop(self, "server-certificate", false) {
            Some((path, span)) if path.is_empty() => {
                self.error(
                    span,
                    "property `server-certificate` of `opcua` is empty",
                    "empty",
                    "name a DER or PEM file of the server's application certificate",
                );
                None
            }
            Some((path, span)) => Some(Some((path, span))),
            None if c.has_property("server-certificate").is_some() => None,
            None => Some(None),
        };
        // What the fields mean together, once each reads on its own.
        let mut sound = true;
        if let (Some((security, security_span)), Some((endpoint, endpoint_span))) =
            (&security, &endpoint)
            && *security == OpcUaSecurity::None
            && !endpoint.host.is_loopback()
        {
            let d = Diagnostic::at(
                &self.file,
                *security_span,
                format!(
                    "`opcua` to {endpoint} has security=none, and `{}` is not a loopback server",
                    endpoint.host
                ),
                "no security beyond this machine",
            )
            .with_label(*endpoint_span, "not on this machine")
            .with_help(
                "use security=sign-and-encrypt (or sign) with server-certificate=PATH: security=none is only for a server on this machine (127.0.0.0/8, ::1, localhost)",
            );
            self.problems.push(d);
            sound = false;
        }
        if let Some((security, security_span)) = &security {
            let unsecured = *security == OpcUaSecurity::None;
            for (key, given) in [
                (
                    "policy",
                    policy.as_ref().and_then(|p| p.as_ref().map(|p| p.1)),
                ),
                (
                    "server-certificate",
                    certificate.as_ref().and_then(|c| c.as_ref().map(|c| c.1)),
                ),
            ] {
                if let (true, Some(span)) = (unsecured, given) {
                    let d = Diagnostic::at(
                        &self.file,
                        span,
                        format!("property `{key}` of `opcua` secures a session, which security=none does not"),
                        "nothing to secure",
                    )
                    .with_label(*security_span, "no security")
                    .with_help(format!("use security=sign or sign-and-encrypt, or remove `{key}`"));
                    self.problems.push(d);
                    sound = false;
                }
            }
            if !unsecured && matches!(certificate, Some(None)) {
                self.error(
                    *security_span,
                    format!(
                        "`opcua` with security={} names no server certificate to trust",
                        security.name()
                    ),
                    "needs server-certificate=",
                    "add server-certificate=\"PATH\": a DER or PEM file of the server's application certificate, the only one the host trusts for this tag",
                );
                sound = false;
            }
        }
        let (security, _) = security?;
        let policy = match policy? {
            Some((name, _)) => Some(name),
            None if security == OpcUaSecurity::None => None,
            None => Some(OPCUA_POLICIES[0].to_owned()),
        };
        let source = TagSource::OpcUa {
            endpoint: endpoint?.0.to_string(),
            node: node?,
            security,
            policy,
            publishing_ms: publishing?,
            server_certificate: certificate?.map(|(path, _)| path),
        };
        sound.then_some(source)
    }
}

/// A node id's text in its one spelling (`ns=0;` left out, numbers without leading
/// zeros, a GUID in lower case), or why it is not one.
pub(crate) fn node_id(text: &str) -> Result<String, String> {
    let max = limits::OPCUA_NODE_ID_LENGTH_MAX;
    if text.len() > max {
        return Err(format!(
            "{} bytes long, above OPCUA_NODE_ID_LENGTH_MAX ({max})",
            text.len()
        ));
    }
    let (namespace, identifier) = match text.strip_prefix("ns=") {
        Some(rest) => {
            let (ns, identifier) = rest
                .split_once(';')
                .ok_or("`ns=N` is not followed by `;` and an identifier")?;
            let ns = decimal(ns)
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| {
                    format!("its namespace index `{ns}` is not a number from 0 to 65535")
                })?;
            (ns, identifier)
        }
        None => (0, text),
    };
    let prefix = if namespace == 0 {
        String::new()
    } else {
        format!("ns={namespace};")
    };
    let Some((kind, value)) = identifier.split_once('=') else {
        return Err("it has no identifier (`i=`, `s=`, `g=` or `b=`)".to_owned());
    };
    let value = match kind {
        "i" => decimal(value)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                format!("its numeric identifier `{value}` is not a number from 0 to 4294967295")
            })?
            .to_string(),
        "s" if value.is_empty() => return Err("its string identifier is empty".to_owned()),
        "s" => value.to_owned(),
        "g" if guid(value) => value.to_ascii_lowercase(),
        "g" => {
            return Err(format!(
                "its GUID `{value}` is not 8-4-4-4-12 hexadecimal digits"
            ));
        }
        "b" if base64(value) => value.to_owned(),
        "b" => return Err(format!("its opaque identifier `{value}` is not base64")),
        other => {
            return Err(format!(
                "its identifier kind `{other}=` is none of i=, s=, g=, b="
            ));
        }
    };
    Ok(format!("{prefix}{kind}={value}"))
}

/// Decimal digits only (no sign), as a number.
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn guid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Standard base64 with its padding, not empty.
fn base64(text: &str) -> bool {
    let body = text.trim_end_matches('=');
    !text.is_empty()
        && text.len().is_multiple_of(4)
        && text.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// A quoted text for a message, cut after 64 characters.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((at, _)) => format!("{}…", quote(&text[..at])),
        None => quote(text),
    }
}

#[cfg(test)]
mod tests {
    use super::node_id;

    #[test]
    fn node_ids_have_one_spelling() {
        for (text, canonical) in [
            ("ns=2;s=Boiler.Pressure", "ns=2;s=Boiler.Pressure"),
            ("i=2258", "i=2258"),
            ("ns=0;i=2258", "i=2258"),
            ("ns=02;i=007", "ns=2;i=7"),
            ("s=a=b;c", "s=a=b;c"),
            (
                "ns=3;g=09087E75-8E5E-499B-954F-F2A9603DB28A",
                "ns=3;g=09087e75-8e5e-499b-954f-f2a9603db28a",
            ),
            (
                "ns=1;b=M/RbKBsRVkePCePcx24oRA==",
                "ns=1;b=M/RbKBsRVkePCePcx24oRA==",
            ),
        ] {
            assert_eq!(node_id(text).as_deref(), Ok(canonical), "{text}");
            assert_eq!(node_id(canonical).as_deref(), Ok(canonical));
        }
        for text in [
            "",
            "Boiler",
            "ns=2",
            "ns=70000;i=1",
            "ns=-1;i=1",
            "ns=2;i=x",
            "i=4294967296",
            "ns=2;s=",
            "ns=2;g=1234",
            "ns=2;b=abc",
            "ns=2;x=1",
            "nsu=urn:x;s=a",
        ] {
            assert!(node_id(text).is_err(), "{text}");
        }
        let long = format!(
            "ns=1;s={}",
            "a".repeat(crate::limits::OPCUA_NODE_ID_LENGTH_MAX)
        );
        assert!(
            node_id(&long)
                .unwrap_err()
                .contains("OPCUA_NODE_ID_LENGTH_MAX")
        );
    }
}
