//! `gridctl input`, `status`, `verify` and `remote observe`: one host, through its
//! control socket, its installation, or its transport.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use grid_engine::custody::Manifest;
use grid_engine::custody::membership::{Enrollment, enrolled_memberships, read_enrollment};
use grid_engine::host::config::HostConfig;
use grid_engine::protocol::{Answer, Call, FenceStamp, Reply, Request};
use grid_reconciler::apply::{self, Status};
use grid_reconciler::observe::{self, HostStatus};
use serde::Serialize;

use crate::Output;
use crate::common::{owner_of, parse_sets};
use crate::report::{Report, emit};

#[derive(Subcommand, Debug)]
pub enum RemoteCommand {
    /// Observe a host (`observe` over its transport), authenticated as participant
    /// AS with its installation's certificate and key. The host shows AS what is its
    /// own or the membership's (models serving it, its routes, grants issued to AS,
    /// accounts AS owns) — everything only to a control plane of its files.
    Observe {
        /// The host to observe (its listen address is read from its installation).
        #[arg(long, value_name = "NAME")]
        host: String,
        /// The calling participant (a host installed under the state directory).
        #[arg(long = "as", value_name = "PARTICIPANT")]
        participant: String,
        /// The shared membership (default: the first both are enrolled in).
        #[arg(long, value_name = "M")]
        membership: Option<String>,
        #[command(flatten)]
        output: Output,
    },
}

/// The owner's answer to one input batch.
#[derive(Serialize)]
struct Sent {
    op: String,
    outcome: &'static str,
    detail: String,
    /// The owner returned the answer it gave this id before; nothing was applied again.
    replayed: bool,
    /// That answer came from the owner's archive: it is older than the hot window.
    archived: bool,
    #[serde(skip)]
    status: Status,
}

impl Report for Sent {
    fn text(&self) -> String {
        let mut text = format!(
            "{}: {} ({}){}\n",
            self.op,
            self.outcome,
            self.detail,
            match (self.replayed, self.archived) {
                (true, true) => " — original answer, from the archive; nothing applied again",
                (true, false) => " — original answer, nothing applied again",
                _ => "",
            }
        );
        if self.status == Status::Unknown {
            text += &format!(
                "the outcome is unknown; nothing was retried. Re-send the same --op {} to learn the original answer.\n",
                self.op
            );
        }
        text
    }
}

/// `gridctl input MODEL NAME=VALUE… --op ID [--fence CLAIM:EPOCH]`.
pub fn input(
    model: String,
    values: &[String],
    op: String,
    fence: Option<&str>,
    output: &Output,
) -> anyhow::Result<ExitCode> {
    let sets = parse_sets("input", values)?;
    let fence = match fence {
        None => None,
        Some(text) => {
            let Some((claim, epoch)) = text.rsplit_once(':') else {
                bail!("--fence `{text}`: expected CLAIM:EPOCH");
            };
            let epoch: u64 = epoch
                .parse()
                .with_context(|| format!("--fence `{text}`: the epoch is not a whole number"))?;
            Some(FenceStamp {
                claim: claim.to_owned(),
                epoch,
            })
        }
    };
    let dir = owner_of(&output.state, &model)?;
    let request = Request::Input {
        model,
        values: sets,
        fence,
    };
    Ok(submit(&dir, op, request, output))
}

/// Sends one operation to the host at `dir` and prints its answer; the exit code
/// says its outcome (0 succeeded, 1 failed, 3 unknown, 4 refused).
pub fn submit(dir: &std::path::Path, op: String, request: Request, output: &Output) -> ExitCode {
    let apply::Effect {
        status,
        detail,
        replayed,
        archived,
    } = grid_reconciler::operation::send(
        dir,
        Call::Submit {
            op: op.clone(),
            request,
        },
    );
    let sent = Sent {
        op,
        outcome: status.name(),
        detail,
        replayed,
        archived,
        status,
    };
    emit(&sent, output.json);
    ExitCode::from(status.exit_code())
}

