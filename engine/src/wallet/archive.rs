//! The archive of a wallet: a coherent snapshot, signed by its host, that verifies
//! offline with the public keys inside it — pure, no IO.
//!
//! The file is two lines: the **body** (one line of JSON: format, metadata, the host's
//! public custody manifest, proposals, history, observation) and the **signature**
//! (one line of JSON: host, generation, hex Ed25519 signature over the body line's
//! exact bytes). So changing any byte of the body fails the signature, and changing
//! any byte of the signature line fails it too (or its parse). Verification needs no
//! secret: a host's private signing key may be absent (cold inspection).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::api::{Entry, Proposal};
use super::view::{INTERFACE, WalletView};
use crate::custody::{Custody, Manifest};

/// The archive format's name and version.
pub const FORMAT: &str = "grid-wallet-archive/1";

/// Who made the archive, when, at which journal position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub host: String,
    pub created_ms: u64,
    pub interface: String,
    /// The source installation: [`installation_id`] of the host's custody.
    pub installation: String,
    /// The wallet journal's position the snapshot was taken at (under its lock).
    pub position: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Body {
    pub format: String,
    pub metadata: Metadata,
    /// The host's PUBLIC custody manifest (no secret).
    pub manifest: Manifest,
    pub proposals: Vec<Proposal>,
    pub history: Vec<Entry>,
    pub observation: WalletView,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    pub host: String,
    pub generation: u32,
    pub signature: String,
}

/// What failed when an archive does not verify: each names the part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("the archive is not two lines (a body and its signature)")]
    Layout,
    #[error("the archive's body does not decode: {0}")]
    Body(String),
    #[error("the archive's format is `{0}`, not `{FORMAT}`")]
    Format(String),
    #[error("the archive's signature line does not decode: {0}")]
    SignatureLine(String),
    #[error(
        "the signature over the archive's body does not verify with signing key generation {generation} of the manifest inside it"
    )]
    Signature { generation: u32 },
    #[error("the signature names host `{signer}`, the metadata `{host}`")]
    Signer { signer: String, host: String },
    #[error(
        "proposal `{0}`: its signature does not verify with the manifest, or it names another host"
    )]
    Proposal(String),
    #[error("the observation is of `{observed}`, not of the archive's host `{host}`")]
    Observation { observed: String, host: String },
    #[error("the history's positions are not 1, 2, 3, … up to the metadata's position {0}")]
    History(u64),
    #[error(
        "the manifest inside the archive is not the one given to verify against (signing {inside}, given {given})"
    )]
    Manifest { inside: String, given: String },
}

/// The id of an installation: the SHA-256 (first 16 bytes, hex) of its host name and
/// its first signing key (generation 1's, retired or current) — unchanged by rotation.
pub fn installation_id(host: &str, manifest: &Manifest) -> String {
    let first = if manifest.generation == 1 {
        manifest.signing.clone()
    } else {
        manifest
            .retired
            .iter()
            .find(|r| r.generation == 1)
            .map_or(manifest.signing.clone(), |r| r.signing.clone())
    };
    let digest = Sha256::digest(format!(
        "grid-installation/1\nhost {host}\nsigning {first}\n"
    ));
    hex::encode(&digest[..16])
}

/// A public custody manifest (`keys/custody.toml`'s text), to verify an archive
/// against.
pub fn manifest_from_toml(text: &str) -> Result<Manifest, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

/// The SHA-256 (hex) of an archive's whole text.
pub fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The archive file's text: `body` signed by `custody`.
pub fn seal(body: &Body, custody: &Custody) -> String {
    let line = serde_json::to_string(body).expect("archives serialize");
    let (generation, signature) = custody.sign_hex(line.as_bytes());
    let signature = Signature {
        host: body.metadata.host.clone(),
        generation,
        signature,
    };
    format!(
        "{line}\n{}\n",
        serde_json::to_string(&signature).expect("signatures serialize")
    )
}

