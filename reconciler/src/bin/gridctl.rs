//! `gridctl`: the operator's command line. Thin: argument parsing and output here, the
//! work in `grid_spec`, `grid_engine` and `grid_reconciler`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use grid_engine::journal::DurableModel;
use grid_engine::model::{Runtime, Value};
use grid_spec::{Diagnostics, Model, Options, Topology};

/// Grid: live calculation models on many hosts, driven by KDL topology files.
#[derive(Parser, Debug)]
#[command(name = "gridctl", version, about, long_about = None)]
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

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
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
