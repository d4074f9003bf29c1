//! The MQTT side of one tag (rumqttc): the broker URL and TLS configuration, and the
//! task that connects, subscribes to the edge node's topics, feeds the [`Session`]
//! and carries out what it answers — reports to the host's sink (awaited: a slow host
//! slows the reading, nothing is dropped) and rebirth commands to the node.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use rumqttc::{AsyncClient, EventLoop, MqttOptions, Packet, QoS, TlsConfiguration, Transport};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use super::payload;
use super::session::{Action, Session};
use crate::limits::{
    SPARKPLUG_KEEP_ALIVE_S, SPARKPLUG_PACKET_BYTES_MAX, SPARKPLUG_RECONNECT_DELAY_MS_MAX,
    SPARKPLUG_RECONNECT_DELAY_MS_MIN, SPARKPLUG_REQUESTS_QUEUED_MAX,
};
use crate::task::Reporter;
use crate::{Connection, Credentials, Event};

/// A broker URL: `mqtt://HOST[:PORT]` (1883, loopback only) or `mqtts://HOST[:PORT]`
/// (8883).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl Broker {
    pub fn parse(url: &str) -> Result<Broker, String> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("mqtts://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("mqtt://") {
            (false, rest)
        } else {
            return Err(format!("broker `{url}` is not an mqtt:// or mqtts:// URL"));
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains(['/', '@', '?', '#']) {
            return Err(format!("broker `{url}` is not HOST[:PORT]"));
        }
        let default_port = if tls { 8883 } else { 1883 };
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && !port.contains(']') => {
                let port = port
                    .parse()
                    .map_err(|_| format!("broker `{url}`: port `{port}` is not a number"))?;
                (host, port)
            }
            _ => (rest, default_port),
        };
        let broker = Broker {
            tls,
            host: host.to_owned(),
            port,
        };
        if !tls && !broker.is_loopback() {
            return Err(format!(
                "broker `{url}`: plain mqtt:// is only for a loopback broker; use mqtts://"
            ));
        }
        Ok(broker)
    }

    fn is_loopback(&self) -> bool {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// The TLS configuration of an `mqtts://` tag: the `ca` file's certificates as the only
/// roots, presenting the membership's certificate when one is named; the membership's
/// own configuration (its authority as the only root) when no `ca` is.
pub fn tls_config(
    ca: Option<&str>,
    membership: Option<&str>,
    credentials: &Credentials,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let member = match membership {
        Some(m) => Some(credentials.memberships.get(m).ok_or_else(|| {
            format!("membership `{m}` is not one this host holds credentials of")
        })?),
        None => None,
    };
    let Some(ca) = ca else {
        return member
            .cloned()
            .ok_or_else(|| "an mqtts:// broker needs `ca` or `membership`".to_owned());
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca).map_err(|e| format!("ca `{ca}`: {e}"))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("ca `{ca}`: {e}"))?;
        roots.add(cert).map_err(|e| format!("ca `{ca}`: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("ca `{ca}` holds no certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    Ok(Arc::new(match member {
        Some(m) => builder.with_client_cert_resolver(m.client_auth_cert_resolver.clone()),
        None => builder.with_no_client_auth(),
    }))
}

/// The MQTT options of one tag's connection.
pub fn options(
    broker: &Broker,
    client_id: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, broker.host.clone(), broker.port);
    options
        .set_keep_alive(Duration::from_secs(SPARKPLUG_KEEP_ALIVE_S))
        .set_clean_session(true)
        .set_max_packet_size(SPARKPLUG_PACKET_BYTES_MAX, SPARKPLUG_PACKET_BYTES_MAX);
    if let Some(config) = tls {
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(config)));
    }
    options
}

