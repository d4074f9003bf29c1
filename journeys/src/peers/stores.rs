//! The object and record stores among the peers: SeaweedFS (S3) and dynalite (DynamoDB),
//! their commands, the bucket or table each is ready with, and the independent client
//! (`curl --aws-sigv4`) that makes them and that the steps read them with.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use super::{
    PEER_READY_TIMEOUT, PEERS_DIR, POLL_INTERVAL, Peers, SEAWEED_KEY, SEAWEED_SECRET, not_ready,
};
use crate::error::Failure;

impl Peers {
    /// `weed server -s3` for peer `name`: its identity's keys in
    /// `$WORK/peers/NAME.credentials` (0600) and `$WORK/peers/NAME.s3.json`, its data in
    /// `$WORK/peers/NAME/`.
    pub(super) fn seaweedfs(
        &self,
        name: &str,
        port: u16,
        expected: &str,
    ) -> Result<(Command, String), Failure> {
        let identities = self.configs.join(format!("{name}.s3.json"));
        let data = self.store_files(name, expected, || {
            std::fs::write(
                &identities,
                format!(
                    r#"{{"identities":[{{"name":"grid","credentials":[{{"accessKey":"{SEAWEED_KEY}","secretKey":"{SEAWEED_SECRET}"}}],"actions":["Admin","Read","List","Write"]}}]}}"#
                ),
            )
        })?;
        let at = |i: u16| (port + i).to_string();
        let mut command = Command::new("weed");
        command
            .arg("server")
            .arg(format!("-dir={}", data.display()))
            .args([
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-s3",
                "-master.telemetry=false",
            ])
            .args(["-volume.max=0", "-master.volumeSizeLimitMB=64"])
            .arg(format!("-s3.port={}", at(0)))
            .arg(format!("-master.port={}", at(1)))
            .arg(format!("-master.port.grpc={}", at(2)))
            .arg(format!("-volume.port={}", at(3)))
            .arg(format!("-volume.port.grpc={}", at(4)))
            .arg(format!("-filer.port={}", at(5)))
            .arg(format!("-filer.port.grpc={}", at(6)))
            .arg(format!("-s3.port.grpc={}", at(7)))
            .args(["-s3.port.iceberg=0", "-s3.port.lance=0"])
            .arg(format!("-s3.config={}", identities.display()));
        let shown = format!(
            "weed server -s3 -s3.port={port} (ports {port}..{}) -dir={}",
            port + 7,
            data.display()
        );
        Ok((command, shown))
    }

    /// The files of store peer `name`: its data directory `$WORK/peers/NAME/` (made),
    /// its keys in `$WORK/peers/NAME.credentials`, and what `also` writes.
    fn store_files(
        &self,
        name: &str,
        expected: &str,
        also: impl FnOnce() -> std::io::Result<()>,
    ) -> Result<PathBuf, Failure> {
        let data = self.configs.join(name);
        let credentials = self.configs.join(format!("{name}.credentials"));
        std::fs::create_dir_all(&data)
            .and_then(|()| write_credentials(&credentials))
            .and_then(|()| also())
            .map_err(|e| Failure::new(expected, format!("{}: {e}", data.display())))?;
        Ok(data)
    }

    /// `dynalite` for peer `name`: its data in `$WORK/peers/NAME/` (LevelDB), keys in
    /// `$WORK/peers/NAME.credentials` (0600; dynalite checks that a request is signed,
    /// not by whom).
    pub(super) fn dynalite(
        &self,
        name: &str,
        port: u16,
        expected: &str,
    ) -> Result<(Command, String), Failure> {
        let data = self.store_files(name, expected, || Ok(()))?;
        let installed = self
            .root
            .join(PEERS_DIR)
            .join("node/node_modules/.bin/dynalite");
        let program = match std::env::var_os("DYNALITE") {
            Some(path) => PathBuf::from(path),
            None if installed.exists() => installed,
            None => PathBuf::from("dynalite"),
        };
        let mut command = Command::new(&program);
        command
            .args(["--port", &port.to_string(), "--host", "127.0.0.1", "--path"])
            .arg(&data);
        let shown = format!(
            "{} --port {port} --host 127.0.0.1 --path {}",
            program.display(),
            data.display()
        );
        Ok((command, shown))
    }

