//! The Processes transport endpoint: `POST /process/M/{run,status,cancel,surrender}` (the direct
//! service) and `POST /mailbox/M/{deposit,fetch,collect,forget}` (the mailbox this host
//! keeps), from participants certified in M, acting as their certificate's
//! participant. A failpoint may lose a run's reply: the connection closes without one.

use std::sync::Arc;

use super::api::MailboxReply;
use super::service::Processes;
use crate::limits::PROCESS_BODY_BYTES_MAX;
use crate::transport::endpoint::{Endpoint, Inbound, Outbound, Serving, parse};

/// `None` when the host does not select `processes`: calls are refused by name.
pub struct ProcessesEndpoint {
    pub processes: Option<Arc<Processes>>,
}

impl Endpoint for ProcessesEndpoint {
    fn families(&self) -> &'static [&'static str] {
        &["process", "mailbox"]
    }

    fn serves(&self, family: &str, what: &str) -> bool {
        match family {
            "process" => matches!(what, "run" | "status" | "cancel" | "surrender"),
            _ => matches!(what, "deposit" | "fetch" | "collect" | "forget"),
        }
    }

    fn body_limit(&self, _family: &str, _what: &str) -> usize {
        PROCESS_BODY_BYTES_MAX
    }

    fn too_long(&self, limit: usize) -> String {
        format!("body longer than PROCESS_BODY_BYTES_MAX ({limit} bytes)")
    }

    fn serve(&self, inbound: Inbound) -> Serving<'_> {
        Box::pin(async move {
            let Some(processes) = &self.processes else {
                return Outbound::refused(404, "this host does not run the `processes` profile");
            };
            let peer = inbound.peer.as_str();
            let body = inbound.body.as_slice();
            let mailbox = |reply: MailboxReply| Outbound::json(200, &reply);
            match (inbound.family.as_str(), inbound.what.as_str()) {
                ("process", "run") => match parse(body) {
                    Ok(run) => {
                        let reply = processes
                            .serve_run(peer, &inbound.membership, "direct", run)
                            .await;
                        if processes.drop_reply() {
                            return Outbound::Lost;
                        }
                        Outbound::json(200, &reply)
                    }
                    Err(reason) => Outbound::refused(400, reason),
                },
                ("process", "cancel") => match parse(body) {
                    Ok(query) => Outbound::json(200, &processes.serve_cancel(peer, &query).await),
                    Err(reason) => Outbound::refused(400, reason),
                },
                ("process", "surrender") => match parse(body) {
                    Ok(query) => {
                        Outbound::json(200, &processes.serve_surrender(peer, &query).await)
                    }
                    Err(reason) => Outbound::refused(400, reason),
                },
                ("process", _) => match parse(body) {
                    Ok(query) => Outbound::json(200, &processes.status(peer, &query)),
                    Err(reason) => Outbound::refused(400, reason),
                },
                ("mailbox", "deposit") => match parse(body) {
                    Ok(deposit) => mailbox(processes.deposit(peer, deposit).await),
                    Err(reason) => mailbox(MailboxReply::Refused { reason }),
                },
                ("mailbox", "forget") => match parse(body) {
                    Ok(forget) => mailbox(processes.forget_deposits(peer, &forget).await),
                    Err(reason) => mailbox(MailboxReply::Refused { reason }),
                },
                ("mailbox", "fetch") => match parse(body) {
                    Ok(fetch) => mailbox(processes.fetch(peer, &fetch).await),
                    Err(reason) => mailbox(MailboxReply::Refused { reason }),
                },
                (_, _) => match parse(body) {
                    Ok(collect) => mailbox(processes.collect(peer, &collect).await),
                    Err(reason) => mailbox(MailboxReply::Refused { reason }),
                },
            }
        })
    }
}
