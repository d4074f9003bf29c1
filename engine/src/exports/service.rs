//! The `exports` profile of one host, in the host's store:
//!
//! ```text
//! exports-disclosed  NAME                 the disclosure this host signed (issuer; JSON)
//! exports            NAME                 the export this host runs (gateway; JSON)
//! exports-mappings   NAME \0 N(be64)      the signed mapping of `from` position N (gateway)
//! exports-forwarded  NAME                 last `from` position crossed ++ values crossed (be64 ×2)
//! ```
//!
//! The forwarder (called by the host's route feeder after each round, outside the
//! host's lock) takes the values the gateway's inbox of `from` holds past what crossed,
//! confirms the disclosure (signed, not expired, not retired) and the publication right
//! (`route:TO` held by this host, read after a barrier), then in ONE synced write stages
//! each value on `to` and journals its signed mapping and the new forwarded position.
//! Only after that write is durable may a push carry the publications. A crash before
//! it forwards the same values again at the same next positions; after it, nothing is
//! forwarded twice: the position and the publications were written together.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fjall::{Keyspace, OwnedWriteBatch};
use serde::{Deserialize, Serialize};

use super::api::{
    Disclosure, DisclosureTerms, ExportCall, ExportInstall, ExportReply, ExportState, ExportView,
    Mapping,
};
use crate::custody::{Custody, Signed};
use crate::delivery::service::Delivery;
use crate::limits::{
    EXPORT_FORWARD_BATCH_MAX, EXPORT_MAPPINGS_HOT_MAX, EXPORT_MAPPINGS_SHOWN_MAX,
    EXPORT_PUBLISH_WAIT,
};
use crate::store::keys::Key;
use crate::store::{Failpoint, Failpoints, fatal, open_keyspaces};

const DISCLOSED: &str = "exports-disclosed";
const EXPORTS: &str = "exports";
const MAPPINGS: &str = "exports-mappings";
const FORWARDED: &str = "exports-forwarded";

/// What installing, disclosing or retiring does in memory once its write is durable.
pub type Effect = Box<dyn FnOnce() + Send>;

/// A disclosure as its issuer keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct DisclosedRecord {
    disclosure: Disclosure,
    /// Why it was withdrawn; never disclosed again under this name.
    #[serde(default)]
    withdrawn: Option<String>,
}

/// An export as its gateway keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ExportRecord {
    install: ExportInstall,
    /// Why it was retired: nothing crosses any more; its mappings are kept.
    #[serde(default)]
    retired: Option<String>,
}

struct Running {
    record: ExportRecord,
    forwarded: u64,
    crossed: u64,
    /// The lowest `from` position whose mapping is still held (older ones purged).
    held_from: u64,
    /// Why the newest values wait (a right missing), as the last round found.
    refusal: Option<String>,
}

#[derive(Default)]
struct State {
    disclosed: BTreeMap<String, DisclosedRecord>,
    exports: BTreeMap<String, Running>,
}

/// The `exports` profile of one host.
pub struct Exports {
    host: String,
    dir: PathBuf,
    database: crate::store::Durable,
    disclosed: Keyspace,
    exports: Keyspace,
    mappings: Keyspace,
    forwarded: Keyspace,
    custody: Custody,
    failpoints: Failpoints,
    delivery: Arc<Delivery>,
    /// Held by every change and by a whole forwarding round: a retirement committed
    /// means no round forwards afterwards.
    state: Mutex<State>,
}

fn mapping_key(export: &str, position: u64) -> Vec<u8> {
    Key::text(export).sep().u64(position).bytes()
}

fn forwarded_record(forwarded: u64, crossed: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&forwarded.to_be_bytes());
    out[8..].copy_from_slice(&crossed.to_be_bytes());
    out
}

/// `expires` has passed: the reason no value crosses any more.
fn expired(terms: &DisclosureTerms) -> Option<String> {
    let expires = terms.expires.as_deref()?;
    let at = time::OffsetDateTime::parse(expires, &time::format_description::well_known::Rfc3339);
    match at {
        Ok(at) if at > time::OffsetDateTime::now_utc() => None,
        Ok(_) => Some(format!(
            "no disclosure right: the disclosure of export `{}` expired at {expires}",
            terms.export
        )),
        Err(_) => Some(format!(
            "no disclosure right: the disclosure of export `{}` names an expiry `{expires}` that is not an RFC 3339 time",
            terms.export
        )),
    }
}

