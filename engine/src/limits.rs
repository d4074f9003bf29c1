//! Every runtime limit of the engine as a named constant, beside the limits of the
//! topology language and SPEC §1.9 (re-exported from `grid_spec::limits`), so that
//! `crate::limits` is the one place a bound is read from. Names carry their unit last
//! (`…_BYTES_MAX`, `…_MS_MAX`); every error caused by a limit names its constant. Where
//! one limit depends on another, a compile-time assertion says so, with the reason.

use std::time::Duration;

pub use grid_spec::limits::*;

// Hosts and their operations.

/// The longest operation id, in bytes.
pub const OPERATION_ID_LENGTH_MAX: usize = 128;
/// The most unacknowledged answers one `observe` lists (in operation-id order).
pub const OBSERVE_UNACKNOWLEDGED_MAX: usize = 256;

// The control plane (docs/control-plane.md).

/// How long one explicit inspection of another host waits for its observation.
pub const CONTROL_INSPECT_WAIT: Duration = Duration::from_secs(10);
/// The longest form a control plane reads (`POST /inspect`), in bytes.
pub const CONTROL_FORM_BYTES_MAX: usize = 4096;
/// Browser connections one control plane serves at once; more wait to be accepted.
pub const CONTROL_PAGE_CONNECTIONS_MAX: usize = 64;
/// How long an operator's browser may take over its TLS handshake with a control
/// line served with operator mutual TLS before the connection is dropped (it holds
/// one of CONTROL_PAGE_CONNECTIONS_MAX meanwhile).
pub const CONTROL_TLS_HANDSHAKE_WAIT: Duration = Duration::from_secs(10);
/// The largest record the control plane keeps of one subject across restarts
/// (`control::kept`): a larger answer is shown from memory and not kept.
pub const CONTROL_RETAINED_BYTES_MAX: u64 = 32 * 1024 * 1024;
/// The largest PEM file a control line names (`operators=`, `certificate=`, `key=`):
/// a certificate chain is a few kilobytes.
pub const CONTROL_CREDENTIAL_BYTES_MAX: u64 = 1024 * 1024;
/// Rows one panel shows of one owner's part (the rest counted, not drawn).
pub const CONTROL_PANEL_ROWS_MAX: usize = 10_000;
/// Columns one panel's table draws (the first fields seen).
pub const CONTROL_PANEL_COLUMNS_MAX: usize = 16;
/// Characters one table cell shows of a value; longer ones end in `…`.
pub const CONTROL_CELL_CHARS_MAX: usize = 200;

// Matrices (docs/grdx.md).

/// The largest matrix file (`.grdx` or `.csv`) an operator gives, in bytes: a GRDX
/// of GRDX_CELLS_MAX cells is 131,088 bytes; a CSV table of as many cells in full
/// precision fits too.
pub const MATRIX_FILE_BYTES_MAX: u64 = 1024 * 1024;
// A file of the largest GRDX matrix (a 16-byte header and 8 bytes a cell) is accepted.
const _: () = assert!(MATRIX_FILE_BYTES_MAX >= (16 + GRDX_CELLS_MAX * 8) as u64);
/// A mapping's own capacity: matrices its publisher retains not yet receipted by every
/// destination (per destination and in all), beside — never inside — the host's
/// Ordered pool of scalar routes.
pub const MAPPING_RETAINED_MAX: u64 = 64;
/// The staged versions of a mapping a destination keeps: older ones are superseded
/// and purged (an applied version's value lives in its model's batches and checkpoint,
/// not in the inbox; docs/grdx.md, "What a destination keeps"). Not a user knob.
pub const MAPPING_STAGED_KEPT_MAX: u64 = 16;
/// Matrices one `Staged` reply lists at most (the newest).
pub const MAPPING_STAGED_REPLY_MAX: usize = 256;
// Every version a destination keeps is listed by one reply.
const _: () = assert!(MAPPING_STAGED_KEPT_MAX as usize <= MAPPING_STAGED_REPLY_MAX);
/// Matrices one push of a mapping carries at most.
pub const MAPPING_PUSH_MATRICES_MAX: usize = 4;
// A push of that many of the largest matrices, sealed and hex-encoded (twice their
// bytes, plus the seal's 64-byte overhead and the JSON around it), fits in a push body.
const _: () = assert!(
    MAPPING_PUSH_MATRICES_MAX * (2 * (16 + GRDX_CELLS_MAX * 8 + 64) + 1024) <= PUSH_BODY_BYTES_MAX
);
// A published matrix, hex-encoded, fits in one control line.
const _: () = assert!((2 * (16 + GRDX_CELLS_MAX * 8) + 1024) as u64 <= CONTROL_LINE_BYTES_MAX);

