//! Talking to a host's `transport` as an outside client would, with `curl` (OpenSSL):
//!
//! - `call HOST ca="M" [as="P" in="M2"] [cert="FILE"] expect="admitted|refused"
//!   [because="TEXT"]` — `POST /control` `{"call":"observe"}` to HOST's listen address,
//!   trusting membership M's authority, presenting participant P's certificate of
//!   membership M2 (default M) with P's TLS key — or no certificate without `as`.
//!   `cert` replaces the certificate by a file of the journey's directory.
//!   `because` must appear in curl's error when refused.
//! - `occupy "IP:PORT"` — binds the address and holds it until the journey ends, so a
//!   host listening there must refuse to start.

use std::path::PathBuf;
use std::process::Command;

use super::Step;
use crate::error::Failure;
use crate::parse::{Node, ParseError};
use crate::runner::Context;

struct Call {
    host: String,
    ca: String,
    client: Option<(String, String)>,
    cert: Option<PathBuf>,
    admitted: bool,
    because: Option<String>,
}

struct Occupy {
    address: String,
}

pub fn parse_call(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.argument("a host name")?;
    let ca = node
        .string("ca")?
        .ok_or_else(|| node.error("`call` needs ca=\"MEMBERSHIP\" (whose authority to trust)"))?;
    let participant = node.string("as")?;
    let membership = node.string("in")?;
    let cert = node
        .string("cert")?
        .map(|c| node.cx().journey_dir().join(c));
    let admitted = match node.string("expect")?.as_deref() {
        Some("admitted") => true,
        Some("refused") => false,
        _ => return Err(node.error("`call` needs expect=\"admitted\" or expect=\"refused\"")),
    };
    let because = node.string("because")?;
    let client = participant.map(|p| (p, membership.unwrap_or_else(|| ca.clone())));
    Ok(Box::new(Call {
        host,
        ca,
        client,
        cert,
        admitted,
        because,
    }))
}

pub fn parse_occupy(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let address = node.argument("an address IP:PORT")?;
    Ok(Box::new(Occupy { address }))
}

fn failure(expected: impl Into<String>, observed: impl std::fmt::Display) -> Failure {
    Failure::new(expected, observed.to_string())
}

/// A participant's TLS key as a PKCS#8 PEM file for curl, made with openssl.
fn key_pem(cx: &Context<'_>, participant: &str) -> Result<PathBuf, Failure> {
    let key = cx.host_dir(participant).join("keys/tls.key");
    let hex = std::fs::read_to_string(&key)
        .map_err(|e| failure("a TLS key", format!("{}: {e}", key.display())))?;
    let hex = hex.trim();
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    for i in (0..hex.len()).step_by(2) {
        let byte = u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16)
            .map_err(|_| failure("a TLS key of 64 hex digits", key.display()))?;
        der.push(byte);
    }
    let der_path = cx.work_dir().join(format!("{participant}.tls.der"));
    let pem_path = cx.work_dir().join(format!("{participant}.tls.pem"));
    std::fs::write(&der_path, der).map_err(|e| failure("to write a key", e))?;
    let status = Command::new("openssl")
        .args(["pkey", "-inform", "DER", "-in"])
        .arg(&der_path)
        .arg("-out")
        .arg(&pem_path)
        .status()
        .map_err(|e| failure("openssl to run", e))?;
    if !status.success() {
        return Err(failure("openssl to convert the key", status));
    }
    Ok(pem_path)
}

impl Step for Call {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let config = std::fs::read_to_string(cx.host_dir(&self.host).join("host.toml"))
            .map_err(|e| failure(format!("host `{}` installed", self.host), e))?;
        let listen = config
            .lines()
            .find_map(|l| l.strip_prefix("listen = "))
            .map(|l| l.trim().trim_matches('"').to_owned())
            .ok_or_else(|| failure("a listen address in host.toml", &config))?;
        let (ip, port) = listen
            .rsplit_once(':')
            .ok_or_else(|| failure("IP:PORT", &listen))?;
        let ca = cx
            .state_dir()
            .join("memberships")
            .join(&self.ca)
            .join("ca.pem");
        let mut command = Command::new("curl");
        command
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&ca)
            .args(["--resolve", &format!("{}:{port}:{ip}", self.host)]);
        let mut who = "no client certificate".to_owned();
        if let Some((participant, membership)) = &self.client {
            let cert = match &self.cert {
                Some(cert) => cert.clone(),
                None => cx
                    .host_dir(participant)
                    .join("memberships")
                    .join(membership)
                    .join("participant.pem"),
            };
            command
                .arg("--cert")
                .arg(cert)
                .arg("--key")
                .arg(key_pem(cx, participant)?);
            who = format!("{participant} of {membership}");
        }
        let output = command
            .arg(format!("https://{}:{port}/control", self.host))
            .args(["-d", r#"{"call":"observe"}"#])
            .output()
            .map_err(|e| failure("curl to run", e))?;
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        let expected = if self.admitted {
            format!("{} to admit {who}", self.host)
        } else {
            format!("{} to refuse {who}", self.host)
        };
        match (output.status.success(), self.admitted) {
            (true, true) => {
                cx.say(format_args!(
                    "→ admitted {who}: {}",
                    String::from_utf8_lossy(&output.stdout).trim()
                ));
                Ok(())
            }
            (false, false) => {
                if let Some(because) = &self.because
                    && !stderr.contains(because.as_str())
                {
                    return Err(failure(
                        format!("{expected} because of {because:?}"),
                        stderr,
                    ));
                }
                cx.say(format_args!("→ refused {who}: {stderr}"));
                Ok(())
            }
            (true, false) => Err(failure(expected, "admitted")),
            (false, true) => Err(failure(expected, stderr)),
        }
    }
}

impl Step for Occupy {
    fn run(&self, cx: &mut Context<'_>) -> Result<(), Failure> {
        let listener = std::net::TcpListener::bind(&self.address)
            .map_err(|e| failure(format!("to bind {}", self.address), e))?;
        cx.hold(listener);
        cx.say(format_args!("{} is now held by the journey", self.address));
        Ok(())
    }
}
