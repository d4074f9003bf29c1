//! The local control API: JSON lines over the Unix socket `DIR/control.sock` (0600).
//! One thread per connection. Calls for a room that answers outside the host's lock
//! (the authority: a write waits for a quorum; delivery: a publish waits for the
//! authority and an fsync; Processes: a run waits for its receiver) go to that room;
//! every other call is handled by the host, one at a time.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;

use super::Started;
use crate::host::control::socket_path;
use crate::host::{Handled, HostError};
use crate::limits::{CONTROL_CONNECTIONS_MAX, CONTROL_LINE_BYTES_MAX};
use crate::protocol::{Call, Reply};

/// Binds the control socket (replacing a stale one: the store's lock already proved
/// no other gridd runs on this directory) and serves until the process ends.
pub fn serve(started: Started) -> Result<(), HostError> {
    let (path, name) = {
        let host = started.host.lock().unwrap_or_else(|p| p.into_inner());
        (socket_path(host.dir()), host.name().to_owned())
    };
    let listener = bind(&path)?;
    tracing::info!(host = name, socket = %path.display(), "serving the control socket");
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let requests = crate::metrics::owner_requests(&name, "socket");
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if open.load(std::sync::atomic::Ordering::SeqCst) >= CONTROL_CONNECTIONS_MAX {
            let mut stream = stream;
            tracing::warn!(
                host = name,
                peer = "control socket",
                reason = "CONTROL_CONNECTIONS_MAX",
                "connection refused"
            );
            let _ = reply(
                &mut stream,
                &Reply::Refused {
                    reason: format!(
                        "too many control connections (CONTROL_CONNECTIONS_MAX = {CONTROL_CONNECTIONS_MAX})"
                    ),
                },
            );
            continue;
        }
        let started = started.clone();
        let open = open.clone();
        let requests = requests.clone();
        open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::spawn(move || {
            connection(stream, &started, &requests);
            open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        });
    }
    Ok(())
}

/// Binds the control socket at `path` (0600), replacing a stale one: the store's lock
/// already proved no other gridd runs on this directory.
pub(super) fn bind(path: &std::path::Path) -> Result<UnixListener, HostError> {
    let io = |source| HostError::Io {
        path: path.to_owned(),
        source,
    };
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    Ok(listener)
}

/// One reply line.
pub(super) fn reply(stream: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).expect("replies serialize");
    line.push(b'\n');
    stream.write_all(&line)
}

/// The next call on a connection: `None` once it ends; `Err((refusal, close))` for a
/// line that is no call — a malformed one (the connection goes on) or one longer than
/// CONTROL_LINE_BYTES_MAX (it closes: the rest of that line is never read as calls).
pub(super) fn next_call(reader: &mut BufReader<UnixStream>) -> Option<Result<Call, (Reply, bool)>> {
    let mut line = String::new();
    match reader.take(CONTROL_LINE_BYTES_MAX).read_line(&mut line) {
        Ok(0) | Err(_) => return None,
        Ok(_) => {}
    }
    if !line.ends_with('\n') {
        let reason =
            format!("call longer than CONTROL_LINE_BYTES_MAX ({CONTROL_LINE_BYTES_MAX} bytes)");
        return Some(Err((Reply::Refused { reason }, true)));
    }
    Some(serde_json::from_str(&line).map_err(|e| {
        let reason = format!("malformed call: {e}");
        (Reply::Refused { reason }, false)
    }))
}

