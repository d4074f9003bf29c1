//! Mappings (issue 34, docs/grdx.md): a route that carries whole GRDX matrices of one
//! geometry. What differs from a scalar route lives here: the check of a received
//! matrix (opened and decoded whole before any typed value exists), the record of a
//! refused one, the read of the matrices a host holds (staged at a destination,
//! published at the publisher), and the answers of `publish-matrix --op`: hot, then on
//! the installation's shelf past `retain hot-days` (key [`MATRIX_OP_PREFIX`] + op).
//!
//! Invariants, stated as absences: no operation id publishes twice, whether its answer
//! is hot or shelved (one whose shelved answer cannot be read is refused, never
//! published); no answer leaves `delivery-matrix-ops` before the segment holding it is
//! synced and indexed in the write that removes it.

use sha2::{Digest, Sha256};

use super::{Delivery, Role, key, position_of};
use crate::custody::seal::{Sealed, open_payload};
use crate::delivery::api::{DeliveryReply, Geometry, RefusedMatrix, StagedMatrix};
use crate::grdx::Matrix;
use crate::limits::MAPPING_STAGED_REPLY_MAX;
use crate::store::high_water::Signer;
use crate::store::shelf::{self, Gathered, time_key};
use crate::store::{Failpoint, fatal};

/// A `publish-matrix` answer's key on the installation's shelf: this + its operation id
/// (no operation id holds a control character).
pub(super) const MATRIX_OP_PREFIX: &str = "publish-matrix\u{0}";

/// A `publish-matrix` answer as stored: position `u64` BE, SHA-256 of the matrix, the
/// mapping's name.
fn answer_of(record: &[u8]) -> Option<(u64, &[u8], &[u8])> {
    let position = u64::from_be_bytes(*record.first_chunk::<8>()?);
    Some((position, record.get(8..40)?, record.get(40..)?))
}

/// `payload` as a matrix of `geometry`, or why not.
pub(super) fn matrix_of(geometry: Geometry, payload: &[u8]) -> Result<Matrix, String> {
    let matrix = Matrix::decode(payload).map_err(|e| e.to_string())?;
    if (matrix.rows(), matrix.cols()) != (geometry.rows, geometry.cols) {
        return Err(format!(
            "a matrix of {} × {} on a mapping of {} × {}",
            matrix.rows(),
            matrix.cols(),
            geometry.rows,
            geometry.cols
        ));
    }
    Ok(matrix)
}

impl Delivery {
    /// The position operation `op` published on `route`, when it did (the same
    /// matrix); refused when `op` published another matrix or on another mapping.
    pub(super) fn matrix_published(
        &self,
        op: &str,
        route: &str,
        bytes: &[u8],
    ) -> Result<Option<u64>, String> {
        let hot = self
            .ks
            .matrix_ops
            .get(op)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a publish-matrix answer", e));
        let record = match hot {
            Some(record) => record.to_vec(),
            None => {
                let shelved = self.retention.find(
                    &self.host,
                    &format!("{MATRIX_OP_PREFIX}{op}"),
                    ["publish-matrix operation", op, "published again"],
                    |value| Ok(value.to_vec()),
                )?;
                match shelved {
                    Some(record) => record,
                    None => return Ok(None),
                }
            }
        };
        let Some((position, sha, name)) = answer_of(&record) else {
            fatal(&self.dir, "a publish-matrix answer does not decode", op)
        };
        if name != route.as_bytes() || sha != Sha256::digest(bytes).as_slice() {
            return Err(format!(
                "operation `{op}` published another matrix (on `{}`, position {position}); an operation id publishes one matrix once; nothing was published",
                String::from_utf8_lossy(name)
            ));
        }
        Ok(Some(position))
    }

    /// Adds the answer of operation `op` to `write`, beside the publication.
    pub(super) fn record_matrix_op(
        &self,
        op: &str,
        route: &str,
        position: u64,
        bytes: &[u8],
        write: &mut fjall::OwnedWriteBatch,
    ) {
        let mut record = position.to_be_bytes().to_vec();
        record.extend_from_slice(&Sha256::digest(bytes));
        record.extend_from_slice(route.as_bytes());
        write.insert(&self.ks.matrix_ops, op, record);
        let at = crate::store::now_ms();
        write.insert(&self.ks.matrix_ops_by_time, time_key(at, op), []);
    }

