//! The control plane's HTTP server (hyper, HTTP/1): the panels (`GET /panel/SLUG`),
//! one explicit inspection (`POST /inspect`, CSRF token, same origin) and the two
//! assets — plain on loopback, or TLS requiring an operator's certificate
//! (`operators`). Every response carries a strict Content-Security-Policy; a request
//! naming another `Host` than an address this plane listens on (or, over TLS, a name
//! its certificate carries) is refused (DNS rebinding).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, LOCATION};
use hyper::{Method, Request, Response, StatusCode};

use super::kept::Kept;
use super::operators::{Credentials, Served};
use super::page::{self, OwnerLine, View};
use super::retained::{Part, Retained, barrier_subject, surrender_subject};
use crate::config::ControlListenConfig;
use crate::limits::{
    CONTROL_FORM_BYTES_MAX, CONTROL_PAGE_CONNECTIONS_MAX, CONTROL_TLS_HANDSHAKE_WAIT,
};
use crate::transport::plain::ClientCertificate;

/// How the control plane reaches an owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// This host itself, in its own process.
    Local,
    /// Another host: `POST /control` over the membership's mutual TLS.
    Peer { membership: String, address: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub reach: Reach,
}

/// One explicit inspection of an owner (the composition root's: it joins the rooms).
pub trait Inspector: Send + Sync + 'static {
    /// Blocking: called off the runtime's workers. The owner's observation as JSON,
    /// or why none came.
    /// `request`: the request id of `Part::Run`.
    fn inspect(
        &self,
        owner: &Owner,
        part: Part,
        request: &str,
    ) -> Result<serde_json::Value, String>;
    /// Blocking, likewise: a linearizable read barrier through the leader of
    /// `membership`, asked of this host's own voter — what it confirmed, or why it is
    /// unknown.
    fn barrier(&self, membership: &str) -> Result<serde_json::Value, String>;
    /// Blocking, likewise: this host's surrender, as the grant's recipient, of grant
    /// `grant` at `owner` (its issuer, the original owner), guarded: refused — nothing
    /// sent — while this host has open waits there or the issuer, asked just before,
    /// holds units of it reserved or unknown, or any other number of available units
    /// than `units`, the number the operator confirmed. The issuer's signed receipt,
    /// verified, or why there is none.
    fn surrender(
        &self,
        owner: &Owner,
        grant: &str,
        units: u64,
    ) -> Result<serde_json::Value, String>;
}

/// A host's control plane: its owners, what it retained of them, its CSRF token.
pub struct ControlPlane {
    host: String,
    owners: Vec<Owner>,
    retained: Mutex<Retained>,
    csrf: String,
    inspector: Arc<dyn Inspector>,
    /// The `Host` header values accepted: the addresses listened on.
    accepted_hosts: Vec<String>,
    /// The memberships whose authority this host runs: a read barrier may be asked
    /// through each.
    barriers: Vec<String>,
    /// Inspections under way by the name their panel gave them (`asker`): at most one
    /// per owner.
    askers: Mutex<std::collections::BTreeMap<String, (String, u64)>>,
    /// Where what is retained is kept across restarts (`None`: in memory only).
    kept: Option<Kept>,
    /// The host's custody is locked: the page shows what was kept, asking nobody.
    locked: bool,
}

/// One address the plane serves: plain (loopback only), or TLS taking only operators'
/// certificates.
pub struct Listen {
    pub address: SocketAddr,
    pub tls: Option<Served>,
}

/// One `control listen=…` line of the installation `dir`, refused unless it can be
/// served: loopback without `operators`; any address with the operators' files
/// reconcile copied into the installation (`control::operators`), intact.
pub fn listen(dir: &std::path::Path, line: &ControlListenConfig) -> Result<Listen, String> {
    let listen = &line.listen;
    let address = listen
        .parse::<SocketAddr>()
        .map_err(|_| format!("control listen=\"{listen}\" is not IP:PORT"))?;
    match Credentials::read_copies(dir, line)? {
        Some(credentials) => {
            let served = credentials
                .served(dir)
                .map_err(|e| format!("control listen=\"{listen}\": {e}"))?;
            Ok(Listen {
                address,
                tls: Some(served),
            })
        }
        None if !address.ip().is_loopback() => Err(format!(
            "control listen=\"{listen}\" is not a loopback address and names no operators: refused"
        )),
        None => Ok(Listen { address, tls: None }),
    }
}