// The control API.

/// The longest call line accepted, in bytes.
pub const CONTROL_LINE_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// The most connections served at once; more wait in the listen backlog.
pub const CONTROL_CONNECTIONS_MAX: usize = 64;
/// A gridd whose custody is locked serves one control connection at a time
/// (docs/custody.md, "Locked custody"); one idle this long is closed for the next.
pub const LOCKED_CONTROL_IDLE: Duration = Duration::from_secs(2);

// Control replies.

/// The most observations one `Call::Tag` reply lists.
pub const TAG_REPORT_OBSERVATIONS_MAX: usize = 10_000;
/// The most outstanding debt entries one `Call::Tag` reply lists (the newest).
pub const TAG_REPORT_DEBT_MAX: usize = 1_000;
/// The most journal entries, with raw values and times, one `Call::Tag` reply lists.
pub const TAG_REPORT_ENTRIES_MAX: usize = 200;

// Industrial sources (profile `sources`).

/// The most adapter reports waiting for the host to journal them; a full queue makes
/// the adapters wait (they read or receive less), never drops a report.
pub const INGEST_QUEUE_MAX: usize = 65_536;
/// The most adapter reports journaled in one synced write (group commit).
pub const INGEST_BATCH_MAX: usize = 8_192;
/// The most values of a model `tag.read` answers for one fed observation (kept with
/// the observation's batch, in declaration order).
pub const TAG_EFFECT_VALUES_MAX: usize = 256;

const _: () = assert!(INGEST_BATCH_MAX <= INGEST_QUEUE_MAX);
// A tag report reads the newest TAG_REPORT_OBSERVATIONS_MAX entries once; its debt and
// entries lists are tails of that read.
const _: () = assert!(TAG_REPORT_DEBT_MAX <= TAG_REPORT_OBSERVATIONS_MAX);
const _: () = assert!(TAG_REPORT_ENTRIES_MAX <= TAG_REPORT_OBSERVATIONS_MAX);

// Storage.

