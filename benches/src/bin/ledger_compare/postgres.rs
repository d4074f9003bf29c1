//! PostgreSQL's side: a cluster of its own (`initdb` into a fresh directory, started on
//! a free loopback port with `fsync=on` and `synchronous_commit=on`, no Unix socket),
//! the schema of `benches/postgres/schema.sql`, and `pgbench` running
//! `benches/postgres/two_phase.sql` (one two-phase transfer per script: the pending
//! transaction, then the post transaction) from `--pg-clients` clients. PostgreSQL
//! refuses to run as root: when the benchmark is root, the server runs as the `postgres`
//! user in `$TMPDIR/glc-PID-pg` (owned by it), removed at the end unless `--keep`.
//!
//! The executables: `$POSTGRES_BIN_DIR`, else the newest `/usr/lib/postgresql/*/bin`
//! (Debian's `postgresql` package), else `pg_config --bindir`.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use grid_benches::bringup::HOST_READY_TIMEOUT;
use grid_benches::cli::Measurement;
use grid_benches::measure::{Call, Cpu, Failures, Record, Window};
use grid_benches::procs::{Procs, Result, free_ports, tail};

use crate::Args;
use crate::rows::{Cell, POSTGRES, Unit};

/// The database user the cluster is made with (trust authentication on loopback).
const USER: &str = "bench";
/// `shared_buffers` of the cluster: the whole working set fits.
const SHARED_BUFFERS: &str = "256MB";

fn sql_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("postgres")
}

/// The account the server runs as when the benchmark is root.
struct RunAs {
    uid: libc::uid_t,
    gid: libc::gid_t,
}

/// Everything PostgreSQL's side needs, found before anything starts.
pub struct Prerequisites {
    pub bin_dir: PathBuf,
    /// `postgres --version`.
    pub version: String,
    run_as: Option<RunAs>,
}

fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("POSTGRES_BIN_DIR") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("postgres").is_file())
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The `postgres` user's ids.
fn postgres_user() -> Option<RunAs> {
    let name = std::ffi::CString::new("postgres").ok()?;
    // SAFETY: getpwnam takes a NUL-terminated name; the record is read at once.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return None;
    }
    // SAFETY: a non-null record from getpwnam.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Some(RunAs { uid, gid })
}

