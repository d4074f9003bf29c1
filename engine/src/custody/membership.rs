//! Membership certificate authorities, enrollment and revocation (SPEC C2).
//!
//! Each membership has its own authority in the operator's custody:
//! ```text
//! <state>/memberships/NAME/   0700
//!   ca.key                    0600  the authority's Ed25519 key (PKCS#8 PEM)
//!   ca.pem                    0600  its self-signed certificate
//!   authority.toml            0600  serials issued, participants enrolled and revoked
//!   crl.pem                   0600  the current revocation list (after a revocation)
//! ```
//! Enrolling a host issues a certificate for the host's *public* TLS key (read from its
//! custody manifest: the operator never reads a host's secret) naming the participant
//! and the membership, into the host's installation:
//! ```text
//! DIR/memberships/NAME/       0700
//!   participant.pem           0600  the participant certificate
//!   ca.pem                    0600  the membership's authority
//!   enrollment.toml           0600  membership, participant, serial, validity, CA fingerprint
//!   crl.pem                   0600  the revocations every member loads
//! ```

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose,
    PublicKeyData, RevocationReason, RevokedCertParams, SanType, SerialNumber, SignatureAlgorithm,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};

use super::{CustodyError, unhex, write_private};

/// How long a membership authority's certificate is valid.
pub const AUTHORITY_VALIDITY_DAYS: i64 = 3_650;
/// How long a revocation list is current before it must be reissued.
pub const REVOCATION_LIST_VALIDITY_DAYS: i64 = 30;

pub const AUTHORITY_FILE: &str = "authority.toml";
pub const ENROLLMENT_FILE: &str = "enrollment.toml";
pub const CRL_FILE: &str = "crl.pem";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorityRecord {
    pub membership: String,
    /// `sha256:<hex>` of the authority certificate (DER).
    pub fingerprint: String,
    pub next_serial: u64,
    /// The revocation list's number, increasing with each reissue.
    #[serde(default)]
    pub crl_number: u64,
    #[serde(default)]
    pub enrolled: Vec<Enrolled>,
    #[serde(default)]
    pub revoked: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enrolled {
    pub participant: String,
    pub serial: u64,
}

/// What a host's installation holds for one membership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enrollment {
    pub membership: String,
    pub participant: String,
    pub serial: u64,
    /// `sha256:<hex>` of the authority certificate that issued it.
    pub authority: String,
    /// `ed25519:<hex>` of the certified TLS key.
    pub tls: String,
    /// RFC 3339.
    pub not_after: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CustodyError + '_ {
    move |source| CustodyError::Io {
        path: path.to_owned(),
        source,
    }
}

fn malformed(path: &Path, reason: impl std::fmt::Display) -> CustodyError {
    CustodyError::Malformed {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

fn private_dir(dir: &Path) -> Result<(), CustodyError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(io(dir))
}

fn fingerprint(der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(der)))
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .expect("times format")
}

/// The authority's distinguished parameters; regenerated identically on every load,
/// so the issuer name and key identifiers of what it signs never change.
fn authority_params(membership: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, format!("Grid membership {membership}"));
    name.push(DnType::OrganizationalUnitName, membership.to_owned());
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.key_identifier_method = KeyIdMethod::Sha256;
    params
}

pub fn authority_dir(state: &Path, membership: &str) -> PathBuf {
    state.join("memberships").join(membership)
}

pub fn read_authority(dir: &Path) -> Result<AuthorityRecord, CustodyError> {
    let path = dir.join(AUTHORITY_FILE);
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    toml::from_str(&text).map_err(|e| malformed(&path, e))
}

fn write_authority(dir: &Path, record: &AuthorityRecord) -> Result<(), CustodyError> {
    write_private(
        &dir.join(AUTHORITY_FILE),
        toml::to_string(record)
            .expect("records serialize")
            .as_bytes(),
    )
}

/// Creates the authority of `membership` in `dir` (refuses to replace one).
pub fn create_authority(dir: &Path, membership: &str) -> Result<AuthorityRecord, CustodyError> {
    if dir.join(AUTHORITY_FILE).exists() {
        return read_authority(dir);
    }
    private_dir(dir)?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ED25519)
        .map_err(|e| CustodyError::Random(e.to_string()))?;
    let mut params = authority_params(membership);
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::minutes(5);
    params.not_after = now + Duration::days(AUTHORITY_VALIDITY_DAYS);
    let certificate = params.self_signed(&key).map_err(|e| malformed(dir, e))?;
    write_private(&dir.join("ca.key"), key.serialize_pem().as_bytes())?;
    write_private(&dir.join("ca.pem"), certificate.pem().as_bytes())?;
    let record = AuthorityRecord {
        membership: membership.to_owned(),
        fingerprint: fingerprint(certificate.der()),
        next_serial: 1,
        crl_number: 0,
        enrolled: Vec::new(),
        revoked: Vec::new(),
    };
    // The record last: an authority without one is not an authority yet.
    write_authority(dir, &record)?;
    Ok(record)
}

