//! The journey's network: a Linux bridge, network namespaces and veth pairs, so that
//! `partition` can cut a host off and `heal` can bring it back (the steps live in
//! `steps/partition.rs`).
//!
//! A host whose `listen` address (read from its installed `host.toml`) is an IPv4 address
//! that is not loopback (e.g. `10.77.1.1:7521`) runs in a network namespace of its own:
//! the first time such a host is started (or named by `partition`/`call … from=`), the
//! harness creates one Linux bridge for the journey in the root namespace with the
//! address `.254/24` of the host's subnet, then per host a namespace with `lo` up and a
//! veth pair — `eth0` with the host's address `/24` inside, the other end attached to
//! the bridge. `gridd` is started as `ip netns exec NS gridd …` (`ip` execs gridd, so
//! the harness's SIGKILL reaches gridd itself). Hosts on `127.x` run in the root
//! namespace, as before.
//!
//! Names carry a tag made of the harness's process id and a per-process counter
//! (`gj` + 5 base-36 digits + a decimal counter), so journeys running in parallel — and
//! leftovers of a killed harness — never share a name: bridge `TAGb`, veth `TAGhI`
//! (interface names stay within 15 bytes), namespace `TAG-I-HOST`. Everything is removed
//! when the journey ends, after its hosts are killed — also on failure or panic (the
//! [`Network`] is a drop guard inside the runner's `Context`). Before creating a name
//! the harness deletes a leftover of that same name, and it refuses a subnet that is
//! already routed in the root namespace (another journey using it, or leftovers).

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use crate::error::Failure;
use crate::limits::INTERFACE_NAME_BYTES_MAX;
use crate::process::{describe_status, wait_bounded};
use crate::{HOST_READY_TIMEOUT, POLL_INTERVAL, STEP_TIMEOUT};

/// The name of a host's end of its veth pair, inside its namespace.
pub const NAMESPACE_INTERFACE: &str = "eth0";
/// The last byte of the bridge's address in the journey's /24.
const BRIDGE_HOST_BYTE: u8 = 254;