    /// Lists by time, at the first open of this version, the answers journaled before
    /// it listed them (once: afterwards every answer is listed in its own write).
    pub(super) fn date_matrix_ops(&self) {
        let listed = self.ks.matrix_ops_by_time.first_key_value().is_some();
        if listed {
            return;
        }
        let at = crate::store::now_ms();
        let mut write = self.database.batch();
        let mut any = false;
        for guard in self.ks.matrix_ops.iter() {
            let op = guard
                .key()
                .unwrap_or_else(|e| fatal(&self.dir, "reading publish-matrix answers", e));
            write.insert(
                &self.ks.matrix_ops_by_time,
                time_key(at, &String::from_utf8_lossy(&op)),
                [],
            );
            any = true;
        }
        if any {
            self.database.commit_or_stop(
                write,
                &self.dir,
                "listing publish-matrix answers by time",
            );
        }
    }

    /// Moves the `publish-matrix` answers given before `cutoff` to the shelf, in at
    /// most `segments_max` segments signed by `sign` (the host's archive pass calls it,
    /// with the cutoff of its own answers). A storage failure stops the host; an archive
    /// that refuses a segment refuses the pass and changes nothing.
    pub fn archive(
        &self,
        cutoff: u64,
        patient: bool,
        segments_max: usize,
        sign: &Signer,
    ) -> Result<Gathered, String> {
        let room = shelf::Room {
            database: &self.database,
            host: &self.host,
            dir: &self.dir,
            prefix: MATRIX_OP_PREFIX,
            keyspaces: [&self.ks.matrix_ops, &self.ks.matrix_ops_by_time],
            what: "publish-matrix answers",
        };
        let pass = (cutoff, patient, segments_max);
        self.retention.archive_room(room, pass, sign, || {
            self.failpoints
                .abort_if_armed(Failpoint::ArchiveBeforeIndex)
        })
    }

    /// Marks `op` on its way to the disk; refused when it already is (a second call
    /// with the same id while the first has not answered).
    pub(super) fn matrix_op_begins(&self, op: &str) -> Result<(), String> {
        let mut flying = self
            .matrix_ops_flying
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !flying.insert(op.to_owned()) {
            return Err(format!(
                "operation `{op}` is being published by an earlier call, which answers it; ask again for its answer"
            ));
        }
        Ok(())
    }

    pub(super) fn matrix_op_ends(&self, op: &str) {
        self.matrix_ops_flying
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(op);
    }

    /// Records that matrix `position` of `route` was refused (nothing of it stored: the
    /// publisher keeps its obligation until a valid value is receipted or the
    /// destination retired) and says why, for the push's answer. The record — the newest
    /// refusal per mapping, its reason capped — is synced before the push is answered,
    /// so a restart still shows it.
    pub(super) fn matrix_refused(&self, route: &str, position: u64, reason: &str) -> String {
        let reason = grid_spec::diagnostic::quoted(reason);
        let reason =
            format!("mapping `{route}`: matrix {position} refused, nothing staged: {reason}");
        tracing::warn!(%route, position, %reason, "matrix refused");
        let record = RefusedMatrix {
            position,
            reason: reason.clone(),
        };
        let mut write = self.database.batch();
        write.insert(
            &self.ks.matrix_refused,
            route,
            serde_json::to_vec(&record).expect("refusals serialize"),
        );
        self.database
            .commit_or_stop(write, &self.dir, "recording a refused matrix");
        reason
    }

