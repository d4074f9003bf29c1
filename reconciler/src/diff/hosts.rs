//! Host installations, their key custody, retained answers and models: their
//! transitions (pure, drafted from one observation) and the apply of the
//! installation's own files (`write`, `create_custody`, `rewrite_keys_as_pem`, each
//! with whether it took effect).

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use grid_engine::control::operators::Credentials;
use grid_engine::host::config::{HOST_CONFIG_FILE, HostConfig};
use grid_engine::protocol::{Outcome, Request};

use crate::observe::{HostObservation, HostStatus, Keys};
use crate::transition::Draft;
use crate::transition::{Action, Effect, Op, diff};

pub fn transitions(
    index: &crate::transition::Index<'_>,
    desired: Option<&grid_spec::Host>,
    observation: &HostObservation,
) -> Vec<Draft> {
    let name = &observation.name;
    let mut out = Vec::new();
    let Some(desired) = desired else {
        out.push(Draft::attention(
            "host",
            name,
            name,
            format!(
                "unmanaged: an installation exists in {} but no file declares it",
                observation.dir.display()
            ),
        ));
        return out;
    };
    // A retired host is never installed, changed or torn down by a plan: retiring an
    // installation (stopping it for good, its obligations closed) is not performed by
    // this version, and its store is never inferred away (SPEC principle 7).
    if desired.retired {
        let detail = match (&observation.config, &observation.status) {
            (None, HostStatus::Missing) => {
                "retired=#true: not installed, and a retired host is never installed".to_owned()
            }
            _ => format!(
                "retired=#true: retiring an installation is not performed by this version; {} is kept as it is (stop its gridd with `gridctl down` or by signal)",
                observation.dir.display()
            ),
        };
        out.push(Draft::attention("host", name, name, detail));
        return out;
    }
    let mut config = HostConfig::from_host(desired);
    // A store fenced at an authority asks its hosts (`storage authority=`).
    if let Some(claim) = &mut config.storage_claim {
        claim.voters = index
            .authority_hosts
            .get(claim.membership.as_str())
            .into_iter()
            .flatten()
            .map(|(participant, address)| grid_engine::config::VoterAddress {
                participant: participant.clone(),
                address: address.clone(),
            })
            .collect();
    }
    // The control plane's owners are the other hosts it shares a membership with; a
    // line with operator mutual TLS records the digest of the files it names, read now
    // (copied into the installation when it is written).
    let mut copies_stale = Vec::new();
    config.control_viewers = index.control_viewers(desired);
    if let Some(control) = &mut config.control {
        control.owners = index.control_owners(desired);
        for line in &mut control.listen {
            match Credentials::read_named(line) {
                Ok(None) => {}
                Ok(Some(credentials)) => {
                    line.digest = Some(credentials.digest());
                    // Copies damaged or missing beside an unchanged host.toml are
                    // written again.
                    if observation.config.is_some()
                        && let Err(why) = Credentials::read_copies(&observation.dir, line)
                    {
                        copies_stale.push(why);
                    }
                }
                Err(why) => {
                    // Keyed as the installation: what needs it waits.
                    out.push(
                        Draft::attention(
                            "host",
                            name,
                            name,
                            format!(
                                "control listen=\"{}\": {why}; the installation is not written until its files are right",
                                line.listen
                            ),
                        )
                        .key(format!("host:{name}")),
                    );
                    return out;
                }
            }
        }
    }
    // The archive is its own transition (`diff::archive`): the host's writes keep the
    // one its host.toml holds.
    let wanted_archive = std::mem::replace(
        &mut config.archive,
        observation.config.as_ref().and_then(|c| c.archive.clone()),
    );
    config.archive_leaving = observation
        .config
        .as_ref()
        .and_then(|c| c.archive_leaving.clone());
    config.archive_index_leaving = observation
        .config
        .as_ref()
        .and_then(|c| c.archive_index_leaving.clone());
    // So are the authorities' snapshot stores (`diff::snapshots`).
    config.snapshots = observation
        .config
        .as_ref()
        .map(|c| c.snapshots.clone())
        .unwrap_or_default();
    let archive = crate::diff::archive::transitions(
        name,
        &observation.dir,
        config.archive.as_ref(),
        (wanted_archive.as_ref(), desired.archive_files_named),
    );
    let write = |op: Op, detail: String| {
        Draft::new(
            op,
            "host",
            name,
            name,
            detail,
            Action::WriteHostConfig {
                config: config.clone(),
                dir: desired.dir.clone(),
            },
        )
        .key(format!("host:{name}"))
    };
    // Where the installation is against where the files want it: moving it is an
    // installation transfer (SPEC C11, docs/transfer.md), planned explicitly with its
    // operation id — an open one resumes under its own.
    if observation.config.is_some() && observation.link.as_deref() != desired.dir.as_deref() {
        out.push(transfer(desired, observation));
    }
    // The storage generation the files want: one above the installation's is a
    // storage replacement (docs/transfer.md), planned explicitly with its operation id.
    if observation.config.is_some()
        && let Some(wanted) = &desired.storage
        && let Some(draft) = storage(wanted, observation)
    {
        out.push(draft);
    }
    let fresh = match (&observation.config, &observation.status) {
        (None, HostStatus::Missing) => {
            out.push(write(
                Op::Create,
                format!("installation in {}", observation.dir.display()),
            ));
            true
        }
        (None, HostStatus::Unreachable { reason }) => {
            out.push(Draft::attention(
                "host",
                name,
                name,
                format!("installation unreadable: {reason}"),
            ));
            return out;
        }
        (Some(found), _) if *found == config && !copies_stale.is_empty() => {
            let mut detail = copies_stale.join("\n");
            if matches!(observation.status, HostStatus::Running(_)) {
                detail.push_str("\n(takes effect when gridd restarts)");
            }
            out.push(write(Op::Change, detail));
            false
        }
        (Some(found), _) if *found != config => {
            let changes = crate::changes::host_config(found, &config);
            let mut detail = diff(&found.to_toml(), &config.to_toml());
            if matches!(observation.status, HostStatus::Running(_)) {
                detail.push_str("\n(takes effect when gridd restarts)");
            }
            out.push(write(Op::Change, detail).changes(changes));
            false
        }
        _ => false,
    };
    out.extend(archive);
    if fresh {
        // An installation that does not exist yet certainly holds nothing: its models
        // are created once it runs.
        for model in index.models(name).iter().filter(|m| !m.retired) {
            out.push(install_model(name, model, index.install_model(model, None)));
        }
        return out;
    }
    out.extend(keys(desired, observation));
    let observed = match &observation.status {
        HostStatus::Running(o) => o,
        // `keys` said why: nothing is planned at a locked host.
        HostStatus::Locked(_) | HostStatus::Missing => return out,
        HostStatus::Unreachable { reason } => {
            let models = index.models(name).len();
            out.push(Draft::attention(
                "host",
                name,
                name,
                format!("unreachable: {reason}; its {models} model(s) cannot be planned"),
            ));
            return out;
        }
    };
    if let Some(restart) = restart_for_profiles(&config.profiles, observed.profiles.as_deref()) {
        out.push(Draft::attention("host", name, name, restart));
    }
    for retained in &observed.unacknowledged {
        let outcome = match retained.answer.outcome {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
        };
        out.push(
            Draft::new(
                Op::Attention,
                "operation",
                &retained.answer.op,
                name,
                format!(
                    "{} {outcome} at the owner ({}); its reply was never acknowledged",
                    retained.request.describe(),
                    retained.answer.detail
                ),
                Action::Recover {
                    op: retained.answer.op.clone(),
                },
            )
            .id(retained.answer.op.clone()),
        );
    }
    let submit = |op: Op, model: &str, detail: String, request: Request| {
        Draft::new(op, "model", model, name, detail, Action::Submit { request })
            .key(format!("model:{name}:{model}"))
    };
    let held: std::collections::HashMap<&str, &grid_engine::protocol::ModelState> = observed
        .models
        .iter()
        .map(|m| (m.name.as_str(), m))
        .collect();
    // The memberships the host leaves: the leave drops them from its models' records
    // (`- membership M @ H (leave)`), so a `serve` line removed for one is not `!`.
    let staying = |serves: &[String]| -> Vec<String> {
        serves
            .iter()
            .filter(|m| !desired.leaving.contains(m))
            .cloned()
            .collect()
    };
    for model in index.models(name) {
        let canonical = grid_spec::canonical::model(model);
        let install = index.install_model(model, Some(canonical.clone()));
        match held.get(model.name.as_str()) {
            None if model.retired => {}
            // Its custody says this installation held it: the store lost it.
            None if observation.held_models.contains(&model.name) => {
                out.push(Draft::lost(
                    "model",
                    &model.name,
                    name,
                    &observation.dir,
                    grid_engine::store::held::HELD_MODELS_FILE,
                    "number its batches from 1 and run its input ids again",
                ));
            }
            None => out.push(install_model(name, model, install)),
            Some(held) if held.retired && !model.retired => out.push(submit(
                Op::Create,
                &model.name,
                "reinstate a retired model as a new generation".to_owned(),
                install,
            )),
            Some(held) if held.retired => {}
            Some(_) if model.retired => out.push(submit(
                Op::Retire,
                &model.name,
                "retired=#true in the files".to_owned(),
                Request::RetireModel {
                    name: model.name.clone(),
                },
            )),
            // A membership the host admitted the model to and the files no longer name:
            // never a leave, never dropped by an install (SPEC §1.8).
            Some(held)
                if staying(&held.serves)
                    .iter()
                    .any(|m| !model.serves.contains(m)) =>
            {
                let kept = staying(&held.serves);
                let dropped: Vec<&str> = kept
                    .iter()
                    .filter(|m| !model.serves.contains(m))
                    .map(String::as_str)
                    .collect();
                out.push(Draft::attention(
                    "model",
                    &model.name,
                    name,
                    format!(
                        "unmanaged: the host admitted it to {} and no file says `serve {}` for it; a removed `serve` line is never a leave (leaving a membership is `member M leave=#true` on the host); put the line back",
                        dropped.join(", "),
                        dropped.join("`, `serve ")
                    ),
                ));
            }
            Some(held) if held.model != canonical => {
                let mut changes = crate::changes::model(&held.model, &canonical);
                changes.extend(serves_change(&staying(&held.serves), &model.serves));
                let detail = diff(&held.model, &canonical);
                out.push(submit(Op::Change, &model.name, detail, install).changes(changes));
            }
            Some(held) if staying(&held.serves) != model.serves => {
                let detail = format!(
                    "admitted to {} as well (the same definition: no new generation)",
                    model
                        .serves
                        .iter()
                        .filter(|m| !held.serves.contains(m))
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                out.push(
                    submit(Op::Change, &model.name, detail, install).changes(
                        serves_change(&staying(&held.serves), &model.serves)
                            .into_iter()
                            .collect(),
                    ),
                );
            }
            Some(_) => {}
        }
    }
    let declared: std::collections::HashSet<&str> =
        index.models(name).iter().map(|m| m.name.as_str()).collect();
    for held in observed.models.iter().filter(|m| !m.retired) {
        if !declared.contains(held.name.as_str()) {
            out.push(Draft::attention(
                "model",
                &held.name,
                name,
                "unmanaged: the host holds it but no file declares it here; mark it retired=#true to retire it".to_owned(),
            ));
        }
    }
    out
}

/// The change of the memberships a model serves, when they differ.
fn serves_change(held: &[String], wanted: &[String]) -> Option<crate::changes::Change> {
    let named = |list: &[String]| match list.is_empty() {
        true => "(none named)".to_owned(),
        false => list.join(" "),
    };
    (held != wanted).then(|| crate::changes::Change {
        field: "serves".to_owned(),
        before: named(held),
        after: named(wanted),
    })
}

/// `+ model M @ H` submitting `request` (its install): after the installation, when the
/// host does not exist yet.
fn install_model(host: &str, model: &grid_spec::Model, request: Request) -> Draft {
    Draft::new(
        Op::Create,
        "model",
        &model.name,
        host,
        format!(
            "{} inputs, {} cells",
            model.inputs().count(),
            model.cells().count()
        ),
        Action::Submit { request },
    )
    .key(format!("model:{host}:{}", model.name))
    .after([format!("host:{host}")])
}

/// `~ host H: transfer installation A -> B`, or why it cannot be planned now.
fn transfer(desired: &grid_spec::Host, observation: &HostObservation) -> Draft {
    let name = &observation.name;
    let source = observation
        .link
        .clone()
        .unwrap_or_else(|| observation.dir.clone());
    // No `dir`: back into the state directory's own `hosts/H`, copied beside it first.
    let (destination, back) = match desired.dir.clone() {
        Some(dir) => (dir, ""),
        None => (
            crate::observe::returning(&observation.dir),
            " (back into the state directory)",
        ),
    };
    if !destination.is_absolute() {
        return Draft::attention(
            "host",
            name,
            name,
            format!(
                "the files move it to `{}`: a transfer's destination is an absolute path",
                destination.display()
            ),
        );
    }
    // A gridd serving it is stopped by the prepare, once no gridd can start there again.
    let stops = if observation.status.serves() {
        "; its gridd is stopped first"
    } else {
        ""
    };
    let (files, bytes) = crate::observe::installation_size(&source);
    let generation = observation.keys.manifest().map_or(0, |m| m.generation);
    let draft = Draft::new(
        Op::Change,
        "host",
        name,
        name,
        format!(
            "transfer installation {} -> {}{back} ({}{files} files, {bytes} bytes, keys generation {generation}{stops})",
            source.display(),
            if back.is_empty() {
                &destination
            } else {
                &observation.dir
            }
            .display(),
            observation
                .inventory
                .as_ref()
                .map_or(String::new(), |i| format!("{}; ", i.describe()))
        ),
        Action::Transfer {
            source,
            destination: destination.clone(),
        },
    )
    .key(format!("transfer:{name}"));
    match &observation.transfer {
        Some(open) if open.destination == destination => draft.id(open.op.clone()),
        _ => draft,
    }
}

/// `~ host H: replace storage (generation N -> N+1)`, why it cannot be planned, or
/// nothing when the installation is at the generation the files name.
fn storage(wanted: &grid_spec::StorageGeneration, observation: &HostObservation) -> Option<Draft> {
    let name = &observation.name;
    let at = observation.storage_generation;
    let attention = |detail: String| Some(Draft::attention("host", name, name, detail));
    if wanted.generation == at {
        return None;
    }
    if wanted.generation < at {
        return attention(format!(
            "the installation is at storage generation {at}, the files say {}: a generation never goes back (the stores it replaced are fenced); write `storage generation={at}`",
            wanted.generation
        ));
    }
    if wanted.generation > at + 1 {
        return attention(format!(
            "the installation is at storage generation {at}, the files say {}: a replacement raises it by one (write `storage generation={}`)",
            wanted.generation,
            at + 1
        ));
    }
    let Some(from) = wanted.from.clone() else {
        return attention(format!(
            "storage generation {} needs `from=\"PATH\"`: the copy of the store to put in place",
            wanted.generation
        ));
    };
    if observation.status.serves() {
        return attention(format!(
            "replace storage (generation {at} -> {}) waits for its gridd to stop (a store is replaced under a stopped host)",
            wanted.generation
        ));
    }
    let draft = Draft::new(
        Op::Change,
        "host",
        name,
        name,
        format!(
            "replace storage (generation {at} -> {}) from {}",
            wanted.generation,
            from.display()
        ),
        Action::ReplaceStorage {
            from: from.clone(),
            generation: wanted.generation,
        },
    )
    .key(format!("storage:{name}"));
    Some(match &observation.replacement {
        Some(open) if open.from == from && open.generation == wanted.generation => {
            draft.id(open.op.clone())
        }
        _ => draft,
    })
}

/// The operation that rotates one key to a generation.
type RotateRequest = fn(u32) -> Request;

/// Key custody: created with the installation; rotated only when the files raise
/// `keys generation=N`; never regenerated because a key is missing (that refuses the
/// host instead) and never rotated backwards.
fn keys(desired: &grid_spec::Host, observation: &HostObservation) -> Vec<Draft> {
    let name = &observation.name;
    let mut out = Vec::new();
    if observation.config.is_none() {
        return out; // `+ host` creates the custody with the installation.
    }
    let manifest = match &observation.keys {
        Keys::Held(m) => m,
        Keys::Absent => {
            out.push(
                Draft::new(
                    Op::Create,
                    "keys",
                    name,
                    name,
                    "key custody: signing, mail and TLS keys with their manifest".to_owned(),
                    Action::CreateCustody,
                )
                .key(format!("keys:{name}")),
            );
            return out;
        }
        Keys::Unreadable(e) => {
            out.push(Draft::attention(
                "keys",
                name,
                name,
                format!("key custody unreadable: {e}"),
            ));
            return out;
        }
    };
    if !observation.hex_keys.is_empty() {
        out.push(
            Draft::new(
                Op::Change,
                "keys",
                name,
                name,
                format!(
                    "rewrite as PEM: {} (PKCS#8, the same keys: fingerprints unchanged)",
                    observation.hex_keys.join(", ")
                ),
                Action::RewriteKeysAsPem,
            )
            .key(format!("pem:{name}")),
        );
    }
    let running = match &observation.status {
        HostStatus::Running(o) => o.keys.as_ref(),
        _ => None,
    };
    // Locked custody (docs/custody.md): the passphrase is the operator's, so locking
    // and unlocking are the operator's commands, which the plan names.
    if matches!(observation.status, HostStatus::Locked(_)) {
        out.push(Draft::attention(
            "keys",
            name,
            name,
            format!("custody locked: gridd serves reads only, signs and admits nothing, until `gridctl custody unlock {name} --passphrase-file FILE`; nothing else is planned at it"),
        ));
        return out;
    }
    let encrypted = grid_engine::custody::encrypted_at_rest(&observation.dir);
    if desired.custody_locked && !encrypted {
        out.push(Draft::attention(
            "keys",
            name,
            name,
            format!("the files say `custody locked=#true`, its signing and mail keys are not encrypted at rest: `gridctl custody lock {name} --passphrase-file FILE` (the passphrase is never in the files)"),
        ));
    } else if !desired.custody_locked && encrypted {
        out.push(Draft::attention(
            "keys",
            name,
            name,
            "its signing and mail keys are encrypted at rest, the files do not say `custody locked=#true`: add it (Grid never writes them back unencrypted)".to_owned(),
        ));
    }
    // (key, wanted, held, what the old one stays, transition key prefix, the request).
    let rotations = [
        (
            "signing",
            desired.key_generation,
            running.map_or(manifest.generation, |k| k.generation),
            "verify-only",
            "rotate",
            (|generation| Request::RotateKeys { generation }) as RotateRequest,
        ),
        (
            "mail",
            desired.mail_key_generation,
            running.map_or(manifest.mail_generation, |k| k.mail_generation),
            "open-only",
            "rotate-mail",
            |generation| Request::RotateMailKey { generation },
        ),
        (
            "tls",
            desired.tls_key_generation,
            running.map_or(manifest.tls_generation, |k| k.tls_generation),
            "until every membership certifies the new one",
            "rotate-tls",
            |generation| Request::RotateTlsKey { generation },
        ),
    ];
    for (key, wanted, current, kept, prefix, request) in rotations {
        let wanted = wanted.unwrap_or(1);
        if wanted < current {
            out.push(Draft::attention(
                "keys",
                name,
                name,
                format!("the files say {key} generation {wanted}, the host holds {current}: generations only grow"),
            ));
        } else if wanted > current {
            if matches!(observation.status, HostStatus::Running(_)) {
                out.push(Draft::new(
                    Op::Change,
                    "keys",
                    name,
                    name,
                    format!("{key} key generation {current} -> {wanted} (generation {current} kept {kept})"),
                    Action::Submit { request: request(wanted) },
                ).key(format!("{prefix}:{name}")));
            } else {
                out.push(Draft::attention(
                    "keys",
                    name,
                    name,
                    format!("{key} key generation {current} -> {wanted} waits for the host to run (its owner rotates)"),
                ));
            }
        }
    }
    out
}

/// Profiles are read when gridd starts: when the running gridd's differ from those the
/// files select, the host must restart before they take effect, and the plan says so
/// until it has (`None`: a gridd too old to say which it runs).
/// Whether a gridd running `running` must restart to run `wanted`: the same set in
/// any order is the same (the plan, `up` and `inspect hosts` all ask this).
pub fn profiles_differ(wanted: &[String], running: &[String]) -> bool {
    wanted.iter().any(|p| !running.contains(p)) || running.iter().any(|p| !wanted.contains(p))
}

fn restart_for_profiles(wanted: &[String], running: Option<&[String]>) -> Option<String> {
    let running = running?;
    let added: Vec<&str> = wanted
        .iter()
        .filter(|p| !running.contains(p))
        .map(String::as_str)
        .collect();
    let dropped: Vec<&str> = running
        .iter()
        .filter(|p| !wanted.contains(p))
        .map(String::as_str)
        .collect();
    if added.is_empty() && dropped.is_empty() {
        return None;
    }
    let mut what = Vec::new();
    if !added.is_empty() {
        what.push(format!("to run profiles {}", added.join(" ")));
    }
    if !dropped.is_empty() {
        what.push(format!("to stop profiles {}", dropped.join(" ")));
    }
    Some(format!(
        "restart gridd {}: it runs {} (profiles take effect when gridd starts)",
        what.join(" and "),
        if running.is_empty() {
            "no profile".to_owned()
        } else {
            running.join(" ")
        }
    ))
}

// Applying: the installation's own files, which reconcile writes itself.

/// Creates or rewrites a host installation: `DIR` 0700 and `DIR/host.toml` 0600. A
/// host with `dir=` in the files lives there, reached through `<state>/hosts/NAME`.
pub fn write(link: &Path, custom: Option<&Path>, config: &HostConfig) -> Effect {
    Effect::local(write_installation(link, custom, config))
}

fn write_installation(
    link: &Path,
    custom: Option<&Path>,
    config: &HostConfig,
) -> Result<String, String> {
    let dir = custom.unwrap_or(link);
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    // Created 0700 when absent; an existing one with weaker permissions is refused.
    grid_engine::store::ensure_private_dir(dir).map_err(|e| e.to_string())?;
    if let Some(custom) = custom {
        if let Some(parent) = link.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(io)?;
        }
        if std::fs::symlink_metadata(link).is_err() {
            std::os::unix::fs::symlink(custom, link).map_err(io)?;
        }
    }
    // The operators' files of each control line first, read again and refused if
    // they changed since the plan: host.toml names their digest.
    for line in config.control.iter().flat_map(|c| &c.listen) {
        if let Some(credentials) = Credentials::read_named(line)? {
            if line.digest.as_deref() != Some(credentials.digest().as_str()) {
                return Err(format!(
                    "control listen=\"{}\": its files changed since the plan: plan again",
                    line.listen
                ));
            }
            credentials.install(dir, &line.listen)?;
        }
    }
    let path = dir.join(HOST_CONFIG_FILE);
    grid_engine::custody::write_private(&path, config.to_toml().as_bytes())
        .map_err(|e| e.to_string())?;
    // A new installation gets its keys; an existing custody is left as it is.
    let created = !grid_engine::custody::exists(dir);
    let manifest = grid_engine::custody::create(dir).map_err(|e| e.to_string())?;
    if created {
        Ok(format!(
            "wrote {} and key custody (generation {})",
            path.display(),
            manifest.generation
        ))
    } else {
        Ok(format!("wrote {}", path.display()))
    }
}

