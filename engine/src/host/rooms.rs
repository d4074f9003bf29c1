//! The rooms a host opens in its own store (the composition root calls these for the
//! profiles the host selects), and the quiescence a mission holds its models in.

use super::{Host, HostError};

impl Host {
    /// Opens the `delivery` profile in this host's store and attaches it: the model
    /// owner stages publications in its batches' writes. The composition root calls
    /// this when the host selects `delivery`.
    pub fn open_delivery(
        &mut self,
    ) -> Result<std::sync::Arc<crate::delivery::service::Delivery>, HostError> {
        let delivery = crate::delivery::service::Delivery::open(
            &self.database,
            &self.dir,
            &self.config.name,
            self.custody.clone(),
            self.failpoints.clone(),
            self.retention(),
            (
                self.config.capacity,
                self.config.membership_capacity.clone(),
            ),
        )
        .map_err(|detail| HostError::Damaged {
            path: self.dir.join("store"),
            detail,
        })?;
        self.delivery = Some(delivery.clone());
        Ok(delivery)
    }

    /// Opens the `exports` profile in this host's store (profile `delivery` opened
    /// first: an export carries one route's values onto another) and attaches it.
    pub fn open_exports(
        &mut self,
    ) -> Result<std::sync::Arc<crate::exports::service::Exports>, HostError> {
        let Some(delivery) = self.delivery.clone() else {
            return Err(HostError::Config {
                path: self.dir.join(crate::config::HOST_CONFIG_FILE),
                reason: "profile `exports` carries values between routes and needs the `delivery` profile, which is not selected".to_owned(),
            });
        };
        let exports = crate::exports::service::Exports::open(
            &self.database,
            &self.dir,
            &self.config.name,
            self.custody.clone(),
            self.failpoints.clone(),
            delivery,
        )
        .map_err(|detail| HostError::Damaged {
            path: self.dir.join("store"),
            detail,
        })?;
        self.exports = Some(exports.clone());
        Ok(exports)
    }

    /// Opens the `decisions` profile in this host's store; its ballots, gates and
    /// apply run go through `processes`.
    pub fn open_decisions(
        &mut self,
        processes: std::sync::Arc<crate::processes::service::Processes>,
    ) -> Result<std::sync::Arc<crate::decisions::service::Decisions>, HostError> {
        let decisions = crate::decisions::service::Decisions::open(
            &self.database,
            &self.dir,
            &self.config.name,
            self.custody.clone(),
            processes,
            (self.retention(), self.failpoints.clone()),
        )
        .map_err(|detail| HostError::Damaged {
            path: self.dir.join("store"),
            detail,
        })?;
        self.decisions = Some(decisions.clone());
        Ok(decisions)
    }

    /// The host's `retain` and the installation's shelf, as its rooms archive by them.
    pub(super) fn retention(&self) -> crate::store::shelf::Retention {
        crate::store::shelf::Retention {
            shelf: Some(self.archive.shelf.clone()),
            archive_days: self.config.retain.archive_days,
            clock_offset_ms: self.retention_offset_ms,
        }
    }

    /// Opens the `processes` profile in this host's store and attaches it: grant issues
    /// are operations the host commits. The composition root calls this when the host
    /// selects `processes`.
    pub fn open_processes(
        &mut self,
    ) -> Result<std::sync::Arc<crate::processes::service::Processes>, HostError> {
        let processes = crate::processes::service::Processes::open(
            &self.database,
            &self.dir,
            &self.config.name,
            self.custody.clone(),
            self.failpoints.clone(),
            self.retention(),
        )
        .map_err(|detail| HostError::Damaged {
            path: self.dir.join("store"),
            detail,
        })?;
        self.processes = Some(processes.clone());
        Ok(processes)
    }

    /// Opens the `missions` profile in this host's store.
    pub fn open_missions(
        &mut self,
        processes: std::sync::Arc<crate::processes::service::Processes>,
        authorities: crate::authority::service::Authorities,
        runtime: tokio::runtime::Handle,
    ) -> Result<std::sync::Arc<crate::missions::service::Missions>, HostError> {
        crate::missions::service::Missions::open(
            &self.database,
            &self.dir,
            &self.config.name,
            self.custody.clone(),
            processes,
            authorities,
            self.failpoints.clone(),
            runtime,
        )
        .map_err(|detail| HostError::Damaged {
            path: self.dir.join("store"),
            detail,
        })
    }

    /// Quiesces the models (`Some(why)`: no batch from outside — inputs are refused,
    /// route values wait in their inboxes and adapter readings in the source journal,
    /// simulated tags are not sampled) or releases them (`None`).
    pub fn quiesce(&mut self, why: Option<String>) {
        if self.quiesced != why {
            tracing::info!(host = self.config.name, quiesced = ?why, "model quiescence");
        }
        self.quiesced = why;
    }

    /// Why the models are quiesced now, if they are.
    pub fn quiesced(&self) -> Option<&str> {
        self.quiesced.as_deref()
    }
}
