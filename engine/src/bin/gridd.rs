//! `gridd`: the host daemon. Runs one host from its installation directory (created
//! by `gridctl reconcile`) and serves its control API on `DIR/control.sock`. Given
//! several `--dir`, it runs each of those hosts in this one process — each whole (its
//! own store, keys, listener and control socket), sharing one async runtime: light
//! hosts packed together (a route's 1,024 recipients on one machine). A host that
//! cannot start stops them all.
//!
//! The only place besides `gridctl` that touches process state: it sets `umask 077`,
//! raises its open-file limit to the hard limit, reads `GRID_FAILPOINTS` (see
//! `grid_engine::store::failpoints`) and the benchmark's `GRID_BENCH_J1939_UNPACED`
//! (`grid_adapters::j1939::set_default_pace`), installs the log subscriber (`RUST_LOG`,
//! `--log-format`; see `docs/observability.md`) and logs its shutdown on SIGTERM or
//! SIGINT before ending as that signal would.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use grid_engine::limits::{HOSTS_PER_PROCESS_MAX, SHUTDOWN_LOG_WAIT_MS};
use grid_engine::root::{socket, start};
use grid_engine::store::Failpoints;

/// Packed hosts started at the same time (opening a fresh store is mostly fsyncs).
const STARTING_AT_ONCE: usize = 8;

/// Grid host daemon: runs one host (or several) from its installation directory.
#[derive(Parser, Debug)]
#[command(name = "gridd", version, about)]
struct Cli {
    /// The host's installation directory (0700), created by `gridctl reconcile`.
    /// Repeat to run several hosts in this process.
    #[arg(long, value_name = "DIR", required = true)]
    dir: Vec<PathBuf>,
    /// How log events are written to stderr: `text` (one line each) or `json` (one
    /// JSON object per line). `RUST_LOG` selects them (default `info`; a bare level
    /// applies to Grid's crates, others log from `warn` unless named).
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    log_format: LogFormat,
    /// Unlock a locked custody at start with the passphrase in FILE (e.g. a systemd
    /// credential, `$CREDENTIALS_DIRECTORY/grid-passphrase`; one trailing newline
    /// ignored); a wrong one refuses the start. Without it, a host whose keys are
    /// locked serves reads only until `gridctl custody unlock` (docs/custody.md).
    #[arg(long, value_name = "FILE")]
    custody_passphrase_file: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Installs the log subscriber, written to stderr: `RUST_LOG` (an `EnvFilter`, read by
/// `log_directives`) or else `info` for Grid's own crates.
fn init_logs(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let default = || EnvFilter::new(log_directives("info"));
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::builder()
            .parse(log_directives(&directives))
            .unwrap_or_else(|e| {
                say(&format_args!("gridd: RUST_LOG: {e}; logging at `info`"));
                default()
            }),
        _ => default(),
    };
    // An event that cannot be written (stderr a closed pipe) is dropped: never the
    // subscriber's own `eprintln!` of the failure, which panics the thread logging.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
}

/// Grid's own crates: a bare level in `RUST_LOG` (`debug`) applies to these.
const GRID_CRATES: [&str; 4] = ["gridd", "grid_engine", "grid_adapters", "grid_spec"];

/// `RUST_LOG` as the filter reads it: a bare level (`debug`) selects Grid's own crates
/// at that level, and every crate `RUST_LOG` does not name logs from `warn` — so
/// `RUST_LOG=debug` is Grid's debugging, not openraft's or hyper's internals, and
/// `RUST_LOG=debug,openraft=debug` asks for both.
fn log_directives(rust_log: &str) -> String {
    let mut directives = vec!["warn".to_owned()];
    for directive in rust_log.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if directive
            .parse::<tracing_subscriber::filter::LevelFilter>()
            .is_ok()
        {
            directives.extend(GRID_CRATES.iter().map(|c| format!("{c}={directive}")));
        } else {
            directives.push(directive.to_owned());
        }
    }
    directives.join(",")
}

/// One line on stderr; a failed write (a closed pipe) is ignored. Never `eprintln!`
/// here: it panics when stderr is a closed pipe.
fn say(line: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Why gridd cannot go on: one plain line on stderr in the text format (as before
/// logs existed), one JSON event in the json format.
fn fail(format: LogFormat, message: &dyn std::fmt::Display) {
    match format {
        LogFormat::Text => say(message),
        LogFormat::Json => tracing::error!(reason = %message, "gridd stopped"),
    }
}

/// Logs the shutdown when SIGTERM or SIGINT arrives, then ends the process as that
/// signal would have (its exit status unchanged for whoever started gridd). The log
/// line is written from a thread of its own and waited for at most
/// `SHUTDOWN_LOG_WAIT_MS`: a stderr nobody reads (a full pipe) never holds the
/// shutdown back.
fn log_shutdown() -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let name = if signal == SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                };
                let (logged, wait) = std::sync::mpsc::channel();
                let _ = std::thread::Builder::new()
                    .name("shutdown-log".to_owned())
                    .spawn(move || {
                        tracing::info!(signal = name, "shutdown");
                        let _ = logged.send(());
                    });
                let _ = wait.recv_timeout(std::time::Duration::from_millis(SHUTDOWN_LOG_WAIT_MS));
                let _ = signal_hook::low_level::emulate_default_handler(signal);
            }
        })?;
    Ok(())
}

