//! One tag's task: its own BACnet/IP client (one UDP socket), polling its object or
//! holding its confirmed COV subscription, until it is stopped or released.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bacnet_client::client::{BACnetClient, COVNotificationDelivery};
use bacnet_transport::bip::BipTransport;
use bacnet_types::constructed::{PropertyReference, ReadAccessSpecification};
use bacnet_types::enums::{ObjectType, PropertyIdentifier};
use bacnet_types::error::{Error, RemoteError};
use bacnet_types::primitives::ObjectIdentifier;
use grid_spec::bacnet::BacnetObject;
use tokio::sync::{broadcast, mpsc, oneshot};

use super::decode::{self, Observed};
use crate::limits::{
    BACNET_APDU_RETRIES, BACNET_APDU_TIMEOUT_MS, BACNET_COV_NOTIFICATIONS_QUEUED_MAX,
    BACNET_COV_RENEWAL_S_MAX, BACNET_RETRY_DELAY_MS_MAX, BACNET_RETRY_DELAY_MS_MIN,
};
use crate::{Connection, Event, Quality, Raw, Reading, Sink, TagEvent, now_ms};

/// What the tag's owner tells its task.
pub(super) enum Command {
    /// Stop; a COV subscription is left to expire by its lifetime.
    Stop,
    /// Cancel the COV subscription at the device, answer how that went, stop.
    Release(oneshot::Sender<Result<String, String>>),
}

/// What one task reads and how.
pub(super) struct Point {
    pub tag: String,
    pub generation: u64,
    pub device: SocketAddr,
    pub object: BacnetObject,
    /// `Some(lifetime_s)`: a confirmed COV subscription; `None`: polling.
    pub cov: Option<u32>,
    pub interval_ms: u32,
    /// The subscriber process identifier of its COV subscription.
    pub process: u32,
    /// Set (by `stop`) before the task is told: nothing is reported after it.
    pub stopped: Arc<AtomicBool>,
    pub sink: Sink,
    /// The reason of the last reading reported when it was debt: the same debt again
    /// is not reported (an outage is one entry per reason, not one per poll).
    pub last_debt: Option<String>,
    /// The connection state last reported: a state is reported when it changes.
    pub state: Option<Connection>,
}

impl Point {
    fn object_id(&self) -> ObjectIdentifier {
        ObjectIdentifier::new(
            ObjectType::from_raw(self.object.object_type.code()),
            self.object.instance,
        )
        .expect("grid_spec bounds the instance to 22 bits")
    }

    /// The device's B/IP MAC: its IPv4 address and UDP port (Annex J).
    fn mac(&self) -> Result<[u8; 6], String> {
        let SocketAddr::V4(v4) = self.device else {
            return Err(format!(
                "{} is an IPv6 address: this build reads BACnet/IP over IPv4 only",
                self.device
            ));
        };
        let [a, b, c, d] = v4.ip().octets();
        let [p, q] = v4.port().to_be_bytes();
        Ok([a, b, c, d, p, q])
    }

    async fn report(&self, event: Event) -> bool {
        if self.stopped.load(Ordering::SeqCst) {
            return false;
        }
        let event = TagEvent {
            tag: self.tag.clone(),
            generation: self.generation,
            event,
        };
        self.sink.send(event).await.is_ok()
    }

    async fn connection(&mut self, state: &str, detail: Option<&str>) -> bool {
        let connection = Connection {
            state: state.to_owned(),
            detail: detail.map(str::to_owned),
        };
        if self.state.as_ref() == Some(&connection) {
            return true;
        }
        self.state = Some(connection.clone());
        self.report(Event::Connection(connection)).await
    }

    async fn debt(&mut self, reason: &str) -> bool {
        self.reading(Reading {
            raw: Raw::None,
            quality: Quality::Debt {
                reason: reason.to_owned(),
            },
            device_time_ms: None,
            received_ms: now_ms(),
        })
        .await
    }

    /// Reports a reading: every good one, a debt only when its reason is new.
    async fn reading(&mut self, reading: Reading) -> bool {
        match &reading.quality {
            Quality::Debt { reason } if self.last_debt.as_ref() == Some(reason) => return true,
            Quality::Debt { reason } => self.last_debt = Some(reason.clone()),
            Quality::Good { .. } | Quality::Refused { .. } => self.last_debt = None,
        }
        self.report(Event::Reading(reading)).await
    }

