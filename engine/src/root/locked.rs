//! A host whose custody is locked (docs/custody.md, "Locked custody"): gridd has opened
//! its store and serves its control socket for reads only — what the host holds,
//! retained answers, values, storage, tags, obligations — and `custody unlock`. No
//! room starts, no transport listens, nothing signs and nothing is admitted until the
//! passphrase decrypts every key; then [`super::start`] goes on as for any host.
//!
//! Invariants, stated as absences: no call that writes (`submit`, `acknowledge`, a
//! room's call) is served here; a wrong passphrase leaves nothing changed; the
//! passphrase is never logged or answered back.

use std::io::BufReader;
use std::os::unix::net::UnixStream;

use super::socket::reply as reply_line;

use crate::host::control::socket_path;
use crate::host::{Handled, Host, HostError};
use crate::limits::LOCKED_CONTROL_IDLE;
use crate::protocol::{Call, CustodyCall, Reply};

/// Serves `host`'s control socket, one connection at a time (each closed after
/// LOCKED_CONTROL_IDLE without a call), until a `custody unlock` succeeds; the
/// listener is closed before returning.
pub(super) fn serve_until_unlocked(host: &mut Host) -> Result<(), HostError> {
    let path = socket_path(host.dir());
    let listener = super::socket::bind(&path)?;
    tracing::warn!(
        host = host.name(),
        socket = %path.display(),
        "custody locked: serving reads only until `gridctl custody unlock {}`",
        host.name()
    );
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if connection(stream, host) {
            return Ok(());
        }
    }
    Ok(())
}

/// Serves one connection; whether it unlocked the custody.
fn connection(stream: UnixStream, host: &mut Host) -> bool {
    let _ = stream.set_read_timeout(Some(LOCKED_CONTROL_IDLE));
    let Ok(mut writer) = stream.try_clone() else {
        return false;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let reply = match super::socket::next_call(&mut reader) {
            None => return false,
            Some(Err((refusal, close))) => {
                if reply_line(&mut writer, &refusal).is_err() || close {
                    return false;
                }
                continue;
            }
            Some(Ok(Call::Custody { request })) => {
                let unlocking = matches!(request, CustodyCall::Unlock { .. });
                let reply = host.custody_call(&request);
                if unlocking && !host.custody_locked() {
                    let _ = reply_line(&mut writer, &reply);
                    return true;
                }
                reply
            }
            Some(Ok(
                call @ (Call::Observe
                | Call::Answer { .. }
                | Call::Values { .. }
                | Call::Storage
                | Call::Tag { .. }
                | Call::Obligations { .. }),
            )) => match host.handle(call) {
                Handled::Reply(reply) => reply,
                Handled::DropReply => return false,
            },
            Some(Ok(_)) => Reply::Refused {
                reason: format!(
                    "the custody of `{}` is locked: it serves reads and retained answers only, signs and admits nothing, until `gridctl custody unlock {} --passphrase-file FILE`",
                    host.name(),
                    host.name()
                ),
            },
        };
        if reply_line(&mut writer, &reply).is_err() {
            return false;
        }
    }
}
