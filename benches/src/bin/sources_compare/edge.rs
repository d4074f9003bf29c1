//! A Sparkplug B edge node written in the benchmark: rumqttc (the adapter's own MQTT
//! client) and the adapters' payload types (`grid_adapters::sparkplug::payload`).
//!
//! It connects with its NDEATH (`bdSeq`) as will, publishes an NBIRTH (`bdSeq`, `Node
//! Control/Rebirth`, and the metric `Speed` with alias [`ALIAS`], Double), answers
//! every NCMD `Node Control/Rebirth` with a new NBIRTH (the next message it publishes),
//! and publishes NDATA naming the metric by alias only, `seq` + 1 modulo 256, the
//! metric's timestamp now (Unix ms), QoS 0 — paced, or as fast as the broker takes it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use grid_adapters::sparkplug::payload::{
    self, BDSEQ_METRIC, DataType, Metric, Payload, REBIRTH_METRIC, Value,
};
use rumqttc::{AsyncClient, Event, LastWill, MqttOptions, Packet, QoS};

use grid_benches::procs::Result;

/// The Sparkplug group, node and metric of the benchmark.
pub const GROUP: &str = "bench";
pub const NODE: &str = "edge-1";
pub const METRIC: &str = "Speed";
/// The metric's alias in every NBIRTH.
pub const ALIAS: u64 = 1;
/// Requests rumqttc's client may queue before `publish` waits for its event loop.
const REQUEST_CHANNEL_MESSAGES: usize = 1_024;
/// How long the node waits for the broker's ConnAck.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub fn topic(kind: &str) -> String {
    format!("spBv1.0/{GROUP}/{kind}/{NODE}")
}

fn now_ms() -> u64 {
    grid_adapters::now_ms()
}

/// What the event loop saw, shared with the publisher.
#[derive(Default)]
struct Seen {
    connected: AtomicBool,
    /// An NCMD Rebirth arrived and no NBIRTH answered it yet.
    rebirth: AtomicBool,
    rebirths: AtomicU64,
    errors: AtomicU64,
}

/// The edge node: its MQTT client, its event loop's task, and its sequence.
pub struct EdgeNode {
    client: AsyncClient,
    seen: Arc<Seen>,
    event_loop: tokio::task::JoinHandle<()>,
    seq: u8,
    bdseq: u64,
    births: u64,
}

/// One run of NDATA.
#[derive(Debug, Clone, Copy)]
pub struct Published {
    pub messages: u64,
    /// From the first NDATA handed to the client to the last.
    pub elapsed: Duration,
    /// NBIRTHs published in answer to a rebirth request during the run.
    pub births: u64,
    /// Whether the run stopped at its time bound before its count.
    pub timed_out: bool,
}

