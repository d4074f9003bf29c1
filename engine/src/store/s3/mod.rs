//! [`Blobs`] on S3 (issue 29, SPEC C12): the archive's objects in a bucket of any
//! S3-compatible server, under a prefix (`s3://BUCKET/PREFIX`). Requests are signed with
//! AWS Signature Version 4 as presigned URLs (`rusty-s3`, which does no IO) and sent by a
//! blocking HTTP client (`ureq`, rustls with ring, Mozilla's roots), each within
//! [`REMOTE_REQUEST_TIMEOUT`]. The keys come from a private file in the AWS
//! shared-credentials format, never from the topology.
//!
//! Invariants, stated as absences: no object is ever overwritten (every put carries
//! `If-None-Match: *`, which the server refuses with 412 when the key exists — a put that
//! found its key answers whether the key holds its bytes, as
//! [`LocalFiles`](super::archive::LocalFiles) does); no
//! status other than the one an operation expects is read as success (a 404 is "absent"
//! only where absence is an answer: get and delete); no secret appears in a message or a
//! `Debug` output; no server text is quoted past `QUOTED_CHARS_MAX`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rusty_s3::actions::ListObjectsV2;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

use crate::store::archive::{ArchiveError, Blobs};
use ureq::tls::Certificate;

pub mod seaweed;
use crate::limits::{
    REMOTE_ANSWER_TIMEOUT, REMOTE_BLOB_BYTES_MAX, REMOTE_CA_FILE_BYTES_MAX, REMOTE_CONNECT_TIMEOUT,
    REMOTE_LIST_PAGE_MAX, REMOTE_PRESIGNED_VALID, REMOTE_REQUEST_TIMEOUT,
};

pub use grid_spec::storage::S3Location;

/// An access key and its secret (the secret never shown).
#[derive(Clone)]
pub struct AccessKeys {
    pub key: String,
    secret: String,
}

impl std::fmt::Debug for AccessKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessKeys")
            .field("key", &self.key)
            .field("secret", &"(not shown)")
            .finish()
    }
}

impl AccessKeys {
    pub fn new(key: impl Into<String>, secret: impl Into<String>) -> AccessKeys {
        AccessKeys {
            key: key.into(),
            secret: secret.into(),
        }
    }

    /// The secret, for a signer (never shown).
    pub(crate) fn secret(&self) -> &str {
        &self.secret
    }

    /// Reads the `[default]` profile of an AWS shared-credentials file
    /// (`aws_access_key_id`, `aws_secret_access_key`). The file must be a regular file
    /// no one but its owner can read or write (0600 or stricter), like the host's keys.
    pub fn read(path: &Path) -> Result<AccessKeys, String> {
        let shown = path.display();
        let metadata = std::fs::symlink_metadata(path)
            .map_err(|e| format!("credentials file {shown}: {e}"))?;
        let mode = metadata.permissions().mode() & 0o777;
        if !metadata.is_file() || mode & 0o077 != 0 {
            return Err(format!(
                "credentials file {shown} has mode {mode:o}: it must be a regular file of mode 600 (or stricter), as keys are"
            ));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("credentials file {shown}: {e}"))?;
        let mut section = None;
        let (mut key, mut secret) = (None, None);
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = Some(name.trim().to_owned());
                continue;
            }
            if section.as_deref() != Some("default") {
                continue;
            }
            if let Some((name, value)) = line.split_once('=') {
                match name.trim() {
                    "aws_access_key_id" => key = Some(value.trim().to_owned()),
                    "aws_secret_access_key" => secret = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
        }
        match (key, secret) {
            (Some(key), Some(secret)) if !key.is_empty() && !secret.is_empty() => {
                Ok(AccessKeys { key, secret })
            }
            _ => Err(format!(
                "credentials file {shown} has no [default] profile with aws_access_key_id and aws_secret_access_key"
            )),
        }
    }
}

/// The blocking HTTP client of every remote store: statuses are answers, not errors;
/// a connection within `REMOTE_CONNECT_TIMEOUT`, sending the request within
/// `REMOTE_REQUEST_TIMEOUT`, the answer's head within `REMOTE_ANSWER_TIMEOUT`, its body
/// within `REMOTE_REQUEST_TIMEOUT`.
/// Per phase, not `timeout_global`: with ureq 3 a global timeout cost about 60 µs a
/// request on loopback (a lookup 0.20 → 0.27 ms; `records_compare`, BENCHMARKS.md §15).
pub fn remote_agent() -> ureq::Agent {
    agent(None)
}

