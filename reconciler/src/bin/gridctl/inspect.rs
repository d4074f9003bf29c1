//! `gridctl inspect …`: read what an owner holds, without changing it. Authority, wire
//! counters, storage, tags and a model's values here; routes in `routes`, runs and grants in
//! `process`.

use std::process::ExitCode;

use anyhow::bail;
use clap::Subcommand;
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply, ValueText, WirePeer};
use grid_engine::store::usage::StorageView;
use grid_reconciler::observe;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::Output;
use crate::common::owner_of;
use crate::report::{Rendered, Report, emit};
use crate::{process, routes};

#[derive(Subcommand, Debug)]
pub enum InspectCommand {
    /// Every host installed under the state directory: its directory (and where it
    /// links to), whether a gridd runs it and its pid, the profiles host.toml selects
    /// (and those the running gridd runs, when they differ), its models.
    #[command(mut_arg("json", |a| a.help(
        "A JSON list of {\"name\", \"dir\", \"link\", \"running\", \"pid\", \"profiles\", \"running_profiles\", \"models\", \"serves\", \"reason\"}"
    )))]
    Hosts {
        #[command(flatten)]
        output: Output,
    },
    /// A membership's authority: voters, leader, term, last applied, profiles, and an
    /// explicit linearizable read barrier (`unknown` when no quorum confirms it).
    Authority {
        membership: String,
        #[command(flatten)]
        output: Output,
    },
    /// TLS bytes the host's sockets wrote per peer and direction (profile
    /// `wire-observation`); an overflowed counter reads `unavailable`.
    Wire {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// What a host's stores hold on disk: every keyspace of its store (entries, table
    /// bytes), the store's journal, each store directory (`store`, `authority/M/…`)
    /// with its files and bytes, the disk's free space, the store's count of
    /// acknowledged writes (its high-water mark), every installed checkpoint
    /// (room, name, position), the answers archive (segments, their span, how far
    /// archiving is behind the hot window) and every journal an open replays or a
    /// purge bounds — a model's batches, a tag's source journal, a route's
    /// publications and Ordered inbox — with its oldest and newest position, how many
    /// a checkpoint now would purge and why the rest stay. Reads only.
    #[command(mut_arg("json", |a| a.help(
        "{\"host\", \"keyspaces\": [{\"name\", \"approximate_entries\", \"table_bytes\"}], \"journal_bytes\", \"directories\": [{\"path\", \"files\", \"bytes\", \"truncated\"}], \"disk\": {\"total_bytes\", \"available_bytes\"} or null, \"acknowledged_writes\", \"checkpoints\": [{\"room\", \"name\", \"position\", \"at_ms\", \"bytes\"}], \"archive\": {\"hot_days\", \"archive_days\", \"segments\", \"released_segments\", \"answers\", \"bytes\", \"first_ms\", \"last_ms\", \"oldest_hot_ms\", \"lag_seconds\", \"store\", \"waiting\" (absent when none), \"last_upload_ms\", \"last_error_ms\", \"last_error\", \"index\" and \"index_waiting\" (absent unless the index is in DynamoDB)} or null, \"journals\": [{\"store\", \"name\", \"oldest_retained\", \"newest\", \"purgeable\", \"kept\"}]}"
    )))]
    Storage {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// The routes a participant takes part in: role, class, destinations, published
    /// and receipted positions, values outstanding.
    Routes {
        /// One host (default: every installed host that answers).
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// What HOST holds durably of ROUTE: a destination its inbox, the publisher its
    /// published sequence (encrypted values opened with HOST's own mail key).
    #[command(mut_arg("json", |a| a.help("A JSON list of {\"position\", \"value\"}")))]
    Inbox {
        route: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        /// The first position to show.
        #[arg(long, value_name = "POSITION", default_value_t = 0)]
        from: u64,
        #[command(flatten)]
        output: Output,
    },
    /// The matrices HOST holds of MAPPING: staged at a destination (each opened with
    /// HOST's mail key and checked whole again), published at the publisher; each
    /// version's geometry and SHA-256, and the newest matrix a destination refused.
    #[command(mut_arg("json", |a| a.help(
        "{\"mapping\", \"host\", \"role\", \"versions\": [{\"position\", \"rows\", \"cols\", \"sha256\"}], \"held_from\", \"refused\"}"
    )))]
    Mapping {
        mapping: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// The newest signed receipt of every destination of ROUTE, at its publisher, and
    /// the values still outstanding. With --verify every signature is checked offline
    /// with the recipient's public keys (its custody manifest); exit 1 if one fails.
    #[command(mut_arg("json", |a| a.help(
        "{\"route\", \"receipts\", \"verified\", \"outstanding\", …}"
    )))]
    Receipts {
        route: String,
        #[arg(long)]
        verify: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Whether every destination of ROUTE has a receipt covering POSITION, asked at
    /// the route's publisher: with --wait-ms it answers as soon as they all do (a
    /// receipt recorded wakes it), or when the wait ends (at most
    /// RECEIPTED_WAIT_MS_MAX = 60,000). Changes nothing. Exit 0 every destination's
    /// receipt covers it, 1 not yet (the value stays owed and is pushed again), 4
    /// refused.
    #[command(mut_arg("json", |a| a.help(
        "{\"route\", \"host\", \"position\", \"published\", \"complete\", \"covered\", \"cohort\", \"awaiting\", \"missing\"}"
    )))]
    Receipted {
        route: String,
        /// The publication's position (as `gridctl publish` answered it).
        #[arg(long)]
        position: u64,
        /// How long to wait for the receipts, in milliseconds (0: answer at once).
        #[arg(long, value_name = "MS", default_value_t = 0)]
        wait_ms: u64,
        #[command(flatten)]
        output: Output,
    },
    /// A run as HOST holds it: as its receiver (outcome, grant, unit; a finished run
    /// past the hot window is read from the host's archive, `"archived": true`) or as
    /// its caller (its wait journal). Exit 4 (refused) when the id is known and its
    /// outcome cannot be given: past `retain archive-days` (expired), or unreadable.
    #[command(mut_arg("json", |a| a.help(
        "{\"host\", \"run\": null or {\"request\", \"outcome\", \"result\", \"units\", \"archived\" (when true), …}}"
    )))]
    Process {
        /// The request id.
        id: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// The grants HOST issued and their units: allocated, reserved, consumed,
    /// surrendered, unknown (held by runs left unknown).
    #[command(mut_arg("json", |a| a.help(
        "{\"host\", \"allocated\", \"reserved\", \"consumed\", \"surrendered\", \"unknown\", \
         \"grants\": […]} (totals, then each grant with its signed issues)"
    )))]
    Grants {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// A tag's source journal at HOST (profile `sources`): observations journaled,
    /// the last index and value, the position fed to each model (stale when the last
    /// entry fed was debt); for a Modbus or Sparkplug tag the adapter's connection,
    /// counts by quality and the outstanding debt; for a simulated one whether the
    /// journal equals the deterministic sequence of its definition.
    #[command(mut_arg("json", |a| a.help(
        "{\"host\", \"tag\", \"count\", \"last\", \"observations\", \"fed\", \
         \"deterministic\", \"consecutive\", \"source\", \"connection\", \"last_good\", \
         \"counts\", \"debt\", \"entries\", \"held_from\", \"debt_windows\", …}"
    )))]
    Tag {
        tag: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// The Processes HOST serves, its runs by outcome, the `demo.count` counter, and
    /// the deposits the mailbox it keeps for others holds (requests not fetched yet,
    /// outcomes not collected and journaled yet).
    Processes {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// A model's current values as its host holds them.
    #[command(mut_arg("json", |a| a.help(
        "One JSON object {\"NAME\": number or \"#ERR!\" text, ...}"
    )))]
    Model {
        model: String,
        #[command(flatten)]
        output: Output,
    },
    /// A ledger as its host keeps it (profile `ledger`): every account (or one) with
    /// its balances — debits and credits, pending and posted, in integer minor units —
    /// the pending transfers held, and counts. The host is found among the installed
    /// ones unless --host names it.
    #[command(mut_arg("json", |a| a.help(
        "{\"host\", \"ledger\", \"accounts\": [{\"name\", \"currency\", …, \"debits_pending\", \"debits_posted\", \"credits_pending\", \"credits_posted\"}], \"pending\", \"counts\", \"sequence\"} (amounts as decimal strings)"
    )))]
    Ledger {
        ledger: String,
        #[arg(long, value_name = "NAME")]
        account: Option<String>,
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// A mission as its host holds it (profile `missions`): its state (reserving,
    /// active, exhausted, returning, settled, closed-never-issued, refused), units allocated /
    /// consumed / reserved / unknown, deadline, successor, and its signed documents
    /// (allocation, consumption record, settlement, never-issued closure), each
    /// verified offline with its signer's public keys. The host is found among the
    /// installed ones unless --host names it. Exit 0 when every document verifies, 1
    /// when one does not, 4 when no host holds the mission.
    #[command(mut_arg("json", |a| a.help(
        "{\"name\", \"host\", \"state\", \"units\": {\"allocated\", \"consumed\", \"reserved\", \"unknown\", \"released\", \"available\"}, \"deadline\", \"successor\", \"issuer\", \"quiesced\", \"claim\", \"epoch\", \"allocation\", \"consumption\", \"settlement\", \"closure\", \"recovered\", \"verified\": [{\"document\", \"keys\", \"verified\"}], …}"
    )))]
    Mission {
        name: String,
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// The decisions of NAME still in their host's hot store (profile `decisions`,
    /// docs/decisions.md), or the one with --id (also from the host's archive): its state (open, passed, rejected, expired, declined,
    /// applying, applied, failed), ballots, gate, the one apply run and its outcome,
    /// and every signed document — Open, ballots, gate, the owner's run outcome, the
    /// applied receipt — verified offline with its signer's public keys from the
    /// operator's state, and whether each names the ones before it (`chain`). Exit 0
    /// when everything verifies, 1 when something does not, 4 when no host keeps it.
    #[command(mut_arg("json", |a| a.help(
        "With --id: {\"id\", \"name\", \"host\", \"state\", \"yes\", \"no\", \"expired\", \"record\": {\"opened\", \"ballots\", \"gate\", \"apply\", \"applied\"}, \"verified\": [{\"document\", \"signer\", \"verified\"}], \"chain\"}; without: {\"host\", \"name\", \"decisions\": [those]}"
    )))]
    Decision {
        name: String,
        #[arg(long, value_name = "D")]
        id: Option<String>,
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// A cross-domain export at its gateway (profile `exports`, docs/exports.md): its
    /// state (forwarding, refusing with the reason, retired), the disclosure its issuer
    /// signed, every signed mapping (`from` position → `to` position, value, epoch),
    /// the gateway's A-side receipt for `from` and the B-side receipts for `to` — each
    /// signature verified offline with the signers' public keys from the operator's
    /// state. The gateway is found among the installed hosts unless --host names it.
    /// Exit 0 when everything verifies, 1 when something does not, 4 when no host runs
    /// the export.
    #[command(mut_arg("json", |a| a.help(
        "{\"export\": {\"name\", \"gateway\", \"disclosure\", \"state\", \"refusal\", \"forwarded\", \"crossed\", \"mappings\": [{\"from_position\", \"to_position\", \"value\", \"epoch\", …}]}, \"disclosure_verified\", \"mappings_verified\", \"from_receipt\", \"to_receipts\", \"receipted_both_sides\"}"
    )))]
    Export {
        name: String,
        /// The gateway.
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[command(flatten)]
        output: Output,
    },
}

