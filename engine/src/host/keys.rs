//! The host rotating its own keys (docs/custody.md, "Rotation") and locking them at
//! rest ("Locked custody").

use super::{Host, failed, succeeded};
use crate::custody::Rotating;
use crate::protocol::{Answer, CustodyCall, Reply};
use crate::store::fatal;

impl Host {
    /// Rotates `key` to `generation` and installs the new keys in the custody every
    /// room shares, so new work uses them at once. Key files are not in the store:
    /// rotation is idempotent by generation, so a crash before the answer is committed
    /// is answered on re-send by "already at generation N", never by a second rotation.
    pub(super) fn rotate(&mut self, op: &str, key: Rotating, generation: u32) -> Answer {
        let name = key.name();
        let from = key.generation(&self.custody.manifest());
        // A locked custody's new signing or mail key is written under its passphrase.
        let passphrase = self.custody.passphrase();
        let passphrase = passphrase.as_deref().map(Vec::as_slice);
        match crate::custody::rotate(&self.dir, key, generation, passphrase, &self.failpoints) {
            Err(e) => failed(op, e.to_string()),
            Ok(manifest) => match crate::custody::open(&self.dir, passphrase) {
                Err(e) => fatal(&self.dir, "reloading rotated keys", e),
                Ok(rotated) => {
                    self.custody.replace(rotated);
                    let to = key.generation(&manifest);
                    if from == to {
                        succeeded(op, format!("{name} key already at generation {from}"))
                    } else {
                        succeeded(
                            op,
                            format!("{name} key rotated from generation {from} to {to}"),
                        )
                    }
                }
            },
        }
    }
}

impl Host {
    /// The host's custody, shared: what every room signs and opens with.
    pub fn custody(&self) -> &crate::custody::Custody {
        &self.custody
    }

    /// Whether this host's custody is locked: gridd serves reads only until unlocked.
    pub fn custody_locked(&self) -> bool {
        self.custody.is_locked()
    }

    /// A custody call from the control socket: lock (or change the passphrase), or
    /// unlock. Refused, changing nothing, when the passphrase does not fit.
    pub fn custody_call(&self, request: &CustodyCall) -> Reply {
        let name = &self.config.name;
        let said = match request {
            CustodyCall::Lock { passphrase } => {
                let again = self.custody.is_encrypted();
                let locked = self.custody.lock(passphrase.as_bytes(), &self.failpoints);
                locked.map(|files| {
                    let what = if again { "passphrase changed" } else { "locked" };
                    tracing::info!(host = name, files = files.join(", "), "custody {what}");
                    format!(
                        "custody of `{name}` {what}: {} encrypted at rest (the running keys stay in use; the next start waits for `gridctl custody unlock {name}`)",
                        files.join(", ")
                    )
                })
            }
            CustodyCall::Unlock { passphrase } => {
                if self.custody.is_locked() {
                    self.custody.unlock(passphrase.as_bytes()).map(|done| {
                        for line in &done {
                            tracing::warn!(host = name, "{line}");
                        }
                        tracing::info!(host = name, "custody unlocked");
                        format!(
                            "custody of `{name}` unlocked: every key verified against its manifest"
                        )
                    })
                } else if !self.custody.is_encrypted() {
                    return Reply::Refused {
                        reason: format!("the custody of `{name}` is not locked: nothing to unlock"),
                    };
                } else {
                    // Already unlocked: the passphrase is still checked, never assumed.
                    crate::custody::open(&self.dir, Some(passphrase.as_bytes()))
                        .map(|_| format!("custody of `{name}` already unlocked"))
                }
            }
        };
        match said {
            Ok(said) => Reply::Custody {
                encrypted: self.custody.is_encrypted(),
                locked: self.custody.is_locked(),
                said,
            },
            Err(e) => Reply::Refused {
                reason: e.to_string(),
            },
        }
    }
}