/// Verifies an archive's text offline: its signature with the manifest inside it (and,
/// when `given`, that manifest is the one given), every proposal's signature, and
/// that its parts are of its host.
pub fn verify(text: &str, given: Option<&Manifest>) -> Result<Body, ArchiveError> {
    let mut lines = text.split_inclusive('\n');
    let (Some(body_line), Some(signature_line), None) = (lines.next(), lines.next(), lines.next())
    else {
        return Err(ArchiveError::Layout);
    };
    let (Some(body_line), Some(signature_line)) = (
        body_line.strip_suffix('\n'),
        signature_line.strip_suffix('\n'),
    ) else {
        return Err(ArchiveError::Layout);
    };
    let body: Body =
        serde_json::from_str(body_line).map_err(|e| ArchiveError::Body(e.to_string()))?;
    if body.format != FORMAT {
        return Err(ArchiveError::Format(body.format));
    }
    let signature: Signature = serde_json::from_str(signature_line)
        .map_err(|e| ArchiveError::SignatureLine(e.to_string()))?;
    if !crate::custody::verify_hex_signature(
        &body.manifest,
        signature.generation,
        body_line.as_bytes(),
        &signature.signature,
    ) {
        return Err(ArchiveError::Signature {
            generation: signature.generation,
        });
    }
    if signature.host != body.metadata.host {
        return Err(ArchiveError::Signer {
            signer: signature.host,
            host: body.metadata.host,
        });
    }
    if let Some(given) = given
        && given.signing != body.manifest.signing
    {
        return Err(ArchiveError::Manifest {
            inside: body.manifest.signing.clone(),
            given: given.signing.clone(),
        });
    }
    for proposal in &body.proposals {
        if proposal.host != body.metadata.host || !proposal.verify(&body.manifest) {
            return Err(ArchiveError::Proposal(proposal.id.clone()));
        }
    }
    if body.observation.host != body.metadata.host {
        return Err(ArchiveError::Observation {
            observed: body.observation.host.clone(),
            host: body.metadata.host.clone(),
        });
    }
    let in_order = body
        .history
        .iter()
        .enumerate()
        .all(|(i, e)| e.position == i as u64 + 1);
    if !in_order || body.history.last().map_or(0, |e| e.position) != body.metadata.position {
        return Err(ArchiveError::History(body.metadata.position));
    }
    Ok(body)
}

/// A body of `host` at `position` (the interface and format filled in).
pub fn body(
    host: &str,
    created_ms: u64,
    manifest: Manifest,
    history: Vec<Entry>,
    observation: WalletView,
) -> Body {
    let proposals = history
        .iter()
        .filter_map(|e| match &e.event {
            super::api::Event::Proposed { proposal } => Some(proposal.clone()),
            _ => None,
        })
        .collect();
    Body {
        format: FORMAT.to_owned(),
        metadata: Metadata {
            host: host.to_owned(),
            created_ms,
            interface: INTERFACE.to_owned(),
            installation: installation_id(host, &manifest),
            position: history.last().map_or(0, |e| e.position),
        },
        manifest,
        proposals,
        history,
        observation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processes::api::Peer;
    use crate::wallet::api::Event;

    fn custody(name: &str) -> Custody {
        let dir = std::env::temp_dir().join(format!("grid-archive-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        crate::custody::create(&dir).unwrap();
        let custody = crate::custody::verify(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        custody
    }

    fn sample(custody: &Custody) -> Body {
        let mut proposal = Proposal {
            id: "p1".to_owned(),
            host: "hq".to_owned(),
            ledger: "plant".to_owned(),
            keeper: Peer {
                name: "site".to_owned(),
                address: "127.0.0.1:1".to_owned(),
                keys: custody.manifest(),
            },
            membership: "ops".to_owned(),
            debit: "a".to_owned(),
            credit: "b".to_owned(),
            amount: u128::MAX,
            currency: "EUR".to_owned(),
            pending: false,
            created_ms: 1,
            generation: 0,
            signature: String::new(),
        };
        (proposal.generation, proposal.signature) = custody.sign_hex(&proposal.signed_bytes());
        let history = vec![Entry {
            position: 1,
            at_ms: 1,
            event: Event::Proposed { proposal },
        }];
        let observation = super::super::view::assemble("hq", &[], Ok(Vec::new()));
        body("hq", 2, custody.manifest(), history, observation)
    }

    #[test]
    fn an_archive_verifies_offline_with_the_keys_inside_it() {
        let custody = custody("ok");
        let body = sample(&custody);
        let text = seal(&body, &custody);
        assert_eq!(verify(&text, None).unwrap(), body);
        assert_eq!(verify(&text, Some(&custody.manifest())).unwrap(), body);
        assert_eq!(body.proposals.len(), 1);
        assert_eq!(body.metadata.position, 1);
        assert_eq!(body.metadata.interface, INTERFACE);
        // Another host's manifest given to compare with: refused, naming it.
        let other = self::custody("other");
        assert!(matches!(
            verify(&text, Some(&other.manifest())),
            Err(ArchiveError::Manifest { .. })
        ));
    }

    #[test]
    fn tampering_any_byte_fails_verification() {
        let custody = custody("tamper");
        let text = seal(&sample(&custody), &custody);
        let bytes = text.as_bytes();
        // Every byte position, changed to another printable byte: never verifies.
        for at in 0..bytes.len() {
            let mut changed = bytes.to_vec();
            changed[at] = if changed[at] == b'0' { b'1' } else { b'0' };
            let Ok(changed) = String::from_utf8(changed) else {
                continue;
            };
            assert!(
                verify(&changed, None).is_err(),
                "byte {at} changed and it verified"
            );
        }
        // A body signed by another key, with its own manifest swapped in, fails too:
        // the signature is checked against the manifest inside the body it signs.
        let other = self::custody("tamper-other");
        let mut forged = sample(&custody);
        forged.manifest = other.manifest();
        let forged = seal(&forged, &other);
        assert!(matches!(
            verify(&forged, None),
            Err(ArchiveError::Proposal(_))
        ));
        assert_eq!(verify("one line only\n", None), Err(ArchiveError::Layout));
    }
}
