//! Every limit Grid enforces, as a named constant (SPEC §1.9).
//!
//! Validation (`grid_spec::validate`) checks these when a topology is read, and the
//! owner (`grid_engine`) checks them again when it admits an object, so a limit is
//! never enforced in only one place. Each error that a limit causes names the constant.

/// Destinations of one publication (one route).
pub const ROUTE_DESTINATIONS_MAX: usize = 1_024;

/// The largest `ceiling` a model may declare: the most counted operations an admitted
/// model may hold (see `docs/models.md` for the counting rule).
pub const MODEL_OPERATIONS_CEILING_MAX: u32 = 65_536;

/// The operation ceiling of a model that declares no `ceiling`.
pub const MODEL_OPERATIONS_CEILING_DEFAULT: u32 = 128;

/// The most counted operations of a model served to a membership (`serve M`) whose
/// `membership` declares no `models ceiling=N` (issue 30, docs/memberships.md).
pub const MEMBERSHIP_MODELS_CEILING_DEFAULT: u32 = MODEL_OPERATIONS_CEILING_DEFAULT;

/// Cells of one GRDX matrix (2-D, row-major, finite `f64`).
pub const GRDX_CELLS_MAX: usize = 16_384;

/// Cells (inputs and formula cells together) of the reference shared-membership model.
pub const REFERENCE_MODEL_CELLS: usize = 4_096;

/// How long a participant certificate is valid when its membership's `certificates`
/// does not say (`valid-days`).
pub const CERTIFICATE_VALID_DAYS_DEFAULT: u32 = 365;

/// The longest `certificates valid-days` (a certificate never outlives its authority,
/// which is valid 3,650 days).
pub const CERTIFICATE_VALID_DAYS_MAX: u32 = 1_825;

/// How long before a participant certificate expires the plan renews it, when its
/// membership's `certificates` does not say (`renew-before-days`).
pub const CERTIFICATE_RENEW_BEFORE_DAYS_DEFAULT: u32 = 30;

/// The longest name of any topology object, input or cell, in bytes.
pub const NAME_LENGTH_MAX: usize = 128;

/// The longest formula text of one cell, in bytes.
pub const FORMULA_LENGTH_MAX: usize = 16_384;

/// The deepest nesting of parentheses and function calls in one formula; bounds the
/// parser's and evaluator's recursion.
pub const FORMULA_NESTING_MAX: usize = 64;

/// The most inputs one batch may set.
pub const BATCH_INPUTS_MAX: usize = 4_096;

/// `ROUND(x, digits)` accepts digits in `-DIGITS_MAX..=DIGITS_MAX`; beyond it the result
/// is `#NUM!`.
pub const ROUND_DIGITS_MAX: i32 = 15;

const _: () = assert!(MODEL_OPERATIONS_CEILING_DEFAULT <= MODEL_OPERATIONS_CEILING_MAX);
const _: () = assert!(MEMBERSHIP_MODELS_CEILING_DEFAULT <= MODEL_OPERATIONS_CEILING_MAX);
// The reference model must fit in a shared membership's scalar admission: every cell is
// at least one counted operation, so its cell count must stay below the largest ceiling.
const _: () = assert!(REFERENCE_MODEL_CELLS <= MODEL_OPERATIONS_CEILING_MAX as usize);
// A batch can set every input of the largest admissible model at once.
const _: () = assert!(BATCH_INPUTS_MAX >= REFERENCE_MODEL_CELLS);

/// The most voters one membership's authority may have.
pub const AUTHORITY_VOTERS_MAX: usize = 7;

/// The largest delivery capacity a host's `capacity` child may set (values owed or
/// retained publications).
pub const DELIVERY_CAPACITY_MAX: u64 = 16_777_216;

/// The shortest `interval-ms` of a simulated tag (one observation per interval).
pub const SIMULATE_INTERVAL_MS_MIN: u32 = 10;

/// The longest `interval-ms` of a simulated tag (one day).
pub const SIMULATE_INTERVAL_MS_MAX: u32 = 86_400_000;

/// A simulated tag's `interval-ms` when it declares none.
pub const SIMULATE_INTERVAL_MS_DEFAULT: u32 = 1_000;

