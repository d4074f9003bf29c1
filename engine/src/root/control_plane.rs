//! The control plane (profile `control`, docs/control-plane.md) wired to this host:
//! its owners are the host itself and the owners `host.toml` names; an explicit
//! inspection reads this host's own observation in its process, or asks a peer's
//! over `POST /control` as this host's participant of their shared membership.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Started;
use super::inspection::Inspection;
use crate::authority::api::{AuthorityCall, AuthorityReply};
use crate::config::HostConfig;
use crate::control::retained::Part;
use crate::control::server::{self, ControlPlane, Inspector, Owner, Reach};
use crate::host::Handled;
use crate::limits::CONTROL_INSPECT_WAIT;
use crate::processes::api::{Peer, ProcessCall, ProcessReply};
use crate::protocol::{Call, Reply};
use crate::transport::PeerClient;

/// The addresses of the host's `control` lines with their TLS, refused unless each
/// can be served (checked before anything is served).
pub fn addresses(dir: &Path, config: &HostConfig) -> Result<Vec<server::Listen>, String> {
    let Some(control) = &config.control else {
        return Ok(Vec::new());
    };
    if !config.selects(grid_spec::Profile::Control) {
        return Err(
            "host.toml has `control` lines but does not select the `control` profile".to_owned(),
        );
    }
    control
        .listen
        .iter()
        .map(|line| server::listen(dir, line))
        .collect()
}

struct HostInspector {
    started: Started,
    /// This host's count of `local` calls (`grid_owner_requests`).
    requests: prometheus_client::metrics::counter::Counter,
    dir: PathBuf,
    runtime: tokio::runtime::Handle,
}

impl HostInspector {
    /// What this host holds of `request`, as its receiver or its caller — read only:
    /// nothing is resumed, resolved or replaced.
    fn run(&self, owner: &Owner, request: &str) -> Result<serde_json::Value, String> {
        if owner.reach != Reach::Local {
            return Err("a request is inspected at its own host only".to_owned());
        }
        let processes = self
            .started
            .processes
            .as_ref()
            .ok_or("this host does not run the `processes` profile")?;
        self.requests.inc();
        match processes.handle_local(ProcessCall::Inspect {
            request: request.to_owned(),
        }) {
            ProcessReply::Inspected { run } => Ok(serde_json::json!({
                "request": request,
                "run": run,
            })),
            ProcessReply::Refused { reason } => Err(reason),
            other => Err(format!("the processes room answered {other:?}")),
        }
    }
}

impl HostInspector {
    /// One control call to `owner` over `POST /control`, as this host's participant.
    fn call_peer(
        &self,
        owner: &Owner,
        membership: &str,
        address: &str,
        call: &Call,
    ) -> Result<Reply, String> {
        let client = PeerClient::new(&self.dir, membership, &owner.name, address)
            .map_err(|e| format!("cannot reach {}: {e}", owner.name))?;
        self.runtime
            .block_on(client.post::<_, Reply>("/control", call, CONTROL_INSPECT_WAIT))
            .map_err(|e| format!("{} did not answer: {e}", owner.name))
    }

    /// `owner`'s observation, asked over `POST /control` as this host's participant.
    fn observe_peer(
        &self,
        owner: &Owner,
        membership: &str,
        address: &str,
    ) -> Result<crate::protocol::Observation, String> {
        match self.call_peer(owner, membership, address, &Call::Observe)? {
            Reply::Observation(o) => Ok(o),
            Reply::Refused { reason } => Err(format!("{} refused: {reason}", owner.name)),
            _ => Err(format!(
                "{} answered something else than its observation",
                owner.name
            )),
        }
    }
}

