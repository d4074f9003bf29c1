//! `gridctl check` and `gridctl model eval|check|run`: the files, and one model of
//! them evaluated in memory or in a durable instance, without a host.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use grid_engine::grdx::Matrix;
use grid_engine::journal::DurableModel;
use grid_engine::model::{Runtime, Value};
use grid_spec::Options;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::common::{find_model, load, parse_sets};
use crate::report::{Report, emit};

#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Evaluate a model in memory: every input and cell as `NAME = VALUE`, in
    /// declaration order.
    Eval {
        #[command(flatten)]
        target: Target,
        /// Set an input for this evaluation (repeatable): NAME=VALUE.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Give matrix NAME the value in FILE (.grdx or .csv), its declared geometry
        /// (repeatable).
        #[arg(long = "matrix", value_name = "NAME=FILE")]
        matrix: Vec<String>,
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
    /// Apply version N of the mapping MATRIX of MODEL reads — staged at the model's
    /// host — as one batch: every cell at once, the cells reading it recomputed once
    /// (issue 34, docs/grdx.md). Once under --op ID (the same id answers again, applying
    /// nothing twice). Exit 0 applied, 1 failed (not staged, another geometry, …),
    /// 3 unknown (ask again with the same --op), 4 refused.
    #[command(mut_arg("json", |a| a.help("One JSON object {\"op\", \"outcome\", \"detail\", …}")))]
    ApplyMatrix {
        /// The model.
        model: String,
        /// Its matrix.
        matrix: String,
        /// The version (position) of the mapping's matrix staged at the model's host.
        #[arg(long, value_name = "N")]
        version: u64,
        /// The operation id; re-sending it returns the original answer.
        #[arg(long, value_name = "ID")]
        op: String,
        #[command(flatten)]
        output: crate::Output,
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
        /// Apply the value in FILE (.grdx or .csv) to matrix NAME as one batch of its
        /// own, before the --set batch (repeatable; each durable before the next).
        #[arg(long = "matrix", value_name = "NAME=FILE")]
        matrix: Vec<String>,
        /// Print one JSON object {"NAME": number or "#ERR!" text, ...}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct Target {
    /// Topology files, or directories whose .kdl files are read.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The model's name.
    #[arg(long, value_name = "NAME")]
    model: String,
}

/// `gridctl check FILES`.
pub fn check(files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let Some(topology) = load(files, Options::default()) else {
        return Ok(ExitCode::FAILURE);
    };
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    println!(
        "valid: {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}",
        count(topology.hosts.len(), "host"),
        count(topology.memberships.len(), "membership"),
        count(topology.models.len(), "model"),
        count(topology.routes.len(), "route"),
        count(topology.grants.len(), "grant"),
        count(topology.missions.len(), "mission"),
        count(topology.tags.len(), "tag"),
        count(topology.exports.len(), "export"),
        count(topology.ledgers.len(), "ledger"),
        count(topology.mappings.len(), "mapping"),
        count(topology.decisions.len(), "decision"),
    );
    Ok(ExitCode::SUCCESS)
}

pub fn model(command: ModelCommand) -> anyhow::Result<ExitCode> {
    match command {
        ModelCommand::Eval {
            target,
            set,
            matrix,
            json,
        } => eval(&target, &set, &matrix, json),
        ModelCommand::Check { target, json } => admission(&target, json),
        ModelCommand::Run {
            target,
            dir,
            set,
            batches,
            matrix,
            json,
        } => run(&target, &dir, &set, batches.as_deref(), &matrix, json),
        ModelCommand::ApplyMatrix {
            model,
            matrix,
            version,
            op,
            output,
        } => {
            let dir = crate::common::owner_of(&output.state, &model)?;
            let request = grid_engine::protocol::Request::ApplyMatrix {
                model,
                matrix,
                version,
            };
            Ok(crate::hosts::submit(&dir, op, request, &output))
        }
    }
}

/// Every input and cell with its value, in declaration order: `NAME = VALUE` lines, or
/// one JSON object {"NAME": number or "#ERR!" text}.
struct Values(Vec<(String, Value)>);

impl Values {
    fn of(runtime: &Runtime) -> Self {
        Values(
            runtime
                .values()
                .map(|(name, value)| (name.to_owned(), value))
                .collect(),
        )
    }
}

impl Serialize for Values {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            match value {
                Value::Number(n) => map.serialize_entry(name, n)?,
                Value::Error(e) => map.serialize_entry(name, &e.to_string())?,
            }
        }
        map.end()
    }
}