/// The longest `period-s` of a simulated tag's wave (one week).
pub const SIMULATE_PERIOD_S_MAX: u32 = 604_800;

/// The most observations of one simulated tag a host generates in one sampler tick when
/// several are due (the rest follow on the next ticks).
pub const SIMULATE_CATCH_UP_PER_TICK: u32 = 64;

/// The fastest a Modbus register may be polled (`interval-ms`).
pub const MODBUS_INTERVAL_MS_MIN: u32 = 10;
/// The slowest poll of a Modbus register.
pub const MODBUS_INTERVAL_MS_MAX: u32 = 86_400_000;
/// A Modbus register's poll interval when `interval-ms` is not given.
pub const MODBUS_INTERVAL_MS_DEFAULT: u32 = 1_000;

/// The longest `client-id` a Sparkplug tag may give its MQTT connection, in bytes
/// (printable ASCII without spaces). MQTT 3.1.1 (§3.1.3.1) makes every broker accept
/// 1 to 23 bytes of letters and digits and lets it accept more, as common brokers
/// (mosquitto among them) do. 128 lets any one Grid name be a client id (see the
/// assertion below) while an id stays short enough to read in a broker's log; past 23
/// bytes it depends on the broker, as docs/topology.md says.
pub const SPARKPLUG_CLIENT_ID_LENGTH_MAX: usize = 128;

const _: () = assert!(MODBUS_INTERVAL_MS_MIN <= MODBUS_INTERVAL_MS_DEFAULT);
const _: () = assert!(MODBUS_INTERVAL_MS_DEFAULT <= MODBUS_INTERVAL_MS_MAX);
const _: () = assert!(SIMULATE_INTERVAL_MS_MIN <= SIMULATE_INTERVAL_MS_DEFAULT);
const _: () = assert!(SIMULATE_INTERVAL_MS_DEFAULT <= SIMULATE_INTERVAL_MS_MAX);
// An operator may name a Sparkplug connection after any one Grid object (a host, a tag).
const _: () = assert!(SPARKPLUG_CLIENT_ID_LENGTH_MAX >= NAME_LENGTH_MAX);

// J1939 (`j1939` tags, docs/sources.md "CAN/J1939").

/// The largest parameter group number: 18 bits (extended data page, data page, PDU
/// format, PDU specific) of a 29-bit identifier.
pub const J1939_PGN_MAX: u32 = 0x3FFFF;
/// The largest suspect parameter number: 19 bits.
pub const J1939_SPN_MAX: u32 = 0x7FFFF;
/// The largest address a J1939 frame can come from: 254 is the null address (a node
/// that has none) and 255 the global one (a destination), neither a source.
pub const J1939_SOURCE_ADDRESS_MAX: u8 = 253;
/// The longest SocketCAN interface name, in bytes: Linux's IFNAMSIZ (16) less its
/// terminating NUL.
pub const J1939_INTERFACE_NAME_LENGTH_MAX: usize = 15;
// BACnet/IP (`bacnet` tag sources, crate::bacnet).
/// The fastest a BACnet object may be polled (`interval-ms`): each poll is one
/// confirmed request, a device's small APDU buffer is shared with every other client.
pub const BACNET_INTERVAL_MS_MIN: u32 = 100;
/// The slowest poll of a BACnet object.
pub const BACNET_INTERVAL_MS_MAX: u32 = 86_400_000;
/// A polled BACnet object's interval when `interval-ms` is not given.
pub const BACNET_INTERVAL_MS_DEFAULT: u32 = 1_000;
/// The shortest `lifetime-s` of a confirmed COV subscription (0 would be "forever" in
/// BACnet, which a removed tag could never let expire).
pub const BACNET_COV_LIFETIME_S_MIN: u32 = 10;
/// The longest `lifetime-s` of a COV subscription: how long a removed tag's
/// subscription may outlive it at the device.
pub const BACNET_COV_LIFETIME_S_MAX: u32 = 86_400;
/// A COV subscription's lifetime when `lifetime-s` is not given.
pub const BACNET_COV_LIFETIME_S_DEFAULT: u32 = 300;
/// The largest object instance number (22 bits; ASHRAE 135 clause 20.2.14); the
/// largest device instance is one less (4194303 is the wildcard instance).
pub const BACNET_INSTANCE_MAX: u32 = 4_194_303;
const _: () = assert!(BACNET_INTERVAL_MS_MIN <= BACNET_INTERVAL_MS_DEFAULT);
const _: () = assert!(BACNET_INTERVAL_MS_DEFAULT <= BACNET_INTERVAL_MS_MAX);
const _: () = assert!(BACNET_COV_LIFETIME_S_MIN <= BACNET_COV_LIFETIME_S_DEFAULT);
const _: () = assert!(BACNET_COV_LIFETIME_S_DEFAULT <= BACNET_COV_LIFETIME_S_MAX);
// A subscription is renewed at half its lifetime: even the shortest leaves whole
// seconds for the renewal to be answered before the device lets it expire.
const _: () = assert!(BACNET_COV_LIFETIME_S_MIN >= 2);
// OPC UA