/// A host's identity as its installation holds it.
#[derive(Serialize)]
struct Identity<'a> {
    name: &'a str,
    listen: &'a str,
    profiles: &'a [String],
    running: bool,
    keys: Option<Keys<'a>>,
    /// `unencrypted`, `encrypted` (the signing and mail keys at rest, docs/custody.md
    /// "Locked custody") or `locked` (gridd runs and waits for `gridctl custody unlock`).
    custody: &'static str,
    /// The installation's storage generation (docs/transfer.md, "Storage
    /// replacement").
    storage: Storage,
    /// The transfer this installation arrived by, when it did (docs/transfer.md,
    /// "Arrival").
    transfer: Option<Arrived>,
    memberships: Vec<Member<'a>>,
}

#[derive(Serialize)]
struct Arrived {
    op: String,
    from: String,
    files: u64,
    bytes: u64,
    /// SHA-256 of the verified manifest.
    manifest: String,
    /// When its first open checked the files against the manifest (RFC 3339; null:
    /// not opened since).
    checked: Option<String>,
    /// Whether the host signed that check, and whether the signature verifies with its
    /// custody manifest, offline.
    signed: bool,
    verified: bool,
}

#[derive(Serialize)]
struct Storage {
    /// 1 until its store is first replaced.
    generation: u64,
    /// Replacements done.
    replacements: usize,
    /// The op id of a replacement under way (gridd does not start meanwhile).
    open: Option<String>,
}

#[derive(Serialize)]
struct Keys<'a> {
    generation: u32,
    signing: &'a str,
    mail: &'a str,
    tls: &'a str,
    retired: Vec<u32>,
    mail_generation: u32,
    retired_mail: Vec<u32>,
    tls_generation: u32,
    retired_tls: Vec<u32>,
}

#[derive(Serialize)]
struct Member<'a> {
    membership: &'a str,
    participant: &'a str,
    serial: u64,
    not_after: &'a str,
    authority: &'a str,
}

impl Report for Identity<'_> {
    fn text(&self) -> String {
        let mut text = format!(
            "host {} ({})\n",
            self.name,
            if self.running {
                "running"
            } else {
                "not running"
            }
        );
        text += &format!("  listen      {}\n", self.listen);
        text += &format!("  profiles    [{}]\n", self.profiles.join(" "));
        if let Some(k) = &self.keys {
            text += &format!(
                "  keys        signing generation {} ({} retired), mail generation {} ({} retired), TLS generation {}\n",
                k.generation,
                k.retired.len(),
                k.mail_generation,
                k.retired_mail.len(),
                k.tls_generation
            );
        }
        text += &match self.custody {
            "locked" => format!(
                "  custody     locked: serves reads only until `gridctl custody unlock {}`\n",
                self.name
            ),
            "encrypted" => "  custody     signing and mail keys encrypted at rest\n".to_owned(),
            other => format!("  custody     {other}\n"),
        };
        text += &format!(
            "  storage     generation {} ({} replacement(s){})\n",
            self.storage.generation,
            self.storage.replacements,
            self.storage
                .open
                .as_ref()
                .map(|op| format!("; replacement {op} under way"))
                .unwrap_or_default()
        );
        if let Some(t) = &self.transfer {
            text += &format!(
                "  transfer    arrived from {} (op {}): {} files, {} bytes, manifest sha256:{}; {}\n",
                t.from,
                t.op,
                t.files,
                t.bytes,
                t.manifest,
                match (&t.checked, t.signed, t.verified) {
                    (None, ..) => "not yet checked (at its first start)".to_owned(),
                    (Some(at), false, _) => format!("checked {at}, not yet signed"),
                    (Some(at), true, true) =>
                        format!("checked {at}, signed by the host (verified)"),
                    (Some(at), true, false) =>
                        format!("checked {at}, its signature DOES NOT VERIFY"),
                }
            );
        }
        for e in &self.memberships {
            text += &format!(
                "  member      {} as participant {} (serial {}, until {})\n",
                e.membership, e.participant, e.serial, e.not_after
            );
        }
        text
    }
}

