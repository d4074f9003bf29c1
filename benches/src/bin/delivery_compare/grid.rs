//! Grid's value delivery on loopback, brought up the way the journeys do it: a topology
//! file, `gridctl reconcile` twice (installations and keys, then enrollments), the
//! `gridd` processes, then `gridctl reconcile` until `gridctl plan` has nothing left to
//! do (the authority's bootstrap, the routes' installation and the publishing claims
//! `route:NAME` need the running hosts).
//!
//! - [`GridPair`]: membership `ops` with a one-voter authority on `a`; `a` publishes
//!   and `b` receives on one Ordered and one Latest route; one `gridd` per host.
//! - [`GridFanout`]: `pub` publishes one Ordered route to `d0001` … `d1024`, the
//!   destinations packed [`FANOUT_HOSTS_PER_PROCESS`] to a `gridd` process (`--dir`
//!   repeated), as the journey `delivery-fanout.kdl` does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use grid_engine::delivery::api::{DeliveryCall, DeliveryReply};
use grid_engine::host::control::{CONTROL_CONNECTIONS_MAX, Client};
use grid_engine::protocol::{Call, Reply};

use grid_benches::procs::{Procs, Result, free_ports, tail};

pub const PUBLISHER: &str = "a";
pub const DESTINATION: &str = "b";
pub const HOSTS: [&str; 2] = [PUBLISHER, DESTINATION];
pub const ORDERED_ROUTE: &str = "bench/ordered";
pub const LATEST_ROUTE: &str = "bench/latest";
pub const FANOUT_ROUTE: &str = "bench/fanout";
pub const FANOUT_PUBLISHER: &str = "pub";
/// Destination hosts per `gridd` process in the fan-out.
pub const FANOUT_HOSTS_PER_PROCESS: usize = 128;

/// How long a started process may take until each of its hosts accepts control
/// connections (per host, since the last one that did).
const HOST_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `gridctl reconcile` may take to reach an empty plan once the hosts run.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(300);
const CONVERGE_ROUNDS_MAX: u32 = 40;
const CONVERGED: &str = "plan: 0 to create, 0 to change, 0 to retire, 0 needing attention";

/// Hosts brought up from one topology file.
pub struct Cluster {
    state: PathBuf,
    pub procs: Procs,
    /// The `gridctl reconcile` rounds it took after the hosts started.
    pub rounds: u32,
}

