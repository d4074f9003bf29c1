//! One tag's session: connect (with bounded backoff), read the node's DataType
//! (admission), subscribe to it, forward its data changes, and start over from the
//! beginning when the session is lost.
//!
//! async-opcua's own reconnection is off (`session_retry_limit(0)`): a lost session is
//! reported as debt at once and a new one is made here, so every way a session ends
//! has one path, and what the host is told follows what happened on the wire.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use opcua::client::transport::Connector;
use opcua::client::{
    Client, ClientBuilder, IdentityToken, SessionEventLoop, SessionPollResult,
    SubscriptionCallbacks,
};
use opcua::crypto::SecurityPolicy;
use opcua::types::{
    AttributeId, DataValue, MessageSecurityMode, MonitoredItemCreateRequest, MonitoringMode,
    MonitoringParameters, ReadValueId, StatusChangeNotification, TimestampsToReturn, Variant,
};
use tokio::sync::Notify;

use super::{Target, value};
use crate::limits::{
    OPCUA_MONITORED_ITEM_QUEUE_SIZE, OPCUA_RECONNECT_DELAY_MS_MAX, OPCUA_RECONNECT_DELAY_MS_MIN,
    OPCUA_REQUEST_TIMEOUT_MS, OPCUA_SUBSCRIPTION_KEEP_ALIVE_COUNT,
    OPCUA_SUBSCRIPTION_LIFETIME_COUNT, OPCUA_SUBSCRIPTION_LIFETIME_MS,
};
use crate::task::Reporter;
use crate::{Connection, Event, Quality, Raw, Reading};

/// How one session ended.
enum Ended {
    /// Reconnect after the backoff: the reason is the tag's debt meanwhile.
    Lost(String),
    /// The node cannot be captured: reported once, nothing more.
    Refused(String),
    /// The tag was stopped or the host is gone.
    Stopped,
}

/// Data changes the subscription's callbacks received, not yet reported, and why the
/// server ended the subscription, if it did.
#[derive(Default)]
struct Received {
    values: Mutex<VecDeque<DataValue>>,
    ended: Mutex<Option<String>>,
    arrived: Notify,
}

/// The tag's task, until stopped.
pub async fn run(target: Target, reporter: Reporter) {
    if reporter.send(connection("connecting", None)).await.is_err() {
        return;
    }
    let mut delay_ms = OPCUA_RECONNECT_DELAY_MS_MIN;
    // Debt is reported again only when its reason changes.
    let mut last_debt: Option<String> = None;
    loop {
        let mut online = false;
        let ended = session(&target, &reporter, &mut online).await;
        if online {
            delay_ms = OPCUA_RECONNECT_DELAY_MS_MIN;
            last_debt = None;
        }
        match ended {
            Ended::Stopped => return,
            Ended::Refused(reason) => {
                let refused = Event::Reading(Reading {
                    raw: Raw::None,
                    quality: Quality::Refused {
                        reason: reason.clone(),
                    },
                    device_time_ms: None,
                    received_ms: crate::now_ms(),
                });
                let _ = reporter.send(refused).await;
                let _ = reporter.send(connection("refused", Some(reason))).await;
                return;
            }
            Ended::Lost(reason) => {
                tracing::debug!(tag = %target.tag, "opcua: {reason}");
                if last_debt.as_ref() != Some(&reason) {
                    let debt = Event::Reading(Reading {
                        raw: Raw::None,
                        quality: Quality::Debt {
                            reason: reason.clone(),
                        },
                        device_time_ms: None,
                        received_ms: crate::now_ms(),
                    });
                    if reporter.send(debt).await.is_err() {
                        return;
                    }
                    last_debt = Some(reason.clone());
                }
                if reporter
                    .send(connection("offline", Some(reason)))
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                delay_ms = (delay_ms * 2).min(OPCUA_RECONNECT_DELAY_MS_MAX);
            }
        }
    }
}

fn connection(state: &str, detail: Option<String>) -> Event {
    Event::Connection(Connection {
        state: state.to_owned(),
        detail,
    })
}

