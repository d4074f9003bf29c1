//! Grid's value delivery on loopback, brought up the way the journeys do it
//! (`grid_benches::bringup`): a topology file, `gridctl reconcile` twice (installations
//! and keys, then enrollments), the `gridd` processes, then `gridctl reconcile` until
//! `gridctl plan` has nothing left to do (the authority's bootstrap, the routes'
//! installation and the publishing claims `route:NAME` need the running hosts).
//!
//! - [`GridPair`]: membership `ops` with a one-voter authority on `a`; `a` publishes
//!   and `b` receives on one Ordered and one Latest route; one `gridd` per host.
//! - [`GridFanout`]: `pub` publishes one Ordered route to `d0001` … `d1024`, the
//!   destinations packed [`FANOUT_HOSTS_PER_PROCESS`] to a `gridd` process (`--dir`
//!   repeated), as the journey `delivery-fanout.kdl` does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use grid_benches::bringup::{GridHosts, Gridd, HOST_READY_TIMEOUT, host_node, one_gridd_per_host};
use grid_benches::procs::{Result, free_ports};
pub use grid_benches::publisher::Publisher;

pub const MEMBERSHIP: &str = "ops";
pub const PUBLISHER: &str = "a";
pub const DESTINATION: &str = "b";
pub const HOSTS: [&str; 2] = [PUBLISHER, DESTINATION];
pub const ORDERED_ROUTE: &str = "bench/ordered";
pub const LATEST_ROUTE: &str = "bench/latest";
pub const FANOUT_ROUTE: &str = "bench/fanout";
pub const FANOUT_PUBLISHER: &str = "pub";
/// Destination hosts per `gridd` process in the fan-out.
pub const FANOUT_HOSTS_PER_PROCESS: usize = 128;

const HEADER: &str = "grid version=1\n\n// Written by benches delivery_compare.\n\
                      membership ops {\n    authority voters=1\n}\n";

/// `a` publishes, `b` receives, on [`ORDERED_ROUTE`] and [`LATEST_ROUTE`].
pub struct GridPair {
    pub hosts: GridHosts,
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
            MEMBERSHIP,
            "transport authority delivery",
        ));
        topology.push_str(&host_node(
            DESTINATION,
            ports[1],
            MEMBERSHIP,
            "transport delivery",
        ));
        for (route, class) in [(ORDERED_ROUTE, "ordered"), (LATEST_ROUTE, "latest")] {
            topology.push_str(&format!(
                "route \"{route}\" membership=ops class={class} {{\n    publisher {PUBLISHER}\n    destination {DESTINATION}\n}}\n"
            ));
        }
        let hosts = GridHosts::start(
            bin_dir,
            &work.join("grid"),
            "topology.kdl",
            &topology,
            &one_gridd_per_host(&HOSTS),
        )?;
        let mut pair = GridPair { hosts, ports };
        pair.check_routes()?;
        Ok(pair)
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.hosts.host_dir(host)
    }

    /// Publishes one value on each route and waits until it is receipted end to end
    /// (a check of the whole path before anything is measured).
    fn check_routes(&mut self) -> Result<()> {
        let mut publisher = Publisher::connect(self.host_dir(PUBLISHER))?;
        for route in [ORDERED_ROUTE, LATEST_ROUTE] {
            let started = Instant::now();
            let position = self
                .hosts
                .retry(Duration::from_millis(200), || publisher.publish(route, 1.0))?
                .map_err(|reason| {
                    format!(
                        "the first publication on {route} was refused for {HOST_READY_TIMEOUT:?}: {reason}"
                    )
                })?;
            while publisher.receipted(route, DESTINATION)? < position {
                self.hosts.procs.check_running()?;
                if started.elapsed() > HOST_READY_TIMEOUT {
                    return Err(format!(
                        "{route}: position {position} was published but `{DESTINATION}` did not receipt it within {HOST_READY_TIMEOUT:?}:\n{}",
                        self.hosts.log_tails(&["gridd a", "gridd b"])
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
    pub hosts: GridHosts,
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
            MEMBERSHIP,
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
        let mut processes = one_gridd_per_host(&[FANOUT_PUBLISHER]);
        for (i, chunk) in names.chunks(FANOUT_HOSTS_PER_PROCESS).enumerate() {
            processes.push(Gridd {
                name: format!("gridd pack-{}", i + 1),
                hosts: chunk.to_vec(),
            });
        }
        Ok(GridFanout {
            hosts: GridHosts::start(
                bin_dir,
                &work.join("grid-fanout"),
                "topology.kdl",
                &topology,
                &processes,
            )?,
            destinations,
            processes: processes.len(),
        })
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.hosts.host_dir(host)
    }
}