/// The tag's task: connect (with bounded backoff), subscribe on every ConnAck, feed
/// the session, until stopped.
pub async fn run(options: MqttOptions, mut session: Session, reporter: Reporter) {
    let (client, mut eventloop) = AsyncClient::new(options, SPARKPLUG_REQUESTS_QUEUED_MAX);
    let connecting = Event::Connection(Connection {
        state: "connecting".to_owned(),
        detail: None,
    });
    if reporter.send(connecting).await.is_err() {
        return;
    }
    let mut delay_ms = SPARKPLUG_RECONNECT_DELAY_MS_MIN;
    loop {
        let actions = match poll(&mut eventloop).await {
            Polled::ConnAck => {
                delay_ms = SPARKPLUG_RECONNECT_DELAY_MS_MIN;
                for filter in session.address().filters() {
                    if let Err(e) = client.try_subscribe(filter, QoS::AtMostOnce) {
                        tracing::warn!(tag = %reporter.tag, "sparkplug: subscribe: {e}");
                    }
                }
                session.connected(crate::now_ms())
            }
            Polled::Publish(topic, bytes) => session.message(&topic, &bytes, crate::now_ms()),
            Polled::Other => continue,
            Polled::Lost(reason) => {
                let actions = session.connection_lost(&reason, crate::now_ms());
                if carry_out(&actions, &client, &session, &reporter)
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                delay_ms = (delay_ms * 2).min(SPARKPLUG_RECONNECT_DELAY_MS_MAX);
                continue;
            }
        };
        if carry_out(&actions, &client, &session, &reporter)
            .await
            .is_err()
        {
            return;
        }
    }
}

enum Polled {
    ConnAck,
    Publish(String, Vec<u8>),
    Other,
    Lost(String),
}

async fn poll(eventloop: &mut EventLoop) -> Polled {
    match eventloop.poll().await {
        Ok(rumqttc::Event::Incoming(Packet::ConnAck(_))) => Polled::ConnAck,
        Ok(rumqttc::Event::Incoming(Packet::Publish(p))) => {
            Polled::Publish(p.topic, p.payload.to_vec())
        }
        Ok(_) => Polled::Other,
        Err(e) => Polled::Lost(e.to_string()),
    }
}

async fn carry_out(
    actions: &[Action],
    client: &AsyncClient,
    session: &Session,
    reporter: &Reporter,
) -> Result<(), ()> {
    for action in actions {
        match action {
            Action::Report(event) => reporter.send(event.clone()).await?,
            Action::RequestRebirth => {
                let command = payload::rebirth(crate::now_ms());
                let topic = session.address().ncmd_topic();
                if let Err(e) = client.try_publish(topic, QoS::AtMostOnce, false, command) {
                    tracing::warn!(tag = %reporter.tag, "sparkplug: rebirth request: {e}");
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_urls_name_tls_host_and_port() {
        let b = |url| Broker::parse(url);
        assert_eq!(
            b("mqtt://127.0.0.1:1884").unwrap(),
            Broker {
                tls: false,
                host: "127.0.0.1".into(),
                port: 1884
            }
        );
        assert_eq!(b("mqtt://localhost").unwrap().port, 1883);
        assert_eq!(b("mqtt://[::1]:1885/").unwrap().host, "[::1]");
        let tls = b("mqtts://broker.plant.example").unwrap();
        assert_eq!(
            (tls.tls, tls.host.as_str(), tls.port),
            (true, "broker.plant.example", 8883)
        );
        assert_eq!(b("mqtts://10.0.0.5:9883").unwrap().port, 9883);
        assert!(
            b("tcp://127.0.0.1:1883")
                .unwrap_err()
                .contains("not an mqtt://")
        );
        assert!(
            b("mqtt://10.0.0.5:1883")
                .unwrap_err()
                .contains("only for a loopback")
        );
        assert!(
            b("mqtt://127.0.0.1:x")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(b("mqtt://u@127.0.0.1").unwrap_err().contains("HOST[:PORT]"));
        assert!(b("mqtts://").is_err());
    }

    #[test]
    fn tls_needs_a_ca_or_a_membership_this_host_holds() {
        let none = Credentials::default();
        assert!(
            tls_config(None, None, &none)
                .unwrap_err()
                .contains("needs `ca` or `membership`")
        );
        assert!(
            tls_config(None, Some("plant-ops"), &none)
                .unwrap_err()
                .contains("membership `plant-ops`")
        );
        assert!(
            tls_config(Some("/nonexistent/ca.pem"), None, &none)
                .unwrap_err()
                .contains("/nonexistent/ca.pem")
        );
        let dir = std::env::temp_dir().join(format!("grid-spark-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let empty = empty.to_str().unwrap();
        assert!(
            tls_config(Some(empty), None, &none)
                .unwrap_err()
                .contains("no certificate")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