impl Cluster {
    /// Writes `topology` under `dir`, reconciles, starts one `gridd` per entry of
    /// `processes` (a name and the hosts it runs) and reconciles until the plan is
    /// empty.
    fn start(
        bin_dir: &Path,
        dir: &Path,
        topology: &str,
        processes: &[(String, Vec<String>)],
    ) -> Result<Cluster> {
        let gridd = bin_dir.join("gridd");
        let gridctl = bin_dir.join("gridctl");
        let state = dir.join("state");
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let file = dir.join("topology.kdl");
        std::fs::write(&file, topology)?;
        let mut cluster = Cluster {
            state: state.clone(),
            procs: Procs::default(),
            rounds: 0,
        };
        let gridctl_run = |what: &str, round: u32| -> Result<(bool, String)> {
            let log = logs.join(format!("{what}-{round}.log"));
            let out = std::fs::File::create(&log)?;
            let status = Command::new(&gridctl)
                .arg(what)
                .arg(&file)
                .arg("--state")
                .arg(&state)
                .current_dir(dir)
                .stdin(std::process::Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                .status()
                .map_err(|e| format!("running {}: {e}", gridctl.display()))?;
            Ok((status.success(), tail(&log, 30)))
        };
        for round in [1, 2] {
            // installations and keys, then enrollments
            let (ok, output) = gridctl_run("reconcile", round)?;
            if !ok {
                return Err(format!("gridctl reconcile (round {round}) failed:\n{output}").into());
            }
        }
        for (name, hosts) in processes {
            let mut command = Command::new(&gridd);
            for host in hosts {
                command.arg("--dir").arg(cluster.host_dir(host));
            }
            command.current_dir(dir).env_remove("GRID_FAILPOINTS");
            cluster.procs.spawn(
                name,
                command,
                &logs.join(format!("{}.log", name.replace(' ', "-"))),
            )?;
        }
        for (name, hosts) in processes {
            let mut progress = Instant::now();
            for host in hosts {
                let socket = grid_engine::host::control::socket_path(&cluster.host_dir(host));
                while std::os::unix::net::UnixStream::connect(&socket).is_err() {
                    cluster.procs.check_running()?;
                    if progress.elapsed() > HOST_READY_TIMEOUT {
                        return Err(format!(
                            "host {host} of {name} did not accept control connections within {HOST_READY_TIMEOUT:?}:\n{}",
                            cluster.procs.log_tail(name)
                        )
                        .into());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                progress = Instant::now();
            }
        }
        // Bootstrap the authority, install the routes, acquire the publishing claims:
        // reconcile until the plan is empty (bounded in rounds and time).
        let started = Instant::now();
        let mut last = String::new();
        for round in 3..3 + CONVERGE_ROUNDS_MAX {
            cluster.procs.check_running()?;
            let (ok, output) = gridctl_run("reconcile", round)?;
            cluster.rounds = round - 2;
            let (_, plan) = gridctl_run("plan", round)?;
            if ok && plan.lines().any(|l| l.trim() == CONVERGED) {
                return Ok(cluster);
            }
            last = format!("gridctl reconcile:\n{output}\ngridctl plan:\n{plan}");
            if started.elapsed() > CONVERGE_TIMEOUT {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let logs: Vec<String> = processes
            .iter()
            .take(3)
            .map(|(name, _)| format!("{name}:\n{}", cluster.procs.log_tail(name)))
            .collect();
        Err(format!(
            "Grid did not converge (`{CONVERGED}`) within {CONVERGE_TIMEOUT:?} or {CONVERGE_ROUNDS_MAX} rounds; \
             the last round:\n{last}\n{}",
            logs.join("\n")
        )
        .into())
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.state.join("hosts").join(host)
    }
}

fn host_node(host: &str, port: u16, profiles: &str) -> String {
    format!(
        "host {host} listen=\"127.0.0.1:{port}\" {{\n    member ops\n    profiles {profiles}\n}}\n"
    )
}

const HEADER: &str = "grid version=1\n\n// Written by benches delivery_compare.\n\
                      membership ops {\n    authority voters=1\n}\n";

/// `a` publishes, `b` receives, on [`ORDERED_ROUTE`] and [`LATEST_ROUTE`].
pub struct GridPair {
    pub cluster: Cluster,
    pub ports: Vec<u16>,
}

impl GridPair {
    /// Brings both hosts up under `work/grid`, with `gridd` and `gridctl` from
    /// `bin_dir`, and checks one value end to end on each route.
    pub fn start(bin_dir: &Path, work: &Path) -> Result<GridPair> {
        let ports = free_ports(HOSTS.len())?;
        let mut topology = HEADER.to_owned();
        topology.push_str(&host_node(
            PUBLISHER,
            ports[0],
            "transport authority delivery",
        ));
        topology.push_str(&host_node(DESTINATION, ports[1], "transport delivery"));
        for (route, class) in [(ORDERED_ROUTE, "ordered"), (LATEST_ROUTE, "latest")] {
            topology.push_str(&format!(
                "route \"{route}\" membership=ops class={class} {{\n    publisher {PUBLISHER}\n    destination {DESTINATION}\n}}\n"
            ));
        }
        let processes: Vec<(String, Vec<String>)> = HOSTS
            .iter()
            .map(|h| (format!("gridd {h}"), vec![(*h).to_owned()]))
            .collect();
        let mut pair = GridPair {
            cluster: Cluster::start(bin_dir, &work.join("grid"), &topology, &processes)?,
            ports,
        };
        pair.check_routes()?;
        Ok(pair)
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.cluster.host_dir(host)
    }

    /// Publishes one value on each route and waits until it is receipted end to end
    /// (a check of the whole path before anything is measured).
    fn check_routes(&mut self) -> Result<()> {
        let mut publisher = Publisher::connect(self.host_dir(PUBLISHER))?;
        for route in [ORDERED_ROUTE, LATEST_ROUTE] {
            let started = Instant::now();
            let position = loop {
                match publisher.publish(route, 1.0) {
                    Ok(position) => break position,
                    Err(reason) if started.elapsed() < HOST_READY_TIMEOUT => {
                        let _ = reason;
                        self.cluster.procs.check_running()?;
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(reason) => {
                        return Err(format!(
                            "the first publication on {route} was refused for {HOST_READY_TIMEOUT:?}: {reason}"
                        )
                        .into());
                    }
                }
            };
            while publisher.receipted(route)? < position {
                self.cluster.procs.check_running()?;
                if started.elapsed() > HOST_READY_TIMEOUT {
                    return Err(format!(
                        "{route}: position {position} was published but `{DESTINATION}` did not receipt it within {HOST_READY_TIMEOUT:?}:\n\
                         gridd a:\n{}\ngridd b:\n{}",
                        self.cluster.procs.log_tail("gridd a"),
                        self.cluster.procs.log_tail("gridd b")
                    )
                    .into());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(())
    }
}

/// Whether this `gridd` runs several hosts in one process (`--dir` repeated): `Err`
/// with what it answered when it does not.
pub fn gridd_packs_hosts(bin_dir: &Path) -> std::result::Result<(), String> {
    let missing = Path::new("/nonexistent/delivery_compare");
    let out = Command::new(bin_dir.join("gridd"))
        .arg("--dir")
        .arg(missing.join("a"))
        .arg("--dir")
        .arg(missing.join("b"))
        .output()
        .map_err(|e| format!("running gridd: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    match stderr
        .lines()
        .find(|l| l.contains("cannot be used multiple times"))
    {
        Some(line) => Err(line.trim().to_owned()),
        None => Ok(()),
    }
}

/// `pub` publishes [`FANOUT_ROUTE`] (Ordered) to `d0001` … `dNNNN`.
pub struct GridFanout {
    pub cluster: Cluster,
    pub destinations: usize,
    pub processes: usize,
}

impl GridFanout {
    pub fn start(bin_dir: &Path, work: &Path, destinations: usize) -> Result<GridFanout> {
        let ports = free_ports(destinations + 1)?;
        let names: Vec<String> = (1..=destinations).map(|i| format!("d{i:04}")).collect();
        let mut topology = HEADER.to_owned();
        topology.push_str(&host_node(
            FANOUT_PUBLISHER,
            ports[0],
            "transport authority delivery",
        ));
        for (name, port) in names.iter().zip(&ports[1..]) {
            topology.push_str(&format!(
                "host {name} listen=\"127.0.0.1:{port}\" {{ member ops; profiles transport delivery; }}\n"
            ));
        }
        topology.push_str(&format!(
            "route \"{FANOUT_ROUTE}\" membership=ops class=ordered {{\n    publisher {FANOUT_PUBLISHER}\n"
        ));
        for name in &names {
            topology.push_str(&format!("    destination {name}\n"));
        }
        topology.push_str("}\n");
        let mut processes = vec![(
            format!("gridd {FANOUT_PUBLISHER}"),
            vec![FANOUT_PUBLISHER.to_owned()],
        )];
        for (i, chunk) in names.chunks(FANOUT_HOSTS_PER_PROCESS).enumerate() {
            processes.push((format!("gridd pack-{}", i + 1), chunk.to_vec()));
        }
        Ok(GridFanout {
            cluster: Cluster::start(bin_dir, &work.join("grid-fanout"), &topology, &processes)?,
            destinations,
            processes: processes.len(),
        })
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.cluster.host_dir(host)
    }
}

/// One control-socket connection to a publishing host.
pub struct Publisher {
    client: Client,
}

/// How long a connection may be retried while the host refuses it for being over
/// `CONTROL_CONNECTIONS_MAX` (the previous measurement's connections are closing).
const CONNECT_RETRY: Duration = Duration::from_secs(10);

fn delivery(
    client: &mut Client,
    request: DeliveryCall,
) -> std::result::Result<DeliveryReply, String> {
    match client.call(&Call::Delivery { request }) {
        Ok(Reply::Delivery(reply)) => Ok(*reply),
        Ok(other) => Err(format!("{other:?}")),
        Err(e) => Err(format!("call error: {e}")),
    }
}

impl Publisher {
    /// Connects and checks that the host serves this connection (a host over
    /// `CONTROL_CONNECTIONS_MAX` answers the first call with a refusal).
    pub fn connect(host_dir: PathBuf) -> Result<Publisher> {
        let started = Instant::now();
        loop {
            let mut client = Client::connect(&host_dir)?;
            // A cheap call (an unknown route is refused by the delivery profile itself).
            match client.call(&Call::Delivery {
                request: DeliveryCall::Receipts {
                    route: String::new(),
                },
            })? {
                Reply::Delivery(_) => return Ok(Publisher { client }),
                Reply::Refused { .. } if started.elapsed() < CONNECT_RETRY => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => {
                    return Err(format!(
                        "{}: {other:?} (at most {CONTROL_CONNECTIONS_MAX} control connections per host)",
                        host_dir.display()
                    )
                    .into());
                }
            }
        }
    }

    /// Publishes `value` on `route`: its position once it is durable at the publisher,
    /// or why not.
    pub fn publish(&mut self, route: &str, value: f64) -> std::result::Result<u64, String> {
        match delivery(
            &mut self.client,
            DeliveryCall::Publish {
                route: route.to_owned(),
                value,
            },
        )? {
            DeliveryReply::Published { position, .. } => Ok(position),
            DeliveryReply::Refused { reason } => Err(reason),
            other => Err(format!("{other:?}")),
        }
    }

    /// The highest position of `route` that the destination's signed cumulative
    /// receipts cover, as the publisher has applied them (0: none yet).
    pub fn receipted(&mut self, route: &str) -> Result<u64> {
        Ok(self
            .receipted_all(route)?
            .get(DESTINATION)
            .copied()
            .unwrap_or(0))
    }

    /// The size of the JSON of this host's answer to `routes` (what a poll costs).
    pub fn routes_reply_bytes(&mut self) -> Result<usize> {
        let reply = delivery(&mut self.client, DeliveryCall::Routes)?;
        Ok(serde_json::to_vec(&Reply::Delivery(Box::new(reply)))?.len())
    }

    /// The highest position of `route` each destination's receipts cover, at the
    /// publisher (a destination without a receipt yet is missing).
    pub fn receipted_all(
        &mut self,
        route: &str,
    ) -> Result<std::collections::BTreeMap<String, u64>> {
        match delivery(&mut self.client, DeliveryCall::Routes)? {
            DeliveryReply::Routes { routes, host } => Ok(routes
                .into_iter()
                .find(|r| r.route.name == route)
                .ok_or_else(|| format!("host `{host}` holds no route `{route}`"))?
                .receipted),
            other => Err(format!("routes: {other:?}").into()),
        }
    }
}