impl EdgeNode {
    /// Connects to the broker on 127.0.0.1:`port` and publishes the first NBIRTH.
    pub async fn connect(port: u16) -> Result<EdgeNode> {
        let bdseq = 0;
        let mut options = MqttOptions::new("grid-bench-edge", "127.0.0.1", port);
        options
            .set_keep_alive(Duration::from_secs(15))
            .set_clean_session(true)
            .set_last_will(LastWill::new(
                topic("NDEATH"),
                death(bdseq),
                QoS::AtMostOnce,
                false,
            ));
        let (client, mut events) = AsyncClient::new(options, REQUEST_CHANNEL_MESSAGES);
        let seen = Arc::new(Seen::default());
        let ncmd = topic("NCMD");
        let event_loop = {
            let seen = seen.clone();
            tokio::spawn(async move {
                loop {
                    match events.poll().await {
                        Ok(Event::Incoming(Packet::ConnAck(_))) => {
                            seen.connected.store(true, Ordering::SeqCst);
                        }
                        Ok(Event::Incoming(Packet::Publish(p))) if p.topic == ncmd => {
                            if asks_rebirth(&p.payload) {
                                seen.rebirths.fetch_add(1, Ordering::SeqCst);
                                seen.rebirth.store(true, Ordering::SeqCst);
                            }
                        }
                        Ok(_) => {}
                        Err(_) => {
                            seen.connected.store(false, Ordering::SeqCst);
                            seen.errors.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            })
        };
        let started = Instant::now();
        while !seen.connected.load(Ordering::SeqCst) {
            if started.elapsed() > CONNECT_TIMEOUT {
                event_loop.abort();
                return Err(format!(
                    "the edge node had no ConnAck from 127.0.0.1:{port} in {CONNECT_TIMEOUT:?}"
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        client
            .subscribe(topic("NCMD"), QoS::AtMostOnce)
            .await
            .map_err(|e| format!("subscribe: {e}"))?;
        let mut node = EdgeNode {
            client,
            seen,
            event_loop,
            seq: 0,
            bdseq,
            births: 0,
        };
        node.birth(0.0).await?;
        Ok(node)
    }

    /// Rebirth requests received so far.
    pub fn rebirths(&self) -> u64 {
        self.seen.rebirths.load(Ordering::SeqCst)
    }

    /// Times the event loop lost the connection.
    pub fn connection_errors(&self) -> u64 {
        self.seen.errors.load(Ordering::SeqCst)
    }

    /// NBIRTHs published so far.
    pub fn births(&self) -> u64 {
        self.births
    }

    async fn send(&self, kind: &str, bytes: Vec<u8>) -> Result<()> {
        self.client
            .publish(topic(kind), QoS::AtMostOnce, false, bytes)
            .await
            .map_err(|e| format!("publish {kind}: {e}").into())
    }

    /// An NBIRTH with `seq` 0 and `value` as the metric's.
    async fn birth(&mut self, value: f64) -> Result<()> {
        let now = now_ms();
        let metric = |name: &str, datatype: DataType, value: Value| Metric {
            name: Some(name.to_owned()),
            timestamp: Some(now),
            datatype: Some(datatype as u32),
            value: Some(value),
            ..Metric::default()
        };
        let mut speed = metric(METRIC, DataType::Double, Value::DoubleValue(value));
        speed.alias = Some(ALIAS);
        let bytes = payload::encode(&Payload {
            timestamp: Some(now),
            seq: Some(0),
            metrics: vec![
                metric(BDSEQ_METRIC, DataType::Int64, Value::LongValue(self.bdseq)),
                metric(
                    REBIRTH_METRIC,
                    DataType::Boolean,
                    Value::BooleanValue(false),
                ),
                speed,
            ],
            ..Payload::default()
        });
        self.seq = 0;
        self.births += 1;
        self.send("NBIRTH", bytes).await
    }

    /// Answers a pending rebirth request (with `value`); true when it did.
    pub async fn answer_rebirth(&mut self, value: f64) -> Result<bool> {
        if self.seen.rebirth.swap(false, Ordering::SeqCst) {
            self.birth(value).await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// One NDATA: the metric by alias, `value`, timestamp now.
    async fn data(&mut self, value: f64) -> Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let now = now_ms();
        let bytes = payload::encode(&Payload {
            timestamp: Some(now),
            seq: Some(u64::from(self.seq)),
            metrics: vec![Metric {
                alias: Some(ALIAS),
                timestamp: Some(now),
                datatype: Some(DataType::Double as u32),
                value: Some(Value::DoubleValue(value)),
                ..Metric::default()
            }],
            ..Payload::default()
        });
        self.send("NDATA", bytes).await
    }

    /// Publishes `count` NDATA (values `first`, `first + 1`, …) at `rate` per second
    /// (`None`: as fast as the client and the broker take them), for at most `bound`;
    /// a rebirth request is answered before the next NDATA.
    pub async fn publish(
        &mut self,
        count: u64,
        rate: Option<f64>,
        first: f64,
        bound: Duration,
    ) -> Result<Published> {
        let births_before = self.births;
        let started = Instant::now();
        let mut published = 0;
        let mut timed_out = false;
        while published < count {
            if started.elapsed() >= bound {
                timed_out = true;
                break;
            }
            let value = first + published as f64;
            self.answer_rebirth(value).await?;
            if let Some(rate) = rate {
                let due = started + Duration::from_secs_f64(published as f64 / rate);
                tokio::time::sleep_until(due.into()).await;
            }
            self.data(value).await?;
            published += 1;
        }
        Ok(Published {
            messages: published,
            elapsed: started.elapsed(),
            births: self.births - births_before,
            timed_out,
        })
    }

    /// Answers rebirth requests for `period` without publishing data.
    pub async fn idle(&mut self, period: Duration, value: f64) -> Result<()> {
        let until = Instant::now() + period;
        while Instant::now() < until {
            self.answer_rebirth(value).await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }
}

impl Drop for EdgeNode {
    fn drop(&mut self) {
        self.event_loop.abort();
    }
}

/// The NDEATH payload of session `bdseq`.
fn death(bdseq: u64) -> Vec<u8> {
    payload::encode(&Payload {
        timestamp: Some(now_ms()),
        metrics: vec![Metric {
            name: Some(BDSEQ_METRIC.to_owned()),
            datatype: Some(DataType::Int64 as u32),
            value: Some(Value::LongValue(bdseq)),
            ..Metric::default()
        }],
        ..Payload::default()
    })
}

/// Whether an NCMD payload carries `Node Control/Rebirth` = true.
fn asks_rebirth(bytes: &[u8]) -> bool {
    payload::decode(bytes).is_ok_and(|p| {
        p.metrics.iter().any(|m| {
            m.name.as_deref() == Some(REBIRTH_METRIC) && m.value == Some(Value::BooleanValue(true))
        })
    })
}