    /// The newest matrix this destination refused of mapping `route`.
    fn refused_matrix(&self, route: &str) -> Option<RefusedMatrix> {
        let bytes = self
            .ks
            .matrix_refused
            .get(route)
            .unwrap_or_else(|e| fatal(&self.dir, "reading a refused matrix's record", e))?;
        Some(
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                fatal(&self.dir, "a refused matrix's record does not decode", e)
            }),
        )
    }

    /// The matrices this host holds of mapping `route`, newest `MAPPING_STAGED_REPLY_MAX`
    /// at most: each checked whole again (opened at a destination), with its SHA-256.
    pub(super) fn staged(&self, route: &str) -> DeliveryReply {
        let refuse = |reason: String| DeliveryReply::Refused { reason };
        let Some((install, publishes, held, keyspace)) = self.journal_of(route) else {
            return refuse(format!("host `{}` holds no mapping `{route}`", self.host));
        };
        let Some(geometry) = install.matrix else {
            return refuse(format!(
                "`{route}` is a route: it carries scalar values (gridctl inspect inbox)"
            ));
        };
        let held_from = self.held_from(route);
        let mut versions = Vec::new();
        for guard in keyspace
            .range(key(route, held_from)..=key(route, held))
            .rev()
            .take(MAPPING_STAGED_REPLY_MAX)
        {
            let (k, v) = guard
                .into_inner()
                .unwrap_or_else(|e| fatal(&self.dir, "reading held matrices", e));
            let Some(position) = position_of(&k, route) else {
                continue;
            };
            let payload = if publishes {
                v.get(8..)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| "malformed".to_owned())
            } else {
                self.opened(&install.name, &install.membership, position, &v)
            };
            let checked = payload.and_then(|p| matrix_of(geometry, &p).map(|m| (m, p)));
            match checked {
                Ok((matrix, payload)) => versions.push(StagedMatrix {
                    position,
                    rows: matrix.rows(),
                    cols: matrix.cols(),
                    sha256: hex::encode(Sha256::digest(&payload)),
                }),
                Err(reason) => {
                    return refuse(format!(
                        "mapping `{route}`: matrix {position} as held does not check ({reason})"
                    ));
                }
            }
        }
        versions.reverse();
        DeliveryReply::Staged {
            route: route.to_owned(),
            role: if publishes {
                "publisher"
            } else {
                "destination"
            }
            .to_owned(),
            versions,
            held_from,
            refused: self.refused_matrix(route),
        }
    }

    /// Every mapping this host is a destination of, with the newest version it stages.
    pub(super) fn staged_mappings(&self) -> Vec<(String, u64)> {
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(name, r)| match &r.role {
                Role::Destination(inbox) if r.install.matrix.is_some() => {
                    Some((name.clone(), inbox.held()))
                }
                _ => None,
            })
            .collect()
    }

    /// Mapping → (lowest, highest) version this host stages, for every mapping it is a
    /// destination of (nothing staged yet: (1, 0)).
    pub fn staged_ranges(&self) -> std::collections::BTreeMap<String, (u64, u64)> {
        self.staged_mappings()
            .into_iter()
            .map(|(name, held)| {
                let from = self.held_from(&name);
                (name, (from, held))
            })
            .collect()
    }

    /// Version `position` of mapping `route` as this destination staged it: opened and
    /// checked whole again, or why not (not a destination of a mapping, not staged,
    /// purged).
    pub fn staged_matrix(&self, route: &str, position: u64) -> Result<Matrix, String> {
        let install = {
            let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            match routes.get(route) {
                Some(r) if r.install.matrix.is_some() => match &r.role {
                    Role::Destination(inbox) if position >= 1 && position <= inbox.held() => {
                        r.install.clone()
                    }
                    Role::Destination(inbox) => {
                        return Err(format!(
                            "host `{}` has not staged version {position} of mapping `{route}` (it holds 1 to {})",
                            self.host,
                            inbox.held()
                        ));
                    }
                    Role::Publisher(_) => {
                        return Err(format!(
                            "host `{}` publishes mapping `{route}`; a matrix is applied where it is staged, at a destination",
                            self.host
                        ));
                    }
                },
                Some(_) => return Err(format!("`{route}` is a route, not a mapping")),
                None => return Err(format!("host `{}` holds no mapping `{route}`", self.host)),
            }
        };
        let geometry = install.matrix.expect("a mapping");
        let stored = self
            .ks
            .inbox
            .get(key(route, position))
            .unwrap_or_else(|e| fatal(&self.dir, "reading a staged matrix", e))
            .ok_or_else(|| {
                format!(
                    "version {position} of mapping `{route}` is no longer held here (purged below {}: a destination keeps the newest MAPPING_STAGED_KEPT_MAX ({}) staged versions)",
                    self.held_from(route),
                    crate::limits::MAPPING_STAGED_KEPT_MAX
                )
            })?;
        let payload = self.opened(&install.name, &install.membership, position, &stored)?;
        matrix_of(geometry, &payload)
            .map_err(|e| format!("version {position} of mapping `{route}` does not check: {e}"))
    }

    /// A payload as a destination of an encrypted route stored it (sealed), opened.
    fn opened(
        &self,
        route: &str,
        membership: &str,
        position: u64,
        stored: &[u8],
    ) -> Result<Vec<u8>, String> {
        let sealed: Sealed = serde_json::from_slice(stored)
            .map_err(|e| format!("sealed matrix {position} does not decode: {e}"))?;
        self.custody
            .open_sealed(|secret| open_payload(secret, route, membership, position, &sealed))
            .map_err(|e| format!("matrix {position}: {e}"))
    }
}
