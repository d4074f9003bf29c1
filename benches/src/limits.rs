//! Every bound of the benchmarks in one place, units last in every name. The bounds of
//! Grid itself (`CONTROL_CONNECTIONS_MAX`, `ROUTE_DESTINATIONS_MAX`) stay the engine's
//! and the spec's; the benchmarks only check their arguments against them.

use grid_engine::limits::CONTROL_CONNECTIONS_MAX;

/// The longest measurement window one `--seconds` (or `--fanout-seconds`) may ask for.
pub const MEASUREMENT_SECONDS_MAX: f64 = 600.0;
/// The longest warm-up one `--warmup` may ask for.
pub const WARMUP_SECONDS_MAX: f64 = 60.0;

/// Concurrent callers (publishers) of one measurement: each holds one control
/// connection to a Grid host, which serves at most `CONTROL_CONNECTIONS_MAX` of them.
pub const CALLERS_MAX: usize = CONTROL_CONNECTIONS_MAX;

/// How many `gridctl reconcile` rounds a topology may take, once its hosts run, to reach
/// an empty plan.
pub const CONVERGE_ROUNDS_MAX: u32 = 40;

/// The characters of a failure's reason that are kept (equal reasons count together;
/// a long one is cut).
pub const REASON_CHARS_MAX: usize = 160;

/// A bound on the publications of one fan-out measurement.
pub const FANOUT_PUBLICATIONS_MAX: usize = 100_000;

/// Messages one JetStream consumer takes from what has already arrived before it
/// acknowledges the last of them (its cumulative acknowledgement covers all).
pub const ACK_BATCH_MESSAGES_MAX: usize = 4_096;

/// The fewest batches `compare` times per engine and scenario, however short the run.
pub const COMPARE_BATCHES_MIN: usize = 15;

/// The largest generated topology `scale --objects` may ask for.
pub const SCALE_OBJECTS_MAX: usize = 1_000_000;
/// The most runs `scale --repeat` may ask for per measurement.
pub const SCALE_REPEATS_MAX: u32 = 50;

/// The fastest paced Sparkplug run `sources_compare --rates` may ask for (messages per
/// second; `max` is unpaced).
pub const SOURCES_RATE_PER_SECOND_MAX: f64 = 1_000_000.0;
/// The most NDATA one `sources_compare` run may publish (`--messages`).
pub const SOURCES_MESSAGES_MAX: u64 = 10_000_000;
/// The most Modbus tags `sources_compare --modbus-tags` may install at one host (one
/// holding register each, addresses 0..N).
pub const MODBUS_TAGS_MAX: usize = 65_536;

// A warm-up longer than the longest window would make most of a run unrecorded.
const _: () = assert!(WARMUP_SECONDS_MAX < MEASUREMENT_SECONDS_MAX);
// The shared-polling rule of `delivery_compare` (publishers take turns polling when
// they hold every control connection) needs the callers bound to be the host's.
const _: () = assert!(CALLERS_MAX == CONTROL_CONNECTIONS_MAX);
// A median over batches needs more than a couple of them to mean anything.
const _: () = assert!(COMPARE_BATCHES_MIN >= 3);
// A cumulative acknowledgement covers at least the one message it acknowledges.
const _: () = assert!(ACK_BATCH_MESSAGES_MAX >= 1);
// One tag per holding register: a device has 65,536 addresses.
const _: () = assert!(MODBUS_TAGS_MAX <= 65_536);

/// The most frames `j1939_replay` generates (its log is about 50 bytes a frame, and
/// the decoder alone holds every parsed frame in memory).
pub const J1939_REPLAY_FRAMES_MAX: u64 = 20_000_000;

/// The most nodes (and tags) `opcua_compare --tags` may ask for: one OPC UA session per
/// tag against one Python server.
pub const OPCUA_COMPARE_TAGS_MAX: usize = 10_000;
/// The fastest change period of `opcua_compare`'s nodes (`--period-ms`).
pub const OPCUA_COMPARE_PERIOD_MS_MIN: u32 = 10;
/// Its slowest.
pub const OPCUA_COMPARE_PERIOD_MS_MAX: u32 = 60_000;

// A period range needs its fastest at or below its slowest.
const _: () = assert!(OPCUA_COMPARE_PERIOD_MS_MIN <= OPCUA_COMPARE_PERIOD_MS_MAX);

/// The most accounts `ledger_compare --accounts` may ask for: Grid declares them in one
/// `ledger` node, which holds at most `LEDGER_ACCOUNTS_MAX` (grid_spec::limits).
pub const LEDGER_COMPARE_ACCOUNTS_MAX: usize = 4_096;
/// The largest batch `ledger_compare --batch` may ask for: TigerBeetle 0.17's
/// `create_transfers` takes at most 8,189 transfers a request (Grid's
/// `LEDGER_BATCH_TRANSFERS_MAX` is 8,190).
pub const LEDGER_COMPARE_BATCH_MAX: usize = 8_189;
/// The most PostgreSQL clients `ledger_compare --pg-clients` may ask for (the cluster it
/// starts allows `max_connections` = this + 10).
pub const LEDGER_COMPARE_PG_CLIENTS_MAX: usize = 256;

// Two accounts at least: a transfer's debit and credit accounts differ.
const _: () = assert!(LEDGER_COMPARE_ACCOUNTS_MAX >= 2);

/// The valid paired samples `mission_compare` must collect (issue 19's "Must show": 40);
/// its `--samples` may ask for fewer (a quick look), never for more than it may attempt.
pub const MISSION_COMPARE_SAMPLES_VALID: usize = 40;
/// The most paired samples `mission_compare` attempts before it gives up and fails
/// (each attempt runs once online and once on the mission allocation).
pub const MISSION_COMPARE_ATTEMPTS_MAX: usize = 200;
/// The longest one run of a sample may take (its wall time, from the control call to
/// the answer): a longer one makes the sample invalid.
pub const MISSION_COMPARE_RUN_MS_MAX: u64 = 2_000;
/// The most warm-up runs of each path `mission_compare --warmup-runs` may ask for.
pub const MISSION_COMPARE_WARMUP_RUNS_MAX: usize = 50;
/// The mission runs `mission_compare` makes after it SIGKILLs the issuer (and with it
/// the authority's majority of two voters): each must still succeed.
pub const MISSION_COMPARE_OFFLINE_RUNS: usize = 10;

// The required samples must fit in the attempts.
const _: () = assert!(MISSION_COMPARE_SAMPLES_VALID <= MISSION_COMPARE_ATTEMPTS_MAX);
// A median and a p10–p90 spread need more than a handful of samples.
const _: () = assert!(MISSION_COMPARE_SAMPLES_VALID >= 10);
/// The longest pause `mission_compare --settle-ms` may ask for after every run.
pub const MISSION_COMPARE_SETTLE_MS_MAX: u64 = 1_000;

/// The latest restart mark of one `retention` run, minutes (its workload runs twice:
/// checkpoints on, then off).
pub const RETENTION_MINUTES_MAX: u64 = 120;
/// The rate of `retention --workload ledger`: posted transfers a second, each a new id,
/// in batches of 100 from one connection.
pub const RETENTION_LEDGER_TRANSFERS_PER_S: u64 = 2_000;