/// The free space below which a host refuses new work ("storage full"): what stays
/// for answers, acknowledgements, flushes and compactions, in bytes.
pub const STORAGE_RESERVE_BYTES_MIN: u64 = 64 * 1024 * 1024;
/// The most files `gridctl inspect storage` counts in one store directory; a larger one
/// is reported `truncated`.
pub const STORAGE_WALK_FILES_MAX: usize = 100_000;
/// The most batches a model's journal holds past its checkpoint before the host takes
/// a new one (and then purges the batches it covers): what an open replays per model.
/// Not a user knob (docs/storage.md).
pub const MODEL_CHECKPOINT_BATCHES_MAX: u64 = 10_000;
/// How often the host looks for models past `MODEL_CHECKPOINT_BATCHES_MAX`.
pub const CHECKPOINT_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// The most covered entries one checkpoint purges in one write; the rest go with the
/// next checkpoint (opening skips covered entries either way).
pub const CHECKPOINT_PURGE_ENTRIES_MAX: usize = 100_000;
/// The most entries a tag's source journal holds that every model fed by it has
/// projected (and that are older than its newest good entry) before the host purges
/// them (docs/storage.md, "Source journal"). Not a user knob.
pub const TAG_JOURNAL_HOT_ENTRIES_MAX: u64 = 10_000;
/// The most publications a route's publisher journal holds past its checkpoint before
/// the host takes a new one (then purges what every recipient receipted): what an open
/// replays per route (docs/storage.md, "Delivery"). Not a user knob.
pub const DELIVERY_CHECKPOINT_POSITIONS_MAX: u64 = 10_000;
/// The most values a destination's inbox holds that every model fed by the route has
/// taken into a durable batch before the host purges them (docs/storage.md,
/// "Delivery"). Not a user knob.
pub const INBOX_HOT_ENTRIES_MAX: u64 = 10_000;
/// The window purged debt and refusals are counted in, per reason (keyspace `tag-debt`).
pub const TAG_DEBT_WINDOW_MS: u64 = 3_600_000;
/// The most debt windows `inspect tag` reports (the newest).
pub const TAG_REPORT_DEBT_WINDOWS_MAX: usize = 64;
/// The most bytes of fjall's journal the host store keeps before it flushes the
/// memtables pinning the oldest journal file (fjall's minimum; its default is 512 MiB):
/// what an open must replay, whatever the history.
pub const STORE_JOURNAL_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// How old a high-water record signed ahead for the next count may be when it is
/// written (store::high_water): older, it is signed again, so a record's time is
/// never further than this from its write.
pub const HIGH_WATER_SPARE_AGE_MS_MAX: u64 = 1_000;
/// The most bytes one keyspace's memtable holds before it is flushed to a table
/// (fjall's default is 64 MiB per keyspace).
pub const STORE_MEMTABLE_BYTES_MAX: u64 = 8 * 1024 * 1024;
/// The most answers one archive segment holds (docs/storage.md, "Archive").
pub const ARCHIVE_SEGMENT_ENTRIES_MAX: usize = 10_000;
/// The fewest answers the periodic archive pass writes as a segment, unless the oldest
/// of them has waited `ARCHIVE_SEGMENT_WAIT_MAX` past the hot window: a quiet host
/// makes few, fuller segments (what an open checks and a lookup opens).
pub const ARCHIVE_SEGMENT_ENTRIES_MIN: usize = 1_000;
/// The longest an answer past the hot window waits in the hot store for company.
pub const ARCHIVE_SEGMENT_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(3_600);
/// The most uncompressed answer bytes one archive segment holds.
pub const ARCHIVE_SEGMENT_BYTES_MAX: usize = 8 * 1024 * 1024;
/// The most segments one archive pass writes while it holds the host; the rest wait
/// for the next pass.
pub const ARCHIVE_SEGMENTS_PER_PASS_MAX: usize = 16;
/// How often the host moves answers past its hot window (`retain hot-days`) to the
/// archive and releases segments past `archive-days`.
pub const ARCHIVE_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// The hot store's bound while the archive refuses segments (a remote store that does
/// not answer): answers may wait this many days past the hot window; past it, new work
/// is refused (`archive unreachable and the hot store is full`) — never dropped —
/// until a pass catches up. A full disk refuses sooner (`STORAGE_RESERVE_BYTES_MIN`).
pub const ARCHIVE_LAG_DAYS_MAX: u32 = 2;
/// How long the periodic pass waits after the archive refused a segment before it tries
/// again (it holds the host while it writes; `gridctl storage archive` always tries).
pub const ARCHIVE_RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

// Remote blob stores (issue 29: `store/s3/`).