impl ControlPlane {
    pub fn new(
        host: &str,
        owners: Vec<Owner>,
        barriers: Vec<String>,
        inspector: Arc<dyn Inspector>,
        listen: &[Listen],
        kept: Option<Kept>,
        locked: bool,
    ) -> Result<Arc<ControlPlane>, String> {
        let mut token = [0u8; 32];
        getrandom::fill(&mut token).map_err(|e| format!("no randomness for a CSRF token: {e}"))?;
        let mut accepted_hosts = Vec::new();
        for l in listen {
            let a = l.address;
            accepted_hosts.push(a.to_string());
            if a.ip().is_loopback() {
                accepted_hosts.push(format!("localhost:{}", a.port()));
            }
            // Over TLS, the names the page's certificate carries.
            let names = l.tls.iter().flat_map(|t| &t.names);
            accepted_hosts.extend(names.map(|n| format!("{n}:{}", a.port())));
        }
        let subjects: Vec<String> = owners
            .iter()
            .flat_map(|o| {
                let parts: &[Part] = match o.reach {
                    Reach::Local => &[Part::Observation, Part::Storage, Part::Run],
                    Reach::Peer { .. } => &[Part::Observation, Part::Storage],
                };
                let mut subjects: Vec<String> = parts.iter().map(|p| p.subject(&o.name)).collect();
                if matches!(o.reach, Reach::Peer { .. }) {
                    subjects.push(surrender_subject(&o.name));
                }
                subjects
            })
            .chain(barriers.iter().map(|m| barrier_subject(m)))
            .collect();
        let mut retained = Retained::new(subjects.iter().map(String::as_str));
        // What was kept before this start, each record verified (or refused by name).
        if let Some(kept) = &kept {
            for subject in &subjects {
                if let Some(entry) = kept.load(subject) {
                    if let super::retained::Known::Damaged { reason } = &entry.known {
                        tracing::warn!(subject, "control plane: {reason}");
                    }
                    retained.restore(subject, entry);
                }
            }
            kept.purge_others(&subjects);
        }
        Ok(Arc::new(ControlPlane {
            host: host.to_owned(),
            retained: Mutex::new(retained),
            owners,
            csrf: hex::encode(token),
            inspector,
            accepted_hosts,
            barriers,
            askers: Mutex::default(),
            kept,
            locked,
        }))
    }

    fn retained(&self) -> std::sync::MutexGuard<'_, Retained> {
        self.retained.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The page of `slug`, drawn from what is retained now.
    /// `surrender`: the grant a surrender is being confirmed for (`?surrender=G`).
    pub fn page(
        &self,
        slug: &str,
        selected: Option<&str>,
        surrender: Option<&str>,
        notice: Option<String>,
    ) -> Option<String> {
        let panel = page::find(slug)?;
        let retained = self.retained();
        let view = View {
            host: &self.host,
            owners: self
                .owners
                .iter()
                .map(|o| match &o.reach {
                    Reach::Local => OwnerLine {
                        name: &o.name,
                        membership: None,
                        address: None,
                    },
                    Reach::Peer {
                        membership,
                        address,
                    } => OwnerLine {
                        name: &o.name,
                        membership: Some(membership),
                        address: Some(address),
                    },
                })
                .collect(),
            retained: &retained,
            now: SystemTime::now(),
            csrf: &self.csrf,
            barriers: &self.barriers,
            selected,
            surrender,
            notice,
            locked: self.locked,
        };
        Some(page::render(&view, panel))
    }
}