/// How many of the mappings held from `held_from` through `last` are past
/// `EXPORT_MAPPINGS_HOT_MAX`.
pub(super) fn excess_mappings(held_from: u64, last: u64) -> u64 {
    let held = (last + 1).saturating_sub(held_from);
    held.saturating_sub(EXPORT_MAPPINGS_HOT_MAX)
}

fn read_all<T: for<'de> Deserialize<'de>>(
    keyspace: &Keyspace,
    what: &str,
) -> Result<BTreeMap<String, T>, String> {
    let mut out = BTreeMap::new();
    for guard in keyspace.iter() {
        let (k, v) = guard.into_inner().map_err(|e| format!("{what}: {e}"))?;
        let name = String::from_utf8(k.to_vec()).map_err(|_| format!("{what}: a name"))?;
        let record = serde_json::from_slice(&v).map_err(|e| format!("{what} `{name}`: {e}"))?;
        out.insert(name, record);
    }
    Ok(out)
}

impl Exports {
    /// Opens the exports keyspaces of the host's store and recovers every disclosure
    /// and export with its forwarded position.
    pub fn open(
        database: &crate::store::Durable,
        dir: &Path,
        host: &str,
        custody: Custody,
        failpoints: Failpoints,
        delivery: Arc<Delivery>,
    ) -> Result<Arc<Exports>, String> {
        let [disclosed, exports, mappings, forwarded] =
            open_keyspaces(database, [DISCLOSED, EXPORTS, MAPPINGS, FORWARDED])
                .map_err(|e| format!("exports keyspaces: {e}"))?;
        let mut state = State {
            disclosed: read_all(&disclosed, "a disclosure record")?,
            exports: BTreeMap::new(),
        };
        let records: BTreeMap<String, ExportRecord> = read_all(&exports, "an export record")?;
        for (name, record) in records {
            let (done, crossed) = match forwarded
                .get(name.as_bytes())
                .map_err(|e| format!("export `{name}`: {e}"))?
            {
                Some(v) if v.len() == 16 => (
                    u64::from_be_bytes(v[..8].try_into().expect("8 bytes")),
                    u64::from_be_bytes(v[8..].try_into().expect("8 bytes")),
                ),
                Some(_) => return Err(format!("export `{name}`: damaged forwarded position")),
                None => (record.install.disclosure.first.saturating_sub(1), 0),
            };
            let held_from = match mappings.prefix(Key::text(&name).sep().bytes()).next() {
                Some(guard) => {
                    let (k, _) = guard
                        .into_inner()
                        .map_err(|e| format!("export `{name}`: {e}"))?;
                    crate::store::keys::trailing_u64(&k)
                        .ok_or_else(|| format!("export `{name}`: a damaged mapping key"))?
                }
                None => done + 1,
            };
            state.exports.insert(
                name,
                Running {
                    record,
                    forwarded: done,
                    crossed,
                    held_from,
                    refusal: None,
                },
            );
        }
        Ok(Arc::new(Exports {
            host: host.to_owned(),
            dir: dir.to_owned(),
            database: database.clone(),
            disclosed,
            exports,
            mappings,
            forwarded,
            custody,
            failpoints,
            delivery,
            state: Mutex::new(state),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// At the publisher of `from`: signs the disclosure of `terms` (`Request::Disclose`)
    /// into `write`. The first position disclosed is the route's next one: values
    /// published before never cross.
    pub fn prepare_disclose(
        self: &Arc<Self>,
        terms: &DisclosureTerms,
        write: &mut OwnedWriteBatch,
    ) -> Result<(String, Effect), String> {
        let view = self
            .delivery
            .view(&terms.from)
            .filter(|v| v.role == "publisher")
            .ok_or_else(|| {
                format!(
                    "`{}` does not publish route `{}`: only the original publisher of a value discloses it",
                    self.host, terms.from
                )
            })?;
        if view.route.membership != terms.from_membership {
            return Err(format!(
                "route `{}` is of membership `{}`, not `{}`",
                terms.from, view.route.membership, terms.from_membership
            ));
        }
        if view.route.destination(&terms.gateway).is_none() {
            return Err(format!(
                "gateway `{}` is not a destination of route `{}`: it could not receive what it would carry",
                terms.gateway, terms.from
            ));
        }
        if let Some(reason) = expired(terms) {
            return Err(format!("{reason}; nothing was signed"));
        }
        let state = self.lock();
        if let Some(held) = state.disclosed.get(&terms.export) {
            if let Some(why) = &held.withdrawn {
                return Err(format!(
                    "the disclosure of export `{}` was withdrawn ({why}); a name is never disclosed again — declare a new export",
                    terms.export
                ));
            }
            if held.disclosure.terms == *terms {
                return Ok((
                    format!("export {} already disclosed", terms.export),
                    Box::new(|| {}),
                ));
            }
            return Err(format!(
                "export `{}` was disclosed with other terms; a disclosure never changes — retire the export and declare a new one",
                terms.export
            ));
        }
        drop(state);
        let mut disclosure = Disclosure {
            terms: terms.clone(),
            issuer: self.host.clone(),
            first: view.published + 1,
            generation: 0,
            signature: String::new(),
        };
        let (generation, signature) = self.custody.sign_hex(&disclosure.signed_bytes());
        disclosure.generation = generation;
        disclosure.signature = signature;
        let record = DisclosedRecord {
            disclosure,
            withdrawn: None,
        };
        write.insert(
            &self.disclosed,
            terms.export.as_str(),
            serde_json::to_vec(&record).expect("records serialize"),
        );
        let detail = format!(
            "disclosure of route {} to gateway {} signed (export {}, from position {})",
            terms.from, terms.gateway, terms.export, record.disclosure.first
        );
        let me = self.clone();
        Ok((
            detail,
            Box::new(move || {
                me.lock()
                    .disclosed
                    .insert(record.disclosure.terms.export.clone(), record);
            }),
        ))
    }

    /// At the issuer: withdraws the disclosure of `export` (kept, never given again).
    pub fn prepare_withdraw(
        self: &Arc<Self>,
        export: &str,
        write: &mut OwnedWriteBatch,
    ) -> Result<(String, Effect), String> {
        let state = self.lock();
        let Some(held) = state.disclosed.get(export) else {
            return Err(format!(
                "`{}` signed no disclosure of export `{export}`",
                self.host
            ));
        };
        if held.withdrawn.is_some() {
            return Ok((
                format!("disclosure of export {export} already withdrawn"),
                Box::new(|| {}),
            ));
        }
        let mut record = held.clone();
        drop(state);
        record.withdrawn = Some("retired=#true in the topology".to_owned());
        write.insert(
            &self.disclosed,
            export,
            serde_json::to_vec(&record).expect("records serialize"),
        );
        let me = self.clone();
        let name = export.to_owned();
        Ok((
            format!("disclosure of export {export} withdrawn"),
            Box::new(move || {
                me.lock().disclosed.insert(name, record);
            }),
        ))
    }

    /// At the gateway: checks the signed disclosure and both routes, and adds the
    /// export's record to `write` (`Request::InstallExport`).
    pub fn prepare_install(
        self: &Arc<Self>,
        install: &ExportInstall,
        write: &mut OwnedWriteBatch,
    ) -> Result<(String, Effect), String> {
        let d = &install.disclosure;
        let t = &d.terms;
        let name = install.name();
        if t.gateway != self.host {
            return Err(format!(
                "export `{name}` names gateway `{}`, not this host `{}`",
                t.gateway, self.host
            ));
        }
        let from = self
            .delivery
            .view(&t.from)
            .filter(|v| v.role == "destination")
            .ok_or_else(|| {
                format!(
                    "`{}` is not a destination of route `{}` (install the route first)",
                    self.host, t.from
                )
            })?;
        if from.route.publisher != d.issuer || from.route.membership != t.from_membership {
            return Err(format!(
                "no disclosure right: export `{name}` is disclosed by `{}`, but route `{}` is published by `{}` in `{}` — only the original publisher of a value discloses it",
                d.issuer, t.from, from.route.publisher, from.route.membership
            ));
        }
        if !d.verify(&self.custody.peer_keys(&d.issuer, &install.issuer_keys)) {
            return Err(format!(
                "no disclosure right: the disclosure of export `{name}` does not verify with `{}`'s public key of generation {}",
                d.issuer, d.generation
            ));
        }
        if let Some(reason) = expired(t) {
            return Err(reason);
        }
        let to = self
            .delivery
            .view(&t.to)
            .filter(|v| v.role == "publisher")
            .ok_or_else(|| {
                format!(
                    "`{}` does not publish route `{}` (install the route first)",
                    self.host, t.to
                )
            })?;
        if to.route.membership != t.to_membership {
            return Err(format!(
                "route `{}` is of membership `{}`, not `{}`",
                t.to, to.route.membership, t.to_membership
            ));
        }
        let state = self.lock();
        if let Some((other, _)) = state.exports.iter().find(|(n, r)| {
            *n != name
                && r.record.retired.is_none()
                && r.record.install.disclosure.terms.from == t.from
                && r.record.install.disclosure.terms.to == t.to
        }) {
            return Err(format!(
                "export `{other}` already carries `{}` onto `{}`: a second would publish each value twice; retire it first",
                t.from, t.to
            ));
        }
        if let Some(running) = state.exports.get(name) {
            if let Some(why) = &running.record.retired {
                return Err(format!(
                    "export `{name}` was retired ({why}); an export never runs again — declare a new one"
                ));
            }
            if running.record.install == *install {
                return Ok((format!("export {name} already installed"), Box::new(|| {})));
            }
            return Err(format!(
                "export `{name}` is installed with another disclosure; an export's disclosure never changes — retire it and declare a new export"
            ));
        }
        drop(state);
        let record = ExportRecord {
            install: install.clone(),
            retired: None,
        };
        write.insert(
            &self.exports,
            name,
            serde_json::to_vec(&record).expect("records serialize"),
        );
        let first = d.first;
        let me = self.clone();
        let detail = format!(
            "export {name} installed: values of {} from position {first} (disclosed by {}) cross to {} in {}",
            t.from, d.issuer, t.to, t.to_membership
        );
        let name = name.to_owned();
        Ok((
            detail,
            Box::new(move || {
                me.lock().exports.insert(
                    name,
                    Running {
                        record,
                        forwarded: first.saturating_sub(1),
                        crossed: 0,
                        held_from: first,
                        refusal: None,
                    },
                );
                me.delivery.wake();
            }),
        ))
    }

    /// At the gateway: retires `export` (`- export`): from its commit on nothing
    /// crosses; its mappings are kept and still verify.
    pub fn prepare_retire(
        self: &Arc<Self>,
        export: &str,
        write: &mut OwnedWriteBatch,
    ) -> Result<(String, Effect), String> {
        let state = self.lock();
        let Some(running) = state.exports.get(export) else {
            return Err(format!("`{}` runs no export `{export}`", self.host));
        };
        if running.record.retired.is_some() {
            return Ok((format!("export {export} already retired"), Box::new(|| {})));
        }
        let mut record = running.record.clone();
        let crossed = running.crossed;
        drop(state);
        record.retired = Some("retired=#true in the topology".to_owned());
        write.insert(
            &self.exports,
            export,
            serde_json::to_vec(&record).expect("records serialize"),
        );
        let me = self.clone();
        let name = export.to_owned();
        Ok((
            format!(
                "export {export} retired: nothing crosses any more; its {crossed} mapping(s) are kept"
            ),
            Box::new(move || {
                if let Some(running) = me.lock().exports.get_mut(&name) {
                    running.record = record;
                }
            }),
        ))
    }

    /// Per route this gateway receives, the lowest position a running export still has
    /// to carry across: the inbox keeps everything after it.
    pub fn holds(&self) -> Vec<(String, u64)> {
        self.lock()
            .exports
            .values()
            .filter(|r| r.record.retired.is_none())
            .map(|r| (r.record.install.disclosure.terms.from.clone(), r.forwarded))
            .collect()
    }

    /// What `observe` reports.
    pub fn states(&self) -> Vec<ExportState> {
        let state = self.lock();
        let issued = state.disclosed.iter().map(|(name, d)| ExportState {
            name: name.clone(),
            role: "issuer".to_owned(),
            retired: d.withdrawn.is_some(),
            terms: d.disclosure.terms.clone(),
        });
        let run = state.exports.iter().map(|(name, r)| ExportState {
            name: name.clone(),
            role: "gateway".to_owned(),
            retired: r.record.retired.is_some(),
            terms: r.record.install.disclosure.terms.clone(),
        });
        issued.chain(run).collect()
    }

    /// One forwarding round over every running export (the route feeder's thread).
    pub fn forward(&self) {
        let mut state = self.lock();
        for (name, running) in state.exports.iter_mut() {
            if running.record.retired.is_some() {
                continue;
            }
            match self.forward_one(running) {
                Ok(_) => running.refusal = None,
                Err(reason) => {
                    if running.refusal.as_deref() != Some(reason.as_str()) {
                        tracing::warn!(export = %name, %reason, "export not forwarding");
                    }
                    running.refusal = Some(reason);
                }
            }
        }
    }

    /// Carries the values of one export's `from` past what crossed onto `to`: the
    /// number crossed, or why none could.
    fn forward_one(&self, running: &mut Running) -> Result<usize, String> {
        let d = running.record.install.disclosure.clone();
        let t = &d.terms;
        let values =
            self.delivery
                .delivered_after(&t.from, running.forwarded, EXPORT_FORWARD_BATCH_MAX)?;
        if values.is_empty() {
            return Ok(0);
        }
        if let Some(reason) = expired(t) {
            return Err(format!(
                "{reason}; value {} of `{}` and later are not forwarded",
                values[0].0, t.from
            ));
        }
        // An Ordered inbox holds every position; a Latest one only its newest value
        // (conflation is the route's meaning, not a loss).
        let ordered = self
            .delivery
            .class_of(&t.from)
            .is_none_or(|c| c == crate::delivery::receipts::Class::Ordered);
        if ordered && values[0].0 != running.forwarded + 1 {
            return Err(format!(
                "the inbox of `{}` no longer holds position {} (it holds from {}): values purged before the export could carry them are not invented",
                t.from,
                running.forwarded + 1,
                values[0].0
            ));
        }
        let epoch = self
            .delivery
            .check_right_blocking(&t.to)
            .map_err(|reason| {
                format!(
                    "no publication right in `{}`: {reason}; value {} of `{}` waits",
                    t.to_membership, values[0].0, t.from
                )
            })?;
        self.failpoints
            .abort_if_armed(Failpoint::ExportBeforeMapping);
        let mut write = self.database.batch();
        let mut staged = Vec::new();
        let mut last = running.forwarded;
        for (position, value) in values {
            let at = match self.delivery.stage(&t.to, value, epoch, &mut write) {
                Ok(at) => at,
                // The first refusal (capacity) stops the round; what staged crosses.
                Err(reason) if staged.is_empty() => {
                    return Err(format!("`{}` refused value {position}: {reason}", t.to));
                }
                Err(_) => break,
            };
            let mut mapping = Mapping {
                export: t.export.clone(),
                gateway: self.host.clone(),
                from: t.from.clone(),
                from_position: position,
                to: t.to.clone(),
                to_position: at,
                value,
                epoch,
                generation: 0,
                signature: String::new(),
            };
            let (generation, signature) = self.custody.sign_hex(&mapping.signed_bytes());
            mapping.generation = generation;
            mapping.signature = signature;
            write.insert(
                &self.mappings,
                mapping_key(&t.export, position),
                serde_json::to_vec(&mapping).expect("mappings serialize"),
            );
            staged.push(at);
            last = position;
        }
        let crossed = running.crossed + staged.len() as u64;
        let held_from = self.purge_mappings(running, last, &t.to, &mut write);
        write.insert(
            &self.forwarded,
            t.export.as_str(),
            forwarded_record(last, crossed),
        );
        self.database
            .commit_or_stop(write, &self.dir, "journaling an export's mappings");
        running.forwarded = last;
        running.crossed = crossed;
        running.held_from = held_from;
        self.failpoints
            .abort_if_armed(Failpoint::ExportAfterMapping);
        let newest = staged.last().copied().unwrap_or(0);
        for at in &staged {
            self.delivery.settle(&t.to, *at);
        }
        if self
            .failpoints
            .armed(Failpoint::ExportAfterPublish)
            .is_some()
        {
            self.wait_receipted(&t.to, newest);
            self.failpoints
                .abort_if_armed(Failpoint::ExportAfterPublish);
        }
        Ok(staged.len())
    }

    /// Past `EXPORT_MAPPINGS_HOT_MAX` mappings held, removes the oldest in `write` —
    /// only those whose `to` position every destination of `to` receipted (their
    /// obligation closed; the receipts, cumulative, stay at the publishers). The
    /// lowest position held afterwards.
    fn purge_mappings(
        &self,
        running: &Running,
        last: u64,
        to: &str,
        write: &mut OwnedWriteBatch,
    ) -> u64 {
        let excess = excess_mappings(running.held_from, last);
        if excess == 0 {
            return running.held_from;
        }
        let receipted = self.delivery.view(to).map_or(0, |v| {
            v.route
                .destinations
                .iter()
                .map(|d| v.receipted.get(&d.host).copied().unwrap_or(0))
                .min()
                .unwrap_or(0)
        });
        let export = &running.record.install.disclosure.terms.export;
        let mut held_from = running.held_from;
        let range = mapping_key(export, held_from)..=mapping_key(export, held_from + excess - 1);
        for guard in self.mappings.range(range) {
            let (k, v) = guard
                .into_inner()
                .unwrap_or_else(|e| fatal(&self.dir, "reading an export's mappings", e));
            let Ok(mapping) = serde_json::from_slice::<Mapping>(&v) else {
                break; // kept: `inspect export` names it damaged
            };
            if mapping.to_position > receipted {
                break;
            }
            write.remove(&self.mappings, k.to_vec());
            held_from = mapping.from_position + 1;
        }
        held_from
    }

    /// Waits (bounded) until every destination of `route` receipted `position`.
    fn wait_receipted(&self, route: &str, position: u64) {
        let start = std::time::Instant::now();
        while start.elapsed() < EXPORT_PUBLISH_WAIT {
            let covered = self.delivery.view(route).is_some_and(|v| {
                v.route
                    .destinations
                    .iter()
                    .all(|d| v.receipted.get(&d.host).is_some_and(|r| *r >= position))
            });
            if covered {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// A control call (`Call::Export`). Changes nothing.
    pub fn handle(&self, call: ExportCall) -> ExportReply {
        match call {
            ExportCall::Disclosure { export } => match self.lock().disclosed.get(&export) {
                Some(held) if held.withdrawn.is_none() => ExportReply::Disclosure {
                    disclosure: Box::new(held.disclosure.clone()),
                },
                Some(held) => ExportReply::Refused {
                    reason: format!(
                        "the disclosure of export `{export}` was withdrawn ({})",
                        held.withdrawn.as_deref().unwrap_or("")
                    ),
                },
                None => ExportReply::Refused {
                    reason: format!("`{}` signed no disclosure of export `{export}`", self.host),
                },
            },
            ExportCall::Show { export, after } => match self.view(&export, after) {
                Ok(view) => ExportReply::Export {
                    view: Box::new(view),
                },
                Err(reason) => ExportReply::Refused { reason },
            },
        }
    }

    fn view(&self, export: &str, after: u64) -> Result<ExportView, String> {
        let state = self.lock();
        let running = state
            .exports
            .get(export)
            .ok_or_else(|| format!("`{}` runs no export `{export}`", self.host))?;
        let mut mappings = Vec::new();
        let mut next = None;
        let range = mapping_key(export, after.saturating_add(1))..=mapping_key(export, u64::MAX);
        for guard in self.mappings.range(range) {
            let (_, v) = guard
                .into_inner()
                .unwrap_or_else(|e| fatal(&self.dir, "reading an export's mappings", e));
            let mapping: Mapping = serde_json::from_slice(&v)
                .map_err(|e| format!("export `{export}`: a damaged mapping: {e}"))?;
            if mappings.len() == EXPORT_MAPPINGS_SHOWN_MAX {
                next = Some(mapping.from_position - 1);
                break;
            }
            mappings.push(mapping);
        }
        let (state_name, refusal) = match (&running.record.retired, &running.refusal) {
            (Some(why), _) => ("retired", Some(why.clone())),
            (None, Some(why)) => ("refusing", Some(why.clone())),
            (None, None) => ("forwarding", None),
        };
        Ok(ExportView {
            name: export.to_owned(),
            gateway: self.host.clone(),
            disclosure: running.record.install.disclosure.clone(),
            issuer_keys: running.record.install.issuer_keys.clone(),
            state: state_name.to_owned(),
            refusal,
            forwarded: running.forwarded,
            crossed: running.crossed,
            held_from: running.held_from,
            mappings,
            next,
        })
    }
}