pub fn inspect(command: InspectCommand) -> anyhow::Result<ExitCode> {
    match command {
        InspectCommand::Hosts { output } => crate::local::inspect_hosts(&output),
        InspectCommand::Authority { membership, output } => authority(&membership, &output),
        InspectCommand::Wire { host, output } => wire(&host, &output),
        InspectCommand::Storage { host, output } => storage(&host, &output),
        InspectCommand::Routes { host, output } => routes::inspect_routes(host, &output),
        InspectCommand::Inbox {
            route,
            host,
            from,
            output,
        } => routes::inspect_inbox(&route, &host, from, &output),
        InspectCommand::Receipts {
            route,
            verify,
            output,
        } => routes::inspect_receipts(&route, verify, &output),
        InspectCommand::Receipted {
            route,
            position,
            wait_ms,
            output,
        } => routes::inspect_receipted(&route, position, wait_ms, &output),
        InspectCommand::Mapping {
            mapping,
            host,
            output,
        } => crate::mapping::inspect(&mapping, &host, &output),
        InspectCommand::Process { id, host, output } => {
            process::inspect_process(&id, &host, &output)
        }
        InspectCommand::Grants { host, output } => process::inspect_grants(&host, &output),
        InspectCommand::Tag { tag, host, output } => self::tag(&tag, &host, &output),
        InspectCommand::Processes { host, output } => process::inspect_processes(&host, &output),
        InspectCommand::Model { model, output } => self::model(&model, &output),
        InspectCommand::Ledger {
            ledger,
            account,
            host,
            output,
        } => crate::ledger::inspect(&ledger, account, host.as_deref(), &output),
        InspectCommand::Mission { name, host, output } => {
            Ok(crate::mission::inspect(&name, host.as_deref(), &output))
        }
        InspectCommand::Decision {
            name,
            id,
            host,
            output,
        } => Ok(crate::decision::inspect(
            &name,
            id,
            host.as_deref(),
            &output,
        )),
        InspectCommand::Export { name, host, output } => {
            crate::export::inspect(&name, host.as_deref(), &output)
        }
    }
}