impl Inspector for HostInspector {
    fn surrender(
        &self,
        owner: &Owner,
        grant: &str,
        units: u64,
    ) -> Result<serde_json::Value, String> {
        use crate::wallet::view::{available, grant_refusal, waits_refusal};
        let Reach::Peer {
            membership,
            address,
        } = &owner.reach
        else {
            return Err(
                "refused: a grant is surrendered at its issuer, another host; nothing was sent"
                    .to_owned(),
            );
        };
        let processes = self.started.processes.as_ref().ok_or(
            "refused: this host does not run `processes`, so it holds no grant as a caller; nothing was sent",
        )?;
        let issuer = &owner.name;
        let host = processes.host_name();
        let open: Vec<String> = processes
            .open_wait_views()
            .into_iter()
            .filter(|w| &w.receiver == issuer)
            .map(|w| w.request)
            .collect();
        if let Some(refused) = waits_refusal(issuer, &open) {
            return Err(refused);
        }
        // The issuer asked again just before: what it holds now decides, not what
        // the page retained.
        let observed = self
            .observe_peer(owner, membership, address)
            .map_err(|e| format!("{e}; nothing was surrendered"))?;
        let held = observed.grants.iter().find(|g| g.name == grant);
        if let Some(refused) = grant_refusal(host, issuer, grant, held) {
            return Err(refused);
        }
        let now = held.map_or(0, available);
        if now != units {
            return Err(format!(
                "refused: grant {grant} at {issuer} has {now} available unit(s) now, not the {units} confirmed; nothing was surrendered — look again and confirm anew"
            ));
        }
        // The receipt is checked with the signing key the issuer reported in that
        // observation (certified as `issuer` by the membership's CA), or a newer one
        // this host learned of it by a signed rotation.
        let keys = observed.keys.as_ref().ok_or_else(|| {
            format!("refused: {issuer} reported no signing key to check its receipt with; nothing was surrendered")
        })?;
        let manifest = crate::custody::Manifest {
            generation: keys.generation,
            signing: keys.signing.clone(),
            mail: String::new(),
            tls: String::new(),
            retired: Vec::new(),
            mail_generation: keys.mail_generation,
            retired_mail: Vec::new(),
            tls_generation: keys.tls_generation,
            retired_tls: Vec::new(),
        };
        let peer = Peer {
            name: issuer.clone(),
            address: address.clone(),
            keys: manifest,
        };
        let (view, receipt) = self
            .runtime
            .block_on(processes.surrender_grant(&peer, membership, grant))
            .map_err(|e| {
                format!("{}{e}. Whether {issuer} surrendered it is unknown: inspect it; surrendering again changes nothing", crate::control::wallet::NO_RECEIPT)
            })?;
        let detail = format!(
            "{issuer} surrendered grant {grant} of {} (signed receipt): {} unit(s) surrendered in all, {} reserved and {} unknown still held",
            receipt.caller, receipt.surrendered, receipt.reserved, receipt.unknown
        );
        if let Some(wallet) = &self.started.wallet {
            wallet
                .record_surrender(grant, issuer, &detail)
                .map_err(|e| format!("{detail}, but the wallet's journal did not take it: {e}"))?;
        }
        Ok(serde_json::json!({
            "grant": grant,
            "issuer": issuer,
            "confirmed": units,
            "surrendered": receipt.surrendered,
            "reserved": receipt.reserved,
            "unknown": receipt.unknown,
            "retired": view.retired,
            "generation": receipt.generation,
            "signature": receipt.signature,
            "signature_verified": true,
            "verified_with": format!("generation {} of {issuer}'s signing key {}", receipt.generation, keys.signing),
            "detail": detail,
        }))
    }

    fn barrier(&self, membership: &str) -> Result<serde_json::Value, String> {
        let authority = self.started.authorities.pick(Some(membership))?;
        self.requests.inc();
        match authority.handle_local(AuthorityCall::Barrier) {
            AuthorityReply::Barrier {
                barrier,
                read_index: Some(read_index),
                detail,
            } if barrier == "ok" => Ok(serde_json::json!({
                "read_index": read_index,
                "detail": detail,
            })),
            AuthorityReply::Barrier { detail, .. } => Err(detail),
            AuthorityReply::Refused { reason } | AuthorityReply::Unknown { reason } => Err(reason),
            other => Err(format!("the authority answered {other:?}")),
        }
    }