/// [`remote_agent`], an `https://` endpoint's certificate checked against `roots` only
/// (a store's `ca=`), not Mozilla's.
pub fn remote_agent_trusting(roots: &[Certificate<'static>]) -> ureq::Agent {
    agent(Some(roots))
}

fn agent(roots: Option<&[Certificate<'static>]>) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(REMOTE_CONNECT_TIMEOUT))
        .timeout_send_request(Some(REMOTE_REQUEST_TIMEOUT))
        .timeout_recv_response(Some(REMOTE_ANSWER_TIMEOUT))
        .timeout_recv_body(Some(REMOTE_REQUEST_TIMEOUT));
    let config = match roots {
        None => config,
        Some(roots) => config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(roots))
                .build(),
        ),
    };
    config.build().into()
}

/// The certificates of the PEM file at `path` (a store's `ca=`): the authorities an
/// `https://` endpoint is checked against. Refused — the reason as the end of a
/// sentence — when it does not read, is larger than `REMOTE_CA_FILE_BYTES_MAX`, holds
/// a block that does not parse or a private key, or no certificate.
pub fn read_roots(path: &Path) -> Result<Vec<Certificate<'static>>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(REMOTE_CA_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > REMOTE_CA_FILE_BYTES_MAX {
        return Err(format!(
            "it is larger than REMOTE_CA_FILE_BYTES_MAX ({REMOTE_CA_FILE_BYTES_MAX} bytes)"
        ));
    }
    let mut roots = Vec::new();
    for item in ureq::tls::parse_pem(&bytes) {
        match item.map_err(|e| format!("it does not parse as PEM ({e})"))? {
            ureq::tls::PemItem::Certificate(cert) => roots.push(cert),
            _ => {
                return Err("it holds a private key: a ca= file holds certificates only".to_owned());
            }
        }
    }
    match roots.is_empty() {
        true => Err("it holds no PEM certificate".to_owned()),
        false => Ok(roots),
    }
}

/// Blobs in one bucket under one prefix.
pub struct S3Blobs {
    location: S3Location,
    bucket: Bucket,
    credentials: Credentials,
    agent: ureq::Agent,
}

/// What a request answered: its status and (up to the limit) its body.
struct Answered {
    status: u16,
    body: Vec<u8>,
}

impl S3Blobs {
    /// These blobs, their server's `https://` certificate checked against `roots`
    /// only (a store's `ca=`).
    pub fn trusting(mut self, roots: &[Certificate<'static>]) -> S3Blobs {
        self.agent = remote_agent_trusting(roots);
        self
    }

    /// Blobs at `location` on the server at `endpoint` (`http://` or `https://`),
    /// signed for `region`. Nothing is sent: [`S3Blobs::check`] asks the server.
    pub fn new(
        location: S3Location,
        endpoint: &str,
        region: &str,
        keys: &AccessKeys,
    ) -> Result<S3Blobs, ArchiveError> {
        let remote = |detail: String| ArchiveError::Remote {
            store: location.to_string(),
            detail,
        };
        let url: url::Url = endpoint.parse().map_err(|e| {
            remote(format!(
                "endpoint `{}`: {e}",
                grid_spec::diagnostic::quoted(endpoint)
            ))
        })?;
        let bucket = Bucket::new(
            url,
            UrlStyle::Path,
            location.bucket.clone(),
            region.to_owned(),
        )
        .map_err(|e| {
            remote(format!(
                "endpoint `{}`: {e}",
                grid_spec::diagnostic::quoted(endpoint)
            ))
        })?;
        let agent = remote_agent();
        Ok(S3Blobs {
            credentials: Credentials::new(keys.key.clone(), keys.secret.clone()),
            location,
            bucket,
            agent,
        })
    }

    /// Asks the server whether the bucket exists and these keys may read it, and
    /// whether it refuses a put of an existing key (`If-None-Match: *`; a server that
    /// ignores the condition would let a put overwrite): it writes a probe object of
    /// its own under `PREFIX.grid-probe/` twice, with different bytes — the second must
    /// be refused — then deletes it.
    pub fn check(&self) -> Result<(), ArchiveError> {
        let action = self.bucket.head_bucket(Some(&self.credentials));
        let answered = self.send("HEAD bucket", &action, None, &[])?;
        match answered.status {
            200 => {}
            404 => {
                return Err(
                    self.remote(format!("bucket `{}` does not exist", self.location.bucket))
                );
            }
            status => return Err(self.unexpected("HEAD bucket", status, &answered.body)),
        }
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce)
            .map_err(|e| self.remote(format!("no randomness for a probe name: {e}")))?;
        let probe = format!(".grid-probe/{:016x}", u64::from_be_bytes(nonce));
        let first = self.put_if_absent(&probe, b"first")?;
        let second = self.put_if_absent(&probe, b"second")?;
        self.delete(&probe)?;
        if !first || second {
            return Err(self.remote(
                "the server does not refuse a put of an existing key (If-None-Match: *): Grid's archive would be overwritable there, so it is not used".to_owned(),
            ));
        }
        Ok(())
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.location.prefix)
    }

    fn remote(&self, detail: String) -> ArchiveError {
        ArchiveError::Remote {
            store: self.location.to_string(),
            detail,
        }
    }

    fn unexpected(&self, what: &str, status: u16, body: &[u8]) -> ArchiveError {
        let text = String::from_utf8_lossy(body);
        let code = text
            .split_once("<Code>")
            .and_then(|(_, rest)| rest.split_once("</Code>"))
            .map(|(code, _)| code.to_owned());
        self.remote(match code {
            Some(code) => format!(
                "{what}: HTTP {status} {}",
                grid_spec::diagnostic::quoted(&code)
            ),
            None if text.trim().is_empty() => format!("{what}: HTTP {status}"),
            None => format!(
                "{what}: HTTP {status}: {}",
                grid_spec::diagnostic::quoted(text.trim())
            ),
        })
    }

    /// Sends one signed request (its method is the action's own) with `body` (a put's)
    /// and `headers`; its status and body (at most `REMOTE_BLOB_BYTES_MAX`).
    fn send<'a, A: S3Action<'a>>(
        &self,
        what: &str,
        action: &A,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Result<Answered, ArchiveError> {
        let url = action.sign(REMOTE_PRESIGNED_VALID);
        let request = headers.iter().fold(
            ureq::http::Request::builder()
                .method(A::METHOD.to_str())
                .uri(url.as_str()),
            |r, (k, v)| r.header(*k, *v),
        );
        let built = |e: ureq::http::Error| self.remote(format!("{what}: {e}"));
        let result = match body {
            Some(body) => self.agent.run(request.body(body).map_err(built)?),
            None => self.agent.run(request.body(()).map_err(built)?),
        };
        let mut response = result.map_err(|e| self.remote(format!("{what}: {e}")))?;
        let status = response.status().as_u16();
        let body = if A::METHOD == rusty_s3::Method::Head {
            Vec::new()
        } else {
            response
                .body_mut()
                .with_config()
                .limit(REMOTE_BLOB_BYTES_MAX)
                .read_to_vec()
                .map_err(|e| self.remote(format!("{what}: reading the answer: {e}")))?
        };
        Ok(Answered { status, body })
    }
}