    /// Runs the tag until it is stopped or released (or its host's sink is gone).
    pub async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mac = match self.mac() {
            Ok(mac) => mac,
            Err(why) => {
                self.connection("refused", Some(&why)).await;
                self.report(Event::Reading(Reading {
                    raw: Raw::None,
                    quality: Quality::Refused { reason: why },
                    device_time_ms: None,
                    received_ms: now_ms(),
                }))
                .await;
                answer_release(
                    commands.recv().await,
                    Err("the tag never subscribed".into()),
                );
                return;
            }
        };
        self.connection("connecting", None).await;
        let mut client = match client(self.device).await {
            Ok(client) => client,
            Err(why) => {
                self.connection("offline", Some(&why)).await;
                answer_release(commands.recv().await, Err(why));
                return;
            }
        };
        let command = match self.cov {
            Some(lifetime_s) => self.follow(&client, &mac, lifetime_s, &mut commands).await,
            None => self.poll(&client, &mac, &mut commands).await,
        };
        if let Some(Command::Release(answer)) = command {
            let cancelled = client
                .unsubscribe_cov(&mac, self.process, self.object_id())
                .await
                .map(|()| "COV subscription cancelled".to_owned())
                .map_err(|e| decode::failure(&e));
            let _ = answer.send(cancelled);
        }
        let _ = client.stop().await;
    }

    /// Polls the object every interval: present-value, status-flags and reliability in
    /// one ReadPropertyMultiple, or three ReadProperty when the device has no RPM.
    async fn poll(
        &mut self,
        client: &BACnetClient<BipTransport>,
        mac: &[u8],
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Option<Command> {
        let mut ticks = tokio::time::interval(Duration::from_millis(self.interval_ms.into()));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut multiple = true;
        loop {
            tokio::select! {
                command = commands.recv() => return command,
                _ = ticks.tick() => {}
            }
            let read = if multiple {
                match self.read_multiple(client, mac).await {
                    Err(error) if decode::no_such_service(&error) => {
                        // No ReadPropertyMultiple at this device: ReadProperty from now on.
                        multiple = false;
                        self.read_each(client, mac).await
                    }
                    other => other,
                }
            } else {
                self.read_each(client, mac).await
            };
            let sent = match read {
                Ok(observed) => {
                    let reading = decode::reading(self.object.object_type, &observed);
                    self.connection("connected", None).await && self.reading(reading).await
                }
                Err(error) => {
                    let reason = decode::failure(&error);
                    // An Error, Reject or Abort PDU: the device answered, it is there.
                    let reported = if decode::unanswered(&error) {
                        self.connection("offline", Some(&reason)).await
                    } else {
                        self.connection("connected", None).await
                    };
                    reported && self.debt(&reason).await
                }
            };
            if !sent {
                return None;
            }
        }
    }

    async fn read_multiple(
        &self,
        client: &BACnetClient<BipTransport>,
        mac: &[u8],
    ) -> Result<Observed, Error> {
        let property = |p| PropertyReference {
            property_identifier: p,
            property_array_index: None,
        };
        let spec = ReadAccessSpecification {
            object_identifier: self.object_id(),
            list_of_property_references: vec![
                property(PropertyIdentifier::PRESENT_VALUE),
                property(PropertyIdentifier::STATUS_FLAGS),
                property(PropertyIdentifier::RELIABILITY),
            ],
        };
        let ack = client.read_property_multiple(mac, vec![spec]).await?;
        let mut observed = Observed::default();
        for result in ack.list_of_read_access_results {
            for element in result.list_of_results {
                let id = element.property_identifier;
                match (element.property_value, element.error) {
                    (Some(bytes), _) => store(&mut observed, id, &bytes)?,
                    (None, Some((class, code))) if id == PropertyIdentifier::PRESENT_VALUE => {
                        return Err(Error::Remote(RemoteError::Error { class, code }));
                    }
                    // An object without reliability (it is optional) or status
                    // flags the device will not give: nothing said.
                    _ => {}
                }
            }
        }
        Ok(observed)
    }

    async fn read_each(
        &self,
        client: &BACnetClient<BipTransport>,
        mac: &[u8],
    ) -> Result<Observed, Error> {
        let mut observed = Observed::default();
        for id in [
            PropertyIdentifier::PRESENT_VALUE,
            PropertyIdentifier::STATUS_FLAGS,
            PropertyIdentifier::RELIABILITY,
        ] {
            match client.read_property(mac, self.object_id(), id, None).await {
                Ok(ack) => store(&mut observed, id, &ack.property_value)?,
                Err(Error::Remote(RemoteError::Error { .. }))
                    if id != PropertyIdentifier::PRESENT_VALUE => {}
                Err(error) => return Err(error),
            }
        }
        Ok(observed)
    }

    /// Holds a confirmed COV subscription: subscribes, renews it before its lifetime
    /// ends, turns each notification (acknowledged by the client's dispatch) into a
    /// reading; a subscription refused or unanswered is debt and is tried again.
    async fn follow(
        &mut self,
        client: &BACnetClient<BipTransport>,
        mac: &[u8],
        lifetime_s: u32,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Option<Command> {
        let mut notifications = client.cov_notifications();
        let renewal = Duration::from_secs(u64::from(
            (lifetime_s / 2).clamp(1, BACNET_COV_RENEWAL_S_MAX),
        ));
        let mut retry = Duration::from_millis(BACNET_RETRY_DELAY_MS_MIN);
        let mut next = tokio::time::Instant::now();
        loop {
            tokio::select! {
                command = commands.recv() => return command,
                _ = tokio::time::sleep_until(next) => {
                    let subscribed = client
                        .subscribe_cov(mac, self.process, self.object_id(), true, Some(lifetime_s))
                        .await;
                    let sent = match subscribed {
                        Ok(()) => {
                            retry = Duration::from_millis(BACNET_RETRY_DELAY_MS_MIN);
                            next = tokio::time::Instant::now() + renewal;
                            self.connection("connected", None).await
                        }
                        Err(error) => {
                            let reason = format!("subscription: {}", decode::failure(&error));
                            next = tokio::time::Instant::now() + retry;
                            retry = (retry * 2).min(Duration::from_millis(BACNET_RETRY_DELAY_MS_MAX));
                            self.connection("offline", Some(&reason)).await && self.debt(&reason).await
                        }
                    };
                    if !sent {
                        return None;
                    }
                }
                received = notifications.recv() => {
                    let notification = match received {
                        Ok(n) => n,
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            // Acknowledged but not read: say so, the next is current.
                            if !self.debt(&format!("{missed} COV notifications missed")).await {
                                return None;
                            }
                            continue;
                        }
                        Err(broadcast::error::RecvError::Closed) => return commands.recv().await,
                    };
                    let n = &notification.notification;
                    if n.subscriber_process_identifier != self.process
                        || n.monitored_object_identifier != self.object_id()
                        || notification.delivery != COVNotificationDelivery::Confirmed
                    {
                        continue;
                    }
                    let mut observed = Observed::default();
                    let mut undecodable = None;
                    for value in &n.list_of_values {
                        if let Err(e) = store(&mut observed, value.property_identifier, &value.value) {
                            undecodable = Some(e.to_string());
                        }
                    }
                    // The notification carries the flags, not why: a fault is named
                    // by the object's reliability, read once.
                    if undecodable.is_none()
                        && observed.status_flags.is_some_and(|f| f.fault)
                        && let Ok(ack) = client
                            .read_property(mac, self.object_id(), PropertyIdentifier::RELIABILITY, None)
                            .await
                        && let Err(e) = store(&mut observed, PropertyIdentifier::RELIABILITY, &ack.property_value)
                    {
                        undecodable = Some(e.to_string());
                    }
                    let reading = match undecodable {
                        Some(why) => Reading {
                            raw: Raw::None,
                            quality: Quality::Debt { reason: why },
                            device_time_ms: None,
                            received_ms: now_ms(),
                        },
                        None => decode::reading(self.object.object_type, &observed),
                    };
                    if !self.reading(reading).await {
                        return None;
                    }
                }
            }
        }
    }
}