/// The longest a remote store may take to accept a connection (a store that does not
/// answer is found out this soon, not after the whole request's time).
pub const REMOTE_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest each phase of one request to a remote store may take — sending it,
/// receiving the answer's head, receiving its body (after the connection's
/// `REMOTE_CONNECT_TIMEOUT`): a request that stalls is given up within this.
pub const REMOTE_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a remote store may take, once a request is sent, to begin its answer
/// (a server that accepted the request and stalls is given up this soon).
pub const REMOTE_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest `ca=` file read (a PEM file of the certificate authorities a remote
/// store's https:// endpoint is checked against).
pub const REMOTE_CA_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// The largest answer read from a remote store (a blob, a listing page, an error).
pub const REMOTE_BLOB_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// The most names one listing request asks for (S3's own page size).
pub const REMOTE_LIST_PAGE_MAX: usize = 1_000;
/// The plaintext bytes sealed as one chunk of a sealed blob (`store/sealed.rs`): a
/// ranged read opens the chunks it covers, at most this much more than it asked for.
pub const SEALED_CHUNK_BYTES: usize = 64 * 1024;
/// The sealed headers (salt and length) a sealed store keeps in memory, so a ranged
/// read of a blob read before is one request, not two; past it the cache starts over.
pub const SEALED_HEADERS_CACHED_MAX: usize = 4_096;
/// The delivery values one sender context seals (`custody/seal_context.rs`: one HPKE
/// encapsulation to a destination's mail key, each value under its own nonce) before
/// the push loop makes a fresh one.
pub const SEAL_CONTEXT_VALUES_MAX: u64 = 65_536;
/// How long a sender context seals before the push loop makes a fresh one.
pub const SEAL_CONTEXT_AGE_MAX: Duration = Duration::from_secs(60);
/// The opened contexts (a decapsulation each) a host remembers, so that the values of
/// one context cost one X25519 operation at the recipient; past it it starts over.
pub const SEAL_CONTEXTS_OPENED_MAX: usize = 1_024;
/// How long a presigned request stays valid (it is sent at once).
pub const REMOTE_PRESIGNED_VALID: Duration = Duration::from_secs(300);
/// The snapshots of each authority voter kept in its `snapshots "s3://…"` store: the
/// newest, and the one before it (which a voter may still be fetching when a newer
/// one is put). Older ones are deleted after each put.
pub const SNAPSHOTS_REMOTE_KEPT: usize = 2;
/// The longest snapshot object name a voter fetches (a leader's reference naming a
/// longer one is refused).
pub const SNAPSHOT_OBJECT_NAME_BYTES_MAX: usize = 512;
/// The longest key of a record (`store/records.rs`): an operation id and its
/// context; DynamoDB takes 2,048 bytes for a partition key.
pub const RECORD_KEY_BYTES_MAX: usize = 1_024;
/// The largest value of a record: an index entry, far below DynamoDB's 400 KB item.
pub const RECORD_VALUE_BYTES_MAX: usize = 64 * 1024;
// A whole segment is read back in one answer.
const _: () = assert!(ARCHIVE_SEGMENT_BYTES_MAX as u64 * 2 <= REMOTE_BLOB_BYTES_MAX);
/// One day, as the retention windows count it.
pub const RETAIN_DAY_MS: u64 = 86_400_000;

// The transport.

/// The most TLS connections served at once.
pub const TRANSPORT_CONNECTIONS_MAX: usize = 256;
/// The longest Raft message or forwarded call body accepted, in bytes.
pub const RAFT_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// The largest snapshot a voter accepts, in bytes.
pub const SNAPSHOT_BYTES_MAX: usize = 1024 * 1024 * 1024;
/// The longest reply a peer's transport client reads, in bytes (a longer one is
/// `Lost`: the request may have taken effect).
pub const PEER_REPLY_BYTES_MAX: usize = 64 * 1024 * 1024;

// The authority's state machine.

/// How many operation answers the state machine retains (the oldest are forgotten
/// first). A re-sent id older than that is refused as expired, never executed again.
pub const ANSWERS_RETAINED_MAX: usize = 1_000_000;
/// The longest claim name, in bytes.
pub const CLAIM_NAME_LENGTH_MAX: usize = 256;
/// Records (claims, answers, digests, removals) an authority writes per batch while
/// installing a snapshot (so an install holds at most this many in memory).
pub const SNAPSHOT_INSTALL_BATCH_RECORDS_MAX: usize = 10_000;
/// How long a start of a host whose store is fenced at an authority (`storage
/// authority="M"`, docs/transfer.md) waits for the authority's voters to confirm the
/// claim `store:HOST` before it refuses to start (nothing served meanwhile): long
/// enough for a few elections (`ELECTION_TIMEOUT_MS_MAX`).
pub const STORE_CLAIM_START_WAIT: Duration = Duration::from_secs(12);
/// How long one call of that start waits for one voter's answer.
pub const STORE_CLAIM_CALL_TIMEOUT: Duration = Duration::from_secs(6);

// The authority's voters.

/// Raft heartbeat interval, in milliseconds.
pub const HEARTBEAT_MS: u64 = 250;
/// Raft election timeout bound, in milliseconds.
pub const ELECTION_TIMEOUT_MS_MIN: u64 = 1_000;
/// Raft election timeout bound, in milliseconds.
pub const ELECTION_TIMEOUT_MS_MAX: u64 = 2_000;
/// The most claim commands in one log entry.
pub const BATCH_COMMANDS_MAX: usize = 1_024;
/// How many batches may wait for their commit at once; meanwhile new commands gather
/// into the next batch.
pub const BATCHES_IN_FLIGHT_MAX: usize = 4;

// Value delivery.

/// How long a push waits for the recipient's receipt before it is sent again.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// Deliveries one push carries at most.
pub const PUSH_DELIVERIES_MAX: usize = 512;
/// The longest pause between attempts to reach a destination that did not answer.
pub const PUSH_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Values one `held` reply carries at most (`next` says where to continue).
pub const HELD_REPLY_MAX: usize = 20_000;
/// The longest a `receipted` call waits for a publication's receipts (ms).
pub const RECEIPTED_WAIT_MS_MAX: u64 = 60_000;
/// The most destinations a `receipted` answer names among those still awaited.
pub const RECEIPTED_MISSING_MAX: usize = 16;
/// The longest push body a recipient accepts, in bytes.
pub const PUSH_BODY_BYTES_MAX: usize = 4 * 1024 * 1024;

// Remote Processes.

/// The most arguments one run carries.
pub const RUN_ARGUMENTS_MAX: usize = 64;
/// The longest argument name or value, in bytes.
pub const ARGUMENT_BYTES_MAX: usize = 4096;
/// The longest request id, in bytes (as operation ids).
pub const REQUEST_ID_LENGTH_MAX: usize = OPERATION_ID_LENGTH_MAX;
/// The longest `run`/`status` body or mailbox call a host accepts, in bytes.
pub const PROCESS_BODY_BYTES_MAX: usize = 1024 * 1024;
/// The longest a caller's `run` call may wait.
pub const RUN_WAIT_MAX: Duration = Duration::from_secs(600);
/// Deposits one `fetch` returns at most.
pub const MAILBOX_FETCH_MAX: usize = 256;
/// Deposits one `fetch` drops at most of those its `after` says were taken (the next
/// fetch drops the rest).
pub const MAILBOX_PURGE_PER_FETCH_MAX: usize = 1_024;
/// Collected outcomes one `forget` names at most (a caller's pass sends the rest in
/// the next).
pub const MAILBOX_FORGET_MAX: usize = 256;
/// The longest pause between a caller's polls of an open wait.
pub const WAIT_POLL_MAX: Duration = Duration::from_secs(2);
/// Open waits one pass of the caller's resumption asks at most.
pub const WAITS_PASS_MAX: usize = 64;
/// Owed outcome deposits one pass of the receiver's fetcher tries at most.
pub const OUTBOX_PASS_MAX: usize = 64;
/// The longest `delay_ms` of `demo.count`.
pub const DEMO_DELAY_MS_MAX: u64 = 60_000;

// The daemon.

/// The most hosts one gridd process runs.
pub const HOSTS_PER_PROCESS_MAX: usize = 1_024;
/// How long gridd waits for its shutdown log line on SIGTERM or SIGINT before ending
/// anyway (a stderr pipe nobody reads never holds a shutdown back).
pub const SHUTDOWN_LOG_WAIT_MS: u64 = 500;

// Relations between limits.

// A Process request id is an operation id of the caller: the same bound, so any
// operation id a caller holds can name a run.
const _: () = assert!(REQUEST_ID_LENGTH_MAX == OPERATION_ID_LENGTH_MAX);
// One gridd process can hold every recipient of the widest route: the fan-out
// journeys pack a route's 1,024 destinations into one process.
const _: () = assert!(HOSTS_PER_PROCESS_MAX >= ROUTE_DESTINATIONS_MAX);
// A run's arguments at their limits (names and values, each at most
// ARGUMENT_BYTES_MAX) fill at most half of the body that carries them; the rest is
// for the request around them and JSON's quoting.
const _: () = assert!(RUN_ARGUMENTS_MAX * 2 * ARGUMENT_BYTES_MAX <= PROCESS_BODY_BYTES_MAX / 2);
// A run request or a mailbox call relayed through the control API fits in one
// control line.
const _: () = assert!(PROCESS_BODY_BYTES_MAX as u64 <= CONTROL_LINE_BYTES_MAX);
// One push carries at most a `held` reply's worth of values.
const _: () = assert!(PUSH_DELIVERIES_MAX <= HELD_REPLY_MAX);
// Raft's election timeout is a range: its lower bound is below its upper bound, and
// both above the heartbeat, so a live leader is never voted out.
const _: () = assert!(HEARTBEAT_MS < ELECTION_TIMEOUT_MS_MIN);
const _: () = assert!(ELECTION_TIMEOUT_MS_MIN < ELECTION_TIMEOUT_MS_MAX);
// A snapshot is not smaller than the largest Raft message it replaces.
const _: () = assert!(RAFT_MESSAGE_BYTES_MAX <= SNAPSHOT_BYTES_MAX);
// Every reply a peer sends fits: control replies, mission bodies, Raft replies.
const _: () = assert!(CONTROL_LINE_BYTES_MAX as usize <= PEER_REPLY_BYTES_MAX);
const _: () = assert!(MISSION_BODY_BYTES_MAX <= PEER_REPLY_BYTES_MAX);
const _: () = assert!(RAFT_MESSAGE_BYTES_MAX <= PEER_REPLY_BYTES_MAX);
// A caller's wait is asked at least as often as its run may wait.
const _: () = assert!(WAIT_POLL_MAX.as_millis() < RUN_WAIT_MAX.as_millis());
// Backoff between pushes is shorter than a push's own timeout.
const _: () = assert!(PUSH_BACKOFF_MAX.as_millis() < PUSH_TIMEOUT.as_millis());

// Ledgers (profile `ledger`, docs/ledger.md).

/// The most operations (transfers, posts, voids) of one ledger batch, and the most ids
/// one lookup asks for.
pub const LEDGER_BATCH_TRANSFERS_MAX: usize = 8_190;
/// The longest `timeout_s` of a pending transfer (ten years).
pub const LEDGER_TIMEOUT_S_MAX: u64 = 10 * 365 * 24 * 3_600;
/// How often the expiry sweeper looks for pending transfers that fell due.
pub const LEDGER_EXPIRY_SWEEP_INTERVAL: Duration = Duration::from_millis(200);
/// The most pending transfers one `inspect ledger` lists.
pub const LEDGER_INSPECT_PENDING_MAX: usize = 1_000;
/// The most journal records a ledger holds past its checkpoint before the host takes a
/// new one (settling every answer since into the id index, then purging the records it
/// covers): what an open replays per ledger. Not a user knob (docs/storage.md).
pub const LEDGER_CHECKPOINT_RECORDS_MAX: u64 = 10_000;
/// The most journal bytes a ledger holds past its checkpoint before the host takes a
/// new one, whatever the count of records: what one checkpoint settles is bounded by it.
pub const LEDGER_CHECKPOINT_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// The most answers (and closed pending transfers) a ledger holds in memory since its
/// checkpoint before the host takes a new one: what bounds a ledger's memory by its
/// cadence rather than its history.
pub const LEDGER_CHECKPOINT_IDS_MAX: usize = 100_000;

// A whole batch of transfers whose id and account names average 32 bytes (with the
// JSON keys, quoting and amount: under 320 bytes a transfer) fits in one control line;
// longer ones meet CONTROL_LINE_BYTES_MAX first, which refuses the call by name.
const _: () = assert!((LEDGER_BATCH_TRANSFERS_MAX * 320) as u64 <= CONTROL_LINE_BYTES_MAX);
// A timeout in milliseconds never overflows a u64 timestamp of this millennium.
const _: () = assert!(LEDGER_TIMEOUT_S_MAX < u64::MAX / 1_000 / 2);

// Remote Processes at speed: mailbox long polls (issue 18 §4).

/// The longest a mailbox host holds a `fetch` or `collect` that finds nothing yet,
/// waiting for a deposit (a long poll; the call's own `wait_ms` may ask for less).
pub const MAILBOX_LONG_POLL_WAIT: Duration = Duration::from_secs(5);
/// Long polls a mailbox host holds at once; more are answered at once (the asker
/// pauses before asking again).
pub const MAILBOX_HELD_MAX: usize = 128;
/// The HTTP request timeout of a mailbox call (deposit, fetch, collect) at the
/// asker: longer than any hold, so a held call is answered, never timed out.
pub const MAILBOX_CALL_TIMEOUT: Duration = Duration::from_secs(10);
// A held fetch or collect is answered before the asker's request times out.
const _: () = assert!(MAILBOX_LONG_POLL_WAIT.as_millis() * 2 <= MAILBOX_CALL_TIMEOUT.as_millis());
// Held long polls leave most of the transport's connections to other calls.
const _: () = assert!(MAILBOX_HELD_MAX * 2 <= TRANSPORT_CONNECTIONS_MAX);

/// How long a caller waits for its receiver's answer to `process cancel` (the receiver
/// fsyncs the bar before it answers); no answer in time: the cancel is unknown, asked
/// again only by the operator with the same id.
pub const CANCEL_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a recipient waits for its issuer's answer to a surrender (fsynced before
/// it answers); no answer in time: unknown to the recipient, asked again the same way.
pub const SURRENDER_CALL_TIMEOUT: Duration = Duration::from_secs(10);

// Missions (issue 19, docs/missions.md).

/// How long a mission's host waits for its issuer's answer (an issue, a return, a
/// never-issued closure: each fsynced before it answers); no answer in time: the step
/// is unknown, re-sent only by the operator with the same op id.
pub const MISSION_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a return waits, after stopping new work, for runs already admitted under
/// the allocation to journal their outcomes before it refuses.
pub const MISSION_RETURN_QUIET_WAIT: Duration = Duration::from_secs(5);
/// Missions a host holds at once (reserved and not settled, closed or refused), and
/// missions an issuer holds open (issued, neither settled nor closed). Finished ones
/// keep their records (one each, for their re-sent ids) and count for nothing.
pub const MISSIONS_MAX: usize = 1_024;
/// The longest operation id of a mission step: the ids it derives for its claim
/// commands (`OP/successor/` and a 16-digit digest) stay within the authority's
/// 128-byte operation ids.
pub const MISSION_OP_LENGTH_MAX: usize = 64;
const _: () = assert!(MISSION_OP_LENGTH_MAX + "/successor/".len() + 16 <= 128);
/// The largest body the issuer's endpoint takes: a return carries every run of the
/// mission with its signed outcome (a mission whose record is larger cannot return
/// through it, and says so).
pub const MISSION_BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

// The wallet and the archive wallet (issue 18 §3).

/// Proposals one wallet keeps (each is signed and stored for good).
pub const WALLET_PROPOSALS_MAX: usize = 10_000;
/// Entries of one wallet's journal (proposals, submissions, surrenders, openings).
pub const WALLET_JOURNAL_ENTRIES_MAX: usize = 100_000;
/// The bytes of one archive (it travels in one control line).
pub const WALLET_ARCHIVE_BYTES_MAX: u64 = 2 * 1024 * 1024;
/// Foreign archives one wallet holds opened.
pub const WALLET_FOREIGN_ARCHIVES_MAX: usize = 64;
/// How long a wallet Process waits for the owner it asks (a peer's observation, a
/// submission's outcome, a surrender's answer) before answering unknown.
pub const WALLET_OWNER_WAIT: Duration = Duration::from_secs(10);
// An archive (and its opening call, with JSON quoting) fits in one control line.
const _: () = assert!(WALLET_ARCHIVE_BYTES_MAX * 2 <= CONTROL_LINE_BYTES_MAX);

// Remote Processes at speed, second round (issue 18 §4).

/// How long the Processes' fsync thread gathers before an fsync when the previous one
/// covered more than one write (concurrent runs): one fsync then covers more of them.
/// A lone run never waits for it. Measured (BENCHMARKS.md §4): 0, 100, 300 and 600 µs
/// gave about 2,500, 3,500, 3,900 and 4,300 direct runs/s at 64 callers.
pub const PROCESSES_FSYNC_GATHER: Duration = Duration::from_micros(600);

/// Publications of one route a model serving several memberships may keep waiting for
/// their membership's capacity (profile `shared-memberships`, docs/memberships.md):
/// beyond it the model's writer refuses the batch — the bound where one membership's
/// stall starts to push back on the other's.
pub const DEFERRED_PER_ROUTE_MAX: usize = 65_536;

/// Obligations a leave lists by name at most (docs/memberships.md, "Leaving"); more are
/// counted ("and N more").
pub const LEAVE_OBLIGATIONS_SHOWN_MAX: usize = 32;

/// Values of an export's `from` one forwarding round takes across in one synced write
/// (profile `exports`, docs/exports.md); more wait for the next round.
pub const EXPORT_FORWARD_BATCH_MAX: usize = 1_024;
/// Signed mappings a gateway keeps per export (docs/exports.md, "Storage"): past it the
/// oldest are purged — only those whose `to` position every destination receipted.
pub const EXPORT_MAPPINGS_HOT_MAX: u64 = 100_000;
/// Signed mappings one `inspect export` reply lists; `next` pages on.
pub const EXPORT_MAPPINGS_SHOWN_MAX: usize = 1_000;
/// How long a gateway armed `export-after-publish` waits for the receipts of `to`.
pub const EXPORT_PUBLISH_WAIT: Duration = Duration::from_secs(10);

/// How often a host's transport looks at its membership credentials' files while no
/// new connection comes: a revocation distributed applies to connections already open
/// within it (docs/transport.md, "Reloading credentials").
pub const CREDENTIALS_CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// scrypt's cost (log2 N; r = 8, p = 1) when a locked custody encrypts a key file
/// (docs/custody.md, "Locked custody"): 32 MiB and about 50 ms per key on this machine
/// (BENCHMARKS.md §18) — what unlocking costs, and what each guess at a stolen file
/// costs.
pub const CUSTODY_SCRYPT_LOG_N: u8 = 15;
/// A locked custody's key file encrypted with a lower scrypt cost (OpenSSL 3's default
/// is 14), with PBKDF2, or with a cipher other than AES-256-GCM is refused as weak.
pub const CUSTODY_SCRYPT_LOG_N_MIN: u8 = 14;
/// Nor is a key file whose scrypt cost is above this decrypted (log2 N = 20: 1 GiB at
/// r = 8): a file is not allowed to make unlocking exhaust the host's memory.
pub const CUSTODY_SCRYPT_LOG_N_MAX: u8 = 20;
/// scrypt's block size and parallelism a key file may ask for, at most.
pub const CUSTODY_SCRYPT_R_MAX: u16 = 32;
pub const CUSTODY_SCRYPT_P_MAX: u16 = 4;
/// A passphrase that locks a custody is at least this many bytes ...
pub const CUSTODY_PASSPHRASE_BYTES_MIN: usize = 12;
/// ... and at most this many (a passphrase file is read no further).
pub const CUSTODY_PASSPHRASE_BYTES_MAX: usize = 1_024;

// Decisions (profile `decisions`, docs/decisions.md).

/// The longest decision id (its open's `--op`): `decision:ID` names its apply run and
/// `process:HOST:decision:ID` a ledger transfer, within REQUEST_ID_LENGTH_MAX.
pub const DECISION_ID_LENGTH_MAX: usize = 64;
/// Provenance entries one Open record carries at most.
pub const DECISION_PROVENANCE_MAX: usize = 16;
/// Decisions a host holds not closed at once; a new open past it is refused (closed
/// decisions are kept as evidence).
pub const DECISIONS_OPEN_MAX: usize = 1_024;
