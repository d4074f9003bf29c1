//! The network addresses tag sources name: a Modbus device's `HOST:PORT`, a
//! Sparkplug broker's `mqtt://HOST[:PORT]` or `mqtts://HOST[:PORT]` URL and an OPC UA
//! server's `opc.tcp://HOST:PORT[/PATH]`.
//!
//! Both are read with the `url` crate (WHATWG URL parsing), then held to the shape
//! docs/topology.md gives: a host and a port, nothing else (no user info, path, query
//! or fragment). A host is an IPv4 address, an IPv6 address in brackets, or a DNS name
//! of letters, digits, `-`, `_` and `.`; names are kept in lower case, so one address
//! has one spelling (`canonical::tag` compares texts).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The port of an `mqtt://` broker that names none (IANA `mqtt`).
pub const MQTT_PORT_DEFAULT: u16 = 1883;
/// The port of an `mqtts://` broker that names none (IANA `secure-mqtt`).
pub const MQTTS_PORT_DEFAULT: u16 = 8883;

/// Why an address is not the shape a tag source needs: the end of a sentence
/// ("… is not HOST:PORT: it has no port").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("it does not parse ({0})")]
    Unparsable(String),
    #[error("it starts with neither mqtt:// nor mqtts://")]
    NoScheme,
    #[error("`{0}://` is neither mqtt:// nor mqtts://")]
    Scheme(String),
    #[error("it names a scheme (`{0}://`); a device address is HOST:PORT alone")]
    DeviceScheme(String),
    #[error("it does not start with opc.tcp://")]
    NoOpcUaScheme,
    #[error("`{0}://` is not opc.tcp://")]
    OpcUaScheme(String),
    #[error("its path holds {0:?}: a server path is printable ASCII without spaces, `?` or `#`")]
    OpcUaPath(char),
    #[error("it has user info (`…@`)")]
    UserInfo,
    #[error("it has a path (`{0}`)")]
    Path(String),
    #[error("it has a query (`?{0}`)")]
    Query(String),
    #[error("it has a fragment (`#{0}`)")]
    Fragment(String),
    #[error("it has no host")]
    NoHost,
    #[error("`{0}` is not an IP address or a host name (letters, digits, `-`, `_`, `.`)")]
    Host(String),
    #[error("it has no port")]
    NoPort,
    #[error("its port is not a number from 1 to 65535")]
    Port,
}

/// A host as an address names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    /// A DNS name, in lower case.
    Name(String),
}

impl Host {
    /// 127.0.0.0/8, ::1 or `localhost`: a peer on this machine.
    pub fn is_loopback(&self) -> bool {
        match self {
            Host::Ipv4(ip) => ip.is_loopback(),
            Host::Ipv6(ip) => ip.is_loopback(),
            Host::Name(name) => name == "localhost",
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ipv4(ip) => write!(f, "{ip}"),
            Host::Ipv6(ip) => write!(f, "[{ip}]"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

/// A Modbus TCP device: `HOST:PORT`, the port 1 to 65535.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAddress {
    pub host: Host,
    pub port: u16,
}

impl DeviceAddress {
    pub fn parse(text: &str) -> Result<DeviceAddress, EndpointError> {
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(EndpointError::DeviceScheme(scheme.to_owned()));
        }
        let (host, port) = authority(&format!("tcp://{text}"))?;
        Ok(DeviceAddress {
            host,
            port: port.ok_or(EndpointError::NoPort)?,
        })
    }
}

impl fmt::Display for DeviceAddress {
    /// `HOST:PORT`, the one spelling of this address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// An MQTT broker: `mqtt://` is plain TCP, `mqtts://` is TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub tls: bool,
    pub host: Host,
    /// As written, or [`MQTT_PORT_DEFAULT`] / [`MQTTS_PORT_DEFAULT`].
    pub port: u16,
}

impl Broker {
    pub fn parse(text: &str) -> Result<Broker, EndpointError> {
        let tls = match text.split_once("://") {
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("mqtt") => false,
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("mqtts") => true,
            Some((scheme, _)) => return Err(EndpointError::Scheme(scheme.to_owned())),
            None => return Err(EndpointError::NoScheme),
        };
        let (host, port) = authority(text)?;
        let port = port.unwrap_or(if tls {
            MQTTS_PORT_DEFAULT
        } else {
            MQTT_PORT_DEFAULT
        });
        Ok(Broker { tls, host, port })
    }

    pub fn scheme(&self) -> &'static str {
        if self.tls { "mqtts" } else { "mqtt" }
    }
}

impl fmt::Display for Broker {
    /// `mqtt://HOST:PORT` or `mqtts://HOST:PORT`, the port written out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme(), self.host, self.port)
    }
}

