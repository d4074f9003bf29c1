//! The composition root: opens a host from its installation, builds the profiles it
//! selects (refusing one it cannot run, never falling back), registers every
//! capability's transport endpoint and starts their background work. Capabilities
//! never import this module; `gridd` is argument parsing and a call to [`start`].

mod control;
mod control_plane;
mod inspection;
mod ledger_transfer;
mod locked;
pub mod metrics;
mod model_eval;
mod model_input;
pub mod socket;
mod store_claim;
mod tag_read;
mod wallet_owners;

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::authority::endpoint::AuthorityEndpoint;
use crate::authority::service::{Authorities, Authority};
use crate::delivery::endpoint::DeliveryEndpoint;
use crate::host::Host;
use crate::missions::endpoint::MissionsEndpoint;
use crate::processes::endpoint::ProcessesEndpoint;
use crate::store::Failpoints;
use control::ControlEndpoint;
use model_eval::ModelEval;
use tag_read::TagRead;

/// A host ready to serve its control socket.
#[derive(Clone)]
pub struct Started {
    pub host: Arc<Mutex<Host>>,
    pub authorities: Authorities,
    /// The rooms that answer their control calls outside the host's lock.
    pub delivery: Option<Arc<crate::delivery::service::Delivery>>,
    pub processes: Option<Arc<crate::processes::service::Processes>>,
    /// The `ledger` profile: its batches answer outside the host's lock. Other rooms
    /// reach a ledger through this handle, handed out by the root.
    pub ledgers: Option<crate::ledger::service::Ledgers>,
    /// The `archive-wallet` profile: its journal, archives and foreign archives.
    pub wallet: Option<Arc<crate::wallet::service::Wallet>>,
    /// The `missions` profile: the missions this host holds and those it issued.
    pub missions: Option<Arc<crate::missions::service::Missions>>,
    /// The `exports` profile: disclosures signed here, exports run here.
    pub exports: Option<Arc<crate::exports::service::Exports>>,
    /// The `decisions` profile: the decisions kept here, the ballots and gates cast here.
    pub decisions: Option<Arc<crate::decisions::service::Decisions>>,
}