/// `gridctl status --host NAME`.
pub fn status(host: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let state = &output.state;
    let dir = observe::host_dir(state, host);
    let observation = observe::observe_host(host, &dir);
    let Some(config) = &observation.config else {
        bail!("no installation of host `{host}` under {}", state.display());
    };
    let manifest = grid_engine::custody::manifest(&dir).ok();
    let enrollments: Vec<Enrollment> = enrolled_memberships(&dir)
        .into_iter()
        .filter_map(|m| read_enrollment(&dir, &m).ok().flatten())
        .collect();
    let encrypted = grid_engine::custody::encrypted_at_rest(&dir);
    let mut shown = identity(
        config,
        &observation.status,
        manifest.as_ref(),
        &enrollments,
        encrypted,
    );
    let replace = grid_engine::store::replace::storage(&dir)?;
    shown.storage = Storage {
        generation: replace.generation,
        replacements: replace.replacements.len(),
        open: grid_engine::store::replace::journal(&dir)?.map(|j| j.op),
    };
    use grid_engine::store::transfer::{Role, Step};
    shown.transfer = grid_engine::store::transfer::record(&dir)?
        .filter(|r| r.role == Role::Destination && r.step == Step::Activated)
        .map(|r| Arrived {
            op: r.op.clone(),
            from: r.source.display().to_string(),
            files: r.files,
            bytes: r.bytes,
            manifest: r.digest.clone().unwrap_or_default(),
            checked: r
                .arrival
                .as_ref()
                .map(|a| grid_engine::store::rfc3339_ms(a.checked_ms)),
            signed: r.arrival.as_ref().is_some_and(|a| a.signature.is_some()),
            verified: manifest
                .as_ref()
                .is_some_and(|m| arrival_verifies(host, &r, m)),
        });
    emit(&shown, output.json);
    Ok(ExitCode::SUCCESS)
}

/// A transferred installation's signed arrival, as host `host` signed it
/// (docs/transfer.md, "Arrival").
struct SignedArrival<'a> {
    host: &'a str,
    record: &'a grid_engine::store::transfer::Record,
    checked_ms: u64,
    generation: u32,
    signature: &'a str,
}

impl grid_engine::custody::Signed for SignedArrival<'_> {
    fn signed_bytes(&self) -> Vec<u8> {
        grid_engine::store::arrival::statement(self.host, self.record, self.checked_ms)
    }
    fn signature(&self) -> (u32, &str) {
        (self.generation, self.signature)
    }
}

/// Whether `record`'s arrival is signed by `host` and the signature verifies with its
/// custody `manifest`.
fn arrival_verifies(
    host: &str,
    record: &grid_engine::store::transfer::Record,
    manifest: &Manifest,
) -> bool {
    use grid_engine::custody::Signed;
    let Some(arrival) = &record.arrival else {
        return false;
    };
    (arrival.signature.as_deref())
        .zip(arrival.generation)
        .is_some_and(|(signature, generation)| {
            let signed = SignedArrival {
                host,
                record,
                checked_ms: arrival.checked_ms,
                generation,
                signature,
            };
            signed.verify(manifest)
        })
}

fn identity<'a>(
    config: &'a HostConfig,
    status: &HostStatus,
    manifest: Option<&'a Manifest>,
    enrollments: &'a [Enrollment],
    encrypted: bool,
) -> Identity<'a> {
    Identity {
        name: &config.name,
        listen: &config.listen,
        profiles: &config.profiles,
        running: status.serves(),
        keys: manifest.map(|k| Keys {
            generation: k.generation,
            signing: &k.signing,
            mail: &k.mail,
            tls: &k.tls,
            retired: k.retired.iter().map(|r| r.generation).collect(),
            mail_generation: k.mail_generation,
            retired_mail: k.retired_mail.iter().map(|r| r.generation).collect(),
            tls_generation: k.tls_generation,
            retired_tls: k.retired_tls.iter().map(|r| r.generation).collect(),
        }),
        custody: match (status, encrypted) {
            (HostStatus::Locked(_), _) => "locked",
            (_, true) => "encrypted",
            (_, false) => "unencrypted",
        },
        storage: Storage {
            generation: 1,
            replacements: 0,
            open: None,
        },
        transfer: None,
        memberships: enrollments
            .iter()
            .map(|e| Member {
                membership: &e.membership,
                participant: &e.participant,
                serial: e.serial,
                not_after: &e.not_after,
                authority: &e.authority,
            })
            .collect(),
    }
}

/// An answer checked offline against its host's custody manifest.
#[derive(Serialize)]
struct Verified<'a> {
    op: &'a str,
    host: &'a str,
    verified: bool,
    generation: Option<u32>,
    answer: &'a Answer,
}

