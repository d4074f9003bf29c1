//! Generated topologies: hosts, models and routes in fixed ratios (one host per 50
//! models, five routes per host, each from a host to the next), all in one membership
//! whose authority has three voters — every host also replicates it (the `authority`
//! profile), since a route's publisher sends its claim through its own replica.

use std::fmt::Write;

/// Models per host in the generated topologies.
pub const MODELS_PER_HOST: usize = 50;
/// Routes each host publishes to the next host in the generated topologies.
pub const ROUTES_PER_HOST: usize = 5;
/// Voters of the membership's authority (the other hosts are learners).
pub const VOTERS: usize = 3;
/// The first listen port of a topology that is only planned (never started).
pub const PLANNED_PORT_FIRST: u16 = 20_000;

// The largest planned topology's hosts get distinct ports below 65,536 (the one
// `expect` of `planned_ports`).
const _: () = assert!(
    grid_benches::limits::SCALE_OBJECTS_MAX / (1 + MODELS_PER_HOST + ROUTES_PER_HOST)
        + 2
        + PLANNED_PORT_FIRST as usize
        <= u16::MAX as usize
);

/// How many of each object a topology holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub hosts: usize,
    pub models_per_host: usize,
    pub routes_per_host: usize,
}

impl Shape {
    /// The shape of about `objects` objects, in the fixed ratios.
    pub fn for_objects(objects: usize) -> Shape {
        let per_host = 1 + MODELS_PER_HOST + ROUTES_PER_HOST;
        Shape {
            hosts: objects.div_ceil(per_host).max(2),
            models_per_host: MODELS_PER_HOST,
            routes_per_host: ROUTES_PER_HOST,
        }
    }

    /// `hosts` hosts holding `models` models together (rounded up per host).
    pub fn running(hosts: usize, models: usize) -> Shape {
        let hosts = hosts.max(2);
        Shape {
            hosts,
            models_per_host: models.div_ceil(hosts).max(ROUTES_PER_HOST),
            routes_per_host: ROUTES_PER_HOST,
        }
    }

    pub fn models(&self) -> usize {
        self.hosts * self.models_per_host
    }

    pub fn routes(&self) -> usize {
        self.hosts * self.routes_per_host
    }

    /// Hosts, models, routes and the membership.
    pub fn objects(&self) -> usize {
        self.hosts + self.models() + self.routes() + 1
    }
}

/// The topology text of `shape`; host `i` listens on `ports[i]`.
pub fn topology(shape: &Shape, ports: &[u16]) -> String {
    assert_eq!(ports.len(), shape.hosts, "one port per host");
    assert!(
        shape.routes_per_host <= shape.models_per_host,
        "each route is fed by one model"
    );
    let mut out = String::with_capacity(shape.objects() * 200);
    let _ = writeln!(out, "grid version=1\n");
    let _ = writeln!(
        out,
        "membership scale {{\n    authority voters={VOTERS}\n}}"
    );
    for (h, port) in ports.iter().enumerate() {
        let _ = writeln!(
            out,
            "host h{h} listen=\"127.0.0.1:{port}\" {{\n    member scale\n    profiles transport authority delivery\n}}"
        );
    }
    for h in 0..shape.hosts {
        let next = (h + 1) % shape.hosts;
        let previous = (h + shape.hosts - 1) % shape.hosts;
        for k in 0..shape.models_per_host {
            let from = if k < shape.routes_per_host {
                format!(" from=\"route:r{previous}-{k}\"")
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "model m{h}-{k} host=h{h} {{\n    input a default=1\n    input b default=0{from}\n    cell c \"a * 2 + b\"\n    cell d \"IF(c > 10, c - 10, 0)\""
            );
            if k < shape.routes_per_host {
                let _ = writeln!(out, "    output c route=\"r{h}-{k}\"");
            }
            let _ = writeln!(out, "}}");
        }
        for k in 0..shape.routes_per_host {
            let _ = writeln!(
                out,
                "route \"r{h}-{k}\" membership=scale class=latest {{\n    publisher h{h}\n    destination h{next}\n}}"
            );
        }
    }
    out
}

/// The ports of a topology that is only planned.
pub fn planned_ports(hosts: usize) -> Vec<u16> {
    (0..hosts)
        .map(|h| {
            PLANNED_PORT_FIRST
                + u16::try_from(h).expect("SCALE_OBJECTS_MAX bounds the planned hosts")
        })
        .collect()
}
