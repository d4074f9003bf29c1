//! The participant a verified certificate names: its `grid://MEMBERSHIP/PARTICIPANT`
//! subject alternative name (a URI), read with a certificate parser.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// `participant in membership`, for logs and wire counters.
pub fn participant_of(der: &[u8]) -> String {
    match identity_of(der) {
        Some((membership, participant)) => format!("{participant} in {membership}"),
        None => "unnamed participant".to_owned(),
    }
}

/// `(membership, participant)` of a participant certificate (already verified by the
/// TLS handshake against a membership's authority).
pub fn identity_of(der: &[u8]) -> Option<(String, String)> {
    let (_, certificate) = X509Certificate::from_der(der).ok()?;
    let names = certificate.subject_alternative_name().ok()??;
    names
        .value
        .general_names
        .iter()
        .find_map(|name| match name {
            GeneralName::URI(uri) => {
                let (membership, participant) = uri.strip_prefix("grid://")?.split_once('/')?;
                Some((membership.to_owned(), participant.to_owned()))
            }
            _ => None,
        })
}

/// The participant a certificate names, if it was issued by `membership`'s authority:
/// every endpoint but the control API acts only for participants certified in the
/// membership its path names.
pub fn certified_in<'a>(
    identity: Option<&'a (String, String)>,
    membership: &str,
) -> Result<&'a str, String> {
    match identity {
        None => Err("no participant certificate".to_owned()),
        Some((certified, peer)) if certified != membership => Err(format!(
            "`{peer}` is certified in `{certified}`, not in `{membership}`"
        )),
        Some((_, peer)) => Ok(peer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(uris: &[&str]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["b.ops.grid".to_owned()]).unwrap();
        params.subject_alt_names.extend(
            uris.iter()
                .map(|u| rcgen::SanType::URI(rcgen::string::Ia5String::try_from(*u).unwrap())),
        );
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_participant_is_read_from_the_grid_uri() {
        assert_eq!(participant_of(&certificate(&["grid://ops/b"])), "b in ops");
        assert_eq!(
            identity_of(&certificate(&[
                "https://example.invalid/",
                "grid://plant/edge-a"
            ])),
            Some(("plant".to_owned(), "edge-a".to_owned()))
        );
        assert_eq!(participant_of(&certificate(&[])), "unnamed participant");
        assert_eq!(
            participant_of(b"no certificate here"),
            "unnamed participant"
        );
    }

    #[test]
    fn only_the_named_membership_certifies() {
        let identity = ("ops".to_owned(), "b".to_owned());
        assert_eq!(certified_in(Some(&identity), "ops"), Ok("b"));
        assert!(certified_in(Some(&identity), "other").is_err());
        assert!(certified_in(None, "ops").is_err());
    }
}