/// One session, from connecting to its end. `online` is set once the monitored item
/// exists.
async fn session(target: &Target, reporter: &Reporter, online: &mut bool) -> Ended {
    let server = target.server_certificate.as_deref();
    if let Err(reason) = super::trust_only(&target.pki_dir, server) {
        return Ended::Lost(reason);
    }
    let client = match client(target) {
        Ok(client) => client,
        Err(reason) => return Ended::Lost(reason),
    };
    let endpoints = match client
        .get_server_endpoints_from_url(target.endpoint.as_str())
        .await
    {
        Ok(endpoints) => endpoints,
        Err(e) => {
            return Ended::Lost(format!(
                "connection refused: {}",
                e.status().sub_code().name()
            ));
        }
    };
    let (policy, mode) = security(target);
    let Some(endpoint) = Client::find_matching_endpoint(&endpoints, &target.endpoint, policy, mode)
    else {
        return Ended::Lost(format!(
            "the server offers no endpoint with security={} policy={}",
            target.security.name(),
            target.policy
        ));
    };
    if let Some(trusted) = server
        && endpoint.server_certificate.as_ref() != trusted
    {
        return Ended::Lost(
            "the server's certificate is not the one server-certificate names".to_owned(),
        );
    }
    let mut client = client;
    let (session, event_loop) =
        match client.connect_to_endpoint_directly(endpoint, IdentityToken::Anonymous) {
            Ok(connected) => connected,
            Err(e) => return Ended::Lost(format!("connection refused: {e}")),
        };
    let received = Arc::new(Received::default());
    let mut driver = Driver(tokio::spawn(drive(
        event_loop,
        received.clone(),
        reporter.clone(),
    )));
    let admitted = async {
        if !session.wait_for_connection().await {
            return Err(Ended::Lost("connection refused: no session".to_owned()));
        }
        // Admission: the node's DataType, before anything is captured.
        let data_type = ReadValueId {
            node_id: target.node.clone(),
            attribute_id: AttributeId::DataType as u32,
            ..ReadValueId::default()
        };
        let read = match session
            .read(&[data_type], TimestampsToReturn::Neither, 0.0)
            .await
        {
            Ok(mut values) if !values.is_empty() => values.swap_remove(0),
            Ok(_) => return Err(Ended::Lost("the server answered no DataType".to_owned())),
            Err(e) => {
                return Err(Ended::Lost(format!(
                    "connection lost: {}",
                    e.status().sub_code().name()
                )));
            }
        };
        match (&read.value, read.status) {
            (_, Some(status)) if !status.is_good() => {
                return Err(Ended::Lost(status.sub_code().name().to_owned()));
            }
            (Some(Variant::NodeId(data_type)), _) => {
                if let Err(reason) = value::admit(data_type) {
                    return Err(Ended::Refused(reason));
                }
            }
            (other, _) => {
                return Err(Ended::Lost(format!(
                    "the server answered DataType {other:?}"
                )));
            }
        }
        let callback = {
            let (values, ended) = (received.clone(), received.clone());
            SubscriptionCallbacks::new(
                // The server ended the subscription (its lifetime ran out, …).
                move |change: StatusChangeNotification| {
                    if !change.status.is_good() {
                        *ended.ended.lock().unwrap_or_else(PoisonError::into_inner) = Some(
                            format!("subscription ended: {}", change.status.sub_code().name()),
                        );
                        ended.arrived.notify_one();
                    }
                },
                move |value, _item| {
                    values
                        .values
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push_back(value);
                    values.arrived.notify_one();
                },
                |_event, _item| {},
            )
        };
        // The subscription outlives `OPCUA_SUBSCRIPTION_LIFETIME_MS` without a publish
        // (a host slow to take readings), however short the publishing interval.
        let lifetime_count =
            u32::try_from(OPCUA_SUBSCRIPTION_LIFETIME_MS / u64::from(target.publishing_ms.max(1)))
                .unwrap_or(u32::MAX)
                .max(OPCUA_SUBSCRIPTION_LIFETIME_COUNT);
        let subscription = match session
            .create_subscription(
                Duration::from_millis(u64::from(target.publishing_ms)),
                lifetime_count,
                OPCUA_SUBSCRIPTION_KEEP_ALIVE_COUNT,
                0,
                0,
                true,
                callback,
            )
            .await
        {
            Ok(id) => id,
            Err(e) => {
                return Err(Ended::Lost(format!(
                    "subscription refused: {}",
                    e.status().sub_code().name()
                )));
            }
        };
        let item = MonitoredItemCreateRequest::new(
            target.node.clone().into(),
            MonitoringMode::Reporting,
            MonitoringParameters {
                // The subscription's publishing interval.
                sampling_interval: -1.0,
                queue_size: OPCUA_MONITORED_ITEM_QUEUE_SIZE,
                discard_oldest: true,
                ..MonitoringParameters::default()
            },
        );
        match session
            .create_monitored_items(subscription, TimestampsToReturn::Both, vec![item])
            .await
        {
            Ok(created) => match created.first() {
                Some(c) if c.result.status_code.is_good() => Ok(()),
                Some(c) => Err(Ended::Lost(
                    c.result.status_code.sub_code().name().to_owned(),
                )),
                None => Err(Ended::Lost(
                    "the server created no monitored item".to_owned(),
                )),
            },
            Err(e) => Err(Ended::Lost(format!(
                "monitored item refused: {}",
                e.status().sub_code().name()
            ))),
        }
    };
    let subscribed = tokio::select! {
        admitted = admitted => admitted,
        ended = &mut driver.0 => Err(ended.unwrap_or(Ended::Stopped)),
    };
    // Subscribed: the driver reports until the session ends.
    let ended = match subscribed {
        Ok(()) => {
            *online = true;
            if reporter.send(connection("online", None)).await.is_err() {
                Ended::Stopped
            } else {
                (&mut driver.0).await.unwrap_or(Ended::Stopped)
            }
        }
        Err(ended) => ended,
    };
    session.disable_reconnects();
    ended
}