/// The shortest publishing interval an OPC UA tag may request (`publishing-ms`); the
/// server may revise it upwards.
pub const OPCUA_PUBLISHING_MS_MIN: u32 = 10;
/// The longest publishing interval an OPC UA tag may request (one hour).
pub const OPCUA_PUBLISHING_MS_MAX: u32 = 3_600_000;
/// An OPC UA tag's publishing interval when `publishing-ms` is not given.
pub const OPCUA_PUBLISHING_MS_DEFAULT: u32 = 1_000;
/// The longest node id text of an OPC UA tag, in bytes: OPC UA Part 3 (§8.2.4) bounds
/// a string identifier at 4,096 characters; the `ns=65535;s=` prefix fits in the rest.
pub const OPCUA_NODE_ID_LENGTH_MAX: usize = 4_200;

const _: () = assert!(OPCUA_PUBLISHING_MS_MIN <= OPCUA_PUBLISHING_MS_DEFAULT);
const _: () = assert!(OPCUA_PUBLISHING_MS_DEFAULT <= OPCUA_PUBLISHING_MS_MAX);
// Every identifier OPC UA allows (4,096 characters of a string id, its prefix) fits.
const _: () = assert!(OPCUA_NODE_ID_LENGTH_MAX >= 4_096 + "ns=65535;s=".len());

// The operator's tools (gridctl).

/// The most characters of an operator's own input (an op id, a value, a name, a
/// formula) that a message quotes back; the rest is elided with its length, so a
/// 10,000-character id or a 4 MB formula never floods a terminal or a log.
pub const QUOTED_CHARS_MAX: usize = 200;

/// The most characters of one source line a diagnostic shows around its span; longer
/// lines (a formula of megabytes on one line) are shown as a window around the span.
pub const DIAGNOSTIC_LINE_CHARS_MAX: usize = 400;

/// The most diagnostics one check reports in full; the rest are counted.
pub const DIAGNOSTICS_SHOWN_MAX: usize = 100;

/// The most plan/reconcile rounds `gridctl up` makes before it gives up on an empty plan.
pub const UP_RECONCILE_ROUNDS_MAX: usize = 8;

/// The longest reason a failed observation shows in `gridctl up`'s view (one short line).
pub const VIEW_REASON_CHARS_MAX: usize = 100;

/// The most hosts `gridctl plan` observes at once (one thread each): observing is IO
/// bound (a control-socket call per host), so a plan of many hosts waits for the
/// slowest of a batch rather than for their sum.
pub const PLAN_OBSERVERS_MAX: usize = 16;

/// The most transitions a plan line names in its `(after …)` note; the rest are
/// counted (`and 1,021 more`).
pub const PLAN_AFTER_SHOWN_MAX: usize = 3;

/// The most hosts a plan's or reconcile's footer names (`wait for a, b, … and 9 more
/// to run`); `--json` lists them all.
pub const PLAN_HOSTS_SHOWN_MAX: usize = 8;

// Reading KDL text (`grid_spec::nesting`).

