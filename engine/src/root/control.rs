//! `POST /control` on the transport: the host's control API for remote use, one JSON
//! call in the body and one JSON reply, handled by the host like a call on its Unix
//! socket.

use std::sync::{Arc, Mutex};

use crate::host::{Handled, Host};
use crate::limits::CONTROL_LINE_BYTES_MAX;
use crate::protocol::{Call, Reply};
use crate::transport::endpoint::{Endpoint, Inbound, Outbound, Serving};

pub struct ControlEndpoint {
    pub host: Arc<Mutex<Host>>,
}

impl Endpoint for ControlEndpoint {
    fn families(&self) -> &'static [&'static str] {
        &["control"]
    }

    fn serves(&self, _family: &str, _what: &str) -> bool {
        true
    }

    fn body_limit(&self, _family: &str, _what: &str) -> usize {
        CONTROL_LINE_BYTES_MAX as usize
    }

    fn too_long(&self, _limit: usize) -> String {
        format!("call longer than CONTROL_LINE_BYTES_MAX ({CONTROL_LINE_BYTES_MAX} bytes)")
    }

    fn serve(&self, inbound: Inbound) -> Serving<'_> {
        let host = self.host.clone();
        Box::pin(async move {
            let call: Call = match serde_json::from_slice(&inbound.body) {
                Ok(call) => call,
                Err(e) => {
                    return Outbound::json(
                        400,
                        &Reply::Refused {
                            reason: format!("malformed call: {e}"),
                        },
                    );
                }
            };
            let handled = tokio::task::spawn_blocking(move || {
                host.lock().unwrap_or_else(|p| p.into_inner()).handle(call)
            })
            .await;
            match handled {
                Ok(Handled::Reply(reply)) => Outbound::json(200, &reply),
                // A failpoint: the operation is durable, its reply is lost.
                Ok(Handled::DropReply) | Err(_) => Outbound::Reply {
                    status: 503,
                    body: Vec::new(),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::transport::endpoint::Outbound;

    /// The transport writes every family's refusal itself; it must read exactly as each
    /// room's own `Refused` reply does.
    #[test]
    fn the_shared_refusal_is_every_reply_types_refusal() {
        let Outbound::Reply { body, .. } = Outbound::refused(404, "no") else {
            panic!("a refusal is a reply");
        };
        let reason = "no".to_owned();
        let expected = [
            serde_json::to_vec(&crate::protocol::Reply::Refused {
                reason: reason.clone(),
            }),
            serde_json::to_vec(&crate::delivery::api::PushReply::Refused {
                reason: reason.clone(),
            }),
            serde_json::to_vec(&crate::processes::api::ServiceReply::Refused {
                reason: reason.clone(),
            }),
            serde_json::to_vec(&crate::processes::api::MailboxReply::Refused { reason }),
        ];
        for each in expected {
            assert_eq!(each.unwrap(), body);
        }
    }
}