/// `passphrase`: what unlocks a locked custody at once (gridd's
/// `--custody-passphrase-file`); without it such a host serves reads only until
/// `gridctl custody unlock`.
pub fn start(
    dir: &Path,
    failpoints: &Failpoints,
    runtime: &tokio::runtime::Runtime,
    passphrase: Option<&[u8]>,
) -> Result<Started, String> {
    let refuse = |e: &dyn std::fmt::Display| {
        format!("gridd: cannot start the host in {}: {e}", dir.display())
    };
    let mut host = Host::open(dir, failpoints.clone()).map_err(|e| refuse(&e))?;
    // A locked custody: reads only, until the passphrase unlocks every key.
    if host.custody_locked() {
        match passphrase {
            // A wrong passphrase refuses the start: never a host waiting unnoticed.
            Some(passphrase) => {
                for line in host.custody().unlock(passphrase).map_err(|e| refuse(&e))? {
                    tracing::warn!(host = host.name(), "{line}");
                }
                tracing::info!(host = host.name(), "custody unlocked at start");
            }
            None => {
                // The page shows what it kept, verified with public keys, asking nobody.
                let page = control_plane::serve_locked(&host, dir, runtime.handle())
                    .map_err(|e| refuse(&e))?;
                locked::serve_until_unlocked(&mut host).map_err(|e| refuse(&e))?;
                // Stopped (its listeners closed) before the whole page binds them.
                runtime.block_on(async {
                    for accepting in page {
                        accepting.abort();
                        let _ = accepting.await;
                    }
                });
            }
        }
    }
    // A transferred installation's checked arrival is signed, once, by its own key.
    if let Some(said) = host.sign_arrival().map_err(|e| refuse(&e))? {
        tracing::info!(host = host.name(), "{said}");
    }
    // A store fenced at an authority confirms its claim before anything is served.
    if let Some(said) =
        store_claim::confirm(&mut host, runtime, failpoints).map_err(|e| refuse(&e))?
    {
        tracing::info!(host = host.name(), "{said}");
    }
    // Checked before anything is served; bound once the rooms have started.
    let metrics_address = host.config().metrics.clone();
    if let Some(declared) = &metrics_address {
        metrics::address(declared).map_err(|e| refuse(&e))?;
    }
    // The control plane's addresses with their TLS, read once (served at the end).
    let control_listen = control_plane::addresses(dir, host.config()).map_err(|e| refuse(&e))?;
    // The transport binds its listen address before anything is served, so a taken
    // address or missing credentials refuse the start.
    let transport = if host.config().selects(grid_spec::Profile::Transport) {
        let config = crate::transport::server_config(dir).map_err(|e| refuse(&e))?;
        let listener = crate::transport::bind(&host.config().listen).map_err(|e| refuse(&e))?;
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
        let counters = Arc::new(crate::transport::WireCounters::default());
        host.observe_wire(counters.clone());
        crate::transport::wire::register(dir, counters.clone());
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
        for membership in crate::custody::membership::enrolled_memberships(dir) {
            let participant = match crate::custody::membership::read_enrollment(dir, &membership) {
                Ok(Some(enrollment)) => enrollment.participant,
                _ => continue,
            };
            let authority = Authority::start(
                dir,
                &membership,
                &participant,
                &host.config().listen,
                host.config().snapshots.get(&membership),
                runtime.handle().clone(),
                failpoints,
            )
            .map_err(|e| refuse(&e))?;
            tracing::info!(
                host = host.config().name,
                membership,
                participant,
                node = authority.id,
                "authority voter started"
            );
            watch_role(&authority, runtime.handle());
            authorities.by_membership.insert(membership, authority);
        }
    }
    let delivery = if host.config().selects(grid_spec::Profile::Delivery) {
        Some(host.open_delivery().map_err(|e| refuse(&e))?)
    } else {
        None
    };
    if let Some(delivery) = &delivery {
        if transport.is_none() {
            return Err(refuse(
                &"profile `delivery` pushes values over the `transport` profile, which is not selected",
            ));
        }
        delivery.start(runtime.handle().clone(), authorities.clone());
    }
    let exports = if host.config().selects(grid_spec::Profile::Exports) {
        Some(host.open_exports().map_err(|e| refuse(&e))?)
    } else {
        None
    };
    let processes = if host.config().selects(grid_spec::Profile::Processes) {
        Some(host.open_processes().map_err(|e| refuse(&e))?)
    } else {
        None
    };
    if processes.is_some() && transport.is_none() {
        return Err(refuse(
            &"profile `processes` serves and calls Processes over the `transport` profile, which is not selected",
        ));
    }
    let ledgers = if host.config().selects(grid_spec::Profile::Ledger) {
        let ledgers = host.open_ledgers().map_err(|e| refuse(&e))?;
        ledgers.start(runtime.handle().clone());
        Some(ledgers)
    } else {
        None
    };
    // Industrial tags: adapters report into a bounded queue; the `tag-ingest` thread
    // journals what is queued together in one synced write (group commit) and projects it.
    let ingest = if host.config().selects(grid_spec::Profile::Sources) {
        let (sink, events) = tokio::sync::mpsc::channel(crate::limits::INGEST_QUEUE_MAX);
        let mut credentials = grid_adapters::Credentials::default();
        for membership in crate::custody::membership::enrolled_memberships(dir) {
            match crate::transport::client_tls(dir, &membership) {
                Ok(config) => {
                    credentials.memberships.insert(membership, Arc::new(config));
                }
                Err(e) => tracing::warn!(
                    membership,
                    "no TLS credentials for brokers of this membership: {e}"
                ),
            }
        }
        let name = host.name().to_owned();
        // The OPC UA application certificate: made on the profile's first start, then
        // refused when missing, weaker than 0600 or replaced (custody/opcua.rs).
        credentials.opcua =
            Some(crate::custody::opcua::ensure(dir, &name).map_err(|e| refuse(&e))?);
        host.attach_adapters(grid_adapters::Adapters::new(
            runtime.handle().clone(),
            sink,
            &name,
            credentials,
        ));
        Some(events)
    } else {
        None
    };
    let archive_wallet = host
        .config()
        .selects(grid_spec::Profile::ArchiveWallet)
        .then(|| host.name().to_owned());
    if archive_wallet.is_some() && processes.is_none() {
        return Err(refuse(
            &"profile `archive-wallet` serves its wallet's Processes and needs the `processes` profile, which is not selected",
        ));
    }
    let missions = if host.config().selects(grid_spec::Profile::Missions) {
        let Some(processes) = &processes else {
            return Err(refuse(
                &"profile `missions` consumes its allocation through the `processes` profile, which is not selected",
            ));
        };
        if authorities.by_membership.is_empty() {
            return Err(refuse(
                &"profile `missions` reserves through the authority and needs the `authority` profile in an enrolled membership",
            ));
        }
        Some(
            host.open_missions(
                processes.clone(),
                authorities.clone(),
                runtime.handle().clone(),
            )
            .map_err(|e| refuse(&e))?,
        )
    } else {
        None
    };
    let decisions = if host.config().selects(grid_spec::Profile::Decisions) {
        let Some(processes) = &processes else {
            return Err(refuse(
                &"profile `decisions` sends ballots, gates and its effect as Processes and needs the `processes` profile, which is not selected",
            ));
        };
        Some(
            host.open_decisions(processes.clone())
                .map_err(|e| refuse(&e))?,
        )
    } else {
        None
    };
    let mut wallet = None;
    let host_custody = host.custody().clone();
    let host = Arc::new(Mutex::new(host));
    if let (Some(missions), Some(delivery)) = (&missions, &delivery) {
        // The publishing rights of the routes this host publishes: a departure
        // enrols the successor on them, never-issued recovery hands them over.
        let delivery = Arc::downgrade(delivery);
        let name = host
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .name()
            .to_owned();
        missions.on_owned_claims(Box::new(move || {
            delivery.upgrade().map_or_else(Vec::new, |d| {
                d.installed()
                    .into_iter()
                    .filter(|r| r.publisher == name)
                    .map(|r| {
                        let claim = crate::delivery::api::publishing_claim(&r.name);
                        (r.membership, claim)
                    })
                    .collect()
            })
        }));
    }
    if let Some(missions) = &missions {
        // Quiesced before anything is served, also after a restart.
        let weak = Arc::downgrade(&host);
        missions.on_quiesce(Box::new(move |reason| {
            if let Some(host) = weak.upgrade() {
                host.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .quiesce(reason);
            }
        }));
    }
    if let Some(mut events) = ingest {
        let host = host.clone();
        std::thread::Builder::new()
            .name("tag-ingest".to_owned())
            .spawn(move || {
                while let Some(first) = events.blocking_recv() {
                    let mut batch = vec![first];
                    while batch.len() < crate::limits::INGEST_BATCH_MAX {
                        match events.try_recv() {
                            Ok(event) => batch.push(event),
                            Err(_) => break,
                        }
                    }
                    host.lock().unwrap_or_else(|p| p.into_inner()).ingest(batch);
                }
            })
            .map_err(|e| refuse(&format!("cannot start the tag ingest: {e}")))?;
    }
    if let Some(processes) = &processes {
        processes.serve(
            "model.eval",
            Arc::new(ModelEval {
                host: Arc::downgrade(&host),
            }),
        );
        if let Some(decisions) = &decisions {
            // Opt-in: a host sets a model input for a caller only when it selects
            // `decisions` (a decision's effect owner).
            processes.serve(
                crate::decisions::api::INPUT_PROCESS,
                Arc::new(model_input::ModelInput {
                    host: Arc::downgrade(&host),
                }),
            );
            for process in [
                crate::decisions::api::BALLOT_PROCESS,
                crate::decisions::api::GATE_PROCESS,
            ] {
                processes.serve(
                    process,
                    Arc::new(crate::decisions::process::CastProcess {
                        decisions: decisions.clone(),
                        process,
                    }),
                );
            }
        }
        processes.serve(
            "tag.read",
            Arc::new(TagRead {
                host: Arc::downgrade(&host),
            }),
        );
        if let Some(ledgers) = &ledgers {
            processes.serve(
                "ledger.transfer",
                Arc::new(ledger_transfer::LedgerTransfer {
                    ledgers: ledgers.clone(),
                    failpoints: Mutex::new(failpoints.clone()),
                }),
            );
        }
        // The archive wallet's five Processes (interface `wallet@1.1.0`).
        if let Some(name) = &archive_wallet {
            // The host's own custody: unlocked, and sharing every rotation.
            let custody = host_custody.clone();
            let opened = crate::wallet::service::Wallet::open(
                dir,
                name,
                custody,
                processes.clone(),
                ledgers.clone(),
                Box::new(wallet_owners::PeerOwners {
                    processes: processes.clone(),
                    runtime: runtime.handle().clone(),
                }),
            )
            .map_err(|e| refuse(&e))?;
            for op in crate::wallet::ops::Op::ALL {
                processes.serve(
                    op.process(),
                    Arc::new(crate::wallet::ops::WalletProcess {
                        wallet: opened.clone(),
                        op,
                    }),
                );
            }
            wallet = Some(opened);
        }
        // Runs left unknown whose Process proves their outcome (ledger.transfer asks
        // its ledger, replayed above), before anything is served.
        let recovered = processes.recover().map_err(|e| refuse(&e))?;
        if recovered > 0 {
            tracing::info!(recovered, "unknown runs recovered their outcomes");
        }
        processes.start(runtime.handle().clone());
        // Approved decisions without their receipt ask their one run again.
        if let Some(decisions) = &decisions {
            decisions.resume();
        }
    }
    // Models fed from routes take what this host's inboxes stored (also what was
    // stored before a restart and not fed yet).
    // Exports carry what the inboxes stored across after each round, outside the
    // host's lock.
    if let Some(delivery) = delivery.clone() {
        let host = host.clone();
        let exports = exports.clone();
        std::thread::Builder::new()
            .name("route-feeder".to_owned())
            .spawn(move || {
                let mut seen = 0;
                loop {
                    host.lock().unwrap_or_else(|p| p.into_inner()).feed_routes();
                    if let Some(exports) = &exports {
                        exports.forward();
                    }
                    seen = delivery.wait_stored(seen, std::time::Duration::from_secs(1));
                }
            })
            .map_err(|e| refuse(&format!("cannot start the route feeder: {e}")))?;
    }
    // Models past MODEL_CHECKPOINT_BATCHES_MAX are checkpointed and their covered
    // batches purged (docs/storage.md), so an open replays a bounded tail; every
    // ARCHIVE_CHECK_INTERVAL answers past the hot window move to the archive; ledgers
    // past their cadence are checkpointed after, outside the host's lock.
    if !failpoints.checkpoints_off() {
        let host = host.clone();
        let ledgers = ledgers.clone();
        std::thread::Builder::new()
            .name("checkpointer".to_owned())
            .spawn(move || {
                let interval = crate::limits::CHECKPOINT_CHECK_INTERVAL;
                let archive_every =
                    crate::limits::ARCHIVE_CHECK_INTERVAL.as_secs() / interval.as_secs().max(1);
                for round in 0u64.. {
                    std::thread::sleep(interval);
                    {
                        let mut host = host.lock().unwrap_or_else(|p| p.into_inner());
                        host.checkpoint_due();
                        // Answers past `retain hot-days` move to the archive.
                        if round % archive_every.max(1) == 0 {
                            host.archive_due();
                        }
                    }
                    // Ledgers outside the host's lock: a ledger's checkpoint holds only
                    // that ledger's (inputs and other rooms go on meanwhile).
                    for taken in ledgers.iter().flat_map(|l| l.checkpoint_due()) {
                        tracing::info!(
                            ledger = taken.ledger,
                            record = taken.position,
                            purged = taken.purged,
                            "ledger checkpointed"
                        );
                    }
                }
            })
            .map_err(|e| refuse(&format!("cannot start the checkpointer: {e}")))?;
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
        // (The guard dropped here: a temporary in the literal below would hold it to the
        // statement's end.)
        let requests = crate::metrics::owner_requests(
            host.lock().unwrap_or_else(|p| p.into_inner()).name(),
            "transport",
        );
        let viewers = host
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .config()
            .control_viewers
            .clone();
        let routes = crate::transport::Routes {
            control: Arc::new(ControlEndpoint {
                host: host.clone(),
                requests,
                ledgers: ledgers.clone(),
                missions: missions.clone(),
                failpoints: failpoints.clone(),
                viewers,
                inspection: inspection::Inspection {
                    host: host.clone(),
                    missions: missions.clone(),
                    authorities: authorities.clone(),
                    delivery: delivery.clone(),
                    processes: processes.clone(),
                    decisions: decisions.clone(),
                },
            }),
            endpoints: vec![
                Arc::new(AuthorityEndpoint {
                    authorities: authorities.clone(),
                }),
                Arc::new(DeliveryEndpoint {
                    delivery: delivery.clone(),
                }),
                Arc::new(ProcessesEndpoint {
                    processes: processes.clone(),
                }),
                Arc::new(MissionsEndpoint {
                    missions: missions.clone(),
                }),
            ],
            wire,
            left: host.lock().unwrap_or_else(|p| p.into_inner()).left(),
        };
        crate::transport::serve(listener, config, dir.to_owned(), routes, runtime.handle())
            .map_err(|e| refuse(&format!("cannot start the transport: {e}")))?;
        tracing::info!(address, "transport (mutual TLS 1.3) listening");
    }
    let started = Started {
        host,
        authorities,
        delivery,
        processes,
        ledgers,
        wallet,
        missions,
        exports,
        decisions,
    };
    if let Some(declared) = metrics_address {
        let address = metrics::address(&declared).map_err(|e| refuse(&e))?;
        metrics::serve(address, started.clone(), runtime.handle()).map_err(|e| refuse(&e))?;
    }
    control_plane::serve(&started, dir, control_listen, runtime.handle())
        .map_err(|e| refuse(&e))?;
    Ok(started)
}