/// Binds `listen` (refusing the start when taken) and serves the plane on `runtime`,
/// at most CONTROL_PAGE_CONNECTIONS_MAX connections at once: the accept loop's task
/// (aborted and awaited, the address is free again).
pub fn serve(
    plane: Arc<ControlPlane>,
    listen: Listen,
    runtime: &tokio::runtime::Handle,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let address = listen.address;
    let operators = listen.tls.is_some();
    let tls = listen.tls.map(|t| crate::transport::plain::Tls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(t.config)),
        handshake: CONTROL_TLS_HANDSHAKE_WAIT,
    });
    let accepting = crate::transport::plain::serve_tls(
        address,
        "control plane",
        Some(CONTROL_PAGE_CONNECTIONS_MAX),
        tls,
        runtime,
        move |request| handle(plane.clone(), request),
    )?;
    tracing::info!(%address, operators, "control plane served");
    Ok(accepting)
}

/// The headers every response carries: nothing from elsewhere, no framing, no caching.
fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .header(
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; connect-src 'self'",
        )
        .header("x-content-type-options", "nosniff")
        .header("x-frame-options", "DENY")
        .header("referrer-policy", "same-origin")
        .header("cache-control", "no-store")
        .body(Full::new(body.into()))
        .expect("valid static headers")
}

const HTML: &str = "text/html; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

fn see_other(location: &str) -> Response<Full<Bytes>> {
    let mut response = respond(StatusCode::SEE_OTHER, TEXT, Bytes::new());
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(LOCATION, value);
    }
    response
}

/// The field `name` of a page's query (`?owner=…&surrender=…`).
fn query_field(query: Option<&str>, name: &str) -> Option<String> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

async fn handle(plane: Arc<ControlPlane>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let authority = request
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !plane.accepted_hosts.contains(&authority) {
        return respond(
            StatusCode::MISDIRECTED_REQUEST,
            TEXT,
            "this control plane answers only requests addressed to the address it listens on\n",
        );
    }
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);
    // Over operator mutual TLS the handshake verified who asks: named in the log of
    // every form taken (its certificate parsed for that only).
    let certificate = request.extensions().get::<ClientCertificate>();
    let origin = match certificate {
        Some(_) => format!("https://{authority}"),
        None => format!("http://{authority}"),
    };
    if let (&Method::POST, Some(certificate)) = (request.method(), certificate) {
        let operator = super::operators::operator_of(&certificate.0);
        tracing::info!(operator, path, "control plane: a form from an operator");
    }
    match (request.method().clone(), path.as_str()) {
        (Method::GET, "/") => see_other("/panel/overview"),
        (Method::GET, "/assets/app.js") => respond(
            StatusCode::OK,
            "text/javascript; charset=utf-8",
            page::SCRIPT,
        ),
        (Method::GET, "/assets/style.css") => {
            respond(StatusCode::OK, "text/css; charset=utf-8", page::STYLE)
        }
        (Method::GET, p) if p.starts_with("/panel/") => {
            let slug = &p["/panel/".len()..];
            let selected = query_field(query.as_deref(), "owner");
            let surrender = query_field(query.as_deref(), "surrender");
            match plane.page(slug, selected.as_deref(), surrender.as_deref(), None) {
                Some(html) => respond(StatusCode::OK, HTML, html),
                None => respond(StatusCode::NOT_FOUND, HTML, page::not_found(p)),
            }
        }
        (Method::POST, "/inspect") => match read_form(&plane, request, &origin).await {
            Ok(form) => inspect(plane, form).await,
            Err(refused) => refused,
        },
        (Method::POST, "/barrier") => match read_form(&plane, request, &origin).await {
            Ok(form) => barrier(plane, form).await,
            Err(refused) => refused,
        },
        (Method::POST, "/surrender") => match read_form(&plane, request, &origin).await {
            Ok(form) => surrender(plane, form).await,
            Err(refused) => refused,
        },
        (Method::POST, "/closed") => match read_form(&plane, request, &origin).await {
            Ok(form) => closed(&plane, &form),
            Err(refused) => refused,
        },
        (Method::GET, p) => respond(StatusCode::NOT_FOUND, HTML, page::not_found(p)),
        _ => respond(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "the control plane takes GET of its pages and POST /inspect, /barrier, /surrender and /closed\n",
        ),
    }
}