impl Report for Verified<'_> {
    fn text(&self) -> String {
        let (op, host) = (self.op, self.host);
        match self.generation {
            Some(g) => {
                format!("verified: operation {op} answered by {host}, signing key generation {g}\n")
            }
            None => format!(
                "NOT verified: the signature of operation {op} does not match {host}'s keys\n"
            ),
        }
    }
}

/// `gridctl verify --host NAME --op ID`.
pub fn verify(host: &str, op: &str, output: &Output) -> anyhow::Result<ExitCode> {
    let dir = observe::host_dir(&output.state, host);
    let reply = grid_engine::host::control::Client::connect(&dir)
        .and_then(|mut c| c.call(&Call::Answer { op: op.to_owned() }))?;
    let Reply::Answer(answer) = reply else {
        bail!("host `{host}` holds no answer for operation `{op}` ({reply:?})");
    };
    let manifest = grid_engine::custody::manifest(&dir)?;
    let generation = answer.verify(&manifest);
    let verified = Verified {
        op,
        host,
        verified: generation.is_some(),
        generation,
        answer: &answer,
    };
    emit(&verified, output.json);
    Ok(if generation.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What a host answered `observe` over its transport.
#[derive(Serialize)]
#[serde(transparent)]
struct Observed(Reply);

impl Report for Observed {
    fn text(&self) -> String {
        let o = match &self.0 {
            Reply::Observation(o) => o,
            Reply::Refused { reason } => return format!("refused: {reason}\n"),
            // Any other answer, as its JSON form (never Rust's Debug text).
            other => {
                return format!(
                    "{}\n",
                    serde_json::to_string(other).unwrap_or_else(|e| e.to_string())
                );
            }
        };
        let names = |items: Vec<String>| {
            if items.is_empty() {
                "(none)".to_owned()
            } else {
                items.join(" ")
            }
        };
        let mut out = format!("host {}\n", o.host);
        if let Some(profiles) = &o.profiles {
            out.push_str(&format!("  profiles        {}\n", names(profiles.clone())));
        }
        let models = o
            .models
            .iter()
            .map(|m| {
                format!(
                    "{}@{}{}",
                    m.name,
                    m.generation,
                    if m.retired { "(retired)" } else { "" }
                )
            })
            .collect();
        out.push_str(&format!("  models          {}\n", names(models)));
        let routes = o.routes.iter().map(|r| r.name.clone()).collect();
        out.push_str(&format!("  routes          {}\n", names(routes)));
        let grants = o.grants.iter().map(|g| g.name.clone()).collect();
        out.push_str(&format!("  grants          {}\n", names(grants)));
        let tags = o.tags.iter().map(|t| t.name.clone()).collect();
        out.push_str(&format!("  tags            {}\n", names(tags)));
        let ledgers = o.ledgers.iter().map(|l| l.name.clone()).collect();
        out.push_str(&format!("  ledgers         {}\n", names(ledgers)));
        let missions = o.missions.iter().map(|m| m.name.clone()).collect();
        out.push_str(&format!("  missions        {}\n", names(missions)));
        out.push_str(&format!(
            "  unacknowledged  {} answer(s)\n",
            o.unacknowledged.len()
        ));
        out
    }
}

/// `gridctl remote observe --host NAME --as PARTICIPANT`.
pub fn remote(command: RemoteCommand) -> anyhow::Result<ExitCode> {
    let RemoteCommand::Observe {
        host,
        participant,
        membership,
        output,
    } = command;
    let target = observe::host_dir(&output.state, &host);
    let own = observe::host_dir(&output.state, &participant);
    let config = HostConfig::read(&target)?;
    let address: std::net::SocketAddr = config.listen.parse()?;
    let shared = enrolled_memberships(&own);
    let membership = match membership {
        Some(m) => m,
        None => shared
            .iter()
            .find(|m| enrolled_memberships(&target).contains(m))
            .cloned()
            .with_context(|| format!("`{participant}` and `{host}` share no membership"))?,
    };
    let client = grid_engine::transport::Client::new(&own, &membership, &host, address)?;
    let reply = client
        .call(&Call::Observe)
        .map_err(|e| anyhow::anyhow!("refused or unreachable: {e}"))?;
    emit(&Observed(reply), output.json);
    Ok(ExitCode::SUCCESS)
}
