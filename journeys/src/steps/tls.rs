//! Talking to a host's `transport` as an outside client would, with `curl` (OpenSSL):
//!
//! - `call HOST ca="M" [as="P" in="M2"] [cert="FILE"] [from="H"]
//!   expect="admitted|refused|unreachable" [because="TEXT"]` — `POST /control`
//!   `{"call":"observe"}` to HOST's listen address, trusting membership M's authority,
//!   presenting participant P's certificate of membership M2 (default M) with P's TLS
//!   key — or no certificate without `as`. `cert` replaces the certificate by a file of
//!   the journey's directory. `from` runs curl inside host H's network namespace (H
//!   must have a non-loopback listen address), instead of the root namespace.
//!   `unreachable`: no TCP connection at all (curl exit 7 or 28, and the address did
//!   not answer with a reset) — e.g. across a `partition`. `because` must appear in
//!   curl's error when refused or unreachable. `path="/…"` and `body="JSON"` post
//!   something else than `/control` `{"call":"observe"}` (e.g. a Processes endpoint);
//!   `reply="TEXT"`: admitted, the reply's body contains TEXT.
//! - `occupy "IP:PORT"` — binds the address and holds it until the journey ends, so a
//!   host listening there must refuse to start.

use std::path::PathBuf;
use std::process::{Command, Output};

use super::Step;
use crate::context::Context;
use crate::error::Failure;
use crate::step::{Node, ParseError};

/// How long `call` waits for a TCP connection.
const CONNECT_TIMEOUT_SECS: &str = "5";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Admitted,
    Refused,
    Unreachable,
}

struct Call {
    host: String,
    ca: String,
    client: Option<(String, String)>,
    cert: Option<PathBuf>,
    from: Option<String>,
    expect: Expect,
    because: Option<String>,
    /// The path and JSON body posted (default `/control`, `{"call":"observe"}`).
    path: String,
    body: String,
    /// Admitted: the reply's body must contain this text.
    reply: Option<String>,
}

struct Occupy {
    address: String,
}