/// Raises the soft limit of open files to the hard limit: packed hosts each hold a
/// store, a listener, a control socket and their peers' connections.
fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn main() -> ExitCode {
    // SAFETY: umask only sets this process's file-creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
    raise_open_files();
    let cli = Cli::parse();
    let format = cli.log_format;
    init_logs(format);
    if cli.dir.len() > HOSTS_PER_PROCESS_MAX {
        fail(
            format,
            &format!(
                "gridd: {} hosts given; one process runs at most HOSTS_PER_PROCESS_MAX ({HOSTS_PER_PROCESS_MAX})",
                cli.dir.len()
            ),
        );
        return ExitCode::FAILURE;
    }
    let failpoints = match std::env::var("GRID_FAILPOINTS") {
        Ok(spec) => match Failpoints::parse(&spec) {
            Ok(f) => f,
            Err(e) => {
                fail(format, &format!("gridd: GRID_FAILPOINTS: {e}"));
                return ExitCode::FAILURE;
            }
        },
        Err(_) => Failpoints::default(),
    };
    // Tests and journeys only: the retention windows read a clock shifted this far.
    let failpoints = match std::env::var("GRID_RETENTION_CLOCK_OFFSET_S") {
        Ok(text) => match text.trim().parse::<i64>() {
            Ok(seconds) => failpoints.with_retention_clock_offset(seconds),
            Err(e) => {
                fail(
                    format,
                    &format!("gridd: GRID_RETENTION_CLOCK_OFFSET_S `{text}`: {e}"),
                );
                return ExitCode::FAILURE;
            }
        },
        Err(_) => failpoints,
    };
    // Benchmarks only (benches retention): no checkpoint, purge or archive on the
    // host's own cadence. No topology can ask for this.
    let failpoints = match std::env::var_os("GRID_BENCH_CHECKPOINTS_OFF") {
        Some(_) => failpoints.with_checkpoints_off(),
        None => failpoints,
    };
    // Benchmarks only (benches j1939_replay): J1939 logs replay as fast as the host
    // journals them instead of at their recorded pace. No topology can ask for this.
    if std::env::var_os("GRID_BENCH_J1939_UNPACED").is_some() {
        grid_adapters::j1939::set_default_pace(grid_adapters::j1939::Pace::Unpaced);
    }
    if let Err(e) = log_shutdown() {
        fail(format, &format!("gridd: cannot watch for signals: {e}"));
        return ExitCode::FAILURE;
    }
    // Read once, for every locked host given (never logged).
    let passphrase = match &cli.custody_passphrase_file {
        Some(file) => match grid_engine::custody::read_passphrase_file(file) {
            Ok(text) => Some(text),
            Err(e) => {
                fail(format, &format!("gridd: --custody-passphrase-file: {e}"));
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let passphrase = passphrase.as_ref().map(|p| p.as_bytes());
    // One runtime for every host's transport, authorities and delivery.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gridd-async")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            fail(format, &format!("gridd: cannot start its runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    // Each host serves its control socket (on a thread of its own) as soon as it has
    // started; packed hosts start STARTING_AT_ONCE at a time; the last one serves here.
    let (last_dir, others) = cli.dir.split_last().expect("at least one --dir");
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..others.len().min(STARTING_AT_ONCE) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(dir) = others.get(index) else { return };
                    let s = match start(dir, &failpoints, &runtime, passphrase) {
                        Ok(s) => s,
                        Err(e) => {
                            fail(format, &e);
                            std::process::exit(1);
                        }
                    };
                    let spawned = std::thread::Builder::new()
                        .name("control".to_owned())
                        .spawn(move || {
                            if let Err(e) = socket::serve(s) {
                                fail(format, &format!("gridd: {e}"));
                                std::process::exit(1);
                            }
                        });
                    if let Err(e) = spawned {
                        fail(
                            format,
                            &format!("gridd: cannot start a control socket: {e}"),
                        );
                        std::process::exit(1);
                    }
                }
            });
        }
    });
    let last = match start(last_dir, &failpoints, &runtime, passphrase) {
        Ok(s) => s,
        Err(e) => {
            fail(format, &e);
            return ExitCode::FAILURE;
        }
    };
    match socket::serve(last) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            fail(format, &format!("gridd: {e}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::log_directives;

    #[test]
    fn a_bare_level_selects_grid_and_named_crates_keep_theirs() {
        assert_eq!(
            log_directives("debug"),
            "warn,gridd=debug,grid_engine=debug,grid_adapters=debug,grid_spec=debug"
        );
        assert_eq!(
            log_directives("info, openraft=debug"),
            "warn,gridd=info,grid_engine=info,grid_adapters=info,grid_spec=info,openraft=debug"
        );
        assert_eq!(
            log_directives("grid_engine::authority=trace"),
            "warn,grid_engine::authority=trace"
        );
    }
}

/// mimalloc instead of glibc's malloc: at 64 concurrent remote runs, allocation was 14 %
/// of gridd's CPU, and with it runs/s rose by a fifth (BENCHMARKS.md §4).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
