//! A host's `control listen="IP:PORT" [operators="PATH" [certificate="PATH"
//! key="PATH"]]` (issue 36, docs/control-plane.md): where it serves the operator
//! control plane (profile `control`). A loopback address may be served without a client
//! certificate; any other only with operator mutual TLS — `operators=` names the PEM
//! file of the certificate authority whose certificates operators present,
//! `certificate=` and `key=` the certificate the page presents to their browsers (the
//! host's participant certificate without them). Relative paths are resolved against
//! the directory of the file naming them.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::*;
use crate::topology::{ControlListen, Operators};

impl FileReader<'_> {
    /// One `control` line of host `host`.
    pub(super) fn control_listen(
        &mut self,
        c: &mut NodeReader,
        host: &str,
    ) -> Option<(ControlListen, SourceSpan)> {
        let operators = c.string_prop(self, "operators", false);
        let certificate = c.string_prop(self, "certificate", false);
        let key = c.string_prop(self, "key", false);
        let (text, span) = c.string_prop(self, "listen", true)?;
        let listen = match text.parse::<SocketAddr>() {
            Ok(listen) => listen,
            Err(_) => {
                self.error(
                    span,
                    format!(
                        "host `{host}`: `{}` is not a control address",
                        crate::diagnostic::quoted(&text)
                    ),
                    "expected IP:PORT",
                    "for example control listen=\"127.0.0.1:8480\"",
                );
                return None;
            }
        };
        if let Some((path, path_span)) = &operators
            && path.trim().is_empty()
        {
            self.error(
                *path_span,
                format!("host `{host}`: `operators` names no file"),
                "empty",
                "name the PEM file of the operators' certificate authority: operators=\"ops-ca.pem\"",
            );
            return None;
        }
        if !listen.ip().is_loopback() && operators.is_none() {
            self.error(
                span,
                format!(
                    "host `{host}`: control address `{listen}` is not loopback and names no `operators`"
                ),
                "no operator mutual TLS",
                "anything but loopback is served only to operators presenting a certificate: add operators=\"ops-ca.pem\" (their certificate authority), or listen on 127.0.0.1",
            );
            return None;
        }
        for (name, given) in [("certificate", &certificate), ("key", &key)] {
            if let Some((path, path_span)) = given
                && path.trim().is_empty()
            {
                self.error(
                    *path_span,
                    format!("host `{host}`: `{name}` names no file"),
                    "empty",
                    "name a PEM file: certificate=\"control.pem\" key=\"control-key.pem\"",
                );
                return None;
            }
        }
        if let (Some((_, at)), None) | (None, Some((_, at))) = (&certificate, &key) {
            self.error(
                *at,
                format!("host `{host}`: `certificate` and `key` go together"),
                "one without the other",
                "name both the page's certificate and its private key: certificate=\"control.pem\" key=\"control-key.pem\"",
            );
            return None;
        }
        if operators.is_none()
            && let Some((_, at)) = &certificate
        {
            self.error(
                *at,
                format!("host `{host}`: `certificate` without `operators`"),
                "no operator mutual TLS",
                "the page presents a certificate only to operators presenting theirs: add operators=\"ops-ca.pem\" (their certificate authority)",
            );
            return None;
        }
        let resolve = |path: String| self.beside_file(&path);
        let operators = operators.map(|(ca, _)| Operators {
            ca: resolve(ca),
            certificate: certificate.map(|(p, _)| resolve(p)),
            key: key.map(|(p, _)| resolve(p)),
        });
        Some((ControlListen { listen, operators }, span))
    }

    /// `path` as named in this file: an absolute one as it is, a relative one against
    /// the directory of the file.
    fn beside_file(&self, path: &str) -> PathBuf {
        let path = PathBuf::from(path);
        if path.is_absolute() {
            return path;
        }
        match std::path::Path::new(self.file.name()).parent() {
            Some(dir) => dir.join(path),
            None => path,
        }
    }

    /// The host's `control` lines against its profile, its other addresses and each
    /// other.
    pub(super) fn control_lines(
        &mut self,
        host: (&str, SourceSpan),
        profiles: &[Profile],
        taken: [Option<SocketAddr>; 2],
        (lines, seen): (&[(ControlListen, SourceSpan)], usize),
    ) {
        let (name, name_span) = host;
        let selects = profiles.contains(&Profile::Control);
        if selects && seen == 0 {
            self.error(
                name_span,
                format!("host `{name}` selects `control` and says nowhere where to serve it"),
                "no control line",
                "add control listen=\"127.0.0.1:8480\" to the host",
            );
        }
        if seen > crate::limits::CONTROL_LISTENS_MAX
            && let Some((_, span)) = lines.last()
        {
            self.error(
                *span,
                format!(
                    "host `{name}` has {seen} control lines: CONTROL_LISTENS_MAX is {}",
                    crate::limits::CONTROL_LISTENS_MAX
                ),
                "one too many",
                "serve the control plane on fewer addresses",
            );
        }
        for (i, (line, span)) in lines.iter().enumerate() {
            if !selects {
                self.error(
                    *span,
                    format!("host `{name}` serves a control plane without the `control` profile"),
                    "profile not selected",
                    &format!("add `control` to the `profiles` line of host `{name}`"),
                );
            }
            let clash = taken.iter().flatten().any(|a| *a == line.listen)
                || lines[..i].iter().any(|(l, _)| l.listen == line.listen);
            if clash {
                self.error(
                    *span,
                    format!(
                        "host `{name}`: control address `{}` is already taken by this host",
                        line.listen
                    ),
                    "taken",
                    "give the control plane its own port: not the host's `listen`, its `metrics` or another `control` line",
                );
            }
        }
    }
}
