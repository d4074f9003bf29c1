//! TigerBeetle's side: one replica of the executable built from source
//! (`$TIGERBEETLE_BIN`, else `tigerbeetle` on PATH), formatted in the work directory
//! (`tigerbeetle format --cluster=0 --replica=0 --replica-count=1`, no `--development`:
//! Direct IO and the production batch size) and started on a free loopback port; the
//! load is `benches/tigerbeetle/two_phase.js` with the official Node client
//! (`tigerbeetle-node`, pinned in `benches/tigerbeetle/package.json`), run as a child
//! process per measurement, whose JSON lines this module reads.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use grid_benches::bringup::HOST_READY_TIMEOUT;
use grid_benches::cli::Measurement;
use grid_benches::measure::{Call, Cpu, CpuMeter, Record, Window};
use grid_benches::procs::{Procs, Result, cpu_time, die_with_parent, free_ports, tail};

use crate::Args;
use crate::rows::{Cell, TIGERBEETLE, Unit};

/// Where the client script lives, beside this crate.
fn script_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tigerbeetle")
}

/// Everything TigerBeetle's side needs, found before anything starts.
pub struct Prerequisites {
    pub tigerbeetle: PathBuf,
    /// `tigerbeetle version`.
    pub version: String,
    node: PathBuf,
    /// `tigerbeetle-node X (Node vY)`.
    pub client: String,
}

fn first_line(command: &mut Command) -> Option<String> {
    let out = command.output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()?
            .trim()
            .to_owned(),
    )
}

