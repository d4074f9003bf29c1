//! Leaving a membership (`member M leave=#true`; docs/memberships.md, "Leaving"): the
//! obligations this host still has there, and the leave itself — only once none is
//! open, recorded before it acts, completed at the next start when a crash cut it.
//!
//! ```text
//! meta  left \0 MEMBERSHIP   serial of the enrollment left (be64)
//! ```

use crate::custody::membership;
use crate::processes::service::State;
use crate::store::keys::Key;

use super::*;

fn left_key(membership: &str) -> Vec<u8> {
    Key::text("left").then(membership).bytes()
}

impl Host {
    /// The memberships this host left, shared with its transport.
    pub fn left(&self) -> crate::transport::LeftMemberships {
        self.left.clone()
    }

    /// Completes every leave the store records whose enrollment is still in place (a
    /// crash between the leave's commit and setting the certificate aside), and notes
    /// which memberships this host is out of. A later enrollment (another serial) is a
    /// new joining and stays.
    pub(super) fn complete_leaves(&mut self) -> Result<(), HostError> {
        let prefix = Key::text("left").sep().bytes();
        let mut left = Vec::new();
        for guard in self.meta.prefix(&prefix) {
            let (key, value) = guard.into_inner().map_err(|e| HostError::Config {
                path: self.dir.join("store"),
                reason: format!("reading the memberships left: {e}"),
            })?;
            let name = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            let serial = <[u8; 8]>::try_from(value.as_ref())
                .map(u64::from_be_bytes)
                .map_err(|_| HostError::Config {
                    path: self.dir.join("store"),
                    reason: format!("the record of leaving `{name}` does not decode"),
                })?;
            left.push((name, serial));
        }
        for (name, serial) in left {
            let moved =
                membership::set_aside(&self.dir, &name, serial).map_err(|e| HostError::Config {
                    path: membership::host_membership_dir(&self.dir, &name),
                    reason: format!("completing the leave of `{name}`: {e}"),
                })?;
            if moved {
                tracing::info!(membership = %name, serial, "leave completed at start");
            }
            if !membership::host_membership_dir(&self.dir, &name).exists() {
                self.left
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name);
            }
        }
        Ok(())
    }

    /// What this host still owes in `membership`: its routes there (values not
    /// receipted, waiting for capacity, not durable; values held that a model has not
    /// taken), the `grants` named (units reserved or unknown) and its own calls there
    /// with no outcome. `state`: the grants' lock when the caller holds it.
    pub(super) fn obligations(
        &self,
        membership: &str,
        grants: &[String],
        state: Option<&State>,
    ) -> Vec<String> {
        let mut open = Vec::new();
        if let Some(delivery) = &self.delivery {
            let routes = delivery.obligations(membership);
            open.extend(routes.owed);
            for (route, held) in routes.held {
                for (model, installed) in &self.models {
                    if installed.record.retired || !installed.fed.iter().any(|(_, r)| *r == route) {
                        continue;
                    }
                    let fed = self.fed_position(&fed_key(model, &route));
                    if fed < held {
                        open.push(format!(
                            "route `{route}`: model `{model}` took values through position {fed} of {held} held"
                        ));
                    }
                }
            }
        }
        if let Some(processes) = &self.processes {
            match state {
                Some(state) => open.extend(processes.obligations(state, membership, grants)),
                None => {
                    let state = processes.lock_grants();
                    open.extend(processes.obligations(&state, membership, grants));
                }
            }
        }
        open
    }

    /// Leaves `membership` into `write` when nothing is open there: the models
    /// admitted to it no longer serve it (their records, no new generation) and the
    /// leave is recorded; once `write` is durable the certificate is set aside and the
    /// transport refuses the membership. Refused, changing nothing, with the open
    /// obligations named.
    pub(super) fn leave(
        &self,
        name: &str,
        grants: &[String],
        state: Option<&State>,
        write: &mut fjall::OwnedWriteBatch,
    ) -> Result<(String, AfterCommit), String> {
        let host = &self.config.name;
        let enrollment = membership::read_enrollment(&self.dir, name)
            .map_err(|e| format!("host `{host}` cannot read its enrollment in `{name}`: {e}"))?;
        let Some(enrollment) = enrollment else {
            return Ok((
                format!("host `{host}` is not enrolled in `{name}`: nothing to leave"),
                Box::new(|_: &mut Host| {}),
            ));
        };
        let open = self.obligations(name, grants, state);
        if !open.is_empty() {
            let shown = crate::limits::LEAVE_OBLIGATIONS_SHOWN_MAX;
            let more = open.len().saturating_sub(shown);
            let mut list = open.into_iter().take(shown).collect::<Vec<_>>().join("; ");
            if more > 0 {
                list += &format!("; and {more} more (LEAVE_OBLIGATIONS_SHOWN_MAX = {shown})");
            }
            return Err(format!(
                "host `{host}` cannot leave `{name}` yet: its obligations there are open: {list}; nothing changed"
            ));
        }
        let mut served = Vec::new();
        let mut records = Vec::new();
        for (model, installed) in &self.models {
            if installed.record.serves.iter().any(|m| m == name) {
                let mut record = installed.record.clone();
                record.serves.retain(|m| m != name);
                write.insert(
                    &self.models_keyspace,
                    model.as_str(),
                    serde_json::to_vec(&record).expect("records serialize"),
                );
                served.push(model.clone());
                records.push((model.clone(), record));
            }
        }
        write.insert(&self.meta, left_key(name), enrollment.serial.to_be_bytes());
        let detail = format!(
            "left `{name}`: {}its certificate (serial {}) set aside in {}",
            match served.is_empty() {
                true => String::new(),
                false => format!("models {} no longer serve it; ", served.join(", ")),
            },
            enrollment.serial,
            membership::left_membership_dir(&self.dir, name, enrollment.serial).display()
        );
        let (membership_name, serial) = (name.to_owned(), enrollment.serial);
        Ok((
            detail,
            Box::new(move |host: &mut Host| {
                for (model, record) in records {
                    if let Some(installed) = host.models.get_mut(&model) {
                        installed.record = record;
                    }
                }
                host.left
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(membership_name.clone());
                // Recorded durably first: a failure here is completed at the next
                // start (`complete_leaves`).
                if let Err(e) = membership::set_aside(&host.dir, &membership_name, serial) {
                    tracing::error!(membership = %membership_name, reason = %e, "setting the certificate aside failed; the next start completes it");
                }
                tracing::info!(membership = %membership_name, serial, "membership left");
            }),
        ))
    }
}
