//! Every signature of a decision's record checked with its signers' public keys, and
//! whether each document names the ones before it — pure: the keys are the caller's
//! (`gridctl inspect decision` reads the installed manifests; the control plane the
//! keys its host's policy installed).

use serde::{Deserialize, Serialize};

use super::api::{DecisionView, ballots_digest, run_digest};
use crate::custody::{Manifest, Signed};

/// One signed document and whether it verifies with its signer's keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verified {
    pub document: String,
    pub signer: String,
    pub verified: bool,
}

/// Every signature of `view`'s record checked with `keys` of its signer (`None`: not
/// known, so not verified), in the record's order — the Open, each ballot, the gate,
/// the apply run's outcome, the applied receipt — and `chain`: every ballot names the
/// Open, the gate the Open and the ballots, the receipt all of them and the outcome.
pub fn verify(
    view: &DecisionView,
    keys: &dyn Fn(&str) -> Option<Manifest>,
) -> (Vec<Verified>, bool) {
    let check = |document: String, signer: &str, ok: &dyn Fn(&Manifest) -> bool| Verified {
        document,
        signer: signer.to_owned(),
        verified: keys(signer).is_some_and(|m| ok(&m)),
    };
    let r = &view.record;
    let mut out = vec![check("open".to_owned(), &view.host, &|m| {
        r.opened.verify(m)
    })];
    let open = r.opened.digest();
    let mut chain = true;
    for b in &r.ballots {
        out.push(check(format!("ballot:{}", b.member), &b.member, &|m| {
            b.verify(m)
        }));
        chain &= b.open == open;
    }
    if let Some(g) = &r.gate {
        out.push(check("gate".to_owned(), &g.operator, &|m| g.verify(m)));
        chain &= g.open == open && g.ballots == ballots_digest(&r.ballots);
    }
    if let Some(run) = r.apply.as_ref().and_then(|a| a.run.as_ref()) {
        out.push(check("outcome".to_owned(), &run.receiver, &|m| {
            run.verify(m)
        }));
    }
    if let Some(a) = &r.applied {
        out.push(check("applied".to_owned(), &view.host, &|m| a.verify(m)));
        let ballots: Vec<String> = r.ballots.iter().map(|b| b.digest()).collect();
        chain &= a.open == open
            && a.ballots == ballots
            && r.gate.as_ref().is_some_and(|g| g.digest() == a.gate)
            && r.apply
                .as_ref()
                .and_then(|x| x.run.as_ref())
                .is_some_and(|run| run_digest(run) == a.run && run.outcome.name() == a.outcome);
    }
    (out, chain)
}