/// The IPv4 address a listen address `IP:PORT` puts into a namespace: not loopback,
/// not unspecified. `None`: the host runs in the root namespace.
pub fn namespaced_ip(listen: &str) -> Option<Ipv4Addr> {
    match listen.trim().parse::<SocketAddr>().ok()?.ip() {
        IpAddr::V4(ip) if !ip.is_loopback() && !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

/// One journey's bridge, namespaces and veth pairs. Dropping it removes them all
/// (best effort); the runner drops it after killing the hosts.
#[derive(Default)]
pub struct Network {
    /// `gj…`, chosen when the first namespace is made.
    tag: Option<String>,
    bridge: Option<Bridge>,
    hosts: BTreeMap<String, Placed>,
    /// What was created, in order: removed in reverse.
    created: Vec<Created>,
}

struct Bridge {
    name: String,
    subnet: [u8; 3],
}

struct Placed {
    namespace: String,
    /// The bridge-side end of the veth pair (in the root namespace).
    veth: String,
    ip: Ipv4Addr,
    cut: bool,
}

enum Created {
    Link(String),
    Namespace(String),
}

impl Network {
    /// The namespace the host was placed in, and its address there.
    pub fn namespace(&self, host: &str) -> Option<(&str, Ipv4Addr)> {
        self.hosts
            .get(host)
            .map(|placed| (placed.namespace.as_str(), placed.ip))
    }

    /// The bridge-side veth of a placed host, and its address.
    pub fn link(&self, host: &str) -> Option<(&str, Ipv4Addr)> {
        self.hosts
            .get(host)
            .map(|placed| (placed.veth.as_str(), placed.ip))
    }

    /// Places the host in a new namespace with address `ip`, creating the journey's
    /// bridge first if needed. Returns lines for the story.
    pub fn place(&mut self, host: &str, ip: Ipv4Addr) -> Result<Vec<String>, Failure> {
        let mut story = Vec::new();
        let octets = ip.octets();
        let subnet = [octets[0], octets[1], octets[2]];
        if octets[3] == 0 || octets[3] >= BRIDGE_HOST_BYTE {
            return Err(Failure::new(
                format!(
                    "host `{host}`'s address to be .1–.253 of its /24 (.{BRIDGE_HOST_BYTE} is \
                     the journey's bridge)"
                ),
                ip.to_string(),
            ));
        }
        let tag = self.tag.get_or_insert_with(new_tag).clone();
        match &self.bridge {
            Some(bridge) if bridge.subnet != subnet => {
                return Err(Failure::new(
                    format!(
                        "every namespaced host of the journey in one /24 ({}.0/24, the \
                         first one's)",
                        dotted(bridge.subnet)
                    ),
                    format!("host `{host}` listens on {ip}"),
                ));
            }
            Some(_) => {}
            None => {
                story.push(self.create_bridge(&tag, subnet)?);
            }
        }
        let bridge = self.bridge.as_ref().expect("created above").name.clone();
        let index = self.hosts.len();
        let veth = format!("{tag}h{index}");
        let namespace = format!("{tag}-{index}-{}", safe_name(host));
        check_interface_name(&veth)?;
        // Leftovers of the same names (a killed run of a process with the same id).
        ip_ignoring(&["link", "del", &veth]);
        ip_ignoring(&["netns", "del", &namespace]);

        ip_run(&["netns", "add", &namespace])?;
        self.created.push(Created::Namespace(namespace.clone()));
        ip_run(&[
            "link",
            "add",
            &veth,
            "type",
            "veth",
            "peer",
            "name",
            NAMESPACE_INTERFACE,
            "netns",
            &namespace,
        ])?;
        self.created.push(Created::Link(veth.clone()));
        ip_run(&["link", "set", &veth, "master", &bridge])?;
        ip_run(&["link", "set", &veth, "up"])?;
        let address = format!("{ip}/24");
        ip_run(&[
            "-n",
            &namespace,
            "addr",
            "add",
            &address,
            "dev",
            NAMESPACE_INTERFACE,
        ])?;
        ip_run(&["-n", &namespace, "link", "set", NAMESPACE_INTERFACE, "up"])?;
        ip_run(&["-n", &namespace, "link", "set", "lo", "up"])?;
        wait_forwarding(&veth)?;
        story.push(format!(
            "host {host} gets network namespace {namespace}: {NAMESPACE_INTERFACE} {address}, \
             veth {veth} on bridge {bridge}"
        ));
        self.hosts.insert(
            host.to_owned(),
            Placed {
                namespace,
                veth,
                ip,
                cut: false,
            },
        );
        Ok(story)
    }

    fn create_bridge(&mut self, tag: &str, subnet: [u8; 3]) -> Result<String, Failure> {
        let name = format!("{tag}b");
        check_interface_name(&name)?;
        ip_ignoring(&["link", "del", &name]);
        let prefix = format!("{}.0/24", dotted(subnet));
        let routes = ip_run(&["-o", "route", "show", "root", &prefix])?;
        if !routes.trim().is_empty() {
            return Err(Failure::new(
                format!(
                    "subnet {prefix} free in the root network namespace (each journey file \
                     picks its own subnet)"
                ),
                format!(
                    "it is already routed: {} — another journey running with the same \
                     subnet, or leftovers of a killed run (`ip link del DEVICE`)",
                    routes.trim().replace('\n', "; ")
                ),
            ));
        }
        ip_run(&["link", "add", &name, "type", "bridge"])?;
        self.created.push(Created::Link(name.clone()));
        let address = format!("{}.{BRIDGE_HOST_BYTE}/24", dotted(subnet));
        ip_run(&["addr", "add", &address, "dev", &name])?;
        ip_run(&["link", "set", &name, "up"])?;
        self.bridge = Some(Bridge {
            name: name.clone(),
            subnet,
        });
        Ok(format!(
            "network: bridge {name} {address} in the root namespace (tag {tag})"
        ))
    }

    /// Cuts a placed host off; `false` if it already was.
    pub fn cut(&mut self, host: &str) -> Result<bool, Failure> {
        let placed = self.hosts.get_mut(host).expect("placed before it is cut");
        if placed.cut {
            return Ok(false);
        }
        ip_run(&["link", "set", &placed.veth, "down"])?;
        placed.cut = true;
        Ok(true)
    }

    /// Restores every cut link; returns the hosts healed.
    pub fn heal(&mut self) -> Result<Vec<String>, Failure> {
        let mut healed = Vec::new();
        for (host, placed) in &mut self.hosts {
            if !placed.cut {
                continue;
            }
            ip_run(&["link", "set", &placed.veth, "up"])?;
            placed.cut = false;
            healed.push(host.clone());
        }
        for host in &healed {
            wait_forwarding(&self.hosts[host].veth)?;
        }
        // A neighbour a host failed to resolve while cut off stays FAILED for a while
        // (connects answer "no route to host"): healed means every host reaches every
        // other at once, so every namespace forgets what it failed to resolve.
        if !healed.is_empty() {
            for placed in self.hosts.values() {
                ip_run(&["-n", &placed.namespace, "neigh", "flush", "all"])?;
            }
        }
        Ok(healed)
    }

    /// Removes everything created, newest first (the hosts must be dead by now, or
    /// their namespaces outlive the names). Returns lines for the story.
    pub fn remove(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.created.is_empty() {
            return lines;
        }
        let mut problems = Vec::new();
        let (mut links, mut namespaces) = (0, 0);
        while let Some(created) = self.created.pop() {
            let result = match &created {
                Created::Link(name) => {
                    links += 1;
                    ip_run(&["link", "del", name])
                }
                Created::Namespace(name) => {
                    namespaces += 1;
                    ip_run(&["netns", "del", name])
                }
            };
            if let Err(failure) = result {
                problems.push(failure.observed);
            }
        }
        self.hosts.clear();
        self.bridge = None;
        lines.push(format!(
            "network removed: {namespaces} namespace(s), {links} link(s) (bridge and veths)"
        ));
        lines.extend(
            problems
                .into_iter()
                .map(|p| format!("network cleanup failed: {p}")),
        );
        lines
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// `gj`, the process id in 5 base-36 digits (pid_max ≤ 2^22 < 36^5), and a counter.
fn new_tag() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed) % 1000;
    let mut pid = std::process::id();
    let mut digits = [b'0'; 5];
    for digit in digits.iter_mut().rev() {
        *digit = b"0123456789abcdefghijklmnopqrstuvwxyz"[(pid % 36) as usize];
        pid /= 36;
    }
    format!("gj{}{n}", String::from_utf8_lossy(&digits))
}

fn safe_name(host: &str) -> String {
    host.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect()
}

fn dotted(subnet: [u8; 3]) -> String {
    format!("{}.{}.{}", subnet[0], subnet[1], subnet[2])
}

fn check_interface_name(name: &str) -> Result<(), Failure> {
    if name.len() > INTERFACE_NAME_BYTES_MAX {
        return Err(Failure::new(
            format!("an interface name of at most {INTERFACE_NAME_BYTES_MAX} bytes"),
            name.to_owned(),
        ));
    }
    Ok(())
}

/// Waits until the bridge-side veth is up and its bridge port forwards.
fn wait_forwarding(veth: &str) -> Result<(), Failure> {
    let sys = std::path::Path::new("/sys/class/net").join(veth);
    let read = |file: &str| {
        std::fs::read_to_string(sys.join(file))
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let started = Instant::now();
    loop {
        // operstate "up" once both ends are up; brport/state 3 is BR_STATE_FORWARDING.
        let (oper, port) = (read("operstate"), read("brport/state"));
        if oper == "up" && port == "3" {
            return Ok(());
        }
        if started.elapsed() >= HOST_READY_TIMEOUT {
            return Err(Failure::new(
                format!(
                    "link {veth} up and forwarding within HOST_READY_TIMEOUT ({} s)",
                    HOST_READY_TIMEOUT.as_secs()
                ),
                format!("operstate {oper:?}, bridge port state {port:?}"),
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Runs `ip ARGS…` within [`STEP_TIMEOUT`]; returns its stdout. A failure names the
/// command and what it printed.
fn ip_run(args: &[&str]) -> Result<String, Failure> {
    let shown = format!("`ip {}`", args.join(" "));
    let expected = format!("{shown} to succeed");
    let mut child = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            Failure::new(
                expected.clone(),
                format!("could not run ip (iproute2, as root): {e}"),
            )
        })?;
    let status = match wait_bounded(&mut child, STEP_TIMEOUT) {
        Ok(Some(status)) => status,
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Failure::new(expected, "it did not finish (killed)"));
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    if status.success() {
        Ok(stdout)
    } else {
        Err(Failure::new(
            expected,
            format!("{shown}: {}: {}", describe_status(&status), stderr.trim()),
        ))
    }
}

/// Runs `ip ARGS…`, ignoring whether it worked (removing leftovers that may not exist).
fn ip_ignoring(args: &[&str]) {
    let _ = ip_run(args);
}
