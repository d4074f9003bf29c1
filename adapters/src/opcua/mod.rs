//! OPC UA (async-opcua, client only): one session per tag, with one subscription of
//! one monitored item. See docs/sources.md, "OPC UA".
//!
//! One session per tag, not one per server: each tag names its own security mode,
//! policy and the one server certificate it trusts, so a session never trusts more
//! than its tag says, and a tag's session is started, replaced and stopped with it.
//! A server with many Grid tags sees as many sessions (each small).
//!
//! - [`value`]: what a DataType and a DataValue mean (pure).
//! - [`client`]: the session's task (connect, admission, subscription, reconnect).

pub mod client;
pub mod value;

use std::path::{Path, PathBuf};

use grid_spec::{OpcUaSecurity, TagSource};
use opcua::crypto::{CertificateStore, X509};

use crate::task::{Reporter, Task};
use crate::{AdapterError, Credentials, OpcUaIdentity, Sink};

/// One tag's session with its server: a task on the host's runtime.
pub struct Subscription {
    task: crate::task::Task,
}

impl Subscription {
    /// Starts reading `tag` (an `opcua` source). Refuses, before anything connects, a
    /// secured tag without the host's application certificate or with an unreadable
    /// server certificate.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        sink: Sink,
        host: &str,
        tag: &grid_spec::Tag,
        generation: u64,
        credentials: &Credentials,
    ) -> Result<Subscription, AdapterError> {
        let target = target(host, tag, credentials).map_err(|reason| AdapterError::Invalid {
            tag: tag.name.clone(),
            reason,
        })?;
        let reporter = Reporter::new(sink, &tag.name, generation);
        let task = Task::new(
            &reporter,
            runtime.spawn(client::run(target, reporter.clone())),
        );
        Ok(Subscription { task })
    }

    /// Ends the task (its session is dropped with it); nothing is sent to the sink
    /// once this returns.
    pub fn stop(self) {
        self.task.stop();
    }
}

/// Whether `tag` could start (what [`Subscription::start`] refuses), without
/// connecting.
pub fn check(
    host: &str,
    tag: &grid_spec::Tag,
    credentials: &Credentials,
) -> Result<(), AdapterError> {
    target(host, tag, credentials)
        .map(|_| ())
        .map_err(|reason| AdapterError::Invalid {
            tag: tag.name.clone(),
            reason,
        })
}

/// Everything one tag's session needs.
pub struct Target {
    pub tag: String,
    pub endpoint: String,
    pub node: opcua::types::NodeId,
    pub security: OpcUaSecurity,
    /// `None` or the policy's name (`Basic256Sha256`).
    pub policy: String,
    pub publishing_ms: u32,
    pub application_name: String,
    pub application_uri: String,
    /// The host's application identity, when it has one (presented by every session;
    /// used by `sign`/`sign-and-encrypt`).
    pub identity: Option<OpcUaIdentity>,
    /// `sign`/`sign-and-encrypt`: the one server certificate trusted, DER.
    pub server_certificate: Option<Vec<u8>>,
    /// The session's certificate store: `trusted/` holds only the server certificate
    /// the tag names, laid out afresh for every session.
    pub pki_dir: PathBuf,
}

fn target(host: &str, tag: &grid_spec::Tag, credentials: &Credentials) -> Result<Target, String> {
    let TagSource::OpcUa {
        endpoint,
        node,
        security,
        policy,
        publishing_ms,
        server_certificate,
    } = &tag.source
    else {
        return Err(format!("reads {}, not opcua", tag.source.kind()));
    };
    let node = node
        .parse::<opcua::types::NodeId>()
        .map_err(|_| format!("node id `{node}` does not parse"))?;
    let server_certificate = match (security, server_certificate) {
        (OpcUaSecurity::None, _) => None,
        (_, None) => {
            return Err(format!(
                "security={} names no server certificate",
                security.name()
            ));
        }
        (_, Some(path)) => {
            let identity = credentials.opcua.as_ref().ok_or_else(|| {
                format!(
                    "security={} needs the host's OPC UA application certificate, and this host has none",
                    security.name()
                )
            })?;
            Some(read_certificate(&resolve(&identity.host_dir, path))?)
        }
    };
    // One store per start: a replaced or concurrent session never shares another's.
    static STORES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let store = STORES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pki_dir = pki_root().join(format!("{}.{store}", file_name(&tag.name)));
    Ok(Target {
        tag: tag.name.clone(),
        endpoint: endpoint.clone(),
        node,
        security: *security,
        policy: policy.clone().unwrap_or_else(|| "None".to_owned()),
        publishing_ms: *publishing_ms,
        application_name: format!("Grid host {host}"),
        application_uri: credentials
            .opcua
            .as_ref()
            .map_or_else(|| format!("urn:grid:{host}"), |i| i.application_uri.clone()),
        identity: credentials.opcua.clone(),
        server_certificate,
        pki_dir,
    })
}