fn issuer(dir: &Path, membership: &str) -> Result<Issuer<'static, KeyPair>, CustodyError> {
    let path = dir.join("ca.key");
    let pem = std::fs::read_to_string(&path).map_err(io(&path))?;
    let key = KeyPair::from_pem(&pem).map_err(|e| malformed(&path, e))?;
    Ok(Issuer::new(authority_params(membership), key))
}

/// An Ed25519 public key as rcgen certifies it.
struct Ed25519Public([u8; 32]);

impl PublicKeyData for Ed25519Public {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &rcgen::PKCS_ED25519
    }
}

/// The membership directory inside a host installation.
pub fn host_membership_dir(host_dir: &Path, membership: &str) -> PathBuf {
    host_dir.join("memberships").join(membership)
}

pub fn read_enrollment(
    host_dir: &Path,
    membership: &str,
) -> Result<Option<Enrollment>, CustodyError> {
    let path = host_membership_dir(host_dir, membership).join(ENROLLMENT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text)
            .map(Some)
            .map_err(|e| malformed(&path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    }
}

/// Memberships a host installation holds enrollments for.
pub fn enrolled_memberships(host_dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(host_dir.join("memberships")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(ENROLLMENT_FILE).exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Enrolls the host in `host_dir` as `participant` of the membership whose authority
/// is in `authority_dir`: a certificate for the host's public TLS key, valid
/// `CERTIFICATE_VALID_DAYS_DEFAULT` days.
pub fn enroll(
    authority_dir: &Path,
    host_dir: &Path,
    participant: &str,
) -> Result<Enrollment, CustodyError> {
    enroll_for(
        authority_dir,
        host_dir,
        participant,
        crate::limits::CERTIFICATE_VALID_DAYS_DEFAULT,
    )
}

/// [`enroll`] with a certificate valid `valid_days` days. Enrolling a host that is
/// enrolled already is a renewal: a new certificate (a new serial) for the same
/// participant and key; the installation's history is untouched.
pub fn enroll_for(
    authority_dir: &Path,
    host_dir: &Path,
    participant: &str,
    valid_days: u32,
) -> Result<Enrollment, CustodyError> {
    let mut record = read_authority(authority_dir)?;
    let membership = record.membership.clone();
    if record.revoked.iter().any(|r| r == participant) {
        return Err(malformed(
            authority_dir,
            format!(
                "participant `{participant}` is revoked in `{membership}`; it is never enrolled again"
            ),
        ));
    }
    let manifest = super::manifest(host_dir)?;
    let tls = manifest
        .tls
        .strip_prefix("ed25519:")
        .and_then(unhex)
        .ok_or_else(|| malformed(host_dir, "the custody manifest's TLS key is not ed25519"))?;
    let serial = record.next_serial;
    let now = OffsetDateTime::now_utc();
    let not_after = now + Duration::days(i64::from(valid_days));
    let certificate = certificate(
        authority_dir,
        &membership,
        participant,
        serial,
        &tls,
        now - Duration::minutes(5),
        not_after,
    )?;
    // The serial is spent before the certificate leaves the authority.
    record.next_serial += 1;
    record.enrolled.push(Enrolled {
        participant: participant.to_owned(),
        serial,
    });
    write_authority(authority_dir, &record)?;
    let target = host_membership_dir(host_dir, &membership);
    private_dir(&host_dir.join("memberships"))?;
    private_dir(&target)?;
    let ca = std::fs::read(authority_dir.join("ca.pem")).map_err(io(authority_dir))?;
    write_private(&target.join("ca.pem"), &ca)?;
    write_private(&target.join("participant.pem"), certificate.as_bytes())?;
    if let Ok(crl) = std::fs::read(authority_dir.join(CRL_FILE)) {
        write_private(&target.join(CRL_FILE), &crl)?;
    }
    let enrollment = Enrollment {
        membership,
        participant: participant.to_owned(),
        serial,
        authority: record.fingerprint.clone(),
        tls: manifest.tls,
        not_after: rfc3339(not_after),
    };
    write_private(
        &target.join(ENROLLMENT_FILE),
        toml::to_string(&enrollment)
            .expect("enrollments serialize")
            .as_bytes(),
    )?;
    Ok(enrollment)
}

/// Signs a participant certificate (PEM) for an Ed25519 public key with the authority
/// in `authority_dir`. `enroll` is the way to enroll a host; this is also how a test
/// makes a certificate with a validity of its choosing (an expired one, say).
pub fn certificate(
    authority_dir: &Path,
    membership: &str,
    participant: &str,
    serial: u64,
    tls: &[u8; 32],
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<String, CustodyError> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, participant.to_owned());
    name.push(DnType::OrganizationalUnitName, membership.to_owned());
    params.distinguished_name = name;
    let mut names = vec![participant.to_owned()];
    if dns_label(participant) && dns_label(membership) {
        // The name a client uses to ask for this membership's certificate.
        names.push(format!("{participant}.{membership}.grid"));
    }
    params.subject_alt_names = names
        .into_iter()
        .map(|n| {
            n.try_into()
                .map(SanType::DnsName)
                .map_err(|e| malformed(authority_dir, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    params.subject_alt_names.extend([SanType::URI(
        format!("grid://{membership}/{participant}")
            .try_into()
            .map_err(|e| malformed(authority_dir, e))?,
    )]);
    params.serial_number = Some(SerialNumber::from(serial));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.not_before = not_before;
    params.not_after = not_after;
    let issuer = issuer(authority_dir, membership)?;
    let certificate = params
        .signed_by(&Ed25519Public(*tls), &issuer)
        .map_err(|e| malformed(authority_dir, e))?;
    Ok(certificate.pem())
}

/// Revokes every certificate issued to `participant` and reissues the revocation list.
pub fn revoke(authority_dir: &Path, participant: &str) -> Result<AuthorityRecord, CustodyError> {
    let mut record = read_authority(authority_dir)?;
    if !record.revoked.iter().any(|r| r == participant) {
        record.revoked.push(participant.to_owned());
    }
    record.crl_number += 1;
    let now = OffsetDateTime::now_utc();
    let revoked_certs = record
        .enrolled
        .iter()
        .filter(|e| record.revoked.contains(&e.participant))
        .map(|e| RevokedCertParams {
            serial_number: SerialNumber::from(e.serial),
            revocation_time: now,
            reason_code: Some(RevocationReason::Unspecified),
            invalidity_date: None,
        })
        .collect();
    let crl = CertificateRevocationListParams {
        this_update: now - Duration::minutes(5),
        next_update: now + Duration::days(REVOCATION_LIST_VALIDITY_DAYS),
        crl_number: SerialNumber::from(record.crl_number),
        issuing_distribution_point: None,
        revoked_certs,
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&issuer(authority_dir, &record.membership)?)
    .map_err(|e| malformed(authority_dir, e))?;
    write_private(
        &authority_dir.join(CRL_FILE),
        crl.pem()
            .map_err(|e| malformed(authority_dir, e))?
            .as_bytes(),
    )?;
    write_authority(authority_dir, &record)?;
    Ok(record)
}

/// Whether the host's copy of the revocation list is the authority's current one.
pub fn revocations_current(authority_dir: &Path, host_dir: &Path, membership: &str) -> bool {
    let authority = std::fs::read(authority_dir.join(CRL_FILE)).ok();
    let host = std::fs::read(host_membership_dir(host_dir, membership).join(CRL_FILE)).ok();
    authority.is_none() || authority == host
}

/// Copies the authority's revocation list into a member host's installation.
pub fn distribute_revocations(
    authority_dir: &Path,
    host_dir: &Path,
    membership: &str,
) -> Result<(), CustodyError> {
    let path = authority_dir.join(CRL_FILE);
    let crl = std::fs::read(&path).map_err(io(&path))?;
    let target = host_membership_dir(host_dir, membership);
    private_dir(&target)?;
    write_private(&target.join(CRL_FILE), &crl)
}

/// Whether `name` is one DNS label: 1–63 of `a-z A-Z 0-9 -`, not starting or ending
/// with `-`.
pub fn dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Where a membership the host left keeps its certificate (`DIR/memberships-left/
/// M-SERIAL`): out of `DIR/memberships`, so the transport no longer serves or admits
/// it, yet kept — receipts signed while a member still verify against it.
pub fn left_membership_dir(host_dir: &Path, membership: &str, serial: u64) -> PathBuf {
    host_dir
        .join("memberships-left")
        .join(format!("{membership}-{serial}"))
}

/// Sets the host's enrollment in `membership` aside once it left (docs/memberships.md,
/// "Leaving"): renames `DIR/memberships/M` to [`left_membership_dir`] and syncs both
/// parents. Only the enrollment of `serial` moves (a later one is a new joining);
/// nothing to move is no error.
pub fn set_aside(host_dir: &Path, membership: &str, serial: u64) -> Result<bool, CustodyError> {
    match read_enrollment(host_dir, membership)? {
        Some(e) if e.serial == serial => {}
        _ => return Ok(false),
    }
    let from = host_membership_dir(host_dir, membership);
    let to = left_membership_dir(host_dir, membership, serial);
    let parent = to.parent().expect("a parent");
    crate::store::ensure_private_dir(parent).map_err(|e| CustodyError::Io {
        path: parent.to_owned(),
        source: std::io::Error::other(e.to_string()),
    })?;
    std::fs::rename(&from, &to).map_err(io(&from))?;
    for dir in [parent, &host_dir.join("memberships")] {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
    }
    Ok(true)
}