/// An OPC UA server endpoint: `opc.tcp://HOST:PORT[/PATH]`, the port written out (OPC UA
/// has no port every server uses). The path is the server's, kept as written (printable
/// ASCII without spaces, `?` or `#`); the scheme and host are kept in lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpcUaEndpoint {
    pub host: Host,
    pub port: u16,
    /// `""` or `/…`.
    pub path: String,
}

impl OpcUaEndpoint {
    pub fn parse(text: &str) -> Result<OpcUaEndpoint, EndpointError> {
        let rest = match text.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("opc.tcp") => rest,
            Some((scheme, _)) => return Err(EndpointError::OpcUaScheme(scheme.to_owned())),
            None => return Err(EndpointError::NoOpcUaScheme),
        };
        let (authority_text, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if let Some(bad) = path
            .chars()
            .find(|c| !c.is_ascii_graphic() || matches!(c, '?' | '#'))
        {
            return Err(EndpointError::OpcUaPath(bad));
        }
        let (host, port) = authority(&format!("tcp://{authority_text}"))?;
        Ok(OpcUaEndpoint {
            host,
            port: port.ok_or(EndpointError::NoPort)?,
            path: path.to_owned(),
        })
    }
}

impl fmt::Display for OpcUaEndpoint {
    /// `opc.tcp://HOST:PORT[/PATH]`, the one spelling of this endpoint.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "opc.tcp://{}:{}{}", self.host, self.port, self.path)
    }
}

