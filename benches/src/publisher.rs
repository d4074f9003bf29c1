//! One control-socket connection to a host that publishes routes (profile
//! `delivery`): publish, and read what each destination's receipts cover — what the
//! delivery benchmarks drive Grid through.

use std::path::PathBuf;

use grid_engine::delivery::api::{DeliveryCall, DeliveryReply};
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply};

use crate::bringup::connect_served;
use crate::procs::Result;

/// One control-socket connection to a publishing host.
pub struct Publisher {
    client: Client,
}

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
        // A cheap call (an unknown route is refused by the delivery profile itself).
        let probe = Call::Delivery {
            request: DeliveryCall::Receipts {
                route: String::new(),
            },
        };
        let client = connect_served(&host_dir, &probe, |reply| {
            matches!(reply, Reply::Delivery(_))
        })?;
        Ok(Publisher { client })
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

    /// Publishes one whole matrix (GRDX bytes, hex) on mapping `mapping`: its position
    /// once it is durable at the publisher, or why not.
    pub fn publish_matrix(
        &mut self,
        mapping: &str,
        grdx_hex: &str,
    ) -> std::result::Result<u64, String> {
        match delivery(
            &mut self.client,
            DeliveryCall::PublishMatrix {
                route: mapping.to_owned(),
                grdx: grdx_hex.to_owned(),
                op: None,
            },
        )? {
            DeliveryReply::Published { position, .. } => Ok(position),
            DeliveryReply::Refused { reason } => Err(reason),
            other => Err(format!("{other:?}")),
        }
    }

    /// The highest position of `route` that `destination`'s signed cumulative
    /// receipts cover, as the publisher has applied them (0: none yet).
    pub fn receipted(&mut self, route: &str, destination: &str) -> Result<u64> {
        Ok(self
            .receipted_all(route)?
            .get(destination)
            .copied()
            .unwrap_or(0))
    }

    /// Waits at the publisher (at most `wait_ms`) until every destination's receipt
    /// of `route` covers `position`; the highest position they all cover then
    /// (`DeliveryCall::Receipted`), and whether `position` is complete.
    pub fn await_receipted(
        &mut self,
        route: &str,
        position: u64,
        wait_ms: u64,
    ) -> Result<(u64, bool)> {
        let call = DeliveryCall::Receipted {
            route: route.to_owned(),
            position,
            wait_ms,
        };
        match delivery(&mut self.client, call)? {
            DeliveryReply::Receipted {
                covered, complete, ..
            } => Ok((covered, complete)),
            other => Err(format!("receipted: {other:?}").into()),
        }
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