impl Prerequisites {
    /// The executable, Node and the installed client, or which one is missing and how
    /// to get it.
    pub fn find() -> std::result::Result<Prerequisites, String> {
        let tigerbeetle = std::env::var_os("TIGERBEETLE_BIN")
            .map_or_else(|| PathBuf::from("tigerbeetle"), PathBuf::from);
        let version = first_line(Command::new(&tigerbeetle).arg("version")).ok_or_else(|| {
            format!(
                "no TigerBeetle executable ({} version failed): build it from source as \
                 BENCHMARKS.md §10 says (pip install ziglang==0.14.1, zig build -Drelease) and \
                 set TIGERBEETLE_BIN to zig-out/bin/tigerbeetle",
                tigerbeetle.display()
            )
        })?;
        let node = std::env::var_os("NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from);
        let node_version = first_line(Command::new(&node).arg("--version")).ok_or_else(|| {
            format!(
                "no Node.js ({} --version failed): the client script needs node ≥ 18 \
                 (Debian: apt-get install nodejs npm), or set NODE",
                node.display()
            )
        })?;
        let package = script_dir().join("node_modules/tigerbeetle-node/package.json");
        let client_version = std::fs::read_to_string(&package)
            .ok()
            .and_then(|text| serde_json::from_str::<Value>(&text).ok())
            .and_then(|v| v["version"].as_str().map(str::to_owned))
            .ok_or_else(|| {
                format!(
                    "no TigerBeetle Node client at {}: npm ci --prefix benches/tigerbeetle",
                    package.display()
                )
            })?;
        Ok(Prerequisites {
            tigerbeetle,
            version,
            node,
            client: format!("tigerbeetle-node {client_version} (Node {node_version})"),
        })
    }
}

/// What the client scripts reported at the end of each measurement.
#[derive(Default)]
struct Totals {
    posted: u128,
    posted_amount: u128,
    /// The balances summed over every account after the last measurement.
    last: Option<[u128; 4]>,
}

/// The running replica.
pub struct Replica {
    pub found: Prerequisites,
    pub port: u16,
    procs: Procs,
    dir: PathBuf,
    totals: Totals,
}

impl Replica {
    /// Formats the data file under `work/tigerbeetle` and starts the replica; ready
    /// once it accepts TCP connections.
    pub fn start(found: Prerequisites, work: &Path) -> Result<Replica> {
        let dir = work.join("tigerbeetle");
        std::fs::create_dir_all(&dir)?;
        let data = dir.join("0_0.tigerbeetle");
        let format_log = dir.join("format.log");
        let out = std::fs::File::create(&format_log)?;
        let status = Command::new(&found.tigerbeetle)
            .args(["format", "--cluster=0", "--replica=0", "--replica-count=1"])
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()?;
        if !status.success() {
            return Err(format!(
                "tigerbeetle format failed ({status}):\n{}",
                tail(&format_log, 20)
            )
            .into());
        }
        let port = free_ports(1)?[0];
        let mut procs = Procs::default();
        let mut command = Command::new(&found.tigerbeetle);
        command
            .arg("start")
            .arg(format!("--addresses=127.0.0.1:{port}"))
            .arg(&data);
        procs.spawn("tigerbeetle", command, &dir.join("replica.log"))?;
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            procs.check_running()?;
            if started.elapsed() > HOST_READY_TIMEOUT {
                return Err(format!(
                    "tigerbeetle did not listen on 127.0.0.1:{port} within {HOST_READY_TIMEOUT:?}:\n{}",
                    procs.log_tail("tigerbeetle")
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Replica {
            found,
            port,
            procs,
            dir,
            totals: Totals::default(),
        })
    }

    /// One measurement with `connections` clients (measurement `index` of the run: its
    /// transfer ids are new).
    pub fn measure(
        &mut self,
        m: &Measurement,
        args: &Args,
        connections: usize,
        index: usize,
    ) -> Result<Cell> {
        let stderr_log = self.dir.join(format!("client-{index}.log"));
        let mut command = Command::new(&self.found.node);
        command
            .arg(script_dir().join("two_phase.js"))
            .arg("--address")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--accounts")
            .arg(args.accounts.to_string())
            .arg("--connections")
            .arg(connections.to_string())
            .arg("--batch")
            .arg(args.batch.to_string())
            .arg("--warmup")
            .arg(m.warmup.to_string())
            .arg("--seconds")
            .arg(m.seconds.to_string())
            .arg("--id-base")
            .arg(((index as u128 + 1) * 1_000_000_000_000_000).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_log)?);
        die_with_parent(&mut command);
        let mut child = command.spawn()?;
        let client_pid = child.id();
        let server_pids = self.procs.pids();
        let stdout = child.stdout.take().ok_or("the client's stdout")?;
        let mut records: Vec<Record<Unit>> = (0..connections).map(|_| Record::default()).collect();
        let mut meter: Option<(CpuMeter, Duration)> = None;
        let mut cpu = None;
        let mut window = None;
        let mut check = None;
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            let event: Value =
                serde_json::from_str(&line).map_err(|e| format!("client line {line:?}: {e}"))?;
            match event["event"].as_str() {
                Some("window") => {
                    meter = Some((
                        CpuMeter::start(server_pids.clone()),
                        cpu_time(Some(client_pid)),
                    ));
                }
                Some("unit") => {
                    let connection = number(&event, "connection")? as usize;
                    let (unit, start_ns, end_ns) = unit(&event)?;
                    records
                        .get_mut(connection)
                        .ok_or("a unit of an unknown connection")?
                        .calls
                        .push(Call {
                            start_ns,
                            end_ns,
                            value: unit,
                        });
                }
                Some("done") => {
                    let (meter, client_start) = meter.take().ok_or("done before the window")?;
                    let server = meter.stop().server;
                    cpu = Some(Cpu {
                        server,
                        client: cpu_time(Some(client_pid)).saturating_sub(client_start),
                    });
                    let now = Instant::now();
                    window = Some(Window {
                        measure_from: now,
                        end: now,
                        from_ns: ms_to_ns(number(&event, "window_from_ms")?),
                        end_ns: ms_to_ns(number(&event, "window_end_ms")?),
                    });
                }
                Some("check") => check = Some(event),
                _ => {}
            }
        }
        let status = child.wait()?;
        self.procs.check_running()?;
        if !status.success() {
            return Err(format!(
                "the TigerBeetle client script failed ({status}):\n{}",
                tail(&stderr_log, 20)
            )
            .into());
        }
        let (Some(window), Some(cpu), Some(check)) = (window, cpu, check) else {
            return Err(format!(
                "the TigerBeetle client script ended early:\n{}",
                tail(&stderr_log, 20)
            )
            .into());
        };
        let amount = |key: &str| -> Result<u128> {
            Ok(check[key]
                .as_str()
                .and_then(|s| s.parse().ok())
                .or_else(|| check[key].as_u64().map(u128::from))
                .ok_or_else(|| format!("check without {key}"))?)
        };
        self.totals.posted += amount("posted_by_this_run")?;
        self.totals.posted_amount += amount("posted_amount_by_this_run")?;
        self.totals.last = Some([
            amount("debits_posted")?,
            amount("credits_posted")?,
            amount("debits_pending")?,
            amount("credits_pending")?,
        ]);
        Ok(Cell::new(
            TIGERBEETLE,
            connections,
            true,
            &window,
            records,
            cpu,
        ))
    }

