//! Network partitions between hosts: `partition` and `heal`, which cut and restore the
//! links of hosts placed in network namespaces of their own ([`crate::network`]).
//!
//! - `partition HOST…` — cuts each host off from every other host and from the root
//!   network namespace (where `gridctl`, `curl` and the harness run): the bridge-side end
//!   of its veth pair goes down. Several hosts, or several `partition` steps, accumulate.
//!   The host keeps running, and its control socket (a file) still answers `gridctl`.
//! - `heal` — brings every cut link up again and waits until the bridge forwards.

use crate::context::Context;
use crate::error::Failure;
use crate::step::Step;
use crate::step::{Node, ParseError};

struct Partition {
    hosts: Vec<String>,
}

struct Heal;

pub fn parse_partition(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let mut hosts = vec![node.host("a host name")?];
    while let Some(host) = node.optional_host("a host name")? {
        hosts.push(host);
    }
    Ok(Box::new(Partition { hosts }))
}

pub fn parse_heal(_node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    Ok(Box::new(Heal))
}

impl Step for Partition {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        for host in &self.hosts {
            if cx.host_namespace(host)?.is_none() {
                let why = match cx.host_listen(host) {
                    Ok(listen) => format!(
                        "its listen address {listen} is not a non-loopback IPv4 address: it \
                         runs in the root network namespace and cannot be cut off"
                    ),
                    Err(failure) => format!(
                        "it has no listen address to place in a namespace ({})",
                        failure.observed
                    ),
                };
                return Err(Failure::new(
                    format!(
                        "host `{host}` in a network namespace of its own (a listen address \
                         such as 10.77.1.1:7521 in the topology)"
                    ),
                    why,
                ));
            }
            let network = cx.network();
            let cut = network.cut(host)?;
            let (veth, ip) = network
                .link(host)
                .map(|(veth, ip)| (veth.to_owned(), ip))
                .expect("the host was just placed");
            if cut {
                cx.say(format_args!(
                    "partitioned {host} ({ip}): link {veth} down — it reaches no other host, \
                     and nothing reaches it"
                ));
            } else {
                cx.say(format_args!("{host} ({ip}) is already partitioned"));
            }
        }
        Ok(())
    }
}

impl Step for Heal {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let healed = cx.network().heal()?;
        if healed.is_empty() {
            cx.say("no host is partitioned: nothing to heal");
        } else {
            cx.say(format_args!(
                "healed {}: links up, the bridge forwards again",
                healed.join(", ")
            ));
        }
        Ok(())
    }
}