impl Blobs for S3Blobs {
    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> Result<bool, ArchiveError> {
        let key = self.key(name);
        let mut action = self.bucket.put_object(Some(&self.credentials), &key);
        action.headers_mut().insert("if-none-match", "*");
        let what = format!("PUT {key}");
        let answered = self.send(&what, &action, Some(bytes), &[("if-none-match", "*")])?;
        match answered.status {
            200 | 201 | 204 => Ok(true),
            // The key exists: this put's own bytes (an earlier attempt whose answer was
            // lost, or a request the network duplicated), or another's. A 409 (another
            // conditional put of the key in flight) is not an answer: an error.
            412 => Ok(self.get(name)?.as_deref() == Some(bytes)),
            status => Err(self.unexpected(&what, status, &answered.body)),
        }
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        let key = self.key(name);
        let action = self.bucket.get_object(Some(&self.credentials), &key);
        let what = format!("GET {key}");
        let answered = self.send(&what, &action, None, &[])?;
        match answered.status {
            200 => Ok(Some(answered.body)),
            404 => Ok(None),
            status => Err(self.unexpected(&what, status, &answered.body)),
        }
    }

    fn get_range(
        &self,
        name: &str,
        offset: u64,
        len: u32,
    ) -> Result<Option<Vec<u8>>, ArchiveError> {
        if len == 0 {
            return Ok(self.get(name)?.map(|_| Vec::new()));
        }
        let key = self.key(name);
        let action = self.bucket.get_object(Some(&self.credentials), &key);
        let what = format!("GET {key} at {offset}+{len}");
        let range = format!("bytes={offset}-{}", offset + u64::from(len) - 1);
        let answered = self.send(&what, &action, None, &[("range", &range)])?;
        match answered.status {
            // 200: a server that ignores ranges sends it whole.
            200 => Ok(Some(
                answered
                    .body
                    .into_iter()
                    .skip(offset as usize)
                    .take(len as usize)
                    .collect(),
            )),
            206 => Ok(Some(answered.body)),
            404 => Ok(None),
            // Past the end: as a file read there, nothing.
            416 => Ok(Some(Vec::new())),
            status => Err(self.unexpected(&what, status, &answered.body)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, ArchiveError> {
        let full = self.key(prefix);
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut action: ListObjectsV2<'_> =
                self.bucket.list_objects_v2(Some(&self.credentials));
            action.with_prefix(full.as_str());
            // One level, as a directory lists: deeper names are not blobs here.
            action.with_delimiter("/");
            action.with_max_keys(REMOTE_LIST_PAGE_MAX);
            if let Some(token) = &token {
                action.with_continuation_token(token.as_str());
            }
            let what = format!("LIST {full}");
            let answered = self.send(&what, &action, None, &[])?;
            if answered.status != 200 {
                return Err(self.unexpected(&what, answered.status, &answered.body));
            }
            let text = std::str::from_utf8(&answered.body)
                .map_err(|e| self.remote(format!("{what}: the listing is not UTF-8: {e}")))?;
            let page = ListObjectsV2::parse_response(text)
                .map_err(|e| self.remote(format!("{what}: the listing does not parse: {e}")))?;
            for object in page.contents {
                // A "directory" some servers list once its last object is deleted
                // (SeaweedFS does): not a blob — no name Grid writes ends in `/`.
                if object.key.ends_with('/') {
                    continue;
                }
                let name = object
                    .key
                    .strip_prefix(&self.location.prefix)
                    .ok_or_else(|| {
                        self.remote(format!(
                            "{what}: the server listed `{}`, outside the prefix",
                            grid_spec::diagnostic::quoted(&object.key)
                        ))
                    })?
                    .to_owned();
                let size = object.size.ok_or_else(|| {
                    self.remote(format!(
                        "{what}: the server listed `{}` without its size",
                        grid_spec::diagnostic::quoted(&object.key)
                    ))
                })?;
                out.push((name, size));
            }
            match page.next_continuation_token {
                Some(next) if Some(&next) != token.as_ref() => token = Some(next),
                Some(_) => {
                    return Err(self.remote(format!(
                        "{what}: the server repeated its continuation token"
                    )));
                }
                None => break,
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn delete(&self, name: &str) -> Result<(), ArchiveError> {
        let key = self.key(name);
        let action = self.bucket.delete_object(Some(&self.credentials), &key);
        let what = format!("DELETE {key}");
        let answered = self.send(&what, &action, None, &[])?;
        match answered.status {
            200 | 204 | 404 => Ok(()),
            status => Err(self.unexpected(&what, status, &answered.body)),
        }
    }

    fn check(&self) -> Result<(), ArchiveError> {
        S3Blobs::check(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_bad_ones_are_refused_naming_them() {
        assert_eq!(
            S3Location::parse("s3://grid-archive/edge-a").unwrap(),
            S3Location {
                bucket: "grid-archive".into(),
                prefix: "edge-a/".into()
            }
        );
        assert_eq!(S3Location::parse("s3://grid.archive").unwrap().prefix, "");
        assert_eq!(
            S3Location::parse("s3://b12/a/b/").unwrap().to_string(),
            "s3://b12/a/b"
        );
        for bad in [
            "http://grid-archive/x",
            "s3://",
            "s3://ab",
            "s3://Grid-Archive/x",
            "s3://-grid/x",
            "s3://grid-/x",
            "s3://grid/a//b",
            "s3://grid/a/../b",
            "s3://grid/a b",
        ] {
            let e = S3Location::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        let long = format!("s3://{}", "a".repeat(10_000));
        assert!(S3Location::parse(&long).unwrap_err().len() < 1_000);
    }

    #[test]
    fn credentials_come_from_a_private_file_and_the_secret_is_never_shown() {
        let dir = std::env::temp_dir().join(format!("grid-s3-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s3.credentials");
        let write = |text: &str, mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(
            "[other]\naws_access_key_id = X\n\n[default]\naws_access_key_id = AKID\naws_secret_access_key = s3cr3t\n",
            0o600,
        );
        let keys = AccessKeys::read(&path).unwrap();
        assert_eq!(keys.key, "AKID");
        assert!(!format!("{keys:?}").contains("s3cr3t"));
        write(
            "[default]\naws_access_key_id = AKID\naws_secret_access_key = s3cr3t\n",
            0o644,
        );
        let e = AccessKeys::read(&path).unwrap_err();
        assert!(e.contains("mode 644") && !e.contains("s3cr3t"), "{e}");
        write(
            "[other]\naws_access_key_id = AKID\naws_secret_access_key = s3cr3t\n",
            0o600,
        );
        assert!(
            AccessKeys::read(&path)
                .unwrap_err()
                .contains("no [default] profile")
        );
        std::fs::remove_file(&path).unwrap();
        assert!(AccessKeys::read(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
