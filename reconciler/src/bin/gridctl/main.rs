//! `gridctl`: the operator's command line. Thin: argument parsing and output here, the
//! work in `grid_spec`, `grid_engine` and `grid_reconciler`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use grid_engine::journal::DurableModel;
use grid_engine::model::{Runtime, Value};
use grid_spec::{Diagnostics, Model, Options, Topology};

mod process;

/// Grid: live calculation models on many hosts, driven by KDL topology files.
#[derive(Parser, Debug)]
#[command(name = "gridctl", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate topology files (or directories of them); exit non-zero with
    /// diagnostics on any error.
    Check {
        /// Topology files, or directories whose .kdl files are read.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Evaluate, admit and run one model of a topology.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Diff the files against what each original owner retains: one line per
    /// transition (+ create, ~ change, - retire, ! needs attention). Changes nothing.
    Plan {
        /// Topology files, or directories whose .kdl files are read.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The operator's state directory (host installations live in STATE/hosts).
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// Save the plan (KDL) with a fingerprint of what was observed.
        #[arg(long, value_name = "PLAN")]
        out: Option<PathBuf>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Apply the transitions of a fresh plan of FILES, or exactly those of a saved
    /// PLAN, each once; never retries. Exit 0 succeeded, 1 failed, 3 unknown, 4 refused.
    Reconcile {
        /// Topology files (or directories), or one saved plan.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The operator's state directory (ignored for a saved plan, which names its own).
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The local embedded default: reconcile, run every host as a child gridd,
    /// reconcile until the plan is empty, then a live view (models, routes and
    /// receipts, grants, authority) until Ctrl-C or --seconds; every child is stopped.
    /// Under `cargo run`, gridd is built first.
    Up {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// Stop after N seconds.
        #[arg(long, value_name = "N")]
        seconds: Option<u64>,
    },
    /// Apply one input batch at the model's host (its owner), with an operation id.
    /// Exit 0 succeeded, 1 failed, 3 unknown, 4 refused.
    Input {
        /// The model.
        model: String,
        /// Inputs to set: NAME=VALUE...
        #[arg(required = true, value_name = "NAME=VALUE")]
        values: Vec<String>,
        /// The operation id; re-sending it returns the original answer.
        #[arg(long, value_name = "ID")]
        op: String,
        /// Stamp the write with a claim and the epoch its writer holds it at: the host
        /// refuses it once it has seen a newer epoch of that claim (fencing).
        #[arg(long, value_name = "CLAIM:EPOCH")]
        fence: Option<String>,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Read what an owner holds, without changing it.
    #[command(subcommand)]
    Inspect(InspectCommand),
    /// Remote Processes (profile `processes`): run one at another host under an
    /// execution grant, or resolve a run left unknown.
    #[command(subcommand)]
    Process(process::ProcessCli),
    /// A host's identity as its installation holds it: memberships (participant
    /// certificates), profiles, key generation, and whether it runs.
    Status {
        /// The host.
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Verify an operation's answer offline: the owner's retained answer, its signature
    /// checked with the public keys of the owner's custody manifest (retired
    /// generations included).
    Verify {
        /// The host that answered.
        #[arg(long, value_name = "NAME")]
        host: String,
        /// The operation id.
        #[arg(long, value_name = "ID")]
        op: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Call a host's control API over mutual TLS as one of its fellow participants.
    #[command(subcommand)]
    Remote(RemoteCommand),
    /// Journeys: scripted crashes and refusals against real hosts.
    #[command(subcommand)]
    Journey(JourneyCommand),
    /// Claims at a membership's authority, sent once as one of its hosts (with that
    /// host's credentials). Exit 0 succeeded, 1 failed, 3 unknown (re-send the same
    /// op id), 4 refused.
    #[command(subcommand)]
    Claim(ClaimCli),
    /// Operator actions on a membership's authority.
    #[command(subcommand)]
    Authority(AuthorityCli),
    /// Publish one value on ROUTE at its publisher HOST (profile `delivery`): it
    /// returns the value's position once the value is durable at the publisher, and
    /// only while HOST holds the route's publishing right (the claim `route:ROUTE`).
    /// A non-finite value, a full Ordered capacity ("capacity exhausted") or a fenced
    /// publisher is refused and nothing is published. Exit 0 published, 4 refused,
    /// 3 unknown (the reply was lost: `gridctl inspect inbox ROUTE --host HOST` shows
    /// what the publisher holds).
    Publish {
        route: String,
        /// A finite number.
        #[arg(allow_hyphen_values = true)]
        value: String,
        /// The route's publisher.
        #[arg(long = "as", value_name = "HOST")]
        host: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// One JSON object {"route", "position"}.
        #[arg(long)]
        json: bool,
    },
}

/// Options every claim command takes.
#[derive(Args, Debug)]
struct ClaimTarget {
    /// The operation id: re-sending it returns the original answer, never acts twice.
    #[arg(long, value_name = "ID")]
    op: String,
    /// The calling host: a host of the membership installed under the state that
    /// selects the `authority` profile (a voter or a learner).
    #[arg(long = "as", value_name = "HOST")]
    caller: String,
    /// The membership (default: the only one the host is enrolled in).
    #[arg(long, value_name = "M")]
    membership: Option<String>,
    #[arg(long, value_name = "DIR", default_value = "grid-state")]
    state: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum ClaimCli {
    /// Own CLAIM (a new epoch), if nobody holds it.
    Acquire {
        claim: String,
        #[command(flatten)]
        target: ClaimTarget,
    },
    /// Name PARTICIPANT as the successor of CLAIM (the owner only).
    EnrollSuccessor {
        claim: String,
        participant: String,
        #[command(flatten)]
        target: ClaimTarget,
    },
    /// Hand CLAIM to its enrolled successor: the owner is fenced (the epoch grows).
    Handoff {
        claim: String,
        #[command(flatten)]
        target: ClaimTarget,
    },
    /// Release CLAIM (the owner only).
    Release {
        claim: String,
        #[command(flatten)]
        target: ClaimTarget,
    },
    /// CLAIM as the authority holds it, read after a linearizable barrier.
    Show {
        claim: String,
        #[arg(long, value_name = "M")]
        membership: Option<String>,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum AuthorityCli {
    /// Build a snapshot at voter HOST now; the log it covers is purged and older
    /// snapshot generations are deleted.
    Snapshot {
        membership: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum RemoteCommand {
    /// Observe a host (`observe` over its transport), authenticated as participant
    /// AS with its installation's certificate and key.
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
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum JourneyCommand {
    /// Run journey files by hand, printing their story; exit 1 at the first failure.
    Run {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum InspectCommand {
    /// A membership's authority: voters, leader, term, last applied, profiles, and an
    /// explicit linearizable read barrier (`unknown` when no quorum confirms it).
    Authority {
        membership: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// TLS bytes the host's sockets wrote per peer and direction (profile
    /// `wire-observation`); an overflowed counter reads `unavailable`.
    Wire {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The routes a participant takes part in: role, class, destinations, published
    /// and receipted positions, values outstanding.
    Routes {
        /// One host (default: every installed host that answers).
        #[arg(long, value_name = "NAME")]
        host: Option<String>,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// What HOST holds durably of ROUTE: a destination its inbox, the publisher its
    /// published sequence (encrypted values opened with HOST's own mail key).
    Inbox {
        route: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        /// The first position to show.
        #[arg(long, value_name = "POSITION", default_value_t = 0)]
        from: u64,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// A JSON list of {"position", "value"}.
        #[arg(long)]
        json: bool,
    },
    /// The newest signed receipt of every destination of ROUTE, at its publisher, and
    /// the values still outstanding. With --verify every signature is checked offline
    /// with the recipient's public keys (its custody manifest); exit 1 if one fails.
    Receipts {
        route: String,
        #[arg(long)]
        verify: bool,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// {"route", "receipts", "verified", "outstanding", …}.
        #[arg(long)]
        json: bool,
    },
    /// A run as HOST holds it: as its receiver (outcome, grant, unit) or as its
    /// caller (its wait journal).
    Process {
        /// The request id.
        id: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// {"host", "run": null or {"request", "outcome", "result", "units", …}}.
        #[arg(long)]
        json: bool,
    },
    /// The grants HOST issued and their units: allocated, reserved, consumed,
    /// surrendered, unknown (held by runs left unknown).
    Grants {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// {"host", "allocated", "reserved", "consumed", "surrendered", "unknown",
        /// "grants": […]} (totals, then each grant with its signed issues).
        #[arg(long)]
        json: bool,
    },
    /// A simulated tag's source journal at HOST (profile `sources`): observations
    /// journaled, the last index and value, the position fed to each model, and
    /// whether the journal equals the deterministic sequence of its definition.
    Tag {
        tag: String,
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// {"host", "tag", "count", "last", "observations", "fed", "deterministic",
        /// "consecutive", …}.
        #[arg(long)]
        json: bool,
    },
    /// The Processes HOST serves, its runs by outcome, and the `demo.count` counter.
    Processes {
        #[arg(long, value_name = "NAME")]
        host: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// A model's current values as its host holds them.
    Model {
        model: String,
        #[arg(long, value_name = "DIR", default_value = "grid-state")]
        state: PathBuf,
        /// One JSON object {"NAME": number or "#ERR!" text, ...}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ModelCommand {
    /// Evaluate a model in memory: every input and cell as `NAME = VALUE`, in
    /// declaration order.
    Eval {
        #[command(flatten)]
        target: Target,
        /// Set an input for this evaluation (repeatable): NAME=VALUE.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Print one JSON object {"NAME": number or "#ERR!" text, ...}.
        #[arg(long)]
        json: bool,
    },
    /// Admission report: counted operations against the model's ceiling; exit
    /// non-zero when not admitted.
    Check {
        #[command(flatten)]
        target: Target,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Apply one batch to the durable instance in DIR (created if absent) and print
    /// the state; without --set, print the recovered state.
    Run {
        #[command(flatten)]
        target: Target,
        /// The instance's private directory (0700).
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Set an input in this batch (repeatable): NAME=VALUE.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Apply every line of FILE as one batch (`NAME=VALUE NAME=VALUE …`), in
        /// order, each durable before the next; reports `batch N durable` on stderr.
        #[arg(long, value_name = "FILE", conflicts_with = "set")]
        batches: Option<PathBuf>,
        /// Print one JSON object {"NAME": number or "#ERR!" text, ...}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
struct Target {
    /// Topology files, or directories whose .kdl files are read.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The model's name.
    #[arg(long, value_name = "NAME")]
    model: String,
}

/// Under `cargo run` (which sets `CARGO`), `up` and `journey run` first have cargo
/// build the `gridd` they start beside this gridctl, in the same profile, when it is
/// missing or older than this gridctl: `cargo run --bin gridctl` builds gridctl only,
/// and a missing or stale gridd would not speak this gridctl's protocol.
fn build_gridd_under_cargo() -> anyhow::Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    let exe = std::env::current_exe().context("where is gridctl?")?;
    let Some(dir) = exe.parent() else {
        return Ok(());
    };
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let gridd = dir.join("gridd");
    if let (Some(built), Some(ours)) = (modified(&gridd), modified(&exe))
        && built >= ours
    {
        return Ok(());
    }
    let mut build = std::process::Command::new(cargo);
    build.args(["build", "-q", "-p", "grid-engine", "--bin", "gridd"]);
    if let Some(manifest) = std::env::var_os("CARGO_MANIFEST_DIR") {
        build
            .arg("--manifest-path")
            .arg(PathBuf::from(manifest).join("Cargo.toml"));
    }
    if dir.ends_with("release") {
        build.arg("--release");
    }
    let status = build.status().context("cannot run cargo to build gridd")?;
    if !status.success() {
        bail!("cargo could not build gridd ({status})");
    }
    Ok(())
}

fn main() -> ExitCode {
    // Everything gridctl creates is private to its user (SPEC §1.6): directories 0700,
    // files 0600, including the files storage engines create later.
    // SAFETY: umask only sets this process's file-creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Prints diagnostics the way a person reads them: spans, labels, help lines.
fn report(diagnostics: Diagnostics) {
    eprintln!("{:?}", miette::Report::new(diagnostics));
}

fn load(files: &[PathBuf], options: Options) -> Option<Topology> {
    match grid_spec::load_with(files, options) {
        Ok(topology) => Some(topology),
        Err(diagnostics) => {
            report(diagnostics);
            None
        }
    }
}

fn find_model<'t>(topology: &'t Topology, name: &str) -> anyhow::Result<&'t Model> {
    topology.model(name).with_context(|| {
        let names: Vec<&str> = topology.models.iter().map(|m| m.name.as_str()).collect();
        if names.is_empty() {
            format!("model `{name}` is not declared: the files declare no model")
        } else {
            format!(
                "model `{name}` is not declared; the files declare: {}",
                names.join(", ")
            )
        }
    })
}

/// Parses `--set NAME=VALUE` arguments, refusing non-finite values before anything
/// is captured.
fn parse_sets(sets: &[String]) -> anyhow::Result<Vec<(String, f64)>> {
    sets.iter()
        .map(|set| {
            let (name, value) = set
                .split_once('=')
                .with_context(|| format!("--set `{set}`: expected NAME=VALUE"))?;
            let number: f64 = value
                .trim()
                .parse()
                .with_context(|| format!("--set `{set}`: `{value}` is not a number"))?;
            if !number.is_finite() {
                bail!("--set `{set}`: values are finite numbers; NaN and infinities are refused");
            }
            Ok((name.trim().to_owned(), number))
        })
        .collect()
}

fn print_values(runtime: &Runtime, json: bool) {
    if json {
        let mut object = serde_json::Map::new();
        for (name, value) in runtime.values() {
            let value = match value {
                Value::Number(n) => serde_json::Value::from(n),
                Value::Error(e) => serde_json::Value::from(e.to_string()),
            };
            object.insert(name.to_owned(), value);
        }
        println!("{}", serde_json::Value::Object(object));
    } else {
        for (name, value) in runtime.values() {
            println!("{name} = {value}");
        }
    }
}

/// The installed host that serves `model` (not retired), found under STATE/hosts.
fn owner_of(state: &std::path::Path, model: &str) -> anyhow::Result<PathBuf> {
    let hosts = grid_reconciler::observe::installed_hosts(state);
    let mut unreachable = Vec::new();
    for name in &hosts {
        let dir = grid_reconciler::observe::host_dir(state, name);
        match grid_reconciler::observe::observe_host(name, &dir).status {
            grid_reconciler::observe::HostStatus::Running(o) => {
                if o.models.iter().any(|m| m.name == model && !m.retired) {
                    return Ok(dir);
                }
            }
            _ => unreachable.push(name.clone()),
        }
    }
    if unreachable.is_empty() {
        bail!(
            "no running host under {} serves model `{model}`",
            state.display()
        )
    }
    bail!(
        "no running host under {} serves model `{model}`; not reachable: {}",
        state.display(),
        unreachable.join(", ")
    )
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plan {
            files,
            state,
            out,
            json,
        } => {
            let Some(topology) = load(&files, Options::default()) else {
                return Ok(ExitCode::FAILURE);
            };
            let plan = grid_reconciler::plan::plan(&topology, &files, &state);
            if let Some(out) = &out {
                std::fs::write(out, grid_reconciler::planfile::render(&plan))
                    .with_context(|| format!("cannot write {}", out.display()))?;
            }
            if json {
                println!("{}", plan.to_json());
            } else {
                print!("{}", plan.render());
                if let Some(out) = &out {
                    println!("saved to {}", out.display());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Reconcile { files, state, json } => {
            let plan = if let [only] = files.as_slice()
                && grid_reconciler::planfile::is_plan(only)
            {
                let plan = grid_reconciler::planfile::load(only).map_err(anyhow::Error::msg)?;
                if let Err(reason) = grid_reconciler::apply::check_fresh(&plan) {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"outcome": "refused", "reason": reason, "transitions": []})
                        );
                    } else {
                        eprintln!("refused: {reason}");
                    }
                    return Ok(ExitCode::from(
                        grid_reconciler::apply::Status::Refused.exit_code(),
                    ));
                }
                plan
            } else {
                let Some(topology) = load(&files, Options::default()) else {
                    return Ok(ExitCode::FAILURE);
                };
                grid_reconciler::plan::plan(&topology, &files, &state)
            };
            let report = grid_reconciler::apply::apply(&plan);
            if json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.render());
            }
            Ok(ExitCode::from(report.outcome.exit_code()))
        }
        Command::Up {
            files,
            state,
            seconds,
        } => {
            let Some(topology) = load(&files, Options::default()) else {
                return Ok(ExitCode::FAILURE);
            };
            build_gridd_under_cargo()?;
            let code =
                grid_reconciler::up::up(&topology, &files, &state, seconds, &mut std::io::stdout())
                    .map_err(anyhow::Error::msg)?;
            Ok(ExitCode::from(code))
        }
        Command::Input {
            model,
            values,
            op,
            fence,
            state,
            json,
        } => {
            let sets = parse_sets(&values)?;
            let fence = match fence {
                None => None,
                Some(text) => {
                    let Some((claim, epoch)) = text.rsplit_once(':') else {
                        bail!("--fence `{text}`: expected CLAIM:EPOCH");
                    };
                    let epoch: u64 = epoch.parse().with_context(|| {
                        format!("--fence `{text}`: the epoch is not a whole number")
                    })?;
                    Some(grid_engine::protocol::FenceStamp {
                        claim: claim.to_owned(),
                        epoch,
                    })
                }
            };
            let dir = owner_of(&state, &model)?;
            let (status, detail) = grid_reconciler::apply::send(
                &dir,
                grid_engine::protocol::Call::Submit {
                    op: op.clone(),
                    request: grid_engine::protocol::Request::Input {
                        model,
                        values: sets,
                        fence,
                    },
                },
            );
            if json {
                println!(
                    "{}",
                    serde_json::json!({"op": op, "outcome": status.name(), "detail": detail})
                );
            } else {
                println!("{op}: {} ({detail})", status.name());
                if status == grid_reconciler::apply::Status::Unknown {
                    println!(
                        "the outcome is unknown; nothing was retried. Re-send the same --op {op} to learn the original answer."
                    );
                }
            }
            Ok(ExitCode::from(status.exit_code()))
        }
        Command::Status { host, state, json } => {
            let dir = grid_reconciler::observe::host_dir(&state, &host);
            let observation = grid_reconciler::observe::observe_host(&host, &dir);
            let Some(config) = &observation.config else {
                bail!("no installation of host `{host}` under {}", state.display());
            };
            let keys = grid_engine::custody::manifest(&dir).ok();
            let memberships: Vec<_> = grid_engine::custody::membership::enrolled_memberships(&dir)
                .into_iter()
                .filter_map(|m| {
                    grid_engine::custody::membership::read_enrollment(&dir, &m)
                        .ok()
                        .flatten()
                })
                .collect();
            let running = matches!(
                observation.status,
                grid_reconciler::observe::HostStatus::Running(_)
            );
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "name": config.name,
                        "listen": config.listen,
                        "profiles": config.profiles,
                        "running": running,
                        "keys": keys.as_ref().map(|k| serde_json::json!({
                            "generation": k.generation,
                            "signing": k.signing,
                            "mail": k.mail,
                            "tls": k.tls,
                            "retired": k.retired.iter().map(|r| r.generation).collect::<Vec<_>>(),
                        })),
                        "memberships": memberships.iter().map(|e| serde_json::json!({
                            "membership": e.membership,
                            "participant": e.participant,
                            "serial": e.serial,
                            "not_after": e.not_after,
                            "authority": e.authority,
                        })).collect::<Vec<_>>(),
                    })
                );
            } else {
                println!(
                    "host {} ({})",
                    config.name,
                    if running { "running" } else { "not running" }
                );
                println!("  listen      {}", config.listen);
                println!("  profiles    [{}]", config.profiles.join(" "));
                if let Some(k) = &keys {
                    println!(
                        "  keys        signing generation {} ({} retired)",
                        k.generation,
                        k.retired.len()
                    );
                }
                for e in &memberships {
                    println!(
                        "  member      {} as participant {} (serial {}, until {})",
                        e.membership, e.participant, e.serial, e.not_after
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify {
            host,
            op,
            state,
            json,
        } => {
            let dir = grid_reconciler::observe::host_dir(&state, &host);
            let reply = grid_engine::host::control::Client::connect(&dir).and_then(|mut c| {
                c.call(&grid_engine::protocol::Call::Answer { op: op.clone() })
            })?;
            let grid_engine::protocol::Reply::Answer(answer) = reply else {
                bail!("host `{host}` holds no answer for operation `{op}` ({reply:?})");
            };
            let manifest = grid_engine::custody::manifest(&dir)?;
            let verified = answer.verify(&manifest);
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "op": op,
                        "host": host,
                        "verified": verified.is_some(),
                        "generation": verified,
                        "answer": answer,
                    })
                );
            } else {
                match verified {
                    Some(g) => println!(
                        "verified: operation {op} answered by {host}, signing key generation {g}"
                    ),
                    None => println!(
                        "NOT verified: the signature of operation {op} does not match {host}'s keys"
                    ),
                }
            }
            Ok(if verified.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Remote(RemoteCommand::Observe {
            host,
            participant,
            membership,
            state,
            json,
        }) => {
            let target = grid_reconciler::observe::host_dir(&state, &host);
            let own = grid_reconciler::observe::host_dir(&state, &participant);
            let config = grid_engine::host::config::HostConfig::read(&target)?;
            let address: std::net::SocketAddr = config.listen.parse()?;
            let shared = grid_engine::custody::membership::enrolled_memberships(&own);
            let membership = match membership {
                Some(m) => m,
                None => shared
                    .iter()
                    .find(|m| {
                        grid_engine::custody::membership::enrolled_memberships(&target).contains(m)
                    })
                    .cloned()
                    .with_context(|| format!("`{participant}` and `{host}` share no membership"))?,
            };
            let client = grid_engine::transport::Client::new(&own, &membership, &host, address)?;
            let reply: grid_engine::protocol::Reply = client
                .call(&grid_engine::protocol::Call::Observe)
                .map_err(|e| anyhow::anyhow!("refused or unreachable: {e}"))?;
            if json {
                println!("{}", serde_json::to_string(&reply)?);
            } else {
                println!("{reply:?}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Journey(JourneyCommand::Run { files }) => {
            build_gridd_under_cargo()?;
            let binaries = grid_journeys::Binaries::beside(&std::env::current_exe()?);
            for file in &files {
                if let Err(e) = grid_journeys::run_file(file, &binaries, &mut std::io::stdout()) {
                    eprintln!("{e}");
                    return Ok(ExitCode::FAILURE);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect(InspectCommand::Authority {
            membership,
            state,
            json,
        }) => {
            let inspection = grid_reconciler::authority::inspect(&state, &membership)
                .map_err(anyhow::Error::msg)?;
            if json {
                println!("{}", inspection.to_json());
            } else {
                print!("{}", inspection.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Claim(ClaimCli::Show {
            claim,
            membership,
            state,
            json,
        }) => {
            let membership =
                grid_reconciler::authority::membership_of(&state, membership.as_deref())
                    .map_err(anyhow::Error::msg)?;
            match grid_reconciler::authority::show(&state, &membership, &claim) {
                Ok((found, read_index, via)) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({
                                "claim": claim,
                                "membership": membership,
                                "barrier": "ok",
                                "read_index": read_index,
                                "owner": found.as_ref().map(|c| &c.owner),
                                "epoch": found.as_ref().map(|c| c.epoch),
                                "successor": found.as_ref().and_then(|c| c.successor.as_ref()),
                                "state": found.as_ref().map(|c| serde_json::to_value(c.state).expect("states serialize")),
                            })
                        );
                    } else {
                        match &found {
                            Some(c) => println!(
                                "{claim}: {} by {} at epoch {}{} (read after a barrier through {via}, index {read_index})",
                                serde_json::to_value(c.state)
                                    .expect("states serialize")
                                    .as_str()
                                    .unwrap_or("?"),
                                c.owner,
                                c.epoch,
                                c.successor
                                    .as_ref()
                                    .map(|s| format!(", successor {s}"))
                                    .unwrap_or_default()
                            ),
                            None => println!(
                                "{claim}: no such claim (read after a barrier through {via}, index {read_index})"
                            ),
                        }
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"claim": claim, "membership": membership, "barrier": "unknown", "detail": e})
                        );
                    } else {
                        eprintln!("{e}");
                    }
                    Ok(ExitCode::from(3))
                }
            }
        }
        Command::Claim(command) => {
            use grid_engine::authority::service::ClaimCommand;
            let (verb, target, command) = match command {
                ClaimCli::Acquire { claim, target } => {
                    ("acquire", target, ClaimCommand::Acquire { claim })
                }
                ClaimCli::EnrollSuccessor {
                    claim,
                    participant,
                    target,
                } => (
                    "enroll-successor",
                    target,
                    ClaimCommand::EnrollSuccessor {
                        claim,
                        successor: participant,
                    },
                ),
                ClaimCli::Handoff { claim, target } => {
                    ("handoff", target, ClaimCommand::Handoff { claim })
                }
                ClaimCli::Release { claim, target } => {
                    ("release", target, ClaimCommand::Release { claim })
                }
                ClaimCli::Show { .. } => unreachable!("handled above"),
            };
            let resend = format!(
                "gridctl claim {verb} {} --op {} --as {}",
                match &command {
                    ClaimCommand::Acquire { claim }
                    | ClaimCommand::Handoff { claim }
                    | ClaimCommand::Release { claim } => claim.clone(),
                    ClaimCommand::EnrollSuccessor { claim, successor } =>
                        format!("{claim} {successor}"),
                },
                target.op,
                target.caller
            );
            let result = grid_reconciler::authority::claim(
                &target.state,
                target.membership.as_deref(),
                &target.caller,
                &target.op,
                command,
            )
            .map_err(anyhow::Error::msg)?;
            if target.json {
                let mut value = result.to_json();
                if result.outcome == grid_engine::authority::service::ClaimOutcome::Unknown {
                    value["resend"] = serde_json::Value::from(resend.clone());
                }
                println!("{value}");
            } else {
                println!(
                    "{verb} {} (op {}) as {}: {}{}",
                    result.claim,
                    result.op,
                    result.caller,
                    result.outcome_name(),
                    if result.detail.is_empty() {
                        String::new()
                    } else {
                        format!(" — {}", result.detail)
                    }
                );
                if result.outcome == grid_engine::authority::service::ClaimOutcome::Unknown {
                    println!(
                        "nothing was retried; to learn the outcome re-send the same op id: {resend}"
                    );
                }
            }
            Ok(ExitCode::from(result.exit_code()))
        }
        Command::Authority(AuthorityCli::Snapshot {
            membership,
            host,
            state,
        }) => {
            let detail = grid_reconciler::authority::snapshot(&state, &membership, &host)
                .map_err(anyhow::Error::msg)?;
            println!("{host}: {detail}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Publish {
            route,
            value,
            host,
            state,
            json,
        } => {
            let number: f64 = match value.trim().parse() {
                Ok(v) if f64::is_finite(v) => v,
                _ => {
                    let detail = format!(
                        "value `{value}` is not a finite number; refused before capture, nothing was published"
                    );
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"route": route, "outcome": "refused", "detail": detail})
                        );
                    }
                    eprintln!("gridctl: {detail}");
                    return Ok(ExitCode::from(4));
                }
            };
            use grid_engine::delivery::api::{DeliveryCall, DeliveryReply};
            match grid_reconciler::routes::call(
                &state,
                &host,
                DeliveryCall::Publish {
                    route: route.clone(),
                    value: number,
                },
            ) {
                Ok(DeliveryReply::Published { route, position }) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"route": route, "position": position, "value": number, "host": host, "outcome": "succeeded"})
                        );
                    } else {
                        println!("published {number} on {route} at position {position}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Ok(DeliveryReply::Refused { reason }) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"route": route, "outcome": "refused", "detail": reason})
                        );
                    }
                    eprintln!("gridctl: publish refused: {reason}");
                    Ok(ExitCode::from(4))
                }
                Ok(other) => bail!("the host answered {other:?}"),
                Err(e) if e.contains("lost") => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"route": route, "outcome": "unknown", "detail": e})
                        );
                    }
                    eprintln!(
                        "gridctl: {e}\n  whether the value was published is unknown; `gridctl inspect inbox {route} --host {host}` shows what the publisher holds (nothing is re-sent)"
                    );
                    Ok(ExitCode::from(3))
                }
                Err(e) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"route": route, "outcome": "refused", "detail": format!("{e}; nothing was sent")})
                        );
                    }
                    eprintln!("gridctl: {e}; nothing was published");
                    Ok(ExitCode::from(4))
                }
            }
        }
        Command::Inspect(InspectCommand::Routes { host, state, json }) => {
            use grid_engine::delivery::api::{DeliveryCall, DeliveryReply};
            let hosts = match host {
                Some(h) => vec![h],
                None => grid_reconciler::observe::installed_hosts(&state),
            };
            let mut all = Vec::new();
            for h in &hosts {
                match grid_reconciler::routes::call(&state, h, DeliveryCall::Routes) {
                    Ok(DeliveryReply::Routes { routes, .. }) => {
                        all.extend(routes.into_iter().map(|r| (h.clone(), r)))
                    }
                    Ok(other) => bail!("{h} answered {other:?}"),
                    Err(e) if hosts.len() == 1 => bail!("{h}: {e}"),
                    Err(_) => {}
                }
            }
            if json {
                let list: Vec<_> = all
                    .iter()
                    .map(|(h, r)| {
                        serde_json::json!({
                            "host": h,
                            "route": r.route.name,
                            "membership": r.route.membership,
                            "class": r.route.class.name(),
                            "encrypted": r.route.encrypted,
                            "role": r.role,
                            "publisher": r.route.publisher,
                            "destinations": r.route.destinations.iter().map(|d| serde_json::json!({"host": d.host, "retired": d.retired})).collect::<Vec<_>>(),
                            "published": r.published,
                            "receipted": r.receipted,
                            "outstanding": r.outstanding,
                            "held": r.held,
                        })
                    })
                    .collect();
                println!("{}", serde_json::Value::Array(list));
            } else {
                for (h, r) in &all {
                    let class = r.route.class.name();
                    let sealed = if r.route.encrypted { " encrypted" } else { "" };
                    if r.role == "publisher" {
                        println!(
                            "{h}: publishes {} ({class}{sealed}, {}) to {} destination(s), published through {}",
                            r.route.name,
                            r.route.membership,
                            r.route.destinations.len(),
                            r.published
                        );
                        for d in &r.route.destinations {
                            println!(
                                "    {}{}: receipted through {}, {} outstanding",
                                d.host,
                                if d.retired { " (retired)" } else { "" },
                                r.receipted.get(&d.host).copied().unwrap_or(0),
                                r.outstanding.get(&d.host).copied().unwrap_or(0)
                            );
                        }
                    } else {
                        println!(
                            "{h}: receives {} ({class}{sealed}, {}) from {}, holds through {}",
                            r.route.name, r.route.membership, r.route.publisher, r.held
                        );
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect(InspectCommand::Tag {
            tag,
            host,
            state,
            json,
        }) => {
            let inspection = grid_reconciler::sources::inspect(&state, &tag, &host)
                .map_err(anyhow::Error::msg)?;
            if json {
                println!("{}", inspection.to_json());
            } else {
                print!("{}", inspection.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect(InspectCommand::Inbox {
            route,
            host,
            from,
            state,
            json,
        }) => {
            let values = grid_reconciler::routes::held(&state, &route, &host, from)
                .map_err(anyhow::Error::msg)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string(&values).expect("values serialize")
                );
            } else {
                for v in &values {
                    println!("{} {}", v.position, v.value);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect(InspectCommand::Receipts {
            route,
            verify,
            state,
            json,
        }) => {
            let receipts = grid_reconciler::routes::receipts(&state, &route, verify)
                .map_err(anyhow::Error::msg)?;
            if json {
                println!("{}", receipts.to_json());
            } else {
                print!("{}", receipts.render());
            }
            Ok(if receipts.verified() == Some(false) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Inspect(InspectCommand::Wire { host, state, json }) => {
            let dir = grid_reconciler::observe::host_dir(&state, &host);
            let reply = grid_engine::host::control::Client::connect(&dir)
                .and_then(|mut c| c.call(&grid_engine::protocol::Call::Wire))?;
            let peers = match reply {
                grid_engine::protocol::Reply::Wire { peers } => peers,
                grid_engine::protocol::Reply::Refused { reason } => bail!("{reason}"),
                other => bail!("the host answered {other:?}"),
            };
            if json {
                let peers: Vec<_> = peers
                    .iter()
                    .map(|p| {
                        serde_json::json!({
                            "peer": p.peer,
                            "direction": p.direction,
                            "bytes": p.bytes.map_or(serde_json::Value::from("unavailable"), serde_json::Value::from),
                        })
                    })
                    .collect();
                println!("{}", serde_json::json!({"host": host, "peers": peers}));
            } else {
                for p in &peers {
                    let bytes = p.bytes.map_or("unavailable".to_owned(), |b| b.to_string());
                    println!("{} {} {bytes}", p.peer, p.direction);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Process(command) => process::process(command),
        Command::Inspect(InspectCommand::Process {
            id,
            host,
            state,
            json,
        }) => process::inspect_process(&state, &id, &host, json),
        Command::Inspect(InspectCommand::Grants { host, state, json }) => {
            process::inspect_grants(&state, &host, json)
        }
        Command::Inspect(InspectCommand::Processes { host, state, json }) => {
            process::inspect_processes(&state, &host, json)
        }
        Command::Inspect(InspectCommand::Model { model, state, json }) => {
            let dir = owner_of(&state, &model)?;
            let reply = grid_engine::host::control::Client::connect(&dir).and_then(|mut c| {
                c.call(&grid_engine::protocol::Call::Values {
                    model: model.clone(),
                })
            })?;
            let grid_engine::protocol::Reply::Values { values, .. } = reply else {
                bail!("the host answered {reply:?}");
            };
            if json {
                let mut object = serde_json::Map::new();
                for (name, value) in values {
                    let value = match value {
                        grid_engine::protocol::ValueText::Number(n) => serde_json::Value::from(n),
                        grid_engine::protocol::ValueText::Error(e) => serde_json::Value::from(e),
                    };
                    object.insert(name, value);
                }
                println!("{}", serde_json::Value::Object(object));
            } else {
                for (name, value) in values {
                    match value {
                        grid_engine::protocol::ValueText::Number(n) => println!("{name} = {n}"),
                        grid_engine::protocol::ValueText::Error(e) => println!("{name} = {e}"),
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { files } => {
            let Some(topology) = load(&files, Options::default()) else {
                return Ok(ExitCode::FAILURE);
            };
            let count =
                |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
            println!(
                "valid: {}, {}, {}, {}, {}, {}, {}, {}",
                count(topology.hosts.len(), "host"),
                count(topology.memberships.len(), "membership"),
                count(topology.models.len(), "model"),
                count(topology.routes.len(), "route"),
                count(topology.grants.len(), "grant"),
                count(topology.missions.len(), "mission"),
                count(topology.tags.len(), "tag"),
                count(topology.exports.len(), "export"),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Model(ModelCommand::Eval { target, set, json }) => {
            let sets = parse_sets(&set)?;
            let Some(topology) = load(&target.files, Options::default()) else {
                return Ok(ExitCode::FAILURE);
            };
            let model = find_model(&topology, &target.model)?;
            let mut runtime = Runtime::new(model)?;
            let batch: Vec<(&str, f64)> = sets.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            if !batch.is_empty() {
                runtime.apply(&batch)?;
            }
            print_values(&runtime, json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Model(ModelCommand::Check { target, json }) => {
            // The owner's admission decides; validation here checks everything else.
            let Some(topology) = load(
                &target.files,
                Options {
                    admission: false,
                    ..Options::default()
                },
            ) else {
                return Ok(ExitCode::FAILURE);
            };
            let model = find_model(&topology, &target.model)?;
            let admission = Runtime::new(model);
            let inputs = model.inputs().count();
            let cells = model.cells().count();
            let error = admission.as_ref().err().map(ToString::to_string);
            if json {
                let report = serde_json::json!({
                    "model": model.name,
                    "inputs": inputs,
                    "cells": cells,
                    "items": model.items.len(),
                    "operations": model.operations,
                    "ceiling": model.ceiling(),
                    "ceiling_declared": model.declared_ceiling.is_some(),
                    "scalar": model.scalar,
                    "admitted": error.is_none(),
                    "error": error,
                });
                println!("{report}");
            } else {
                println!("model {}", model.name);
                println!("  inputs      {inputs}");
                println!("  cells       {cells}");
                println!("  operations  {}", model.operations);
                println!(
                    "  ceiling     {}{}",
                    model.ceiling(),
                    if model.declared_ceiling.is_some() {
                        ""
                    } else {
                        " (default)"
                    }
                );
                match &error {
                    None => println!("  admitted"),
                    Some(e) => println!("  not admitted: {e}"),
                }
            }
            Ok(if error.is_none() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Model(ModelCommand::Run {
            target,
            dir,
            set,
            batches,
            json,
        }) => {
            let mut planned = vec![parse_sets(&set)?];
            if let Some(file) = &batches {
                let text = std::fs::read_to_string(file)
                    .with_context(|| format!("cannot read --batches {}", file.display()))?;
                planned = text
                    .lines()
                    .enumerate()
                    .filter(|(_, line)| !line.trim().is_empty())
                    .map(|(number, line)| {
                        let sets: Vec<String> =
                            line.split_whitespace().map(str::to_owned).collect();
                        parse_sets(&sets)
                            .with_context(|| format!("{} line {}", file.display(), number + 1))
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            let Some(topology) = load(&target.files, Options::default()) else {
                return Ok(ExitCode::FAILURE);
            };
            let model = find_model(&topology, &target.model)?;
            let mut instance = DurableModel::open(&dir, model)?;
            for sets in planned.iter().filter(|sets| !sets.is_empty()) {
                let batch: Vec<(&str, f64)> = sets.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                let number = instance.apply(&batch)?;
                if batches.is_some() {
                    eprintln!("batch {number} durable");
                }
            }
            print_values(instance.runtime(), json);
            Ok(ExitCode::SUCCESS)
        }
    }
}
