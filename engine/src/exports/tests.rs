//! The two signed documents: each verifies with its signer's public keys and with no
//! other, and any change of what they say breaks the signature.

use super::api::{Disclosure, DisclosureTerms, Mapping};
use crate::custody::Signed;

fn custody(name: &str) -> crate::custody::Custody {
    let dir = std::env::temp_dir().join(format!("grid-exports-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    crate::custody::create(&dir).unwrap();
    let custody = crate::custody::verify(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    custody
}

fn terms() -> DisclosureTerms {
    DisclosureTerms {
        export: "meter-to-utility".to_owned(),
        gateway: "gw".to_owned(),
        from: "meter-ops".to_owned(),
        from_membership: "plant-ops".to_owned(),
        to: "meter-utility".to_owned(),
        to_membership: "utility".to_owned(),
        cell: Some("meter.kwh".to_owned()),
        expires: Some("2027-06-30T00:00:00Z".to_owned()),
    }
}

#[test]
fn a_disclosure_verifies_with_its_issuer_only_and_every_term_is_signed() {
    let issuer = custody("issuer");
    let other = custody("other");
    let mut d = Disclosure {
        terms: terms(),
        issuer: "edge-a".to_owned(),
        first: 3,
        generation: 0,
        signature: String::new(),
    };
    (d.generation, d.signature) = issuer.sign_hex(&d.signed_bytes());
    assert!(d.verify(&issuer.manifest()));
    assert!(!d.verify(&other.manifest()), "another host's key");
    let changes: [fn(&mut Disclosure); 7] = [
        |d| d.terms.gateway = "gw2".to_owned(),
        |d| d.terms.to = "elsewhere".to_owned(),
        |d| d.terms.from = "other".to_owned(),
        |d| d.terms.expires = None,
        |d| d.terms.cell = None,
        |d| d.first = 1,
        |d| d.issuer = "edge-b".to_owned(),
    ];
    for change in changes {
        let mut changed = d.clone();
        change(&mut changed);
        assert!(!changed.verify(&issuer.manifest()), "{changed:?}");
    }
}

#[test]
fn a_mapping_binds_both_positions_the_value_and_the_epoch() {
    let gateway = custody("gateway");
    let mut m = Mapping {
        export: "x".to_owned(),
        gateway: "gw".to_owned(),
        from: "a".to_owned(),
        from_position: 4,
        to: "b".to_owned(),
        to_position: 2,
        value: 12.5,
        epoch: 1,
        generation: 0,
        signature: String::new(),
    };
    (m.generation, m.signature) = gateway.sign_hex(&m.signed_bytes());
    assert!(m.verify(&gateway.manifest()));
    let changes: [fn(&mut Mapping); 4] = [
        |m| m.from_position = 5,
        |m| m.to_position = 3,
        |m| m.value = 12.500000000000002,
        |m| m.epoch = 2,
    ];
    for change in changes {
        let mut changed = m.clone();
        change(&mut changed);
        assert!(!changed.verify(&gateway.manifest()), "{changed:?}");
    }
}

#[test]
fn mappings_are_purged_only_past_the_hot_bound() {
    use super::service::excess_mappings;
    use crate::limits::EXPORT_MAPPINGS_HOT_MAX as MAX;
    assert_eq!(excess_mappings(1, 0), 0, "nothing held");
    assert_eq!(excess_mappings(1, MAX), 0, "exactly the bound");
    assert_eq!(excess_mappings(1, MAX + 1), 1);
    assert_eq!(excess_mappings(5, MAX + 10), 6);
    assert_eq!(excess_mappings(10, 3), 0, "held_from past last");
}