/// Whether the installation at `dir` holds `config` already, with intact copies of
/// its control lines' files.
pub fn written(dir: &Path, config: &HostConfig) -> bool {
    HostConfig::read(dir).ok().as_ref() == Some(config)
        && config
            .control
            .iter()
            .flat_map(|c| &c.listen)
            .all(|line| Credentials::read_copies(dir, line).is_ok())
}

/// Creates the host's key custody (keys and manifest).
pub fn create_custody(dir: &Path) -> Effect {
    Effect::local(
        grid_engine::custody::create(dir)
            .map(|m| format!("created key custody (generation {})", m.generation))
            .map_err(|e| e.to_string()),
    )
}

/// Whether the host's key custody exists.
pub fn custody_created(dir: &Path) -> bool {
    grid_engine::custody::exists(dir)
}

/// Rewrites the custody's key files still in hex as PEM PKCS#8.
pub fn rewrite_keys_as_pem(dir: &Path) -> Effect {
    Effect::local(
        grid_engine::custody::rewrite_as_pem(dir)
            .map(|files| {
                if files.is_empty() {
                    "every key file is PEM already".to_owned()
                } else {
                    format!("rewrote {} as PEM", files.join(", "))
                }
            })
            .map_err(|e| e.to_string()),
    )
}

/// Whether no key file of the custody is in hex any more.
pub fn keys_rewritten(dir: &Path) -> bool {
    grid_engine::custody::legacy_key_files(dir).is_ok_and(|hex| hex.is_empty())
}
