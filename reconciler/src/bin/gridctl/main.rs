//! `gridctl`: the operator's command line. Thin: argument parsing and output here, the
//! work in `grid_spec`, `grid_engine` and `grid_reconciler`.
//!
//! This file is the clap tree and the dispatch. Each command family runs in a file of
//! its own (`model`, `plan`, `hosts`, `inspect`, `claim`, `routes`, `process`,
//! `journey`) and prints its result through `report::emit`: one JSON value with
//! `--json`, text for people otherwise. The commands, flags, help texts, exit codes
//! and both outputs are a public contract: the journeys parse them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

// First: its `print!`/`println!`/`eprint!`/`eprintln!` shadow std's in every module.
#[macro_use]
mod output;

mod check;
mod claim;
mod common;
mod custody;
mod decision;
mod export;
mod host;
mod hosts;
mod inspect;
mod journey;
mod ledger;
mod local;
mod mapping;
mod mission;
mod model;
mod plan;
mod process;
mod report;
mod routes;
mod storage;
mod wallet;

/// Grid: live calculation models on many hosts, driven by KDL topology files.
#[derive(Parser, Debug)]
#[command(
    name = "gridctl",
    // `gridctl 0.1.0 (abc1234)`: the commit from build.rs, `unknown` outside git.
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("GRID_COMMIT"), ")")
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `--state DIR` and `--json`, which most commands take. A command whose help says
/// more about either sets it with `mut_arg`. `GRID_STATE` sets the default of
/// `--state` (for `up` and `authority snapshot` too); a DIR that is not a directory is
/// refused while the arguments are parsed (`common::state_dir`).
#[derive(Args, Debug)]
struct Output {
    #[arg(long, value_name = "DIR", default_value = "grid-state", env = "GRID_STATE",
          value_parser = common::state_dir)]
    state: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validate topology files (or directories of them); exit non-zero with
    /// diagnostics on any error.
    Check {
        /// Topology files, or directories whose .kdl files are read.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print one JSON object on stdout: {"ok":true, "hosts":N, …} when valid, else
        /// {"ok":false, "diagnostics":[{file, span:{offset,length}, line, column,
        /// message, help, limit}]} (exit 1).
        #[arg(long)]
        json: bool,
    },
    /// Rewrite topology files in canonical KDL layout (indentation, spacing, one node
    /// a line), as `terraform fmt` does: no node, value or comment changes. Prints each
    /// file rewritten. Exit 0, 1 when a file is not KDL (nothing is rewritten), 3 with
    /// --check when a file is not in canonical layout.
    Fmt {
        /// Topology files, or directories whose .kdl files are read.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Rewrite nothing; list the files not in canonical layout (exit 3 if any).
        #[arg(long)]
        check: bool,
    },
    /// Stop the `gridctl up` of a state directory and every gridd serving one of its
    /// installations (SIGTERM, SIGKILL after a timeout). Retires, revokes and removes
    /// nothing: `up` or `gridd --dir` starts them again as they were. Exit 0, or 1 when
    /// a process could not be stopped.
    Down {
        #[command(flatten)]
        output: Output,
    },
    /// Evaluate, admit and run one model of a topology.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Diff the files against what each original owner retains: one line per
    /// transition (+ create, ~ change, - retire, ! needs attention), every stage at
    /// once — a transition whose owner does not exist or run yet says what it comes
    /// after and waits for. Changes nothing. Exit 0, or 1 on error; with
    /// --detailed-exitcode: 0 empty plan, 2 transitions, 1 error.
    #[command(
        mut_arg("state", |a| a.help(
            "The operator's state directory (host installations live in STATE/hosts)"
        )),
        // `--out` is listed between `--state` and `--json`.
        mut_arg("json", |a| a.help("Print the plan as JSON").display_order(3))
    )]
    Plan {
        /// Topology files, or directories whose .kdl files are read.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        output: Output,
        /// Save the plan (KDL) with a fingerprint of what was observed.
        #[arg(long, value_name = "PLAN")]
        out: Option<PathBuf>,
        /// Exit 0 when the plan is empty, 2 when it holds transitions, 1 on error.
        #[arg(long)]
        detailed_exitcode: bool,
    },
    /// Apply the transitions of a fresh plan of FILES, or exactly those of a saved
    /// PLAN, each once, in dependency order, each whose owner can take it now; never
    /// retries. Then says what still waits and what to start.
    ///
    /// Exit 0 everything applied and nothing needs attention, 1 failed, 3 unknown,
    /// 4 refused, 5 some transitions wait (start the hosts it names, then reconcile
    /// again), 6 applied, but lines needing attention remain.
    #[command(
        mut_arg("state", |a| a.help(
            "The operator's state directory; a saved plan applies to the state it was made against, and a --state (or GRID_STATE) naming another is refused"
        )),
        mut_arg("json", |a| a.help("Print the outcome as JSON"))
    )]
    Reconcile {
        /// Topology files (or directories), or one saved plan.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        output: Output,
    },
    /// The local embedded default: reconcile, run every host as a child gridd,
    /// reconcile until the plan is empty, then a live view (models, routes and
    /// receipts, grants, authority) until Ctrl-C or --seconds; every child is stopped.
    /// Under `cargo run`, gridd is built first.
    Up {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        // `up` prints no JSON: it takes `--state` alone.
        #[arg(long, value_name = "DIR", default_value = "grid-state", env = "GRID_STATE",
              value_parser = common::state_dir)]
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
        #[command(flatten)]
        output: Output,
    },
    /// Read what an owner holds, without changing it.
    #[command(subcommand)]
    Inspect(inspect::InspectCommand),
    /// Remote Processes (profile `processes`): run one at another host under an
    /// execution grant, resolve a run left unknown, or cancel a stopped wait with its
    /// receiver's signed proof of no dispatch.
    #[command(subcommand)]
    Process(process::ProcessCli),
    /// A host's identity as its installation holds it: memberships (participant
    /// certificates), profiles, the generations of its signing, mail and TLS keys,
    /// its storage generation, the transfer it arrived by (checked at its first
    /// start, signed by the host, the signature verified here), and whether it runs.
    Status {
        /// The host.
        #[arg(long, value_name = "NAME")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// Lock a host's keys at rest under a passphrase, or unlock a gridd that started
    /// locked (docs/custody.md, "Locked custody").
    #[command(subcommand)]
    Custody(custody::CustodyCli),
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
        #[command(flatten)]
        output: Output,
    },
    /// Call a host's control API over mutual TLS as one of its fellow participants.
    #[command(subcommand)]
    Remote(hosts::RemoteCommand),
    /// Journeys: scripted crashes and refusals against real hosts.
    #[command(subcommand)]
    Journey(journey::JourneyCommand),
    /// Claims at a membership's authority, sent once as one of its hosts (with that
    /// host's credentials). Exit 0 succeeded, 1 failed, 3 unknown (re-send the same
    /// op id), 4 refused.
    #[command(subcommand)]
    Claim(claim::ClaimCli),
    /// Operator actions on a membership's authority.
    #[command(subcommand)]
    Authority(claim::AuthorityCli),
    /// Publish one value on ROUTE at its publisher HOST (profile `delivery`): it
    /// returns the value's position once the value is durable at the publisher, and
    /// only while HOST holds the route's publishing right (the claim `route:ROUTE`).
    /// A non-finite value, a full Ordered capacity ("capacity exhausted") or a fenced
    /// publisher is refused and nothing is published. Exit 0 published, 4 refused,
    /// 3 unknown (the reply was lost: `gridctl inspect inbox ROUTE --host HOST` shows
    /// what the publisher holds).
    #[command(mut_arg("json", |a| a.help("One JSON object {\"route\", \"position\"}")))]
    Publish {
        route: String,
        /// A finite number.
        #[arg(allow_hyphen_values = true)]
        value: String,
        /// The route's publisher.
        #[arg(long = "as", value_name = "HOST")]
        host: String,
        #[command(flatten)]
        output: Output,
    },
    /// Publish one whole matrix on MAPPING at its publisher HOST (issue 34,
    /// docs/grdx.md): FILE is read whole (`.grdx` GRDX bytes or a `.csv` table) and
    /// checked before anything is sent; HOST checks it against the mapping's geometry,
    /// confirms its right to publish (the claim `mapping:MAPPING`) and answers the
    /// position (the version) once the matrix is durable. Under --op ID it is published
    /// once: the same id answers the same position again. Exit 0 published, 4 refused
    /// (nothing published), 3 unknown (the reply was lost; ask again with the same --op).
    #[command(mut_arg("json", |a| a.help(
        "One JSON object {\"mapping\", \"op\", \"host\", \"position\", \"rows\", \"cols\", \"outcome\"}"
    )))]
    PublishMatrix {
        mapping: String,
        /// The mapping's publisher.
        #[arg(long = "as", value_name = "HOST")]
        host: String,
        /// The matrix: GRDX bytes (`.grdx`) or a CSV table of numbers (`.csv`).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// The operation id under which it is published once.
        #[arg(long, value_name = "ID")]
        op: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Print a completion script for SHELL on stdout, e.g.
    /// `gridctl completions bash > /etc/bash_completion.d/gridctl` or
    /// `gridctl completions zsh > "${fpath[1]}/_gridctl"`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Ledger operations (profile `ledger`): transfers, posts and voids, each once
    /// under its operation id, answered after the ledger's journal is fsynced; and
    /// lookups of the answers ids hold, applying nothing.
    #[command(subcommand)]
    Ledger(ledger::LedgerCli),
    /// The wallet of a participant (read-only `show`, observed from its original
    /// owners) and the archive wallet (profile `archive-wallet`): proposals,
    /// surrender, signed archives verified offline, foreign archives opened
    /// observed-only.
    #[command(subcommand)]
    Wallet(wallet::WalletCli),
    /// Missions (profile `missions`): re-send a reservation, return a mission,
    /// never-issued recovery into the successor. Reservation and return are planned
    /// from the files (`+ mission`, `returned=#true`).
    #[command(subcommand)]
    Mission(mission::MissionCli),
    /// Decisions (profile `decisions`, docs/decisions.md): open one at its host, cast
    /// a roster member's signed ballot, the gate operator's signed approval, and ask
    /// for the one apply run's outcome. Policies are installed from the files
    /// (`+ decision`).
    #[command(subcommand)]
    Decision(decision::DecisionCli),
    /// A host's storage: checkpoint and purge now, move old answers to its archive now,
    /// read its archive back and verify it (docs/storage.md).
    #[command(subcommand)]
    Storage(storage::StorageCli),
    /// A host's installation: replace its store by a copy under a new storage
    /// generation, the replaced one fenced (docs/transfer.md).
    #[command(subcommand)]
    Host(host::HostCli),
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

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check { files, json } => check::check(&files, json),
        Command::Fmt { files, check } => local::fmt(&files, check),
        Command::Down { output } => local::down(&output),
        Command::Model(command) => model::model(command),
        Command::Plan {
            files,
            output,
            out,
            detailed_exitcode,
        } => plan::plan(&files, out.as_deref(), detailed_exitcode, &output),
        Command::Reconcile { files, output } => plan::reconcile(&files, &output),
        Command::Up {
            files,
            state,
            seconds,
        } => plan::up(&files, &state, seconds),
        Command::Input {
            model,
            values,
            op,
            fence,
            output,
        } => hosts::input(model, &values, op, fence.as_deref(), &output),
        Command::Inspect(command) => inspect::inspect(command),
        Command::Process(command) => process::process(command),
        Command::Status { host, output } => hosts::status(&host, &output),
        Command::Verify { host, op, output } => hosts::verify(&host, &op, &output),
        Command::Custody(command) => custody::custody(command),
        Command::Host(command) => host::host(command),
        Command::Remote(command) => hosts::remote(command),
        Command::Journey(command) => journey::journey(command),
        Command::Claim(command) => claim::claim(command),
        Command::Authority(command) => claim::authority(command),
        Command::Publish {
            route,
            value,
            host,
            output,
        } => routes::publish(route, &value, &host, &output),
        Command::PublishMatrix {
            mapping,
            host,
            file,
            op,
            output,
        } => mapping::publish(&mapping, &host, &file, op.as_deref(), &output),
        Command::Completions { shell } => completions(shell),
        Command::Ledger(command) => ledger::ledger(command),
        Command::Wallet(command) => wallet::wallet(command),
        Command::Mission(command) => mission::mission(command),
        Command::Decision(command) => decision::decision(command),
        Command::Storage(command) => storage::storage(command),
    }
}

/// `gridctl completions SHELL`: the script clap_complete writes for this clap tree,
/// buffered first (clap_complete panics on a write error; `print!` does not).
fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "gridctl", &mut script);
    print!("{}", String::from_utf8_lossy(&script));
    Ok(ExitCode::SUCCESS)
}