/// Marks the inspection abandoned when the panel that asked goes away first (its
/// request dropped: the browser closed the page or navigated elsewhere).
struct Asking {
    plane: Arc<ControlPlane>,
    subject: String,
    ticket: u64,
    answered: bool,
}

impl Drop for Asking {
    fn drop(&mut self) {
        if !self.answered {
            tracing::info!(
                subject = self.subject,
                ticket = self.ticket,
                "control plane: the request that asked went away before the reply"
            );
            self.plane.retained().abandon(&self.subject, self.ticket);
        }
    }
}

/// A form of one of the plane's own pages, its CSRF token checked.
struct Form(Bytes);

impl Form {
    fn field(&self, name: &str) -> Option<String> {
        url::form_urlencoded::parse(&self.0)
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

/// `POST /closed`: the panel that asked (`asker`) closed before the reply.
fn closed(plane: &ControlPlane, form: &Form) -> Response<Full<Bytes>> {
    let asker = form.field("asker").unwrap_or_default();
    let asked = plane
        .askers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&asker);
    if let Some((subject, ticket)) = asked {
        tracing::info!(
            subject,
            ticket,
            "control plane: the panel that asked closed before the reply"
        );
        plane.retained().abandon(&subject, ticket);
    }
    respond(StatusCode::NO_CONTENT, TEXT, Bytes::new())
}

/// A return address inside the plane only.
fn back(field: Option<String>) -> String {
    match field {
        Some(b)
            if b.starts_with("/panel/")
                && !b.contains("//")
                && b.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"/?=&_.%-".contains(&c)) =>
        {
            b
        }
        _ => "/panel/overview".to_owned(),
    }
}

/// The body of a form posted from this plane's own pages: same origin, within
/// CONTROL_FORM_BYTES_MAX, carrying the page's CSRF token.
async fn read_form(
    plane: &ControlPlane,
    request: Request<Incoming>,
    origin: &str,
) -> Result<Form, Response<Full<Bytes>>> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
    };
    // Same origin only: a browser says where a form came from.
    let cross = header("sec-fetch-site").is_some_and(|s| s != "same-origin")
        || header("origin").is_some_and(|o| o != origin);
    if cross {
        return Err(respond(
            StatusCode::FORBIDDEN,
            TEXT,
            "refused: a form is taken from this control plane's own pages only\n",
        ));
    }
    let body = match Limited::new(request.into_body(), CONTROL_FORM_BYTES_MAX)
        .collect()
        .await
    {
        Ok(body) => Form(body.to_bytes()),
        Err(_) => {
            return Err(respond(
                StatusCode::PAYLOAD_TOO_LARGE,
                TEXT,
                format!(
                    "refused: a form longer than CONTROL_FORM_BYTES_MAX ({CONTROL_FORM_BYTES_MAX} bytes)\n"
                ),
            ));
        }
    };
    if body.field("csrf").as_deref() != Some(plane.csrf.as_str()) {
        return Err(respond(
            StatusCode::FORBIDDEN,
            TEXT,
            "refused: the form's CSRF token is not this control plane's (reload the page)\n",
        ));
    }
    Ok(body)
}

