//! Operations sent to the host (`Call::Submit`): each request's effect and its answer
//! committed in one synced batch, the answer signed once and retained under its id.

use super::*;

impl Host {
    pub(super) fn submit(&mut self, op: String, request: Request) -> Handled {
        if op.is_empty() || op.len() > OPERATION_ID_LENGTH_MAX || op.chars().any(char::is_control) {
            tracing::warn!(
                kind = request.kind(),
                op_bytes = op.len(),
                "operation refused: not a valid id"
            );
            return Handled::Reply(Reply::Refused {
                reason: format!(
                    "operation ids are 1 to OPERATION_ID_LENGTH_MAX ({OPERATION_ID_LENGTH_MAX}) printable bytes"
                ),
            });
        }
        let kind = request.kind();
        let (record, archived) = match self.lookup(&op) {
            archive::Lookup::Hot(record) => (Some(record), false),
            archive::Lookup::Archived(record) => (Some(record), true),
            archive::Lookup::Absent => (None, false),
            lookup => return Handled::Reply(self.not_answered(&op, lookup)),
        };
        if let Some(record) = record {
            if record.request == request {
                tracing::info!(
                    op,
                    kind,
                    archived,
                    "operation re-sent: original answer returned"
                );
                let mut answer = record.answer;
                answer.replayed = true;
                answer.archived = archived;
                return Handled::Reply(Reply::Answer(answer));
            }
            tracing::warn!(
                op,
                kind,
                "operation refused: its id was used for another request"
            );
            return Handled::Reply(Reply::Refused {
                reason: format!(
                    "operation `{op}` was already used for another request ({}); its original answer stands",
                    record.request.describe()
                ),
            });
        }
        // A full disk refuses new work before anything is written; the re-sent ids
        // above still get their answers.
        if let Some(reason) = crate::store::usage::full(&self.dir) {
            tracing::warn!(op, kind, "operation refused: storage full");
            return Handled::Reply(Reply::Refused { reason });
        }
        // So is new work past the hot store's bound while the archive refuses segments
        // — but not what archives or checkpoints, which is how it catches up.
        if !matches!(request, Request::Archive { .. } | Request::Checkpoint {})
            && let Some(reason) = self.archive_full()
        {
            tracing::warn!(
                op,
                kind,
                "operation refused: archive unreachable, hot store full"
            );
            return Handled::Reply(Reply::Refused { reason });
        }
        let mut write = self.database.batch();
        let mut after_commit: Option<AfterCommit> = None;
        let mut batch_point = false;
        // Grants change only while no run writes them: held through the commit.
        let processes = self.processes.clone();
        let mut grants_held = match (&request, &processes) {
            (
                Request::IssueGrant { .. }
                | Request::SurrenderGrant { .. }
                | Request::SettleGrant { .. }
                | Request::LeaveMembership { .. },
                Some(p),
            ) => Some(p.lock_grants()),
            _ => None,
        };
        // Ledger definitions change only while no batch applies: held through the commit.
        let ledgers = self.ledgers.clone();
        let mut ledgers_held = match (&request, &ledgers) {
            (
                Request::InstallLedger { .. }
                | Request::OpenAccount { .. }
                | Request::RetireAccount { .. },
                Some(l),
            ) => Some(l.hold()),
            _ => None,
        };
        let mut ledger_staged = None;
        let answer = match &request {
            Request::InstallModel {
                name,
                model,
                serves,
                ceilings,
            } => match self.parse_model(model) {
                Err(reason) => failed(&op, reason),
                Ok(_)
                    if serves.len() > 1
                        && !self.config.selects(grid_spec::Profile::SharedMemberships) =>
                {
                    failed(
                        &op,
                        format!(
                            "model `{name}` would serve {}: one model serving several memberships needs the `shared-memberships` profile, which host `{}` does not select",
                            serves.join(" and "),
                            self.config.name
                        ),
                    )
                }
                Ok(parsed) if parsed.name != *name => failed(
                    &op,
                    format!(
                        "the request names model `{name}` but its text declares `{}`",
                        parsed.name
                    ),
                ),
                Ok(parsed) => match Runtime::new(&parsed) {
                    Err(e) => failed(&op, e.to_string()),
                    // Each membership admits it within its models ceiling (issue 30).
                    Ok(runtime)
                        if let Some(refusal) = serves.iter().find_map(|m| {
                            grid_spec::serving::over_models_ceiling(
                                name,
                                runtime.operations(),
                                m,
                                ceilings.get(m).copied().unwrap_or(
                                    grid_spec::limits::MEMBERSHIP_MODELS_CEILING_DEFAULT,
                                ),
                                ceilings.contains_key(m),
                            )
                        }) =>
                    {
                        failed(&op, refusal)
                    }
                    Ok(runtime) => {
                        let canonical = grid_spec::canonical::model(&parsed);
                        let current = self.models.get(name);
                        match current {
                            Some(installed)
                                if installed.record.model == canonical
                                    && !installed.record.retired
                                    && installed.record.serves == *serves =>
                            {
                                succeeded(
                                    &op,
                                    format!(
                                        "model {name} already installed (generation {})",
                                        installed.record.generation
                                    ),
                                )
                            }
                            // The same definition admitted to other memberships: its
                            // record, not a new generation.
                            Some(installed)
                                if installed.record.model == canonical
                                    && !installed.record.retired =>
                            {
                                let record = ModelRecord {
                                    serves: serves.clone(),
                                    ..installed.record.clone()
                                };
                                write.insert(
                                    &self.models_keyspace,
                                    name.as_str(),
                                    serde_json::to_vec(&record).expect("records serialize"),
                                );
                                let detail = format!(
                                    "model {name} serves {} (generation {} unchanged)",
                                    match serves.is_empty() {
                                        true => "its host's one membership".to_owned(),
                                        false => serves.join(", "),
                                    },
                                    record.generation
                                );
                                let name = name.clone();
                                after_commit = Some(Box::new(move |host: &mut Host| {
                                    if let Some(installed) = host.models.get_mut(&name) {
                                        installed.record = record;
                                    }
                                }));
                                succeeded(&op, detail)
                            }
                            _ => match self.stage_generation(
                                name,
                                &parsed,
                                runtime,
                                (canonical, serves),
                                &mut write,
                            ) {
                                Err(reason) => failed(&op, reason),
                                Ok((detail, apply)) => {
                                    let name = name.clone();
                                    after_commit = Some(Box::new(move |host: &mut Host| {
                                        apply(host);
                                        // Before the answer leaves (store::held).
                                        if let Err(e) =
                                            crate::store::held::record(&host.dir, [name.as_str()])
                                        {
                                            fatal(&host.dir, "recording a held model", e);
                                        }
                                    }));
                                    succeeded(&op, detail)
                                }
                            },
                        }
                    }
                },
            },
            Request::InstallTag { name, tag } => {
                if !self.config.selects(grid_spec::Profile::Sources) {
                    failed(
                        &op,
                        format!(
                            "host `{}` does not run the `sources` profile; tag `{name}` cannot be installed here",
                            self.config.name
                        ),
                    )
                } else {
                    match self.parse_tag(tag) {
                        Err(reason) => failed(&op, reason),
                        Ok((parsed, _)) if parsed.name != *name => failed(
                            &op,
                            format!(
                                "the request names tag `{name}` but its text declares `{}`",
                                parsed.name
                            ),
                        ),
                        Ok((parsed, None))
                            if let Some(Err(e)) = self
                                .adapters
                                .as_ref()
                                .map(|a| a.check(&self.as_read_here(&parsed))) =>
                        {
                            failed(&op, e.to_string())
                        }
                        Ok((parsed, simulation)) => {
                            let canonical = grid_spec::canonical::tag(&parsed)
                                .expect("a tag this build reads has a canonical text");
                            match self.tags.get(name) {
                                Some(current)
                                    if current.record.tag == canonical
                                        && !current.record.retired =>
                                {
                                    succeeded(&op, format!("tag {name} already installed"))
                                }
                                current => {
                                    let last = current.map_or(0, |t| t.last);
                                    let detail = match current {
                                        None => format!("installed tag {name}"),
                                        Some(t) if t.record.retired => format!(
                                            "reinstated tag {name}; observations continue after {last}"
                                        ),
                                        Some(_) => format!(
                                            "changed tag {name}; observations continue after {last}"
                                        ),
                                    };
                                    let record = TagRecord {
                                        tag: canonical,
                                        retired: false,
                                    };
                                    write.insert(
                                        &self.tags_keyspace,
                                        name.as_str(),
                                        serde_json::to_vec(&record).expect("records serialize"),
                                    );
                                    let name = name.clone();
                                    after_commit = Some(Box::new(move |host: &mut Host| {
                                        host.install_tag(name, record, parsed, simulation);
                                    }));
                                    succeeded(&op, detail)
                                }
                            }
                        }
                    }
                }
            }
            Request::RetireModel { name } => match self.models.get(name) {
                None => failed(
                    &op,
                    format!("host `{}` holds no model `{name}`", self.config.name),
                ),
                Some(installed) if installed.record.retired => {
                    succeeded(&op, format!("model {name} already retired"))
                }
                Some(installed) => {
                    let record = ModelRecord {
                        retired: true,
                        ..installed.record.clone()
                    };
                    write.insert(
                        &self.models_keyspace,
                        name.as_str(),
                        serde_json::to_vec(&record).expect("records serialize"),
                    );
                    let name = name.clone();
                    after_commit = Some(Box::new(move |host: &mut Host| {
                        if let Some(installed) = host.models.get_mut(&name) {
                            installed.record = record;
                        }
                    }));
                    succeeded(&op, "retired")
                }
            },
            Request::RetireTag { name } => match self.tags.get(name) {
                None => failed(
                    &op,
                    format!("host `{}` holds no tag `{name}`", self.config.name),
                ),
                Some(held) if held.record.retired => {
                    succeeded(&op, format!("tag {name} already retired"))
                }
                Some(held) => {
                    let record = TagRecord {
                        retired: true,
                        ..held.record.clone()
                    };
                    let source = held.source_kind();
                    // Released before the answer is written, so the answer says what
                    // the device confirmed; the adapter bounds its wait for the device.
                    // A crash before the commit leaves the tag installed, its release
                    // already sent: retiring it again sends a cancellation again, which
                    // a device answers harmlessly.
                    let released =
                        self.adapters
                            .as_mut()
                            .and_then(|a| a.release(name))
                            .map(|answer| {
                                answer.blocking_recv().unwrap_or_else(|_| {
                                    Err("the adapter ended without an answer".to_owned())
                                })
                            });
                    write.insert(
                        &self.tags_keyspace,
                        name.as_str(),
                        serde_json::to_vec(&record).expect("records serialize"),
                    );
                    let name = name.clone();
                    after_commit = Some(Box::new(move |host: &mut Host| {
                        if let Some(held) = host.tags.get_mut(&name) {
                            held.record = record;
                            held.reader = TagReader::Retired { source };
                        }
                    }));
                    let detail = match released {
                        None => "retired".to_owned(),
                        Some(Ok(detail)) => format!("retired; {detail}"),
                        Some(Err(reason)) => format!(
                            "retired; its subscription at the device was not cancelled ({reason}): it lapses at the end of its lifetime"
                        ),
                    };
                    succeeded(&op, detail)
                }
            },
            Request::RotateKeys { generation } => {
                self.rotate(&op, crate::custody::Rotating::Signing, *generation)
            }
            Request::RotateMailKey { generation } => {
                self.rotate(&op, crate::custody::Rotating::Mail, *generation)
            }
            Request::RotateTlsKey { generation } => {
                self.rotate(&op, crate::custody::Rotating::Tls, *generation)
            }
            Request::InstallRoute { route } => match &self.delivery {
                None => failed(
                    &op,
                    format!(
                        "host `{}` does not run the `delivery` profile; route `{}` cannot be installed here",
                        self.config.name, route.name
                    ),
                ),
                Some(delivery) => match delivery.prepare_install(route, &mut write) {
                    Err(reason) => failed(&op, reason),
                    Ok((detail, apply)) => {
                        after_commit = Some(Box::new(move |_: &mut Host| apply()));
                        succeeded(&op, detail)
                    }
                },
            },
            Request::IssueGrant { grant } => match (&processes, grants_held.as_mut()) {
                (Some(p), Some(state)) => match p.issue(state, grant, &mut write) {
                    Ok(detail) => succeeded(&op, detail),
                    Err(reason) => failed(&op, reason),
                },
                _ => failed(&op, self.no_processes()),
            },
            Request::SurrenderGrant { name } => match (&processes, grants_held.as_mut()) {
                (Some(p), Some(state)) => match p.surrender(state, name, &mut write) {
                    Ok(detail) => succeeded(&op, detail),
                    Err(reason) => failed(&op, reason),
                },
                _ => failed(&op, self.no_processes()),
            },
            Request::SettleGrant { name } => match (&processes, grants_held.as_mut()) {
                (Some(p), Some(state)) => match p.settle(state, name, &mut write) {
                    Ok(detail) => succeeded(&op, detail),
                    Err(reason) => failed(&op, reason),
                },
                _ => failed(&op, self.no_processes()),
            },
            Request::LeaveMembership { membership, grants } => {
                match self.leave(membership, grants, grants_held.as_deref(), &mut write) {
                    Ok((detail, apply)) => {
                        after_commit = Some(apply);
                        succeeded(&op, detail)
                    }
                    Err(reason) => failed(&op, reason),
                }
            }
            Request::Disclose { .. }
            | Request::WithdrawDisclosure { .. }
            | Request::InstallExport { .. }
            | Request::RetireExport { .. } => match self.exports.clone() {
                None => failed(
                    &op,
                    format!(
                        "host `{}` does not run the `exports` profile; add `exports` to its `profiles` line",
                        self.config.name
                    ),
                ),
                Some(exports) => {
                    let prepared = match &request {
                        Request::Disclose { terms } => exports.prepare_disclose(terms, &mut write),
                        Request::WithdrawDisclosure { export } => {
                            exports.prepare_withdraw(export, &mut write)
                        }
                        Request::InstallExport { export } => {
                            exports.prepare_install(export, &mut write)
                        }
                        Request::RetireExport { export } => {
                            exports.prepare_retire(export, &mut write)
                        }
                        _ => unreachable!("matched above"),
                    };
                    match prepared {
                        Err(reason) => failed(&op, reason),
                        Ok((detail, apply)) => {
                            after_commit = Some(Box::new(move |_: &mut Host| apply()));
                            succeeded(&op, detail)
                        }
                    }
                }
            },
            Request::InstallDecision { decision } => match &self.decisions {
                None => failed(
                    &op,
                    format!(
                        "host `{}` does not run the `decisions` profile; add `decisions` to its `profiles` line",
                        self.config.name
                    ),
                ),
                Some(decisions) => match decisions.prepare_install(decision, &mut write) {
                    Ok(detail) => succeeded(&op, detail),
                    Err(reason) => failed(&op, reason),
                },
            },
            Request::Checkpoint {} => {
                let taken = self.checkpoint_models(1, true);
                let purged = self.purge_tag_journals(1);
                let bounded = self.bound_deliveries(1, 1);
                let ledgers_taken = self
                    .ledgers
                    .as_ref()
                    .map(|l| l.checkpoint(1, true))
                    .unwrap_or_default();
                let mut parts = Vec::new();
                if taken.is_empty() {
                    parts.push(
                        "no model has a batch past its checkpoint or left to purge".to_owned(),
                    );
                } else {
                    let each: Vec<String> = taken
                        .iter()
                        .map(|t| {
                            format!(
                                "model {} at batch {} ({} batches purged)",
                                t.model, t.position, t.purged
                            )
                        })
                        .collect();
                    parts.push(format!("checkpointed {}", each.join(", ")));
                }
                parts.extend(purged.iter().map(|p| {
                    format!(
                        "tag {}: {} journal entries purged (held from {})",
                        p.tag, p.entries, p.held_from
                    )
                }));
                parts.extend(bounded.iter().map(|b| b.describe()));
                parts.extend(ledgers_taken.iter().map(|t| t.describe()));
                succeeded(&op, parts.join("; "))
            }
            Request::Archive { older_than_seconds } => {
                match self.archive_older_than(older_than_seconds.saturating_mul(1_000), false) {
                    Err(reason) => failed(&op, reason),
                    Ok(pass) => succeeded(&op, pass.describe()),
                }
            }
            Request::InstallLedger { .. }
            | Request::OpenAccount { .. }
            | Request::RetireAccount { .. } => match ledgers_held.as_mut() {
                None => failed(
                    &op,
                    format!(
                        "host `{}` does not run the `ledger` profile; it keeps no ledgers",
                        self.config.name
                    ),
                ),
                Some(held) => {
                    let change = match &request {
                        Request::InstallLedger { ledger } => {
                            crate::ledger::service::Change::Install(ledger)
                        }
                        Request::OpenAccount { ledger, account } => {
                            crate::ledger::service::Change::Open { ledger, account }
                        }
                        Request::RetireAccount { ledger, account } => {
                            crate::ledger::service::Change::Retire { ledger, account }
                        }
                        _ => unreachable!("matched above"),
                    };
                    match held.stage(change, &mut write) {
                        Ok((detail, staged)) => {
                            ledger_staged = staged;
                            if let Request::InstallLedger { ledger } = &request {
                                let name = ledger.name.clone();
                                after_commit = Some(Box::new(move |host: &mut Host| {
                                    // Before the answer leaves (store::held).
                                    if let Err(e) = crate::store::held::record_ledgers(
                                        &host.dir,
                                        [name.as_str()],
                                    ) {
                                        fatal(&host.dir, "recording a held ledger", e);
                                    }
                                }));
                            }
                            succeeded(&op, detail)
                        }
                        Err(reason) => failed(&op, reason),
                    }
                }
            },
            Request::ApplyMatrix { model, .. } | Request::Input { model, .. }
                if self.quiesced.is_some() =>
            {
                failed(
                    &op,
                    format!(
                        "model `{model}` is quiesced: {}",
                        self.quiesced.as_deref().unwrap_or_default()
                    ),
                )
            }
            Request::ApplyMatrix {
                model,
                matrix,
                version,
            } => match self.staged_for(model, matrix, *version) {
                Err(reason) => failed(&op, reason),
                Ok(value) => {
                    let change = super::Change::Matrix {
                        name: matrix,
                        version: *version,
                        matrix: &value,
                    };
                    match self.change(model, change, &mut write) {
                        Err(reason) => failed(&op, reason),
                        Ok((number, published)) => {
                            batch_point = true;
                            after_commit = Some(Box::new(move |host: &mut Host| {
                                host.settle(published);
                            }));
                            succeeded(
                                &op,
                                format!(
                                    "batch {number}: version {version} applied to matrix {matrix} ({} × {}, every cell in this one batch)",
                                    value.rows(),
                                    value.cols()
                                ),
                            )
                        }
                    }
                }
            },
            Request::Input {
                fence: Some(stamp), ..
            } if self.fence.clone().admit(&stamp.claim, stamp.epoch).is_err() => {
                let refused = self
                    .fence
                    .clone()
                    .admit(&stamp.claim, stamp.epoch)
                    .expect_err("just refused");
                failed(&op, format!("fenced: {refused}"))
            }
            Request::Input {
                model,
                values,
                fence,
            } => match self.models.get(model) {
                None => failed(
                    &op,
                    format!("host `{}` holds no model `{model}`", self.config.name),
                ),
                Some(installed) if installed.record.retired => {
                    failed(&op, format!("model `{model}` is retired"))
                }
                Some(_) => {
                    let named: Vec<(&str, f64)> =
                        values.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                    match self.batch(model, &named, &mut write) {
                        Err(reason) => failed(&op, reason),
                        Ok((number, published)) => {
                            // The newest epoch seen, durable with the write it admitted.
                            let mut seen = self.fence.clone();
                            if let Some(stamp) = fence {
                                seen.admit(&stamp.claim, stamp.epoch)
                                    .expect("checked before the batch");
                                write.insert(
                                    &self.meta,
                                    FENCE_KEY,
                                    serde_json::to_vec(&seen).expect("fences serialize"),
                                );
                            }
                            batch_point = true;
                            after_commit = Some(Box::new(move |host: &mut Host| {
                                host.fence = seen;
                                host.settle(published);
                            }));
                            succeeded(&op, format!("batch {number}"))
                        }
                    }
                }
            },
        };
        // The owner signs its answer once; the signature is retained with it.
        let mut answer = answer;
        answer.request = Some(request.clone());
        answer.signature = Some(self.custody.sign_answer(
            &self.config.name,
            &answer.signed_bytes(&self.config.name, &request),
        ));
        let answered_ms = crate::store::now_ms();
        let record = OperationRecord {
            request,
            answer: answer.clone(),
            acknowledged: false,
            answered_ms,
        };
        write.insert(
            &self.operations,
            op.as_str(),
            serde_json::to_vec(&record).expect("records serialize"),
        );
        write.insert(
            &self.archive.by_time,
            archive::time_key(answered_ms, &op),
            [],
        );
        write.insert(&self.unacknowledged, op.as_str(), []);
        self.failpoints
            .reach(crate::store::Failpoint::SubmitBeforeCommit);
        self.commit_durably(write, "committing an operation");
        drop(grants_held);
        if let (Some(held), Some(staged)) = (ledgers_held.as_mut(), ledger_staged) {
            held.apply(staged);
        }
        drop(ledgers_held);
        if let Some(apply) = after_commit {
            apply(self);
        }
        let mut drop_reply = self
            .failpoints
            .reach(crate::store::Failpoint::SubmitAfterCommit);
        if batch_point {
            drop_reply |= self
                .failpoints
                .reach(crate::store::Failpoint::BatchAfterCommit);
        }
        let outcome = answer.outcome.name();
        crate::metrics::operation_answered(kind, outcome);
        tracing::info!(
            op,
            kind,
            outcome,
            detail = answer.detail,
            "operation answered"
        );
        if drop_reply {
            return Handled::DropReply;
        }
        Handled::Reply(Reply::Answer(answer))
    }
}

impl Host {
    /// Opens the `ledger` profile in this host's store (replaying every ledger's
    /// journal) and attaches it: definition changes and `observe` go through it.
    pub fn open_ledgers(&mut self) -> Result<crate::ledger::service::Ledgers, HostError> {
        let ledgers = crate::ledger::service::Ledgers::open(
            &self.database,
            &self.dir,
            &self.config.name,
            self.failpoints.clone(),
            self.retention(),
        )
        .map_err(|detail| HostError::Damaged {
            path: self.dir.join("store"),
            detail,
        })?;
        // What the store holds is what this installation held (store::held).
        let names: Vec<String> = ledgers.definitions().into_iter().map(|d| d.name).collect();
        crate::store::held::record_ledgers(&self.dir, names.iter().map(String::as_str)).map_err(
            |e| HostError::Config {
                path: crate::store::held::ledgers_path(&self.dir),
                reason: format!("cannot record the ledgers this installation holds: {e}"),
            },
        )?;
        self.ledgers = Some(ledgers.clone());
        Ok(ledgers)
    }
}