/// One property's encoded value into what was observed.
fn store(observed: &mut Observed, id: PropertyIdentifier, bytes: &[u8]) -> Result<(), Error> {
    let undecodable = |why: String| Error::Encoding(why);
    if id == PropertyIdentifier::PRESENT_VALUE {
        observed.present_value = Some(bytes.to_vec());
    } else if id == PropertyIdentifier::STATUS_FLAGS {
        observed.status_flags = Some(decode::status_flags(bytes).map_err(undecodable)?);
    } else if id == PropertyIdentifier::RELIABILITY {
        observed.reliability = Some(decode::reliability(bytes).map_err(undecodable)?);
    }
    Ok(())
}

fn answer_release(command: Option<Command>, answer: Result<String, String>) {
    if let Some(Command::Release(sender)) = command {
        let _ = sender.send(answer);
    }
}

/// A client of its own for one device: bound to 127.0.0.1 for a device on loopback
/// (an ephemeral port picked first, as the transport binds the address itself only
/// with a port given), to every interface otherwise.
async fn client(device: SocketAddr) -> Result<BACnetClient<BipTransport>, String> {
    let loopback = device.ip().is_loopback();
    let builder = BACnetClient::bip_builder()
        .apdu_timeout_ms(BACNET_APDU_TIMEOUT_MS)
        .apdu_retries(BACNET_APDU_RETRIES)
        .cov_channel_capacity(BACNET_COV_NOTIFICATIONS_QUEUED_MAX);
    let builder = if loopback {
        let port = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
            .and_then(|s| s.local_addr())
            .map_err(|e| format!("no local UDP port: {e}"))?
            .port();
        builder
            .interface(Ipv4Addr::LOCALHOST)
            .broadcast_address(Ipv4Addr::LOCALHOST)
            .port(port)
            .share_port_by_address(true)
    } else {
        builder.port(0)
    };
    builder
        .build()
        .await
        .map_err(|e| format!("no BACnet/IP client: {e}"))
}