/// `gridctl inspect authority MEMBERSHIP`.
fn authority(membership: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let inspection = grid_reconciler::authority::inspect(&output.state, membership)
        .map_err(anyhow::Error::msg)?;
    emit(
        &Rendered::new(inspection.to_json(), inspection.render()),
        output.json,
    );
    Ok(ExitCode::SUCCESS)
}

/// The bytes a host's sockets wrote, per peer and direction.
#[derive(Serialize)]
struct Wire<'a> {
    host: &'a str,
    peers: Vec<PeerBytes<'a>>,
}

#[derive(Serialize)]
struct PeerBytes<'a> {
    peer: &'a str,
    direction: &'a str,
    bytes: Bytes,
}

/// A counter, or `"unavailable"` once it overflowed.
#[derive(Serialize)]
#[serde(untagged)]
enum Bytes {
    Counted(u64),
    Unavailable(&'static str),
}

impl Report for Wire<'_> {
    fn text(&self) -> String {
        self.peers
            .iter()
            .map(|p| {
                let bytes = match p.bytes {
                    Bytes::Counted(b) => b.to_string(),
                    Bytes::Unavailable(text) => text.to_owned(),
                };
                format!("{} {} {bytes}\n", p.peer, p.direction)
            })
            .collect()
    }
}