/// The deepest nesting of `{` blocks, and separately of `/* */` comments and of `/-`
/// slashdashes in a row, in any KDL
/// file Grid reads (topologies, journeys, saved plans). Grid's own files nest three
/// levels at most; the bound keeps the KDL parser's recursion (a few KiB of stack per
/// level) far from any thread's stack.
pub const NESTING_DEPTH_MAX: usize = 32;

/// The stack of the thread that parses one KDL text, before the text's own share.
pub const KDL_PARSE_STACK_BYTES_BASE: usize = 8 * 1024 * 1024;

/// Stack added per byte of KDL text: while it recovers from errors the parser recurses
/// once per bad token, and on a comment once per `*` or `/` in it (measured in a debug
/// build: at most 800 bytes per byte of text, for `}` after `}`), so the stack grows
/// with the text.
pub const KDL_PARSE_STACK_BYTES_PER_INPUT_BYTE: usize = 2_048;

/// The largest parse stack reserved (virtual memory, touched only as deep as the
/// parser goes): texts above 1 MiB get no more.
pub const KDL_PARSE_STACK_BYTES_MAX: usize = 2 * 1024 * 1024 * 1024;

// A nesting level costs at most 16 KiB of the parser's stack (measured: about 4 KiB in a
// debug build), so the deepest nesting allowed fits in the base stack whatever the text.
const _: () = assert!(NESTING_DEPTH_MAX * 16 * 1024 <= KDL_PARSE_STACK_BYTES_BASE);
const _: () = assert!(KDL_PARSE_STACK_BYTES_BASE <= KDL_PARSE_STACK_BYTES_MAX);

/// The name of every limit above, so a diagnostic that names one can be told apart
/// (`gridctl check --json` gives it as `limit`). A test keeps it complete.
pub const NAMES: &[&str] = &[
    "ROUTE_DESTINATIONS_MAX",
    "MODEL_OPERATIONS_CEILING_MAX",
    "MODEL_OPERATIONS_CEILING_DEFAULT",
    "MEMBERSHIP_MODELS_CEILING_DEFAULT",
    "GRDX_CELLS_MAX",
    "REFERENCE_MODEL_CELLS",
    "CERTIFICATE_VALID_DAYS_DEFAULT",
    "CERTIFICATE_VALID_DAYS_MAX",
    "CERTIFICATE_RENEW_BEFORE_DAYS_DEFAULT",
    "NAME_LENGTH_MAX",
    "FORMULA_LENGTH_MAX",
    "FORMULA_NESTING_MAX",
    "BATCH_INPUTS_MAX",
    "ROUND_DIGITS_MAX",
    "AUTHORITY_VOTERS_MAX",
    "DELIVERY_CAPACITY_MAX",
    "SIMULATE_INTERVAL_MS_MIN",
    "SIMULATE_INTERVAL_MS_MAX",
    "SIMULATE_INTERVAL_MS_DEFAULT",
    "SIMULATE_PERIOD_S_MAX",
    "SIMULATE_CATCH_UP_PER_TICK",
    "MODBUS_INTERVAL_MS_MIN",
    "MODBUS_INTERVAL_MS_MAX",
    "MODBUS_INTERVAL_MS_DEFAULT",
    "SPARKPLUG_CLIENT_ID_LENGTH_MAX",
    "J1939_PGN_MAX",
    "J1939_SPN_MAX",
    "J1939_SOURCE_ADDRESS_MAX",
    "J1939_INTERFACE_NAME_LENGTH_MAX",
    "BACNET_INTERVAL_MS_MIN",
    "BACNET_INTERVAL_MS_MAX",
    "BACNET_INTERVAL_MS_DEFAULT",
    "BACNET_COV_LIFETIME_S_MIN",
    "BACNET_COV_LIFETIME_S_MAX",
    "BACNET_COV_LIFETIME_S_DEFAULT",
    "BACNET_INSTANCE_MAX",
    "OPCUA_PUBLISHING_MS_MIN",
    "OPCUA_PUBLISHING_MS_MAX",
    "OPCUA_PUBLISHING_MS_DEFAULT",
    "OPCUA_NODE_ID_LENGTH_MAX",
    "QUOTED_CHARS_MAX",
    "DIAGNOSTIC_LINE_CHARS_MAX",
    "DIAGNOSTICS_SHOWN_MAX",
    "UP_RECONCILE_ROUNDS_MAX",
    "VIEW_REASON_CHARS_MAX",
    "PLAN_OBSERVERS_MAX",
    "PLAN_AFTER_SHOWN_MAX",
    "PLAN_HOSTS_SHOWN_MAX",
    "NESTING_DEPTH_MAX",
    "KDL_PARSE_STACK_BYTES_BASE",
    "KDL_PARSE_STACK_BYTES_PER_INPUT_BYTE",
    "KDL_PARSE_STACK_BYTES_MAX",
    "LEDGER_ACCOUNTS_MAX",
    "LEDGERS_PER_HOST_MAX",
    "LEDGER_CURRENCY_LENGTH_MIN",
    "LEDGER_CURRENCY_LENGTH_MAX",
    "RETAIN_DAYS_MIN",
    "RETAIN_HOT_DAYS_DEFAULT",
    "RETAIN_HOT_DAYS_MAX",
    "RETAIN_ARCHIVE_DAYS_MAX",
    "STORAGE_GENERATION_MAX",
    "DECISION_ROSTER_MAX",
    "CONTROL_LISTENS_MAX",
    "DECISION_EXPIRY_HOURS_MAX",
];

