//! The archive wallet of one host (profile `archive-wallet`): its journal, the
//! observation it can make from where it stands, its archive, and the foreign
//! archives opened here (observed only).
//!
//! One lock (the journal's) orders every write and every snapshot: an archive is taken
//! under it, so its proposals, history and position are one journal state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::WalletError;
use super::api::{Event, WalletCall, WalletReply};
use super::archive::{self, Body};
use super::journal::{Journal, wallet_dir};
use super::view::{Observed, OwnerAnswer, WalletView, assemble};
use crate::custody::Custody;
use crate::ledger::service::Ledgers;
use crate::limits::{WALLET_ARCHIVE_BYTES_MAX, WALLET_FOREIGN_ARCHIVES_MAX};
use crate::processes::api::GrantView;
use crate::processes::service::Processes;

const FOREIGN_DIR: &str = "foreign";

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What another host holds for this wallet, as its control API (`POST /control`
/// observe) answered.
#[derive(Debug, Clone, Default)]
pub struct PeerHoldings {
    pub grants: Vec<GrantView>,
    pub ledgers: Vec<crate::ledger::api::LedgerDefinition>,
}

/// A surrender's answer from the issuer.
#[derive(Debug, Clone)]
pub struct SurrenderAnswer {
    pub succeeded: bool,
    pub detail: String,
    /// The issuer's signature on its answer verifies with the keys given.
    pub verified: bool,
}

/// The wallet's way to the other owners, over this host's mutual-TLS peer clients:
/// the composition root implements it (the wallet room speaks no control protocol).
/// Each call blocks (never on a runtime thread) and sends once.
pub trait Owners: Send + Sync {
    /// What `name` (at `address`, certified in `membership`) holds: its grants and
    /// ledger definitions.
    fn observe(&self, membership: &str, name: &str, address: &str) -> Result<PeerHoldings, String>;

    /// The balances of this wallet's account `account` of `ledger` at its keeper `name`
    /// (the keeper answers only the account's owner).
    fn account(
        &self,
        membership: &str,
        name: &str,
        address: &str,
        ledger: &str,
        account: &str,
    ) -> Result<crate::ledger::api::LedgerView, String>;

    /// Surrenders grant `grant` at its issuer `name`, as its recipient (the issuer
    /// checks the certified caller is the grant's and signs a receipt; surrendering
    /// again changes nothing). `op` is the wallet's id of the surrender.
    fn surrender(
        &self,
        membership: &str,
        name: &str,
        address: &str,
        op: &str,
        grant: &str,
        issuer_keys: &crate::custody::Manifest,
    ) -> Result<SurrenderAnswer, String>;
}

pub struct Wallet {
    pub(super) host: String,
    pub(super) dir: PathBuf,
    pub(super) custody: Custody,
    pub(super) processes: Arc<Processes>,
    pub(super) ledgers: Option<Ledgers>,
    pub(super) owners: Box<dyn Owners>,
    journal: Mutex<Journal>,
    /// Foreign archives opened here, by their host: observed only.
    foreign: Mutex<BTreeMap<String, (Body, String)>>,
}

impl Wallet {
    /// Opens the wallet's journal and the foreign archives held (each verified again).
    pub fn open(
        dir: &Path,
        host: &str,
        custody: Custody,
        processes: Arc<Processes>,
        ledgers: Option<Ledgers>,
        owners: Box<dyn Owners>,
    ) -> Result<Arc<Wallet>, WalletError> {
        let journal = Journal::open(dir)?;
        let foreign_dir = wallet_dir(dir)?.join(FOREIGN_DIR);
        crate::store::ensure_private_dir(&foreign_dir)?;
        let mut foreign = BTreeMap::new();
        for entry in std::fs::read_dir(&foreign_dir).map_err(|source| WalletError::Io {
            path: foreign_dir.clone(),
            source,
        })? {
            let path = entry
                .map_err(|source| WalletError::Io {
                    path: foreign_dir.clone(),
                    source,
                })?
                .path();
            let text = std::fs::read_to_string(&path).map_err(|source| WalletError::Io {
                path: path.clone(),
                source,
            })?;
            let body = archive::verify(&text, None).map_err(|e| WalletError::Foreign {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            foreign.insert(body.metadata.host.clone(), (body, archive::digest(&text)));
        }
        Ok(Arc::new(Wallet {
            host: host.to_owned(),
            dir: dir.to_owned(),
            custody,
            processes,
            ledgers,
            owners,
            journal: Mutex::new(journal),
            foreign: Mutex::new(foreign),
        }))
    }

    pub(super) fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Journals this wallet's surrender of `grant` at `issuer` (`detail`: the issuer's
    /// signed receipt's totals) once, under `wallet-surrender:HOST:GRANT` — whichever
    /// asked it (`wallet.surrender`, the control plane): fsynced before it returns.
    pub fn record_surrender(
        &self,
        grant: &str,
        issuer: &str,
        detail: &str,
    ) -> Result<(), WalletError> {
        let op_id = format!("wallet-surrender:{}:{grant}", self.host);
        let mut journal = self.journal();
        if !journal.holds(|e| matches!(e, Event::Surrendered { op, .. } if *op == op_id)) {
            journal.append(
                Event::Surrendered {
                    grant: grant.to_owned(),
                    issuer: issuer.to_owned(),
                    op: op_id,
                    detail: detail.to_owned(),
                },
                now_ms(),
            )?;
        }
        Ok(())
    }

    /// A foreign archive opened here.
    pub(super) fn foreign(&self, host: &str) -> Option<(Body, String)> {
        self.foreign
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(host)
            .cloned()
    }

    /// The wallet's view from where this host stands: its own ledgers (in process),
    /// the grants of every owner it has called and the balances of its accounts there
    /// (their control API over mutual TLS: a keeper answers an account's owner), its
    /// open waits. An account whose keeper does not answer is listed unobserved, never
    /// guessed.
    pub fn observe(&self) -> WalletView {
        let mut owners = Vec::new();
        if let Some(ledgers) = &self.ledgers {
            let mut views = Vec::new();
            let mut failed = Vec::new();
            for definition in ledgers.definitions() {
                match ledgers.inspect(&definition.name, None) {
                    Ok(view) => views.push(view),
                    Err(e) => failed.push(format!("{}: {e}", definition.name)),
                }
            }
            owners.push(Observed {
                owner: self.host.clone(),
                answer: OwnerAnswer::Answered {
                    ledgers: views,
                    grants: Vec::new(),
                    manifest: Some(self.custody.manifest()),
                },
            });
            if !failed.is_empty() {
                owners.push(Observed {
                    owner: self.host.clone(),
                    answer: OwnerAnswer::Unobserved {
                        holds: vec!["ledgers".to_owned()],
                        reason: failed.join("; "),
                    },
                });
            }
        }
        for (peer, membership) in self.processes.called_peers() {
            let answer = match self.owners.observe(&membership, &peer.name, &peer.address) {
                Ok(observation) => {
                    let mut views: Vec<crate::ledger::api::LedgerView> = Vec::new();
                    let mut missing = Vec::new();
                    for l in &observation.ledgers {
                        for a in l
                            .accounts
                            .iter()
                            .filter(|a| a.owner.as_deref() == Some(self.host.as_str()))
                        {
                            match self.owners.account(
                                &membership,
                                &peer.name,
                                &peer.address,
                                &l.name,
                                &a.name,
                            ) {
                                Ok(view) => {
                                    match views.iter_mut().find(|v| v.ledger == view.ledger) {
                                        Some(held) => held.accounts.extend(view.accounts),
                                        None => views.push(view),
                                    }
                                }
                                Err(reason) => {
                                    missing.push(format!("{}:{} ({reason})", l.name, a.name))
                                }
                            }
                        }
                    }
                    if !missing.is_empty() {
                        owners.push(Observed {
                            owner: peer.name.clone(),
                            answer: OwnerAnswer::Unobserved {
                                holds: vec!["ledgers".to_owned()],
                                reason: format!(
                                    "the balances of {} were not answered; nothing of them is shown",
                                    missing.join(", ")
                                ),
                            },
                        });
                    }
                    OwnerAnswer::Answered {
                        ledgers: views,
                        grants: observation.grants,
                        manifest: Some(peer.keys.clone()),
                    }
                }
                Err(reason) => OwnerAnswer::Unobserved {
                    holds: vec!["grants".to_owned()],
                    reason,
                },
            };
            owners.push(Observed {
                owner: peer.name,
                answer,
            });
        }
        assemble(&self.host, &owners, Ok(self.processes.open_wait_views()))
    }

    /// A coherent archive: the journal's proposals and history at one position (taken
    /// under its lock), the observation, the metadata and the public manifest, signed.
    pub fn archive(&self) -> Result<String, WalletError> {
        // Observed first (it asks peers): the journal is then read and sealed under
        // its lock, so no entry is written between the history and its position.
        let observation = self.observe();
        let journal = self.journal();
        let body = archive::body(
            &self.host,
            now_ms(),
            self.custody.manifest(),
            journal.entries().to_vec(),
            observation,
        );
        let text = archive::seal(&body, &self.custody);
        if text.len() as u64 > WALLET_ARCHIVE_BYTES_MAX {
            return Err(WalletError::Limit(format!(
                "the archive is {} bytes, above WALLET_ARCHIVE_BYTES_MAX ({WALLET_ARCHIVE_BYTES_MAX})",
                text.len()
            )));
        }
        Ok(text)
    }

    /// Opens a foreign archive (verified first): stored (0600, fsynced) and journaled,
    /// observed only. Its manifest grants nothing here.
    pub fn open_foreign(&self, text: &str) -> Result<WalletReply, WalletError> {
        if text.len() as u64 > WALLET_ARCHIVE_BYTES_MAX {
            return Err(WalletError::Limit(format!(
                "the archive is above WALLET_ARCHIVE_BYTES_MAX ({WALLET_ARCHIVE_BYTES_MAX} bytes)"
            )));
        }
        let body = archive::verify(text, None).map_err(|e| WalletError::Refused(e.to_string()))?;
        let from = body.metadata.host.clone();
        let digest = archive::digest(text);
        let mut journal = self.journal();
        let mut foreign = self.foreign.lock().unwrap_or_else(|p| p.into_inner());
        if foreign.get(&from).is_some_and(|(_, d)| *d == digest) {
            return Ok(WalletReply::Opened {
                host: self.host.clone(),
                from,
                created_ms: body.metadata.created_ms,
                already: true,
            });
        }
        if !foreign.contains_key(&from) && foreign.len() >= WALLET_FOREIGN_ARCHIVES_MAX {
            return Err(WalletError::Limit(format!(
                "this wallet holds WALLET_FOREIGN_ARCHIVES_MAX ({WALLET_FOREIGN_ARCHIVES_MAX}) foreign archives"
            )));
        }
        let path = wallet_dir(&self.dir)?
            .join(FOREIGN_DIR)
            .join(format!("{}.archive", hex::encode(from.as_bytes())));
        crate::custody::write_private(&path, text.as_bytes())?;
        std::fs::File::open(path.parent().expect("in the foreign directory"))
            .and_then(|d| d.sync_all())
            .map_err(|source| WalletError::Io {
                path: path.clone(),
                source,
            })?;
        journal.append(
            Event::Opened {
                from: from.clone(),
                created_ms: body.metadata.created_ms,
                digest: digest.clone(),
            },
            now_ms(),
        )?;
        let created_ms = body.metadata.created_ms;
        foreign.insert(from.clone(), (body, digest));
        Ok(WalletReply::Opened {
            host: self.host.clone(),
            from,
            created_ms,
            already: false,
        })
    }

    /// Handles a control call (blocking; never on a runtime thread).
    pub fn handle_local(&self, call: WalletCall) -> WalletReply {
        let refused = |e: WalletError| WalletReply::Refused {
            reason: e.to_string(),
        };
        match call {
            WalletCall::Waits => WalletReply::Waits {
                host: self.host.clone(),
                waits: self.processes.open_wait_views(),
            },
            WalletCall::Archive => match self.archive() {
                Ok(archive) => WalletReply::Archived { archive },
                Err(e) => refused(e),
            },
            WalletCall::Open { archive } => self.open_foreign(&archive).unwrap_or_else(refused),
            WalletCall::Interface => WalletReply::Interface {
                interface: super::view::INTERFACE.to_owned(),
                processes: super::ops::Op::ALL
                    .iter()
                    .map(|op| op.process().to_owned())
                    .collect(),
            },
        }
    }
}