/// What a host holds (`Call::Observe`), with the missions its room holds (read
/// outside the host's lock).
fn observe(
    host: &Mutex<Host>,
    missions: Option<&crate::missions::service::Missions>,
) -> crate::host::Handled {
    use crate::host::Handled;
    use crate::protocol::{Call, Reply};
    let missions = missions.map(|m| m.views());
    let handled = host
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .handle(Call::Observe);
    match (handled, missions) {
        (Handled::Reply(Reply::Observation(mut o)), Some(missions)) => {
            o.missions = missions;
            Handled::Reply(Reply::Observation(o))
        }
        (handled, _) => handled,
    }
}

/// Logs this voter's Raft role changes (state, term, leader) as openraft reports them.
fn watch_role(authority: &Arc<Authority>, runtime: &tokio::runtime::Handle) {
    let mut metrics = authority.raft.metrics();
    let membership = authority.membership.clone();
    runtime.spawn(async move {
        let mut seen = None;
        loop {
            let now = {
                let m = metrics.borrow_and_update();
                (m.state, m.current_term, m.current_leader)
            };
            if seen != Some(now) {
                let (state, term, leader) = now;
                tracing::info!(
                    membership,
                    state = ?state,
                    term,
                    leader = ?leader,
                    "authority role"
                );
                seen = Some(now);
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    });
}
