//! The `exports` profile's wire types (an API boundary: fields are only ever added):
//! the two signed documents — a [`Disclosure`] by the original publisher of `from`, a
//! [`Mapping`] by the gateway per value crossed — the definitions reconcile sends, the
//! control calls of `gridctl inspect export`, and their views.

use serde::{Deserialize, Serialize};

use crate::custody::{Manifest, Signed};

/// What a disclosure discloses, as reconcile asks the publisher of `from` to sign it
/// (`Request::Disclose`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisclosureTerms {
    /// The export's name.
    pub export: String,
    /// The host allowed to carry the values.
    pub gateway: String,
    /// The route whose values are disclosed, and its membership.
    pub from: String,
    pub from_membership: String,
    /// The route they may be published on, and its membership.
    pub to: String,
    pub to_membership: String,
    /// The model cell whose values `from` carries (`MODEL.CELL`), when a model of the
    /// publisher outputs it; `None` for values published by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<String>,
    /// RFC 3339: no value is forwarded after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
}

impl DisclosureTerms {
    /// The terms as the signed text lists them.
    fn text(&self) -> String {
        format!(
            "export {}\ngateway {}\nfrom {} in {}\nto {} in {}\ncell {}\nexpires {}\n",
            self.export,
            self.gateway,
            self.from,
            self.from_membership,
            self.to,
            self.to_membership,
            self.cell.as_deref().unwrap_or("-"),
            self.expires.as_deref().unwrap_or("never"),
        )
    }
}

/// The disclosure right: the original publisher of `from` (`issuer`) signed that the
/// gateway may pass the values of `from` from position `first` on onto `to`. Values
/// published before it signed are not disclosed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disclosure {
    pub terms: DisclosureTerms,
    pub issuer: String,
    /// The first position of `from` disclosed (the issuer's next position when it
    /// signed).
    pub first: u64,
    /// The issuer's signing-key generation and its hex signature.
    pub generation: u32,
    pub signature: String,
}

impl Signed for Disclosure {
    fn signed_bytes(&self) -> Vec<u8> {
        format!(
            "grid-export-disclosure/1\nissuer {}\n{}first {}\n",
            self.issuer,
            self.terms.text(),
            self.first
        )
        .into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

/// One value crossed, signed by the gateway when it journaled it: position
/// `from_position` of `from` (which the gateway's A-side receipt covers) became
/// position `to_position` of `to` (which B's destinations' receipts cover), published
/// under the publication right held at `epoch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mapping {
    pub export: String,
    pub gateway: String,
    pub from: String,
    pub from_position: u64,
    pub to: String,
    pub to_position: u64,
    pub value: f64,
    /// The epoch of `route:TO` the publication was stamped with.
    pub epoch: u64,
    pub generation: u32,
    pub signature: String,
}

impl Mapping {
    fn text(&self) -> String {
        format!(
            "grid-export-mapping/1\nexport {}\ngateway {}\nfrom {} {}\nto {} {}\nvalue {:016x}\nepoch {}\n",
            self.export,
            self.gateway,
            self.from,
            self.from_position,
            self.to,
            self.to_position,
            self.value.to_bits(),
            self.epoch
        )
    }
}

impl Signed for Mapping {
    fn signed_bytes(&self) -> Vec<u8> {
        self.text().into_bytes()
    }

    fn signature(&self) -> (u32, &str) {
        (self.generation, &self.signature)
    }
}

/// An export as reconcile installs it at its gateway (`Request::InstallExport`): the
/// signed disclosure, and the issuer's public keys it verifies with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportInstall {
    pub disclosure: Disclosure,
    pub issuer_keys: Manifest,
}

impl ExportInstall {
    pub fn name(&self) -> &str {
        &self.disclosure.terms.export
    }
}

/// A control call of the `exports` profile (`Call::Export`). Changes nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "exports", rename_all = "kebab-case")]
pub enum ExportCall {
    /// At the issuer: the disclosure it signed for `export` (not withdrawn).
    Disclosure { export: String },
    /// At the gateway: the export, its state and its mappings from `from_position`
    /// `after` on (at most `EXPORT_MAPPINGS_SHOWN_MAX`).
    Show {
        export: String,
        #[serde(default)]
        after: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "exports", rename_all = "kebab-case")]
pub enum ExportReply {
    Disclosure { disclosure: Box<Disclosure> },
    Export { view: Box<ExportView> },
    Refused { reason: String },
}

/// An export as its gateway holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportView {
    pub name: String,
    pub gateway: String,
    pub disclosure: Disclosure,
    pub issuer_keys: Manifest,
    /// `forwarding`, `refusing` (a right is missing: `refusal` says which) or
    /// `retired`.
    pub state: String,
    /// Why the newest values wait instead of crossing (`no disclosure right …`, `no
    /// publication right …`); the retirement's reason once retired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The last position of `from` crossed (0: none yet).
    pub forwarded: u64,
    /// Values crossed.
    pub crossed: u64,
    /// The lowest `from` position whose mapping the gateway still holds: older ones
    /// were purged past `EXPORT_MAPPINGS_HOT_MAX`, once receipted on `to`.
    #[serde(default)]
    pub held_from: u64,
    /// The signed mappings asked for, oldest first.
    pub mappings: Vec<Mapping>,
    /// Where to ask `after` next when the list was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// What `observe` reports of a host's exports: at an issuer, each disclosure it signed;
/// at a gateway, each export it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportState {
    pub name: String,
    /// `issuer` or `gateway`.
    pub role: String,
    /// Issuer: withdrawn; gateway: retired.
    pub retired: bool,
    /// The terms disclosed (issuer) or installed (gateway).
    pub terms: DisclosureTerms,
}
