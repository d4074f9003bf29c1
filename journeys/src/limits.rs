//! The harness's own bounds: how much one step may ask for. Every `*_MAX` of the crate
//! lives here, its name ending in its unit and then `MAX`; a relation between two bounds
//! (or a bound and a timeout) is a `const _: () = assert!(…)` below, with its reason.
//!
//! These bound what a journey file may write (a step asking for more is a parse error
//! naming the limit); they are not Grid's limits, which live in `spec/src/limits.rs`.
//! Names that a parse error quotes (`PROCESS_CYCLES_MAX`, …) are kept as journeys'
//! authors read them.

use std::time::Duration;

/// How long one quiet `gridctl` command may take (a claim's write timeout and forward,
/// a process run, a publish).
pub const QUIET_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a gridd unlocked by the `unlock` step may take to start its rooms and
/// serve its whole control socket again.
pub const UNLOCK_WAIT: Duration = Duration::from_secs(30);

/// The shortest text `expect-sealed=#true without=` takes: a shorter one turns up in a
/// kilobyte of ciphertext by chance often enough to fail a run now and then (two bytes:
/// about one run in sixty).
pub const SEALED_WITHOUT_BYTES_MIN: usize = 6;

/// The most cycles one `process-cycles` step runs.
pub const PROCESS_CYCLES_MAX: u64 = 1_000;
/// The longest `delay_ms` a `process-cycles` cycle gives `demo.count`.
pub const CYCLE_DELAY_MS_MAX: u64 = 250;
/// How long a `process-cycles` mailbox run waits for its outcome (`--wait-ms`): a run
/// whose receiver died stays unknown, and asking it again must not cost the default wait.
pub const CYCLE_MAILBOX_WAIT_MS: u64 = 3_000;
/// The most cycles one `publish-cycles` step runs.
pub const PUBLISH_CYCLES_MAX: u64 = 1_000;
/// The most values one `publish-many` stream publishes.
pub const PUBLISH_MANY_MAX: u64 = 5_000;
/// The most commands one `claim-stream` sends, over all its callers.
pub const STREAM_OPS_MAX: u64 = 2_000;
/// The most hosts one `start-packed` step starts (their names carry 4 digits).
pub const PACKED_HOSTS_MAX: u64 = 9_999;
/// The most processes one `start-packed` step starts.
pub const PACKED_PROCESSES_MAX: u64 = 64;
/// The longest `within=S` of `expect-values` and `expect-tag-journal`, in seconds.
pub const WITHIN_SECONDS_MAX: u64 = 60;
/// The largest tmpfs one `small-disk` step mounts, in MiB.
pub const SMALL_DISK_MIB_MAX: u64 = 1_024;
/// The most trials one `damage` step runs (each starts a gridd).
pub const DAMAGE_TRIALS_MAX: u64 = 200;
/// Linux's limit on network interface names (IFNAMSIZ - 1), in bytes.
pub const INTERFACE_NAME_BYTES_MAX: usize = 15;

// Every packed process hosts at least one host: the most processes can all be filled.
const _: () = assert!(PACKED_PROCESSES_MAX <= PACKED_HOSTS_MAX);

// A cycle's mailbox run asks gridctl to wait CYCLE_MAILBOX_WAIT_MS for its outcome; the
// quiet command must outlive that wait, or every travelling run would be killed by the
// harness and read as "no answer" instead of `unknown`.
const _: () = assert!((CYCLE_MAILBOX_WAIT_MS as u128) < QUIET_COMMAND_TIMEOUT.as_millis());

// A delayed run (plus the seeded kill moment, up to 100 ms after its delay) ends long
// before its quiet command's bound: the cycles kill hosts, not commands.
const _: () = assert!(((CYCLE_DELAY_MS_MAX + 100) as u128) < QUIET_COMMAND_TIMEOUT.as_millis());
