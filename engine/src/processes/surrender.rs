//! A recipient's surrender of its grant (issue 18 §2: "recipient surrender and issuer
//! settlement are separate original-owner steps"): the CALLER gives back the unused
//! units of a grant issued to it, through the grant's original owner, the issuer.
//!
//! `POST /process/M/surrender {grant}` over mutual TLS: the issuer accepts it only from
//! the participant its certificate names, and only for a grant issued to that
//! participant. Under the grants' lock it surrenders every available unit and retires
//! the grant (units reserved or unknown stay held until their runs close, as for the
//! issuer's own `- grant`), writes it fsynced, and answers with a receipt it signs:
//! `grid-grant-surrender/1\nissuer I\ncaller C\ngrant G\nsurrendered S\nreserved R\nunknown U\n`
//! — the grant's surrendered total and what it still holds. Surrendering again changes
//! nothing and answers the receipt of the grant as it stands. Settlement stays the
//! issuer's own step (`settle-grant`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::api::{GrantView, ServiceReply};
use super::grants;
use super::service::Processes;
use crate::custody::Manifest;
use crate::store::fatal;

/// `POST /process/M/surrender`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurrenderQuery {
    pub grant: String,
}

/// The issuer's signed receipt of a recipient's surrender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurrenderReceipt {
    pub issuer: String,
    pub caller: String,
    pub grant: String,
    /// The grant's surrendered units after it (its total, not only this call's).
    pub surrendered: u64,
    /// Units still held by runs, surrendered when they close failed.
    pub reserved: u64,
    pub unknown: u64,
    pub generation: u32,
    pub signature: String,
}

impl SurrenderReceipt {
    pub fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-grant-surrender/1\nissuer {}\ncaller {}\ngrant {}\nsurrendered {}\nreserved {}\nunknown {}\n",
            self.issuer, self.caller, self.grant, self.surrendered, self.reserved, self.unknown
        )
        .into_bytes()
    }

    /// Verifies the issuer's signature with its custody manifest.
    pub fn verify(&self, issuer_keys: &Manifest) -> bool {
        crate::custody::verify_hex_signature(
            issuer_keys,
            self.generation,
            &self.signed_bytes(),
            &self.signature,
        )
    }
}

impl Processes {
    /// As the issuer: `caller` (certified) surrenders its grant `query.grant`.
    pub async fn serve_surrender(
        self: &Arc<Self>,
        caller: &str,
        query: &SurrenderQuery,
    ) -> ServiceReply {
        let (grant, changed) = {
            let mut state = self.lock();
            let found = state
                .grants
                .get_mut(&query.grant)
                .filter(|g| !super::allocations::is_allocation(&g.name));
            let Some(grant) = found else {
                return ServiceReply::Refused {
                    reason: format!("host `{}` holds no grant `{}`", self.host, query.grant),
                };
            };
            if grant.caller != caller {
                return ServiceReply::Refused {
                    reason: format!(
                        "grant `{}` was issued to `{}`, not `{caller}`: only its recipient surrenders it",
                        grant.name, grant.caller
                    ),
                };
            }
            let changed = !grant.retired;
            if changed {
                grants::surrender(grant);
                let bytes = serde_json::to_vec(&*grant).expect("grants serialize");
                self.ks
                    .grants
                    .insert(grant.name.as_str(), bytes)
                    .unwrap_or_else(|e| fatal(&self.dir, "journaling a surrender", e));
            }
            (grant.clone(), changed)
        };
        if changed {
            // Durable (group commit) before the receipt says so.
            self.sync("syncing a surrender").await;
        }
        ServiceReply::Surrendered {
            receipt: self.surrender_receipt(&grant),
            grant,
        }
    }

    /// As the recipient: surrender the grant `grant` that `issuer` issued to this
    /// host, through `issuer` itself; the receipt checked (about this grant and this
    /// recipient, signed by the issuer). `Err` when it was not answered or not
    /// verified: whether the issuer surrendered it is then unknown to this host (ask
    /// again: surrendering again changes nothing).
    pub async fn surrender_grant(
        &self,
        issuer: &super::api::Peer,
        membership: &str,
        grant: &str,
    ) -> Result<(GrantView, SurrenderReceipt), String> {
        let client = self
            .client(membership, &issuer.name, &issuer.address)
            .map_err(|e| format!("cannot reach `{}`: {e}", issuer.name))?;
        let reply: ServiceReply = client
            .post(
                &format!("/process/{membership}/surrender"),
                &SurrenderQuery {
                    grant: grant.to_owned(),
                },
                crate::limits::SURRENDER_CALL_TIMEOUT,
            )
            .await
            .map_err(|e| format!("`{}` did not answer the surrender: {e}", issuer.name))?;
        match reply {
            ServiceReply::Surrendered {
                grant: view,
                receipt,
            } => {
                if receipt.issuer != issuer.name
                    || receipt.caller != self.host
                    || receipt.grant != grant
                    || view.name != grant
                    || receipt.surrendered != view.surrendered
                    || !receipt.verify(&self.custody.peer_keys(&issuer.name, &issuer.keys))
                {
                    return Err(format!(
                        "`{}`'s surrender receipt is not about grant `{grant}` of `{}`, or does not verify",
                        issuer.name, self.host
                    ));
                }
                Ok((view, receipt))
            }
            ServiceReply::Refused { reason } => Err(format!("`{}` refused: {reason}", issuer.name)),
            other => Err(format!("`{}` answered {other:?}", issuer.name)),
        }
    }

    fn surrender_receipt(&self, grant: &GrantView) -> SurrenderReceipt {
        let mut receipt = SurrenderReceipt {
            issuer: self.host.clone(),
            caller: grant.caller.clone(),
            grant: grant.name.clone(),
            surrendered: grant.surrendered,
            reserved: grant.reserved,
            unknown: grant.unknown,
            generation: 0,
            signature: String::new(),
        };
        (receipt.generation, receipt.signature) = self.custody.sign_hex(&receipt.signed_bytes());
        receipt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_verifies_with_the_issuers_manifest_and_any_change_breaks_it() {
        let dir = std::env::temp_dir().join(format!("grid-surrender-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let manifest = crate::custody::create(&dir).expect("custody");
        let custody = crate::custody::verify(&dir).expect("custody opens");
        let mut receipt = SurrenderReceipt {
            issuer: "site".to_owned(),
            caller: "hq".to_owned(),
            grant: "hq-on-site".to_owned(),
            surrendered: 97,
            reserved: 0,
            unknown: 1,
            generation: 0,
            signature: String::new(),
        };
        (receipt.generation, receipt.signature) = custody.sign_hex(&receipt.signed_bytes());
        assert!(receipt.verify(&manifest));
        for change in [
            |r: &mut SurrenderReceipt| r.surrendered += 1,
            |r: &mut SurrenderReceipt| r.unknown = 0,
            |r: &mut SurrenderReceipt| r.caller = "lean".to_owned(),
        ] {
            let mut changed = receipt.clone();
            change(&mut changed);
            assert!(!changed.verify(&manifest));
        }
        std::fs::remove_dir_all(&dir).expect("remove");
    }
}
