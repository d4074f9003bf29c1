//! The adapters' own runtime limits, each a named constant (the language's limits, such
//! as `MODBUS_INTERVAL_MS_MIN`, live in `grid_spec::limits`).

// MQTT Sparkplug B (sparkplug/client.rs, sparkplug/session.rs).

/// The first wait before reconnecting to a broker after a failure; doubled after each
/// failure up to `SPARKPLUG_RECONNECT_DELAY_MS_MAX`, back to this after a ConnAck.
pub const SPARKPLUG_RECONNECT_DELAY_MS_MIN: u64 = 100;
/// The longest wait between two attempts to reach a broker.
pub const SPARKPLUG_RECONNECT_DELAY_MS_MAX: u64 = 5_000;
const _: () = assert!(
    // The backoff doubles from the minimum towards the maximum: it must have room to.
    SPARKPLUG_RECONNECT_DELAY_MS_MIN > 0
        && SPARKPLUG_RECONNECT_DELAY_MS_MIN <= SPARKPLUG_RECONNECT_DELAY_MS_MAX
);
/// A rebirth request unanswered this long (the QoS-0 NCMD or the NBIRTH lost) is sent
/// again when the next message of the node shows the tag still awaiting its birth.
pub const SPARKPLUG_REBIRTH_REPEAT_MS: u64 = 5_000;
/// MQTT keep-alive with the broker: a silent broker is noticed within 1.5 × this.
pub const SPARKPLUG_KEEP_ALIVE_S: u64 = 15;
/// The largest MQTT packet accepted from the broker (a birth declares every metric of
/// a node, so births can be large) and sent to it.
pub const SPARKPLUG_PACKET_BYTES_MAX: usize = 1 << 20;
/// Requests (subscriptions, rebirth commands) queued for the MQTT event loop.
pub const SPARKPLUG_REQUESTS_QUEUED_MAX: usize = 16;
const _: () = assert!(
    // After every ConnAck the client queues two subscriptions and one rebirth command
    // without waiting: they must fit, or the rebirth request would be dropped.
    SPARKPLUG_REQUESTS_QUEUED_MAX >= 3
);

// Modbus TCP (modbus/).

/// The most holding or input registers one Modbus read may ask for (function codes 3
/// and 4: Modbus' own limit, 125 words in one 253-byte PDU). Coalesced reads never ask
/// for more.
pub const MODBUS_READ_REGISTERS_MAX: u16 = 125;

/// The most coils or discrete inputs one Modbus read may ask for (function codes 1 and
/// 2: Modbus' own limit, 2000 bits).
pub const MODBUS_READ_BITS_MAX: u16 = 2000;

/// How long a Modbus device has to answer one read before the reading is `timeout`
/// debt and the connection is dropped and reopened.
pub const MODBUS_RESPONSE_TIMEOUT_MS: u64 = 1_000;

/// How long opening a TCP connection to a Modbus device may take before the attempt
/// counts as refused.
pub const MODBUS_CONNECT_TIMEOUT_MS: u64 = 2_000;

/// The delay before retrying a Modbus connection that just failed; it doubles with each
/// failure up to `MODBUS_RECONNECT_DELAY_MS_MAX`. A connection that was open and is lost
/// is retried at once, the first time.
pub const MODBUS_RECONNECT_DELAY_MS_MIN: u64 = 100;

/// The longest delay between two attempts to reach an unreachable Modbus device.
pub const MODBUS_RECONNECT_DELAY_MS_MAX: u64 = 2_000;

// A 32-bit value (u32, i32, f32) takes two registers, and one read must be able to
// fetch a whole value.
const _: () = assert!(MODBUS_READ_REGISTERS_MAX >= 2);
const _: () = assert!(MODBUS_READ_BITS_MAX >= 1);
// The backoff starts above zero (doubling zero never grows) and is bounded by its max.
const _: () = assert!(MODBUS_RECONNECT_DELAY_MS_MIN > 0);
const _: () = assert!(MODBUS_RECONNECT_DELAY_MS_MIN <= MODBUS_RECONNECT_DELAY_MS_MAX);

// J1939 (j1939/).

/// The longest a TP.BAM receiver waits for the next data transfer packet (J1939-21's
/// T1, 750 ms): past it the message is incomplete (debt). Measured in the capture's own
/// time, so a replayed log breaks where the live bus did.
pub const J1939_BAM_PACKET_GAP_MS_MAX: u64 = 750;
/// The smallest multi-packet message: anything up to 8 bytes fits one frame.
pub const J1939_BAM_BYTES_MIN: usize = 9;
/// The largest multi-packet message: 255 packets of 7 bytes (J1939-21).
pub const J1939_BAM_BYTES_MAX: usize = 1_785;
const _: () = assert!(
    // A BAM's packet count is one byte, 7 bytes each; the smallest is one past a frame.
    J1939_BAM_BYTES_MAX == 255 * 7 && J1939_BAM_BYTES_MIN == 8 + 1
);
/// How long a replay sleeps at most before it looks again whether it was stopped (a
/// log whose frames are far apart still stops promptly).
pub const J1939_REPLAY_SLEEP_MS_MAX: u64 = 100;
/// How long a live capture waits for a frame before it checks for a stop and expires
/// waiting multi-packet messages.
pub const J1939_CAPTURE_POLL_MS: u64 = 100;
const _: () = assert!(
    // Expiry is checked at least once per packet gap, so a broken BAM on a quiet bus is
    // reported within twice the gap.
    J1939_CAPTURE_POLL_MS <= J1939_BAM_PACKET_GAP_MS_MAX
);
// BACnet/IP (bacnet/).

/// How long a BACnet device has to answer one confirmed request (ReadProperty,
/// SubscribeCOV) before it is sent again, `BACNET_APDU_RETRIES` times; then the
/// reading is `timeout` debt.
pub const BACNET_APDU_TIMEOUT_MS: u64 = 1_000;
/// How many times an unanswered confirmed request is sent again.
pub const BACNET_APDU_RETRIES: u8 = 1;
/// The first wait before subscribing again after a SubscribeCOV was refused or went
/// unanswered; doubled after each failure up to `BACNET_RETRY_DELAY_MS_MAX`.
pub const BACNET_RETRY_DELAY_MS_MIN: u64 = 500;
/// The longest wait between two attempts to subscribe.
pub const BACNET_RETRY_DELAY_MS_MAX: u64 = 5_000;
/// A COV subscription is renewed at half its lifetime, and at least this often (in
/// seconds), so that a device that restarted (and forgot it) is subscribed to again
/// soon.
pub const BACNET_COV_RENEWAL_S_MAX: u32 = 30;
/// COV notifications received and not yet turned into readings (per tag); past it the
/// oldest are dropped (they were acknowledged) and the gap is journaled as debt.
pub const BACNET_COV_NOTIFICATIONS_QUEUED_MAX: usize = 256;
const _: () = assert!(
    // The backoff doubles from the minimum towards the maximum: it must have room to.
    BACNET_RETRY_DELAY_MS_MIN > 0 && BACNET_RETRY_DELAY_MS_MIN <= BACNET_RETRY_DELAY_MS_MAX
);
const _: () = assert!(
    // A subscription is renewed at half its lifetime at the latest: the other half of
    // the shortest lifetime a tag may ask for must hold the renewal and its retries.
    (grid_spec::limits::BACNET_COV_LIFETIME_S_MIN as u64 / 2) * 1_000
        > BACNET_APDU_TIMEOUT_MS * (BACNET_APDU_RETRIES as u64 + 1)
);
const _: () = assert!(BACNET_COV_NOTIFICATIONS_QUEUED_MAX > 0);