/// `POST /inspect`: one explicit inspection of an owner, answered when its reply came.
async fn inspect(plane: Arc<ControlPlane>, form: Form) -> Response<Full<Bytes>> {
    let name = form.field("owner").unwrap_or_default();
    let Some(owner) = plane.owners.iter().find(|o| o.name == name).cloned() else {
        return respond(
            StatusCode::NOT_FOUND,
            TEXT,
            format!(
                "refused: `{}` is no owner this control plane reaches\n",
                grid_spec::diagnostic::quoted(&name)
            ),
        );
    };
    let part = match form.field("part").as_deref() {
        None | Some("observation") => Part::Observation,
        Some("storage") => Part::Storage,
        Some("run") if owner.reach == Reach::Local => Part::Run,
        Some("run") => {
            return respond(
                StatusCode::NOT_FOUND,
                TEXT,
                format!(
                    "refused: a request is inspected at its own host only (`{}`'s control plane)\n",
                    grid_spec::diagnostic::quoted(&name)
                ),
            );
        }
        Some(other) => {
            return respond(
                StatusCode::NOT_FOUND,
                TEXT,
                format!(
                    "refused: `{}` is no part of an owner this control plane inspects (observation, storage, run)\n",
                    grid_spec::diagnostic::quoted(other)
                ),
            );
        }
    };
    let request = form.field("request").unwrap_or_default();
    if part == Part::Run
        && (request.is_empty() || request.len() > crate::limits::OPERATION_ID_LENGTH_MAX)
    {
        return respond(
            StatusCode::BAD_REQUEST,
            TEXT,
            format!(
                "refused: `{}` is no request id (1 to OPERATION_ID_LENGTH_MAX = {} bytes)\n",
                grid_spec::diagnostic::quoted(&request),
                crate::limits::OPERATION_ID_LENGTH_MAX
            ),
        );
    }
    let inspector = plane.inspector.clone();
    let subject = part.subject(&name);
    ask(plane, subject, form, move || {
        inspector.inspect(&owner, part, &request)
    })
    .await
}

/// `POST /barrier`: one explicit read barrier through the leader of a membership whose
/// authority this host runs.
async fn barrier(plane: Arc<ControlPlane>, form: Form) -> Response<Full<Bytes>> {
    let membership = form.field("membership").unwrap_or_default();
    if !plane.barriers.contains(&membership) {
        return respond(
            StatusCode::NOT_FOUND,
            TEXT,
            format!(
                "refused: this host runs no authority of `{}`\n",
                grid_spec::diagnostic::quoted(&membership)
            ),
        );
    }
    let inspector = plane.inspector.clone();
    let subject = barrier_subject(&membership);
    ask(plane, subject, form, move || inspector.barrier(&membership)).await
}

/// `POST /surrender`: this host's guarded surrender of one grant at its issuer, sent
/// only when the form confirms it by the grant's name and its units.
async fn surrender(plane: Arc<ControlPlane>, form: Form) -> Response<Full<Bytes>> {
    let name = form.field("owner").unwrap_or_default();
    let owner = plane
        .owners
        .iter()
        .find(|o| o.name == name && matches!(o.reach, Reach::Peer { .. }))
        .cloned();
    let Some(owner) = owner else {
        return respond(
            StatusCode::NOT_FOUND,
            TEXT,
            format!(
                "refused: `{}` is no other owner this control plane reaches (a grant is surrendered at its issuer)\n",
                grid_spec::diagnostic::quoted(&name)
            ),
        );
    };
    let grant = form.field("grant").unwrap_or_default();
    if grant.is_empty() || grant.len() > grid_spec::limits::NAME_LENGTH_MAX {
        return respond(
            StatusCode::BAD_REQUEST,
            TEXT,
            format!(
                "refused: `{}` is no grant name (1 to NAME_LENGTH_MAX = {} bytes)\n",
                grid_spec::diagnostic::quoted(&grant),
                grid_spec::limits::NAME_LENGTH_MAX
            ),
        );
    }
    let Some(units) = form.field("units").and_then(|u| u.parse::<u64>().ok()) else {
        return respond(
            StatusCode::BAD_REQUEST,
            TEXT,
            "refused: the form names no number of units to surrender\n",
        );
    };
    if form.field("confirm").as_deref() != Some(grant.as_str()) {
        return respond(
            StatusCode::BAD_REQUEST,
            TEXT,
            format!(
                "refused: the surrender of `{}` was not confirmed (tick the box naming the grant and its units); nothing was sent\n",
                grid_spec::diagnostic::quoted(&grant)
            ),
        );
    }
    let inspector = plane.inspector.clone();
    let subject = surrender_subject(&name);
    ask(plane, subject, form, move || {
        inspector.surrender(&owner, &grant, units)
    })
    .await
}