impl Prerequisites {
    pub fn find() -> std::result::Result<Prerequisites, String> {
        let hint = "apt-get install -y postgresql (or set POSTGRES_BIN_DIR)";
        let bin_dir = bin_dir().ok_or_else(|| format!("no PostgreSQL server found: {hint}"))?;
        for tool in ["postgres", "initdb", "psql", "pgbench"] {
            if !bin_dir.join(tool).is_file() {
                return Err(format!("no {} : {hint}", bin_dir.join(tool).display()));
            }
        }
        let out = Command::new(bin_dir.join("postgres"))
            .arg("--version")
            .output()
            .map_err(|e| format!("{}/postgres --version: {e}", bin_dir.display()))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        // SAFETY: geteuid has no preconditions.
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user().ok_or(
                "the benchmark runs as root and PostgreSQL refuses root, but there is no \
                 `postgres` user (Debian's postgresql package makes it)",
            )?)
        } else {
            None
        };
        Ok(Prerequisites {
            bin_dir,
            version,
            run_as,
        })
    }

    /// `command` runs as the server's user (when the benchmark is root).
    fn as_server_user(&self, command: &mut Command) {
        if let Some(RunAs { uid, gid }) = self.run_as {
            // SAFETY: setgroups, setgid and setuid are async-signal-safe; nothing else
            // runs between fork and exec. It runs before `die_with_parent`'s prctl
            // (changing ids clears the parent-death signal).
            unsafe {
                command.pre_exec(move || {
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
    }
}

/// The running cluster.
pub struct Cluster {
    pub found: Prerequisites,
    pub port: u16,
    procs: Procs,
    /// Logs and pgbench's transaction logs.
    dir: PathBuf,
    /// The data directory's parent when it is outside the work directory (root).
    outside: Option<PathBuf>,
    keep: bool,
    /// Transactions pgbench processed (warm-ups included).
    processed: u64,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The server first (SIGKILL; its backends exit on the postmaster's death).
        self.procs = Procs::default();
        if let Some(outside) = &self.outside {
            if self.keep {
                eprintln!("kept {}", outside.display());
            } else {
                let _ = std::fs::remove_dir_all(outside);
            }
        }
    }
}

fn run_logged(mut command: Command, log: &Path, what: &str) -> Result<()> {
    let out = std::fs::File::create(log)?;
    let status = command
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .map_err(|e| format!("{what}: {e}"))?;
    if !status.success() {
        return Err(format!("{what} failed ({status}):\n{}", tail(log, 20)).into());
    }
    Ok(())
}

impl Cluster {
    pub fn start(found: Prerequisites, work: &Path, args: &Args) -> Result<Cluster> {
        let dir = work.join("postgres");
        std::fs::create_dir_all(&dir)?;
        let (outside, data_parent) = match &found.run_as {
            Some(RunAs { uid, gid }) => {
                use std::os::unix::fs::DirBuilderExt;
                let parent = PathBuf::from(format!("{}-pg", work.display()));
                std::fs::DirBuilder::new().mode(0o700).create(&parent)?;
                std::os::unix::fs::chown(&parent, Some(*uid), Some(*gid))?;
                (Some(parent.clone()), parent)
            }
            None => (None, dir.clone()),
        };
        let data = data_parent.join("data");
        let mut cluster = Cluster {
            port: free_ports(1)?[0],
            procs: Procs::default(),
            dir,
            outside,
            keep: args.measurement.keep,
            processed: 0,
            found,
        };
        let bin = |tool: &str| cluster.found.bin_dir.join(tool);
        let mut initdb = Command::new(bin("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-instructions",
            ])
            .current_dir(&data_parent);
        cluster.found.as_server_user(&mut initdb);
        run_logged(initdb, &cluster.dir.join("initdb.log"), "initdb")?;

        let mut server = Command::new(bin("postgres"));
        server.arg("-D").arg(&data).current_dir(&data_parent);
        for setting in [
            "listen_addresses=127.0.0.1".to_owned(),
            format!("port={}", cluster.port),
            "unix_socket_directories=".to_owned(),
            "fsync=on".to_owned(),
            "synchronous_commit=on".to_owned(),
            "full_page_writes=on".to_owned(),
            format!("max_connections={}", args.pg_clients + 10),
            format!("shared_buffers={SHARED_BUFFERS}"),
        ] {
            server.arg("-c").arg(setting);
        }
        cluster.found.as_server_user(&mut server);
        let log = cluster.dir.join("server.log");
        cluster.procs.spawn("postgres", server, &log)?;
        let started = Instant::now();
        loop {
            cluster.procs.check_running()?;
            let ready = cluster
                .psql()
                .args(["-c", "SELECT 1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?
                .success();
            if ready {
                break;
            }
            if started.elapsed() > HOST_READY_TIMEOUT {
                return Err(format!(
                    "PostgreSQL did not accept connections within {HOST_READY_TIMEOUT:?}:\n{}",
                    tail(&log, 20)
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut schema = cluster.psql();
        schema
            .args(["-v", "ON_ERROR_STOP=1", "-v"])
            .arg(format!("accounts={}", args.accounts))
            .arg("-f")
            .arg(sql_dir().join("schema.sql"));
        run_logged(
            schema,
            &cluster.dir.join("schema.log"),
            "psql -f schema.sql",
        )?;
        Ok(cluster)
    }

    fn psql(&self) -> Command {
        let mut command = Command::new(self.found.bin_dir.join("psql"));
        command
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
            .args(["-d", "postgres", "-q", "-X"]);
        command
    }

    /// `pgbench` for `seconds` with `base` as its id range; its transaction log under
    /// `log_prefix` when given.
    fn pgbench(&self, args: &Args, seconds: f64, base: u64, log_prefix: Option<&Path>) -> Command {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(args.pg_clients);
        let mut command = Command::new(self.found.bin_dir.join("pgbench"));
        command
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER])
            .args(["-n", "-M", "prepared"])
            .arg(format!("--client={}", args.pg_clients))
            .arg(format!("--jobs={threads}"))
            .arg(format!("--time={}", seconds.ceil().max(1.0) as u64))
            .arg("-D")
            .arg(format!("accounts={}", args.accounts))
            .arg("-D")
            .arg(format!("base={base}"))
            .args(["-D", "counter=0", "-f"])
            .arg(sql_dir().join("two_phase.sql"));
        if let Some(prefix) = log_prefix {
            command
                .arg("--log")
                .arg(format!("--log-prefix={}", prefix.display()));
        }
        command.arg("postgres");
        command
    }

    /// Runs pgbench; the transactions it processed, and what failed (its failed
    /// transactions, its aborted clients), counted into `failures`.
    fn run_pgbench(
        &mut self,
        mut command: Command,
        name: &str,
        recorded: bool,
        failures: &mut Failures,
    ) -> Result<u64> {
        let log = self.dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let status = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .map_err(|e| format!("pgbench: {e}"))?;
        // 0: every client ran to the end; 2: some failed or were aborted (counted below).
        if !matches!(status.code(), Some(0 | 2)) {
            return Err(format!("pgbench failed ({status}):\n{}", tail(&log, 20)).into());
        }
        let text = std::fs::read_to_string(&log)?;
        let field = |label: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(label))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
        };
        let processed = field("number of transactions actually processed: ")
            .ok_or_else(|| format!("pgbench printed no transaction count:\n{}", tail(&log, 20)))?;
        let failed = field("number of failed transactions: ").unwrap_or(0);
        if failed > 0 {
            for _ in 0..failed {
                failures.note(recorded, "failed transaction (pgbench)");
            }
        }
        for line in text.lines().filter(|l| l.contains("aborted")) {
            failures.note(recorded, line.trim());
        }
        self.processed += processed;
        Ok(processed)
    }

    /// The warm-up (its own pgbench run, not recorded), then the measured run.
    pub fn measure(&mut self, m: &Measurement, args: &Args) -> Result<Cell> {
        let mut failures = Failures::default();
        if m.warmup > 0.0 {
            let warmup = self.pgbench(args, m.warmup, 1_000_000_000_000_000, None);
            self.run_pgbench(warmup, "pgbench-warmup", false, &mut failures)?;
        }
        let prefix = self.dir.join("pgbench_log");
        let command = self.pgbench(args, m.seconds, 2_000_000_000_000_000, Some(&prefix));
        let postmaster = self.procs.pids()[0];
        let server_start = tree_cpu(postmaster);
        let client_start = children_cpu();
        self.run_pgbench(command, "pgbench", true, &mut failures)?;
        let cpu = Cpu {
            server: tree_cpu(postmaster).saturating_sub(server_start),
            client: children_cpu().saturating_sub(client_start),
        };
        self.procs.check_running()?;
        let (records, failed) = transaction_log(&self.dir, args.pg_clients)?;
        let from_ns = records
            .iter()
            .flat_map(|r| r.calls.iter().map(|c| c.start_ns))
            .min()
            .ok_or("pgbench logged no transaction")?;
        let now = Instant::now();
        let window = Window {
            measure_from: now,
            end: now,
            from_ns,
            end_ns: from_ns + (m.seconds * 1e9) as u64,
        };
        let mut cell = Cell::new(POSTGRES, args.pg_clients, false, &window, records, cpu);
        // pgbench's own count covers the transaction log's `failed` lines.
        if failed > 0 && failures.recorded == 0 {
            failures.recorded += failed;
            failures.reasons_n("failed (pgbench transaction log)", failed);
        }
        cell.failures.merge(failures);
        Ok(cell)
    }

    /// The database's balances against its transfers and pgbench's counts.
    pub fn check(&self) -> Result<String> {
        let out = self
            .psql()
            .args(["-A", "-t", "-F", " ", "-c"])
            .arg(
                "SELECT sum(debits_posted), sum(credits_posted), sum(debits_pending), \
                 sum(credits_pending), \
                 (SELECT count(*) FROM transfers WHERE state = 'posted'), \
                 (SELECT coalesce(sum(amount), 0) FROM transfers WHERE state = 'posted'), \
                 (SELECT count(*) FROM transfers WHERE state = 'pending') FROM accounts",
            )
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<u128> = text
            .split_whitespace()
            .map(|n| n.parse())
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| format!("the check query answered {text:?}: {e}"))?;
        let [
            debits_posted,
            credits_posted,
            debits_pending,
            credits_pending,
            posted,
            amount,
            open,
        ] = v[..]
        else {
            return Err(format!("the check query answered {text:?}").into());
        };
        let ok = debits_posted == amount
            && credits_posted == amount
            && debits_pending == 0
            && credits_pending == 0
            && open == 0
            && posted == u128::from(self.processed);
        Ok(format!(
            "{POSTGRES}: {posted} transfers posted (pgbench processed {}); debits posted \
             {debits_posted}, credits posted {credits_posted}, their posted amounts {amount}; \
             pending {debits_pending} / {credits_pending}, {open} transfers still pending: {}",
            self.processed,
            if ok { "consistent" } else { "MISMATCH" }
        ))
    }
}

/// pgbench's per-transaction log (`client_id transaction_no time script_no time_epoch
/// time_us …`, `time` the latency in µs or `failed`/`skipped`), one file per thread:
/// one record per client, times in ns on the log's clock; and the failed transactions.
fn transaction_log(dir: &Path, clients: usize) -> Result<(Vec<Record<Unit>>, u64)> {
    let mut records: Vec<Record<Unit>> = (0..clients).map(|_| Record::default()).collect();
    let mut failed = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let is_log = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pgbench_log."));
        if !is_log {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let bad = || format!("{}: a line {line:?}", path.display());
            let client: usize = f.first().and_then(|c| c.parse().ok()).ok_or_else(bad)?;
            let latency_us: u64 = match f.get(2) {
                Some(&"failed") | Some(&"skipped") => {
                    failed += 1;
                    continue;
                }
                Some(t) => t.parse().map_err(|_| bad())?,
                None => return Err(bad().into()),
            };
            let epoch: u64 = f.get(4).and_then(|t| t.parse().ok()).ok_or_else(bad)?;
            let us: u64 = f.get(5).and_then(|t| t.parse().ok()).ok_or_else(bad)?;
            let end_ns = (epoch * 1_000_000 + us) * 1_000;
            records.get_mut(client).ok_or_else(bad)?.calls.push(Call {
                start_ns: end_ns - latency_us * 1_000,
                end_ns,
                value: Unit {
                    batch_ns: Vec::new(),
                    posted: 1,
                    posted_amount: 0,
                    refused: Vec::new(),
                },
            });
        }
    }
    Ok((records, failed))
}

/// Clock ticks in a `/proc/PID/stat` line: fields after the command's `)`.
fn stat_fields(pid: &str) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

fn ticks_to_duration(ticks: u64) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// The CPU of the postmaster, of its running children (backends, writers), and of
/// the children it has reaped (`cutime`, `cstime`): backends that exited count too.
fn tree_cpu(postmaster: u32) -> Duration {
    // After ')': state 0, ppid 1, …, utime 11, stime 12, cutime 13, cstime 14.
    let mut ticks = stat_fields(&postmaster.to_string())
        .map_or(0, |f| f.get(11..15).map_or(0, |t| t.iter().sum()));
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Some(f) = stat_fields(&name)
            && f.get(1) == Some(&u64::from(postmaster))
        {
            ticks += f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0);
        }
    }
    ticks_to_duration(ticks)
}

/// User + system CPU of this process's reaped children (pgbench, once it exited).
fn children_cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let of = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    of(usage.ru_utime) + of(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transaction_log_gives_starts_ends_and_failures() {
        let dir = std::env::temp_dir().join(format!("glc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("pgbench_log.1"),
            "0 0 1500 0 1700000000 500000\n1 0 failed 0 1700000000 600000\n",
        )
        .unwrap();
        std::fs::write(dir.join("pgbench_log.1.1"), "1 1 2000 0 1700000001 0\n").unwrap();
        std::fs::write(dir.join("pgbench-warmup.log"), "not a transaction log\n").unwrap();
        let (records, failed) = transaction_log(&dir, 2).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(failed, 1);
        let end = 1_700_000_000_500_000u64 * 1_000;
        assert_eq!(records[0].calls.len(), 1);
        assert_eq!(records[0].calls[0].end_ns, end);
        assert_eq!(records[0].calls[0].start_ns, end - 1_500_000);
        assert_eq!(records[1].calls.len(), 1);
        assert_eq!(
            records[1].calls[0].end_ns - records[1].calls[0].start_ns,
            2_000_000
        );
    }
}