pub fn parse_call(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let host = node.host("a host name")?;
    let ca = node
        .string("ca")?
        .ok_or_else(|| node.error("`call` needs ca=\"MEMBERSHIP\" (whose authority to trust)"))?;
    let participant = node.string("as")?;
    let membership = node.string("in")?;
    let cert = node
        .string("cert")?
        .map(|c| node.cx().journey_dir().join(c));
    let from = node.host_property("from")?;
    let expect = match node.string("expect")?.as_deref() {
        Some("admitted") => Expect::Admitted,
        Some("refused") => Expect::Refused,
        Some("unreachable") => Expect::Unreachable,
        _ => {
            return Err(node.error(
                "`call` needs expect=\"admitted\", expect=\"refused\" or expect=\"unreachable\"",
            ));
        }
    };
    let because = node.string("because")?;
    let path = node
        .string("path")?
        .unwrap_or_else(|| "/control".to_owned());
    if !path.starts_with('/') {
        return Err(node.error(format!("`path` starts with `/`, not `{path}`")));
    }
    let body = node
        .string("body")?
        .unwrap_or_else(|| r#"{"call":"observe"}"#.to_owned());
    let reply = node.string("reply")?;
    let client = participant.map(|p| (p, membership.unwrap_or_else(|| ca.clone())));
    Ok(Box::new(Call {
        host,
        ca,
        client,
        cert,
        from,
        expect,
        because,
        path,
        body,
        reply,
    }))
}

pub fn parse_occupy(node: &mut Node<'_>) -> Result<Box<dyn Step>, ParseError> {
    let address = node.argument("an address IP:PORT")?;
    Ok(Box::new(Occupy { address }))
}

fn failure(expected: impl Into<String>, observed: impl std::fmt::Display) -> Failure {
    Failure::new(expected, observed.to_string())
}

/// A participant's TLS key as a PKCS#8 PEM file for curl: the key file itself, or (a
/// key in the older hex form) a PEM made with openssl.
fn key_pem(cx: &Context<'_>, participant: &str) -> Result<PathBuf, Failure> {
    let key = cx.host_dir(participant).join("keys/tls.key");
    let hex = std::fs::read_to_string(&key)
        .map_err(|e| failure("a TLS key", format!("{}: {e}", key.display())))?;
    if hex.trim_start().starts_with("-----BEGIN") {
        // Already PEM PKCS#8: curl reads the key file as it is.
        return Ok(key);
    }
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
        let listen = cx.host_listen(&self.host)?;
        let (ip, port) = listen
            .rsplit_once(':')
            .ok_or_else(|| failure("IP:PORT", &listen))?;
        let ca = cx
            .state_dir()
            .join("memberships")
            .join(&self.ca)
            .join("ca.pem");
        let mut command = match &self.from {
            Some(from) => {
                let Some(namespace) = cx.host_namespace(from)? else {
                    return Err(failure(
                        format!(
                            "host `{from}` in a network namespace (`from` needs a non-loopback \
                             listen address)"
                        ),
                        format!(
                            "`{from}` runs in the root namespace (listen {})",
                            cx.host_listen(from)
                                .unwrap_or_else(|f| format!("unknown: {}", f.observed))
                        ),
                    ));
                };
                let mut command = Command::new("ip");
                command.args(["netns", "exec", &namespace, "curl"]);
                command
            }
            None => Command::new("curl"),
        };
        command
            .args(["-sS", "--max-time", "10", "--connect-timeout"])
            .arg(CONNECT_TIMEOUT_SECS)
            .arg("--cacert")
            .arg(&ca)
            .args(["--resolve", &format!("{}:{port}:{ip}", self.host)]);
        if self.expect == Expect::Unreachable {
            // The verbose lines name why the connection failed (no route, timeout, reset).
            command.arg("-v");
        }
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
            .arg(format!("https://{}:{port}{}", self.host, self.path))
            .args(["-d", &self.body])
            .output()
            .map_err(|e| failure("curl to run", e))?;
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        let via = self
            .from
            .as_ref()
            .map_or(String::new(), |from| format!(" from {from}'s namespace"));
        let expected = match self.expect {
            Expect::Admitted => format!("{} ({listen}) to admit {who}{via}", self.host),
            Expect::Refused => format!("{} ({listen}) to refuse {who}{via}", self.host),
            Expect::Unreachable => {
                return unreachable(
                    cx,
                    &self.host,
                    &listen,
                    &via,
                    &output,
                    self.because.as_deref(),
                );
            }
        };
        let admitted = self.expect == Expect::Admitted;
        match (output.status.success(), admitted) {
            (true, true) => {
                let said = String::from_utf8_lossy(&output.stdout).trim().to_owned();
                if let Some(reply) = &self.reply
                    && !said.contains(reply.as_str())
                {
                    return Err(failure(format!("{expected}, answering {reply:?}"), said));
                }
                cx.say(format_args!("→ admitted {who}: {said}"));
                Ok(())
            }
            (false, false) if never_connected(&output) => Err(failure(
                expected,
                format!("no connection at all (unreachable, not refused): {stderr}"),
            )),
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

/// Whether curl never got a TCP connection: exit 7 (could not connect), or exit 28 (timed
/// out) while still connecting.
fn never_connected(output: &Output) -> bool {
    let stderr = String::from_utf8_lossy(&output.stderr);
    match output.status.code() {
        Some(7) => true,
        Some(28) => [
            "Failed to connect",
            "Connection timed out",
            "Connection timeout",
        ]
        .iter()
        .any(|text| stderr.contains(text)),
        _ => false,
    }
}

/// Checks that curl made no TCP connection ([`never_connected`]) and that the address
/// did not answer with a reset (a reset means the network reaches it).
fn unreachable(
    cx: &mut Context<'_>,
    host: &str,
    listen: &str,
    via: &str,
    output: &Output,
    because: Option<&str>,
) -> Result<(), Failure> {
    let expected = format!("{host} ({listen}) unreachable{via}: no TCP connection");
    let stderr = String::from_utf8_lossy(&output.stderr);
    // `* connect to IP port P failed: REASON` and `curl: (N) …`.
    let reasons: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("* connect to ") || l.starts_with("curl: ("))
        .map(|l| l.trim_start_matches("* "))
        .collect();
    let reason = if reasons.is_empty() {
        stderr.trim().lines().last().unwrap_or("").to_owned()
    } else {
        reasons.join("; ")
    };
    if output.status.success() {
        return Err(failure(
            expected,
            "curl connected and the call was answered",
        ));
    }
    if !never_connected(output) {
        let code = output
            .status
            .code()
            .map_or("a signal".to_owned(), |c| c.to_string());
        return Err(failure(
            expected,
            format!("curl connected (exit {code}): {reason}"),
        ));
    }
    if reason.contains("Connection refused") {
        return Err(failure(
            expected,
            format!(
                "the address answered with a reset (nothing listening, but reachable): {reason}"
            ),
        ));
    }
    if let Some(because) = because
        && !reason.contains(because)
    {
        return Err(failure(
            format!("{expected} because of {because:?}"),
            reason,
        ));
    }
    cx.say(format_args!("→ unreachable{via}: {reason}"));
    Ok(())
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