/// The task polling a session's event loop, ended with the session (when the tag's
/// task is aborted, too: it drops this).
struct Driver(tokio::task::JoinHandle<Ended>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Polls the session's event loop and reports what the subscription received; ends
/// when the session does. While the host is not taking readings, the event loop is
/// not polled either: the server's queue of the monitored item holds (and, full,
/// discards its oldest), never this process.
async fn drive<C: Connector + Send + Sync + 'static>(
    event_loop: SessionEventLoop<C>,
    received: Arc<Received>,
    reporter: Reporter,
) -> Ended {
    let stream = event_loop.enter();
    tokio::pin!(stream);
    loop {
        tokio::select! {
            polled = stream.next() => match polled {
                Some(Ok(SessionPollResult::ConnectionLost(status))) => {
                    return Ended::Lost(format!("connection lost: {}", status.sub_code().name()));
                }
                Some(Ok(SessionPollResult::ReconnectFailed(status))) => {
                    return Ended::Lost(format!("connection refused: {}", status.sub_code().name()));
                }
                Some(Ok(_)) => {}
                Some(Err(status)) => {
                    return Ended::Lost(format!("connection lost: {}", status.sub_code().name()));
                }
                None => return Ended::Lost("connection lost: the session ended".to_owned()),
            },
            () = received.arrived.notified() => {}
        }
        loop {
            let next = received
                .values
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front();
            let Some(data) = next else {
                let ended = received
                    .ended
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let Some(reason) = ended {
                    return Ended::Lost(reason);
                }
                break;
            };
            let reading = value::reading(&data, crate::now_ms());
            if reporter.send(Event::Reading(reading)).await.is_err() {
                return Ended::Stopped;
            }
        }
    }
}

/// The security policy and message security mode the tag asks for.
fn security(target: &Target) -> (SecurityPolicy, MessageSecurityMode) {
    let policy = target
        .policy
        .parse::<SecurityPolicy>()
        .unwrap_or(SecurityPolicy::Unknown);
    let mode = match target.security {
        grid_spec::OpcUaSecurity::None => MessageSecurityMode::None,
        grid_spec::OpcUaSecurity::Sign => MessageSecurityMode::Sign,
        grid_spec::OpcUaSecurity::SignAndEncrypt => MessageSecurityMode::SignAndEncrypt,
    };
    (policy, mode)
}

/// An async-opcua client presenting the host's application certificate (secured
/// tags) and trusting only what the tag's certificate store holds.
fn client(target: &Target) -> Result<Client, String> {
    let mut builder = ClientBuilder::new()
        .application_name(target.application_name.as_str())
        .application_uri(target.application_uri.as_str())
        .product_uri("urn:grid")
        .pki_dir(&target.pki_dir)
        .create_sample_keypair(false)
        .trust_server_certs(false)
        .verify_server_certs(true)
        .session_retry_limit(0)
        .request_timeout(Duration::from_millis(OPCUA_REQUEST_TIMEOUT_MS));
    if let Some(identity) = &target.identity {
        builder = builder
            .certificate_path(&identity.certificate_path)
            .private_key_path(&identity.private_key_path);
    }
    builder
        .client()
        .map_err(|errors| format!("client configuration: {}", errors.join("; ")))
}
