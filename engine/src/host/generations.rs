//! A model's generations: installing another definition under the same name is a new
//! generation, started by one recompute batch.
//!
//! Invariants:
//! - an input a batch set (in the current generation, a carried value included) keeps
//!   its value in the next one, if the new definition still has it; every other input
//!   takes the new definition's default — changing `default=2` to `3` changes the value
//!   of an input no batch ever set;
//! - every generation after the first starts with batch 1, the recompute: the carried
//!   inputs (perhaps none) applied to the new definition, journaled in the same synced
//!   write as the model record and the answer, so recovery replays it exactly once;
//! - a matrix a version was applied to keeps that value (and version) in the next
//!   generation when the new definition declares it with the same geometry: one batch
//!   each after the recompute, in that same write (issue 34);
//! - the recompute publishes, like any batch, each output (same cell, same route as in
//!   the previous generation) whose number it changed, staged in that same write after
//!   the publishing right was confirmed — or the install is refused and changes nothing.
//!   An output new in this generation publishes from its first change, as a first
//!   generation's outputs do.

use super::*;

impl Host {
    /// Stages a new generation of model `name` (`parsed`, admitted as `runtime`, whose
    /// canonical text is `canonical`) in `write`: its record, its recompute batch and
    /// the publications of the outputs that batch changed. Returns the answer's detail
    /// and what changes in memory once `write` is durable; `Err` (nothing staged) when
    /// a changed output cannot be published.
    pub(super) fn stage_generation(
        &self,
        name: &str,
        parsed: &grid_spec::Model,
        mut runtime: Runtime,
        (canonical, serves): (String, &[String]),
        write: &mut fjall::OwnedWriteBatch,
    ) -> Result<(String, AfterCommit), String> {
        let current = self.models.get(name);
        let generation = current.map_or(1, |i| i.record.generation + 1);
        let carried: Vec<(String, f64)> = current
            .filter(|i| !i.record.retired)
            .map(|installed| {
                parsed
                    .inputs()
                    .filter(|input| installed.set.contains(&input.name))
                    .filter_map(|input| match installed.runtime.value(&input.name) {
                        Some(Value::Number(v)) => Some((input.name.clone(), v)),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let named: Vec<(&str, f64)> = carried.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        runtime
            .apply(&named)
            .expect("carried inputs exist and are finite");
        let matrices = Host::carried_matrices(current, parsed);
        for (matrix, _, value) in &matrices {
            runtime
                .apply_matrix(matrix, value)
                .expect("carried matrices exist with their geometry");
        }
        let published = match current {
            Some(previous) => {
                self.stage_recompute(previous, parsed, &runtime, serves.len() > 1, write)?
            }
            None => Vec::new(),
        };
        let batches = if current.is_some() {
            write.insert(
                &self.batches,
                batch_key(name, generation, 1),
                encode_batch(&named),
            );
            for (n, (matrix, version, value)) in (2u64..).zip(&matrices) {
                write.insert(
                    &self.batches,
                    batch_key(name, generation, n),
                    crate::journal::encode_matrix_batch(matrix, *version, value),
                );
            }
            1 + matrices.len() as u64
        } else {
            0
        };
        let record = ModelRecord {
            model: canonical,
            retired: false,
            generation,
            serves: serves.to_vec(),
        };
        write.insert(
            &self.models_keyspace,
            name,
            serde_json::to_vec(&record).expect("records serialize"),
        );
        let mut detail = if generation == 1 {
            format!("installed model {name}")
        } else {
            format!("installed model {name} generation {generation}")
        };
        if !published.is_empty() {
            let routes: Vec<&str> = published.iter().map(|(r, _)| r.as_str()).collect();
            detail.push_str(&format!(
                "; its recompute (batch 1) published on {}",
                routes.join(", ")
            ));
        }
        let set = carried.into_iter().map(|(input, _)| input).collect();
        let mut installed = Installed::new(record, runtime, batches, set, parsed);
        installed.applied = matrices
            .into_iter()
            .map(|(matrix, version, _)| (matrix, version))
            .collect();
        let name = name.to_owned();
        Ok((
            detail,
            Box::new(move |host: &mut Host| {
                host.models.insert(name, installed);
                host.settle(published);
            }),
        ))
    }

    /// Stages a publication of every output of the new definition whose number the
    /// recompute changed from what the previous generation held for the same cell on
    /// the same route; returns the staged (route, position)s. Refused, staging
    /// nothing, when a publishing right is not confirmed or an outbox refuses.
    fn stage_recompute(
        &self,
        previous: &Installed,
        parsed: &grid_spec::Model,
        runtime: &Runtime,
        isolate: bool,
        write: &mut fjall::OwnedWriteBatch,
    ) -> Result<Vec<(String, u64)>, String> {
        let (outputs, _) = routes_of(parsed);
        let mut publications = Vec::new();
        for (cell, route) in &outputs {
            if !previous.outputs.contains(&(cell.clone(), route.clone())) {
                continue;
            }
            let Some(Value::Number(now)) = runtime.value(cell) else {
                continue;
            };
            if matches!(previous.runtime.value(cell), Some(Value::Number(was)) if was.to_bits() == now.to_bits())
            {
                continue;
            }
            let Some(delivery) = &self.delivery else {
                return Err(format!("output `{cell}` needs the `delivery` profile"));
            };
            let epoch = delivery.check_right_blocking(route).map_err(|reason| {
                format!(
                    "output `{cell}` cannot publish on route `{route}`: {reason}; nothing applied"
                )
            })?;
            publications.push((route.clone(), now, epoch));
        }
        let Some(delivery) = self.delivery.as_ref().filter(|_| !publications.is_empty()) else {
            return Ok(Vec::new());
        };
        let staged = delivery
            .stage_all(&publications, isolate, write)
            .map_err(|reason| format!("{reason}; nothing applied"))?;
        Ok(super::at_positions(&publications, staged))
    }
}
