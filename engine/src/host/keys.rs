//! The host rotating its own keys (docs/custody.md, "Rotation").

use super::{Host, failed, succeeded};
use crate::custody::Rotating;
use crate::protocol::Answer;
use crate::store::fatal;

impl Host {
    /// Rotates `key` to `generation` and installs the new keys in the custody every
    /// room shares, so new work uses them at once. Key files are not in the store:
    /// rotation is idempotent by generation, so a crash before the answer is committed
    /// is answered on re-send by "already at generation N", never by a second rotation.
    pub(super) fn rotate(&mut self, op: &str, key: Rotating, generation: u32) -> Answer {
        let name = key.name();
        let from = key.generation(&self.custody.manifest());
        match crate::custody::rotate(&self.dir, key, generation, &self.failpoints) {
            Err(e) => failed(op, e.to_string()),
            Ok(manifest) => match crate::custody::verify(&self.dir) {
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