    fn inspect(
        &self,
        owner: &Owner,
        part: Part,
        request: &str,
    ) -> Result<serde_json::Value, String> {
        let call = match part {
            Part::Observation => Call::Inspect,
            Part::Storage => Call::Storage,
            Part::Run => return self.run(owner, request),
        };
        let reply = match &owner.reach {
            Reach::Local => {
                self.requests.inc();
                let handled = match call {
                    Call::Inspect => Inspection::of(&self.started).inspect(),
                    call => self
                        .started
                        .host
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .handle(call),
                };
                match handled {
                    Handled::Reply(reply) => reply,
                    Handled::DropReply => return Err("the reply was lost".to_owned()),
                }
            }
            Reach::Peer {
                membership,
                address,
            } => self.call_peer(owner, membership, address, &call)?,
        };
        match reply {
            // The owner's observation with its rooms' parts (`Call::Inspect`): this
            // host's in process, a peer's as it answered.
            Reply::Inspection { inspection } if part == Part::Observation => Ok(inspection),
            Reply::Storage(view) => serde_json::to_value(view).map_err(|e| e.to_string()),
            Reply::Refused { reason } => Err(format!("{} refused: {reason}", owner.name)),
            _ => Err(format!(
                "{} answered something else than its {}",
                owner.name,
                part.word()
            )),
        }
    }
}

/// Serves the control plane on every `control` address of the host, if it selects it.
/// `listen`: what [`addresses`] read at the start.
pub fn serve(
    started: &Started,
    dir: &Path,
    listen: Vec<server::Listen>,
    runtime: &tokio::runtime::Handle,
) -> Result<(), String> {
    let (name, config) = {
        let host = started.host.lock().unwrap_or_else(|p| p.into_inner());
        (host.name().to_owned(), host.config().clone())
    };
    let Some(control) = &config.control else {
        return Ok(());
    };
    let owners = owners(&name, control);
    let inspector = Arc::new(HostInspector {
        started: started.clone(),
        requests: crate::metrics::owner_requests(&name, "local"),
        dir: dir.to_owned(),
        runtime: runtime.clone(),
    });
    let barriers = started.authorities.by_membership.keys().cloned().collect();
    let custody = started
        .host
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .custody()
        .clone();
    let kept = crate::control::kept::Kept::new(dir, &name, custody);
    let plane = ControlPlane::new(
        &name,
        owners,
        barriers,
        inspector,
        &listen,
        Some(kept),
        false,
    )?;
    for line in listen {
        server::serve(plane.clone(), line, runtime)?;
    }
    Ok(())
}

/// The owners of a control plane: this host itself, then those host.toml names.
fn owners(name: &str, control: &crate::config::ControlConfig) -> Vec<Owner> {
    let mut owners = vec![Owner {
        name: name.to_owned(),
        reach: Reach::Local,
    }];
    owners.extend(control.owners.iter().map(|o| Owner {
        name: o.name.clone(),
        reach: Reach::Peer {
            membership: o.membership.clone(),
            address: o.address.clone(),
        },
    }));
    owners
}

/// What the page of a host whose custody is locked asks: nothing.
struct Locked(String);

impl Locked {
    fn refused(&self) -> Result<serde_json::Value, String> {
        Err(format!(
            "refused: the custody of `{0}` is locked, so this page asks nobody until `gridctl custody unlock {0}`; nothing was sent",
            self.0
        ))
    }
}

impl Inspector for Locked {
    fn inspect(&self, _: &Owner, _: Part, _: &str) -> Result<serde_json::Value, String> {
        self.refused()
    }
    fn barrier(&self, _: &str) -> Result<serde_json::Value, String> {
        self.refused()
    }
    fn surrender(&self, _: &Owner, _: &str, _: u64) -> Result<serde_json::Value, String> {
        self.refused()
    }
}

/// The control plane of a host whose custody is locked (docs/control-plane.md, "After
/// a restart"): what it kept before its restart, each record verified with the
/// public keys of its custody manifest, asking nobody. The accept loops' tasks: the
/// caller stops them once the custody is unlocked, before the whole page is served.
pub fn serve_locked(
    host: &crate::host::Host,
    dir: &Path,
    runtime: &tokio::runtime::Handle,
) -> Result<Vec<tokio::task::JoinHandle<()>>, String> {
    let config = host.config();
    let listen = addresses(dir, config)?;
    let Some(control) = &config.control else {
        return Ok(Vec::new());
    };
    let name = host.name();
    let kept = crate::control::kept::Kept::new(dir, name, host.custody().clone());
    let plane = ControlPlane::new(
        name,
        owners(name, control),
        Vec::new(),
        Arc::new(Locked(name.to_owned())),
        &listen,
        Some(kept),
        true,
    )?;
    listen
        .into_iter()
        .map(|line| server::serve(plane.clone(), line, runtime))
        .collect()
}