/// One explicit ask of `subject` (`work`, blocking), answered when it ended — or left
/// to finish as `uncertain` when the panel that asked goes away first.
async fn ask(
    plane: Arc<ControlPlane>,
    subject: String,
    form: Form,
    work: impl FnOnce() -> Result<serde_json::Value, String> + Send + 'static,
) -> Response<Full<Bytes>> {
    let back = back(form.field("back"));
    let ticket = match plane.retained().begin(&subject, SystemTime::now()) {
        Ok(ticket) => {
            tracing::info!(subject, ticket, "control plane: asking");
            ticket
        }
        Err(refused) => {
            let slug = back["/panel/".len()..]
                .split('?')
                .next()
                .unwrap_or("overview")
                .to_owned();
            let html = plane
                .page(&slug, None, None, Some(refused.to_string()))
                .or_else(|| plane.page("overview", None, None, Some(refused.to_string())))
                .unwrap_or_default();
            return respond(StatusCode::CONFLICT, HTML, html);
        }
    };
    let asker = form
        .field("asker")
        .filter(|a| !a.is_empty() && a.len() <= 64);
    if let Some(asker) = &asker {
        plane
            .askers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(asker.clone(), (subject.clone(), ticket));
    }
    let mut asking = Asking {
        plane: plane.clone(),
        subject: subject.clone(),
        ticket,
        answered: false,
    };
    let (done, finished) = tokio::sync::oneshot::channel();
    let asked = plane.clone();
    // The ask goes on when the panel closes: its reply is then kept as uncertain.
    tokio::task::spawn_blocking(move || {
        let reply = work();
        if let Some(asker) = &asker {
            asked
                .askers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(asker);
        }
        let known = asked
            .retained()
            .finish(&subject, ticket, reply, SystemTime::now());
        if let Some(known) = known {
            crate::metrics::control_inspection(&asked.host, &subject, known.word());
            // Kept across restarts (on this blocking thread: an fsync).
            if let Some(kept) = &asked.kept
                && let Err(why) =
                    kept.keep_latest(&subject, || asked.retained().entry(&subject).cloned())
            {
                tracing::warn!(subject, "control plane: {why}");
            }
        }
        let _ = done.send(());
    });
    let _ = finished.await;
    asking.answered = true;
    see_other(&back)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_without_operators_is_served() {
        let line = |listen: &str, operators: Option<&str>| ControlListenConfig {
            listen: listen.to_owned(),
            operators: operators.map(Into::into),
            certificate: None,
            key: None,
            digest: None,
        };
        // An installation holding no copies of operators' files.
        let dir = std::path::Path::new("/nonexistent/grid-installation");
        let served = |l| listen(dir, &l).map(|l| l.tls.is_some());
        assert_eq!(served(line("127.0.0.1:8480", None)), Ok(false));
        assert_eq!(served(line("[::1]:8480", None)), Ok(false));
        let refused = served(line("10.0.0.5:8443", Some("ops-ca.pem"))).unwrap_err();
        assert!(
            refused.contains("10.0.0.5:8443") && refused.contains("missing"),
            "{refused}"
        );
        assert!(served(line("10.0.0.5:8443", None)).is_err());
        assert!(served(line("nowhere", None)).is_err());
    }

    #[test]
    fn a_return_address_stays_inside_the_plane() {
        assert_eq!(
            back(Some("/panel/routes?owner=plant".into())),
            "/panel/routes?owner=plant"
        );
        for outside in [
            "https://evil.example/",
            "//evil.example/panel/",
            "/panel/x\r\nSet-Cookie: a",
        ] {
            assert_eq!(back(Some(outside.into())), "/panel/overview");
        }
        assert_eq!(back(None), "/panel/overview");
    }
}
