//! Delivery's transport endpoint: `POST /delivery/M/push`, values for this host from a
//! route's publisher certified in M, answered with the signed receipt of what this
//! host durably holds.

use std::sync::Arc;

use super::service::Delivery;
use crate::limits::PUSH_BODY_BYTES_MAX;
use crate::transport::endpoint::{Endpoint, Inbound, Outbound, Serving};

/// `None` when the host does not select `delivery`: pushes are refused by name.
pub struct DeliveryEndpoint {
    pub delivery: Option<Arc<Delivery>>,
}

impl Endpoint for DeliveryEndpoint {
    fn families(&self) -> &'static [&'static str] {
        &["delivery"]
    }

    fn serves(&self, _family: &str, what: &str) -> bool {
        what == "push"
    }

    fn body_limit(&self, _family: &str, _what: &str) -> usize {
        PUSH_BODY_BYTES_MAX
    }

    fn too_long(&self, limit: usize) -> String {
        format!("push longer than PUSH_BODY_BYTES_MAX ({limit} bytes)")
    }

    fn serve(&self, inbound: Inbound) -> Serving<'_> {
        Box::pin(async move {
            let Some(delivery) = &self.delivery else {
                return Outbound::refused(404, "this host does not run the `delivery` profile");
            };
            let push = match serde_json::from_slice(&inbound.body) {
                Ok(p) => p,
                Err(e) => return Outbound::refused(400, format!("malformed push: {e}")),
            };
            Outbound::json(
                200,
                &delivery
                    .accept_push(&inbound.peer, &inbound.membership, push)
                    .await,
            )
        })
    }
}