    /// The replica's balances against what the scripts posted.
    pub fn check(&self) -> String {
        let t = &self.totals;
        match t.last {
            None => format!("{TIGERBEETLE}: nothing measured"),
            Some(
                [
                    debits_posted,
                    credits_posted,
                    debits_pending,
                    credits_pending,
                ],
            ) => {
                let ok = debits_posted == t.posted_amount
                    && credits_posted == t.posted_amount
                    && debits_pending == 0
                    && credits_pending == 0;
                format!(
                    "{TIGERBEETLE}: {} two-phase transfers posted; debits posted {debits_posted}, \
                     credits posted {credits_posted}, their posted amounts {}; pending {debits_pending} / \
                     {credits_pending}: {}",
                    t.posted,
                    t.posted_amount,
                    if ok { "consistent" } else { "MISMATCH" }
                )
            }
        }
    }
}

fn number(event: &Value, key: &str) -> Result<f64> {
    Ok(event[key]
        .as_f64()
        .ok_or_else(|| format!("{event}: no number {key}"))?)
}

fn ms_to_ns(ms: f64) -> u64 {
    (ms * 1e6) as u64
}

/// A unit line: its batches, what it posted and refused; its start and end.
fn unit(event: &Value) -> Result<(Unit, u64, u64)> {
    let at = |key: &str| number(event, key).map(ms_to_ns);
    let (pending_start, pending_end) = (at("pending_start_ms")?, at("pending_end_ms")?);
    let (post_start, post_end) = (at("post_start_ms")?, at("post_end_ms")?);
    let refused = event["failures"]
        .as_object()
        .map(|failures| {
            failures
                .iter()
                .map(|(status, n)| (status.clone(), n.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    Ok((
        Unit {
            batch_ns: vec![pending_end - pending_start, post_end - post_start],
            posted: number(event, "posted")? as u64,
            posted_amount: 0,
            refused,
        },
        pending_start,
        post_end,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_line_gives_its_batches_and_refusals() {
        let line = r#"{"event":"unit","connection":0,"pending_start_ms":1.5,"pending_end_ms":3.5,
            "post_start_ms":3.6,"post_end_ms":4.6,"posted":8188,"failures":{"exists":1}}"#;
        let (unit, start, end) = unit(&serde_json::from_str(line).unwrap()).unwrap();
        assert_eq!((start, end), (1_500_000, 4_600_000));
        assert_eq!(unit.batch_ns, vec![2_000_000, 1_000_000]);
        assert_eq!(unit.posted, 8188);
        assert_eq!(unit.refused, vec![("exists".to_owned(), 1)]);
    }
}
