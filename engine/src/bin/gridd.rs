//! `gridd`: the host daemon. Runs one host from its installation directory (created
//! by `gridctl reconcile`) and serves its control API on `DIR/control.sock`. Given
//! several `--dir`, it runs each of those hosts in this one process — each whole (its
//! own store, keys, listener and control socket), sharing one async runtime: light
//! hosts packed together (a route's 1,024 recipients on one machine). A host that
//! cannot start stops them all.
//!
//! The only place besides `gridctl` that touches process state: it sets `umask 077`,
//! raises its open-file limit to the hard limit, and reads `GRID_FAILPOINTS` (see
//! `grid_engine::host::failpoints`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::Parser;
use grid_engine::authority::service::{Authorities, Authority};
use grid_engine::host::{Host, control, failpoints::Failpoints};

/// The most hosts one gridd process runs.
const HOSTS_PER_PROCESS_MAX: usize = 1_024;
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
}

/// A host ready to serve its control socket.
struct Started {
    host: Arc<Mutex<Host>>,
    authorities: Authorities,
}

fn start(
    dir: &Path,
    failpoints: &Failpoints,
    runtime: &tokio::runtime::Runtime,
) -> Result<Started, String> {
    let refuse = |e: &dyn std::fmt::Display| {
        format!("gridd: cannot start the host in {}: {e}", dir.display())
    };
    let mut host = Host::open(dir, failpoints.clone()).map_err(|e| refuse(&e))?;
    // The transport binds its listen address before anything is served, so a taken
    // address or missing credentials refuse the start.
    let transport = if host.config().selects(grid_spec::Profile::Transport) {
        let config = grid_engine::transport::server_config(dir).map_err(|e| refuse(&e))?;
        let listener =
            grid_engine::transport::bind(&host.config().listen).map_err(|e| refuse(&e))?;
        Some((listener, config))
    } else {
        None
    };
    let wire = if host.config().selects(grid_spec::Profile::WireObservation) {
        if transport.is_none() {
            return Err(refuse(
                &"profile `wire-observation` counts TLS bytes and needs the `transport` profile",
            ));
        }
        let counters = Arc::new(grid_engine::transport::WireCounters::default());
        host.observe_wire(counters.clone());
        Some(counters)
    } else {
        None
    };
    let mut authorities = Authorities::default();
    if host.config().selects(grid_spec::Profile::Authority) {
        if transport.is_none() {
            return Err(refuse(
                &"profile `authority` speaks Raft over the `transport` profile, which is not selected",
            ));
        }
        for membership in grid_engine::custody::membership::enrolled_memberships(dir) {
            let participant =
                match grid_engine::custody::membership::read_enrollment(dir, &membership) {
                    Ok(Some(enrollment)) => enrollment.participant,
                    _ => continue,
                };
            let authority = Authority::start(
                dir,
                &membership,
                &participant,
                &host.config().listen,
                runtime.handle().clone(),
                failpoints,
            )
            .map_err(|e| refuse(&e))?;
            eprintln!(
                "gridd: authority of `{membership}`: voter `{participant}` (node {})",
                authority.id
            );
            authorities.by_membership.insert(membership, authority);
        }
    }
    let delivery = host.delivery();
    if let Some(delivery) = &delivery {
        if transport.is_none() {
            return Err(refuse(
                &"profile `delivery` pushes values over the `transport` profile, which is not selected",
            ));
        }
        delivery.start(runtime.handle().clone(), authorities.clone());
    }
    let processes = host.processes();
    if processes.is_some() && transport.is_none() {
        return Err(refuse(
            &"profile `processes` serves and calls Processes over the `transport` profile, which is not selected",
        ));
    }
    let host = Arc::new(Mutex::new(host));
    if let Some(processes) = &processes {
        processes.start(runtime.handle().clone(), Arc::downgrade(&host));
    }
    // Models fed from routes take what this host's inboxes stored (also what was
    // stored before a restart and not fed yet).
    if let Some(delivery) = delivery.clone() {
        let host = host.clone();
        std::thread::Builder::new()
            .name("route-feeder".to_owned())
            .spawn(move || {
                let mut seen = 0;
                loop {
                    host.lock().unwrap_or_else(|p| p.into_inner()).feed_routes();
                    seen = delivery.wait_stored(seen, std::time::Duration::from_secs(1));
                }
            })
            .map_err(|e| refuse(&format!("cannot start the route feeder: {e}")))?;
    }
    // Simulated tags: each due observation journaled and fed to its models in one
    // synced write (the host's `sample_tags`), also after a restart.
    if host
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .config()
        .selects(grid_spec::Profile::Sources)
    {
        let host = host.clone();
        std::thread::Builder::new()
            .name("tag-sampler".to_owned())
            .spawn(move || {
                loop {
                    let wait = host.lock().unwrap_or_else(|p| p.into_inner()).sample_tags();
                    std::thread::sleep(wait.max(std::time::Duration::from_millis(1)));
                }
            })
            .map_err(|e| refuse(&format!("cannot start the tag sampler: {e}")))?;
    }
    if let Some((listener, config)) = transport {
        let address = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        grid_engine::transport::serve(
            listener,
            config,
            dir.to_owned(),
            grid_engine::transport::Served {
                host: host.clone(),
                wire,
                authorities: authorities.clone(),
                delivery,
                processes,
            },
            runtime.handle(),
        )
        .map_err(|e| refuse(&format!("cannot start the transport: {e}")))?;
        eprintln!("gridd: transport (mutual TLS 1.3) on {address}");
    }
    Ok(Started { host, authorities })
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
    if cli.dir.len() > HOSTS_PER_PROCESS_MAX {
        eprintln!(
            "gridd: {} hosts given; one process runs at most HOSTS_PER_PROCESS_MAX ({HOSTS_PER_PROCESS_MAX})",
            cli.dir.len()
        );
        return ExitCode::FAILURE;
    }
    let failpoints = match std::env::var("GRID_FAILPOINTS") {
        Ok(spec) => match Failpoints::parse(&spec) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("gridd: GRID_FAILPOINTS: {e}");
                return ExitCode::FAILURE;
            }
        },
        Err(_) => Failpoints::default(),
    };
    // One runtime for every host's transport, authorities and delivery.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gridd-async")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("gridd: cannot start its runtime: {e}");
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
                    let s = match start(dir, &failpoints, &runtime) {
                        Ok(s) => s,
                        Err(e) => {
                            eprintln!("{e}");
                            std::process::exit(1);
                        }
                    };
                    let spawned = std::thread::Builder::new()
                        .name("control".to_owned())
                        .spawn(move || {
                            if let Err(e) = control::serve(s.host, s.authorities) {
                                eprintln!("gridd: {e}");
                                std::process::exit(1);
                            }
                        });
                    if let Err(e) = spawned {
                        eprintln!("gridd: cannot start a control socket: {e}");
                        std::process::exit(1);
                    }
                }
            });
        }
    });
    let last = match start(last_dir, &failpoints, &runtime) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match control::serve(last.host, last.authorities) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gridd: {e}");
            ExitCode::FAILURE
        }
    }
}
