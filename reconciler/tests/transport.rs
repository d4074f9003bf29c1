//! The `transport` profile against a real external client: `curl` (OpenSSL) talks to a
//! real `gridd` over mutual TLS 1.3 with right and wrong credentials. Refused: no
//! client certificate, a certificate of another authority (a participant of no shared
//! membership), an expired certificate, TLS 1.2, a revoked participant (after
//! reconcile distributes the revocation list, without a restart) — also for Grid's own
//! client (`gridctl remote observe`, the engine's transport client), which in turn refuses a server certified
//! by another authority. A host whose listen
//! address is taken, or that selects `transport` without any membership certificate,
//! refuses to start. Wire observation is checked against relays that count the bytes
//! they carry, in both directions: what a host writes as server and as client.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use grid_engine::protocol::Call;

mod common;

struct Work {
    dir: PathBuf,
    hosts: Vec<Child>,
}

impl Drop for Work {
    fn drop(&mut self) {
        for child in &mut self.hosts {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn topology(revoke: &str) -> String {
    format!(
        "grid version=1\nmembership ops {{ {revoke} }}\nmembership other\n\
         host a listen=\"127.0.0.1:7641\" {{ member ops; profiles transport; }}\n\
         host b listen=\"127.0.0.1:7642\" {{ member ops; }}\n\
         host e listen=\"127.0.0.1:7643\" {{ member ops; }}\n\
         host c listen=\"127.0.0.1:7644\" {{ member other; }}\n\
         host d listen=\"127.0.0.1:7645\"\n\
         host m2 listen=\"127.0.0.1:7646\" {{ member ops; member other; profiles transport; }}\n"
    )
}

impl Work {
    fn new(name: &str) -> Work {
        Work {
            dir: common::work_dir(name),
            hosts: Vec::new(),
        }
    }

    fn run_gridctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_gridctl"))
            .current_dir(&self.dir)
            .args(args)
            .output()
            .unwrap()
    }

    fn gridctl(&self, args: &[&str]) -> String {
        let output = self.run_gridctl(args);
        assert!(
            output.status.success(),
            "gridctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `gridctl remote observe --host HOST --as PARTICIPANT --membership M --json`.
    fn remote_observe(
        &self,
        host: &str,
        participant: &str,
        membership: &str,
    ) -> std::process::Output {
        self.run_gridctl(&[
            "remote",
            "observe",
            "--host",
            host,
            "--as",
            participant,
            "--membership",
            membership,
            "--json",
        ])
    }

    fn gridctl_fails(&self, args: &[&str]) -> String {
        let output = self.run_gridctl(args);
        assert!(!output.status.success(), "gridctl {args:?} should fail");
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    fn host_dir(&self, host: &str) -> PathBuf {
        self.dir.join("grid-state/hosts").join(host)
    }

    /// Starts gridd for `dir`; Ok once its control socket answers, Err(stderr) when it
    /// exits instead.
    fn start(&mut self, dir: &Path) -> Result<(), String> {
        let log = self.dir.join(format!("gridd-{}.log", self.hosts.len()));
        let mut child = Command::new(common::gridd())
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        match common::wait_ready(&mut child, dir) {
            Ok(()) => {
                self.hosts.push(child);
                Ok(())
            }
            Err(status) => {
                assert!(!status.success());
                Err(std::fs::read_to_string(&log).unwrap())
            }
        }
    }

    fn stop_all(&mut self) {
        for child in &mut self.hosts {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.hosts.clear();
    }

    /// The host's TLS key as a PEM file for curl: the key file itself (PEM PKCS#8), or
    /// for a key in the older hex form, PKCS#8 DER converted by openssl.
    fn key_pem(&self, host: &str) -> String {
        let key = self.host_dir(host).join("keys/tls.key");
        let hex = std::fs::read_to_string(&key).unwrap();
        if hex.starts_with("-----BEGIN PRIVATE KEY-----") {
            return key.display().to_string();
        }
        let seed: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&hex.trim()[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let der = grid_engine::transport::ed25519_pkcs8(&seed.try_into().unwrap());
        let der_path = self.dir.join(format!("{host}.der"));
        std::fs::write(&der_path, der).unwrap();
        let pem = format!("{host}.key.pem");
        let status = Command::new("openssl")
            .current_dir(&self.dir)
            .args(["pkey", "-inform", "DER", "-in"])
            .arg(&der_path)
            .args(["-out", &pem])
            .status()
            .expect("openssl is installed (see .ci/run)");
        assert!(status.success());
        pem
    }

    /// curl POST /control with `{"call":"observe"}` to host a; Ok(body) or Err(stderr).
    fn observe_a(&self, extra: &[&str]) -> Result<String, String> {
        self.observe("a", 7641, extra)
    }

    /// curl POST /control with `{"call":"observe"}` to `host` at 127.0.0.1:`port`.
    fn observe(&self, host: &str, port: u16, extra: &[&str]) -> Result<String, String> {
        let output = Command::new("curl")
            .current_dir(&self.dir)
            .args(["-sS", "--max-time", "10"])
            .args(["--cacert", "grid-state/memberships/ops/ca.pem"])
            .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
            .args(extra)
            .arg(format!("https://{host}:{port}/control"))
            .args(["-d", r#"{"call":"observe"}"#])
            .output()
            .expect("curl is installed (see .ci/run)");
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }
}

#[test]
fn mutual_tls_admits_participants_and_refuses_everyone_else() {
    let mut work = Work::new("transport");
    std::fs::write(work.dir.join("t.kdl"), topology("")).unwrap();
    work.gridctl(&["reconcile", "t.kdl"]); // authorities, installations, enrollments

    // Selecting transport with no membership certificate refuses, naming why (`check`
    // refuses such a topology, so the host store is edited as an operator could).
    let d_toml = work.host_dir("d").join("host.toml");
    let text = std::fs::read_to_string(&d_toml).unwrap();
    assert!(text.contains("profiles = []"), "{text}");
    std::fs::write(
        &d_toml,
        text.replace("profiles = []", "profiles = [\"transport\"]"),
    )
    .unwrap();
    let refused = work.start(&work.host_dir("d")).unwrap_err();
    assert!(
        refused.contains("needs a membership certificate"),
        "{refused}"
    );

    work.start(&work.host_dir("a")).unwrap();
    let b_cert = "grid-state/hosts/b/memberships/ops/participant.pem";
    let b_key = work.key_pem("b");
    let c_key = work.key_pem("c");
    let e_key = work.key_pem("e");

    let body = work
        .observe_a(&["--cert", b_cert, "--key", &b_key])
        .unwrap();
    let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["reply"], "observation");
    assert_eq!(reply["host"], "a");

    // Grid's own client (reqwest over the same rules) as participant b: admitted.
    let remote = work.gridctl(&["remote", "observe", "--host", "a", "--as", "b", "--json"]);
    assert!(remote.contains(r#""host":"a""#), "{remote}");
    // Without --json: lines for people, never Rust's Debug text.
    let text = work.gridctl(&["remote", "observe", "--host", "a", "--as", "b"]);
    assert!(
        text.starts_with("host a\n  profiles        transport\n"),
        "{text}"
    );
    assert!(!text.contains("Observation {"), "{text}");
    // As c of `other`: c's client refuses a's certificate (another authority).
    let refused = work.remote_observe("a", "c", "other");
    assert!(!refused.status.success());
    let refused = String::from_utf8_lossy(&refused.stderr);
    assert!(refused.contains("UnknownIssuer"), "{refused}");

    // A host in two memberships shows each client the certificate of the membership it
    // asks for (by server name): participants of either are admitted.
    work.start(&work.host_dir("m2")).unwrap();
    for (participant, membership) in [("b", "ops"), ("c", "other")] {
        let remote = work.remote_observe("m2", participant, membership);
        let remote = String::from_utf8_lossy(&remote.stdout);
        assert!(remote.contains(r#""host":"m2""#), "{remote}");
    }

    let no_cert = work.observe_a(&[]).unwrap_err();
    assert!(no_cert.contains("certificate required"), "{no_cert}");

    let foreign = work
        .observe_a(&[
            "--cert",
            "grid-state/hosts/c/memberships/other/participant.pem",
            "--key",
            &c_key,
        ])
        .unwrap_err();
    assert!(foreign.contains("unknown ca"), "{foreign}");

    let old_tls = work
        .observe_a(&["--tls-max", "1.2", "--cert", b_cert, "--key", &b_key])
        .unwrap_err();
    assert!(old_tls.contains("protocol version"), "{old_tls}");

    // An expired certificate of the right authority, for b's own key.
    let manifest = grid_engine::custody::manifest(&work.host_dir("b")).unwrap();
    let tls: Vec<u8> = (0..32)
        .map(|i| {
            u8::from_str_radix(&manifest.tls["ed25519:".len()..][2 * i..2 * i + 2], 16).unwrap()
        })
        .collect();
    let now = time::OffsetDateTime::now_utc();
    let expired = grid_engine::custody::membership::certificate(
        &work.dir.join("grid-state/memberships/ops"),
        "ops",
        "b",
        9_999,
        &tls.try_into().unwrap(),
        now - time::Duration::days(30),
        now - time::Duration::days(1),
    )
    .unwrap();
    std::fs::write(work.dir.join("expired.pem"), expired).unwrap();
    let refused = work
        .observe_a(&["--cert", "expired.pem", "--key", &b_key])
        .unwrap_err();
    assert!(refused.contains("expired"), "{refused}");

    // A second host on a's listen address refuses to start.
    let copy = work.dir.join("a-copy");
    let status = Command::new("cp")
        .args(["-a"])
        .arg(work.host_dir("a"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let _ = std::fs::remove_file(copy.join("control.sock"));
    let in_use = work.start(&copy).unwrap_err();
    assert!(
        in_use.contains("listen address 127.0.0.1:7641 is in use"),
        "{in_use}"
    );

    // b holds a connection to a open (pooled, kept alive) from before the revocation.
    let pooled = grid_engine::transport::Client::new(
        &work.host_dir("b"),
        "ops",
        "a",
        "127.0.0.1:7641".parse().unwrap(),
    )
    .unwrap();
    let before: grid_engine::protocol::Reply = pooled.call(&Call::Observe).unwrap();
    assert!(
        matches!(before, grid_engine::protocol::Reply::Observation(_)),
        "{before:?}"
    );

    // Revoke b: reconcile distributes the list; the running host a reloads it.
    std::fs::write(work.dir.join("t.kdl"), topology("revoke b;")).unwrap();
    // Applied; `!` lines remain (b's revoked enrollment, hosts not running): exit 6.
    let output = work.run_gridctl(&["reconcile", "t.kdl"]);
    assert_eq!(
        output.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let revoked = work
        .observe_a(&["--cert", b_cert, "--key", &b_key])
        .unwrap_err();
    assert!(revoked.contains("certificate revoked"), "{revoked}");
    let refused = work.gridctl_fails(&["remote", "observe", "--host", "a", "--as", "b"]);
    assert!(refused.contains("CertificateRevoked"), "{refused}");
    // The connection b opened before is not a way around it: a checks the certificate
    // of every open connection again once the list changed (within
    // CREDENTIALS_CHECK_INTERVAL), and refuses b's next request on it.
    std::thread::sleep(grid_engine::limits::CREDENTIALS_CHECK_INTERVAL * 3);
    let after: grid_engine::protocol::Reply = pooled.call(&Call::Observe).unwrap();
    match after {
        grid_engine::protocol::Reply::Refused { reason } => {
            assert!(reason.contains("no longer accepted"), "{reason}")
        }
        other => panic!("a revoked participant was served on an old connection: {other:?}"),
    }
    work.gridctl(&["remote", "observe", "--host", "a", "--as", "e"]);
    let e_cert = "grid-state/hosts/e/memberships/ops/participant.pem";
    work.observe_a(&["--cert", e_cert, "--key", &e_key])
        .expect("a participant that was not revoked is still admitted");

    // m2 leaves `other` (`member other leave=#true`; it owes nothing there) while c, of
    // `other`, holds connections to it opened before: each of c's requests on them is
    // refused — a capability's path by the left membership or, once m2's credentials
    // reloaded (within CREDENTIALS_CHECK_INTERVAL), by the check of the connection's
    // certificate against an authority m2 no longer trusts; `POST /control` by the
    // latter — and a new connection is refused by TLS. ops is unaffected.
    let m2_address = "127.0.0.1:7646";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let peer =
        grid_engine::transport::PeerClient::new(&work.host_dir("c"), "other", "m2", m2_address)
            .unwrap();
    let process_status = || -> serde_json::Value {
        runtime
            .block_on(peer.post(
                "/process/other/status",
                &serde_json::json!({"request": "r1"}),
                Duration::from_secs(10),
            ))
            .expect("an answer on the connection opened before")
    };
    // Admitted although ops (m2's other membership) revoked b: each membership's
    // revocation list covers its own authority's certificates (`other` has none).
    let served = process_status();
    assert!(
        served
            .to_string()
            .contains("does not run the `processes` profile"),
        "a member's request reaches the endpoint: {served}"
    );
    let control = grid_engine::transport::Client::new(
        &work.host_dir("c"),
        "other",
        "m2",
        m2_address.parse().unwrap(),
    )
    .unwrap();
    let observed: grid_engine::protocol::Reply = control.call(&Call::Observe).unwrap();
    assert!(
        matches!(observed, grid_engine::protocol::Reply::Observation(_)),
        "{observed:?}"
    );
    let leaving = topology("revoke b;").replace(
        "member ops; member other; profiles transport;",
        "member ops; member other leave=#true; profiles transport;",
    );
    assert!(leaving.contains("leave=#true"), "{leaving}");
    std::fs::write(work.dir.join("t.kdl"), leaving).unwrap();
    work.run_gridctl(&["reconcile", "t.kdl"]);
    let left = std::fs::read_dir(work.host_dir("m2").join("memberships-left"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert!(
        left.iter().any(|name| name.starts_with("other-")),
        "m2 left `other`: {left:?}"
    );
    let refused = process_status();
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("this host left `other`") || reason.contains("no longer accepted"),
        "{refused}"
    );
    std::thread::sleep(grid_engine::limits::CREDENTIALS_CHECK_INTERVAL * 3);
    for refused in [
        process_status(),
        serde_json::to_value(
            control
                .call::<_, grid_engine::protocol::Reply>(&Call::Observe)
                .unwrap(),
        )
        .unwrap(),
    ] {
        let reason = refused["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("no longer accepted"), "{refused}");
    }
    let refused = work.remote_observe("m2", "c", "other");
    assert!(!refused.status.success());
    let refused = String::from_utf8_lossy(&refused.stderr);
    // m2 holds no certificate of `other` any more: c's client finds none it trusts.
    assert!(refused.contains("UnknownIssuer"), "{refused}");
    let remote = work.remote_observe("m2", "e", "ops");
    let remote = String::from_utf8_lossy(&remote.stdout);
    assert!(remote.contains(r#""host":"m2""#), "{remote}");

    work.stop_all();
    std::fs::remove_dir_all(&work.dir).unwrap();
}

/// The bytes a relay carried, counted as they pass: what the connecting side wrote
/// (`up`) and what the target wrote (`down`).
#[derive(Default)]
struct Carried {
    up: std::sync::atomic::AtomicU64,
    down: std::sync::atomic::AtomicU64,
}

impl Carried {
    fn up(&self) -> u64 {
        self.up.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn down(&self) -> u64 {
        self.down.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Copies `from` into `to`, adding what passes to `count`, until `from` ends.
fn carry(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    count: impl Fn(u64) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    use std::io::{Read, Write};
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    count(n as u64);
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    })
}

/// Relays `connections` connections to 127.0.0.1:`target`, counting both directions
/// live; the handle ends once every one of them closed.
fn counting_relay(
    target: u16,
    connections: usize,
) -> (u16, std::sync::Arc<Carried>, std::thread::JoinHandle<()>) {
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let carried = std::sync::Arc::new(Carried::default());
    let counts = carried.clone();
    let handle = std::thread::spawn(move || {
        let mut carriers = Vec::new();
        for _ in 0..connections {
            let Ok((client, _)) = listener.accept() else {
                break;
            };
            let server = std::net::TcpStream::connect(("127.0.0.1", target)).unwrap();
            let (up, down) = (counts.clone(), counts.clone());
            carriers.push(carry(
                client.try_clone().unwrap(),
                server.try_clone().unwrap(),
                move |n| {
                    up.up.fetch_add(n, Ordering::SeqCst);
                },
            ));
            carriers.push(carry(server, client, move |n| {
                down.down.fetch_add(n, Ordering::SeqCst);
            }));
        }
        for carrier in carriers {
            let _ = carrier.join();
        }
    });
    (port, carried, handle)
}

#[test]
fn wire_observation_matches_an_independent_count() {
    let mut work = Work::new("wire");
    std::fs::write(
        work.dir.join("t.kdl"),
        "grid version=1\nmembership ops\n\
         host w listen=\"127.0.0.1:7661\" { member ops; profiles transport wire-observation; }\n\
         host b listen=\"127.0.0.1:7662\" { member ops; }\n\
         host plain listen=\"127.0.0.1:7663\" { member ops; }\n",
    )
    .unwrap();
    work.gridctl(&["reconcile", "t.kdl"]); // authorities, installations, enrollments
    // `check` refuses `wire-observation` without `transport`; gridd refuses it too, as
    // the owner: the host store is edited as an operator could.
    let plain = work.host_dir("plain").join("host.toml");
    let text = std::fs::read_to_string(&plain).unwrap();
    assert!(text.contains("profiles = []"), "{text}");
    std::fs::write(
        &plain,
        text.replace("profiles = []", "profiles = [\"wire-observation\"]"),
    )
    .unwrap();
    let refused = work.start(&work.host_dir("plain")).unwrap_err();
    assert!(
        refused.contains("needs the `transport` profile"),
        "{refused}"
    );
    work.start(&work.host_dir("w")).unwrap();
    let b_key = work.key_pem("b");
    let b_cert = "grid-state/hosts/b/memberships/ops/participant.pem";

    let (port, carried, relay) = counting_relay(7661, 3);
    work.observe("w", port, &["--cert", b_cert, "--key", &b_key])
        .unwrap();
    work.observe("w", port, &["--cert", b_cert, "--key", &b_key])
        .unwrap();
    work.observe("w", port, &[]).unwrap_err(); // refused handshake: its bytes count too
    relay.join().unwrap();
    let independent = carried.down();

    // The host attributes a connection's bytes when it closes; wait boundedly.
    let started = Instant::now();
    let (observed, peers) = loop {
        let text = work.gridctl(&["inspect", "wire", "--host", "w", "--json"]);
        let reply: serde_json::Value = serde_json::from_str(&text).unwrap();
        let peers = reply["peers"].as_array().unwrap().clone();
        let total: u64 = peers.iter().map(|p| p["bytes"].as_u64().unwrap()).sum();
        if total >= independent || started.elapsed() > common::READY_TIMEOUT {
            break (total, peers);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        observed, independent,
        "wire observation {peers:?} against the relay's count"
    );
    let names: Vec<&str> = peers.iter().map(|p| p["peer"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["b in ops", "unauthenticated"]);
    assert!(
        peers
            .iter()
            .all(|p| p["direction"] == "server-to-client" && p["bytes"].as_u64().unwrap() > 0)
    );

    work.stop_all();
    std::fs::remove_dir_all(&work.dir).unwrap();
}

/// A host calling a peer (a remote Process run, through a relay that counts what the
/// caller writes) counts those bytes as `client-to-server` for that peer, exactly:
/// handshake, request and everything else its connections wrote.
#[test]
fn wire_observation_counts_what_a_host_writes_as_client() {
    use grid_engine::processes::api::{ProcessReply, RunOutcome, RunRequest};
    let mut work = Work::new("wire-client");
    std::fs::write(
        work.dir.join("t.kdl"),
        "grid version=1\nmembership ops\n\
         host caller listen=\"127.0.0.1:7664\" { member ops; profiles transport processes wire-observation; }\n\
         host site listen=\"127.0.0.1:7665\" { member ops; profiles transport processes; }\n\
         grant caller-on-site issuer=site caller=caller units=10\n",
    )
    .unwrap();
    // The installations and certificates; the grant waits for the hosts to run.
    let first = work.run_gridctl(&["reconcile", "t.kdl"]);
    assert_eq!(first.status.code(), Some(5), "{first:?}");
    work.start(&work.host_dir("site")).unwrap();
    work.start(&work.host_dir("caller")).unwrap();
    work.gridctl(&["reconcile", "t.kdl"]);

    let (port, carried, _relay) = counting_relay(7665, 4);
    let state = work.dir.join("grid-state");
    let request = RunRequest {
        request: "w1".to_owned(),
        process: "demo.count".to_owned(),
        arguments: Default::default(),
    };
    let mut call =
        grid_reconciler::processes::run_call(&state, "site", "caller", None, None, request, None)
            .unwrap();
    let grid_engine::processes::api::ProcessCall::Run { receiver, .. } = &mut call else {
        panic!("a run call: {call:?}");
    };
    receiver.address = format!("127.0.0.1:{port}");
    match grid_reconciler::processes::call(&state, "caller", call).unwrap() {
        ProcessReply::Ran { run } => assert_eq!(run.outcome, RunOutcome::Succeeded, "{run:?}"),
        other => panic!("the run: {other:?}"),
    }

    // The caller counts as it writes; the relay as it forwards: wait boundedly for both
    // to settle on the same number.
    let counted = || {
        let text = work.gridctl(&["inspect", "wire", "--host", "caller", "--json"]);
        let reply: serde_json::Value = serde_json::from_str(&text).unwrap();
        let peers = reply["peers"].as_array().unwrap().clone();
        let bytes = peers
            .iter()
            .find(|p| p["peer"] == "site in ops" && p["direction"] == "client-to-server")
            .and_then(|p| p["bytes"].as_u64());
        (bytes, peers)
    };
    let started = Instant::now();
    let (observed, relayed, peers) = loop {
        let (observed, peers) = counted();
        let relayed = carried.up();
        if observed == Some(relayed) || started.elapsed() > common::READY_TIMEOUT {
            break (observed, relayed, peers);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(relayed > 0, "the relay carried the run");
    assert_eq!(
        observed,
        Some(relayed),
        "the caller's wire observation {peers:?} against the relay's count"
    );
    work.stop_all();
    std::fs::remove_dir_all(&work.dir).unwrap();
}