// Ledgers (SPEC C6, docs/ledger.md).

/// The most accounts one `ledger` declares (retired ones count: an account is never
/// deleted).
pub const LEDGER_ACCOUNTS_MAX: usize = 4_096;

/// The most ledgers one host keeps.
pub const LEDGERS_PER_HOST_MAX: usize = 64;

/// The shortest currency code of an account (`currency="EUR"`): codes are uppercase
/// ASCII letters and digits.
pub const LEDGER_CURRENCY_LENGTH_MIN: usize = 3;

/// The longest currency code of an account.
pub const LEDGER_CURRENCY_LENGTH_MAX: usize = 12;

const _: () = assert!(LEDGER_CURRENCY_LENGTH_MIN <= LEDGER_CURRENCY_LENGTH_MAX);

// Retention (docs/storage.md): how long a host keeps answers in its hot store, and how
// long its archive answers a re-sent id before refusing it as expired.

/// The shortest `retain hot-days=` or `archive-days=`.
pub const RETAIN_DAYS_MIN: u32 = 1;

/// `retain hot-days=` when a host declares none: answers older than this move to the
/// archive.
pub const RETAIN_HOT_DAYS_DEFAULT: u32 = 7;

/// The longest hot window: the hot store's size is this window times the host's rate.
pub const RETAIN_HOT_DAYS_MAX: u32 = 366;

/// The longest `archive-days=` (a century): without it the archive keeps answers for
/// ever.
pub const RETAIN_ARCHIVE_DAYS_MAX: u32 = 36_525;

/// The highest storage generation (`storage generation=N`, `gridctl host
/// replace-storage`, docs/transfer.md): each replacement fences its predecessor's
/// generation, and an installation at this one refuses another replacement rather
/// than reuse one.
pub const STORAGE_GENERATION_MAX: u64 = 1_000;

/// The most hosts a decision's roster names (docs/decisions.md): the roster is fixed
/// and signed whole in the decision's Open record.
pub const DECISION_ROSTER_MAX: usize = 64;

// The operator control plane (issue 36, docs/control-plane.md).

/// The most `control` lines (addresses serving the control plane) one host has.
pub const CONTROL_LISTENS_MAX: usize = 4;

/// The longest a decision stays open for ballots (`expires-after-hours`): a year.
pub const DECISION_EXPIRY_HOURS_MAX: u32 = 8_760;

const _: () = assert!(RETAIN_DAYS_MIN <= RETAIN_HOT_DAYS_DEFAULT);
const _: () = assert!(RETAIN_HOT_DAYS_DEFAULT <= RETAIN_HOT_DAYS_MAX);
const _: () = assert!(RETAIN_HOT_DAYS_MAX <= RETAIN_ARCHIVE_DAYS_MAX);