impl<'a> Wire<'a> {
    fn of(host: &'a str, peers: &'a [WirePeer]) -> Self {
        let peers = peers
            .iter()
            .map(|p| PeerBytes {
                peer: &p.peer,
                direction: &p.direction,
                bytes: p
                    .bytes
                    .map_or(Bytes::Unavailable("unavailable"), Bytes::Counted),
            })
            .collect();
        Wire { host, peers }
    }
}

/// `gridctl inspect wire --host NAME`.
fn wire(host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let dir = observe::host_dir(&output.state, host);
    let reply = Client::connect(&dir).and_then(|mut c| c.call(&Call::Wire))?;
    let peers = match reply {
        Reply::Wire { peers } => peers,
        Reply::Refused { reason } => bail!("{reason}"),
        other => bail!("the host answered {other:?}"),
    };
    emit(&Wire::of(host, &peers), output.json);
    Ok(ExitCode::SUCCESS)
}

/// What a host's stores hold on disk.
#[derive(Serialize)]
struct Storage<'a> {
    host: &'a str,
    #[serde(flatten)]
    view: &'a StorageView,
}

impl Report for Storage<'_> {
    fn text(&self) -> String {
        let mut out = format!("host {}\n", self.host);
        out.push_str(&format!("  journal: {} bytes\n", self.view.journal_bytes));
        out.push_str(&format!(
            "  acknowledged writes: {} (high-water mark keys/store.high-water)\n",
            self.view.acknowledged_writes
        ));
        for c in &self.view.checkpoints {
            out.push_str(&format!(
                "  checkpoint {} {}: position {}, taken {}, {} bytes\n",
                c.room,
                c.name,
                c.position,
                grid_engine::store::rfc3339_ms(c.at_ms),
                c.bytes
            ));
        }
        if let Some(a) = &self.view.archive {
            let time = |ms: Option<u64>| ms.map_or("-".to_owned(), grid_engine::store::rfc3339_ms);
            out.push_str(&format!(
                "  archive: {} segments, {} answers, {} bytes, spanning {} .. {}; hot window {} days, {}; released {} segments; oldest hot answer {}, {} s past the hot window\n",
                a.segments,
                a.answers,
                a.bytes,
                time(a.first_ms),
                time(a.last_ms),
                a.hot_days,
                a.archive_days
                    .map_or("answers kept for ever".to_owned(), |d| format!("expired after {d} days")),
                a.released_segments,
                time(a.oldest_hot_ms),
                a.lag_seconds
            ));
            out.push_str(&format!(
                "  archive store: {}; last segment written {}\n",
                a.store,
                time(a.last_upload_ms)
            ));
            if let Some(why) = &a.waiting {
                out.push_str(&format!("  archive store waiting: {why}\n"));
            }
            if let Some(index) = &a.index {
                out.push_str(&format!(
                    "  archive index: {index}; {} entries wait in this store for it\n",
                    a.index_waiting
                ));
            }
            if let Some(why) = &a.last_error {
                out.push_str(&format!(
                    "  archive refused a segment at {}: {why}\n",
                    time(a.last_error_ms)
                ));
            }
        }
        for j in &self.view.journals {
            match j.oldest_retained {
                Some(oldest) => out.push_str(&format!(
                    "  {} {}: holds {oldest}..={}, {} purgeable by a checkpoint now{}\n",
                    j.store,
                    j.name,
                    j.newest,
                    j.purgeable,
                    j.kept
                        .as_ref()
                        .map_or(String::new(), |why| format!("; the rest kept: {why}"))
                )),
                None => out.push_str(&format!(
                    "  {} {}: holds nothing (newest position {})\n",
                    j.store, j.name, j.newest
                )),
            }
        }
        for k in &self.view.keyspaces {
            out.push_str(&format!(
                "  keyspace {}: ~{} entries, {} bytes in tables\n",
                k.name, k.approximate_entries, k.table_bytes
            ));
        }
        for d in &self.view.directories {
            out.push_str(&format!(
                "  {}: {} files, {} bytes{}\n",
                d.path,
                d.files,
                d.bytes,
                if d.truncated {
                    " (counted up to STORAGE_WALK_FILES_MAX files)"
                } else {
                    ""
                }
            ));
        }
        match &self.view.disk {
            Some(disk) => out.push_str(&format!(
                "  disk: {} of {} bytes available\n",
                disk.available_bytes, disk.total_bytes
            )),
            None => out.push_str("  disk: unknown (the filesystem did not answer)\n"),
        }
        out
    }
}

