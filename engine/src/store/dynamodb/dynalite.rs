//! A `dynalite` server on loopback (npm `dynalite` 4.0.0, in memory), for the records
//! conformance suite (`engine/tests/records.rs`) and the lookup benchmark: the real
//! DynamoDB-protocol server they run against, on a free port; killed when dropped. Not
//! used by gridd. Found as `$DYNALITE`, else in `adapters/peers/node` (`npm ci` there,
//! as `.ci/run` does), else on `PATH`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::DynamoRecords;
use crate::store::s3::AccessKeys;

/// dynalite checks that a request is signed, not the signature: any keys do.
pub const ACCESS_KEY: &str = "grid-test";
pub const SECRET_KEY: &str = "grid-test-secret";
pub const REGION: &str = "us-east-1";
/// How long dynalite may take to answer.
const READY: Duration = Duration::from_secs(30);

/// Where the `dynalite` command is.
pub fn command() -> PathBuf {
    if let Some(path) = std::env::var_os("DYNALITE") {
        return path.into();
    }
    let installed = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../adapters/peers/node/node_modules/.bin/dynalite");
    match installed.exists() {
        true => installed,
        false => "dynalite".into(),
    }
}

/// A running dynalite.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    pub fn start() -> Result<Server, String> {
        // A port the kernel picks (each call another), not one derived from the process
        // id: two servers of one test process must not meet on one port. Picked and
        // released, it may be taken by another listener before dynalite binds it: then
        // dynalite exits, and another port is tried (at most STARTS times).
        const STARTS: usize = 3;
        let mut last = String::new();
        for _ in 0..STARTS {
            let port = std::net::TcpListener::bind(("127.0.0.1", 0))
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("no free loopback port: {e}"))?
                .port();
            let command = command();
            let child = Command::new(&command)
                .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| {
                    format!(
                        "`{}` (npm dynalite 4.0.0) does not run: {e}; run `npm ci` in adapters/peers/node",
                        command.display()
                    )
                })?;
            let mut server = Server { child, port };
            let started = Instant::now();
            // Ready when the listener on the port is this child's own (another
            // listener on a reused port must not pass for it).
            loop {
                if listens(server.child.id(), port) {
                    return Ok(server);
                }
                if let Ok(Some(status)) = server.child.try_wait() {
                    last = format!("dynalite exited ({status}) before listening on {port}");
                    break;
                }
                if started.elapsed() > READY {
                    return Err(format!(
                        "dynalite did not listen on {port} within {READY:?}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Err(last)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The table `name` on this server through `endpoint` (this server's, or a proxy's
    /// in front of it), created and checked.
    pub fn table(&self, name: &str, endpoint: &str) -> Result<DynamoRecords, String> {
        let records = DynamoRecords::new(
            name,
            endpoint,
            REGION,
            &AccessKeys::new(ACCESS_KEY, SECRET_KEY),
        )
        .map_err(|e| e.to_string())?;
        records.create_table().map_err(|e| e.to_string())?;
        Ok(records)
    }
}

/// Whether process `pid` holds the socket listening on `port` (Linux `/proc`: the
/// listening socket's inode among the process's descriptors).
fn listens(pid: u32, port: u16) -> bool {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_owned)
        })
        .collect();
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .any(|table| {
            table.lines().skip(1).any(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                // local_address, st (0A: LISTEN), inode
                f.len() > 9 && f[1].ends_with(&local) && f[3] == "0A" && inodes.contains(f[9])
            })
        })
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