/// The host and port of a `SCHEME://HOST[:PORT]` URL that holds nothing else.
fn authority(text: &str) -> Result<(Host, Option<u16>), EndpointError> {
    let url = url::Url::parse(text).map_err(|e| match e {
        url::ParseError::InvalidPort => EndpointError::Port,
        url::ParseError::EmptyHost => EndpointError::NoHost,
        other => EndpointError::Unparsable(other.to_string()),
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(EndpointError::UserInfo);
    }
    if !url.path().is_empty() {
        return Err(EndpointError::Path(url.path().to_owned()));
    }
    if let Some(query) = url.query() {
        return Err(EndpointError::Query(query.to_owned()));
    }
    if let Some(fragment) = url.fragment() {
        return Err(EndpointError::Fragment(fragment.to_owned()));
    }
    let host = match url.host() {
        None => return Err(EndpointError::NoHost),
        Some(url::Host::Ipv4(ip)) => Host::Ipv4(ip),
        Some(url::Host::Ipv6(ip)) => Host::Ipv6(ip),
        // Outside http-like schemes the crate keeps the host as written (opaque).
        Some(url::Host::Domain("")) => return Err(EndpointError::NoHost),
        Some(url::Host::Domain(name)) => match name.parse::<Ipv4Addr>() {
            Ok(ip) => Host::Ipv4(ip),
            Err(_)
                if name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) =>
            {
                Host::Name(name.to_ascii_lowercase())
            }
            Err(_) => return Err(EndpointError::Host(name.to_owned())),
        },
    };
    match url.port() {
        Some(0) => Err(EndpointError::Port),
        port => Ok((host, port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_addresses() {
        for (text, shown) in [
            ("127.0.0.1:502", "127.0.0.1:502"),
            ("[::1]:5020", "[::1]:5020"),
            ("PLC-7.plant:65535", "plc-7.plant:65535"),
        ] {
            let address = DeviceAddress::parse(text).unwrap();
            assert_eq!(address.to_string(), shown);
        }
        for (text, error) in [
            ("127.0.0.1", EndpointError::NoPort),
            ("127.0.0.1:0", EndpointError::Port),
            ("127.0.0.1:65536", EndpointError::Port),
            (":502", EndpointError::NoHost),
            ("h:502/x", EndpointError::Path("/x".into())),
            ("me@h:502", EndpointError::UserInfo),
            ("tcp://h:502", EndpointError::DeviceScheme("tcp".into())),
            ("h%41:502", EndpointError::Host("h%41".into())),
        ] {
            assert_eq!(DeviceAddress::parse(text), Err(error), "{text}");
        }
    }

    #[test]
    fn opcua_endpoints() {
        for (text, shown, loopback) in [
            ("opc.tcp://127.0.0.1:4840", "opc.tcp://127.0.0.1:4840", true),
            (
                "OPC.TCP://Server.Plant:4840/grid/",
                "opc.tcp://server.plant:4840/grid/",
                false,
            ),
            (
                "opc.tcp://[::1]:48400/UA/Boiler",
                "opc.tcp://[::1]:48400/UA/Boiler",
                true,
            ),
            ("opc.tcp://localhost:1/", "opc.tcp://localhost:1/", true),
        ] {
            let endpoint = OpcUaEndpoint::parse(text).unwrap();
            assert_eq!(endpoint.to_string(), shown);
            assert_eq!(endpoint.host.is_loopback(), loopback, "{text}");
        }
        for (text, error) in [
            ("127.0.0.1:4840", EndpointError::NoOpcUaScheme),
            (
                "opc.https://h:443",
                EndpointError::OpcUaScheme("opc.https".into()),
            ),
            ("opc.tcp://h", EndpointError::NoPort),
            ("opc.tcp://h:0", EndpointError::Port),
            ("opc.tcp://h:4840/a b", EndpointError::OpcUaPath(' ')),
            ("opc.tcp://h:4840/a?b", EndpointError::OpcUaPath('?')),
            ("opc.tcp://u@h:4840", EndpointError::UserInfo),
            ("opc.tcp://:4840", EndpointError::NoHost),
        ] {
            assert_eq!(OpcUaEndpoint::parse(text), Err(error), "{text}");
        }
    }

    #[test]
    fn brokers() {
        for (text, shown, loopback) in [
            ("mqtt://127.0.0.1", "mqtt://127.0.0.1:1883", true),
            ("mqtt://127.9.0.1:1884", "mqtt://127.9.0.1:1884", true),
            ("MQTTS://Broker.Plant", "mqtts://broker.plant:8883", false),
            ("mqtt://[::1]:1", "mqtt://[::1]:1", true),
            ("mqtt://localhost", "mqtt://localhost:1883", true),
            ("mqtts://10.0.0.1:8884", "mqtts://10.0.0.1:8884", false),
        ] {
            let broker = Broker::parse(text).unwrap();
            assert_eq!(broker.to_string(), shown);
            assert_eq!(broker.host.is_loopback(), loopback, "{text}");
        }
        for (text, error) in [
            ("tcp://h:1883", EndpointError::Scheme("tcp".into())),
            ("mqtt://h:1883/", EndpointError::Path("/".into())),
            ("mqtt://h?x=1", EndpointError::Query("x=1".into())),
            ("mqtt://h#x", EndpointError::Fragment("x".into())),
            ("mqtt://u:p@h", EndpointError::UserInfo),
            ("mqtt://", EndpointError::NoHost),
            ("mqtt://h:70000", EndpointError::Port),
        ] {
            assert_eq!(Broker::parse(text), Err(error), "{text}");
        }
        assert_eq!(
            Broker::parse("127.0.0.1:1883"),
            Err(EndpointError::NoScheme)
        );
        assert!(matches!(
            Broker::parse("mqtt://plc 7"),
            Err(EndpointError::Unparsable(_))
        ));
    }
}
