//! `gridd`: the host daemon. Runs one host from its installation directory (created
//! by `gridctl reconcile`) and serves its control API on `DIR/control.sock`.
//!
//! The only place besides `gridctl` that touches process state: it sets `umask 077`
//! and reads `GRID_FAILPOINTS` (see `grid_engine::host::failpoints`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use grid_engine::authority::service::{Authorities, Authority};
use grid_engine::host::{Host, control, failpoints::Failpoints};

/// Grid host daemon: runs one host from its installation directory.
#[derive(Parser, Debug)]
#[command(name = "gridd", version, about)]
struct Cli {
    /// The host's installation directory (0700), created by `gridctl reconcile`.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

fn main() -> ExitCode {
    // SAFETY: umask only sets this process's file-creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
    let cli = Cli::parse();
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
    let host = match Host::open(&cli.dir, failpoints.clone()) {
        Ok(host) => host,
        Err(e) => {
            eprintln!("gridd: cannot start the host in {}: {e}", cli.dir.display());
            return ExitCode::FAILURE;
        }
    };
    // The transport binds its listen address before anything is served, so a taken
    // address or missing credentials refuse the start.
    let transport = if host.config().selects(grid_spec::Profile::Transport) {
        match grid_engine::transport::server_config(&cli.dir).and_then(|config| {
            grid_engine::transport::bind(&host.config().listen).map(|listener| (listener, config))
        }) {
            Ok(ready) => Some(ready),
            Err(e) => {
                eprintln!("gridd: cannot start the host in {}: {e}", cli.dir.display());
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let mut host = host;
    let wire = if host.config().selects(grid_spec::Profile::WireObservation) {
        if transport.is_none() {
            eprintln!(
                "gridd: cannot start the host in {}: profile `wire-observation` counts TLS bytes and needs the `transport` profile",
                cli.dir.display()
            );
            return ExitCode::FAILURE;
        }
        let counters = std::sync::Arc::new(grid_engine::transport::WireCounters::default());
        host.observe_wire(counters.clone());
        Some(counters)
    } else {
        None
    };
    // One runtime for the transport and the authorities.
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
    let mut authorities = Authorities::default();
    if host.config().selects(grid_spec::Profile::Authority) {
        if transport.is_none() {
            eprintln!(
                "gridd: cannot start the host in {}: profile `authority` speaks Raft over the `transport` profile, which is not selected",
                cli.dir.display()
            );
            return ExitCode::FAILURE;
        }
        for membership in grid_engine::custody::membership::enrolled_memberships(&cli.dir) {
            let participant =
                match grid_engine::custody::membership::read_enrollment(&cli.dir, &membership) {
                    Ok(Some(enrollment)) => enrollment.participant,
                    _ => continue,
                };
            match Authority::start(
                &cli.dir,
                &membership,
                &participant,
                &host.config().listen,
                runtime.handle().clone(),
                &failpoints,
            ) {
                Ok(authority) => {
                    eprintln!(
                        "gridd: authority of `{membership}`: voter `{participant}` (node {})",
                        authority.id
                    );
                    authorities.by_membership.insert(membership, authority);
                }
                Err(e) => {
                    eprintln!("gridd: cannot start the host in {}: {e}", cli.dir.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let delivery = host.delivery();
    if let Some(delivery) = &delivery {
        if transport.is_none() {
            eprintln!(
                "gridd: cannot start the host in {}: profile `delivery` pushes values over the `transport` profile, which is not selected",
                cli.dir.display()
            );
            return ExitCode::FAILURE;
        }
        delivery.start(runtime.handle().clone(), authorities.clone());
    }
    let host = std::sync::Arc::new(std::sync::Mutex::new(host));
    if let Some((listener, config)) = transport {
        let address = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        if let Err(e) = grid_engine::transport::serve(
            listener,
            config,
            cli.dir.clone(),
            grid_engine::transport::Served {
                host: host.clone(),
                wire,
                authorities: authorities.clone(),
                delivery,
            },
            runtime.handle(),
        ) {
            eprintln!("gridd: cannot start the transport: {e}");
            return ExitCode::FAILURE;
        }
        eprintln!("gridd: transport (mutual TLS 1.3) on {address}");
    }
    match control::serve(host, authorities) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gridd: {e}");
            ExitCode::FAILURE
        }
    }
}