impl Report for Values {
    fn text(&self) -> String {
        self.0
            .iter()
            .map(|(name, value)| format!("{name} = {value}\n"))
            .collect()
    }
}

/// `--matrix NAME=FILE` entries, each file read and validated whole.
fn read_matrices(matrices: &[String]) -> anyhow::Result<Vec<(String, Matrix)>> {
    matrices
        .iter()
        .map(|entry| {
            let Some((name, file)) = entry
                .split_once('=')
                .filter(|(n, f)| !n.is_empty() && !f.is_empty())
            else {
                anyhow::bail!(
                    "--matrix `{}` is not NAME=FILE",
                    grid_spec::diagnostic::quoted(entry)
                );
            };
            Ok((name.to_owned(), Matrix::read_file(Path::new(file))?))
        })
        .collect()
}

/// `gridctl model eval`.
fn eval(
    target: &Target,
    set: &[String],
    matrix: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let sets = parse_sets("--set", set)?;
    let matrices = read_matrices(matrix)?;
    let Some(topology) = load(&target.files, Options::default()) else {
        return Ok(ExitCode::FAILURE);
    };
    let model = find_model(&topology, &target.model)?;
    let mut runtime = Runtime::new(model)?;
    for (name, matrix) in &matrices {
        runtime.apply_matrix(name, matrix)?;
    }
    let batch: Vec<(&str, f64)> = sets.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    if !batch.is_empty() {
        runtime.apply(&batch)?;
    }
    emit(&Values::of(&runtime), json);
    Ok(ExitCode::SUCCESS)
}

/// The owner's admission of one model, as `gridctl model check` reports it.
#[derive(Serialize)]
struct Admission<'m> {
    model: &'m str,
    inputs: usize,
    cells: usize,
    matrices: usize,
    items: usize,
    operations: u64,
    ceiling: u32,
    ceiling_declared: bool,
    scalar: bool,
    admitted: bool,
    error: Option<String>,
}

impl Report for Admission<'_> {
    fn text(&self) -> String {
        let mut text = format!("model {}\n", self.model);
        text += &format!("  inputs      {}\n", self.inputs);
        text += &format!("  cells       {}\n", self.cells);
        if self.matrices > 0 {
            text += &format!("  matrices    {}\n", self.matrices);
        }
        text += &format!("  operations  {}\n", self.operations);
        text += &format!(
            "  ceiling     {}{}\n",
            self.ceiling,
            if self.ceiling_declared {
                ""
            } else {
                " (default)"
            }
        );
        match &self.error {
            None => text += "  admitted\n",
            Some(e) => text += &format!("  not admitted: {e}\n"),
        }
        text
    }
}

/// `gridctl model check`.
fn admission(target: &Target, json: bool) -> anyhow::Result<ExitCode> {
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
    let error = Runtime::new(model).err().map(|e| e.to_string());
    let admitted = error.is_none();
    emit(
        &Admission {
            model: &model.name,
            inputs: model.inputs().count(),
            cells: model.cells().count(),
            matrices: model.matrices().count(),
            items: model.items.len(),
            operations: model.operations,
            ceiling: model.ceiling(),
            ceiling_declared: model.declared_ceiling.is_some(),
            scalar: model.scalar,
            admitted,
            error,
        },
        json,
    );
    Ok(if admitted {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `gridctl model run`.
fn run(
    target: &Target,
    dir: &Path,
    set: &[String],
    batches: Option<&Path>,
    matrix: &[String],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let matrices = read_matrices(matrix)?;
    let mut planned = vec![parse_sets("--set", set)?];
    if let Some(file) = batches {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read --batches {}", file.display()))?;
        planned = text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(number, line)| {
                let sets: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
                parse_sets("batch", &sets)
                    .with_context(|| format!("{} line {}", file.display(), number + 1))
            })
            .collect::<anyhow::Result<_>>()?;
    }
    let Some(topology) = load(&target.files, Options::default()) else {
        return Ok(ExitCode::FAILURE);
    };
    let model = find_model(&topology, &target.model)?;
    let mut instance = DurableModel::open(dir, model)?;
    for (name, matrix) in &matrices {
        let number = instance.apply_matrix(name, matrix)?;
        if batches.is_some() {
            eprintln!("batch {number} durable");
        }
    }
    for sets in planned.iter().filter(|sets| !sets.is_empty()) {
        let batch: Vec<(&str, f64)> = sets.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let number = instance.apply(&batch)?;
        if batches.is_some() {
            eprintln!("batch {number} durable");
        }
    }
    emit(&Values::of(instance.runtime()), json);
    Ok(ExitCode::SUCCESS)
}