/// `gridctl inspect storage --host NAME`.
fn storage(host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let dir = observe::host_dir(&output.state, host);
    let reply = Client::connect(&dir).and_then(|mut c| c.call(&Call::Storage))?;
    let view = match reply {
        Reply::Storage(view) => view,
        Reply::Refused { reason } => bail!("{reason}"),
        other => bail!("the host answered {other:?}"),
    };
    emit(&Storage { host, view: &view }, output.json);
    Ok(ExitCode::SUCCESS)
}

/// `gridctl inspect tag TAG --host NAME`.
fn tag(tag: &str, host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let inspection =
        grid_reconciler::sources::inspect(&output.state, tag, host).map_err(anyhow::Error::msg)?;
    emit(
        &Rendered::new(inspection.to_json(), inspection.render()),
        output.json,
    );
    Ok(ExitCode::SUCCESS)
}

/// A model's values as its host holds them: `NAME = VALUE` lines, or one JSON object
/// {"NAME": number or "#ERR!" text}.
struct HeldValues(Vec<(String, ValueText)>);

impl Serialize for HeldValues {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl Report for HeldValues {
    fn text(&self) -> String {
        self.0
            .iter()
            .map(|(name, value)| match value {
                ValueText::Number(n) => {
                    format!("{name} = {}\n", grid_engine::model::number_text(*n))
                }
                ValueText::Error(e) => format!("{name} = {e}\n"),
            })
            .collect()
    }
}

/// `gridctl inspect model MODEL`.
fn model(model: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let dir = owner_of(&output.state, model)?;
    let reply = Client::connect(&dir).and_then(|mut c| {
        c.call(&Call::Values {
            model: model.to_owned(),
        })
    })?;
    let Reply::Values { values, .. } = reply else {
        bail!("the host answered {reply:?}");
    };
    emit(&HeldValues(values), output.json);
    Ok(ExitCode::SUCCESS)
}
