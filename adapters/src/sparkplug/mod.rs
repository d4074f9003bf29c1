//! MQTT Sparkplug B (rumqttc, prost): one subscription per tag, to the edge node that
//! publishes its metric. See docs/sources.md, "MQTT Sparkplug B".
//!
//! - [`payload`]: the Sparkplug B schema's generated types, the datatypes, values.
//! - [`session`]: the pure state machine of births, aliases, `seq`, `bdSeq`, deaths
//!   and debt (no IO, no clock).
//! - [`client`]: the MQTT connection that feeds it and carries out its answers.

pub mod client;
pub mod payload;
pub mod session;

use std::sync::Arc;

use crate::{AdapterError, Credentials, Sink};

/// One tag's subscription to its edge node's messages: a task on the host's runtime.
pub struct Subscription {
    task: crate::task::Task,
}

impl Subscription {
    /// Starts reading `tag` (a `sparkplug` source). Refuses, before anything connects,
    /// a broker URL that is not `mqtt://` (loopback) or `mqtts://`, an unreadable `ca`
    /// file, and a `membership` this host holds no credentials of.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        sink: Sink,
        host: &str,
        tag: &grid_spec::Tag,
        generation: u64,
        credentials: &Credentials,
    ) -> Result<Subscription, AdapterError> {
        let invalid = |reason: String| AdapterError::Invalid {
            tag: tag.name.clone(),
            reason,
        };
        let grid_spec::TagSource::Sparkplug {
            broker,
            group,
            node,
            device,
            metric,
            client_id,
            ca,
            membership,
        } = &tag.source
        else {
            return Err(invalid(format!(
                "reads {}, not sparkplug",
                tag.source.kind()
            )));
        };
        let (broker, tls) = connection(broker, ca, membership, credentials).map_err(invalid)?;
        let client_id = client_id
            .clone()
            .unwrap_or_else(|| format!("grid-{host}-{}", tag.name));
        let options = client::options(&broker, &client_id, tls);
        let session = session::Session::new(session::Address {
            group: group.clone(),
            node: node.clone(),
            device: device.clone(),
            metric: metric.clone(),
        });
        let reporter = crate::task::Reporter::new(sink, &tag.name, generation);
        let task = crate::task::Task::new(
            &reporter,
            runtime.spawn(client::run(options, session, reporter.clone())),
        );
        Ok(Subscription { task })
    }

    /// Ends the task; nothing is sent to the sink once this returns.
    pub fn stop(self) {
        self.task.stop();
    }
}

/// Whether `tag` could start: its broker URL, `ca` file and membership credentials
/// (what [`Subscription::start`] refuses), without connecting.
pub fn check(tag: &grid_spec::Tag, credentials: &Credentials) -> Result<(), AdapterError> {
    let grid_spec::TagSource::Sparkplug {
        broker,
        ca,
        membership,
        ..
    } = &tag.source
    else {
        return Ok(());
    };
    connection(broker, ca, membership, credentials)
        .map(|_| ())
        .map_err(|reason| AdapterError::Invalid {
            tag: tag.name.clone(),
            reason,
        })
}

/// The broker and, for `mqtts://`, its TLS configuration.
fn connection(
    broker: &str,
    ca: &Option<String>,
    membership: &Option<String>,
    credentials: &Credentials,
) -> Result<(client::Broker, Option<Arc<rustls::ClientConfig>>), String> {
    let broker = client::Broker::parse(broker)?;
    let tls = if broker.tls {
        Some(client::tls_config(
            ca.as_deref(),
            membership.as_deref(),
            credentials,
        )?)
    } else {
        None
    };
    Ok((broker, tls))
}