/// A path as the tag names it: relative paths are the host directory's.
fn resolve(host_dir: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    if path.is_absolute() {
        path.to_owned()
    } else {
        host_dir.join(path)
    }
}

/// The server certificate a tag names (DER or PEM), as DER.
fn read_certificate(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "server-certificate `{}` cannot be read: {e}",
            path.display()
        )
    })?;
    let cert = if bytes.starts_with(b"-----") {
        X509::from_pem(&bytes)
    } else {
        X509::from_der(&bytes)
    }
    .map_err(|e| {
        format!(
            "server-certificate `{}` is not a certificate: {e}",
            path.display()
        )
    })?;
    cert.to_der()
        .map_err(|e| format!("server-certificate `{}`: {e}", path.display()))
}

/// A tag name as one file name: letters, digits, `-` and `_` kept, anything else
/// written as `.XX` (its UTF-8 bytes in hexadecimal).
fn file_name(tag: &str) -> String {
    let mut out = String::with_capacity(tag.len());
    for b in tag.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!(".{b:02x}"));
        }
    }
    out
}

/// Where this process keeps its tags' certificate stores: a 0700 directory of its own
/// under the system's temporary directory (outside the host directory, whose files
/// must all be 0600: async-opcua writes the certificates it rejects with the default
/// mode). What it holds is public (certificates), and nothing in it outlives a start.
fn pki_root() -> PathBuf {
    std::env::temp_dir().join(format!("grid-opcua-{}", std::process::id()))
}

/// Lays out a tag's certificate store afresh: `trusted/` holding only `server` (DER),
/// an empty `rejected/`. Nothing another start trusted survives.
pub(crate) fn trust_only(pki_dir: &Path, server: Option<&[u8]>) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("certificate store `{}`: {e}", pki_dir.display());
    if let Some(root) = pki_dir.parent() {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(failed)?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).map_err(failed)?;
    }
    match std::fs::remove_dir_all(pki_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed(e)),
    }
    std::fs::create_dir_all(pki_dir.join("trusted")).map_err(failed)?;
    std::fs::create_dir_all(pki_dir.join("rejected")).map_err(failed)?;
    if let Some(der) = server {
        let cert = X509::from_der(der).map_err(|e| format!("server certificate: {e}"))?;
        let path = pki_dir
            .join("trusted")
            .join(CertificateStore::cert_file_name(&cert));
        std::fs::write(&path, der).map_err(failed)?;
    }
    Ok(())
}

/// A new OPC UA application instance certificate for `host` (RSA 2048, self-signed,
/// the application URI `urn:grid:HOST` and `localhost` in its subject alternative
/// names, valid for ten years), made with async-opcua's own certificate creation:
/// `(certificate DER, private key PKCS#8 DER)`. The host's custody keeps them.
pub fn new_application_certificate(host: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
    let application_uri = format!("urn:grid:{host}");
    // The URI first (OPC UA Part 6 §6.2.2), then `localhost`; neither this machine's
    // name nor its addresses, which a host directory may outlive.
    let names = opcua::crypto::X509Data::alt_host_names(&application_uri, None, true, false, false);
    let data = opcua::crypto::X509Data {
        key_size: 2048,
        common_name: format!("Grid host {host}"),
        organization: "Grid".to_owned(),
        organizational_unit: host.to_owned(),
        country: String::new(),
        state: String::new(),
        alt_host_names: names,
        certificate_duration_days: 3650,
    };
    let (cert, key) = X509::cert_and_pkey(&data)?;
    let cert = cert.to_der().map_err(|e| e.to_string())?;
    let key = key.to_der().map_err(|e| e.to_string())?;
    Ok((cert, key.as_bytes().to_vec()))
}
