//! The authority's transport endpoint: `POST /raft/M/{append,vote,snapshot,snapshot-ref}` (Raft
//! messages between voters) and `POST /authority/M/forward` (calls forwarded to the
//! leader), from participants certified in M, to this host's voter of M.

use super::network::SNAPSHOT_META_HEADER;
use super::service::{Authorities, Forwarded};
use crate::limits::{RAFT_MESSAGE_BYTES_MAX, SNAPSHOT_BYTES_MAX};
use crate::transport::endpoint::{Endpoint, Inbound, Outbound, Serving, parse};

pub struct AuthorityEndpoint {
    pub authorities: Authorities,
}

impl Endpoint for AuthorityEndpoint {
    fn families(&self) -> &'static [&'static str] {
        &["raft", "authority"]
    }

    fn serves(&self, family: &str, what: &str) -> bool {
        match family {
            "raft" => matches!(what, "append" | "vote" | "snapshot" | "snapshot-ref"),
            _ => what == "forward",
        }
    }

    fn header(&self) -> Option<&'static str> {
        Some(SNAPSHOT_META_HEADER)
    }

    fn body_limit(&self, _family: &str, what: &str) -> usize {
        if what == "snapshot" {
            SNAPSHOT_BYTES_MAX
        } else {
            RAFT_MESSAGE_BYTES_MAX
        }
    }

    fn serve(&self, inbound: Inbound) -> Serving<'_> {
        Box::pin(async move {
            let Some(authority) = self
                .authorities
                .by_membership
                .get(&inbound.membership)
                .cloned()
            else {
                return Outbound::refused(
                    404,
                    format!("this host runs no authority of `{}`", inbound.membership),
                );
            };
            if inbound.family == "raft" {
                return match authority
                    .serve_raft(&inbound.what, inbound.header.as_deref(), inbound.body)
                    .await
                {
                    Ok(body) => Outbound::Reply { status: 200, body },
                    Err(reason) => Outbound::refused(400, reason),
                };
            }
            let forwarded: Forwarded = match parse(&inbound.body) {
                Ok(f) => f,
                Err(reason) => return Outbound::refused(400, reason),
            };
            Outbound::json(
                200,
                &authority.handle(forwarded.call, Some(&inbound.peer)).await,
            )
        })
    }
}
