//! Matrices of the models a host holds (issue 34, docs/grdx.md): a staged version of a
//! mapping applied to a matrix as one batch, and what keeps an applied matrix — its
//! batch replayed at open, its value in the model's checkpoint, carried into the next
//! generation.
//!
//! Invariants, stated as absences: no matrix takes a value that is not a version its
//! mapping staged at this host, opened and checked whole again; no applied matrix is
//! lost to a checkpoint's purge or a new generation of its model (same name and
//! geometry); no matrix batch is applied twice (its operation id answers again).

use super::*;
use crate::grdx::Matrix;

/// What one batch changes: inputs, or one matrix's whole value (the version of its
/// mapping it is).
pub(super) enum Change<'a> {
    Inputs(&'a [(&'a str, f64)]),
    Matrix {
        name: &'a str,
        version: u64,
        matrix: &'a Matrix,
    },
}

/// A matrix's value in a model's checkpoint: the version applied and its GRDX bytes
/// (hex).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckpointedMatrix {
    pub name: String,
    pub version: u64,
    pub grdx: String,
}

impl Host {
    /// Version `version` of the mapping matrix `matrix` of `model` reads, as this host
    /// staged it (checked whole again), or why it cannot be applied.
    pub(super) fn staged_for(
        &self,
        model: &str,
        matrix: &str,
        version: u64,
    ) -> Result<Matrix, String> {
        let installed = match self.models.get(model) {
            None => {
                return Err(format!(
                    "host `{}` holds no model `{model}`",
                    self.config.name
                ));
            }
            Some(i) if i.record.retired => return Err(format!("model `{model}` is retired")),
            Some(i) => i,
        };
        let mapping = installed.matrix_sources.get(matrix).ok_or_else(|| {
            format!("model `{model}` has no matrix `{matrix}` (a matrix is declared `matrix NAME rows=R cols=C from=\"mapping:M\"`)")
        })?;
        let delivery = self.delivery.as_ref().ok_or_else(|| {
            format!("matrix `{matrix}` reads mapping `{mapping}`, delivered by the `delivery` profile this host does not run")
        })?;
        delivery.staged_matrix(mapping, version)
    }

    /// Applies to every matrix declared `apply="on-receipt"` the newest version its
    /// mapping staged here, when newer than the one applied: one batch each, added to
    /// `write` (its publications to `published`). Says whether any was applied; one
    /// that cannot be (an output refused, say) is logged and waits for the next feed.
    pub(super) fn apply_received(
        &mut self,
        write: &mut fjall::OwnedWriteBatch,
        published: &mut Vec<(String, u64)>,
    ) -> bool {
        let Some(delivery) = self.delivery.clone() else {
            return false;
        };
        let mut due = Vec::new();
        for (model, installed) in self.models.iter().filter(|(_, i)| !i.record.retired) {
            for matrix in &installed.on_receipt {
                let Some(mapping) = installed.matrix_sources.get(matrix) else {
                    continue;
                };
                let held = delivery.held_position(mapping);
                if held > installed.applied.get(matrix).copied().unwrap_or(0) {
                    due.push((model.clone(), matrix.clone(), mapping.clone(), held));
                }
            }
        }
        let mut any = false;
        for (model, matrix, mapping, version) in due {
            if let Some(reason) = self.unserved(&model, &mapping) {
                tracing::warn!(%model, %matrix, %mapping, %reason, "matrix not applied on receipt");
                continue;
            }
            let applied = delivery.staged_matrix(&mapping, version).and_then(|value| {
                let change = Change::Matrix {
                    name: &matrix,
                    version,
                    matrix: &value,
                };
                self.change(&model, change, write)
            });
            match applied {
                Ok((batch, staged)) => {
                    tracing::info!(%model, %matrix, %mapping, version, batch, "matrix applied on receipt");
                    published.extend(staged);
                    any = true;
                }
                Err(reason) => {
                    tracing::warn!(%model, %matrix, %mapping, version, %reason, "matrix not applied on receipt");
                }
            }
        }
        any
    }

    /// Every matrix of `installed` a version was applied to: its name, that version
    /// and its value.
    fn applied_values(installed: &Installed) -> impl Iterator<Item = (String, u64, Matrix)> + '_ {
        installed
            .runtime
            .matrices()
            .filter_map(|(name, rows, cols, cells)| {
                let version = *installed.applied.get(name)?;
                let matrix = Matrix::new(rows, cols, cells?.to_vec()).ok()?;
                Some((name.to_owned(), version, matrix))
            })
    }

    /// The matrices of `installed` with a value, as its checkpoint holds them.
    pub(super) fn checkpointed_matrices(installed: &Installed) -> Vec<CheckpointedMatrix> {
        Host::applied_values(installed)
            .map(|(name, version, matrix)| CheckpointedMatrix {
                name,
                version,
                grdx: hex::encode(matrix.encode()),
            })
            .collect()
    }

    /// The applied matrices of the current generation that `parsed` (the next one)
    /// still declares with the same geometry: carried as batches after its recompute.
    pub(super) fn carried_matrices(
        current: Option<&Installed>,
        parsed: &grid_spec::Model,
    ) -> Vec<(String, u64, Matrix)> {
        let Some(installed) = current.filter(|i| !i.record.retired) else {
            return Vec::new();
        };
        Host::applied_values(installed)
            .filter(|(name, _, value)| {
                parsed
                    .matrices()
                    .any(|m| m.name == *name && (m.rows, m.cols) == (value.rows(), value.cols()))
            })
            .collect()
    }
}

/// Applies a recorded batch — inputs or a matrix — to `runtime` at open
/// (`journal::replay_batch`): the inputs it set are added to `set`, the matrix's
/// version to `applied`.
pub(super) fn replay(
    runtime: &mut Runtime,
    bytes: &[u8],
    set: &mut BTreeSet<String>,
    applied: &mut BTreeMap<String, u64>,
) -> Result<(), String> {
    use crate::journal::{Recorded, Unreplayable, replay_batch};
    match replay_batch(runtime, bytes) {
        Ok(Recorded::Inputs(inputs)) => set.extend(inputs),
        Ok(Recorded::Matrix { name, version }) => {
            applied.insert(name, version);
        }
        Err(Unreplayable::Undecodable) => return Err("it does not decode".to_owned()),
        Err(Unreplayable::Refused(e)) => return Err(e.to_string()),
    }
    Ok(())
}