/// `requests`: this host's count of `socket` calls (`grid_owner_requests`).
fn connection(
    stream: UnixStream,
    started: &Started,
    requests: &prometheus_client::metrics::counter::Counter,
) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let call = match next_call(&mut reader) {
            None => return,
            Some(Ok(call)) => call,
            Some(Err((refusal, close))) => {
                if reply(&mut writer, &refusal).is_err() || close {
                    return;
                }
                continue;
            }
        };
        requests.inc();
        let handled = match call {
            // The authority answers outside the host's lock: a write may wait for a
            // quorum.
            Call::Authority {
                membership,
                request,
            } => Handled::Reply(match started.authorities.pick(membership.as_deref()) {
                Ok(authority) => Reply::Authority(authority.handle_local(request)),
                Err(reason) => Reply::Refused { reason },
            }),
            // Delivery too: a publish waits for the authority and an fsync.
            Call::Delivery { request } => Handled::Reply(match &started.delivery {
                Some(delivery) => Reply::Delivery(Box::new(delivery.handle_local(request))),
                None => Reply::Refused {
                    reason: "this host does not run the `delivery` profile".to_owned(),
                },
            }),
            // And Processes: a run waits for its receiver.
            Call::Process { request } => Handled::Reply(match &started.processes {
                Some(processes) => Reply::Process(Box::new(processes.handle_local(request))),
                None => Reply::Refused {
                    reason: "this host does not run the `processes` profile".to_owned(),
                },
            }),
            // And the ledger: a batch waits for its fsync (group commit).
            Call::Ledger { request } => match &started.ledgers {
                Some(ledgers) => match ledgers.handle_local(request) {
                    (_, true) => Handled::DropReply,
                    (reply, false) => Handled::Reply(Reply::Ledger(Box::new(reply))),
                },
                None => Handled::Reply(Reply::Refused {
                    reason: "this host does not run the `ledger` profile".to_owned(),
                }),
            },
            // And the wallet: an archive asks the owners it reaches.
            Call::Wallet { request } => Handled::Reply(wallet_call(started, request)),
            // And missions: a step waits for the authority and the issuer.
            Call::Mission { request } => Handled::Reply(match &started.missions {
                Some(missions) => Reply::Mission(Box::new(missions.handle_local(request))),
                None => Reply::Refused {
                    reason: "this host does not run the `missions` profile".to_owned(),
                },
            }),
            // And exports: a read of its mappings, outside the host's lock.
            Call::Export { request } => Handled::Reply(match &started.exports {
                Some(exports) => Reply::Export(Box::new(exports.handle(request))),
                None => Reply::Refused {
                    reason: "this host does not run the `exports` profile".to_owned(),
                },
            }),
            // And decisions: a cast or an apply waits for a Process.
            Call::Decision { request } => Handled::Reply(match &started.decisions {
                Some(decisions) => Reply::Decision(Box::new(decisions.handle_local(request))),
                None => Reply::Refused {
                    reason: "this host does not run the `decisions` profile".to_owned(),
                },
            }),
            // The custody: locking or unlocking its keys, on this socket only.
            Call::Custody { request } => Handled::Reply(
                started
                    .host
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .custody_call(&request),
            ),
            // Reading back the archive reads every segment: outside the host's lock.
            Call::VerifyArchive => {
                let verify = started
                    .host
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .verify_archive();
                Handled::Reply(Reply::ArchiveVerified(Box::new(verify())))
            }
            // What the host holds, with the missions its room holds.
            Call::Observe => super::observe(&started.host, started.missions.as_deref()),
            // What the control plane shows of this host (read only).
            Call::Inspect => super::inspection::Inspection::of(started).inspect(),
            call => started
                .host
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .handle(call),
        };
        match handled {
            Handled::Reply(r) => {
                if reply(&mut writer, &r).is_err() {
                    return;
                }
            }
            // A failpoint: the operation is durable, its reply is lost.
            Handled::DropReply => {
                let _ = writer.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
}

/// A wallet call: the archive wallet's, or (without the profile) the open waits of
/// the host's caller journal — none without `processes`.
fn wallet_call(started: &Started, request: crate::wallet::api::WalletCall) -> Reply {
    use crate::wallet::api::{WalletCall, WalletReply};
    let reply = match (&started.wallet, &started.processes, request) {
        (Some(wallet), _, request) => wallet.handle_local(request),
        (None, Some(processes), WalletCall::Waits) => WalletReply::Waits {
            host: processes.host_name().to_owned(),
            waits: processes.open_wait_views(),
        },
        (None, None, WalletCall::Waits) => WalletReply::Waits {
            host: started
                .host
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .name()
                .to_owned(),
            waits: Vec::new(),
        },
        (None, _, _) => WalletReply::Refused {
            reason: "this host does not run the `archive-wallet` profile".to_owned(),
        },
    };
    Reply::Wallet(Box::new(reply))
}