    /// Makes `bucket` on the SeaweedFS of peer `name` (S3 on `port`), signed as its
    /// identity by curl, until it answers 200 (or says it owns it already).
    pub(super) fn make_bucket(
        &mut self,
        name: &str,
        port: u16,
        bucket: &str,
        expected: &str,
    ) -> Result<String, Failure> {
        let url = format!("http://127.0.0.1:{port}/{bucket}");
        let started = Instant::now();
        let mut last: String;
        loop {
            let out = Command::new("curl")
                .args([
                    "-s",
                    "--max-time",
                    "10",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                ])
                .args(["--aws-sigv4", "aws:amz:us-east-1:s3"])
                .args(["--user", &format!("{SEAWEED_KEY}:{SEAWEED_SECRET}")])
                .args(["-X", "PUT", &url])
                .output();
            match out {
                Ok(out) => {
                    last = String::from_utf8_lossy(&out.stdout).into_owned();
                    if last == "200" || last == "409" {
                        return Ok(format!("bucket {bucket} answers (HTTP {last})"));
                    }
                }
                Err(e) => {
                    return Err(Failure::new(
                        expected,
                        format!("curl does not run ({e}); the README installs it"),
                    ));
                }
            }
            let peer = self.map.get_mut(name).expect("just started");
            if peer.poll().is_some() || started.elapsed() >= PEER_READY_TIMEOUT {
                let never = format!("PUT {url} never answered 200 (last: HTTP {last})");
                return Err(not_ready(peer, expected, &never));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

/// The peers' one identity's keys at `path` (AWS shared-credentials format, 0600: what a
/// topology's `credentials=` names).
fn write_credentials(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(
        format!(
            "[default]\naws_access_key_id = {SEAWEED_KEY}\naws_secret_access_key = {SEAWEED_SECRET}\n"
        )
        .as_bytes(),
    )
}

/// One DynamoDB request to the dynalite on `port`, sent by `curl --aws-sigv4` (a client
/// independent of Grid's): its HTTP status and JSON answer.
pub fn dynamodb(port: u16, operation: &str, body: &Value) -> Result<(u16, Value), String> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
        .args(["--aws-sigv4", "aws:amz:us-east-1:dynamodb"])
        .args(["--user", &format!("{SEAWEED_KEY}:{SEAWEED_SECRET}")])
        .args(["-H", "Content-Type: application/x-amz-json-1.0"])
        .args([
            "-H",
            &format!("X-Amz-Target: DynamoDB_20120810.{operation}"),
        ])
        .args(["--data-binary", &body.to_string()])
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .map_err(|e| format!("curl does not run ({e}); the README installs it"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (answer, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    let status = status.trim().parse().unwrap_or(0);
    let answer = serde_json::from_str(answer).unwrap_or(Value::Null);
    Ok((status, answer))
}

/// Makes `table` (keyed by the string `k`, as Grid's records are) on the dynalite on
/// `port`, and waits until it is active.
pub(super) fn make_table(port: u16, table: &str) -> Result<String, String> {
    let create = serde_json::json!({
        "TableName": table,
        "AttributeDefinitions": [{"AttributeName": "k", "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": "k", "KeyType": "HASH"}],
        "BillingMode": "PAY_PER_REQUEST",
    });
    let (status, answer) = dynamodb(port, "CreateTable", &create)?;
    let exists = answer["__type"]
        .as_str()
        .is_some_and(|t| t.ends_with("ResourceInUseException"));
    if status != 200 && !exists {
        return Err(format!(
            "CreateTable {table} answered HTTP {status}: {answer}"
        ));
    }
    let started = Instant::now();
    loop {
        let (_, answer) = dynamodb(
            port,
            "DescribeTable",
            &serde_json::json!({"TableName": table}),
        )?;
        let state = answer["Table"]["TableStatus"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        if state == "ACTIVE" {
            return Ok(format!("table {table} is ACTIVE"));
        }
        if started.elapsed() >= PEER_READY_TIMEOUT {
            return Err(format!("table {table} is {state:?}, never ACTIVE"));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}
