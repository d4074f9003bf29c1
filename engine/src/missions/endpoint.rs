//! The issuer's transport endpoint: `POST /mission/M/{issue,return,close}` from
//! participants certified in M, acting as their certificate's participant (the
//! mission's host). A failpoint may lose an issue's reply: the connection closes
//! without one.

use std::sync::Arc;

use super::service::Missions;
use crate::limits::MISSION_BODY_BYTES_MAX;
use crate::transport::endpoint::{Endpoint, Inbound, Outbound, Serving, parse};

/// `None` when the host does not select `missions`: calls are refused by name.
pub struct MissionsEndpoint {
    pub missions: Option<Arc<Missions>>,
}

impl Endpoint for MissionsEndpoint {
    fn families(&self) -> &'static [&'static str] {
        &["mission"]
    }

    fn serves(&self, _family: &str, what: &str) -> bool {
        matches!(what, "issue" | "return" | "close")
    }

    // A consumption record lists every run of the mission with its signed outcome.
    fn body_limit(&self, _family: &str, _what: &str) -> usize {
        MISSION_BODY_BYTES_MAX
    }

    fn too_long(&self, limit: usize) -> String {
        format!("body longer than MISSION_BODY_BYTES_MAX ({limit} bytes)")
    }

    fn serve(&self, inbound: Inbound) -> Serving<'_> {
        Box::pin(async move {
            let Some(missions) = &self.missions else {
                return Outbound::refused(404, "this host does not run the `missions` profile");
            };
            let peer = inbound.peer.as_str();
            let body = inbound.body.as_slice();
            match inbound.what.as_str() {
                "issue" => match parse(body) {
                    Ok(query) => match missions.serve_issue(peer, query).await {
                        Some(reply) => Outbound::json(200, &reply),
                        None => Outbound::Lost,
                    },
                    Err(reason) => Outbound::refused(400, reason),
                },
                "return" => match parse(body) {
                    Ok(query) => Outbound::json(200, &missions.serve_return(peer, query).await),
                    Err(reason) => Outbound::refused(400, reason),
                },
                _ => match parse(body) {
                    Ok(query) => Outbound::json(
                        200,
                        &missions.serve_close(peer, &inbound.membership, query).await,
                    ),
                    Err(reason) => Outbound::refused(400, reason),
                },
            }
        })
    }
}
